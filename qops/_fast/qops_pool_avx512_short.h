/* AVX-512 short-row kernels: adaptive pools and pair-tiling average pools on rows of at
 * most 64 bytes (routes short, short_pairs), and the flat 2x2 average pool (avg2x2). */
#ifndef QOPS_POOL_AVX512_SHORT_H
#define QOPS_POOL_AVX512_SHORT_H
#include "qops_pool_avx512_cols.h"
#if QP_SIMD == 2
/* -- short rows (adaptive pools) -------------------------------------------------------
 * Output rows [g0, g1) (plane-major over N*C*OD*OH) of an adaptive pool whose input rows
 * fit one vector (W <= 64) and output rows half of one (OW <= 32): the rows of each
 * output row's (d, h) window are reduced vertically in 16-bit lanes (max, or exact sums while
 * the window has at most 256 taps: the caller checks), then tap k of every W window is
 * gathered from the 64 lanes by one vpermt2w (index min(w0 + k, w1 - 1): a repeated lane is
 * harmless to a max, and the sum masks it off). lim: d0[OD], d1[OD], h0[OH], h1[OH],
 * w0[OW], w1[OW]; recip: f32 reciprocals per output, as the scalar path. Uniform windows
 * (adaptive pools from 28x28 to 7x7) and non-uniform ones take the same path. */
#define QP_SHORT 1
/* Uniform W windows of kW = 2, 4 or 8 taps (w0 = ow*kW, W = OW*kW: adaptive pools whose size
 * divides the input's) reduce horizontally inside each input row without a permute: sums by
 * vpmaddubsw (pairs, 16-bit), vpdpbusd (quads, 32-bit) or vpsadbw (octets, 64-bit), maxima by
 * shifts within 16/32/64-bit lanes; the vertical step then adds (maxes) those lanes. */
QP_ALWAYS __m512i qp_hsum_u(__m512i v, int kw, int sgn) {
    const __m512i one = _mm512_set1_epi8(1);
    if (kw == 2) return sgn ? _mm512_maddubs_epi16(one, v) : _mm512_maddubs_epi16(v, one);
    if (kw == 4) return sgn ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), one, v)
                            : _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, one);
    /* kw == 8; int8 biased to unsigned (the caller removes 128 per tap) */
    if (sgn) v = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    return _mm512_sad_epu8(v, _mm512_setzero_si512());
}

QP_ALWAYS __m512i qp_hmax_u(__m512i v, int kw, int sgn) {
    /* the max of each kW-byte group lands in the group's low byte */
    v = sgn ? _mm512_max_epi8(v, _mm512_srli_epi16(v, 8)) : _mm512_max_epu8(v, _mm512_srli_epi16(v, 8));
    if (kw >= 4)
        v = sgn ? _mm512_max_epi8(v, _mm512_srli_epi32(v, 16)) : _mm512_max_epu8(v, _mm512_srli_epi32(v, 16));
    if (kw >= 8)
        v = sgn ? _mm512_max_epi8(v, _mm512_srli_epi64(v, 32)) : _mm512_max_epu8(v, _mm512_srli_epi64(v, 32));
    return v;
}

/* The row at p, with a prefetch far ahead: the rows walked are short and the stream of
 * output rows moves through the input quickly (measured faster than the hardware alone). */
#define QP_SPF 1024
QP_ALWAYS const uint8_t *qp_pf(const uint8_t *p) {
    _mm_prefetch((const char *)(p + QP_SPF), _MM_HINT_T0);
    return p;
}

/* The same for average pools over several D planes (3-d): 4096 bytes ahead reaches the rows
 * of the next D window (measured faster than 1024 on 3-d 2x2x2 pools). */
#define QP_SPF2 4096
QP_ALWAYS const uint8_t *qp_pf2(const uint8_t *p) {
    _mm_prefetch((const char *)(p + QP_SPF2), _MM_HINT_T0);
    return p;
}
/* An adaptive average's outputs o[0, n) (om = the first n bits) from the window sums in
 * acc: kw-byte lanes of 16 (kw 2), 32 (kw 4) or 64 bits (kw 8, int8 sums biased by 128 per
 * byte over `rows` rows), as rint(f32(f32(sum) * r)) with cvtps2dq's round half to even and
 * r = rc[ow]; an average of raw values is in range, so vpmovdb's truncation is exact. */
