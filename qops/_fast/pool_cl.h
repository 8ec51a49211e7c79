/* Average pools of channels-last data: one output row (n, od, oh) at a time.
 *
 * Each output pixel sums its window's C-vectors (exact int32) and requantizes every sum as
 *     out = clamp(rint(fma(f32(sum - sub), mul, add)) + post)
 * with the output's sub and mul: the vector bodies of PyTorch's channels-last kernels,
 * avg_pool's (sub = size*zp, mul = f32(1/div), add = 0: one rounded product, post = zp: the
 * zero point added after rounding) and adaptive avg_pool's (Q_fma: sub = size*zp,
 * mul = f32(1/f32(1/f32(1/size))), add = zp, post = 0).
 * AVX-512 takes blocks of 64 channels in four zmm sums that stay in registers from the first
 * tap to the output bytes, AVX2 in eight ymm sums; the baseline build, and channel tails,
 * sum into memory and let GCC vectorize the loops. (Sums in memory, or packing through GCC's
 * own conversions, ran several times slower on AVX-512.)
 */
#ifndef QOPS_POOL_CL_H
#define QOPS_POOL_CL_H
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include "qops_common.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* One output row: the window bounds (w0/w1 per output column, d and h ranges of this row),
 * the input's sizes and the row's sub and mul per output column. */
typedef struct {
    ptrdiff_t H, W, C, OW, d0, d1, h0, h1;
    const ptrdiff_t *w0, *w1;
    const int32_t *sub;
    const float *mul;
    float add, post, qmin, qmax;
} qpc_row;

/* o[k] = clamp(rint(fma(f32(sums[k] - sub), m, add)) + post) for k < n: the sums in
 * memory (post is an integer: adding it to the rounded value is exact). */
#define QPC_REQUANT(NAME, T)                                                                   \
static inline void NAME(const int32_t *sums, T *o, ptrdiff_t n, int32_t sub, float m,         \
                        const qpc_row *g) {                                                    \
    for (ptrdiff_t k = 0; k < n; k++) {                                                        \
        float v = fmaf((float)(sums[k] - sub), m, g->add);                                     \
        o[k] = (T)(int32_t)qops_clampf(qops_rintf(v) + g->post, g->qmin, g->qmax);             \
    }                                                                                          \
}
QPC_REQUANT(qpc_requant_u8, uint8_t)
QPC_REQUANT(qpc_requant_s8, int8_t)
#undef QPC_REQUANT

#if defined(__AVX512BW__)
/* The channels of mask cm among [0, 64) of s (the window's first tap) summed over the window
 * and requantized: every 64-channel block, and the channels past the last one (masked loads
 * read nothing past cm, masked stores write nothing past it; the 16-channel quarters past
 * cm are skipped). */
