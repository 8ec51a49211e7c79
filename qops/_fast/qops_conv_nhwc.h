/* Ungrouped convolution of channels-last input on AMX tiles, writing channels-last output.
 *
 * The input is copied once into a padded NDHWC buffer whose pixels hold Cp = C rounded up to
 * 64 bytes (border pixels hold the input zero point; the extra channels meet zero weights).
 * Then a tile of 16 output pixels x 64 input channels is 16 whole, aligned cache lines at
 * a stride of sw pixels, for every tap: the input is the A operand (unsigned) and the
 * weights the B operand (signed, packed as [oc block][tap][64-channel chunk][16 quads][16 oc]
 * [4]), so a C tile holds 16 pixels x 16 output channels, the row of one output pixel. Tiles:
 * C 0-3 (oc block b x pixel tile p -> 2b + p), A 4-5 (pixel tiles), B 6-7 (oc blocks).
 * Requantization by qconv_store16, 16 output channels a vector.
 */
#ifndef QOPS_CONV_NHWC_H
#define QOPS_CONV_NHWC_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "qops_common.h"
#include "qops_conv.h"            /* qconv_store16, QCONV_AMX */

typedef struct {
    const uint8_t *x;                  /* input NDHWC, contiguous */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t pd, ph, pw;
    ptrdiff_t Dp, Hp, Wp, Cp;
    uint8_t xz;
    uint8_t *xp;                       /* padded input (N, Dp, Hp, Wp, Cp) */
} qconv_nhwc_fill_args;

/* Padded rows [r0, r1) of the N * Dp * Hp rows of the padded buffer. */
static void qconv_nhwc_fill(const qconv_nhwc_fill_args *f, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t rowb = f->Wp * f->Cp;
    for (ptrdiff_t r = r0; r < r1; r++) {
        const ptrdiff_t hp = r % f->Hp, dp = (r / f->Hp) % f->Dp, n = r / (f->Hp * f->Dp);
        uint8_t *dst = f->xp + r * rowb;
        const ptrdiff_t h = hp - f->ph, d = dp - f->pd;
        if (h < 0 || h >= f->H || d < 0 || d >= f->D) {
            memset(dst, f->xz, (size_t)rowb);
            continue;
        }
        const uint8_t *src = f->x + ((n * f->D + d) * f->H + h) * f->W * f->C;
        memset(dst, f->xz, (size_t)(f->pw * f->Cp));
        uint8_t *p = dst + f->pw * f->Cp;
        if (f->Cp == f->C) {
            memcpy(p, src, (size_t)(f->W * f->C));
        } else {
            for (ptrdiff_t w = 0; w < f->W; w++) {
                memcpy(p + w * f->Cp, src + w * f->C, (size_t)f->C);
                memset(p + w * f->Cp + f->C, f->xz, (size_t)(f->Cp - f->C));
            }
        }
        memset(p + f->W * f->Cp, f->xz, (size_t)((f->Wp - f->pw - f->W) * f->Cp));
    }
}

typedef struct {
    const uint8_t *xp;                 /* padded input (N, Dp, Hp, Wp, Cp) */
    ptrdiff_t Dp, Hp, Wp, Cp;
    ptrdiff_t OD, OH, OW, O;
    ptrdiff_t sd, sh, sw;
    int ntaps, nch, nob;
    const ptrdiff_t *toff;             /* byte offset of each tap in the padded buffer */
    const int8_t *wb;                  /* [nob][ntaps][nch][16][16][4] */
    const int32_t *kzw;                /* [O] */
    const float *bterm, *mult;         /* [O] */
    int32_t xz, ozp, lo;
    uint8_t *out;                      /* (N, OD, OH, OW, O) */
} qconv_nhwc_args;

