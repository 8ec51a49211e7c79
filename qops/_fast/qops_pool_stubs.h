/* The AVX-512-only kernels' entry points in builds without AVX-512 (QP_SHORT 0): pool.pyx
 * never calls them there. */
#ifndef QOPS_POOL_STUBS_H
#define QOPS_POOL_STUBS_H
#include "qops_pool_common.h"
#if QP_SIMD != 2
#define QP_SHORT 0
static void qp_avg2x2_rows(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OW,
                           ptrdiff_t g0, ptrdiff_t g1, int sgn, const qp_irq *iq, ptrdiff_t cz) {
    (void)x; (void)out; (void)W; (void)OW; (void)g0; (void)g1; (void)sgn; (void)iq; (void)cz;
}
static int qp_short_avg_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H,
                             ptrdiff_t W, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,
                             const ptrdiff_t *lim, ptrdiff_t g0, ptrdiff_t g1, int sgn,
                             const qp_avgq *aq) {
    (void)x; (void)out; (void)D; (void)H; (void)W; (void)OD; (void)OH; (void)OW; (void)lim;
    (void)g0; (void)g1; (void)sgn; (void)aq;
    return QP_ERR_GEOM;
}
static int qp_short_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H, ptrdiff_t W,
                         ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW, const ptrdiff_t *lim,
                         const float *recip, ptrdiff_t g0, ptrdiff_t g1, int avg, int sgn) {
    (void)x; (void)out; (void)D; (void)H; (void)W; (void)OD; (void)OH; (void)OW; (void)lim;
    (void)recip; (void)g0; (void)g1; (void)avg; (void)sgn;
    return QP_ERR_GEOM;
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
#endif  /* QP_SIMD != 2 */
#endif  /* QOPS_POOL_STUBS_H */
