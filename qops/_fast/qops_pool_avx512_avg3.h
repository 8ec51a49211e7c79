/* AVX-512 average pools with 3-tap stride-1 W windows (route avg3). */
#ifndef QOPS_POOL_AVX512_AVG3_H
#define QOPS_POOL_AVX512_AVG3_H
#include "qops_pool_avx512_cols.h"
#if QP_SIMD == 2
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
         * rotate through registers (no ring, no running sum: faster on 56x56 planes) */
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
#endif  /* QP_SIMD == 2 */
#endif  /* QOPS_POOL_AVX512_AVG3_H */
