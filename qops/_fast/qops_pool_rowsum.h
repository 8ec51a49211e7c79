/* Row sums of the scalar adaptive average pool (route planes): acc[w] (=|+=) row[w] over a
 * row of n raw values, 8 values at a time with AVX2 widening loads so short rows (W = 28)
 * vectorize too (GCC's own vectorization of a widening loop needs a whole vector of bytes,
 * 64 with AVX-512). restrict: no aliasing check. */
#ifndef QOPS_POOL_ROWSUM_H
#define QOPS_POOL_ROWSUM_H
#include <stdint.h>
#include <stddef.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

static inline void qp_row_u8(int32_t *restrict a, const uint8_t *restrict s, ptrdiff_t n,
                             int first) {
    ptrdiff_t i = 0;
#if defined(__AVX2__)
    if (first)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_si256((__m256i *)(a + i),
                                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + i))));
    else
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_si256((__m256i *)(a + i), _mm256_add_epi32(
                _mm256_loadu_si256((const __m256i *)(a + i)),
                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + i)))));
#endif
    if (first) for (; i < n; i++) a[i] = s[i];
    else for (; i < n; i++) a[i] += s[i];
}

static inline void qp_row_s8(int32_t *restrict a, const int8_t *restrict s, ptrdiff_t n,
                             int first) {
    ptrdiff_t i = 0;
#if defined(__AVX2__)
    if (first)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_si256((__m256i *)(a + i),
                                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + i))));
    else
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_si256((__m256i *)(a + i), _mm256_add_epi32(
                _mm256_loadu_si256((const __m256i *)(a + i)),
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + i)))));
#endif
    if (first) for (; i < n; i++) a[i] = s[i];
    else for (; i < n; i++) a[i] += s[i];
}
#endif  /* QOPS_POOL_ROWSUM_H */
