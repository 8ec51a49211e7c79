/* PyTorch's vectorized float32 exp and sigmoid (docs/semantics.md §21): SLEEF's expf (u10)
 * with fused multiply-adds, as ATen's AVX2 and AVX-512 builds run it, and the sigmoid
 * 1 / (exp(0 - x) + 1) of its vector kernel, so qops gives PyTorch's bits. The scalar form
 * here serves the columns the vector loops leave and the baseline build (fmaf is then a libm
 * call, still one rounding); qops_rnn.h has the same operations on vectors. The twin is
 * qops/_ref/rnn.py (exp_f32, fma_f32). -ffp-contract=off: only the fmaf calls are fused. */
#ifndef QOPS_EXPF_H
#define QOPS_EXPF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

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
static inline float qops_expf_pow2i(int32_t q) {
    uint32_t u = (uint32_t)(q + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A float's bits as an int32 ordered as the floats are (NaN aside): integer compares and
 * selects, which GCC vectorizes where it keeps float comparisons as branches. */
static inline int32_t qops_expf_key(float f) {
    int32_t u;
    memcpy(&u, &f, 4);
    return u ^ ((u >> 31) & 0x7fffffff);
}

/* e^d: q = rint(d / ln2), s = d - q ln2 (two fmas), e^s = 1 + s + s^2 P(s), times 2^q in two
 * steps; 0 below -104, inf above 100. NaN: unspecified (the sigmoid keeps its input's). */
static inline float qops_expf(float d) {
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
static inline float qops_sigmoidf(float x) {
    float e = qops_expf(0.0f - x);
    float s = 1.0f / (e + 1.0f);
    int32_t ux, us;
    memcpy(&ux, &x, 4);
    memcpy(&us, &s, 4);
    int32_t m = -(int32_t)((ux & 0x7fffffff) > 0x7f800000);
    us = (ux & m) | (us & ~m);
    memcpy(&s, &us, 4);
    return s;
}

#endif
