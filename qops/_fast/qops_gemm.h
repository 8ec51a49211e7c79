/* qops_gemm.h: the int8 GEMM core (uint8 activations x int8 weights -> exact int32), with the
 * output stage of SEMANTICS.md sections 8-10 fused into the store.
 *
 *   acc[m,n] = sum_k (A[m,k] - a_zp) * (W[n,k] - w_zp[n])             exact int32
 *
 * A is M x K uint8, row stride lda (elements); W is N x K int8 (a linear weight, or a conv weight
 * reshaped to out_channels x (in_channels/groups * taps)). Output kinds:
 *
 *   QOPS_GEMM_U8   C uint8:  y = f32(f32(acc) + bias[n])   (no bias: y = f32(acc))
 *                            out = clamp(rint(f32(y * mult[n])) + out_zp, relu ? out_zp : 0, 255)
 *                  (bias[n] = the prepared bias term bterm_n, mult[n] = M_n; NaN -> low bound)
 *   QOPS_GEMM_F32  C float:  out = fma(f32(acc), mult[n], bias[n]) (no bias: +0); relu: max(out, 0)
 *                  (dynamic linear: mult[n] = f32(f32(x_s) * f32(w_s_n)), bias[n] the float bias)
 *   QOPS_GEMM_I32  C int32:  out = acc
 *
 * API (stable; every function is static, so each ISA build of a module gets its own copy):
 *
 *   ptrdiff_t qops_gemm_packed_size(ptrdiff_t N, ptrdiff_t K);
 *       Bytes of the packed weight buffer. The layout is private to the ISA build: pack and
 *       multiply in the same extension module. A 64-byte aligned buffer is fastest.
 *   void qops_gemm_pack(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
 *                       int8_t *packed, int32_t *wsum);
 *       Packs W (row n at W + n*ldw) and writes wsum[n] = sum_k W[n,k] (N int32).
 *   qops_gemm_b   {data, wsum, wzp, N, K}: the packed weight. wzp = per-row weight zero points
 *                 (N int32), or NULL when they are all 0 (skips the row sums of A).
 *   qops_gemm_out {kind, bias, mult, out_zp, relu, out, ldc}: where and how to store. bias may
 *                 be NULL; mult is unused for I32; ldc = row stride of out in elements.
 *   void qops_gemm(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
 *                  const qops_gemm_b *B, const qops_gemm_out *out);
 *       All M x N outputs, single-threaded, nogil-safe (call it inside your own prange over
 *       independent row blocks, with A, out pointing at the block's first row).
 *   void qops_gemm_mt(same arguments..., int nthreads);
 *       The same, split over nthreads OpenMP threads (row blocks x column panels, static).
 *
 * Exactness: the int32 arithmetic wraps, so the result is exact whenever the true acc fits in
 * int32, i.e. K * max|A - a_zp| * max|W - w_zp| <= 2^31 - 1; K <= 33025 is always safe
 * (33025 * 255 * 255 < 2^31). The caller checks the bound, or splits K into chunks and sums
 * QOPS_GEMM_I32 results in int64 (qops/_fast/linear.pyx does).
 * Paths: AVX-512 VNNI (vpdpbusd on 4-byte groups, 64-column panels); AVX2 (weights widened to
 * int16 at pack time and vpmaddwd on pairs: vpmaddubsw would saturate u8*s8 pair sums, which
 * reach 64770); plain C for the baseline build (int16 pairs, 16-column panels).
 */
#ifndef QOPS_GEMM_H
#define QOPS_GEMM_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "qops_common.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { QOPS_GEMM_U8 = 0, QOPS_GEMM_F32 = 1, QOPS_GEMM_I32 = 2 };

typedef struct {
    const int8_t *data;
    const int32_t *wsum;
    const int32_t *wzp;
    ptrdiff_t N, K;
} qops_gemm_b;

