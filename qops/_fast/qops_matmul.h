/* Quantized matmul's output stage (linear.pyx `matmul`; the reference is qops/_ref/linear.py
 * `matmul`, docs/semantics.md §9.1): r = f32(f64(acc) * P), then Q_fma with the output's
 * qparams. One loop per accumulator width and output type, branch-free so that GCC
 * vectorizes it (int32 -> double, the product, -> float, fma, round, clamp, narrow). */
#ifndef QOPS_MATMUL_H
#define QOPS_MATMUL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QOPS_MM_FINISH(NAME, ACC_T, OUT_T)                                                  \
    static void NAME(const ACC_T *acc, ptrdiff_t n, double P, float inv, float zpf,        \
                     float qmin, float qmax, OUT_T *out) {                                  \
        for (ptrdiff_t i = 0; i < n; i++) {                                                 \
            const float r = (float)((double)acc[i] * P);                                    \
            float y = rintf(fmaf(r, inv, zpf));                                             \
            y = y > qmin ? y : qmin;                                                        \
            y = y < qmax ? y : qmax;                                                        \
            out[i] = (OUT_T)(int32_t)y;                                                     \
        }                                                                                   \
    }

QOPS_MM_FINISH(qops_mm_finish_u8, int32_t, uint8_t)
QOPS_MM_FINISH(qops_mm_finish_s8, int32_t, int8_t)
QOPS_MM_FINISH(qops_mm_finish64_u8, int64_t, uint8_t)
QOPS_MM_FINISH(qops_mm_finish64_s8, int64_t, int8_t)


/* The int16 product (route matmul.int16, AVX2 builds): both operands centred at their zero
 * points fit int16 (-255..255), so vpmaddwd's products and pair sums are exact (2 * 255^2 <
 * 2^31), where u8 x s8 pair sums could saturate. B (one batch entry, N x K as b^T) is packed
 * in panels of 16 columns by pairs of k: [pair j][column c][2], zero past N and K; A rows are
 * read in pairs (K padded to even, the pad 0). A 6-row x 16-column tile broadcasts a pair of A
 * to all lanes and multiplies it by a pair row of the panel: 8 columns per vpmaddwd, no
 * horizontal sums. Rows of acc up to K = 33,025 are exact in int32 (longer K: route chunked).
 */
static inline ptrdiff_t qops_mm16_packed_len(ptrdiff_t N, ptrdiff_t K) {
    return ((N + 15) / 16) * ((K + 1) / 2) * 32;
}

/* Pack one entry of b (K x N raw 8-bit values, signed if sgn) less its zero point. */
static void qops_mm16_pack(const void *b, int sgn, ptrdiff_t K, ptrdiff_t N, int32_t zp,
                           int16_t *packed) {
    const ptrdiff_t K2 = (K + 1) / 2, P = (N + 15) / 16;
    const uint8_t *bu = (const uint8_t *)b;
    const int8_t *bs = (const int8_t *)b;
    for (ptrdiff_t p = 0; p < P; p++) {
        const ptrdiff_t cols = N - p * 16 < 16 ? N - p * 16 : 16;
        for (ptrdiff_t j = 0; j < K2; j++) {
            int16_t *dst = packed + (p * K2 + j) * 32;
            const ptrdiff_t k0 = 2 * j, k1 = 2 * j + 1;
            for (ptrdiff_t c = 0; c < 16; c++) {
                int16_t v0 = 0, v1 = 0;
                if (c < cols) {
                    const ptrdiff_t n = p * 16 + c;
                    v0 = (int16_t)((sgn ? bs[k0 * N + n] : bu[k0 * N + n]) - zp);
                    if (k1 < K)
                        v1 = (int16_t)((sgn ? bs[k1 * N + n] : bu[k1 * N + n]) - zp);
                }
                dst[2 * c] = v0;
                dst[2 * c + 1] = v1;
            }
        }
    }
}

/* rows x K raw 8-bit values of A (signed if sgn) less their zero point, as int16 rows of
 * 2 K2 values, the pad 0. */
static void qops_mm16_center(const void *a, int sgn, ptrdiff_t K, int32_t zp, ptrdiff_t rows,
                             int16_t *out) {
    const ptrdiff_t w = 2 * ((K + 1) / 2);
    const uint8_t *au = (const uint8_t *)a;
    const int8_t *as = (const int8_t *)a;
    const int16_t z = (int16_t)zp;
    for (ptrdiff_t r = 0; r < rows; r++) {
        int16_t *o = out + r * w;
        if (sgn)
            for (ptrdiff_t k = 0; k < K; k++) o[k] = (int16_t)(as[r * K + k] - z);
        else
            for (ptrdiff_t k = 0; k < K; k++) o[k] = (int16_t)(au[r * K + k] - z);
        if (w > K) o[K] = 0;
    }
}

