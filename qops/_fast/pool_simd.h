/* Vector kernels of the 8-bit max and average pools (see pool.pyx for the scalar paths).
 *
 * Each call handles a range [g0, g1) of global output rows (plane-major over N*C*OD*OH),
 * so the caller splits the rows once per thread. AVX-512 walks vector-wide columns of
 * outputs down each plane (see "column walks"): every input row is reduced horizontally once
 * and the vertical step reuses it for all the output rows it feeds. The W taps are unaligned
 * loads at their offsets, so no padded row buffer exists. AVX2 computes each output row
 * straight from its input rows. Rows shorter than a vector and row tails are the point: AVX-512 covers them with
 * masked loads (lanes outside [0, W) are not read, so padding costs nothing) and masked
 * stores; AVX2 runs whole vectors over the interior columns (the last one overlapping the
 * previous, which is idempotent) and the scalar window formula on the edges.
 *
 * Stride 2 reads two input bytes per output in 16-bit lanes: the low byte is tap k, the high
 * byte tap k+1, so one load serves two taps (max: low vs high byte; sum: pmaddubsw with
 * weights 1,1 or 1,0). Average sums stay in 16-bit lanes, exact for windows of at most 256
 * taps (255 * 256 < 65536 unsigned, -128 * 256 >= -32768 signed); the caller checks.
 * Requantization is the scalar formula 16 lanes at a time: t = f32(sum - size*zp) * m;
 * out = clamp(rint(t + f32(zp))) with separate multiply and add and round half to even
 * (cvtps2dq under the default rounding mode), so every ISA gives the reference's bits
 * (AVX-512 clamps with saturating packs, which the dtype's full range allows).
 */
#ifndef QOPS_POOL_SIMD_H
#define QOPS_POOL_SIMD_H
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#if defined(__AVX2__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif

#if defined(__AVX512BW__)
#define QP_SIMD 2
#elif defined(__AVX2__)
#define QP_SIMD 1
#else
#define QP_SIMD 0
#endif

#define QP_ALWAYS static inline __attribute__((always_inline))
#define QP_MAX_ROWS_ 64   /* (kd, kh) taps a vector row handles: QP_MAX_ROWS */
#define QP_AHEAD_B 1024   /* bytes prefetched ahead along one long row (see qp_pfw) */
/* Status of qp_max_rows / qp_avg_rows (0: every output row written); pool.pyx raises. */
#define QP_ERR_NOMEM 1    /* the mask table could not be allocated: MemoryError */
#define QP_ERR_GEOM 2     /* a geometry the kernels do not take (the caller checks first) */

/* Geometry of one pool call, shared by every row. */
typedef struct {
    ptrdiff_t D, H, W, OD, OH, OW;
    ptrdiff_t kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW;
} qp_geom;

/* Integer requantize tables of an average pool (pool.pyx, _int_tables): per output (the
 * float tables' layout) three int16 rows at t, t + stride, t + 2*stride, checked against the
 * float formula for every reachable sum when built; NULL where the float path must run.
 * kind 0 (odd divisors), rows c, m, e: q = (mulhi_u16(sum + c, m) >> sh) + e.
 * kind 1 (divisors 2**k), rows c, k, h: x = sum + c; q = (x + h + ((x >> k) & min(k, 1))) >> k
 * (arithmetic shifts), x / 2**k rounded half to even. */
typedef struct {
    const int16_t *t;
    ptrdiff_t stride;
    int sh;
    int kind;
} qp_irq;

/* The requantize of an average pool for the short-row kernel: table rows cls[od*OH + oh] of
 * zt, mt (size*zp, f32(1/div); see pool.pyx) or of the integer tables iq (NULL: float). */
typedef struct {
    const int32_t *cls, *zt;
    const float *mt;
    float zp;
    const qp_irq *iq;
} qp_avgq;

/* 1 if the vector kernels of this build handle the geometry (else the caller's scalar path). */
static inline int qp_simd_ok(const qp_geom *g) {
    return QP_SIMD > 0 && (g->sW == 1 || g->sW == 2);
}

/* Input row pointers of every valid (kd, kh) tap of output row (od, oh); returns their count. */
static inline int qp_rows(const qp_geom *g, const uint8_t *plane, ptrdiff_t od, ptrdiff_t oh,
                          const uint8_t **rows) {
    int n = 0;
    for (ptrdiff_t kd = 0; kd < g->kD; kd++) {
        ptrdiff_t idd = od * g->sD - g->pD + kd * g->dD;
        if (idd < 0 || idd >= g->D) continue;
        for (ptrdiff_t kh = 0; kh < g->kH; kh++) {
            ptrdiff_t ih = oh * g->sH - g->pH + kh * g->dH;
            if (ih < 0 || ih >= g->H) continue;
            rows[n++] = plane + (idd * g->H + ih) * g->W;
        }
    }
    return n;
}

/* The scalar window of output ow over the given rows (edges of the AVX2 path). */
QP_ALWAYS int qp_max1(const uint8_t *const *rows, int nr, const qp_geom *g, ptrdiff_t ow,
                      int sgn) {
    int best = sgn ? -128 : 0;
    for (int r = 0; r < nr; r++)
        for (ptrdiff_t k = 0; k < g->kW; k++) {
            ptrdiff_t iw = ow * g->sW - g->pW + k * g->dW;
            if (iw < 0 || iw >= g->W) continue;
            int v = sgn ? (int)((const int8_t *)rows[r])[iw] : (int)rows[r][iw];
            if (v > best) best = v;
        }
    return best;
}

QP_ALWAYS int32_t qp_sum1(const uint8_t *const *rows, int nr, const qp_geom *g, ptrdiff_t ow,
                          int sgn) {
    int32_t s = 0;
    for (int r = 0; r < nr; r++)
        for (ptrdiff_t k = 0; k < g->kW; k++) {
            ptrdiff_t iw = ow * g->sW - g->pW + k;
            if (iw < 0 || iw >= g->W) continue;
            s += sgn ? (int32_t)((const int8_t *)rows[r])[iw] : (int32_t)rows[r][iw];
        }
    return s;
}

QP_ALWAYS uint8_t qp_requant1(int32_t s, int32_t z, float m, float zpf, int32_t qmin,
                              int32_t qmax) {
    float t = (float)(s - z) * m;
    float u = rintf(t + zpf);
    int32_t q = (int32_t)u;
    q = q < qmin ? qmin : q;
    q = q > qmax ? qmax : q;
    return (uint8_t)q;
}

/* Columns [lo, hi) of outputs whose every tap lies inside the row: the vector chunks of the
 * AVX2 path read `span` bytes from ow*sW - pW + k (k < kW taps), all inside [0, W). */
static inline void qp_interior(const qp_geom *g, ptrdiff_t dil, ptrdiff_t span, ptrdiff_t vec,
                               ptrdiff_t *lo, ptrdiff_t *hi) {
    ptrdiff_t a = (g->pW + g->sW - 1) / g->sW;
    /* last chunk start c: c*sW - pW + (kW-1)*dil + span <= W */
    ptrdiff_t lim = g->W + g->pW - (g->kW - 1) * dil - span;
    ptrdiff_t c = lim < 0 ? -1 : lim / g->sW;
    ptrdiff_t b = c + vec;                      /* exclusive end of the last chunk */
    if (b > g->OW) b = g->OW;
    if (c < a || b - a < vec) { *lo = 0; *hi = 0; return; }
    *lo = a;
    *hi = b;
}

/* ---------------------------------------------------------------------------------------- */
#if QP_SIMD == 2

/* Lanes j with lo <= j < hi of a 64-lane vector. */
QP_ALWAYS __mmask64 qp_m64(ptrdiff_t lo, ptrdiff_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 64) hi = 64;
    if (hi <= lo) return 0;
    return _bzhi_u64(~0ULL, (unsigned)hi) & ~_bzhi_u64(~0ULL, (unsigned)lo);
}

QP_ALWAYS __m512i qp_vmax(__m512i a, __mmask64 m, __m512i v, int sgn) {
    return sgn ? _mm512_mask_max_epi8(a, m, a, v) : _mm512_mask_max_epu8(a, m, a, v);
}

/* Low bytes of the 16-bit lanes of a (outputs 0..31) and b (32..63), in order. */
QP_ALWAYS __m512i qp_even(__m512i a, __m512i b) {
    const __m512i lo = _mm512_set1_epi16(0xFF);
    __m512i p = _mm512_packus_epi16(_mm512_and_si512(a, lo), _mm512_and_si512(b, lo));
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), p);
}

/* Load masks of every (chunk, load) of a row, the same for all rows of a call: chunk c
 * covers outputs [c*cw, c*cw + cw), load j reads `halves` vectors of 64 bytes (32 when
 * cw*sW == 32) from c*cw*sW - pW + off[j]. Lanes outside [0, W) are masked out. */
static __mmask64 *qp_masks(const qp_geom *g, ptrdiff_t cw, int halves, const ptrdiff_t *off,
                           int nl, ptrdiff_t *nchunks) {
    ptrdiff_t nc = (g->OW + cw - 1) / cw;
    __mmask64 *t = (__mmask64 *)malloc((size_t)(nc * nl * halves + 1) * sizeof(__mmask64));
    if (!t) return NULL;
    for (ptrdiff_t c = 0; c < nc; c++)
        for (int j = 0; j < nl; j++)
            for (int h = 0; h < halves; h++) {
                ptrdiff_t b = c * cw * g->sW - g->pW + off[j] + 64 * h;
                t[(c * nl + j) * halves + h] = qp_m64(-b, g->W - b);
            }
    *nchunks = nc;
    return t;
}

/* Loads of a row: max pools with stride 2 and dilation 1 read taps k, k+1 in one load
 * (pair[j] = 1), every other case one tap per load. Returns the count. */
static int qp_loads(const qp_geom *g, int pairs, ptrdiff_t *off, int *pair) {
    int n = 0;
    for (ptrdiff_t k = 0; k < g->kW; k += pairs ? 2 : 1) {
        off[n] = k * (pairs ? 1 : g->dW);
        pair[n] = pairs && k + 1 < g->kW;
        n++;
    }
    return n;
}

/* 64 maxima of chunk outputs ow0.. of one row, stride 1 (nl constant when common). */
QP_ALWAYS __m512i qp_max_chunk1(const uint8_t *const *rows, int nr, ptrdiff_t b0,
                                const __mmask64 *mt, const ptrdiff_t *off, int nl, int sgn) {
    __m512i acc = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
    for (int r = 0; r < nr; r++) {
        const uint8_t *q = rows[r] + b0;
        for (int j = 0; j < nl; j++)
            acc = qp_vmax(acc, mt[j], _mm512_maskz_loadu_epi8(mt[j], q + off[j]), sgn);
    }
    return acc;
}

/* The same for stride 2: loads j with pair[j] carry taps k, k+1 in the low and high bytes. */
QP_ALWAYS __m512i qp_max_chunk2(const uint8_t *const *rows, int nr, ptrdiff_t b0, int two,
                                const __mmask64 *mt, const ptrdiff_t *off, const int *pair,
                                int nl, int sgn) {
    const __m512i low = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
    __m512i p0 = low, p1 = low, s0 = low, s1 = low;
    for (int r = 0; r < nr; r++) {
        const uint8_t *q = rows[r] + b0;
        for (int j = 0; j < nl; j++) {
            __mmask64 m0 = mt[2 * j], m1 = mt[2 * j + 1];
            __m512i v0 = _mm512_maskz_loadu_epi8(m0, q + off[j]);
            if (pair[j]) p0 = qp_vmax(p0, m0, v0, sgn);
            else s0 = qp_vmax(s0, m0, v0, sgn);
            if (two) {
                __m512i v1 = _mm512_maskz_loadu_epi8(m1, q + off[j] + 64);
                if (pair[j]) p1 = qp_vmax(p1, m1, v1, sgn);
                else s1 = qp_vmax(s1, m1, v1, sgn);
            }
        }
    }
    /* tap k+1 sits in the high byte of the pair lanes; only low bytes are kept */
    s0 = qp_vmax(s0, ~0ULL, qp_vmax(p0, ~0ULL, _mm512_srli_epi16(p0, 8), sgn), sgn);
    s1 = qp_vmax(s1, ~0ULL, qp_vmax(p1, ~0ULL, _mm512_srli_epi16(p1, 8), sgn), sgn);
    return qp_even(s0, s1);
}