typedef struct {
    int kind;
    const float *bias;
    const float *mult;
    int32_t out_zp;
    int relu;
    void *out;
    ptrdiff_t ldc;
} qops_gemm_out;

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define QG_VNNI 1
#define QG_NR 64            /* columns per panel: 4 zmm of 16 int32 */
#define QG_KG 4             /* k values per packed group (one vpdpbusd lane) */
#elif defined(__AVX2__)
#define QG_AVX2 1
#define QG_NR 16            /* 2 ymm of 8 int32 */
#define QG_KG 2             /* int16 pairs for vpmaddwd */
#else
#define QG_NR 16
#define QG_KG 2
#endif
#define QG_MR 6             /* rows per micro-tile: 6 x 4 zmm = 24 accumulators on VNNI */
#define QG_MB 96            /* target rows per thread tile (A block stays in L2) */

#define QG_INLINE static inline __attribute__((always_inline))

static inline ptrdiff_t qg_npanels(ptrdiff_t N) { return (N + QG_NR - 1) / QG_NR; }
static inline ptrdiff_t qg_groups(ptrdiff_t K) { return (K + QG_KG - 1) / QG_KG; }

/* Bytes of one packed group row (all columns of a panel for QG_KG values of k). */
#ifdef QG_VNNI
static inline ptrdiff_t qg_panel_width(ptrdiff_t N, ptrdiff_t p) {
    /* The last panel is only as wide as it must be (in 16-column vectors). */
    ptrdiff_t left = N - p * QG_NR;
    return left >= QG_NR ? QG_NR : ((left + 15) / 16) * 16;
}
#define QG_ELEM_BYTES 1
#else
static inline ptrdiff_t qg_panel_width(ptrdiff_t N, ptrdiff_t p) { (void)N; (void)p; return QG_NR; }
#define QG_ELEM_BYTES 2     /* weights stored widened to int16 */
#endif

static inline ptrdiff_t qops_gemm_packed_size(ptrdiff_t N, ptrdiff_t K) {
    ptrdiff_t per_panel = qg_groups(K) * QG_KG * QG_NR * QG_ELEM_BYTES;
    ptrdiff_t size = qg_npanels(N) * per_panel;
    return size > 0 ? size : 1;
}

static inline const int8_t *qg_panel_ptr(const int8_t *data, ptrdiff_t K, ptrdiff_t p) {
    return data + p * qg_groups(K) * QG_KG * QG_NR * QG_ELEM_BYTES;
}

static void qops_gemm_pack(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
                           int8_t *packed, int32_t *wsum) {
    ptrdiff_t P = qg_npanels(N), G = qg_groups(K);
    memset(packed, 0, (size_t)qops_gemm_packed_size(N, K));
    for (ptrdiff_t n = 0; n < N; n++) {
        int32_t s = 0;
        for (ptrdiff_t k = 0; k < K; k++) s += W[n * ldw + k];
        wsum[n] = s;
    }
    for (ptrdiff_t p = 0; p < P; p++) {
        ptrdiff_t w = qg_panel_width(N, p);
        int8_t *base = (int8_t *)qg_panel_ptr(packed, K, p);
        for (ptrdiff_t j = 0; j < w && p * QG_NR + j < N; j++) {
            const int8_t *row = W + (p * QG_NR + j) * ldw;
            for (ptrdiff_t k = 0; k < K; k++) {
                ptrdiff_t idx = ((k / QG_KG) * w + j) * QG_KG + k % QG_KG;
#ifdef QG_VNNI
                base[idx] = row[k];
#else
                ((int16_t *)base)[idx] = row[k];
#endif
            }
        }
    }
    (void)G;
}

/* ---- micro-kernels: acc[i * QG_NR + j] = sum_k A[i, k] * W[n0 + j, k] (no zero points) ---- */

#ifdef QG_VNNI
/* nv = 16-column vectors in this panel (1..4), mr = rows (1..6): both compile-time constants
 * after inlining. The 24 accumulators are named variables (GCC spills arrays of __m512i). */
