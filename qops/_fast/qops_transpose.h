/* Byte-matrix transposes (16x16 SSE2 tiles, 16x64 AVX-512BW ones), and a batch of them
 * split over threads: the layout changes between C order and channels last. */
#ifndef QOPS_TRANSPOSE_H
#define QOPS_TRANSPOSE_H
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* dst (16 x 16, row stride ld) = transpose of src (16 x 16, row stride ls), bytes: four
 * rounds of SSE2 unpacks, each doubling the run of one column's bytes (2, 4, 8, 16), so
 * every build has it. */
#if defined(__x86_64__)
#include <emmintrin.h>
static inline void qops_t16x16(const uint8_t *src, ptrdiff_t ls, uint8_t *dst, ptrdiff_t ld) {
    __m128i a[16], b[16];
    for (int k = 0; k < 16; k++) a[k] = _mm_loadu_si128((const __m128i *)(src + k * ls));
    /* b[h*8 + p]: rows 2p, 2p+1, columns 8h.. */
    for (int p = 0; p < 8; p++) {
        b[p] = _mm_unpacklo_epi8(a[2 * p], a[2 * p + 1]);
        b[8 + p] = _mm_unpackhi_epi8(a[2 * p], a[2 * p + 1]);
    }
    /* a[h*8 + g*4 + q]: rows 4q..4q+3, columns 8h + 4g.. */
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 4; q++) {
            a[8 * h + q] = _mm_unpacklo_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
            a[8 * h + 4 + q] = _mm_unpackhi_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
        }
    /* b[h*8 + g*4 + k*2 + m]: rows 8m..8m+7, columns 8h + 4g + 2k.. */
    for (int hg = 0; hg < 4; hg++)
        for (int m = 0; m < 2; m++) {
            b[4 * hg + m] = _mm_unpacklo_epi32(a[4 * hg + 2 * m], a[4 * hg + 2 * m + 1]);
            b[4 * hg + 2 + m] = _mm_unpackhi_epi32(a[4 * hg + 2 * m], a[4 * hg + 2 * m + 1]);
        }
    /* column 8h + 4g + 2k (+1): all 16 rows */
    for (int c = 0; c < 8; c++) {
        _mm_storeu_si128((__m128i *)(dst + (2 * c) * ld), _mm_unpacklo_epi64(b[2 * c], b[2 * c + 1]));
        _mm_storeu_si128((__m128i *)(dst + (2 * c + 1) * ld), _mm_unpackhi_epi64(b[2 * c], b[2 * c + 1]));
    }
}
#endif

#if defined(__AVX512BW__)
/* Four 16x16 tiles side by side (16 rows of 64 bytes): the same unpacks on 512-bit
 * registers work per 128-bit lane, so lane L ends up holding the columns 16L.. of tile
 * L; each lane is stored on its own, so one pass moves four tiles. */
