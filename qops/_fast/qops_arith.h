/* Quantized add and mul of two 8-bit arrays (docs/semantics.md §7, add and mul):
 * add = Q_vec(D_vec(a) + D_vec(b)), mul = R_int((a - za) * (b - zb), m).
 *
 * The AVX-512 bodies do per element exactly the scalar steps (add: widen, fma(s, q, s*-zp)
 * for each input, add, relu: max with 0, multiply by 1/out_scale; mul: the exact int32
 * product times m), then round and clamp. They clamp above before rounding (equal, since rint
 * is monotonic and the bounds are integers) so that one convert with round-to-nearest-even
 * rounds, and clamp below after it: in int32 on 16-element tails, by the saturating packs of
 * qops_narrow64 on 64-element steps. AVX2 (and the avx512 build for add_scalar's map) runs
 * 8-wide versions of the same steps, below; other ISAs the scalar loops, which GCC vectorizes
 * as it can.
 */
#ifndef QOPS_ARITH_H
#define QOPS_ARITH_H
#include <stddef.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include "qops_common.h"
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define QOPS_ARITH_AVX512 1
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include "qops_avx2.h"
#define QOPS_ARITH_AVX2 1
#endif
/* The tier of add and mul, named in arith.pyx's routes: 2 AVX-512, 1 AVX2, 0 C. */
#if defined(QOPS_ARITH_AVX512)
#define QOPS_ARITH_TIER 2
#elif defined(QOPS_ARITH_AVX2)
#define QOPS_ARITH_TIER 1
#else
#define QOPS_ARITH_TIER 0
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

#ifdef QOPS_ARITH_AVX2
/* The 8-wide twins of the AVX-512 bodies, for AVX2 machines (and what the avx512 build runs
 * where it has no 512-bit body), on blocks of 32 elements in qops_avx2.h's lane order (one
 * 32-byte load, in-lane shuffles to int32, qops_narrow32 back to bytes). The bodies are always
 * inlined with constant flags: one loop per combination, no tests inside it. */
#define QOPS_AINLINE static inline __attribute__((always_inline))

/* Whole 32-element blocks, then the last n % 32 elements through the same block on
 * zero-padded copies, so every element takes one formula. BLOCK(a, b, o) runs one block (b is
 * ignored by one-input maps, which pass a again). */
#define QOPS_EACH_BLOCK32(pa, pb, po, n, BLOCK)                                            \
    do {                                                                                  \
        ptrdiff_t i_ = 0;                                                                 \
        for (; i_ + 32 <= (n); i_ += 32) BLOCK((pa) + i_, (pb) + i_, (po) + i_);            \
        if (i_ < (n)) {                                                                   \
            uint8_t ta_[32] = {0}, tb_[32] = {0}, to_[32];                                \
            __builtin_memcpy(ta_, (pa) + i_, (size_t)((n) - i_));                         \
            __builtin_memcpy(tb_, (pb) + i_, (size_t)((n) - i_));                         \
            BLOCK(ta_, tb_, to_);                                                         \
            __builtin_memcpy((po) + i_, to_, (size_t)((n) - i_));                         \
        }                                                                                 \
    } while (0)

/* relu of add: none, max(y, 0) in float (as the scalar code), or max(out, zo) on the bytes,
 * equal when the sum is never NaN and inv >= 0 (y <= 0 then gives rint(y * inv) <= 0). */
enum { QOPS_RELU_NONE = 0, QOPS_RELU_FLOAT = 1, QOPS_RELU_BYTES = 2 };

typedef struct { __m256 sa, sa_negzp, sb, sb_negzp, inv, hi; __m256i zo16, zo8; } qops_add_vec8;

/* Whether the packs of qops_narrow32 clamp as the scalar code does: with the zero point in
 * the dtype's range the 16-bit saturating add never hides an out-of-range value and the
 * scalar result never wraps in its 8-bit store (mul_relu's lo = 0 <= hi). */
static inline int qops_arith_zo_ok(int32_t zo, int is_signed) {
    return is_signed ? zo >= -128 && zo <= 127 : zo >= 0 && zo <= 255;
}

/* Vector k (0..3) of a 32-byte block as int32: bytes 4k..4k+3 of each lane, zero-extended,
 * or (int8) moved to the top byte and shifted back arithmetically. */
