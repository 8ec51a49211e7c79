/* Resize kernels: nearest gathers and bilinear rows (see resize.pyx).
 * (Moved verbatim from the `cdef extern from *` block of resize.pyx.) */
#ifndef QOPS_RESIZE_H
#define QOPS_RESIZE_H

#include <string.h>
#if defined(__AVX512BW__)
#include <immintrin.h>
#endif
/* dst[2i] = dst[2i+1] = src[i] for i < n bytes: the exact 2x nearest row. With AVX-512BW,
 * 32 bytes widen to 16-bit lanes (b, 0) and b | b << 8 makes (b, b): 64 bytes in order,
 * masked at the row's end, so short rows need no scalar tail; ... */
static inline __attribute__((always_inline)) void qops_double_k(
        const uint8_t *src, uint8_t *dst, ptrdiff_t n, const int copies, ptrdiff_t stride,
        const int pf) {
    /* ... written to `copies` rows `stride` bytes apart (rows repeated along H). pf:
     * prefetch ahead (on outputs beyond the caches, AMD Zen 5's hardware prefetchers fall
     * behind; on cache-sized outputs the hints only cost, so pf is 0 there). */
    ptrdiff_t i = 0;
#if defined(__AVX512BW__)
    for (; i < n; i += 32) {
        ptrdiff_t rem = n - i;
        __mmask32 m = rem >= 32 ? (__mmask32)~0u : (__mmask32)((1u << rem) - 1);
        __mmask64 m2 = rem >= 32 ? ~0ULL : (1ULL << (2 * rem)) - 1;
        __m512i w = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + i));
        w = _mm512_or_si512(w, _mm512_slli_epi16(w, 8));
        for (int c = 0; c < copies; c++) {
            if (pf) __builtin_prefetch(dst + c * stride + 2 * i + 1024, 1, 3);
            _mm512_mask_storeu_epi8(dst + c * stride + 2 * i, m2, w);
        }
        if (pf) __builtin_prefetch(src + i + 512, 0, 3);
    }
#endif
    for (; i < n; i++)
        for (int c = 0; c < copies; c++)
            dst[c * stride + 2 * i] = dst[c * stride + 2 * i + 1] = src[i];
}
/* The usual run lengths (2: an exact 2x along H too; 1) with the count and the prefetch
 * flag constant, so the store loop unrolls: with a runtime count it does not, which
 * costs most on short rows. */
static inline void qops_double_bytes(const uint8_t *src, uint8_t *dst, ptrdiff_t n,
                                     int copies, ptrdiff_t stride, int pf) {
    if (copies == 2 && !pf) qops_double_k(src, dst, n, 2, stride, 0);
    else if (copies == 2) qops_double_k(src, dst, n, 2, stride, 1);
    else if (copies == 1 && !pf) qops_double_k(src, dst, n, 1, stride, 0);
    else qops_double_k(src, dst, n, copies, stride, pf);
}

/* Bilinear x2 (align_corners false, both dims doubled): every weight is 0, 1/4, 3/4 or 1,
 * so each float32 step of the NCHW formula is exact and the result is rint(S / 16) with
 * the integer S = sum of weights*16 times raw values (S/16 lies within the inputs'
 * range, so the clamp never acts). With edge rows and columns repeated, S is uniform:
 * each input row widens to h[2j] = x[j-1] + 3x[j], h[2j+1] = 3x[j] + x[j+1] (int16),
 * and output rows 2i, 2i+1 are h(i-1) + 3h(i) and 3h(i) + h(i+1). rint(S/16) with
 * ties to even is (S + 7 + ((S >> 4) & 1)) >> 4, arithmetic shifts (int8 too).
 * pad: W + 2 + 64 bytes; hb: 3 * (2W + 64) int16 (the vector loops run past the row). */
