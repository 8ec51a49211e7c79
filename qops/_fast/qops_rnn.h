/* One step of the LSTM, GRU and Elman cells on float32 rows (see rnn.pyx, qops/_ref/rnn.py).
 * Every operation is rounded to float32 in PyTorch's order; exp and expm1 are libm's double
 * functions rounded once, the same calls numpy's float64 exp/expm1 make, so the reference
 * gives the same bits. The build's -ffp-contract=off keeps a*b+c from fusing. */
#ifndef QOPS_RNN_H
#define QOPS_RNN_H

#include <math.h>
#include <stddef.h>

static inline float qops_rnn_sigmoid(float x) {
    float e = (float)exp(-(double)x);
    float d = 1.0f + e;
    return 1.0f / d;
}

/* tanh from expm1 of the negative magnitude (no cancellation, no overflow); |x| >= 20 is
 * +-1 in float32 anyway. */
static inline float qops_rnn_tanh(float x) {
    double a = fabs((double)x);
    if (a > 20.0) a = 20.0;
    double e = expm1(-2.0 * a);
    return (float)copysign(-e / (e + 2.0), (double)x);
}

/* Row r of the batch: gates = gh + gi in chunks (i, f, g, o). */
static inline void qops_lstm_row(const float* gi, const float* gh, const float* c,
                                 float* h_out, float* c_out, ptrdiff_t hs) {
    for (ptrdiff_t j = 0; j < hs; j++) {
        float i = qops_rnn_sigmoid(gh[j] + gi[j]);
        float f = qops_rnn_sigmoid(gh[hs + j] + gi[hs + j]);
        float g = qops_rnn_tanh(gh[2 * hs + j] + gi[2 * hs + j]);
        float o = qops_rnn_sigmoid(gh[3 * hs + j] + gi[3 * hs + j]);
        float fc = f * c[j];
        float ig = i * g;
        float cn = fc + ig;
        c_out[j] = cn;
        h_out[j] = o * qops_rnn_tanh(cn);
    }
}

/* Chunks (r, z, n): n = tanh(gi_n + gh_n * r), h' = (h - n) * z + n. */
static inline void qops_gru_row(const float* gi, const float* gh, const float* h,
                                float* h_out, ptrdiff_t hs) {
    for (ptrdiff_t j = 0; j < hs; j++) {
        float r = qops_rnn_sigmoid(gh[j] + gi[j]);
        float z = qops_rnn_sigmoid(gh[hs + j] + gi[hs + j]);
        float hr = gh[2 * hs + j] * r;
        float n = qops_rnn_tanh(gi[2 * hs + j] + hr);
        float d = h[j] - n;
        float dz = d * z;
        h_out[j] = dz + n;
    }
}

static inline void qops_rnn_row(const float* gi, const float* gh, float* h_out, ptrdiff_t hs,
                                int relu) {
    for (ptrdiff_t j = 0; j < hs; j++) {
        float s = gh[j] + gi[j];
        if (relu)
            h_out[j] = (s > 0.0f || s != s) ? s : 0.0f;
        else
            h_out[j] = qops_rnn_tanh(s);
    }
}

#endif