#define QG_DPB(c, a, b) c = _mm512_dpbusd_epi32(c, a, b)
#define QG_ROW(i, A4) \
    if (mr > i) { \
        __m512i av_ = _mm512_set1_epi32(A4); \
        QG_DPB(c##i##0, av_, b0); \
        if (nv > 1) QG_DPB(c##i##1, av_, b1); \
        if (nv > 2) QG_DPB(c##i##2, av_, b2); \
        if (nv > 3) QG_DPB(c##i##3, av_, b3); }
#define QG_LOADB(bb) \
    b0 = _mm512_loadu_si512(bb); \
    if (nv > 1) b1 = _mm512_loadu_si512((bb) + 64); \
    if (nv > 2) b2 = _mm512_loadu_si512((bb) + 128); \
    if (nv > 3) b3 = _mm512_loadu_si512((bb) + 192);
#define QG_STORE(i) \
    if (mr > i) { \
        _mm512_storeu_si512(acc_out + i * QG_NR, c##i##0); \
        if (nv > 1) _mm512_storeu_si512(acc_out + i * QG_NR + 16, c##i##1); \
        if (nv > 2) _mm512_storeu_si512(acc_out + i * QG_NR + 32, c##i##2); \
        if (nv > 3) _mm512_storeu_si512(acc_out + i * QG_NR + 48, c##i##3); }

static inline int32_t qg_load4(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

QG_INLINE void qg_micro(const int mr, const int nv, const uint8_t *A, ptrdiff_t lda, ptrdiff_t K,
                        const int8_t *b, int32_t *acc_out) {
    const __m512i z = _mm512_setzero_si512();
    __m512i c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    __m512i c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    __m512i c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
    __m512i b0 = z, b1 = z, b2 = z, b3 = z;
    const ptrdiff_t G = K >> 2, step = nv * 64;
    const uint8_t *a0 = A, *a1 = A + lda, *a2 = A + 2 * lda, *a3 = A + 3 * lda;
    const uint8_t *a4 = A + 4 * lda, *a5 = A + 5 * lda;
    ptrdiff_t g = 0;
    for (; g < G; g++) {
        QG_LOADB(b)
        const ptrdiff_t o = 4 * g;
        QG_ROW(0, qg_load4(a0 + o)) QG_ROW(1, qg_load4(a1 + o)) QG_ROW(2, qg_load4(a2 + o))
        QG_ROW(3, qg_load4(a3 + o)) QG_ROW(4, qg_load4(a4 + o)) QG_ROW(5, qg_load4(a5 + o))
        b += step;
    }
    QG_STORE(0) QG_STORE(1) QG_STORE(2) QG_STORE(3) QG_STORE(4) QG_STORE(5)
}


/* One row: two sets of accumulators take the even and odd groups, halving the vpdpbusd
 * dependency chains (a 1-row GEMV is latency bound otherwise). */
QG_INLINE void qg_micro1(const int nv, const uint8_t *A, ptrdiff_t K, const int8_t *b,
                         int32_t *acc_out) {
    const int mr = 1;
    const __m512i z = _mm512_setzero_si512();
    __m512i c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    __m512i b0 = z, b1 = z, b2 = z, b3 = z;
    const ptrdiff_t G = K >> 2, step = nv * 64;
    ptrdiff_t g = 0;
    for (; g + 1 < G; g += 2) {
        QG_LOADB(b)
        __m512i av = _mm512_set1_epi32(qg_load4(A + 4 * g));
        QG_DPB(c00, av, b0);
        if (nv > 1) QG_DPB(c01, av, b1);
        if (nv > 2) QG_DPB(c02, av, b2);
        if (nv > 3) QG_DPB(c03, av, b3);
        QG_LOADB(b + step)
        av = _mm512_set1_epi32(qg_load4(A + 4 * g + 4));
        QG_DPB(c10, av, b0);
        if (nv > 1) QG_DPB(c11, av, b1);
        if (nv > 2) QG_DPB(c12, av, b2);
        if (nv > 3) QG_DPB(c13, av, b3);
        b += 2 * step;
    }
    if (g < G) {
        QG_LOADB(b)
        __m512i av = _mm512_set1_epi32(qg_load4(A + 4 * g));
        QG_DPB(c00, av, b0);
        if (nv > 1) QG_DPB(c01, av, b1);
        if (nv > 2) QG_DPB(c02, av, b2);
        if (nv > 3) QG_DPB(c03, av, b3);
    }
    c00 = _mm512_add_epi32(c00, c10); c01 = _mm512_add_epi32(c01, c11);
    c02 = _mm512_add_epi32(c02, c12); c03 = _mm512_add_epi32(c03, c13);
    QG_STORE(0)
}

/* K tail (K % 4 values): added to the stored accumulators. The packed weights are zero past
 * K, and A is never read past the row end. Kept out of qg_micro, whose register allocation
 * it would spoil. */
QG_INLINE void qg_micro_tail(const int mr, const int nv, const uint8_t *A, ptrdiff_t lda,
                             ptrdiff_t K, const int8_t *bp, int32_t *acc_out) {
    const ptrdiff_t G = K >> 2;
    const int8_t *b = bp + G * nv * 64;
    for (int i = 0; i < mr; i++) {
        int32_t t = 0;
        memcpy(&t, A + i * lda + 4 * G, (size_t)(K & 3));
        __m512i av = _mm512_set1_epi32(t);
        for (int j = 0; j < nv; j++) {
            __m512i c = _mm512_loadu_si512(acc_out + i * QG_NR + 16 * j);
            c = _mm512_dpbusd_epi32(c, av, _mm512_loadu_si512(b + 64 * j));
            _mm512_storeu_si512(acc_out + i * QG_NR + 16 * j, c);
        }
    }
}

#define QG_MR_CASES(NV) \
    switch (mr) { \
    case 1: qg_micro1(NV, A, K, b, acc); break; \
    case 2: qg_micro(2, NV, A, lda, K, b, acc); break; \
    case 3: qg_micro(3, NV, A, lda, K, b, acc); break; \
    case 4: qg_micro(4, NV, A, lda, K, b, acc); break; \
    case 5: qg_micro(5, NV, A, lda, K, b, acc); break; \
    default: qg_micro(6, NV, A, lda, K, b, acc); break; }

static void qg_micro_dispatch(int mr, int width, const uint8_t *A, ptrdiff_t lda, ptrdiff_t K,
                              const int8_t *b, int32_t *acc) {
    switch (width / 16) {
    case 1: QG_MR_CASES(1) break;
    case 2: QG_MR_CASES(2) break;
    case 3: QG_MR_CASES(3) break;
    default: QG_MR_CASES(4) break;
    }
    if (K & 3) qg_micro_tail(mr, width / 16, A, lda, K, b, acc);
}

#elif defined(QG_AVX2)
QG_INLINE void qg_micro(const int mr, const uint8_t *A, ptrdiff_t lda, ptrdiff_t K,
                        const int16_t *b, int32_t *acc_out) {
    __m256i acc[QG_MR][2];
    const ptrdiff_t G = K >> 1;
    _Pragma("GCC unroll 8")
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (ptrdiff_t g = 0; g < G; g++) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)b);
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 16));
        _Pragma("GCC unroll 8")
        for (int i = 0; i < mr; i++) {
            const uint8_t *a = A + i * lda + 2 * g;
            __m256i av = _mm256_set1_epi32((int32_t)a[0] | ((int32_t)a[1] << 16));
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(av, b0));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(av, b1));
        }
        b += 32;
    }
    if (K & 1) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)b);
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 16));
        _Pragma("GCC unroll 8")
        for (int i = 0; i < mr; i++) {
            __m256i av = _mm256_set1_epi32((int32_t)A[i * lda + 2 * G]);
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(av, b0));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(av, b1));
        }
    }
    _Pragma("GCC unroll 8")
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_si256((__m256i *)(acc_out + i * QG_NR), acc[i][0]);
        _mm256_storeu_si256((__m256i *)(acc_out + i * QG_NR + 8), acc[i][1]);
    }
}

