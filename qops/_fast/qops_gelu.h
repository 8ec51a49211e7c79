/* GELU on float32 values (activation.pyx; the reference is qops/_ref/activation.py, gelu_y,
 * docs/semantics.md §6.1), PyTorch's vectorized float32 formulas: both forms give the
 * reference's bits (IEEE operations numpy evaluates the same way; the fmaf calls are the
 * reference's fma_f32; -ffp-contract=off keeps every other a*b+c unfused).
 *
 * Exact form: 0.5 x (1 + erf(x / sqrt 2)) in float32 in PyTorch's order, erf by Abramowitz
 * and Stegun 7.1.26 as PyTorch's vectorized erf computes it: t = 1 / fma(p, |v|, 1),
 * r = a1 + t (a2 + t (a3 + t (a4 + t a5))) in fmas, erf(v) = sign(v) fma(-exp(-v^2) t, r, 1)
 * with SLEEF's expf (qops_sleef.h). x = -inf gives NaN (-inf * 0), as PyTorch.
 *
 * Tanh form: PyTorch's float32 operations in its order, 0.5 x (1 + tanh(sqrt(2/pi)
 * fma(0.044715, x^3, x))), tanh SLEEF's tanhf (qops_sleef.h). */
#ifndef QOPS_GELU_H
#define QOPS_GELU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "qops_sleef.h"

/* PyTorch's vectorized erf (see above) */
QOPS_SLEEF_INLINE float qops_erff(float v) {
    const float t = 1.0f / fmaf(0.3275911f, fabsf(v), 1.0f);
    float r = fmaf(1.061405429f, t, -1.453152027f);
    r = fmaf(r, t, 1.421413741f);
    r = fmaf(r, t, -0.284496736f);
    r = fmaf(r, t, 0.254829592f);
    const float e = qops_expf(-(v * v));
    float y = fmaf(-e * t, r, 1.0f);
    /* v's sign onto y: the sign bit, so GCC keeps the loop branch-free */
    uint32_t uv, uy;
    memcpy(&uv, &v, 4);
    memcpy(&uy, &y, 4);
    uy ^= uv & 0x80000000u;
    memcpy(&y, &uy, 4);
    return y;
}

QOPS_SLEEF_INLINE float qops_gelu_erf(float x) {
    /* 1 / sqrt 2 as PyTorch's kAlpha: M_SQRT1_2 rounded to float */
    return (x * 0.5f) * (1.0f + qops_erff(x * 0.7071067811865476f));
}

/* (always inlined, as qops_sleef.h's functions: activation.pyx's table builder calls it too,
 * and GCC then kept it a call in the GELU loop, which ran scalar, 10x slower) */
QOPS_SLEEF_INLINE float qops_gelu_tanh(float x) {
    /* sqrt(2 / pi) as PyTorch's kBeta: the double product, rounded to float */
    const float beta = (float)(1.4142135623730951 * 1.1283791670955126 * 0.5);
    const float x3 = x * x * x;
    /* PyTorch's compiler fuses x + kappa x^3 into an fma (its bits only so) */
    const float inner = beta * fmaf(0.044715f, x3, x);
    return 0.5f * x * (1.0f + qops_tanhf(inner));
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
