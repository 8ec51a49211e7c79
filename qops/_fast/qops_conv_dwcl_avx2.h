/* Depthwise convolution of channels-last input on AVX2, 32 channels a block, exact.
 *
 * Taps go two at a time (t0, t1): the 32 channel bytes of each tap's pixel are interleaved by
 * a byte unpack and widened by unpacks with zero into int16 pairs (x[t0], x[t1]) per channel,
 * which vpmaddwd multiplies by the pair (w[t0] - wz, w[t1] - wz) into int32. Each product is
 * at most 255 * 255 in size, so no partial sum saturates (no vpmaddubsw anywhere). With wz
 * taken out of the weights the zero points leave one start value per channel,
 *     acc = Sum x (w - wz) - xz Sum (w - wz),
 * the integer of docs/semantics.md §8, for symmetric and asymmetric weights alike.
 *
 * The unpacks leave dword j of accumulator k holding channel 16 (j / 4) + 4k + j % 4 of the
 * block; the weight pairs and per-channel constants are laid out in that order once, and the
 * saturating packs of the requantized results put the channels back in order. C >= 32: the
 * last block starts at C - 32 and overlaps the one before (those channels are computed twice
 * and stored twice, the same bytes by the same thread), so every load and store is 32 whole
 * bytes inside the tensors. Taps outside the input read a row of the input zero point.
 * Requantization by qconv_requant8 (docs/semantics.md §8, as every AVX2 conv kernel).
 */
#ifndef QOPS_CONV_DWCL_AVX2_H
#define QOPS_CONV_DWCL_AVX2_H
#include <stdint.h>
#include <stddef.h>
#include "qops_conv.h"            /* qconv_requant8, QCONV_AVX2 */

typedef struct {
    const uint8_t *x;                  /* input (N, D, H, W, C), contiguous, C >= 32 */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t OD, OH, OW;
    ptrdiff_t KD, KH, KW;
    ptrdiff_t sd, sh, sw, pd, ph, pw, dd, dh, dw;
    const int32_t *wp;                 /* [NB][NP][4][8] int16 pairs (w[t0] - wz, w[t1] - wz) */
    const int32_t *cst;                /* [NB][3][32]: start value, bterm, mult (as float bits) */
    const uint8_t *zrow;               /* W * C bytes of the input zero point */
    int32_t ozp, lo;
    uint8_t *out;                      /* (N, OD, OH, OW, C) */
} qconv_dwcl2_args;

#define QCONV_DWCL2_MAX_TAPS 64           /* taps KD * KH * KW (pointers on the stack) */

/* First channel of block b: blocks of 32, the last one ending at C. */
static inline ptrdiff_t qconv_dwcl2_c0(ptrdiff_t b, ptrdiff_t C) {
    return 32 * b + 32 <= C ? 32 * b : C - 32;
}

/* The channel of dword j of accumulator k, relative to the block's first channel. */
static inline ptrdiff_t qconv_dwcl2_lane(ptrdiff_t k, ptrdiff_t j) {
    return 16 * (j / 4) + 4 * k + j % 4;
}

/* The per-channel constants of every block (cst: [NB][3][32] int32), from Sum (w - wz),
 * bterm and mult per channel. */
static void qconv_dwcl2_consts(const qconv_dwcl2_args *a, const int32_t *wdsum,
                               const float *bterm, const float *mult, int32_t xz, int32_t *cst) {
    const ptrdiff_t NB = (a->C + 31) / 32;
    for (ptrdiff_t b = 0; b < NB; b++) {
        int32_t *init = cst + 96 * b;
        float *bt = (float *)(init + 32), *mu = (float *)(init + 64);
        for (ptrdiff_t k = 0; k < 4; k++)
            for (ptrdiff_t j = 0; j < 8; j++) {
                const ptrdiff_t ch = qconv_dwcl2_c0(b, a->C) + qconv_dwcl2_lane(k, j);
                init[8 * k + j] = (int32_t)(0u - (uint32_t)xz * (uint32_t)wdsum[ch]);
                bt[8 * k + j] = bterm[ch];
                mu[8 * k + j] = mult[ch];
            }
    }
}

