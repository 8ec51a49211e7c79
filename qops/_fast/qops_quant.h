/* Quantize/dequantize/requantize kernels: per-tensor and per-channel rows, AVX2 paths (see quant.pyx).
 * (Moved verbatim from the `cdef extern from *` block of quant.pyx.) */
#ifndef QOPS_QUANT_H
#define QOPS_QUANT_H

#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#include "qops_avx2.h"
#endif
/* The 256-bit kernels without an AVX-512 counterpart (requantize) run in the avx2 build
 * only: AVX-512 builds keep the loops measured on Zen 5. */
#if defined(__AVX2__) && !defined(__AVX512F__)
#define QOPS_QUANT_AVX2 1
#else
#define QOPS_QUANT_AVX2 0
#endif
/* The tier of this build's quantize and dequantize kernels, named in quant.pyx's routes:
 * 2 AVX-512, 1 AVX2, 0 C. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define QOPS_QUANT_TIER 2
#elif defined(__AVX2__)
#define QOPS_QUANT_TIER 1
#else
#define QOPS_QUANT_TIER 0
#endif

#if defined(__AVX2__)
/* Four vectors of int32 (already <= qmax) to 32 bytes in order. The saturating packs do
 * the lower clamp, also for INT32_MIN from a value below int32's range; they interleave
 * 128-bit lanes, which one dword permute undoes. */
static inline __m256i qops_pack4_avx2(__m256i r0, __m256i r1, __m256i r2, __m256i r3, int sgn) {
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i w0 = _mm256_packs_epi32(r0, r1), w1 = _mm256_packs_epi32(r2, r3);
    return _mm256_permutevar8x32_epi32(
        sgn ? _mm256_packs_epi16(w0, w1) : _mm256_packus_epi16(w0, w1), perm);
}

/* Q_fma of 8 floats to int32 <= qmax: min() returns its second operand, the bound, for
 * NaN, as the scalar clamp does, and clamping before the round-to-nearest-even convert
 * equals rint then clamp since the bound is an integer. */
static inline __m256i qops_q_fma_avx2(__m256 x, __m256 vi, __m256 vz, __m256 hi) {
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_fmadd_ps(x, vi, vz), hi));
}

/* 8 bytes widened to int32, minus the zero point (wrapping, as the scalar int32 sub). */
static inline __m256i qops_load8_sub_avx2(const uint8_t *q, __m256i vzp, int sgn) {
    __m128i b = _mm_loadl_epi64((const __m128i *)q);
    return _mm256_sub_epi32(sgn ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b), vzp);
}
#endif
/* Q_fma of n floats into bytes (uint8 or int8 by the bounds). The AVX-512 body clamps
 * before one round-to-nearest convert, which equals rounding then clamping (rint is
 * monotonic and the bounds are integers; min returns the bound for NaN, as the scalar
 * clamp does); GCC's own vectorization of the scalar loop spends twice the instructions. */
static void qops_quantize_fma(const float *x, uint8_t *out, ptrdiff_t n, float inv, float zpf,
                              float qmin, float qmax) {
    ptrdiff_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    const __m512 vi = _mm512_set1_ps(inv), vz = _mm512_set1_ps(zpf);
    const __m512 lo = _mm512_set1_ps(qmin), hi = _mm512_set1_ps(qmax);
    /* 64 at a time, the lower clamp and the narrowing done by saturating packs (a
     * value below int32's range converts to INT32_MIN, which saturates to qmin too);
     * the packs interleave 128-bit lanes and one dword permute restores the order */
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const int sgn = qmin < 0;
    for (; i + 64 <= n; i += 64) {
        __m512i r[4];
        /* the input streams in from beyond L2 when large: 1 KB ahead, as in the AVX2 body */
        for (int k = 0; k < 4; k++)
            _mm_prefetch((const char *)(x + i + 256 + 16 * k), _MM_HINT_T0);
        for (int k = 0; k < 4; k++)
            r[k] = _mm512_cvt_roundps_epi32(
                _mm512_min_ps(_mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * k), vi, vz), hi),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512i w0 = _mm512_packs_epi32(r[0], r[1]), w1 = _mm512_packs_epi32(r[2], r[3]);
        _mm512_storeu_si512((void *)(out + i), _mm512_permutexvar_epi32(
            perm, sgn ? _mm512_packs_epi16(w0, w1) : _mm512_packus_epi16(w0, w1)));
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 t = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), vi, vz);
        t = _mm512_max_ps(_mm512_min_ps(t, hi), lo);
        __m512i r = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_mask_storeu_epi8(out + i, m, _mm512_cvtepi32_epi8(r));
    }
