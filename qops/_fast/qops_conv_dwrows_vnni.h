/* Depthwise rows route, AVX-512 VNNI: row quads, pixel j holding (xp[j], xp[j+dw],
 * xp[j+2dw], xp[j+3dw]) for the KW horizontal taps (0 past KW, where the weight byte is 0
 * too), and one vpdpbusd per (kd, kh) and 16 pixels. */
#ifndef QOPS_CONV_DWROWS_VNNI_H
#define QOPS_CONV_DWROWS_VNNI_H
#include "qops_conv_dwrows.h"
#include "qops_conv_planes_vnni.h"

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

static void qconv_dwr_channel_vnni(const qconv_dwr_args *r, int tid, ptrdiff_t n, ptrdiff_t c) {
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
}
#endif /* QCONV_VNNI */

#endif
