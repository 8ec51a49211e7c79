/* Planes route, AVX-512 VNNI: vpdpbusd on 16 pixels per vector, 6 output channels x 4
 * vectors of accumulators in registers (grouped); depthwise takes four taps per vpdpbusd.
 * qconv_store16 and qconv_window_sums also serve the AMX kernel (qops_conv_planes_amx.h) and
 * the channels-last AMX kernels (qops_conv_nhwc.h). */
#ifndef QOPS_CONV_PLANES_VNNI_H
#define QOPS_CONV_PLANES_VNNI_H
#include "qops_conv_planes.h"

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

#endif
