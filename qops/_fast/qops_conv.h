/* Quantized convolution kernels: uint8 input x int8 weight -> exact int32 -> requantized uint8.
 *
 * Layout ("planes"). The input is copied once into padded planes with the output pixels of a
 * row in the vector lanes, so the output comes out NCDHW directly:
 *   grouped conv:  [n][group][Dp][Hp][c4][sw][Wq][4]   four input channels interleaved per pixel
 *   depthwise:     [n][c][Dp][Hp][sw][Wq]
 * (the channel quads of one padded row sit together, so a 16-quad AMX tile is one small block).
 * Each padded row is split into `sw` phases (column j of phase f holds padded column j*sw + f),
 * so the pixels a kernel tap reads for consecutive outputs are consecutive in memory for every
 * stride. Padding holds the input zero point (a padded tap adds exactly 0 after the zero-point
 * correction); channel slots past C/groups hold 0 and meet zero weights.
 *
 * Accumulation is Sum x*w over raw values in wrapping int32, then the zero-point terms, also
 * wrapping:  acc = Sum x*w - wz*Sum x + xz*(K*wz - Sum w). The caller guarantees the true
 * accumulator fits int32, so the wrapped result is exact. Requantization, the same in every
 * path (docs/semantics.md §8):
 *   y = f32(f32(acc) + bterm);  out = clamp(rint(f32(y * mult)), lo - ozp, 255 - ozp) + ozp
 *
 * Kernels: AMX (tdpbsud, weights as the signed operand, 16x16 output tiles) where the CPU and
 * kernel allow it, AVX-512 VNNI (vpdpbusd, 16 pixels per vector), AVX2 (vpmaddubsw +
 * vpmaddwd, 8 pixels per vector; depthwise: vpmaddwd on int16 pixel pairs), portable C otherwise.
 */
#ifndef QOPS_CONV_H
#define QOPS_CONV_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "qops_common.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define QCONV_VNNI 1
#include "qops_amx.h"
#ifdef QOPS_AMX
#define QCONV_AMX 1
#endif
#endif

#if defined(__AVX2__) && !defined(QCONV_VNNI)
#include <immintrin.h>
#define QCONV_AVX2 1
#endif

#define QCONV_PIX 64        /* output pixels of a row per work item */

/* ---------------------------------------------------------------------------------------- */
/* Building the planes                                                                       */

typedef struct {
    const uint8_t *x;
    ptrdiff_t sn, sc, sd, sh, sw_x;        /* input strides in bytes (any sign) */
    ptrdiff_t D, H, W;
    ptrdiff_t pd, ph, pw;
    ptrdiff_t Dp, Hp, sw, Wq, ilv;         /* ilv: 4 (grouped) or 1 (depthwise) */
    ptrdiff_t NG, C4, Cg;                  /* groups per image (channels if depthwise); quads per group */
    int dw;
    int xz;
    uint8_t *xq;
    ptrdiff_t group_bytes, img_bytes, row_bytes, c4_stride;
    uint8_t *scratch;                      /* per thread: scratch_bytes = 6 * sw * Wq + 64 */
    ptrdiff_t scratch_bytes;
} qconv_fill_args;

static inline void qconv_interleave4(const uint8_t *a, const uint8_t *b, const uint8_t *c,
                                     const uint8_t *d, uint8_t *dst, ptrdiff_t len) {
    ptrdiff_t j = 0;
#if defined(__SSE2__)
    for (; j + 16 <= len; j += 16) {
        __m128i va = _mm_loadu_si128((const __m128i *)(a + j)), vb = _mm_loadu_si128((const __m128i *)(b + j));
        __m128i vc = _mm_loadu_si128((const __m128i *)(c + j)), vd = _mm_loadu_si128((const __m128i *)(d + j));
        __m128i ab0 = _mm_unpacklo_epi8(va, vb), ab1 = _mm_unpackhi_epi8(va, vb);
        __m128i cd0 = _mm_unpacklo_epi8(vc, vd), cd1 = _mm_unpackhi_epi8(vc, vd);
        _mm_storeu_si128((__m128i *)(dst + 4 * j), _mm_unpacklo_epi16(ab0, cd0));
        _mm_storeu_si128((__m128i *)(dst + 4 * j + 16), _mm_unpackhi_epi16(ab0, cd0));
        _mm_storeu_si128((__m128i *)(dst + 4 * j + 32), _mm_unpacklo_epi16(ab1, cd1));
        _mm_storeu_si128((__m128i *)(dst + 4 * j + 48), _mm_unpackhi_epi16(ab1, cd1));
    }
#endif
    for (; j < len; j++) {
        dst[4 * j] = a[j]; dst[4 * j + 1] = b[j]; dst[4 * j + 2] = c[j]; dst[4 * j + 3] = d[j];
    }
}

/* One padded input row of one channel, split into sw phases of Wq columns: dst[f*Wq + j]. */
static inline void qconv_phase_row(const qconv_fill_args *f, const uint8_t *src, uint8_t *pr,
                                   uint8_t *dst) {
    const ptrdiff_t len = f->sw * f->Wq;
    uint8_t *row = f->sw == 1 ? dst : pr;
    ptrdiff_t pw = f->pw < len ? f->pw : len;
    ptrdiff_t wn = f->W < len - pw ? f->W : len - pw;
    memset(row, f->xz, (size_t)pw);
    if (f->sw_x == 1) {
        memcpy(row + pw, src, (size_t)wn);
    } else {
        for (ptrdiff_t j = 0; j < wn; j++) row[pw + j] = src[j * f->sw_x];
    }
    memset(row + pw + wn, f->xz, (size_t)(len - pw - wn));
    if (f->sw == 1) return;
    const ptrdiff_t wq = f->Wq;
    ptrdiff_t j = 0;
    if (f->sw == 2) {
#if defined(__SSE2__)
        const __m128i m = _mm_set1_epi16(0x00ff);
        for (; j + 16 <= wq; j += 16) {
            __m128i v0 = _mm_loadu_si128((const __m128i *)(pr + 2 * j));
            __m128i v1 = _mm_loadu_si128((const __m128i *)(pr + 2 * j + 16));
            _mm_storeu_si128((__m128i *)(dst + j),
                             _mm_packus_epi16(_mm_and_si128(v0, m), _mm_and_si128(v1, m)));
            _mm_storeu_si128((__m128i *)(dst + wq + j),
                             _mm_packus_epi16(_mm_srli_epi16(v0, 8), _mm_srli_epi16(v1, 8)));
        }
#endif
        for (; j < wq; j++) { dst[j] = pr[2 * j]; dst[wq + j] = pr[2 * j + 1]; }
        return;
    }
    for (ptrdiff_t ph = 0; ph < f->sw; ph++)
        for (j = 0; j < wq; j++) dst[ph * wq + j] = pr[j * f->sw + ph];
}