#ifdef QCONV_AVX2
static int qconv_dwcl2_available(void) { return 1; }

/* acc[k] += the taps xa, xb of 32 channels, paired, times weight vector k of w. */
static inline __attribute__((always_inline)) void
qconv_dwcl2_madd(__m256i acc[4], __m256i xa, __m256i xb, const int32_t *w) {
    const __m256i z = _mm256_setzero_si256();
    const __m256i lo = _mm256_unpacklo_epi8(xa, xb), hi = _mm256_unpackhi_epi8(xa, xb);
    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, z),
                                                        _mm256_loadu_si256((const __m256i *)w)));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, z),
                                                        _mm256_loadu_si256((const __m256i *)(w + 8))));
    acc[2] = _mm256_add_epi32(acc[2], _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, z),
                                                        _mm256_loadu_si256((const __m256i *)(w + 16))));
    acc[3] = _mm256_add_epi32(acc[3], _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, z),
                                                        _mm256_loadu_si256((const __m256i *)(w + 24))));
}

/* Requantize one block's four accumulators and store its 32 bytes (the packs restore the
 * channel order; values lie in [0, 255], so they saturate nothing). */
static inline __attribute__((always_inline)) void
qconv_dwcl2_store(const __m256i acc[4], const int32_t *c, __m256 lo, __m256 hi, __m256i ozp,
                  uint8_t *o) {
    const float *bt = (const float *)(c + 32), *mu = (const float *)(c + 64);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = qconv_requant8(acc[k], _mm256_loadu_ps(bt + 8 * k), _mm256_loadu_ps(mu + 8 * k),
                              lo, hi, ozp);
    _mm256_storeu_si256((__m256i *)o, _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]),
                                                          _mm256_packs_epi32(q[2], q[3])));
}

/* P output pixels (all their taps inside the input) of every block: tap t of pixel p at
 * tp[t] + p * pstep; outputs at o + p * C. Several pixels share each weight load. */
static inline __attribute__((always_inline)) void
qconv_dwcl2_inner(const qconv_dwcl2_args *a, const uint8_t *const *tp, ptrdiff_t pstep,
                  const int NT, const int P, __m256 lo, __m256 hi, __m256i ozp, uint8_t *o) {
    const ptrdiff_t C = a->C, NB = (C + 31) / 32, NP = (NT + 1) / 2;
    for (ptrdiff_t b = 0; b < NB; b++) {
        const ptrdiff_t c0 = qconv_dwcl2_c0(b, C);
        const int32_t *w = a->wp + b * NP * 32, *c = a->cst + 96 * b;
        __m256i acc[4][4];
        for (int k = 0; k < 4; k++) {
            const __m256i i0 = _mm256_loadu_si256((const __m256i *)(c + 8 * k));
            for (int p = 0; p < P; p++) acc[p][k] = i0;
        }
        for (int t = 0; t < NT; t += 2, w += 32)
            for (int p = 0; p < P; p++) {
                const __m256i xa = _mm256_loadu_si256((const __m256i *)(tp[t] + p * pstep + c0));
                /* an odd last tap pairs with itself: its second weight is 0 */
                const __m256i xb = t + 1 < NT
                    ? _mm256_loadu_si256((const __m256i *)(tp[t + 1] + p * pstep + c0)) : xa;
                qconv_dwcl2_madd(acc[p], xa, xb, w);
            }
        for (int p = 0; p < P; p++) qconv_dwcl2_store(acc[p], c, lo, hi, ozp, o + p * C + c0);
    }
}

/* Output rows [r0, r1) of the N * OD * OH rows, NT = KD * KH * KW taps (a constant where
 * inlined). */
