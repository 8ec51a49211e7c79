/* The numeric primitives of docs/semantics.md §0.1, once, for every fast kernel.
 *
 * Compiled with -ffp-contract=off: a*b+c is two roundings unless fmaf() is written,
 * exactly as PyTorch's kernels do it. All helpers are static inline so each ISA build
 * vectorizes them inside the caller's loop.
 */
#ifndef QOPS_COMMON_H
#define QOPS_COMMON_H
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* n bytes from s to d by fixed-size copies for short runs, the last two overlapping (GCC
 * inlines them as moves; a libc call costs more than the copy there), memcpy otherwise. */
static inline void qops_copy_short(uint8_t *d, const uint8_t *s, ptrdiff_t n) {
    if (n > 32 && n <= 512) {
        /* 32-byte moves, the last one ending at n (a library call costs more here: a 3x3
         * conv's im2col row of 32 channels is three runs of 96 bytes, of 64 channels three
         * of 192) */
        for (ptrdiff_t i = 0; i < n - 32; i += 32) memcpy(d + i, s + i, 32);
        memcpy(d + n - 32, s + n - 32, 32);
    } else if (n >= 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8 && n < 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4 && n < 8) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        memcpy(d, s, (size_t)n);
    }
}

/* The threads a parallel region of the calling thread may start (its OpenMP setting). */
static inline int qops_omp_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Threads worth starting for `work` units when one thread should get at least `grain`. */
static inline int qops_threads_for(ptrdiff_t work, ptrdiff_t grain) {
#ifdef _OPENMP
    ptrdiff_t n = omp_get_max_threads();
    ptrdiff_t useful = grain > 0 ? work / grain : n;
    if (useful < 1) useful = 1;
    return (int)(useful < n ? useful : n);
#else
    (void)work; (void)grain;
    return 1;
#endif
}

/* Elements per thread when `n` is split into `threads` contiguous chunks: a multiple of 64,
 * so no two threads write the same cache line (for 1-byte elements). */
static inline ptrdiff_t qops_chunk64(ptrdiff_t n, int threads) {
    return ((n + threads - 1) / threads + 63) & ~(ptrdiff_t)63;
}

/* Round half to even. SSE2 has no vector round instruction, so the baseline build uses the
 * add-and-subtract-2^23 identity (exact for |x| < 2^22 under round-to-nearest); wider ISAs
 * inline rintf as vroundps. */
static inline float qops_rintf(float x) {
#if defined(__SSE4_1__) || !defined(__x86_64__)
    return rintf(x);
#else
    const float c = 12582912.0f; /* 1.5 * 2^23 */
    return fabsf(x) < 4194304.0f ? (x + c) - c : rintf(x);
#endif
}

/* Clamp to [lo, hi]; NaN becomes hi, as AVX min/max order does in PyTorch's quantize. */
static inline float qops_clampf(float v, float lo, float hi) {
    v = v < hi ? v : hi;
    return v > lo ? v : lo;
}

/* Q_fma: clampQ(rint(fma(x, inv, zp))), zero point added before the single rounding. */
static inline int32_t qops_q_fma(float x, float inv, float zpf, float qmin, float qmax) {
    return (int32_t)qops_clampf(qops_rintf(fmaf(x, inv, zpf)), qmin, qmax);
}

/* Q_leg, 8-bit: t = x*inv, u = t + zp (two roundings), rint, clamp; NaN gives raw 0. */
static inline int32_t qops_q_leg8(float x, float inv, float zpf, float qmin, float qmax) {
    float t = x * inv;
    float r = qops_rintf(t + zpf);
    if (r != r) return 0;
    return (int32_t)qops_clampf(r, qmin, qmax);
}

/* Q_leg, 32-bit: as above but the clamp is done in double; NaN gives INT32_MIN. */
static inline int32_t qops_q_leg32(float x, float inv, float zpf) {
    float t = x * inv;
    float r = rintf(t + zpf);
    double d = (double)r;
    if (d != d) return INT32_MIN;
    if (d <= -2147483648.0) return INT32_MIN;
    if (d >= 2147483647.0) return INT32_MAX;
    return (int32_t)d;
}

/* Q_vec: clampQ(rint(x*inv) + zp), zero point added after rounding. lo = qmin - zp and
 * hi = qmax - zp are prepared by the caller. */
static inline int32_t qops_q_vec(float x, float inv, int32_t zp, float lo, float hi) {
    return (int32_t)qops_clampf(qops_rintf(x * inv), lo, hi) + zp;
}

/* D_sc: s * (q - zp), q - zp wrapping in int32 as PyTorch's (a qint32 difference can leave
 * int32's range; the unsigned subtraction makes the wrap defined behaviour). */
static inline float qops_d_sc(int32_t q, float s, int32_t zp) {
    return s * (float)(int32_t)((uint32_t)q - (uint32_t)zp);
}

/* D_vec: fma(s, q, s * -zp); s_negzp = f32(s * f32(-zp)) is prepared by the caller. */
static inline float qops_d_vec(int32_t q, float s, float s_negzp) {
    return fmaf(s, (float)q, s_negzp);
}

/* D_pc: (q - zp) multiplied by the double scale, then rounded to float. */
static inline float qops_d_pc(int32_t q, double scale, int32_t zp) {
    return (float)((double)((float)q - (float)zp) * scale);
}

#endif
