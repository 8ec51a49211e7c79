/* Planes route, AVX2: grouped (vpmaddubsw + vpmaddwd, exact) and depthwise (vpmaddwd on
 * int16 pixel pairs) kernels, 8 pixels per vector. qconv_requant8, qconv_store32 and
 * qconv_wpair also serve the depthwise-rows kernel (qops_conv_dwrows_avx2.h) and the
 * channels-last depthwise kernel (qops_conv_dwcl_avx2.h). */
#ifndef QOPS_CONV_PLANES_AVX2_H
#define QOPS_CONV_PLANES_AVX2_H
#include "qops_conv_planes.h"

#ifdef QCONV_AVX2
/* AVX2 kernels: 8 pixels per vector (a 32-byte load holds the 4-channel quads of 8 pixels).
 * vpdpbusd is emulated exactly: vpmaddubsw (u8 x s8, pairs summed into int16), then vpmaddwd
 * with ones into int32. vpmaddubsw saturates a pair sum that leaves int16, so that path runs
 * (`pairsafe`, set per call by conv.pyx) only when the largest input times `pairmax` fits:
 * pairmax is the largest per-sign sum over a weight pair (bytes 0-1 and 2-3 of a quad), found
 * by pack_weight; pairmax <= 128 always qualifies, and so do 7-bit activations.
 * Other weights run split, w = 16*wh + wl with wh in [-8, 7] and wl in [0, 15] (wvh, wvl):
 * two vpmaddubsw that cannot saturate, the high one weighted by 16 in its vpmaddwd. Both give
 * the exact int32 sums of the portable kernel. (PyTorch's fbgemm AVX2 kernels take the first
 * path for every weight, so its results saturate where a pair overflows.) */
static inline __attribute__((always_inline)) __m256i
qconv_dot8(__m256i acc, __m256i x, const qconv_args *a, ptrdiff_t widx, int split) {
    if (!split)
        return _mm256_add_epi32(acc, _mm256_madd_epi16(
            _mm256_maddubs_epi16(x, _mm256_set1_epi32(a->wv[widx])), _mm256_set1_epi16(1)));
    __m256i l = _mm256_madd_epi16(_mm256_maddubs_epi16(x, _mm256_set1_epi32(a->wvl[widx])),
                                  _mm256_set1_epi16(1));
    __m256i h = _mm256_madd_epi16(_mm256_maddubs_epi16(x, _mm256_set1_epi32(a->wvh[widx])),
                                  _mm256_set1_epi16(16));
    return _mm256_add_epi32(acc, _mm256_add_epi32(l, h));
}

/* Requantize 8 accumulators (8 pixels of one output channel) with the steps and NaN rule of
 * qconv_store16: int32 results in [0, 255]. */
static inline __attribute__((always_inline)) __m256i
qconv_requant8(__m256i acc, __m256 bterm, __m256 mult, __m256 lo, __m256 hi, __m256i ozp) {
    __m256 y = _mm256_add_ps(_mm256_cvtepi32_ps(acc), bterm);
    __m256 r = _mm256_max_ps(_mm256_min_ps(_mm256_mul_ps(y, mult), hi), lo);
    return _mm256_add_epi32(_mm256_cvtps_epi32(r), ozp);
}

/* qconv_requant8, then store the first nv bytes. */
static inline __attribute__((always_inline)) void
qconv_store8(__m256i acc, __m256 bterm, __m256 mult, __m256 lo, __m256 hi, __m256i ozp,
             uint8_t *o, int nv) {
    __m256i v = qconv_requant8(acc, bterm, mult, lo, hi, ozp);
    __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    p = _mm_packus_epi16(p, p);
    if (nv >= 8) {
        _mm_storel_epi64((__m128i *)o, p);
    } else {
        uint8_t t[16];
        _mm_storeu_si128((__m128i *)t, p);
        memcpy(o, t, (size_t)nv);
    }
}

/* Requantize V <= 4 vectors of 8 accumulators (up to 32 pixels of one output channel) and
 * store the first nv. */
static inline __attribute__((always_inline)) void
qconv_store32(const __m256i acc[4], const int V, __m256 bterm, __m256 mult, __m256 lo, __m256 hi,
              __m256i ozp, uint8_t *o, int nv) {
    __m256i v[4];
    for (int i = 0; i < 4; i++)
        v[i] = i < V ? qconv_requant8(acc[i], bterm, mult, lo, hi, ozp) : _mm256_setzero_si256();
    /* values are in [0, 255]: the saturating packs change nothing */
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (nv >= 32) {
        _mm256_storeu_si256((__m256i *)o, p);
        return;
    }
    /* the tail straight from the registers (a bounce through memory stalls store forwarding) */
    __m128i h = _mm256_castsi256_si128(p);
    if (nv >= 16) { _mm_storeu_si128((__m128i *)o, h); o += 16; nv -= 16; h = _mm256_extracti128_si256(p, 1); }
    if (nv >= 8) { _mm_storel_epi64((__m128i *)o, h); o += 8; nv -= 8; h = _mm_srli_si128(h, 8); }
    uint64_t b = (uint64_t)_mm_cvtsi128_si64(h);
    if (nv >= 4) { uint32_t t4 = (uint32_t)b; memcpy(o, &t4, 4); o += 4; nv -= 4; b >>= 32; }
    if (nv >= 2) { uint16_t t2 = (uint16_t)b; memcpy(o, &t2, 2); o += 2; nv -= 2; b >>= 16; }
    if (nv >= 1) o[0] = (uint8_t)b;
}