QP_ALWAYS void qp_max_row(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                          const __mmask64 *mt, const ptrdiff_t *off, const int *pair, int nl,
                          ptrdiff_t nc, int sgn) {
    const ptrdiff_t OW = g->OW, pW = g->pW;
    if (g->sW == 1) {
        for (ptrdiff_t c = 0; c < nc; c++, mt += nl) {
            ptrdiff_t ow0 = c * 64, n = OW - ow0 < 64 ? OW - ow0 : 64;
            __m512i v = nl == 2 ? qp_max_chunk1(rows, nr, ow0 - pW, mt, off, 2, sgn)
                      : nl == 3 ? qp_max_chunk1(rows, nr, ow0 - pW, mt, off, 3, sgn)
                      : qp_max_chunk1(rows, nr, ow0 - pW, mt, off, nl, sgn);
            _mm512_mask_storeu_epi8(o + ow0, _bzhi_u64(~0ULL, (unsigned)n), v);
        }
        return;
    }
    for (ptrdiff_t c = 0; c < nc; c++, mt += 2 * nl) {
        ptrdiff_t ow0 = c * 64, n = OW - ow0 < 64 ? OW - ow0 : 64;
        ptrdiff_t b0 = 2 * ow0 - pW;
        __m512i v;
        if (n > 32)
            v = nl == 1 ? qp_max_chunk2(rows, nr, b0, 1, mt, off, pair, 1, sgn)
              : nl == 2 ? qp_max_chunk2(rows, nr, b0, 1, mt, off, pair, 2, sgn)
              : qp_max_chunk2(rows, nr, b0, 1, mt, off, pair, nl, sgn);
        else
            v = nl == 1 ? qp_max_chunk2(rows, nr, b0, 0, mt, off, pair, 1, sgn)
              : nl == 2 ? qp_max_chunk2(rows, nr, b0, 0, mt, off, pair, 2, sgn)
              : qp_max_chunk2(rows, nr, b0, 0, mt, off, pair, nl, sgn);
        _mm512_mask_storeu_epi8(o + ow0, _bzhi_u64(~0ULL, (unsigned)n), v);
    }
}

/* 32 window sums (16-bit lanes) of chunk outputs ow0.. of one row; mt: the chunk's masks.
 * Called with a constant nl for the common windows, so the load loop unrolls. */
QP_ALWAYS __m512i qp_sum_chunk(const uint8_t *const *rows, int nr, ptrdiff_t kW, ptrdiff_t b0,
                               const __mmask64 *mt, const ptrdiff_t *off, int nl, int s2,
                               int sgn) {
    /* b0 = ow0*sW - pW: the chunk's first tap */
    __m512i acc = _mm512_setzero_si512();
    if (!s2) {
        for (int r = 0; r < nr; r++) {
            const uint8_t *q = rows[r] + b0;
            for (int j = 0; j < nl; j++) {
                __m256i v = _mm256_maskz_loadu_epi8((__mmask32)mt[j], q + off[j]);
                acc = _mm512_add_epi16(acc, sgn ? _mm512_cvtepi8_epi16(v) : _mm512_cvtepu8_epi16(v));
            }
        }
        return acc;
    }
    const __m512i w11 = _mm512_set1_epi16(0x0101), w10 = _mm512_set1_epi16(0x0001);
    for (int r = 0; r < nr; r++) {
        const uint8_t *q = rows[r] + b0;
        for (int j = 0; j < nl; j++) {
            __m512i w = off[j] + 1 < kW ? w11 : w10;
            __m512i v = _mm512_maskz_loadu_epi8(mt[j], q + off[j]);
            acc = _mm512_add_epi16(acc, sgn ? _mm512_maddubs_epi16(w, v) : _mm512_maddubs_epi16(v, w));
        }
    }
    return acc;
}

/* f32 requantize of 16 sums (int32 lanes) with table entries z, m (unmasked loads: the
 * tables carry 32 spare entries past their end); unclamped int32 results. */
QP_ALWAYS __m512i qp_rq16(__m512i s, const int32_t *z, const float *m, __m512 zpf) {
    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_loadu_si512((const void *)z))),
                             _mm512_loadu_ps(m));
    return _mm512_cvtps_epi32(_mm512_add_ps(t, zpf));
}

/* 32 integer-requantized results (16-bit lanes, before the saturating pack's clamp) from
 * the three table rows t[0..2] of qp_irq, in registers. */
QP_ALWAYS __m512i qp_irq32v(__m512i acc, const __m512i *t, __m128i sh, int kind) {
    __m512i x = _mm512_add_epi16(acc, t[0]);
    if (kind) {
        __m512i r = _mm512_and_si512(_mm512_srav_epi16(x, t[1]), _mm512_min_epu16(t[1], _mm512_set1_epi16(1)));
        return _mm512_srav_epi16(_mm512_add_epi16(_mm512_add_epi16(x, t[2]), r), t[1]);
    }
    return _mm512_add_epi16(_mm512_srl_epi16(_mm512_mulhi_epu16(x, t[1]), sh), t[2]);
}

/* The same with the table rows of entries cz.. loaded from iq. */
QP_ALWAYS __m512i qp_irq32(__m512i acc, const qp_irq *iq, ptrdiff_t cz) {
    const int16_t *p = iq->t + cz;
    const __m512i t[3] = {_mm512_loadu_si512((const void *)p),
                          _mm512_loadu_si512((const void *)(p + iq->stride)),
                          _mm512_loadu_si512((const void *)(p + 2 * iq->stride))};
    return qp_irq32v(acc, t, _mm_cvtsi32_si128(iq->sh), iq->kind);
}

/* Requantize the 32 window sums of acc (16-bit lanes, unsigned or signed as the input) into
 * o[0..n); z, mul: the table row from the chunk's first output. The saturating packs are the
 * clamp to [qmin, qmax] (cvtps2dq's out-of-range 0x80000000 saturates to qmin, as a clamp
 * would); vpermd puts the dwords the in-lane packs interleaved back in order. */
QP_ALWAYS void qp_avg_store(__m512i acc, const int32_t *z, const float *mul, uint8_t *o,
                            ptrdiff_t n, __m512 zpf, int sgn, const qp_irq *iq, ptrdiff_t cz) {
    if (iq) {
        __m512i q = qp_irq32(acc, iq, cz);
        q = sgn ? _mm512_packs_epi16(q, q) : _mm512_packus_epi16(q, q);
        q = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), q);
        _mm256_mask_storeu_epi8(o, _bzhi_u32(~0U, (unsigned)n), _mm512_castsi512_si256(q));
        return;
    }
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    __m256i a0 = _mm512_castsi512_si256(acc), a1 = _mm512_extracti64x4_epi64(acc, 1);
    __m512i q0 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(a0) : _mm512_cvtepu16_epi32(a0), z, mul, zpf);
    __m512i q1 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(a1) : _mm512_cvtepu16_epi32(a1), z + 16,
                         mul + 16, zpf);
    __m512i w = _mm512_packs_epi32(q0, q1);
    __m512i b = sgn ? _mm512_packs_epi16(w, w) : _mm512_packus_epi16(w, w);
    b = _mm512_permutexvar_epi32(idx, b);
    _mm256_mask_storeu_epi8(o, _bzhi_u32(~0U, (unsigned)n), _mm512_castsi512_si256(b));
}

/* -- column walks ----------------------------------------------------------------------
 * A vector-wide column of outputs (chunk c) walks down output rows [oa, ob) of one (n, c, od)
 * plane. Each input row ih is reduced horizontally once (folded over the D window first)
 * into a ring of QP_RING vectors, so the rows shared by neighbouring output rows (3x3 stride
 * 1 or 2) are loaded and reduced once; the vertical step then works on the ring only.
 * Average pools keep a running 16-bit sum (add the entering rows, subtract the leaving ones):
 * the sum is exact modulo 2**16 and the window's true sum fits 16 bits (<= 256 taps), so the
 * wrapped intermediate values never matter. The ring holds the rows [h0, h1) of the current
 * window: at most kH <= QP_RING rows (dH == 1). */
#define QP_RING 64
#define QP_AHEAD 8     /* input and output rows prefetched ahead of a column walk */

/* Prefetch for writing (prefetchw where the CPU has it). Column walks prefetch the input rows
 * and the output row QP_AHEAD steps ahead: without them the hardware prefetchers of AMD Zen 5
 * left the walks waiting on memory beyond the caches (3x3 stride-1 average pool on
 * 16x256x56x56: 1.0 -> 0.37 cycles per input byte, the in-cache speed). A hint never faults. */
QP_ALWAYS void qp_pfw(const uint8_t *p) { __builtin_prefetch((const void *)p, 1, 3); }

/* Input planes idd*H*W of the D taps of output plane od that lie inside the input. */
static inline int qp_dplanes(const qp_geom *g, const uint8_t *plane, ptrdiff_t od,
                             const uint8_t **dp) {
    int n = 0;
    for (ptrdiff_t kd = 0; kd < g->kD; kd++) {
        ptrdiff_t idd = od * g->sD - g->pD + kd * g->dD;
        if (idd >= 0 && idd < g->D) dp[n++] = plane + idd * g->H * g->W;
    }
    return n;
}

QP_ALWAYS __m512i qp_hmax(const uint8_t *const *dp, int nd, ptrdiff_t roff, ptrdiff_t b0,
                          int s2, int two, const __mmask64 *mt, const ptrdiff_t *off,
                          const int *pair, int nl, int sgn) {
    const uint8_t *rows[QP_MAX_ROWS_];
    for (int i = 0; i < nd; i++) rows[i] = dp[i] + roff;
    if (!s2) return qp_max_chunk1(rows, nd, b0, mt, off, nl, sgn);
    return qp_max_chunk2(rows, nd, b0, two, mt, off, pair, nl, sgn);
}

QP_ALWAYS void qp_max_col(const uint8_t *const *dp, int nd, const qp_geom *g, ptrdiff_t oa,
                          ptrdiff_t ob, uint8_t *o, ptrdiff_t c, const __mmask64 *mt,
                          const ptrdiff_t *off, const int *pair, int nl, int s2, int two,
                          int sgn) {
    __m512i ring[QP_RING];
    const ptrdiff_t ow0 = c * 64, n = g->OW - ow0 < 64 ? g->OW - ow0 : 64;
    const ptrdiff_t b0 = ow0 * g->sW - g->pW, W = g->W, H = g->H, OW = g->OW;
    const __mmask64 km = _bzhi_u64(~0ULL, (unsigned)n);
    const __m512i low = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
    ptrdiff_t cur = 0;                       /* rows below cur are in the ring (or skipped) */
    o += ow0;
    if (g->kH - g->sH <= 1) {
        /* Windows sharing at most one row (3x3 stride 2, k x k stride k): the shared row's
         * horizontal max stays in a register. The ring's store and reloads cost about as
         * much as the horizontal work here (3x3/2 on 64x112x112: 28 -> 20 us). */
        __m512i carry = low;
        ptrdiff_t crow = -1;                 /* the input row whose reduction is in carry */
        for (ptrdiff_t oh = oa; oh < ob; oh++, o += OW) {
            ptrdiff_t h0 = oh * g->sH - g->pH, h1 = h0 + g->kH;
            if (h0 < 0) h0 = 0;
            if (h1 > H) h1 = H;
            __m512i v = low;
            ptrdiff_t ih = h0;
            if (ih == crow) { v = carry; ih++; }
            for (; ih < h1; ih++) {
                for (int i = 0; i < nd; i++)
                    _mm_prefetch((const char *)(dp[i] + (ih + QP_AHEAD) * W + b0), _MM_HINT_T0);
                carry = qp_hmax(dp, nd, ih * W, b0, s2, two, mt, off, pair, nl, sgn);
                v = qp_vmax(v, ~0ULL, carry, sgn);
            }
            crow = h1 - 1;
            qp_pfw(o + QP_AHEAD * OW);
            _mm512_mask_storeu_epi8(o, km, v);
        }
        return;
    }
    if (g->kH == 3 && g->sH == 1) {
        /* 3 rows per window, stride 1: the window's first two rows are the last step's last
         * two, rotated through registers (as qp_avg3_col); rows outside the input reduce to
         * the identity of max */
        __m512i p, q, r;
#define QP_HMAX_ROW(IH, V) do { \
            ptrdiff_t ih_ = (IH); \
            if (ih_ < 0 || ih_ >= H) { (V) = low; break; } \
            for (int i = 0; i < nd; i++) \
                _mm_prefetch((const char *)(dp[i] + (ih_ + QP_AHEAD) * W + b0), _MM_HINT_T0); \
            (V) = qp_hmax(dp, nd, ih_ * W, b0, s2, two, mt, off, pair, nl, sgn); \
        } while (0)
        QP_HMAX_ROW(oa - g->pH, p);
        QP_HMAX_ROW(oa - g->pH + 1, q);
        for (ptrdiff_t oh = oa; oh < ob; oh++, o += OW) {
            QP_HMAX_ROW(oh - g->pH + 2, r);
            __m512i v = qp_vmax(qp_vmax(p, ~0ULL, q, sgn), ~0ULL, r, sgn);
            qp_pfw(o + QP_AHEAD * OW);
            _mm512_mask_storeu_epi8(o, km, v);
            p = q;
            q = r;
        }
#undef QP_HMAX_ROW
        return;
    }
    for (ptrdiff_t oh = oa; oh < ob; oh++, o += OW) {
        ptrdiff_t h0 = oh * g->sH - g->pH, h1 = h0 + g->kH;
        if (h0 < 0) h0 = 0;
        if (h1 > H) h1 = H;
        if (cur < h0) cur = h0;
        for (; cur < h1; cur++) {
            for (int i = 0; i < nd; i++)
                _mm_prefetch((const char *)(dp[i] + (cur + QP_AHEAD) * W + b0), _MM_HINT_T0);
            ring[cur & (QP_RING - 1)] = qp_hmax(dp, nd, cur * W, b0, s2, two, mt, off, pair, nl, sgn);
        }
        qp_pfw(o + QP_AHEAD * OW);
        __m512i v = low;
        for (ptrdiff_t ih = h0; ih < h1; ih++) v = qp_vmax(v, ~0ULL, ring[ih & (QP_RING - 1)], sgn);
        _mm512_mask_storeu_epi8(o, km, v);
    }
}

