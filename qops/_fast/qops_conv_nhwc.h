/* Ungrouped convolution of channels-last input on AMX tiles, writing channels-last output.
 *
 * The input is copied once into a padded NDHWC buffer whose pixels hold Cp = C rounded up to
 * 64 bytes (border pixels hold the input zero point; the extra channels meet zero weights).
 * Then a tile of 16 output pixels x 64 input channels is 16 whole, aligned cache lines at
 * a stride of sw pixels, for every tap: the input is the A operand (unsigned) and the
 * weights the B operand (signed, packed as [oc block][tap][64-channel chunk][16 quads][16 oc]
 * [4]), so a C tile holds 16 pixels x 16 output channels, the row of one output pixel. Tiles:
 * C 0-3 (oc block b x pixel tile p -> 2b + p), A 4-5 (pixel tiles), B 6-7 (oc blocks).
 * Requantization by qconv_store2x32 where two output blocks meet (two pixels x 32 channels
 * a step), else by qconv_store16, 16 output channels a vector.
 * Where C leaves much of each 64-byte pixel empty (32, 40, 80 channels) and the kernel has
 * unit dilation along W, the buffer holds C bytes a pixel instead and a "tap" is a whole
 * kernel row: its KW pixels one run of KW x C bytes, read as nch 64-byte chunks (the weights
 * packed per kernel row, zero past the run; conv.pyx's _tiles_call). The kernels below are
 * the same: only the tap offsets, nch and the pixel stride Cp differ.
 */
#ifndef QOPS_CONV_NHWC_H
#define QOPS_CONV_NHWC_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "qops_common.h"
#include "qops_conv_planes_vnni.h" /* qconv_store16, QCONV_VNNI, QCONV_AMX */
#include "qops_transpose.h"

typedef struct {
    const uint8_t *x;                  /* input NDHWC, contiguous */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t pd, ph, pw;
    ptrdiff_t Dp, Hp, Wp, Cp;
    uint8_t xz;
    uint8_t *xp;                       /* padded input (N, Dp, Hp, Wp, Cp) */
    int corder;                        /* x is NCDHW instead (qconv_nhwc_fill only) */
} qconv_nhwc_fill_args;

/* Padded rows [r0, r1) of the N * Dp * Hp rows of the padded buffer. */
static void qconv_nhwc_fill(const qconv_nhwc_fill_args *f, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t rowb = f->Wp * f->Cp;
    for (ptrdiff_t r = r0; r < r1; r++) {
        const ptrdiff_t hp = r % f->Hp, dp = (r / f->Hp) % f->Dp, n = r / (f->Hp * f->Dp);
        uint8_t *dst = f->xp + r * rowb;
        const ptrdiff_t h = hp - f->ph, d = dp - f->pd;
        if (h < 0 || h >= f->H || d < 0 || d >= f->D) {
            memset(dst, f->xz, (size_t)rowb);
            continue;
        }
        const uint8_t *src = f->x + ((n * f->D + d) * f->H + h) * f->W * f->C;
        memset(dst, f->xz, (size_t)(f->pw * f->Cp));
        uint8_t *p = dst + f->pw * f->Cp;
        if (f->corder) {
            /* the row's W pixels out of the C planes of image n (the channels past C meet
             * zero weights: 0 there, as below) */
            const ptrdiff_t hw = f->D * f->H * f->W;
            if (f->Cp != f->C)
                memset(p, 0, (size_t)(f->W * f->Cp));
            qops_transpose8_pixels(f->x + n * f->C * hw + (d * f->H + h) * f->W, hw, f->C,
                                   f->W, p, f->Cp);
        } else if (f->Cp == f->C) {
            memcpy(p, src, (size_t)(f->W * f->C));
        } else {
#ifdef QCONV_VNNI
            /* a pixel's 64-byte chunks by masked copies (a memcpy and a memset call per pixel
             * took a third of a 96->24 1x1 conv); the channels past C meet zero weights, so
             * they hold 0 here instead of the zero point */
            const ptrdiff_t C = f->C, Cp = f->Cp;
            for (ptrdiff_t w = 0; w < f->W; w++, src += C, p += Cp)
                for (ptrdiff_t k = 0; k < Cp; k += 64) {
                    const __mmask64 m = C - k >= 64 ? ~(__mmask64)0 : C - k <= 0 ? 0
                                      : ((__mmask64)1 << (C - k)) - 1;
                    _mm512_storeu_si512((void *)(p + k), _mm512_maskz_loadu_epi8(m, src + k));
                }
            p = dst + f->pw * f->Cp;
#else
            for (ptrdiff_t w = 0; w < f->W; w++) {
                memcpy(p + w * f->Cp, src + w * f->C, (size_t)f->C);
                memset(p + w * f->Cp + f->C, f->xz, (size_t)(f->Cp - f->C));
            }
#endif
        }
        memset(p + f->W * f->Cp, f->xz, (size_t)((f->Wp - f->pw - f->W) * f->Cp));
    }
}

/* Output pixels [g0, g1) of the N * OD * OH * OW pixels of a 1x1 conv at strides (sd, sh, sw)
 * without padding: each one's C bytes, from input pixel (n, od sd, oh sh, ow sw) of x (NDHWC,
 * contiguous), to dst + g C. The first pixel is decoded, the rest stepped. */
static void qconv_gather_pixels(const uint8_t *x, ptrdiff_t D, ptrdiff_t H, ptrdiff_t W,
                                ptrdiff_t C, ptrdiff_t sd, ptrdiff_t sh, ptrdiff_t sw,
                                ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW, uint8_t *dst,
                                ptrdiff_t g0, ptrdiff_t g1) {
    if (g0 >= g1)
        return;
    ptrdiff_t ow = g0 % OW, oh = (g0 / OW) % OH, od = (g0 / (OW * OH)) % OD;
    ptrdiff_t n = g0 / (OW * OH * OD);
    for (ptrdiff_t g = g0; g < g1; g++) {
        memcpy(dst + g * C, x + (((n * D + od * sd) * H + oh * sh) * W + ow * sw) * C,
               (size_t)C);
        if (++ow == OW) {
            ow = 0;
            if (++oh == OH) {
                oh = 0;
                if (++od == OD) { od = 0; n++; }
            }
        }
    }
}