#ifdef __AVX2__
#include <immintrin.h>


/* Store a tile row's 16 sums (cols of them) at dst. */
static inline void qops_mm16_store(int32_t *dst, __m256i lo, __m256i hi, ptrdiff_t cols) {
    if (cols == 16) {
        _mm256_storeu_si256((__m256i *)(void *)dst, lo);
        _mm256_storeu_si256((__m256i *)(void *)(dst + 8), hi);
    } else {
        int32_t tmp[16];
        _mm256_storeu_si256((__m256i *)(void *)tmp, lo);
        _mm256_storeu_si256((__m256i *)(void *)(tmp + 8), hi);
        memcpy(dst, tmp, (size_t)cols * 4);
    }
}

#define QOPS_MM16_ROW(R)                                                                    \
    {                                                                                       \
        int32_t pair;                                                                       \
        memcpy(&pair, a##R + 2 * j, 4);                                                     \
        const __m256i av = _mm256_set1_epi32(pair);                                         \
        c##R##0 = _mm256_add_epi32(c##R##0, _mm256_madd_epi16(av, b0));                     \
        c##R##1 = _mm256_add_epi32(c##R##1, _mm256_madd_epi16(av, b1));                     \
    }

/* acc[m, n] (int32, ldc) for rows [m0, m1) of A (int16, lda >= 2 K2, even-padded with 0):
 * tiles of 6 rows (the accumulators named, so that all twelve stay in registers). */
static void qops_mm16_rows(const int16_t *A, ptrdiff_t lda, ptrdiff_t m0, ptrdiff_t m1,
                           const int16_t *packed, ptrdiff_t N, ptrdiff_t K, int32_t *acc,
                           ptrdiff_t ldc) {
    const ptrdiff_t K2 = (K + 1) / 2, P = (N + 15) / 16;
    for (ptrdiff_t p = 0; p < P; p++) {
        const int16_t *B = packed + p * K2 * 32;
        const ptrdiff_t cols = N - p * 16 < 16 ? N - p * 16 : 16;
        for (ptrdiff_t m = m0; m < m1; m += 6) {
            const ptrdiff_t rows = m1 - m < 6 ? m1 - m : 6;
            /* rows past the block read row m again; their sums are not stored */
            const int16_t *a0 = A + m * lda;
            const int16_t *a1 = rows > 1 ? a0 + lda : a0, *a2 = rows > 2 ? a0 + 2 * lda : a0;
            const int16_t *a3 = rows > 3 ? a0 + 3 * lda : a0, *a4 = rows > 4 ? a0 + 4 * lda : a0;
            const int16_t *a5 = rows > 5 ? a0 + 5 * lda : a0;
            __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00;
            __m256i c20 = c00, c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00;
            __m256i c50 = c00, c51 = c00;
            for (ptrdiff_t j = 0; j < K2; j++) {
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)(B + j * 32));
                const __m256i b1 = _mm256_loadu_si256(
                    (const __m256i *)(const void *)(B + j * 32 + 16));
                QOPS_MM16_ROW(0) QOPS_MM16_ROW(1) QOPS_MM16_ROW(2)
                QOPS_MM16_ROW(3) QOPS_MM16_ROW(4) QOPS_MM16_ROW(5)
            }
            int32_t *dst = acc + m * ldc + p * 16;
            qops_mm16_store(dst, c00, c01, cols);
            if (rows > 1) qops_mm16_store(dst + ldc, c10, c11, cols);
            if (rows > 2) qops_mm16_store(dst + 2 * ldc, c20, c21, cols);
            if (rows > 3) qops_mm16_store(dst + 3 * ldc, c30, c31, cols);
            if (rows > 4) qops_mm16_store(dst + 4 * ldc, c40, c41, cols);
            if (rows > 5) qops_mm16_store(dst + 5 * ldc, c50, c51, cols);
        }
    }
}
#else
/* (builds without AVX2 take route matmul.gemm; this keeps the module's symbols whole) */
static void qops_mm16_rows(const int16_t *A, ptrdiff_t lda, ptrdiff_t m0, ptrdiff_t m1,
                           const int16_t *packed, ptrdiff_t N, ptrdiff_t K, int32_t *acc,
                           ptrdiff_t ldc) {
    const ptrdiff_t K2 = (K + 1) / 2;
    for (ptrdiff_t m = m0; m < m1; m++)
        for (ptrdiff_t n = 0; n < N; n++) {
            const int16_t *B = packed + (n / 16) * K2 * 32 + 2 * (n % 16);
            int32_t s = 0;
            for (ptrdiff_t j = 0; j < K2; j++)
                s += A[m * lda + 2 * j] * B[j * 32] + A[m * lda + 2 * j + 1] * B[j * 32 + 1];
            acc[m * ldc + n] = s;
        }
}
#endif

#endif
