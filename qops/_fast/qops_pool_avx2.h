/* AVX2 row kernels of the max and average pools (route simd_rows, AVX2 tier): each output
 * row straight from its input rows, whole vectors on the interior columns, the scalar
 * window formula on the edges. */
#ifndef QOPS_POOL_AVX2_H
#define QOPS_POOL_AVX2_H
#include "qops_common.h"
#include "qops_pool_common.h"
#if QP_SIMD == 1

QP_ALWAYS __m256i qp_vmax(__m256i a, __m256i v, int sgn) {
    return sgn ? _mm256_max_epi8(a, v) : _mm256_max_epu8(a, v);
}

/* 32 outputs of a row from ow0 (every tap inside the row: see qp_interior). */
QP_ALWAYS __m256i qp_max_chunk(const uint8_t *const *rows, int nr, const qp_geom *g,
                               ptrdiff_t ow0, int sgn) {
    const ptrdiff_t kW = g->kW, pW = g->pW, dW = g->dW;
    __m256i low = _mm256_set1_epi8(sgn ? (char)0x80 : 0);
    if (g->sW == 1) {
        __m256i acc = low;
        for (ptrdiff_t k = 0; k < kW; k++) {
            ptrdiff_t b = ow0 - pW + k * dW;
            for (int r = 0; r < nr; r++)
                acc = qp_vmax(acc, _mm256_loadu_si256((const __m256i *)(rows[r] + b)), sgn);
        }
        return acc;
    }
    const ptrdiff_t step = dW == 1 ? 2 : 1;
    __m256i p0 = low, p1 = low, s0 = low, s1 = low;
    for (ptrdiff_t k = 0; k < kW; k += step) {
        ptrdiff_t b = 2 * ow0 - pW + k * dW;
        if (step == 2 && k + 1 < kW) {
            for (int r = 0; r < nr; r++) {
                p0 = qp_vmax(p0, _mm256_loadu_si256((const __m256i *)(rows[r] + b)), sgn);
                p1 = qp_vmax(p1, _mm256_loadu_si256((const __m256i *)(rows[r] + b + 32)), sgn);
            }
        } else {
            for (int r = 0; r < nr; r++) {
                s0 = qp_vmax(s0, _mm256_loadu_si256((const __m256i *)(rows[r] + b)), sgn);
                s1 = qp_vmax(s1, _mm256_loadu_si256((const __m256i *)(rows[r] + b + 32)), sgn);
            }
        }
    }
    s0 = qp_vmax(s0, qp_vmax(p0, _mm256_srli_epi16(p0, 8), sgn), sgn);
    s1 = qp_vmax(s1, qp_vmax(p1, _mm256_srli_epi16(p1, 8), sgn), sgn);
    const __m256i m = _mm256_set1_epi16(0xFF);
    __m256i p = _mm256_packus_epi16(_mm256_and_si256(s0, m), _mm256_and_si256(s1, m));
    return _mm256_permute4x64_epi64(p, 0xD8);
}

/* Bytes of a padded row of the short-row kernels: their chunks' loads (64 input bytes at
 * stride 2) past up to 64 taps. */
#define QP_SHORT_BUF 128

/* The input rows of a short output row (qp_max_row_short, qp_avg_row_short) copied into
 * buffers filled with `fill`, at the row's padding; brow gets the buffers. */
QP_ALWAYS void qp_pad_rows(const uint8_t *const *rows, int nr, const qp_geom *g,
                           uint8_t buf[][QP_SHORT_BUF], const uint8_t **brow, char fill) {
    const ptrdiff_t n = g->W < QP_SHORT_BUF - g->pW ? g->W : QP_SHORT_BUF - g->pW;
    const __m256i f = _mm256_set1_epi8(fill);
    for (int r = 0; r < nr; r++) {
        uint8_t *b = buf[r];
        for (int i = 0; i < QP_SHORT_BUF; i += 32) _mm256_store_si256((__m256i *)(b + i), f);
        qops_copy_short(b + g->pW, rows[r], n);
        brow[r] = buf[r];
    }
}