/* Four lane bytes as one word: the zero point in the `nreal` real lanes, 0 in the rest. */
static inline uint32_t qconv_border_word(int nreal, int xz) {
    uint8_t v[4];
    for (int i = 0; i < 4; i++) v[i] = i < nreal ? (uint8_t)xz : 0;
    uint32_t word;
    memcpy(&word, v, 4);
    return word;
}

/* Build padded rows [r0, r1) (row index over n, group, padded depth, padded height) with the
 * scratch space of thread `tid`. */
static void qconv_fill_rows(const qconv_fill_args *f, int tid, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t len = f->sw * f->Wq;
    uint8_t *scratch = f->scratch + (ptrdiff_t)tid * f->scratch_bytes;
    uint8_t *pr = scratch, *lane[4], *zeros = scratch + 5 * len;
    for (int i = 0; i < 4; i++) lane[i] = scratch + (i + 1) * len;
    memset(zeros, 0, (size_t)len);
    const ptrdiff_t per_group = f->Dp * f->Hp, per_img = f->NG * per_group;
    /* the fast path interleaves four source rows straight into place */
    const int direct = f->ilv == 4 && f->sw == 1 && f->sw_x == 1;
    /* channels-last input (NHWC memory): a pixel's quad of channels already lies as the
     * planes want it, so each one is a 4-byte copy (otherwise the input would be transposed
     * whole first, at several times the cost of this fill) */
    const int cl = f->ilv == 4 && f->sw == 1 && f->sc == 1 && f->sw_x >= 4;
    for (ptrdiff_t r = r0; r < r1; r++) {
        ptrdiff_t n = r / per_img, rem = r - n * per_img;
        ptrdiff_t g = rem / per_group, dh = rem - g * per_group;
        ptrdiff_t dpi = dh / f->Hp, hpi = dh - dpi * f->Hp;
        uint8_t *row = f->xq + n * f->img_bytes + g * f->group_bytes + dh * f->row_bytes;
        int inside = dpi >= f->pd && dpi < f->pd + f->D && hpi >= f->ph && hpi < f->ph + f->H;
        const uint8_t *src0 = f->x + n * f->sn + (dpi - f->pd) * f->sd + (hpi - f->ph) * f->sh;
        if (f->dw) {
            if (inside) qconv_phase_row(f, src0 + g * f->sc, pr, row);
            else memset(row, f->xz, (size_t)len);
            continue;
        }
        for (ptrdiff_t c4 = 0; c4 < f->C4; c4++) {
            uint8_t *dst = row + c4 * f->c4_stride;
            int nreal = (int)(f->Cg - 4 * c4);
            nreal = nreal < 0 ? 0 : nreal > 4 ? 4 : nreal;
            if (!inside || nreal == 0) {
                uint8_t v[4];
                for (int i = 0; i < 4; i++) v[i] = (i < nreal && inside) ? 0 : (i < nreal ? (uint8_t)f->xz : 0);
                uint32_t word;
                memcpy(&word, v, 4);
                for (ptrdiff_t j = 0; j < len; j++) memcpy(dst + 4 * j, &word, 4);
                continue;
            }
            /* borders of a row: the zero point in real lanes, 0 in the padding lanes */
            const uint32_t word = qconv_border_word(nreal, f->xz);
            const ptrdiff_t pw = f->pw < len ? f->pw : len, wn = f->W < len - pw ? f->W : len - pw;
            if (cl) {
                const uint8_t *s = src0 + g * f->Cg + 4 * c4;
                for (ptrdiff_t j = 0; j < pw; j++) memcpy(dst + 4 * j, &word, 4);
                if (nreal == 4) {
                    for (ptrdiff_t j = 0; j < wn; j++) memcpy(dst + 4 * (pw + j), s + j * f->sw_x, 4);
                } else {
                    for (ptrdiff_t j = 0; j < wn; j++)
                        for (int i = 0; i < 4; i++)
                            dst[4 * (pw + j) + i] = i < nreal ? s[j * f->sw_x + i] : 0;
                }
                for (ptrdiff_t j = pw + wn; j < len; j++) memcpy(dst + 4 * j, &word, 4);
                continue;
            }
            const uint8_t *src[4];
            for (int i = 0; i < 4; i++) {
                ptrdiff_t c = g * f->Cg + 4 * c4 + i;
                if (i >= nreal) {
                    src[i] = zeros;
                } else if (direct) {
                    src[i] = src0 + c * f->sc;
                } else {
                    qconv_phase_row(f, src0 + c * f->sc, pr, lane[i]);
                    src[i] = lane[i];
                }
            }
            if (direct) {
                for (ptrdiff_t j = 0; j < pw; j++) memcpy(dst + 4 * j, &word, 4);
                qconv_interleave4(src[0], src[1], src[2], src[3], dst + 4 * pw, wn);
                for (ptrdiff_t j = pw + wn; j < len; j++) memcpy(dst + 4 * j, &word, 4);
            } else {
                qconv_interleave4(src[0], src[1], src[2], src[3], dst, len);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Convolution                                                                               */

typedef struct {
    const uint8_t *xq;
    ptrdiff_t img_bytes, group_bytes, row_bytes, c4_stride;
    ptrdiff_t Hp, sw, Wq, ilv;
    ptrdiff_t OD, OH, OW;
    ptrdiff_t sd, sh;
    int ntaps;
    const ptrdiff_t *toff;          /* byte offset of each tap inside a group */
    int G, Cg, C4, Og, O;
    const int32_t *wv;              /* grouped, 4 weights per int32: [G][Og][ntaps][C4] */
    const int32_t *wvl, *wvh;       /* the same split into low and high nibbles (AVX2) */
    int pairsafe;                   /* no pair sum can saturate vpmaddubsw (AVX2) */
    const int8_t *wa;               /* grouped, AMX tiles: [G][nob][ntaps][nch][16][Kc] */
    int Kc, nch, nob;
    const int32_t *kzw;             /* [O] K*wz - Sum w (wrapping): times xz gives the constant */
    const int32_t *wz;              /* [O] */
    const uint8_t *gany;            /* [G] any non-zero weight zero point in the group */
    const int32_t *wd;              /* depthwise: [C][ntaps] of w - wz */
    const int32_t *wdsum;           /* depthwise: [C] tap sums of w - wz */
    const float *bterm, *mult;      /* [O] */
    int32_t xz, ozp, lo;
    uint8_t *out;                   /* NCDHW contiguous */
} qconv_args;

static inline ptrdiff_t qconv_pix_offset(const qconv_args *a, ptrdiff_t od, ptrdiff_t oh, ptrdiff_t ow) {
    return (od * a->sd * a->Hp + oh * a->sh) * a->row_bytes + ow * a->ilv;
}

static inline uint8_t *qconv_out_row(const qconv_args *a, ptrdiff_t n, ptrdiff_t o, ptrdiff_t od,
                                     ptrdiff_t oh) {
    return a->out + (((n * a->O + o) * a->OD + od) * a->OH + oh) * a->OW;
}

static inline uint8_t qconv_requant1(uint32_t acc, float bterm, float mult, int32_t ozp, float lo,
                                     float hi) {
    float y = (float)(int32_t)acc + bterm;
    return (uint8_t)qops_q_vec(y, mult, ozp, lo, hi);
}

/* Portable kernels: the same arithmetic, 16 pixels at a time, loops GCC can vectorize. */
static void qconv_grouped_portable(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                                   ptrdiff_t ow0, ptrdiff_t ow1) {
    const float lo = (float)(a->lo - a->ozp), hi = (float)(255 - a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    for (ptrdiff_t ow = ow0; ow < ow1; ow += 16) {
        int nv = (int)(ow1 - ow < 16 ? ow1 - ow : 16);
        ptrdiff_t pix = qconv_pix_offset(a, od, oh, ow);
        for (int g = 0; g < a->G; g++) {
            const uint8_t *gbase = ximg + (ptrdiff_t)g * a->group_bytes + pix;
            uint32_t S[16] = {0};
            if (a->gany[g])
                for (int t = 0; t < a->ntaps; t++)
                    for (int c4 = 0; c4 < a->C4; c4++) {
                        const uint8_t *x = gbase + c4 * a->c4_stride + a->toff[t];
                        for (int p = 0; p < 16; p++) S[p] += (uint32_t)x[4 * p] + x[4 * p + 1] + x[4 * p + 2] + x[4 * p + 3];
                    }
            for (int oo = 0; oo < a->Og; oo++) {
                ptrdiff_t o = (ptrdiff_t)g * a->Og + oo;
                uint32_t acc[16] = {0};
                const int32_t *w = a->wv + o * a->ntaps * a->C4;
                for (int t = 0; t < a->ntaps; t++)
                    for (int c4 = 0; c4 < a->C4; c4++) {
                        const uint8_t *x = gbase + c4 * a->c4_stride + a->toff[t];
                        int32_t w4 = w[t * a->C4 + c4];
                        int32_t w0 = (int8_t)(w4 & 0xff), w1 = (int8_t)((w4 >> 8) & 0xff);
                        int32_t w2 = (int8_t)((w4 >> 16) & 0xff), w3 = (int8_t)((w4 >> 24) & 0xff);
                        for (int p = 0; p < 16; p++)
                            acc[p] += (uint32_t)(x[4 * p] * w0 + x[4 * p + 1] * w1 + x[4 * p + 2] * w2 + x[4 * p + 3] * w3);
                    }
                uint32_t corr = (uint32_t)a->xz * (uint32_t)a->kzw[o];
                uint8_t *dst = qconv_out_row(a, n, o, od, oh) + ow;
                for (int p = 0; p < nv; p++)
                    dst[p] = qconv_requant1(acc[p] + corr - (uint32_t)a->wz[o] * S[p], a->bterm[o],
                                            a->mult[o], a->ozp, lo, hi);
            }
        }
    }
}

static void qconv_dw_portable(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                              ptrdiff_t ow0, ptrdiff_t ow1) {
    const float lo = (float)(a->lo - a->ozp), hi = (float)(255 - a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    for (ptrdiff_t c = 0; c < a->O; c++) {
        const uint8_t *plane = ximg + c * a->group_bytes;
        const int32_t *w = a->wd + c * a->ntaps;
        uint32_t init = (uint32_t)(-a->xz) * (uint32_t)a->wdsum[c];
        for (ptrdiff_t ow = ow0; ow < ow1; ow += 16) {
            int nv = (int)(ow1 - ow < 16 ? ow1 - ow : 16);
            const uint8_t *base = plane + qconv_pix_offset(a, od, oh, ow);
            uint32_t acc[16];
            for (int p = 0; p < 16; p++) acc[p] = init;
            for (int t = 0; t < a->ntaps; t++) {
                const uint8_t *x = base + a->toff[t];
                int32_t wt = w[t];
                for (int p = 0; p < 16; p++) acc[p] += (uint32_t)((int32_t)x[p] * wt);
            }
            uint8_t *dst = qconv_out_row(a, n, c, od, oh) + ow;
            for (int p = 0; p < nv; p++)
                dst[p] = qconv_requant1(acc[p], a->bterm[c], a->mult[c], a->ozp, lo, hi);
        }
    }
}

#ifdef QCONV_VNNI
/* Requantize 16 accumulators (16 pixels of one output channel) and store the first nv. */
static inline __attribute__((always_inline)) void
qconv_store16(__m512i acc, __m512 bterm, __m512 mult, __m512 lo, __m512 hi, __m512i ozp,
              uint8_t *o, int nv) {
    __m512 y = _mm512_add_ps(_mm512_cvtepi32_ps(acc), bterm);
    /* clamping to the integer bounds before rounding equals rounding first; min first: NaN
     * becomes hi, as qops_clampf; the conversion rounds half to even (default MXCSR) */
    __m512 r = _mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(y, mult), hi), lo);
    __m512i v = _mm512_add_epi32(_mm512_cvt_roundps_epi32(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), ozp);
    __mmask16 m = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1);
    _mm_mask_storeu_epi8(o, m, _mm512_cvtepi32_epi8(v));
}

/* Window sums of 4 pixel vectors (only when a weight zero point is non-zero). */
static inline void qconv_window_sums(const qconv_args *a, const uint8_t *gbase, __m512i S[4]) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int v = 0; v < 4; v++) S[v] = _mm512_setzero_si512();
    for (int t = 0; t < a->ntaps; t++)
        for (int c4 = 0; c4 < a->C4; c4++) {
            const uint8_t *x = gbase + c4 * a->c4_stride + a->toff[t];
            for (int v = 0; v < 4; v++)
                S[v] = _mm512_dpbusd_epi32(S[v], _mm512_loadu_si512((const void *)(x + 64 * v)), ones);
        }
}

/* Requantize and store R output channels x V pixel vectors. */
static inline __attribute__((always_inline)) void
qconv_finish(const qconv_args *a, __m512i acc[6][4], const ptrdiff_t *oc, int R, int V, int g,
             const __m512i S[4], ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh, ptrdiff_t ow, int nv) {
    const __m512 lo = _mm512_set1_ps((float)(a->lo - a->ozp)), hi = _mm512_set1_ps((float)(255 - a->ozp));
    const __m512i ozp = _mm512_set1_epi32(a->ozp);
    for (int r = 0; r < R; r++) {
        ptrdiff_t o = oc[r];
        __m512i corr = _mm512_set1_epi32((int32_t)((uint32_t)a->xz * (uint32_t)a->kzw[o]));
        __m512 bt = _mm512_set1_ps(a->bterm[o]), mu = _mm512_set1_ps(a->mult[o]);
        uint8_t *dst = qconv_out_row(a, n, o, od, oh) + ow;
        for (int v = 0; v < V; v++) {
            int left = nv - 16 * v;
            if (left <= 0) break;
            __m512i s = _mm512_add_epi32(acc[r][v], corr);
            if (a->gany[g]) s = _mm512_sub_epi32(s, _mm512_mullo_epi32(_mm512_set1_epi32(a->wz[o]), S[v]));
            qconv_store16(s, bt, mu, lo, hi, ozp, dst + 16 * v, left);
        }
    }
}

/* R output channels x V vectors of 16 pixels, all accumulators in registers. */
static inline __attribute__((always_inline)) void
qconv_block_vnni(const qconv_args *a, const uint8_t *gbase, const ptrdiff_t *oc, const int R,
                 const int V, __m512i acc[6][4]) {
    const int32_t *w[6];
    for (int r = 0; r < R; r++) {
        w[r] = a->wv + oc[r] * a->ntaps * a->C4;
        for (int v = 0; v < V; v++) acc[r][v] = _mm512_setzero_si512();
    }
    for (int t = 0; t < a->ntaps; t++) {
        const uint8_t *xt = gbase + a->toff[t];
        for (int c4 = 0; c4 < a->C4; c4++) {
            const uint8_t *x = xt + c4 * a->c4_stride;
            __m512i xv[4];
            for (int v = 0; v < V; v++) xv[v] = _mm512_loadu_si512((const void *)(x + 64 * v));
            for (int r = 0; r < R; r++) {
                __m512i wb = _mm512_set1_epi32(w[r][t * a->C4 + c4]);
                for (int v = 0; v < V; v++) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], xv[v], wb);
            }
        }
    }
}

