/* Embedding-bag kernels (see embedding.pyx and qops/_ref/embedding.py for the contract).
 *
 * One bag is summed into its own output row, entry by entry in index order, each entry as
 * fbgemm's EmbeddingSpMDM adds it: acc = fmaf(scale * w, q, acc + bias * w). The row loops
 * are plain and stride-1 so GCC turns fmaf into vfmadd231ps on FMA targets (the build has
 * -ffp-contract=off, so nothing else is fused). Rows a few entries ahead are prefetched:
 * tables are far larger than the caches and each entry is a random row.
 *
 * The loops over a pass's nv accumulators carry `#pragma GCC unroll 8`: left to itself GCC
 * did not unroll them at nv = 8 (D = 64), kept acc[] in memory and, per bag, zeroed it with
 * rep stos and stored it through the stack. */
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
/* `flags` of the lookups: prefetch rows ahead (tables past the caches); store the bags'
 * sums with non-temporal stores (outputs past the caches, rows 32-byte aligned: the stores
 * then skip the read of each output line, a tenth of the memory traffic of an 8-bit lookup
 * of D = 64, and most of it for short bags of tables in cache; the caller runs qops_eb_fence
 * before the results are read) */
#define QOPS_EB_PF 1
#define QOPS_EB_NT 2
#ifndef QOPS_EB_PREFETCH
#if defined(__AVX512F__)
/* entries ahead: 16 as fbgemm's lookups on AVX2 builds (Zen 3); AVX-512 builds add a row in
 * fewer cycles, so the same memory latency needs rows prefetched further ahead */
#define QOPS_EB_PREFETCH 32
#else
#define QOPS_EB_PREFETCH 16
#endif
#endif
/* entries ahead for 4-bit rows (40 bytes at D = 64, one or two lines): twice as many rows in
 * flight for the same lines; measured 1.3x faster than 16 on a 40 MB table */
#define QOPS_EB_PREFETCH4 32

/* Every cache line of the row of `nbytes` bytes at p: one prefetch each 64 bytes from its
 * first byte and one at its last (rows need not start a line: a 256-byte row at 16 bytes past
 * a line spans five). The last is left out when it is at most 7 bytes past the one before:
 * for rows starting 8-byte aligned, as numpy's tables of fused rows (D % 8 == 0) do, it is
 * then in that line (8-bit rows of D = 64 or 128). Always inlined, so that where nbytes is
 * a constant (the register paths) the prefetches are straight-line code: measured, a loop of
 * them (a trip count per row) took 10% more time on a 256 MB table. Inlined also because as
 * a call it would cost the callers' accumulators, which no ymm register keeps across it. */
static inline __attribute__((always_inline)) void qops_eb_prefetch(const void *p,
                                                                   ptrdiff_t nbytes) {
    const char *c = (const char *)p;
    for (ptrdiff_t o = 0; o < nbytes; o += 64)
        __builtin_prefetch(c + o);
    if ((nbytes - 1) % 64 > 7)
        __builtin_prefetch(c + nbytes - 1);
}

/* The entry whose row to prefetch while entry i is added: `dist` on, the last entry near
 * the end (a select, not a branch, in the hot loops). */
static inline ptrdiff_t qops_eb_ahead(ptrdiff_t i, ptrdiff_t n_idx, ptrdiff_t dist) {
    return i + dist < n_idx ? i + dist : n_idx - 1;
}

/* The first position in [lo, hi) whose index is outside [0, n_rows), or -1. Run on a bag's
 * entries before any of its rows is read: a plain OR of unsigned compares GCC vectorizes, and
 * the entries it loads are the ones the bag reads next. */
static inline ptrdiff_t qops_eb_first_bad(const int64_t *idx, ptrdiff_t lo, ptrdiff_t hi,
                                          int64_t n_rows) {
    uint64_t any = 0;
    for (ptrdiff_t i = lo; i < hi; i++)
        any |= (uint64_t)idx[i] >= (uint64_t)n_rows;
    if (!any)
        return -1;
    for (ptrdiff_t i = lo; i < hi; i++)
        if ((uint64_t)idx[i] >= (uint64_t)n_rows)
            return i;
    return -1;
}

/* *first = min(*first, pos), from any thread (bags run in any order; the caller reports the
 * first bad position in index order). */
static inline void qops_eb_note_bad(int64_t *first, int64_t pos) {
    int64_t cur = __atomic_load_n(first, __ATOMIC_RELAXED);
    while (pos < cur && !__atomic_compare_exchange_n(first, &cur, pos, 0, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED)) {
    }
}

/* The scale and bias of the fused row at q (its values `vals` bytes long), each times the
 * entry's per-sample weight when there are weights (fbgemm's scale * w, bias * w). */