static inline void qops_t16x64(const uint8_t *src, ptrdiff_t ls, uint8_t *dst, ptrdiff_t ld) {
    __m512i a[16], b[16];
    for (int k = 0; k < 16; k++) a[k] = _mm512_loadu_si512((const void *)(src + k * ls));
    for (int p = 0; p < 8; p++) {
        b[p] = _mm512_unpacklo_epi8(a[2 * p], a[2 * p + 1]);
        b[8 + p] = _mm512_unpackhi_epi8(a[2 * p], a[2 * p + 1]);
    }
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 4; q++) {
            a[8 * h + q] = _mm512_unpacklo_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
            a[8 * h + 4 + q] = _mm512_unpackhi_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
        }
    for (int hg = 0; hg < 4; hg++)
        for (int m = 0; m < 2; m++) {
            b[4 * hg + m] = _mm512_unpacklo_epi32(a[4 * hg + 2 * m], a[4 * hg + 2 * m + 1]);
            b[4 * hg + 2 + m] = _mm512_unpackhi_epi32(a[4 * hg + 2 * m], a[4 * hg + 2 * m + 1]);
        }
    for (int c = 0; c < 8; c++) {
        __m512i lo = _mm512_unpacklo_epi64(b[2 * c], b[2 * c + 1]);
        __m512i hi = _mm512_unpackhi_epi64(b[2 * c], b[2 * c + 1]);
        _mm_storeu_si128((__m128i *)(dst + (2 * c) * ld), _mm512_castsi512_si128(lo));
        _mm_storeu_si128((__m128i *)(dst + (2 * c + 1) * ld), _mm512_castsi512_si128(hi));
        _mm_storeu_si128((__m128i *)(dst + (16 + 2 * c) * ld), _mm512_extracti32x4_epi32(lo, 1));
        _mm_storeu_si128((__m128i *)(dst + (17 + 2 * c) * ld), _mm512_extracti32x4_epi32(hi, 1));
        _mm_storeu_si128((__m128i *)(dst + (32 + 2 * c) * ld), _mm512_extracti32x4_epi32(lo, 2));
        _mm_storeu_si128((__m128i *)(dst + (33 + 2 * c) * ld), _mm512_extracti32x4_epi32(hi, 2));
        _mm_storeu_si128((__m128i *)(dst + (48 + 2 * c) * ld), _mm512_extracti32x4_epi32(lo, 3));
        _mm_storeu_si128((__m128i *)(dst + (49 + 2 * c) * ld), _mm512_extracti32x4_epi32(hi, 3));
    }
}
#endif

#if defined(__AVX512BW__)
/* dst[c * R + r] = src[r * ls + c] for R <= 4 rows and columns [c0, c1), 16 columns a step:
 * each row's bytes widened to dwords and merged (dword j = column j's R bytes), squeezed to
 * R bytes a column by a shuffle within lanes and a compress across them (the 16-row tiles
 * would leave an image's 1-4 planes to the byte loop below them). */
static void qops_interleave_rows(const uint8_t *src, ptrdiff_t ls, uint8_t *dst, int R,
                                 ptrdiff_t c0, ptrdiff_t c1) {
    char b[16];
    for (int i = 0; i < 16; i++) b[i] = (char)(i < 4 * R ? (i / R) * 4 + i % R : 0x80);
    const __m512i squeeze = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)b));
    const __mmask16 keep = (__mmask16)(0x1111u * ((1u << R) - 1));
    const __mmask64 out = R == 4 ? ~(__mmask64)0 : ((__mmask64)1 << (16 * R)) - 1;
    ptrdiff_t c = c0;
    for (; c + 16 <= c1; c += 16) {
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + c)));
        for (int r = 1; r < R; r++)
            v = _mm512_or_si512(v, _mm512_slli_epi32(
                _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + r * ls + c))), 8 * r));
        v = _mm512_maskz_compress_epi32(keep, _mm512_shuffle_epi8(v, squeeze));
        _mm512_mask_storeu_epi8(dst + c * R, out, v);
    }
    for (; c < c1; c++)
        for (int r = 0; r < R; r++) dst[c * R + r] = src[r * ls + c];
}
#endif

/* dst[c * ld + r] = src[r * ls + c] for rows [r0, r1) and columns [c0, c1) of src; row
 * blocks of 16 from r0, the last one ending at r1 (over rows the one before did: the same
 * bytes written twice, within [r0, r1)); under 16 rows a byte at a time. Columns likewise:
 * tiles of 64 (16) from c0, the last ending at c1 where the range holds a whole one. */