QP_ALWAYS void qp_adaptive_store(__m512i acc, int kw, int sgn, ptrdiff_t rows, const float *rc,
                                 uint8_t *o, __mmask32 om) {
    const __mmask16 om0 = (__mmask16)(om & 0xFFFF), om1 = (__mmask16)(om >> 16);
    if (kw == 8) {
        if (sgn) acc = _mm512_sub_epi64(acc, _mm512_set1_epi64(128 * 8 * rows));
        __m256 f = _mm256_mul_ps(_mm512_cvtepi64_ps(acc), _mm256_maskz_loadu_ps((__mmask8)om, rc));
        _mm256_mask_cvtepi32_storeu_epi8(o, (__mmask8)om, _mm256_cvtps_epi32(f));
    } else if (kw == 4) {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_maskz_loadu_ps(om0, rc));
        _mm512_mask_cvtepi32_storeu_epi8(o, om0, _mm512_cvtps_epi32(f));
    } else {
        __m256i a = _mm512_castsi512_si256(acc);
        __m512 f = _mm512_cvtepi32_ps(sgn ? _mm512_cvtepi16_epi32(a) : _mm512_cvtepu16_epi32(a));
        f = _mm512_mul_ps(f, _mm512_maskz_loadu_ps(om0, rc));
        _mm512_mask_cvtepi32_storeu_epi8(o, om0, _mm512_cvtps_epi32(f));
        if (om1) {
            a = _mm512_extracti64x4_epi64(acc, 1);
            f = _mm512_cvtepi32_ps(sgn ? _mm512_cvtepi16_epi32(a) : _mm512_cvtepu16_epi32(a));
            f = _mm512_mul_ps(f, _mm512_maskz_loadu_ps(om1, rc + 16));
            _mm512_mask_cvtepi32_storeu_epi8(o + 16, om1, _mm512_cvtps_epi32(f));
        }
    }
}

/* kw: 0 for any windows (the permute path), else the uniform window width 2, 4 or 8.
 * avg: 0 max, 1 adaptive average, 2 and 3 average pools (kw == 2 only; the requantize of aq;
 * 2 when the windows span several D planes). */