#define QPC_BLOCK64(NAME, T, CVT)                                                              \
static inline void NAME(const T *s, T *o, ptrdiff_t nd, ptrdiff_t nh, ptrdiff_t nw,           \
                        ptrdiff_t ps, ptrdiff_t rs, ptrdiff_t C, int32_t sub, float m,         \
                        const qpc_row *g, __mmask64 cm) {                                      \
    const __mmask16 m0 = (__mmask16)cm, m1 = (__mmask16)(cm >> 16);                           \
    const __mmask16 m2 = (__mmask16)(cm >> 32), m3 = (__mmask16)(cm >> 48);                   \
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;                           \
    for (ptrdiff_t d = 0; d < nd; d++)                                                         \
        for (ptrdiff_t h = 0; h < nh; h++) {                                                   \
            const T *p = s + d * ps + h * rs;                                                  \
            for (ptrdiff_t w = 0; w < nw; w++, p += C) {                                       \
                a0 = _mm512_add_epi32(a0, CVT(_mm_maskz_loadu_epi8(m0, p)));                  \
                if (m1) a1 = _mm512_add_epi32(a1, CVT(_mm_maskz_loadu_epi8(m1, p + 16)));     \
                if (m2) a2 = _mm512_add_epi32(a2, CVT(_mm_maskz_loadu_epi8(m2, p + 32)));     \
                if (m3) a3 = _mm512_add_epi32(a3, CVT(_mm_maskz_loadu_epi8(m3, p + 48)));     \
            }                                                                                  \
        }                                                                                      \
    const __m512i vs = _mm512_set1_epi32(sub);                                                 \
    const __m512 vm = _mm512_set1_ps(m), va = _mm512_set1_ps(g->add);                          \
    /* clamp(rint(v) + post) = rint(clamp(v, qmin - post, qmax - post)) + post: the bounds  \
     * and post are integers */                                                                \
    const __m512 lo = _mm512_set1_ps(g->qmin - g->post), hi = _mm512_set1_ps(g->qmax - g->post); \
    const __m512i vp = _mm512_set1_epi32((int32_t)g->post);                                     \
    __m512i acc[4] = {a0, a1, a2, a3};                                                         \
    for (int k = 0; k < 4 && (__mmask16)(cm >> (16 * k)); k++) {                              \
        __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[k], vs));                           \
        f = _mm512_fmadd_ps(f, vm, va);                                                        \
        /* clamping to integer bounds before the rounding gives clamp(rint(v)); the           \
         * conversion rounds half to even (the default MXCSR mode), as rint */                \
        f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);                                           \
        _mm_mask_storeu_epi8(o + 16 * k, (__mmask16)(cm >> (16 * k)),                          \
                             _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), vp))); \
    }                                                                                          \
}
QPC_BLOCK64(qpc_block64_u8, uint8_t, _mm512_cvtepu8_epi32)
QPC_BLOCK64(qpc_block64_s8, int8_t, _mm512_cvtepi8_epi32)
#undef QPC_BLOCK64
#define QPC_HAVE_BLOCK64 1
#elif defined(__AVX2__)
/* The same with eight ymm sums, stored for a requantize loop that GCC vectorizes. */
#define QPC_BLOCK64(NAME, T, CVT, REQUANT)                                                     \
static inline void NAME(const T *s, T *o, ptrdiff_t nd, ptrdiff_t nh, ptrdiff_t nw,           \
                        ptrdiff_t ps, ptrdiff_t rs, ptrdiff_t C, int32_t sub, float m,         \
                        const qpc_row *g, uint64_t cm) {                                       \
    (void)cm;                                                                                  \
    __m256i a[8];                                                                              \
    int32_t sums[64];                                                                          \
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_si256();                                 \
    for (ptrdiff_t d = 0; d < nd; d++)                                                         \
        for (ptrdiff_t h = 0; h < nh; h++) {                                                   \
            const T *p = s + d * ps + h * rs;                                                  \
            for (ptrdiff_t w = 0; w < nw; w++, p += C)                                         \
                for (int k = 0; k < 8; k++)                                                    \
                    a[k] = _mm256_add_epi32(                                                   \
                        a[k], CVT(_mm_loadl_epi64((const __m128i *)(p + 8 * k))));             \
        }                                                                                      \
    for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(sums + 8 * k), a[k]);          \
    REQUANT(sums, o, 64, sub, m, g);                                                           \
}
QPC_BLOCK64(qpc_block64_u8, uint8_t, _mm256_cvtepu8_epi32, qpc_requant_u8)
QPC_BLOCK64(qpc_block64_s8, int8_t, _mm256_cvtepi8_epi32, qpc_requant_s8)
#undef QPC_BLOCK64
#define QPC_HAVE_BLOCK64 1
#else
#define QPC_HAVE_BLOCK64 0
#define qpc_block64_u8(s, o, nd, nh, nw, ps, rs, C, sub, m, g, cm) ((void)0)
#define qpc_block64_s8(s, o, nd, nh, nw, ps, rs, C, sub, m, g, cm) ((void)0)
#endif

