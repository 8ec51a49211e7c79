/* Sort and top-k kernels on 8-bit rows: counting sort, threshold top-k (see sort.pyx).
 * (Moved verbatim from the `cdef extern from *` block of sort.pyx.) */
#ifndef QOPS_SORT_H
#define QOPS_SORT_H

#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
/* Bit j set when (p[j] ^ flip) >= thr, for the 64 bytes at p. The unsigned >= is
 * max(a, t) == a, which SSE2 already has; AVX-512BW compares to a mask directly. */
static inline uint64_t qops_mask64_ge(const uint8_t* p, uint8_t flip, uint8_t thr) {
#if defined(__AVX512BW__)
    __m512i x = _mm512_xor_si512(_mm512_loadu_si512((const void*)p),
                                 _mm512_set1_epi8((char)flip));
    return (uint64_t)_mm512_cmpge_epu8_mask(x, _mm512_set1_epi8((char)thr));
#elif defined(__AVX2__)
    const __m256i f = _mm256_set1_epi8((char)flip), t = _mm256_set1_epi8((char)thr);
    __m256i a = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)p), f);
    __m256i b = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(p + 32)), f);
    uint64_t ma = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(a, t), a));
    uint64_t mb = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(b, t), b));
    return ma | (mb << 32);
#elif defined(__SSE2__)
    const __m128i f = _mm_set1_epi8((char)flip), t = _mm_set1_epi8((char)thr);
    uint64_t m = 0;
    for (int j = 0; j < 4; j++) {
        __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(p + 16 * j)), f);
        m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(a, t), a))
             << (16 * j);
    }
    return m;
#else
    uint64_t m = 0;
    for (int j = 0; j < 64; j++) m |= (uint64_t)((uint8_t)(p[j] ^ flip) >= thr) << j;
    return m;
#endif
}
static inline int qops_ctz64(uint64_t m) { return __builtin_ctzll(m); }
static inline int qops_popcount64(uint64_t m) { return __builtin_popcountll(m); }

/* Block b of 64 bytes of x (the last one copied into `pad`, padded with key 0), and the
 * mask of its real bytes. */
static inline const uint8_t* qops_block(const uint8_t* x, ptrdiff_t n, ptrdiff_t b,
                                        uint8_t flip, uint8_t* pad, uint64_t* valid) {
    if (b + 64 <= n) { *valid = ~0ULL; return x + b; }
    ptrdiff_t rem = n - b;
    memset(pad, flip, 64);
    memcpy(pad, x + b, (size_t)rem);
    *valid = (1ULL << rem) - 1;
    return pad;
}

/* Counts of the raw bytes of x[0:n] (4 tables, one per quarter, so runs of equal bytes do
 * not serialize on one counter; uint32 tables in chunks of 2^30 bytes). Raw bytes, not
 * keys: the key order enters only through the start positions, so no loop pays the xor. */
static void qops_hist256(const uint8_t* x, ptrdiff_t n, int64_t* h) {
    uint32_t h4[4][256];
    for (int b = 0; b < 256; b++) h[b] = 0;
    while (n > 0) {
        ptrdiff_t len = n < ((ptrdiff_t)1 << 30) ? n : ((ptrdiff_t)1 << 30), q = len / 4, i;
        memset(h4, 0, sizeof(h4));
        for (i = 0; i < q; i++) {
            h4[0][x[i]]++; h4[1][x[i + q]]++; h4[2][x[i + 2 * q]]++; h4[3][x[i + 3 * q]]++;
        }
        for (i = 4 * q; i < len; i++) h4[3][x[i]]++;
        for (int b = 0; b < 256; b++) h[b] += (int64_t)h4[0][b] + h4[1][b] + h4[2][b] + h4[3][b];
        x += len;
        n -= len;
    }
}

/* The sorted values in output positions [lo, hi): byte b fills [start[b], start[b] +
 * cnt[b]). Short runs are one 16-byte store: what spills past a run lies in a later key's
 * run, written afterwards (keys go up), so only the end `hi` needs care. */