/* Requantize 64 window sums (a0: outputs 0..31, a1: 32..63) into o[0..n): as qp_avg_store,
 * with one pair of packs and one permute for twice the outputs. */
QP_ALWAYS void qp_avg_store2(__m512i a0, __m512i a1, const int32_t *z, const float *mul,
                             uint8_t *o, ptrdiff_t n, __m512 zpf, int sgn, const qp_irq *iq,
                             ptrdiff_t cz) {
    if (iq) {
        __m512i q0 = qp_irq32(a0, iq, cz), q1 = qp_irq32(a1, iq, cz + 32);
        __m512i q = sgn ? _mm512_packs_epi16(q0, q1) : _mm512_packus_epi16(q0, q1);
        q = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), q);
        _mm512_mask_storeu_epi8(o, _bzhi_u64(~0ULL, (unsigned)n), q);
        return;
    }
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m256i l0 = _mm512_castsi512_si256(a0), h0 = _mm512_extracti64x4_epi64(a0, 1);
    __m256i l1 = _mm512_castsi512_si256(a1), h1 = _mm512_extracti64x4_epi64(a1, 1);
    __m512i q0 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(l0) : _mm512_cvtepu16_epi32(l0), z, mul, zpf);
    __m512i q1 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(h0) : _mm512_cvtepu16_epi32(h0), z + 16,
                         mul + 16, zpf);
    __m512i q2 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(l1) : _mm512_cvtepu16_epi32(l1), z + 32,
                         mul + 32, zpf);
    __m512i q3 = qp_rq16(sgn ? _mm512_cvtepi16_epi32(h1) : _mm512_cvtepu16_epi32(h1), z + 48,
                         mul + 48, zpf);
    __m512i w0 = _mm512_packs_epi32(q0, q1), w1 = _mm512_packs_epi32(q2, q3);
    __m512i b = sgn ? _mm512_packs_epi16(w0, w1) : _mm512_packus_epi16(w0, w1);
    _mm512_mask_storeu_epi8(o, _bzhi_u64(~0ULL, (unsigned)n), _mm512_permutexvar_epi32(idx, b));
}

/* two: chunks c and c + 1 in one walk (64 outputs; c + 1 must exist), so the row loop and
 * the requantize's packs serve twice the outputs. The table reads stay inside the tables'
 * 32 spare entries: chunk c + 1 starts before OW. */
QP_ALWAYS void qp_avg_col(const uint8_t *const *dp, int nd, const qp_geom *g, ptrdiff_t oa,
                          ptrdiff_t ob, uint8_t *o, ptrdiff_t c, const int32_t *cls,
                          const int32_t *zt, const float *mtab, __m512 zpf,
                          const __mmask64 *mt, const ptrdiff_t *off, int nl, int s2, int two,
                          int sgn, const qp_irq *iq) {
    __m512i ring[2 * QP_RING];
    const ptrdiff_t span = two ? 64 : 32;
    const ptrdiff_t ow0 = c * 32, n = g->OW - ow0 < span ? g->OW - ow0 : span;
    const ptrdiff_t W = g->W, H = g->H, OW = g->OW, sH = g->sH, pH = g->pH, kH = g->kH;
    const ptrdiff_t kW = g->kW, b0 = ow0 * (s2 ? 2 : 1) - g->pW, b1 = b0 + (s2 ? 64 : 32);
    const uint8_t *rows[QP_MAX_ROWS_];
    /* the chunks' masks and offsets in locals (registers when nl is constant): through the
     * pointers GCC reloaded them for every input row, as the ring stores might alias them */
    __mmask64 lm[2 * QP_MAX_ROWS_];
    ptrdiff_t lo[QP_MAX_ROWS_];
    for (int j = 0; j < nl; j++) {
        lm[j] = mt[j];
        lm[nl + j] = two ? mt[nl + j] : 0;
        lo[j] = off[j];
    }
    __m512i v0 = _mm512_setzero_si512(), v1 = v0;
    ptrdiff_t cur0 = 0, cur1 = 0;            /* v = sum of the ring rows [cur0, cur1) */
    o += ow0;
    if (kH - sH <= 1) {
        /* windows sharing at most one row: its sums stay in registers, no ring (as
         * qp_max_col) */
        __m512i c0 = v0, c1 = v0;
        ptrdiff_t crow = -1;                 /* the input row whose sums are in c0, c1 */
        for (ptrdiff_t oh = oa; oh < ob; oh++, o += OW) {
            ptrdiff_t h0 = oh * sH - pH, h1 = h0 + kH;
            if (h0 < 0) h0 = 0;
            if (h1 > H) h1 = H;
            ptrdiff_t ih = h0;
            v0 = v1 = _mm512_setzero_si512();
            if (ih == crow) { v0 = c0; v1 = c1; ih++; }
            for (; ih < h1; ih++) {
                for (int i = 0; i < nd; i++) {
                    rows[i] = dp[i] + ih * W;
                    _mm_prefetch((const char *)(rows[i] + QP_AHEAD * W + b0), _MM_HINT_T0);
                }
                c0 = qp_sum_chunk(rows, nd, kW, b0, lm, lo, nl, s2, sgn);
                v0 = _mm512_add_epi16(v0, c0);
                if (two) {
                    c1 = qp_sum_chunk(rows, nd, kW, b1, lm + nl, lo, nl, s2, sgn);
                    v1 = _mm512_add_epi16(v1, c1);
                }
            }
            crow = h1 - 1;
            ptrdiff_t cz = (ptrdiff_t)cls[oh] * OW + ow0;
            qp_pfw(o + QP_AHEAD * OW);
            if (two) qp_avg_store2(v0, v1, zt + cz, mtab + cz, o, n, zpf, sgn, iq, cz);
            else qp_avg_store(v0, zt + cz, mtab + cz, o, n, zpf, sgn, iq, cz);
        }
        return;
    }
    for (ptrdiff_t oh = oa; oh < ob; oh++, o += OW) {
        ptrdiff_t h0 = oh * sH - pH, h1 = h0 + kH;
        if (h0 < 0) h0 = 0;
        if (h1 > H) h1 = H;
        if (h0 >= cur1) { v0 = v1 = _mm512_setzero_si512(); cur0 = cur1 = h0; }
        for (; cur1 < h1; cur1++) {
            for (int i = 0; i < nd; i++) {
                rows[i] = dp[i] + cur1 * W;
                /* (see qp_pfw; several planes walked at once, 3-d pools, need it too) */
                _mm_prefetch((const char *)(rows[i] + QP_AHEAD * W + b0), _MM_HINT_T0);
            }
            __m512i s = qp_sum_chunk(rows, nd, kW, b0, lm, lo, nl, s2, sgn);
            ring[2 * (cur1 & (QP_RING - 1))] = s;
            v0 = _mm512_add_epi16(v0, s);
            if (two) {
                __m512i t = qp_sum_chunk(rows, nd, kW, b1, lm + nl, lo, nl, s2, sgn);
                ring[2 * (cur1 & (QP_RING - 1)) + 1] = t;
                v1 = _mm512_add_epi16(v1, t);
            }
        }
        for (; cur0 < h0; cur0++) {
            v0 = _mm512_sub_epi16(v0, ring[2 * (cur0 & (QP_RING - 1))]);
            if (two) v1 = _mm512_sub_epi16(v1, ring[2 * (cur0 & (QP_RING - 1)) + 1]);
        }
        ptrdiff_t cz = (ptrdiff_t)cls[oh] * OW + ow0;
        qp_pfw(o + QP_AHEAD * OW);
        if (two) qp_avg_store2(v0, v1, zt + cz, mtab + cz, o, n, zpf, sgn, iq, cz);
        else qp_avg_store(v0, zt + cz, mtab + cz, o, n, zpf, sgn, iq, cz);
    }
}

/* One output row (od, oh) straight from its input rows, two chunks at a time: runs of a single
 * row (every 1-d pool) would pay a column walk's setup per chunk for no row to share. */
QP_ALWAYS void qp_avg_row1(const uint8_t *plane, const qp_geom *g, ptrdiff_t od, ptrdiff_t oh,
                           uint8_t *o, const int32_t *z, const float *mul, __m512 zpf,
                           const __mmask64 *mt, const ptrdiff_t *off, int nl, ptrdiff_t nc,
                           int s2, int sgn, const qp_irq *iq, ptrdiff_t cz) {
    const uint8_t *rows[QP_MAX_ROWS_];
    int nr = qp_rows(g, plane, od, oh, rows);
    const ptrdiff_t sw = s2 ? 2 : 1, pW = g->pW, kW = g->kW, OW = g->OW;
    ptrdiff_t c = 0;
    for (; c + 1 < nc; c += 2, mt += 2 * nl) {
        ptrdiff_t ow0 = c * 32, n = OW - ow0 < 64 ? OW - ow0 : 64;
        __m512i a0 = qp_sum_chunk(rows, nr, kW, ow0 * sw - pW, mt, off, nl, s2, sgn);
        __m512i a1 = qp_sum_chunk(rows, nr, kW, (ow0 + 32) * sw - pW, mt + nl, off, nl, s2, sgn);
        qp_avg_store2(a0, a1, z + ow0, mul + ow0, o + ow0, n, zpf, sgn, iq, cz + ow0);
    }
    if (c < nc) {
        ptrdiff_t ow0 = c * 32, n = OW - ow0 < 32 ? OW - ow0 : 32;
        qp_avg_store(qp_sum_chunk(rows, nr, kW, ow0 * sw - pW, mt, off, nl, s2, sgn), z + ow0,
                     mul + ow0, o + ow0, n, zpf, sgn, iq, cz + ow0);
    }
}

/* Output rows [g0, g1) (plane-major over N*C*OD*OH) as runs [oa, ob) of output rows of one
 * (plane, od): BODY sees plane (input plane base), od, oa, ob and orow (output row oa). */
#define QP_FOR_RUNS(g, x, out, g0, g1, BODY) do { \
    ptrdiff_t rpp_ = (g)->OD * (g)->OH, psz_ = (g)->D * (g)->H * (g)->W; \
    ptrdiff_t p_ = (g0) / rpp_, rem_ = (g0) - p_ * rpp_; \
    ptrdiff_t od = rem_ / (g)->OH, oa = rem_ - od * (g)->OH, r_ = (g0); \
    while (r_ < (g1)) { \
        ptrdiff_t ob = (g)->OH; \
        if (ob - oa > (g1) - r_) ob = oa + ((g1) - r_); \
        const uint8_t *plane = (x) + p_ * psz_; \
        uint8_t *orow = (out) + r_ * (g)->OW; \
        BODY; \
        r_ += ob - oa; \
        oa = 0; \
        if (++od == (g)->OD) { od = 0; p_++; } \
    } \
} while (0)

/* -- three taps, stride 1 -----------------------------------------------------------------
 * Windows of 3 taps at stride 1 (3x3 stride-1 pools, 1-d 3-tap pools) sum 64 outputs per
 * chunk from 3 byte loads at offsets 0, 1, 2 with 4 vpmaddubsw: even outputs ow0 + 2j are
 * the pair (2j, 2j+1) of the load at 0 plus byte 2j of the load at 2, odd outputs the pair
 * of the load at 1 plus byte 2j+1 of the load at 2, in 16-bit lanes e and o. The integer
 * requantize reads tables de-interleaved the same way (pool.pyx: per chunk, 32 even then 32
 * odd outputs); the saturating pack of (e, o) and one in-lane byte shuffle give the 64
 * results in order. */
