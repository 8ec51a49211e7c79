/* Exact sum of a run of 8-bit raw values, for the mean kernels of the reduce family.
 *
 * With AVX512BW, vpsadbw adds each 8 bytes into a 64-bit lane (one instruction per 64 bytes,
 * and a masked load for the tail), so short rows such as the 49 pixels of a 7x7 map are
 * summed in a few instructions instead of one add per byte. int8 values are biased by 128
 * (xor 0x80) to unsigned and the bias is subtracted at the end. Other builds use a plain loop.
 * Both are exact integer sums, so they give the same result.
 */
#ifndef QOPS_REDUCE_SUM_H
#define QOPS_REDUCE_SUM_H
#include <stddef.h>
#include <stdint.h>
#if defined(__AVX512BW__)
#include <immintrin.h>
#endif

static inline int64_t qops_sum_bytes(const uint8_t *p, ptrdiff_t n, int is_signed) {
#if defined(__AVX512BW__)
    const __m512i zero = _mm512_setzero_si512();
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512i acc = _mm512_setzero_si512();
    ptrdiff_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i x = _mm512_loadu_si512((const void *)(p + i));
        if (is_signed) x = _mm512_xor_si512(x, bias);
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(x, zero));
    }
    if (i < n) {
        __mmask64 m = _bzhi_u64(~0ULL, (unsigned)(n - i));
        __m512i x = _mm512_maskz_loadu_epi8(m, p + i);
        if (is_signed) x = _mm512_maskz_mov_epi8(m, _mm512_xor_si512(x, bias));
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(x, zero));
    }
    int64_t s = _mm512_reduce_add_epi64(acc);
    return is_signed ? s - 128 * (int64_t)n : s;
#else
    int64_t s = 0;
    ptrdiff_t i;
    if (is_signed) {
        const int8_t *q = (const int8_t *)p;
        for (i = 0; i < n; i++) s += q[i];
    } else {
        for (i = 0; i < n; i++) s += p[i];
    }
    return s;
#endif
}
#endif
