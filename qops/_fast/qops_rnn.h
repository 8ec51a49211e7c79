/* One step of the LSTM, GRU and Elman cells on float32 rows (see rnn.pyx, qops/_ref/rnn.py).
 * Every operation is rounded to float32 in PyTorch's order. The sigmoid is PyTorch's vector
 * sigmoid with SLEEF's float32 exp (qops_sleef.h), which gives PyTorch's bits; tanh (MKL's in
 * PyTorch's x86 build, not reproducible) takes expm1 from qops' own float64
 * functions (Cody-Waite reduction, degree-11 Taylor polynomial, 2^n from the exponent bits)
 * made of IEEE +, -, *, /, rint and bit operations only, so that numpy evaluates the very same
 * operations and the reference gives the same bits; they are accurate to ~1e-14, far below
 * float32's rounding, and GCC vectorizes them (libm's are scalar calls; float comparisons are
 * avoided because they keep GCC from vectorizing). -ffp-contract=off keeps a*b+c unfused.
 * AVX2 builds run the cells with intrinsics (same operations, lane for lane). At the end: the
 * fused dynamic layer's time loop (qops_rnn_layer_run) on the GEMM core, qops_gemm.h. */
#ifndef QOPS_RNN_H
#define QOPS_RNN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "qops_common.h"
#include "qops_exp64.h"
#include "qops_sleef.h"

#define QOPS_RNN_CHUNK 256

/* PyTorch's vector sigmoid, 1 / (exp(0 - x) + 1) with SLEEF's expf (qops_sleef.h) */
static inline float qops_rnn_sigmoid(float x) {
    return qops_sigmoidf(x);
}

/* `width` columns of one batch row, the gates (i, f, g, o) `sgi` apart in gi and `sgh` apart
 * in gh: gates = gh + gi. c and c_out may be the same array (each chunk is read before it is
 * written). One nonlinearity per loop: the float64 polynomial's constants then stay in
 * registers (three in one loop body spill them), and each loop is still plain and vectorized. */
static inline void qops_lstm_cols_c(const float* gi, ptrdiff_t sgi, const float* gh,
                                    ptrdiff_t sgh, const float* c, float* h_out, float* c_out,
                                    ptrdiff_t width) {
    float ti[QOPS_RNN_CHUNK], tf[QOPS_RNN_CHUNK], tg[QOPS_RNN_CHUNK];
    for (ptrdiff_t j0 = 0; j0 < width; j0 += QOPS_RNN_CHUNK) {
        ptrdiff_t m = width - j0 < QOPS_RNN_CHUNK ? width - j0 : QOPS_RNN_CHUNK;
        const float *ai = gi + j0, *af = gi + sgi + j0, *ag = gi + 2 * sgi + j0,
                    *ao = gi + 3 * sgi + j0;
        const float *bi = gh + j0, *bf = gh + sgh + j0, *bg = gh + 2 * sgh + j0,
                    *bo = gh + 3 * sgh + j0;
        for (ptrdiff_t j = 0; j < m; j++)
            ti[j] = qops_rnn_sigmoid(bi[j] + ai[j]);
        for (ptrdiff_t j = 0; j < m; j++)
            tf[j] = qops_rnn_sigmoid(bf[j] + af[j]);
        for (ptrdiff_t j = 0; j < m; j++)
            tg[j] = qops_rnn_tanh(bg[j] + ag[j]);
        for (ptrdiff_t j = 0; j < m; j++) {
            float fc = tf[j] * c[j0 + j];
            float ig = ti[j] * tg[j];
            ti[j] = fc + ig;                            /* c' */
        }
        for (ptrdiff_t j = 0; j < m; j++)
            tf[j] = qops_rnn_sigmoid(bo[j] + ao[j]);    /* o */
        for (ptrdiff_t j = 0; j < m; j++) {
            c_out[j0 + j] = ti[j];
            h_out[j0 + j] = tf[j] * qops_rnn_tanh(ti[j]);
        }
    }
}

/* `width` columns of one batch row, chunks (r, z, n) `sgi` apart in gi, `sgh` in gh:
 * n = tanh(gi_n + gh_n * r), h' = (h - n) * z + n. h and h_out may be the same array. */
