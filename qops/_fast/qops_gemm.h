/* qops_gemm.h: the int8 GEMM core (uint8 activations x int8 weights -> exact int32), with the
 * output stage of docs/semantics.md §8-§10 fused into the store.
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
 * Paths: AVX-512 VNNI (vpdpbusd on 4-byte groups, 64-column panels), with AMX-INT8 tiles for
 * blocks of 32 or 16 rows when K is a multiple of 64, the CPU has AMX and the module asked for
 * it (qops_gemm_amx); AVX2 (4-byte groups, 16-column panels, two exact kernels, chosen per
 * panel and micro-tile, see "AVX2" below); plain C for the baseline build (int16 pairs, 16-column
 * panels).
 *
 * AVX2: vpmaddubsw multiplies u8 by s8 and sums adjacent pairs into int16 *with saturation*
 * (PyTorch's fbgemm AVX2 kernels accept the saturation; qops may not). Two exact uses:
 *   "pairsafe": vpmaddubsw then vpmaddwd with ones (vpdpbusd emulated), exact when no pair
 *       sum can leave int16: xmax * S <= 32767, where xmax = the largest A value of the
 *       micro-tile's rows (found per call, qg_block) and S = the panel's largest per-sign sum
 *       over a weight pair (sum of the positive parts, or of the magnitudes of the negative
 *       parts, of W[n,2i], W[n,2i+1];
 *       at most 256; stored at pack time). Always true for xmax <= 127 (dynamic linear with
 *       reduce_range quantizes to [0, 127]) and for S <= 128 (most trained weights).
 *       Its "double" form adds two groups' pair sums in int16 before widening (QG_DBL_ROW),
 *       exact when xmax * S4 <= 32767 (S4: the same sum over the four weights one int16 lane
 *       then adds; k order only): 6 multiply uops per 64 products instead of 8.
 *   "nibble": any weights. A is split x = 16*xh + xl (xh, xl in [0, 15]); each vpmaddubsw
 *       pair sum is then at most 2*15*128 = 3840 in magnitude, so 8 of them (32 values of k)
 *       add up in int16 (<= 30720) before one vpmaddwd by 1 (xl) or 16 (xh) widens them:
 *       2.25 multiply uops per 32 products (pairsafe: 2). The former path, weights widened to
 *       int16 and vpmaddwd + vpaddd per 16 products, was slower on Zen 3. Taken where more
 *       than a quarter of a block's rows need it (their nibbles zero padded to whole chunks
 *       of 32 values); a tile that needs it otherwise runs the pairsafe kernel twice instead,
 *       on min(x, 128) and the rest (qg_split).
 * A is read in place when K is whole groups of 4, else repacked per call (zero padded to
 * them), and nibble-split when a panel needs it, in row blocks of bounded size; panels packed
 * with k reordered ("Pairing" below) shuffle the rows of each micro-tile first. The kernels
 * are inline asm: GCC spills the 12-16 accumulators of the intrinsics versions.
 */
#ifndef QOPS_GEMM_H
#define QOPS_GEMM_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>
#include "qops_common.h"
#include "qops_transpose.h"
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
#define QG_KG 4             /* k values per packed group (one 32-bit lane) */
#define QG_CHUNK 8          /* groups per int16 accumulation run of the nibble kernel */
#else
#define QG_NR 16
#define QG_KG 2
#endif
#define QG_MR 6             /* rows per micro-tile: 6 x 4 zmm = 24 accumulators on VNNI */
#define QG_MB 96            /* target rows per thread tile (A block stays in L2) */

#ifdef QG_VNNI
#include "qops_amx.h"
#endif
#ifdef QOPS_AMX
#define QG_AMX 1
#define QG_AMX_ROWS 32      /* rows per AMX block: two 16-row A tiles */
/* 1 when the AMX path runs: set by qops_gemm_amx(), off until a module asks for it. */
static int qg_amx_state = 0;
#endif

/* Turn the AMX-INT8 path on (on = 1: if qops_amx_request() grants it), off (0), or ask (-1);
 * returns whether it is on. */
static int qops_gemm_amx(int on) {
#ifdef QG_AMX
    if (on == 0) qg_amx_state = 0;
    if (on == 1) qg_amx_state = qops_amx_request();
    return qg_amx_state;
#else
    (void)on;
    return 0;
#endif
}

#ifdef QG_AMX
/* Whether a GEMM of depth K takes the AMX blocks (its rows permitting). */
static inline int qg_amx_k(ptrdiff_t K) { return qg_amx_state && K > 0 && K % 64 == 0; }
#endif

#define QG_INLINE static inline __attribute__((always_inline))

static inline ptrdiff_t qg_npanels(ptrdiff_t N) { return (N + QG_NR - 1) / QG_NR; }
/* weight panels of N output columns (QG_NR each): the unit of qops_gemm_rows_panels */
static inline ptrdiff_t qops_gemm_npanels(ptrdiff_t N) { return qg_npanels(N); }
/* Groups of QG_KG values of k, zero weights past K. AVX2 pairs and reorders k within blocks
 * of 16 values, the last block as long as the groups make it (4, 8, 12 or 16); the nibble
 * kernel runs where the groups make whole chunks of QG_CHUNK. */
static inline ptrdiff_t qg_groups(ptrdiff_t K) { return (K + QG_KG - 1) / QG_KG; }

/* Bytes of one packed group row (all columns of a panel for QG_KG values of k). */
#if defined(QG_VNNI) || defined(QG_AVX2)
static inline ptrdiff_t qg_panel_width(ptrdiff_t N, ptrdiff_t p) {
#ifdef QG_AVX2
    (void)N; (void)p;
    return QG_NR;
#else
    /* The last panel is only as wide as it must be (in 16-column vectors). */
    ptrdiff_t left = N - p * QG_NR;
    return left >= QG_NR ? QG_NR : ((left + 15) / 16) * 16;
#endif
}
#define QG_ELEM_BYTES 1
#else
static inline ptrdiff_t qg_panel_width(ptrdiff_t N, ptrdiff_t p) { (void)N; (void)p; return QG_NR; }
#define QG_ELEM_BYTES 2     /* weights stored widened to int16 */
#endif

static inline ptrdiff_t qops_gemm_packed_size(ptrdiff_t N, ptrdiff_t K) {
    ptrdiff_t per_panel = qg_groups(K) * QG_KG * QG_NR * QG_ELEM_BYTES;
    ptrdiff_t size = qg_npanels(N) * per_panel;
#ifdef QG_AVX2
    /* after the panels in k order: the panels again with k reordered (see "Pairing" below),
     * then per panel S, the pairing flag, the k order, S of the reordered copy and S4 in k
     * order (QG_DBL_ROW) */
    size += qg_npanels(N) * (per_panel + 4 * (ptrdiff_t)sizeof(int32_t) + qg_groups(K) * QG_KG);
    /* the nibble kernel reads whole chunks: up to a chunk of groups past the last panel, times
     * zero nibbles (qg_kc) */
    size += QG_CHUNK * QG_KG * QG_NR;
#endif
    return size > 0 ? size : 1;
}

static inline const int8_t *qg_panel_ptr(const int8_t *data, ptrdiff_t K, ptrdiff_t p) {
    return data + p * qg_groups(K) * QG_KG * QG_NR * QG_ELEM_BYTES;
}

#ifdef QG_AVX2
/* The reordered copy of panel p (see "Pairing"). */
static inline const int8_t *qg_panel_re(const int8_t *data, ptrdiff_t N, ptrdiff_t K,
                                        ptrdiff_t p) {
    return qg_panel_ptr(data, K, qg_npanels(N) + p);
}

/* S per panel (int32 x P), then the flags (int32 x P), the orders (Kp bytes x P), the
 * reordered copies' S (int32 x P) and S4 per panel in k order (int32 x P). */
static inline int32_t *qg_meta(const int8_t *data, ptrdiff_t N, ptrdiff_t K) {
    return (int32_t *)(void *)qg_panel_ptr(data, K, 2 * qg_npanels(N));
}
#endif

#ifdef QG_AVX2
/* Pairing (AVX2). vpmaddubsw sums the products of k values 2i and 2i+1; that sum can leave
 * int16 only where a column has two weights of one sign whose magnitudes add up past 128
 * (255 * 128 <= 32767). Few weights are that large, so for the 16 columns of one panel a
 * reordering of k that pairs no two such weights usually exists: k is reordered within
 * blocks of 16 values (one vpshufb lane), each block's pairing found by a small search at
 * pack time, and a second copy of the panel's weights is packed in that order. Its S is then
 * <= 128 and the pairsafe kernel runs on it for any input, on A rows put in the same order
 * (a vpshufb per 32 bytes, two blocks) just before the micro-kernel. The copy in k order
 * stays for the tiles that need no reordering: inputs up to 127 (PyTorch's x86 engine
 * calibrates activations with reduce_range) are pair-safe on any weights (127 * 256 <=
 * 32767), so they skip reordering their rows, a pass over A per tile and panel; the split
 * and nibble kernels use it too. A panel with no pairing for some block has no reordered copy.
 * Layout: the panels in k order, the reordered panels (zeros where there is none), then
 * qg_meta: S per panel in k order (int32 x P), the flags (int32 x P, 1 = reordered), the
 * orders (Kp bytes a panel: position k holds k value k - k % 16 + order[k] of W; values
 * past K pick zero padding), S per reordered panel (int32 x P; = S where none), then S4 in k
 * order (int32 x P; QG_DBL_ROW). The double kernel runs on the copy in k order only: on a
 * reordered copy (S4 <= 2 S <= 256, inputs up to 127 would fit) reordering each tile's rows
 * per panel costs what the kernel saves. */

/* whether k values a and b may share a vpmaddubsw pair: no column's same-sign sum past 128 */
static int qg_pair_fits(const int8_t *T, ptrdiff_t N, int a, int b) {
    for (ptrdiff_t n = 0; n < N; n++) {
        int32_t x = T[n * 16 + a], y = T[n * 16 + b];
        if ((x > 0 && y > 0 && x + y > 128) || (x < 0 && y < 0 && x + y < -128)) return 0;
    }
    return 1;
}

/* A perfect matching of the 16 nodes of `adj` (bit b of adj[a]: a and b may pair) among the
 * nodes of `left`, into pairs[]; the node with the fewest choices first. 0 if none is found
 * within *budget steps. */
static int qg_match(const uint16_t *adj, unsigned left, uint8_t *pairs, int *budget) {
    if (!left) return 1;
    if (--*budget < 0) return 0;
    int u = -1, best = 99;
    for (int a = 0; a < 16; a++) {
        if (!(left >> a & 1)) continue;
        int c = __builtin_popcount(adj[a] & left & ~(1u << a));
        if (c < best) { best = c; u = a; }
    }
    unsigned cand = adj[u] & left & ~(1u << u);
    while (cand) {
        int v = __builtin_ctz(cand);
        cand &= cand - 1;
        pairs[0] = (uint8_t)u;
        pairs[1] = (uint8_t)v;
        if (qg_match(adj, left & ~(1u << u) & ~(1u << v), pairs + 2, budget)) return 1;
    }
    return 0;
}

/* order[0..Kp): a pairing order of the k values of W's N rows, block by block (identity
 * where the given pairs already fit). 0 when some block has none. */
static int qg_pair_order(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
                         ptrdiff_t Kp, uint8_t *order) {
    int8_t *T = (int8_t *)malloc((size_t)(N > 0 ? N : 1) * 16);
    if (!T) return 0;
    int ok = 1;
    for (ptrdiff_t k0 = 0; k0 < Kp && ok; k0 += 16) {
        /* the block's weights, 16 a column (zero past K); lb values (the last block may be
         * shorter), paired among themselves */
        const int lb = Kp - k0 < 16 ? (int)(Kp - k0) : 16;
        for (ptrdiff_t n = 0; n < N; n++)
            for (int a = 0; a < 16; a++)
                T[n * 16 + a] = k0 + a < K ? W[n * ldw + k0 + a] : 0;
        uint16_t adj[16] = {0};
        for (int a = 0; a < lb; a++)
            for (int b = a + 1; b < lb; b++)
                if (qg_pair_fits(T, N, a, b)) {
                    adj[a] |= (uint16_t)(1u << b);
                    adj[b] |= (uint16_t)(1u << a);
                }
        int given = 1;
        for (int a = 0; a < lb; a += 2) given &= adj[a] >> (a + 1) & 1;
        uint8_t pairs[16];
        int budget = 4096;
        if (given) {
            for (int a = 0; a < lb; a++) pairs[a] = (uint8_t)a;
        } else if (!qg_match(adj, (1u << lb) - 1, pairs, &budget)) {
            ok = 0;
        }
        for (int a = 0; a < lb; a++) order[k0 + a] = pairs[a];
    }
    free(T);
    return ok;
}
#endif

/* Panel p of W (row n at W + n*ldw) into base: k value src(k) at packed position k, with
 * order the panel's k order (or NULL: k in order). */
