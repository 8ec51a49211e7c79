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

/* Runs per window the inside path takes (a 7x7 kernel has 7; 3-D kernels of up to 4x16). */
#define QCONV_I2C_RUNS 64

/* The row of a pixel whose whole window lies inside the input, at unit dilation along W:
 * `runs` runs of L = KW * C bytes, run r from src + off[r]. Every run but the last is one
 * `move`-byte copy (16 or 32, at most 2 L): the bytes it writes past its run are the next
 * run's, which overwrites them, so nothing past the row is written. The reads past a run
 * stay inside the input too: a move reads at most 2 L bytes from a run's start, and the next
 * run starts at least W * C >= L bytes after it (the window fits in the input), so they end
 * before the last run does. The last run is copied exactly. Few-channel stems (7x7x3: runs
 * of 21 bytes) fill a row in seven moves this way. */
static inline void qconv_i2c_inside(uint8_t *dst, const uint8_t *src, const ptrdiff_t *off,
                                    ptrdiff_t runs, ptrdiff_t L, ptrdiff_t move) {
    ptrdiff_t r = 0;
    if (move == 32)
        for (; r + 1 < runs; r++) memcpy(dst + r * L, src + off[r], 32);
    else if (move == 16)
        for (; r + 1 < runs; r++) memcpy(dst + r * L, src + off[r], 16);
    for (; r < runs; r++) qops_copy_short(dst + r * L, src + off[r], L);
}

/* Output pixel p as (n, od, oh, ow). */
static inline void qconv_i2c_pixel(ptrdiff_t p, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,
                                   ptrdiff_t *n, ptrdiff_t *od, ptrdiff_t *oh, ptrdiff_t *ow) {
    const ptrdiff_t r = p / OW;
    *ow = p % OW;
    *oh = r % OH;
    *od = (r / OH) % OD;
    *n = r / (OH * OD);
}

/* (n, od, oh, ow) moved on to the next output pixel. */
static inline void qconv_i2c_next(ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW, ptrdiff_t *n,
                                  ptrdiff_t *od, ptrdiff_t *oh, ptrdiff_t *ow) {
    if (++*ow < OW) return;
    *ow = 0;
    if (++*oh < OH) return;
    *oh = 0;
    if (++*od < OD) return;
    *od = 0;
    ++*n;
}

/* Rows [p0, p1). The pixel's (n, od, oh, ow) advance with p (a division per row would cost
 * as much as a few-channel row's copies). */
static void qconv_i2c_fill(const qconv_i2c_args *f, ptrdiff_t p0, ptrdiff_t p1) {
    const ptrdiff_t C = f->C, KW = f->KW, W = f->W;
    const ptrdiff_t K = f->KD * f->KH * KW * C;
    if (p0 >= p1) return;
    /* the inside path's runs: offsets from the window's first byte, and the move that copies
     * each (0: exact copies; none where the window has more runs than QCONV_I2C_RUNS) */
    const ptrdiff_t L = KW * C, runs = f->KD * f->KH;
    const ptrdiff_t move = L >= 8 && L <= 16 ? 16 : (L > 16 && L <= 32 ? 32 : 0);
    ptrdiff_t off[QCONV_I2C_RUNS];
    const int inside_ok = f->dw == 1 && runs <= QCONV_I2C_RUNS;
    for (ptrdiff_t r = 0; inside_ok && r < runs; r++)
        off[r] = ((r / f->KH) * f->dd * f->H + (r % f->KH) * f->dh) * W * C;
    ptrdiff_t n, od, oh, ow;
    qconv_i2c_pixel(p0, f->OD, f->OH, f->OW, &n, &od, &oh, &ow);
    for (ptrdiff_t p = p0; p < p1; p++) {
        const ptrdiff_t iw0 = ow * f->sw - f->pw;
        uint8_t *dst = f->rows + (p - f->row0) * f->ldr;
        for (ptrdiff_t k = K; k < f->ldr; k++) dst[k] = f->xz;
        const ptrdiff_t id0 = od * f->sd - f->pd, ih0 = oh * f->sh - f->ph;
        if (inside_ok && iw0 >= 0 && iw0 + KW <= W && id0 >= 0 &&
            id0 + (f->KD - 1) * f->dd < f->D && ih0 >= 0 && ih0 + (f->KH - 1) * f->dh < f->H) {
            qconv_i2c_inside(dst, f->x + (((n * f->D + id0) * f->H + ih0) * W + iw0) * C,
                             off, runs, L, move);
        } else {
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
                        qops_copy_short(dst, src + iw0 * C, KW * C);
                        dst += KW * C;
                        continue;
                    }
                    for (ptrdiff_t kw = 0; kw < KW; kw++, dst += C) {
                        const ptrdiff_t iw = iw0 + kw * f->dw;
                        if (iw >= 0 && iw < W) qops_copy_short(dst, src + iw * C, C);
                        else memset(dst, f->xz, (size_t)C);
                    }
                }
        }
        qconv_i2c_next(f->OD, f->OH, f->OW, &n, &od, &oh, &ow);
    }
}