static inline void qops_gru_cols_c(const float* gi, ptrdiff_t sgi, const float* gh,
                                   ptrdiff_t sgh, const float* h, float* h_out,
                                   ptrdiff_t width) {
    for (ptrdiff_t j = 0; j < width; j++) {
        float r = qops_rnn_sigmoid(gh[j] + gi[j]);
        float z = qops_rnn_sigmoid(gh[sgh + j] + gi[sgi + j]);
        float hr = gh[2 * sgh + j] * r;
        float n = qops_rnn_tanh(gi[2 * sgi + j] + hr);
        float d = h[j] - n;
        float dz = d * z;
        h_out[j] = dz + n;
    }
}

#if defined(__AVX2__)
#include <immintrin.h>
/* The cells with intrinsics: the scalar functions' operations lane for lane (a multiply and
 * an add are never fused; min_pd(a, lim) is qops_rnn_min_bits for a >= 0 or NaN; rounding to
 * nearest is nearbyint), QR_COLS columns at a time as QR_U float64 vectors whose Horner
 * chains are interleaved. The polynomial is latency-bound: one chain step (multiply, then
 * add) waits ~6-8 cycles, so GCC's vectorized scalar loops (two chains) leave the FP pipes
 * idle most of the time; eight chains keep them busy. AVX-512 builds run the same code on
 * 512-bit vectors (twice the lanes; its 32 registers also hold the eight chains without
 * spilling): every operation is exact or correctly rounded per lane, so the two widths give
 * the same bits. */
#if defined(__AVX512F__)
typedef __m512 qr_vf;                /* float32 lanes */
typedef __m512d qr_vd;               /* float64 lanes */
#define QR_FL 16
#define qr_loadu _mm512_loadu_ps
#define qr_storeu _mm512_storeu_ps
#define qr_set1 _mm512_set1_ps
#define qr_addf _mm512_add_ps
#define qr_subf _mm512_sub_ps
#define qr_mulf _mm512_mul_ps
#define qr_divf _mm512_div_ps
#define qr_minf _mm512_min_ps
#define qr_maxf _mm512_max_ps
#define qr_set1d _mm512_set1_pd
#define qr_addd _mm512_add_pd
#define qr_subd _mm512_sub_pd
#define qr_muld _mm512_mul_pd
#define qr_divd _mm512_div_pd
#define qr_mind _mm512_min_pd
#define qr_andd _mm512_and_pd
#define qr_andnotd _mm512_andnot_pd
#define qr_ord _mm512_or_pd
#define qr_xord _mm512_xor_pd
#define qr_rintd(v) _mm512_roundscale_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* 2^n from n + 2^52 + 1023: the low bits shifted into the exponent field */
#define qr_exp2d(b) _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_castpd_si512(b), 52))
#define qr_cvt_lo(a) _mm512_cvtps_pd(_mm512_castps512_ps256(a))
#define qr_cvt_hi(a) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)))
#define qr_join(lo, hi) _mm512_castpd_ps(_mm512_insertf64x4(                                \
        _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))),                     \
        _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1))
