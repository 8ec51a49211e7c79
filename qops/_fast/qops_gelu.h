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
 * and GCC then kept it a call in the GELU loop, which then ran scalar) */
QOPS_SLEEF_INLINE float qops_gelu_tanh(float x) {
    /* sqrt(2 / pi) as PyTorch's kBeta: the double product, rounded to float */
    const float beta = (float)(1.4142135623730951 * 1.1283791670955126 * 0.5);
    const float x3 = x * x * x;
    /* PyTorch's compiler fuses x + kappa x^3 into an fma (its bits only so) */
    const float inner = beta * fmaf(0.044715f, x3, x);
    return 0.5f * x * (1.0f + qops_tanhf(inner));
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* qops_gelu_erf on 16 lanes with intrinsics: the same operations, lane for lane, in fewer
 * instructions than GCC's vectorized loop of the scalar function (qops_expf's
 * magnitude clamp and its selects on the bits, which an exp argument -(v^2) <= 0 does not
 * need: out of range the conversion gives INT_MIN and the select at -104 decides, as in
 * SLEEF; a NaN stays NaN through s). */
static inline __m512 qops_gelu_erf16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000);
    const __m512 v = _mm512_mul_ps(x, _mm512_set1_ps(0.7071067811865476f));
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f),
                                                        _mm512_abs_ps(v), one));
    __m512 r = _mm512_fmadd_ps(_mm512_set1_ps(1.061405429f), t, _mm512_set1_ps(-1.453152027f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(1.421413741f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-0.284496736f));
    r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.254829592f));
    const __m512 d = _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(v, v)), sign));
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(d, _mm512_set1_ps(QOPS_EXPF_R_LN2)));
    const __m512 qf = _mm512_cvtepi32_ps(q);
    __m512 sr = _mm512_fmadd_ps(qf, _mm512_set1_ps(-QOPS_EXPF_L2U), d);
    sr = _mm512_fmadd_ps(qf, _mm512_set1_ps(-QOPS_EXPF_L2L), sr);
    __m512 u = _mm512_set1_ps(QOPS_EXPF_C0);
    u = _mm512_fmadd_ps(u, sr, _mm512_set1_ps(QOPS_EXPF_C1));
    u = _mm512_fmadd_ps(u, sr, _mm512_set1_ps(QOPS_EXPF_C2));
    u = _mm512_fmadd_ps(u, sr, _mm512_set1_ps(QOPS_EXPF_C3));
    u = _mm512_fmadd_ps(u, sr, _mm512_set1_ps(QOPS_EXPF_C4));
    u = _mm512_fmadd_ps(u, sr, _mm512_set1_ps(QOPS_EXPF_C5));
    u = _mm512_add_ps(one, _mm512_fmadd_ps(_mm512_mul_ps(sr, sr), u, sr));
    const __m512i half = _mm512_srai_epi32(q, 1);
    const __m512i bias = _mm512_set1_epi32(127);
    u = _mm512_mul_ps(u, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23)));
    u = _mm512_mul_ps(u, _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(q, half), bias), 23)));
    u = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, _mm512_set1_ps(-104.0f), _CMP_NLT_UQ), u);
    const __m512 ne = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(u), sign));
    __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(ne, t), r, one);
    y = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(y), _mm512_and_si512(_mm512_castps_si512(v), sign)));
    return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), _mm512_add_ps(one, y));
}
#endif

/* y[0:n] = gelu(x[0:n]); y may be x. */
static inline void qops_gelu_f32(const float *x, float *y, ptrdiff_t n, int tanh_form) {
    if (tanh_form) {
        for (ptrdiff_t i = 0; i < n; i++)
            y[i] = qops_gelu_tanh(x[i]);
        return;
    }
    ptrdiff_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, qops_gelu_erf16(_mm512_loadu_ps(x + i)));
#endif
    for (; i < n; i++)
        y[i] = qops_gelu_erf(x[i]);
}

#endif