/* Strided 2-D convs run the flat kernel too, on the padded input split by the stride into
 * sh x sw phase planes of Hq x Wq pixels: plane (py, px) holds padded pixels (i sh + py,
 * j sw + px). Output pixel (oh, ow)'s tap (kh, kw) then lies in plane (kh % sh, kw % sw) at
 * (oh + kh / sh, ow + kw / sw) (kh, kw dilated): a stride-1 read of that plane, so the
 * flat kernel runs with the planes as its depth slices (Dp = sh sw, OD = 1) and the tap
 * offsets saying where each tap reads. Rows [r0, r1) of the N sh sw Hq phase rows. */
static void qconv_nhwc_fill_phases(const qconv_nhwc_fill_args *f, ptrdiff_t sh, ptrdiff_t sw,
                                   ptrdiff_t Hq, ptrdiff_t Wq, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t C = f->C, Cp = f->Cp;
    for (ptrdiff_t r = r0; r < r1; r++) {
        const ptrdiff_t i = r % Hq, ph = r / Hq, n = ph / (sh * sw), px = ph % sw, py = (ph / sw) % sh;
        uint8_t *dst = f->xp + r * Wq * Cp;
        const ptrdiff_t h = i * sh + py - f->ph;
        if (h < 0 || h >= f->H) {
            memset(dst, f->xz, (size_t)(Wq * Cp));
            continue;
        }
        const uint8_t *src = f->x + (n * f->H + h) * f->W * C;
        for (ptrdiff_t j = 0; j < Wq; j++, dst += Cp) {
            const ptrdiff_t w = j * sw + px - f->pw;
            if (w < 0 || w >= f->W) {
                memset(dst, f->xz, (size_t)Cp);
                continue;
            }
#ifdef QCONV_VNNI
            /* channels past C meet zero weights (see qconv_nhwc_fill) */
            for (ptrdiff_t k = 0; k < Cp; k += 64) {
                const __mmask64 m = C - k >= 64 ? ~(__mmask64)0 : C - k <= 0 ? 0
                                  : ((__mmask64)1 << (C - k)) - 1;
                _mm512_storeu_si512((void *)(dst + k), _mm512_maskz_loadu_epi8(m, src + w * C + k));
            }
#else
            memcpy(dst, src + w * C, (size_t)C);
            memset(dst + C, f->xz, (size_t)(Cp - C));
#endif
        }
    }
}

typedef struct {
    const uint8_t *xp;                 /* padded input (N, Dp, Hp, Wp, Cp) */
    ptrdiff_t Dp, Hp, Wp, Cp;
    ptrdiff_t OD, OH, OW, O;
    ptrdiff_t sd, sh, sw;
    int ntaps, nch, nob;
    const ptrdiff_t *toff;             /* byte offset of each tap in the padded buffer */
    const int8_t *wb;                  /* [nob][ntaps][nch][16][16][4] */
    const int32_t *kzw;                /* [O] */
    const float *bterm, *mult;         /* [O] */
    int32_t xz, ozp, lo;
    uint8_t *out;                      /* (N, OD, OH, OW, O) */
} qconv_nhwc_args;

/* Small-channel convolutions (fewer than 32 input channels would fill under half of each
 * 64-byte pixel above) run the same tiles on an im2col row instead: each output pixel's
 * window gathered as K = taps x C bytes, dense in (tap, channel) order and zero-padded to Kp,
 * a multiple of 64; the conv is then a 1x1 one over that row (Cp = Kp, one tap). Windows
 * outside the input read the zero point, as the padded buffer's borders. */
typedef struct {
    const uint8_t *x;                  /* input (N, D, H, W, C), contiguous */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t KD, KH, KW;
    ptrdiff_t sd, sh, sw, pd, ph, pw, dd, dh, dw;
    uint8_t xz;
} qconv_im2col_args;

#ifdef QCONV_AMX
/* C tiles 0-1 (and 2-3 when `two`) = the sums over every tap and 64-channel chunk of the
 * 32 pixels at xb (16 a tile, `pstride` bytes apart) times the weight blocks at w0 (and w1):
 * A tiles 4-5, B tiles 6-7, the tiles configured by the caller. */
__attribute__((target("amx-tile,amx-int8"))) static inline void
qconv_nhwc_tiles_2x2(const qconv_nhwc_args *a, const uint8_t *xb, ptrdiff_t pstride,
                     const int8_t *w0, const int8_t *w1, int two) {
    const int ntaps = a->ntaps, nch = a->nch;
    _tile_zero(0); _tile_zero(1);
    if (two) { _tile_zero(2); _tile_zero(3); }
    for (int t = 0; t < ntaps; t++) {
        const uint8_t *xt = xb + a->toff[t];
        for (int k = 0; k < nch; k++, w0 += 1024, w1 += 1024) {
            _tile_loadd(6, w0, 64);
            _tile_loadd(4, xt + 64 * k, pstride);
            _tile_dpbusd(0, 4, 6);
            _tile_loadd(5, xt + 64 * k + 16 * pstride, pstride);
            _tile_dpbusd(1, 5, 6);
            if (two) {
                _tile_loadd(7, w1, 64);
                _tile_dpbusd(2, 4, 7);
                _tile_dpbusd(3, 5, 7);
            }
        }
    }
}

/* The requantization constants of the 16-channel block at oc (noc real channels): the
 * zero-point correction xz * kzw, the bias terms and the multipliers. */
__attribute__((target("amx-tile,amx-int8"))) static inline void
qconv_nhwc_block(const qconv_nhwc_args *a, ptrdiff_t oc, int noc, __m512i *corr, __m512 *bt,
                 __m512 *mu) {
    const __mmask16 m = (__mmask16)((1u << noc) - 1);
    *corr = _mm512_mullo_epi32(_mm512_set1_epi32(a->xz), _mm512_maskz_loadu_epi32(m, a->kzw + oc));
    *bt = _mm512_maskz_loadu_ps(m, a->bterm + oc);
    *mu = _mm512_maskz_loadu_ps(m, a->mult + oc);
}

/* Requantize two pixels x 32 output channels (two 16-channel blocks, s[pixel][block], the
 * zero-point correction added) and store pixel 0's channels (q->m of the 32) at o0, pixel
 * 1's at o1 (either NULL: not stored). As qconv_store16, but the lower clamp and the zero
 * point are left to saturating packs (what they saturate lies beyond [0, 255] either way, as
 * in qconv_dwcl_store): per 64 outputs three packs and a permute replace four two-uop
 * narrowing stores and four clamps.
 * The packs leave dword 4L + k = lane L of vector k (k: p0b0, p0b1, p1b0, p1b1); idx puts
 * them back in order. */