#elif defined(__AVX2__)
    /* GCC's loop of the scalar formula ran behind PyTorch's kernel on Zen 3 */
    const __m256 vi = _mm256_set1_ps(inv), vz = _mm256_set1_ps(zpf), hi = _mm256_set1_ps(qmax);
    const int sgn = qmin < 0;
    /* the input streams in from L3: a prefetch 1 KB ahead pays, more so with numpy's
     * 16-byte aligned arrays, whose loads cross cache lines (peeling to aligned loads
     * only moved the crossing to the stores) */
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(x + i + 256), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i + 272), _MM_HINT_T0);
        __m256i r0 = qops_q_fma_avx2(_mm256_loadu_ps(x + i), vi, vz, hi);
        __m256i r1 = qops_q_fma_avx2(_mm256_loadu_ps(x + i + 8), vi, vz, hi);
        __m256i r2 = qops_q_fma_avx2(_mm256_loadu_ps(x + i + 16), vi, vz, hi);
        __m256i r3 = qops_q_fma_avx2(_mm256_loadu_ps(x + i + 24), vi, vz, hi);
        _mm256_storeu_si256((__m256i *)(out + i), qops_pack4_avx2(r0, r1, r2, r3, sgn));
    }
#endif
    for (; i < n; i++) out[i] = (uint8_t)qops_q_fma(x[i], inv, zpf, qmin, qmax);
}

/* D_pc of n 8-bit values (int8 when sgn) with a double scale, for |zp| <= 2**23: then
 * f32(q) - f32(zp) is the exact integer q - zp, so the AVX-512 body subtracts in int32,
 * multiplies in double and rounds to float once, as the scalar formula does. GCC's own
 * vectorization of that formula ran behind PyTorch's kernel. */
static void qops_dequantize_pc8(const uint8_t *q, float *out, ptrdiff_t n, double s,
                                int32_t zp, int sgn) {
    ptrdiff_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    /* 8 values per step (one zmm of doubles) measured faster than 16 per step and than
     * GCC's own loop; masked loads and stores only in the tail */
    const __m512d vs = _mm512_set1_pd(s);
    const __m256i vz = _mm256_set1_epi32(zp);
    for (; i + 8 <= n; i += 8) {
        _mm_prefetch((const char *)(out + i + 512), _MM_HINT_T0);
        __m128i b = _mm_loadl_epi64((const __m128i *)(q + i));
        __m256i v = _mm256_sub_epi32(sgn ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b), vz);
        _mm256_storeu_ps(out + i, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi32_pd(v), vs)));
    }