static void qg_micro_dispatch(int mr, int width, const uint8_t *A, ptrdiff_t lda, ptrdiff_t K,
                              const int8_t *b, int32_t *acc) {
    const int16_t *b16 = (const int16_t *)b;
    (void)width;
    switch (mr) {
    case 1: qg_micro(1, A, lda, K, b16, acc); break;
    case 2: qg_micro(2, A, lda, K, b16, acc); break;
    case 3: qg_micro(3, A, lda, K, b16, acc); break;
    case 4: qg_micro(4, A, lda, K, b16, acc); break;
    case 5: qg_micro(5, A, lda, K, b16, acc); break;
    default: qg_micro(6, A, lda, K, b16, acc); break;
    }
}

#else
/* Plain C: GCC vectorizes the 16-column inner loop (int16 pairs, int32 sums, all exact). */
static void qg_micro_dispatch(int mr, int width, const uint8_t *A, ptrdiff_t lda, ptrdiff_t K,
                              const int8_t *b, int32_t *acc) {
    const int16_t *b16 = (const int16_t *)b;
    const ptrdiff_t G = (K + 1) >> 1;
    (void)width;
    for (int i = 0; i < mr; i++) {
        int32_t s[QG_NR];
        const uint8_t *a = A + i * lda;
        for (int j = 0; j < QG_NR; j++) s[j] = 0;
        for (ptrdiff_t g = 0; g < G; g++) {
            const int16_t *bg = b16 + g * 2 * QG_NR;
            int32_t a0 = a[2 * g];
            int32_t a1 = (2 * g + 1 < K) ? a[2 * g + 1] : 0;
            for (int j = 0; j < QG_NR; j++) s[j] += a0 * bg[2 * j] + a1 * bg[2 * j + 1];
        }
        for (int j = 0; j < QG_NR; j++) acc[i * QG_NR + j] = s[j];
    }
}
#endif