static void qg_pack_panel(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
                          ptrdiff_t p, const uint8_t *order, int8_t *base) {
    const ptrdiff_t w = qg_panel_width(N, p), Kp = qg_groups(K) * QG_KG;
#if QG_ELEM_BYTES == 1
    if (!order) {
        /* k in order: whole groups of QG_KG bytes move at once (the buffer is zeroed) */
        const ptrdiff_t G = K / QG_KG;
        for (ptrdiff_t j = 0; j < w && p * QG_NR + j < N; j++) {
            const int8_t *row = W + (p * QG_NR + j) * ldw;
            for (ptrdiff_t g = 0; g < G; g++)
                memcpy(base + (g * w + j) * QG_KG, row + g * QG_KG, QG_KG);
            for (ptrdiff_t k = G * QG_KG; k < K; k++)
                base[(G * w + j) * QG_KG + k % QG_KG] = row[k];
        }
        return;
    }
#endif
    for (ptrdiff_t j = 0; j < w && p * QG_NR + j < N; j++) {
        const int8_t *row = W + (p * QG_NR + j) * ldw;
        for (ptrdiff_t k = 0; k < Kp; k++) {
            const ptrdiff_t src = order ? k - k % 16 + order[k] : k;
            if (src >= K) continue;
            ptrdiff_t idx = ((k / QG_KG) * w + j) * QG_KG + k % QG_KG;
#if QG_ELEM_BYTES == 1
            base[idx] = row[src];
#else
            ((int16_t *)base)[idx] = row[src];
#endif
        }
    }
}

#ifdef QG_AVX2
/* S of panel p in the given k order (or NULL): the largest per-sign sum over a pair (k
 * even, k + 1, in packed order) of one column. quads: S4 instead, the same over the four k
 * values one int16 lane of QG_DBL_ROW adds (4g + 2i, +1, +4, +5 for g even, i = 0, 1; the
 * pairs of a last odd group alone). */
static int32_t qg_pair_bound_any(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
                                 ptrdiff_t p, const uint8_t *order, int quads) {
    const ptrdiff_t Kp = qg_groups(K) * QG_KG;
    int32_t m = 0;
    for (ptrdiff_t j = 0; j < QG_NR && p * QG_NR + j < N; j++) {
        const int8_t *row = W + (p * QG_NR + j) * ldw;
        for (ptrdiff_t k = 0; k < Kp; k += 2) {
            /* the lane's k values: k, k + 1, and with quads (k in the even group of a pair
             * of groups) k + 4, k + 5 */
            int n = 2;
            if (quads && (k / 4) % 2 == 1) continue;        /* added with k - 4 */
            if (quads && k + 4 < Kp) n = 4;
            int32_t pos = 0, neg = 0;
            for (int t = 0; t < n; t++) {
                const ptrdiff_t kk = k + t % 2 + (t / 2) * 4;
                const ptrdiff_t src = order ? kk - kk % 16 + order[kk] : kk;
                const int32_t w = src < K ? row[src] : 0;
                pos += w > 0 ? w : 0;
                neg += w < 0 ? -w : 0;
            }
            m = pos > m ? pos : m;
            m = neg > m ? neg : m;
        }
    }
    return m;
}

/* The same bound in k order, 32 values of a column at a time: the positive parts and the
 * magnitudes of the negative ones (unsigned bytes, 128 included) summed in pairs by
 * vpmaddubsw with ones (at most 256: exact), with quads each pair plus the pair two lanes on
 * (within 16 bytes) where a lane starts an even group; the column first copied into a
 * zero-padded row (matmul packs an operand on every call). */
static int32_t qg_pair_bound(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
                             ptrdiff_t p, const uint8_t *order, int quads) {
    const ptrdiff_t Kp = qg_groups(K) * QG_KG, K32 = (Kp + 31) / 32 * 32;
    int8_t buf[1024 + 32];
    if (order || Kp > 1024)
        return qg_pair_bound_any(W, ldw, N, K, p, order, quads);
    const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi8(1);
    /* int16 lanes 4i and 4i + 1 start an even group of four k values */
    const __m256i even = _mm256_set1_epi64x(0x00000000FFFFFFFFLL);
    __m256i mx = zero;
    for (ptrdiff_t j = 0; j < QG_NR && p * QG_NR + j < N; j++) {
        memset(buf, 0, (size_t)K32);
        memcpy(buf, W + (p * QG_NR + j) * ldw, (size_t)K);
        for (ptrdiff_t k = 0; k < K32; k += 32) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(buf + k));
            const __m256i pos = _mm256_max_epi8(v, zero);
            const __m256i neg = _mm256_sub_epi8(zero, _mm256_min_epi8(v, zero));
            __m256i ps = _mm256_maddubs_epi16(pos, ones), ns = _mm256_maddubs_epi16(neg, ones);
            if (quads) {
                ps = _mm256_and_si256(_mm256_add_epi16(ps, _mm256_srli_si256(ps, 4)), even);
                ns = _mm256_and_si256(_mm256_add_epi16(ns, _mm256_srli_si256(ns, 4)), even);
            }
            mx = _mm256_max_epi16(mx, _mm256_max_epi16(ps, ns));
        }
    }
    int16_t lanes[16];
    _mm256_storeu_si256((__m256i *)(void *)lanes, mx);
    int32_t m = 0;
    for (int i = 0; i < 16; i++) m = lanes[i] > m ? lanes[i] : m;
    return m;
}
#endif

static void qops_gemm_pack_ex(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
                              int8_t *packed, int32_t *wsum, int reorder) {
    ptrdiff_t P = qg_npanels(N);
    memset(packed, 0, (size_t)qops_gemm_packed_size(N, K));
    for (ptrdiff_t n = 0; n < N; n++) {
        int32_t s = 0;
        for (ptrdiff_t k = 0; k < K; k++) s += W[n * ldw + k];
        wsum[n] = s;
    }
#ifdef QG_AVX2
    const ptrdiff_t Kp = qg_groups(K) * QG_KG;
    int32_t *S = qg_meta(packed, N, K), *flag = S + P;
    uint8_t *orders = (uint8_t *)(flag + P);
    int32_t *Sr = (int32_t *)(void *)(orders + P * Kp), *S4 = Sr + P;
#endif
    for (ptrdiff_t p = 0; p < P; p++) {
        qg_pack_panel(W, ldw, N, K, p, NULL, (int8_t *)qg_panel_ptr(packed, K, p));
#ifdef QG_AVX2
        /* the panel's k order (see "Pairing"): a reordered copy where a pair in W's own order
         * could saturate and a reordering avoids every such pair */
        uint8_t *order = orders + p * Kp;
        const ptrdiff_t cols = N - p * QG_NR < QG_NR ? N - p * QG_NR : QG_NR;
        flag[p] = 0;
        /* (the search costs more than a product gains for a matrix packed per call) */
        if (reorder && qg_pair_order(W + p * QG_NR * ldw, ldw, cols, K, Kp, order))
            for (ptrdiff_t k = 0; k < Kp; k++) flag[p] |= order[k] != k % 16;
        if (!flag[p])
            for (ptrdiff_t k = 0; k < Kp; k++) order[k] = (uint8_t)(k % 16);
        S[p] = qg_pair_bound(W, ldw, N, K, p, NULL, 0);
        S4[p] = qg_pair_bound(W, ldw, N, K, p, NULL, 1);
        Sr[p] = S[p];
        if (flag[p]) {
            qg_pack_panel(W, ldw, N, K, p, order, (int8_t *)qg_panel_re(packed, N, K, p));
            Sr[p] = qg_pair_bound(W, ldw, N, K, p, order, 0);
        }
#endif
    }
#ifndef QG_AVX2
    (void)reorder;
#endif
}

static void qops_gemm_pack(const int8_t *W, ptrdiff_t ldw, ptrdiff_t N, ptrdiff_t K,
                           int8_t *packed, int32_t *wsum) {
    qops_gemm_pack_ex(W, ldw, N, K, packed, wsum, 1);
}

/* qops_gemm_pack_ex (no reordering) of W = B^T, B being K rows of N bytes (ldb apart), each
 * byte xor `flip` (0x80: a uint8 operand as int8, less 128), through tmp (N x K bytes): a
 * matmul's second operand packed by the task that multiplies it. */
static void qops_gemm_pack_t(const uint8_t *B, ptrdiff_t ldb, ptrdiff_t N, ptrdiff_t K,
                             uint8_t flip, uint8_t *tmp, int8_t *packed, int32_t *wsum) {
    qops_transpose8_block(B, ldb, tmp, K, 0, K, 0, N);
    if (flip)
        for (ptrdiff_t i = 0; i < N * K; i++) tmp[i] ^= flip;
    qops_gemm_pack_ex((const int8_t *)tmp, K, N, K, packed, wsum, 0);
}

/* The depth the packed weight is padded to (with zero weights): A rows this long, whose
 * bytes past K hold a_zp, are read in place (AVX2: no repacking copy) and add nothing. */
static inline ptrdiff_t qops_gemm_kpad(ptrdiff_t K) { return qg_groups(K) * QG_KG; }

#ifdef QG_AVX2
/* Panel p's k order (Kp bytes, within blocks of 16) when it has a reordered copy, else NULL. */
static inline const uint8_t *qg_order(const qops_gemm_b *B, ptrdiff_t p) {
    const ptrdiff_t P = qg_npanels(B->N), G = qg_groups(B->K);
    const int32_t *flag = qg_meta(B->data, B->N, B->K) + P;
    return flag[p] ? (const uint8_t *)(flag + P) + p * G * QG_KG : NULL;
}

/* S of the panels in k order (x P), and of their reordered copies (x P, = S where none). */
static inline const int32_t *qg_s(const qops_gemm_b *B) { return qg_meta(B->data, B->N, B->K); }
static inline const int32_t *qg_s_re(const qops_gemm_b *B) {
    const ptrdiff_t P = qg_npanels(B->N);
    return (const int32_t *)(const void *)((const uint8_t *)(qg_s(B) + 2 * P) +
                                           P * qg_groups(B->K) * QG_KG);
}

/* The largest S over the panels, each in the better of its two orders (*seff), in k order
 * (*sid), and the largest S4 (in k order, *s4). */
static inline void qg_s_max(const qops_gemm_b *B, int32_t *seff, int32_t *sid,
                            int32_t *s4) {
    const ptrdiff_t P = qg_npanels(B->N);
    const int32_t *S = qg_s(B), *Sr = qg_s_re(B), *S4 = Sr + P;
    *seff = *sid = *s4 = 0;
    for (ptrdiff_t p = 0; p < P; p++) {
        const int32_t e = Sr[p] < S[p] ? Sr[p] : S[p];
        *seff = e > *seff ? e : *seff;
        *sid = S[p] > *sid ? S[p] : *sid;
        *s4 = S4[p] > *s4 ? S4[p] : *s4;
    }
}
#endif

/* How many column panels of the packed weight have k reordered so that no vpmaddubsw pair
 * can saturate (AVX2 builds; see "Pairing"; 0 elsewhere). */
static inline ptrdiff_t qops_gemm_packed_paired(const int8_t *data, ptrdiff_t N, ptrdiff_t K) {
#ifdef QG_AVX2
    qops_gemm_b b;
    ptrdiff_t n = 0;
    b.data = data;
    b.N = N;
    b.K = K;
    for (ptrdiff_t p = 0; p < qg_npanels(N); p++) n += qg_order(&b, p) != NULL;
    return n;
#else
    (void)data; (void)N; (void)K;
    return 0;
#endif
}

#if defined(__AVX2__)
/* The U8 formula for 8 columns less its zero point: rint(clamp((y + bias) * mult, lo, hi))
 * as int32 (bias NULL: none), lo and hi the clamp less zp (qg_store's scalar loop). */
static inline __m256i qg_u8_core(__m256 y, const float *bias, const float *mult, __m256 lo,
                                 __m256 hi) {
    if (bias) y = _mm256_add_ps(y, _mm256_loadu_ps(bias));
    y = _mm256_mul_ps(y, _mm256_loadu_ps(mult));
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(y, lo), hi));
}
#endif

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

/* The micro-kernel over rows given by pointer, their k values in ntaps runs of 4 cg bytes:
 * run t of row i at rp[i] + toff[t] (a conv's window read in place, tap by tap, instead of
 * copied into an im2col row). The packed groups follow in the same (tap, channel) order. */