/* x where x is NaN, else v (qops_rnn_keep_nan) */
#define qr_keep_nan(x, v) _mm512_mask_blend_ps(_mm512_cmp_ps_mask((x), (x), _CMP_UNORD_Q), (v), (x))
typedef __m512i qr_vi;
#define qr_fmaf _mm512_fmadd_ps
#define qr_cvt_i _mm512_cvtps_epi32           /* rounds to nearest even (MXCSR) */
#define qr_cvt_f _mm512_cvtepi32_ps
#define qr_set1i _mm512_set1_epi32
#define qr_addi _mm512_add_epi32
#define qr_subi _mm512_sub_epi32
#define qr_srai _mm512_srai_epi32
#define qr_slli _mm512_slli_epi32
#define qr_castif _mm512_castsi512_ps
/* 0 where a < b, v elsewhere; v where a < b, w elsewhere */
#define qr_zero_lt(a, b, v) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask((a), (b), _CMP_NLT_UQ), (v))
#define qr_sel_lt(a, b, v, w) _mm512_mask_blend_ps(_mm512_cmp_ps_mask((a), (b), _CMP_LT_OQ), (w), (v))
#else
typedef __m256 qr_vf;
typedef __m256d qr_vd;
#define QR_FL 8
#define qr_loadu _mm256_loadu_ps
#define qr_storeu _mm256_storeu_ps
#define qr_set1 _mm256_set1_ps
#define qr_addf _mm256_add_ps
#define qr_subf _mm256_sub_ps
#define qr_mulf _mm256_mul_ps
#define qr_divf _mm256_div_ps
#define qr_minf _mm256_min_ps
#define qr_maxf _mm256_max_ps
#define qr_set1d _mm256_set1_pd
#define qr_addd _mm256_add_pd
#define qr_subd _mm256_sub_pd
#define qr_muld _mm256_mul_pd
#define qr_divd _mm256_div_pd
#define qr_mind _mm256_min_pd
#define qr_andd _mm256_and_pd
#define qr_andnotd _mm256_andnot_pd
#define qr_ord _mm256_or_pd
#define qr_xord _mm256_xor_pd
#define qr_rintd(v) _mm256_round_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define qr_exp2d(b) _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(b), 52))
#define qr_cvt_lo(a) _mm256_cvtps_pd(_mm256_castps256_ps128(a))
#define qr_cvt_hi(a) _mm256_cvtps_pd(_mm256_extractf128_ps((a), 1))
#define qr_join(lo, hi) _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo))
#define qr_keep_nan(x, v) _mm256_blendv_ps((v), (x), _mm256_cmp_ps((x), (x), _CMP_UNORD_Q))
typedef __m256i qr_vi;
#define qr_fmaf _mm256_fmadd_ps
#define qr_cvt_i _mm256_cvtps_epi32
#define qr_cvt_f _mm256_cvtepi32_ps
#define qr_set1i _mm256_set1_epi32
#define qr_addi _mm256_add_epi32
#define qr_subi _mm256_sub_epi32
#define qr_srai _mm256_srai_epi32
#define qr_slli _mm256_slli_epi32
#define qr_castif _mm256_castsi256_ps
#define qr_zero_lt(a, b, v) _mm256_andnot_ps(_mm256_cmp_ps((a), (b), _CMP_LT_OQ), (v))
#define qr_sel_lt(a, b, v, w) _mm256_blendv_ps((w), (v), _mm256_cmp_ps((a), (b), _CMP_LT_OQ))
#endif

#ifndef QR_U
#define QR_U 8                      /* float64 vectors a batch */
#endif
#define QR_F (QR_U / 2)             /* float32 vectors a batch */
#define QR_COLS (QR_FL * QR_F)      /* columns a batch */
#define QR_INLINE static inline __attribute__((always_inline))

QR_INLINE void qr_widen(const qr_vf* a, qr_vd* d) {
    for (int i = 0; i < QR_F; i++) {
        d[2 * i] = qr_cvt_lo(a[i]);
        d[2 * i + 1] = qr_cvt_hi(a[i]);
    }
}

/* float32 of the float64 vectors (as the scalar (float) casts) */
QR_INLINE void qr_narrow(const qr_vd* d, qr_vf* a) {
    for (int i = 0; i < QR_F; i++)
        a[i] = qr_join(d[2 * i], d[2 * i + 1]);
}

/* qops_rnn_exp_parts on QR_U vectors: t = 2^n, pm1 = e^r - 1 */
QR_INLINE void qr_exp_parts(const qr_vd* y, qr_vd* t, qr_vd* pm1) {
    static const double coef[10] = {2.755731922398589e-07, 2.7557319223985893e-06,
                                    2.48015873015873e-05, 0.0001984126984126984,
                                    0.001388888888888889, 0.008333333333333333,
                                    0.041666666666666664, 0.16666666666666666, 0.5, 1.0};
    qr_vd n[QR_U], r[QR_U], p[QR_U];
    for (int u = 0; u < QR_U; u++)
        n[u] = qr_rintd(qr_muld(y[u], qr_set1d(1.4426950408889634)));
    for (int u = 0; u < QR_U; u++)
        r[u] = qr_subd(qr_subd(y[u], qr_muld(n[u], qr_set1d(0.6931471803691238))),
                       qr_muld(n[u], qr_set1d(1.90821492927058770002e-10)));
    for (int u = 0; u < QR_U; u++)
        p[u] = qr_set1d(2.505210838544172e-08);
    for (int k = 0; k < 10; k++)
        for (int u = 0; u < QR_U; u++)
            p[u] = qr_addd(qr_muld(p[u], r[u]), qr_set1d(coef[k]));
    for (int u = 0; u < QR_U; u++) {
        pm1[u] = qr_muld(p[u], r[u]);
        t[u] = qr_exp2d(qr_addd(n[u], qr_set1d(4503599627371519.0)));
    }
}

