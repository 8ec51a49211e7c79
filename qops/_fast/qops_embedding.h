/* Embedding-bag kernels (see embedding.pyx and qops/_ref/embedding.py for the contract).
 *
 * One bag is summed into its own output row, entry by entry in index order, each entry as
 * fbgemm's EmbeddingSpMDM adds it: acc = fmaf(scale * w, q, acc + bias * w). The row loops
 * are plain and stride-1 so GCC turns fmaf into vfmadd231ps on FMA targets (the build has
 * -ffp-contract=off, so nothing else is fused). Rows a few entries ahead are prefetched:
 * tables are far larger than the caches and each entry is a random row. */
#ifndef QOPS_EMBEDDING_H
#define QOPS_EMBEDDING_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define QOPS_EB_SUM 0
#define QOPS_EB_MEAN 1
#define QOPS_EB_MAX 2
#define QOPS_EB_PREFETCH 16     /* entries ahead, as fbgemm's lookups */

/* Every cache line of the row of `nbytes` bytes at p. */
static inline void qops_eb_prefetch(const void *p, ptrdiff_t nbytes) {
    const char *c = (const char *)p;
    for (ptrdiff_t o = 0; o < nbytes; o += 64)
        __builtin_prefetch(c + o);
    __builtin_prefetch(c + nbytes - 1);
}

static inline void qops_eb_add_u8(float *acc, const uint8_t *q, ptrdiff_t d, float s, float c) {
    for (ptrdiff_t j = 0; j < d; j++)
        acc[j] = fmaf(s, (float)q[j], acc[j] + c);
}

#if defined(__AVX2__)
/* 16 values (8 bytes) of a 4-bit row as two vectors of 8 floats, in element order. */
static inline void qops_eb_nibbles16(const uint8_t *p, __m256 *lo, __m256 *hi) {
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    __m128i m = _mm_set1_epi8(15);
    __m128i l = _mm_and_si128(b, m);
    __m128i h = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    __m128i e = _mm_unpacklo_epi8(l, h);           /* l0 h0 l1 h1 ...: element order */
    *lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(e));
    *hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(e, 8)));
}
#endif

static inline void qops_eb_add_u4(float *acc, const uint8_t *q, ptrdiff_t d, float s, float c) {
    ptrdiff_t j = 0;
#if defined(__AVX2__)
    const __m256 vs = _mm256_set1_ps(s), vc = _mm256_set1_ps(c);
    for (; j + 16 <= d; j += 16) {
        __m256 a, b;
        qops_eb_nibbles16(q + j / 2, &a, &b);
        _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(vs, a, _mm256_add_ps(_mm256_loadu_ps(acc + j), vc)));
        _mm256_storeu_ps(acc + j + 8,
                         _mm256_fmadd_ps(vs, b, _mm256_add_ps(_mm256_loadu_ps(acc + j + 8), vc)));
    }
#endif
    for (; j < d; j++)
        acc[j] = fmaf(s, (float)((q[j >> 1] >> ((j & 1) * 4)) & 15), acc[j] + c);
}

/* The dequantized value of the max mode: fmaf(s, q, 0 + bias), what a one-entry sum gives. */
static inline void qops_eb_max_u8(float *acc, const uint8_t *q, ptrdiff_t d, float s, float c,
                                  int first) {
    const float c0 = 0.0f + c;
    if (first) {
        for (ptrdiff_t j = 0; j < d; j++)
            acc[j] = fmaf(s, (float)q[j], c0);
        return;
    }
    for (ptrdiff_t j = 0; j < d; j++) {
        float v = fmaf(s, (float)q[j], c0);
        acc[j] = v > acc[j] ? v : acc[j];
    }
}

static inline void qops_eb_max_u4(float *acc, const uint8_t *q, ptrdiff_t d, float s, float c,
                                  int first) {
    const float c0 = 0.0f + c;
    for (ptrdiff_t j = 0; j < d; j++) {
        float v = fmaf(s, (float)((q[j >> 1] >> ((j & 1) * 4)) & 15), c0);
        acc[j] = (first || v > acc[j]) ? v : acc[j];
    }
}

#if defined(__AVX2__)
/* 64 values of an 8-bit row (64 bytes) or a 4-bit row (32 bytes) as 8 vectors of 8 floats. */
static inline __attribute__((always_inline)) void qops_eb_load64(int bits, const uint8_t *p, __m256 v[8]) {
    if (bits == 8) {
        for (int k = 0; k < 8; k++)
            v[k] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * k))));
    } else {
        for (int k = 0; k < 4; k++)
            qops_eb_nibbles16(p + 8 * k, &v[2 * k], &v[2 * k + 1]);
    }
}

/* 64 columns from c0 of the sum (or weighted sum) of one bag, held in eight registers over
 * all the bag's entries, so the accumulators never go through memory. Same operations, in
 * the same order per column, as the row loops. Returns the entry count. */