QG_INLINE void qg_micro_taps(const int mr, const int nv, const uint8_t *const *rp,
                             const ptrdiff_t *toff, int ntaps, ptrdiff_t cg, const int8_t *b,
                             int32_t *acc_out) {
    const __m512i z = _mm512_setzero_si512();
    __m512i c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    __m512i c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    __m512i c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
    __m512i b0 = z, b1 = z, b2 = z, b3 = z;
    const ptrdiff_t step = nv * 64;
    /* rows past mr read row 0 (never used): no pointer past the caller's array */
    const uint8_t *r0 = rp[0], *r1 = rp[mr > 1 ? 1 : 0], *r2 = rp[mr > 2 ? 2 : 0];
    const uint8_t *r3 = rp[mr > 3 ? 3 : 0], *r4 = rp[mr > 4 ? 4 : 0], *r5 = rp[mr > 5 ? 5 : 0];
    for (int t = 0; t < ntaps; t++) {
        const ptrdiff_t to = toff[t];
        const uint8_t *a0 = r0 + to, *a1 = r1 + to, *a2 = r2 + to, *a3 = r3 + to;
        const uint8_t *a4 = r4 + to, *a5 = r5 + to;
        for (ptrdiff_t g = 0; g < cg; g++) {
            QG_LOADB(b)
            const ptrdiff_t o = 4 * g;
            QG_ROW(0, qg_load4(a0 + o)) QG_ROW(1, qg_load4(a1 + o)) QG_ROW(2, qg_load4(a2 + o))
            QG_ROW(3, qg_load4(a3 + o)) QG_ROW(4, qg_load4(a4 + o)) QG_ROW(5, qg_load4(a5 + o))
            b += step;
        }
    }
    QG_STORE(0) QG_STORE(1) QG_STORE(2) QG_STORE(3) QG_STORE(4) QG_STORE(5)
}

/* mr rows of A (lda apart), K values each (the K % 4 tail: qg_micro_tail) */
QG_INLINE void qg_micro(const int mr, const int nv, const uint8_t *A, ptrdiff_t lda, ptrdiff_t K,
                        const int8_t *b, int32_t *acc_out) {
    static const ptrdiff_t at0 = 0;
    const uint8_t *rp[QG_MR] = {A, A + lda, A + 2 * lda, A + 3 * lda, A + 4 * lda, A + 5 * lda};
    qg_micro_taps(mr, nv, rp, &at0, 1, K >> 2, b, acc_out);
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

#define QG_TAPS_MR(NV) \
    switch (mr) { \
    case 1: qg_micro_taps(1, NV, rp, toff, ntaps, cg, b, acc); break; \
    case 2: qg_micro_taps(2, NV, rp, toff, ntaps, cg, b, acc); break; \
    case 3: qg_micro_taps(3, NV, rp, toff, ntaps, cg, b, acc); break; \
    case 4: qg_micro_taps(4, NV, rp, toff, ntaps, cg, b, acc); break; \
    case 5: qg_micro_taps(5, NV, rp, toff, ntaps, cg, b, acc); break; \
    default: qg_micro_taps(6, NV, rp, toff, ntaps, cg, b, acc); break; }

static void qg_micro_taps_dispatch(int mr, int width, const uint8_t *const *rp,
                                   const ptrdiff_t *toff, int ntaps, ptrdiff_t cg,
                                   const int8_t *b, int32_t *acc) {
    switch (width / 16) {
    case 1: QG_TAPS_MR(1) break;
    case 2: QG_TAPS_MR(2) break;
    case 3: QG_TAPS_MR(3) break;
    default: QG_TAPS_MR(4) break;
    }
}

#elif defined(QG_AVX2)
/* A of one call (a block of rows), repacked for the two kernels; see the header comment. */
typedef struct {
    const uint8_t *raw;     /* rows of Kp bytes, zero padded (pairsafe kernel), or NULL */
    const uint8_t *nib;     /* rows of 2 * qg_kc(Kp) bytes: per group the 4 low nibbles, then
                             * the 4 high (zero past Kp) */
    ptrdiff_t Kp;           /* 4 * groups */
    ptrdiff_t lr;           /* row stride of raw: Kp, or A's own where A is used in place */
    uint8_t *tmp;           /* per thread QG_TMP_ROWS * Kp bytes: a micro-tile's rows
                             * reordered, or split (qg_split) */
    int32_t xmax;           /* largest A value of the block */
    const uint8_t *rmax;    /* per row of the block its largest value, or NULL (all xmax) */
} qg_apk;

/* The nibble kernel's depth: Kp in whole chunks. Its groups past Kp multiply zero nibbles
 * by whatever weights follow (the next panel's, or the packed buffer's slack). */
static inline ptrdiff_t qg_kc(ptrdiff_t Kp) {
    return (Kp + QG_CHUNK * QG_KG - 1) / (QG_CHUNK * QG_KG) * (QG_CHUNK * QG_KG);
}

/* rows of a thread's scratch: a micro-tile reordered, or its two halves of qg_split */
#define QG_TMP_ROWS (2 * QG_MR)

static const int16_t qg_ones16[16] __attribute__((aligned(32))) =
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const int16_t qg_sixteens16[16] __attribute__((aligned(32))) =
    {16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16};

/* Pairsafe kernel, one row and one group: x0 += madd(maddubs(a, b[0:32]), 1), x1 likewise
 * with b[32:64]. In asm with the weights as memory operands: the intrinsics version makes GCC
 * keep both weight vectors in registers and spill an accumulator. */
#define QG_SAFE_ROW(x0, x1, ap, bp) { \
    __m256i av_, t_; \
    __asm__("vpbroadcastd %[a], %[av]\n\t" \
            "vpmaddubsw %[b0], %[av], %[t]\n\t" \
            "vpmaddwd %[one], %[t], %[t]\n\t" \
            "vpaddd %[t], %[c0], %[c0]\n\t" \
            "vpmaddubsw %[b1], %[av], %[av]\n\t" \
            "vpmaddwd %[one], %[av], %[av]\n\t" \
            "vpaddd %[av], %[c1], %[c1]" \
            : [c0] "+x"(x0), [c1] "+x"(x1), [av] "=&x"(av_), [t] "=&x"(t_) \
            : [a] "m"(*(const int32_t *)(const void *)(ap)), \
              [b0] "m"(*(const __m256i *)(const void *)(bp)), \
              [b1] "m"(*(const __m256i *)(const void *)((bp) + 32)), [one] "x"(one)); }

/* Two groups g, g + 1 of one row summed in int16 before one widening (the "double" kernel):
 * x0 += madd(maddubs(a_g, b[0:32]) + maddubs(a_g+1, b[64:96]), 1), x1 likewise with b[32:64]
 * and b[96:128]. Each int16 lane then adds four products, k values 4g+2i, 4g+2i+1, 4g+4+2i,
 * 4g+5+2i (i = 0, 1): exact where the tile's largest value times S4, the panel's largest
 * per-sign sum over those quads, is at most 32767. 6 multiply uops per 64 products of a row
 * instead of 8. Run on at most 3 rows a pass (qg_dbl_mr): 6 accumulators, 4 temporaries and
 * the ones in registers. With 6 rows the ones would have to be a memory operand (12
 * accumulators and 4 temporaries fill the 16 registers), and the extra loads cancel the
 * saved multiplies. */
#define QG_DBL_ROW(x0, x1, ap, bp) { \
    __m256i av_, aw_, t_, u_; \
    __asm__("vpbroadcastd %[a0], %[av]\n\t" \
            "vpbroadcastd %[a1], %[aw]\n\t" \
            "vpmaddubsw %[b0], %[av], %[t]\n\t" \
            "vpmaddubsw %[b2], %[aw], %[u]\n\t" \
            "vpaddw %[u], %[t], %[t]\n\t" \
            "vpmaddwd %[one], %[t], %[t]\n\t" \
            "vpaddd %[t], %[c0], %[c0]\n\t" \
            "vpmaddubsw %[b1], %[av], %[av]\n\t" \
            "vpmaddubsw %[b3], %[aw], %[aw]\n\t" \
            "vpaddw %[aw], %[av], %[av]\n\t" \
            "vpmaddwd %[one], %[av], %[av]\n\t" \
            "vpaddd %[av], %[c1], %[c1]" \
            : [c0] "+x"(x0), [c1] "+x"(x1), [av] "=&x"(av_), [aw] "=&x"(aw_), [t] "=&x"(t_), \
              [u] "=&x"(u_) \
            : [a0] "m"(*(const int32_t *)(const void *)(ap)), \
              [a1] "m"(*(const int32_t *)(const void *)((ap) + 4)), \
              [b0] "m"(*(const __m256i *)(const void *)(bp)), \
              [b1] "m"(*(const __m256i *)(const void *)((bp) + 32)), \
              [b2] "m"(*(const __m256i *)(const void *)((bp) + 64)), \
              [b3] "m"(*(const __m256i *)(const void *)((bp) + 96)), [one] "x"(one)); }

/* The uint8 output stage of one panel, fused into the pairsafe kernel: the formulas of
 * qg_store for 16 (or the first 8) columns, with the column terms gathered once per panel
 * (qg_os_init) and each row's accumulators requantized from their registers. For
 * QOPS_GEMM_U8 without weight zero points, the common case of conv and static linear. */
typedef struct {
    int32_t corr[QG_NR] __attribute__((aligned(32)));
    float bias[QG_NR] __attribute__((aligned(32)));     /* 0 where the layer has none */
    float mult[QG_NR] __attribute__((aligned(32)));
    float lo, hi;           /* the clamp, less zp (qg_u8_core) */
    int16_t zp;
    int half;               /* 8 columns: the panel's last, N % 16 == 8 */
    uint8_t *out;           /* row m0's first column of the panel */
    ptrdiff_t ldc;
} qg_os;

/* one row: c0, c1 = its columns 0-7 and 8-15 */
static inline void qg_os_row(__m256i c0, __m256i c1, const qg_os *s, uint8_t *out) {
    const __m256 lo = _mm256_set1_ps(s->lo), hi = _mm256_set1_ps(s->hi);
    const __m256i q0 = qg_u8_core(
        _mm256_cvtepi32_ps(_mm256_add_epi32(c0, _mm256_load_si256((const __m256i *)s->corr))),
        s->bias, s->mult, lo, hi);
    if (s->half) {
        /* int32 in [-255, 255] -> int16 (exact), + zp -> [0, 255] -> bytes */
        __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q0), _mm256_extracti128_si256(q0, 1));
        h = _mm_add_epi16(h, _mm_set1_epi16(s->zp));
        _mm_storel_epi64((__m128i *)out, _mm_packus_epi16(h, h));
        return;
    }
    const __m256i q1 = qg_u8_core(
        _mm256_cvtepi32_ps(_mm256_add_epi32(c1, _mm256_load_si256((const __m256i *)(s->corr + 8)))),
        s->bias + 8, s->mult + 8, lo, hi);
    /* packs interleaves the lanes (0-3, 8-11 | 4-7, 12-15); vpermq puts them in order */
    __m256i p = _mm256_packs_epi32(q0, q1);
    p = _mm256_add_epi16(_mm256_permute4x64_epi64(p, 0xD8), _mm256_set1_epi16(s->zp));
    _mm_storeu_si128((__m128i *)out, _mm_packus_epi16(_mm256_castsi256_si128(p),
                                                      _mm256_extracti128_si256(p, 1)));
}

/* os: the output stage to apply (rows' outputs written), or NULL (acc_out written); dbl: the
 * double kernel (QG_DBL_ROW) on pairs of groups, the last odd group alone */
QG_INLINE void qg_safe(const int mr, const int dbl, const uint8_t *A, ptrdiff_t lda,
                       ptrdiff_t G, const int8_t *b, int32_t *acc_out, const qg_os *os) {
    const __m256i z = _mm256_setzero_si256();
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z;
    __m256i c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
    const uint8_t *a0 = A, *a1 = A + lda, *a2 = A + 2 * lda, *a3 = A + 3 * lda;
    const uint8_t *a4 = A + 4 * lda, *a5 = A + 5 * lda;
    const __m256i one = _mm256_load_si256((const __m256i *)qg_ones16);
    /* STEP (QG_SAFE_ROW or QG_DBL_ROW) on each row of the tile at k offset o */
#define QG_ROWS(STEP, o) { \
        STEP(c00, c01, a0 + (o), b) \
        if (mr > 1) STEP(c10, c11, a1 + (o), b) \
        if (mr > 2) STEP(c20, c21, a2 + (o), b) \
        if (mr > 3) STEP(c30, c31, a3 + (o), b) \
        if (mr > 4) STEP(c40, c41, a4 + (o), b) \
        if (mr > 5) STEP(c50, c51, a5 + (o), b) }
    ptrdiff_t g = 0;
    if (dbl)
        for (; g + 2 <= G; g += 2, b += 128) QG_ROWS(QG_DBL_ROW, 4 * g)
    for (; g < G; g++, b += 64) QG_ROWS(QG_SAFE_ROW, 4 * g)
#undef QG_ROWS
    if (os) {
#define QG_OS2(i) if (mr > i) qg_os_row(c##i##0, c##i##1, os, os->out + i * os->ldc);
        QG_OS2(0) QG_OS2(1) QG_OS2(2) QG_OS2(3) QG_OS2(4) QG_OS2(5)
#undef QG_OS2
        return;
    }
