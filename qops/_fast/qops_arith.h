/* Quantized add and mul of two 8-bit arrays (SEMANTICS.md, add and mul):
 * add = Q_vec(D_vec(a) + D_vec(b)), mul = R_int((a - za) * (b - zb), m).
 *
 * The AVX-512 bodies do per element exactly the scalar steps (add: widen, fma(s, q, s*-zp)
 * for each input, add, relu: max with 0, multiply by 1/out_scale; mul: the exact int32
 * product times m), then round and clamp. They clamp above before rounding (equal, since rint
 * is monotonic and the bounds are integers) so that one convert with round-to-nearest-even
 * rounds, and clamp below after it: in int32 on 16-element tails, by the saturating packs of
 * qops_narrow64 on 64-element steps. Other ISAs run the scalar loops, which GCC vectorizes as
 * it can.
 */
#ifndef QOPS_ARITH_H
#define QOPS_ARITH_H
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include "qops_common.h"
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define QOPS_ARITH_AVX512 1
#endif

typedef struct {
    float sa, sa_negzp, sb, sb_negzp;   /* D_vec of each input */
    float inv, lo, hi;                  /* 1 / out_scale; qmin - zo, qmax - zo */
    int32_t zo;
    int relu;
} qops_add_params;

#define QOPS_ADD_SCALAR(T)                                                                  \
    for (; i < n; i++) {                                                                    \
        float y = qops_d_vec(((const T *)a)[i], p->sa, p->sa_negzp)                         \
                  + qops_d_vec(((const T *)b)[i], p->sb, p->sb_negzp);                      \
        if (p->relu) y = y > 0.0f ? y : 0.0f;                                               \
        ((T *)out)[i] = (T)qops_q_vec(y, p->inv, p->zo, p->lo, p->hi);                       \
    }

#ifdef QOPS_ARITH_AVX512
/* The parameters as vectors, in registers: byte stores may alias a struct in memory, so GCC
 * would reload it after every store. */
typedef struct { __m512 sa, sa_negzp, sb, sb_negzp, inv, hi; __m512i lo, zo; int relu, clamp_hi; } qops_add_vec;

/* 16 sums scaled and clamped above only, as int32 (before the zero point); the lower clamp
 * is the caller's. The upper clamp stays in float: a product beyond int32 would convert to
 * INT32_MIN. */
