/* AVX-512 VBMI: stride-2 max pools on rows of at most 128 bytes (route vbmi_s2), and the
 * vertical fold of adaptive max windows on such rows. */
#ifndef QOPS_POOL_AVX512_VBMI_H
#define QOPS_POOL_AVX512_VBMI_H
#include "qops_pool_avx512_short.h"
#if QP_SIMD == 2
}
/* Max pools with column stride 2, kW <= 3 taps, dilation 1, rows of at most 128 bytes, one
 * depth tap (kD = sD = 1, pD = 0), on CPUs with VBMI (the caller checks qp_cpu_vbmi): per
 * output row the window's rows are max-folded first (two vectors a row), then vpermt2b
 * gathers each output's taps from the folded pair, three permutes and two maxima for a whole
 * row of up to 64 outputs. Taps outside the input repeat one inside the window (harmless to
 * a max). Rows QP_S2_AHEAD output rows ahead are prefetched: without it, beyond the caches
 * this kernel ran slower than the column walk it replaces beyond the caches. */
#define QP_S2_AHEAD 16
static int qp_cpu_vbmi(void) { return __builtin_cpu_supports("avx512vbmi"); }

__attribute__((target("avx512vbmi")))
static void qp_max_s2_rows(const uint8_t *x, uint8_t *out, const qp_geom *g, ptrdiff_t g0,
                           ptrdiff_t g1, int sgn) {
    const ptrdiff_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, kH = g->kH, sH = g->sH;
    const ptrdiff_t pH = g->pH, kW = g->kW, pW = g->pW;
    uint8_t ix[3][64];
    for (int t = 0; t < 3; t++)
        for (ptrdiff_t o = 0; o < 64; o++) {
            ptrdiff_t lo = 2 * o - pW, hi = lo + kW - 1, c = lo + (t < kW ? t : kW - 1);
            if (lo < 0) lo = 0;
            if (hi > W - 1) hi = W - 1;
            c = o >= OW ? 0 : c < lo ? lo : c > hi ? hi : c;
            ix[t][o] = (uint8_t)c;
        }
    const __m512i i0 = _mm512_loadu_si512((const void *)ix[0]);
    const __m512i i1 = _mm512_loadu_si512((const void *)ix[1]);
    const __m512i i2 = _mm512_loadu_si512((const void *)ix[2]);
    const __mmask64 m0 = qp_m64(0, W), m1 = qp_m64(0, W - 64), om = qp_m64(0, OW);
    ptrdiff_t p = g0 / OH, oh = g0 % OH;
    for (ptrdiff_t r = g0; r < g1; r++) {
        ptrdiff_t h0 = oh * sH - pH, h1 = h0 + kH;
        if (h0 < 0) h0 = 0;
        if (h1 > H) h1 = H;
        const uint8_t *q = x + (p * H + h0) * W, *f = q + QP_S2_AHEAD * sH * W;
        _mm_prefetch((const char *)f, _MM_HINT_T0);
        _mm_prefetch((const char *)f + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)f + W, _MM_HINT_T0);
        _mm_prefetch((const char *)f + W + 64, _MM_HINT_T0);
        qp_pfw(out + (r + QP_S2_AHEAD) * OW);
        __m512i a = _mm512_maskz_loadu_epi8(m0, q), b = _mm512_maskz_loadu_epi8(m1, q + 64);
        for (ptrdiff_t h = h0 + 1; h < h1; h++) {
            q += W;
            a = qp_vmax(a, ~0ULL, _mm512_maskz_loadu_epi8(m0, q), sgn);
            b = qp_vmax(b, ~0ULL, _mm512_maskz_loadu_epi8(m1, q + 64), sgn);
        }
        __m512i v = qp_vmax(_mm512_permutex2var_epi8(a, i0, b), ~0ULL,
                            _mm512_permutex2var_epi8(a, i1, b), sgn);
        if (kW > 2) v = qp_vmax(v, ~0ULL, _mm512_permutex2var_epi8(a, i2, b), sgn);
        _mm512_mask_storeu_epi8(out + r * OW, om, v);
        if (++oh == OH) { oh = 0; p++; }
    }
}

/* buf[0:W] = max over r < rows of the rows x + r*W (W <= 128), merged with buf's own values
 * unless `first`: the vertical half of an adaptive max window on rows of up to two vectors,
 * the running maxima kept in registers (a store and reload per row was most of the cost). */
static void qp_fold_max128(const uint8_t *x, ptrdiff_t W, ptrdiff_t rows, uint8_t *buf,
                           int first, int sgn) {
    const __mmask64 m0 = W >= 64 ? ~0ULL : (1ULL << W) - 1;
    const __mmask64 m1 = W >= 128 ? ~0ULL : W > 64 ? (1ULL << (W - 64)) - 1 : 0;
    __m512i a0 = _mm512_maskz_loadu_epi8(m0, first ? x : buf);
    __m512i a1 = _mm512_maskz_loadu_epi8(m1, (first ? x : buf) + 64);
    for (ptrdiff_t r = first ? 1 : 0; r < rows; r++) {
        const uint8_t *p = x + r * W;
        /* the stream of rows 16 ahead (beyond the caches this fold ran slower without) */
        _mm_prefetch((const char *)(p + 16 * W), _MM_HINT_T0);
        _mm_prefetch((const char *)(p + 16 * W + 64), _MM_HINT_T0);
        __m512i b0 = _mm512_maskz_loadu_epi8(m0, p), b1 = _mm512_maskz_loadu_epi8(m1, p + 64);
        a0 = sgn ? _mm512_max_epi8(a0, b0) : _mm512_max_epu8(a0, b0);
        a1 = sgn ? _mm512_max_epi8(a1, b1) : _mm512_max_epu8(a1, b1);
    }
    _mm512_mask_storeu_epi8(buf, m0, a0);
    _mm512_mask_storeu_epi8(buf + 64, m1, a1);
}
#endif  /* QP_SIMD == 2 */
#endif  /* QOPS_POOL_AVX512_VBMI_H */
