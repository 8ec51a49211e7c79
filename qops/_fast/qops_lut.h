/* 256-entry byte lookup table applied to a byte array: the fast path of every element-wise
 * map of 8-bit raw values (activation, arith, norm: whatever an op computes per raw byte,
 * it computes 256 times into a table, then looks every element up).
 *
 * On CPUs with AVX512-VBMI (the avx512 build checks at run time) two vpermi2b look up the
 * low and high halves of the table for 64 bytes at once and the index's top bit picks
 * between them; with AVX2, sixteen vpshufb and a tree of blends; elsewhere a plain unrolled
 * byte loop. All give the same bytes.
 */
#ifndef QOPS_LUT_H
#define QOPS_LUT_H
#include <stddef.h>
#include <stdint.h>
#include "qops_common.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

static inline void qops_lut_scalar(const uint8_t *src, uint8_t *dst, ptrdiff_t n,
                                   const uint8_t *table) {
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint8_t a = table[src[i]], b = table[src[i + 1]];
        uint8_t c = table[src[i + 2]], d = table[src[i + 3]];
        dst[i] = a; dst[i + 1] = b; dst[i + 2] = c; dst[i + 3] = d;
    }
    for (; i < n; i++) dst[i] = table[src[i]];
}

#if defined(__AVX512BW__)
__attribute__((target("avx512f,avx512bw,avx512vbmi,bmi2")))
static void qops_lut_vbmi(const uint8_t *src, uint8_t *dst, ptrdiff_t n, const uint8_t *table) {
    const __m512i t0 = _mm512_loadu_si512((const void *)table);
    const __m512i t1 = _mm512_loadu_si512((const void *)(table + 64));
    const __m512i t2 = _mm512_loadu_si512((const void *)(table + 128));
    const __m512i t3 = _mm512_loadu_si512((const void *)(table + 192));
    ptrdiff_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i x = _mm512_loadu_si512((const void *)(src + i));
        __m512i lo = _mm512_permutex2var_epi8(t0, x, t1);   /* uses the low 7 bits of x */
        __m512i hi = _mm512_permutex2var_epi8(t2, x, t3);
        __mmask64 top = _mm512_movepi8_mask(x);
        _mm512_storeu_si512((void *)(dst + i), _mm512_mask_blend_epi8(top, lo, hi));
    }
    if (i < n) {
        __mmask64 m = _bzhi_u64(~0ULL, (unsigned)(n - i));
        __m512i x = _mm512_maskz_loadu_epi8(m, src + i);
        __m512i lo = _mm512_permutex2var_epi8(t0, x, t1);
        __m512i hi = _mm512_permutex2var_epi8(t2, x, t3);
        __mmask64 top = _mm512_movepi8_mask(x);
        _mm512_mask_storeu_epi8(dst + i, m, _mm512_mask_blend_epi8(top, lo, hi));
    }
}

static int qops_have_vbmi(void) {
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("bmi2");
    }
    return have;
}
#endif

#if defined(__AVX2__)
/* AVX2 has only 16-entry lookups (vpshufb): each of the 16 rows of the table is looked up by
 * the low nibble, then a tree of 15 blends picks the row by the high nibble's bits (vpblendvb
 * reads bit 7 of each byte, so bit j is shifted there first): a third of the byte loop's time
 * on Zen 3. */
static void qops_lut_avx2(const uint8_t *src, uint8_t *dst, ptrdiff_t n, const uint8_t *table) {
    ptrdiff_t i = 0;
    __m256i rows[16];
    for (int k = 0; k < 16; k++)
        rows[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16 * k)));
    const __m256i m0f = _mm256_set1_epi8(0x0F);
    for (; i + 32 <= n; i += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i lo = _mm256_and_si256(x, m0f), r[16];
        for (int k = 0; k < 16; k++) r[k] = _mm256_shuffle_epi8(rows[k], lo);
        __m256i b4 = _mm256_slli_epi16(x, 3), b5 = _mm256_slli_epi16(x, 2), b6 = _mm256_slli_epi16(x, 1);
        for (int k = 0; k < 8; k++) r[k] = _mm256_blendv_epi8(r[2 * k], r[2 * k + 1], b4);
        for (int k = 0; k < 4; k++) r[k] = _mm256_blendv_epi8(r[2 * k], r[2 * k + 1], b5);
        for (int k = 0; k < 2; k++) r[k] = _mm256_blendv_epi8(r[2 * k], r[2 * k + 1], b6);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_blendv_epi8(r[0], r[1], x));
    }
    qops_lut_scalar(src + i, dst + i, n - i, table);
}
#endif

/* dst[i] = table[src[i]] for i < n. */
static inline void qops_lut_apply(const uint8_t *src, uint8_t *dst, ptrdiff_t n,
                                  const uint8_t *table) {
#if defined(__AVX512BW__)
    if (qops_have_vbmi()) {
        qops_lut_vbmi(src, dst, n, table);
        return;
    }
#endif
#if defined(__AVX2__)
    qops_lut_avx2(src, dst, n, table);
#else
    qops_lut_scalar(src, dst, n, table);
#endif
}

/* Whether the lookup runs with VBMI's 64-byte permutes on this CPU (for qops.show_config, and
 * for the callers that prefer a table only then). */
static inline int qops_lut_vectorized(void) {
#if defined(__AVX512BW__)
    return qops_have_vbmi();
#else
    return 0;
#endif
}

/* The lookup tier of this build, named in the routes of the families using it: 2 AVX-512
 * (VBMI where the CPU has it, else the AVX2 kernel), 1 AVX2, 0 C. */
#if defined(__AVX512BW__)
#define QOPS_LUT_TIER 2
#elif defined(__AVX2__)
#define QOPS_LUT_TIER 1
#else
#define QOPS_LUT_TIER 0
#endif

/* The same lookup split into `threads` contiguous 64-byte-aligned chunks, one per OpenMP
 * thread (a header-level parallel loop, so every family shares it). */
static void qops_lut_apply_threads(const uint8_t *src, uint8_t *dst, ptrdiff_t n,
                                   const uint8_t *table, int threads) {
    (void)qops_lut_vectorized();   /* the one-time CPU check runs here, not racing in threads */
    if (threads <= 1 || n < 2 * 64) {
        qops_lut_apply(src, dst, n, table);
        return;
    }
    ptrdiff_t chunk = qops_chunk64(n, threads);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int t = 0; t < threads; t++) {
        ptrdiff_t start = (ptrdiff_t)t * chunk;
        if (start < n)
            qops_lut_apply(src + start, dst + start, n - start < chunk ? n - start : chunk, table);
    }
}
#endif