static void qops_fill_runs(uint8_t* vals, const int64_t* cnt, const int64_t* start,
                           uint8_t flip, ptrdiff_t lo, ptrdiff_t hi) {
    for (int k = 0; k < 256; k++) {
        int b = k ^ flip;
        ptrdiff_t s = start[b], e = s + cnt[b];
        s = s > lo ? s : lo;
        e = e < hi ? e : hi;
        if (s >= e) continue;
        if (e - s <= 16 && s + 16 <= hi) {
            uint8_t pat[16];
            memset(pat, b, 16);
            memcpy(vals + s, pat, 16);
        } else {
            memset(vals + s, b, (size_t)(e - s));
        }
    }
}

/* Index i to pos[x[i]]++ for i in [lo, hi): in index order, so equal keys stay in
 * increasing index order. Eight keys come from one 64-bit load: a byte load per index
 * made the loop bound by loads rather than by the scatter. On outputs beyond
 * the caches 256 write streams are too many for the hardware prefetchers and each new
 * line would wait for its read for ownership; prefetching one line ahead of each store
 * keeps those reads in flight there. Where the output still fits in cache the prefetches
 * cost more than they save, so only long ranges prefetch, from a length that depends on the
 * core: on Zen 3 (the avx2 build) they cost time up to 8 MB of output, whose L3 answers
 * fast; on an AVX-512 Xeon with 2 MB of L2 per core and a slower L3 they gain from 2 MB
 * (2^18 indices) on and cost time below. */
#if defined(__AVX512F__)
#define QOPS_SCATTER_PF_MIN ((ptrdiff_t)1 << 18)
#else
#define QOPS_SCATTER_PF_MIN ((ptrdiff_t)1 << 21)
#endif
static inline __attribute__((always_inline)) void
qops_scatter_t(const uint8_t* restrict x, ptrdiff_t lo, ptrdiff_t hi, int64_t* restrict pos,
               int64_t* restrict idx, int pf) {
    ptrdiff_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        uint64_t w;
        memcpy(&w, x + i, 8);
        for (int j = 0; j < 8; j++) {
            int64_t p = pos[(w >> (8 * j)) & 255]++;
            idx[p] = i + j;
            if (pf) __builtin_prefetch(idx + p + 8, 1, 3);
        }
    }
    for (; i < hi; i++) idx[pos[x[i]]++] = i;
}
static void qops_scatter(const uint8_t* restrict x, ptrdiff_t lo, ptrdiff_t hi,
                         int64_t* restrict pos, int64_t* restrict idx) {
    if (hi - lo >= QOPS_SCATTER_PF_MIN) qops_scatter_t(x, lo, hi, pos, idx, 1);
    else qops_scatter_t(x, lo, hi, pos, idx, 0);
}

/* Start position of each raw byte, keys (byte ^ flip) in increasing order. */
static void qops_starts(const int64_t* cnt, uint8_t flip, int64_t* start) {
    int64_t p = 0;
    for (int k = 0; k < 256; k++) { start[k ^ flip] = p; p += cnt[k ^ flip]; }
}

/* Start positions and sorted values of a whole row in one walk over the keys. Every
 * key stores 16 bytes at its start unless its run is longer (then a memset): a store
 * past a run, or of an empty key, lands in later keys' runs, written afterwards. */
static void qops_starts_fill(const int64_t* cnt, uint8_t flip, int64_t* start,
                             uint8_t* vals, ptrdiff_t n) {
    int64_t p = 0;
    for (int k = 0; k < 256; k++) {
        int b = k ^ flip;
        int64_t c = cnt[b];
        start[b] = p;
        if (c <= 16 && p + 16 <= n) {
            uint8_t pat[16];
            memset(pat, b, 16);
            memcpy(vals + p, pat, 16);
        } else if (c) {
            memset(vals + p, b, (size_t)c);
        }
        p += c;
    }
}

/* Stable counting sort of one row: counts, start positions and values as runs, then every
 * index stored at its key's next position. */