static inline __attribute__((always_inline)) void qops_eb_row_terms(
        const uint8_t *q, ptrdiff_t vals, const float *psw, ptrdiff_t i, float *scale,
        float *bias) {
    memcpy(scale, q + vals, sizeof(float));
    memcpy(bias, q + vals + sizeof(float), sizeof(float));
    if (psw) {
        *scale = *scale * psw[i];
        *bias = *bias * psw[i];
    }
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
/* nv vectors of 8 values from p: bytes of an 8-bit row, or nibbles of a 4-bit row. */
static inline __attribute__((always_inline)) void qops_eb_loadv(int bits, int nv,
                                                                const uint8_t *p, __m256 *v) {
    if (bits == 8) {
        #pragma GCC unroll 8
        for (int k = 0; k < nv; k++)
            v[k] = _mm256_cvtepi32_ps(
                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * k))));
        return;
    }
    /* 16 nibbles from 8 bytes as the even columns, then the odd ones: the accumulators of
     * a pair hold their 16 columns in that order and qops_eb_store puts them back */
    int k = 0;
    for (; k + 2 <= nv; k += 2) {
        __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 4 * k)));
        v[k] = _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(15)));
        v[k + 1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4));
    }
    if (k < nv) {               /* 8 nibbles: 4 bytes, no read past the row's values */
        int32_t w;
        memcpy(&w, p + 4 * k, sizeof w);
        __m128i b = _mm_cvtsi32_si128(w), m = _mm_set1_epi8(15);
        __m128i e = _mm_unpacklo_epi8(_mm_and_si128(b, m),
                                      _mm_and_si128(_mm_srli_epi16(b, 4), m));
        v[k] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(e));
    }
}

static inline __attribute__((always_inline)) void qops_eb_put(float *p, __m256 v, int stream) {
    if (stream)
        _mm256_stream_ps(p, v);
    else
        _mm256_storeu_ps(p, v);
}

/* nv accumulators to out[0:8 nv]; 4-bit pairs back from even-then-odd column order. */
static inline __attribute__((always_inline)) void qops_eb_store(int bits, int nv, float *out,
                                                                const __m256 *acc,
                                                                int stream) {
    int k = 0;
    if (bits == 4) {
        #pragma GCC unroll 8
        for (; k + 2 <= nv; k += 2) {
            __m256 lo = _mm256_unpacklo_ps(acc[k], acc[k + 1]);    /* 0-3 | 8-11 */
            __m256 hi = _mm256_unpackhi_ps(acc[k], acc[k + 1]);    /* 4-7 | 12-15 */
            qops_eb_put(out + 8 * k, _mm256_permute2f128_ps(lo, hi, 0x20), stream);
            qops_eb_put(out + 8 * k + 8, _mm256_permute2f128_ps(lo, hi, 0x31), stream);
        }
    }
    #pragma GCC unroll 16
    for (; k < nv; k++)
        qops_eb_put(out + 8 * k, acc[k], stream);
}

#if defined(__AVX512F__)
/* Rows in 512-bit vectors: nz accumulators of 16 columns (nz <= 8: 32 registers hold a
 * D = 128 row's accumulators and its loads), the same operations per column as the 256-bit
 * loops, half their instructions. 4-bit rows go in pairs of accumulators (nz even), as in
 * qops_eb_loadv: 16 bytes of nibbles are the even columns of 32, then the odd ones. */
#define QOPS_EB_INLINE static inline __attribute__((always_inline))

/* The row of entry i (QOPS_EB_PREFETCH on) prefetched: pf_bytes from column c0, with pf_tail
 * also its scale and bias. */
QOPS_EB_INLINE void qops_eb_pf512(int bits, const uint8_t *table, ptrdiff_t row_bytes,
                                  const int64_t *idx, ptrdiff_t i, ptrdiff_t n_idx, ptrdiff_t c0,
                                  ptrdiff_t pf_bytes, int pf_tail) {
    const ptrdiff_t dist = bits == 4 ? QOPS_EB_PREFETCH4 : QOPS_EB_PREFETCH;
    const uint8_t *ahead = table + idx[qops_eb_ahead(i, n_idx, dist)] * row_bytes;
    qops_eb_prefetch(ahead + c0 * bits / 8, pf_bytes);
    if (pf_tail)
        qops_eb_prefetch(ahead + row_bytes - 8, 8);
}

/* Entry i's columns [c0, c0 + 16 nz) into acc (qops_eb_entry); 1 if counted (not padding). */
QOPS_EB_INLINE int qops_eb_entry512(int bits, int nz, const uint8_t *table,
                                    ptrdiff_t row_bytes, ptrdiff_t c0, const int64_t *idx,
                                    ptrdiff_t i, const float *psw, int64_t padding_idx,
                                    __m512 *acc) {
    const int64_t r = idx[i];
    if (r == padding_idx)
        return 0;
    const uint8_t *q = table + r * row_bytes;
    float scale, bias;
    qops_eb_row_terms(q, row_bytes - 8, psw, i, &scale, &bias);
    const __m512 vs = _mm512_set1_ps(scale), vc = _mm512_set1_ps(bias);
    if (bits == 4) {
        #pragma GCC unroll 4
        for (int k = 0; k < nz; k += 2) {
            __m512i w = _mm512_cvtepu8_epi32(
                _mm_loadu_si128((const __m128i *)(q + c0 / 2 + 8 * k)));
            __m512 e = _mm512_cvtepi32_ps(_mm512_and_si512(w, _mm512_set1_epi32(15)));
            __m512 o = _mm512_cvtepi32_ps(_mm512_srli_epi32(w, 4));
            acc[k] = _mm512_fmadd_ps(vs, e, _mm512_add_ps(acc[k], vc));
            acc[k + 1] = _mm512_fmadd_ps(vs, o, _mm512_add_ps(acc[k + 1], vc));
        }
        return 1;
    }
    #pragma GCC unroll 8
    for (int k = 0; k < nz; k++) {
        __m512 v = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + c0 + 16 * k))));
        acc[k] = _mm512_fmadd_ps(vs, v, _mm512_add_ps(acc[k], vc));
    }
    return 1;
}

