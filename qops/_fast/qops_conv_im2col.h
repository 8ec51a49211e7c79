/* im2col rows of a channels-last convolution, for the GEMM core (qops_gemm.h).
 *
 * Output pixel p of the N * OD * OH * OW pixels becomes row p of K = KD * KH * KW * C bytes,
 * its window in (kd, kh, kw, channel) order, the order of the weight rows of _gemm_weights
 * (conv.pyx). Taps outside the input hold the input zero point, so (x - xz) is 0 there and
 * the GEMM's exact sum Sum (x - xz)(w - wz) is the conv's (docs/semantics.md §8). A kernel
 * row whose KW taps lie inside the input at unit dilation is one copy of KW * C bytes.
 */
#ifndef QOPS_CONV_IM2COL_H
#define QOPS_CONV_IM2COL_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    const uint8_t *x;                  /* input (N, D, H, W, C), contiguous */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t OD, OH, OW;
    ptrdiff_t KD, KH, KW;
    ptrdiff_t sd, sh, sw, pd, ph, pw, dd, dh, dw;
    uint8_t xz;
    uint8_t *rows;                     /* (N * OD * OH * OW, K) */
} qconv_i2c_args;

/* Rows [p0, p1). */
static void qconv_i2c_fill(const qconv_i2c_args *f, ptrdiff_t p0, ptrdiff_t p1) {
    const ptrdiff_t C = f->C, KW = f->KW, W = f->W;
    const ptrdiff_t K = f->KD * f->KH * KW * C;
    for (ptrdiff_t p = p0; p < p1; p++) {
        const ptrdiff_t ow = p % f->OW, r = p / f->OW;
        const ptrdiff_t oh = r % f->OH, od = (r / f->OH) % f->OD, n = r / (f->OH * f->OD);
        const ptrdiff_t iw0 = ow * f->sw - f->pw;
        uint8_t *dst = f->rows + p * K;
        for (ptrdiff_t kd = 0; kd < f->KD; kd++)
            for (ptrdiff_t kh = 0; kh < f->KH; kh++) {
                const ptrdiff_t id = od * f->sd - f->pd + kd * f->dd;
                const ptrdiff_t ih = oh * f->sh - f->ph + kh * f->dh;
                if (id < 0 || id >= f->D || ih < 0 || ih >= f->H) {
                    memset(dst, f->xz, (size_t)(KW * C));
                    dst += KW * C;
                    continue;
                }
                const uint8_t *src = f->x + ((n * f->D + id) * f->H + ih) * W * C;
                if (f->dw == 1 && iw0 >= 0 && iw0 + KW <= W) {
                    memcpy(dst, src + iw0 * C, (size_t)(KW * C));
                    dst += KW * C;
                    continue;
                }
                for (ptrdiff_t kw = 0; kw < KW; kw++, dst += C) {
                    const ptrdiff_t iw = iw0 + kw * f->dw;
                    if (iw >= 0 && iw < W) memcpy(dst, src + iw * C, (size_t)C);
                    else memset(dst, f->xz, (size_t)C);
                }
            }
    }
}

#endif