#if defined(__AVX512BW__)
/* Channels past the 64-blocks: one masked block. */
#define QPC_TAIL64(s, o, c0, C, BLOCK64)                                                       \
        if (c0 < C) {                                                                          \
            BLOCK64(s + c0, o + c0, nd, nh, nw, ps, rs, C, sub, m, g,                          \
                    ~(uint64_t)0 >> (64 - (C - c0)));                                          \
            c0 = C;                                                                            \
        }
#else
#define QPC_TAIL64(s, o, c0, C, BLOCK64)
#endif

#if defined(__AVX2__)
/* Channels past the 64-blocks, 8 at a time in one ymm of sums (a 72-channel image's last 8,
 * 480's last 32): the byte loop below runs per pixel with a variable count. */
#define QPC_TAIL8(T, CVT, REQUANT)                                                             \
        for (; c0 + 8 <= C; c0 += 8) {                                                         \
            __m256i a8 = _mm256_setzero_si256();                                               \
            for (ptrdiff_t d = 0; d < nd; d++)                                                 \
                for (ptrdiff_t h = 0; h < nh; h++) {                                           \
                    const T *p = s + c0 + d * ps + h * rs;                                     \
                    for (ptrdiff_t w = 0; w < nw; w++, p += C)                                 \
                        a8 = _mm256_add_epi32(a8, CVT(_mm_loadl_epi64((const __m128i *)p)));   \
                }                                                                              \
            _mm256_storeu_si256((__m256i *)sums, a8);                                          \
            REQUANT(sums, o + c0, 8, sub, m, g);                                               \
        }
#define QPC_CVT8_U8 _mm256_cvtepu8_epi32
#define QPC_CVT8_S8 _mm256_cvtepi8_epi32
#else
#define QPC_TAIL8(T, CVT, REQUANT)
#endif

#define QPC_ROW(NAME, T, BLOCK64, REQUANT, CVT8)                                               \
static void NAME(const T *restrict x, T *restrict out, const qpc_row *g) {                     \
    const ptrdiff_t C = g->C, rs = g->W * C, ps = g->H * rs;                                   \
    const ptrdiff_t nd = g->d1 - g->d0, nh = g->h1 - g->h0;                                    \
    const ptrdiff_t c64 = QPC_HAVE_BLOCK64 ? C / 64 * 64 : 0;                                  \
    int32_t sums[64];                                                                          \
    for (ptrdiff_t ow = 0; ow < g->OW; ow++) {                                                 \
        const int32_t sub = g->sub[ow];                                                        \
        const float m = g->mul[ow];                                                            \
        const ptrdiff_t nw = g->w1[ow] - g->w0[ow];                                            \
        const T *s = x + g->d0 * ps + g->h0 * rs + g->w0[ow] * C;                              \
        T *o = out + ow * C;                                                                   \
        ptrdiff_t c0 = 0;                                                                      \
        for (; c0 < c64; c0 += 64)                                                             \
            BLOCK64(s + c0, o + c0, nd, nh, nw, ps, rs, C, sub, m, g, ~(uint64_t)0);           \
        QPC_TAIL64(s, o, c0, C, BLOCK64)                                                       \
        QPC_TAIL8(T, CVT8, REQUANT)                                                          \
        for (; c0 < C; c0 += 64) {                                                             \
            ptrdiff_t nb = C - c0 < 64 ? C - c0 : 64;                                          \
            for (ptrdiff_t k = 0; k < nb; k++) sums[k] = 0;                                    \
            for (ptrdiff_t d = 0; d < nd; d++)                                                 \
                for (ptrdiff_t h = 0; h < nh; h++) {                                           \
                    const T *p = s + c0 + d * ps + h * rs;                                     \
                    for (ptrdiff_t w = 0; w < nw; w++, p += C)                                 \
                        for (ptrdiff_t k = 0; k < nb; k++) sums[k] += p[k];                    \
                }                                                                              \
            REQUANT(sums, o + c0, nb, sub, m, g);                                              \
        }                                                                                      \
    }                                                                                          \
}
QPC_ROW(qpc_avg_row_u8, uint8_t, qpc_block64_u8, qpc_requant_u8, QPC_CVT8_U8)
QPC_ROW(qpc_avg_row_s8, int8_t, qpc_block64_s8, qpc_requant_s8, QPC_CVT8_S8)
#undef QPC_ROW
#undef QPC_TAIL8
#undef QPC_TAIL64