static inline __m512i qops_add16_i32(__m512i ia, __m512i ib, const qops_add_vec v) {
    __m512 fa = _mm512_fmadd_ps(v.sa, _mm512_cvtepi32_ps(ia), v.sa_negzp);
    __m512 fb = _mm512_fmadd_ps(v.sb, _mm512_cvtepi32_ps(ib), v.sb_negzp);
    __m512 y = _mm512_add_ps(fa, fb);
    if (v.relu) y = _mm512_max_ps(y, _mm512_setzero_ps());
    __m512 t = _mm512_mul_ps(y, v.inv);
    if (v.clamp_hi) t = _mm512_min_ps(t, v.hi);
    return _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* 16 results from 16 widened inputs of each side (the tails of qops_add_run). */
static inline __m128i qops_add16(__m512i ia, __m512i ib, qops_add_vec v) {
    v.clamp_hi = 1;                     /* the truncating down-convert needs both clamps */
    __m512i r = _mm512_max_epi32(qops_add16_i32(ia, ib, v), v.lo);
    return _mm512_cvtepi32_epi8(_mm512_add_epi32(r, v.zo));
}

/* 64 bytes in order from four vectors of 16 int32 results (before the zero point): saturating
 * packs (int32 -> int16, the zero point added with 16-bit saturation, int16 -> 8-bit) clamp
 * to the dtype's range as the scalar path's clamp does (rint is monotonic and the bounds are
 * integers); the packs interleave 128-bit lanes, one dword permute restores the order. Per 64
 * outputs this is 8 instructions fewer than four 2-uop down-converts and lower clamps. */
static inline __m512i qops_narrow64(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                                    __m512i zo16, int is_signed) {
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i w0 = _mm512_adds_epi16(_mm512_packs_epi32(r0, r1), zo16);
    __m512i w1 = _mm512_adds_epi16(_mm512_packs_epi32(r2, r3), zo16);
    return _mm512_permutexvar_epi32(perm, is_signed ? _mm512_packs_epi16(w0, w1)
                                                    : _mm512_packus_epi16(w0, w1));
}

#define QOPS_ADD64(WIDEN, SIGNED)                                                           \
    for (; i + 64 <= n; i += 64) {                                                          \
        __m512i r[4];                                                                       \
        for (int k = 0; k < 4; k++)                                                         \
            r[k] = qops_add16_i32(WIDEN(_mm_loadu_si128((const __m128i *)(pa + i + 16 * k))), \
                                  WIDEN(_mm_loadu_si128((const __m128i *)(pb + i + 16 * k))), v); \
        _mm512_storeu_si512((void *)(po + i), qops_narrow64(r[0], r[1], r[2], r[3], zo16, SIGNED)); \
    }

#define QOPS_ADD_VECTOR(WIDEN)                                                              \
    for (; i + 16 <= n; i += 16) {                                                          \
        __m128i ra = _mm_loadu_si128((const __m128i *)(pa + i));                            \
        __m128i rb = _mm_loadu_si128((const __m128i *)(pb + i));                            \
        _mm_storeu_si128((__m128i *)(po + i), qops_add16(WIDEN(ra), WIDEN(rb), v));          \
    }                                                                                       \
    if (i < n) {                                                                            \
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                     \
        __m128i ra = _mm_maskz_loadu_epi8(m, pa + i), rb = _mm_maskz_loadu_epi8(m, pb + i); \
        _mm_mask_storeu_epi8(po + i, m, qops_add16(WIDEN(ra), WIDEN(rb), v));               \
    }
#endif

/* Whether the 64-wide add needs its upper clamp in float: only when a result could leave
 * int32 (which converts to INT32_MIN). |y * inv| is bounded over every input pair; below 2**30
 * the packs' saturation is the whole clamp and the loop drops one instruction in twelve. */
static inline int qops_add_needs_hi(const qops_add_params *p, int is_signed) {
    const double qlo = is_signed ? -128.0 : 0.0, qhi = is_signed ? 127.0 : 255.0;
    double fa = fmax(fabs((double)p->sa * qlo + p->sa_negzp), fabs((double)p->sa * qhi + p->sa_negzp));
    double fb = fmax(fabs((double)p->sb * qlo + p->sb_negzp), fabs((double)p->sb * qhi + p->sb_negzp));
    return !((fa + fb) * 1.001 * fabs((double)p->inv) + 1.0 < 1073741824.0);
}

/* out[0:n] from a[0:n], b[0:n]; is_signed: int8 data, else uint8. */
static void qops_add_run(const void *a, const void *b, void *out, ptrdiff_t n, int is_signed,
                         const qops_add_params *p) {
    ptrdiff_t i = 0;
#ifdef QOPS_ARITH_AVX512
    const uint8_t *pa = (const uint8_t *)a, *pb = (const uint8_t *)b;
    uint8_t *po = (uint8_t *)out;
    const qops_add_vec v = {_mm512_set1_ps(p->sa), _mm512_set1_ps(p->sa_negzp),
                            _mm512_set1_ps(p->sb), _mm512_set1_ps(p->sb_negzp),
                            _mm512_set1_ps(p->inv), _mm512_set1_ps(p->hi),
                            _mm512_set1_epi32((int32_t)p->lo), _mm512_set1_epi32(p->zo), p->relu,
                            qops_add_needs_hi(p, is_signed)};
    const __m512i zo16 = _mm512_set1_epi16((short)p->zo);
    if (is_signed) {
        QOPS_ADD64(_mm512_cvtepi8_epi32, 1)
        QOPS_ADD_VECTOR(_mm512_cvtepi8_epi32)
    } else {
        QOPS_ADD64(_mm512_cvtepu8_epi32, 0)
        QOPS_ADD_VECTOR(_mm512_cvtepu8_epi32)
    }
    return;
#endif
    if (is_signed) {
        QOPS_ADD_SCALAR(int8_t)
    } else {
        QOPS_ADD_SCALAR(uint8_t)
    }
}
/* Quantized mul of two 8-bit arrays: out = R_int((a - za) * (b - zb), m) (SEMANTICS.md, mul):
 * the exact int32 product, one float32 multiply, round to nearest even, clamp to [lo, hi],
 * plus zo. lo > qmin - zo only for mul_relu (relu folded into the clamp). */
typedef struct {
    int32_t za, zb, zo;
    float m, lo, hi;
    int clamp_lo;                       /* lo is above what the 8-bit packs clamp to */
} qops_mul_params;

#define QOPS_MUL_SCALAR(T)                                                                  \
    for (; i < n; i++) {                                                                    \
        int32_t acc = ((int32_t)((const T *)a)[i] - p->za) * ((int32_t)((const T *)b)[i] - p->zb); \
        ((T *)out)[i] = (T)((int32_t)qops_clampf(qops_rintf((float)acc * p->m), p->lo, p->hi) \
                            + p->zo);                                                       \
    }

#ifdef QOPS_ARITH_AVX512
/* 16 products scaled and clamped (above, and below for relu), as int32 before the zero
 * point; the packs of QOPS_MUL64 clamp below to the dtype's range. */
static inline __m512i qops_mul16_i32(__m512i ia, __m512i ib, __m512i za, __m512i zb, __m512 m,
                                     __m512 lo, __m512 hi, int clamp_lo) {
    __m512i acc = _mm512_mullo_epi32(_mm512_sub_epi32(ia, za), _mm512_sub_epi32(ib, zb));
    __m512 t = _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), m), hi);
    if (clamp_lo) t = _mm512_max_ps(t, lo);
    return _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