#elif defined(__AVX2__)
    /* AVX2's int32 -> double convert is slow on Zen 3, so instead:
     * a byte b in the low mantissa bits of 2**52 is the double 2**52 + b, and
     * subtracting 2**52 + zp (+ 128 for int8, whose bytes are biased by xor 0x80) leaves
     * the exact integer q - zp, the double the scalar formula multiplies */
    const __m256d vs = _mm256_set1_pd(s);
    const __m256d off = _mm256_set1_pd(4503599627370496.0 + (double)zp + (sgn ? 128.0 : 0.0));
    const __m256i mag = _mm256_set1_epi64x(0x4330000000000000LL);
    const __m128i bias = _mm_set1_epi8(sgn ? (char)0x80 : 0);
    for (; i + 8 <= n; i += 8) {
        int32_t w0, w1;
        memcpy(&w0, q + i, 4);
        memcpy(&w1, q + i + 4, 4);
        __m128i b0 = _mm_xor_si128(_mm_cvtsi32_si128(w0), bias);
        __m128i b1 = _mm_xor_si128(_mm_cvtsi32_si128(w1), bias);
        __m256d a = _mm256_castsi256_pd(_mm256_or_si256(_mm256_cvtepu8_epi64(b0), mag));
        __m256d b = _mm256_castsi256_pd(_mm256_or_si256(_mm256_cvtepu8_epi64(b1), mag));
        __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_sub_pd(a, off), vs));
        __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_sub_pd(b, off), vs));
        _mm_storeu_ps(out + i, lo);         /* two stores beat an insert */
        _mm_storeu_ps(out + i + 4, hi);
    }
#endif
    for (; i < n; i++)
        out[i] = qops_d_pc(sgn ? (int32_t)(int8_t)q[i] : (int32_t)q[i], s, zp);
}

/* D_sc of n 8-bit values (int8 when sgn). q - zp wraps in int32 and converts to float
 * with the same rounding as the scalar cast, so each lane is the scalar formula. */
static void qops_dequantize_sc8(const uint8_t *q, float *out, ptrdiff_t n, float s,
                                int32_t zp, int sgn) {
    ptrdiff_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    /* bound by the stores, 4 bytes per element: the output lines prefetched 2 KB ahead */
    const __m512 vs = _mm512_set1_ps(s);
    const __m512i vz = _mm512_set1_epi32(zp);
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(out + i + 512), _MM_HINT_T0);
        __m128i b = _mm_loadu_si128((const __m128i *)(q + i));
        __m512i v = _mm512_sub_epi32(sgn ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b), vz);
        _mm512_storeu_ps(out + i, _mm512_mul_ps(vs, _mm512_cvtepi32_ps(v)));
    }
#elif QOPS_QUANT_AVX2
    /* bound by the 4-byte-per-element stores: prefetching the output lines 2 KB ahead
     * pays */
    const __m256 vs = _mm256_set1_ps(s);
    const __m256i vz = _mm256_set1_epi32(zp);
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(out + i + 512), _MM_HINT_T0);
        _mm_prefetch((const char *)(out + i + 528), _MM_HINT_T0);
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(out + i + 8 * k, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(
                qops_load8_sub_avx2(q + i + 8 * k, vz, sgn))));
    }
#endif
    /* two loops, so the baseline build vectorizes each */
    if (sgn)
        for (; i < n; i++) out[i] = qops_d_sc((int8_t)q[i], s, zp);
    else
        for (; i < n; i++) out[i] = qops_d_sc(q[i], s, zp);
}

/* D_sc of n 8-bit values with a scale and zero point per element, from position tables
 * (per-channel dequantize with short channel runs). GCC's loop of the formula uses
 * 256-bit vectors and ran behind the per-tensor kernel; this is that kernel with two
 * more loads. */
static void qops_dequantize_tab8(const uint8_t *q, float *out, ptrdiff_t n, const float *s,
                                 const int32_t *zp, int sgn) {
    ptrdiff_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(out + i + 512), _MM_HINT_T0);
        __m128i b = _mm_loadu_si128((const __m128i *)(q + i));
        __m512i v = _mm512_sub_epi32(sgn ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b),
                                     _mm512_loadu_si512((const void *)(zp + i)));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(s + i), _mm512_cvtepi32_ps(v)));
    }
#endif
    if (sgn)
        for (; i < n; i++) out[i] = qops_d_sc((int8_t)q[i], s[i], zp[i]);
    else
        for (; i < n; i++) out[i] = qops_d_sc(q[i], s[i], zp[i]);
}

#include "qops_transpose.h"