static void qops_sort_row(const uint8_t* x, ptrdiff_t n, uint8_t flip, uint8_t* vals,
                          int64_t* idx) {
    int64_t cnt[256], pos[256];
    qops_hist256(x, n, cnt);
    qops_starts_fill(cnt, flip, pos, vals, n);
    qops_scatter(x, 0, n, pos, idx);
}

static ptrdiff_t qops_count_ge(const uint8_t* x, ptrdiff_t n, uint8_t flip, uint8_t thr) {
    ptrdiff_t c = 0;
    uint8_t pad[64];
    uint64_t valid;
    for (ptrdiff_t b = 0; b < n; b += 64) {
        const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
        c += qops_popcount64(qops_mask64_ge(p, flip, thr) & valid);
    }
    return c;
}

/* The keys >= lo_key of a row counted into h[lo_key:256] with compare masks. */
static void qops_count_keys_ge(const uint8_t* x, ptrdiff_t n, uint8_t flip, int lo_key,
                               int64_t* h) {
    uint8_t pad[64];
    uint64_t valid, m;
    memset(h + lo_key, 0, (size_t)(256 - lo_key) * sizeof(int64_t));
    for (ptrdiff_t b = 0; b < n; b += 64) {
        const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
        m = qops_mask64_ge(p, flip, (uint8_t)lo_key) & valid;
        while (m) { h[p[qops_ctz64(m)] ^ flip]++; m &= m - 1; }
    }
}

/* Lane maxima: lane j holds the largest key among bytes j, j + 64, ... (0 if none). */
static void qops_lane_max(const uint8_t* x, ptrdiff_t n, uint8_t flip, uint8_t* lm) {
    uint8_t pad[64], acc[64];
    uint64_t valid;
    memset(acc, 0, 64);
    ptrdiff_t b;
    for (b = 0; b + 64 <= n; b += 64)
        for (int j = 0; j < 64; j++) {
            uint8_t v = x[b + j] ^ flip;
            acc[j] = v > acc[j] ? v : acc[j];
        }
    if (b < n) {
        const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
        for (int j = 0; j < 64; j++) {
            uint8_t v = p[j] ^ flip;
            acc[j] = v > acc[j] ? v : acc[j];
        }
    }
    memcpy(lm, acc, 64);
}

#if defined(__AVX512BW__)
/* Top-k for k <= 64 when at most 64 keys reach the lane-max bound (the usual case): one
 * pass of lane maxima, the bound, one compare pass collecting the candidates, then each
 * candidate's rank (keys above it, plus equal keys at lower indices) from two compares
 * against all candidates at once; ranks below k are the output slots. No key table to
 * clear and walk, no branch on the data in the last step. */

typedef __m512i qops_lanes;     /* 64 key lanes */
#define QOPS_TOPK_BATCH 8
/* bit j set when lane j >= t */
static inline uint64_t qops_lanes_ge(qops_lanes v, unsigned t) {
    return (uint64_t)_mm512_cmpge_epu8_mask(v, _mm512_set1_epi8((char)t));
}

/* Lane maxima of the keys of x[0:n] (absent bytes of the partial block left out). */
static inline __m512i qops_topk_lanemax(const uint8_t* x, ptrdiff_t n, uint8_t flip) {
    const __m512i f = _mm512_set1_epi8((char)flip);
    __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
    ptrdiff_t b = 0, nf = n & ~(ptrdiff_t)63;
    for (; b + 128 <= nf; b += 128) {
        a0 = _mm512_max_epu8(a0, _mm512_xor_si512(_mm512_loadu_si512((const void*)(x + b)), f));
        a1 = _mm512_max_epu8(a1, _mm512_xor_si512(_mm512_loadu_si512((const void*)(x + b + 64)), f));
    }
    if (b < nf)
        a0 = _mm512_max_epu8(a0, _mm512_xor_si512(_mm512_loadu_si512((const void*)(x + b)), f));
    __mmask64 tm = (__mmask64)((1ULL << (n - nf)) - 1);
    a1 = _mm512_mask_max_epu8(a1, tm, a1, _mm512_xor_si512(_mm512_maskz_loadu_epi8(tm, x + nf), f));
    return _mm512_max_epu8(a0, a1);
}