#ifdef QCONV_AMX
/* Output rows [r0, r1) of the N * OD * OH rows. */
__attribute__((target("amx-tile,amx-int8"))) static void
qconv_nhwc_amx(const qconv_nhwc_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    qops_tilecfg cfg;
    qops_tilecfg_init(&cfg);
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    qops_tilecfg_load(&cfg);
    int32_t buf[16 * 16] __attribute__((aligned(64)));
    const __m512 lo = _mm512_set1_ps((float)(a->lo - a->ozp)), hi = _mm512_set1_ps((float)(255 - a->ozp));
    const __m512i ozp = _mm512_set1_epi32(a->ozp);
    const ptrdiff_t pstride = a->sw * a->Cp;           /* bytes between a tile's pixel rows */
    const ptrdiff_t wblk = (ptrdiff_t)a->ntaps * a->nch * 1024;
    const int ntaps = a->ntaps, nch = a->nch;
    for (ptrdiff_t r = r0; r < r1; r++) {
        const ptrdiff_t oh = r % a->OH, od = (r / a->OH) % a->OD, n = r / (a->OH * a->OD);
        const uint8_t *xrow = a->xp + (((n * a->Dp + od * a->sd) * a->Hp + oh * a->sh) * a->Wp) * a->Cp;
        uint8_t *orow = a->out + r * a->OW * a->O;
        for (int ob = 0; ob < a->nob; ob += 2) {
            const int two = ob + 1 < a->nob;
            for (ptrdiff_t ow = 0; ow < a->OW; ow += 32) {
                const int nv = (int)(a->OW - ow < 32 ? a->OW - ow : 32);
                const uint8_t *xb = xrow + ow * pstride;
                const int8_t *w0 = a->wb + ob * wblk, *w1 = w0 + wblk;
                _tile_zero(0); _tile_zero(1);
                if (two) { _tile_zero(2); _tile_zero(3); }
                for (int t = 0; t < ntaps; t++) {
                    const uint8_t *xt = xb + a->toff[t];
                    for (int k = 0; k < nch; k++, w0 += 1024, w1 += 1024) {
                        _tile_loadd(6, w0, 64);
                        _tile_loadd(4, xt + 64 * k, pstride);
                        _tile_dpbusd(0, 4, 6);
                        _tile_loadd(5, xt + 64 * k + 16 * pstride, pstride);
                        _tile_dpbusd(1, 5, 6);
                        if (two) {
                            _tile_loadd(7, w1, 64);
                            _tile_dpbusd(2, 4, 7);
                            _tile_dpbusd(3, 5, 7);
                        }
                    }
                }
                for (int b = 0; b < 1 + two; b++) {
                    const ptrdiff_t oc = (ptrdiff_t)(ob + b) * 16;
                    const int noc = (int)(a->O - oc < 16 ? a->O - oc : 16);
                    const __mmask16 m = (__mmask16)((1u << noc) - 1);
                    const __m512i corr = _mm512_mullo_epi32(_mm512_set1_epi32(a->xz),
                                                            _mm512_maskz_loadu_epi32(m, a->kzw + oc));
                    const __m512 bt = _mm512_maskz_loadu_ps(m, a->bterm + oc);
                    const __m512 mu = _mm512_maskz_loadu_ps(m, a->mult + oc);
                    for (int p = 0; p < 2; p++) {
                        if (16 * p >= nv) break;
                        qops_tile_store_acc(2 * b + p, buf);
                        const int rows = nv - 16 * p < 16 ? nv - 16 * p : 16;
                        for (int i = 0; i < rows; i++)      /* one pixel, noc channels */
                            qconv_store16(_mm512_add_epi32(_mm512_load_si512((const void *)(buf + 16 * i)), corr),
                                          bt, mu, lo, hi, ozp, orow + (ow + 16 * p + i) * a->O + oc, noc);
                    }
                }
            }
        }
    }
    _tile_release();
}
#else
static void qconv_nhwc_amx(const qconv_nhwc_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    (void)a; (void)r0; (void)r1;       /* never called: conv_cl runs it only in AMX mode */
}
#endif

#endif