QP_ALWAYS void qp_short_rows_t(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H,
                               ptrdiff_t W, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,
                               const ptrdiff_t *lim, const float *recip, ptrdiff_t g0,
                               ptrdiff_t g1, int avg, int sgn, int kw, int w32,
                               const qp_avgq *aq) {
    const ptrdiff_t *d0 = lim, *d1 = lim + OD, *h0 = lim + 2 * OD, *h1 = h0 + OH;
    const ptrdiff_t *w0 = h0 + 2 * OH, *w1 = w0 + OW;
    __m512i idx[64];
    __mmask32 km[64];
    int nk = 0;
    if (!kw) {
        for (ptrdiff_t ow = 0; ow < OW; ow++)
            if (w1[ow] - w0[ow] > nk) nk = (int)(w1[ow] - w0[ow]);
        if (nk > 64) return;     /* qp_short_rows refuses such windows first: never */
        for (int k = 0; k < nk; k++) {
            uint16_t t[32];
            __mmask32 m = 0;
            for (ptrdiff_t ow = 0; ow < 32; ow++) {
                ptrdiff_t j = ow < OW ? w0[ow] + k : 0;
                if (ow < OW && j < w1[ow]) m |= (__mmask32)1 << ow;
                if (ow < OW && j >= w1[ow]) j = w1[ow] - 1;
                t[ow] = (uint16_t)j;
            }
            idx[k] = _mm512_loadu_si512((const void *)t);
            km[k] = m;
        }
    }
    const __mmask64 lm = _bzhi_u64(~0ULL, (unsigned)W);
    const __mmask32 om = _bzhi_u32(~0U, (unsigned)OW);
    const __mmask16 om0 = (__mmask16)(om & 0xFFFF);
    const ptrdiff_t rpp = OD * OH, HW = H * W;
    ptrdiff_t p = g0 / rpp, rem = g0 - p * rpp;
    ptrdiff_t od = rem / OH, oh = rem - od * OH;
    for (ptrdiff_t r = g0; r < g1; r++) {
        const uint8_t *plane = x + p * D * HW;
        uint8_t *o = out + r * OW;
        const float *rc = recip + rem * OW;
        const ptrdiff_t ia = d0[od], ib = d1[od], ja = h0[oh], jb = h1[oh];
        __m512i acc;
        if (kw) {
            /* uniform windows: per-row horizontal reduce, vertical add or max */
            if (avg) {
                acc = _mm512_setzero_si512();
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        const uint8_t *q = plane + idd * HW + ih * W;
                        /* avg 2: average pools over several D planes (see qp_pf2) */
                        q = avg == 2 ? qp_pf2(q) : qp_pf(q);
                        __m512i v = qp_hsum_u(_mm512_maskz_loadu_epi8(lm, q), kw, sgn);
                        acc = kw == 2 ? _mm512_add_epi16(acc, v)
                            : kw == 4 ? _mm512_add_epi32(acc, v) : _mm512_add_epi64(acc, v);
                    }
            } else {
                __m512i v = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        const uint8_t *q = plane + idd * HW + ih * W;
                        __m512i t = _mm512_maskz_loadu_epi8(lm, ib - ia > 1 ? qp_pf2(q) : qp_pf(q));
                        v = sgn ? _mm512_max_epi8(v, t) : _mm512_max_epu8(v, t);
                    }
                v = qp_hmax_u(v, kw, sgn);
                if (kw == 2) _mm512_mask_cvtepi16_storeu_epi8(o, om, v);
                else if (kw == 4) _mm512_mask_cvtepi32_storeu_epi8(o, om0, v);
                else _mm512_mask_cvtepi64_storeu_epi8(o, (__mmask8)om, v);
                goto next;
            }
        } else {
            __m512i lo, hi;
            if (avg) {
                lo = hi = _mm512_setzero_si512();
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        __m512i v = _mm512_maskz_loadu_epi8(lm, qp_pf(plane + idd * HW + ih * W));
                        __m256i a = _mm512_castsi512_si256(v);
                        lo = _mm512_add_epi16(lo, sgn ? _mm512_cvtepi8_epi16(a) : _mm512_cvtepu8_epi16(a));
                        if (!w32) {
                            __m256i b = _mm512_extracti64x4_epi64(v, 1);
                            hi = _mm512_add_epi16(hi, sgn ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b));
                        }
                    }
            } else {
                __m512i v = _mm512_set1_epi8(sgn ? (char)0x80 : 0);
                for (ptrdiff_t idd = ia; idd < ib; idd++)
                    for (ptrdiff_t ih = ja; ih < jb; ih++) {
                        __m512i t = _mm512_maskz_loadu_epi8(lm, qp_pf(plane + idd * HW + ih * W));
                        v = sgn ? _mm512_max_epi8(v, t) : _mm512_max_epu8(v, t);
                    }
                __m256i a = _mm512_castsi512_si256(v), b = _mm512_extracti64x4_epi64(v, 1);
                lo = sgn ? _mm512_cvtepi8_epi16(a) : _mm512_cvtepu8_epi16(a);
                hi = sgn ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b);
            }
            /* 16-bit lanes: max_epi16 orders both the zero- and sign-extended values */
            acc = w32 ? _mm512_permutexvar_epi16(idx[0], lo) : _mm512_permutex2var_epi16(lo, idx[0], hi);
            for (int k = 1; k < nk; k++) {
                __m512i t = w32 ? _mm512_permutexvar_epi16(idx[k], lo)
                                : _mm512_permutex2var_epi16(lo, idx[k], hi);
                acc = avg ? _mm512_mask_add_epi16(acc, km[k], acc, t) : _mm512_max_epi16(acc, t);
            }
            if (!avg) {
                _mm512_mask_cvtepi16_storeu_epi8(o, om, acc);
                goto next;
            }
        }
        if (avg >= 2) {
            /* an average pool's formula (kw == 2: 16-bit sums of the 32 lanes' pairs) */
            ptrdiff_t cz = (ptrdiff_t)aq->cls[rem] * OW;
            qp_avg_store(acc, aq->zt + cz, aq->mt + cz, o, OW, _mm512_set1_ps(aq->zp), sgn,
                         aq->iq, cz);
            goto next;
        }
        qp_adaptive_store(acc, kw, sgn, (ib - ia) * (jb - ja), rc, o, om);
    next:
        rem++;
        if (++oh == OH) { oh = 0; if (++od == OD) { od = 0; rem = 0; p++; } }
    }
}