/* The nc <= 64 candidates (keys ck, indices ci, in index order; K holds key i in byte
 * i) to their output slots: candidate i goes to rank = keys above it + equal keys before
 * it (two compares against K); ranks are distinct and those below k are the output. A
 * rank >= k stores into a dummy slot instead of branching. */
static inline void qops_topk_rank(__m512i K, const uint8_t* ck, const int64_t* ci,
                                  ptrdiff_t nc, ptrdiff_t k, uint8_t flip, uint8_t* vals,
                                  int64_t* restrict idx) {
    uint8_t dv;
    int64_t di;
    uint64_t cm = nc >= 64 ? ~0ULL : (1ULL << nc) - 1;
    for (ptrdiff_t i = 0; i < nc; i++) {
        __m512i ki = _mm512_set1_epi8((char)ck[i]);
        uint64_t gt = _mm512_mask_cmpgt_epu8_mask(cm, K, ki);
        uint64_t eq = _mm512_mask_cmpeq_epu8_mask((1ULL << i) - 1, K, ki);
        int r = __builtin_popcountll(gt) + __builtin_popcountll(eq);
        uint8_t* pv = r < k ? vals + r : &dv;
        int64_t* pi = r < k ? idx + r : &di;
        *pv = ck[i] ^ flip;
        *pi = ci[i];
    }
}

/* Candidates (keys >= the bound Lb) collected one by one from the compare masks, in index
 * order; returns 0 (nothing written) when more than 64 keys reach the bound. */
static inline int qops_topk_given(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                                  unsigned Lb, uint8_t* vals, int64_t* restrict idx) {
    const __m512i f = _mm512_set1_epi8((char)flip), L = _mm512_set1_epi8((char)Lb);
    ptrdiff_t b, nf = n & ~(ptrdiff_t)63, nc = 0;
    const __mmask64 tm = (__mmask64)((1ULL << (n - nf)) - 1);
    const __m512i tv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(tm, x + nf), f);
    int64_t ci[64];
    uint8_t ck[64];
    /* the keys also go into K byte by byte: a wide load of ck after its narrow stores
     * would stall on store forwarding */
    __m512i K = _mm512_setzero_si512();
    for (b = 0; b <= nf; b += 64) {
        uint64_t m;
        if (b < nf)
            m = _mm512_cmpge_epu8_mask(_mm512_xor_si512(_mm512_loadu_si512((const void*)(x + b)), f), L);
        else
            m = _mm512_mask_cmpge_epu8_mask(tm, tv, L);
        if (!m) continue;
        if (nc + __builtin_popcountll(m) > 64) return 0;
        do {
            int j = __builtin_ctzll(m);
            m &= m - 1;
            uint8_t key = x[b + j] ^ flip;
            K = _mm512_mask_set1_epi8(K, (__mmask64)1 << nc, (char)key);
            ci[nc] = b + j;
            ck[nc++] = key;
        } while (m);
    }
    qops_topk_rank(K, ck, ci, nc, k, flip, vals, idx);
    return 1;
}

/* qops_topk_given with VBMI2, chosen at run time (qops_topk_use_vbmi): each block's
 * candidates are compressed into the key and index lists at once, so no branch depends
 * on how many a block holds. Those branches mispredict on data the predictor has not
 * seen, so fresh rows gain much more than a benchmark that repeats its input (which the
 * branchy version, having learnt the rows, runs slightly faster). */