/* 16 values to out as two 256-bit halves (streamed output rows are only 32-byte aligned). */
QOPS_EB_INLINE void qops_eb_put512(float *out, __m512 v, int stream) {
    qops_eb_put(out, _mm512_castps512_ps256(v), stream);
    qops_eb_put(out + 8, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)),
                stream);
}

/* The bag's nz accumulators (divided by count for the mean) to out[0:16 nz], 4-bit pairs
 * back from even-then-odd column order. */
QOPS_EB_INLINE void qops_eb_store512(int bits, int nz, float *out, __m512 *acc,
                                     ptrdiff_t count, int mean, int stream) {
    if (mean && count > 0) {
        const __m512 n = _mm512_set1_ps((float)count);
        #pragma GCC unroll 8
        for (int k = 0; k < nz; k++)
            acc[k] = _mm512_div_ps(acc[k], n);
    }
    if (bits == 4) {
        const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                            16, 0);
        const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                            25, 9, 24, 8);
        #pragma GCC unroll 4
        for (int k = 0; k < nz; k += 2) {
            qops_eb_put512(out + 16 * k, _mm512_permutex2var_ps(acc[k], lo, acc[k + 1]),
                           stream);
            qops_eb_put512(out + 16 * k + 16, _mm512_permutex2var_ps(acc[k], hi, acc[k + 1]),
                           stream);
        }
        return;
    }
    #pragma GCC unroll 8
    for (int k = 0; k < nz; k++)
        qops_eb_put512(out + 16 * k, acc[k], stream);
}

/* qops_eb_cols in 512-bit vectors, 16 nz columns from c0 (see above). */
QOPS_EB_INLINE ptrdiff_t qops_eb_cols512(
        int bits, int nz, const uint8_t *table, ptrdiff_t row_bytes, const int64_t *idx,
        ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t n_idx, const float *psw, int64_t padding_idx,
        int mean, float *out, ptrdiff_t c0, int prefetch, ptrdiff_t pf_bytes, int pf_tail,
        int stream) {
    ptrdiff_t count = 0;
    __m512 acc[8];
    #pragma GCC unroll 8
    for (int k = 0; k < nz; k++)
        acc[k] = _mm512_setzero_ps();
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (prefetch)
            qops_eb_pf512(bits, table, row_bytes, idx, i, n_idx, c0, pf_bytes, pf_tail);
        count += qops_eb_entry512(bits, nz, table, row_bytes, c0, idx, i, psw, padding_idx,
                                  acc);
    }
    qops_eb_store512(bits, nz, out + c0, acc, count, mean, stream);
    return count;
}

/* qops_eb_cols2 in 512-bit vectors, 16 nz columns (nz <= 2) of each of the two bags. */
QOPS_EB_INLINE void qops_eb_cols2_512(int bits, int nz, const uint8_t *table,
                                      ptrdiff_t row_bytes, const int64_t *idx, ptrdiff_t lo,
                                      ptrdiff_t mid, ptrdiff_t hi, const float *psw,
                                      int64_t padding_idx, int mean, float *out0, ptrdiff_t d,
                                      int stream) {
    __m512 a0[2], a1[2];
    ptrdiff_t n0 = 0, n1 = 0;
    #pragma GCC unroll 2
    for (int k = 0; k < nz; k++) {
        a0[k] = _mm512_setzero_ps();
        a1[k] = _mm512_setzero_ps();
    }
    const ptrdiff_t len0 = mid - lo, len1 = hi - mid;
    const ptrdiff_t both = len0 < len1 ? len0 : len1;
    for (ptrdiff_t j = 0; j < both; j++) {
        n0 += qops_eb_entry512(bits, nz, table, row_bytes, 0, idx, lo + j, psw, padding_idx,
                               a0);
        n1 += qops_eb_entry512(bits, nz, table, row_bytes, 0, idx, mid + j, psw, padding_idx,
                               a1);
    }
    for (ptrdiff_t j = both; j < len0; j++)
        n0 += qops_eb_entry512(bits, nz, table, row_bytes, 0, idx, lo + j, psw, padding_idx,
                               a0);
    for (ptrdiff_t j = both; j < len1; j++)
        n1 += qops_eb_entry512(bits, nz, table, row_bytes, 0, idx, mid + j, psw, padding_idx,
                               a1);
    qops_eb_store512(bits, nz, out0, a0, n0, mean, stream);
    qops_eb_store512(bits, nz, out0 + d, a1, n1, mean, stream);
}

#endif

/* Columns [c0, c0 + 8 nv) of one bag's sum (or weighted sum), the nv accumulators (at most
 * 8, or 16 for 8-bit rows) held in registers over all the bag's entries: the same operations,
 * in the same order per column, as the row loops. nv, bits and whether there are weights are constants at each call, so
 * every load has a constant displacement. The mean's division is done before the store.
 * With `prefetch`, the row QOPS_EB_PREFETCH entries ahead is prefetched: pf_bytes from the
 * pass's first column (the whole row in one pass) and, with pf_tail, the row's scale and
 * bias, which every pass reads (sizes constant at each call). Returns the entry count. */