/* Max pools of channels-last data, one output row (n, od, oh): rows[] are the window's valid
 * input rows (D and H taps) of this output row. Each output pixel takes the max over its
 * valid taps of 64-byte channel blocks kept in a register (a fixed-size block GCC vectorizes
 * to one zmm, two ymm or four xmm), then blocks of 32 and 16 bytes and the last channels one
 * by one. Every output starts at the dtype's minimum: what a window without a valid tap
 * gives (PyTorch's padding). */
typedef struct {
    ptrdiff_t W, C, OW, sW, pW, kW, dW, nrows;
} qpc_mrow;

/* The max over the valid taps of channels [c0, c0 + NB) of one output pixel, NB a constant
 * (the block stays in registers). */
#define QPC_MAX_BLOCK(T, LO, NB)                                                               \
    do {                                                                                       \
        T acc[NB];                                                                             \
        for (int j = 0; j < (NB); j++) acc[j] = LO;                                            \
        for (ptrdiff_t r = 0; r < g->nrows; r++)                                               \
            for (ptrdiff_t k = k0; k < k1; k++) {                                              \
                const T *p = rows[r] + (base + k * g->dW) * C + c0;                            \
                for (int j = 0; j < (NB); j++) acc[j] = p[j] > acc[j] ? p[j] : acc[j];         \
            }                                                                                  \
        for (int j = 0; j < (NB); j++) o[c0 + j] = acc[j];                                     \
        c0 += (NB);                                                                            \
    } while (0)

/* Channels in 64-byte blocks, then one block of 32 and one of 16 bytes where they fit, then
 * the last few one by one: a tail of 32 channels (288, 480, 832 of GoogLeNet and Inception)
 * byte by byte took longer than all the 64-byte blocks of the row together. */
#define QPC_MAX_ROW(NAME, T, LO)                                                               \
static void NAME(const T *const *rows, T *restrict out, const qpc_mrow *g) {                  \
    enum { B = 64 / sizeof(T) };                                                               \
    const ptrdiff_t C = g->C;                                                                  \
    for (ptrdiff_t ow = 0; ow < g->OW; ow++) {                                                 \
        /* valid W taps: 0 <= ow*sW - pW + k*dW < W */                                         \
        ptrdiff_t base = ow * g->sW - g->pW, k0 = 0, k1 = g->kW;                               \
        if (base < 0) k0 = (-base + g->dW - 1) / g->dW;                                        \
        if (base + (k1 - 1) * g->dW >= g->W) k1 = (g->W - 1 - base) / g->dW + 1;               \
        if (k1 < k0) k1 = k0;                                                                  \
        T *o = out + ow * C;                                                                   \
        ptrdiff_t c0 = 0;                                                                      \
        while (c0 + B <= C) QPC_MAX_BLOCK(T, LO, B);                                           \
        if (c0 + B / 2 <= C) QPC_MAX_BLOCK(T, LO, B / 2);                                      \
        if (c0 + B / 4 <= C) QPC_MAX_BLOCK(T, LO, B / 4);                                      \
        for (ptrdiff_t c = c0; c < C; c++) {                                                   \
            T m = LO;                                                                          \
            for (ptrdiff_t r = 0; r < g->nrows; r++)                                           \
                for (ptrdiff_t k = k0; k < k1; k++) {                                          \
                    T v = rows[r][(base + k * g->dW) * C + c];                                 \
                    m = v > m ? v : m;                                                         \
                }                                                                              \
            o[c] = m;                                                                          \
        }                                                                                      \
    }                                                                                          \
}
#if defined(__AVX2__)
/* (AVX-512 builds take QPC_MAX_ROW_AVX512 further down for 8-bit max rows.)
 * AVX2, 8-bit, a pixel of a 3x3 window inside the input (3 valid rows, 3 valid taps each):
 * the max of channels [0, C) as straight-line code over the rows' pointers p[0..3) and tap
 * steps 0, s, 2s, by blocks of 64, 32 and 16 bytes and the last channels one by one. The
 * general loops below (rows, then taps) took as many instructions as the loads and maxes; a
 * list of the taps' pointers instead cost a load per tap and ran slower on 128-256 channels. */
