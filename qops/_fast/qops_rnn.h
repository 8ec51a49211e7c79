/* One step of the LSTM, GRU and Elman cells on float32 rows (see rnn.pyx, qops/_ref/rnn.py).
 * Every operation is rounded to float32 in PyTorch's order. exp/expm1 are qops' own float64
 * functions (Cody-Waite reduction, degree-11 Taylor polynomial, 2^n from the exponent bits)
 * made of IEEE +, -, *, /, rint and bit operations only, so that numpy evaluates the very same
 * operations and the reference gives the same bits; they are accurate to ~1e-14, far below
 * float32's rounding, and GCC vectorizes them (libm's are scalar calls; float comparisons are
 * avoided because they keep GCC from vectorizing). -ffp-contract=off keeps a*b+c unfused. */
#ifndef QOPS_RNN_H
#define QOPS_RNN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QOPS_RNN_CHUNK 256

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

/* e^y - 1 = 2^n (e^r - 1) + (2^n - 1), y = n ln2 + r (|y| <= 100 here). Returns e^r - 1 in
 * *pm1 and 2^n. */
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

/* f32(1 / f32(1 + f32(exp(-x)))); |x| clamped to 100 first (exp(100) is inf in float32 and
 * exp(-100) vanishes against 1), NaN kept. */
static inline float qops_rnn_sigmoid(float x) {
    double y = -(double)x;
    y = copysign(qops_rnn_min_bits(fabs(y), 100.0), y);
    double pm1;
    double t = qops_rnn_exp_parts(y, &pm1);
    float e = (float)(t * (1.0 + pm1));
    float d = 1.0f + e;
    float s = 1.0f / d;
    return qops_rnn_keep_nan(x, s);
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

/* `width` columns of one batch row, the gates (i, f, g, o) `hs` apart: gates = gh + gi.
 * c and c_out may be the same array (each chunk is read before it is written). One
 * nonlinearity per loop: the float64 polynomial's constants then stay in registers (three
 * in one loop body spill them), and each loop is still plain and vectorized. */
static inline void qops_lstm_slice(const float* gi, const float* gh, const float* c,
                                   float* h_out, float* c_out, ptrdiff_t hs, ptrdiff_t width) {
    float ti[QOPS_RNN_CHUNK], tf[QOPS_RNN_CHUNK], tg[QOPS_RNN_CHUNK];
    for (ptrdiff_t j0 = 0; j0 < width; j0 += QOPS_RNN_CHUNK) {
        ptrdiff_t m = width - j0 < QOPS_RNN_CHUNK ? width - j0 : QOPS_RNN_CHUNK;
        const float *ai = gi + j0, *af = gi + hs + j0, *ag = gi + 2 * hs + j0,
                    *ao = gi + 3 * hs + j0;
        const float *bi = gh + j0, *bf = gh + hs + j0, *bg = gh + 2 * hs + j0,
                    *bo = gh + 3 * hs + j0;
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

/* One batch row: gates = gh + gi in chunks (i, f, g, o). */
static inline void qops_lstm_row(const float* gi, const float* gh, const float* c,
                                 float* h_out, float* c_out, ptrdiff_t hs) {
    qops_lstm_slice(gi, gh, c, h_out, c_out, hs, hs);
}

/* `width` columns of one batch row, chunks (r, z, n) `hs` apart:
 * n = tanh(gi_n + gh_n * r), h' = (h - n) * z + n. */
static inline void qops_gru_slice(const float* gi, const float* gh, const float* h,
                                  float* h_out, ptrdiff_t hs, ptrdiff_t width) {
    for (ptrdiff_t j = 0; j < width; j++) {
        float r = qops_rnn_sigmoid(gh[j] + gi[j]);
        float z = qops_rnn_sigmoid(gh[hs + j] + gi[hs + j]);
        float hr = gh[2 * hs + j] * r;
        float n = qops_rnn_tanh(gi[2 * hs + j] + hr);
        float d = h[j] - n;
        float dz = d * z;
        h_out[j] = dz + n;
    }
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
        for (ptrdiff_t j = 0; j < hs; j++)
            h_out[j] = qops_rnn_tanh(gh[j] + gi[j]);
    }
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

#endif
