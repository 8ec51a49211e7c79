/* PyTorch's vectorized float32 exp, sigmoid and tanh (docs/semantics.md §21, §6): SLEEF's
 * expf and tanhf (u10) with fused multiply-adds, as ATen's AVX2 and AVX-512 builds run them,
 * and the sigmoid 1 / (exp(0 - x) + 1) of its vector kernels, so qops gives PyTorch's bits.
 * Scalar C that GCC vectorizes (selects on the bits, no branches); in the baseline build fmaf
 * is a libm call, still one rounding. qops_rnn.h has qops_expf's operations on vectors too.
 * The twin is qops/_ref/_vecmath.py. -ffp-contract=off: only the fmaf calls are fused. */
#ifndef QOPS_SLEEF_H
#define QOPS_SLEEF_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "qops_exp64.h"       /* qops_rnn_keep_nan */

/* Always inlined: the loops that call them vectorize only so (GCC left qops_tanhf a call in
 * activation.pyx, which has two callers, and the GELU loop scalar) */
#define QOPS_SLEEF_INLINE static inline __attribute__((always_inline))

#define QOPS_EXPF_R_LN2 1.442695040888963407359924681001892137426645954152985934135449406931f
#define QOPS_EXPF_L2U 0.693145751953125f
#define QOPS_EXPF_L2L 1.428606765330187045e-06f
#define QOPS_EXPF_C0 0.000198527617612853646278381f
#define QOPS_EXPF_C1 0.00139304355252534151077271f
#define QOPS_EXPF_C2 0.00833336077630519866943359f
#define QOPS_EXPF_C3 0.0416664853692054748535156f
#define QOPS_EXPF_C4 0.166666671633720397949219f
#define QOPS_EXPF_C5 0.5f

