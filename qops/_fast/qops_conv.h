/* Quantized convolution kernels: uint8 input x int8 weight -> exact int32 -> requantized uint8.
 *
 * The kernels live in one header per route and instruction set; this one includes them all
 * and picks one per call (conv.pyx declares what it uses from here):
 *   qops_conv_planes.h        the planes layout, filling the planes, the kernel arguments
 *   qops_conv_planes_amx.h    AMX (tdpbsud, weights as the signed operand, 16x16 output
 *                             tiles) where the CPU and kernel allow it
 *   qops_conv_planes_vnni.h   AVX-512 VNNI (vpdpbusd, 16 pixels per vector)
 *   qops_conv_planes_avx2.h   AVX2 (vpmaddubsw + vpmaddwd, 8 pixels per vector; depthwise:
 *                             vpmaddwd on int16 pixel pairs)
 *   qops_conv_planes_c.h      portable C
 *   qops_conv_dwrows*.h       depthwise rows (stride 1 along W, KW <= 4): AVX-512 VNNI, AVX2
 * The channels-last kernels are separate: qops_conv_nhwc.h, qops_conv_dwcl_avx2.h,
 * qops_conv_im2col.h.
 *
 * Accumulation is Sum x*w over raw values in wrapping int32, then the zero-point terms, also
 * wrapping:  acc = Sum x*w - wz*Sum x + xz*(K*wz - Sum w). The caller guarantees the true
 * accumulator fits int32, so the wrapped result is exact. Requantization, the same in every
 * path (docs/semantics.md §8):
 *   y = f32(f32(acc) + bterm);  out = clamp(rint(f32(y * mult)), lo - ozp, 255 - ozp) + ozp
 */
#ifndef QOPS_CONV_H
#define QOPS_CONV_H
#include "qops_conv_planes.h"
#include "qops_conv_planes_c.h"
#include "qops_conv_planes_vnni.h"
#include "qops_conv_planes_avx2.h"
#include "qops_conv_dwrows.h"
#include "qops_conv_dwrows_avx2.h"
#include "qops_conv_dwrows_vnni.h"

static void qconv_dwr_channel(const qconv_dwr_args *r, int tid, ptrdiff_t n, ptrdiff_t c) {
#ifdef QCONV_VNNI
    qconv_dwr_channel_vnni(r, tid, n, c);
#elif defined(QCONV_AVX2)
    qconv_dwr_channel_avx2(r, tid, n, c);
#else
    (void)r; (void)tid; (void)n; (void)c;
#endif
}

#include "qops_conv_planes_amx.h"

static int qconv_amx_available(void) {
#ifdef QCONV_AMX
    return qops_amx_request();
#else
    return 0;
#endif
}

/* mode: 0 portable, 1 SIMD (AVX-512 VNNI or AVX2), 2 AMX (falls back to what this
 * build has). */
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
