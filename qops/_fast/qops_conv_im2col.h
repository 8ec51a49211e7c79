/* im2col rows of a channels-last convolution, for the GEMM core (qops_gemm.h).
 *
 * Output pixel p of the N * OD * OH * OW pixels becomes row p of K = KD * KH * KW * C bytes,
 * its window in (kd, kh, kw, channel) order, the order of the weight rows of _gemm_weights
 * (conv.pyx). Taps outside the input hold the input zero point, so (x - xz) is 0 there and
 * the GEMM's exact sum Sum (x - xz)(w - wz) is the conv's (docs/semantics.md §8). A kernel
 * row whose KW taps lie inside the input at unit dilation is one copy of KW * C bytes.
 * Rows are ldr >= K bytes apart, the bytes past K holding the zero point too: with ldr the
 * GEMM's padded depth (qops_gemm_kpad) it reads the rows in place, and those bytes add
 * (xz - xz)(0 - wz) = 0 against the zero-padded weight rows.
 */
#ifndef QOPS_CONV_IM2COL_H
#define QOPS_CONV_IM2COL_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "qops_gemm.h"

typedef struct {
    const uint8_t *x;                  /* input (N, D, H, W, C), contiguous */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t OD, OH, OW;
    ptrdiff_t KD, KH, KW;
    ptrdiff_t sd, sh, sw, pd, ph, pw, dd, dh, dw;
    uint8_t xz;
    uint8_t *rows;                     /* rows from row0 on, ldr bytes apart */
    ptrdiff_t ldr;                     /* >= K */
    ptrdiff_t row0;                    /* the pixel of rows' first row */
} qconv_i2c_args;

/* n bytes, by at most two overlapping fixed-size copies for the short runs of few-channel
 * inputs (a libc call costs more than the copy there). */
static inline void qconv_i2c_copy(uint8_t *d, const uint8_t *s, ptrdiff_t n) {
    if (n >= 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8 && n < 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4 && n < 8) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        memcpy(d, s, (size_t)n);
    }
}

/* Rows [p0, p1). The pixel's (n, od, oh, ow) advance with p (a division per row would cost
 * as much as a few-channel row's copies). */
static void qconv_i2c_fill(const qconv_i2c_args *f, ptrdiff_t p0, ptrdiff_t p1) {
    const ptrdiff_t C = f->C, KW = f->KW, W = f->W;
    const ptrdiff_t K = f->KD * f->KH * KW * C;
    if (p0 >= p1) return;
    ptrdiff_t ow = p0 % f->OW, r = p0 / f->OW;
    ptrdiff_t oh = r % f->OH, od = (r / f->OH) % f->OD, n = r / (f->OH * f->OD);
    for (ptrdiff_t p = p0; p < p1; p++) {
        const ptrdiff_t iw0 = ow * f->sw - f->pw;
        uint8_t *dst = f->rows + (p - f->row0) * f->ldr;
        for (ptrdiff_t k = K; k < f->ldr; k++) dst[k] = f->xz;
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
                    qconv_i2c_copy(dst, src + iw0 * C, KW * C);
                    dst += KW * C;
                    continue;
                }
                for (ptrdiff_t kw = 0; kw < KW; kw++, dst += C) {
                    const ptrdiff_t iw = iw0 + kw * f->dw;
                    if (iw >= 0 && iw < W) qconv_i2c_copy(dst, src + iw * C, C);
                    else memset(dst, f->xz, (size_t)C);
                }
            }
        if (++ow == f->OW) {
            ow = 0;
            if (++oh == f->OH) {
                oh = 0;
                if (++od == f->OD) {
                    od = 0;
                    n++;
                }
            }
        }
    }
}

/* Output pixels [p0, p1), fused: rows filled `block` at a time into buf and multiplied by
 * the GEMM core while they are in cache (written out whole, a large conv's rows would go to
 * memory and be read back once per weight panel). xmax: the largest value of the input and
 * its zero point; o->out: the output's first row; buf: block * ldr bytes, then
 * qops_gemm_rows_scratch(block, ldr). */
static void qconv_i2c_gemm(const qconv_i2c_args *f, ptrdiff_t p0, ptrdiff_t p1,
                           ptrdiff_t block, uint8_t xmax, const qops_gemm_b *B,
                           const qops_gemm_out *o, uint8_t *buf) {
    const size_t esize = o->kind == QOPS_GEMM_U8 ? 1 : 4;
    qconv_i2c_args g = *f;
    g.rows = buf;
    for (ptrdiff_t r0 = p0; r0 < p1; r0 += block) {
        const ptrdiff_t r1 = p1 - r0 < block ? p1 : r0 + block;
        g.row0 = r0;
        qconv_i2c_fill(&g, r0, r1);
        qops_gemm_out ob = *o;
        ob.out = (char *)o->out + (size_t)(r0 * o->ldc) * esize;
        qops_gemm_rows(buf, f->ldr, r1 - r0, f->xz, xmax, B, &ob, buf + block * f->ldr);
    }
}

#endif