QP_ALWAYS void qp_sum3(const uint8_t *const *rows, int nr, ptrdiff_t b, __mmask64 ma,
                       __mmask64 mb, __mmask64 mc, int sgn, __m512i *e, __m512i *o) {
    const __m512i w11 = _mm512_set1_epi16(0x0101), w10 = _mm512_set1_epi16(0x0001);
    const __m512i w01 = _mm512_set1_epi16(0x0100);
    __m512i se = _mm512_setzero_si512(), so = se;
    for (int r = 0; r < nr; r++) {
        const uint8_t *q = rows[r] + b;
        __m512i A = _mm512_maskz_loadu_epi8(ma, q), B = _mm512_maskz_loadu_epi8(mb, q + 1);
        __m512i C = _mm512_maskz_loadu_epi8(mc, q + 2);
        if (sgn) {
            se = _mm512_add_epi16(se, _mm512_add_epi16(_mm512_maddubs_epi16(w11, A), _mm512_maddubs_epi16(w10, C)));
            so = _mm512_add_epi16(so, _mm512_add_epi16(_mm512_maddubs_epi16(w11, B), _mm512_maddubs_epi16(w01, C)));
        } else {
            se = _mm512_add_epi16(se, _mm512_add_epi16(_mm512_maddubs_epi16(A, w11), _mm512_maddubs_epi16(C, w10)));
            so = _mm512_add_epi16(so, _mm512_add_epi16(_mm512_maddubs_epi16(B, w11), _mm512_maddubs_epi16(C, w01)));
        }
    }
    *e = se;
    *o = so;
}

/* Table rows of chunk entries cz (even outputs) and cz + 32 (odd) into te[3], to[3]. */
QP_ALWAYS void qp_irq_load(const qp_irq *iq, ptrdiff_t cz, __m512i *te, __m512i *to) {
    for (int i = 0; i < 3; i++) {
        te[i] = _mm512_loadu_si512((const void *)(iq->t + cz + i * iq->stride));
        to[i] = _mm512_loadu_si512((const void *)(iq->t + cz + 32 + i * iq->stride));
    }
}

/* Requantize the even (e) and odd (o) sums of a chunk with its de-interleaved table rows
 * te, to and store outputs [0, n) in order. */
QP_ALWAYS void qp_avg3_store(__m512i e, __m512i o, const __m512i *te, const __m512i *to,
                             __m128i sh, int kind, uint8_t *out, ptrdiff_t n, int sgn) {
    const __m512i il = _mm512_set4_epi32(0x0F070E06, 0x0D050C04, 0x0B030A02, 0x09010800);
    __m512i qe = qp_irq32v(e, te, sh, kind), qo = qp_irq32v(o, to, sh, kind);
    __m512i q = sgn ? _mm512_packs_epi16(qe, qo) : _mm512_packus_epi16(qe, qo);
    _mm512_mask_storeu_epi8(out, _bzhi_u64(~0ULL, (unsigned)n), _mm512_shuffle_epi8(q, il));
}

/* The load masks of a chunk whose first tap is b (lanes inside [0, W)). */
QP_ALWAYS void qp_masks3(ptrdiff_t b, ptrdiff_t W, __mmask64 *ma, __mmask64 *mb, __mmask64 *mc) {
    if (b >= 0 && b + 66 <= W) { *ma = *mb = *mc = ~0ULL; return; }
    *ma = qp_m64(-b, W - b);
    *mb = qp_m64(-b - 1, W - b - 1);
    *mc = qp_m64(-b - 2, W - b - 2);
}

/* The table chunk of chunk c of nc: with compressed tables (cmp, pool.pyx: the inner
 * chunks' entries are all equal) chunk 0, one inner chunk and the last. */
QP_ALWAYS ptrdiff_t qp_tchunk(ptrdiff_t c, ptrdiff_t nc, int cmp) {
    if (!cmp || c == 0) return c;
    return c == nc - 1 ? 2 : 1;
}

/* The (e, o) sums of input row r of a chunk (zero outside [0, H): what clipping a window
 * to the input does), its rows some steps ahead prefetched (see qp_pfw). */
QP_ALWAYS void qp_avg3_rowsum(const uint8_t *const *dp, int nd, const qp_geom *g, ptrdiff_t r,
                              ptrdiff_t b, __mmask64 ma, __mmask64 mb, __mmask64 mc, int sgn,
                              __m512i *e, __m512i *o) {
    const uint8_t *rows[QP_MAX_ROWS_];
    if (r < 0 || r >= g->H) {
        *e = *o = _mm512_setzero_si512();
        return;
    }
    for (int i = 0; i < nd; i++) {
        rows[i] = dp[i] + r * g->W;
        _mm_prefetch((const char *)(rows[i] + QP_AHEAD * g->W + b), _MM_HINT_T0);
    }
    qp_sum3(rows, nd, b, ma, mb, mc, sgn, e, o);
}

/* Chunk c of output rows [oa, ob) of one (plane, od): a column walk with a running sum over
 * a ring of the input rows' (e, o) sums, as qp_avg_col. cls: the plane's class rows; ow3:
 * a class row's length in the de-interleaved tables. */
QP_ALWAYS void qp_avg3_col(const uint8_t *const *dp, int nd, const qp_geom *g, ptrdiff_t oa,
                           ptrdiff_t ob, uint8_t *o, ptrdiff_t c, const int32_t *cls,
                           const qp_irq *iq, ptrdiff_t ow3, int cmp, int sgn) {
    __m512i ring[2 * QP_RING];
    const ptrdiff_t W = g->W, H = g->H, OW = g->OW, sH = g->sH, pH = g->pH, kH = g->kH;
    const ptrdiff_t ow0 = c * 64, n = OW - ow0 < 64 ? OW - ow0 : 64, b = ow0 - g->pW;
    const uint8_t *rows[QP_MAX_ROWS_];
    __mmask64 ma, mb, mc;
    qp_masks3(b, W, &ma, &mb, &mc);
    __m512i ve = _mm512_setzero_si512(), vo = ve, te[3], to[3];
    const __m128i sh = _mm_cvtsi32_si128(iq->sh);
    const int kind = iq->kind;
    int32_t lastc = -1;
    ptrdiff_t cur0 = 0, cur1 = 0;            /* v = sum of the ring rows [cur0, cur1) */
    o += ow0;
    if (kH == 3 && sH == 1) {
        /* 3x3 stride 1: a window's first two rows are the last step's last two, their sums
         * rotate through registers (no ring, no running sum; 22% faster on 56x56 planes) */
        __m512i pe, po, ce, co, ne, no;
        qp_avg3_rowsum(dp, nd, g, oa - pH, b, ma, mb, mc, sgn, &pe, &po);
        qp_avg3_rowsum(dp, nd, g, oa - pH + 1, b, ma, mb, mc, sgn, &ce, &co);
        for (ptrdiff_t oh = oa; oh < ob; oh++, o += OW) {
            qp_avg3_rowsum(dp, nd, g, oh - pH + 2, b, ma, mb, mc, sgn, &ne, &no);
            ve = _mm512_add_epi16(_mm512_add_epi16(pe, ce), ne);
            vo = _mm512_add_epi16(_mm512_add_epi16(po, co), no);
            if (cls[oh] != lastc) {
                lastc = cls[oh];
                qp_irq_load(iq, (ptrdiff_t)lastc * ow3 + qp_tchunk(c, (OW + 63) / 64, cmp) * 64, te, to);
            }
            qp_pfw(o + QP_AHEAD * OW);
            qp_avg3_store(ve, vo, te, to, sh, kind, o, n, sgn);
            pe = ce; po = co; ce = ne; co = no;
        }
        return;
    }
    for (ptrdiff_t oh = oa; oh < ob; oh++, o += OW) {
        ptrdiff_t h0 = oh * sH - pH, h1 = h0 + kH;
        if (h0 < 0) h0 = 0;
        if (h1 > H) h1 = H;
        if (h0 >= cur1) { ve = vo = _mm512_setzero_si512(); cur0 = cur1 = h0; }
        for (; cur1 < h1; cur1++) {
            for (int i = 0; i < nd; i++) {
                rows[i] = dp[i] + cur1 * W;
                _mm_prefetch((const char *)(rows[i] + QP_AHEAD * W + b), _MM_HINT_T0);
            }
            __m512i e, od;
            qp_sum3(rows, nd, b, ma, mb, mc, sgn, &e, &od);
            ring[2 * (cur1 & (QP_RING - 1))] = e;
            ring[2 * (cur1 & (QP_RING - 1)) + 1] = od;
            ve = _mm512_add_epi16(ve, e);
            vo = _mm512_add_epi16(vo, od);
        }
        for (; cur0 < h0; cur0++) {
            ve = _mm512_sub_epi16(ve, ring[2 * (cur0 & (QP_RING - 1))]);
            vo = _mm512_sub_epi16(vo, ring[2 * (cur0 & (QP_RING - 1)) + 1]);
        }
        if (cls[oh] != lastc) {          /* rows of one class share their tables */
            lastc = cls[oh];
            qp_irq_load(iq, (ptrdiff_t)lastc * ow3 + qp_tchunk(c, (OW + 63) / 64, cmp) * 64, te, to);
        }
        qp_pfw(o + QP_AHEAD * OW);
        qp_avg3_store(ve, vo, te, to, sh, kind, o, n, sgn);
    }
}

/* One output row straight from its input rows (runs of one row: every 1-d pool); the table
 * rows are loaded again only where the table chunk changes. */
QP_ALWAYS void qp_avg3_row1(const uint8_t *plane, const qp_geom *g, ptrdiff_t od, ptrdiff_t oh,
                            uint8_t *o, const qp_irq *iq, ptrdiff_t cz, int cmp, int sgn) {
    const uint8_t *rows[QP_MAX_ROWS_];
    int nr = qp_rows(g, plane, od, oh, rows);
    const ptrdiff_t OW = g->OW, W = g->W, pW = g->pW, nc = (OW + 63) / 64;
    const __m128i sh = _mm_cvtsi32_si128(iq->sh);
    const int kind = iq->kind;
    __m512i te[3], to[3];
    ptrdiff_t last = -1;
    for (ptrdiff_t c = 0; c < nc; c++) {
        const ptrdiff_t ow0 = c * 64, j = qp_tchunk(c, nc, cmp);
        __mmask64 ma, mb, mc;
        __m512i e, od_;
        qp_masks3(ow0 - pW, W, &ma, &mb, &mc);
        for (int i = 0; i < nr; i++)        /* (see qp_pfw) */
            _mm_prefetch((const char *)(rows[i] + ow0 + QP_AHEAD_B), _MM_HINT_T0);
        qp_pfw(o + ow0 + QP_AHEAD_B);
        qp_sum3(rows, nr, ow0 - pW, ma, mb, mc, sgn, &e, &od_);
        if (j != last) {
            last = j;
            qp_irq_load(iq, cz + j * 64, te, to);
        }
        qp_avg3_store(e, od_, te, to, sh, kind, o + ow0, OW - ow0 < 64 ? OW - ow0 : 64, sgn);
    }
}

#define QP_AVG3_FN(SG, ND1) \
static __attribute__((noinline)) void qp_avg3_col_##SG##_##ND1( \
        const uint8_t *const *dp, int nd, const qp_geom *g, ptrdiff_t oa, ptrdiff_t ob, \
        uint8_t *o, ptrdiff_t c, const int32_t *cls, const qp_irq *iq, ptrdiff_t ow3, \
        int cmp) { \
    qp_avg3_col(dp, ND1 ? 1 : nd, g, oa, ob, o, c, cls, iq, ow3, cmp, SG); \
}
QP_AVG3_FN(0, 0)
QP_AVG3_FN(0, 1)
QP_AVG3_FN(1, 0)
QP_AVG3_FN(1, 1)

QP_ALWAYS void qp_avg3_rows_t(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                              ptrdiff_t g1, const int32_t *cls, const qp_irq *iq,
                              ptrdiff_t ow3, int cmp, int sgn) {
    const uint8_t *dp[QP_MAX_ROWS_];
    const ptrdiff_t nc = (g->OW + 63) / 64;
    QP_FOR_RUNS(g, x, out, g0, g1, {
        if (ob - oa == 1) {
            qp_avg3_row1(plane, g, od, oa, orow, iq, (ptrdiff_t)cls[od * g->OH + oa] * ow3, cmp,
                         sgn);
        } else {
            int nd = qp_dplanes(g, plane, od, dp);
            for (ptrdiff_t c = 0; c < nc; c++) {
                if (sgn) {
                    if (nd == 1) qp_avg3_col_1_1(dp, 1, g, oa, ob, orow, c, cls + od * g->OH, iq, ow3, cmp);
                    else qp_avg3_col_1_0(dp, nd, g, oa, ob, orow, c, cls + od * g->OH, iq, ow3, cmp);
                } else {
                    if (nd == 1) qp_avg3_col_0_1(dp, 1, g, oa, ob, orow, c, cls + od * g->OH, iq, ow3, cmp);
                    else qp_avg3_col_0_0(dp, nd, g, oa, ob, orow, c, cls + od * g->OH, iq, ow3, cmp);
                }
            }
        }
    });
}