QOPS_AINLINE __m256i qops_widen8(__m256i x, int k, int is_signed) {
    const char z = (char)0x80;
    const char b0 = (char)(4 * k), b1 = (char)(4 * k + 1), b2 = (char)(4 * k + 2), b3 = (char)(4 * k + 3);
    if (is_signed)
        return _mm256_srai_epi32(_mm256_shuffle_epi8(x, _mm256_setr_epi8(
            z, z, z, b0, z, z, z, b1, z, z, z, b2, z, z, z, b3,
            z, z, z, b0, z, z, z, b1, z, z, z, b2, z, z, z, b3)), 24);
    return _mm256_shuffle_epi8(x, _mm256_setr_epi8(
        b0, z, z, z, b1, z, z, z, b2, z, z, z, b3, z, z, z,
        b0, z, z, z, b1, z, z, z, b2, z, z, z, b3, z, z, z));
}

/* 8 sums scaled and clamped above only (when a result could leave int32), as int32 before
 * the zero point, as qops_add16_i32. min_ps and max_ps return their second operand for NaN:
 * NaN sums give hi (relu: 0), as the scalar clamp and relu do. */
QOPS_AINLINE __m256i qops_add8_i32(__m256i ia, __m256i ib, const qops_add_vec8 *v, int relu,
                                   int clamp_hi) {
    __m256 fa = _mm256_fmadd_ps(v->sa, _mm256_cvtepi32_ps(ia), v->sa_negzp);
    __m256 fb = _mm256_fmadd_ps(v->sb, _mm256_cvtepi32_ps(ib), v->sb_negzp);
    __m256 y = _mm256_add_ps(fa, fb);
    if (relu == QOPS_RELU_FLOAT) y = _mm256_max_ps(y, _mm256_setzero_ps());
    __m256 t = _mm256_mul_ps(y, v->inv);
    if (clamp_hi) t = _mm256_min_ps(t, v->hi);
    return _mm256_cvtps_epi32(t);       /* round half to even (default MXCSR) */
}

QOPS_AINLINE void qops_add32(const uint8_t *a, const uint8_t *b, uint8_t *o, const qops_add_vec8 *v,
                             int is_signed, int relu, int clamp_hi) {
    __m256i xa = _mm256_loadu_si256((const __m256i *)a), xb = _mm256_loadu_si256((const __m256i *)b);
    __m256i r[4];
    for (int k = 0; k < 4; k++)
        r[k] = qops_add8_i32(qops_widen8(xa, k, is_signed), qops_widen8(xb, k, is_signed), v,
                             relu, clamp_hi);
    _mm256_storeu_si256((__m256i *)o, qops_narrow32(r[0], r[1], r[2], r[3], v->zo16, v->zo8,
                                                    is_signed, relu == QOPS_RELU_BYTES));
}

QOPS_AINLINE void qops_add_avx2_body(const uint8_t *pa, const uint8_t *pb, uint8_t *po, ptrdiff_t n,
                                     const qops_add_vec8 *v, int is_signed, int relu, int clamp_hi) {
#define QOPS_ADD_BLOCK(a, b, o) qops_add32(a, b, o, v, is_signed, relu, clamp_hi)
    QOPS_EACH_BLOCK32(pa, pb, po, n, QOPS_ADD_BLOCK);
#undef QOPS_ADD_BLOCK
}

/* The AVX2 add; returns 0 (nothing done) when the parameters need the scalar loop (also relu
 * with a negative inv, never a valid one, unless the float clamp runs). clamp_hi:
 * qops_add_needs_hi, true whenever a sum could be NaN or a result leave int32. */
