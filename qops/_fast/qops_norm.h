/* Normalization kernels: batch/group/layer/instance norm rows and channel sums (see norm.pyx).
 * (Moved verbatim from the `cdef extern from *` block of norm.pyx.) */
#ifndef QOPS_NORM_H
#define QOPS_NORM_H

#include <math.h>
#include <stdlib.h>
#include "qops_common.h"
#if defined(__AVX2__)
#include <immintrin.h>
#include "qops_avx2.h"
#endif
/* Exact sums of u = byte ^ flip and of u^2 over p[0:n]. Vector: psadbw sums bytes into
 * 64-bit lanes; pmaddwd squares zero-extended 16-bit pairs into 32-bit lanes, flushed to
 * 64 bits every 4096 steps (each lane gains <= 2 * 2 * 255^2 per step: no overflow). */
static void qops_norm_sums(const uint8_t *p, ptrdiff_t n, uint8_t flip, int64_t *s_out,
                           int64_t *ss_out) {
    int64_t s = 0, ss = 0;
    ptrdiff_t i = 0;
#if defined(__AVX512BW__)
    const __m512i f = _mm512_set1_epi8((char)flip), z = _mm512_setzero_si512();
    while (i + 64 <= n) {
        ptrdiff_t end = (n - i) / 64 > 4096 ? i + 64 * 4096 : n;
        __m512i vs = z, vss = z;
        for (; i + 64 <= end; i += 64) {
            __m512i v = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p + i)), f);
            vs = _mm512_add_epi64(vs, _mm512_sad_epu8(v, z));
            __m512i lo = _mm512_unpacklo_epi8(v, z), hi = _mm512_unpackhi_epi8(v, z);
            vss = _mm512_add_epi32(vss, _mm512_add_epi32(_mm512_madd_epi16(lo, lo),
                                                         _mm512_madd_epi16(hi, hi)));
        }
        s += _mm512_reduce_add_epi64(vs);
        ss += _mm512_reduce_add_epi64(_mm512_add_epi64(
            _mm512_cvtepu32_epi64(_mm512_castsi512_si256(vss)),
            _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(vss, 1))));
    }
#elif defined(__AVX2__)
    const __m256i f = _mm256_set1_epi8((char)flip), z = _mm256_setzero_si256();
    while (i + 32 <= n) {
        ptrdiff_t end = (n - i) / 32 > 4096 ? i + 32 * 4096 : n;
        __m256i vs = z, vss = z;
        for (; i + 32 <= end; i += 32) {
            __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + i)), f);
            vs = _mm256_add_epi64(vs, _mm256_sad_epu8(v, z));
            __m256i lo = _mm256_unpacklo_epi8(v, z), hi = _mm256_unpackhi_epi8(v, z);
            vss = _mm256_add_epi32(vss, _mm256_add_epi32(_mm256_madd_epi16(lo, lo),
                                                         _mm256_madd_epi16(hi, hi)));
        }
        int64_t t[4];
        _mm256_storeu_si256((__m256i *)t, vs);
        s += t[0] + t[1] + t[2] + t[3];
        uint32_t q[8];
        _mm256_storeu_si256((__m256i *)q, vss);
        for (int j = 0; j < 8; j++) ss += q[j];
    }
#endif
    for (; i < n; i++) {
        int32_t v = (uint8_t)(p[i] ^ flip);
        s += v;
        ss += v * v;
    }
    *s_out = s;
    *ss_out = ss;
}

/* Row kernels of the three norm affines. The AVX2 bodies compute each element's float32
 * value with the scalar steps (same ops, same order), then round with one vcvtps2dq
 * (round half to even, as rintf) and clamp with saturating packs: int32 -> int16, the
 * zero point added in int16 with saturation, int16 -> 8 bits. That equals the scalar
 * clamp(rint(y), lo, hi) + zp whenever |y| < 2^30 and y is not NaN, which the caller's
 * bound (qops_norm_vec_ok) guarantees; rows that fail it (or ISAs without AVX2) run the
 * scalar loops, which GCC vectorizes less well (round, two float clamps, a convert). */
/* AVX-512 builds keep GCC's 512-bit loops (and VBMI tables), as measured on Zen 5, except
 * layer norm's row, which has its own 512-bit body. */
#if defined(__AVX2__) && !defined(__AVX512F__)
#define QOPS_NORM_AVX2 1
#else
#define QOPS_NORM_AVX2 0
#endif
/* The tier named in norm.pyx's routes: 2 AVX-512 (GCC's 512-bit loops, layer norm's own
 * body), 1 AVX2 bodies, 0 C. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define QOPS_NORM_TIER 2
#elif QOPS_NORM_AVX2
#define QOPS_NORM_TIER 1
#else
#define QOPS_NORM_TIER 0
#endif
static inline int qops_norm_vec_ok(double bound) {
    return bound < 1073741824.0;     /* false for NaN and inf too */
}
#if QOPS_NORM_AVX2
/* (q - zp) as float32 for the 8 raw values at p. */
static inline __attribute__((always_inline)) __m256 qops_norm_ld8(const uint8_t *p, int sgn,
                                                                  __m256i zp) {
    __m128i v = _mm_loadl_epi64((const __m128i *)p);
    __m256i q = sgn ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, zp));
}
/* The 32 raw values at p as float32 q - zp, exactly, in qops_avx2.h's block order. */
static inline __attribute__((always_inline)) void
qops_norm_ld32(const uint8_t *p, int sgn, __m256 off, __m256 f[4]) {
    qops_bytes_to_f32x4(_mm256_loadu_si256((const __m256i *)p), sgn, off, f);
}
/* 32 output bytes from the float values of a block (rounded by one vcvtps2dq). */
static inline __attribute__((always_inline)) __m256i
qops_norm_narrow_inlane(__m256 y0, __m256 y1, __m256 y2, __m256 y3, __m256i ozp16,
                        __m256i floor8, int sgn, int relu) {
    return qops_narrow32(_mm256_cvtps_epi32(y0), _mm256_cvtps_epi32(y1),
                         _mm256_cvtps_epi32(y2), _mm256_cvtps_epi32(y3), ozp16, floor8, sgn,
                         relu);
}
/* The same from the float values of elements 0-7, 8-15, 16-23, 24-31: the packs
 * interleave the 128-bit lanes (dwords 0,4,1,5,... are elements 0-3,4-7,...). */