static inline __attribute__((always_inline)) void
qconv_dwcl2_rows_t(const qconv_dwcl2_args *a, ptrdiff_t r0, ptrdiff_t r1, const int NT) {
    enum { P = 2 };
    const ptrdiff_t C = a->C, KW = a->KW, NKR = a->KD * a->KH, W = a->W;
    const __m256 lo = _mm256_set1_ps((float)(a->lo - a->ozp)), hi = _mm256_set1_ps((float)(255 - a->ozp));
    const __m256i ozp = _mm256_set1_epi32(a->ozp);
    const uint8_t *rows[QCONV_DWCL2_MAX_TAPS], *tp[QCONV_DWCL2_MAX_TAPS];
    /* output columns whose taps all lie inside the row: [va, vb) */
    const ptrdiff_t last = W - 1 + a->pw - (KW - 1) * a->dw;
    ptrdiff_t va = (a->pw + a->sw - 1) / a->sw, vb = last < 0 ? 0 : last / a->sw + 1;
    if (vb > a->OW) vb = a->OW;
    if (va > vb) va = vb;
    for (ptrdiff_t r = r0; r < r1; r++) {
        const ptrdiff_t oh = r % a->OH, od = (r / a->OH) % a->OD, n = r / (a->OH * a->OD);
        /* kernel rows outside the input read the zero-point row */
        for (ptrdiff_t kd = 0; kd < a->KD; kd++)
            for (ptrdiff_t kh = 0; kh < a->KH; kh++) {
                const ptrdiff_t id = od * a->sd - a->pd + kd * a->dd, ih = oh * a->sh - a->ph + kh * a->dh;
                const int ok = id >= 0 && id < a->D && ih >= 0 && ih < a->H;
                rows[kd * a->KH + kh] = ok ? a->x + ((n * a->D + id) * a->H + ih) * W * C : a->zrow;
            }
        uint8_t *orow = a->out + r * a->OW * C;
        for (ptrdiff_t ow = 0; ow < a->OW; ) {
            if (ow == va && va < vb) {
                for (ptrdiff_t k = 0, t = 0; k < NKR; k++)
                    for (ptrdiff_t kw = 0; kw < KW; kw++, t++)
                        tp[t] = rows[k] + (ow * a->sw - a->pw + kw * a->dw) * C;
                const ptrdiff_t pstep = a->sw * C;
                for (; ow + P <= vb; ow += P) {
                    qconv_dwcl2_inner(a, tp, pstep, NT, P, lo, hi, ozp, orow + ow * C);
                    for (int t = 0; t < NT; t++) tp[t] += P * pstep;
                }
                for (; ow < vb; ow++) {
                    qconv_dwcl2_inner(a, tp, pstep, NT, 1, lo, hi, ozp, orow + ow * C);
                    for (int t = 0; t < NT; t++) tp[t] += pstep;
                }
                continue;
            }
            /* a border column: taps past the row's ends read the zero-point row */
            for (ptrdiff_t k = 0, t = 0; k < NKR; k++)
                for (ptrdiff_t kw = 0; kw < KW; kw++, t++) {
                    const ptrdiff_t iw = ow * a->sw - a->pw + kw * a->dw;
                    tp[t] = iw >= 0 && iw < W ? rows[k] + iw * C : a->zrow;
                }
            qconv_dwcl2_inner(a, tp, 0, NT, 1, lo, hi, ozp, orow + ow * C);
            ow++;
        }
    }
}

/* Output rows [r0, r1) of the N * OD * OH rows. */
static void qconv_dwcl2_rows(const qconv_dwcl2_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t nt = a->KD * a->KH * a->KW;
    /* 3x3 and 5x5, the depthwise kernels of real networks, with the tap count a constant */
    if (nt == 9) qconv_dwcl2_rows_t(a, r0, r1, 9);
    else if (nt == 25) qconv_dwcl2_rows_t(a, r0, r1, 25);
    else qconv_dwcl2_rows_t(a, r0, r1, (int)nt);
}
#else
static int qconv_dwcl2_available(void) { return 0; }
static void qconv_dwcl2_rows(const qconv_dwcl2_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    (void)a; (void)r0; (void)r1;       /* never called: conv_cl runs it where available */
}
#endif

#endif