/* Output pixels [p0, p1), output channels of the GEMM's weight panels [q0, q1) (all: 0 and
 * qops_gemm_npanels), fused: rows filled `block` at a time into buf and multiplied by the
 * GEMM core while they are in cache (written out whole, a large conv's rows would go to
 * memory and be read back once per weight panel). xmax: the largest value of the input and
 * its zero point; o->out: the output's first row; buf: block * ldr bytes, then
 * qops_gemm_rows_scratch(block, ldr). */
static void qconv_i2c_gemm(const qconv_i2c_args *f, ptrdiff_t p0, ptrdiff_t p1,
                           ptrdiff_t block, uint8_t xmax, const qops_gemm_b *B,
                           const qops_gemm_out *o, uint8_t *buf, ptrdiff_t q0, ptrdiff_t q1) {
    const size_t esize = o->kind == QOPS_GEMM_U8 ? 1 : 4;
    qconv_i2c_args g = *f;
    g.rows = buf;
    for (ptrdiff_t r0 = p0; r0 < p1; r0 += block) {
        const ptrdiff_t r1 = p1 - r0 < block ? p1 : r0 + block;
        g.row0 = r0;
        qconv_i2c_fill(&g, r0, r1);
        qops_gemm_out ob = *o;
        ob.out = (char *)o->out + (size_t)(r0 * o->ldc) * esize;
        qops_gemm_rows_panels(buf, f->ldr, r1 - r0, f->xz, xmax, B, q0, q1, &ob,
                              buf + block * f->ldr);
    }
}

/* ---- the same GEMM reading each window in place (AVX-512 VNNI): conv_cl.gemm_taps ---- */

typedef struct {
    const uint8_t *xp;                 /* input (N, Dp, Hp, Wp, C), padded or as it lies */
    ptrdiff_t Dp, Hp, Wp, C;
    ptrdiff_t OD, OH, OW;
    ptrdiff_t sd, sh, sw;
    const ptrdiff_t *toff;             /* tap t at toff[t] bytes from a window's first */
    int ntaps;
    ptrdiff_t Kt;                      /* bytes a tap reads: C, or a kernel row's KW C
                                        * rounded up to 4 (few channels, "row taps") */
    uint8_t xz;
} qconv_taps_args;

/* rows a call of the GEMM takes (its row pointers on the stack; their windows stay in L2) */
#define QCONV_TAPS_ROWS 96

/* Output pixels [p0, p1), weight panels [q0, q1) of B (symmetric weights): the windows of
 * QCONV_TAPS_ROWS pixels at a time by pointer, multiplied in place by qops_gemm_taps. */
static void qconv_taps_gemm(const qconv_taps_args *t, ptrdiff_t p0, ptrdiff_t p1,
                            const qops_gemm_b *B, const qops_gemm_out *o, ptrdiff_t q0,
                            ptrdiff_t q1) {
    const uint8_t *rp[QCONV_TAPS_ROWS];
    ptrdiff_t n, od, oh, ow;
    qconv_i2c_pixel(p0, t->OD, t->OH, t->OW, &n, &od, &oh, &ow);
    /* windows step sw pixels along an output row; the row's first from (n, od, oh) (a
     * pointer a pixel costs as much as a few-channel window's products otherwise) */
    const ptrdiff_t step = t->sw * t->C;
    const uint8_t *row = t->xp + ((n * t->Dp + od * t->sd) * t->Hp + oh * t->sh) * t->Wp * t->C;
    for (ptrdiff_t r0 = p0; r0 < p1; r0 += QCONV_TAPS_ROWS) {
        const ptrdiff_t m = p1 - r0 < QCONV_TAPS_ROWS ? p1 - r0 : QCONV_TAPS_ROWS;
        for (ptrdiff_t i = 0; i < m; i++) {
            rp[i] = row + ow * step;
            if (++ow == t->OW) {
                ow = 0;
                qconv_i2c_next(t->OD, t->OH, 1, &n, &od, &oh, &ow);
                ow = 0;
                row = t->xp + ((n * t->Dp + od * t->sd) * t->Hp + oh * t->sh) * t->Wp * t->C;
            }
        }
        qops_gemm_out ob = *o;
        ob.out = (uint8_t *)o->out + r0 * o->ldc;
        qops_gemm_taps(rp, m, t->toff, t->ntaps, t->Kt, t->xz, B, q0, q1, &ob);
    }
}

#endif
