/* Route simd_rows (and the avg3 entry point): output rows [g0, g1) of an 8-bit max or
 * average pool with W stride 1 or 2, on the tier this build has (AVX-512 column walks,
 * AVX2 rows); builds without either only have stubs pool.pyx never calls. */
#ifndef QOPS_POOL_ROWS_H
#define QOPS_POOL_ROWS_H
#include "qops_pool_common.h"
#include "qops_pool_avx2.h"
#include "qops_pool_avx512_avg3.h"
#include "qops_pool_avx512_variants.h"
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

/* The variants of the average walks and their dispatchers qp_avg_col_pick and
 * qp_avg_row1_pick are generated: qops_pool_avx512_variants.h. */

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
            qp_avg_row1_pick(sgn, s2, plane, g, od, oa, orow, zt + cz, mtab + cz, zpf, mt, off,
                             nl, nc, iq, cz);
        } else {
            int nd = qp_dplanes(g, plane, od, dp);
            for (ptrdiff_t c = 0; c < nc; c += 2) {
                int two = c + 1 < nc;        /* chunk pairs, then a last single chunk */
                qp_avg_col_pick(sgn, s2, nd == 1, dp, nd, g, oa, ob, orow, c, cls + od * g->OH,
                                zt, mtab, zpf, mt + c * nl, off, nl, two, iq);
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
/* no vector kernels in this build: plan() never routes here; nothing is written */
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
#endif  /* QOPS_POOL_ROWS_H */