/* Output rows [g0, g1) of an average pool with 3-tap stride-1 W windows and integer tables
 * iq de-interleaved per 64-output chunk (class rows of ow3 entries; cmp: compressed to three
 * chunks, see qp_tchunk); the caller checks kD*kH <= QP_MAX_ROWS, kH <= QP_RING and
 * kD*kH*3 <= 256. */
static void qp_avg3_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                         ptrdiff_t g1, const int32_t *cls, const qp_irq *iq, ptrdiff_t ow3,
                         int cmp, int sgn) {
    if (g1 <= g0) return;
    if (sgn) qp_avg3_rows_t(x, out, g, g0, g1, cls, iq, ow3, cmp, 1);
    else qp_avg3_rows_t(x, out, g, g0, g1, cls, iq, ow3, cmp, 0);
}
#define QP_AVG3 1

/* ---------------------------------------------------------------------------------------- */
#elif QP_SIMD == 1

QP_ALWAYS __m256i qp_vmax(__m256i a, __m256i v, int sgn) {
    return sgn ? _mm256_max_epi8(a, v) : _mm256_max_epu8(a, v);
}

/* 32 outputs of a row from ow0 (every tap inside the row: see qp_interior). */
QP_ALWAYS __m256i qp_max_chunk(const uint8_t *const *rows, int nr, const qp_geom *g,
                               ptrdiff_t ow0, int sgn) {
    const ptrdiff_t kW = g->kW, pW = g->pW, dW = g->dW;
    __m256i low = _mm256_set1_epi8(sgn ? (char)0x80 : 0);
    if (g->sW == 1) {
        __m256i acc = low;
        for (ptrdiff_t k = 0; k < kW; k++) {
            ptrdiff_t b = ow0 - pW + k * dW;
            for (int r = 0; r < nr; r++)
                acc = qp_vmax(acc, _mm256_loadu_si256((const __m256i *)(rows[r] + b)), sgn);
        }
        return acc;
    }
    const ptrdiff_t step = dW == 1 ? 2 : 1;
    __m256i p0 = low, p1 = low, s0 = low, s1 = low;
    for (ptrdiff_t k = 0; k < kW; k += step) {
        ptrdiff_t b = 2 * ow0 - pW + k * dW;
        if (step == 2 && k + 1 < kW) {
            for (int r = 0; r < nr; r++) {
                p0 = qp_vmax(p0, _mm256_loadu_si256((const __m256i *)(rows[r] + b)), sgn);
                p1 = qp_vmax(p1, _mm256_loadu_si256((const __m256i *)(rows[r] + b + 32)), sgn);
            }
        } else {
            for (int r = 0; r < nr; r++) {
                s0 = qp_vmax(s0, _mm256_loadu_si256((const __m256i *)(rows[r] + b)), sgn);
                s1 = qp_vmax(s1, _mm256_loadu_si256((const __m256i *)(rows[r] + b + 32)), sgn);
            }
        }
    }
    s0 = qp_vmax(s0, qp_vmax(p0, _mm256_srli_epi16(p0, 8), sgn), sgn);
    s1 = qp_vmax(s1, qp_vmax(p1, _mm256_srli_epi16(p1, 8), sgn), sgn);
    const __m256i m = _mm256_set1_epi16(0xFF);
    __m256i p = _mm256_packus_epi16(_mm256_and_si256(s0, m), _mm256_and_si256(s1, m));
    return _mm256_permute4x64_epi64(p, 0xD8);
}

QP_ALWAYS void qp_max_row(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                          int sgn) {
    ptrdiff_t lo, hi, ow;
    qp_interior(g, g->dW, g->sW == 1 ? 32 : 64, 32, &lo, &hi);
    for (ow = 0; ow < lo; ow++) o[ow] = (uint8_t)qp_max1(rows, nr, g, ow, sgn);
    if (hi > lo) {
        for (ow = lo; ow + 32 <= hi; ow += 32)
            _mm256_storeu_si256((__m256i *)(o + ow), qp_max_chunk(rows, nr, g, ow, sgn));
        if (ow < hi)
            _mm256_storeu_si256((__m256i *)(o + hi - 32), qp_max_chunk(rows, nr, g, hi - 32, sgn));
    }
    for (ow = hi > lo ? hi : lo; ow < g->OW; ow++) o[ow] = (uint8_t)qp_max1(rows, nr, g, ow, sgn);
}

/* 16 window sums (16-bit lanes) of outputs ow0.. (every tap inside the row). */
QP_ALWAYS __m256i qp_sum_chunk(const uint8_t *const *rows, int nr, const qp_geom *g,
                               ptrdiff_t ow0, int sgn) {
    const ptrdiff_t kW = g->kW, pW = g->pW;
    __m256i acc = _mm256_setzero_si256();
    if (g->sW == 1) {
        for (ptrdiff_t k = 0; k < kW; k++) {
            ptrdiff_t b = ow0 - pW + k;
            for (int r = 0; r < nr; r++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(rows[r] + b));
                acc = _mm256_add_epi16(acc, sgn ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v));
            }
        }
        return acc;
    }
    const __m256i w11 = _mm256_set1_epi16(0x0101), w10 = _mm256_set1_epi16(0x0001);
    for (ptrdiff_t k = 0; k < kW; k += 2) {
        ptrdiff_t b = 2 * ow0 - pW + k;
        __m256i w = k + 1 < kW ? w11 : w10;
        for (int r = 0; r < nr; r++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(rows[r] + b));
            acc = _mm256_add_epi16(acc, sgn ? _mm256_maddubs_epi16(w, v) : _mm256_maddubs_epi16(v, w));
        }
    }
    return acc;
}

QP_ALWAYS __m128i qp_requant8(__m256i s, const int32_t *z, const float *m, __m256 zpf,
                              __m256i qmin, __m256i qmax) {
    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_loadu_si256((const __m256i *)z))),
                             _mm256_loadu_ps(m));
    __m256i q = _mm256_cvtps_epi32(_mm256_add_ps(t, zpf));
    q = _mm256_min_epi32(_mm256_max_epi32(q, qmin), qmax);
    /* values are in [qmin, qmax]: both packs are exact for them */
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    return w;                                            /* 8 int16 */
}

QP_ALWAYS void qp_avg_chunk(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                            const int32_t *z, const float *mul, ptrdiff_t ow0, __m256 zpf,
                            __m256i lo, __m256i hi, int sgn) {
    __m256i acc = qp_sum_chunk(rows, nr, g, ow0, sgn);
    __m128i a0 = _mm256_castsi256_si128(acc), a1 = _mm256_extracti128_si256(acc, 1);
    __m128i w0 = qp_requant8(sgn ? _mm256_cvtepi16_epi32(a0) : _mm256_cvtepu16_epi32(a0),
                             z + ow0, mul + ow0, zpf, lo, hi);
    __m128i w1 = qp_requant8(sgn ? _mm256_cvtepi16_epi32(a1) : _mm256_cvtepu16_epi32(a1),
                             z + ow0 + 8, mul + ow0 + 8, zpf, lo, hi);
    __m128i b = sgn ? _mm_packs_epi16(w0, w1) : _mm_packus_epi16(w0, w1);
    _mm_storeu_si128((__m128i *)(o + ow0), b);
}

QP_ALWAYS void qp_avg_row(const uint8_t *const *rows, int nr, const qp_geom *g, uint8_t *o,
                          const int32_t *z, const float *mul, float zp, int32_t qmin,
                          int32_t qmax, int sgn) {
    ptrdiff_t lo, hi, ow;
    const __m256 zpf = _mm256_set1_ps(zp);
    const __m256i vlo = _mm256_set1_epi32(qmin), vhi = _mm256_set1_epi32(qmax);
    qp_interior(g, 1, g->sW == 1 ? 16 : 32, 16, &lo, &hi);
    for (ow = 0; ow < lo; ow++)
        o[ow] = qp_requant1(qp_sum1(rows, nr, g, ow, sgn), z[ow], mul[ow], zp, qmin, qmax);
    if (hi > lo) {
        for (ow = lo; ow + 16 <= hi; ow += 16)
            qp_avg_chunk(rows, nr, g, o, z, mul, ow, zpf, vlo, vhi, sgn);
        if (ow < hi) qp_avg_chunk(rows, nr, g, o, z, mul, hi - 16, zpf, vlo, vhi, sgn);
    }
    for (ow = hi > lo ? hi : lo; ow < g->OW; ow++)
        o[ow] = qp_requant1(qp_sum1(rows, nr, g, ow, sgn), z[ow], mul[ow], zp, qmin, qmax);
}

#endif  /* QP_SIMD */

#if QP_SIMD != 2
#define QP_AVG3 0
static void qp_avg3_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                         ptrdiff_t g1, const int32_t *cls, const qp_irq *iq, ptrdiff_t ow3,
                         int cmp, int sgn) {
    (void)x; (void)out; (void)g; (void)g0; (void)g1; (void)cls; (void)iq; (void)ow3; (void)cmp;
    (void)sgn;
}
#endif

#if QP_SIMD > 0
#define QP_MAX_ROWS QP_MAX_ROWS_    /* the caller checks kD*kH (and kW) against it */

/* Runs BODY for output rows [g0, g1) (x is (N*C, D, H, W), rows plane-major) with `rows`,
 * `nr` (the valid input rows), `r` (global row) and `rem` (od*OH + oh); counters, no
 * divisions per row. */
#define QP_FOR_ROWS(g, x, g0, g1, BODY) do { \
    const uint8_t *rows[QP_MAX_ROWS]; \
    ptrdiff_t rpp = (g)->OD * (g)->OH, psz = (g)->D * (g)->H * (g)->W; \
    ptrdiff_t p = (g0) / rpp, rem = (g0) - p * rpp; \
    ptrdiff_t od = rem / (g)->OH, oh = rem - od * (g)->OH; \
    for (ptrdiff_t r = (g0); r < (g1); r++) { \
        int nr = qp_rows((g), (x) + p * psz, od, oh, rows); \
        BODY; \
        rem++; \
        if (++oh == (g)->OH) { oh = 0; if (++od == (g)->OD) { od = 0; rem = 0; p++; } } \
    } \
} while (0)

#if QP_SIMD == 2
/* One column walk with constant load count and stride (the common windows unroll). */
#define QP_MAX_COL(NL, S2, TWO) do { \
    if (nd == 1) \
        qp_max_col(dp, 1, g, oa, ob, orow, c, mt + c * nl * g->sW, off, pair, NL, S2, TWO, sgn); \
    else \
        qp_max_col(dp, nd, g, oa, ob, orow, c, mt + c * nl * g->sW, off, pair, NL, S2, TWO, sgn); \
} while (0)

QP_ALWAYS int qp_max_rows_t(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                            ptrdiff_t g1, int sgn) {
    ptrdiff_t off[QP_MAX_ROWS], nc;
    int pair[QP_MAX_ROWS];
    const uint8_t *dp[QP_MAX_ROWS];
    if (g->kW > QP_MAX_ROWS) return QP_ERR_GEOM;    /* the caller checks: never */
    int nl = qp_loads(g, g->sW == 2 && g->dW == 1, off, pair);
    __mmask64 *mt = qp_masks(g, 64, g->sW, off, nl, &nc);
    if (!mt) return QP_ERR_NOMEM;
    if (g->dH == 1 && g->kH <= QP_RING) {
        const int s2 = g->sW == 2;
        QP_FOR_RUNS(g, x, out, g0, g1, {
            if (ob - oa == 1) {       /* a lone row: nothing to share (see qp_avg_row1) */
                int nr = qp_rows(g, plane, od, oa, dp);
                qp_max_row(dp, nr, g, orow, mt, off, pair, nl, nc, sgn);
            } else {
              int nd = qp_dplanes(g, plane, od, dp);
              for (ptrdiff_t c = 0; c < nc; c++) {
                int two = g->OW - c * 64 > 32;
                if (s2 && two) {
                    if (nl == 1) QP_MAX_COL(1, 1, 1);
                    else if (nl == 2) QP_MAX_COL(2, 1, 1);
                    else QP_MAX_COL(nl, 1, 1);
                } else if (s2) {
                    if (nl == 1) QP_MAX_COL(1, 1, 0);
                    else if (nl == 2) QP_MAX_COL(2, 1, 0);
                    else QP_MAX_COL(nl, 1, 0);
                } else {
                    if (nl == 2) QP_MAX_COL(2, 0, 0);
                    else if (nl == 3) QP_MAX_COL(3, 0, 0);
                    else QP_MAX_COL(nl, 0, 0);
                }
              }
            }
        });
    } else {
        /* dilated rows: every output row straight from its input rows */
        QP_FOR_ROWS(g, x, g0, g1,
                    qp_max_row(rows, nr, g, out + r * g->OW, mt, off, pair, nl, nc, sgn));
    }
    free(mt);
    return 0;
}