static void qconv_grouped_vnni(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                               ptrdiff_t ow0, ptrdiff_t ow1) {
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    const int nv = (int)(ow1 - ow0);
    const ptrdiff_t pix = qconv_pix_offset(a, od, oh, ow0);
    for (int g = 0; g < a->G; g++) {
        const uint8_t *gbase = ximg + (ptrdiff_t)g * a->group_bytes + pix;
        __m512i S[4];
        if (a->gany[g]) qconv_window_sums(a, gbase, S);
        for (int o0 = 0; o0 < a->Og; o0 += 6) {
            /* channels past the group's end repeat its last one (computed, never stored) */
            ptrdiff_t oc[6];
            int R = a->Og - o0 < 6 ? a->Og - o0 : 6;
            for (int r = 0; r < 6; r++) oc[r] = (ptrdiff_t)g * a->Og + o0 + (r < R ? r : R - 1);
            __m512i acc[6][4];
            if (nv <= 16) {
                qconv_block_vnni(a, gbase, oc, 6, 1, acc);
                qconv_finish(a, acc, oc, R, 1, g, S, n, od, oh, ow0, nv);
            } else {
                qconv_block_vnni(a, gbase, oc, 6, 4, acc);
                qconv_finish(a, acc, oc, R, 4, g, S, n, od, oh, ow0, nv);
            }
        }
    }
}