static inline __attribute__((always_inline)) __m256i
qops_norm_narrow(__m256 y0, __m256 y1, __m256 y2, __m256 y3, __m256i ozp16, __m256i floor8,
                 int sgn, int relu) {
    return _mm256_permutevar8x32_epi32(
        qops_norm_narrow_inlane(y0, y1, y2, y3, ozp16, floor8, sgn, relu),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

/* Batch norm: out = clamp(rint(fma(a, q - zp, b)), lo, hi) + ozp. */
static inline __attribute__((always_inline)) void
qops_bn_row_t(const uint8_t *x, uint8_t *out, ptrdiff_t n, float a, float b, int32_t zp,
              int32_t ozp, float lo, float hi, int relu, int sgn) {
    ptrdiff_t i = 0;
#if QOPS_NORM_AVX2
    if (qops_norm_vec_ok(fabs((double)a) * 256.0 + fabs((double)b))) {
        const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b), off = qops_f32_offset(zp, sgn);
        const __m256i o16 = _mm256_set1_epi16((short)ozp), f8 = _mm256_set1_epi8((char)ozp);
        for (; i + 32 <= n; i += 32) {
            __m256 f[4];
            qops_norm_ld32(x + i, sgn, off, f);
            _mm256_storeu_si256((__m256i *)(out + i), qops_norm_narrow_inlane(
                _mm256_fmadd_ps(av, f[0], bv), _mm256_fmadd_ps(av, f[1], bv),
                _mm256_fmadd_ps(av, f[2], bv), _mm256_fmadd_ps(av, f[3], bv), o16, f8, sgn,
                relu));
        }
    }
#endif
    for (; i < n; i++) {
        int32_t q = sgn ? (int32_t)(int8_t)x[i] : (int32_t)x[i];
        out[i] = (uint8_t)qops_q_vec(fmaf(a, (float)(q - zp), b), 1.0f, ozp, lo, hi);
    }
}
/* Batch norm of channels-last rows: npix rows of C channels, a[c] and b[c] per lane
 * (read from L1 every row; GCC vectorizes the channel loop). */
static inline __attribute__((always_inline)) void
qops_bn_cl_t(const uint8_t *x, uint8_t *out, ptrdiff_t npix, ptrdiff_t C,
             const float *restrict a, const float *restrict b, int32_t zp, int32_t ozp,
             float lo, float hi, int sgn) {
    for (ptrdiff_t p = 0; p < npix; p++, x += C, out += C)
        for (ptrdiff_t c = 0; c < C; c++) {
            int32_t q = sgn ? (int32_t)(int8_t)x[c] : (int32_t)x[c];
            out[c] = (uint8_t)qops_q_vec(fmaf(a[c], (float)(q - zp), b[c]), 1.0f, ozp, lo, hi);
        }
}
#if defined(__AVX512BW__)
/* f32(q - zp) of the 16 raw values at p. */
static inline __attribute__((always_inline)) __m512 qops_bn_ld16(const uint8_t *p,
                                                                 __mmask16 m, int sgn,
                                                                 __m512i zv) {
    __m128i v = _mm_maskz_loadu_epi8(m, p);
    __m512i q = sgn ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(q, zv));
}
/* The same in vector blocks. 64 channels at a time, the four rounded int32 vectors are
 * narrowed by saturating packs (int32 -> int16, + zp with saturation, -> 8 bits: the
 * clamp of Q_vec, exact while |y| < 2^30, which the caller's bound guarantees) and one
 * dword permute, then max with the floor (the relu's zero point, else qmin); vcvtps2dq
 * rounds half to even as rintf. Channel tails go 16 at a time through a masked body.
 * 512-bit work runs on two ports only, so uops decide: this takes about half the uops a
 * 16-element block of GCC's vectorization of the loop above. */
static void qops_bn_cl_512(const uint8_t *x, uint8_t *out, ptrdiff_t npix, ptrdiff_t C,
                           const float *a, const float *b, int32_t zp, int32_t ozp,
                           float lo, float hi, int sgn) {
    const __m512i zv = _mm512_set1_epi32(zp), ov = _mm512_set1_epi32(ozp);
    const __m512i lv = _mm512_set1_epi32((int32_t)lo), hv = _mm512_set1_epi32((int32_t)hi);
    const __m512i o16 = _mm512_set1_epi16((short)ozp);
    const __m512i floor8 = _mm512_set1_epi8((char)((int32_t)lo + ozp));
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7,
                                           11, 15);
    const ptrdiff_t c64 = C / 64 * 64;
    for (ptrdiff_t p = 0; p < npix; p++, x += C, out += C) {
        ptrdiff_t c = 0;
        for (; c < c64; c += 64) {
            __m512i r[4];
            for (int k = 0; k < 4; k++)
                r[k] = _mm512_cvtps_epi32(_mm512_fmadd_ps(
                    _mm512_loadu_ps(a + c + 16 * k),
                    qops_bn_ld16(x + c + 16 * k, 0xFFFF, sgn, zv),
                    _mm512_loadu_ps(b + c + 16 * k)));
            __m512i s01 = _mm512_adds_epi16(_mm512_packs_epi32(r[0], r[1]), o16);
            __m512i s23 = _mm512_adds_epi16(_mm512_packs_epi32(r[2], r[3]), o16);
            __m512i v = _mm512_permutexvar_epi32(perm, sgn ? _mm512_packs_epi16(s01, s23)
                                                          : _mm512_packus_epi16(s01, s23));
            v = sgn ? _mm512_max_epi8(v, floor8) : _mm512_max_epu8(v, floor8);
            _mm512_storeu_si512((void *)(out + c), v);
        }
        for (; c < C; c += 16) {
            __mmask16 m = C - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (C - c)) - 1);
            __m512 y = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + c),
                                       qops_bn_ld16(x + c, m, sgn, zv),
                                       _mm512_maskz_loadu_ps(m, b + c));
            __m512i q = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(y), lv), hv);
            __m128i o = _mm512_cvtepi32_epi8(_mm512_add_epi32(q, ov));
            if (m == 0xFFFF) _mm_storeu_si128((__m128i *)(out + c), o);
            else _mm_mask_storeu_epi8(out + c, m, o);
        }
    }
}
#endif
#if QOPS_NORM_AVX2
/* The AVX2 body: 32 channels at a time, each 8 a vector, narrowed as the row kernel's,
 * then max with the floor as the AVX-512 body (the relu's zero point, else qmin). */