static inline __attribute__((always_inline)) ptrdiff_t qops_eb_cols(
        int bits, int nv, const uint8_t *table, ptrdiff_t row_bytes, const int64_t *idx,
        ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t n_idx, const float *psw, int64_t padding_idx,
        int mean, float *out, ptrdiff_t c0, int prefetch, ptrdiff_t pf_bytes, int pf_tail,
        int stream) {
#if defined(__AVX512F__)
    if (nv % (16 / bits) == 0)       /* whole 16-column vectors (4-bit: pairs of them) */
        return qops_eb_cols512(bits, nv / 2, table, row_bytes, idx, lo, hi, n_idx, psw, padding_idx,
                               mean, out, c0, prefetch, pf_bytes, pf_tail, stream);
#endif
    const ptrdiff_t vals = row_bytes - 8;
    const uint8_t *base = table + (bits == 8 ? c0 : c0 / 2);
    ptrdiff_t count = 0;
    __m256 acc[16], v[2];
    #pragma GCC unroll 16
    for (int k = 0; k < nv; k++)
        acc[k] = _mm256_setzero_ps();
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (prefetch) {
            const ptrdiff_t dist = bits == 4 ? QOPS_EB_PREFETCH4 : QOPS_EB_PREFETCH;
            const uint8_t *ahead = table + idx[qops_eb_ahead(i, n_idx, dist)] * row_bytes;
            qops_eb_prefetch(ahead + c0 * bits / 8, pf_bytes);
            if (pf_tail)
                qops_eb_prefetch(ahead + vals, 8);
        }
        const int64_t r = idx[i];
        if (r == padding_idx)
            continue;
        const uint8_t *q = table + r * row_bytes;
        float scale, bias;
        qops_eb_row_terms(q, vals, psw, i, &scale, &bias);
        const __m256 vs = _mm256_set1_ps(scale), vc = _mm256_set1_ps(bias);
        const uint8_t *p = base + r * row_bytes;
        /* two vectors at a time, each used as soon as loaded: eight accumulators and all
         * the loaded vectors would not fit in the 16 registers and GCC would spill; with
         * sixteen (8-bit D = 128 in one pass) one at a time, and GCC spills a few anyway */
        if (bits == 8 && nv > 8) {
            #pragma GCC unroll 16
            for (int k = 0; k < nv; k++) {
                qops_eb_loadv(bits, 1, p + 8 * k, v);
                acc[k] = _mm256_fmadd_ps(vs, v[0], _mm256_add_ps(acc[k], vc));
            }
            count++;
            continue;
        }
        #pragma GCC unroll 8
        for (int k = 0; k < nv; k += 2) {
            qops_eb_loadv(bits, nv - k < 2 ? 1 : 2, p + (bits == 8 ? 8 * k : 4 * k), v);
            acc[k] = _mm256_fmadd_ps(vs, v[0], _mm256_add_ps(acc[k], vc));
            if (k + 1 < nv)
                acc[k + 1] = _mm256_fmadd_ps(vs, v[1], _mm256_add_ps(acc[k + 1], vc));
        }
        count++;
    }
    if (mean && count > 0) {
        const __m256 n = _mm256_set1_ps((float)count);
        #pragma GCC unroll 16
        for (int k = 0; k < nv; k++)
            acc[k] = _mm256_div_ps(acc[k], n);
    }
    qops_eb_store(bits, nv, out + c0, acc, stream);
    return count;
}

/* The bag's sum or mean for D a multiple of 8: up to 64 columns in one pass over the bag,
 * wider rows in passes of 64 columns and a last one of the rest. */