/* 4x4 transpose of the 128-bit lanes of four vectors. */
static inline __attribute__((always_inline)) void qconv_lanes4x4(__m512i v[4]) {
    __m512i t0 = _mm512_shuffle_i32x4(v[0], v[1], 0x44), t1 = _mm512_shuffle_i32x4(v[0], v[1], 0xEE);
    __m512i t2 = _mm512_shuffle_i32x4(v[2], v[3], 0x44), t3 = _mm512_shuffle_i32x4(v[2], v[3], 0xEE);
    v[0] = _mm512_shuffle_i32x4(t0, t2, 0x88);
    v[1] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
    v[2] = _mm512_shuffle_i32x4(t1, t3, 0x88);
    v[3] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
}

/* Depthwise: taps go four at a time into vpdpbusd. The bytes of four taps are interleaved per
 * pixel with two rounds of unpacks; that leaves vector j holding pixels 16L+4j..16L+4j+3 in
 * lane L, undone by one lane transpose before requantizing. */
static void qconv_dw_vnni(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                          ptrdiff_t ow0, ptrdiff_t ow1) {
    const __m512 lo = _mm512_set1_ps((float)(a->lo - a->ozp)), hi = _mm512_set1_ps((float)(255 - a->ozp));
    const __m512i ozp = _mm512_set1_epi32(a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    const ptrdiff_t pix = qconv_pix_offset(a, od, oh, ow0);
    const int nv = (int)(ow1 - ow0);
    const int nq = (a->ntaps + 3) / 4;
    for (ptrdiff_t c = 0; c < a->O; c++) {
        const uint8_t *base = ximg + c * a->group_bytes + pix;
        const int32_t *wq = a->wv + c * nq;
        const int sums = a->gany[c];
        __m512i acc[4], S[4];
        for (int j = 0; j < 4; j++) { acc[j] = _mm512_setzero_si512(); S[j] = _mm512_setzero_si512(); }
        for (int q = 0; q < nq; q++) {
            __m512i x[4];
            for (int i = 0; i < 4; i++) {
                int t = 4 * q + i < a->ntaps ? 4 * q + i : a->ntaps - 1;   /* weight 0 past the end */
                x[i] = _mm512_loadu_si512((const void *)(base + a->toff[t]));
            }
            __m512i ab0 = _mm512_unpacklo_epi8(x[0], x[1]), ab1 = _mm512_unpackhi_epi8(x[0], x[1]);
            __m512i cd0 = _mm512_unpacklo_epi8(x[2], x[3]), cd1 = _mm512_unpackhi_epi8(x[2], x[3]);
            __m512i X[4] = {_mm512_unpacklo_epi16(ab0, cd0), _mm512_unpackhi_epi16(ab0, cd0),
                            _mm512_unpacklo_epi16(ab1, cd1), _mm512_unpackhi_epi16(ab1, cd1)};
            __m512i w = _mm512_set1_epi32(wq[q]);
            for (int j = 0; j < 4; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], X[j], w);
            if (sums) {
                int nt = a->ntaps - 4 * q;
                uint32_t ones = nt >= 4 ? 0x01010101u : nt == 3 ? 0x010101u : nt == 2 ? 0x0101u : 0x01u;
                __m512i on = _mm512_set1_epi32((int32_t)ones);
                for (int j = 0; j < 4; j++) S[j] = _mm512_dpbusd_epi32(S[j], X[j], on);
            }
        }
        qconv_lanes4x4(acc);
        __m512i corr = _mm512_set1_epi32((int32_t)((uint32_t)a->xz * (uint32_t)a->kzw[c]));
        if (sums) qconv_lanes4x4(S);
        __m512i wz = _mm512_set1_epi32(a->wz[c]);
        __m512 bt = _mm512_set1_ps(a->bterm[c]), mu = _mm512_set1_ps(a->mult[c]);
        uint8_t *dst = qconv_out_row(a, n, c, od, oh) + ow0;
        for (int v = 0; v < 4; v++) {
            if (16 * v >= nv) break;
            __m512i s = _mm512_add_epi32(acc[v], corr);
            if (sums) s = _mm512_sub_epi32(s, _mm512_mullo_epi32(wz, S[v]));
            qconv_store16(s, bt, mu, lo, hi, ozp, dst + 16 * v, nv - 16 * v);
        }
    }
}
#endif /* QCONV_VNNI */

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
#endif /* QCONV_AVX2 */