static int qops_add_avx2(const uint8_t *pa, const uint8_t *pb, uint8_t *po, ptrdiff_t n,
                         int is_signed, const qops_add_params *p, int clamp_hi) {
    if (!qops_arith_zo_ok(p->zo, is_signed)) return 0;
    const qops_add_vec8 v = {_mm256_set1_ps(p->sa), _mm256_set1_ps(p->sa_negzp),
                             _mm256_set1_ps(p->sb), _mm256_set1_ps(p->sb_negzp),
                             _mm256_set1_ps(p->inv), _mm256_set1_ps(p->hi),
                             _mm256_set1_epi16((short)p->zo), _mm256_set1_epi8((char)p->zo)};
    int relu = !p->relu ? QOPS_RELU_NONE
               : (!clamp_hi && p->inv >= 0.0f) ? QOPS_RELU_BYTES : QOPS_RELU_FLOAT;
#define QOPS_ADD_CASE(S, R, C) \
    if (is_signed == S && relu == R && clamp_hi == C) { qops_add_avx2_body(pa, pb, po, n, &v, S, R, C); return 1; }
    clamp_hi = clamp_hi != 0;
    is_signed = is_signed != 0;
    QOPS_ADD_CASE(0, QOPS_RELU_NONE, 0) QOPS_ADD_CASE(0, QOPS_RELU_BYTES, 0)
    QOPS_ADD_CASE(0, QOPS_RELU_NONE, 1) QOPS_ADD_CASE(0, QOPS_RELU_FLOAT, 1)
    QOPS_ADD_CASE(1, QOPS_RELU_NONE, 0) QOPS_ADD_CASE(1, QOPS_RELU_BYTES, 0)
    QOPS_ADD_CASE(1, QOPS_RELU_NONE, 1) QOPS_ADD_CASE(1, QOPS_RELU_FLOAT, 1)
#undef QOPS_ADD_CASE
    return 0;
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
#elif defined(QOPS_ARITH_AVX2)
    if (qops_add_avx2((const uint8_t *)a, (const uint8_t *)b, (uint8_t *)out, n, is_signed, p,
                      qops_add_needs_hi(p, is_signed)))
        return;
#endif
    if (is_signed) {
        QOPS_ADD_SCALAR(int8_t)
    } else {
        QOPS_ADD_SCALAR(uint8_t)
    }
}
/* Quantized mul of two 8-bit arrays: out = R_int((a - za) * (b - zb), m)
 * (docs/semantics.md §7, mul): the exact int32 product, one float32 multiply, round to
 * nearest even, clamp to [lo, hi], plus zo. lo > qmin - zo only for mul_relu (relu folded
 * into the clamp). */
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

#ifdef QOPS_ARITH_AVX2
/* The AVX2 mul forms the exact int32 products from 16-bit halves (mullo/mulhi_epi16 of the
 * widened differences, interleaved), which lands them in qops_widen8's order in fewer uops
 * than widening each side to int32 and vpmulld. */
typedef struct { __m256i za16, zb16, zo16, zo8; __m256 m, hi; } qops_mul_vec8;

/* Whether a scaled product could leave int32 or be NaN (then clamp above in float). */
static inline int qops_mul_needs_hi(const qops_mul_params *p, int is_signed) {
    const double qlo = is_signed ? -128.0 : 0.0, qhi = is_signed ? 127.0 : 255.0;
    double da = fmax(fabs(qlo - p->za), fabs(qhi - p->za)), db = fmax(fabs(qlo - p->zb), fabs(qhi - p->zb));
    return !(da * db * fabs((double)p->m) * 1.001 + 1.0 < 1073741824.0);
}

/* The two 16-element halves of a block as int16 differences q - zp. */
QOPS_AINLINE void qops_diff16(__m256i x, __m256i z16, int is_signed, __m256i *lo, __m256i *hi) {
    __m256i ext = is_signed ? _mm256_cmpgt_epi8(_mm256_setzero_si256(), x) : _mm256_setzero_si256();
    *lo = _mm256_sub_epi16(_mm256_unpacklo_epi8(x, ext), z16);
    *hi = _mm256_sub_epi16(_mm256_unpackhi_epi8(x, ext), z16);
}

QOPS_AINLINE __m256i qops_mul8_i32(__m256i acc, const qops_mul_vec8 *v, int clamp_hi) {
    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), v->m);
    if (clamp_hi) t = _mm256_min_ps(t, v->hi);
    return _mm256_cvtps_epi32(t);
}

/* mul_relu's clamp at lo = 0 is the byte max with zo (as for add); NaN and -inf still give
 * hi and qmin before it, as the scalar clamps. */