#define QG_ST2(i) if (mr > i) { \
        _mm256_storeu_si256((__m256i *)(acc_out + i * QG_NR), c##i##0); \
        _mm256_storeu_si256((__m256i *)(acc_out + i * QG_NR + 8), c##i##1); }
    QG_ST2(0) QG_ST2(1) QG_ST2(2) QG_ST2(3) QG_ST2(4) QG_ST2(5)
#undef QG_ST2
}

/* Nibble kernel, up to 3 rows, the whole loop in asm with fixed registers: row i keeps its
 * int16 sums in ymm(4i) (low nibbles, columns 0-7), ymm(4i+1) (low, 8-15), ymm(4i+2),
 * ymm(4i+3) (high nibbles); ymm12-13 hold the group's weights, ymm14-15 are scratch. After
 * every QG_CHUNK groups the sums are widened (vpmaddwd by 1 and by 16) into acc_out. */
#define QG_Y(n) "%%ymm" #n
#define QG_NIB_HALF(ADDR, X0, X1) \
    "vpbroadcastd " ADDR ", %%ymm14\n\t" \
    "vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n\t" \
    "vpaddw %%ymm15, " QG_Y(X0) ", " QG_Y(X0) "\n\t" \
    "vpmaddubsw %%ymm13, %%ymm14, %%ymm14\n\t" \
    "vpaddw %%ymm14, " QG_Y(X1) ", " QG_Y(X1) "\n\t"
#define QG_NIB_ZERO(n) "vpxor %%xmm" #n ", %%xmm" #n ", %%xmm" #n "\n\t"
#define QG_NIB_WIDEN(L, H, OFF) \
    "vpmaddwd %[one], " QG_Y(L) ", " QG_Y(L) "\n\t" \
    "vpmaddwd %[six], " QG_Y(H) ", " QG_Y(H) "\n\t" \
    "vpaddd " QG_Y(H) ", " QG_Y(L) ", " QG_Y(L) "\n\t" \
    "vpaddd " #OFF "(%[c]), " QG_Y(L) ", " QG_Y(L) "\n\t" \
    "vmovdqu " QG_Y(L) ", " #OFF "(%[c])\n\t"
#define QG_NIB_R0(OL, OH) QG_NIB_HALF(#OL "(%[a])", 0, 1) QG_NIB_HALF(#OH "(%[a])", 2, 3)
#define QG_NIB_R1(OL, OH) \
    QG_NIB_HALF(#OL "(%[a],%[l],1)", 4, 5) QG_NIB_HALF(#OH "(%[a],%[l],1)", 6, 7)
#define QG_NIB_R2(OL, OH) \
    QG_NIB_HALF(#OL "(%[a],%[l],2)", 8, 9) QG_NIB_HALF(#OH "(%[a],%[l],2)", 10, 11)
#define QG_NIB_LOADB(O0, O1) \
    "vmovdqu " #O0 "(%[b]), %%ymm12\n\t" \
    "vmovdqu " #O1 "(%[b]), %%ymm13\n\t"
#define QG_NIB_STEP3(OL, OH, O0, O1) QG_NIB_LOADB(O0, O1) QG_NIB_R0(OL, OH) QG_NIB_R1(OL, OH) \
    QG_NIB_R2(OL, OH)
#define QG_NIB_STEP2(OL, OH, O0, O1) QG_NIB_LOADB(O0, O1) QG_NIB_R0(OL, OH) QG_NIB_R1(OL, OH)
#define QG_NIB_STEP1(OL, OH, O0, O1) QG_NIB_LOADB(O0, O1) QG_NIB_R0(OL, OH)
/* the QG_CHUNK = 8 groups of a chunk, unrolled (the loop's own instructions would take
 * dispatch slots: a group is ~32 instructions, ~6 cycles of 6-wide dispatch) */
#define QG_NIB_CHUNK(STEP) \
    STEP(0, 4, 0, 32) STEP(8, 12, 64, 96) STEP(16, 20, 128, 160) STEP(24, 28, 192, 224) \
    STEP(32, 36, 256, 288) STEP(40, 44, 320, 352) STEP(48, 52, 384, 416) \
    STEP(56, 60, 448, 480)
#define QG_NIB_Z0 QG_NIB_ZERO(0) QG_NIB_ZERO(1) QG_NIB_ZERO(2) QG_NIB_ZERO(3)
#define QG_NIB_Z1 QG_NIB_ZERO(4) QG_NIB_ZERO(5) QG_NIB_ZERO(6) QG_NIB_ZERO(7)
#define QG_NIB_Z2 QG_NIB_ZERO(8) QG_NIB_ZERO(9) QG_NIB_ZERO(10) QG_NIB_ZERO(11)
#define QG_NIB_W0 QG_NIB_WIDEN(0, 2, 0) QG_NIB_WIDEN(1, 3, 32)
#define QG_NIB_W1 QG_NIB_WIDEN(4, 6, 64) QG_NIB_WIDEN(5, 7, 96)
#define QG_NIB_W2 QG_NIB_WIDEN(8, 10, 128) QG_NIB_WIDEN(9, 11, 160)
#define QG_NIB_ASM(ZERO, STEP, WIDEN) \
    __asm__ volatile("1:\n\t" ZERO \
                     QG_NIB_CHUNK(STEP) \
                     "add $512, %[b]\n\t" \
                     "add $64, %[a]\n\t" \
                     WIDEN \
                     "dec %[n]\n\t" \
                     "jnz 1b\n\t" \
                     : [a] "+r"(a), [b] "+r"(b), [n] "+r"(nch) \
                     : [l] "r"(l), [c] "r"(acc_out), \
                       [one] "m"(*(const __m256i *)qg_ones16), \
                       [six] "m"(*(const __m256i *)qg_sixteens16) \
                     : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", \
                       "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", \
                       "xmm14", "xmm15")

/* mr (1..3) rows of nibble-packed A (row stride l bytes) x one panel, nch chunks. */
static void qg_nib(int mr, const uint8_t *a, ptrdiff_t l, const int8_t *b, ptrdiff_t nch,
                   int32_t *acc_out) {
    memset(acc_out, 0, (size_t)mr * QG_NR * sizeof(int32_t));
    if (nch <= 0) return;
    if (mr >= 3) QG_NIB_ASM(QG_NIB_Z0 QG_NIB_Z1 QG_NIB_Z2, QG_NIB_STEP3, QG_NIB_W0 QG_NIB_W1 QG_NIB_W2);
    else if (mr == 2) QG_NIB_ASM(QG_NIB_Z0 QG_NIB_Z1, QG_NIB_STEP2, QG_NIB_W0 QG_NIB_W1);
    else QG_NIB_ASM(QG_NIB_Z0, QG_NIB_STEP1, QG_NIB_W0);
}

/* The first n bytes (4, 8, 12 or 16) at p, zeros after them; and their store. The last
 * block of a row whose depth is not whole blocks of 16, without touching bytes past it. */
static inline __m128i qg_load_part(const uint8_t *p, ptrdiff_t n) {
    if (n == 16) return _mm_loadu_si128((const __m128i *)p);
    int32_t w;
    __m128i v = _mm_setzero_si128();
    if (n >= 8) {
        v = _mm_loadl_epi64((const __m128i *)p);
        if (n == 12) {
            memcpy(&w, p + 8, 4);
            v = _mm_insert_epi32(v, w, 2);
        }
    } else {
        memcpy(&w, p, 4);
        v = _mm_cvtsi32_si128(w);
    }
    return v;
}

static inline void qg_store_part(uint8_t *p, __m128i v, ptrdiff_t n) {
    if (n == 16) {
        _mm_storeu_si128((__m128i *)p, v);
        return;
    }
    int32_t w;
    if (n >= 8) {
        _mm_storel_epi64((__m128i *)p, v);
        if (n == 12) {
            w = _mm_extract_epi32(v, 2);
            memcpy(p + 8, &w, 4);
        }
    } else {
        w = _mm_cvtsi128_si32(v);
        memcpy(p, &w, 4);
    }
}

/* mr rows of A (row stride la) into tmp (row stride Kp) in a panel's k order: a vpshufb per
 * 32 bytes (its two lanes are two blocks of 16). Kept out of line: inlined, the kernel's
 * register pressure spills its pointers. */
static __attribute__((noinline)) void qg_reorder(const uint8_t *A, ptrdiff_t la, int mr,
                                                 ptrdiff_t Kp, const uint8_t *order,
                                                 uint8_t *tmp) {
    for (int i = 0; i < mr; i++) {
        const uint8_t *a = A + i * la;
        uint8_t *t = tmp + i * Kp;
        ptrdiff_t k = 0;
        for (; k + 32 <= Kp; k += 32)
            _mm256_storeu_si256((__m256i *)(t + k),
                                _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(a + k)),
                                                    _mm256_loadu_si256((const __m256i *)(order + k))));
        for (; k < Kp; k += 16) {   /* a block of 16, or the shorter last one */
            const ptrdiff_t lb = Kp - k < 16 ? Kp - k : 16;
            qg_store_part(t + k, _mm_shuffle_epi8(qg_load_part(a + k, lb),
                                                  qg_load_part(order + k, lb)), lb);
        }
    }
}

/* mr rows of A (row stride la) as two halves (row stride Kp): lo = min(x, 128) and
 * hi = x - lo <= 127. Each pairsafe on any weights: a pair sum of lo is at most 128 * 254 =
 * 32512 or at least 128 * -256 = -32768, of hi within 127 * 256. */
static __attribute__((noinline)) void qg_split(const uint8_t *A, ptrdiff_t la, int mr,
                                               ptrdiff_t Kp, uint8_t *lo, uint8_t *hi) {
    const __m256i c128 = _mm256_set1_epi8((char)128);
    for (int i = 0; i < mr; i++) {
        ptrdiff_t k = 0;
        for (; k + 32 <= Kp; k += 32) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(A + i * la + k));
            const __m256i l = _mm256_min_epu8(x, c128);
            _mm256_storeu_si256((__m256i *)(lo + i * Kp + k), l);
            _mm256_storeu_si256((__m256i *)(hi + i * Kp + k), _mm256_sub_epi8(x, l));
        }
        for (; k < Kp; k += 16) {   /* a block of 16, or the shorter last one */
            const ptrdiff_t lb = Kp - k < 16 ? Kp - k : 16;
            const __m128i x = qg_load_part(A + i * la + k, lb);
            const __m128i l = _mm_min_epu8(x, _mm256_castsi256_si128(c128));
            qg_store_part(lo + i * Kp + k, l, lb);
            qg_store_part(hi + i * Kp + k, _mm_sub_epi8(x, l), lb);
        }
    }
}

/* The double kernel on mr rows (QG_DBL_ROW), at most 3 rows a pass: 6 accumulators, 4
 * temporaries and the ones in registers. Out of line, so that the pairsafe kernel's six forms
 * keep the code placement they had (inlined beside them, it slowed them down). */
static __attribute__((noinline)) void qg_dbl_mr(int mr, const uint8_t *A, ptrdiff_t la,
                                                ptrdiff_t G, const int8_t *b, int32_t *acc,
                                                const qg_os *os) {
    const int m1 = mr < 3 ? mr : 3;
    switch (m1) {
    case 1: qg_safe(1, 1, A, la, G, b, acc, os); break;
    case 2: qg_safe(2, 1, A, la, G, b, acc, os); break;
    default: qg_safe(3, 1, A, la, G, b, acc, os); break;
    }
    if (mr > 3) {
        qg_os os2;
        if (os) {
            os2 = *os;
            os2.out += 3 * os->ldc;
        }
        const uint8_t *A2 = A + 3 * la;
        int32_t *acc2 = acc + 3 * QG_NR;
        switch (mr - 3) {
        case 1: qg_safe(1, 1, A2, la, G, b, acc2, os ? &os2 : NULL); break;
        case 2: qg_safe(2, 1, A2, la, G, b, acc2, os ? &os2 : NULL); break;
        default: qg_safe(3, 1, A2, la, G, b, acc2, os ? &os2 : NULL); break;
        }
    }
}

QG_INLINE void qg_safe_mr(int mr, int dbl, const uint8_t *A, ptrdiff_t la, ptrdiff_t G,
                          const int8_t *b, int32_t *acc, const qg_os *os) {
    if (dbl) {
        qg_dbl_mr(mr, A, la, G, b, acc, os);
        return;
    }
    switch (mr) {
    case 1: qg_safe(1, 0, A, la, G, b, acc, os); break;
    case 2: qg_safe(2, 0, A, la, G, b, acc, os); break;
    case 3: qg_safe(3, 0, A, la, G, b, acc, os); break;
    case 4: qg_safe(4, 0, A, la, G, b, acc, os); break;
    case 5: qg_safe(5, 0, A, la, G, b, acc, os); break;
    default: qg_safe(6, 0, A, la, G, b, acc, os); break;
    }
}