#ifdef QCONV_AVX2
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


/* Depthwise, stride 1 along W, KW <= 4, one whole channel per work item (VNNI builds).
 * Each padded input row of the channel is turned into "row quads": pixel j holds
 * (xp[j], xp[j+dw], xp[j+2dw], xp[j+3dw]) for the KW horizontal taps (0 past KW, where the
 * weight byte is 0 too). An output row is then KD*KH vpdpbusd per 16 pixels, with the pixels
 * in natural order; the quads of one channel stay in L1 and serve every output row. */
typedef struct {
    const uint8_t *x;
    ptrdiff_t sn, sc, sd, sh, sw_x;
    ptrdiff_t D, H, W, pd, ph, pw;
    ptrdiff_t Dp, Hp, KW, dwl;
    ptrdiff_t OD, OH, OW, OWp, Lp;      /* OWp: OW rounded up to 16; Lp: padded row buffer */
    ptrdiff_t sdd, shh;                 /* output strides over depth and height */
    int NQ;                             /* KD*KH */
    const ptrdiff_t *roff;              /* [NQ] quad-row offset (rows) of each (kd, kh) */
    int C;
    const int32_t *wrow;                /* [C][NQ] raw weights, KW bytes per int32 */
    const int32_t *kzw, *wz;
    const uint8_t *gany;
    const float *bterm, *mult;
    int32_t xz, ozp, lo;
    uint8_t *out;
    uint8_t *scratch;
    ptrdiff_t scratch_bytes;            /* per thread: Dp*Hp*rowpix*4 + 3*Lp + rowpix + 128 */
} qconv_dwr_args;

/* The most kernel rows (KD*KH) the AVX2 row-pairs kernel takes (its weights live on the stack). */
#define QCONV_DWR_MAX_NQ 64
static int qconv_dwr_max_nq(void) {
#ifdef QCONV_AVX2
    return QCONV_DWR_MAX_NQ;
#else
    return 1 << 30;
#endif
}

static int qconv_dwr_available(void) {
#if defined(QCONV_VNNI) || defined(QCONV_AVX2)
    return 1;
#else
    return 0;
#endif
}

/* Pixels of a padded row's quads in the scratch (a multiple of 16): 4 bytes each. */
static ptrdiff_t qconv_dwr_rowpix(ptrdiff_t OWp, ptrdiff_t dwl) {
#ifdef QCONV_AVX2
    return (OWp + 2 * dwl + 15) / 16 * 16;
#else
    (void)dwl;
    return OWp;
#endif
}

#ifdef QCONV_AVX2
/* AVX2 row pairs: each padded row becomes one row of int16 pairs, (xp[j], xp[j+dw]) in the
 * int32 slot of pixel j (xp[j+dw] read as 0 when KW == 1). The taps 2 and 3 of pixel j are
 * the pair of pixel j + 2dw (its second half meets a zero weight when KW == 3), so a row
 * holds OWp + 2dw pixels, rounded up to 16 (qconv_dwr_rowpix). vpmaddwd against the weight
 * pairs (w0, w1) and (w2, w3) is exact. */
static inline __attribute__((always_inline)) void
qconv_dwr_block_avx2(const qconv_dwr_args *r, const uint8_t *qbase, const int32_t *wp, int sums,
                     __m256i corr, __m256i wz, __m256 bt, __m256 mu, __m256 lo, __m256 hi, __m256i ozp,
                     uint8_t *dst, int nv, const int V, const int two) {
    const ptrdiff_t rb = 4 * qconv_dwr_rowpix(r->OWp, r->dwl), off2 = 8 * r->dwl;
    const __m256i ones = _mm256_set1_epi16(1), ones1 = _mm256_set1_epi32(r->KW > 3 ? 0x10001 : 1);
    __m256i acc[4], S[4];
    for (int v = 0; v < V; v++) { acc[v] = corr; S[v] = _mm256_setzero_si256(); }
    for (int q = 0; q < r->NQ; q++) {
        const uint8_t *xr = qbase + r->roff[q] * rb;
        const __m256i w0 = _mm256_set1_epi32(wp[2 * q]);
        for (int v = 0; v < V; v++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xr + 32 * v));
            acc[v] = _mm256_add_epi32(acc[v], _mm256_madd_epi16(xv, w0));
            if (sums) S[v] = _mm256_add_epi32(S[v], _mm256_madd_epi16(xv, ones));
        }
        if (two) {
            const __m256i w1 = _mm256_set1_epi32(wp[2 * q + 1]);
            for (int v = 0; v < V; v++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xr + off2 + 32 * v));
                acc[v] = _mm256_add_epi32(acc[v], _mm256_madd_epi16(xv, w1));
                if (sums) S[v] = _mm256_add_epi32(S[v], _mm256_madd_epi16(xv, ones1));
            }
        }
    }
    if (sums)
        for (int v = 0; v < V; v++) acc[v] = _mm256_sub_epi32(acc[v], _mm256_mullo_epi32(wz, S[v]));
    qconv_store32(acc, V, bt, mu, lo, hi, ozp, dst, nv);
}

/* One output row of channel c (all its padded input rows are built). */
static inline __attribute__((always_inline)) void
qconv_dwr_row_avx2(const qconv_dwr_args *r, const uint8_t *qrow, const int32_t *wp, __m256i corr,
                   __m256i wz, __m256 bt, __m256 mu, __m256 lo, __m256 hi, __m256i ozp, uint8_t *dst,
                   const int sums, const int two) {
    for (ptrdiff_t ow = 0; ow < r->OW; ow += 32) {
        int nv = (int)(r->OW - ow < 32 ? r->OW - ow : 32);
        const uint8_t *qb = qrow + 4 * ow;
        if (nv > 24) qconv_dwr_block_avx2(r, qb, wp, sums, corr, wz, bt, mu, lo, hi, ozp, dst + ow, nv, 4, two);
        else if (nv > 16) qconv_dwr_block_avx2(r, qb, wp, sums, corr, wz, bt, mu, lo, hi, ozp, dst + ow, nv, 3, two);
        else if (nv > 8) qconv_dwr_block_avx2(r, qb, wp, sums, corr, wz, bt, mu, lo, hi, ozp, dst + ow, nv, 2, two);
        else qconv_dwr_block_avx2(r, qb, wp, sums, corr, wz, bt, mu, lo, hi, ozp, dst + ow, nv, 1, two);
    }
}