/* ---- output stage ---- */

/* acc rows of one micro-tile (row stride QG_NR) -> out rows m0.., columns n0..n0+w. corr[j] is
 * the column part of the zero-point correction, wz[j] multiplies the row sums rs[i]. */
static void qg_store(const int32_t *acc, int mr, ptrdiff_t w, ptrdiff_t m0, ptrdiff_t n0,
                     const int32_t *corr, const int32_t *wz, const int32_t *rs,
                     const qops_gemm_out *o) {
    for (int i = 0; i < mr; i++) {
        int32_t a[QG_NR];
        const int32_t *ai = acc + i * QG_NR;
        const uint32_t r = (uint32_t)rs[i];
        /* Wrapping uint32 arithmetic: exact whenever the true sum fits in int32. */
        for (ptrdiff_t j = 0; j < w; j++)
            a[j] = (int32_t)((uint32_t)ai[j] + (uint32_t)corr[j] - (uint32_t)wz[j] * r);
        if (o->kind == QOPS_GEMM_U8) {
            uint8_t *out = (uint8_t *)o->out + (m0 + i) * o->ldc + n0;
            const float *mult = o->mult + n0;
            const int32_t zp = o->out_zp;
            const float lo = (float)((o->relu ? zp : 0) - zp), hi = (float)(255 - zp);
            float y[QG_NR];
            if (o->bias) {
                const float *bias = o->bias + n0;
                for (ptrdiff_t j = 0; j < w; j++) y[j] = (float)a[j] + bias[j];
            } else {
                for (ptrdiff_t j = 0; j < w; j++) y[j] = (float)a[j];
            }
            for (ptrdiff_t j = 0; j < w; j++) {
                /* clamp(rint(z) + zp, lo', 255) == rint(clamp(z, lo'-zp, 255-zp)) + zp for
                 * integer bounds; clamping first keeps the conversion in range. NaN -> low. */
                float z = y[j] * mult[j];
                z = z > lo ? z : lo;
                z = z < hi ? z : hi;
                out[j] = (uint8_t)((int32_t)qops_rintf(z) + zp);
            }
        } else if (o->kind == QOPS_GEMM_F32) {
            float *out = (float *)o->out + (m0 + i) * o->ldc + n0;
            const float *mult = o->mult + n0;
            if (o->bias) {
                const float *bias = o->bias + n0;
                for (ptrdiff_t j = 0; j < w; j++) out[j] = fmaf((float)a[j], mult[j], bias[j]);
            } else {
                for (ptrdiff_t j = 0; j < w; j++) out[j] = fmaf((float)a[j], mult[j], 0.0f);
            }
            if (o->relu)
                for (ptrdiff_t j = 0; j < w; j++) out[j] = out[j] > 0.0f ? out[j] : 0.0f;
        } else {
            int32_t *out = (int32_t *)o->out + (m0 + i) * o->ldc + n0;
            for (ptrdiff_t j = 0; j < w; j++) out[j] = a[j];
        }
    }
}

