/* Planes route, AMX: tdpbsud on 16x16 output tiles (weights the signed operand), 32 pixels x
 * 32 output channels per step; window sums and requantization by the AVX-512 VNNI helpers.
 * Compiled where QCONV_AMX is defined; run only where qconv_amx_available() (qops_conv.h). */
#ifndef QOPS_CONV_PLANES_AMX_H
#define QOPS_CONV_PLANES_AMX_H
#include "qops_conv_planes_vnni.h"

#ifdef QCONV_AMX
/* Tiles: C 0-3 (oc block b x pixel tile p -> 2b+p), A 4-5 (oc blocks), B 6-7 (pixel tiles). */
__attribute__((target("amx-tile,amx-int8"))) static void
qconv_grouped_amx(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh0, ptrdiff_t oh1,
                  ptrdiff_t ow0, ptrdiff_t ow1) {
    qops_tilecfg cfg;
    qops_tilecfg_init(&cfg);
    for (int i = 0; i < 4; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    for (int i = 4; i < 6; i++) { cfg.rows[i] = 16; cfg.colsb[i] = (uint16_t)a->Kc; }
    for (int i = 6; i < 8; i++) { cfg.rows[i] = (uint8_t)(a->Kc / 4); cfg.colsb[i] = 64; }
    qops_tilecfg_load(&cfg);
    int32_t buf[16 * 16] __attribute__((aligned(64)));
    const __m512 lo = _mm512_set1_ps((float)(a->lo - a->ozp)), hi = _mm512_set1_ps((float)(255 - a->ozp));
    const __m512i ozp = _mm512_set1_epi32(a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    const ptrdiff_t wblk = (ptrdiff_t)a->ntaps * a->nch * 16 * a->Kc;   /* bytes per oc block */
    const ptrdiff_t pstride = a->c4_stride;
    /* output channel blocks outermost: one block pair's weights stay in L1 over several rows */
    for (int g = 0; g < a->G; g++)
    for (int ob = 0; ob < a->nob; ob += 2)
    for (ptrdiff_t oh = oh0; oh < oh1; oh++)
    for (ptrdiff_t ow = ow0; ow < ow1; ow += 32) {
        const int nv = (int)(ow1 - ow < 32 ? ow1 - ow : 32);
        const ptrdiff_t pix = qconv_pix_offset(a, od, oh, ow);
        const uint8_t *gbase = ximg + (ptrdiff_t)g * a->group_bytes + pix;
        __m512i S[4];
        if (a->gany[g]) qconv_window_sums(a, gbase, S);
        const int two = ob + 1 < a->nob;
        const int8_t *w0 = a->wa + ((ptrdiff_t)g * a->nob + ob) * wblk;
        const int8_t *w1 = w0 + wblk;
        _tile_zero(0); _tile_zero(1);
        if (two) { _tile_zero(2); _tile_zero(3); }
        for (int t = 0; t < a->ntaps; t++) {
            const uint8_t *xt = gbase + a->toff[t];
            for (int k = 0; k < a->nch; k++) {
                const uint8_t *xk = xt + (ptrdiff_t)k * 16 * pstride;
                /* each load just before its first product (tiles are not
                 * renamed): measured faster than three loads ahead of the products */
                _tile_loadd(4, w0, a->Kc);
                _tile_loadd(6, xk, pstride);
                _tile_dpbsud(0, 4, 6);
                _tile_loadd(7, xk + 64, pstride);
                _tile_dpbsud(1, 4, 7);
                if (two) {
                    _tile_loadd(5, w1, a->Kc);
                    _tile_dpbsud(2, 5, 6);
                    _tile_dpbsud(3, 5, 7);
                    w1 += 16 * a->Kc;
                }
                w0 += 16 * a->Kc;
            }
        }
        for (int b = 0; b < 1 + two; b++) {
            for (int p = 0; p < 2; p++) {
                if (16 * p >= nv) break;
                qops_tile_store_acc(2 * b + p, buf);
                int rows = a->Og - (ob + b) * 16;
                if (rows > 16) rows = 16;
                for (int m = 0; m < rows; m++) {
                    ptrdiff_t o = (ptrdiff_t)g * a->Og + (ob + b) * 16 + m;
                    __m512i s = _mm512_add_epi32(_mm512_load_si512((const void *)(buf + 16 * m)),
                        _mm512_set1_epi32((int32_t)((uint32_t)a->xz * (uint32_t)a->kzw[o])));
                    if (a->gany[g])
                        s = _mm512_sub_epi32(s, _mm512_mullo_epi32(_mm512_set1_epi32(a->wz[o]), S[p]));
                    qconv_store16(s, _mm512_set1_ps(a->bterm[o]), _mm512_set1_ps(a->mult[o]), lo, hi,
                                  ozp, qconv_out_row(a, n, o, od, oh) + ow + 16 * p, nv - 16 * p);
                }
            }
        }
    }
    _tile_release();
}
#endif /* QCONV_AMX */

#endif
