# Sort and top-k kernels (mirror of qops/_ref/sort.py).
# Contract: rows of uint8/int8 (int32 through numpy's stable sort); values and int64 indices,
# equal values in increasing index order. 8-bit values have 256 keys, so sort is a counting
# sort and top-k a threshold search on 64-byte masks: both O(n), neither compares elements.
# Keys are the raw bytes XOR `flip`: 0x80 maps int8 to unsigned order, 0xFF reverses it.
import numpy as np
from cython.parallel cimport prange
from libc.string cimport memset, memcpy
from libc.stdint cimport uint64_t
from qops._fast._common cimport *

cdef extern from *:
    """
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

    /* Stable counting sort of one row by key (byte ^ flip): counts in 4 tables (so runs of
     * equal keys do not serialize on one counter), start positions, values written as runs,
     * then each index stored at its key's next position in index order. */
    static void qops_sort_direct(const uint8_t* x, ptrdiff_t n, uint8_t flip, uint8_t* vals,
                                 int64_t* restrict idx) {
        int64_t h[4][256], pos[256];
        memset(h, 0, sizeof(h));
        ptrdiff_t q = n / 4, i;
        for (i = 0; i < q; i++) {
            h[0][x[i] ^ flip]++; h[1][x[i + q] ^ flip]++;
            h[2][x[i + 2 * q] ^ flip]++; h[3][x[i + 3 * q] ^ flip]++;
        }
        for (i = 4 * q; i < n; i++) h[3][x[i] ^ flip]++;
        int64_t p = 0;
        for (int k = 0; k < 256; k++) {
            int64_t c = h[0][k] + h[1][k] + h[2][k] + h[3][k];
            pos[k] = p;
            if (c) memset(vals + p, k ^ flip, (size_t)c);
            p += c;
        }
        for (i = 0; i < n; i++) idx[pos[x[i] ^ flip]++] = i;
    }

    /* Long rows: one scatter to 256 destinations spread over megabytes misses the TLB on
     * almost every store, so indices go in two passes of 16 destinations each: by the key's
     * high nibble (packed as index << 8 | key, in the output itself), then each nibble's
     * bucket by the whole key, through a scratch copy of the bucket. */
    static void qops_hist256(const uint8_t* x, ptrdiff_t lo, ptrdiff_t hi, uint8_t flip,
                             int64_t* h) {
        int64_t h4[4][256];
        memset(h4, 0, sizeof(h4));
        ptrdiff_t n = hi - lo, q = n / 4, i;
        const uint8_t* p = x + lo;
        for (i = 0; i < q; i++) {
            h4[0][p[i] ^ flip]++; h4[1][p[i + q] ^ flip]++;
            h4[2][p[i + 2 * q] ^ flip]++; h4[3][p[i + 3 * q] ^ flip]++;
        }
        for (i = 4 * q; i < n; i++) h4[3][p[i] ^ flip]++;
        for (int k = 0; k < 256; k++) h[k] = h4[0][k] + h4[1][k] + h4[2][k] + h4[3][k];
    }

    static void qops_sort_pass1(const uint8_t* x, ptrdiff_t lo, ptrdiff_t hi, uint8_t flip,
                                int64_t* off16, uint64_t* restrict tmp) {
        for (ptrdiff_t i = lo; i < hi; i++) {
            uint8_t k = x[i] ^ flip;
            tmp[off16[k >> 4]++] = ((uint64_t)i << 8) | k;
        }
    }

    /* Pass 2 of buckets [j0, j1): each bucket (a stretch of idx holding packed entries) is
     * copied to `scratch`, then scattered back by the whole key. */
    static void qops_sort_pass2(int64_t* idx, const int64_t* bstart, int j0, int j1,
                                const int64_t* pos0, uint64_t* scratch) {
        int64_t pos[256];
        memcpy(pos, pos0, sizeof(pos));
        for (int j = j0; j < j1; j++) {
            ptrdiff_t len = bstart[j + 1] - bstart[j];
            memcpy(scratch, idx + bstart[j], (size_t)len * sizeof(int64_t));
            for (ptrdiff_t i = 0; i < len; i++) {
                uint64_t v = scratch[i];
                idx[pos[v & 255]++] = (int64_t)(v >> 8);
            }
        }
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

    /* The k largest keys of a row, largest first, equal keys by increasing index. T = the k-th
     * largest key: all keys > T are taken, and the first k - count(> T) keys equal to T. Keys
     * >= a bound L <= T (from block maxima, or lowered from the maximum) are found with
     * 64-byte compare masks, so small k reads the row three times with vector loads and
     * touches only the candidates one by one. */
    static void qops_topk_row(const uint8_t* x, ptrdiff_t n, ptrdiff_t k, uint8_t flip,
                              uint8_t* vals, int64_t* restrict idx) {
        int64_t h[256], off[256];
        uint8_t pad[64];
        uint64_t valid, m;
        ptrdiff_t i, b;
        if (k <= 0) return;
        int lo;
        ptrdiff_t nb = (n + 63) / 64;
        if (k <= nb) {
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
            int64_t h4[4][256];
            memset(h4, 0, sizeof(h4));
            ptrdiff_t q = n / 4;
            for (i = 0; i < q; i++) {
                h4[0][x[i] ^ flip]++; h4[1][x[i + q] ^ flip]++;
                h4[2][x[i + 2 * q] ^ flip]++; h4[3][x[i + 3 * q] ^ flip]++;
            }
            for (i = 4 * q; i < n; i++) h4[3][x[i] ^ flip]++;
            for (int j = 0; j < 256; j++) h[j] = h4[0][j] + h4[1][j] + h4[2][j] + h4[3][j];
        } else {
            /* only keys >= lo are counted, and T >= lo: the rest of h is never read */
            memset(h + lo, 0, (size_t)(256 - lo) * sizeof(int64_t));
            for (b = 0; b < n; b += 64) {
                const uint8_t* p = qops_block(x, n, b, flip, pad, &valid);
                m = qops_mask64_ge(p, flip, (uint8_t)lo) & valid;
                while (m) { h[p[qops_ctz64(m)] ^ flip]++; m &= m - 1; }
            }
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
    """
    void qops_sort_direct(const uint8_t* x, Py_ssize_t n, uint8_t flip, uint8_t* vals,
                          int64_t* idx) nogil
    void qops_hist256(const uint8_t* x, Py_ssize_t lo, Py_ssize_t hi, uint8_t flip,
                      int64_t* h) nogil
    void qops_sort_pass1(const uint8_t* x, Py_ssize_t lo, Py_ssize_t hi, uint8_t flip,
                         int64_t* off16, uint64_t* tmp) nogil
    void qops_sort_pass2(int64_t* idx, const int64_t* bstart, int j0, int j1,
                         const int64_t* pos0, uint64_t* scratch) nogil
    void qops_topk_row(const uint8_t* x, Py_ssize_t n, Py_ssize_t k, uint8_t flip,
                       uint8_t* vals, int64_t* idx) nogil

