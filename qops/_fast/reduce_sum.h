/* Exact sum of a run of 8-bit raw values, for the mean kernels of the reduce family.
 *
 * With AVX512BW, vpsadbw adds each 8 bytes into a 64-bit lane (one instruction per 64 bytes,
 * and a masked load for the tail), so short rows such as the 49 pixels of a 7x7 map are
 * summed in a few instructions instead of one add per byte. int8 values are biased by 128
 * (xor 0x80) to unsigned and the bias is subtracted at the end. AVX2 builds do the same 32
 * bytes at a time, others use a plain loop; all are exact integer sums, so they agree. The
 * mean kernels of the pool family (adaptive average to 1x1) use them too.
 */
#ifndef QOPS_REDUCE_SUM_H
#define QOPS_REDUCE_SUM_H
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include "qops_common.h"
#if defined(__AVX2__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif

/* Exact sum of n raw 8-bit values (int8 biased to unsigned by xor 0x80, bias removed at
 * the end): psadbw adds 8 bytes into a 64-bit lane per instruction, four accumulators over
 * long runs. */
static inline int64_t qops_sum_bytes(const uint8_t *p, ptrdiff_t n, int sgn) {
    ptrdiff_t i = 0;
    int64_t s = 0;
#if defined(__AVX512BW__)
    const __m512i z5 = _mm512_setzero_si512();
    const __m512i b5 = _mm512_set1_epi8((char)0x80);
    __m512i a5 = _mm512_setzero_si512();
    __m512i c0 = a5, c1 = a5, c2 = a5, c3 = a5;
    const uint8_t *q4 = p;
    __m512i xb = sgn ? b5 : z5;        /* xor with 0 is the identity */
    for (; i + 256 <= n; i += 256) {
        q4 = p + i;
        c0 = _mm512_add_epi64(c0, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512((const void *)q4), xb), z5));
        c1 = _mm512_add_epi64(c1, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512((const void *)(q4 + 64)), xb), z5));
        c2 = _mm512_add_epi64(c2, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512((const void *)(q4 + 128)), xb), z5));
        c3 = _mm512_add_epi64(c3, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512((const void *)(q4 + 192)), xb), z5));
    }
    a5 = _mm512_add_epi64(_mm512_add_epi64(c0, c1), _mm512_add_epi64(c2, c3));
    if (sgn) {
        for (; i + 64 <= n; i += 64)
            a5 = _mm512_add_epi64(a5, _mm512_sad_epu8(_mm512_xor_si512(
                _mm512_loadu_si512((const void *)(p + i)), b5), z5));
    } else {
        for (; i + 64 <= n; i += 64)
            a5 = _mm512_add_epi64(a5, _mm512_sad_epu8(
                _mm512_loadu_si512((const void *)(p + i)), z5));
    }
    if (i < n) {
        __mmask64 m = _bzhi_u64(~0ULL, (unsigned)(n - i));
        __m512i v = _mm512_maskz_loadu_epi8(m, p + i);
        if (sgn) v = _mm512_maskz_mov_epi8(m, _mm512_xor_si512(v, b5));
        a5 = _mm512_add_epi64(a5, _mm512_sad_epu8(v, z5));
        i = n;
    }
    s = _mm512_reduce_add_epi64(a5);
    if (sgn) s -= 128 * (int64_t)n;
    return s;
#elif defined(__AVX2__)
    const __m256i z2 = _mm256_setzero_si256();
    const __m256i b2 = _mm256_set1_epi8((char)0x80);
    __m256i a2 = _mm256_setzero_si256();
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
        if (sgn) v = _mm256_xor_si256(v, b2);
        a2 = _mm256_add_epi64(a2, _mm256_sad_epu8(v, z2));
    }
    __m128i h = _mm_add_epi64(_mm256_castsi256_si128(a2), _mm256_extracti128_si256(a2, 1));
    s = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1);
    if (sgn) s -= 128 * (int64_t)i;
#endif
    if (sgn) { const int8_t *q = (const int8_t *)p; for (; i < n; i++) s += q[i]; }
    else { for (; i < n; i++) s += p[i]; }
    return s;
}