/* Each (load count, stride, sign, one D plane or not) variant of the column walk and of the
 * lone-row walk is its own small function: inlined into one large dispatcher, GCC spilled the
 * loop state to the stack and reloaded the geometry on every output row. nl == 0: any count. */
#define QP_AVG_FN(NL, S2, SG, ND1) \
static __attribute__((noinline)) void qp_avg_col_##NL##_##S2##_##SG##_##ND1( \
        const uint8_t *const *dp, int nd, const qp_geom *g, ptrdiff_t oa, ptrdiff_t ob, \
        uint8_t *o, ptrdiff_t c, const int32_t *cls, const int32_t *zt, const float *mtab, \
        __m512 zpf, const __mmask64 *mt, const ptrdiff_t *off, int nl, int two, \
        const qp_irq *iq) { \
    (void)nl; \
    if (two) \
        qp_avg_col(dp, ND1 ? 1 : nd, g, oa, ob, o, c, cls, zt, mtab, zpf, mt, off, \
                   NL ? NL : nl, S2, 1, SG, iq); \
    else \
        qp_avg_col(dp, ND1 ? 1 : nd, g, oa, ob, o, c, cls, zt, mtab, zpf, mt, off, \
                   NL ? NL : nl, S2, 0, SG, iq); \
}
#define QP_AVG_FN1(NL, S2, SG) \
static __attribute__((noinline)) void qp_avg_row1_##NL##_##S2##_##SG( \
        const uint8_t *plane, const qp_geom *g, ptrdiff_t od, ptrdiff_t oh, uint8_t *o, \
        const int32_t *z, const float *mul, __m512 zpf, const __mmask64 *mt, \
        const ptrdiff_t *off, int nl, ptrdiff_t nc, const qp_irq *iq, ptrdiff_t cz) { \
    (void)nl; \
    qp_avg_row1(plane, g, od, oh, o, z, mul, zpf, mt, off, NL ? NL : nl, nc, S2, SG, iq, cz); \
}
#define QP_AVG_FNS(NL, S2, SG) QP_AVG_FN(NL, S2, SG, 1) QP_AVG_FN(NL, S2, SG, 0) \
    QP_AVG_FN1(NL, S2, SG)
#define QP_AVG_FNS2(NL) QP_AVG_FNS(NL, 0, 0) QP_AVG_FNS(NL, 0, 1) QP_AVG_FNS(NL, 1, 0) \
    QP_AVG_FNS(NL, 1, 1)
QP_AVG_FNS2(0)
QP_AVG_FNS2(1)
QP_AVG_FNS2(2)
QP_AVG_FNS2(3)

/* the variant for (nl, s2, sgn, nd == 1); F: col or row1; ARGS: its arguments */
#define QP_AVG_PICK1(F, NL, SG, ND1, ARGS) do { \
    if (s2) F##_##NL##_1_##SG##ND1 ARGS; else F##_##NL##_0_##SG##ND1 ARGS; } while (0)
#define QP_AVG_PICK2(F, SG, ND1, ARGS) do { \
    if (nl == 1) QP_AVG_PICK1(F, 1, SG, ND1, ARGS); \
    else if (nl == 2) QP_AVG_PICK1(F, 2, SG, ND1, ARGS); \
    else if (nl == 3) QP_AVG_PICK1(F, 3, SG, ND1, ARGS); \
    else QP_AVG_PICK1(F, 0, SG, ND1, ARGS); } while (0)
#define QP_AVG_PICK(F, ND1, ARGS) do { \
    if (sgn) QP_AVG_PICK2(F, 1, ND1, ARGS); else QP_AVG_PICK2(F, 0, ND1, ARGS); } while (0)

QP_ALWAYS int qp_avg_rows_t(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                            ptrdiff_t g1, const int32_t *cls, const int32_t *zt,
                            const float *mtab, float zp, int32_t qmin, int32_t qmax, int sgn,
                            const qp_irq *iq) {
    ptrdiff_t off[QP_MAX_ROWS], nc;
    int pair[QP_MAX_ROWS];
    const uint8_t *dp[QP_MAX_ROWS];
    /* the caller checks kW, kD*kH <= QP_MAX_ROWS (so kH <= QP_RING): never */
    if (g->kW > QP_MAX_ROWS || g->kH > QP_RING) return QP_ERR_GEOM;
    int nl = qp_loads(g, g->sW == 2, off, pair);
    __mmask64 *mt = qp_masks(g, 32, 1, off, nl, &nc);
    if (!mt) return QP_ERR_NOMEM;
    const __m512 zpf = _mm512_set1_ps(zp);
    const int s2 = g->sW == 2;
    (void)qmin; (void)qmax;     /* the saturating packs clamp to the dtype's range */
    QP_FOR_RUNS(g, x, out, g0, g1, {
        if (ob - oa == 1) {
            ptrdiff_t cz = (ptrdiff_t)cls[od * g->OH + oa] * g->OW;
            QP_AVG_PICK(qp_avg_row1, , (plane, g, od, oa, orow, zt + cz, mtab + cz, zpf, mt, off,
                                        nl, nc, iq, cz));
        } else {
            int nd = qp_dplanes(g, plane, od, dp);
            for (ptrdiff_t c = 0; c < nc; c += 2) {
                int two = c + 1 < nc;        /* chunk pairs, then a last single chunk */
                if (nd == 1)
                    QP_AVG_PICK(qp_avg_col, _1, (dp, nd, g, oa, ob, orow, c, cls + od * g->OH,
                                                 zt, mtab, zpf, mt + c * nl, off, nl, two, iq));
                else
                    QP_AVG_PICK(qp_avg_col, _0, (dp, nd, g, oa, ob, orow, c, cls + od * g->OH,
                                                 zt, mtab, zpf, mt + c * nl, off, nl, two, iq));
            }
        }
    });
    free(mt);
    return 0;
}
#else
QP_ALWAYS int qp_max_rows_t(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                            ptrdiff_t g1, int sgn) {
    QP_FOR_ROWS(g, x, g0, g1, qp_max_row(rows, nr, g, out + r * g->OW, sgn));
    return 0;
}

QP_ALWAYS int qp_avg_rows_t(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                            ptrdiff_t g1, const int32_t *cls, const int32_t *zt,
                            const float *mtab, float zp, int32_t qmin, int32_t qmax, int sgn,
                            const qp_irq *iq) {
    (void)iq;     /* the float formula (the integer tables serve the AVX-512 kernels) */
    QP_FOR_ROWS(g, x, g0, g1, {
        ptrdiff_t cz = (ptrdiff_t)cls[rem] * g->OW;
        qp_avg_row(rows, nr, g, out + r * g->OW, zt + cz, mtab + cz, zp, qmin, qmax, sgn);
    });
    return 0;
}
#endif

/* Output rows [g0, g1) of a max pool; returns 0, or QP_ERR_* with those rows unwritten. */
static int qp_max_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                       ptrdiff_t g1, int sgn) {
    if (g1 <= g0) return 0;
    if (sgn) return qp_max_rows_t(x, out, g, g0, g1, 1);
    return qp_max_rows_t(x, out, g, g0, g1, 0);
}

/* Output rows [g0, g1) of an average pool: row od*OH + oh uses the size*zp and f32(1/div)
 * of table row cls[od*OH + oh] (zt, mtab: (classes, OW), see pool.pyx). */
static int qp_avg_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                       ptrdiff_t g1, const int32_t *cls, const int32_t *zt, const float *mtab,
                       float zp, int32_t qmin, int32_t qmax, int sgn, const qp_irq *iq) {
    if (g1 <= g0) return 0;
    if (iq && !iq->t) iq = NULL;
    if (sgn) return qp_avg_rows_t(x, out, g, g0, g1, cls, zt, mtab, zp, qmin, qmax, 1, iq);
    return qp_avg_rows_t(x, out, g, g0, g1, cls, zt, mtab, zp, qmin, qmax, 0, iq);
}
#else
#define QP_MAX_ROWS 0
/* no vector kernels in this build (qp_simd_ok is 0): never called; nothing is written */
static int qp_max_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                       ptrdiff_t g1, int sgn) {
    (void)x; (void)out; (void)g; (void)g0; (void)g1; (void)sgn;
    return QP_ERR_GEOM;
}
static int qp_avg_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                       ptrdiff_t g1, const int32_t *cls, const int32_t *zt, const float *mtab,
                       float zp, int32_t qmin, int32_t qmax, int sgn, const qp_irq *iq) {
    (void)x; (void)out; (void)g; (void)g0; (void)g1; (void)cls; (void)zt; (void)mtab; (void)zp;
    (void)iq;
    (void)qmin; (void)qmax; (void)sgn;
    return QP_ERR_GEOM;
}
#endif

/* -- short rows (adaptive pools) -------------------------------------------------------
 * Output rows [g0, g1) (plane-major over N*C*OD*OH) of an adaptive pool whose input rows
 * fit one vector (W <= 64) and output rows half of one (OW <= 32): the rows of each
 * output row's (d, h) window are reduced vertically in 16-bit lanes (max, or exact sums while
 * the window has at most 256 taps: the caller checks), then tap k of every W window is
 * gathered from the 64 lanes by one vpermt2w (index min(w0 + k, w1 - 1): a repeated lane is
 * harmless to a max, and the sum masks it off). lim: d0[OD], d1[OD], h0[OH], h1[OH],
 * w0[OW], w1[OW]; recip: f32 reciprocals per output, as the scalar path. Uniform windows
 * (adaptive pools from 28x28 to 7x7) and non-uniform ones take the same path. */
#if QP_SIMD == 2
#define QP_SHORT 1
/* Uniform W windows of kW = 2, 4 or 8 taps (w0 = ow*kW, W = OW*kW: adaptive pools whose size
 * divides the input's) reduce horizontally inside each input row without a permute: sums by
 * vpmaddubsw (pairs, 16-bit), vpdpbusd (quads, 32-bit) or vpsadbw (octets, 64-bit), maxima by
 * shifts within 16/32/64-bit lanes; the vertical step then adds (maxes) those lanes. */
QP_ALWAYS __m512i qp_hsum_u(__m512i v, int kw, int sgn) {
    const __m512i one = _mm512_set1_epi8(1);
    if (kw == 2) return sgn ? _mm512_maddubs_epi16(one, v) : _mm512_maddubs_epi16(v, one);
    if (kw == 4) return sgn ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), one, v)
                            : _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, one);
    /* kw == 8; int8 biased to unsigned (the caller removes 128 per tap) */
    if (sgn) v = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    return _mm512_sad_epu8(v, _mm512_setzero_si512());
}

QP_ALWAYS __m512i qp_hmax_u(__m512i v, int kw, int sgn) {
    /* the max of each kW-byte group lands in the group's low byte */
    v = sgn ? _mm512_max_epi8(v, _mm512_srli_epi16(v, 8)) : _mm512_max_epu8(v, _mm512_srli_epi16(v, 8));
    if (kw >= 4)
        v = sgn ? _mm512_max_epi8(v, _mm512_srli_epi32(v, 16)) : _mm512_max_epu8(v, _mm512_srli_epi32(v, 16));
    if (kw >= 8)
        v = sgn ? _mm512_max_epi8(v, _mm512_srli_epi64(v, 32)) : _mm512_max_epu8(v, _mm512_srli_epi64(v, 32));
    return v;
}

/* The row at p, with a prefetch far ahead: the rows walked are short and the stream of
 * output rows moves through the input quickly (measured faster than the hardware alone). */
#define QP_SPF 1024
QP_ALWAYS const uint8_t *qp_pf(const uint8_t *p) {
    _mm_prefetch((const char *)(p + QP_SPF), _MM_HINT_T0);
    return p;
}

/* The same for average pools over several D planes (3-d): 4096 bytes ahead reaches the rows
 * of the next D window (measured 25-30% faster than 1024 on 3-d 2x2x2 pools). */
#define QP_SPF2 4096
QP_ALWAYS const uint8_t *qp_pf2(const uint8_t *p) {
    _mm_prefetch((const char *)(p + QP_SPF2), _MM_HINT_T0);
    return p;
}
/* An adaptive average's outputs o[0, n) (om = the first n bits) from the window sums in
 * acc: kw-byte lanes of 16 (kw 2), 32 (kw 4) or 64 bits (kw 8, int8 sums biased by 128 per
 * byte over `rows` rows), as rint(f32(f32(sum) * r)) with cvtps2dq's round half to even and
 * r = rc[ow]; an average of raw values is in range, so vpmovdb's truncation is exact. */