static void qops_bn_cl_avx2(const uint8_t *x, uint8_t *out, ptrdiff_t npix, ptrdiff_t C,
                            const float *a, const float *b, int32_t zp, int32_t ozp,
                            float lo, float hi, int sgn) {
    const __m256i zv = _mm256_set1_epi32(zp);
    const __m256i o16 = _mm256_set1_epi16((short)ozp);
    const __m256i f8 = _mm256_set1_epi8((char)((int32_t)lo + ozp));
    const ptrdiff_t c32 = C / 32 * 32;
    for (ptrdiff_t p = 0; p < npix; p++, x += C, out += C) {
        ptrdiff_t c = 0;
        for (; c < c32; c += 32) {
            __m256 y[4];
            for (int k = 0; k < 4; k++)
                y[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + c + 8 * k),
                                       qops_norm_ld8(x + c + 8 * k, sgn, zv),
                                       _mm256_loadu_ps(b + c + 8 * k));
            _mm256_storeu_si256((__m256i *)(out + c),
                                qops_norm_narrow(y[0], y[1], y[2], y[3], o16, f8, sgn, 1));
        }
        for (; c < C; c++) {
            int32_t q = sgn ? (int32_t)(int8_t)x[c] : (int32_t)x[c];
            out[c] = (uint8_t)qops_q_vec(fmaf(a[c], (float)(q - zp), b[c]), 1.0f, ozp, lo, hi);
        }
    }
}
#endif
static void qops_bn_cl(const uint8_t *x, uint8_t *out, ptrdiff_t npix, ptrdiff_t C,
                       const float *a, const float *b, int32_t zp, int32_t ozp, float lo,
                       float hi, int sgn) {
#if defined(__AVX512BW__) || QOPS_NORM_AVX2
    double bound = 0.0;
    for (ptrdiff_t c = 0; c < C; c++) {
        double t = fabs((double)a[c]) * 256.0 + fabs((double)b[c]);
        bound = t > bound || t != t ? t : bound;
    }
    if (qops_norm_vec_ok(bound)) {
#if defined(__AVX512BW__)
        qops_bn_cl_512(x, out, npix, C, a, b, zp, ozp, lo, hi, sgn);
#else
        qops_bn_cl_avx2(x, out, npix, C, a, b, zp, ozp, lo, hi, sgn);
#endif
        return;
    }
#endif
    if (sgn) qops_bn_cl_t(x, out, npix, C, a, b, zp, ozp, lo, hi, 1);
    else qops_bn_cl_t(x, out, npix, C, a, b, zp, ozp, lo, hi, 0);
}

static void qops_bn_row(const uint8_t *x, uint8_t *out, ptrdiff_t n, float a, float b,
                        int32_t zp, int32_t ozp, float lo, float hi, int relu, int sgn) {
    if (sgn) {
        if (relu) qops_bn_row_t(x, out, n, a, b, zp, ozp, lo, hi, 1, 1);
        else qops_bn_row_t(x, out, n, a, b, zp, ozp, lo, hi, 0, 1);
    } else {
        if (relu) qops_bn_row_t(x, out, n, a, b, zp, ozp, lo, hi, 1, 0);
        else qops_bn_row_t(x, out, n, a, b, zp, ozp, lo, hi, 0, 0);
    }
}

#if QOPS_NORM_AVX2
/* Whether fma(A, f, B) gives the bytes of fma(f - mean, g, b) * inv (f = q - zp) for
 * every one of the 256 raw values, both rounded and clamped as qops_q_vec does: then a
 * long channel may run the batch norm kernel, one fma instead of four steps. Checking
 * costs about what 2048 values of the saving are worth. */
static int qops_gn_fold_ok(float mean, float g, float b, float inv, int32_t zp, float lo,
                           float hi, int sgn, float A, float B) {
    if (!qops_norm_vec_ok(fabs((double)A) * 256.0 + fabs((double)B)))
        return 0;
    const __m256 mv = _mm256_set1_ps(mean), gv = _mm256_set1_ps(g), bv = _mm256_set1_ps(b);
    const __m256 iv = _mm256_set1_ps(inv), av = _mm256_set1_ps(A), cv = _mm256_set1_ps(B);
    const __m256 off = qops_f32_offset(zp, sgn);
    const __m256i lv = _mm256_set1_epi32((int32_t)lo), hv = _mm256_set1_epi32((int32_t)hi);
    __m256i same = _mm256_set1_epi32(-1);
    for (int i = 0; i < 256; i += 32) {
        __m256 f[4];
        qops_bytes_to_f32x4(qops_iota32(i), sgn, off, f);
        for (int k = 0; k < 4; k++) {
            __m256 y4 = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_sub_ps(f[k], mv), gv, bv), iv);
            __m256i r4 = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(y4), lv), hv);
            __m256i r1 = _mm256_min_epi32(_mm256_max_epi32(
                _mm256_cvtps_epi32(_mm256_fmadd_ps(av, f[k], cv)), lv), hv);
            same = _mm256_and_si256(same, _mm256_cmpeq_epi32(r4, r1));
        }
    }
    return _mm256_movemask_epi8(same) == -1;
}
#endif