static const uint8_t qops_iota64[64] = {
     0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15,
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
    32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

__attribute__((target("avx512vbmi,avx512vbmi2")))
static int qops_topk_given_vbmi(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                                unsigned Lb, uint8_t* vals, int64_t* restrict idx) {
    const __m512i f = _mm512_set1_epi8((char)flip), L = _mm512_set1_epi8((char)Lb);
    const __m512i iota = _mm512_loadu_si512((const void*)qops_iota64);
    ptrdiff_t b, nf = n & ~(ptrdiff_t)63, nc = 0;
    const __mmask64 tm = (__mmask64)((1ULL << (n - nf)) - 1);
    const __m512i tv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(tm, x + nf), f);
    int64_t ci[64 + 64];               /* a block's stores may run 64 past the count */
    uint8_t ck[64 + 64];
    for (b = 0; b <= nf; b += 64) {
        __m512i v;
        __mmask64 m;
        if (b < nf) {
            v = _mm512_xor_si512(_mm512_loadu_si512((const void*)(x + b)), f);
            m = _mm512_cmpge_epu8_mask(v, L);
        } else {
            v = tv;
            m = _mm512_mask_cmpge_epu8_mask(tm, tv, L);
        }
        ptrdiff_t pc = __builtin_popcountll(m);
        if (nc + pc > 64) return 0;
        _mm512_storeu_si512((void*)(ck + nc), _mm512_maskz_compress_epi8(m, v));
        const __m512i j = _mm512_maskz_compress_epi8(m, iota), base = _mm512_set1_epi64(b);
        _mm512_storeu_si512((void*)(ci + nc),
            _mm512_add_epi64(base, _mm512_cvtepu8_epi64(_mm512_castsi512_si128(j))));
        if (pc > 8) {
            uint8_t t[64];
            _mm512_storeu_si512((void*)t, j);
            for (ptrdiff_t s = 8; s < pc; s += 8)
                _mm512_storeu_si512((void*)(ci + nc + s), _mm512_add_epi64(base,
                    _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i*)(t + s)))));
        }
        nc += pc;
    }
    qops_topk_rank(_mm512_loadu_si512((const void*)ck), ck, ci, nc, k, flip, vals, idx);
    return 1;
}

/* 1: the CPU has VBMI and VBMI2 (set at import; the tests also clear it) */
static int qops_topk_use_vbmi = 0;
static int qops_cpu_vbmi2(void) {
    return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
}
#elif defined(__AVX2__)
/* The same kernel on AVX2: 64 lanes are two 32-byte vectors (lanes 0-31 take bytes 0-31
 * of each 64-byte block, lanes 32-63 bytes 32-63), masks come from movemask. */
typedef struct { __m256i a, b; } qops_lanes;
#define QOPS_TOPK_BATCH 8
static inline uint64_t qops_lanes_ge(qops_lanes v, unsigned tk) {
    const __m256i t = _mm256_set1_epi8((char)tk);
    uint64_t ma = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(v.a, t), v.a));
    uint64_t mb = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(v.b, t), v.b));
    return ma | (mb << 32);
}

/* Lane maxima of the keys of x[0:n]; the partial block is padded with key 0. */
static inline qops_lanes qops_topk_lanemax(const uint8_t* x, ptrdiff_t n, uint8_t flip) {
    const __m256i f = _mm256_set1_epi8((char)flip);
    qops_lanes r = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    ptrdiff_t b = 0, nf = n & ~(ptrdiff_t)63;
    for (; b < nf; b += 64) {
        r.a = _mm256_max_epu8(r.a, _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(x + b)), f));
        r.b = _mm256_max_epu8(r.b, _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(x + b + 32)), f));
    }
    if (b < n) {
        uint8_t pad[64];
        memset(pad, flip, 64);
        memcpy(pad, x + b, (size_t)(n - b));
        r.a = _mm256_max_epu8(r.a, _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)pad), f));
        r.b = _mm256_max_epu8(r.b, _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(pad + 32)), f));
    }
    return r;
}

/* As the AVX-512 qops_topk_given: candidates (keys >= Lb, at most 64, else 0 is returned
 * and nothing written) in index order, then each one's rank = keys above it + equal keys
 * before it, from compares against all candidates; ranks >= k store into a dummy slot. */