/* A row of at most 32 outputs without a whole vector of interior ones (planes up to about 40
 * wide, which the edge formula would take output by output): its input rows copied into
 * buffers filled with the dtype's lowest value (what a tap outside the row adds to a max),
 * then one vector chunk over them. Unit dilation, kW <= 64: the taps of the OW outputs lie
 * within the buffers. */
QP_ALWAYS void qp_max_row_short(const uint8_t *const *rows, int nr, const qp_geom *g,
                                uint8_t *o, int sgn) {
    uint8_t buf[QP_MAX_ROWS_][QP_SHORT_BUF] __attribute__((aligned(32)));
    const uint8_t *brow[QP_MAX_ROWS_];
    qp_pad_rows(rows, nr, g, buf, brow, sgn ? (char)0x80 : 0);
    qp_geom gb = *g;
    gb.pW = 0;
    uint8_t t[32];
    _mm256_storeu_si256((__m256i *)t, qp_max_chunk(brow, nr, &gb, 0, sgn));
    memcpy(o, t, (size_t)g->OW);
}

QP_ALWAYS void qp_max_row(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                          int sgn) {
    ptrdiff_t lo, hi, ow;
    qp_interior(g, g->dW, g->sW == 1 ? 32 : 64, 32, &lo, &hi);
    if (hi <= lo && g->dW == 1 && g->OW <= 32 && g->kW <= 64 && nr <= QP_MAX_ROWS_) {
        qp_max_row_short(rows, nr, g, o, sgn);
        return;
    }
    for (ow = 0; ow < lo; ow++) o[ow] = (uint8_t)qp_max1(rows, nr, g, ow, sgn);
    if (hi > lo) {
        for (ow = lo; ow + 32 <= hi; ow += 32)
            _mm256_storeu_si256((__m256i *)(o + ow), qp_max_chunk(rows, nr, g, ow, sgn));
        if (ow < hi)
            _mm256_storeu_si256((__m256i *)(o + hi - 32), qp_max_chunk(rows, nr, g, hi - 32, sgn));
    }
    for (ow = hi > lo ? hi : lo; ow < g->OW; ow++) o[ow] = (uint8_t)qp_max1(rows, nr, g, ow, sgn);
}

/* 16 window sums (16-bit lanes) of outputs ow0.. (every tap inside the row). */
QP_ALWAYS __m256i qp_sum_chunk(const uint8_t *const *rows, int nr, const qp_geom *g,
                               ptrdiff_t ow0, int sgn) {
    const ptrdiff_t kW = g->kW, pW = g->pW;
    __m256i acc = _mm256_setzero_si256();
    if (g->sW == 1) {
        for (ptrdiff_t k = 0; k < kW; k++) {
            ptrdiff_t b = ow0 - pW + k;
            for (int r = 0; r < nr; r++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(rows[r] + b));
                acc = _mm256_add_epi16(acc, sgn ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v));
            }
        }
        return acc;
    }
    const __m256i w11 = _mm256_set1_epi16(0x0101), w10 = _mm256_set1_epi16(0x0001);
    for (ptrdiff_t k = 0; k < kW; k += 2) {
        ptrdiff_t b = 2 * ow0 - pW + k;
        __m256i w = k + 1 < kW ? w11 : w10;
        for (int r = 0; r < nr; r++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(rows[r] + b));
            acc = _mm256_add_epi16(acc, sgn ? _mm256_maddubs_epi16(w, v) : _mm256_maddubs_epi16(v, w));
        }
    }
    return acc;
}

QP_ALWAYS __m128i qp_requant8(__m256i s, const int32_t *z, const float *m, __m256 zpf,
                              __m256i qmin, __m256i qmax) {
    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_loadu_si256((const __m256i *)z))),
                             _mm256_loadu_ps(m));
    __m256i q = _mm256_cvtps_epi32(_mm256_add_ps(t, zpf));
    q = _mm256_min_epi32(_mm256_max_epi32(q, qmin), qmax);
    /* values are in [qmin, qmax]: both packs are exact for them */
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    return w;                                            /* 8 int16 */
}