static inline __attribute__((always_inline)) ptrdiff_t qops_eb_block64(
        int bits, const uint8_t *table, ptrdiff_t row_bytes, const int64_t *idx, ptrdiff_t lo,
        ptrdiff_t hi, ptrdiff_t n_idx, const float *psw, int64_t padding_idx, float *out,
        ptrdiff_t c0, int prefetch) {
    const ptrdiff_t vals = row_bytes - 8;
    const ptrdiff_t off = bits == 8 ? c0 : c0 / 2;
    ptrdiff_t count = 0;
    __m256 acc[8], v[8];
    for (int k = 0; k < 8; k++)
        acc[k] = _mm256_setzero_ps();
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (prefetch && i + QOPS_EB_PREFETCH < n_idx)
            qops_eb_prefetch(table + idx[i + QOPS_EB_PREFETCH] * row_bytes, row_bytes);
        int64_t r = idx[i];
        if (r == padding_idx)
            continue;
        const uint8_t *q = table + r * row_bytes;
        float scale, bias;
        memcpy(&scale, q + vals, sizeof(float));
        memcpy(&bias, q + vals + sizeof(float), sizeof(float));
        if (psw) {
            scale = scale * psw[i];
            bias = bias * psw[i];
        }
        const __m256 vs = _mm256_set1_ps(scale), vc = _mm256_set1_ps(bias);
        qops_eb_load64(bits, q + off, v);
        for (int k = 0; k < 8; k++)
            acc[k] = _mm256_fmadd_ps(vs, v[k], _mm256_add_ps(acc[k], vc));
        count++;
    }
    for (int k = 0; k < 8; k++)
        _mm256_storeu_ps(out + c0 + 8 * k, acc[k]);
    return count;
}

/* The bag's sum for D a multiple of 64; D = 64 (one block at a constant offset) gets its own
 * loop so that every load has a constant displacement. */
static inline __attribute__((always_inline)) ptrdiff_t qops_eb_sum64(
        int bits, const uint8_t *table, ptrdiff_t row_bytes, const int64_t *idx, ptrdiff_t lo,
        ptrdiff_t hi, ptrdiff_t n_idx, const float *psw, int64_t padding_idx, float *out,
        ptrdiff_t d) {
    if (d == 64)
        return qops_eb_block64(bits, table, row_bytes, idx, lo, hi, n_idx, psw, padding_idx,
                               out, 0, 1);
    ptrdiff_t count = 0;
    for (ptrdiff_t c0 = 0; c0 < d; c0 += 64)
        count = qops_eb_block64(bits, table, row_bytes, idx, lo, hi, n_idx, psw, padding_idx,
                                out, c0, c0 == 0);
    return count;
}
#endif

/* One bag of a quantized table of fused rows (values, then float32 scale and bias, as
 * fbgemm's rows keep them: one row is one or two cache lines, scale and bias included):
 * entries [lo, hi) of idx into out[0:d]. */
static inline void qops_eb_bag_q(int bits, const uint8_t *table, ptrdiff_t row_bytes,
                                 const int64_t *idx, ptrdiff_t lo, ptrdiff_t hi,
                                 ptrdiff_t n_idx, const float *psw, int mode,
                                 int64_t padding_idx, float *out, ptrdiff_t d) {
    const ptrdiff_t vals = row_bytes - 8;
    ptrdiff_t count = 0;
#if defined(__AVX2__)
    if (mode != QOPS_EB_MAX && d % 64 == 0 && d > 0) {
        /* constant bits and weights at each call: four specialized loops */
        if (bits == 8 && psw)
            count = qops_eb_sum64(8, table, row_bytes, idx, lo, hi, n_idx, psw, padding_idx,
                                  out, d);
        else if (bits == 8)
            count = qops_eb_sum64(8, table, row_bytes, idx, lo, hi, n_idx, NULL, padding_idx,
                                  out, d);
        else if (psw)
            count = qops_eb_sum64(4, table, row_bytes, idx, lo, hi, n_idx, psw, padding_idx,
                                  out, d);
        else
            count = qops_eb_sum64(4, table, row_bytes, idx, lo, hi, n_idx, NULL, padding_idx,
                                  out, d);
        hi = lo;                    /* done: only the mean's division is left */
    } else
#endif
    memset(out, 0, (size_t)d * sizeof(float));
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (i + QOPS_EB_PREFETCH < n_idx) {
            qops_eb_prefetch(table + idx[i + QOPS_EB_PREFETCH] * row_bytes, row_bytes);
        }
        int64_t r = idx[i];
        if (r == padding_idx)
            continue;
        const uint8_t *q = table + r * row_bytes;
        float scale, bias;
        memcpy(&scale, q + vals, sizeof(float));
        memcpy(&bias, q + vals + sizeof(float), sizeof(float));
        if (mode == QOPS_EB_MAX) {
            if (bits == 8)
                qops_eb_max_u8(out, q, d, scale, bias, count == 0);
            else
                qops_eb_max_u4(out, q, d, scale, bias, count == 0);
        } else {
            float w = psw ? psw[i] : 1.0f;
            float s = scale * w, c = bias * w;
            if (bits == 8)
                qops_eb_add_u8(out, q, d, s, c);
            else
                qops_eb_add_u4(out, q, d, s, c);
        }
        count++;
    }
    if (mode == QOPS_EB_MEAN && count > 0) {
        const float n = (float)count;
        for (ptrdiff_t j = 0; j < d; j++)
            out[j] = out[j] / n;
    }
}