#if defined(__AVX512BW__) && defined(__AVX512DQ__)
#define QOPS_SUMS8 1
/* The exact sums of 8 runs of n <= 256 bytes, x + k*stride for k < 8, as 8 int64 lanes in
 * order. Each run's vpsadbw partial sums stay in one vector; the 8 vectors then reduce
 * together (unpack, then 128-bit shuffles), where summing one short run at a time spent a
 * whole horizontal reduction on it: the 49 bytes of a 7x7 map cost as much as 256. */
static inline __m512i qops_sums8(const uint8_t *x, ptrdiff_t stride, ptrdiff_t n,
                                 int is_signed) {
    const __m512i zero = _mm512_setzero_si512(), bias = _mm512_set1_epi8((char)0x80);
    const ptrdiff_t full = n & ~(ptrdiff_t)63;
    const __mmask64 m = _bzhi_u64(~0ULL, (unsigned)(n - full));
    __m512i v[8], a[4], c[2];
    /* the runs 4 batches ahead (contiguous runs, the usual case, are one stream; beyond the
     * caches the hardware alone left these sums at ~40% of a copy's speed) */
    for (ptrdiff_t off = 0; off < 8 * stride; off += 64)
        _mm_prefetch((const char *)(x + 32 * stride + off), _MM_HINT_T0);
    for (int k = 0; k < 8; k++) {
        const uint8_t *p = x + k * stride;
        __m512i acc = zero;
        for (ptrdiff_t i = 0; i < full; i += 64) {
            __m512i t = _mm512_loadu_si512((const void *)(p + i));
            if (is_signed) t = _mm512_xor_si512(t, bias);
            acc = _mm512_add_epi64(acc, _mm512_sad_epu8(t, zero));
        }
        if (m) {
            __m512i t = _mm512_maskz_loadu_epi8(m, p + full);
            if (is_signed) t = _mm512_maskz_mov_epi8(m, _mm512_xor_si512(t, bias));
            acc = _mm512_add_epi64(acc, _mm512_sad_epu8(t, zero));
        }
        v[k] = acc;
    }
    for (int k = 0; k < 4; k++)         /* 128-bit lane j: runs 2k, 2k+1 (lane j's share) */
        a[k] = _mm512_add_epi64(_mm512_unpacklo_epi64(v[2 * k], v[2 * k + 1]),
                                _mm512_unpackhi_epi64(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 2; k++)         /* lanes: runs 4k..4k+3 in pairs, half sums each */
        c[k] = _mm512_add_epi64(_mm512_shuffle_i64x2(a[2 * k], a[2 * k + 1], 0x88),
                                _mm512_shuffle_i64x2(a[2 * k], a[2 * k + 1], 0xDD));
    __m512i s = _mm512_add_epi64(_mm512_shuffle_i64x2(c[0], c[1], 0x88),
                                 _mm512_shuffle_i64x2(c[0], c[1], 0xDD));
    return is_signed ? _mm512_sub_epi64(s, _mm512_set1_epi64(128 * (int64_t)n)) : s;
}
#endif

#if defined(__AVX2__) && !defined(QOPS_SUMS8)
#define QOPS_SUMS8_AVX2 1
/* qops_sums8 for AVX2, runs of 32 <= n <= 256 bytes, as 8 int32 lanes in order (n <= 256
 * keeps every sum below 2^16). A run's last partial vector is the 32 bytes ending at the run's
 * end with the bytes already counted masked off: no read past the run. */
static inline __m256i qops_sums8_avx2(const uint8_t *x, ptrdiff_t stride, ptrdiff_t n,
                                      int is_signed) {
    const __m256i zero = _mm256_setzero_si256(), bias = _mm256_set1_epi8((char)0x80);
    const __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                          16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
                                          29, 30, 31);
    const ptrdiff_t full = n & ~(ptrdiff_t)31;
    /* bytes 32 - rem .. 31 of the last vector are new */
    const __m256i keep = _mm256_cmpgt_epi8(iota, _mm256_set1_epi8((char)(31 - (n - full))));
    __m256i v[8];
    for (ptrdiff_t off = 0; off < 8 * stride; off += 64)
        _mm_prefetch((const char *)(x + 32 * stride + off), _MM_HINT_T0);
    for (int k = 0; k < 8; k++) {
        const uint8_t *p = x + k * stride;
        __m256i acc = zero;
        for (ptrdiff_t i = 0; i < full; i += 32) {
            __m256i t = _mm256_loadu_si256((const __m256i *)(p + i));
            if (is_signed) t = _mm256_xor_si256(t, bias);
            acc = _mm256_add_epi64(acc, _mm256_sad_epu8(t, zero));
        }
        if (n > full) {
            __m256i t = _mm256_loadu_si256((const __m256i *)(p + n - 32));
            if (is_signed) t = _mm256_xor_si256(t, bias);
            acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_and_si256(t, keep), zero));
        }
        v[k] = acc;
    }
    __m256i a[4], b[2];
    for (int k = 0; k < 4; k++)         /* 128-bit lane j: runs 2k, 2k+1 (lane j's share) */
        a[k] = _mm256_add_epi64(_mm256_unpacklo_epi64(v[2 * k], v[2 * k + 1]),
                                _mm256_unpackhi_epi64(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 2; k++)         /* runs 4k..4k+3 as int64 */
        b[k] = _mm256_add_epi64(_mm256_permute2x128_si256(a[2 * k], a[2 * k + 1], 0x20),
                                _mm256_permute2x128_si256(a[2 * k], a[2 * k + 1], 0x31));
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m256i s = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(b[0], even),
                                   _mm256_permutevar8x32_epi32(b[1], even), 0xF0);
    return is_signed ? _mm256_sub_epi32(s, _mm256_set1_epi32(128 * (int32_t)n)) : s;
}
#endif

