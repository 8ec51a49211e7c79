/* Depthwise convolution of channels-last input on AVX2, 32 channels a block (16 under 32
 * channels), exact.
 *
 * Taps go two at a time (t0, t1): the B channel bytes of each tap's pixel become int16 pairs
 * (x[t0], x[t1]) per channel (B = 32: a byte unpack interleaves the taps, unpacks with zero
 * widen; B = 16: vpmovzxbw widens each tap, a word unpack interleaves), which vpmaddwd
 * multiplies by the pair (w[t0] - wz, w[t1] - wz) into int32. Each product is at most
 * 255 * 255 in size, so no partial sum saturates (no vpmaddubsw anywhere). With wz taken out
 * of the weights the zero points leave one start value per channel,
 *     acc = Sum x (w - wz) - xz Sum (w - wz),
 * the integer of docs/semantics.md §8, for symmetric and asymmetric weights alike.
 *
 * The unpacks work within 128-bit lanes, each lane holding half the block's channels: dword j
 * of accumulator k holds channel B/2 (j / 4) + 4k + j % 4 of the block (qconv_dwcl2_lane);
 * the weight pairs and per-channel constants are laid out in that order once, and the packs
 * of the requantized results put the channels back in order. C >= B: the last block starts
 * at C - B and overlaps the one before (those channels are computed twice and stored twice,
 * the same bytes by the same thread), so every load and store is B whole bytes inside the
 * tensors. 16-blocks only under 32 channels, where a 32-block does not fit: two of them
 * shuffle more than one 32-block (8 shuffles a tap pair against 6). Taps outside the input
 * read a row of the input zero point. Requantization by qconv_requant8 (docs/semantics.md
 * §8, as every AVX2 conv kernel).
 */
#ifndef QOPS_CONV_DWCL_AVX2_H
#define QOPS_CONV_DWCL_AVX2_H
#include <stdint.h>
#include <stddef.h>
#include "qops_conv.h"            /* qconv_requant8, QCONV_AVX2 */

typedef struct {
    const uint8_t *x;                  /* input (N, D, H, W, C), contiguous, C >= 16 */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t OD, OH, OW;
    ptrdiff_t KD, KH, KW;
    ptrdiff_t sd, sh, sw, pd, ph, pw, dd, dh, dw;
    ptrdiff_t B;                       /* channels a block: qconv_dwcl2_block(C) */
    const int32_t *wp;                 /* [NB][NP][B / 8][8] int16 pairs (w[t0] - wz, w[t1] - wz) */
    const int32_t *cst;                /* [NB][3][B]: start value, bterm, mult (as float bits) */
    const uint8_t *zrow;               /* W * C bytes of the input zero point */
    int32_t ozp, lo;
    uint8_t *out;                      /* (N, OD, OH, OW, C) */
} qconv_dwcl2_args;

#define QCONV_DWCL2_MAX_TAPS 64           /* taps KD * KH * KW (pointers on the stack) */

/* Channels a block for C channels (C >= 16): the one choice the weight packing, the
 * constants and the kernel all follow. */
static inline ptrdiff_t qconv_dwcl2_block(ptrdiff_t C) {
    return C >= 32 ? 32 : 16;
}

/* First channel of block b: blocks of B, the last one ending at C. */
static inline ptrdiff_t qconv_dwcl2_c0(ptrdiff_t b, ptrdiff_t C, ptrdiff_t B) {
    return B * b + B <= C ? B * b : C - B;
}

/* The channel of dword j of accumulator k of a B-channel block, relative to its first
 * channel (each 128-bit lane holds half the block). */
static inline ptrdiff_t qconv_dwcl2_lane(ptrdiff_t B, ptrdiff_t k, ptrdiff_t j) {
    return B / 2 * (j / 4) + 4 * k + j % 4;
}

/* The per-channel constants of every block (cst: [NB][3][B] int32), from Sum (w - wz),
 * bterm and mult per channel. */
static void qconv_dwcl2_consts(const qconv_dwcl2_args *a, const int32_t *wdsum,
                               const float *bterm, const float *mult, int32_t xz, int32_t *cst) {
    const ptrdiff_t B = a->B, NB = (a->C + B - 1) / B;
    for (ptrdiff_t b = 0; b < NB; b++) {
        int32_t *init = cst + 3 * B * b;
        float *bt = (float *)(init + B), *mu = (float *)(init + 2 * B);
        for (ptrdiff_t k = 0; k < B / 8; k++)
            for (ptrdiff_t j = 0; j < 8; j++) {
                const ptrdiff_t ch = qconv_dwcl2_c0(b, a->C, B) + qconv_dwcl2_lane(B, k, j);
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

/* acc[k] += the taps at pa, pb of 16 channels, paired, times weight vector k of w: each
 * tap's bytes widened to int16 (channels 0-7 in the low lane, 8-15 in the high one), then
 * interleaved within lanes. */
static inline __attribute__((always_inline)) void
qconv_dwcl2_madd16(__m256i acc[2], const uint8_t *pa, const uint8_t *pb, const int32_t *w) {
    const __m256i xa = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)pa));
    const __m256i xb = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)pb));
    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_unpacklo_epi16(xa, xb),
                                                        _mm256_loadu_si256((const __m256i *)w)));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_unpackhi_epi16(xa, xb),
                                                        _mm256_loadu_si256((const __m256i *)(w + 8))));
}