/* order: the panel's k order (or NULL), tmp: QG_TMP_ROWS * Kp bytes. safe: the pairsafe
 * kernel (2: its double form, QG_DBL_ROW). Not safe: the nibble kernel where the block was
 * nibble-split, else the pairsafe kernel on the tile's two halves (qg_split; both read the
 * panel in k order, see "Pairing"). os: where the safe kernel stores the outputs itself
 * (qg_os), or NULL; returns whether it did. */
static int qg_micro_avx2(int mr, const qg_apk *ap, ptrdiff_t m0, int safe, ptrdiff_t G,
                         const uint8_t *order, uint8_t *tmp, const int8_t *b, int32_t *acc,
                         const qg_os *os) {
    const ptrdiff_t Kp = ap->Kp;
    if (!safe && !ap->nib) {
        int32_t acc2[QG_MR * QG_NR] __attribute__((aligned(32)));
        qg_split(ap->raw + m0 * ap->lr, ap->lr, mr, Kp, tmp, tmp + QG_MR * Kp);
        qg_safe_mr(mr, 0, tmp, Kp, G, b, acc, NULL);
        qg_safe_mr(mr, 0, tmp + QG_MR * Kp, Kp, G, b, acc2, NULL);
        for (int i = 0; i < mr * QG_NR; i++) acc[i] += acc2[i];
        return 0;
    }
    if (safe) {
        const uint8_t *A = ap->raw + m0 * ap->lr;
        ptrdiff_t la = ap->lr;
        if (order) {
            qg_reorder(A, la, mr, Kp, order, tmp);
            A = tmp;
            la = Kp;
        }
        qg_safe_mr(mr, safe == 2, A, la, G, b, acc, os);
        return os != NULL;
    }
    const ptrdiff_t Kc = qg_kc(Kp);
    const uint8_t *A = ap->nib + m0 * 2 * Kc;
    for (int i = 0; i < mr; i += 3)
        qg_nib(mr - i < 3 ? mr - i : 3, A + i * 2 * Kc, 2 * Kc, b, Kc / (QG_CHUNK * QG_KG),
               acc + i * QG_NR);
    return 0;
}

/* Plain C on the raw A and the packed weights (used only when the A buffer cannot be had);
 * order: the packed k order, or NULL. */
static void qg_micro_scalar(int mr, const uint8_t *A, ptrdiff_t lda, ptrdiff_t K,
                            const uint8_t *order, const int8_t *b, int32_t *acc) {
    const ptrdiff_t Kp = qg_groups(K) * QG_KG;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < QG_NR; j++) {
            int32_t s = 0;
            for (ptrdiff_t k = 0; k < Kp; k++) {
                const ptrdiff_t src = order ? k - k % 16 + order[k] : k;
                if (src < K) s += (int32_t)A[i * lda + src] * b[((k / 4) * QG_NR + j) * 4 + k % 4];
            }
            acc[i * QG_NR + j] = s;
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

#ifdef QG_AMX
/* AMX: TDPBUSD multiplies a 16 x 64 byte tile of A (16 rows, 64 values of k) by a 16 x 64
 * byte tile of B (16 groups of 4 k values, 16 columns) into a 16 x 16 int32 tile, 16K exact
 * products per instruction. The VNNI panel layout (per group of 4 k values, `width` columns
 * x 4 bytes) already is a B tile every 64 bytes, with a row stride of 4 * width. */
__attribute__((target("amx-tile"))) static void qg_amx_begin(void) {
    qops_tilecfg cfg;
    qops_tilecfg_init(&cfg);
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    qops_tilecfg_load(&cfg);
}

__attribute__((target("amx-tile"))) static void qg_amx_end(void) { _tile_release(); }

/* acc (rows x QG_NR, row stride QG_NR) = rows [0, rows) of A times one weight panel of
 * `width` columns (16, 32, 48 or 64), for rows 16 or 32 and K a multiple of 64. Tiles: C 0-3
 * (two row halves x two 16-column blocks), A 4-5, B 6-7; the panel's columns go 32 at a time. */
QG_INLINE __attribute__((target("amx-tile,amx-int8"))) void
qg_amx_block_t(const uint8_t *A, ptrdiff_t lda, ptrdiff_t K, const int8_t *bp, int width,
               int32_t *acc, const int two_r) {
    const ptrdiff_t bs = 4 * (ptrdiff_t)width;      /* bytes per group of 4 k values */
    for (int c0 = 0; c0 < width / 16; c0 += 2) {
        const int two = c0 + 1 < width / 16;
        const int8_t *b = bp + 64 * c0;
        _tile_zero(0);
        if (two_r) _tile_zero(2);
        if (two) _tile_zero(1);
        if (two_r && two) _tile_zero(3);
        for (ptrdiff_t k = 0; k < K; k += 64) {
            _tile_loadd(4, A + k, lda);
            if (two_r) _tile_loadd(5, A + 16 * lda + k, lda);
            _tile_loadd(6, b + k / 4 * bs, bs);
            _tile_dpbusd(0, 4, 6);
            if (two_r) _tile_dpbusd(2, 5, 6);
            if (two) {
                _tile_loadd(7, b + k / 4 * bs + 64, bs);
                _tile_dpbusd(1, 4, 7);
                if (two_r) _tile_dpbusd(3, 5, 7);
            }
        }
        int32_t *c = acc + 16 * c0;
        /* tiles in the order of their last products (0, 2, 1, 3): storing 1 before 2 ran the
         * 128x768x3072 GEMM 15% slower */
        _tile_stored(0, c, QG_NR * 4);
        if (two_r) _tile_stored(2, c + 16 * QG_NR, QG_NR * 4);
        if (two) _tile_stored(1, c + 16, QG_NR * 4);
        if (two_r && two) _tile_stored(3, c + 16 * QG_NR + 16, QG_NR * 4);
    }
}

__attribute__((target("amx-tile,amx-int8"))) static void
qg_amx_block(const uint8_t *A, ptrdiff_t lda, ptrdiff_t K, const int8_t *bp, int width,
             int32_t *acc, int rows) {
    if (rows == 32) qg_amx_block_t(A, lda, K, bp, width, acc, 1);
    else qg_amx_block_t(A, lda, K, bp, width, acc, 0);
}
#endif

/* ---- output stage ---- */

/* sum_k a[k], wrapping like the accumulator: the row part of the weight zero-point term. */
static inline int32_t qg_row_sum(const uint8_t *a, ptrdiff_t K) {
    uint32_t s = 0;
    for (ptrdiff_t k = 0; k < K; k++) s += a[k];
    return (int32_t)s;
}

/* acc rows of one micro-tile (row stride QG_NR) -> out rows m0.., columns n0..n0+w. corr[j] is
 * the column part of the zero-point correction, wz[j] multiplies the row sums rs[i]. */
#if defined(__AVX2__)
/* The U8 and F32 stores of 16 columns (j0, j0 + 16) of row i, with AVX2: the scalar
 * formulas below, lane for lane (max_ps/min_ps return their second operand for NaN, as the
 * scalar compares do; cvtps rounds to nearest even as rintf; fmadd rounds once as fmaf). At
 * small K the store costs as much as the products; GCC vectorizes the scalar loops at half
 * width only. */
static inline __m256 qg_acc8(const int32_t *ai, const int32_t *corr, const int32_t *wz,
                             uint32_t r, ptrdiff_t j) {
    __m256i a = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(ai + j)),
                                 _mm256_loadu_si256((const __m256i *)(corr + j)));
    if (r)
        a = _mm256_sub_epi32(a, _mm256_mullo_epi32(
            _mm256_loadu_si256((const __m256i *)(wz + j)), _mm256_set1_epi32((int32_t)r)));
    return _mm256_cvtepi32_ps(a);
}

/* 8 columns (as floats y) at output column n0 + j, U8: the bytes' int32 values in [0, 255] */
static inline __m256i qg_u8_8(__m256 v, ptrdiff_t j, const qops_gemm_out *o) {
    const int32_t zp = o->out_zp;
    const __m256 lo = _mm256_set1_ps((float)((o->relu ? zp : 0) - zp));
    const __m256 hi = _mm256_set1_ps((float)(255 - zp));
    return _mm256_add_epi32(qg_u8_core(v, o->bias ? o->bias + j : NULL, o->mult + j, lo, hi),
                            _mm256_set1_epi32(zp));
}

static inline void qg_f32_8(__m256 v, ptrdiff_t j, float *out, const qops_gemm_out *o) {
    v = _mm256_fmadd_ps(v, _mm256_loadu_ps(o->mult + j),
                        o->bias ? _mm256_loadu_ps(o->bias + j) : _mm256_setzero_ps());
    if (o->relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
    _mm256_storeu_ps(out, v);
}

static inline void qg_store16(const int32_t *ai, const int32_t *corr, const int32_t *wz,
                              uint32_t r, ptrdiff_t j0, ptrdiff_t row, ptrdiff_t n0,
                              const qops_gemm_out *o) {
    const __m256 y0 = qg_acc8(ai, corr, wz, r, j0), y1 = qg_acc8(ai, corr, wz, r, j0 + 8);
    if (o->kind == QOPS_GEMM_U8) {
        const __m256i q0 = qg_u8_8(y0, n0 + j0, o), q1 = qg_u8_8(y1, n0 + j0 + 8, o);
        /* 16 int32 in [0, 255] -> bytes in order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
        p = _mm256_permute4x64_epi64(_mm256_packus_epi16(p, p), 0x08);
        _mm_storeu_si128((__m128i *)((uint8_t *)o->out + row * o->ldc + n0 + j0),
                         _mm256_castsi256_si128(p));
    } else {
        float *out = (float *)o->out + row * o->ldc + n0 + j0;
        qg_f32_8(y0, n0 + j0, out, o);
        qg_f32_8(y1, n0 + j0 + 8, out + 8, o);
    }
}

/* The same for 8 columns: the half panel of N = 24, 40, 72, ... (8 of every 16 such convs'
 * last panel), rather than the scalar formulas. */
static inline void qg_store8(const int32_t *ai, const int32_t *corr, const int32_t *wz,
                             uint32_t r, ptrdiff_t j0, ptrdiff_t row, ptrdiff_t n0,
                             const qops_gemm_out *o) {
    const __m256 y = qg_acc8(ai, corr, wz, r, j0);
    if (o->kind == QOPS_GEMM_U8) {
        const __m256i q = qg_u8_8(y, n0 + j0, o);
        const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q),
                                          _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)((uint8_t *)o->out + row * o->ldc + n0 + j0),
                         _mm_packus_epi16(h, h));
    } else {
        qg_f32_8(y, n0 + j0, (float *)o->out + row * o->ldc + n0 + j0, o);
    }
}
#endif

#if defined(QG_VNNI)
/* The U8 and F32 stores of columns [0, v) (v a multiple of 16) of mr rows in 512-bit
 * vectors: qg_store16's operations lane for lane, a column block's terms (corr, wz, bias,
 * mult) loaded once for all rows. With few k values a tile (1x1 convs of 64 channels: 16
 * groups) the 256-bit stores cost more than the products. */
static inline void qg_store512(const int32_t *acc, int mr, ptrdiff_t v, ptrdiff_t m0,
                               ptrdiff_t n0, const int32_t *corr, const int32_t *wz,
                               const int32_t *rs, const qops_gemm_out *o) {
    const int u8 = o->kind == QOPS_GEMM_U8;
    const int32_t zp = o->out_zp;
    const __m512 lo = _mm512_set1_ps((float)((o->relu ? zp : 0) - zp));
    const __m512 hi = _mm512_set1_ps((float)(255 - zp));
    const __m512i vzp = _mm512_set1_epi32(zp);
    if (u8 && v == QG_NR) {
        /* a whole panel row is 64 bytes: narrowed by saturating packs (values already in
         * [lo, 255] once the zero point is added) and one permute, stored at once */
        const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        const __m512i z16 = _mm512_set1_epi16((short)zp);
        __m512i c[4], z[4];
        __m512 m[4], b[4];
        for (int k = 0; k < 4; k++) {
            c[k] = _mm512_loadu_si512(corr + 16 * k);
            z[k] = _mm512_loadu_si512(wz + 16 * k);
            m[k] = _mm512_loadu_ps(o->mult + n0 + 16 * k);
            b[k] = o->bias ? _mm512_loadu_ps(o->bias + n0 + 16 * k) : _mm512_setzero_ps();
        }
        for (int i = 0; i < mr; i++) {
            __m512i q[4];
            for (int k = 0; k < 4; k++) {
                __m512i a = _mm512_add_epi32(_mm512_loadu_si512(acc + i * QG_NR + 16 * k), c[k]);
                if (rs[i])
                    a = _mm512_sub_epi32(a, _mm512_mullo_epi32(z[k], _mm512_set1_epi32(rs[i])));
                __m512 y = _mm512_cvtepi32_ps(a);
                if (o->bias) y = _mm512_add_ps(y, b[k]);
                q[k] = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(y, m[k]), lo), hi));
            }
            const __m512i p0 = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), z16);
            const __m512i p1 = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), z16);
            _mm512_storeu_si512((uint8_t *)o->out + (m0 + i) * o->ldc + n0,
                                _mm512_permutexvar_epi32(idx, _mm512_packus_epi16(p0, p1)));
        }
        return;
    }
    for (ptrdiff_t j = 0; j < v; j += 16) {
        const __m512i c = _mm512_loadu_si512(corr + j), z = _mm512_loadu_si512(wz + j);
        const __m512 m = _mm512_loadu_ps(o->mult + n0 + j);
        const __m512 b = o->bias ? _mm512_loadu_ps(o->bias + n0 + j) : _mm512_setzero_ps();
        for (int i = 0; i < mr; i++) {
            __m512i a = _mm512_add_epi32(_mm512_loadu_si512(acc + i * QG_NR + j), c);
            if (rs[i])
                a = _mm512_sub_epi32(a, _mm512_mullo_epi32(z, _mm512_set1_epi32(rs[i])));
            __m512 y = _mm512_cvtepi32_ps(a);
            if (u8) {
                if (o->bias) y = _mm512_add_ps(y, b);
                y = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(y, m), lo), hi);
                const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(y), vzp);
                _mm_storeu_si128((__m128i *)((uint8_t *)o->out + (m0 + i) * o->ldc + n0 + j),
                                 _mm512_cvtepi32_epi8(q));
            } else {
                y = _mm512_fmadd_ps(y, m, b);
                if (o->relu) y = _mm512_max_ps(y, _mm512_setzero_ps());
                _mm512_storeu_ps((float *)o->out + (m0 + i) * o->ldc + n0 + j, y);
            }
        }
    }
}
#endif

