/* AVX-512 building blocks of the pool kernels: masks, maxima, window sums of one chunk of
 * outputs, and the float and integer requantize of 16/32 sums. */
#ifndef QOPS_POOL_AVX512_H
#define QOPS_POOL_AVX512_H
#include "qops_pool_common.h"
#if QP_SIMD == 2

/* Lanes j with lo <= j < hi of a 64-lane vector. */
QP_ALWAYS __mmask64 qp_m64(ptrdiff_t lo, ptrdiff_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 64) hi = 64;
    if (hi <= lo) return 0;
    return _bzhi_u64(~0ULL, (unsigned)hi) & ~_bzhi_u64(~0ULL, (unsigned)lo);
}

QP_ALWAYS __m512i qp_vmax(__m512i a, __mmask64 m, __m512i v, int sgn) {
    return sgn ? _mm512_mask_max_epi8(a, m, a, v) : _mm512_mask_max_epu8(a, m, a, v);
}

/* Low bytes of the 16-bit lanes of a (outputs 0..31) and b (32..63), in order. */
QP_ALWAYS __m512i qp_even(__m512i a, __m512i b) {
    const __m512i lo = _mm512_set1_epi16(0xFF);
    __m512i p = _mm512_packus_epi16(_mm512_and_si512(a, lo), _mm512_and_si512(b, lo));
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), p);
}

/* Load masks of every (chunk, load) of a row, the same for all rows of a call: chunk c
 * covers outputs [c*cw, c*cw + cw), load j reads `halves` vectors of 64 bytes (32 when
 * cw*sW == 32) from c*cw*sW - pW + off[j]. Lanes outside [0, W) are masked out. */
static __mmask64 *qp_masks(const qp_geom *g, ptrdiff_t cw, int halves, const ptrdiff_t *off,
                           int nl, ptrdiff_t *nchunks) {
    ptrdiff_t nc = (g->OW + cw - 1) / cw;
    __mmask64 *t = (__mmask64 *)malloc((size_t)(nc * nl * halves + 1) * sizeof(__mmask64));
    if (!t) return NULL;
    for (ptrdiff_t c = 0; c < nc; c++)
        for (int j = 0; j < nl; j++)
            for (int h = 0; h < halves; h++) {
                ptrdiff_t b = c * cw * g->sW - g->pW + off[j] + 64 * h;
                t[(c * nl + j) * halves + h] = qp_m64(-b, g->W - b);
            }
    *nchunks = nc;
    return t;
}

/* Loads of a row: max pools with stride 2 and dilation 1 read taps k, k+1 in one load
 * (pair[j] = 1), every other case one tap per load. Returns the count. */
static int qp_loads(const qp_geom *g, int pairs, ptrdiff_t *off, int *pair) {
    int n = 0;
    for (ptrdiff_t k = 0; k < g->kW; k += pairs ? 2 : 1) {
        off[n] = k * (pairs ? 1 : g->dW);
        pair[n] = pairs && k + 1 < g->kW;
        n++;
    }
    return n;
}

/* 64 maxima of chunk outputs ow0.. of one row, stride 1 (nl constant when common). */
QP_ALWAYS __m512i qp_max_chunk1(const uint8_t *const *rows, int nr, ptrdiff_t b0,
                                const __mmask64 *mt, const ptrdiff_t *off, int nl, int sgn) {
    __m512i acc = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
    for (int r = 0; r < nr; r++) {
        const uint8_t *q = rows[r] + b0;
        for (int j = 0; j < nl; j++)
            acc = qp_vmax(acc, mt[j], _mm512_maskz_loadu_epi8(mt[j], q + off[j]), sgn);
    }
    return acc;
}