/* Padded input rows are built in order, and each output row is computed as soon as its last
 * input row is there, so the rows it reads are still in L1. */
static void qconv_dwr_channel_avx2(const qconv_dwr_args *r, int tid, ptrdiff_t n, ptrdiff_t c) {
    uint8_t *Q = r->scratch + (ptrdiff_t)tid * r->scratch_bytes;
    const ptrdiff_t rp = qconv_dwr_rowpix(r->OWp, r->dwl), rb = 4 * rp;
    /* pr[2]: padded rows, built one row ahead of their use so that the pair loads never wait
     * on the copy's stores (their borders hold xz for good); pz: a row of xz */
    uint8_t *pr[2] = {Q + r->Dp * r->Hp * rb, Q + r->Dp * r->Hp * rb + r->Lp};
    uint8_t *pz = pr[1] + r->Lp, *zeros = pz + r->Lp;
    memset(zeros, 0, (size_t)rp);
    memset(pr[0], r->xz, (size_t)r->Lp);
    memset(pr[1], r->xz, (size_t)r->Lp);
    memset(pz, r->xz, (size_t)r->Lp);
    const ptrdiff_t wn = r->W;
    const uint8_t *xc = r->x + n * r->sn + c * r->sc;
    const int two = r->KW > 2;
    const __m256 lo = _mm256_set1_ps((float)(r->lo - r->ozp)), hi = _mm256_set1_ps((float)(255 - r->ozp));
    const __m256i ozp = _mm256_set1_epi32(r->ozp);
    const __m256i corr = _mm256_set1_epi32((int32_t)((uint32_t)r->xz * (uint32_t)r->kzw[c]));
    const __m256i wz = _mm256_set1_epi32(r->wz[c]);
    const __m256 bt = _mm256_set1_ps(r->bterm[c]), mu = _mm256_set1_ps(r->mult[c]);
    const int sums = r->gany[c];
    const int32_t *w = r->wrow + c * r->NQ;
    int32_t wp[2 * QCONV_DWR_MAX_NQ];   /* conv.pyx sends at most this many (kd, kh) here */
    for (int q = 0; q < r->NQ; q++) { wp[2 * q] = qconv_wpair(w[q], 0); wp[2 * q + 1] = qconv_wpair(w[q], 1); }
    const ptrdiff_t rmax = r->roff[r->NQ - 1], nout = r->OD * r->OH;
    ptrdiff_t next = 0;
    uint8_t *obase = r->out + (n * r->C + c) * nout * r->OW;
    const ptrdiff_t nrows = r->Dp * r->Hp;
    const uint8_t *nextrow = pz;
    for (ptrdiff_t L = 0; L <= nrows; L++) {
        const uint8_t *row = nextrow;
        if (L < nrows) {
            /* copy padded row L, used in the next iteration */
            const ptrdiff_t dpi = L / r->Hp, hpi = L - dpi * r->Hp;
            int inside = dpi >= r->pd && dpi < r->pd + r->D && hpi >= r->ph && hpi < r->ph + r->H;
            nextrow = pz;
            if (inside) {
                const uint8_t *src = xc + (dpi - r->pd) * r->sd + (hpi - r->ph) * r->sh;
                uint8_t *d = pr[L & 1] + r->pw;
                if (r->sw_x == 1 && wn >= 16) {
                    /* 16-byte chunks, the last one overlapping (no read past the row) */
                    for (ptrdiff_t j = 0; j + 16 < wn; j += 16)
                        _mm_storeu_si128((__m128i *)(d + j), _mm_loadu_si128((const __m128i *)(src + j)));
                    _mm_storeu_si128((__m128i *)(d + wn - 16), _mm_loadu_si128((const __m128i *)(src + wn - 16)));
                } else if (r->sw_x == 1) {
                    memcpy(d, src, (size_t)wn);
                } else {
                    for (ptrdiff_t j = 0; j < wn; j++) d[j] = src[j * r->sw_x];
                }
                nextrow = pr[L & 1];
            }
        }
        if (L == 0) continue;
        const ptrdiff_t U = L - 1;   /* build and use row U (copied in the previous iteration) */
        const uint8_t *lane1 = r->KW == 1 ? zeros : row + r->dwl;
        uint8_t *qd = Q + U * rb;
        for (ptrdiff_t j = 0; j < rp; j += 16) {
            __m128i u = _mm_loadu_si128((const __m128i *)(row + j));
            __m128i z = _mm_loadu_si128((const __m128i *)(lane1 + j));
            _mm256_storeu_si256((__m256i *)(qd + 4 * j), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(u, z)));
            _mm256_storeu_si256((__m256i *)(qd + 4 * j + 32), _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(u, z)));
        }
        for (; next < nout; next++) {
            const ptrdiff_t od = next / r->OH, oh = next - od * r->OH;
            const ptrdiff_t base = od * r->sdd * r->Hp + oh * r->shh;
            if (base + rmax > U) break;
            const uint8_t *qrow = Q + base * rb;
            uint8_t *dst = obase + next * r->OW;
            if (sums) {
                if (two) qconv_dwr_row_avx2(r, qrow, wp, corr, wz, bt, mu, lo, hi, ozp, dst, 1, 1);
                else qconv_dwr_row_avx2(r, qrow, wp, corr, wz, bt, mu, lo, hi, ozp, dst, 1, 0);
            } else {
                if (two) qconv_dwr_row_avx2(r, qrow, wp, corr, wz, bt, mu, lo, hi, ozp, dst, 0, 1);
                else qconv_dwr_row_avx2(r, qrow, wp, corr, wz, bt, mu, lo, hi, ozp, dst, 0, 0);
            }
        }
    }
}
#endif /* QCONV_AVX2 */

#ifdef QCONV_VNNI
static inline __attribute__((always_inline)) void
qconv_dwr_block(const qconv_dwr_args *r, const uint8_t *qbase, const int32_t *w, int sums,
                __m512i corr, __m512i wz, __m512 bt, __m512 mu, __m512 lo, __m512 hi, __m512i ozp,
                __m512i ones, uint8_t *dst, int nv, const int V) {
    const ptrdiff_t rb = r->OWp * 4;
    __m512i acc[4], S[4];
    for (int v = 0; v < V; v++) { acc[v] = corr; S[v] = _mm512_setzero_si512(); }
    for (int q = 0; q < r->NQ; q++) {
        const uint8_t *xr = qbase + r->roff[q] * rb;
        __m512i wb = _mm512_set1_epi32(w[q]);
        for (int v = 0; v < V; v++) {
            __m512i xv = _mm512_loadu_si512((const void *)(xr + 64 * v));
            acc[v] = _mm512_dpbusd_epi32(acc[v], xv, wb);
            if (sums) S[v] = _mm512_dpbusd_epi32(S[v], xv, ones);
        }
    }
    for (int v = 0; v < V; v++) {
        __m512i s = acc[v];
        if (sums) s = _mm512_sub_epi32(s, _mm512_mullo_epi32(wz, S[v]));
        qconv_store16(s, bt, mu, lo, hi, ozp, dst + 16 * v, nv - 16 * v);
    }
}
#endif