static void qg_store(const int32_t *acc, int mr, ptrdiff_t w, ptrdiff_t m0, ptrdiff_t n0,
                     const int32_t *corr, const int32_t *wz, const int32_t *rs,
                     const qops_gemm_out *o) {
    /* columns [0, v) of each row in vectors, the rest [v, w) by the scalar formulas */
    ptrdiff_t v = 0;
#if defined(QG_VNNI)
    if (o->kind != QOPS_GEMM_I32) {
        v = w / 16 * 16;
        qg_store512(acc, mr, v, m0, n0, corr, wz, rs, o);
        if (v == w)
            return;
    }
#endif
#if defined(__AVX2__)
    if (o->kind != QOPS_GEMM_I32) {
        const ptrdiff_t v16 = v;
        v = w / 8 * 8;
        for (int i = 0; i < mr; i++) {
            ptrdiff_t j0 = v16;
            for (; j0 + 16 <= v; j0 += 16)
                qg_store16(acc + i * QG_NR, corr, wz, (uint32_t)rs[i], j0, m0 + i, n0, o);
            if (j0 < v)
                qg_store8(acc + i * QG_NR, corr, wz, (uint32_t)rs[i], j0, m0 + i, n0, o);
        }
        if (v == w)
            return;
    }
#endif
    for (int i = 0; i < mr; i++) {
        int32_t a[QG_NR];
        const int32_t *ai = acc + i * QG_NR;
        const uint32_t r = (uint32_t)rs[i];
        /* Wrapping uint32 arithmetic: exact whenever the true sum fits in int32. */
        for (ptrdiff_t j = v; j < w; j++)
            a[j] = (int32_t)((uint32_t)ai[j] + (uint32_t)corr[j] - (uint32_t)wz[j] * r);
        if (o->kind == QOPS_GEMM_U8) {
            uint8_t *out = (uint8_t *)o->out + (m0 + i) * o->ldc + n0;
            const float *mult = o->mult + n0;
            const int32_t zp = o->out_zp;
            const float lo = (float)((o->relu ? zp : 0) - zp), hi = (float)(255 - zp);
            float y[QG_NR];
            if (o->bias) {
                const float *bias = o->bias + n0;
                for (ptrdiff_t j = v; j < w; j++) y[j] = (float)a[j] + bias[j];
            } else {
                for (ptrdiff_t j = v; j < w; j++) y[j] = (float)a[j];
            }
            for (ptrdiff_t j = v; j < w; j++) {
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
                for (ptrdiff_t j = v; j < w; j++) out[j] = fmaf((float)a[j], mult[j], bias[j]);
            } else {
                for (ptrdiff_t j = v; j < w; j++) out[j] = fmaf((float)a[j], mult[j], 0.0f);
            }
            if (o->relu)
                for (ptrdiff_t j = v; j < w; j++) out[j] = out[j] > 0.0f ? out[j] : 0.0f;
        } else {
            int32_t *out = (int32_t *)o->out + (m0 + i) * o->ldc + n0;
            for (ptrdiff_t j = v; j < w; j++) out[j] = a[j];
        }
    }
}

#ifdef QG_AVX2
/* *s for the panel at column n0 of width w (16 or 8): the column terms of qg_store. */
static inline void qg_os_init(qg_os *s, const int32_t *corr, ptrdiff_t w, ptrdiff_t n0,
                              const qops_gemm_out *o) {
    for (ptrdiff_t j = 0; j < QG_NR; j++) {
        const int in = j < w;
        s->corr[j] = in ? corr[j] : 0;
        s->bias[j] = in && o->bias ? o->bias[n0 + j] : 0.0f;
        s->mult[j] = in ? o->mult[n0 + j] : 0.0f;
    }
    s->lo = (float)((o->relu ? o->out_zp : 0) - o->out_zp);
    s->hi = (float)(255 - o->out_zp);
    s->zp = (int16_t)o->out_zp;
    s->half = w < QG_NR;
    s->ldc = o->ldc;
}
#else
typedef struct qg_apk qg_apk;   /* only the AVX2 build repacks A */
#endif

/* The column terms of panel columns [n0, n0 + w) for qg_store: wz[j] the weight zero point,
 * corr[j] = K a_zp wz - a_zp sum_k W[n0 + j, k], wrapping like the accumulator. */
static inline void qg_panel_terms(const qops_gemm_b *B, int32_t a_zp, ptrdiff_t n0,
                                  ptrdiff_t w, int32_t *corr, int32_t *wz) {
    for (ptrdiff_t j = 0; j < w; j++) {
        const int32_t z = B->wzp ? B->wzp[n0 + j] : 0;
        wz[j] = z;
        corr[j] = (int32_t)((uint32_t)B->K * (uint32_t)a_zp * (uint32_t)z
                            - (uint32_t)a_zp * (uint32_t)B->wsum[n0 + j]);
    }
}

/* Rows of the next micro-tile with `left` rows to go: QG_MR, or with 7..9 left two balanced
 * tiles (4+3, 4+4, 5+4) rather than 6 and a thin one. */
static inline ptrdiff_t qg_tile_rows(ptrdiff_t left) {
    return left > QG_MR && left < QG_MR + 4 ? (left + 1) / 2 : (left < QG_MR ? left : QG_MR);
}

#ifdef QG_VNNI
/* qg_store512's uint8 formula for a panel of w columns without weight zero points, its
 * constants held across the panel's tiles; a partial last block by masked stores. */
typedef struct {
    __m512i c[4], vzp;
    __m512 m[4], b[4], lo, hi;
    int nb;                            /* 16-column blocks, the last maybe partial */
    __mmask16 last;                    /* the last block's columns */
    /* four whole blocks: its own int, tested each tile (GCC merged nb == 4 && last == 0xFFFF
     * into one 6-byte load just after nb's 4-byte store: a store-forwarding stall a tile) */
    int full;
} qg_u8_panel;

QG_INLINE void qg_u8_panel_init(qg_u8_panel *q, const int32_t *corr, ptrdiff_t n0, ptrdiff_t w,
                                const qops_gemm_out *o) {
    const int32_t zp = o->out_zp;
    q->lo = _mm512_set1_ps((float)((o->relu ? zp : 0) - zp));
    q->hi = _mm512_set1_ps((float)(255 - zp));
    q->vzp = _mm512_set1_epi32(zp);
    q->nb = (int)((w + 15) / 16);
    q->last = (__mmask16)(w % 16 ? (1u << (w % 16)) - 1 : 0xFFFFu);
    q->full = q->nb == 4 && q->last == 0xFFFF;
    for (int k = 0; k < q->nb; k++) {
        const __mmask16 mk = k == q->nb - 1 ? q->last : (__mmask16)0xFFFF;
        q->c[k] = _mm512_maskz_loadu_epi32(mk, corr + 16 * k);
        q->m[k] = _mm512_maskz_loadu_ps(mk, o->mult + n0 + 16 * k);
        q->b[k] = o->bias ? _mm512_maskz_loadu_ps(mk, o->bias + n0 + 16 * k) : _mm512_setzero_ps();
    }
}

QG_INLINE void qg_u8_panel_store(const qg_u8_panel *q, const int32_t *acc, int mr, uint8_t *out,
                                 ptrdiff_t ldc) {
    if (q->full) {
        /* a whole 64-byte panel row: narrowed by saturating packs (the values are in
         * [lo, 255] once the zero point is added) and one permute, as qg_store512 */
        const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        const __m512i z16 = _mm512_packs_epi32(q->vzp, q->vzp);
        for (int i = 0; i < mr; i++) {
            __m512i r[4];
            for (int k = 0; k < 4; k++) {
                const __m512i a = _mm512_add_epi32(_mm512_loadu_si512(acc + i * QG_NR + 16 * k), q->c[k]);
                const __m512 y = _mm512_add_ps(_mm512_cvtepi32_ps(a), q->b[k]);
                r[k] = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(y, q->m[k]), q->lo), q->hi));
            }
            const __m512i p0 = _mm512_adds_epi16(_mm512_packs_epi32(r[0], r[1]), z16);
            const __m512i p1 = _mm512_adds_epi16(_mm512_packs_epi32(r[2], r[3]), z16);
            _mm512_storeu_si512(out + i * ldc, _mm512_permutexvar_epi32(idx, _mm512_packus_epi16(p0, p1)));
        }
        return;
    }
    for (int i = 0; i < mr; i++)
        for (int k = 0; k < q->nb; k++) {
            const __m512i a = _mm512_add_epi32(_mm512_loadu_si512(acc + i * QG_NR + 16 * k), q->c[k]);
            const __m512 y = _mm512_add_ps(_mm512_cvtepi32_ps(a), q->b[k]);
            const __m512 z = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(y, q->m[k]), q->lo), q->hi);
            const __m128i r = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(z), q->vzp));
            if (k == q->nb - 1) _mm_mask_storeu_epi8(out + i * ldc + 16 * k, q->last, r);
            else _mm_storeu_si128((__m128i *)(out + i * ldc + 16 * k), r);
        }
}
#endif

/* Rows [0, M) x column panels [p0, p1), single-threaded. Panel outer: one weight panel
 * (K x QG_NR) is reused from L1/L2 by every row block. ap: A repacked (AVX2; its row 0 is
 * A's row 0), or NULL. */