#define QPC_MAX_3X3_AVX2(NAME, T, MAX256, MAX128)                                              \
static inline __attribute__((always_inline)) void NAME(const T *r0, const T *r1, const T *r2, \
                                                       ptrdiff_t s, T *o, ptrdiff_t C) {       \
    const ptrdiff_t s2 = 2 * s;                                                                \
    ptrdiff_t c = 0;                                                                           \
    for (; c + 32 <= C; c += 32) {                                                             \
        __m256i a = _mm256_loadu_si256((const __m256i *)(r0 + c));                             \
        __m256i b = _mm256_loadu_si256((const __m256i *)(r1 + c));                             \
        a = MAX256(a, _mm256_loadu_si256((const __m256i *)(r0 + c + s)));                      \
        b = MAX256(b, _mm256_loadu_si256((const __m256i *)(r1 + c + s)));                      \
        a = MAX256(a, _mm256_loadu_si256((const __m256i *)(r0 + c + s2)));                     \
        b = MAX256(b, _mm256_loadu_si256((const __m256i *)(r1 + c + s2)));                     \
        a = MAX256(a, _mm256_loadu_si256((const __m256i *)(r2 + c)));                          \
        b = MAX256(b, _mm256_loadu_si256((const __m256i *)(r2 + c + s)));                      \
        a = MAX256(a, _mm256_loadu_si256((const __m256i *)(r2 + c + s2)));                     \
        _mm256_storeu_si256((__m256i *)(o + c), MAX256(a, b));                                 \
    }                                                                                          \
    if (c + 16 <= C) {                                                                         \
        __m128i a = _mm_loadu_si128((const __m128i *)(r0 + c));                                \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r0 + c + s)));                         \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r0 + c + s2)));                        \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r1 + c)));                             \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r1 + c + s)));                         \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r1 + c + s2)));                        \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r2 + c)));                             \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r2 + c + s)));                         \
        a = MAX128(a, _mm_loadu_si128((const __m128i *)(r2 + c + s2)));                        \
        _mm_storeu_si128((__m128i *)(o + c), a);                                               \
        c += 16;                                                                               \
    }                                                                                          \
    for (; c < C; c++) {                                                                       \
        const T *t[9] = {r0 + c, r0 + c + s, r0 + c + s2, r1 + c, r1 + c + s, r1 + c + s2,     \
                         r2 + c, r2 + c + s, r2 + c + s2};                                      \
        T m = *t[0];                                                                           \
        for (int j = 1; j < 9; j++)                                                            \
            m = *t[j] > m ? *t[j] : m;                                                         \
        o[c] = m;                                                                              \
    }                                                                                          \
}
QPC_MAX_3X3_AVX2(qpc_max_3x3_u8, uint8_t, _mm256_max_epu8, _mm_max_epu8)
QPC_MAX_3X3_AVX2(qpc_max_3x3_s8, int8_t, _mm256_max_epi8, _mm_max_epi8)
#undef QPC_MAX_3X3_AVX2

/* AVX2, 8-bit: the same loops with the block in two ymm (one for 32 channels, an xmm for
 * 16), each tap's address a step from the last: GCC kept the generic 64-byte block on the
 * stack, stored it in xmm pieces and recomputed each tap's address. Pixels of 3x3 windows inside
 * the input take TAPS. */