/* out[i] = rint(f32(f32(sum over rows j < n of x[j*stride + i]) / f32(n))) for columns
 * [c0, c1): the mean over a middle axis. With AVX512BW, 64 columns at a time: each block of
 * up to 256 rows adds in 16-bit lanes (at most 256 * 255 fits; int8 biased to unsigned),
 * then into int32 totals, about a third of the instructions of widening every byte to 32
 * bits. Other builds (and the tail columns' scalar path) sum in int64 per column. */
static inline void qops_col_means(const uint8_t *x, ptrdiff_t stride, ptrdiff_t n,
                                  ptrdiff_t c0, ptrdiff_t c1, uint8_t *out, int is_signed) {
    const float fn = (float)n;
    ptrdiff_t c = c0;
#if defined(__AVX512BW__)
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512 d = _mm512_set1_ps(fn);
    for (; c < c1; c += 64) {
        const __mmask64 m = c1 - c >= 64 ? ~0ULL : _bzhi_u64(~0ULL, (unsigned)(c1 - c));
        __m512i t[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
        for (ptrdiff_t j0 = 0; j0 < n; j0 += 256) {
            const ptrdiff_t j1 = n - j0 < 256 ? n : j0 + 256;
            __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
            for (ptrdiff_t j = j0; j < j1; j++) {
                __m512i v = _mm512_maskz_loadu_epi8(m, x + j * stride + c);
                if (is_signed) v = _mm512_xor_si512(v, bias);
                lo = _mm512_add_epi16(lo, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(v)));
                hi = _mm512_add_epi16(hi, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(v, 1)));
            }
            t[0] = _mm512_add_epi32(t[0], _mm512_cvtepu16_epi32(_mm512_castsi512_si256(lo)));
            t[1] = _mm512_add_epi32(t[1], _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(lo, 1)));
            t[2] = _mm512_add_epi32(t[2], _mm512_cvtepu16_epi32(_mm512_castsi512_si256(hi)));
            t[3] = _mm512_add_epi32(t[3], _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hi, 1)));
        }
        for (int k = 0; k < 4; k++) {
            __m512i s = is_signed ? _mm512_sub_epi32(t[k], _mm512_set1_epi32(128 * (int32_t)n)) : t[k];
            __m512i q = _mm512_cvtps_epi32(_mm512_div_ps(_mm512_cvtepi32_ps(s), d));
            _mm_mask_storeu_epi8(out + (c - c0) + 16 * k, (__mmask16)(m >> (16 * k)), _mm512_cvtepi32_epi8(q));
        }
    }
