/* GELU on float32 values (activation.pyx; the reference is qops/_ref/activation.py, gelu_y,
 * docs/semantics.md §6.1). Both forms give the same bits as the reference: every operation
 * is an IEEE +, -, *, / or a bit operation that numpy evaluates the same way, and
 * -ffp-contract=off keeps a*b+c unfused.
 *
 * Exact form, in float64, rounded once: gelu(x) = x/2 erfc(-x / sqrt 2), with
 * erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z = |x| / sqrt 2 (the Chebyshev fit of
 * Numerical Recipes' erfcc, relative error below 1.2e-7), and erfc(-z) = 2 - erfc(z) for
 * x >= 0. exp is a short version of qops' own (qops_exp64.h); its argument is clamped at
 * -700, where the product has long vanished. x = -inf gives NaN (-inf * 0), as PyTorch's
 * 0.5 x (1 + erf(x / sqrt 2)).
 *
 * Tanh form: PyTorch's float32 operations in its order, 0.5 x (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))), tanh in float64 rounded once (qops_rnn_tanh). */
#ifndef QOPS_GELU_H
#define QOPS_GELU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "qops_exp64.h"

static inline float qops_gelu_erf(float x) {
    const double xd = (double)x;
    const double z = fabs(xd) * 0.7071067811865476;
    const double t = 1.0 / (1.0 + 0.5 * z);
    /* P(t) of degree 9 and e^r of degree 8 by Estrin's scheme: independent products that
     * overlap, where Horner's rule is one chain of dependent multiply-adds */
    const double t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
    const double a0 = -1.26551223 + 1.00002368 * t, a1 = 0.37409196 + 0.09678418 * t;
    const double a2 = -0.18628806 + 0.27886807 * t, a3 = -1.13520398 + 1.48851587 * t;
    const double a4 = -0.82215223 + 0.17087277 * t;
    const double p = ((a0 + a1 * t2) + (a2 + a3 * t2) * t4) + a4 * t8;
    double y = p - z * z;
    y = -qops_rnn_min_bits(-y, 700.0);     /* y >= -700 (an infinite |x| too) */
    /* e^y = 2^n e^r, y = n ln2 + r (Cody-Waite), e^r by its Taylor polynomial of degree 8
     * (|r| <= ln2 / 2: relative error below 2.1e-10, far below the fit's) */
    const double n = nearbyint(y * 1.4426950408889634);
    const double r = (y - n * 0.6931471803691238) - n * 1.90821492927058770002e-10;
    const double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    const double c0 = 1.0 + r, c1 = 0.5 + 0.16666666666666666 * r;
    const double c2 = 0.041666666666666664 + 0.008333333333333333 * r;
    const double c3 = 0.001388888888888889 + 0.0001984126984126984 * r;
    const double er = ((c0 + c1 * r2) + (c2 + c3 * r2) * r4) + 2.48015873015873e-05 * r8;
    /* 2^n: n + 1023 in the low bits of 2^52 + n + 1023, shifted into the exponent field */
    double tn = n + 4503599627371519.0;
    uint64_t u;
    memcpy(&u, &tn, 8);
    u <<= 52;
    memcpy(&tn, &u, 8);
    const double erfc_z = t * (tn * er);
    const double two_minus = 2.0 - erfc_z;
    /* erfc(z) where x's sign bit is set, 2 - erfc(z) elsewhere: a select on the bits */
    int64_t ux, ua, ub;
    memcpy(&ux, &xd, 8);
    memcpy(&ua, &erfc_z, 8);
    memcpy(&ub, &two_minus, 8);
    const int64_t m = ux >> 63;
    ua = (ua & m) | (ub & ~m);
    double e;
    memcpy(&e, &ua, 8);
    return (float)(0.5 * xd * e);
}

static inline float qops_gelu_tanh(float x) {
    /* sqrt(2 / pi) as PyTorch's kBeta: the double product, rounded to float */
    const float beta = (float)(1.4142135623730951 * 1.1283791670955126 * 0.5);
    const float x3 = x * x * x;
    const float inner = beta * (x + 0.044715f * x3);
    return 0.5f * x * (1.0f + qops_rnn_tanh(inner));
}

/* y[0:n] = gelu(x[0:n]); y may be x. */
static inline void qops_gelu_f32(const float *x, float *y, ptrdiff_t n, int tanh_form) {
    if (tanh_form) {
        for (ptrdiff_t i = 0; i < n; i++)
            y[i] = qops_gelu_tanh(x[i]);
        return;
    }
    for (ptrdiff_t i = 0; i < n; i++)
        y[i] = qops_gelu_erf(x[i]);
}

#endif