/* 2^q for -126 <= q <= 127 (qops_expf_pow2i) */
QR_INLINE qr_vf qr_pow2i(qr_vi q) {
    return qr_castif(qr_slli(qr_addi(q, qr_set1i(127)), 23));
}

/* qops_sigmoidf of QR_COLS floats: qops_expf's operations lane for lane (out of range, the
 * conversion to int gives INT_MIN and the selects decide, as in SLEEF) */
QR_INLINE void qr_sigmoid(const qr_vf* x, qr_vf* out) {
    static const float coef[5] = {QOPS_EXPF_C1, QOPS_EXPF_C2, QOPS_EXPF_C3, QOPS_EXPF_C4,
                                  QOPS_EXPF_C5};
    qr_vf d[QR_F], qf[QR_F], s[QR_F], u[QR_F];
    qr_vi q[QR_F];
    for (int i = 0; i < QR_F; i++) {
        d[i] = qr_subf(qr_set1(0.0f), x[i]);
        q[i] = qr_cvt_i(qr_mulf(d[i], qr_set1(QOPS_EXPF_R_LN2)));
        qf[i] = qr_cvt_f(q[i]);
        s[i] = qr_fmaf(qf[i], qr_set1(-QOPS_EXPF_L2U), d[i]);
        s[i] = qr_fmaf(qf[i], qr_set1(-QOPS_EXPF_L2L), s[i]);
        u[i] = qr_set1(QOPS_EXPF_C0);
    }
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < QR_F; i++)
            u[i] = qr_fmaf(u[i], s[i], qr_set1(coef[k]));
    const qr_vf one = qr_set1(1.0f);
    for (int i = 0; i < QR_F; i++) {
        qr_vf e = qr_addf(one, qr_fmaf(qr_mulf(s[i], s[i]), u[i], s[i]));
        qr_vi half = qr_srai(q[i], 1);
        e = qr_mulf(qr_mulf(e, qr_pow2i(half)), qr_pow2i(qr_subi(q[i], half)));
        e = qr_zero_lt(d[i], qr_set1(-104.0f), e);
        e = qr_sel_lt(qr_set1(100.0f), d[i], qr_set1(INFINITY), e);
        out[i] = qr_keep_nan(x[i], qr_divf(one, qr_addf(e, one)));
    }
}

/* qops_rnn_tanh of QR_COLS floats */
QR_INLINE void qr_tanh(const qr_vf* x, qr_vf* out) {
    const qr_vd sign = qr_set1d(-0.0);
    qr_vd xd[QR_U], y[QR_U], t[QR_U], pm1[QR_U];
    qr_vf v[QR_F];
    qr_widen(x, xd);
    for (int u = 0; u < QR_U; u++)
        y[u] = qr_muld(qr_set1d(-2.0), qr_mind(qr_andnotd(sign, xd[u]), qr_set1d(20.0)));
    qr_exp_parts(y, t, pm1);
    for (int u = 0; u < QR_U; u++) {
        qr_vd q = qr_addd(qr_muld(t[u], pm1[u]), qr_subd(t[u], qr_set1d(1.0)));
        qr_vd d = qr_divd(qr_xord(q, sign), qr_addd(q, qr_set1d(2.0)));
        y[u] = qr_ord(qr_andnotd(sign, d), qr_andd(xd[u], sign));
    }
    qr_narrow(y, v);
    for (int i = 0; i < QR_F; i++)
        out[i] = qr_keep_nan(x[i], v[i]);
}

/* gh + gi of QR_COLS columns */
QR_INLINE void qr_gate(const float* gh, const float* gi, qr_vf* out) {
    for (int i = 0; i < QR_F; i++)
        out[i] = qr_addf(qr_loadu(gh + QR_FL * i), qr_loadu(gi + QR_FL * i));
}

/* the min and max of the vector lanes folded into *lo, *hi */
QR_INLINE void qr_fold(qr_vf vlo, qr_vf vhi, float* lo, float* hi) {
    float a[QR_FL], b[QR_FL];
    qr_storeu(a, vlo);
    qr_storeu(b, vhi);
    for (int k = 0; k < QR_FL; k++) {
        *lo = a[k] < *lo ? a[k] : *lo;
        *hi = b[k] > *hi ? b[k] : *hi;
    }
}
#endif