/* Rows [0, M) x column panels [p0, p1), single-threaded. Panel outer: one weight panel
 * (K x QG_NR) is reused from L1/L2 by every row block. */
static void qg_panels(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                      const qops_gemm_b *B, ptrdiff_t p0, ptrdiff_t p1, const qops_gemm_out *o) {
    const ptrdiff_t N = B->N, K = B->K;
    int32_t acc[QG_MR * QG_NR] __attribute__((aligned(64)));
    int32_t corr[QG_NR], wz[QG_NR], rs[QG_MR];
    for (ptrdiff_t p = p0; p < p1; p++) {
        const ptrdiff_t n0 = p * QG_NR;
        const ptrdiff_t w = N - n0 < QG_NR ? N - n0 : QG_NR;
        const int width = (int)qg_panel_width(N, p);
        const int8_t *bp = qg_panel_ptr(B->data, K, p);
        for (ptrdiff_t j = 0; j < w; j++) {
            int32_t z = B->wzp ? B->wzp[n0 + j] : 0;
            wz[j] = z;
            /* K*a_zp*w_zp - a_zp*sum_k W[n,k], wrapping like the accumulator */
            corr[j] = (int32_t)((uint32_t)K * (uint32_t)a_zp * (uint32_t)z
                                - (uint32_t)a_zp * (uint32_t)B->wsum[n0 + j]);
        }
        for (ptrdiff_t m0 = 0, mr = 0; m0 < M; m0 += mr) {
            const ptrdiff_t left = M - m0;
            /* 7..9 rows left: two balanced tiles (4+3, 4+4, 5+4) rather than 6 + a thin one */
            mr = left > QG_MR && left < QG_MR + 4 ? (left + 1) / 2 : (left < QG_MR ? left : QG_MR);
            const uint8_t *Am = A + m0 * lda;
            qg_micro_dispatch((int)mr, width, Am, lda, K, bp, acc);
            for (int i = 0; i < mr; i++) {
                uint32_t s = 0;
                if (B->wzp)
                    for (ptrdiff_t k = 0; k < K; k++) s += Am[i * lda + k];
                rs[i] = (int32_t)s;
            }
            qg_store(acc, (int)mr, w, m0, n0, corr, wz, rs, o);
        }
    }
}

static void qops_gemm(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                      const qops_gemm_b *B, const qops_gemm_out *out) {
    if (M <= 0 || B->N <= 0) return;
    qg_panels(A, lda, M, a_zp, B, 0, qg_npanels(B->N), out);
}

static void qops_gemm_mt(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                         const qops_gemm_b *B, const qops_gemm_out *out, int nthreads) {
    if (M <= 0 || B->N <= 0) return;
    const ptrdiff_t P = qg_npanels(B->N);
    const ptrdiff_t nmb = (M + QG_MB - 1) / QG_MB;
    ptrdiff_t mb = (M + nmb - 1) / nmb;
    mb = ((mb + QG_MR - 1) / QG_MR) * QG_MR;
    const ptrdiff_t ntiles = P * nmb;
    const size_t esize = out->kind == QOPS_GEMM_U8 ? 1 : 4;
    if (nthreads < 1) nthreads = 1;
    if (nthreads > ntiles) nthreads = (int)ntiles;
    /* Tiles panel-major: a thread's tiles share weight panels; no two tiles share outputs. */
    #pragma omp parallel for schedule(static) num_threads(nthreads)
    for (ptrdiff_t t = 0; t < ntiles; t++) {
        const ptrdiff_t p = t / nmb, r0 = (t % nmb) * mb;
        if (r0 < M) {
            const ptrdiff_t rows = M - r0 < mb ? M - r0 : mb;
            qops_gemm_out o = *out;
            o.out = (char *)out->out + (size_t)(r0 * out->ldc) * esize;
            qg_panels(A + r0 * lda, lda, rows, a_zp, B, p, p + 1, &o);
        }
    }
}

#endif