QOPS_AINLINE void qops_mul32(const uint8_t *a, const uint8_t *b, uint8_t *o, const qops_mul_vec8 *v,
                             int is_signed, int relu, int clamp_hi) {
    __m256i a0, a1, b0, b1;
    qops_diff16(_mm256_loadu_si256((const __m256i *)a), v->za16, is_signed, &a0, &a1);
    qops_diff16(_mm256_loadu_si256((const __m256i *)b), v->zb16, is_signed, &b0, &b1);
    __m256i l0 = _mm256_mullo_epi16(a0, b0), h0 = _mm256_mulhi_epi16(a0, b0);
    __m256i l1 = _mm256_mullo_epi16(a1, b1), h1 = _mm256_mulhi_epi16(a1, b1);
    __m256i r0 = qops_mul8_i32(_mm256_unpacklo_epi16(l0, h0), v, clamp_hi);
    __m256i r1 = qops_mul8_i32(_mm256_unpackhi_epi16(l0, h0), v, clamp_hi);
    __m256i r2 = qops_mul8_i32(_mm256_unpacklo_epi16(l1, h1), v, clamp_hi);
    __m256i r3 = qops_mul8_i32(_mm256_unpackhi_epi16(l1, h1), v, clamp_hi);
    _mm256_storeu_si256((__m256i *)o, qops_narrow32(r0, r1, r2, r3, v->zo16, v->zo8, is_signed, relu));
}

QOPS_AINLINE void qops_mul_avx2_body(const uint8_t *pa, const uint8_t *pb, uint8_t *po, ptrdiff_t n,
                                     const qops_mul_vec8 *v, int is_signed, int relu, int clamp_hi) {
#define QOPS_MUL_BLOCK(a, b, o) qops_mul32(a, b, o, v, is_signed, relu, clamp_hi)
    QOPS_EACH_BLOCK32(pa, pb, po, n, QOPS_MUL_BLOCK);
#undef QOPS_MUL_BLOCK
}

/* The AVX2 mul, as qops_add_avx2 (returns 0 when the scalar loop must run): the zero points
 * must leave q - zp in int16. */
static int qops_mul_avx2(const uint8_t *pa, const uint8_t *pb, uint8_t *po, ptrdiff_t n,
                         int is_signed, const qops_mul_params *p) {
    if (!qops_arith_zo_ok(p->zo, is_signed) || p->za < -32000 || p->za > 32000
        || p->zb < -32000 || p->zb > 32000)
        return 0;
    const qops_mul_vec8 v = {_mm256_set1_epi16((short)p->za), _mm256_set1_epi16((short)p->zb),
                             _mm256_set1_epi16((short)p->zo), _mm256_set1_epi8((char)p->zo),
                             _mm256_set1_ps(p->m), _mm256_set1_ps(p->hi)};
    int relu = p->clamp_lo != 0, clamp_hi = qops_mul_needs_hi(p, is_signed);
    is_signed = is_signed != 0;
#define QOPS_MUL_CASE(S, R, C) \
    if (is_signed == S && relu == R && clamp_hi == C) { qops_mul_avx2_body(pa, pb, po, n, &v, S, R, C); return 1; }
    QOPS_MUL_CASE(0, 0, 0) QOPS_MUL_CASE(0, 0, 1) QOPS_MUL_CASE(0, 1, 0) QOPS_MUL_CASE(0, 1, 1)
    QOPS_MUL_CASE(1, 0, 0) QOPS_MUL_CASE(1, 0, 1) QOPS_MUL_CASE(1, 1, 0) QOPS_MUL_CASE(1, 1, 1)
#undef QOPS_MUL_CASE
    return 0;
}
#endif

/* out[0:n] from a[0:n], b[0:n]; is_signed: int8 data, else uint8. The 64-wide body (as
 * qops_add_run's) covers all but the last n % 64 elements, which the scalar loop does; the
 * AVX2 body covers all. */
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
#elif defined(QOPS_ARITH_AVX2)
    if (qops_mul_avx2((const uint8_t *)a, (const uint8_t *)b, (uint8_t *)out, n, is_signed, p))
        return;
#endif
    if (is_signed) {
        QOPS_MUL_SCALAR(int8_t)
    } else {
        QOPS_MUL_SCALAR(uint8_t)
    }
}

/* add_scalar's requantization R_int((q - zp) + offset, m) (docs/semantics.md §7, add_scalar)
 * computed per element, where the table of arith.pyx's _requant_int_table would be looked up
 * byte by byte: without AVX512-VBMI a 256-entry lookup has no vector form cheaper than the
 * formula.
 * base = offset - zp; hi = qmax - zo. Only for qops_requant_ok's parameters. */
typedef struct {
    int32_t base, zo;
    float m, hi;
} qops_requant_params;

/* Whether qops_requant_run gives the table's bytes: r + base fits int32 (converted to float as
 * the table's int64 would be) and zo is in the dtype's range (qops_arith_zo_ok). */