static inline __attribute__((always_inline)) void qops_eb_sum8(
        int bits, const uint8_t *table, ptrdiff_t row_bytes, const int64_t *idx, ptrdiff_t lo,
        ptrdiff_t hi, ptrdiff_t n_idx, const float *psw, int64_t padding_idx, int mean,
        float *out, ptrdiff_t d, int flags) {
    const int prefetch = flags & QOPS_EB_PF, stream = flags & QOPS_EB_NT;
/* a pass of NV vectors from column C0 of rows ROW bytes long, prefetching its own values
 * (8 NV of them) and the row's scale and bias */
#define QOPS_EB_COLS(NV, C0, ROW) \
    qops_eb_cols(bits, NV, table, ROW, idx, lo, hi, n_idx, psw, padding_idx, mean, out, C0, \
                 prefetch, 8 * NV * bits / 8, 1, stream)
/* the whole row (D = 8 NV) in one pass, its size a constant (what row_bytes is) */
#define QOPS_EB_COLS1(NV) \
    qops_eb_cols(bits, NV, table, 8 * NV * bits / 8 + 8, idx, lo, hi, n_idx, psw, padding_idx, \
                 mean, out, 0, prefetch, 8 * NV * bits / 8 + 8, 0, stream)
    if (d <= 64) {
        switch (d / 8) {
        case 1: QOPS_EB_COLS1(1); break;
        case 2: QOPS_EB_COLS1(2); break;
        case 3: QOPS_EB_COLS1(3); break;
        case 4: QOPS_EB_COLS1(4); break;
        case 5: QOPS_EB_COLS1(5); break;
        case 6: QOPS_EB_COLS1(6); break;
        case 7: QOPS_EB_COLS1(7); break;
        default: QOPS_EB_COLS1(8); break;
        }
        return;
    }
    /* wider rows in passes of 64 columns, each prefetching what it reads (as
     * qops_eb_sum8_f32); D = 128 with the row's size a constant */
#if defined(__AVX512F__)
    const int one_pass = 1;
#else
    const int one_pass = bits == 8 && prefetch;
#endif
    if (d == 128 && one_pass) {
        /* tables that take prefetches (embedding.pyx: past 64 KB): one pass of sixteen
         * accumulators, the whole row prefetched; two passes (below) leave the next rows'
         * misses unissued while the second runs. Without prefetch the two passes are
         * faster on AVX2, where GCC spills some of the sixteen, and 4-bit rows take two
         * there (AVX-512: eight accumulators in 32 registers, one pass for both). */
        qops_eb_cols(bits, 16, table, 128 * bits / 8 + 8, idx, lo, hi, n_idx, psw,
                     padding_idx, mean, out, 0, prefetch, 128 * bits / 8 + 8, 0, stream);
        return;
    }
    if (d == 128) {
        /* the first pass prefetches the whole row (3 lines at 8 bits, 2 at 4), the second
         * none: it reads lines the first brought in (faster than each pass prefetching its
         * own columns for 8-bit rows, as fast for 4-bit) */
        qops_eb_cols(bits, 8, table, 128 * bits / 8 + 8, idx, lo, hi, n_idx, psw, padding_idx,
                     mean, out, 0, prefetch, 128 * bits / 8 + 8, 0, stream);
        qops_eb_cols(bits, 8, table, 128 * bits / 8 + 8, idx, lo, hi, n_idx, psw, padding_idx,
                     mean, out, 64, 0, 0, 0, stream);
        return;
    }
    ptrdiff_t c0 = 0;
    for (; c0 + 64 <= d; c0 += 64)
        QOPS_EB_COLS(8, c0, row_bytes);
    switch ((d - c0) / 8) {
    case 1: QOPS_EB_COLS(1, c0, row_bytes); break;
    case 2: QOPS_EB_COLS(2, c0, row_bytes); break;
    case 3: QOPS_EB_COLS(3, c0, row_bytes); break;
    case 4: QOPS_EB_COLS(4, c0, row_bytes); break;
    case 5: QOPS_EB_COLS(5, c0, row_bytes); break;
    case 6: QOPS_EB_COLS(6, c0, row_bytes); break;
    case 7: QOPS_EB_COLS(7, c0, row_bytes); break;
    default: break;
    }
#undef QOPS_EB_COLS
#undef QOPS_EB_COLS1
}
#endif

#if defined(__AVX2__)
/* One entry into nv accumulators, as in qops_eb_cols; 1 if counted (not padding). */
static inline __attribute__((always_inline)) int qops_eb_entry(
        int bits, int nv, const uint8_t *table, ptrdiff_t row_bytes, ptrdiff_t c0,
        const int64_t *idx, ptrdiff_t i, const float *psw, int64_t padding_idx, __m256 *acc) {
    const int64_t r = idx[i];
    if (r == padding_idx)
        return 0;
    const uint8_t *q = table + r * row_bytes;
    float scale, bias;
    qops_eb_row_terms(q, row_bytes - 8, psw, i, &scale, &bias);
    const __m256 vs = _mm256_set1_ps(scale), vc = _mm256_set1_ps(bias);
    const uint8_t *p = q + (bits == 8 ? c0 : c0 / 2);
    __m256 v[2];
    #pragma GCC unroll 8
    for (int k = 0; k < nv; k += 2) {
        qops_eb_loadv(bits, nv - k < 2 ? 1 : 2, p + (bits == 8 ? 8 * k : 4 * k), v);
        acc[k] = _mm256_fmadd_ps(vs, v[0], _mm256_add_ps(acc[k], vc));
        if (k + 1 < nv)
            acc[k + 1] = _mm256_fmadd_ps(vs, v[1], _mm256_add_ps(acc[k + 1], vc));
    }
    return 1;
}

/* Columns [c0, c0 + 8 nv) of two consecutive bags, [lo, mid) into out0 and [mid, hi) into
 * out0 + d, their entries interleaved: each bag's accumulators form one chain of dependent
 * add + fma per entry, and two independent chains keep the FMA units busy where one would
 * wait on its own latency. Each bag still sees its own entries in index order. Only for
 * tables in cache: nothing is prefetched. */