#define QOPS_MUL64(WIDEN, SIGNED)                                                           \
    for (; i + 64 <= n; i += 64) {                                                          \
        __m512i r[4];                                                                       \
        for (int k = 0; k < 4; k++)                                                         \
            r[k] = qops_mul16_i32(WIDEN(_mm_loadu_si128((const __m128i *)(pa + i + 16 * k))), \
                                  WIDEN(_mm_loadu_si128((const __m128i *)(pb + i + 16 * k))), \
                                  za, zb, m, lo, hi, p->clamp_lo);                          \
        _mm512_storeu_si512((void *)(po + i), qops_narrow64(r[0], r[1], r[2], r[3], zo16, SIGNED)); \
    }
#endif

/* out[0:n] from a[0:n], b[0:n]; is_signed: int8 data, else uint8. The 64-wide body (as
 * qops_add_run's) covers all but the last n % 64 elements, which the scalar loop does. */
static void qops_mul_run(const void *a, const void *b, void *out, ptrdiff_t n, int is_signed,
                         const qops_mul_params *p) {
    ptrdiff_t i = 0;
#ifdef QOPS_ARITH_AVX512
    const uint8_t *pa = (const uint8_t *)a, *pb = (const uint8_t *)b;
    uint8_t *po = (uint8_t *)out;
    const __m512i za = _mm512_set1_epi32(p->za), zb = _mm512_set1_epi32(p->zb);
    const __m512i zo16 = _mm512_set1_epi16((short)p->zo);
    const __m512 m = _mm512_set1_ps(p->m), lo = _mm512_set1_ps(p->lo), hi = _mm512_set1_ps(p->hi);
    if (is_signed) {
        QOPS_MUL64(_mm512_cvtepi8_epi32, 1)
    } else {
        QOPS_MUL64(_mm512_cvtepu8_epi32, 0)
    }
#endif
    if (is_signed) {
        QOPS_MUL_SCALAR(int8_t)
    } else {
        QOPS_MUL_SCALAR(uint8_t)
    }
}
#endif