/* Adaptive pools of 2-d planes (D = OD = 1) with uniform windows, kh = H / OH rows by
 * kw = W / OW columns (kw 2, 4 or 8), whose kh rows fit two vectors (kh*W <= 128) and W <= 64:
 * output row r is the flat chunk of kh*W bytes at r*kh*W, whatever the plane. Each chunk is
 * reduced within kw-byte lanes (as qp_short_rows_t does per row), then its kh row results
 * are gathered by lane permutes and added (maxed): two loads per output row instead of kh,
 * and no window bookkeeping. */
QP_ALWAYS void qp_flat_rows_t(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OH,
                              ptrdiff_t OW, ptrdiff_t kh, const float *recip, ptrdiff_t g0,
                              ptrdiff_t g1, int avg, int sgn, int kw) {
    const ptrdiff_t C = kh * W, lanes = 64 / kw;   /* lanes of one vector after the reduce */
    const __mmask64 m0 = qp_m64(0, C), m1 = qp_m64(0, C - 64);
    const __mmask32 om = _bzhi_u32(~0U, (unsigned)OW);
    const __mmask16 om0 = (__mmask16)(om & 0xFFFF);
    __m512i idx[64];
    for (ptrdiff_t k = 0; k < kh; k++) {
        /* lane ow of permute k: lane k*OW + ow of the pair (first vector's lanes, then the
         * second's), as 16-, 32- or 64-bit indices */
        uint64_t t[8] = {0};
        uint16_t *t16 = (uint16_t *)t;
        uint32_t *t32 = (uint32_t *)t;
        for (ptrdiff_t ow = 0; ow < lanes; ow++) {
            ptrdiff_t j = k * OW + (ow < OW ? ow : 0);
            if (kw == 2) t16[ow] = (uint16_t)j;
            else if (kw == 4) t32[ow] = (uint32_t)j;
            else t[ow] = (uint64_t)j;
        }
        idx[k] = _mm512_loadu_si512((const void *)t);
    }
    for (ptrdiff_t r = g0; r < g1; r++) {
        const uint8_t *q = qp_pf(x + r * C);
        uint8_t *o = out + r * OW;
        __m512i a = _mm512_maskz_loadu_epi8(m0, q), b = _mm512_maskz_loadu_epi8(m1, q + 64);
        __m512i acc;
        if (avg) {
            a = qp_hsum_u(a, kw, sgn);
            b = qp_hsum_u(b, kw, sgn);
            acc = _mm512_setzero_si512();
            for (ptrdiff_t k = 0; k < kh; k++) {
                __m512i v = kw == 2 ? _mm512_permutex2var_epi16(a, idx[k], b)
                          : kw == 4 ? _mm512_permutex2var_epi32(a, idx[k], b)
                          : _mm512_permutex2var_epi64(a, idx[k], b);
                acc = kw == 2 ? _mm512_add_epi16(acc, v)
                    : kw == 4 ? _mm512_add_epi32(acc, v) : _mm512_add_epi64(acc, v);
            }
        } else {
            a = qp_hmax_u(a, kw, sgn);
            b = qp_hmax_u(b, kw, sgn);
            /* the lanes' low bytes hold the maxima; the other bytes do not matter */
            acc = kw == 2 ? _mm512_permutex2var_epi16(a, idx[0], b)
                : kw == 4 ? _mm512_permutex2var_epi32(a, idx[0], b)
                : _mm512_permutex2var_epi64(a, idx[0], b);
            for (ptrdiff_t k = 1; k < kh; k++) {
                __m512i v = kw == 2 ? _mm512_permutex2var_epi16(a, idx[k], b)
                          : kw == 4 ? _mm512_permutex2var_epi32(a, idx[k], b)
                          : _mm512_permutex2var_epi64(a, idx[k], b);
                acc = sgn ? _mm512_max_epi8(acc, v) : _mm512_max_epu8(acc, v);
            }
            if (kw == 2) _mm512_mask_cvtepi16_storeu_epi8(o, om, acc);
            else if (kw == 4) _mm512_mask_cvtepi32_storeu_epi8(o, om0, acc);
            else _mm512_mask_cvtepi64_storeu_epi8(o, (__mmask8)om, acc);
            continue;
        }
        qp_adaptive_store(acc, kw, sgn, kh, recip + (r % OH) * OW, o, om);
    }
}

