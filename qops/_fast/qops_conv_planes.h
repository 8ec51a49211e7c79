/* Quantized convolution, "planes" route: what every planes kernel shares (qops_conv.h
 * includes the kernels and picks one).
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
 * Accumulation and requantization: as qops_conv.h says, in every kernel.
 *
 * This header also says which instruction set this build compiles the conv kernels for:
 * QCONV_VNNI (AVX-512 VNNI builds; QCONV_AMX too where the compiler has the AMX intrinsics),
 * QCONV_AVX2 (AVX2 builds), neither (portable C only).
 */
#ifndef QOPS_CONV_PLANES_H
#define QOPS_CONV_PLANES_H
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

#endif