QP_ALWAYS void qp_adaptive_store(__m512i acc, int kw, int sgn, ptrdiff_t rows, const float *rc,
                                 uint8_t *o, __mmask32 om) {
    const __mmask16 om0 = (__mmask16)(om & 0xFFFF), om1 = (__mmask16)(om >> 16);
    if (kw == 8) {
        if (sgn) acc = _mm512_sub_epi64(acc, _mm512_set1_epi64(128 * 8 * rows));
        __m256 f = _mm256_mul_ps(_mm512_cvtepi64_ps(acc), _mm256_maskz_loadu_ps((__mmask8)om, rc));
        _mm256_mask_cvtepi32_storeu_epi8(o, (__mmask8)om, _mm256_cvtps_epi32(f));
    } else if (kw == 4) {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_maskz_loadu_ps(om0, rc));
        _mm512_mask_cvtepi32_storeu_epi8(o, om0, _mm512_cvtps_epi32(f));
    } else {
        __m256i a = _mm512_castsi512_si256(acc);
        __m512 f = _mm512_cvtepi32_ps(sgn ? _mm512_cvtepi16_epi32(a) : _mm512_cvtepu16_epi32(a));
        f = _mm512_mul_ps(f, _mm512_maskz_loadu_ps(om0, rc));
        _mm512_mask_cvtepi32_storeu_epi8(o, om0, _mm512_cvtps_epi32(f));
        if (om1) {
            a = _mm512_extracti64x4_epi64(acc, 1);
            f = _mm512_cvtepi32_ps(sgn ? _mm512_cvtepi16_epi32(a) : _mm512_cvtepu16_epi32(a));
            f = _mm512_mul_ps(f, _mm512_maskz_loadu_ps(om1, rc + 16));
            _mm512_mask_cvtepi32_storeu_epi8(o + 16, om1, _mm512_cvtps_epi32(f));
        }
    }
}

/* kw: 0 for any windows (the permute path), else the uniform window width 2, 4 or 8.
 * avg: 0 max, 1 adaptive average, 2 and 3 average pools (kw == 2 only; the requantize of aq;
 * 2 when the windows span several D planes). */
QP_ALWAYS void qp_short_rows_t(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H,
                               ptrdiff_t W, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,
                               const ptrdiff_t *lim, const float *recip, ptrdiff_t g0,
                               ptrdiff_t g1, int avg, int sgn, int kw, int w32,
                               const qp_avgq *aq) {
    const ptrdiff_t *d0 = lim, *d1 = lim + OD, *h0 = lim + 2 * OD, *h1 = h0 + OH;
    const ptrdiff_t *w0 = h0 + 2 * OH, *w1 = w0 + OW;
    __m512i idx[64];
    __mmask32 km[64];
    int nk = 0;
    if (!kw) {
        for (ptrdiff_t ow = 0; ow < OW; ow++)
            if (w1[ow] - w0[ow] > nk) nk = (int)(w1[ow] - w0[ow]);
        if (nk > 64) return;
        for (int k = 0; k < nk; k++) {
            uint16_t t[32];
            __mmask32 m = 0;
            for (ptrdiff_t ow = 0; ow < 32; ow++) {
                ptrdiff_t j = ow < OW ? w0[ow] + k : 0;
                if (ow < OW && j < w1[ow]) m |= (__mmask32)1 << ow;
                if (ow < OW && j >= w1[ow]) j = w1[ow] - 1;
                t[ow] = (uint16_t)j;
            }
            idx[k] = _mm512_loadu_si512((const void *)t);
            km[k] = m;
        }
    }
    const __mmask64 lm = _bzhi_u64(~0ULL, (unsigned)W);
    const __mmask32 om = _bzhi_u32(~0U, (unsigned)OW);
    const __mmask16 om0 = (__mmask16)(om & 0xFFFF);
    const ptrdiff_t rpp = OD * OH, HW = H * W;
    ptrdiff_t p = g0 / rpp, rem = g0 - p * rpp;
    ptrdiff_t od = rem / OH, oh = rem - od * OH;
    for (ptrdiff_t r = g0; r < g1; r++) {
        const uint8_t *plane = x + p * D * HW;
        uint8_t *o = out + r * OW;
        const float *rc = recip + rem * OW;
        const ptrdiff_t ia = d0[od], ib = d1[od], ja = h0[oh], jb = h1[oh];
        __m512i acc;
        if (kw) {
            /* uniform windows: per-row horizontal reduce, vertical add or max */
            if (avg) {
                acc = _mm512_setzero_si512();
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        const uint8_t *q = plane + idd * HW + ih * W;
                        /* avg 2: average pools over several D planes (see qp_pf2) */
                        q = avg == 2 ? qp_pf2(q) : qp_pf(q);
                        __m512i v = qp_hsum_u(_mm512_maskz_loadu_epi8(lm, q), kw, sgn);
                        acc = kw == 2 ? _mm512_add_epi16(acc, v)
                            : kw == 4 ? _mm512_add_epi32(acc, v) : _mm512_add_epi64(acc, v);
                    }
            } else {
                __m512i v = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        const uint8_t *q = plane + idd * HW + ih * W;
                        __m512i t = _mm512_maskz_loadu_epi8(lm, ib - ia > 1 ? qp_pf2(q) : qp_pf(q));
                        v = sgn ? _mm512_max_epi8(v, t) : _mm512_max_epu8(v, t);
                    }
                v = qp_hmax_u(v, kw, sgn);
                if (kw == 2) _mm512_mask_cvtepi16_storeu_epi8(o, om, v);
                else if (kw == 4) _mm512_mask_cvtepi32_storeu_epi8(o, om0, v);
                else _mm512_mask_cvtepi64_storeu_epi8(o, (__mmask8)om, v);
                goto next;
            }
        } else {
            __m512i lo, hi;
            if (avg) {
                lo = hi = _mm512_setzero_si512();
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        __m512i v = _mm512_maskz_loadu_epi8(lm, qp_pf(plane + idd * HW + ih * W));
                        __m256i a = _mm512_castsi512_si256(v);
                        lo = _mm512_add_epi16(lo, sgn ? _mm512_cvtepi8_epi16(a) : _mm512_cvtepu8_epi16(a));
                        if (!w32) {
                            __m256i b = _mm512_extracti64x4_epi64(v, 1);
                            hi = _mm512_add_epi16(hi, sgn ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b));
                        }
                    }
            } else {
                __m512i v = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        __m512i t = _mm512_maskz_loadu_epi8(lm, qp_pf(plane + idd * HW + ih * W));
                        v = sgn ? _mm512_max_epi8(v, t) : _mm512_max_epu8(v, t);
                    }
                __m256i a = _mm512_castsi512_si256(v), b = _mm512_extracti64x4_epi64(v, 1);
                lo = sgn ? _mm512_cvtepi8_epi16(a) : _mm512_cvtepu8_epi16(a);
                hi = sgn ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b);
            }
            /* 16-bit lanes: max_epi16 orders both the zero- and sign-extended values */
            acc = w32 ? _mm512_permutexvar_epi16(idx[0], lo) : _mm512_permutex2var_epi16(lo, idx[0], hi);
            for (int k = 1; k < nk; k++) {
                __m512i t = w32 ? _mm512_permutexvar_epi16(idx[k], lo)
                                : _mm512_permutex2var_epi16(lo, idx[k], hi);
                acc = avg ? _mm512_mask_add_epi16(acc, km[k], acc, t) : _mm512_max_epi16(acc, t);
            }
            if (!avg) {
                _mm512_mask_cvtepi16_storeu_epi8(o, om, acc);
                goto next;
            }
        }
        if (avg >= 2) {
            /* an average pool's formula (kw == 2: 16-bit sums of the 32 lanes' pairs) */
            ptrdiff_t cz = (ptrdiff_t)aq->cls[rem] * OW;
            qp_avg_store(acc, aq->zt + cz, aq->mt + cz, o, OW, _mm512_set1_ps(aq->zp), sgn,
                         aq->iq, cz);
            goto next;
        }
        qp_adaptive_store(acc, kw, sgn, (ib - ia) * (jb - ja), rc, o, om);
    next:
        rem++;
        if (++oh == OH) { oh = 0; if (++od == OD) { od = 0; rem = 0; p++; } }
    }
}

/* Adaptive pools of 2-d planes (D = OD = 1) with uniform windows, kh = H / OH rows by
 * kw = W / OW columns (kw 2, 4 or 8), whose kh rows fit two vectors (kh*W <= 128) and W <= 64:
 * output row r is the flat chunk of kh*W bytes at r*kh*W, whatever the plane. Each chunk is
 * reduced within kw-byte lanes (as qp_short_rows_t does per row), then its kh row results
 * are gathered by lane permutes and added (maxed): two loads per output row instead of kh,
 * and no window bookkeeping. 7x7 from 8x512x28x28: max 0.113 -> 0.059 cycles per input
 * byte, average 0.135 -> 0.084. */
QP_ALWAYS void qp_flat_rows_t(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OH,
                              ptrdiff_t OW, ptrdiff_t kh, const float *recip, ptrdiff_t g0,
                              ptrdiff_t g1, int avg, int sgn, int kw) {
    const ptrdiff_t C = kh * W, lanes = 64 / kw;   /* lanes of one vector after the reduce */
    const __mmask64 m0 = qp_m64(0, C), m1 = qp_m64(0, C - 64);
    const __mmask32 om = _bzhi_u32(~0U, (unsigned)OW);
    const __mmask16 om0 = (__mmask16)(om & 0xFFFF);
    __m512i idx[64];
    for (ptrdiff_t k = 0; k < kh; k++) {
        /* lane ow of permute k: lane k*OW + ow of the pair (first vector's lanes, then the
         * second's), as 16-, 32- or 64-bit indices */
        uint64_t t[8] = {0};
        uint16_t *t16 = (uint16_t *)t;
        uint32_t *t32 = (uint32_t *)t;
        for (ptrdiff_t ow = 0; ow < lanes; ow++) {
            ptrdiff_t j = k * OW + (ow < OW ? ow : 0);
            if (kw == 2) t16[ow] = (uint16_t)j;
            else if (kw == 4) t32[ow] = (uint32_t)j;
            else t[ow] = (uint64_t)j;
        }
        idx[k] = _mm512_loadu_si512((const void *)t);
    }
    for (ptrdiff_t r = g0; r < g1; r++) {
        const uint8_t *q = qp_pf(x + r * C);
        uint8_t *o = out + r * OW;
        __m512i a = _mm512_maskz_loadu_epi8(m0, q), b = _mm512_maskz_loadu_epi8(m1, q + 64);
        __m512i acc;
        if (avg) {
            a = qp_hsum_u(a, kw, sgn);
            b = qp_hsum_u(b, kw, sgn);
            acc = _mm512_setzero_si512();
            for (ptrdiff_t k = 0; k < kh; k++) {
                __m512i v = kw == 2 ? _mm512_permutex2var_epi16(a, idx[k], b)
                          : kw == 4 ? _mm512_permutex2var_epi32(a, idx[k], b)
                          : _mm512_permutex2var_epi64(a, idx[k], b);
                acc = kw == 2 ? _mm512_add_epi16(acc, v)
                    : kw == 4 ? _mm512_add_epi32(acc, v) : _mm512_add_epi64(acc, v);
            }
        } else {
            a = qp_hmax_u(a, kw, sgn);
            b = qp_hmax_u(b, kw, sgn);
            /* the lanes' low bytes hold the maxima; the other bytes do not matter */
            acc = kw == 2 ? _mm512_permutex2var_epi16(a, idx[0], b)
                : kw == 4 ? _mm512_permutex2var_epi32(a, idx[0], b)
                : _mm512_permutex2var_epi64(a, idx[0], b);
            for (ptrdiff_t k = 1; k < kh; k++) {
                __m512i v = kw == 2 ? _mm512_permutex2var_epi16(a, idx[k], b)
                          : kw == 4 ? _mm512_permutex2var_epi32(a, idx[k], b)
                          : _mm512_permutex2var_epi64(a, idx[k], b);
                acc = sgn ? _mm512_max_epi8(acc, v) : _mm512_max_epu8(acc, v);
            }
            if (kw == 2) _mm512_mask_cvtepi16_storeu_epi8(o, om, acc);
            else if (kw == 4) _mm512_mask_cvtepi32_storeu_epi8(o, om0, acc);
            else _mm512_mask_cvtepi64_storeu_epi8(o, (__mmask8)om, acc);
            continue;
        }
        qp_adaptive_store(acc, kw, sgn, kh, recip + (r % OH) * OW, o, om);
    }
}

static void qp_flat_rows(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OH, ptrdiff_t OW,
                         ptrdiff_t kh, const float *recip, ptrdiff_t g0, ptrdiff_t g1, int avg,
                         int sgn, int kw) {
#define QP_FLAT(KW) do { \
        if (avg) { if (sgn) qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 1, 1, KW); \
                   else qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 1, 0, KW); } \
        else { if (sgn) qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 0, 1, KW); \
               else qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 0, 0, KW); } \
    } while (0)
    if (kw == 2) QP_FLAT(2);
    else if (kw == 4) QP_FLAT(4);
    else QP_FLAT(8);