/* *mn, *mx = lo, hi with h[j..width) folded in (the columns the vector loop left) */
static inline void qr_minmax_tail(const float* h, ptrdiff_t j, ptrdiff_t width, float lo,
                                  float hi, float* mn, float* mx) {
    for (; j < width; j++) {
        lo = h[j] < lo ? h[j] : lo;
        hi = h[j] > hi ? h[j] : hi;
    }
    *mn = lo;
    *mx = hi;
}

/* qops_lstm_cols_c with the row's min and max of h' folded into *mn, *mx (width >= 1). */
static inline void qops_lstm_cols(const float* gi, ptrdiff_t sgi, const float* gh,
                                  ptrdiff_t sgh, const float* c, float* h_out, float* c_out,
                                  ptrdiff_t width, float* mn, float* mx) {
    ptrdiff_t j = 0;
    float lo = *mn, hi = *mx;
#if defined(__AVX2__)
    if (width >= QR_COLS) {
        qr_vf vlo = qr_set1(lo), vhi = qr_set1(hi);
        for (; j + QR_COLS <= width; j += QR_COLS) {
            qr_vf x[QR_F], ig[QR_F], fg[QR_F], gg[QR_F], og[QR_F], cn[QR_F];
            qr_gate(gh + j, gi + j, x);
            qr_sigmoid(x, ig);
            qr_gate(gh + sgh + j, gi + sgi + j, x);
            qr_sigmoid(x, fg);
            qr_gate(gh + 2 * sgh + j, gi + 2 * sgi + j, x);
            qr_tanh(x, gg);
            for (int i = 0; i < QR_F; i++)
                cn[i] = qr_addf(qr_mulf(fg[i], qr_loadu(c + j + QR_FL * i)),
                                      qr_mulf(ig[i], gg[i]));
            qr_gate(gh + 3 * sgh + j, gi + 3 * sgi + j, x);
            qr_sigmoid(x, og);
            for (int i = 0; i < QR_F; i++)
                qr_storeu(c_out + j + QR_FL * i, cn[i]);
            qr_tanh(cn, gg);
            for (int i = 0; i < QR_F; i++) {
                qr_vf h = qr_mulf(og[i], gg[i]);
                qr_storeu(h_out + j + QR_FL * i, h);
                vlo = qr_minf(vlo, h);
                vhi = qr_maxf(vhi, h);
            }
        }
        qr_fold(vlo, vhi, &lo, &hi);
    }
#endif
    if (j < width)
        qops_lstm_cols_c(gi + j, sgi, gh + j, sgh, c + j, h_out + j, c_out + j, width - j);
    qr_minmax_tail(h_out, j, width, lo, hi, mn, mx);
}

/* `width` columns of one batch row, the gates (i, f, g, o) `hs` apart (see qops_lstm_cols). */
static inline void qops_lstm_slice(const float* gi, const float* gh, const float* c,
                                   float* h_out, float* c_out, ptrdiff_t hs, ptrdiff_t width) {
    float lo = 0.0f, hi = 0.0f;
    qops_lstm_cols(gi, hs, gh, hs, c, h_out, c_out, width, &lo, &hi);
}

/* One batch row: gates = gh + gi in chunks (i, f, g, o). */
static inline void qops_lstm_row(const float* gi, const float* gh, const float* c,
                                 float* h_out, float* c_out, ptrdiff_t hs) {
    qops_lstm_slice(gi, gh, c, h_out, c_out, hs, hs);
}