#if QOPS_QUANT_AVX2
/* D_sc then Q_fma of 32 bytes, for |zp| <= 2**22: f32(q - zp) exactly from
 * qops_bytes_to_f32x4 (one subtraction instead of a sub and a convert, which counts: this
 * loop is bound by instruction throughput), whose lane order the
 * in-lane packs at the end undo. Without `clamp` the min is left out, which is exact when
 * no value can be NaN or beyond +-2**30: the saturating packs then do both clamps. */
static inline __attribute__((always_inline)) __m256i qops_requant32_avx2(
        const uint8_t *q, __m256 vs, __m256 off, __m256 vi, __m256 vzf, __m256 hi, int sgn,
        int clamp) {
    __m256 f[4];
    __m256i r[4];
    qops_bytes_to_f32x4(_mm256_loadu_si256((const __m256i *)q), sgn, off, f);
    for (int k = 0; k < 4; k++) {
        __m256 d = _mm256_mul_ps(vs, f[k]);
        __m256 y = _mm256_fmadd_ps(d, vi, vzf);
        r[k] = _mm256_cvtps_epi32(clamp ? _mm256_min_ps(y, hi) : y);
    }
    __m256i w0 = _mm256_packs_epi32(r[0], r[1]), w1 = _mm256_packs_epi32(r[2], r[3]);
    return sgn ? _mm256_packs_epi16(w0, w1) : _mm256_packus_epi16(w0, w1);
}

static inline __attribute__((always_inline)) ptrdiff_t qops_requant_loop_avx2(
        const uint8_t *q, uint8_t *out, ptrdiff_t n, __m256 vs, __m256 off, __m256 vi,
        __m256 vzf, __m256 hi, int sgn, int clamp) {
    ptrdiff_t i = 0;
    for (; i + 32 <= n; i += 32)
        _mm256_storeu_si256((__m256i *)(out + i),
                            qops_requant32_avx2(q + i, vs, off, vi, vzf, hi, sgn, clamp));
    return i;
}
#endif

/* D_sc then Q_fma, 8-bit to 8-bit of the same signedness, in one pass. */
static void qops_requantize8(const uint8_t *q, uint8_t *out, ptrdiff_t n, float s, int32_t zp,
                             float inv, float zpf, float qmin, float qmax) {
    ptrdiff_t i = 0;
    const int sgn = qmin < 0;
#if QOPS_QUANT_AVX2
    if (zp >= -(1 << 22) && zp <= (1 << 22)) {
        const __m256 vs = _mm256_set1_ps(s), vi = _mm256_set1_ps(inv);
        const __m256 vzf = _mm256_set1_ps(zpf), hi = _mm256_set1_ps(qmax);
        const __m256 off = qops_f32_offset(zp, sgn);
        /* with finite qparams every rounding step is monotonic in q, so the two ends
         * of the byte range bound all values, and none is NaN */
        int clamp = 1;
        if (isfinite(s) && isfinite(inv) && isfinite(zpf)) {
            float a = fmaf(qops_d_sc((int32_t)qmin, s, zp), inv, zpf);
            float b = fmaf(qops_d_sc((int32_t)qmax, s, zp), inv, zpf);
            clamp = !(fabsf(a) < 1073741824.0f && fabsf(b) < 1073741824.0f);
        }
        if (sgn)
            i = clamp ? qops_requant_loop_avx2(q, out, n, vs, off, vi, vzf, hi, 1, 1)
                      : qops_requant_loop_avx2(q, out, n, vs, off, vi, vzf, hi, 1, 0);
        else
            i = clamp ? qops_requant_loop_avx2(q, out, n, vs, off, vi, vzf, hi, 0, 1)
                      : qops_requant_loop_avx2(q, out, n, vs, off, vi, vzf, hi, 0, 0);
    }
#endif
    if (sgn)
        for (; i < n; i++)
            out[i] = (uint8_t)qops_q_fma(qops_d_sc((int8_t)q[i], s, zp), inv, zpf, qmin, qmax);
    else
        for (; i < n; i++)
            out[i] = (uint8_t)qops_q_fma(qops_d_sc(q[i], s, zp), inv, zpf, qmin, qmax);
}

#endif  /* QOPS_QUANT_H */