static void qg_panels_rows(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                           const qops_gemm_b *B, ptrdiff_t p0, ptrdiff_t p1,
                           const qops_gemm_out *o, const qg_apk *ap) {
    const ptrdiff_t N = B->N, K = B->K;
    int32_t acc[QG_MR * QG_NR] __attribute__((aligned(64)));
    int32_t corr[QG_NR], wz[QG_NR], rs[QG_MR];
#ifdef QG_AVX2
    const ptrdiff_t G = qg_groups(K);
    const int32_t *S = qg_s(B), *Sr = qg_s_re(B);
    const int32_t *S4 = Sr + qg_npanels(N);
    /* rows of A in a reordered panel's k order (see "Pairing"): the calling thread's own */
    uint8_t *tmp = ap ? ap->tmp : NULL;
#else
    (void)ap;
#endif
#ifdef QG_AMX
    const int amx = qg_amx_k(K) && M >= 16;
    int32_t ablk[QG_AMX_ROWS * QG_NR] __attribute__((aligned(64)));
    if (amx) qg_amx_begin();
#endif
    for (ptrdiff_t p = p0; p < p1; p++) {
        const ptrdiff_t n0 = p * QG_NR;
        const ptrdiff_t w = N - n0 < QG_NR ? N - n0 : QG_NR;
        const int width = (int)qg_panel_width(N, p);
        const int8_t *bp = qg_panel_ptr(B->data, K, p);
        qg_panel_terms(B, a_zp, n0, w, corr, wz);
#ifdef QG_VNNI
        /* uint8 out without row sums: the panel's constants held across its tiles (convs
         * of 16-32 input channels store as much as they multiply) */
        qg_u8_panel q8;
        const int u8p = o->kind == QOPS_GEMM_U8 && !B->wzp;
        if (u8p) qg_u8_panel_init(&q8, corr, n0, w, o);
#endif
#ifdef QG_AVX2
        /* the panel in k order, and its reordered copy if it has one (see "Pairing") */
        const uint8_t *order = qg_order(B, p);
        const int8_t *bre = order ? qg_panel_re(B->data, N, K, p) : bp;
        const int32_t Sp = S[p], Srp = Sr[p], S4p = S4[p];
        (void)width;
        /* the fused output stage where it applies: uint8 out, no row sums, 16 or 8 columns */
        qg_os os_, *os = NULL;
        if (o->kind == QOPS_GEMM_U8 && !B->wzp && (w == QG_NR || w == 8)) {
            os = &os_;
            qg_os_init(os, corr, w, n0, o);
        }
#endif
        ptrdiff_t m0 = 0;
#ifdef QG_AMX
        /* blocks of 32 rows, then one of 16 if that many are left */
        for (ptrdiff_t rb = 32; amx && M - m0 >= 16; m0 += rb) {
            rb = M - m0 >= 32 ? 32 : 16;
            const uint8_t *Am = A + m0 * lda;
            qg_amx_block(Am, lda, K, bp, width, ablk, (int)rb);
            for (int i = 0; i < rb; i++) {
                rs[0] = B->wzp ? qg_row_sum(Am + i * lda, K) : 0;
                qg_store(ablk + i * QG_NR, 1, w, m0 + i, n0, corr, wz, rs, o);
            }
        }
#endif
        for (ptrdiff_t mr = 0; m0 < M; m0 += mr) {
            const ptrdiff_t left = M - m0;
            mr = qg_tile_rows(left);
            const uint8_t *Am = A + m0 * lda;
#ifdef QG_AVX2
            /* exact in int16 where the tile's largest value times the bound fits: the
             * double kernel (quads, S4) on the copy in k order, else the pairsafe kernel
             * (pairs, S) in k order if it fits there, else on the reordered copy */
            int32_t tmax = ap ? ap->xmax : 0;
            if (ap && ap->rmax) {
                tmax = 0;
                for (ptrdiff_t i = 0; i < mr; i++) tmax = ap->rmax[m0 + i] > tmax ? ap->rmax[m0 + i] : tmax;
            }
            if (os) os->out = (uint8_t *)o->out + m0 * o->ldc + n0;
            int done = 0;
            if (!ap) qg_micro_scalar((int)mr, Am, lda, K, NULL, bp, acc);
            else if (tmax * S4p <= 32767)
                done = qg_micro_avx2((int)mr, ap, m0, 2, G, NULL, tmp, bp, acc, os);
            else if (tmax * Sp <= 32767)
                done = qg_micro_avx2((int)mr, ap, m0, 1, G, NULL, tmp, bp, acc, os);
            else if (order && tmax * Srp <= 32767)
                done = qg_micro_avx2((int)mr, ap, m0, 1, G, order, tmp, bre, acc, os);
            else qg_micro_avx2((int)mr, ap, m0, 0, G, NULL, tmp, bp, acc, NULL);
            if (done) continue;
#else
            qg_micro_dispatch((int)mr, width, Am, lda, K, bp, acc);
#endif
#ifdef QG_VNNI
            if (u8p) {
                qg_u8_panel_store(&q8, acc, (int)mr, (uint8_t *)o->out + m0 * o->ldc + n0, o->ldc);
                continue;
            }
#endif
            for (int i = 0; i < mr; i++) rs[i] = B->wzp ? qg_row_sum(Am + i * lda, K) : 0;
            qg_store(acc, (int)mr, w, m0, n0, corr, wz, rs, o);
        }
    }
#ifdef QG_AMX
    if (amx) qg_amx_end();
#endif
}

/* Weights up to this many packed bytes are swept whole for each group of rows (qg_panels)
 * or row block (qg_tiles), all panels of one group before the next; larger ones panel by
 * panel over all rows, each panel kept in L1/L2 while it is reused. With 16-column panels
 * (AVX2, portable C), panel after panel over all rows writes each output line in 16-byte
 * pieces at times far apart (evicted in between once the output outgrows the caches) and
 * reads A's rows once a panel. */
#define QG_SWEEP_BYTES ((ptrdiff_t)256 << 10)
/* rows of A per group of qg_panels: at most this many bytes of them, kept in L1 */
#define QG_GROUP_BYTES 32768

static inline int qg_sweep(const qops_gemm_b *B, ptrdiff_t npanels) {
#if defined(QG_VNNI)
    (void)B; (void)npanels;
    return 0;       /* 64-column panels write whole output lines */
#else
    return npanels > 1 && npanels * qg_groups(B->K) * QG_KG * QG_NR <= QG_SWEEP_BYTES;
#endif
}

/* *o from output row r0 on. */
static inline qops_gemm_out qg_out_from(const qops_gemm_out *o, ptrdiff_t r0) {
    qops_gemm_out r = *o;
    r.out = (char *)o->out + (size_t)(r0 * o->ldc) * (o->kind == QOPS_GEMM_U8 ? 1 : 4);
    return r;
}

#ifdef QG_AVX2
/* *ap from row r0 on (the same scratch). */
static inline qg_apk qg_apk_from(const qg_apk *ap, ptrdiff_t r0) {
    qg_apk a = *ap;
    if (a.raw) a.raw += r0 * a.lr;
    if (a.nib) a.nib += r0 * 2 * qg_kc(a.Kp);
    if (a.rmax) a.rmax += r0;
    return a;
}
#endif

static void qg_panels(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                      const qops_gemm_b *B, ptrdiff_t p0, ptrdiff_t p1, const qops_gemm_out *o,
                      const qg_apk *ap) {
    const ptrdiff_t Kp = qg_groups(B->K) * QG_KG;
    ptrdiff_t rb = QG_GROUP_BYTES / (Kp > 0 ? Kp : 1);
    rb = rb < 8 * QG_MR ? 8 * QG_MR : rb / QG_MR * QG_MR;
    if (!qg_sweep(B, p1 - p0) || rb >= M) {
        qg_panels_rows(A, lda, M, a_zp, B, p0, p1, o, ap);
        return;
    }
    for (ptrdiff_t r0 = 0; r0 < M; r0 += rb) {
        const ptrdiff_t rows = M - r0 < rb ? M - r0 : rb;
        const qops_gemm_out og = qg_out_from(o, r0);
#ifdef QG_AVX2
        const qg_apk ag = ap ? qg_apk_from(ap, r0) : (qg_apk){0};
        qg_panels_rows(A + r0 * lda, lda, rows, a_zp, B, p0, p1, &og, ap ? &ag : NULL);
#else
        qg_panels_rows(A + r0 * lda, lda, rows, a_zp, B, p0, p1, &og, ap);
#endif
    }
}

/* A given in C order instead (a conv's images of K channel planes of hw pixels, a 1x1 conv
 * at stride 1): each thread transposes the rows its tiles read into its own buffer of M x K
 * bytes (bufs + thread x M K), just before it multiplies them. */
typedef struct {
    const uint8_t *x;
    ptrdiff_t hw;
    uint8_t *bufs;
} qg_corder;

/* Rows [r0, r1) of the C-order source into buf (row r at buf + r K). */
static void qg_corder_rows(const qg_corder *src, ptrdiff_t K, uint8_t *buf, ptrdiff_t r0,
                           ptrdiff_t r1) {
    const ptrdiff_t hw = src->hw;
    while (r0 < r1) {
        const ptrdiff_t img = r0 / hw, at = r0 - img * hw;
        const ptrdiff_t run = hw - at < r1 - r0 ? hw - at : r1 - r0;
        qops_transpose8_pixels(src->x + img * K * hw + at, hw, K, run, buf + r0 * K, K);
        r0 += run;
    }
}

/* The first panel-major tile (tile t: panel t / nmb) by which `work` units of work are done,
 * a tile's work its panel's width in 16-column steps (`full` for whole panels, `last` for the
 * last one): the threads' runs then hold equal shares of the work, not of the tiles, which
 * gave one thread most of the columns where the last panel is partial (N = 80 on 64-column
 * panels: 64 + 16). */
static inline ptrdiff_t qg_tile_at(ptrdiff_t work, ptrdiff_t P, ptrdiff_t nmb, ptrdiff_t full,
                                   ptrdiff_t last) {
    const ptrdiff_t nfull = (P - 1) * nmb;
    if (work <= nfull * full) return (work + full - 1) / full;
    return nfull + (work - nfull * full + last - 1) / last;
}

/* All tiles of rows [0, M) over nthreads threads: row blocks x column panels, static (with
 * src, A is unread: each thread transposes its tiles' rows from src first). */
static void qg_tiles_src(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                         const qops_gemm_b *B, const qops_gemm_out *out, int nthreads,
                         const qg_apk *ap, const qg_corder *src) {
    const ptrdiff_t P = qg_npanels(B->N);
    const ptrdiff_t nmb = (M + QG_MB - 1) / QG_MB;
    ptrdiff_t mb = (M + nmb - 1) / nmb;
#ifdef QG_AMX
    const ptrdiff_t mq = qg_amx_k(B->K) ? QG_AMX_ROWS : QG_MR;
#else
    const ptrdiff_t mq = QG_MR;
#endif
    mb = ((mb + mq - 1) / mq) * mq;
    const ptrdiff_t ntiles = P * nmb;
    if (nthreads < 1) nthreads = 1;
    if (nthreads > ntiles) nthreads = (int)ntiles;
    /* Tiles panel-major (a thread's tiles share weight panels), or row-block-major for small
     * weights (qg_sweep); no two tiles share outputs. Each thread a contiguous run of them. */
    const int sweep = qg_sweep(B, P);
    #pragma omp parallel num_threads(nthreads)
    {
#ifdef _OPENMP
        const ptrdiff_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const ptrdiff_t tid = 0, nt = 1;
#endif
        ptrdiff_t t0 = ntiles * tid / nt, t1 = ntiles * (tid + 1) / nt;
        if (!sweep && B->N % QG_NR) {
            const ptrdiff_t full = QG_NR / 16, last = (B->N - (P - 1) * QG_NR + 15) / 16;
            const ptrdiff_t total = nmb * ((P - 1) * full + last);
            t0 = qg_tile_at(total * tid / nt, P, nmb, full, last);
            t1 = qg_tile_at(total * (tid + 1) / nt, P, nmb, full, last);
        }
        const uint8_t *At = A;
        if (src) {
            /* the rows this thread's tiles read, transposed into its buffer */
            ptrdiff_t lo = M, hi = 0;
            for (ptrdiff_t t = t0; t < t1; t++) {
                const ptrdiff_t r0 = (sweep ? t / P : t % nmb) * mb;
                if (r0 >= M) continue;
                lo = r0 < lo ? r0 : lo;
                hi = r0 + mb > hi ? (r0 + mb < M ? r0 + mb : M) : hi;
            }
            uint8_t *buf = src->bufs + tid * M * lda;
            qg_corder_rows(src, lda, buf, lo, hi);
            At = buf;
        }
        for (ptrdiff_t t = t0; t < t1; t++) {
            const ptrdiff_t p = sweep ? t % P : t / nmb, r0 = (sweep ? t / P : t % nmb) * mb;
            if (r0 < M) {
                const ptrdiff_t rows = M - r0 < mb ? M - r0 : mb;
                const qops_gemm_out o = qg_out_from(out, r0);
#ifdef QG_AVX2
                qg_apk a2;
                if (ap) {
                    a2 = qg_apk_from(ap, r0);
                    a2.tmp += tid * QG_TMP_ROWS * a2.Kp;        /* this thread's slot */
                }
                qg_panels(At + r0 * lda, lda, rows, a_zp, B, p, p + 1, &o, ap ? &a2 : NULL);
#else
                qg_panels(At + r0 * lda, lda, rows, a_zp, B, p, p + 1, &o, ap);
#endif
            }
        }
    }
}

static void qg_tiles(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                     const qops_gemm_b *B, const qops_gemm_out *out, int nthreads,
                     const qg_apk *ap) {
    qg_tiles_src(A, lda, M, a_zp, B, out, nthreads, ap, NULL);
}

#ifdef QG_AVX2
/* Repack rows [0, rows) of A for the kernels the panels need (see qg_apk). */
static void qg_pack_a(const uint8_t *A, ptrdiff_t lda, ptrdiff_t rows, ptrdiff_t K,
                      ptrdiff_t Kp, uint8_t *raw, uint8_t *nib, int nthreads) {
    #pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
    for (ptrdiff_t i = 0; i < rows; i++) {
        const uint8_t *x = A + i * lda;
        if (raw) {
            uint8_t *r = raw + i * Kp;
            memcpy(r, x, (size_t)K);
            memset(r + K, 0, (size_t)(Kp - K));
        }
        if (nib) {
            uint8_t *q = nib + i * 2 * qg_kc(Kp);
            ptrdiff_t k = 0;
            for (; k + 4 <= K; k += 4) {
                uint32_t v;
                memcpy(&v, x + k, 4);
                uint32_t lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;
                memcpy(q + 2 * k, &lo, 4);
                memcpy(q + 2 * k + 4, &hi, 4);
            }
            memset(q + 2 * k, 0, (size_t)(2 * (qg_kc(Kp) - k)));
            for (; k < K; k++) {
                q[2 * (k & ~(ptrdiff_t)3) + (k & 3)] = x[k] & 15;
                q[2 * (k & ~(ptrdiff_t)3) + 4 + (k & 3)] = x[k] >> 4;
            }
        }
    }
}

