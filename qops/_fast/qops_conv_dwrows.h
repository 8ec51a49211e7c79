/* Depthwise rows: depthwise, stride 1 along W, KW <= 4, one whole channel per work item
 * (AVX-512 VNNI and AVX2 builds). Each padded input row of the channel is turned into rows
 * of the KW horizontal taps per pixel, "row quads" for vpdpbusd
 * (qops_conv_dwrows_vnni.h) or "row pairs" for vpmaddwd (qops_conv_dwrows_avx2.h); an
 * output row is then KD*KH multiply-adds per vector of pixels, with the pixels in natural
 * order, and the rows of one channel stay in L1 and serve every output row. This header:
 * the arguments and the limits conv.pyx asks for; qconv_dwr_channel is in qops_conv.h. */
#ifndef QOPS_CONV_DWROWS_H
#define QOPS_CONV_DWROWS_H
#include "qops_conv_planes.h"

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

#endif