/* Group norm, one channel: out = clamp(rint(fma(q - zp - mean, g, b) * inv), lo, hi) + ozp,
 * every other step rounded as written (PyTorch's AVX2 kernel fuses the affine). */
static inline __attribute__((always_inline)) void
qops_gn_row_t(const uint8_t *x, uint8_t *out, ptrdiff_t n, float mean, float g, float b,
              int32_t zp, float inv, int32_t ozp, float lo, float hi, int sgn) {
    ptrdiff_t i = 0;
#if QOPS_NORM_AVX2
    if (qops_norm_vec_ok(((256.0 + fabs((double)mean)) * fabs((double)g) + fabs((double)b))
                         * fabs((double)inv) * 1.001)) {
        if (n >= 2048) {
            /* the one-fma form, where it gives the same bytes for every raw value */
            float A = (float)((double)g * (double)inv);
            float B = (float)(((double)b - (double)mean * (double)g) * (double)inv);
            if (qops_gn_fold_ok(mean, g, b, inv, zp, lo, hi, sgn, A, B)) {
                qops_bn_row_t(x, out, n, A, B, zp, ozp, lo, hi, 0, sgn);
                return;
            }
        }
        const __m256 mv = _mm256_set1_ps(mean), gv = _mm256_set1_ps(g);
        const __m256 bv = _mm256_set1_ps(b), iv = _mm256_set1_ps(inv), off = qops_f32_offset(zp, sgn);
        const __m256i o16 = _mm256_set1_epi16((short)ozp);
        #define QOPS_GN(k) _mm256_mul_ps(_mm256_fmadd_ps(_mm256_sub_ps(f[k], mv), gv, bv), iv)
        for (; i + 32 <= n; i += 32) {
            __m256 f[4];
            qops_norm_ld32(x + i, sgn, off, f);
            _mm256_storeu_si256((__m256i *)(out + i),
                                qops_norm_narrow_inlane(QOPS_GN(0), QOPS_GN(1), QOPS_GN(2),
                                                        QOPS_GN(3), o16, o16, sgn, 0));
        }
        #undef QOPS_GN
    }
#endif
    for (; i < n; i++) {
        int32_t q = sgn ? (int32_t)(int8_t)x[i] : (int32_t)x[i];
        out[i] = (uint8_t)qops_q_vec(fmaf((float)(q - zp) - mean, g, b), inv, ozp, lo, hi);
    }
}
static void qops_gn_row(const uint8_t *x, uint8_t *out, ptrdiff_t n, float mean, float g,
                        float b, int32_t zp, float inv, int32_t ozp, float lo, float hi,
                        int sgn) {
    if (sgn) qops_gn_row_t(x, out, n, mean, g, b, zp, inv, ozp, lo, hi, 1);
    else qops_gn_row_t(x, out, n, mean, g, b, zp, inv, ozp, lo, hi, 0);
}

/* Layer norm, one row: out = clamp(rint(fma((q - zp - mean) * r, w[i], b[i]) * inv), lo,
 * hi) + ozp (PyTorch's AVX2 kernel fuses the affine); wb_max bounds |w[i]| and |b[i]|
 * (found once by the caller, inf if not finite). */
static inline __attribute__((always_inline)) void
qops_ln_row_t(const uint8_t *x, uint8_t *out, ptrdiff_t n, const float *w, const float *b,
              double wb_max, float mean, float r, int32_t zp, float inv, int32_t ozp,
              float lo, float hi, int sgn) {
    ptrdiff_t i = 0;
    const int vec = qops_norm_vec_ok(((256.0 + fabs((double)mean)) * fabs((double)r) + 1.0)
                                     * wb_max * fabs((double)inv) * 1.001);
    (void)vec;
#if QOPS_NORM_AVX2
    if (vec) {
        const __m256 mv = _mm256_set1_ps(mean), rv = _mm256_set1_ps(r);
        const __m256 iv = _mm256_set1_ps(inv);
        const __m256i zv = _mm256_set1_epi32(zp), o16 = _mm256_set1_epi16((short)ozp);
        #define QOPS_LN(k) _mm256_mul_ps(_mm256_fmadd_ps(_mm256_mul_ps(                     \
            _mm256_sub_ps(qops_norm_ld8(x + i + 8 * (k), sgn, zv), mv), rv),                \
            _mm256_loadu_ps(w + i + 8 * (k)), _mm256_loadu_ps(b + i + 8 * (k))), iv)
        for (; i + 32 <= n; i += 32)
            _mm256_storeu_si256((__m256i *)(out + i),
                                qops_norm_narrow(QOPS_LN(0), QOPS_LN(1), QOPS_LN(2), QOPS_LN(3),
                                                 o16, o16, sgn, 0));
        #undef QOPS_LN
    }
#elif defined(__AVX512F__) && defined(__AVX512BW__)
    /* the same steps 16 at a time; below the bound (no NaN, |y| < 2^30) the convert's
     * round to nearest even and an integer clamp equal rint then the float clamp */
    if (vec) {
        const __m512 mv = _mm512_set1_ps(mean), rv = _mm512_set1_ps(r), iv = _mm512_set1_ps(inv);
        const __m512i zv = _mm512_set1_epi32(zp), ov = _mm512_set1_epi32(ozp);
        const __m512i lov = _mm512_set1_epi32((int32_t)lo), hiv = _mm512_set1_epi32((int32_t)hi);
        for (; i + 16 <= n; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(x + i));
            __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(
                sgn ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v), zv));
            __m512 y = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(f, mv), rv),
                _mm512_loadu_ps(w + i), _mm512_loadu_ps(b + i)), iv);
            __m512i t = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(y), lov), hiv);
            _mm_storeu_si128((__m128i *)(out + i), _mm512_cvtepi32_epi8(_mm512_add_epi32(t, ov)));
        }
    }