/* The same for stride 2: loads j with pair[j] carry taps k, k+1 in the low and high bytes. */
QP_ALWAYS __m512i qp_max_chunk2(const uint8_t *const *rows, int nr, ptrdiff_t b0, int two,
                                const __mmask64 *mt, const ptrdiff_t *off, const int *pair,
                                int nl, int sgn) {
    const __m512i low = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
    __m512i p0 = low, p1 = low, s0 = low, s1 = low;
    for (int r = 0; r < nr; r++) {
        const uint8_t *q = rows[r] + b0;
        for (int j = 0; j < nl; j++) {
            __mmask64 m0 = mt[2 * j], m1 = mt[2 * j + 1];
            __m512i v0 = _mm512_maskz_loadu_epi8(m0, q + off[j]);
            if (pair[j]) p0 = qp_vmax(p0, m0, v0, sgn);
            else s0 = qp_vmax(s0, m0, v0, sgn);
            if (two) {
                __m512i v1 = _mm512_maskz_loadu_epi8(m1, q + off[j] + 64);
                if (pair[j]) p1 = qp_vmax(p1, m1, v1, sgn);
                else s1 = qp_vmax(s1, m1, v1, sgn);
            }
        }
    }
    /* tap k+1 sits in the high byte of the pair lanes; only low bytes are kept */
    s0 = qp_vmax(s0, ~0ULL, qp_vmax(p0, ~0ULL, _mm512_srli_epi16(p0, 8), sgn), sgn);
    s1 = qp_vmax(s1, ~0ULL, qp_vmax(p1, ~0ULL, _mm512_srli_epi16(p1, 8), sgn), sgn);
    return qp_even(s0, s1);
}

QP_ALWAYS void qp_max_row(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                          const __mmask64 *mt, const ptrdiff_t *off, const int *pair, int nl,
                          ptrdiff_t nc, int sgn) {
    const ptrdiff_t OW = g->OW, pW = g->pW;
    if (g->sW == 1) {
        for (ptrdiff_t c = 0; c < nc; c++, mt += nl) {
            ptrdiff_t ow0 = c * 64, n = OW - ow0 < 64 ? OW - ow0 : 64;
            __m512i v = nl == 2 ? qp_max_chunk1(rows, nr, ow0 - pW, mt, off, 2, sgn)
                      : nl == 3 ? qp_max_chunk1(rows, nr, ow0 - pW, mt, off, 3, sgn)
                      : qp_max_chunk1(rows, nr, ow0 - pW, mt, off, nl, sgn);
            _mm512_mask_storeu_epi8(o + ow0, _bzhi_u64(~0ULL, (unsigned)n), v);
        }
        return;
    }
    for (ptrdiff_t c = 0; c < nc; c++, mt += 2 * nl) {
        ptrdiff_t ow0 = c * 64, n = OW - ow0 < 64 ? OW - ow0 : 64;
        ptrdiff_t b0 = 2 * ow0 - pW;
        __m512i v;
        if (n > 32)
            v = nl == 1 ? qp_max_chunk2(rows, nr, b0, 1, mt, off, pair, 1, sgn)
              : nl == 2 ? qp_max_chunk2(rows, nr, b0, 1, mt, off, pair, 2, sgn)
              : qp_max_chunk2(rows, nr, b0, 1, mt, off, pair, nl, sgn);
        else
            v = nl == 1 ? qp_max_chunk2(rows, nr, b0, 0, mt, off, pair, 1, sgn)
              : nl == 2 ? qp_max_chunk2(rows, nr, b0, 0, mt, off, pair, 2, sgn)
              : qp_max_chunk2(rows, nr, b0, 0, mt, off, pair, nl, sgn);
        _mm512_mask_storeu_epi8(o + ow0, _bzhi_u64(~0ULL, (unsigned)n), v);
    }
}

/* 32 window sums (16-bit lanes) of chunk outputs ow0.. of one row; mt: the chunk's masks.
 * Called with a constant nl for the common windows, so the load loop unrolls. */
QP_ALWAYS __m512i qp_sum_chunk(const uint8_t *const *rows, int nr, ptrdiff_t kW, ptrdiff_t b0,
                               const __mmask64 *mt, const ptrdiff_t *off, int nl, int s2,
                               int sgn) {
    /* b0 = ow0*sW - pW: the chunk's first tap */
    __m512i acc = _mm512_setzero_si512();
    if (!s2) {
        for (int r = 0; r < nr; r++) {
            const uint8_t *q = rows[r] + b0;
            for (int j = 0; j < nl; j++) {
                __m256i v = _mm256_maskz_loadu_epi8((__mmask32)mt[j], q + off[j]);
                acc = _mm512_add_epi16(acc, sgn ? _mm512_cvtepi8_epi16(v) : _mm512_cvtepu8_epi16(v));
            }
        }
        return acc;
    }
    const __m512i w11 = _mm512_set1_epi16(0x0101), w10 = _mm512_set1_epi16(0x0001);
    for (int r = 0; r < nr; r++) {
        const uint8_t *q = rows[r] + b0;
        for (int j = 0; j < nl; j++) {
            __m512i w = off[j] + 1 < kW ? w11 : w10;
            __m512i v = _mm512_maskz_loadu_epi8(mt[j], q + off[j]);
            acc = _mm512_add_epi16(acc, sgn ? _mm512_maddubs_epi16(w, v) : _mm512_maddubs_epi16(v, w));
        }
    }
    return acc;
}