static void qconv_dwr_channel(const qconv_dwr_args *r, int tid, ptrdiff_t n, ptrdiff_t c) {
#ifdef QCONV_VNNI
    uint8_t *Q = r->scratch + (ptrdiff_t)tid * r->scratch_bytes;
    const ptrdiff_t rb = r->OWp * 4;
    uint8_t *pr = Q + r->Dp * r->Hp * rb, *zeros = pr + r->Lp;
    memset(zeros, 0, (size_t)r->OWp);
    const ptrdiff_t wn = r->W, tail = r->Lp - r->pw - r->W;
    const uint8_t *xc = r->x + n * r->sn + c * r->sc;
    const uint8_t *lane1 = r->KW > 1 ? pr + r->dwl : zeros, *lane2 = r->KW > 2 ? pr + 2 * r->dwl : zeros;
    const uint8_t *lane3 = r->KW > 3 ? pr + 3 * r->dwl : zeros;
    const int fast = 3 + (r->KW - 1) * r->dwl <= 15;
    uint8_t sb[64];
    for (int L = 0; L < 4; L++)
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 4; k++)
                sb[16 * L + 4 * i + k] = (uint8_t)(k < r->KW && fast ? i + k * r->dwl : 0x80);
    const __m512i shuf = _mm512_loadu_si512((const void *)sb);
    const __m512i vxz = _mm512_set1_epi8((char)r->xz);
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6);
    for (ptrdiff_t dpi = 0; dpi < r->Dp; dpi++)
        for (ptrdiff_t hpi = 0; hpi < r->Hp; hpi++) {
            int inside = dpi >= r->pd && dpi < r->pd + r->D && hpi >= r->ph && hpi < r->ph + r->H;
            if (fast && r->sw_x == 1) {
                /* Straight from the input: the padded row's 64 bytes from pixel j are one
                 * masked load over the zero point (masked-off lanes are not read, so the
                 * address may lie outside the row), lane L then takes its 16 bytes from
                 * pixel j+4L by a dword permute. Through a copy of the padded row, each
                 * load had to wait for the stores that had just written it: the kernel ran
                 * 1/3 of its time there. */
                const uintptr_t src = inside ? (uintptr_t)(xc + (dpi - r->pd) * r->sd + (hpi - r->ph) * r->sh) : 0;
                uint8_t *qd = Q + (dpi * r->Hp + hpi) * rb;
                for (ptrdiff_t j = 0; j < r->OWp; j += 16) {
                    __mmask64 m = 0;
                    if (inside) {
                        ptrdiff_t a = r->pw - j, b = r->pw + wn - j;
                        a = a < 0 ? 0 : a;
                        b = b > 64 ? 64 : b;
                        m = a < b ? (__mmask64)((~0ULL >> (64 - (b - a))) << a) : 0;
                    }
                    __m512i v = _mm512_mask_loadu_epi8(vxz, m, (const void *)(src + j - r->pw));
                    v = _mm512_permutexvar_epi32(lanes, v);
                    _mm512_storeu_si512((void *)(qd + 4 * j), _mm512_shuffle_epi8(v, shuf));
                }
                continue;
            }
            if (inside) {
                const uint8_t *src = xc + (dpi - r->pd) * r->sd + (hpi - r->ph) * r->sh;
                memset(pr, r->xz, (size_t)r->pw);
                if (r->sw_x == 1) memcpy(pr + r->pw, src, (size_t)wn);
                else for (ptrdiff_t j = 0; j < wn; j++) pr[r->pw + j] = src[j * r->sw_x];
                memset(pr + r->pw + wn, r->xz, (size_t)tail);
            } else {
                memset(pr, r->xz, (size_t)r->Lp);
            }
            uint8_t *qd = Q + (dpi * r->Hp + hpi) * rb;
            if (fast) {
                /* lane L of each vector: the 16 bytes from pixel j+4L; one in-lane shuffle
                 * places the KW taps of its 4 pixels */
                for (ptrdiff_t j = 0; j < r->OWp; j += 16) {
                    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(pr + j)));
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(pr + j + 4)), 1);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(pr + j + 8)), 2);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(pr + j + 12)), 3);
                    _mm512_storeu_si512((void *)(qd + 4 * j), _mm512_shuffle_epi8(v, shuf));
                }
            } else {
                qconv_interleave4(pr, lane1, lane2, lane3, qd, r->OWp);
            }
        }
    const __m512 lo = _mm512_set1_ps((float)(r->lo - r->ozp)), hi = _mm512_set1_ps((float)(255 - r->ozp));
    const __m512i ozp = _mm512_set1_epi32(r->ozp);
    const __m512i corr = _mm512_set1_epi32((int32_t)((uint32_t)r->xz * (uint32_t)r->kzw[c]));
    const __m512i wz = _mm512_set1_epi32(r->wz[c]);
    const __m512 bt = _mm512_set1_ps(r->bterm[c]), mu = _mm512_set1_ps(r->mult[c]);
    const uint32_t on = r->KW >= 4 ? 0x01010101u : r->KW == 3 ? 0x010101u : r->KW == 2 ? 0x0101u : 0x01u;
    const __m512i ones = _mm512_set1_epi32((int32_t)on);
    const int sums = r->gany[c];
    const int32_t *w = r->wrow + c * r->NQ;
    for (ptrdiff_t od = 0; od < r->OD; od++)
        for (ptrdiff_t oh = 0; oh < r->OH; oh++) {
            const uint8_t *qrow = Q + (od * r->sdd * r->Hp + oh * r->shh) * rb;
            uint8_t *dst = r->out + (((n * r->C + c) * r->OD + od) * r->OH + oh) * r->OW;
            for (ptrdiff_t ow = 0; ow < r->OW; ow += 64) {
                int nv = (int)(r->OW - ow < 64 ? r->OW - ow : 64);
                const uint8_t *qb = qrow + 4 * ow;
                if (nv > 48) qconv_dwr_block(r, qb, w, sums, corr, wz, bt, mu, lo, hi, ozp, ones, dst + ow, nv, 4);
                else if (nv > 32) qconv_dwr_block(r, qb, w, sums, corr, wz, bt, mu, lo, hi, ozp, ones, dst + ow, nv, 3);
                else if (nv > 16) qconv_dwr_block(r, qb, w, sums, corr, wz, bt, mu, lo, hi, ozp, ones, dst + ow, nv, 2);
                else qconv_dwr_block(r, qb, w, sums, corr, wz, bt, mu, lo, hi, ozp, ones, dst + ow, nv, 1);
            }
        }
#elif defined(QCONV_AVX2)
    qconv_dwr_channel_avx2(r, tid, n, c);