/* R output channels x V vectors of 8 pixels, all accumulators in registers. */
static inline __attribute__((always_inline)) void
qconv_block_avx2(const qconv_args *a, const uint8_t *gbase, const ptrdiff_t *oc, const int R,
                 const int V, __m256i acc[4][2], int split) {
    ptrdiff_t wbase[4];
    for (int r = 0; r < R; r++) {
        wbase[r] = oc[r] * a->ntaps * a->C4;
        for (int v = 0; v < V; v++) acc[r][v] = _mm256_setzero_si256();
    }
    for (int t = 0; t < a->ntaps; t++) {
        const uint8_t *xt = gbase + a->toff[t];
        for (int c4 = 0; c4 < a->C4; c4++) {
            const uint8_t *x = xt + c4 * a->c4_stride;
            __m256i xv[2];
            for (int v = 0; v < V; v++) xv[v] = _mm256_loadu_si256((const __m256i *)(x + 32 * v));
            for (int r = 0; r < R; r++)
                for (int v = 0; v < V; v++)
                    acc[r][v] = qconv_dot8(acc[r][v], xv[v], a, wbase[r] + t * a->C4 + c4, split);
        }
    }
}

static inline __attribute__((always_inline)) void
qconv_grouped_avx2_t(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                     ptrdiff_t ow0, ptrdiff_t ow1, int split) {
    const __m256 lo = _mm256_set1_ps((float)(a->lo - a->ozp)), hi = _mm256_set1_ps((float)(255 - a->ozp));
    const __m256i ozp = _mm256_set1_epi32(a->ozp);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    for (ptrdiff_t ow = ow0; ow < ow1; ow += 16) {
        const int nv = (int)(ow1 - ow < 16 ? ow1 - ow : 16), V = nv > 8 ? 2 : 1;
        const ptrdiff_t pix = qconv_pix_offset(a, od, oh, ow);
        for (int g = 0; g < a->G; g++) {
            const uint8_t *gbase = ximg + (ptrdiff_t)g * a->group_bytes + pix;
            __m256i S[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            if (a->gany[g])
                for (int t = 0; t < a->ntaps; t++)
                    for (int c4 = 0; c4 < a->C4; c4++) {
                        const uint8_t *x = gbase + c4 * a->c4_stride + a->toff[t];
                        for (int v = 0; v < 2; v++)
                            S[v] = _mm256_add_epi32(S[v], _mm256_madd_epi16(_mm256_maddubs_epi16(
                                _mm256_loadu_si256((const __m256i *)(x + 32 * v)), ones8), ones16));
                    }
            for (int o0 = 0; o0 < a->Og; o0 += 4) {
                /* channels past the group's end repeat its last one (computed, never stored) */
                ptrdiff_t oc[4];
                int R = a->Og - o0 < 4 ? a->Og - o0 : 4;
                for (int r = 0; r < 4; r++) oc[r] = (ptrdiff_t)g * a->Og + o0 + (r < R ? r : R - 1);
                __m256i acc[4][2];
                if (V == 2) qconv_block_avx2(a, gbase, oc, 4, 2, acc, split);
                else qconv_block_avx2(a, gbase, oc, 4, 1, acc, split);
                for (int r = 0; r < R; r++) {
                    ptrdiff_t o = oc[r];
                    __m256i corr = _mm256_set1_epi32((int32_t)((uint32_t)a->xz * (uint32_t)a->kzw[o]));
                    __m256 bt = _mm256_set1_ps(a->bterm[o]), mu = _mm256_set1_ps(a->mult[o]);
                    uint8_t *dst = qconv_out_row(a, n, o, od, oh) + ow;
                    for (int v = 0; v < V; v++) {
                        __m256i s = _mm256_add_epi32(acc[r][v], corr);
                        if (a->gany[g])
                            s = _mm256_sub_epi32(s, _mm256_mullo_epi32(_mm256_set1_epi32(a->wz[o]), S[v]));
                        qconv_store8(s, bt, mu, lo, hi, ozp, dst + 8 * v, nv - 8 * v);
                    }
                }
            }
        }
    }
}

static void qconv_grouped_avx2(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                               ptrdiff_t ow0, ptrdiff_t ow1) {
    if (a->pairsafe) qconv_grouped_avx2_t(a, n, od, oh, ow0, ow1, 0);
    else qconv_grouped_avx2_t(a, n, od, oh, ow0, ow1, 1);
}

/* AVX2 depthwise: vpmaddwd on int16 pairs, (x[a], x[b]) per pixel in an int32 slot, against
 * the weight pair (w[a], w[b]); always exact (no vpmaddubsw saturation to guard against).
 * Weight pairs from taps packed four to an int32 (zero bytes past the last tap). */
static inline int32_t qconv_wpair(int32_t w4, int hi) {
    int32_t b0 = (int8_t)((w4 >> (16 * hi)) & 0xff), b1 = (int8_t)((w4 >> (16 * hi + 8)) & 0xff);
    return (int32_t)((uint32_t)(uint16_t)(int16_t)b0 | ((uint32_t)(uint16_t)(int16_t)b1 << 16));
}

/* Planes path (any stride, dilation, kernel): two taps per vpmaddwd, 8 pixels per vector. */
static inline __attribute__((always_inline)) void
qconv_dw_avx2_block(const qconv_args *a, const uint8_t *base, const int32_t *wq, int sums,
                    __m256i acc[4], __m256i S[4], const int V) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int np = (a->ntaps + 1) / 2;
    for (int v = 0; v < V; v++) { acc[v] = _mm256_setzero_si256(); S[v] = _mm256_setzero_si256(); }
    for (int p = 0; p < np; p++) {
        const int t0 = 2 * p, t1 = 2 * p + 1 < a->ntaps ? 2 * p + 1 : 2 * p;   /* weight 0 past the end */
        const __m256i w = _mm256_set1_epi32(qconv_wpair(wq[p >> 1], p & 1));
        const uint8_t *x0 = base + a->toff[t0], *x1 = base + a->toff[t1];
        for (int h = 0; h < (V + 1) / 2; h++) {
            __m128i u = _mm_loadu_si128((const __m128i *)(x0 + 16 * h));
            __m128i z = _mm_loadu_si128((const __m128i *)(x1 + 16 * h));
            __m256i X[2] = {_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(u, z)),
                            _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(u, z))};
            for (int k = 0; k < 2 && 2 * h + k < V; k++) {
                acc[2 * h + k] = _mm256_add_epi32(acc[2 * h + k], _mm256_madd_epi16(X[k], w));
                if (sums) {
                    __m256i on = t1 == t0 ? _mm256_set1_epi32(1) : ones;
                    S[2 * h + k] = _mm256_add_epi32(S[2 * h + k], _mm256_madd_epi16(X[k], on));
                }
            }
        }
    }
}