QP_ALWAYS void qp_avg_chunk(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                            const int32_t *z, const float *mul, ptrdiff_t ow0, __m256 zpf,
                            __m256i lo, __m256i hi, int sgn) {
    __m256i acc = qp_sum_chunk(rows, nr, g, ow0, sgn);
    __m128i a0 = _mm256_castsi256_si128(acc), a1 = _mm256_extracti128_si256(acc, 1);
    __m128i w0 = qp_requant8(sgn ? _mm256_cvtepi16_epi32(a0) : _mm256_cvtepu16_epi32(a0),
                             z + ow0, mul + ow0, zpf, lo, hi);
    __m128i w1 = qp_requant8(sgn ? _mm256_cvtepi16_epi32(a1) : _mm256_cvtepu16_epi32(a1),
                             z + ow0 + 8, mul + ow0 + 8, zpf, lo, hi);
    __m128i b = sgn ? _mm_packs_epi16(w0, w1) : _mm_packus_epi16(w0, w1);
    _mm_storeu_si128((__m128i *)(o + ow0), b);
}

/* An average pool row of at most 32 outputs without a whole interior vector: as
 * qp_max_row_short, the rows padded with zeros (a tap outside the row adds nothing to the
 * sum; the tables z, mul hold each output's count of taps), the requantize tables copied
 * into 32-entry buffers, and two chunks of 16. */
QP_ALWAYS void qp_avg_row_short(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                                const int32_t *z, const float *mul, __m256 zpf, __m256i vlo,
                                __m256i vhi, int sgn) {
    uint8_t buf[QP_MAX_ROWS_][QP_SHORT_BUF] __attribute__((aligned(32)));
    const uint8_t *brow[QP_MAX_ROWS_];
    int32_t zt[32] = {0};
    float mt[32] = {0};
    uint8_t t[32];
    qp_pad_rows(rows, nr, g, buf, brow, 0);
    memcpy(zt, z, (size_t)g->OW * sizeof(int32_t));
    memcpy(mt, mul, (size_t)g->OW * sizeof(float));
    qp_geom gb = *g;
    gb.pW = 0;
    qp_avg_chunk(brow, nr, &gb, t, zt, mt, 0, zpf, vlo, vhi, sgn);
    if (g->OW > 16) qp_avg_chunk(brow, nr, &gb, t, zt, mt, 16, zpf, vlo, vhi, sgn);
    memcpy(o, t, (size_t)g->OW);
}

QP_ALWAYS void qp_avg_row(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                          const int32_t *z, const float *mul, float zp, int32_t qmin,
                          int32_t qmax, int sgn) {
    ptrdiff_t lo, hi, ow;
    const __m256 zpf = _mm256_set1_ps(zp);
    const __m256i vlo = _mm256_set1_epi32(qmin), vhi = _mm256_set1_epi32(qmax);
    qp_interior(g, 1, g->sW == 1 ? 16 : 32, 16, &lo, &hi);
    if (hi <= lo && g->OW <= 32 && g->kW <= 64 && nr <= QP_MAX_ROWS_) {
        qp_avg_row_short(rows, nr, g, o, z, mul, zpf, vlo, vhi, sgn);
        return;
    }
    for (ow = 0; ow < lo; ow++)
        o[ow] = qp_requant1(qp_sum1(rows, nr, g, ow, sgn), z[ow], mul[ow], zp, qmin, qmax);
    if (hi > lo) {
        for (ow = lo; ow + 16 <= hi; ow += 16)
            qp_avg_chunk(rows, nr, g, o, z, mul, ow, zpf, vlo, vhi, sgn);
        if (ow < hi) qp_avg_chunk(rows, nr, g, o, z, mul, hi - 16, zpf, vlo, vhi, sgn);
    }
    for (ow = hi > lo ? hi : lo; ow < g->OW; ow++)
        o[ow] = qp_requant1(qp_sum1(rows, nr, g, ow, sgn), z[ow], mul[ow], zp, qmin, qmax);
}
#endif  /* QP_SIMD == 1 */
#endif  /* QOPS_POOL_AVX2_H */