static inline __attribute__((always_inline)) __m512i
qconv_rq16(__m512i s, __m512 bt, __m512 mu, __m512 hi) {
    const __m512 y = _mm512_add_ps(_mm512_cvtepi32_ps(s), bt);
    return _mm512_cvt_roundps_epi32(_mm512_min_ps(_mm512_mul_ps(y, mu), hi),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

typedef struct {
    __m512 bt0, bt1, mu0, mu1, hi;
    __m512i corr0, corr1, z16, lo8, idx;
    __mmask32 m;                       /* the pair's real channels (the second block's may end) */
} qconv_pair_q;

static inline __attribute__((always_inline)) void
qconv_store2x32(const qconv_pair_q *q, const int32_t *p0b0, const int32_t *p0b1,
                const int32_t *p1b0, const int32_t *p1b1, uint8_t *o0, uint8_t *o1) {
    const __m512i a = _mm512_adds_epi16(_mm512_packs_epi32(
        qconv_rq16(_mm512_add_epi32(_mm512_load_si512((const void *)p0b0), q->corr0), q->bt0, q->mu0, q->hi),
        qconv_rq16(_mm512_add_epi32(_mm512_load_si512((const void *)p0b1), q->corr1), q->bt1, q->mu1, q->hi)), q->z16);
    const __m512i b = _mm512_adds_epi16(_mm512_packs_epi32(
        qconv_rq16(_mm512_add_epi32(_mm512_load_si512((const void *)p1b0), q->corr0), q->bt0, q->mu0, q->hi),
        qconv_rq16(_mm512_add_epi32(_mm512_load_si512((const void *)p1b1), q->corr1), q->bt1, q->mu1, q->hi)), q->z16);
    const __m512i u = _mm512_permutexvar_epi32(q->idx, _mm512_max_epu8(_mm512_packus_epi16(a, b), q->lo8));
    if (o0) _mm256_mask_storeu_epi8(o0, q->m, _mm512_castsi512_si256(u));
    if (o1) _mm256_mask_storeu_epi8(o1, q->m, _mm512_extracti64x4_epi64(u, 1));
}

/* The constants of qconv_store2x32 for the full block at oc and the one at oc + 16, whose
 * channels may end before 16 (0 past O, and never stored). */
__attribute__((target("amx-tile,amx-int8"))) static inline void
qconv_pair_init(const qconv_nhwc_args *a, ptrdiff_t oc, qconv_pair_q *q) {
    const __m512i xz = _mm512_set1_epi32(a->xz);
    const int n1 = (int)(a->O - oc - 16 < 16 ? a->O - oc - 16 : 16);
    const __mmask16 m1 = (__mmask16)((1u << n1) - 1);
    q->m = (__mmask32)(0xFFFFu | ((uint32_t)m1 << 16));
    q->corr0 = _mm512_mullo_epi32(xz, _mm512_loadu_si512((const void *)(a->kzw + oc)));
    q->corr1 = _mm512_mullo_epi32(xz, _mm512_maskz_loadu_epi32(m1, a->kzw + oc + 16));
    q->bt0 = _mm512_loadu_ps(a->bterm + oc);
    q->bt1 = _mm512_maskz_loadu_ps(m1, a->bterm + oc + 16);
    q->mu0 = _mm512_loadu_ps(a->mult + oc);
    q->mu1 = _mm512_maskz_loadu_ps(m1, a->mult + oc + 16);
    q->hi = _mm512_set1_ps((float)(255 - a->ozp));
    q->z16 = _mm512_set1_epi16((short)a->ozp);
    q->lo8 = _mm512_set1_epi8((char)a->lo);
    q->idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
}

/* Store the four accumulator tiles (tile t at buf + 256 t) for qconv_store2x32. */
__attribute__((target("amx-tile,amx-int8"))) static inline void qconv_nhwc_store4(int32_t *buf) {
    _tile_stored(0, buf, 64);
    _tile_stored(1, buf + 256, 64);
    _tile_stored(2, buf + 512, 64);
    _tile_stored(3, buf + 768, 64);
}

/* One output row's output blocks [ob0, ob1) (ob0 even): tiles of 32 pixels at xrow (a pixel
 * every sw * Cp bytes), output pixels at orow; the tiles configured by the caller, buf 4 KB
 * of scratch. */
__attribute__((target("amx-tile,amx-int8"))) static inline void
qconv_nhwc_amx_row(const qconv_nhwc_args *a, const uint8_t *xrow, uint8_t *orow, int32_t *buf,
                   int ob0, int ob1) {
    const __m512 lo = _mm512_set1_ps((float)(a->lo - a->ozp)), hi = _mm512_set1_ps((float)(255 - a->ozp));
    const __m512i ozp = _mm512_set1_epi32(a->ozp);
    const ptrdiff_t pstride = a->sw * a->Cp;           /* bytes between a tile's pixel rows */
    const ptrdiff_t wblk = (ptrdiff_t)a->ntaps * a->nch * 1024;
    for (int ob = ob0; ob < ob1; ob += 2) {
        const int two = ob + 1 < ob1;
        for (ptrdiff_t ow = 0; ow < a->OW; ow += 32) {
            const int nv = (int)(a->OW - ow < 32 ? a->OW - ow : 32);
            const uint8_t *xb = xrow + ow * pstride;
            const int8_t *w0 = a->wb + ob * wblk, *w1 = w0 + wblk;
            qconv_nhwc_tiles_2x2(a, xb, pstride, w0, w1, two);
            if (two) {                                     /* two blocks: pairs of pixels */
                qconv_pair_q q;
                qconv_pair_init(a, (ptrdiff_t)ob * 16, &q);
                qconv_nhwc_store4(buf);
                uint8_t *o = orow + ow * a->O + (ptrdiff_t)ob * 16;
                for (int i = 0; i < nv; i += 2, o += 2 * a->O) {
                    /* pixel i of the 32: tile p = i / 16, its row i % 16 */
                    const int32_t *r0 = buf + 256 * (i >> 4) + 16 * (i & 15);
                    const int32_t *r1 = buf + 256 * ((i + 1) >> 4) + 16 * ((i + 1) & 15);
                    qconv_store2x32(&q, r0, r0 + 512, r1, r1 + 512, o, i + 1 < nv ? o + a->O : NULL);
                }
                continue;
            }
            for (int b = 0; b < 1 + two; b++) {
                const ptrdiff_t oc = (ptrdiff_t)(ob + b) * 16;
                const int noc = (int)(a->O - oc < 16 ? a->O - oc : 16);
                __m512i corr;
                __m512 bt, mu;
                qconv_nhwc_block(a, oc, noc, &corr, &bt, &mu);
                for (int p = 0; p < 2; p++) {
                    if (16 * p >= nv) break;
                    qops_tile_store_acc(2 * b + p, buf);
                    const int rows = nv - 16 * p < 16 ? nv - 16 * p : 16;
                    for (int i = 0; i < rows; i++)      /* one pixel, noc channels */
                        qconv_store16(_mm512_add_epi32(_mm512_load_si512((const void *)(buf + 16 * i)), corr),
                                      bt, mu, lo, hi, ozp, orow + (ow + 16 * p + i) * a->O + oc, noc);
                }
            }
        }
    }
}

__attribute__((target("amx-tile,amx-int8"))) static void qconv_nhwc_tiles(void) {
    qops_tilecfg cfg;
    qops_tilecfg_init(&cfg);
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    qops_tilecfg_load(&cfg);
}

/* Output row r of the N * OD * OH rows, its output blocks [ob0, ob1). */
__attribute__((target("amx-tile,amx-int8"))) static inline void
qconv_nhwc_amx_one(const qconv_nhwc_args *a, ptrdiff_t r, int32_t *buf, int ob0, int ob1) {
    const ptrdiff_t oh = r % a->OH, od = (r / a->OH) % a->OD, n = r / (a->OH * a->OD);
    qconv_nhwc_amx_row(a, a->xp + (((n * a->Dp + od * a->sd) * a->Hp + oh * a->sh) * a->Wp) * a->Cp,
                       a->out + r * a->OW * a->O, buf, ob0, ob1);
}

/* Output rows [r0, r1) of the N * OD * OH rows. */
__attribute__((target("amx-tile,amx-int8"))) static void
qconv_nhwc_amx(const qconv_nhwc_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    int32_t buf[4 * 16 * 16] __attribute__((aligned(64)));
    qconv_nhwc_tiles();
    for (ptrdiff_t r = r0; r < r1; r++)
        qconv_nhwc_amx_one(a, r, buf, 0, a->nob);
    _tile_release();
}

/* Items [i0, i1) of a 1x1 conv at stride 1 over rows of pixels (a: `rows` rows of Wp
 * pixels, 2-D; at: one more row, the last, at most Wp pixels), each row's output blocks split
 * into nsplit parts of whole pairs: item i is part i / (rows + 1) of row i % (rows + 1), so a
 * thread given a run of items keeps one part's weights over many rows (where there are too
 * few rows for the threads, they split the output channels instead).
 * stage: this thread's 64-aligned buffer of Wp pixels rounded up to 32, nch x 64 bytes each.
 * The last row is always copied there first (its tiles read whole 32-pixel groups, past the
 * input's end); with stage_rows every row is (pixels off 64-byte lines would make every
 * 64-byte tile read touch two lines, for each output block pair again).
 * xc (else NULL): the input in C order instead, images of C planes of hw pixels; every row
 * is then staged by transposing its pixels out of the planes (a->xp and at->xp unread). */
__attribute__((target("amx-tile,amx-int8"))) static void
qconv_nhwc_amx_parts(const qconv_nhwc_args *a, const qconv_nhwc_args *at, ptrdiff_t rows,
                     int nsplit, uint8_t *stage, int stage_rows, const uint8_t *xc,
                     ptrdiff_t hw, ptrdiff_t i0, ptrdiff_t i1) {
    int32_t buf[4 * 16 * 16] __attribute__((aligned(64)));
    const int npair = (a->nob + 1) / 2;
    qconv_nhwc_args s = *a;                 /* the staged row: a pixel every nch x 64 bytes */
    s.Cp = (ptrdiff_t)a->nch * 64;
    ptrdiff_t staged = -1;
    qconv_nhwc_tiles();
    for (ptrdiff_t i = i0; i < i1; i++) {
        const int part = (int)(i / (rows + 1));
        const ptrdiff_t r = i % (rows + 1);
        const int ob0 = 2 * (npair * part / nsplit), ob1e = 2 * (npair * (part + 1) / nsplit);
        const int ob1 = ob1e < a->nob ? ob1e : a->nob;
        const qconv_nhwc_args *q = r < rows ? a : at;
        const ptrdiff_t rq = r < rows ? r : 0;
        if (r < rows && !stage_rows && !xc) {
            qconv_nhwc_amx_one(q, rq, buf, ob0, ob1);
            continue;
        }
        if (r != staged && xc) {
            /* the row's pixels [p0, p0 + OW), a run within each image */
            ptrdiff_t p0 = (r < rows ? r : rows) * a->Wp, left = q->OW;
            uint8_t *dst = stage;
            while (left > 0) {
                const ptrdiff_t img = p0 / hw, at0 = p0 - img * hw;
                const ptrdiff_t run = hw - at0 < left ? hw - at0 : left;
                qops_transpose8_pixels(xc + img * q->Cp * hw + at0, hw, q->Cp, run, dst, s.Cp);
                dst += run * s.Cp;
                p0 += run;
                left -= run;
            }
            staged = r;
        } else if (r != staged) {
            const uint8_t *src = q->xp + rq * q->Wp * q->Cp;
            for (ptrdiff_t p = 0; p < q->OW; p++)
                memcpy(stage + p * s.Cp, src + p * q->Cp, (size_t)q->Cp);
            staged = r;
        }
        s.OW = q->OW;
        qconv_nhwc_amx_row(&s, stage, q->out + rq * q->OW * q->O, buf, ob0, ob1);
    }
    _tile_release();
}

/* The im2col row of output row r into row (OW pixels of a->Cp bytes; the bytes past the
 * window, zeroed once by the caller, are never written). */
static void qconv_im2col_row(const qconv_im2col_args *f, const qconv_nhwc_args *a, ptrdiff_t r,
                             uint8_t *row) {
    /* locals: the stores below could alias the argument structs */
    const ptrdiff_t C = f->C, KW = f->KW, Kp = a->Cp, OW = a->OW, W = f->W, sw = f->sw, pw = f->pw;
    const ptrdiff_t dw = f->dw;
    const ptrdiff_t oh = r % a->OH, od = (r / a->OH) % a->OD, n = r / (a->OH * a->OD);
    const __m512i xzv = _mm512_set1_epi8((char)f->xz);
    const __mmask64 mc = ((__mmask64)1 << C) - 1;      /* C < 32 */
    /* a kernel row's KW taps are one run of KW C bytes at unit dilation */
    const int run = dw == 1 && KW * C <= 64;
    const __mmask64 mr = KW * C >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (KW * C)) - 1;
    for (ptrdiff_t kd = 0, k = 0; kd < f->KD; kd++)
        for (ptrdiff_t kh = 0; kh < f->KH; kh++, k++) {
            const ptrdiff_t id = od * f->sd - f->pd + kd * f->dd, ih = oh * f->sh - f->ph + kh * f->dh;
            uint8_t *dst = row + k * KW * C;
            if (id < 0 || id >= f->D || ih < 0 || ih >= f->H) {
                for (ptrdiff_t ow = 0; ow < OW; ow++)
                    for (ptrdiff_t kw = 0; kw < KW; kw++)
                        _mm512_mask_storeu_epi8(dst + ow * Kp + kw * C, mc, xzv);
                continue;
            }
            const uint8_t *src = f->x + ((n * f->D + id) * f->H + ih) * W * C;
            /* windows inside the row, [lo, hi), one run each */
            ptrdiff_t lo = (pw + sw - 1) / sw, hi = W - KW + pw < 0 ? 0 : (W - KW + pw) / sw + 1;
            if (!run || hi > OW) hi = run ? OW : 0;
            if (lo > hi) lo = hi;
            {
                const uint8_t *s = src + (lo * sw - pw) * C;
                uint8_t *d = dst + lo * Kp;
                for (ptrdiff_t ow = lo; ow < hi; ow++, s += sw * C, d += Kp)
                    _mm512_mask_storeu_epi8(d, mr, _mm512_maskz_loadu_epi8(mr, s));
            }
            for (ptrdiff_t ow = 0; ow < OW; ow++) {
                if (ow == lo && lo < hi) ow = hi;
                if (ow >= OW) break;
                const ptrdiff_t iw0 = ow * sw - pw;
                for (ptrdiff_t kw = 0; kw < KW; kw++) {
                    const ptrdiff_t iw = iw0 + kw * dw;
                    _mm512_mask_storeu_epi8(dst + ow * Kp + kw * C, mc,
                                            iw >= 0 && iw < W ? _mm512_maskz_loadu_epi8(mc, src + iw * C) : xzv);
                }
            }
        }
}

/* Output rows [r0, r1) through the im2col row `row` (this thread's: 32-pixel-rounded OW
 * pixels of Kp bytes, zeroed); a describes the 1x1 conv over it. */
__attribute__((target("amx-tile,amx-int8"))) static void
qconv_nhwc_amx_im2col(const qconv_nhwc_args *a, const qconv_im2col_args *f, uint8_t *row,
                      ptrdiff_t r0, ptrdiff_t r1) {
    int32_t buf[4 * 16 * 16] __attribute__((aligned(64)));
    qconv_nhwc_tiles();
    for (ptrdiff_t r = r0; r < r1; r++) {
        qconv_im2col_row(f, a, r, row);
        qconv_nhwc_amx_row(a, row, a->out + r * a->OW * a->O, buf, 0, a->nob);
    }
    _tile_release();
}
#else
static void qconv_nhwc_amx(const qconv_nhwc_args *a, ptrdiff_t r0, ptrdiff_t r1) {
    (void)a; (void)r0; (void)r1;       /* never called: conv_cl runs it only in AMX mode */
}
static void qconv_nhwc_amx_parts(const qconv_nhwc_args *a, const qconv_nhwc_args *at,
                                 ptrdiff_t rows, int nsplit, uint8_t *stage, int stage_rows,
                                 const uint8_t *xc, ptrdiff_t hw, ptrdiff_t i0, ptrdiff_t i1) {
    (void)a; (void)at; (void)rows; (void)nsplit; (void)stage; (void)stage_rows; (void)xc;
    (void)hw; (void)i0; (void)i1;
}
static void qconv_nhwc_amx_im2col(const qconv_nhwc_args *a, const qconv_im2col_args *f,
                                  uint8_t *row, ptrdiff_t r0, ptrdiff_t r1) {
    (void)a; (void)f; (void)row; (void)r0; (void)r1;
}
#endif

/* Stride-1 convolutions read the padded buffer as one run of pixels per image ("flat"):
 * output pixel (od, oh, ow) sits at j = (od Hp + oh) Wp + ow and its tap t at padded pixel
 * j + toff[t], so 16 consecutive j are 16 pixels at a stride of Cp across row ends, for
 * every tap. The tiles then fill whatever OW is; the padding columns of each row (and the
 * rows between depth slices) are computed and dropped: Wp - OW of Wp pixels a row, where
 * the row kernel above drops a tile's rows past each output row (a 7x7 output used 7 of
 * 32). Work item: (image, chunk of QCONV_FLAT_CHUNK pixels, pair of 16-channel output
 * blocks), in that order, so the pair's weights stay in cache across the chunk's tiles. */
#define QCONV_FLAT_CHUNK 256

/* Output pixels of an image a flat run spans, its last valid one included. */
static inline ptrdiff_t qconv_flat_span(const qconv_nhwc_args *a) {
    return ((a->OD - 1) * a->Hp + a->OH - 1) * a->Wp + a->OW;
}

static inline ptrdiff_t qconv_flat_items(const qconv_nhwc_args *a, ptrdiff_t N) {
    const ptrdiff_t chunks = (qconv_flat_span(a) + QCONV_FLAT_CHUNK - 1) / QCONV_FLAT_CHUNK;
    return N * chunks * ((a->nob + 1) / 2);
}

#ifdef QCONV_AMX
/* Work items [i0, i1) (qconv_flat_items of them). */
__attribute__((target("amx-tile,amx-int8"))) static void
qconv_nhwc_amx_flat(const qconv_nhwc_args *a, ptrdiff_t i0, ptrdiff_t i1) {
    int32_t buf[4 * 16 * 16] __attribute__((aligned(64)));
    const __m512 lo = _mm512_set1_ps((float)(a->lo - a->ozp)), hi = _mm512_set1_ps((float)(255 - a->ozp));
    const __m512i ozp = _mm512_set1_epi32(a->ozp);
    const ptrdiff_t span = qconv_flat_span(a), npair = (a->nob + 1) / 2;
    const ptrdiff_t chunks = (span + QCONV_FLAT_CHUNK - 1) / QCONV_FLAT_CHUNK;
    const ptrdiff_t img = a->Dp * a->Hp * a->Wp * a->Cp, Cp = a->Cp, HWp = a->Hp * a->Wp;
    const ptrdiff_t wblk = (ptrdiff_t)a->ntaps * a->nch * 1024;
    qconv_nhwc_tiles();
    for (ptrdiff_t item = i0; item < i1; item++) {
        const ptrdiff_t ob = 2 * (item % npair), ch = (item / npair) % chunks;
        const ptrdiff_t n = item / (npair * chunks);
        const int two = ob + 1 < a->nob;
        const ptrdiff_t j1 = (ch + 1) * QCONV_FLAT_CHUNK < span ? (ch + 1) * QCONV_FLAT_CHUNK : span;
        uint8_t *oimg = a->out + n * a->OD * a->OH * a->OW * a->O;
        for (ptrdiff_t j = ch * QCONV_FLAT_CHUNK; j < j1; j += 32) {
            const uint8_t *xb = a->xp + n * img + j * Cp;
            const int8_t *w0 = a->wb + ob * wblk, *w1 = w0 + wblk;
            qconv_nhwc_tiles_2x2(a, xb, Cp, w0, w1, two);
            if (two) {                                     /* two blocks: pairs of pixels */
                qconv_pair_q q;
                qconv_pair_init(a, ob * 16, &q);
                qconv_nhwc_store4(buf);
                /* the first pixel decoded once, the rest stepped (as below) */
                ptrdiff_t ow = j % a->Wp, oh = (j / a->Wp) % a->Hp, od = j / HWp;
                uint8_t *o[2];
                for (int i = 0; i < 32 && j + i < j1; i += 2) {
                    for (int k = 0; k < 2; k++) {
                        o[k] = j + i + k < j1 && ow < a->OW && oh < a->OH
                             ? oimg + ((od * a->OH + oh) * a->OW + ow) * a->O + ob * 16 : NULL;
                        if (++ow == a->Wp) {
                            ow = 0;
                            if (++oh == a->Hp) { oh = 0; od++; }
                        }
                    }
                    const int32_t *r0 = buf + 256 * (i >> 4) + 16 * (i & 15);
                    const int32_t *r1 = buf + 256 * ((i + 1) >> 4) + 16 * ((i + 1) & 15);
                    if (o[0] || o[1]) qconv_store2x32(&q, r0, r0 + 512, r1, r1 + 512, o[0], o[1]);
                }
                continue;
            }
            for (int b = 0; b < 1 + two; b++) {
                const ptrdiff_t oc = (ptrdiff_t)(ob + b) * 16;
                const int noc = (int)(a->O - oc < 16 ? a->O - oc : 16);
                __m512i corr;
                __m512 bt, mu;
                qconv_nhwc_block(a, oc, noc, &corr, &bt, &mu);
                for (int p = 0; p < 2; p++) {
                    const ptrdiff_t jp = j + 16 * p;
                    if (jp >= j1) break;
                    qops_tile_store_acc(2 * b + p, buf);
                    /* the tile's first pixel decoded once, the rest stepped (divisions per
                     * pixel cost more than a 1x1 conv's products) */
                    ptrdiff_t ow = jp % a->Wp, oh = (jp / a->Wp) % a->Hp, od = jp / HWp;
                    for (int i = 0; i < 16 && jp + i < j1; i++) {
                        if (ow < a->OW && oh < a->OH)           /* else a padding pixel */
                            qconv_store16(_mm512_add_epi32(_mm512_load_si512((const void *)(buf + 16 * i)), corr),
                                          bt, mu, lo, hi, ozp,
                                          oimg + ((od * a->OH + oh) * a->OW + ow) * a->O + oc, noc);
                        if (++ow == a->Wp) {
                            ow = 0;
                            if (++oh == a->Hp) { oh = 0; od++; }
                        }
                    }
                }
            }
        }
    }
    _tile_release();
}
#else
static void qconv_nhwc_amx_flat(const qconv_nhwc_args *a, ptrdiff_t i0, ptrdiff_t i1) {
    (void)a; (void)i0; (void)i1;       /* never called: conv_cl runs it only in AMX mode */
}
#endif

/* Depthwise convolution of channels-last input, 64 channels a vector, on vpdpbusd.
 *
 * vpdpbusd adds four byte products into each dword; here they are four taps of one channel
 * along a kernel row. The input vectors of taps kw = 4q..4q+3 are interleaved by byte and
 * word unpacks into 4 vectors, dword 4L + i of vector k holding the four taps of lane
 * 16L + 4k + i (L the 128-bit lane); the weights are interleaved the same way once, and
 * packs of the four accumulators put the lanes back in order. The unpacks run beside the
 * multiplies: interleaving each input row once into a buffer and reading it back cost more.
 *
 * Fewer channels than 64 that divide 64 repeat across the vector (lane l: channel l % C),
 * so that at stride 1 a vector holds g = 64 / C neighbouring pixels, next to each other in
 * the input and in the output. Taps outside the input read the input zero point, which the
 * start value xz * kzw (kzw = -sum of the channel's weights) cancels exactly with symmetric
 * weights, the only ones this kernel takes. */
typedef struct {
    const uint8_t *x;                  /* input (N, D, H, W, C), contiguous */
    ptrdiff_t N, D, H, W, C;
    ptrdiff_t OD, OH, OW;
    ptrdiff_t KD, KH, KW;
    ptrdiff_t sd, sh, sw, pd, ph, pw, dd, dh, dw;
    const int8_t *wq;                  /* [CB][KD*KH][Q][4][64], interleaved as the taps */
    const int32_t *kzw;                /* [C] */
    const float *bterm, *mult;         /* [C] */
    int32_t xz, ozp, lo;
    uint8_t *out;                      /* (N, OD, OH, OW, C) */
} qconv_dwcl_args;

#define QCONV_DWCL_MAX_ROWS 256           /* kernel rows KD * KH (pointers on the stack) */

/* The lane of block position c (dword i of accumulator k): 16 (i / 4) + 4k + i % 4. */
static inline ptrdiff_t qconv_dwcl_lane(ptrdiff_t c) {
    const ptrdiff_t k = (c & 63) / 16, i = c & 15;
    return (c & ~(ptrdiff_t)63) + 16 * (i / 4) + 4 * k + i % 4;
}

/* The per-channel constants in the accumulators' order, [CB][k][16] each: cst = bterm,
 * then mult, then the int32 start value xz * kzw (CB * 64 * 12 bytes). */
static void qconv_dwcl_consts(const qconv_dwcl_args *a, float *cst) {
    const ptrdiff_t C = a->C, CB = (C + 63) / 64;
    float *bt = cst, *mu = cst + CB * 64;
    int32_t *init = (int32_t *)(cst + 2 * CB * 64);
    for (ptrdiff_t c = 0; c < CB * 64; c++) {
        ptrdiff_t ch = qconv_dwcl_lane(c);
        if (C < 64 && 64 % C == 0) ch %= C;
        const int in = ch < C;
        bt[c] = in ? a->bterm[ch] : 0.0f;
        mu[c] = in ? a->mult[ch] : 0.0f;
        init[c] = in ? (int32_t)((uint32_t)a->xz * (uint32_t)a->kzw[ch]) : 0;
    }
}

#ifdef QCONV_VNNI
static int qconv_dwcl_available(void) { return 1; }

/* acc[k] += the four taps t[] interleaved (vector k) times weight vector k of w. */
static inline __attribute__((always_inline)) void
qconv_dwcl_madd(__m512i acc[4], const __m512i t[4], const int8_t *w) {
    const __m512i u0 = _mm512_unpacklo_epi8(t[0], t[1]), u1 = _mm512_unpackhi_epi8(t[0], t[1]);
    const __m512i v0 = _mm512_unpacklo_epi8(t[2], t[3]), v1 = _mm512_unpackhi_epi8(t[2], t[3]);
    acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_unpacklo_epi16(u0, v0), _mm512_load_si512((const void *)w));
    acc[1] = _mm512_dpbusd_epi32(acc[1], _mm512_unpackhi_epi16(u0, v0), _mm512_load_si512((const void *)(w + 64)));
    acc[2] = _mm512_dpbusd_epi32(acc[2], _mm512_unpacklo_epi16(u1, v1), _mm512_load_si512((const void *)(w + 128)));
    acc[3] = _mm512_dpbusd_epi32(acc[3], _mm512_unpackhi_epi16(u1, v1), _mm512_load_si512((const void *)(w + 192)));
}