static inline __attribute__((always_inline)) void qops_eb_cols2(
        int bits, int nv, const uint8_t *table, ptrdiff_t row_bytes, const int64_t *idx,
        ptrdiff_t lo, ptrdiff_t mid, ptrdiff_t hi, const float *psw, int64_t padding_idx,
        int mean, float *out0, ptrdiff_t d, ptrdiff_t c0, int stream) {
#if defined(__AVX512F__)
    if (nv % (16 / bits) == 0 && c0 == 0) {
        qops_eb_cols2_512(bits, nv / 2, table, row_bytes, idx, lo, mid, hi, psw, padding_idx, mean,
                          out0, d, stream);
        return;
    }
#endif
    __m256 a0[4], a1[4];
    ptrdiff_t n0 = 0, n1 = 0;
    #pragma GCC unroll 8
    for (int k = 0; k < nv; k++) {
        a0[k] = _mm256_setzero_ps();
        a1[k] = _mm256_setzero_ps();
    }
    const ptrdiff_t len0 = mid - lo, len1 = hi - mid;
    const ptrdiff_t both = len0 < len1 ? len0 : len1;
    for (ptrdiff_t j = 0; j < both; j++) {
        n0 += qops_eb_entry(bits, nv, table, row_bytes, c0, idx, lo + j, psw, padding_idx, a0);
        n1 += qops_eb_entry(bits, nv, table, row_bytes, c0, idx, mid + j, psw, padding_idx, a1);
    }
    for (ptrdiff_t j = both; j < len0; j++)
        n0 += qops_eb_entry(bits, nv, table, row_bytes, c0, idx, lo + j, psw, padding_idx, a0);
    for (ptrdiff_t j = both; j < len1; j++)
        n1 += qops_eb_entry(bits, nv, table, row_bytes, c0, idx, mid + j, psw, padding_idx, a1);
    if (mean && n0 > 0) {
        const __m256 n = _mm256_set1_ps((float)n0);
        #pragma GCC unroll 8
        for (int k = 0; k < nv; k++)
            a0[k] = _mm256_div_ps(a0[k], n);
    }
    if (mean && n1 > 0) {
        const __m256 n = _mm256_set1_ps((float)n1);
        #pragma GCC unroll 8
        for (int k = 0; k < nv; k++)
            a1[k] = _mm256_div_ps(a1[k], n);
    }
    qops_eb_store(bits, nv, out0 + c0, a0, stream);
    qops_eb_store(bits, nv, out0 + d + c0, a1, stream);
}

/* Two bags' sums or means for D a multiple of 8 up to 32, in one pass. */
static inline __attribute__((always_inline)) void qops_eb_sum8x2(
        int bits, const uint8_t *table, ptrdiff_t row_bytes, const int64_t *idx, ptrdiff_t lo,
        ptrdiff_t mid, ptrdiff_t hi, const float *psw, int64_t padding_idx, int mean,
        float *out0, ptrdiff_t d, int stream) {
#define QOPS_EB_COLS2(NV, C0) \
    qops_eb_cols2(bits, NV, table, row_bytes, idx, lo, mid, hi, psw, padding_idx, mean, out0, \
                  d, C0, stream)
    switch (d / 8) {
    case 1: QOPS_EB_COLS2(1, 0); break;
    case 2: QOPS_EB_COLS2(2, 0); break;
    case 3: QOPS_EB_COLS2(3, 0); break;
    default: QOPS_EB_COLS2(4, 0); break;
    }
#undef QOPS_EB_COLS2
}
#endif

/* Two consecutive bags, [lo, mid) into out0[0:d] and [mid, hi) into out0[d:2d], interleaved
 * where that is faster (sum and mean, D a multiple of 8 up to 32, a table small enough to
 * need no prefetch: there the bag's dependency chain is the limit, not memory); otherwise
 * one at a time. Pairs of wider rows would take two passes of 32 columns (eight accumulators
 * a bag do not fit twice in 16 registers), each reading the entries' indices, scales and
 * biases again: at D = 64 one bag at a time in one pass was faster. */
static inline void qops_eb_bag2_q(int bits, const uint8_t *table, ptrdiff_t row_bytes,
                                  const int64_t *idx, ptrdiff_t lo, ptrdiff_t mid, ptrdiff_t hi,
                                  ptrdiff_t n_idx, const float *psw, int mode,
                                  int64_t padding_idx, float *out0, ptrdiff_t d, int flags);

/* One bag of a quantized table of fused rows (values, then float32 scale and bias, as
 * fbgemm's rows keep them: one row is one or two cache lines, scale and bias included):
 * entries [lo, hi) of idx into out[0:d]. */