static inline int qops_topk_given(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                                  unsigned Lb, uint8_t* vals, int64_t* restrict idx) {
    uint8_t pad[64], ck[64];
    int64_t ci[64];
    uint64_t valid, m;
    ptrdiff_t nc = 0;
    memset(ck, 0, 64);
    for (ptrdiff_t b = 0; b < n; b += 64) {
        const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
        m = qops_mask64_ge(p, flip, (uint8_t)Lb) & valid;
        if (!m) continue;
        if (nc + __builtin_popcountll(m) > 64) return 0;
        do {
            int j = __builtin_ctzll(m);
            m &= m - 1;
            ci[nc] = b + j;
            ck[nc++] = p[j] ^ flip;
        } while (m);
    }
    /* keys as signed bytes (^ 0x80) so that cmpgt_epi8 orders them as unsigned */
    const __m256i s = _mm256_set1_epi8((char)0x80);
    const __m256i Ka = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)ck), s);
    const __m256i Kb = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(ck + 32)), s);
    uint64_t cm = nc >= 64 ? ~0ULL : (1ULL << nc) - 1;
    uint8_t dv;
    int64_t di;
    for (ptrdiff_t i = 0; i < nc; i++) {
        __m256i ki = _mm256_set1_epi8((char)(ck[i] ^ 0x80));
        uint64_t gt = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(Ka, ki))
                      | (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(Kb, ki)) << 32;
        uint64_t eq = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(Ka, ki))
                      | (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(Kb, ki)) << 32;
        int r = __builtin_popcountll(gt & cm) + __builtin_popcountll(eq & ((1ULL << i) - 1));
        uint8_t* pv = r < k ? vals + r : &dv;
        int64_t* pi = r < k ? idx + r : &di;
        *pv = ck[i] ^ flip;
        *pi = ci[i];
    }
    return 1;
}

#define qops_topk_given_vbmi qops_topk_given     /* never chosen: no VBMI2 here */
static int qops_topk_use_vbmi = 0;
static int qops_cpu_vbmi2(void) { return 0; }
#else
static int qops_topk_use_vbmi = 0;
static int qops_cpu_vbmi2(void) { return 0; }
#endif
#if defined(__AVX512BW__) || defined(__AVX2__)
/* The bounds L of QOPS_TOPK_BATCH rows from their lane maxima: the largest L with
 * count(lane max >= L) >= k (k lanes hold distinct keys >= L, so the k-th largest key is
 * >= L), bit by bit from the top. Each step is a chain of compare, popcount and select;
 * the rows' chains interleave, so a batch costs about what one row's search alone did. */
static inline void qops_topk_bounds(const qops_lanes* lm, ptrdiff_t k, unsigned* lo) {
    for (int i = 0; i < QOPS_TOPK_BATCH; i++) lo[i] = 0;
    for (int bit = 7; bit >= 0; bit--)
        for (int i = 0; i < QOPS_TOPK_BATCH; i++) {
            unsigned t = lo[i] | (1u << bit);
            lo[i] = __builtin_popcountll(qops_lanes_ge(lm[i], t)) >= k ? t : lo[i];
        }
}

/* One row: its bound alone, then qops_topk_given. count(lane max >= t) falls as t
 * rises, so the number of t in 1..15 passing is the largest that does: the high nibble,
 * then the low one, from 15 independent compares each instead of a chain of 8 dependent
 * ones (whose branches mispredict). */
static inline int qops_topk_small(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                                  uint8_t* vals, int64_t* restrict idx) {
    qops_lanes lm = qops_topk_lanemax(x, n, flip);
    unsigned hi = 0, lo;
    for (unsigned t = 1; t < 16; t++)
        hi += __builtin_popcountll(qops_lanes_ge(lm, t << 4)) >= k;
    lo = hi << 4;
    for (unsigned t = 1; t < 16; t++)
        lo += __builtin_popcountll(qops_lanes_ge(lm, (hi << 4) + t)) >= k;
    return qops_topk_given(x, n, k, flip, lo, vals, idx);
}
#endif
#ifndef QOPS_TOPK_BATCH
#define QOPS_TOPK_BATCH 8
#endif
static void qops_topk_row(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                          uint8_t* vals, int64_t* restrict idx);