/* f32 requantize of 16 sums (int32 lanes) with table entries z, m (unmasked loads: the
 * tables carry 32 spare entries past their end); unclamped int32 results. */
QP_ALWAYS __m512i qp_rq16(__m512i s, const int32_t *z, const float *m, __m512 zpf) {
    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_loadu_si512((const void *)z))),
                             _mm512_loadu_ps(m));
    return _mm512_cvtps_epi32(_mm512_add_ps(t, zpf));
}

/* 32 integer-requantized results (16-bit lanes, before the saturating pack's clamp) from
 * the three table rows t[0..2] of qp_irq, in registers. */
QP_ALWAYS __m512i qp_irq32v(__m512i acc, const __m512i *t, __m128i sh, int kind) {
    __m512i x = _mm512_add_epi16(acc, t[0]);
    if (kind) {
        __m512i r = _mm512_and_si512(_mm512_srav_epi16(x, t[1]), _mm512_min_epu16(t[1], _mm512_set1_epi16(1)));
        return _mm512_srav_epi16(_mm512_add_epi16(_mm512_add_epi16(x, t[2]), r), t[1]);
    }
    return _mm512_add_epi16(_mm512_srl_epi16(_mm512_mulhi_epu16(x, t[1]), sh), t[2]);
}

/* The same with the table rows of entries cz.. loaded from iq. */
QP_ALWAYS __m512i qp_irq32(__m512i acc, const qp_irq *iq, ptrdiff_t cz) {
    const int16_t *p = iq->t + cz;
    const __m512i t[3] = {_mm512_loadu_si512((const void *)p),
                          _mm512_loadu_si512((const void *)(p + iq->stride)),
                          _mm512_loadu_si512((const void *)(p + 2 * iq->stride))};
    return qp_irq32v(acc, t, _mm_cvtsi32_si128(iq->sh), iq->kind);
}

/* Requantize the 32 window sums of acc (16-bit lanes, unsigned or signed as the input) into
 * o[0..n); z, mul: the table row from the chunk's first output. The saturating packs are the
 * clamp to [qmin, qmax] (cvtps2dq's out-of-range 0x80000000 saturates to qmin, as a clamp
 * would); vpermd puts the dwords the in-lane packs interleaved back in order. */
QP_ALWAYS void qp_avg_store(__m512i acc, const int32_t *z, const float *mul, uint8_t *o,
                            ptrdiff_t n, __m512 zpf, int sgn, const qp_irq *iq, ptrdiff_t cz) {
    if (iq) {
        __m512i q = qp_irq32(acc, iq, cz);
        q = sgn ? _mm512_packs_epi16(q, q) : _mm512_packus_epi16(q, q);
        q = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), q);
        _mm256_mask_storeu_epi8(o, _bzhi_u32(~0U, (unsigned)n), _mm512_castsi512_si256(q));
        return;
    }
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    __m256i a0 = _mm512_castsi512_si256(acc), a1 = _mm512_extracti64x4_epi64(acc, 1);
    __m512i q0 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(a0) : _mm512_cvtepu16_epi32(a0), z, mul, zpf);
    __m512i q1 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(a1) : _mm512_cvtepu16_epi32(a1), z + 16,
                         mul + 16, zpf);
    __m512i w = _mm512_packs_epi32(q0, q1);
    __m512i b = sgn ? _mm512_packs_epi16(w, w) : _mm512_packus_epi16(w, w);
    b = _mm512_permutexvar_epi32(idx, b);
    _mm256_mask_storeu_epi8(o, _bzhi_u32(~0U, (unsigned)n), _mm512_castsi512_si256(b));
}
#endif  /* QP_SIMD == 2 */
#endif  /* QOPS_POOL_AVX512_H */