/* qops_gru_cols_c with the row's min and max of h' folded into *mn, *mx (width >= 1). */
static inline void qops_gru_cols(const float* gi, ptrdiff_t sgi, const float* gh,
                                 ptrdiff_t sgh, const float* h, float* h_out, ptrdiff_t width,
                                 float* mn, float* mx) {
    ptrdiff_t j = 0;
    float lo = *mn, hi = *mx;
#if defined(__AVX2__)
    if (width >= QR_COLS) {
        qr_vf vlo = qr_set1(lo), vhi = qr_set1(hi);
        for (; j + QR_COLS <= width; j += QR_COLS) {
            qr_vf x[QR_F], rg[QR_F], zg[QR_F], ng[QR_F];
            qr_gate(gh + j, gi + j, x);
            qr_sigmoid(x, rg);
            qr_gate(gh + sgh + j, gi + sgi + j, x);
            qr_sigmoid(x, zg);
            for (int i = 0; i < QR_F; i++) {
                qr_vf hr = qr_mulf(qr_loadu(gh + 2 * sgh + j + QR_FL * i), rg[i]);
                x[i] = qr_addf(qr_loadu(gi + 2 * sgi + j + QR_FL * i), hr);
            }
            qr_tanh(x, ng);
            for (int i = 0; i < QR_F; i++) {
                qr_vf d = qr_subf(qr_loadu(h + j + QR_FL * i), ng[i]);
                qr_vf hn = qr_addf(qr_mulf(d, zg[i]), ng[i]);
                qr_storeu(h_out + j + QR_FL * i, hn);
                vlo = qr_minf(vlo, hn);
                vhi = qr_maxf(vhi, hn);
            }
        }
        qr_fold(vlo, vhi, &lo, &hi);
    }
#endif
    if (j < width) qops_gru_cols_c(gi + j, sgi, gh + j, sgh, h + j, h_out + j, width - j);
    qr_minmax_tail(h_out, j, width, lo, hi, mn, mx);
}

/* `width` columns of one batch row, chunks (r, z, n) `hs` apart (see qops_gru_cols). */
static inline void qops_gru_slice(const float* gi, const float* gh, const float* h,
                                  float* h_out, ptrdiff_t hs, ptrdiff_t width) {
    float lo = 0.0f, hi = 0.0f;
    qops_gru_cols(gi, hs, gh, hs, h, h_out, width, &lo, &hi);
}

static inline void qops_gru_row(const float* gi, const float* gh, const float* h,
                                float* h_out, ptrdiff_t hs) {
    qops_gru_slice(gi, gh, h, h_out, hs, hs);
}

static inline void qops_rnn_row(const float* gi, const float* gh, float* h_out, ptrdiff_t hs,
                                int relu) {
    if (relu) {
        for (ptrdiff_t j = 0; j < hs; j++) {
            float s = gh[j] + gi[j];
            h_out[j] = (s > 0.0f || s != s) ? s : 0.0f;
        }
    } else {
        ptrdiff_t j = 0;
#if defined(__AVX2__)
        for (; j + QR_COLS <= hs; j += QR_COLS) {
            qr_vf x[QR_F], y[QR_F];
            qr_gate(gh + j, gi + j, x);
            qr_tanh(x, y);
            for (int i = 0; i < QR_F; i++)
                qr_storeu(h_out + j + QR_FL * i, y[i]);
        }
#endif
        for (; j < hs; j++)
            h_out[j] = qops_rnn_tanh(gh[j] + gi[j]);
    }
}


