/* Planes route, portable C: grouped and depthwise kernels every build has (the only ones in
 * a baseline build; conv.pyx's _set_mode("portable") reaches them in the others). */
#ifndef QOPS_CONV_PLANES_C_H
#define QOPS_CONV_PLANES_C_H
#include "qops_conv_planes.h"

/* Portable kernels: the same arithmetic, 16 pixels at a time, loops GCC can vectorize. */
static void qconv_grouped_portable(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                                   ptrdiff_t ow0, ptrdiff_t ow1) {
    const float lo = (float)(a->lo - a->ozp), hi = (float)(255 - a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    for (ptrdiff_t ow = ow0; ow < ow1; ow += 16) {
        int nv = (int)(ow1 - ow < 16 ? ow1 - ow : 16);
        ptrdiff_t pix = qconv_pix_offset(a, od, oh, ow);
        for (int g = 0; g < a->G; g++) {
            const uint8_t *gbase = ximg + (ptrdiff_t)g * a->group_bytes + pix;
            uint32_t S[16] = {0};
            if (a->gany[g])
                for (int t = 0; t < a->ntaps; t++)
                    for (int c4 = 0; c4 < a->C4; c4++) {
                        const uint8_t *x = gbase + c4 * a->c4_stride + a->toff[t];
                        for (int p = 0; p < 16; p++) S[p] += (uint32_t)x[4 * p] + x[4 * p + 1] + x[4 * p + 2] + x[4 * p + 3];
                    }
            for (int oo = 0; oo < a->Og; oo++) {
                ptrdiff_t o = (ptrdiff_t)g * a->Og + oo;
                uint32_t acc[16] = {0};
                const int32_t *w = a->wv + o * a->ntaps * a->C4;
                for (int t = 0; t < a->ntaps; t++)
                    for (int c4 = 0; c4 < a->C4; c4++) {
                        const uint8_t *x = gbase + c4 * a->c4_stride + a->toff[t];
                        int32_t w4 = w[t * a->C4 + c4];
                        int32_t w0 = (int8_t)(w4 & 0xff), w1 = (int8_t)((w4 >> 8) & 0xff);
                        int32_t w2 = (int8_t)((w4 >> 16) & 0xff), w3 = (int8_t)((w4 >> 24) & 0xff);
                        for (int p = 0; p < 16; p++)
                            acc[p] += (uint32_t)(x[4 * p] * w0 + x[4 * p + 1] * w1 + x[4 * p + 2] * w2 + x[4 * p + 3] * w3);
                    }
                uint32_t corr = (uint32_t)a->xz * (uint32_t)a->kzw[o];
                uint8_t *dst = qconv_out_row(a, n, o, od, oh) + ow;
                for (int p = 0; p < nv; p++)
                    dst[p] = qconv_requant1(acc[p] + corr - (uint32_t)a->wz[o] * S[p], a->bterm[o],
                                            a->mult[o], a->ozp, lo, hi);
            }
        }
    }
}

static void qconv_dw_portable(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                              ptrdiff_t ow0, ptrdiff_t ow1) {
    const float lo = (float)(a->lo - a->ozp), hi = (float)(255 - a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    for (ptrdiff_t c = 0; c < a->O; c++) {
        const uint8_t *plane = ximg + c * a->group_bytes;
        const int32_t *w = a->wd + c * a->ntaps;
        uint32_t init = (uint32_t)(-a->xz) * (uint32_t)a->wdsum[c];
        for (ptrdiff_t ow = ow0; ow < ow1; ow += 16) {
            int nv = (int)(ow1 - ow < 16 ? ow1 - ow : 16);
            const uint8_t *base = plane + qconv_pix_offset(a, od, oh, ow);
            uint32_t acc[16];
            for (int p = 0; p < 16; p++) acc[p] = init;
            for (int t = 0; t < a->ntaps; t++) {
                const uint8_t *x = base + a->toff[t];
                int32_t wt = w[t];
                for (int p = 0; p < 16; p++) acc[p] += (uint32_t)((int32_t)x[p] * wt);
            }
            uint8_t *dst = qconv_out_row(a, n, c, od, oh) + ow;
            for (int p = 0; p < nv; p++)
                dst[p] = qconv_requant1(acc[p], a->bterm[c], a->mult[c], a->ozp, lo, hi);
        }
    }
}

#endif
