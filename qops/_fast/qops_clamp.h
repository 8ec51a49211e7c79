/* qops_clamp.h: min(max(x, lo), hi) of bytes, the kernel of relu, relu6, hardtanh and clamp
 * (qops/_fast/activation.pyx's clamp_raw).
 */
#ifndef QOPS_CLAMP_H
#define QOPS_CLAMP_H
#include <stddef.h>
#include <stdint.h>
#include "qops_common.h"

/* min(max(x, lo), hi) of n bytes, GCC-vectorized. One thread runs it directly (a parallel
 * region alone costs as much as a small call); it is noinline because inlined into the
 * Python wrapper GCC reloaded both pointers from the stack around every 64-byte store. */
#if defined(_OPENMP)
#define QOPS_CLAMP_OMP_FOR _Pragma("omp parallel for schedule(static) num_threads(threads)")
#else
#define QOPS_CLAMP_OMP_FOR
#endif
#if defined(__AVX512BW__)
#include <immintrin.h>
/* min(max(x, lo), hi) of 64 bytes, unsigned or signed */
static inline __m512i qops_clamp64(__m512i v, __m512i lo, __m512i hi, int uns) {
    return uns ? _mm512_min_epu8(_mm512_max_epu8(v, lo), hi)
               : _mm512_min_epi8(_mm512_max_epi8(v, lo), hi);
}
/* The clamp of n >= 256 bytes whose source lies a multiple of 4 bytes off the output's
 * alignment: aligned loads of the source's lines, each vector taken from two of them by
 * one dword permute, aligned stores. numpy's arrays start 16 bytes into a cache line:
 * with plain unaligned loads every vector split two lines and cost two loads.
 * Returns 0 (nothing done) otherwise. */
static int qops_clamp_shifted(const uint8_t *src, uint8_t *dst, ptrdiff_t n, uint8_t lo,
                              uint8_t hi, int uns) {
    if (n < 256 || ((uintptr_t)src - (uintptr_t)dst) % 4 != 0) return 0;
    const __m512i L = _mm512_set1_epi8((char)lo), H = _mm512_set1_epi8((char)hi);
    ptrdiff_t i = (ptrdiff_t)((-(uintptr_t)dst) & 63);            /* to the output's line */
    const __mmask64 mh = i ? (((__mmask64)1 << i) - 1) : 0;
    _mm512_mask_storeu_epi8(dst, mh, qops_clamp64(_mm512_maskz_loadu_epi8(mh, src), L, H, uns));
    const int k = (int)(((uintptr_t)(src + i) & 63) / 4);
    if (k == 0) {            /* lined up: plain loads (the next line may be past the end) */
        for (; i + 64 <= n; i += 64)
            _mm512_store_si512((void *)(dst + i),
                               qops_clamp64(_mm512_load_si512((const void *)(src + i)), L, H, uns));
    } else {
        const __m512i idx = _mm512_add_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(k));
        const uint8_t *s = src + i - 4 * k;                          /* its line */
        __m512i cur = _mm512_load_si512((const void *)s);
        for (; i + 64 <= n; i += 64, s += 64) {
            const __m512i nx = _mm512_load_si512((const void *)(s + 64));
            _mm512_store_si512((void *)(dst + i),
                               qops_clamp64(_mm512_permutex2var_epi32(cur, idx, nx), L, H, uns));
            cur = nx;
        }
    }
    const __mmask64 mt = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
    _mm512_mask_storeu_epi8(dst + i, mt, qops_clamp64(_mm512_maskz_loadu_epi8(mt, src + i), L, H, uns));
    return 1;
}
#else
static int qops_clamp_shifted(const uint8_t *src, uint8_t *dst, ptrdiff_t n, uint8_t lo,
                              uint8_t hi, int uns) {
    (void)src; (void)dst; (void)n; (void)lo; (void)hi; (void)uns;
    return 0;
}
#endif
/* (no restrict: relu_ runs it with src == dst) */
#define QOPS_CLAMP_KERNEL(name, T)                                                        \
static __attribute__((noinline)) void name##_run(const T* src, T* dst,                   \
                                                 ptrdiff_t n, T lo, T hi) {               \
    if (qops_clamp_shifted((const uint8_t *)src, (uint8_t *)dst, n, (uint8_t)lo,         \
                           (uint8_t)hi, (T)-1 > 0))                                       \
        return;                                                                           \
    for (ptrdiff_t i = 0; i < n; i++) {                                                   \
        T v = src[i];                                                                     \
        v = v > lo ? v : lo;                                                              \
        dst[i] = v < hi ? v : hi;                                                         \
    }                                                                                     \
}                                                                                         \
static void name(const T* src, T* dst, ptrdiff_t n, T lo, T hi, int threads) {            \
    if (threads <= 1) { name##_run(src, dst, n, lo, hi); return; }                        \
    ptrdiff_t chunk = qops_chunk64(n, threads);                                           \
    QOPS_CLAMP_OMP_FOR                                                                    \
    for (int t = 0; t < threads; t++) {                                                   \
        ptrdiff_t start = (ptrdiff_t)t * chunk;                                           \
        if (start < n)                                                                    \
            name##_run(src + start, dst + start, n - start < chunk ? n - start : chunk,   \
                       lo, hi);                                                           \
    }                                                                                     \
}
QOPS_CLAMP_KERNEL(qops_clamp_u8, uint8_t)
QOPS_CLAMP_KERNEL(qops_clamp_s8, int8_t)


/* Whether this build has the AVX-512 shifted-line kernel (qops_clamp_shifted). */
#if defined(__AVX512BW__)
#define QOPS_CLAMP_SHIFTED 1
#else
#define QOPS_CLAMP_SHIFTED 0
#endif

#endif