#undef QP_FLAT
}

/* The uniform window width (2, 4, 8) of W windows, or 0 (the permute path). */
static inline int qp_short_kw(const ptrdiff_t *w0, const ptrdiff_t *w1, ptrdiff_t W, ptrdiff_t OW) {
    ptrdiff_t k = W / OW;
    if (k * OW != W || (k != 2 && k != 4 && k != 8)) return 0;
    for (ptrdiff_t ow = 0; ow < OW; ow++)
        if (w0[ow] != ow * k || w1[ow] != (ow + 1) * k) return 0;
    return (int)k;
}

#define QP_SHORT_CALL(AVG, SGN) do { \
    if (kw == 2) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 2, 0, NULL); \
    else if (kw == 4) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 4, 0, NULL); \
    else if (kw == 8) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 8, 0, NULL); \
    else if (W <= 32) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 0, 1, NULL); \
    else qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 0, 0, NULL); \
} while (0)

static void qp_short_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H, ptrdiff_t W,
                          ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW, const ptrdiff_t *lim,
                          const float *recip, ptrdiff_t g0, ptrdiff_t g1, int avg, int sgn) {
    if (g1 <= g0) return;
    const ptrdiff_t *w0 = lim + 2 * OD + 2 * OH;
    int kw = qp_short_kw(w0, w0 + OW, W, OW);
    if (kw && D == 1 && OD == 1 && W <= 64 && H % OH == 0 && (H / OH) * W <= 128) {
        /* uniform H windows too (adaptive windows of a size dividing the input are the
         * uniform ones, whose rows form flat chunks): the flat kernel */
        ptrdiff_t kh = H / OH, ok = 1;
        for (ptrdiff_t oh = 0; oh < OH; oh++)
            ok &= lim[2 * OD + oh] == oh * kh && lim[2 * OD + OH + oh] == (oh + 1) * kh;
        if (ok) {
            qp_flat_rows(x, out, W, OH, OW, kh, recip, g0, g1, avg, sgn, kw);
            return;
        }
    }
    /* one instance per (avg, sgn, kw): the lane-type choices leave the row loop */
    if (avg) {
        if (sgn) QP_SHORT_CALL(1, 1);
        else QP_SHORT_CALL(1, 0);
    } else {
        if (sgn) QP_SHORT_CALL(0, 1);
        else QP_SHORT_CALL(0, 0);
    }
}
/* Output rows [g0, g1) of an average pool whose W windows are pairs tiling input rows of
 * <= 64 bytes (lim as qp_short_rows, w0 = 2*ow); the caller checks kD*kH <= 128. */
static void qp_short_avg_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H,
                              ptrdiff_t W, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,
                              const ptrdiff_t *lim, ptrdiff_t g0, ptrdiff_t g1, int sgn,
                              const qp_avgq *aq) {
    if (g1 <= g0) return;
    qp_avgq a = *aq;
    if (a.iq && !a.iq->t) a.iq = NULL;
    int far = lim[OD] - lim[0] > 1;          /* the first D window has several planes */
    if (far) {
        if (sgn) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 2, 1, 2, 0, &a);
        else qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 2, 0, 2, 0, &a);
    } else {
        if (sgn) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 3, 1, 2, 0, &a);
        else qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 3, 0, 2, 0, &a);
    }
}
/* Output rows [g0, g1) of a 2-d 2x2 stride-2 average pool on rows of <= 64 bytes whose
 * windows all have the divisor of class row cz of the integer tables iq (no padding, even H
 * and W): output row r is input rows 2r and 2r + 1 of the flat stream, across planes. Two
 * output rows share one pack and permute (32 outputs per row at most), with plain pointer
 * steps instead of the general kernel's window bookkeeping. */
static void qp_avg2x2_rows(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OW,
                           ptrdiff_t g0, ptrdiff_t g1, int sgn, const qp_irq *iq, ptrdiff_t cz) {
    const __mmask64 lm = _bzhi_u64(~0ULL, (unsigned)W);
    const __mmask32 om = _bzhi_u32(~0U, (unsigned)OW);
    const __m512i perm = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    const uint8_t *q = x + 2 * g0 * W;
    uint8_t *o = out + g0 * OW;
    ptrdiff_t r = g0;
#define QP_PAIRSUM(P) _mm512_add_epi16( \
        qp_hsum_u(_mm512_maskz_loadu_epi8(lm, qp_pf(P)), 2, sgn), \
        qp_hsum_u(_mm512_maskz_loadu_epi8(lm, qp_pf((P) + W)), 2, sgn))
    for (; r + 2 <= g1; r += 2, q += 4 * W, o += 2 * OW) {
        __m512i a = qp_irq32(QP_PAIRSUM(q), iq, cz), b = qp_irq32(QP_PAIRSUM(q + 2 * W), iq, cz);
        __m512i v = _mm512_permutexvar_epi64(perm, sgn ? _mm512_packs_epi16(a, b)
                                                       : _mm512_packus_epi16(a, b));
        _mm256_mask_storeu_epi8(o, om, _mm512_castsi512_si256(v));
        _mm256_mask_storeu_epi8(o + OW, om, _mm512_extracti64x4_epi64(v, 1));
    }
    if (r < g1) {
        __m512i a = qp_irq32(QP_PAIRSUM(q), iq, cz);
        __m512i v = _mm512_permutexvar_epi64(perm, sgn ? _mm512_packs_epi16(a, a)
                                                       : _mm512_packus_epi16(a, a));
        _mm256_mask_storeu_epi8(o, om, _mm512_castsi512_si256(v));
    }
#undef QP_PAIRSUM
}
/* Max pools with column stride 2, kW <= 3 taps, dilation 1, rows of at most 128 bytes, one
 * depth tap (kD = sD = 1, pD = 0), on CPUs with VBMI (the caller checks qp_cpu_vbmi): per
 * output row the window's rows are max-folded first (two vectors a row), then vpermt2b
 * gathers each output's taps from the folded pair, three permutes and two maxima for a whole
 * row of up to 64 outputs. Taps outside the input repeat one inside the window (harmless to
 * a max). Rows QP_S2_AHEAD output rows ahead are prefetched: without it, beyond the caches
 * this kernel ran 3x slower than the column walk it replaces. 3x3/2 on 512x112x112 (L3):
 * 160 -> 82 us in a C harness; 64x112x112 (L2) 20 -> 11 us. */
#define QP_S2_AHEAD 16
static int qp_cpu_vbmi(void) { return __builtin_cpu_supports("avx512vbmi"); }

__attribute__((target("avx512vbmi")))
static void qp_max_s2_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                           ptrdiff_t g1, int sgn) {
    const ptrdiff_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, kH = g->kH, sH = g->sH;
    const ptrdiff_t pH = g->pH, kW = g->kW, pW = g->pW;
    uint8_t ix[3][64];
    for (int t = 0; t < 3; t++)
        for (ptrdiff_t o = 0; o < 64; o++) {
            ptrdiff_t lo = 2 * o - pW, hi = lo + kW - 1, c = lo + (t < kW ? t : kW - 1);
            if (lo < 0) lo = 0;
            if (hi > W - 1) hi = W - 1;
            c = o >= OW ? 0 : c < lo ? lo : c > hi ? hi : c;
            ix[t][o] = (uint8_t)c;
        }
    const __m512i i0 = _mm512_loadu_si512((const void *)ix[0]);
    const __m512i i1 = _mm512_loadu_si512((const void *)ix[1]);
    const __m512i i2 = _mm512_loadu_si512((const void *)ix[2]);
    const __mmask64 m0 = qp_m64(0, W), m1 = qp_m64(0, W - 64), om = qp_m64(0, OW);
    ptrdiff_t p = g0 / OH, oh = g0 % OH;
    for (ptrdiff_t r = g0; r < g1; r++) {
        ptrdiff_t h0 = oh * sH - pH, h1 = h0 + kH;
        if (h0 < 0) h0 = 0;
        if (h1 > H) h1 = H;
        const uint8_t *q = x + (p * H + h0) * W, *f = q + QP_S2_AHEAD * sH * W;
        _mm_prefetch((const char *)f, _MM_HINT_T0);
        _mm_prefetch((const char *)f + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)f + W, _MM_HINT_T0);
        _mm_prefetch((const char *)f + W + 64, _MM_HINT_T0);
        qp_pfw(out + (r + QP_S2_AHEAD) * OW);
        __m512i a = _mm512_maskz_loadu_epi8(m0, q), b = _mm512_maskz_loadu_epi8(m1, q + 64);
        for (ptrdiff_t h = h0 + 1; h < h1; h++) {
            q += W;
            a = qp_vmax(a, ~0ULL, _mm512_maskz_loadu_epi8(m0, q), sgn);
            b = qp_vmax(b, ~0ULL, _mm512_maskz_loadu_epi8(m1, q + 64), sgn);
        }
        __m512i v = qp_vmax(_mm512_permutex2var_epi8(a, i0, b), ~0ULL,
                            _mm512_permutex2var_epi8(a, i1, b), sgn);
        if (kW > 2) v = qp_vmax(v, ~0ULL, _mm512_permutex2var_epi8(a, i2, b), sgn);
        _mm512_mask_storeu_epi8(out + r * OW, om, v);
        if (++oh == OH) { oh = 0; p++; }
    }
}

/* buf[0:W] = max over r < rows of the rows x + r*W (W <= 128), merged with buf's own values
 * unless `first`: the vertical half of an adaptive max window on rows of up to two vectors,
 * the running maxima kept in registers (a store and reload per row was most of the cost). */
static void qp_fold_max128(const uint8_t *x, ptrdiff_t W, ptrdiff_t rows, uint8_t *buf,
                           int first, int sgn) {
    const __mmask64 m0 = W >= 64 ? ~0ULL : (1ULL << W) - 1;
    const __mmask64 m1 = W >= 128 ? ~0ULL : W > 64 ? (1ULL << (W - 64)) - 1 : 0;
    __m512i a0 = _mm512_maskz_loadu_epi8(m0, first ? x : buf);
    __m512i a1 = _mm512_maskz_loadu_epi8(m1, (first ? x : buf) + 64);
    for (ptrdiff_t r = first ? 1 : 0; r < rows; r++) {
        const uint8_t *p = x + r * W;
        /* the stream of rows 16 ahead (beyond the caches this fold ran 1.8x slower without) */
        _mm_prefetch((const char *)(p + 16 * W), _MM_HINT_T0);
        _mm_prefetch((const char *)(p + 16 * W + 64), _MM_HINT_T0);
        __m512i b0 = _mm512_maskz_loadu_epi8(m0, p), b1 = _mm512_maskz_loadu_epi8(m1, p + 64);
        a0 = sgn ? _mm512_max_epi8(a0, b0) : _mm512_max_epu8(a0, b0);
        a1 = sgn ? _mm512_max_epi8(a1, b1) : _mm512_max_epu8(a1, b1);
    }
    _mm512_mask_storeu_epi8(buf, m0, a0);
    _mm512_mask_storeu_epi8(buf + 64, m1, a1);
}
#else
#define QP_SHORT 0
static void qp_avg2x2_rows(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OW,
                           ptrdiff_t g0, ptrdiff_t g1, int sgn, const qp_irq *iq, ptrdiff_t cz) {
    (void)x; (void)out; (void)W; (void)OW; (void)g0; (void)g1; (void)sgn; (void)iq; (void)cz;
}
static void qp_short_avg_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H,
                              ptrdiff_t W, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,
                              const ptrdiff_t *lim, ptrdiff_t g0, ptrdiff_t g1, int sgn,
                              const qp_avgq *aq) {
    (void)x; (void)out; (void)D; (void)H; (void)W; (void)OD; (void)OH; (void)OW; (void)lim;
    (void)g0; (void)g1; (void)sgn; (void)aq;
}
static void qp_short_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H, ptrdiff_t W,
                          ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW, const ptrdiff_t *lim,
                          const float *recip, ptrdiff_t g0, ptrdiff_t g1, int avg, int sgn) {
    (void)x; (void)out; (void)D; (void)H; (void)W; (void)OD; (void)OH; (void)OW; (void)lim;
    (void)recip; (void)g0; (void)g1; (void)avg; (void)sgn;
}
static void qp_fold_max128(const uint8_t *x, ptrdiff_t W, ptrdiff_t rows, uint8_t *buf,
                           int first, int sgn) {
    (void)x; (void)W; (void)rows; (void)buf; (void)first; (void)sgn;
}
static int qp_cpu_vbmi(void) { return 0; }
static void qp_max_s2_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                           ptrdiff_t g1, int sgn) {
    (void)x; (void)out; (void)g; (void)g0; (void)g1; (void)sgn;
}
#endif

#endif  /* QOPS_POOL_SIMD_H */