static void qp_flat_rows(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OH, ptrdiff_t OW,
                         ptrdiff_t kh, const float *recip, ptrdiff_t g0, ptrdiff_t g1, int avg,
                         int sgn, int kw) {
#define QP_FLAT(KW) do { \
        if (avg) { if (sgn) qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 1, 1, KW); \
                   else qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 1, 0, KW); } \
        else { if (sgn) qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 0, 1, KW); \
               else qp_flat_rows_t(x, out, W, OH, OW, kh, recip, g0, g1, 0, 0, KW); } \
    } while (0)
    if (kw == 2) QP_FLAT(2);
    else if (kw == 4) QP_FLAT(4);
    else QP_FLAT(8);
#undef QP_FLAT
}

/* The uniform window width (2, 4, 8) of W windows, or 0 (the permute path). */
static inline int qp_short_kw(const ptrdiff_t *w0, const ptrdiff_t *w1, ptrdiff_t W, ptrdiff_t OW) {
    ptrdiff_t k = W / OW;
    if (k * OW != W || (k != 2 && k != 4 && k != 8)) return 0;
    for (ptrdiff_t ow = 0; ow < OW; ow++)
        if (w0[ow] != ow * k || w1[ow] != (ow + 1) * k) return 0;
    return (int)k;
}

#define QP_SHORT_CALL(AVG, SGN) do { \
    if (kw == 2) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 2, 0, NULL); \
    else if (kw == 4) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 4, 0, NULL); \
    else if (kw == 8) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 8, 0, NULL); \
    else if (W <= 32) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 0, 1, NULL); \
    else qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, recip, g0, g1, AVG, SGN, 0, 0, NULL); \
} while (0)

/* Output rows [g0, g1) of an adaptive pool (lim, recip as qp_short_rows_t); returns 0, or
 * QP_ERR_GEOM, those rows unwritten, for a W window of more than 64 taps (the caller routes
 * only rows of W <= 64 here: never). */
static int qp_short_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H, ptrdiff_t W,
                         ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW, const ptrdiff_t *lim,
                         const float *recip, ptrdiff_t g0, ptrdiff_t g1, int avg, int sgn) {
    if (g1 <= g0) return 0;
    const ptrdiff_t *w0 = lim + 2 * OD + 2 * OH;
    for (ptrdiff_t ow = 0; ow < OW; ow++)
        if (w0[OW + ow] - w0[ow] > 64) return QP_ERR_GEOM;
    int kw = qp_short_kw(w0, w0 + OW, W, OW);
    if (kw && D == 1 && OD == 1 && W <= 64 && H % OH == 0 && (H / OH) * W <= 128) {
        /* uniform H windows too (adaptive windows of a size dividing the input are the
         * uniform ones, whose rows form flat chunks): the flat kernel */
        ptrdiff_t kh = H / OH, ok = 1;
        for (ptrdiff_t oh = 0; oh < OH; oh++)
            ok &= lim[2 * OD + oh] == oh * kh && lim[2 * OD + OH + oh] == (oh + 1) * kh;
        if (ok) {
            qp_flat_rows(x, out, W, OH, OW, kh, recip, g0, g1, avg, sgn, kw);
            return 0;
        }
    }
    /* one instance per (avg, sgn, kw): the lane-type choices leave the row loop */
    if (avg) {
        if (sgn) QP_SHORT_CALL(1, 1);
        else QP_SHORT_CALL(1, 0);
    } else {
        if (sgn) QP_SHORT_CALL(0, 1);
        else QP_SHORT_CALL(0, 0);
    }
    return 0;
}
/* Output rows [g0, g1) of an average pool whose W windows are pairs tiling input rows of
 * <= 64 bytes (lim as qp_short_rows, w0 = 2*ow); the caller checks kD*kH <= 128. */