static void qops_transpose8_block(const uint8_t *src, ptrdiff_t ls, uint8_t *dst, ptrdiff_t ld,
                                  ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t c0, ptrdiff_t c1) {
    ptrdiff_t r = r0, c;
#if defined(__AVX512BW__)
    if (r1 - r0 <= 4 && ld == r1 - r0 && r1 > r0) {
        qops_interleave_rows(src + r0 * ls, ls, dst + r0, (int)(r1 - r0), c0, c1);
        return;
    }
#endif
#if defined(__x86_64__)
    for (; r < r1; r += 16) {
        if (r + 16 > r1) {
            if (r1 - r0 < 16)
                break;
            r = r1 - 16;
        }
        c = c0;
#if defined(__AVX512BW__)
        for (; c + 64 <= c1; c += 64)
            qops_t16x64(src + r * ls + c, ls, dst + c * ld + r, ld);
        if (c < c1 && c1 - c0 >= 64) {
            qops_t16x64(src + r * ls + c1 - 64, ls, dst + (c1 - 64) * ld + r, ld);
            c = c1;
        }
#endif
        for (; c + 16 <= c1; c += 16)
            qops_t16x16(src + r * ls + c, ls, dst + c * ld + r, ld);
        if (c < c1 && c1 - c0 >= 16) {
            qops_t16x16(src + r * ls + c1 - 16, ls, dst + (c1 - 16) * ld + r, ld);
            c = c1;
        }
        for (; c < c1; c++)
            for (ptrdiff_t k = 0; k < 16; k++) dst[c * ld + r + k] = src[(r + k) * ls + c];
    }
#endif
    for (; r < r1; r++)
        for (c = c0; c < c1; c++) dst[c * ld + r] = src[r * ls + c];
}

/* Pixels [0, n) of C channel planes (plane stride hw) to n rows of C bytes at dst (row
 * stride ld): 64 pixels at a time, all their channels, so the 64 rows they fill stay in L1
 * meanwhile; the last 64 over pixels done before where there are 64 or more (as the
 * tiles above). A channels-last row of pixels out of a C-order image. */
static inline void qops_transpose8_pixels(const uint8_t *planes, ptrdiff_t hw, ptrdiff_t C,
                                          ptrdiff_t n, uint8_t *dst, ptrdiff_t ld) {
    for (ptrdiff_t c0 = 0; c0 < n; c0 += 64) {
        const ptrdiff_t c1 = c0 + 64 < n ? c0 + 64 : n;
        qops_transpose8_block(planes, hw, dst, ld, 0, C, c1 - c0 < 64 && n >= 64 ? c1 - 64 : c0,
                              c1);
    }
}

#if defined(_OPENMP)
#define QOPS_TRANSPOSE_OMP_FOR _Pragma("omp parallel for schedule(static) num_threads(threads)")
#else
#define QOPS_TRANSPOSE_OMP_FOR
#endif
/* dst[b] (cols x rows) = transpose of src[b] (rows x cols) for the nb dense matrices of a
 * batch, shared by `threads` threads in 64-row strips when rows outnumber columns, else in
 * 64-column blocks: each work item then writes whole output rows of its own. (Row strips of
 * a 96 x 12544 matrix had two threads writing the two halves of every 96-byte output row:
 * the cache lines between them made 2 threads slower than 1.) */
static void qops_transpose8_batch(const uint8_t *src, uint8_t *dst, ptrdiff_t nb, ptrdiff_t rows,
                                  ptrdiff_t cols, int threads) {
    const int by_rows = rows >= cols;
    const ptrdiff_t per = by_rows ? (rows + 63) / 64 : (cols + 63) / 64;
    if (threads <= 1) threads = 1;
    QOPS_TRANSPOSE_OMP_FOR
    for (ptrdiff_t k = 0; k < nb * per; k++) {
        const ptrdiff_t b = k / per, s0 = (k - b * per) * 64;
        const uint8_t *sb = src + b * rows * cols;
        uint8_t *db = dst + b * rows * cols;
        if (by_rows)
            qops_transpose8_block(sb, cols, db, rows, s0, rows < s0 + 64 ? rows : s0 + 64, 0, cols);
        else
            qops_transpose8_block(sb, cols, db, rows, 0, rows, s0, cols < s0 + 64 ? cols : s0 + 64);
    }
}

#endif
