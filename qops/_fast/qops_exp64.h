/* qops' own float64 exp and tanh, shared by the recurrent cells (qops_rnn.h) and GELU
 * (qops_gelu.h). Made of IEEE +, -, *, /, rint and bit operations only, so that numpy evaluates
 * the very same operations (qops/_ref/rnn.py: exp_parts, tanh_f32) and the reference gives the
 * same bits; accurate to ~1e-14, far below float32's rounding; GCC vectorizes them (libm's are
 * scalar calls; float comparisons are avoided because they keep GCC from vectorizing).
 * -ffp-contract=off keeps a*b+c unfused. */
#ifndef QOPS_EXP64_H
#define QOPS_EXP64_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* min(a, lim) for a >= 0 (or NaN, which becomes lim) on the bits: an integer select, which
 * GCC vectorizes (a float comparison may trap, so it keeps a branch). */
static inline double qops_rnn_min_bits(double a, double lim) {
    int64_t ua, ul;          /* signed: a's sign bit is clear, and AVX2 compares signed */
    memcpy(&ua, &a, 8);
    memcpy(&ul, &lim, 8);
    ua = ua > ul ? ul : ua;
    memcpy(&a, &ua, 8);
    return a;
}

/* x where x is NaN, else v: a select on the bits (a conditional GCC would turn into a
 * branch around v's computation, which keeps the loop scalar). */
static inline float qops_rnn_keep_nan(float x, float v) {
    int32_t ux, uv;
    memcpy(&ux, &x, 4);
    memcpy(&uv, &v, 4);
    int32_t m = -(int32_t)((ux & 0x7fffffff) > 0x7f800000);
    uv = (ux & m) | (uv & ~m);
    memcpy(&v, &uv, 4);
    return v;
}

/* e^y - 1 = 2^n (e^r - 1) + (2^n - 1), y = n ln2 + r, for -708 < y < 709 (2^n a normal
 * number; callers clamp). Returns e^r - 1 in *pm1 and 2^n. */
static inline double qops_rnn_exp_parts(double y, double* pm1) {
    double n = nearbyint(y * 1.4426950408889634);
    double r = (y - n * 0.6931471803691238) - n * 1.90821492927058770002e-10;
    double p = 2.505210838544172e-08;
    p = p * r + 2.755731922398589e-07;
    p = p * r + 2.7557319223985893e-06;
    p = p * r + 2.48015873015873e-05;
    p = p * r + 0.0001984126984126984;
    p = p * r + 0.001388888888888889;
    p = p * r + 0.008333333333333333;
    p = p * r + 0.041666666666666664;
    p = p * r + 0.16666666666666666;
    p = p * r + 0.5;
    p = p * r + 1.0;
    *pm1 = p * r;
    /* 2^n: n + 1023 in the low bits of 2^52 + n + 1023, shifted into the exponent field */
    double t = n + 4503599627371519.0;
    uint64_t u;
    memcpy(&u, &t, 8);
    u <<= 52;
    memcpy(&t, &u, 8);
    return t;
}

/* f32(copysign(-q / (q + 2), x)), q = expm1(-2 min(|x|, 20)) (tanh(20) is 1 in float32);
 * NaN kept. */
static inline float qops_rnn_tanh(float x) {
    double a = qops_rnn_min_bits(fabs((double)x), 20.0);
    double pm1;
    double t = qops_rnn_exp_parts(-2.0 * a, &pm1);
    double q = t * pm1 + (t - 1.0);
    float th = (float)copysign(-q / (q + 2.0), (double)x);
    return qops_rnn_keep_nan(x, th);
}

#endif