/* min and max of n >= 1 finite floats (the fused layer's states are finite) */
static inline void qops_rnn_minmax(const float* x, ptrdiff_t n, float* mn, float* mx) {
    float lo = x[0], hi = x[0];
    ptrdiff_t i = 0;
#if defined(__AVX2__)
    if (n >= 8) {
        __m256 vlo = _mm256_loadu_ps(x), vhi = vlo;
        for (i = 8; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            vlo = _mm256_min_ps(vlo, v);
            vhi = _mm256_max_ps(vhi, v);
        }
        float a[8], b[8];
        _mm256_storeu_ps(a, vlo);
        _mm256_storeu_ps(b, vhi);
        for (int k = 0; k < 8; k++) {
            lo = a[k] < lo ? a[k] : lo;
            hi = b[k] > hi ? b[k] : hi;
        }
    }
#endif
    for (; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *mn = lo;
    *mx = hi;
}

/* q[i] = qops_q_fma(x[i], inv, zpf, 0, 255): the dynamic linear's quantization of its input
 * (fmaf, rint, clamp; AVX2: the same three operations lane for lane, min/max in the clamp's
 * operand order). */
static inline void qops_rnn_quantize(const float* x, ptrdiff_t n, float inv, float zpf,
                                     uint8_t* q) {
    ptrdiff_t i = 0;
#if defined(__AVX2__)
    const __m256 vi = _mm256_set1_ps(inv), vz = _mm256_set1_ps(zpf);
    const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
    for (; i + 16 <= n; i += 16) {
        __m256i w[2];
        for (int h = 0; h < 2; h++) {
            __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * h), vi, vz);
            v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm256_max_ps(_mm256_min_ps(v, hi), lo);
            w[h] = _mm256_cvttps_epi32(v);
        }
        /* 16 int32 in [0, 255] -> bytes in order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(w[0], w[1]), 0xD8);
        p = _mm256_permute4x64_epi64(_mm256_packus_epi16(p, p), 0x08);
        _mm_storeu_si128((__m128i*)(q + i), _mm256_castsi256_si128(p));
    }
#endif
    for (; i < n; i++)
        q[i] = (uint8_t)qops_q_fma(x[i], inv, zpf, 0.0f, 255.0f);
}

/* PyTorch's dynamic activation qparams (ChooseQuantizationParams for quint8 [0, qmax], the
 * mirror of qops._ops.linear.choose_dynamic_qparams, docs/semantics.md §10) from a finite
 * float32 min and max: the scale in double, rounded to float32 at the end; the small-scale
 * cut-off in float32; the zero point from the end with the smaller error, half to even. */
static inline void qops_rnn_dyn_qparams(float xmin, float xmax, int qmax, float *scale,
                                        int32_t *zp) {
    const float small = 6.1e-5f;
    double mn = xmin < 0.0f ? (double)xmin : 0.0;
    double mx = xmax > 0.0f ? (double)xmax : 0.0;
    double s = (mx - mn) / (double)qmax;
    if (!(s >= (double)small)) {
        float fmn = (float)mn, fmx = (float)mx;
        if ((float)s == 0.0f || isinf(1.0f / (float)s))
            s = 0.1;
        if (s < (double)small) {
            float org = (float)s;
            s = (double)small;
            if (fmn == 0.0f)
                fmx = small * (float)qmax;
            else if (fmx == 0.0f)
                fmn = -small * (float)qmax;
            else {
                float amp = small / org;
                fmn = fmn * amp;
                fmx = fmx * amp;
            }
        }
        mn = fmn;
        mx = fmx;
    }
    double zmin = 0.0 - mn / s, zmax = (double)qmax - mx / s;
    double emin = 0.0 - fabs(mn / s), emax = (double)qmax - fabs(mx / s);
    double init = emin < emax ? zmin : zmax;
    *zp = init < 0.0 ? 0 : (init > (double)qmax ? qmax : (int32_t)nearbyint(init));
    *scale = (float)s;
}


/* ---- the fused dynamic layer: a layer's whole time loop in one parallel region ---- */
#include "qops_gemm.h"

/* One column block of the layer: hidden columns [j0, j0 + w), whose gate rows (g * H + j0 ..
 * for each gate g) are packed together in W_ih and W_hh (see rnn.pyx's block packing), so
 * that the thread that owns the block computes its gates with two GEMMs of B rows and runs
 * the cell on them while they are in cache, with no other thread's results needed. */
typedef struct {
    qops_gemm_b wi, wh;
    const float *bias_i, *bias_h;   /* b_ih, b_hh of the block's rows, or NULL */
    const float *scale_h;           /* W_hh's scales of the block's rows */
    float *mult_i, *mult_h;         /* the block's multipliers (mult_i: set by the caller) */
    float *gi, *gh;                 /* S * B (gi), B (gh) x (gates * w) gate buffers */
    ptrdiff_t j0, w;
} qops_rnn_block;

typedef struct {
    int lstm, reverse, nblk;
    ptrdiff_t T, B, H, I;
    ptrdiff_t S;                    /* steps a block's input GEMM covers at once */
    const uint8_t *xq;              /* the input sequence quantized (T x B x I) */
    int32_t x_zp;
    const float *h0;                /* B x H, finite */
    float *c;                       /* B x H cell state, updated in place (LSTM) */
    float *ys;                      /* T x B x H outputs */
    uint8_t *hq;                    /* nblk x B x H: each thread's copy of the quantized h */
    float *mm;                      /* 4 x nblk: the blocks' min and max of h, two steps */
    const qops_rnn_block *blk;
} qops_rnn_layer;

/* The blocks' cells of step s (time t): each block's input gates by a GEMM of the x rows of
 * S steps at once (at the first step of each S; few batch rows make a slow GEMM), the hidden
 * gates by one of B rows (h in the thread's own quantized copy), then the cell, the block's
 * min and max of h' into mn, mx. */
static void qops_rnn_blocks(const qops_rnn_layer *L, ptrdiff_t b0, ptrdiff_t bstep,
                            const uint8_t *hq, int32_t zp, float scale, ptrdiff_t s,
                            ptrdiff_t t, const float *hprev, float *mn, float *mx) {
    const ptrdiff_t B = L->B, H = L->H, T = L->T, S = L->S, ng = L->lstm ? 4 : 3;
    /* the chunk of steps [s0, s1) and its first time index (its steps run backwards when
     * reversed, its rows of x are in time order) */
    const ptrdiff_t s0 = s - s % S, s1 = s0 + S < T ? s0 + S : T;
    const ptrdiff_t tlo = L->reverse ? T - s1 : s0;
    float *hout = L->ys + t * B * H;
    for (ptrdiff_t b = b0; b < L->nblk; b += bstep) {
        const qops_rnn_block *k = L->blk + b;
        const ptrdiff_t w = k->w, j0 = k->j0, ngw = ng * w;
        qops_gemm_out o;
        memset(&o, 0, sizeof(o));
        o.kind = QOPS_GEMM_F32;
        o.ldc = ngw;
        if (s == s0) {
            o.bias = k->bias_i;
            o.mult = k->mult_i;
            o.out = k->gi;
            qops_gemm(L->xq + tlo * B * L->I, L->I, (s1 - s0) * B, L->x_zp, &k->wi, &o);
        }
        const float *gi = k->gi + (t - tlo) * B * ngw;
        for (ptrdiff_t n = 0; n < ngw; n++) k->mult_h[n] = scale * k->scale_h[n];
        o.bias = k->bias_h;
        o.mult = k->mult_h;
        o.out = k->gh;
        qops_gemm(hq, H, B, zp, &k->wh, &o);
        float lo = INFINITY, hi = -INFINITY;
        for (ptrdiff_t r = 0; r < B; r++) {
            if (L->lstm)
                qops_lstm_cols(gi + r * ngw, w, k->gh + r * ngw, w, L->c + r * H + j0,
                               hout + r * H + j0, L->c + r * H + j0, w, &lo, &hi);
            else
                qops_gru_cols(gi + r * ngw, w, k->gh + r * ngw, w, hprev + r * H + j0,
                              hout + r * H + j0, w, &lo, &hi);
        }
        mn[b] = lo;
        mx[b] = hi;
    }
}

/* All T steps. Every thread runs the loop: it reduces the blocks' min and max of the last h
 * (the same value in each thread), quantizes all of h into its own copy and runs its blocks;
 * one barrier a step. The min/max slots alternate between steps, so a thread that starts the
 * next step early never overwrites a slot another thread has still to read. */
static void qops_rnn_layer_run(const qops_rnn_layer *L) {
    const ptrdiff_t T = L->T, B = L->B, H = L->H, nb = L->nblk;
    #pragma omp parallel num_threads(L->nblk) if (L->nblk > 1)
    {
#ifdef _OPENMP
        const ptrdiff_t tid = omp_get_thread_num(), nthr = omp_get_num_threads();
#else
        const ptrdiff_t tid = 0, nthr = 1;
#endif
        uint8_t *hq = L->hq + tid * B * H;
        const float *h = L->h0;
        for (ptrdiff_t s = 0; s < T; s++) {
            const ptrdiff_t t = L->reverse ? T - 1 - s : s;
            float mn, mx, scale;
            int32_t zp;
            if (s == 0) {
                qops_rnn_minmax(h, B * H, &mn, &mx);
            } else {
                const float *pmn = L->mm + ((s - 1) & 1) * 2 * nb, *pmx = pmn + nb;
                mn = pmn[0];
                mx = pmx[0];
                for (ptrdiff_t b = 1; b < nb; b++) {
                    mn = pmn[b] < mn ? pmn[b] : mn;
                    mx = pmx[b] > mx ? pmx[b] : mx;
                }
            }
            qops_rnn_dyn_qparams(mn, mx, 127, &scale, &zp);
            qops_rnn_quantize(h, B * H, (float)(1.0 / (double)scale), (float)zp, hq);
            float *smn = L->mm + (s & 1) * 2 * nb;
            qops_rnn_blocks(L, tid, nthr, hq, zp, scale, s, t, h, smn, smn + nb);
            h = L->ys + t * B * H;
            #pragma omp barrier
        }
    }
}

#endif