static void qconv_dw_avx2(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                          ptrdiff_t ow0, ptrdiff_t ow1) {
    const __m256 lo = _mm256_set1_ps((float)(a->lo - a->ozp)), hi = _mm256_set1_ps((float)(255 - a->ozp));
    const __m256i ozp = _mm256_set1_epi32(a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    const int nq = (a->ntaps + 3) / 4;
    for (ptrdiff_t c = 0; c < a->O; c++) {
        const uint8_t *plane = ximg + c * a->group_bytes;
        const int32_t *wq = a->wv + c * nq;
        const int sums = a->gany[c];
        const __m256i corr = _mm256_set1_epi32((int32_t)((uint32_t)a->xz * (uint32_t)a->kzw[c]));
        const __m256i wz = _mm256_set1_epi32(a->wz[c]);
        const __m256 bt = _mm256_set1_ps(a->bterm[c]), mu = _mm256_set1_ps(a->mult[c]);
        uint8_t *drow = qconv_out_row(a, n, c, od, oh);
        for (ptrdiff_t ow = ow0; ow < ow1; ow += 32) {
            const int nv = (int)(ow1 - ow < 32 ? ow1 - ow : 32);
            const uint8_t *base = plane + qconv_pix_offset(a, od, oh, ow);
            __m256i acc[4], S[4];
            const int V = (nv + 7) / 8;
            if (V == 4) qconv_dw_avx2_block(a, base, wq, sums, acc, S, 4);
            else if (V == 3) qconv_dw_avx2_block(a, base, wq, sums, acc, S, 3);
            else if (V == 2) qconv_dw_avx2_block(a, base, wq, sums, acc, S, 2);
            else qconv_dw_avx2_block(a, base, wq, sums, acc, S, 1);
            for (int v = 0; v < V; v++) {
                acc[v] = _mm256_add_epi32(acc[v], corr);
                if (sums) acc[v] = _mm256_sub_epi32(acc[v], _mm256_mullo_epi32(wz, S[v]));
            }
            qconv_store32(acc, V, bt, mu, lo, hi, ozp, drow + ow, nv);
        }
    }
}
#endif /* QCONV_AVX2 */

#endif