/* QOPS_TOPK_BATCH consecutive rows (row i at x + i*n, its k results at vals + i*k), their
 * bounds searched together when the kernel above applies; rows it declines, and other
 * builds, take qops_topk_row. */
static void qops_topk_batch(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                            uint8_t* vals, int64_t* idx) {
#if defined(__AVX512BW__) || defined(__AVX2__)
    if (k >= 1 && k <= 64) {
        qops_lanes lm[QOPS_TOPK_BATCH];
        unsigned lo[QOPS_TOPK_BATCH];
        for (int i = 0; i < QOPS_TOPK_BATCH; i++) lm[i] = qops_topk_lanemax(x + i * n, n, flip);
        qops_topk_bounds(lm, k, lo);
        for (int i = 0; i < QOPS_TOPK_BATCH; i++)
            if (!(qops_topk_use_vbmi
                  ? qops_topk_given_vbmi(x + i * n, n, k, flip, lo[i], vals + i * k, idx + i * k)
                  : qops_topk_given(x + i * n, n, k, flip, lo[i], vals + i * k, idx + i * k)))
                qops_topk_row(x + i * n, n, k, flip, vals + i * k, idx + i * k);
        return;
    }
#endif
    for (int i = 0; i < QOPS_TOPK_BATCH; i++)
        qops_topk_row(x + i * n, n, k, flip, vals + i * k, idx + i * k);
}

#define QOPS_TOPK_CAND 512      /* candidates kept while scanning; more: one more pass */

/* The k largest keys of a row, largest first, equal keys by increasing index. T = the k-th
 * largest key: all keys > T are taken, and the first k - count(> T) keys equal to T. A bound
 * L <= T comes cheaply: for k <= 64, the k-th largest of the 64 lane maxima (k lanes hold
 * distinct elements >= L); otherwise from block maxima, or lowered from the maximum. Keys
 * >= L are found with 64-byte compare masks, so small k reads the row twice with vector
 * loads and touches only the candidates one by one. */