#endif
    for (; i < n; i++) {
        int32_t q = sgn ? (int32_t)(int8_t)x[i] : (int32_t)x[i];
        out[i] = (uint8_t)qops_q_vec(fmaf(((float)(q - zp) - mean) * r, w[i], b[i]), inv,
                                     ozp, lo, hi);
    }
}
static void qops_ln_row(const uint8_t *x, uint8_t *out, ptrdiff_t n, const float *w,
                        const float *b, double wb_max, float mean, float r, int32_t zp,
                        float inv, int32_t ozp, float lo, float hi, int sgn) {
    if (sgn) qops_ln_row_t(x, out, n, w, b, wb_max, mean, r, zp, inv, ozp, lo, hi, 1);
    else qops_ln_row_t(x, out, n, w, b, wb_max, mean, r, zp, inv, ozp, lo, hi, 0);
}

/* One channel's 256-entry table, table[u] = clamp(rint(fma(d[u], g, b) * inv), lo, hi) + ozp,
 * where d[u] = f32(q(u) - zp) - mean is shared by the channels of a group (worked out once
 * per group). The vector body: vminps/vmaxps return the bound for NaN and order signed
 * zeros as the scalar clamp does, vrndscaleps is rint. */
static void qops_gn_table(const float *d, float g, float b, float inv, int32_t ozp, float lo,
                          float hi, uint8_t *table) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const __m512 vg = _mm512_set1_ps(g), vb = _mm512_set1_ps(b), vi = _mm512_set1_ps(inv);
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    const __m512i vz = _mm512_set1_epi32(ozp);
    for (int u = 0; u < 256; u += 16) {
        __m512 t = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_loadu_ps(d + u), vg, vb), vi);
        t = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        t = _mm512_max_ps(_mm512_min_ps(t, vhi), vlo);
        _mm_storeu_si128((__m128i *)(table + u),
                         _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvttps_epi32(t), vz)));
    }
#else
    for (int u = 0; u < 256; u++)
        table[u] = (uint8_t)qops_q_vec(fmaf(d[u], g, b), inv, ozp, lo, hi);
#endif
}

/* Exact per-channel sums of u = byte ^ flip and u^2 for channels c0 .. c0 + nc - 1
 * (nc <= 32) of npix channels-last rows of C bytes, in 32-bit lanes flushed to 64 bits
 * every 32768 rows (u^2 * 32768 < 2^32). NC: a constant 32 for whole blocks, so that GCC
 * keeps the 64 lanes in registers, or 0 (nc at run time) for the last one. */
static inline __attribute__((always_inline)) void
qops_norm_sums_cols_t(const uint8_t *x, ptrdiff_t npix, ptrdiff_t C, ptrdiff_t c0,
                      ptrdiff_t nc, uint8_t flip, int64_t *s, int64_t *ss, const int NC) {
    uint32_t as[32], ass[32];
    if (NC) nc = NC;
    for (ptrdiff_t c = 0; c < nc; c++) s[c] = ss[c] = 0;
    for (ptrdiff_t p0 = 0; p0 < npix; p0 += 32768) {
        ptrdiff_t pe = npix - p0 > 32768 ? p0 + 32768 : npix;
        for (ptrdiff_t c = 0; c < nc; c++) as[c] = ass[c] = 0;
        for (ptrdiff_t p = p0; p < pe; p++) {
            const uint8_t *row = x + p * C + c0;
            for (ptrdiff_t c = 0; c < nc; c++) {
                uint32_t u = (uint8_t)(row[c] ^ flip);
                as[c] += u;
                ass[c] += u * u;
            }
        }
        for (ptrdiff_t c = 0; c < nc; c++) {
            s[c] += as[c];
            ss[c] += ass[c];
        }
    }
}
static void qops_norm_sums_cols(const uint8_t *x, ptrdiff_t npix, ptrdiff_t C, ptrdiff_t c0,
                                ptrdiff_t nc, uint8_t flip, int64_t *s, int64_t *ss) {
    if (nc == 32) qops_norm_sums_cols_t(x, npix, C, c0, nc, flip, s, ss, 32);
    else qops_norm_sums_cols_t(x, npix, C, c0, nc, flip, s, ss, 0);
}

/* Group norm of channels-last rows r0..r1 of C channels (npix rows per batch):
 * out = clamp(rint(fma(q - zp, s[c], t[c]) * inv), lo, hi) + ozp, s and t the C values of
 * the row's batch (PyTorch's NHWC kernel: its affine folded into one fma per element). */
static inline __attribute__((always_inline)) void
qops_gn_cl_t(const uint8_t *x, uint8_t *out, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t npix,
             ptrdiff_t C, const float *s, const float *t, int32_t zp, float inv, int32_t ozp,
             float lo, float hi, int sgn) {
    for (ptrdiff_t r = r0; r < r1; r++) {
        const uint8_t *xr = x + r * C;
        uint8_t *orow = out + r * C;
        const float *restrict sr = s + (r / npix) * C, *restrict tr = t + (r / npix) * C;
        for (ptrdiff_t c = 0; c < C; c++) {
            int32_t q = sgn ? (int32_t)(int8_t)xr[c] : (int32_t)xr[c];
            orow[c] = (uint8_t)qops_q_vec(fmaf((float)(q - zp), sr[c], tr[c]), inv, ozp, lo,
                                          hi);
        }
    }
}
#if QOPS_NORM_AVX2
/* The same for rows of one batch, 32 channels at a time (each 8 a vector), narrowed as
 * the row kernels; the caller's bound keeps |y| < 2^30. */