/* Requantize one 16-block's two accumulators and store its 16 bytes (the pack to int16
 * restores the order within each lane, the lanes hold channels 0-7 and 8-15). */
static inline __attribute__((always_inline)) void
qconv_dwcl2_store16(const __m256i acc[2], const int32_t *c, __m256 lo, __m256 hi, __m256i ozp,
                    uint8_t *o) {
    const float *bt = (const float *)(c + 16), *mu = (const float *)(c + 32);
    const __m256i q = _mm256_packs_epi32(
        qconv_requant8(acc[0], _mm256_loadu_ps(bt), _mm256_loadu_ps(mu), lo, hi, ozp),
        qconv_requant8(acc[1], _mm256_loadu_ps(bt + 8), _mm256_loadu_ps(mu + 8), lo, hi, ozp));
    _mm_storeu_si128((__m128i *)o, _mm_packus_epi16(_mm256_castsi256_si128(q),
                                                    _mm256_extracti128_si256(q, 1)));
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

/* P output pixels (all their taps inside the input) of every B-channel block: tap t of
 * pixel p at tp[t] + p * pstep; outputs at o + p * C. Several pixels share each weight
 * load. */
static inline __attribute__((always_inline)) void
qconv_dwcl2_inner(const qconv_dwcl2_args *a, const uint8_t *const *tp, ptrdiff_t pstep,
                  const int NT, const int P, const int B, __m256 lo, __m256 hi, __m256i ozp,
                  uint8_t *o) {
    const ptrdiff_t C = a->C, NB = (C + B - 1) / B, NP = (NT + 1) / 2;
    for (ptrdiff_t b = 0; b < NB; b++) {
        const ptrdiff_t c0 = qconv_dwcl2_c0(b, C, B);
        const int32_t *w = a->wp + b * NP * B, *c = a->cst + 3 * B * b;
        __m256i acc[4][4];            /* P <= 4 pixels, B / 8 <= 4 accumulators */
        for (int k = 0; k < B / 8; k++) {
            const __m256i i0 = _mm256_loadu_si256((const __m256i *)(c + 8 * k));
            for (int p = 0; p < P; p++) acc[p][k] = i0;
        }
        for (int t = 0; t < NT; t += 2, w += B)
            for (int p = 0; p < P; p++) {
                /* an odd last tap pairs with itself: its second weight is 0 */
                const uint8_t *pa = tp[t] + p * pstep + c0;
                const uint8_t *pb = t + 1 < NT ? tp[t + 1] + p * pstep + c0 : pa;
                if (B == 32)
                    qconv_dwcl2_madd(acc[p], _mm256_loadu_si256((const __m256i *)pa),
                                     _mm256_loadu_si256((const __m256i *)pb), w);
                else
                    qconv_dwcl2_madd16(acc[p], pa, pb, w);
            }
        for (int p = 0; p < P; p++) {
            if (B == 32) qconv_dwcl2_store(acc[p], c, lo, hi, ozp, o + p * C + c0);
            else qconv_dwcl2_store16(acc[p], c, lo, hi, ozp, o + p * C + c0);
        }
    }
}

/* Output rows [r0, r1) of the N * OD * OH rows, NT = KD * KH * KW taps and B = a->B channels
 * a block (constants where inlined). */
static inline __attribute__((always_inline)) void
qconv_dwcl2_rows_t(const qconv_dwcl2_args *a, ptrdiff_t r0, ptrdiff_t r1, const int NT,
                   const int B) {
    /* pixels sharing a weight load: as many as the 16 ymm registers hold accumulators for */
    const int P = B == 32 ? 2 : 4;
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
                    qconv_dwcl2_inner(a, tp, pstep, NT, P, B, lo, hi, ozp, orow + ow * C);
                    for (int t = 0; t < NT; t++) tp[t] += P * pstep;
                }
                for (; ow < vb; ow++) {
                    qconv_dwcl2_inner(a, tp, pstep, NT, 1, B, lo, hi, ozp, orow + ow * C);
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
            qconv_dwcl2_inner(a, tp, 0, NT, 1, B, lo, hi, ozp, orow + ow * C);
            ow++;
        }
    }
}

/* Output rows [r0, r1) of the N * OD * OH rows. */
static void qconv_dwcl2_rows(const qconv_dwcl2_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t nt = a->KD * a->KH * a->KW;
    /* 3x3 and 5x5, the depthwise kernels of real networks, with the tap count a constant */
    if (a->B == 32) {
        if (nt == 9) qconv_dwcl2_rows_t(a, r0, r1, 9, 32);
        else if (nt == 25) qconv_dwcl2_rows_t(a, r0, r1, 25, 32);
        else qconv_dwcl2_rows_t(a, r0, r1, (int)nt, 32);
    } else {
        if (nt == 9) qconv_dwcl2_rows_t(a, r0, r1, 9, 16);
        else if (nt == 25) qconv_dwcl2_rows_t(a, r0, r1, 25, 16);
        else qconv_dwcl2_rows_t(a, r0, r1, (int)nt, 16);
    }
}
#else
static int qconv_dwcl2_available(void) { return 0; }
static void qconv_dwcl2_rows(const qconv_dwcl2_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    (void)a; (void)r0; (void)r1;       /* never called: conv_cl runs it where available */
}
#endif

#endif