#if defined(__AVX2__)
/* The float sum for D a multiple of 64, accumulated in registers as qops_eb_sum64. */
static inline ptrdiff_t qops_eb_sum64_f32(const float *table, const int64_t *idx, ptrdiff_t lo,
                                          ptrdiff_t hi, ptrdiff_t n_idx, const float *psw,
                                          int64_t padding_idx, float *out, ptrdiff_t d) {
    ptrdiff_t count = 0;
    for (ptrdiff_t c0 = 0; c0 < d; c0 += 64) {
        __m256 acc[8];
        for (int k = 0; k < 8; k++)
            acc[k] = _mm256_setzero_ps();
        count = 0;
        for (ptrdiff_t i = lo; i < hi; i++) {
            if (c0 == 0 && i + QOPS_EB_PREFETCH < n_idx)
                qops_eb_prefetch(table + idx[i + QOPS_EB_PREFETCH] * d,
                                 d * (ptrdiff_t)sizeof(float));
            int64_t r = idx[i];
            if (r == padding_idx)
                continue;
            const float *row = table + r * d + c0;
            if (!psw) {
                for (int k = 0; k < 8; k++)
                    acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(row + 8 * k));
            } else if (padding_idx < 0) {
                const __m256 w = _mm256_set1_ps(psw[i]);
                for (int k = 0; k < 8; k++)
                    acc[k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * k), acc[k]);
            } else {
                const __m256 w = _mm256_set1_ps(psw[i]);
                for (int k = 0; k < 8; k++)
                    acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(w, _mm256_loadu_ps(row + 8 * k)));
            }
            count++;
        }
        for (int k = 0; k < 8; k++)
            _mm256_storeu_ps(out + c0 + 8 * k, acc[k]);
    }
    return count;
}
#endif

/* One bag of a float32 table (PyTorch's float EmbeddingBag). */
static inline void qops_eb_bag_f32(const float *table, const int64_t *idx, ptrdiff_t lo,
                                   ptrdiff_t hi, ptrdiff_t n_idx, const float *psw, int mode,
                                   int64_t padding_idx, float *out, ptrdiff_t d) {
    ptrdiff_t count = 0;
#if defined(__AVX2__)
    if (mode != QOPS_EB_MAX && d % 64 == 0 && d > 0) {
        count = qops_eb_sum64_f32(table, idx, lo, hi, n_idx, psw, padding_idx, out, d);
        hi = lo;                    /* done: only the mean's division is left */
    } else
#endif
    memset(out, 0, (size_t)d * sizeof(float));
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (i + QOPS_EB_PREFETCH < n_idx) {
            qops_eb_prefetch(table + idx[i + QOPS_EB_PREFETCH] * d, d * (ptrdiff_t)sizeof(float));
        }
        int64_t r = idx[i];
        if (r == padding_idx)
            continue;
        const float *row = table + r * d;
        if (mode == QOPS_EB_MAX) {
            for (ptrdiff_t j = 0; j < d; j++)
                out[j] = (count == 0 || row[j] > out[j]) ? row[j] : out[j];
        } else if (psw && padding_idx < 0) {
            const float w = psw[i];
            for (ptrdiff_t j = 0; j < d; j++)
                out[j] = fmaf(w, row[j], out[j]);
        } else if (psw) {
            /* PyTorch's path with a padding_idx rounds the product, then the sum */
            const float w = psw[i];
            for (ptrdiff_t j = 0; j < d; j++)
                out[j] = out[j] + w * row[j];
        } else {
            for (ptrdiff_t j = 0; j < d; j++)
                out[j] = out[j] + row[j];
        }
        count++;
    }
    if (mode == QOPS_EB_MEAN && count > 0) {
        const float n = (float)count;
        for (ptrdiff_t j = 0; j < d; j++)
            out[j] = out[j] / n;
    }
}

/* Row-wise quantization of one float row (the float_qparams observer, then quantize). */
static inline void qops_eb_quantize_row(const float *x, ptrdiff_t d, float qmax, float eps,
                                        uint8_t *q, float *scale, float *zero_point) {
    float lo = x[0], hi = x[0];
    for (ptrdiff_t j = 1; j < d; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    float s = (hi - lo) / qmax;
    s = s > eps ? s : 1.0f;
    float z = (-1.0f * lo) / s;
    float inv = 1.0f / s;
    for (ptrdiff_t j = 0; j < d; j++) {
        float t = nearbyintf(x[j] * inv + z);      /* two roundings: no fma (-ffp-contract=off) */
        t = t < 0.0f ? 0.0f : (t > qmax ? qmax : t);
        q[j] = (uint8_t)t;
    }
    *scale = s;
    *zero_point = z;
}

#endif