#else
    (void)r; (void)tid; (void)n; (void)c;
#endif
}

#ifdef QCONV_AMX
/* Tiles: C 0-3 (oc block b x pixel tile p -> 2b+p), A 4-5 (oc blocks), B 6-7 (pixel tiles). */
__attribute__((target("amx-tile,amx-int8"))) static void
qconv_grouped_amx(const qconv_args *a, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh0, ptrdiff_t oh1,
                  ptrdiff_t ow0, ptrdiff_t ow1) {
    qops_tilecfg cfg;
    qops_tilecfg_init(&cfg);
    for (int i = 0; i < 4; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    for (int i = 4; i < 6; i++) { cfg.rows[i] = 16; cfg.colsb[i] = (uint16_t)a->Kc; }
    for (int i = 6; i < 8; i++) { cfg.rows[i] = (uint8_t)(a->Kc / 4); cfg.colsb[i] = 64; }
    qops_tilecfg_load(&cfg);
    int32_t buf[16 * 16] __attribute__((aligned(64)));
    const __m512 lo = _mm512_set1_ps((float)(a->lo - a->ozp)), hi = _mm512_set1_ps((float)(255 - a->ozp));
    const __m512i ozp = _mm512_set1_epi32(a->ozp);
    const uint8_t *ximg = a->xq + n * a->img_bytes;
    const ptrdiff_t wblk = (ptrdiff_t)a->ntaps * a->nch * 16 * a->Kc;   /* bytes per oc block */
    const ptrdiff_t pstride = a->c4_stride;
    /* output channel blocks outermost: one block pair's weights stay in L1 over several rows */
    for (int g = 0; g < a->G; g++)
    for (int ob = 0; ob < a->nob; ob += 2)
    for (ptrdiff_t oh = oh0; oh < oh1; oh++)
    for (ptrdiff_t ow = ow0; ow < ow1; ow += 32) {
        const int nv = (int)(ow1 - ow < 32 ? ow1 - ow : 32);
        const ptrdiff_t pix = qconv_pix_offset(a, od, oh, ow);
        const uint8_t *gbase = ximg + (ptrdiff_t)g * a->group_bytes + pix;
        __m512i S[4];
        if (a->gany[g]) qconv_window_sums(a, gbase, S);
        const int two = ob + 1 < a->nob;
        const int8_t *w0 = a->wa + ((ptrdiff_t)g * a->nob + ob) * wblk;
        const int8_t *w1 = w0 + wblk;
        _tile_zero(0); _tile_zero(1);
        if (two) { _tile_zero(2); _tile_zero(3); }
        for (int t = 0; t < a->ntaps; t++) {
            const uint8_t *xt = gbase + a->toff[t];
            for (int k = 0; k < a->nch; k++) {
                const uint8_t *xk = xt + (ptrdiff_t)k * 16 * pstride;
                /* each load just before its first product (tiles are not
                 * renamed): measured faster than three loads ahead of the products */
                _tile_loadd(4, w0, a->Kc);
                _tile_loadd(6, xk, pstride);
                _tile_dpbsud(0, 4, 6);
                _tile_loadd(7, xk + 64, pstride);
                _tile_dpbsud(1, 4, 7);
                if (two) {
                    _tile_loadd(5, w1, a->Kc);
                    _tile_dpbsud(2, 5, 6);
                    _tile_dpbsud(3, 5, 7);
                    w1 += 16 * a->Kc;
                }
                w0 += 16 * a->Kc;
            }
        }
        for (int b = 0; b < 1 + two; b++) {
            for (int p = 0; p < 2; p++) {
                if (16 * p >= nv) break;
                qops_tile_store_acc(2 * b + p, buf);
                int rows = a->Og - (ob + b) * 16;
                if (rows > 16) rows = 16;
                for (int m = 0; m < rows; m++) {
                    ptrdiff_t o = (ptrdiff_t)g * a->Og + (ob + b) * 16 + m;
                    __m512i s = _mm512_add_epi32(_mm512_load_si512((const void *)(buf + 16 * m)),
                        _mm512_set1_epi32((int32_t)((uint32_t)a->xz * (uint32_t)a->kzw[o])));
                    if (a->gany[g])
                        s = _mm512_sub_epi32(s, _mm512_mullo_epi32(_mm512_set1_epi32(a->wz[o]), S[p]));
                    qconv_store16(s, _mm512_set1_ps(a->bterm[o]), _mm512_set1_ps(a->mult[o]), lo, hi,
                                  ozp, qconv_out_row(a, n, o, od, oh) + ow + 16 * p, nv - 16 * p);
                }
            }
        }
    }
    _tile_release();
}
#endif /* QCONV_AMX */

static int qconv_amx_available(void) {
#ifdef QCONV_AMX
    return qops_amx_request();
#else
    return 0;
#endif
}

/* mode: 0 portable, 1 VNNI, 2 AMX (falls back to what this build has). */
/* Output rows [oh0, oh1), pixels [ow0, ow1) of depth slice od of image n. */
static inline void qconv_grouped(const qconv_args *a, int mode, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh0,
                                 ptrdiff_t oh1, ptrdiff_t ow0, ptrdiff_t ow1) {
#ifdef QCONV_AMX
    if (mode == 2) { qconv_grouped_amx(a, n, od, oh0, oh1, ow0, ow1); return; }
#endif
    for (ptrdiff_t oh = oh0; oh < oh1; oh++) {
#ifdef QCONV_VNNI
        if (mode >= 1) { qconv_grouped_vnni(a, n, od, oh, ow0, ow1); continue; }
#endif
#ifdef QCONV_AVX2
        if (mode >= 1) { qconv_grouped_avx2(a, n, od, oh, ow0, ow1); continue; }
#endif
        (void)mode;
        qconv_grouped_portable(a, n, od, oh, ow0, ow1);
    }
}

static inline void qconv_dw(const qconv_args *a, int mode, ptrdiff_t n, ptrdiff_t od, ptrdiff_t oh,
                            ptrdiff_t ow0, ptrdiff_t ow1) {
#ifdef QCONV_VNNI
    if (mode >= 1) { qconv_dw_vnni(a, n, od, oh, ow0, ow1); return; }
#endif
#ifdef QCONV_AVX2
    if (mode >= 1) { qconv_dw_avx2(a, n, od, oh, ow0, ow1); return; }
#endif
    (void)mode;
    qconv_dw_portable(a, n, od, oh, ow0, ow1);
}

/* 1 when grouped convolutions run the AVX2 kernel (whose fast path conv.pyx may also grant
 * per call, from the input's largest value). */
static inline int qconv_avx2_build(void) {
#ifdef QCONV_AVX2
    return 1;
#else
    return 0;
#endif
}

static inline int qconv_best_mode(void) {
#if defined(QCONV_VNNI) || defined(QCONV_AVX2)
    return 1;
#else
    return 0;
#endif
}

#endif