#define QPC_MAX_ROW_AVX2(NAME, T, LO, MAX256, MAX128, TAPS)                                    \
static void NAME(const T *const *rows, T *restrict out, const qpc_mrow *g) {                  \
    const ptrdiff_t C = g->C, step = g->dW * C;                                                \
    const __m256i lo = _mm256_set1_epi8((char)(LO));                                           \
    for (ptrdiff_t ow = 0; ow < g->OW; ow++) {                                                 \
        ptrdiff_t base = ow * g->sW - g->pW, k0 = 0, k1 = g->kW;                               \
        if (base < 0) k0 = (-base + g->dW - 1) / g->dW;                                        \
        if (base + (k1 - 1) * g->dW >= g->W) k1 = (g->W - 1 - base) / g->dW + 1;               \
        if (k1 < k0) k1 = k0;                                                                  \
        const ptrdiff_t nt = k1 - k0, off = (base + k0 * g->dW) * C;                           \
        T *o = out + ow * C;                                                                   \
        if (g->nrows == 3 && nt == 3) {                                                        \
            TAPS(rows[0] + off, rows[1] + off, rows[2] + off, step, o, C);                     \
            continue;                                                                          \
        }                                                                                      \
        ptrdiff_t c0 = 0;                                                                      \
        for (; c0 + 64 <= C; c0 += 64) {                                                       \
            __m256i a0 = lo, a1 = lo;                                                          \
            for (ptrdiff_t r = 0; r < g->nrows; r++) {                                         \
                const T *p = rows[r] + off + c0;                                               \
                for (ptrdiff_t k = 0; k < nt; k++, p += step) {                                \
                    a0 = MAX256(a0, _mm256_loadu_si256((const __m256i *)p));                   \
                    a1 = MAX256(a1, _mm256_loadu_si256((const __m256i *)(p + 32)));            \
                }                                                                              \
            }                                                                                  \
            _mm256_storeu_si256((__m256i *)(o + c0), a0);                                      \
            _mm256_storeu_si256((__m256i *)(o + c0 + 32), a1);                                 \
        }                                                                                      \
        if (c0 + 32 <= C) {                                                                    \
            __m256i a0 = lo;                                                                   \
            for (ptrdiff_t r = 0; r < g->nrows; r++) {                                         \
                const T *p = rows[r] + off + c0;                                               \
                for (ptrdiff_t k = 0; k < nt; k++, p += step)                                  \
                    a0 = MAX256(a0, _mm256_loadu_si256((const __m256i *)p));                   \
            }                                                                                  \
            _mm256_storeu_si256((__m256i *)(o + c0), a0);                                      \
            c0 += 32;                                                                          \
        }                                                                                      \
        if (c0 + 16 <= C) {                                                                    \
            __m128i a0 = _mm256_castsi256_si128(lo);                                           \
            for (ptrdiff_t r = 0; r < g->nrows; r++) {                                         \
                const T *p = rows[r] + off + c0;                                               \
                for (ptrdiff_t k = 0; k < nt; k++, p += step)                                  \
                    a0 = MAX128(a0, _mm_loadu_si128((const __m128i *)p));                      \
            }                                                                                  \
            _mm_storeu_si128((__m128i *)(o + c0), a0);                                         \
            c0 += 16;                                                                          \
        }                                                                                      \
        for (ptrdiff_t c = c0; c < C; c++) {                                                   \
            T m = LO;                                                                          \
            for (ptrdiff_t r = 0; r < g->nrows; r++)                                           \
                for (ptrdiff_t k = 0; k < nt; k++) {                                           \
                    T v = rows[r][off + k * step + c];                                         \
                    m = v > m ? v : m;                                                         \
                }                                                                              \
            o[c] = m;                                                                          \
        }                                                                                      \
    }                                                                                          \
}
#if defined(__AVX512BW__)
/* AVX-512, 8-bit: a pixel's channels in 64-byte blocks, the last partial block masked (no
 * 32-, 16- and 1-byte tails: 480 channels are 7.5 blocks), and the 2x2 and 3x3 windows that
 * lie inside the input as straight-line loads (the rows-then-taps loops cost a branch and an
 * address step per load there, more than the loads themselves on small pools). */
