/* Pool kernels, all ISAs: the geometry and requantize-table structs pool.pyx fills, the
 * instruction-set tier QP_SIMD, and the scalar window helpers the vector edges use. */
#ifndef QOPS_POOL_COMMON_H
#define QOPS_POOL_COMMON_H
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

/* pool.pyx fills these structs only through the functions below, so their fields are
 * declared here alone (the .pyx sees them as opaque). */
static inline void qp_geom_init(qp_geom *g, ptrdiff_t D, ptrdiff_t H, ptrdiff_t W,
                                ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW, const ptrdiff_t *k,
                                const ptrdiff_t *s, const ptrdiff_t *p, const ptrdiff_t *d) {
    g->D = D; g->H = H; g->W = W; g->OD = OD; g->OH = OH; g->OW = OW;
    g->kD = k[0]; g->kH = k[1]; g->kW = k[2];
    g->sD = s[0]; g->sH = s[1]; g->sW = s[2];
    g->pD = p[0]; g->pH = p[1]; g->pW = p[2];
    g->dD = d[0]; g->dH = d[1]; g->dW = d[2];
}

static inline void qp_irq_init(qp_irq *iq, const int16_t *t, ptrdiff_t stride, int sh,
                               int kind) {
    iq->t = t; iq->stride = stride; iq->sh = sh; iq->kind = kind;
}

static inline void qp_avgq_init(qp_avgq *aq, const int32_t *cls, const int32_t *zt,
                                const float *mt, float zp, const qp_irq *iq) {
    aq->cls = cls; aq->zt = zt; aq->mt = mt; aq->zp = zp; aq->iq = iq;
}

/* lim (2*(OD + OH + OW) entries) in the layout of the adaptive pools for a pool whose W
 * windows tile the row (pW = 0, sW = kW): clipped D and H windows d0[OD], d1[OD], h0[OH],
 * h1[OH], then w0[OW] = ow*kW, w1[OW] = (ow + 1)*kW. */
static inline void qp_short_lim(const qp_geom *g, ptrdiff_t *lim) {
    for (ptrdiff_t i = 0; i < g->OD; i++) {
        ptrdiff_t a = i * g->sD - g->pD;
        lim[i] = a > 0 ? a : 0;
        lim[g->OD + i] = a + g->kD < g->D ? a + g->kD : g->D;
    }
    for (ptrdiff_t i = 0; i < g->OH; i++) {
        ptrdiff_t a = i * g->sH - g->pH;
        lim[2 * g->OD + i] = a > 0 ? a : 0;
        lim[2 * g->OD + g->OH + i] = a + g->kH < g->H ? a + g->kH : g->H;
    }
    for (ptrdiff_t i = 0; i < g->OW; i++) {
        lim[2 * (g->OD + g->OH) + i] = i * g->kW;
        lim[2 * (g->OD + g->OH) + g->OW + i] = (i + 1) * g->kW;
    }
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
#endif  /* QOPS_POOL_COMMON_H */