static void qops_topk_row(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                          uint8_t* vals, int64_t* restrict idx) {
    int64_t h[256], off[256];
    uint8_t pad[64];
    uint64_t valid, m;
    ptrdiff_t i, b;
    if (k <= 0) return;
#if defined(__AVX512BW__) || defined(__AVX2__)
    if (k <= 64 && qops_topk_small(x, n, k, flip, vals, idx)) return;
#endif
    int lo;
    ptrdiff_t nb = (n + 63) / 64;
    if (k <= 64) {
        uint8_t lm[64];
        qops_lane_max(x, n, flip, lm);
        /* the largest L with count(lane max >= L) >= k, bit by bit from the top */
        lo = 0;
        for (int bit = 7; bit >= 0; bit--) {
            int t = lo | (1 << bit);
            if (qops_popcount64(qops_mask64_ge(lm, 0, (uint8_t)t)) >= k) lo = t;
        }
        if (lo == 255) {
            /* T = 255: the first k keys 255, one pass that stops there */
            memset(vals, 255 ^ flip, (size_t)k);
            ptrdiff_t taken = 0;
            for (b = 0; taken < k; b += 64) {
                const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
                m = qops_mask64_ge(p, flip, 255) & valid;
                while (m && taken < k) { idx[taken++] = b + qops_ctz64(m); m &= m - 1; }
            }
            return;
        }
        /* candidates >= L in index order; usually few, so the row is not read again */
        int64_t ci[QOPS_TOPK_CAND];
        uint8_t ck[QOPS_TOPK_CAND];
        ptrdiff_t nc = 0;
        for (b = 0; b < n; b += 64) {
            const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
            m = qops_mask64_ge(p, flip, (uint8_t)lo) & valid;
            if ((ptrdiff_t)qops_popcount64(m) > QOPS_TOPK_CAND - nc) { nc = -1; break; }
            while (m) {
                int j = qops_ctz64(m);
                m &= m - 1;
                ci[nc] = b + j;
                ck[nc++] = p[j] ^ flip;
            }
        }
        if (nc >= 0) {
            /* keys of the candidates lie in [lo, top]: walks and clears stay there */
            int top = lo;
            for (i = 0; i < nc; i++) top = ck[i] > top ? ck[i] : top;
            memset(h + lo, 0, (size_t)(top + 1 - lo) * sizeof(int64_t));
            for (i = 0; i < nc; i++) h[ck[i]]++;
            int key = top;
            ptrdiff_t c = 0;
            while (c + h[key] < k) { c += h[key]; key--; }
            ptrdiff_t need = k - c, pos = 0;
            for (int j = top; j > key; j--) {
                off[j] = pos;
                if (h[j]) { memset(vals + pos, j ^ flip, (size_t)h[j]); pos += h[j]; }
            }
            off[key] = pos;
            memset(vals + pos, key ^ flip, (size_t)need);
            for (i = 0; i < nc; i++) {
                int kk = ck[i];
                if (kk > key) idx[off[kk]++] = ci[i];
                else if (kk == key && need > 0) { idx[off[kk]++] = ci[i]; need--; }
            }
            return;
        }
    } else if (k <= nb) {
        /* L = the k-th largest block maximum: k blocks hold an element >= L, so T >= L. */
        uint32_t hb[256];                  /* nb < 2^32 blocks; a small table to clear */
        memset(hb, 0, sizeof(hb));
        for (b = 0; b < n; b += 64) {
            const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
            uint8_t bm = 0;
            for (int j = 0; j < 64; j++) { uint8_t v = p[j] ^ flip; bm = v > bm ? v : bm; }
            hb[bm]++;
        }
        int64_t cb = 0;
        lo = 255;
        while (cb + hb[lo] < k) { cb += hb[lo]; lo--; }
    } else {
        uint8_t mx = 0;
        for (i = 0; i < n; i++) { uint8_t v = x[i] ^ flip; mx = v > mx ? v : mx; }
        /* lower L from the maximum in doubling steps until count(>= L) >= k; give up
         * (L = 0, a full histogram) when that takes more than a few passes. */
        int step = 1;
        lo = mx;
        while (lo > 0) {
            if (qops_count_ge(x, n, flip, (uint8_t)lo) >= k) break;
            if (step > 32) { lo = 0; break; }
            lo = lo > step ? lo - step : 0;
            step *= 2;
        }
    }
    if (lo == 0) {
        int64_t hr[256];
        qops_hist256(x, n, hr);
        for (int j = 0; j < 256; j++) h[j] = hr[j ^ flip];
    } else {
        /* only keys >= lo are counted, and T >= lo: the rest of h is never read */
        qops_count_keys_ge(x, n, flip, lo, h);
    }
    int key = 255;
    ptrdiff_t c = 0;
    while (c + h[key] < k) { c += h[key]; key--; }
    uint8_t thr = (uint8_t)key;
    ptrdiff_t need = k - c, pos = 0, taken = 0;
    for (int j = 255; j > thr; j--) {
        off[j] = pos;
        if (h[j]) { memset(vals + pos, j ^ flip, (size_t)h[j]); pos += h[j]; }
    }
    off[thr] = pos;
    memset(vals + pos, thr ^ flip, (size_t)need);
    for (b = 0; b < n && taken < k; b += 64) {
        const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
        m = qops_mask64_ge(p, flip, thr) & valid;
        while (m) {
            int j = qops_ctz64(m);
            m &= m - 1;
            uint8_t kk = p[j] ^ flip;
            if (kk != thr) { idx[off[kk]++] = b + j; taken++; }
            else if (need > 0) { idx[off[kk]++] = b + j; need--; taken++; }
        }
    }
}

#endif  /* QOPS_SORT_H */