#define QPC_MAX_ROW_AVX512(NAME, T, LO, MAXZ)                                                  \
static void NAME(const T *const *rows, T *restrict out, const qpc_mrow *g) {                  \
    const ptrdiff_t C = g->C, step = g->dW * C, cfull = C & ~(ptrdiff_t)63;                   \
    const __mmask64 tail = C > cfull ? (__mmask64)(~0ULL >> (64 - (C - cfull))) : 0;          \
    const __m512i lo = _mm512_set1_epi8((char)(LO));                                           \
    for (ptrdiff_t ow = 0; ow < g->OW; ow++) {                                                 \
        ptrdiff_t base = ow * g->sW - g->pW, k0 = 0, k1 = g->kW;                               \
        if (base < 0) k0 = (-base + g->dW - 1) / g->dW;                                        \
        if (base + (k1 - 1) * g->dW >= g->W) k1 = (g->W - 1 - base) / g->dW + 1;               \
        if (k1 < k0) k1 = k0;                                                                  \
        const ptrdiff_t nt = k1 - k0, off = (base + k0 * g->dW) * C, nr = g->nrows;           \
        T *o = out + ow * C;                                                                   \
        if (nr == 2 && nt == 2) {                                                              \
            const T *p0 = rows[0] + off, *p1 = rows[1] + off;                                  \
            for (ptrdiff_t c = 0; c < cfull; c += 64) {                                        \
                __m512i a = MAXZ(_mm512_loadu_si512(p0 + c), _mm512_loadu_si512(p0 + c + step)); \
                __m512i b = MAXZ(_mm512_loadu_si512(p1 + c), _mm512_loadu_si512(p1 + c + step)); \
                _mm512_storeu_si512(o + c, MAXZ(a, b));                                        \
            }                                                                                  \
            if (tail) {                                                                        \
                __m512i a = MAXZ(_mm512_maskz_loadu_epi8(tail, p0 + cfull),                    \
                                 _mm512_maskz_loadu_epi8(tail, p0 + cfull + step));            \
                __m512i b = MAXZ(_mm512_maskz_loadu_epi8(tail, p1 + cfull),                    \
                                 _mm512_maskz_loadu_epi8(tail, p1 + cfull + step));            \
                _mm512_mask_storeu_epi8(o + cfull, tail, MAXZ(a, b));                          \
            }                                                                                  \
            continue;                                                                          \
        }                                                                                      \
        if (nr == 3 && nt == 3) {                                                              \
            const T *p0 = rows[0] + off, *p1 = rows[1] + off, *p2 = rows[2] + off;             \
            const ptrdiff_t s2 = 2 * step;                                                     \
            for (ptrdiff_t c = 0; c < cfull; c += 64) {                                        \
                __m512i a = MAXZ(_mm512_loadu_si512(p0 + c), _mm512_loadu_si512(p0 + c + step)); \
                __m512i b = MAXZ(_mm512_loadu_si512(p1 + c), _mm512_loadu_si512(p1 + c + step)); \
                __m512i d = MAXZ(_mm512_loadu_si512(p2 + c), _mm512_loadu_si512(p2 + c + step)); \
                a = MAXZ(a, _mm512_loadu_si512(p0 + c + s2));                                  \
                b = MAXZ(b, _mm512_loadu_si512(p1 + c + s2));                                  \
                d = MAXZ(d, _mm512_loadu_si512(p2 + c + s2));                                  \
                _mm512_storeu_si512(o + c, MAXZ(MAXZ(a, b), d));                               \
            }                                                                                  \
            if (tail) {                                                                        \
                __m512i a = lo;                                                                \
                for (int j = 0; j < 3; j++) {                                                  \
                    a = MAXZ(a, _mm512_maskz_loadu_epi8(tail, p0 + cfull + j * step));         \
                    a = MAXZ(a, _mm512_maskz_loadu_epi8(tail, p1 + cfull + j * step));         \
                    a = MAXZ(a, _mm512_maskz_loadu_epi8(tail, p2 + cfull + j * step));         \
                }                                                                              \
                _mm512_mask_storeu_epi8(o + cfull, tail, a);                                   \
            }                                                                                  \
            continue;                                                                          \
        }                                                                                      \
        for (ptrdiff_t c = 0; c < cfull; c += 64) {                                            \
            __m512i a = lo;                                                                    \
            for (ptrdiff_t r = 0; r < nr; r++) {                                               \
                const T *p = rows[r] + off + c;                                                \
                for (ptrdiff_t k = 0; k < nt; k++, p += step)                                  \
                    a = MAXZ(a, _mm512_loadu_si512(p));                                        \
            }                                                                                  \
            _mm512_storeu_si512(o + c, a);                                                     \
        }                                                                                      \
        if (tail) {                                                                            \
            __m512i a = lo;                                                                    \
            for (ptrdiff_t r = 0; r < nr; r++) {                                               \
                const T *p = rows[r] + off + cfull;                                            \
                for (ptrdiff_t k = 0; k < nt; k++, p += step)                                  \
                    a = MAXZ(a, _mm512_maskz_loadu_epi8(tail, p));                             \
            }                                                                                  \
            _mm512_mask_storeu_epi8(o + cfull, tail, a);                                       \
        }                                                                                      \
    }                                                                                          \
}
QPC_MAX_ROW_AVX512(qpc_max_row_u8, uint8_t, 0, _mm512_max_epu8)
QPC_MAX_ROW_AVX512(qpc_max_row_s8, int8_t, -128, _mm512_max_epi8)
#undef QPC_MAX_ROW_AVX512
#else
QPC_MAX_ROW_AVX2(qpc_max_row_u8, uint8_t, 0, _mm256_max_epu8, _mm_max_epu8, qpc_max_3x3_u8)
QPC_MAX_ROW_AVX2(qpc_max_row_s8, int8_t, -128, _mm256_max_epi8, _mm_max_epi8,
                 qpc_max_3x3_s8)