static inline void qops_eb_bag_q(int bits, const uint8_t *table, ptrdiff_t row_bytes,
                                 const int64_t *idx, ptrdiff_t lo, ptrdiff_t hi,
                                 ptrdiff_t n_idx, const float *psw, int mode,
                                 int64_t padding_idx, float *out, ptrdiff_t d, int flags) {
    const ptrdiff_t vals = row_bytes - 8;
    const int prefetch = flags & QOPS_EB_PF;
    ptrdiff_t count = 0;
#if defined(__AVX2__)
    if (mode != QOPS_EB_MAX && d % 8 == 0 && d > 0) {
        /* constant bits, weights and (without weights, which only sum) mode at each call */
        const int mean = mode == QOPS_EB_MEAN;
        if (bits == 8 && psw)
            qops_eb_sum8(8, table, row_bytes, idx, lo, hi, n_idx, psw, padding_idx, mean, out,
                         d, flags);
        else if (bits == 8 && mean)
            qops_eb_sum8(8, table, row_bytes, idx, lo, hi, n_idx, NULL, padding_idx, 1, out, d,
                         flags);
        else if (bits == 8)
            qops_eb_sum8(8, table, row_bytes, idx, lo, hi, n_idx, NULL, padding_idx, 0, out, d,
                         flags);
        else if (psw)
            qops_eb_sum8(4, table, row_bytes, idx, lo, hi, n_idx, psw, padding_idx, mean, out,
                         d, flags);
        else if (mean)
            qops_eb_sum8(4, table, row_bytes, idx, lo, hi, n_idx, NULL, padding_idx, 1, out, d,
                         flags);
        else
            qops_eb_sum8(4, table, row_bytes, idx, lo, hi, n_idx, NULL, padding_idx, 0, out, d,
                         flags);
        return;
    }
#endif
    memset(out, 0, (size_t)d * sizeof(float));
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (prefetch && i + QOPS_EB_PREFETCH < n_idx) {
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
/* Columns [c0, c0 + 8 nv) of one bag's float sum, accumulated in registers as qops_eb_cols;
 * `how` is the entry's operation: 0 add, 1 fma with the weight, 2 add of the rounded
 * product (PyTorch's path with a padding_idx). With `prefetch`, pf_bytes from column c0 of
 * the row QOPS_EB_PREFETCH entries ahead are prefetched: each pass its own columns (in flat
 * index order, so the next bag's first entries too). Returns the entry count. */
static inline __attribute__((always_inline)) ptrdiff_t qops_eb_cols_f32(
        int nv, int how, const float *table, const int64_t *idx, ptrdiff_t lo, ptrdiff_t hi,
        ptrdiff_t n_idx, const float *psw, int64_t padding_idx, int mean, float *out,
        ptrdiff_t d, ptrdiff_t c0, int prefetch, ptrdiff_t pf_bytes, int stream) {
    ptrdiff_t count = 0;
    __m256 acc[8];
    #pragma GCC unroll 8
    for (int k = 0; k < nv; k++)
        acc[k] = _mm256_setzero_ps();
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (prefetch)
            qops_eb_prefetch(table + idx[qops_eb_ahead(i, n_idx, QOPS_EB_PREFETCH)] * d + c0,
                             pf_bytes);
        const int64_t r = idx[i];
        if (r == padding_idx)
            continue;
        const float *row = table + r * d + c0;
        if (how == 0) {
            #pragma GCC unroll 8
            for (int k = 0; k < nv; k++)
                acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(row + 8 * k));
        } else if (how == 1) {
            const __m256 w = _mm256_set1_ps(psw[i]);
            #pragma GCC unroll 8
            for (int k = 0; k < nv; k++)
                acc[k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * k), acc[k]);
        } else {
            const __m256 w = _mm256_set1_ps(psw[i]);
            #pragma GCC unroll 8
            for (int k = 0; k < nv; k++)
                acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(w, _mm256_loadu_ps(row + 8 * k)));
        }
        count++;
    }
    if (mean && count > 0) {
        const __m256 n = _mm256_set1_ps((float)count);
        #pragma GCC unroll 8
        for (int k = 0; k < nv; k++)
            acc[k] = _mm256_div_ps(acc[k], n);
    }
    #pragma GCC unroll 8
    for (int k = 0; k < nv; k++)
        qops_eb_put(out + c0 + 8 * k, acc[k], stream);
    return count;
}

/* The float sum or mean for D a multiple of 8, in column passes as qops_eb_sum8. */
static inline __attribute__((always_inline)) void qops_eb_sum8_f32(
        int how, const float *table, const int64_t *idx, ptrdiff_t lo, ptrdiff_t hi,
        ptrdiff_t n_idx, const float *psw, int64_t padding_idx, int mean, float *out,
        ptrdiff_t d, int flags) {
    const int prefetch = flags & QOPS_EB_PF, stream = flags & QOPS_EB_NT;
#define QOPS_EB_COLS_F32(NV, C0, PF, BYTES) \
    qops_eb_cols_f32(NV, how, table, idx, lo, hi, n_idx, psw, padding_idx, mean, out, d, C0, \
                     PF, BYTES, stream)
/* one pass: D = 8 NV, a constant row stride and size in each case */
#define QOPS_EB_COLS1_F32(NV) \
    qops_eb_cols_f32(NV, how, table, idx, lo, hi, n_idx, psw, padding_idx, mean, out, 8 * NV, \
                     0, prefetch, 32 * NV, stream)
    if (d <= 64) {
        switch (d / 8) {
        case 1: QOPS_EB_COLS1_F32(1); break;
        case 2: QOPS_EB_COLS1_F32(2); break;
        case 3: QOPS_EB_COLS1_F32(3); break;
        case 4: QOPS_EB_COLS1_F32(4); break;
        case 5: QOPS_EB_COLS1_F32(5); break;
        case 6: QOPS_EB_COLS1_F32(6); break;
        case 7: QOPS_EB_COLS1_F32(7); break;
        default: QOPS_EB_COLS1_F32(8); break;
        }
        return;
    }
    /* wider rows in passes of 64 columns, each prefetching its own 256 bytes: prefetching
     * the whole row in the first pass asks for more lines at once than a core can have in
     * flight (measured: 14% slower than PyTorch at D = 128) */
    if (d == 128) {
        qops_eb_cols_f32(8, how, table, idx, lo, hi, n_idx, psw, padding_idx, mean, out, 128, 0,
                         prefetch, 256, stream);
        qops_eb_cols_f32(8, how, table, idx, lo, hi, n_idx, psw, padding_idx, mean, out, 128, 64,
                         prefetch, 256, stream);
        return;
    }
    ptrdiff_t c0 = 0;
    for (; c0 + 64 <= d; c0 += 64)
        QOPS_EB_COLS_F32(8, c0, prefetch, 256);
    switch ((d - c0) / 8) {
    case 1: QOPS_EB_COLS_F32(1, c0, prefetch, 32); break;
    case 2: QOPS_EB_COLS_F32(2, c0, prefetch, 64); break;
    case 3: QOPS_EB_COLS_F32(3, c0, prefetch, 96); break;
    case 4: QOPS_EB_COLS_F32(4, c0, prefetch, 128); break;
    case 5: QOPS_EB_COLS_F32(5, c0, prefetch, 160); break;
    case 6: QOPS_EB_COLS_F32(6, c0, prefetch, 192); break;
    case 7: QOPS_EB_COLS_F32(7, c0, prefetch, 224); break;
    default: break;
    }
#undef QOPS_EB_COLS_F32
#undef QOPS_EB_COLS1_F32
}
#endif