static int qp_short_avg_rows(const uint8_t *x, uint8_t *out, ptrdiff_t D, ptrdiff_t H,
                             ptrdiff_t W, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,
                             const ptrdiff_t *lim, ptrdiff_t g0, ptrdiff_t g1, int sgn,
                             const qp_avgq *aq) {
    if (g1 <= g0) return 0;
    qp_avgq a = *aq;
    if (a.iq && !a.iq->t) a.iq = NULL;
    int far = lim[OD] - lim[0] > 1;          /* the first D window has several planes */
    if (far) {
        if (sgn) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 2, 1, 2, 0, &a);
        else qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 2, 0, 2, 0, &a);
    } else {
        if (sgn) qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 3, 1, 2, 0, &a);
        else qp_short_rows_t(x, out, D, H, W, OD, OH, OW, lim, NULL, g0, g1, 3, 0, 2, 0, &a);
    }
    return 0;
}
/* Output rows [g0, g1) of a 2-d 2x2 stride-2 average pool on rows of <= 64 bytes whose
 * windows all have the divisor of class row cz of the integer tables iq (no padding, even H
 * and W): output row r is input rows 2r and 2r + 1 of the flat stream, across planes. Two
 * output rows share one pack and permute (32 outputs per row at most), with plain pointer
 * steps instead of the general kernel's window bookkeeping. */
static void qp_avg2x2_rows(const uint8_t *x, uint8_t *out, ptrdiff_t W, ptrdiff_t OW,
                           ptrdiff_t g0, ptrdiff_t g1, int sgn, const qp_irq *iq, ptrdiff_t cz) {
    const __mmask64 lm = _bzhi_u64(~0ULL, (unsigned)W);
    const __mmask32 om = _bzhi_u32(~0U, (unsigned)OW);
    const __m512i perm = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    const uint8_t *q = x + 2 * g0 * W;
    uint8_t *o = out + g0 * OW;
    ptrdiff_t r = g0;
#define QP_PAIRSUM(P) _mm512_add_epi16( \
        qp_hsum_u(_mm512_maskz_loadu_epi8(lm, qp_pf(P)), 2, sgn), \
        qp_hsum_u(_mm512_maskz_loadu_epi8(lm, qp_pf((P) + W)), 2, sgn))
    for (; r + 2 <= g1; r += 2, q += 4 * W, o += 2 * OW) {
        __m512i a = qp_irq32(QP_PAIRSUM(q), iq, cz), b = qp_irq32(QP_PAIRSUM(q + 2 * W), iq, cz);
        __m512i v = _mm512_permutexvar_epi64(perm, sgn ? _mm512_packs_epi16(a, b)
                                                       : _mm512_packus_epi16(a, b));
        _mm256_mask_storeu_epi8(o, om, _mm512_castsi512_si256(v));
        _mm256_mask_storeu_epi8(o + OW, om, _mm512_extracti64x4_epi64(v, 1));
    }
    if (r < g1) {
        __m512i a = qp_irq32(QP_PAIRSUM(q), iq, cz);
        __m512i v = _mm512_permutexvar_epi64(perm, sgn ? _mm512_packs_epi16(a, a)
                                                       : _mm512_packus_epi16(a, a));
        _mm256_mask_storeu_epi8(o, om, _mm512_castsi512_si256(v));
    }
#undef QP_PAIRSUM
#endif  /* QP_SIMD == 2 */
#endif  /* QOPS_POOL_AVX512_SHORT_H */