#endif
#undef QPC_MAX_ROW_AVX2
#else
QPC_MAX_ROW(qpc_max_row_u8, uint8_t, 0)
QPC_MAX_ROW(qpc_max_row_s8, int8_t, -128)
#endif
QPC_MAX_ROW(qpc_max_row_s32, int32_t, INT32_MIN)
#undef QPC_MAX_ROW
#undef QPC_MAX_BLOCK

/* The entry points pool.pyx calls: one row from plain arguments, the row's struct on this
 * call's stack, so every thread has its own (a struct filled inside a prange body is shared
 * by the threads: issue 19 #3). sgn / kind: 0 uint8, 1 int8, 2 int32 (max only). */
static inline void qpc_avg_row(const void *x, void *out, int sgn, ptrdiff_t H, ptrdiff_t W,
                               ptrdiff_t C, ptrdiff_t OW, ptrdiff_t d0, ptrdiff_t d1,
                               ptrdiff_t h0, ptrdiff_t h1, const ptrdiff_t *w0,
                               const ptrdiff_t *w1, const int32_t *sub, const float *mul,
                               float add, float post, float qmin, float qmax) {
    const qpc_row g = {H, W, C, OW, d0, d1, h0, h1, w0, w1, sub, mul, add, post, qmin, qmax};
    if (sgn) qpc_avg_row_s8((const int8_t *)x, (int8_t *)out, &g);
    else qpc_avg_row_u8((const uint8_t *)x, (uint8_t *)out, &g);
}

static inline void qpc_max_row(const void *const *rows, void *out, int kind, ptrdiff_t W,
                               ptrdiff_t C, ptrdiff_t OW, ptrdiff_t sW, ptrdiff_t pW,
                               ptrdiff_t kW, ptrdiff_t dW, ptrdiff_t nrows) {
    const qpc_mrow g = {W, C, OW, sW, pW, kW, dW, nrows};
    if (kind == 2) qpc_max_row_s32((const int32_t *const *)rows, (int32_t *)out, &g);
    else if (kind == 1) qpc_max_row_s8((const int8_t *const *)rows, (int8_t *)out, &g);
    else qpc_max_row_u8((const uint8_t *const *)rows, (uint8_t *)out, &g);
}
#endif