static inline int qops_requant_ok(int is_signed, int64_t base, int32_t zo) {
#ifdef QOPS_ARITH_AVX2
    return base > -2147483000LL && base < 2147483000LL && qops_arith_zo_ok(zo, is_signed);
#else
    (void)is_signed; (void)base; (void)zo;
    return 0;
#endif
}

#ifdef QOPS_ARITH_AVX2
typedef struct { __m256i base, zo16, zo8; __m256 m, hi; } qops_requant_vec8;

QOPS_AINLINE void qops_requant32(const uint8_t *src, uint8_t *dst, const qops_requant_vec8 *v,
                                 int is_signed, int clamp_hi) {
    __m256i x = _mm256_loadu_si256((const __m256i *)src), r[4];
    for (int k = 0; k < 4; k++) {
        __m256i acc = _mm256_add_epi32(qops_widen8(x, k, is_signed), v->base);
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), v->m);
        if (clamp_hi) t = _mm256_min_ps(t, v->hi);
        r[k] = _mm256_cvtps_epi32(t);
    }
    _mm256_storeu_si256((__m256i *)dst, qops_narrow32(r[0], r[1], r[2], r[3], v->zo16, v->zo8,
                                                      is_signed, 0));
}

QOPS_AINLINE void qops_requant_body(const uint8_t *src, uint8_t *dst, ptrdiff_t n,
                                    const qops_requant_vec8 *v, int is_signed, int clamp_hi) {
#define QOPS_REQUANT_BLOCK(a, b, o) qops_requant32(a, o, v, is_signed, clamp_hi)
    QOPS_EACH_BLOCK32(src, src, dst, n, QOPS_REQUANT_BLOCK);
#undef QOPS_REQUANT_BLOCK
}
#endif

/* dst[0:n] from src[0:n] (is_signed: int8 data, else uint8). */
static void qops_requant_run(const uint8_t *src, uint8_t *dst, ptrdiff_t n, int is_signed,
                             const qops_requant_params *p) {
#ifdef QOPS_ARITH_AVX2
    const qops_requant_vec8 v = {_mm256_set1_epi32(p->base), _mm256_set1_epi16((short)p->zo),
                                 _mm256_set1_epi8((char)p->zo), _mm256_set1_ps(p->m),
                                 _mm256_set1_ps(p->hi)};
    /* whether a product could leave int32 or be NaN (then clamp above in float) */
    int clamp_hi = !((fabs((double)p->base) + 255.0) * fabs((double)p->m) * 1.001 + 1.0 < 1073741824.0);
    if (is_signed) {
        if (clamp_hi) qops_requant_body(src, dst, n, &v, 1, 1);
        else qops_requant_body(src, dst, n, &v, 1, 0);
    } else {
        if (clamp_hi) qops_requant_body(src, dst, n, &v, 0, 1);
        else qops_requant_body(src, dst, n, &v, 0, 0);
    }
#else
    (void)src; (void)dst; (void)n; (void)is_signed; (void)p;   /* qops_requant_ok is 0 */
#endif
}

/* Cat's requantization of one input, Q_fma(D_sc(q)) then relu (max with zo)
 * (docs/semantics.md §7, cat), by the formula rather than a 256-entry table: on AVX2 without
 * a vector byte permute (VBMI) a table lookup takes 16 shuffles and 15 blends per 32 bytes,
 * the formula about 25 one-uop instructions. qmin/qmax: the dtype's range. */
typedef struct {
    float s, inv, zof, qmin, qmax;
    int32_t zp, zo;
    int relu;
} qops_cat_params;

static inline int32_t qops_cat_one(int32_t q, const qops_cat_params *p) {
    int32_t v = qops_q_fma(qops_d_sc(q, p->s, p->zp), p->inv, p->zof, p->qmin, p->qmax);
    return p->relu && v < p->zo ? p->zo : v;
}

#ifdef QOPS_ARITH_AVX2
/* One block of 32 bytes. Rounding: cvtps_epi32 under the default MXCSR is rint. The packs'
 * saturation is the lower clamp (cvtps gives INT32_MIN below int32, also saturated); the
 * upper one is the min in float, before a large value could convert to INT32_MIN. */