static inline void qops_bl2_hrow(const uint8_t *x, ptrdiff_t W, int sgn, uint8_t *pad,
                                 int16_t *h) {
    ptrdiff_t j = 0;
#if defined(__AVX512BW__)
    const __m512i ilo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                         40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1,
                                         32, 0);
    const __m512i ihi = _mm512_add_epi16(ilo, _mm512_set1_epi16(16));
    (void)pad;
    for (; j < W; j += 32) {
        /* x[j-1 .. j+32] straight from the row: masked loads, the edge lanes repeated from
         * the centre vector (a padded copy of the row cost a store-forwarding stall on
         * every load) */
        const ptrdiff_t nc = W - j < 32 ? W - j : 32, nr = W - j - 1 < 32 ? W - j - 1 : 32;
        const __mmask32 mc = _bzhi_u32(~0u, (unsigned)nc);
        __m256i c8 = _mm256_maskz_loadu_epi8(mc, x + j);
        __m256i l8 = j ? _mm256_maskz_loadu_epi8(mc, x + j - 1)
                       : _mm256_mask_mov_epi8(_mm256_maskz_loadu_epi8(mc & ~1u, x - 1), 1, c8);
        __m256i r8 = _mm256_maskz_loadu_epi8(_bzhi_u32(~0u, (unsigned)nr), x + j + 1);
        if (nr < 32) r8 = _mm256_mask_mov_epi8(r8, (__mmask32)1 << (nc - 1), c8);
        __m512i L = sgn ? _mm512_cvtepi8_epi16(l8) : _mm512_cvtepu8_epi16(l8);
        __m512i C = sgn ? _mm512_cvtepi8_epi16(c8) : _mm512_cvtepu8_epi16(c8);
        __m512i R = sgn ? _mm512_cvtepi8_epi16(r8) : _mm512_cvtepu8_epi16(r8);
        __m512i C3 = _mm512_add_epi16(C, _mm512_add_epi16(C, C));
        __m512i E = _mm512_add_epi16(L, C3), O = _mm512_add_epi16(C3, R);
        _mm512_storeu_si512((void *)(h + 2 * j), _mm512_permutex2var_epi16(E, ilo, O));
        _mm512_storeu_si512((void *)(h + 2 * j + 32), _mm512_permutex2var_epi16(E, ihi, O));
    }
#else
    pad[0] = x[0];
    memcpy(pad + 1, x, (size_t)W);
    pad[W + 1] = x[W - 1];
    for (; j < W; j++) {
        int l = sgn ? (int8_t)pad[j] : pad[j], c = sgn ? (int8_t)pad[j + 1] : pad[j + 1];
        int r = sgn ? (int8_t)pad[j + 2] : pad[j + 2];
        h[2 * j] = (int16_t)(l + 3 * c);
        h[2 * j + 1] = (int16_t)(3 * c + r);
    }
#endif
}

/* out[0:n] = rint((a + 3b) / 16) */
static inline void qops_bl2_vrow(const int16_t *a, const int16_t *b, uint8_t *out,
                                 ptrdiff_t n, int sgn) {
    ptrdiff_t o = 0;
#if defined(__AVX512BW__)
    const __m512i seven = _mm512_set1_epi16(7), one = _mm512_set1_epi16(1);
    const __m512i perm = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    for (; o < n; o += 64) {
        __m512i s[2];
        for (int k = 0; k < 2; k++) {
            __m512i B = _mm512_loadu_si512((const void *)(b + o + 32 * k));
            __m512i S = _mm512_add_epi16(_mm512_loadu_si512((const void *)(a + o + 32 * k)),
                                         _mm512_add_epi16(B, _mm512_add_epi16(B, B)));
            __m512i odd = _mm512_and_si512(_mm512_srai_epi16(S, 4), one);
            s[k] = _mm512_srai_epi16(_mm512_add_epi16(_mm512_add_epi16(S, seven), odd), 4);
        }
        __m512i v = _mm512_permutexvar_epi64(perm, sgn ? _mm512_packs_epi16(s[0], s[1])
                                                        : _mm512_packus_epi16(s[0], s[1]));
        ptrdiff_t rem = n - o;
        _mm512_mask_storeu_epi8(out + o, rem >= 64 ? ~0ULL : (1ULL << rem) - 1, v);
    }
#endif
    for (; o < n; o++) {
        int S = a[o] + 3 * b[o];
        out[o] = (uint8_t)((S + 7 + ((S >> 4) & 1)) >> 4);
    }
}

/* One (H, W) plane into (2H, 2W). */
static void qops_bilinear2x_plane(const uint8_t *x, uint8_t *out, ptrdiff_t H, ptrdiff_t W,
                                  int sgn, uint8_t *pad, int16_t *hb) {
    const ptrdiff_t OW = 2 * W, stride = OW + 64;
    int16_t *prev = hb, *cur = hb, *next;
    qops_bl2_hrow(x, W, sgn, pad, cur);
    for (ptrdiff_t i = 0; i < H; i++) {
        if (i + 1 < H) {
            /* the buffer neither prev nor cur uses */
            next = hb;
            while (next == prev || next == cur) next += stride;
            qops_bl2_hrow(x + (i + 1) * W, W, sgn, pad, next);
        } else {
            next = cur;
        }
        qops_bl2_vrow(prev, cur, out + 2 * i * OW, OW, sgn);
        qops_bl2_vrow(next, cur, out + (2 * i + 1) * OW, OW, sgn);
        prev = cur;
        cur = next;
    }
}

#endif  /* QOPS_RESIZE_H */