#elif defined(__AVX2__)
    /* the same with 32 columns; in-lane unpacks leave column groups 0-3|16-19, 4-7|20-23,
     * 8-11|24-27, 12-15|28-31 in t[0..3], which the two rounds of packs put back in order */
    const __m256i bias = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
    const __m256 d = _mm256_set1_ps(fn);
    if (n <= ((ptrdiff_t)1 << 23))          /* int32 totals: 255 * n < 2^31 */
        for (; c + 32 <= c1; c += 32) {
            __m256i t[4] = {z, z, z, z};
            for (ptrdiff_t j0 = 0; j0 < n; j0 += 256) {
                const ptrdiff_t j1 = n - j0 < 256 ? n : j0 + 256;
                __m256i lo = z, hi = z;
                for (ptrdiff_t j = j0; j < j1; j++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(x + j * stride + c));
                    if (is_signed) v = _mm256_xor_si256(v, bias);
                    lo = _mm256_add_epi16(lo, _mm256_unpacklo_epi8(v, z));
                    hi = _mm256_add_epi16(hi, _mm256_unpackhi_epi8(v, z));
                }
                t[0] = _mm256_add_epi32(t[0], _mm256_unpacklo_epi16(lo, z));
                t[1] = _mm256_add_epi32(t[1], _mm256_unpackhi_epi16(lo, z));
                t[2] = _mm256_add_epi32(t[2], _mm256_unpacklo_epi16(hi, z));
                t[3] = _mm256_add_epi32(t[3], _mm256_unpackhi_epi16(hi, z));
            }
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                __m256i s = is_signed ? _mm256_sub_epi32(t[k], _mm256_set1_epi32(128 * (int32_t)n)) : t[k];
                q[k] = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_cvtepi32_ps(s), d));
            }
            __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(out + (c - c0)),
                                is_signed ? _mm256_packs_epi16(w01, w23) : _mm256_packus_epi16(w01, w23));
        }
#endif
    for (; c < c1; c++) {
        int64_t s = 0;
        for (ptrdiff_t j = 0; j < n; j++)
            s += is_signed ? (int8_t)x[j * stride + c] : x[j * stride + c];
        out[c - c0] = (uint8_t)(int32_t)qops_rintf((float)s / fn);
    }
}

/* out[r] = rint(f32(f32(f32(sum of row r) * mul) / div)) for rows [r0, r1) of n bytes, 8
 * rows at a time where qops_sums8 applies. The mean kernels pass (1, n), the adaptive average
 * to 1x1 (reciprocal, 1); the other factor of each is exact, so each gets its own formula. */
static inline void qops_run_means(const uint8_t *x, uint8_t *out, ptrdiff_t r0, ptrdiff_t r1,
                                  ptrdiff_t n, int is_signed, float mul, float div) {
    ptrdiff_t r = r0;
#ifdef QOPS_SUMS8
    if (n <= 256) {
        const __m256 m = _mm256_set1_ps(mul), d = _mm256_set1_ps(div);
        for (; r + 8 <= r1; r += 8) {
            __m256 f = _mm512_cvtepi64_ps(qops_sums8(x + r * n, n, n, is_signed));
            f = _mm256_div_ps(_mm256_mul_ps(f, m), d);
            _mm_storel_epi64((__m128i *)(out + r), _mm256_cvtepi32_epi8(_mm256_cvtps_epi32(f)));
        }
    }
#elif defined(QOPS_SUMS8_AVX2)
    if (n >= 32 && n <= 256) {
        const __m256 m = _mm256_set1_ps(mul), d = _mm256_set1_ps(div);
        for (; r + 8 <= r1; r += 8) {
            __m256 f = _mm256_cvtepi32_ps(qops_sums8_avx2(x + r * n, n, n, is_signed));
            __m256i q = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_mul_ps(f, m), d));
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
            w = is_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
            _mm_storel_epi64((__m128i *)(out + r), w);
        }
    }
#endif
    for (; r < r1; r++)
        out[r] = (uint8_t)(int32_t)qops_rintf((float)qops_sum_bytes(x + r * n, n, is_signed) * mul / div);
}
#endif