QOPS_AINLINE void qops_cat_requant32(const uint8_t *src, uint8_t *dst, __m256 off, __m256 s,
                                     __m256 inv, __m256 zof, __m256 hi, __m256i zo8, int sgn,
                                     int relu) {
    __m256 f[4];
    __m256i r[4];
    qops_bytes_to_f32x4(_mm256_loadu_si256((const __m256i *)src), sgn, off, f);
    for (int k = 0; k < 4; k++)
        r[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_fmadd_ps(_mm256_mul_ps(s, f[k]), inv, zof), hi));
    __m256i w0 = _mm256_packs_epi32(r[0], r[1]), w1 = _mm256_packs_epi32(r[2], r[3]);
    __m256i b = sgn ? _mm256_packs_epi16(w0, w1) : _mm256_packus_epi16(w0, w1);
    if (relu) b = sgn ? _mm256_max_epi8(b, zo8) : _mm256_max_epu8(b, zo8);
    _mm256_storeu_si256((__m256i *)dst, b);
}

QOPS_AINLINE void qops_cat_requant_body(const uint8_t *src, uint8_t *dst, ptrdiff_t n,
                                        const qops_cat_params *p, int sgn, int relu) {
    const __m256 off = qops_f32_offset(p->zp, sgn), s = _mm256_set1_ps(p->s);
    const __m256 inv = _mm256_set1_ps(p->inv), zof = _mm256_set1_ps(p->zof);
    const __m256 hi = _mm256_set1_ps(p->qmax);
    const __m256i zo8 = _mm256_set1_epi8((char)p->zo);
#define QOPS_CAT_BLOCK(a, b, o) qops_cat_requant32(a, o, off, s, inv, zof, hi, zo8, sgn, relu)
    if (n > 32 && n % 32) {
        /* the tail as the row's last 32 bytes, some of them done twice to the same value: cat
         * writes a new array, so src and dst never overlap. Channels-last rows (232 channels
         * at 7x7) end in a tail each, which the padded copy below costs three memcpy calls. */
        ptrdiff_t i = 0;
        for (; i + 32 <= n; i += 32) QOPS_CAT_BLOCK(src + i, src + i, dst + i);
        QOPS_CAT_BLOCK(src + n - 32, src + n - 32, dst + n - 32);
    } else {
        QOPS_EACH_BLOCK32(src, src, dst, n, QOPS_CAT_BLOCK);
    }
#undef QOPS_CAT_BLOCK
}
#endif

/* dst[0:n] from src[0:n] (is_signed: int8 data, else uint8). */
static void qops_cat_requant(const uint8_t *src, uint8_t *dst, ptrdiff_t n, int is_signed,
                             const qops_cat_params *p) {
#ifdef QOPS_ARITH_AVX2
    if (is_signed) {
        if (p->relu) qops_cat_requant_body(src, dst, n, p, 1, 1);
        else qops_cat_requant_body(src, dst, n, p, 1, 0);
    } else {
        if (p->relu) qops_cat_requant_body(src, dst, n, p, 0, 1);
        else qops_cat_requant_body(src, dst, n, p, 0, 0);
    }
#else
    for (ptrdiff_t i = 0; i < n; i++)
        dst[i] = (uint8_t)qops_cat_one(is_signed ? (int32_t)(int8_t)src[i] : (int32_t)src[i], p);
#endif
}


/* tile[j R : (j + 1) R] = b[j] for j < per: mul.planes' repeated plane values. A vector
 * store a 32 or 64 bytes, each plane's last one running past it into bytes the next plane
 * (or nothing: the tile has 64 bytes of slack) then writes: a memset call a plane cost more
 * than the products of 7x7 planes. */
static void qops_fill_planes(char *tile, const char *b, ptrdiff_t per, ptrdiff_t R) {
    for (ptrdiff_t j = 0; j < per; j++) {
        char *t = tile + j * R;
#if defined(QOPS_ARITH_AVX512)
        const __m512i v = _mm512_set1_epi8(b[j]);
        for (ptrdiff_t k = 0; k < R; k += 64)
            _mm512_storeu_si512((void *)(t + k), v);
#elif defined(QOPS_ARITH_AVX2)
        const __m256i v = _mm256_set1_epi8(b[j]);
        for (ptrdiff_t k = 0; k < R; k += 32)
            _mm256_storeu_si256((__m256i *)(t + k), v);
#else
        memset(t, b[j], (size_t)R);
#endif
    }
}

#endif