DEF GRAIN = 32768        # elements per thread below which a second thread costs more than it gives


DEF LONG_ROW = 65536      # from here a row's indices (8 bytes each) outgrow L2: two-pass scatter


cdef void _sort_rows(const uint8_t[:, ::1] x, uint8_t[:, ::1] vals, int64_t[:, ::1] idx,
                     uint8_t flip, int nthreads) noexcept nogil:
    cdef Py_ssize_t m = x.shape[0], n = x.shape[1], r
    for r in prange(m, schedule="static", num_threads=nthreads):
        qops_sort_direct(&x[r, 0], n, flip, &vals[r, 0], &idx[r, 0])


cdef void _sort_long_row(const uint8_t* x, Py_ssize_t n, uint8_t flip, uint8_t* vals,
                         int64_t* idx, int64_t[:, ::1] h, uint64_t[:, ::1] scratch,
                         int nthreads) noexcept nogil:
    # The row is split into `nthreads` ranges in index order. Pass 1 gives range t, for each
    # high nibble, the slots after those of ranges < t; pass 2 handles whole nibble buckets.
    # Every index lands where a sequential stable sort puts it, whatever the split.
    cdef int64_t pos[256]
    cdef int64_t bstart[17]
    cdef int64_t p, c, tot
    cdef Py_ssize_t t, j, key, lo, hi
    cdef int jb0, jb1
    for t in prange(nthreads, schedule="static", num_threads=nthreads):
        qops_hist256(x, n * t // nthreads, n * (t + 1) // nthreads, flip, &h[t, 0])
    p = 0
    for key in range(256):
        if key % 16 == 0:
            bstart[key // 16] = p
        pos[key] = p
        c = 0
        for t in range(nthreads):
            c = c + h[t, key]
        if c:
            memset(vals + p, <uint8_t>key ^ flip, c)
        p += c
    bstart[16] = p
    # pass-1 offsets per range and nibble (in h[t, 256:272])
    for j in range(16):
        p = bstart[j]
        for t in range(nthreads):
            h[t, 256 + j] = p
            tot = 0
            for key in range(16 * j, 16 * j + 16):
                tot = tot + h[t, key]
            p = p + tot
    for t in prange(nthreads, schedule="static", num_threads=nthreads):
        qops_sort_pass1(x, n * t // nthreads, n * (t + 1) // nthreads, flip, &h[t, 256],
                        <uint64_t*>idx)
    # pass 2: range t takes the nibble buckets whose start falls in its share of positions
    for t in prange(nthreads, schedule="static", num_threads=nthreads):
        lo = n * t // nthreads
        hi = n * (t + 1) // nthreads
        jb0 = 0
        while jb0 < 16 and bstart[jb0] < lo:
            jb0 = jb0 + 1
        jb1 = jb0
        while jb1 < 16 and bstart[jb1] < hi:
            jb1 = jb1 + 1
        # scratch[t] is only touched up to the largest bucket: the rest is never paged in
        qops_sort_pass2(idx, bstart, jb0, jb1, pos, &scratch[t, 0])


cdef _sort_long_rows(const uint8_t[:, ::1] x, uint8_t[:, ::1] vals, int64_t[:, ::1] idx,
                     uint8_t flip, int nthreads):
    cdef Py_ssize_t r, n = x.shape[1]
    cdef int64_t[:, ::1] h = np.empty((nthreads, 272), np.int64)
    cdef uint64_t[:, ::1] scratch = np.empty((nthreads, n), np.uint64)
    with nogil:
        for r in range(x.shape[0]):
            _sort_long_row(&x[r, 0], n, flip, &vals[r, 0], &idx[r, 0], h, scratch, nthreads)


def sort(x, descending):
    """Sort each row of `x`: (values, int64 indices), ties by increasing index."""
    x = np.ascontiguousarray(x)
    m, n = x.shape
    if x.dtype == np.int32:
        # 2^32 keys: no counting sort; numpy's stable sort (negated keys when descending).
        key = -x.astype(np.int64) if descending else x
        idx = np.argsort(key, axis=-1, kind="stable").astype(np.int64)
        return np.take_along_axis(x, idx, axis=-1), idx
    vals = np.empty((m, n), np.uint8)
    idx = np.empty((m, n), np.int64)
    if m * n == 0:
        return vals.view(x.dtype), idx
    u = x.view(np.uint8)
    # keys: int8 bytes with the sign bit flipped sort as unsigned; all bits flipped reverse
    flip = (0x80 if x.dtype == np.int8 else 0) ^ (0xFF if descending else 0)
    if n >= LONG_ROW:
        _sort_long_rows(u, vals, idx, flip, qops_threads_for(n, LONG_ROW // 2))
    else:
        _sort_rows(u, vals, idx, flip, min(m, qops_threads_for(m * n, GRAIN)))
    return vals.view(x.dtype), idx


cdef void _topk_rows(const uint8_t[:, ::1] x, Py_ssize_t k, uint8_t[:, ::1] vals,
                     int64_t[:, ::1] idx, uint8_t flip, int nthreads) noexcept nogil:
    cdef Py_ssize_t m = x.shape[0], n = x.shape[1], r
    if nthreads == 1:
        for r in range(m):
            qops_topk_row(&x[r, 0], n, k, flip, &vals[r, 0], &idx[r, 0])
        return
    for r in prange(m, schedule="static", num_threads=nthreads):
        qops_topk_row(&x[r, 0], n, k, flip, &vals[r, 0], &idx[r, 0])


def topk(x, k, largest):
    """The k largest (or smallest) of each row of `x`, sorted, ties by increasing index."""
    x = np.ascontiguousarray(x)
    m, n = x.shape
    if x.dtype == np.int32:
        key = -x.astype(np.int64) if largest else x
        idx = np.argsort(key, axis=-1, kind="stable")[:, :k].astype(np.int64)
        return np.take_along_axis(x, idx, axis=-1), idx
    vals = np.empty((m, k), np.uint8)
    idx = np.empty((m, k), np.int64)
    if m * k == 0:
        return vals.view(x.dtype), idx
    # Largest keys of the flipped bytes: smallest values when `largest` is false.
    flip = (0x80 if x.dtype == np.int8 else 0) ^ (0 if largest else 0xFF)
    # rows are the parallel axis: never more threads than rows
    _topk_rows(x.view(np.uint8), k, vals, idx, flip, min(m, qops_threads_for(m * n, GRAIN)))
    return vals.view(x.dtype), idx