/* One bag of a float32 table (PyTorch's float EmbeddingBag). */
static inline void qops_eb_bag_f32(const float *table, const int64_t *idx, ptrdiff_t lo,
                                   ptrdiff_t hi, ptrdiff_t n_idx, const float *psw, int mode,
                                   int64_t padding_idx, float *out, ptrdiff_t d, int flags) {
    const int prefetch = flags & QOPS_EB_PF;
    ptrdiff_t count = 0;
#if defined(__AVX2__)
    if (mode != QOPS_EB_MAX && d % 8 == 0 && d > 0) {
        const int mean = mode == QOPS_EB_MEAN;
        if (!psw && mean)
            qops_eb_sum8_f32(0, table, idx, lo, hi, n_idx, psw, padding_idx, 1, out, d,
                             flags);
        else if (!psw)
            qops_eb_sum8_f32(0, table, idx, lo, hi, n_idx, psw, padding_idx, 0, out, d,
                             flags);
        else if (padding_idx < 0)
            qops_eb_sum8_f32(1, table, idx, lo, hi, n_idx, psw, padding_idx, mean, out, d,
                             flags);
        else
            qops_eb_sum8_f32(2, table, idx, lo, hi, n_idx, psw, padding_idx, mean, out, d,
                             flags);
        return;
    }
#endif
    memset(out, 0, (size_t)d * sizeof(float));
    for (ptrdiff_t i = lo; i < hi; i++) {
        if (prefetch && i + QOPS_EB_PREFETCH < n_idx) {
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

/* 1 where streamed stores may go with prefetched rows: not on Intel cores, whose streaming
 * stores take the L1 fill buffers the rows' prefetches need (a lookup of a large table is
 * bound by how many misses a core keeps in flight). */
static inline int qops_eb_stream_with_prefetch(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return !__builtin_cpu_is("intel");
#else
    return 1;
#endif
}

/* Orders a thread's non-temporal stores (QOPS_EB_NT) before whatever it does next. */
static inline void qops_eb_fence(void) {
#if defined(__AVX2__)
    _mm_sfence();
#endif
}

static inline void qops_eb_bag2_q(int bits, const uint8_t *table, ptrdiff_t row_bytes,
                                  const int64_t *idx, ptrdiff_t lo, ptrdiff_t mid, ptrdiff_t hi,
                                  ptrdiff_t n_idx, const float *psw, int mode,
                                  int64_t padding_idx, float *out0, ptrdiff_t d, int flags) {
#if defined(__AVX2__)
    if (!(flags & QOPS_EB_PF) && mode != QOPS_EB_MAX && d % 8 == 0 && d > 0 && d <= 32) {
        const int mean = mode == QOPS_EB_MEAN;
        if (bits == 8 && psw)
            qops_eb_sum8x2(8, table, row_bytes, idx, lo, mid, hi, psw, padding_idx, mean,
                           out0, d, flags & QOPS_EB_NT);
        else if (bits == 8 && mean)
            qops_eb_sum8x2(8, table, row_bytes, idx, lo, mid, hi, NULL, padding_idx, 1,
                           out0, d, flags & QOPS_EB_NT);
        else if (bits == 8)
            qops_eb_sum8x2(8, table, row_bytes, idx, lo, mid, hi, NULL, padding_idx, 0,
                           out0, d, flags & QOPS_EB_NT);
        else if (psw)
            qops_eb_sum8x2(4, table, row_bytes, idx, lo, mid, hi, psw, padding_idx, mean,
                           out0, d, flags & QOPS_EB_NT);
        else if (mean)
            qops_eb_sum8x2(4, table, row_bytes, idx, lo, mid, hi, NULL, padding_idx, 1,
                           out0, d, flags & QOPS_EB_NT);
        else
            qops_eb_sum8x2(4, table, row_bytes, idx, lo, mid, hi, NULL, padding_idx, 0,
                           out0, d, flags & QOPS_EB_NT);
        return;
    }
#endif
    qops_eb_bag_q(bits, table, row_bytes, idx, lo, mid, n_idx, psw, mode, padding_idx, out0, d,
                  flags);
    qops_eb_bag_q(bits, table, row_bytes, idx, mid, hi, n_idx, psw, mode, padding_idx, out0 + d,
                  d, flags);
}

#endif
