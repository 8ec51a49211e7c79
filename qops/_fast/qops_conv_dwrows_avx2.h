/* Depthwise rows route, AVX2: row pairs and vpmaddwd (exact), 8 pixels per vector. */
#ifndef QOPS_CONV_DWROWS_AVX2_H
#define QOPS_CONV_DWROWS_AVX2_H
#include "qops_conv_dwrows.h"
#include "qops_conv_planes_avx2.h"

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

#endif