/* Rows in blocks whose repacked A takes at most this many bytes. */
#define QG_APACK_BYTES ((ptrdiff_t)4 << 20)

static inline uint8_t qg_row_max(const uint8_t *x, ptrdiff_t K) {
    __m256i m = _mm256_setzero_si256();
    ptrdiff_t k = 0;
    for (; k + 32 <= K; k += 32) m = _mm256_max_epu8(m, _mm256_loadu_si256((const __m256i *)(x + k)));
    __m128i h = _mm_max_epu8(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 8));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 4));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 2));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 1));
    uint8_t r = (uint8_t)_mm_cvtsi128_si32(h);
    for (; k < K; k++) r = x[k] > r ? x[k] : r;
    return r;
}

/* Bytes of a block's A buffers (qg_block): raw and nibble rows, the rows' maxima. */
static inline ptrdiff_t qg_block_bytes(ptrdiff_t rows, ptrdiff_t Kp) {
    return rows * (Kp + 2 * qg_kc(Kp) + 1);
}

/* Rows [0, rows) of A made ready for the kernels (*ap), A's values at most xmax; buf:
 * qg_block_bytes(rows, Kp). Where some panel's S could saturate a pair sum, each row's
 * largest value is found, and a micro-tile takes the pairsafe kernel wherever its own rows
 * allow: inputs calibrated to 0..127 that stray a little past it (a model on new data) keep
 * it for most tiles. The rest take qg_split's two halves, or, where more than a quarter of
 * the rows need them, the nibble kernel on A split once for the block. */
static void qg_block(qg_apk *ap, const uint8_t *A, ptrdiff_t lda, ptrdiff_t rows, ptrdiff_t K,
                     ptrdiff_t Kp, int32_t smax, int32_t sid, int32_t s4,
                     ptrdiff_t npanels, int32_t xmax,
                     uint8_t *buf, int nthreads) {
    uint8_t *rmax = buf + rows * (Kp + 2 * qg_kc(Kp));
    ptrdiff_t unsafe = 0;
    ap->Kp = Kp;
    ap->rmax = NULL;
    /* the rows' maxima where a tile's kernel or weight copy depends on them (smax: the
     * panels' largest S in the better of their orders; sid: in k order, >= smax; s4: the
     * panels' largest S4, in k order). For the two-group kernel alone (A's largest value
     * keeps every pair sum exact, but not every quad sum: a conv's im2col rows of inputs to
     * 127) only where the weight has 4+ panels: the pass reads each row once whatever the
     * width, while what the faster kernel saves on a row of small values grows with the
     * panels it is multiplied by, so on a narrow weight the pass costs more than it saves. */
    if (xmax * sid > 32767 || (xmax * s4 > 32767 && npanels >= 4)) {
        xmax = 0;
        for (ptrdiff_t i = 0; i < rows; i++) {
            const uint8_t m = qg_row_max(A + i * lda, K);
            rmax[i] = m;
            xmax = m > xmax ? m : xmax;
            unsafe += (int32_t)m * smax > 32767;
        }
        ap->rmax = rmax;
    }
    ap->xmax = xmax;
    /* the rows as they are, for the pairsafe kernel (any tile may be safe), read in place
     * where they are whole groups */
    const int in_place = K == Kp;
    /* the nibble kernel where its padding to whole chunks adds at most a third: past that
     * (K = 40: 64) qg_split's two pairsafe runs cost no more */
    ap->nib = unsafe * 4 > rows && 3 * qg_kc(Kp) <= 4 * Kp ? buf + rows * Kp : NULL;
    ap->raw = in_place ? A : buf;
    ap->lr = in_place ? lda : Kp;
    if (!in_place || ap->nib)
        qg_pack_a(A, lda, rows, K, Kp, in_place ? NULL : buf, (uint8_t *)ap->nib,
                  rows * K >= 65536 ? nthreads : 1);
}

static void qg_run(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                   const qops_gemm_b *B, const qops_gemm_out *out, int nthreads) {
    const ptrdiff_t K = B->K, G = qg_groups(K), Kp = G * QG_KG;
    int32_t smax, sid, s4;
    qg_s_max(B, &smax, &sid, &s4);
    ptrdiff_t sb = QG_APACK_BYTES / qg_block_bytes(1, Kp);
    sb = sb < QG_MB ? QG_MB : (sb / QG_MB) * QG_MB;
    if (sb > M) sb = M;
    /* the block's A buffers, then a micro-tile's scratch per thread */
    const ptrdiff_t nt = nthreads < 1 ? 1 : nthreads;
    const ptrdiff_t bytes = qg_block_bytes(sb, Kp) + nt * QG_TMP_ROWS * Kp;
    uint8_t *buf = (uint8_t *)malloc((size_t)(bytes > 0 ? bytes : 1));
    if (!buf) {
        qg_tiles(A, lda, M, a_zp, B, out, nthreads, NULL);
        return;
    }
    for (ptrdiff_t r0 = 0; r0 < M; r0 += sb) {
        const ptrdiff_t rows = M - r0 < sb ? M - r0 : sb;
        const uint8_t *Ab = A + r0 * lda;
        qg_apk ap;
        qg_block(&ap, Ab, lda, rows, K, Kp, smax, sid, s4, qg_npanels(B->N), 255, buf,
                 nthreads);
        ap.tmp = buf + qg_block_bytes(sb, Kp);
        const qops_gemm_out o = qg_out_from(out, r0);
        qg_tiles(Ab, lda, rows, a_zp, B, &o, nthreads, &ap);
    }
    free(buf);
}
#endif

/* Scratch bytes qops_gemm_rows needs for up to M rows of depth K. */
static inline ptrdiff_t qops_gemm_rows_scratch(ptrdiff_t M, ptrdiff_t K) {
#ifdef QG_AVX2
    const ptrdiff_t Kp = qg_groups(K) * QG_KG;
    return qg_block_bytes(M, Kp) + QG_TMP_ROWS * Kp;
#else
    (void)M; (void)K;
    return 0;
#endif
}

/* Rows [0, M) of A times all of B on the calling thread, A's values known to be at most
 * xmax: for a block of rows its caller has just made and keeps in cache (a conv's im2col
 * rows), multiplied panel by panel while it is there. scratch: qops_gemm_rows_scratch(M, K)
 * bytes. */
static void qops_gemm_rows_panels(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                                  uint8_t xmax, const qops_gemm_b *B, ptrdiff_t p0,
                                  ptrdiff_t p1, const qops_gemm_out *out, uint8_t *scratch) {
    const ptrdiff_t P = qg_npanels(B->N);
    if (p1 > P) p1 = P;
    if (M <= 0 || p0 >= p1) return;
#ifdef QG_AVX2
    const ptrdiff_t K = B->K, G = qg_groups(K), Kp = G * QG_KG;
    int32_t smax, sid, s4;
    qg_s_max(B, &smax, &sid, &s4);
    qg_apk ap;
    qg_block(&ap, A, lda, M, K, Kp, smax, sid, s4, P, xmax, scratch, 1);
    ap.tmp = scratch + qg_block_bytes(M, Kp);
    qg_panels(A, lda, M, a_zp, B, p0, p1, out, &ap);
#else
    (void)xmax; (void)scratch;
    qg_panels(A, lda, M, a_zp, B, p0, p1, out, NULL);
#endif
}

static void qops_gemm_rows(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                           uint8_t xmax, const qops_gemm_b *B, const qops_gemm_out *out,
                           uint8_t *scratch) {
    if (B->N <= 0) return;
    qops_gemm_rows_panels(A, lda, M, a_zp, xmax, B, 0, qg_npanels(B->N), out, scratch);
}

/* 1 where qops_gemm_taps runs (AVX-512 VNNI builds). */
static inline int qops_gemm_taps_available(void) {
#ifdef QG_VNNI
    return 1;
#else
    return 0;
#endif
}

/* M rows by pointer (row i's k values: ntaps runs of C bytes, run t at rp[i] + toff[t];
 * C % 4 == 0, K = ntaps * C up to the packed depth, whose extra groups are zero weights)
 * times weight panels [p0, p1) of B, whose zero points must all be 0 (B->wzp NULL): the
 * conv's window read in place (qconv_taps_gemm). AVX-512 VNNI builds only. */
static void qops_gemm_taps(const uint8_t *const *rp, ptrdiff_t M, const ptrdiff_t *toff,
                           int ntaps, ptrdiff_t C, int32_t a_zp, const qops_gemm_b *B,
                           ptrdiff_t p0, ptrdiff_t p1, const qops_gemm_out *o) {
#ifdef QG_VNNI
    const ptrdiff_t N = B->N, K = B->K, P = qg_npanels(N);
    int32_t acc[QG_MR * QG_NR] __attribute__((aligned(64)));
    int32_t corr[QG_NR], wz[QG_NR], rs[QG_MR];
    for (int i = 0; i < QG_MR; i++) rs[i] = 0;
    if (p1 > P) p1 = P;
    for (ptrdiff_t p = p0; p < p1; p++) {
        const ptrdiff_t n0 = p * QG_NR;
        const ptrdiff_t w = N - n0 < QG_NR ? N - n0 : QG_NR;
        const int width = (int)qg_panel_width(N, p);
        const int8_t *bp = qg_panel_ptr(B->data, K, p);
        qg_panel_terms(B, a_zp, n0, w, corr, wz);
        if (o->kind == QOPS_GEMM_U8 && !B->wzp) {
            /* the usual case (uint8 out, symmetric weights): the panel's requantization
             * constants loaded once, not per tile (few-channel convs, the RGB stems, store
             * 16-32 outputs a pixel for ~9 products each) */
            qg_u8_panel q;
            qg_u8_panel_init(&q, corr, n0, w, o);
            for (ptrdiff_t mr = 0, m0 = 0; m0 < M; m0 += mr) {
                mr = qg_tile_rows(M - m0);
                qg_micro_taps_dispatch((int)mr, width, rp + m0, toff, ntaps, C / 4, bp, acc);
                qg_u8_panel_store(&q, acc, (int)mr, (uint8_t *)o->out + m0 * o->ldc + n0, o->ldc);
            }
            continue;
        }
        for (ptrdiff_t mr = 0, m0 = 0; m0 < M; m0 += mr) {
            const ptrdiff_t left = M - m0;
            mr = qg_tile_rows(left);
            qg_micro_taps_dispatch((int)mr, width, rp + m0, toff, ntaps, C / 4, bp, acc);
            qg_store(acc, (int)mr, w, m0, n0, corr, wz, rs, o);
        }
    }
#else
    (void)rp; (void)M; (void)toff; (void)ntaps; (void)C; (void)a_zp; (void)B; (void)p0;
    (void)p1; (void)o;
#endif
}

static void qops_gemm(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                      const qops_gemm_b *B, const qops_gemm_out *out) {
    if (M <= 0 || B->N <= 0) return;
#ifdef QG_AVX2
    qg_run(A, lda, M, a_zp, B, out, 1);
#else
    qg_panels(A, lda, M, a_zp, B, 0, qg_npanels(B->N), out, NULL);
#endif
}

static void qops_gemm_mt(const uint8_t *A, ptrdiff_t lda, ptrdiff_t M, int32_t a_zp,
                         const qops_gemm_b *B, const qops_gemm_out *out, int nthreads) {
    if (M <= 0 || B->N <= 0) return;
#ifdef QG_AVX2
    qg_run(A, lda, M, a_zp, B, out, nthreads);
#else
    qg_tiles(A, lda, M, a_zp, B, out, nthreads, NULL);
#endif
}

/* qops_gemm_mt of A = the pixels of x, C-order images of K channel planes of hw pixels
 * (M = images x hw rows of K), each thread transposing the rows its tiles read into its own
 * part of bufs (nthreads x M x K bytes). AVX2 builds (which repack A per block) transpose
 * all of it into bufs first. */
static void qops_gemm_mt_corder(const uint8_t *x, ptrdiff_t hw, ptrdiff_t K, ptrdiff_t M,
                                int32_t a_zp, const qops_gemm_b *B, const qops_gemm_out *out,
                                int nthreads, uint8_t *bufs) {
    if (M <= 0 || B->N <= 0) return;
    const qg_corder src = {x, hw, bufs};
#ifdef QG_AVX2
    qg_corder_rows(&src, K, bufs, 0, M);
    qg_run(bufs, K, M, a_zp, B, out, nthreads);
#else
    qg_tiles_src(bufs, K, M, a_zp, B, out, nthreads, NULL, &src);
#endif
}

#endif