/* Requantize (as qconv_store16, with the lower clamp and the zero point left to saturating
 * packs: what they saturate lies beyond [0, 255] either way) and store under mask om; the
 * packs put lanes 16L + 4k + i of accumulator k back in order. */
static inline __attribute__((always_inline)) void
qconv_dwcl_store(const __m512i acc[4], const float *bt, const float *mu, __m512i lo8, __m512 hi,
                 __m512i z16, uint8_t *o, __mmask64 om) {
    __m512i qv[4];
    for (int k = 0; k < 4; k++) {
        const __m512 y = _mm512_add_ps(_mm512_cvtepi32_ps(acc[k]), _mm512_loadu_ps(bt + 16 * k));
        qv[k] = _mm512_cvt_roundps_epi32(_mm512_min_ps(_mm512_mul_ps(y, _mm512_loadu_ps(mu + 16 * k)), hi),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    const __m512i a01 = _mm512_adds_epi16(_mm512_packs_epi32(qv[0], qv[1]), z16);
    const __m512i a23 = _mm512_adds_epi16(_mm512_packs_epi32(qv[2], qv[3]), z16);
    _mm512_mask_storeu_epi8(o, om, _mm512_max_epu8(_mm512_packus_epi16(a01, a23), lo8));
}

/* Tap vector of column kw for vector position v of input row `row` (NULL: a row outside the
 * input), block c0 (mask m), pixel by pixel: columns outside the row read the zero point. */
static inline __m512i qconv_dwcl_tap_edge(const qconv_dwcl_args *a, ptrdiff_t g, const uint8_t *row,
                                          ptrdiff_t v, ptrdiff_t kw, ptrdiff_t c0, __mmask64 m) {
    const ptrdiff_t C = a->C, W = a->W;
    __m512i t = _mm512_set1_epi8((char)a->xz);
    if (!row || kw >= a->KW) return t;               /* past the kernel: a zero weight */
    /* pixel p of the vector reads column (v g + p) sw - pw + kw dw */
    const ptrdiff_t iw0 = v * g * a->sw - a->pw + kw * a->dw;
    if (g == 1)
        return iw0 >= 0 && iw0 < W ? _mm512_maskz_loadu_epi8(m, row + iw0 * C + c0) : t;
    for (ptrdiff_t p = 0; p < g; p++)
        if (iw0 + p >= 0 && iw0 + p < W)   /* lane l of pixel p: row + iw0 C + l */
            t = _mm512_mask_loadu_epi8(t, (((__mmask64)1 << C) - 1) << (p * C), row + iw0 * C);
    return t;
}

/* P inner vectors (every tap inside the input) of one block: vector p reads tap (r, kw) at
 * rp[r] + p * xstep + kw * dw C and is stored at o + p * ostep under om[p]. Several vectors
 * at once, so that each weight vector loaded serves them all and their chains overlap. */
static inline __attribute__((always_inline)) void
qconv_dwcl_inner(const qconv_dwcl_args *a, const uint8_t *const *rp, ptrdiff_t xstep,
                 const ptrdiff_t nkr, const ptrdiff_t KW, const int P, __mmask64 m,
                 const int8_t *w, const float *bt, const float *mu, const int32_t *init,
                 __m512i lo8, __m512 hi, __m512i z16, uint8_t *o, ptrdiff_t ostep, const __mmask64 *om) {
    const ptrdiff_t tstep = a->dw * a->C;
    const __m512i xzv = _mm512_set1_epi8((char)a->xz);
    __m512i acc[4][4];
    for (int k = 0; k < 4; k++) {
        const __m512i i0 = _mm512_loadu_si512((const void *)(init + 16 * k));
        for (int p = 0; p < P; p++) acc[p][k] = i0;
    }
    for (ptrdiff_t r = 0; r < nkr; r++)
        for (ptrdiff_t k0 = 0; k0 < KW; k0 += 4, w += 256)
            for (int p = 0; p < P; p++) {
                const uint8_t *src = rp[r] + p * xstep + k0 * tstep;
                __m512i t[4];
                for (int j = 0; j < 4; j++)
                    t[j] = k0 + j < KW ? _mm512_maskz_loadu_epi8(m, src + j * tstep) : xzv;
                qconv_dwcl_madd(acc[p], t, w);
            }
    for (int p = 0; p < P; p++) qconv_dwcl_store(acc[p], bt, mu, lo8, hi, z16, o + p * ostep, om[p]);
}

/* Output rows [r0, r1) of the N * OD * OH rows (nkr kernel rows of KW taps: constants where
 * inlined); cst from qconv_dwcl_consts. */
static inline __attribute__((always_inline)) void
qconv_dwcl_rows_t(const qconv_dwcl_args *a, const float *cst, ptrdiff_t r0, ptrdiff_t r1,
                  const ptrdiff_t nkr, const ptrdiff_t KW) {
    enum { P = 4 };
    const ptrdiff_t C = a->C, CB = (C + 63) / 64, NQ = (KW + 3) / 4;
    /* pixels a vector: 64 / C neighbours when the block repeats C channels at stride 1 */
    const ptrdiff_t g = (C < 64 && 64 % C == 0 && a->sw == 1) ? 64 / C : 1;
    const ptrdiff_t nvec = (a->OW + g - 1) / g, vstep = g * a->sw;
    const ptrdiff_t ostep = g > 1 ? 64 : C;             /* output bytes between vectors */
    const float *bt = cst, *mu = cst + CB * 64;
    const int32_t *init = (const int32_t *)(cst + 2 * CB * 64);
    const uint8_t *rows[QCONV_DWCL_MAX_ROWS], *rp[QCONV_DWCL_MAX_ROWS];
    const __m512i lo8 = _mm512_set1_epi8((char)a->lo), z16 = _mm512_set1_epi16((short)a->ozp);
    const __m512 hi = _mm512_set1_ps((float)(255 - a->ozp));
    /* vectors whose pixels read all their taps inside the row: [va, vb) */
    const ptrdiff_t last = a->W - g - (KW - 1) * a->dw + a->pw;
    ptrdiff_t va = (a->pw + vstep - 1) / vstep, vb = last < 0 ? 0 : last / vstep + 1;
    if (vb > nvec) vb = nvec;
    if (va > vb) va = vb;
    for (ptrdiff_t r = r0; r < r1; r++) {
        const ptrdiff_t oh = r % a->OH, od = (r / a->OH) % a->OD, n = r / (a->OH * a->OD);
        int inner = 1;
        for (ptrdiff_t kd = 0; kd < a->KD; kd++)
            for (ptrdiff_t kh = 0; kh < a->KH; kh++) {
                const ptrdiff_t id = od * a->sd - a->pd + kd * a->dd, ih = oh * a->sh - a->ph + kh * a->dh;
                const int ok = id >= 0 && id < a->D && ih >= 0 && ih < a->H;
                rows[kd * a->KH + kh] = ok ? a->x + ((n * a->D + id) * a->H + ih) * a->W * C : NULL;
                inner &= ok;
            }
        const ptrdiff_t ia = inner ? va : 0, ib = inner ? vb : 0;    /* the inner vectors */
        uint8_t *orow = a->out + r * a->OW * C;
        for (ptrdiff_t cb = 0; cb < CB; cb++) {
            const ptrdiff_t c0 = cb * 64;
            const __mmask64 m = g > 1 || C - c0 >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (C - c0)) - 1);
            const int8_t *w = a->wq + cb * nkr * NQ * 256;
            const ptrdiff_t oc = g > 1 ? 0 : c0;
            __mmask64 om[P];
            for (ptrdiff_t v = 0; v < nvec; v++) {
                if (v == ia && ia < ib) {
                    /* inner vectors, P at a time, then one at a time */
                    for (int p = 0; p < P; p++) om[p] = m;
                    for (ptrdiff_t k = 0; k < nkr; k++) rp[k] = rows[k] + (v * vstep - a->pw) * C + oc;
                    for (; v + P <= ib; v += P) {
                        qconv_dwcl_inner(a, rp, vstep * C, nkr, KW, P, m, w, bt + c0, mu + c0,
                                         init + c0, lo8, hi, z16, orow + v * ostep + oc, ostep, om);
                        for (ptrdiff_t k = 0; k < nkr; k++) rp[k] += P * vstep * C;
                    }
                    for (; v < ib; v++) {
                        qconv_dwcl_inner(a, rp, vstep * C, nkr, KW, 1, m, w, bt + c0, mu + c0,
                                         init + c0, lo8, hi, z16, orow + v * ostep + oc, ostep, om);
                        for (ptrdiff_t k = 0; k < nkr; k++) rp[k] += vstep * C;
                    }
                    if (v >= nvec) break;
                }
                /* a border vector: taps pixel by pixel; the last may hold fewer than g pixels */
                const ptrdiff_t left = (a->OW - v * g) * C;
                const __mmask64 mo = g == 1 ? m : left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
                __m512i acc[4];
                for (int k = 0; k < 4; k++) acc[k] = _mm512_loadu_si512((const void *)(init + c0 + 16 * k));
                const int8_t *wr = w;
                for (ptrdiff_t k = 0; k < nkr; k++)
                    for (ptrdiff_t k0 = 0; k0 < KW; k0 += 4, wr += 256) {
                        __m512i t[4];
                        for (int j = 0; j < 4; j++) t[j] = qconv_dwcl_tap_edge(a, g, rows[k], v, k0 + j, c0, m);
                        qconv_dwcl_madd(acc, t, wr);
                    }
                qconv_dwcl_store(acc, bt + c0, mu + c0, lo8, hi, z16, orow + v * ostep + oc, mo);
            }
        }
    }
}

/* Output rows [r0, r1) of the N * OD * OH rows; cst from qconv_dwcl_consts. */
static void qconv_dwcl_rows(const qconv_dwcl_args *a, const float *cst, ptrdiff_t r0, ptrdiff_t r1) {
    /* 3x3, the common depthwise kernel, unrolled: the row and tap counts as constants let
     * the compiler keep the taps in registers */
    if (a->KD * a->KH == 3 && a->KW == 3) qconv_dwcl_rows_t(a, cst, r0, r1, 3, 3);
    else qconv_dwcl_rows_t(a, cst, r0, r1, a->KD * a->KH, a->KW);
}
#else
static int qconv_dwcl_available(void) { return 0; }
static void qconv_dwcl_rows(const qconv_dwcl_args *a, const float *cst, ptrdiff_t r0, ptrdiff_t r1) {
    (void)a; (void)cst; (void)r0; (void)r1;   /* never called: conv_cl runs it where available */
}
#endif

#endif