static void qops_gn_cl_avx2(const uint8_t *x, uint8_t *out, ptrdiff_t r0, ptrdiff_t r1,
                            ptrdiff_t C, const float *s, const float *t, int32_t zp,
                            float inv, int32_t ozp, float lo, float hi, int sgn) {
    const __m256i zv = _mm256_set1_epi32(zp), o16 = _mm256_set1_epi16((short)ozp);
    const __m256 iv = _mm256_set1_ps(inv);
    const ptrdiff_t c32 = C / 32 * 32;
    for (ptrdiff_t r = r0; r < r1; r++) {
        const uint8_t *xr = x + r * C;
        uint8_t *orow = out + r * C;
        ptrdiff_t c = 0;
        for (; c < c32; c += 32) {
            __m256 y[4];
            for (int k = 0; k < 4; k++)
                y[k] = _mm256_mul_ps(_mm256_fmadd_ps(qops_norm_ld8(xr + c + 8 * k, sgn, zv),
                                                     _mm256_loadu_ps(s + c + 8 * k),
                                                     _mm256_loadu_ps(t + c + 8 * k)), iv);
            _mm256_storeu_si256((__m256i *)(orow + c),
                                qops_norm_narrow(y[0], y[1], y[2], y[3], o16, o16, sgn, 0));
        }
        for (; c < C; c++) {
            int32_t q = sgn ? (int32_t)(int8_t)xr[c] : (int32_t)xr[c];
            orow[c] = (uint8_t)qops_q_vec(fmaf((float)(q - zp), s[c], t[c]), inv, ozp, lo, hi);
        }
    }
}
#endif
static void qops_gn_cl(const uint8_t *x, uint8_t *out, ptrdiff_t r0, ptrdiff_t r1,
                       ptrdiff_t npix, ptrdiff_t C, const float *s, const float *t, int32_t zp,
                       float inv, int32_t ozp, float lo, float hi, int sgn) {
#if QOPS_NORM_AVX2
    /* batch by batch: each has its own s and t, and its own bound on |y| */
    while (r0 < r1) {
        ptrdiff_t bt = r0 / npix, end = (bt + 1) * npix < r1 ? (bt + 1) * npix : r1;
        const float *sb = s + bt * C, *tb = t + bt * C;
        double bound = 0.0;
        for (ptrdiff_t c = 0; c < C; c++) {
            double v = (fabs((double)sb[c]) * 256.0 + fabs((double)tb[c])) * fabs((double)inv)
                       * 1.001;
            bound = v > bound || v != v ? v : bound;
        }
        if (qops_norm_vec_ok(bound))
            qops_gn_cl_avx2(x, out, r0, end, C, sb, tb, zp, inv, ozp, lo, hi, sgn);
        else if (sgn) qops_gn_cl_t(x, out, r0, end, npix, C, s, t, zp, inv, ozp, lo, hi, 1);
        else qops_gn_cl_t(x, out, r0, end, npix, C, s, t, zp, inv, ozp, lo, hi, 0);
        r0 = end;
    }
#else
    if (sgn) qops_gn_cl_t(x, out, r0, r1, npix, C, s, t, zp, inv, ozp, lo, hi, 1);
    else qops_gn_cl_t(x, out, r0, r1, npix, C, s, t, zp, inv, ozp, lo, hi, 0);
#endif
}

/* -- the float layer norm (layer_norm_f32; qops/_ref/norm.py, docs/semantics.md §13.1) -------
 * Sums in float64 over 16 lanes, element j into lane j % 16 in index order (the first 16
 * elements start the lanes; a last partial block adds into lanes 0..n%16-1), the lanes
 * combined by halves (l += l + 8, then + 4, + 2, + 1): four vector chains that overlap, in an
 * order numpy repeats exactly. */
static inline double qops_lnf_lanes(double *acc) {
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++)
            acc[l] = acc[l] + acc[l + h];
    return acc[0];
}

#if defined(__AVX2__)
/* qops_lnf_lanes on lanes 0-3 of the fold (h = 8 and 4 done): h = 2, then 1 */
static inline __attribute__((always_inline)) double qops_lnf_fold_s4(__m256d s4) {
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

/* qops_lnf_lanes in registers, the 16 lanes as four vectors of 4 (lane l in vector l / 4):
 * h = 8 adds vectors k and k + 2, h = 4 the two results */
static inline __attribute__((always_inline)) double qops_lnf_fold4(const __m256d *a) {
    return qops_lnf_fold_s4(_mm256_add_pd(_mm256_add_pd(a[0], a[2]), _mm256_add_pd(a[1], a[3])));
}
#endif

/* sum of x (centre unused) or, with `sq`, of (x - centre)^2, in the lane order above; `sq` is
 * a constant at each call (always inlined). The AVX2 body holds the 16 lanes in four vectors
 * of 4 doubles (lane l in vector l / 4, element l % 4): the same additions, lane for lane. */
static inline __attribute__((always_inline)) double qops_lnf_sum(const float *x, ptrdiff_t n,
                                                                 double centre, int sq) {
    double acc[16];
    ptrdiff_t n16 = n - n % 16, j = 0;
    for (int l = 0; l < 16; l++)
        acc[l] = 0.0;
    if (n16 > 0) {
#if defined(__AVX2__)
        const __m256d c = _mm256_set1_pd(centre);
        __m256d a[4];
        for (int k = 0; k < 4; k++) {
            __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * k));
            if (sq) {
                v = _mm256_sub_pd(v, c);
                v = _mm256_mul_pd(v, v);
            }
            a[k] = v;
        }
        for (j = 16; j < n16; j += 16)
            for (int k = 0; k < 4; k++) {
                __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + j + 4 * k));
                if (sq) {
                    v = _mm256_sub_pd(v, c);
                    v = _mm256_mul_pd(v, v);
                }
                a[k] = _mm256_add_pd(a[k], v);
            }
        if (n16 == n)       /* the lanes through memory cost a store-forward stall a pass */
            return qops_lnf_fold4(a);
        for (int k = 0; k < 4; k++)
            _mm256_storeu_pd(acc + 4 * k, a[k]);