/* 2^q for -126 <= q <= 127, in the exponent field */
QOPS_SLEEF_INLINE float qops_expf_pow2i(int32_t q) {
    uint32_t u = (uint32_t)(q + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A float's bits as an int32 ordered as the floats are (NaN aside): integer compares and
 * selects, which GCC vectorizes where it keeps float comparisons as branches. */
QOPS_SLEEF_INLINE int32_t qops_expf_key(float f) {
    int32_t u;
    memcpy(&u, &f, 4);
    return u ^ ((u >> 31) & 0x7fffffff);
}

/* e^d: q = rint(d / ln2), s = d - q ln2 (two fmas), e^s = 1 + s + s^2 P(s), times 2^q in two
 * steps; 0 below -104, inf above 100. NaN: unspecified (the sigmoid keeps its input's). */
QOPS_SLEEF_INLINE float qops_expf(float d) {
    /* |d| <= 128 for q alone, so the cast is defined; beyond +-104 the selects decide */
    int32_t ud;
    memcpy(&ud, &d, 4);
    int32_t mag = ud & 0x7fffffff;
    mag = mag > 0x43000000 ? 0x43000000 : mag;                  /* 128.0f; NaN too */
    int32_t uc = (ud & (int32_t)0x80000000) | mag;
    float dc;
    memcpy(&dc, &uc, 4);
    float qf = nearbyintf(dc * QOPS_EXPF_R_LN2);
    int32_t q = (int32_t)qf;
    float s = fmaf(qf, -QOPS_EXPF_L2U, d);
    s = fmaf(qf, -QOPS_EXPF_L2L, s);
    float u = QOPS_EXPF_C0;
    u = fmaf(u, s, QOPS_EXPF_C1);
    u = fmaf(u, s, QOPS_EXPF_C2);
    u = fmaf(u, s, QOPS_EXPF_C3);
    u = fmaf(u, s, QOPS_EXPF_C4);
    u = fmaf(u, s, QOPS_EXPF_C5);
    u = 1.0f + fmaf(s * s, u, s);
    int32_t half = q >> 1;
    u = (u * qops_expf_pow2i(half)) * qops_expf_pow2i(q - half);
    int32_t k = qops_expf_key(d), bu;
    memcpy(&bu, &u, 4);
    int32_t under = -(int32_t)(k < qops_expf_key(-104.0f));      /* masks, not branches */
    int32_t over = -(int32_t)(k > qops_expf_key(100.0f));
    bu = (bu & ~(under | over)) | (0x7f800000 & over);
    memcpy(&u, &bu, 4);
    return u;
}

/* PyTorch's vector sigmoid: 1 / (exp(0 - x) + 1); NaN kept. */
QOPS_SLEEF_INLINE float qops_sigmoidf(float x) {
    const float e = qops_expf(0.0f - x);
    return qops_rnn_keep_nan(x, 1.0f / (e + 1.0f));
}

/* -- tanhf: double-float arithmetic, SLEEF's FMA forms (pairs hi, lo of floats) ---------- */

#define QOPS_EXPK2_C0 0.1980960224e-3f
#define QOPS_EXPK2_C1 0.1394256484e-2f
#define QOPS_EXPK2_C2 0.8333456703e-2f
#define QOPS_EXPK2_C3 0.4166637361e-1f
#define QOPS_EXPK2_C4 0.166666659414234244790680580464e+0f

/* x + y, x double-float, y float */
QOPS_SLEEF_INLINE void qops_df_add2_f(float *h, float *l, float y) {
    const float s = *h + y, v = s - *h;
    *l = ((*h - (s - v)) + (y - v)) + *l;
    *h = s;
}

QOPS_SLEEF_INLINE void qops_df_add2_ff(float *h, float *l, float yh, float yl) {
    const float s = *h + yh, v = s - *h;
    *l = ((*h - (s - v)) + (yh - v)) + (*l + yl);
    *h = s;
}

/* |x| >= |y| */
QOPS_SLEEF_INLINE void qops_df_add_ff(float xh, float xl, float yh, float yl, float *h, float *l) {
    const float s = xh + yh;
    *l = (((xh - s) + yh) + xl) + yl;
    *h = s;
}

QOPS_SLEEF_INLINE void qops_df_mul_f(float xh, float xl, float y, float *h, float *l) {
    const float s = xh * y;
    *l = fmaf(xl, y, fmaf(xh, y, -s));
    *h = s;
}

QOPS_SLEEF_INLINE void qops_df_mul_ff(float xh, float xl, float yh, float yl, float *h, float *l) {
    const float s = xh * yh;
    *l = fmaf(xh, yl, fmaf(xl, yh, fmaf(xh, yh, -s)));
    *h = s;
}

/* e^a as a double-float (SLEEF's expk2f of (a, 0)) for -20 <= a <= 100: callers clamp, and
 * select their results where 2^q leaves float32's range */
QOPS_SLEEF_INLINE void qops_expk2(float a, float *h, float *l) {
    const float qf = nearbyintf(a * QOPS_EXPF_R_LN2);
    const int32_t q = (int32_t)qf;
    float sh = a, sl = 0.0f;
    qops_df_add2_f(&sh, &sl, qf * -QOPS_EXPF_L2U);
    qops_df_add2_f(&sh, &sl, qf * -QOPS_EXPF_L2L);
    float u = QOPS_EXPK2_C0;
    u = fmaf(u, sh, QOPS_EXPK2_C1);
    u = fmaf(u, sh, QOPS_EXPK2_C2);
    u = fmaf(u, sh, QOPS_EXPK2_C3);
    float th, tl, ph, pl;
    qops_df_mul_f(sh, sl, u, &th, &tl);
    qops_df_add2_f(&th, &tl, QOPS_EXPK2_C4);
    qops_df_mul_ff(sh, sl, th, tl, &th, &tl);
    qops_df_add2_f(&th, &tl, 0.5f);
    /* s^2 */
    ph = sh * sh;
    pl = fmaf(sh + sh, sl, fmaf(sh, sh, -ph));
    qops_df_mul_ff(ph, pl, th, tl, &th, &tl);
    float rh = sh, rl = sl;
    qops_df_add2_ff(&rh, &rl, th, tl);
    /* 1 + r */
    const float s = 1.0f + rh;
    const float lo = ((1.0f - s) + rh) + rl;
    const int32_t half = q >> 1;
    const float p1 = qops_expf_pow2i(half), p2 = qops_expf_pow2i(q - half);
    *h = (s * p1) * p2;
    *l = (lo * p1) * p2;
}

/* e^a - 1: the double-float e^a minus 1, rounded to float; inf above 88.7228317, -1 below
 * -16.6355323, -0 at -0, NaN kept. (Quantized elu's table: scalar code is enough.) */
QOPS_SLEEF_INLINE float qops_expm1f(float a) {
    if (a != a)
        return a;
    if (a > 88.72283172607421875f)
        return INFINITY;
    if (a < -16.635532333438687426013570f)
        return -1.0f;
    if (a == 0.0f)
        return a;                       /* +-0: SLEEF's -0 select, and +0 as its sum gives */
    float dh, dl;
    qops_expk2(a, &dh, &dl);
    qops_df_add2_f(&dh, &dl, -1.0f);
    return dh + dl;
}

/* tanh(x): d = e^|x| as a double-float, (d - 1/d) / (d + 1/d) in double-float, rounded to
 * float; 1 beyond |x| = 8.664339742; x's sign; NaN kept. */
QOPS_SLEEF_INLINE float qops_tanhf(float x) {
    int32_t ux, ua;
    memcpy(&ux, &x, 4);
    ua = ux & 0x7fffffff;
    const int32_t one = -(int32_t)(ua > 0x410aa123);          /* |x| > 8.664339742f */
    ua = ua > 0x41100000 ? 0x41100000 : ua;                    /* min(|x|, 9); NaN too */
    float a;
    memcpy(&a, &ua, 4);
    float dh, dl;
    qops_expk2(a, &dh, &dl);
    /* 1 / d */
    const float rs = 1.0f / dh;
    const float eh = rs, el = rs * fmaf(-dl, rs, fmaf(-dh, rs, 1.0f));
    float nh, nl, mh, ml;
    qops_df_add_ff(dh, dl, -eh, -el, &nh, &nl);
    qops_df_add_ff(dh, dl, eh, el, &mh, &ml);
    /* n / m */
    const float t = 1.0f / mh, s = nh * t;
    const float u = fmaf(t, nh, -s);
    const float v = fmaf(-ml, t, fmaf(-mh, t, 1.0f));
    const float yl = fmaf(s, v, fmaf(nl, t, u));
    float y = s + yl;
    int32_t uy;
    memcpy(&uy, &y, 4);
    uy = (uy & ~one) | (0x3f800000 & one);
    uy ^= ux & (int32_t)0x80000000;
    memcpy(&y, &uy, 4);
    return qops_rnn_keep_nan(x, y);
}

#endif
