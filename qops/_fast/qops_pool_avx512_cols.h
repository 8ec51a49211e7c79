/* AVX-512 column walks of the max and average pools (route simd_rows, AVX-512 tier). */
#ifndef QOPS_POOL_AVX512_COLS_H
#define QOPS_POOL_AVX512_COLS_H
#include "qops_pool_avx512.h"
#if QP_SIMD == 2
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
 * left the walks waiting on memory beyond the caches; with them, walks over inputs beyond
 * the caches run at their in-cache speed. A hint never faults. */
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
         * much as the horizontal work here. */
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
#endif  /* QP_SIMD == 2 */
#endif  /* QOPS_POOL_AVX512_COLS_H */