#else
        for (int l = 0; l < 16; l++) {
            const double d = sq ? (double)x[l] - centre : (double)x[l];
            acc[l] = sq ? d * d : d;
        }
        for (j = 16; j < n16; j += 16)
            for (int l = 0; l < 16; l++) {
                const double d = sq ? (double)x[j + l] - centre : (double)x[j + l];
                acc[l] = acc[l] + (sq ? d * d : d);
            }
#endif
    }
    for (j = n16; j < n; j++) {
        const double d = sq ? (double)x[j] - centre : (double)x[j];
        acc[j - n16] = acc[j - n16] + (sq ? d * d : d);
    }
    return qops_lnf_lanes(acc);
}

/* One row: mean and variance in float64 (two passes), r = 1 / sqrt(var + eps), then
 * y = f32(((x - mean) * r) * w + b) in float64 (w, b may be NULL: skipped). */
static inline void qops_lnf_row(const float *x, float *y, ptrdiff_t n, const float *w,
                                const float *b, double eps) {
    const double mean = qops_lnf_sum(x, n, 0.0, 0) / (double)n;
    const double var = qops_lnf_sum(x, n, mean, 1) / (double)n;
    const double r = 1.0 / sqrt(var + eps);
    if (w && b) {
        for (ptrdiff_t j = 0; j < n; j++)
            y[j] = (float)((((double)x[j] - mean) * r) * (double)w[j] + (double)b[j]);
    } else if (w) {
        for (ptrdiff_t j = 0; j < n; j++)
            y[j] = (float)((((double)x[j] - mean) * r) * (double)w[j]);
    } else if (b) {
        for (ptrdiff_t j = 0; j < n; j++)
            y[j] = (float)((((double)x[j] - mean) * r) + (double)b[j]);
    } else {
        for (ptrdiff_t j = 0; j < n; j++)
            y[j] = (float)(((double)x[j] - mean) * r);
    }
}

/* -- the float layer norm with the row kept in float64 (layer_norm_f32.f64rows) -------------
 * The same additions and formula as qops_lnf_row, but each row is converted to float64 once
 * (into a scratch row, xd) and the weight and bias come as float64 arrays
 * (wd = 1.0 and bd = -0.0 where absent: x * 1.0 and x + -0.0 give x exactly, signed zeros
 * included), so the three passes convert each value once instead of three times and the
 * output pass converts only its result: on AVX-512 the conversions, not the arithmetic, had
 * filled the shuffle port. The 16 lanes are QOPS_LNF_NV vectors of QOPS_LNF_W doubles
 * (2 zmm on AVX-512, 4 ymm on AVX2), lane l in vector l / W. */
#if defined(__AVX2__)
#define QOPS_LNF_F64 1
#if defined(__AVX512F__)
#define QOPS_LNF_W 8
typedef __m512d qops_lnf_vd;
#define qops_lnf_zero() _mm512_setzero_pd()
#define qops_lnf_cvt(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define qops_lnf_ld(p) _mm512_loadu_pd(p)
#define qops_lnf_st(p, v) _mm512_storeu_pd((p), (v))
#define qops_lnf_stf(p, v) _mm256_storeu_ps((p), _mm512_cvtpd_ps(v))
#else
#define QOPS_LNF_W 4
typedef __m256d qops_lnf_vd;
#define qops_lnf_zero() _mm256_setzero_pd()
#define qops_lnf_cvt(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define qops_lnf_ld(p) _mm256_loadu_pd(p)
#define qops_lnf_st(p, v) _mm256_storeu_pd((p), (v))
#define qops_lnf_stf(p, v) _mm_storeu_ps((p), _mm256_cvtpd_ps(v))
#endif
#define QOPS_LNF_NV (16 / QOPS_LNF_W)
/* rows at once: their 16-lane sums take R * NV registers (8 of 32 zmm, 8 of 16 ymm) */
#define QOPS_LNF_R (QOPS_LNF_W == 8 ? 4 : 2)

/* qops_lnf_lanes on the lanes held in registers: h = 8, 4, 2, 1 */
static inline __attribute__((always_inline)) double qops_lnf_fold(const qops_lnf_vd *a) {
#if QOPS_LNF_W == 8
    const __m512d s8 = _mm512_add_pd(a[0], a[1]);
    return qops_lnf_fold_s4(_mm256_add_pd(_mm512_castpd512_pd256(s8),
                                          _mm512_extractf64x4_pd(s8, 1)));
#else
    return qops_lnf_fold4(a);
#endif
}

/* the same with a last partial block (nt < 16 values at t) added lane by lane in memory */
static inline double qops_lnf_fold_tail(const qops_lnf_vd *a, const double *t, ptrdiff_t nt,
                                        double centre, int sq) {
    double acc[16];
    for (int k = 0; k < QOPS_LNF_NV; k++)
        memcpy(acc + QOPS_LNF_W * k, &a[k], sizeof a[k]);
    for (ptrdiff_t l = 0; l < nt; l++) {
        const double d = sq ? t[l] - centre : t[l];
        acc[l] = acc[l] + (sq ? d * d : d);
    }
    return qops_lnf_lanes(acc);
}

/* One vector of a pass's values at offset o: sq == 0, x converted (and stored to xd);
 * sq == 1, (xd - c)^2 */
static inline __attribute__((always_inline)) qops_lnf_vd
qops_lnf_val(const int sq, const float *x, double *xd, ptrdiff_t o, double c) {
    if (sq) {
        const qops_lnf_vd d = qops_lnf_ld(xd + o) - c;
        return d * d;
    }
    const qops_lnf_vd v = qops_lnf_cvt(x + o);
    qops_lnf_st(xd + o, v);
    return v;
}

/* out[i] = the sum of the values of row i (rows n apart) in qops_lnf_sum's order (the first
 * 16 values start the lanes): sq == 0, of x, stored to xd as float64 on the way; sq == 1,
 * of (xd - c[i])^2. R rows (1 or QOPS_LNF_R, a constant at each call) at once, their
 * additions interleaved, each row's own in its order: one row's chains are as long as the
 * row (an addition's latency each 16 values), and a short row's are mostly its lanes' fold
 * and the divisions after it; R rows' overlap. */
static inline __attribute__((always_inline)) void
qops_lnf_sums(const int R, const int sq, const float *x, double *xd, ptrdiff_t n,
              const double *c, double *out) {
    const ptrdiff_t n16 = n - n % 16;
    qops_lnf_vd a[QOPS_LNF_R][QOPS_LNF_NV];
    for (int i = 0; i < R; i++)
        for (int k = 0; k < QOPS_LNF_NV; k++)
            a[i][k] = n16 > 0 ? qops_lnf_val(sq, x, xd, i * n + QOPS_LNF_W * k, c[i])
                              : qops_lnf_zero();
    for (ptrdiff_t j = 16; j < n16; j += 16)
        for (int i = 0; i < R; i++)
            for (int k = 0; k < QOPS_LNF_NV; k++)
                a[i][k] = a[i][k] + qops_lnf_val(sq, x, xd, i * n + j + QOPS_LNF_W * k, c[i]);
    for (int i = 0; i < R; i++) {
        if (n16 == n) {
            out[i] = qops_lnf_fold(a[i]);
            continue;
        }
        if (!sq)
            for (ptrdiff_t j = n16; j < n; j++)
                xd[i * n + j] = (double)x[i * n + j];
        out[i] = qops_lnf_fold_tail(a[i], xd + i * n + n16, n - n16, c[i], sq);
    }
}

/* R rows of y (n apart) from their float64 copies in xd: y = f32(((x - mean) * r) * w + b) */
static inline __attribute__((always_inline)) void
qops_lnf_out(const int R, const float *x, float *y, ptrdiff_t n, const double *wd,
             const double *bd, double eps, double *xd) {
    double mean[QOPS_LNF_R], var[QOPS_LNF_R];
    const double zero[QOPS_LNF_R] = {0.0};
    qops_lnf_sums(R, 0, x, xd, n, zero, mean);
    for (int i = 0; i < R; i++)
        mean[i] = mean[i] / (double)n;
    qops_lnf_sums(R, 1, x, xd, n, mean, var);
    for (int i = 0; i < R; i++) {
        const double rs = 1.0 / sqrt(var[i] / (double)n + eps);
        const double *xr = xd + i * n;
        float *yr = y + i * n;
        ptrdiff_t j = 0;
        for (; j + QOPS_LNF_W <= n; j += QOPS_LNF_W) {
            const qops_lnf_vd v = ((qops_lnf_ld(xr + j) - mean[i]) * rs) * qops_lnf_ld(wd + j)
                                  + qops_lnf_ld(bd + j);
            qops_lnf_stf(yr + j, v);
        }
        for (; j < n; j++)
            yr[j] = (float)((((xr[j] - mean[i]) * rs) * wd[j]) + bd[j]);
    }
}

/* rows [r0, r1) of x (n values each), QOPS_LNF_R at a time: qops_lnf_row's result, bit for
 * bit; xd: QOPS_LNF_R n doubles of scratch */
static void qops_lnf_rows_f64(const float *x, float *y, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t n,
                              const double *wd, const double *bd, double eps, double *xd) {
    ptrdiff_t r = r0;
    for (; r + QOPS_LNF_R <= r1; r += QOPS_LNF_R)
        qops_lnf_out(QOPS_LNF_R, x + r * n, y + r * n, n, wd, bd, eps, xd);
    for (; r < r1; r++)
        qops_lnf_out(1, x + r * n, y + r * n, n, wd, bd, eps, xd);
}

/* Rows [r0, r1) with the weight, bias and scratch rows in one block this thread allocates:
 * from its own malloc arena, so the block, and its cache lines, stay with this thread's core
 * from call to call (a block the calling thread filled for both had the other core fetch
 * it on every call). Without memory, qops_lnf_row's rows. */
static void qops_lnf_rows_own(const float *x, float *y, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t n,
                              const float *w, const float *b, double eps) {
    const ptrdiff_t ld = (n + 7) / 8 * 8;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, (size_t)((2 + QOPS_LNF_R) * ld) * sizeof(double)) != 0) {
        for (ptrdiff_t r = r0; r < r1; r++)
            qops_lnf_row(x + r * n, y + r * n, n, w, b, eps);
        return;
    }
    double *wd = (double *)mem, *bd = wd + ld;
    /* an absent weight or bias as its exact identity: * 1.0, + -0.0 */
    for (ptrdiff_t j = 0; j < n; j++) {
        wd[j] = w ? (double)w[j] : 1.0;
        bd[j] = b ? (double)b[j] : -0.0;
    }
    qops_lnf_rows_f64(x, y, r0, r1, n, wd, bd, eps, bd + ld);
    free(mem);
}
#else
#define QOPS_LNF_F64 0
#define QOPS_LNF_R 1
static void qops_lnf_rows_own(const float *x, float *y, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t n,
                              const float *w, const float *b, double eps) {
    for (ptrdiff_t r = r0; r < r1; r++)
        qops_lnf_row(x + r * n, y + r * n, n, w, b, eps);
}
#endif

#endif  /* QOPS_NORM_H */
