# Quantized convolution kernels (mirror of qops/_ref/conv.py).
# Contract: uint8 input x int8 weight, exact int32 accumulation, float32 bias term and
# requantization of docs/semantics.md §8, uint8 output. The input is copied once into padded
# "planes" (qops_conv_planes.h: output pixels of a row in the vector lanes, 4 input channels per
# pixel), the micro-kernels (AMX, AVX-512 VNNI, AVX2 or portable C: qops_conv_planes_*.h, picked
# by qops_conv.h) write the NCDHW output directly.
from qops._fast._routes import Route, TRACE, trace_routes as _trace_routes

import numpy as np
from qops._layout import memory_order
from cython.parallel cimport prange, threadid
from libc.math cimport isfinite
from qops._fast._common cimport *

DEF GRAIN = 1 << 20       # multiply-adds below which a second thread costs more than it gives
# the same for the AMX tiles, whose multiply-adds cost a small fraction of a VNNI one's
# while a second thread's start-up and tile set-up do not shrink (amounts: CHANGELOG)
DEF AMX_GRAIN = 12 << 20


cdef extern from "qops_conv.h" nogil:
    ctypedef struct qconv_fill_args:
        const uint8_t *x
        Py_ssize_t sn, sc, sd, sh, sw_x
        Py_ssize_t D, H, W
        Py_ssize_t pd, ph, pw
        Py_ssize_t Dp, Hp, sw, Wq, ilv
        Py_ssize_t NG, C4, Cg
        int dw
        int xz
        uint8_t *xq
        Py_ssize_t group_bytes, img_bytes, row_bytes, c4_stride
        uint8_t *scratch
        Py_ssize_t scratch_bytes
    ctypedef struct qconv_args:
        const uint8_t *xq
        Py_ssize_t img_bytes, group_bytes, row_bytes, c4_stride
        Py_ssize_t Hp, sw, Wq, ilv
        Py_ssize_t OD, OH, OW
        Py_ssize_t sd, sh
        int ntaps
        const Py_ssize_t *toff
        int G, Cg, C4, Og, O
        const int32_t *wv
        const int32_t *wvl
        const int32_t *wvh
        int pairsafe
        const int8_t *wa
        int Kc, nch, nob
        const int32_t *kzw
        const int32_t *wz
        const uint8_t *gany
        const int32_t *wd
        const int32_t *wdsum
        const float *bterm
        const float *mult
        int32_t xz, ozp, lo
        uint8_t *out
    void qconv_fill_rows(const qconv_fill_args *f, int tid, Py_ssize_t r0, Py_ssize_t r1)
    void qconv_grouped(const qconv_args *a, int mode, Py_ssize_t n, Py_ssize_t od, Py_ssize_t oh0,
                       Py_ssize_t oh1, Py_ssize_t ow0, Py_ssize_t ow1)
    void qconv_dw(const qconv_args *a, int mode, Py_ssize_t n, Py_ssize_t od, Py_ssize_t oh,
                  Py_ssize_t ow0, Py_ssize_t ow1)
    ctypedef struct qconv_dwr_args:
        const uint8_t *x
        Py_ssize_t sn, sc, sd, sh, sw_x
        Py_ssize_t D, H, W, pd, ph, pw
        Py_ssize_t Dp, Hp, KW, dwl
        Py_ssize_t OD, OH, OW, OWp, Lp
        Py_ssize_t sdd, shh
        int NQ
        const Py_ssize_t *roff
        int C
        const int32_t *wrow
        const int32_t *kzw
        const int32_t *wz
        const uint8_t *gany
        const float *bterm
        const float *mult
        int32_t xz, ozp, lo
        uint8_t *out
        uint8_t *scratch
        Py_ssize_t scratch_bytes
    int qconv_dwr_available()
    int qconv_dwr_max_nq()
    Py_ssize_t qconv_dwr_rowpix(Py_ssize_t OWp, Py_ssize_t dwl)
    void qconv_dwr_channel(const qconv_dwr_args *r, int tid, Py_ssize_t n, Py_ssize_t c)
    int qconv_amx_available()
    int qconv_best_mode()
    int qconv_avx2_build()
    int QCONV_PIX


_AMX = bool(qconv_amx_available())
_MODE = [2 if _AMX else qconv_best_mode()]
_AMX_MIN_KC = [16]
_NHWC_MIN_C = 32          # conv_cl's padded-pixel kernel from here, im2col rows below
_AMX_FLAT = [True]        # stride-1 channels-last AMX convs read the padded copy flat (tests)


def _set_mode(mode):
    """Choose the kernel tier (tests): 'amx', 'vnni' or 'portable'; returns the previous one."""
    names = {"portable": 0, "vnni": 1, "amx": 2}
    prev = {v: k for k, v in names.items()}[_MODE[0]]
    m = names[mode]
    if m == 2 and not _AMX:
        m = qconv_best_mode()
    _MODE[0] = min(m, qconv_best_mode()) if m < 2 else m
    return prev


def _wrap32(v):
    """int64 values reduced modulo 2**32 into int32 (the wrapping arithmetic of the kernels)."""
    return ((np.asarray(v, np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)


def pack_weight(w, w_zero_points, groups):
    """Pack an int8 weight (O, C/groups, KD, KH, KW) into the layouts of the kernels.

    Depthwise (one input and one output channel per group): taps four to an int32 [C][taps/4]
    for vpdpbusd, and (w - w_zp) as int32 [C][taps] for the portable kernel. Otherwise:
    C/groups rounded up to 4 (to 64 past 64 when AMX runs), four weights per int32
    [O][taps][C4] for vpdpbusd, and 16 x (4*C4 chunk) tiles per 16 output channels for AMX.
    Both carry the zero-point constants per output channel (K*w_zp - sum w, w_zp).
    """
    w = np.asarray(w, dtype=np.int8)
    wz = np.asarray(w_zero_points, dtype=np.int64)
    o, cg = w.shape[:2]
    kernel = tuple(int(k) for k in w.shape[2:])
    ntaps = int(np.prod(kernel))
    wf = w.reshape(o, cg, ntaps).astype(np.int64)
    if cg == 1 and o == groups:
        wd = (wf[:, 0, :] - wz[:, None]).astype(np.int32)
        nq = (ntaps + 3) // 4
        quads = np.zeros((o, nq * 4), np.int8)
        quads[:, :ntaps] = w.reshape(o, ntaps)
        kd_, kh_, kw_ = (1,) * (3 - len(kernel)) + kernel
        wrow = np.zeros((o, kd_ * kh_, 4), np.int8)
        if kw_ <= 4:
            wrow[:, :, :kw_] = w.reshape(o, kd_ * kh_, kw_)
        return {"kind": "dw", "kernel": kernel, "O": o, "Cg": 1, "wd": wd,
                "wrow": wrow.view(np.int32).reshape(o, kd_ * kh_),
                "wdsum": wd.sum(axis=1, dtype=np.int64).astype(np.int32),
                "wv": quads.view(np.int32).reshape(o, nq),
                "kzw": _wrap32(ntaps * wz - wf.sum(axis=(1, 2))), "wz": wz.astype(np.int32),
                "gany": (wz != 0).astype(np.uint8), "symmetric": not (wz != 0).any()}
    og = o // groups
    cg4 = (cg + 3) // 4 * 4
    if _AMX and cg4 > 64:
        cg4 = (cg4 + 63) // 64 * 64
    kc = min(cg4, 64)
    nch = cg4 // kc
    nob = (og + 15) // 16
    wpad = np.zeros((o, ntaps, cg4), np.int8)
    wpad[:, :, :cg] = w.reshape(o, cg, ntaps).transpose(0, 2, 1)
    wv = np.ascontiguousarray(wpad).view(np.int32).reshape(o, ntaps, cg4 // 4)
    packed = {"kind": "grouped", "kernel": kernel, "O": o, "Cg": cg, "C4": cg4 // 4, "Og": og,
              "Kc": kc, "nch": nch, "nob": nob, "wv": wv,
              "kzw": _wrap32(cg * ntaps * wz - wf.sum(axis=(1, 2))), "wz": wz.astype(np.int32),
              "gany": (wz.reshape(groups, og) != 0).any(axis=1).astype(np.uint8)}
    if qconv_avx2_build():
        # qconv_dot8: the largest per-sign sum over a weight pair (vpmaddubsw cannot saturate
        # while it times the largest input stays <= 32767), and the weights' nibble split
        pairs = wpad.reshape(o, ntaps, cg4 // 2, 2).astype(np.int16)
        packed["pairmax"] = int(max(np.clip(pairs, 0, None).sum(axis=-1).max(initial=0),
                                    np.clip(-pairs, 0, None).sum(axis=-1).max(initial=0)))
        wl = wpad & np.int8(15)
        wh = ((wpad.astype(np.int16) - wl) // 16).astype(np.int8)
        packed["wvl"] = np.ascontiguousarray(wl).view(np.int32).reshape(o, ntaps, cg4 // 4)
        packed["wvh"] = np.ascontiguousarray(wh).view(np.int32).reshape(o, ntaps, cg4 // 4)
    if _AMX:
        blk = np.zeros((groups, nob * 16, ntaps, cg4), np.int8)
        blk[:, :og] = wpad.reshape(groups, og, ntaps, cg4)
        wa = blk.reshape(groups, nob, 16, ntaps, nch, kc).transpose(0, 1, 3, 4, 2, 5)
        # 64-byte aligned: every row of a weight tile is then one cache line; tiles split
        # across lines cost the AMX kernel a fifth of its time, by where the allocator
        # happened to put the pack
        packed["wa"] = qops_aligned(np, wa)
    # what the channels-last AMX kernel needs of the weights, known once
    packed["symmetric"] = not packed["gany"].any()
    return packed


cdef extern from "qops_conv_nhwc.h" nogil:
    ctypedef struct qconv_nhwc_fill_args:
        const uint8_t *x
        Py_ssize_t N, D, H, W, C
        Py_ssize_t pd, ph, pw
        Py_ssize_t Dp, Hp, Wp, Cp
        uint8_t xz
        uint8_t *xp
        int corder
    ctypedef struct qconv_nhwc_args:
        const uint8_t *xp
        Py_ssize_t Dp, Hp, Wp, Cp
        Py_ssize_t OD, OH, OW, O
        Py_ssize_t sd, sh, sw
        int ntaps, nch, nob
        const Py_ssize_t *toff
        const int8_t *wb
        const int32_t *kzw
        const float *bterm
        const float *mult
        int32_t xz, ozp, lo
        uint8_t *out
    void qconv_nhwc_fill(const qconv_nhwc_fill_args *f, Py_ssize_t r0, Py_ssize_t r1)
    void qconv_nhwc_fill_phases(const qconv_nhwc_fill_args *f, Py_ssize_t sh, Py_ssize_t sw,
                                Py_ssize_t hq, Py_ssize_t wq, Py_ssize_t r0, Py_ssize_t r1)
    void qconv_gather_pixels(const uint8_t *x, Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                             Py_ssize_t C, Py_ssize_t sd, Py_ssize_t sh, Py_ssize_t sw,
                             Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW, uint8_t *dst,
                             Py_ssize_t g0, Py_ssize_t g1)
    void qconv_nhwc_amx(const qconv_nhwc_args *a, Py_ssize_t r0, Py_ssize_t r1)
    void qconv_nhwc_amx_parts(const qconv_nhwc_args *a, const qconv_nhwc_args *at,
                              Py_ssize_t rows, int nsplit, uint8_t *stage, int stage_rows,
                              const uint8_t *xc, Py_ssize_t hw, Py_ssize_t i0, Py_ssize_t i1)
    Py_ssize_t qconv_flat_items(const qconv_nhwc_args *a, Py_ssize_t N)
    void qconv_nhwc_amx_flat(const qconv_nhwc_args *a, Py_ssize_t i0, Py_ssize_t i1)
    ctypedef struct qconv_im2col_args:
        const uint8_t *x
        Py_ssize_t N, D, H, W, C
        Py_ssize_t KD, KH, KW
        Py_ssize_t sd, sh, sw, pd, ph, pw, dd, dh, dw
        uint8_t xz
    void qconv_nhwc_amx_im2col(const qconv_nhwc_args *a, const qconv_im2col_args *f,
                               uint8_t *row, Py_ssize_t r0, Py_ssize_t r1)
    ctypedef struct qconv_dwcl_args:
        const uint8_t *x
        Py_ssize_t N, D, H, W, C
        Py_ssize_t OD, OH, OW
        Py_ssize_t KD, KH, KW
        Py_ssize_t sd, sh, sw, pd, ph, pw, dd, dh, dw
        const int8_t *wq
        const int32_t *kzw
        const float *bterm
        const float *mult
        int32_t xz, ozp, lo
        uint8_t *out
    int QCONV_DWCL_MAX_ROWS
    int qconv_dwcl_available()
    void qconv_dwcl_consts(const qconv_dwcl_args *a, float *cst)
    void qconv_dwcl_rows(const qconv_dwcl_args *a, const float *cst, Py_ssize_t r0, Py_ssize_t r1)

cdef extern from "qops_transpose.h" nogil:
    void qops_transpose8_batch(const uint8_t *src, uint8_t *dst, Py_ssize_t nb, Py_ssize_t rows,
                               Py_ssize_t cols, int threads)


cdef extern from "qops_conv_dwcl_avx2.h" nogil:
    ctypedef struct qconv_dwcl2_args:
        const uint8_t *x
        Py_ssize_t N, D, H, W, C
        Py_ssize_t OD, OH, OW
        Py_ssize_t KD, KH, KW
        Py_ssize_t sd, sh, sw, pd, ph, pw, dd, dh, dw
        Py_ssize_t B
        const int32_t *wp
        const int32_t *cst
        const uint8_t *zrow
        int32_t ozp, lo
        uint8_t *out
    int QCONV_DWCL2_MAX_TAPS
    int qconv_dwcl2_available()
    Py_ssize_t qconv_dwcl2_block(Py_ssize_t C)
    void qconv_dwcl2_consts(const qconv_dwcl2_args *a, const int32_t *wdsum, const float *bterm,
                            const float *mult, int32_t xz, int32_t *cst)
    void qconv_dwcl2_rows(const qconv_dwcl2_args *a, Py_ssize_t r0, Py_ssize_t r1)


from qops._fast._gemm cimport *


cdef extern from "qops_conv_im2col.h" nogil:
    ctypedef struct qconv_i2c_args:
        const uint8_t *x
        Py_ssize_t N, D, H, W, C
        Py_ssize_t OD, OH, OW
        Py_ssize_t KD, KH, KW
        Py_ssize_t sd, sh, sw, pd, ph, pw, dd, dh, dw
        uint8_t xz
        uint8_t *rows
        Py_ssize_t ldr
        Py_ssize_t row0
    void qconv_i2c_fill(const qconv_i2c_args *f, Py_ssize_t p0, Py_ssize_t p1)
    void qconv_i2c_gemm(const qconv_i2c_args *f, Py_ssize_t p0, Py_ssize_t p1,
                        Py_ssize_t block, uint8_t xmax, const qops_gemm_b *B,
                        const qops_gemm_out *o, uint8_t *buf, Py_ssize_t q0, Py_ssize_t q1)
    ctypedef struct qconv_taps_args:
        const uint8_t *xp
        Py_ssize_t Dp, Hp, Wp, C
        Py_ssize_t OD, OH, OW
        Py_ssize_t sd, sh, sw
        const Py_ssize_t *toff
        int ntaps
        Py_ssize_t Kt
        uint8_t xz
    void qconv_taps_gemm(const qconv_taps_args *t, Py_ssize_t p0, Py_ssize_t p1,
                         const qops_gemm_b *B, const qops_gemm_out *o, Py_ssize_t q0,
                         Py_ssize_t q1)
    int qops_gemm_taps_available()


_AVX2 = bool(qconv_avx2_build())
# the GEMM-core routes (gemm_1x1, gemm_im2col and their C-order forms) at the SIMD tier:
# AVX2 builds, and AVX-512 VNNI builds where AMX is off or absent (a list: tests switch it):
# channels in the vector lanes beat the planes kernel there too, most on small grids.
_GEMM = [_AVX2 or qconv_best_mode() >= 1]
# the GEMM reading windows in place (conv_cl.gemm_taps): AVX-512 VNNI builds; a list, so
# tests can switch it off
_TAPS = [bool(qops_gemm_taps_available()) and not _AVX2]
_DWCL = bool(qconv_dwcl_available())
_DWCL2 = bool(qconv_dwcl2_available())


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_PLANES_TIER = {2: "AMX tiles", 1: ("AVX2, exact vpmaddubsw pair sums or int16 widening"
                                    if _AVX2 else "AVX-512 VNNI"), 0: "portable C"}
_PLANES_FILE = {2: "qops_conv_planes_amx.h",
                1: "qops_conv_planes_avx2.h" if _AVX2 else "qops_conv_planes_vnni.h",
                0: "qops_conv_planes_c.h"}

# every route of the family; conv_cl's are the names _plan_cl returns, conv's those of
# _plan_conv ("planes.<tier>": the planes kernel at the tier _MODE and the packing allow)
ROUTES = {r.name: r for r in [
    Route("conv_cl.dw_vnni", "qconv_dwcl_rows (AVX-512 VNNI, 64 channels a vector)",
          "qops_conv_nhwc.h"),
    Route("conv_cl.dw_avx2", "qconv_dwcl2_rows (AVX2, 32 channels a block, 16 under 32)",
          "qops_conv_dwcl_avx2.h"),
    Route("conv_cl.dw_planes", "tiled transposes around conv's planes kernel", "conv.pyx"),
    Route("conv_cl.amx_im2col", "qconv_nhwc_amx_im2col (AMX tiles on im2col rows)",
          "qops_conv_nhwc.h"),
    Route("conv_cl.amx_padded", "qconv_nhwc_amx (AMX tiles on a padded copy)",
          "qops_conv_nhwc.h"),
    Route("conv_cl.amx_flat", "qconv_nhwc_amx_flat (AMX tiles on a padded copy read as one "
          "run of pixels)", "qops_conv_nhwc.h"),
    Route("conv_cl.amx_pixels", "qconv_nhwc_amx_parts (AMX tiles on the pixels as one GEMM, "
          "read in place)", "qops_conv_nhwc.h"),
    Route("conv_cl.amx_pixels_strided", "the strided pixels gathered, then qconv_nhwc_amx_parts "
          "(AMX tiles on them as one GEMM)", "qops_conv_nhwc.h"),
    Route("conv_cl.gemm_1x1", "qops_gemm_mt on the pixels as rows", "qops_gemm.h"),
    Route("conv_cl.gemm_im2col", "qconv_i2c_gemm (im2col rows and the GEMM core, fused; "
          "threads split the rows, or the weight panels where rows are fewer than channels)",
          "qops_conv_im2col.h"),
    Route("conv_cl.gemm_taps", "qconv_taps_gemm (the GEMM core reading each window in place "
          "from a padded copy, or the input itself without padding: no im2col rows; under 4 "
          "channels a kernel row a tap)",
          "qops_conv_im2col.h"),
    Route("conv_cl.planes", "conv's planes kernel on the same memory", "conv.pyx"),
    Route("conv.taps_through_cl", "a channels-last copy, then conv_cl's gemm_taps with a kernel "
          "row a tap (RGB stems)", "qops_conv_im2col.h"),
    Route("conv.amx_through_cl", "a channels-last copy, then conv_cl's AMX tiles",
          "qops_conv_nhwc.h"),
    Route("conv.amx_padded_corder", "conv_cl's amx_padded or amx_flat, its padded copy "
          "filled by transposing each row's pixels out of the channel planes",
          "qops_conv_nhwc.h"),
    Route("conv.amx_pixels_corder", "qconv_nhwc_amx_parts, each row's pixels transposed out "
          "of the channel planes into its thread's stage (AMX tiles on them as one GEMM)",
          "qops_conv_nhwc.h"),
    Route("conv.dw_through_nhwc", "transposes around qconv_dwcl_rows (AVX-512 VNNI)",
          "qops_conv_nhwc.h"),
    Route("conv.dw_rows", "qconv_dwr_channel (one channel per work item)",
          "qops_conv_dwrows_avx2.h" if _AVX2 else "qops_conv_dwrows_vnni.h"),
    Route("conv.gemm_1x1", "qops_gemm_mt on single pixels as rows", "qops_gemm.h"),
    Route("conv.gemm_im2col", "a channels-last copy, then qconv_i2c_gemm",
          "qops_conv_im2col.h"),
    Route("conv.gemm_1x1_corder", "qops_gemm_mt_corder: each thread transposes the pixel "
          "rows its tiles read out of the channel planes, then multiplies them",
          "qops_gemm.h"),
    Route("conv.gemm_1x1_cl", "a channels-last copy, then qops_gemm_mt on its pixels as rows",
          "qops_gemm.h"),
    Route("conv.dw_through_cl", "a channels-last copy, then qconv_dwcl2_rows (AVX2)",
          "qops_conv_dwcl_avx2.h"),
    Route("conv.planes.amx", f"qconv_grouped/qconv_dw ({_PLANES_TIER[2]})", _PLANES_FILE[2]),
    Route("conv.planes.simd", f"qconv_grouped/qconv_dw ({_PLANES_TIER[1]})", _PLANES_FILE[1]),
    Route("conv.planes.portable", f"qconv_grouped/qconv_dw ({_PLANES_TIER[0]})",
          _PLANES_FILE[0]),
]}


def _built_here(name):
    if name in ("conv_cl.dw_vnni", "conv.dw_through_nhwc"):
        return _DWCL
    if name in ("conv_cl.dw_avx2", "conv.dw_through_cl"):
        return _DWCL2
    if name.startswith(("conv_cl.amx", "conv.amx")) or name == "conv.planes.amx":
        return _AMX
    if name in ("conv_cl.gemm_taps", "conv.taps_through_cl"):
        return _TAPS[0]
    if name == "conv.gemm_1x1_corder":
        return not _AVX2 and qconv_best_mode() >= 1
    if name.startswith("conv_cl.gemm") or name.startswith("conv.gemm"):
        return _AVX2 or qconv_best_mode() >= 1
    if name in ("conv.planes.simd", "conv.dw_rows"):
        return qconv_best_mode() >= 1
    if name == "conv.planes.portable":     # SIMD builds take it only when told (_set_mode)
        return qconv_best_mode() == 0
    return True


BUILT = frozenset(n for n in ROUTES if _built_here(n))     # the routes this build can take


def _traced(name):
    if _TRACE:
        _TRACE[0].append(ROUTES[name])


def plan(op, x, packed, stride=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), groups=1,
         bias_term=None, multiplier=None):
    """The Route the fast backend's conv op `op` ("conv" on x (N, C, D, H, W) or "conv_cl" on
    x (N, D, H, W, C)) takes with packed weights `packed` and these conv parameters."""
    x = np.asarray(x)
    o = packed["O"]
    if bias_term is None:
        bias_term = np.zeros(o, np.float32)
    if multiplier is None:
        multiplier = np.ones(o, np.float32)
    if op == "conv_cl":
        return ROUTES["conv_cl." + _plan_cl(np.ascontiguousarray(x), packed, groups, stride,
                                            padding, dilation, bias_term, multiplier)]
    if op == "conv":
        return ROUTES["conv." + _plan_conv(x, packed, stride, padding, dilation, groups,
                                           bias_term, multiplier)[0]]
    raise ValueError(f"plan: unknown conv op {op!r}")


def _out_sizes(sizes, kernel, stride, padding, dilation):
    """(OD, OH, OW) of a conv over `sizes` (D, H, W), all arguments 3-tuples."""
    # written out: a generator over zip costs more than a small conv's kernel
    return ((sizes[0] + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1,
            (sizes[1] + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1,
            (sizes[2] + 2 * padding[2] - dilation[2] * (kernel[2] - 1) - 1) // stride[2] + 1)


cdef bint _finite(a) except -1:
    """True when every value of float32 array `a` is finite: np.isfinite(a).all() in one
    pass without temporaries (the GEMM routes check their bias terms and multipliers on
    every call)."""
    a = np.ascontiguousarray(a, np.float32)
    cdef Py_ssize_t i, n = a.size
    if n == 0:
        return True
    cdef const float *p = <const float*>qops_ptr(a)
    for i in range(n):
        if not isfinite(p[i]):
            return False
    return True


def _amx_b_tiles(w):
    """int8 weights (O, taps, K) as the channels-last AMX kernel's B tiles: [oc block][tap]
    [64-byte chunk of K][16 quads][16 oc][4], zero-padded, 64-aligned."""
    o, ntaps, k = w.shape
    cp = (k + 63) // 64 * 64
    nob = (o + 15) // 16
    wp = np.zeros((nob * 16, ntaps, cp), np.int8)
    wp[:o, :, :k] = w
    return qops_aligned(np, wp.reshape(nob, 16, ntaps, cp // 64, 16, 4).transpose(0, 2, 3, 4, 1, 5))


def _nhwc_weights(packed):
    """The weights as B tiles of the padded-buffer kernel (taps, channels padded to 4), built
    on first use and kept."""
    wb = packed.get("wb")
    if wb is None:
        o, ntaps, q4 = packed["wv"].shape
        wb = packed["wb"] = _amx_b_tiles(packed["wv"].view(np.int8).reshape(o, ntaps, q4 * 4))
    return wb


# kernel-row runs where they need at most this share of the 64-byte-pixel chunks: their
# chunks start off cache lines for most pixels, which costs the tile loads, so a few chunks
# fewer do not pay (96, 144, 160 channels; the measurements are in CHANGELOG)
_RUNS_RATIO = [0.75]


def _nhwc_weights_runs(packed):
    """The weights as B tiles whose K is a whole kernel row: KW taps of C channels in (tap,
    channel) order, zero-padded to 64-byte chunks, built on first use and kept: the tiles
    then read a kernel row as one run of the bytes of neighbouring pixels in a padded copy
    that holds C bytes a pixel (no padding to 64 per pixel)."""
    wb = packed.get("wb_runs")
    if wb is None:
        o, ntaps, q4 = packed["wv"].shape
        kd, kh, kw = packed["kernel"]
        c = packed["Cg"]
        k = kw * c
        w = np.zeros((o, kd * kh, (k + 63) // 64 * 64), np.int8)
        w[:, :, :k] = packed["wv"].view(np.int8).reshape(o, kd * kh, kw, q4 * 4)[
            :, :, :, :c].reshape(o, kd * kh, k)
        wb = packed["wb_runs"] = _amx_b_tiles(w)
    return wb


def _im2col_weights(packed):
    """The weights as B tiles of the im2col kernel: one tap of K = taps x C bytes in (tap,
    channel) order, built on first use and kept."""
    wb = packed.get("wb_im2col")
    if wb is None:
        o, ntaps, q4 = packed["wv"].shape
        c = packed["Cg"]
        w = packed["wv"].view(np.int8).reshape(o, ntaps, q4 * 4)[:, :, :c].reshape(o, 1, ntaps * c)
        wb = packed["wb_im2col"] = _amx_b_tiles(w)
    return wb


cdef tuple _nhwc_tiles_args(qconv_nhwc_args *a, packed, wb, taps, Py_ssize_t od,
                            Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t nch):
    """Fill the geometry and weight parts of the AMX kernel's arguments (the prepared calls
    do it once per geometry); returns the arrays the pointers point into."""
    o = packed["O"]
    a.OD, a.OH, a.OW, a.O = od, oh, ow, o
    a.ntaps, a.nch, a.nob = len(taps), nch, (o + 15) // 16
    a.toff = <const Py_ssize_t*>qops_ptr(taps)
    a.wb = <const int8_t*>qops_ptr(wb)
    a.kzw = <const int32_t*>qops_ptr(packed["kzw"])
    return taps, wb, packed["kzw"]


cdef tuple _nhwc_out_args(qconv_nhwc_args *a, bias_term, multiplier, x_zero_point,
                          out_zero_point, relu, out):
    """Fill the per-call parts of the AMX kernel's arguments (requantization and output);
    returns the float arrays the pointers point into (keep them alive through the call)."""
    bt = np.ascontiguousarray(bias_term, np.float32)
    mu = np.ascontiguousarray(multiplier, np.float32)
    a.bterm = <const float*>qops_ptr(bt)
    a.mult = <const float*>qops_ptr(mu)
    a.xz = x_zero_point
    a.ozp = out_zero_point
    a.lo = out_zero_point if relu else 0
    a.out = <uint8_t*>qops_ptr(out, True)
    return bt, mu


def _amx_row_pixels(o):
    """Pixels a row of the 1x1 AMX GEMM of `o` output channels: whole 32-pixel tiles, a row's
    output about 16 KB (each pair of output blocks passes over the row's output again, which
    should stay in L1)."""
    return max(32, min(256, 16384 // o // 32 * 32))


# rows a thread below which the 1x1 AMX GEMM's threads split the output channels instead
_PIXEL_SPLIT_ROWS = 4


def _amx_pixel_split(rows, npair, nthreads):
    """Parts the output block pairs of the 1x1 AMX GEMM split into: one per thread where
    there are under _PIXEL_SPLIT_ROWS rows a thread (whole rows would leave threads idle or
    unevenly loaded; each thread then reads every row, but only its part of the weights)."""
    if nthreads > 1 and rows < _PIXEL_SPLIT_ROWS * nthreads and npair >= nthreads:
        return nthreads
    return 1


def _amx_pixels_layout(total, o, c):
    """(P, R, rem, nthreads, nsplit) of the 1x1 AMX GEMM over `total` pixels: R rows of P
    pixels and a last one of rem, run by nthreads threads whose items split the output block
    pairs into nsplit parts (_amx_pixel_split)."""
    P = _amx_row_pixels(o)
    # up to 64 pixels in one row where the weights are past 1 MB: each row streams all of
    # them, from L3 when they outgrow L2; smaller weights stay in L2, where a second row
    # costs less than staging the whole input as one
    if total <= 64 and o * c > (1 << 20):
        P = max(P, (total + 31) // 32 * 32)
    R = total // P
    rem = total - R * P
    if rem == 0:
        R, rem = R - 1, P
    # work: the products, or for few channels the bytes in and out (64 products' worth a
    # byte): 32->16 on 112x112 is 6 M products but streams 600 KB, which a second thread
    # halves
    nthreads = qops_threads_for(total * max(o * c, 64 * (c + o)), AMX_GRAIN)
    nsplit = _amx_pixel_split(R + 1, (o + 31) // 32, nthreads)
    return P, R, rem, min(nthreads, nsplit * (R + 1)), nsplit


cdef class _PixelsCall:
    """What _conv_cl_amx_pixels works out from the geometry alone, kept as _TilesCall."""
    cdef qconv_nhwc_args a, at
    cdef bint gather
    cdef Py_ssize_t xd, xh, xw, xc, sd, sh, sw, od, oh, ow, total, P, R, hw, sb, items
    cdef Py_ssize_t at_in, at_out
    cdef int nthreads, nsplit
    cdef object out_shape, gather_shape, keep


cdef _PixelsCall _pixels_call(shape, packed, stride, bint corder):
    """The _PixelsCall of _conv_cl_amx_pixels for input `shape` (see there)."""
    cdef _PixelsCall t = _PixelsCall()
    if corder:
        n, c, d, h, wdt = shape
    else:
        n, d, h, wdt, c = shape
    t.sd, t.sh, t.sw = stride[0], stride[1], stride[2]
    t.gather = (t.sd, t.sh, t.sw) != (1, 1, 1)
    t.xd, t.xh, t.xw, t.xc = d, h, wdt, c
    t.od, t.oh, t.ow = (d - 1) // t.sd + 1, (h - 1) // t.sh + 1, (wdt - 1) // t.sw + 1
    o = packed["O"]
    t.total = n * t.od * t.oh * t.ow
    P, R, rem, t.nthreads, t.nsplit = _amx_pixels_layout(t.total, o, c)
    t.P, t.R = P, R
    cp = (c + 63) // 64 * 64
    wb = _nhwc_weights(packed)
    taps = packed.get(("taps", 1, 1, 0, (1, 1, 1), None))
    if taps is None:
        taps = packed[("taps", 1, 1, 0, (1, 1, 1), None)] = np.zeros(1, np.intp)
    t.out_shape = (n, t.od, t.oh, t.ow, o)
    t.gather_shape = (n, t.od, t.oh, t.ow, c)
    t.a.Dp, t.a.Hp, t.a.Wp, t.a.Cp = 1, R, P, c
    t.a.sd, t.a.sh, t.a.sw = 1, 1, 1
    t.keep = _nhwc_tiles_args(&t.a, packed, wb, taps, 1, R, P, cp // 64)
    t.at = t.a
    t.at.Hp, t.at.Wp, t.at.OH, t.at.OW = 1, rem, 1, rem
    t.at_in, t.at_out = R * P * c, R * P * o
    t.items = t.nsplit * (R + 1)
    t.hw = d * h * wdt
    t.sb = (max(P, rem) + 31) // 32 * 32 * cp
    return t


def _conv_cl_amx_pixels(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                        stride=(1, 1, 1), corder=False):
    """1x1 conv without padding of contiguous channels-last x on AMX: the N D H W output
    pixels are one GEMM, run as rows of _amx_row_pixels(O) read in place (no padding pixels
    in the tiles, no copy; a pixel's last 64-byte chunk runs on into the next pixel, whose
    bytes meet zero weights), the last row, whose tiles would read past the input's end,
    from each thread's stage (an aligned copy with slack). Where the rows are too few for
    the threads, each thread runs a part of the output channels over every row
    (_amx_pixel_split). At a stride the pixels it reads are first gathered into a dense
    copy, each thread the pixels of its own rows (all of them first where threads split
    the channels). With corder, x is C-order (N, C, D, H, W) (stride 1): each thread
    transposes its rows' pixels out of the channel planes into its stage (no channels-last
    copy of the whole input; where the threads split the channels, each transposes every
    row for itself, which costs less than one copy the other core wrote half of)."""
    calls = _calls(packed)
    key = ("pixels", x.shape, tuple(stride), corder, qops_omp_threads())
    cdef _PixelsCall t = calls.get(key)
    if t is None:
        t = calls[key] = _pixels_call(x.shape, packed, stride, corder)
    cdef qconv_nhwc_args a = t.a
    cdef qconv_nhwc_args at = t.at
    cdef bint gather = t.gather
    out = qops_empty(np, t.out_shape, np.uint8)
    xs = qops_empty(np, t.gather_shape, np.uint8) if gather else x
    cdef const uint8_t *xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t *gp = <uint8_t*>qops_ptr(xs, True) if gather else NULL
    keep = _nhwc_out_args(&a, bias_term, multiplier, x_zero_point, out_zero_point, relu, out)
    a.xp = <const uint8_t*>qops_ptr(xs)
    # the last row's arguments: the same, but for its place and size (at's geometry)
    at.bterm, at.mult, at.xz, at.ozp, at.lo = a.bterm, a.mult, a.xz, a.ozp, a.lo
    at.xp, at.out = a.xp + t.at_in, a.out + t.at_out
    cdef Py_ssize_t i, i0, i1, items = t.items, R = t.R, P = t.P, total = t.total
    cdef Py_ssize_t xd = t.xd, xh = t.xh, xw = t.xw, xc = t.xc, sd = t.sd, sh = t.sh, sw = t.sw
    cdef Py_ssize_t od = t.od, oh = t.oh, ow = t.ow, hw = t.hw, sb = t.sb
    cdef int nthreads = t.nthreads, nsplit = t.nsplit
    cdef const uint8_t *xco = xp if corder else NULL
    stage = np.empty(nthreads * sb + 64, np.uint8)
    cdef uint8_t *sp = <uint8_t*>qops_ptr(stage, True)
    sp = sp + (-<size_t>sp) % 64
    # every row staged where the pixels of an input that starts off a cache line would be
    # read from there by 4+ block pairs (fewer: the copy costs more than the split reads),
    # unless threads split the channels (each would copy every row)
    cdef int stage_rows = (xc % 64 == 0 and (<size_t>a.xp) % 64 != 0 and a.O > 96
                           and nsplit == 1)
    with nogil:
        if gather and nsplit > 1:
            qconv_gather_pixels(xp, xd, xh, xw, xc, sd, sh, sw, od, oh, ow, gp, 0, total)
        for i in prange(nthreads, schedule="static", num_threads=nthreads):
            i0 = items * i // nthreads
            i1 = items * (i + 1) // nthreads
            if gather and nsplit == 1:
                # this thread's rows' pixels (items are rows here): the core that copies
                # them reads them next
                qconv_gather_pixels(xp, xd, xh, xw, xc, sd, sh, sw, od, oh, ow, gp, i0 * P,
                                    min(i1 * P, total))
            qconv_nhwc_amx_parts(&a, &at, R, nsplit, sp + i * sb, stage_rows, xco, hw,
                                 i0, i1)
    return out


def _conv_cl_im2col(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                    stride, padding, dilation):
    """Ungrouped conv of contiguous channels-last x with few channels (AMX): each output row's
    windows gathered into an im2col row, then a 1x1 conv over it on the tiles."""
    cdef qconv_im2col_args f
    cdef qconv_nhwc_args a
    n, d, h, wdt, c = x.shape
    kd, kh, kw = packed["kernel"]
    o = packed["O"]
    (pd, ph, pw), (sd, sh, sw), (dd, dh, dwl) = padding, stride, dilation
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    kp = (kd * kh * kw * c + 63) // 64 * 64
    owp = (ow + 31) // 32 * 32                   # the tiles read whole 32-pixel groups
    out = qops_empty(np, (n, od, oh, ow, o), np.uint8)
    taps = np.zeros(1, np.intp)
    f.x = <const uint8_t*>qops_ptr(x)
    f.N, f.D, f.H, f.W, f.C = n, d, h, wdt, c
    f.KD, f.KH, f.KW = kd, kh, kw
    f.sd, f.sh, f.sw, f.pd, f.ph, f.pw = sd, sh, sw, pd, ph, pw
    f.dd, f.dh, f.dw = dd, dh, dwl
    f.xz = x_zero_point
    # a 1x1 conv over the im2col rows
    a.xp = NULL
    a.Dp, a.Hp, a.Wp, a.Cp = od, oh, owp, kp
    a.sd, a.sh, a.sw = 1, 1, 1
    keep = (_nhwc_tiles_args(&a, packed, _im2col_weights(packed), taps, od, oh, ow, kp // 64)
            + _nhwc_out_args(&a, bias_term, multiplier, x_zero_point, out_zero_point, relu, out))
    cdef Py_ssize_t rows = n * od * oh, rowb = owp * kp, i
    cdef int nthreads = qops_threads_for(rows * ow * o * kp, AMX_GRAIN)
    # one im2col row per thread, zeroed once: the bytes past the windows stay 0
    scratch = np.zeros(nthreads * rowb + 64, np.uint8)
    cdef uint8_t *sp = <uint8_t*>qops_ptr(scratch, True)
    sp = sp + (-<size_t>sp) % 64
    with nogil:
        for i in prange(nthreads, schedule="static", num_threads=nthreads):
            qconv_nhwc_amx_im2col(&a, &f, sp + i * rowb, rows * i // nthreads,
                                  rows * (i + 1) // nthreads)
    return out


def _dw_quads(packed):
    """The depthwise weights as qconv_dwcl_rows takes them, built on first use and kept:
    [64-lane block][kernel row][tap quad q][4][64], byte 16L + 4i + j of vector k the weight
    of lane 16L + 4k + i at tap kw = 4q + j (0 past the kernel), 64-aligned. Fewer channels
    than 64 that divide 64 repeat across the block (lane l: channel l % C)."""
    wq = packed.get("wq")
    if wq is not None:
        return wq
    o = packed["O"]
    kd, kh, kw = packed["kernel"]
    nq = (kw + 3) // 4
    cb = (o + 63) // 64
    lanes = np.arange(cb * 64)
    if o < 64 and 64 % o == 0:
        lanes %= o
    wl = np.zeros((cb * 64, kd * kh, nq * 4), np.int8)          # [lane][kernel row][tap]
    real = lanes < o
    wl[real, :, :kw] = packed["wv"].view(np.int8)[lanes[real], :kd * kh * kw].reshape(-1, kd * kh, kw)
    b = np.arange(64)
    L, i, j = b // 16, (b % 16) // 4, b % 4
    k = np.arange(4)[:, None]
    lane = 16 * L + 4 * k + i                                   # [k][byte]
    wl = wl.reshape(cb, 64, kd * kh, nq, 4)                     # [block][lane][row][q][j]
    wq = wl[:, lane, :, :, j]            # (advanced indices first) [k][byte][block][row][q]
    wq = packed["wq"] = qops_aligned(np, wq.transpose(2, 3, 4, 0, 1))
    return wq


cdef class _DwCall:
    """What _conv_dw_cl works out from the geometry alone, kept as _TilesCall."""
    cdef qconv_dwcl_args a
    cdef Py_ssize_t rows, ncst
    cdef int nthreads
    cdef object out_shape, keep


cdef _DwCall _dw_call(shape, packed, stride, padding, dilation):
    """The _DwCall of _conv_dw_cl for input `shape` (see there)."""
    cdef _DwCall t = _DwCall()
    n, d, h, wdt, c = shape
    kd, kh, kw = packed["kernel"]
    (pd, ph, pw), (sd, sh, sw), (dd, dh, dwl) = padding, stride, dilation
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    wq = _dw_quads(packed)
    t.ncst = (c + 63) // 64 * 64 * 3
    t.out_shape = (n, od, oh, ow, c)
    t.a.N, t.a.D, t.a.H, t.a.W, t.a.C = n, d, h, wdt, c
    t.a.OD, t.a.OH, t.a.OW = od, oh, ow
    t.a.KD, t.a.KH, t.a.KW = kd, kh, kw
    t.a.sd, t.a.sh, t.a.sw, t.a.pd, t.a.ph, t.a.pw = sd, sh, sw, pd, ph, pw
    t.a.dd, t.a.dh, t.a.dw = dd, dh, dwl
    t.a.wq = <const int8_t*>qops_ptr(wq)
    t.a.kzw = <const int32_t*>qops_ptr(packed["kzw"])
    t.keep = (wq, packed["kzw"])
    t.rows = n * od * oh
    # a quarter of GRAIN: a depthwise multiply-add costs this kernel about four times what
    # one costs the dense kernels
    t.nthreads = qops_threads_for(t.rows * ow * c * kd * kh * kw, GRAIN // 4)
    return t


def _conv_dw_cl(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                stride, padding, dilation):
    """Depthwise conv of contiguous channels-last x (N, D, H, W, C) by qconv_dwcl_rows (the
    geometry's work a _DwCall, kept per input shape and threads)."""
    calls = _calls(packed)
    key = ("dw", x.shape, tuple(stride), tuple(padding), tuple(dilation),
           qops_omp_threads())
    cdef _DwCall t = calls.get(key)
    if t is None:
        t = calls[key] = _dw_call(x.shape, packed, stride, padding, dilation)
    cdef qconv_dwcl_args a = t.a
    cst = np.empty(t.ncst, np.float32)
    out = qops_empty(np, t.out_shape, np.uint8)
    bt = np.ascontiguousarray(bias_term, np.float32)
    mu = np.ascontiguousarray(multiplier, np.float32)
    a.x = <const uint8_t*>qops_ptr(x)
    a.bterm = <const float*>qops_ptr(bt)
    a.mult = <const float*>qops_ptr(mu)
    a.xz = x_zero_point
    a.ozp = out_zero_point
    a.lo = out_zero_point if relu else 0
    a.out = <uint8_t*>qops_ptr(out, True)
    cdef float *cp = <float*>qops_ptr(cst, True)
    cdef Py_ssize_t rows = t.rows, i
    cdef int nthreads = t.nthreads
    with nogil:
        qconv_dwcl_consts(&a, cp)
        for i in prange(nthreads, schedule="static", num_threads=nthreads):
            qconv_dwcl_rows(&a, cp, rows * i // nthreads, rows * (i + 1) // nthreads)
    return out


def _dw_pairs(packed):
    """The depthwise weights as qconv_dwcl2_rows takes them, built on first use and kept:
    [B-channel block][tap pair][B / 8][8] int32 (B = qconv_dwcl2_block(C)), each the int16
    pair (w[t0] - wz, w[t1] - wz) of the channel that dword of accumulator k holds, 0 past
    the last tap."""
    wd = packed["wd"]
    c, ntaps = wd.shape
    bw = qconv_dwcl2_block(c)
    key = "wp2" if bw == 32 else "wp2_16"
    wp = packed.get(key)
    if wp is None:
        npairs, nb = (ntaps + 1) // 2, (c + bw - 1) // bw
        wd2 = np.zeros((c, 2 * npairs), np.int16)
        wd2[:, :ntaps] = wd
        k, j = np.meshgrid(np.arange(bw // 8), np.arange(8), indexing="ij")
        # the last block ends at C (qconv_dwcl2_c0), the lanes as qconv_dwcl2_lane
        ch = (np.minimum(bw * np.arange(nb), c - bw)[:, None, None]
              + bw // 2 * (j // 4) + 4 * k + j % 4)
        pairs = wd2.reshape(c, npairs, 2)[ch]            # (block, k, j, pair, 2)
        wp = packed[key] = qops_aligned(np, pairs.transpose(0, 3, 1, 2, 4)).view(np.int32)
    return wp


def _conv_dw_cl_avx2(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                     stride, padding, dilation):
    """Depthwise conv of contiguous channels-last x (N, D, H, W, C), C >= 16, by
    qconv_dwcl2_rows (AVX2)."""
    cdef qconv_dwcl2_args a
    n, d, h, wdt, c = x.shape
    kd, kh, kw = packed["kernel"]
    (pd, ph, pw), (sd, sh, sw), (dd, dh, dwl) = padding, stride, dilation
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    wp = _dw_pairs(packed)
    bw = qconv_dwcl2_block(c)
    cst = np.empty((c + bw - 1) // bw * 3 * bw, np.int32)
    zrow = np.full(wdt * c, x_zero_point, np.uint8)
    out = qops_empty(np, (n, od, oh, ow, c), np.uint8)
    bt = np.ascontiguousarray(bias_term, np.float32)
    mu = np.ascontiguousarray(multiplier, np.float32)
    a.x = <const uint8_t*>qops_ptr(x)
    a.N, a.D, a.H, a.W, a.C = n, d, h, wdt, c
    a.OD, a.OH, a.OW = od, oh, ow
    a.KD, a.KH, a.KW = kd, kh, kw
    # a stride past the padded width leaves one output column: clamped, the pointers the
    # kernel steps past its last column stay near the row
    a.sd, a.sh, a.sw, a.pd, a.ph, a.pw = sd, sh, min(sw, wdt + 2 * pw), pd, ph, pw
    a.dd, a.dh, a.dw = dd, dh, dwl
    a.B = bw
    a.wp = <const int32_t*>qops_ptr(wp)
    a.cst = <const int32_t*>qops_ptr(cst)
    a.zrow = <const uint8_t*>qops_ptr(zrow)
    a.ozp = out_zero_point
    a.lo = out_zero_point if relu else 0
    a.out = <uint8_t*>qops_ptr(out, True)
    cdef const int32_t *ws = <const int32_t*>qops_ptr(packed["wdsum"])
    cdef const float *btp = <const float*>qops_ptr(bt)
    cdef const float *mup = <const float*>qops_ptr(mu)
    cdef int32_t *cp = <int32_t*>qops_ptr(cst, True)
    cdef int32_t xz = x_zero_point
    cdef Py_ssize_t rows = n * od * oh, i
    cdef int nthreads = qops_threads_for(rows * ow * c * kd * kh * kw, GRAIN // 4)
    with nogil:
        qconv_dwcl2_consts(&a, ws, btp, mup, xz, cp)
        for i in prange(nthreads, schedule="static", num_threads=nthreads):
            qconv_dwcl2_rows(&a, rows * i // nthreads, rows * (i + 1) // nthreads)
    return out


# the GEMM core's exactness bound on K (qops_gemm.h: 33025 * 255 * 255 < 2**31)
_GEMM_MAX_K = 33025
# 1x1 convs from this many channels run on the GEMM core: with its depth padded to 4 values
# (not 16) and its uint8 store fused into the kernel, it beats the planes kernel, which has no
# depth to vectorize over, from one channel on (1 thread, Zen 3)
_GEMM_MIN_C = 1
_GEMM_GRAIN = 262144      # multiply-adds per thread (as the linear family's)
# bytes of im2col rows a thread fills and multiplies at once (kept in L2)
_IM2COL_BLOCK_BYTES = 256 << 10
# the im2col GEMM splits weight panels over threads where rows <= this times output channels
_I2C_PANELS_ROWS = [1.0]
# under 32 channels, output pixels per image up to which im2col rows and the GEMM beat the
# planes kernel (from 32 channels they do on every grid; 1 thread, Zen 3)
_IM2COL_MAX_PIXELS = 1600
# few-channel convs (NCHW input, C <= 4) from this depth on run as im2col rows and the GEMM
# (1 thread, Zen 3: 7x7 on RGB gains, 3x3 on RGB loses; from 8 channels the planes win)
_FEW_C_MIN_K = 64
# ... and channels-last ones from this depth (the 3x3 RGB stems too): the planes route would
# first copy such an input to C order, which costs more than the im2col rows (measured on
# 3x3 convs of 2-4 channels, 1 and 2 threads, Zen 3)
_FEW_C_MIN_K_CL = 16
# C-order convs with this many channels and more than one tap (K >= 128) also run on
# im2col rows of a channels-last copy: the copy costs less than the planes kernel loses
# (1 thread, Zen 3: 3x3 at 7x7 to 56x56 grids, 16 to 512 channels). The AVX-512 VNNI
# planes, four channels a dword, stay ahead of the copy below 32 channels (Intel Xeon).
_C_ORDER_GEMM_MIN_C = 16 if _AVX2 else 32
# ... and (AVX-512) from 16 channels on output planes of up to this many pixels: the copy and
# im2col rows beat the planes there since the transposes lost their byte loop; on larger
# planes the planes kernel's long rows keep it ahead (CHANGELOG)
_C_ORDER_GEMM_MAX_PIXELS = 3136
# C-order depthwise convs (16+ channels, AVX2) on planes up to this many pixels, or strided,
# run channels last through a copy: per channel the planes kernel's fixed costs outweigh its
# work on small planes
_DW_CL_MAX_PIXELS = 1024
# ... and with symmetric weights, AVX-512 VNNI, from this many channels (dw_through_nhwc):
# from 16 channels the two transposes cost less than the planes or row kernels lose on every
# plane measured; at 8 the largest strided planes lost (CHANGELOG)
_DW_NHWC_MIN_C = 16
# channels-last depthwise convs of 17-19 channels (two 16-blocks, nearly half their lanes
# repeated) at stride 1 along W with KW <= 4 on planes past this many pixels: the planes'
# row kernel through dw_planes beats qconv_dwcl2_rows (1 thread, Zen 3)
_DW16_MAX_PIXELS = 6400


def _gemm_weights(packed, Py_ssize_t kp=0, bint rows=False):
    """The weights as the GEMM core takes them: (O, taps x C) in (tap, channel) order (with
    `rows`, each kernel row's KW x C weights padded with zeros to a multiple of 4: the row
    taps of _conv_cl_taps_gemm), with zero columns up to depth kp when kp is given, packed
    by qops_gemm_pack; the row sums; the zero points (None when all 0). Built on first use
    and kept."""
    key = ("gemm_rows" if rows else "gemm", kp)
    g = packed.get(key)
    if g is None:
        o, ntaps, q4 = packed["wv"].shape
        k = ntaps * packed["Cg"]
        w = np.ascontiguousarray(
            packed["wv"].view(np.int8).reshape(o, ntaps, q4 * 4)[:, :, :packed["Cg"]]
        ).reshape(o, k)
        if rows:
            kw = packed["kernel"][2] * packed["Cg"]
            wr = np.zeros((o, k // kw, (kw + 3) // 4 * 4), np.int8)
            wr[:, :, :kw] = w.reshape(o, k // kw, kw)
            w = wr.reshape(o, -1)
            k = w.shape[1]
        if kp > k:
            w = np.concatenate([w, np.zeros((o, kp - k), np.int8)], axis=1)
            k = kp
        data = qops_aligned(np, np.empty(qops_gemm_packed_size(o, k), np.int8))
        wsum = np.zeros(o, np.int32)
        if o > 0 and k > 0:
            qops_gemm_pack(<const int8_t*>qops_ptr(w), k, o, k, <int8_t*>qops_ptr(data, True),
                           <int32_t*>qops_ptr(wsum, True))
        wz = packed["wz"]
        g = packed[key] = (data, wsum, wz if wz.any() else None)
    return g


cdef tuple _gemm_args(qops_gemm_b *b, qops_gemm_out *o, packed, Py_ssize_t k, bias_term,
                      multiplier, out_zero_point, relu, out, bint rows=False):
    """Fill the GEMM core's weight and output arguments for rows of depth k (the weights'
    depth, or padded past it: im2col rows of qops_gemm_kpad; `rows`: row taps, as
    _gemm_weights) writing into `out`; returns the arrays they point into, to be kept alive
    while the GEMM runs."""
    return (_gemm_b_args(b, packed, k, rows)
            + _gemm_out_args(o, packed, bias_term, multiplier, out_zero_point, relu, out))


cdef tuple _gemm_b_args(qops_gemm_b *b, packed, Py_ssize_t k, bint rows):
    """The weight half of _gemm_args: (data, wsum, wzp), the arrays b points into."""
    kd, kh, kw = packed["kernel"]
    kw_ = (kw * packed["Cg"] + 3) // 4 * 4 if rows else kw * packed["Cg"]
    data, wsum, wzp = _gemm_weights(packed, k if k > kd * kh * kw_ else 0, rows)
    b.data = <const int8_t*>qops_ptr(data)
    b.wsum = <const int32_t*>qops_ptr(wsum)
    b.wzp = NULL
    if wzp is not None:
        b.wzp = <const int32_t*>qops_ptr(wzp)
    b.N, b.K = packed["O"], k
    return data, wsum, wzp


cdef tuple _gemm_out_args(qops_gemm_out *o, packed, bias_term, multiplier, out_zero_point,
                          relu, out):
    """The output half of _gemm_args (uint8 into `out`): (bias terms, multipliers), the
    arrays o points into."""
    bt = np.ascontiguousarray(bias_term, np.float32)
    mu = np.ascontiguousarray(multiplier, np.float32)
    o.kind = QOPS_GEMM_U8
    o.bias = <const float*>qops_ptr(bt)
    o.mult = <const float*>qops_ptr(mu)
    o.out_zp = out_zero_point
    o.relu = 1 if relu else 0
    o.out = <void*>qops_ptr(out, True)
    o.ldc = packed["O"]
    return bt, mu


def _conv_cl_gemm(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                  osize=None, out=None):
    """Ungrouped conv of channels-last data by the GEMM core (qops_gemm.h, the linear
    family's): x (M, K) rows, one per output pixel (a 1x1 conv's input as it lies, or im2col
    rows), times the (O, K) weight; the output (N, OD, OH, OW, O), osize = (N, OD, OH, OW)
    (x's own leading sizes when None), written into `out` when given."""
    cdef qops_gemm_b b
    cdef qops_gemm_out o
    cdef Py_ssize_t k = x.shape[x.ndim - 1]
    oc = packed["O"]
    if out is None:
        out = qops_empty(np, tuple(osize or x.shape[:4]) + (oc,), np.uint8)
    if out.size == 0:
        return out
    keep = _gemm_args(&b, &o, packed, k, bias_term, multiplier, out_zero_point, relu, out)
    cdef Py_ssize_t m = out.size // max(oc, 1)
    cdef int nt = qops_threads_for(m * oc * k, _GEMM_GRAIN)
    cdef const uint8_t *xp = <const uint8_t*>qops_ptr(x)
    cdef int32_t xz = x_zero_point
    with nogil:
        qops_gemm_mt(xp, k, m, xz, &b, &o, nt)
    return out


def _conv_gemm_1x1_corder(x, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                          relu):
    """Ungrouped 1x1 conv at stride 1 of C-contiguous x (N, C, D, H, W) by the GEMM core,
    its pixels the rows: each thread transposes the rows its tiles read out of the channel
    planes into its own buffer (qops_gemm_mt_corder); the output (N, D, H, W, O)."""
    cdef qops_gemm_b b
    cdef qops_gemm_out o
    n, c, d, h, wdt = x.shape
    oc = packed["O"]
    out = qops_empty(np, (n, d, h, wdt, oc), np.uint8)
    if out.size == 0:
        return out
    keep = _gemm_args(&b, &o, packed, c, bias_term, multiplier, out_zero_point, relu, out)
    cdef Py_ssize_t m = n * d * h * wdt, k = c, hw = d * h * wdt
    cdef int nt = qops_threads_for(m * oc * k, _GEMM_GRAIN)
    bufs = qops_empty(np, (nt * m * k,), np.uint8)
    cdef const uint8_t *xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t *bp = <uint8_t*>qops_ptr(bufs, True)
    cdef int32_t xz = x_zero_point
    with nogil:
        qops_gemm_mt_corder(xp, hw, k, m, xz, &b, &o, nt, bp)
    return out


def _conv_cl_im2col_gemm(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                         stride, padding, dilation):
    """Ungrouped conv of contiguous channels-last x (N, D, H, W, C): each output pixel's
    window gathered into an im2col row, the rows multiplied by the GEMM core, fused
    (qconv_i2c_gemm): each thread fills a block of rows that stays in cache
    (_IM2COL_BLOCK_BYTES) and multiplies it at once."""
    cdef qconv_i2c_args f
    cdef qops_gemm_b b
    cdef qops_gemm_out o
    n, d, h, wdt, c = x.shape
    kd, kh, kw = packed["kernel"]
    (pd, ph, pw), (sd, sh, sw), (dd, dh, dwl) = padding, stride, dilation
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    cdef Py_ssize_t m = n * od * oh * ow, k = kd * kh * kw * c, i
    # rows as long as the GEMM's padded depth: it reads them in place
    cdef Py_ssize_t kp = qops_gemm_kpad(k)
    out = qops_empty(np, (n, od, oh, ow, packed["O"]), np.uint8)
    if m == 0:
        return out
    keep = _gemm_args(&b, &o, packed, kp, bias_term, multiplier, out_zero_point, relu, out)
    cdef int nt
    cdef Py_ssize_t npan
    cdef bint by_panels
    nt, npan, by_panels = _gemm_split(m, packed["O"], k)
    # rows per block: a multiple of the micro-tile's 6, within the block bytes, and no more
    # than a thread's share
    cdef Py_ssize_t block = max(6, _IM2COL_BLOCK_BYTES // kp // 6 * 6)
    block = min(block, m if by_panels else (m + nt - 1) // nt)
    cdef Py_ssize_t per = block * kp + qops_gemm_rows_scratch(block, kp)
    per = (per + 63) // 64 * 64
    buf = qops_empty(np, (nt * per,), np.uint8)
    cdef uint8_t *bufp = <uint8_t*>qops_ptr(buf, True)
    # the GEMM's pair sums need A's largest value: the input's, or the zero point of padding
    cdef uint8_t xmax = max(int(x.max()), x_zero_point)
    f.x = <const uint8_t*>qops_ptr(x)
    f.N, f.D, f.H, f.W, f.C = n, d, h, wdt, c
    f.OD, f.OH, f.OW = od, oh, ow
    f.KD, f.KH, f.KW = kd, kh, kw
    f.sd, f.sh, f.sw, f.pd, f.ph, f.pw = sd, sh, sw, pd, ph, pw
    f.dd, f.dh, f.dw = dd, dh, dwl
    f.xz = x_zero_point
    f.rows = NULL
    f.ldr = kp
    f.row0 = 0
    with nogil:
        for i in prange(nt, schedule="static", num_threads=nt):
            if by_panels:
                qconv_i2c_gemm(&f, 0, m, block, xmax, &b, &o, bufp + i * per,
                               npan * i // nt, npan * (i + 1) // nt)
            else:
                qconv_i2c_gemm(&f, m * i // nt, m * (i + 1) // nt, block, xmax, &b, &o,
                               bufp + i * per, 0, npan)
    return out


def _gemm_split(Py_ssize_t m, Py_ssize_t o, Py_ssize_t k):
    """(threads, weight panels, whether threads split the panels) of a conv's GEMM of m rows
    (pixels) of depth k by o output channels. Threads split the rows, each multiplying them
    by every weight panel; with no more rows than output channels (the late stages of
    ResNets: 49 pixels, 512 channels) each thread's reading of all the weights costs more
    than having all the rows, and threads split the panels instead."""
    nt = qops_threads_for(m * o * k, _GEMM_GRAIN)
    npan = qops_gemm_npanels(o)
    return nt, npan, nt > 1 and npan >= nt and m <= _I2C_PANELS_ROWS[0] * o


cdef class _TapsCall:
    """What _conv_cl_taps_gemm works out from the geometry alone, kept as _TilesCall."""
    cdef qconv_taps_args t
    cdef qconv_nhwc_fill_args f
    cdef qops_gemm_b b
    cdef bint padded, by_panels
    cdef Py_ssize_t m, rows, xpad_len, npan
    cdef int nt, fill_threads
    cdef object out_shape, keep


cdef _TapsCall _taps_call(shape, packed, stride, padding, dilation):
    """The _TapsCall of _conv_cl_taps_gemm for input `shape` (see there)."""
    cdef _TapsCall g = _TapsCall()
    n, d, h, wdt, c = shape
    kd, kh, kw = packed["kernel"]
    (pd, ph, pw), (sd, sh, sw), (dd, dh, dwl) = padding, stride, dilation
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    row_taps = c < 4
    kt = (kw * c + 3) // 4 * 4 if row_taps else c
    g.m = n * od * oh * ow
    k = kd * kh * (kt if row_taps else kw * c)
    g.out_shape = (n, od, oh, ow, packed["O"])
    data, wsum, wzp = _gemm_b_args(&g.b, packed, qops_gemm_kpad(k), row_taps)
    if g.b.wzp != NULL:  # the windows' row sums (the zero-point term) are never taken here
        raise ValueError("conv_cl.gemm_taps takes symmetric weights only")
    dp, hp, wp_ = d + 2 * pd, h + 2 * ph, wdt + 2 * pw
    g.padded = bool(pd or ph or pw) or row_taps
    g.rows = n * dp * hp
    # (slack: a row tap reads up to 3 bytes past the last pixel's kernel row)
    g.xpad_len = g.rows * wp_ * c + 64
    g.f.N, g.f.D, g.f.H, g.f.W, g.f.C = n, d, h, wdt, c
    g.f.pd, g.f.ph, g.f.pw = pd, ph, pw
    g.f.Dp, g.f.Hp, g.f.Wp, g.f.Cp = dp, hp, wp_, c
    g.f.corder = 0
    key = ("taps_cl", hp, wp_, c, tuple(dilation))
    toff = packed.get(key)
    if toff is None:
        toff = packed[key] = np.array(
            [((i * dd * hp + j * dh) * wp_ + q * dwl) * c
             for i in range(kd) for j in range(kh) for q in range(1 if row_taps else kw)],
            dtype=np.intp)
    g.t.Dp, g.t.Hp, g.t.Wp, g.t.C = dp, hp, wp_, c
    g.t.OD, g.t.OH, g.t.OW = od, oh, ow
    g.t.sd, g.t.sh, g.t.sw = sd, sh, sw
    g.t.toff = <const Py_ssize_t*>qops_ptr(toff)
    g.t.ntaps = len(toff)
    g.t.Kt = kt
    g.keep = (data, wsum, toff)
    g.nt, g.npan, g.by_panels = _gemm_split(g.m, packed["O"], k)
    g.fill_threads = qops_threads_for(g.rows * wp_ * c, 1 << 16) if g.padded else 0
    return g


def _conv_cl_taps_gemm(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                       stride, padding, dilation):
    """Ungrouped conv of contiguous channels-last x (N, D, H, W, C), symmetric weights, C a
    multiple of 4: the GEMM core reads each output pixel's window tap by tap in place
    (qconv_taps_gemm), from a padded copy of the input, or the input itself without padding;
    no im2col rows are written. Under 4 channels (an RGB stem, unit dilation along W) a tap
    is a whole kernel row, its KW x C bytes one run of the input read as a multiple of 4
    (the bytes past it meet zero weights), always from a copy with slack ("row taps").
    Threads split the pixels, or the weight panels where pixels are no more than output
    channels (as _conv_cl_im2col_gemm). The geometry's work is a _TapsCall, kept per input
    shape and threads."""
    calls = _calls(packed)
    key = ("taps", x.shape, tuple(stride), tuple(padding), tuple(dilation),
           qops_omp_threads())
    cdef _TapsCall g = calls.get(key)
    if g is None:
        g = calls[key] = _taps_call(x.shape, packed, stride, padding, dilation)
    cdef qconv_taps_args t = g.t
    cdef qconv_nhwc_fill_args f = g.f
    cdef qops_gemm_out o
    out = qops_empty(np, g.out_shape, np.uint8)
    if g.m == 0:
        return out
    keep = _gemm_out_args(&o, packed, bias_term, multiplier, out_zero_point, relu, out)
    if g.padded:
        xpad = qops_empty(np, (g.xpad_len,), np.uint8)
        f.x = <const uint8_t*>qops_ptr(x)
        f.xz = x_zero_point
        f.xp = <uint8_t*>qops_ptr(xpad, True)
        t.xp = f.xp
    else:
        t.xp = <const uint8_t*>qops_ptr(x)
    t.xz = x_zero_point
    cdef Py_ssize_t i, m = g.m, rows = g.rows, npan = g.npan
    cdef int nt = g.nt, fill_threads = g.fill_threads
    cdef bint by_panels = g.by_panels
    with nogil:
        for i in prange(fill_threads, schedule="static", num_threads=fill_threads):
            qconv_nhwc_fill(&f, rows * i // fill_threads, rows * (i + 1) // fill_threads)
        for i in prange(nt, schedule="static", num_threads=nt):
            if by_panels:
                qconv_taps_gemm(&t, 0, m, &g.b, &o, npan * i // nt, npan * (i + 1) // nt)
            else:
                qconv_taps_gemm(&t, m * i // nt, m * (i + 1) // nt, &g.b, &o, 0, npan)
    return out


def _transposed(x, shape):
    """x (C-contiguous bytes, (N, R, K) in memory) as a new (N, K, R) block shaped `shape`,
    by the tiled byte transpose (numpy's strided copy takes about 2 ns a byte)."""
    out = qops_empty(np, shape, np.uint8)
    cdef Py_ssize_t nb = x.shape[0], rows = x.shape[1], cols = x.size // max(x.shape[0], 1)
    cols //= max(rows, 1)
    if x.size == 0:
        return out
    cdef int th = qops_threads_for(x.size, 1 << 17)
    cdef const uint8_t *src = <const uint8_t*>qops_ptr(x)
    cdef uint8_t *dst = <uint8_t*>qops_ptr(out, True)
    with nogil:
        qops_transpose8_batch(src, dst, nb, rows, cols, th)
    return out


def _to_channels_last(x):
    """A channels-last copy (N, D, H, W, C) of C-order x (N, C, D, H, W): the first step of
    the routes that run a C-order conv on a channels-last kernel."""
    n, c, d, h, wdt = x.shape
    return _transposed(np.ascontiguousarray(x).reshape(n, c, -1), (n, d, h, wdt, c))


def _dw_through_nhwc(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                     stride, padding, dilation):
    """Depthwise conv of C-contiguous x (N, C, D, H, W) by the channels-last kernel: x
    transposed to channels last, the result (N, C, OD, OH, OW) in channels-last memory, as
    PyTorch's convs return it (transposed back, the caller would only transpose it again)."""
    y = _conv_dw_cl(_to_channels_last(x), packed, x_zero_point, bias_term, multiplier,
                    out_zero_point, relu, stride, padding, dilation)
    return y.transpose(0, 4, 1, 2, 3)


def _row_taps(packed, c, dilation):
    """True where the VNNI taps GEMM runs a conv of c < 4 input channels (an RGB stem) with a
    kernel row as each tap (_conv_cl_taps_gemm): symmetric weights, several taps, unit
    dilation along W."""
    kd, kh, kw = packed["kernel"]
    return (_TAPS[0] and c < 4 and packed["symmetric"] and kd * kh * kw > 1
            and dilation[2] == 1 and kd * kh * ((kw * c + 3) // 4 * 4) <= _GEMM_MAX_K)


def _plan_cl(x, packed, groups, stride=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1),
             bias_term=None, multiplier=None):
    """The route of a channels-last conv of contiguous x (N, D, H, W, C), by name.

    'dw_vnni': depthwise, symmetric weights, VNNI: qconv_dwcl_rows, 64 channels a vector.
    'dw_avx2': depthwise, 16+ channels, AVX2: qconv_dwcl2_rows, 32 channels a block (16
    under 32 channels; 17-19 channels on large planes at stride 1 along W, _DW16_MAX_PIXELS,
    take 'dw_planes').
    'dw_planes': other depthwise convs: a C-order copy for the planes kernel, transposed back.
    'amx_pixels': (AMX, before the next three) 1x1 at stride 1 without padding, 32+ channels:
    the pixels as one GEMM, rows of whole tiles read in place (staged a row at a time where
    whole 64-byte pixels start off cache lines), the threads splitting the output channels
    where rows are few.
    'amx_pixels_strided': (AMX) other 1x1 convs without padding: 'amx_pixels' on a dense
    copy of the pixels the stride reads, each thread gathering its own rows.
    'amx_im2col', 'amx_flat', 'amx_padded': ungrouped, symmetric weights, AMX tiles on im2col
    rows (under 32 channels), else on a padded copy of the input: read as one run of pixels
    where output rows would fill under 85% of 32-pixel tiles or whole rows would split
    unevenly over the threads (tiles span row ends; strided 2-D convs on the copy split into
    stride phases), tiles of 32 pixels within an output row otherwise.
    'gemm_1x1': ungrouped 1x1, stride 1, no padding, _GEMM_MIN_C+ channels, AVX2: the GEMM core
    on the pixels as rows (finite bias terms and multipliers: the GEMM sends NaN to the low
    bound, the conv kernels to the high one).
    'gemm_im2col': other ungrouped convs with K = taps x C >= 128 (or other 1x1 convs from
    _GEMM_MIN_C channels), AVX2, and 32+ channels or 16+ on small grids (_IM2COL_MAX_PIXELS per
    image), or at most 4 channels and K >= _FEW_C_MIN_K_CL (the RGB stems): im2col rows
    gathered and multiplied by the GEMM core a block at a time.
    'gemm_taps': (before gemm_im2col) symmetric weights, 32+ channels a multiple of 4, more
    than one tap, AVX-512 VNNI, and more pixels than output channels or one thread: the GEMM
    core reading each window in place (no im2col rows). Also (before the few-channel
    gemm_im2col) under 4 channels at unit dilation along W, symmetric weights: each kernel
    row one tap of KW x C bytes read as a multiple of 4 (the RGB stems).
    'planes': everything else, `conv` on the same memory, or on a C-order copy where its fill
    has no channels-last path (its C-order result as a view).
    """
    c = x.shape[4]
    kd, kh, kw = packed["kernel"]
    if packed["kind"] == "dw":
        if (_DWCL and _MODE[0] >= 1 and packed["symmetric"] and x.size > 0
                and kd * kh <= QCONV_DWCL_MAX_ROWS):
            return "dw_vnni"
        rows_win = (16 < c < 20 and stride[2] == 1 and kw <= 4
                    and x.shape[1] * x.shape[2] * x.shape[3] > _DW16_MAX_PIXELS)
        if (_DWCL2 and _MODE[0] >= 1 and c >= 16 and x.size > 0 and not rows_win
                and kd * kh * kw <= QCONV_DWCL2_MAX_TAPS):
            return "dw_avx2"
        return "dw_planes"
    if (_MODE[0] == 2 and packed["kind"] == "grouped" and groups == 1 and packed["symmetric"]
            and x.size > 0):
        if packed["Cg"] < _NHWC_MIN_C:
            return "amx_im2col"
        # a 1x1 conv at stride 1 without padding is a plain GEMM over the pixels: rows of
        # whole tiles read in place
        if ((kd, kh, kw) == (1, 1, 1) and tuple(stride) == (1, 1, 1)
                and tuple(padding) == (0, 0, 0)):
            return "amx_pixels"
        # ... and at a stride the pixels it reads, gathered first: a quarter of the input at
        # stride 2, where the padded and flat routes copy all of it (into phase planes)
        if (kd, kh, kw) == (1, 1, 1) and tuple(padding) == (0, 0, 0):
            return "amx_pixels_strided"
        # strided: 2-D only (the phase planes stand in for the depth slices)
        if _AMX_FLAT[0] and (tuple(stride) == (1, 1, 1)
                             or (x.shape[1] == 1 and kd == 1 and stride[0] == 1
                                 and padding[0] == 0)):
            # the row kernel's tiles of 32 pixels hold OW / ceil32(OW) real ones; flat ones
            # OW / Wp but pay a decode per pixel: flat wins where the row kernel's fill is
            # under 85% (at 28 and 56 pixels a row, 87.5%, the row kernel stays ahead), and
            # where whole rows leave threads idle (a conv1d's one row: 2 threads ran it slower
            # than 1), as flat items of QCONV_FLAT_CHUNK pixels split finer
            od, oh, ow = _out_sizes(x.shape[1:4], packed["kernel"], stride, padding, dilation)
            rows = x.shape[0] * od * oh
            nt = qops_threads_for(rows * ow * packed["O"] * c * kd * kh * kw, AMX_GRAIN)
            if ow < 0.85 * ((ow + 31) // 32 * 32) or rows < 0.85 * nt * ((rows + nt - 1) // nt):
                return "amx_flat"
        return "amx_padded"
    if (_MODE[0] != 1 or not _GEMM[0] or packed["kind"] != "grouped" or groups != 1
            or x.size == 0 or not _finite(bias_term) or not _finite(multiplier)):
        return "planes"
    if ((kd, kh, kw) == (1, 1, 1) and tuple(stride) == (1, 1, 1) and tuple(padding) == (0, 0, 0)
            and _GEMM_MIN_C <= c <= _GEMM_MAX_K):
        return "gemm_1x1"
    k = kd * kh * kw * c
    if _row_taps(packed, c, dilation):
        return "gemm_taps"
    if c <= 4 and _FEW_C_MIN_K_CL <= k <= _GEMM_MAX_K:
        return "gemm_im2col"
    if (_TAPS[0] and packed["symmetric"] and c % 4 == 0 and c >= 32 and kd * kh * kw > 1
            and k <= _GEMM_MAX_K):
        n, d, h, w = x.shape[:4]
        od, oh, ow = _out_sizes((d, h, w), packed["kernel"], stride, padding, dilation)
        # where threads split the weight panels each reads every window: from a padded copy
        # the other core wrote (its cache), that costs more than filling its own im2col rows
        if not _gemm_split(n * od * oh * ow, packed["O"], k)[2]:
            return "gemm_taps"
    # (a strided or padded 1x1 from _GEMM_MIN_C channels: its rows are the input's pixels)
    if ((c >= 16 and 128 <= k <= _GEMM_MAX_K)
            or (kd * kh * kw == 1 and _GEMM_MIN_C <= c <= _GEMM_MAX_K)):
        n, d, h, w = x.shape[:4]
        od, oh, ow = _out_sizes((d, h, w), packed["kernel"], stride, padding, dilation)
        if c >= 32 or od * oh * ow <= _IM2COL_MAX_PIXELS:
            return "gemm_im2col"
    return "planes"


def conv_cl(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
            stride, padding, dilation, groups):
    """conv of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, O), by the route
    `_plan_cl` names.

    Depthwise convolutions run a kernel vectorized over channels: with symmetric weights
    where the CPU has VNNI, with 16+ channels on AVX2. Ungrouped convolutions with symmetric
    weights run the channels-last AMX tiles where the CPU has AMX: from 32 input channels on
    a padded copy of the input, below that (where channels would fill under half of each
    64-byte pixel) on im2col rows. Everything else runs `conv` on the same memory, whose
    C-order result comes back as a view."""
    x = np.ascontiguousarray(x)
    n, d, h, wdt, c = x.shape
    route = _plan_cl(x, packed, groups, stride, padding, dilation, bias_term, multiplier)
    if _TRACE:
        _traced("conv_cl." + route)
    if route == "gemm_1x1":
        return _conv_cl_gemm(x, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                             relu)
    if route == "dw_vnni":
        return _conv_dw_cl(x, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                           relu, stride, padding, dilation)
    if route == "dw_avx2":
        return _conv_dw_cl_avx2(x, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                                relu, stride, padding, dilation)
    if route == "gemm_im2col":
        return _conv_cl_im2col_gemm(x, packed, x_zero_point, bias_term, multiplier,
                                    out_zero_point, relu, stride, padding, dilation)
    if route == "gemm_taps":
        return _conv_cl_taps_gemm(x, packed, x_zero_point, bias_term, multiplier,
                                  out_zero_point, relu, stride, padding, dilation)
    if route == "dw_planes":
        # the depthwise planes kernel reads rows of one channel: a C-order copy first, and
        # the result goes back to channels last, both by the tiled transpose
        xc = _transposed(x.reshape(n, -1, c), (n, c, d, h, wdt))
        out = conv(xc, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                   stride, padding, dilation, groups)
        return _transposed(out.reshape(n, c, -1), (n,) + out.shape[2:] + (c,))
    if route == "amx_im2col":
        return _conv_cl_im2col(x, packed, x_zero_point, bias_term, multiplier,
                               out_zero_point, relu, stride, padding, dilation)
    if route == "amx_pixels":
        return _conv_cl_amx_pixels(x, packed, x_zero_point, bias_term,
                                   multiplier, out_zero_point, relu)
    if route == "amx_pixels_strided":
        return _conv_cl_amx_pixels(x, packed, x_zero_point, bias_term,
                                   multiplier, out_zero_point, relu, stride)
    if route == "planes":
        # the planes' fill copies channels-last pixels 4 channels at a time at stride 1 along
        # W (qconv_fill_rows); otherwise it gathers them byte by byte, slower than a C-order
        # copy by the tiled transpose first (an RGB stem's input)
        xc = x.transpose(0, 4, 1, 2, 3)
        if stride[2] != 1 or c < 4:
            xc = _transposed(x.reshape(n, -1, c), (n, c, d, h, wdt))
        out = conv(xc, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                   stride, padding, dilation, groups)
        return out.transpose(0, 2, 3, 4, 1)
    return _conv_cl_amx_tiles(x, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                              relu, stride, padding, dilation, route)


cdef class _TilesCall:
    """What _conv_cl_amx_tiles works out from the geometry alone (the kernels' argument
    structs without their data pointers, the sizes of its copies, the threads), kept per
    geometry in the packed weight: a model calls each conv on one input size, and for small
    convs working this out again cost as much as the kernel."""
    cdef qconv_nhwc_fill_args f
    cdef qconv_nhwc_args a
    cdef bint flat, phases, direct
    cdef Py_ssize_t xpad_len, tail_rows, tail_len, tail_copy, tail_src, tail_out
    cdef Py_ssize_t rows, orows, prows, items, psh, psw, hq, wq
    cdef int nthreads, fill_threads
    cdef object out_shape, keep


# geometries whose prepared calls a packed weight keeps (a model calls each conv on one)
_CALLS_KEPT = 16


cdef dict _calls(packed):
    """The packed weight's dict of prepared calls, emptied when it grows past _CALLS_KEPT."""
    calls = packed.get("calls")
    if calls is None or len(<dict>calls) >= _CALLS_KEPT:
        calls = packed["calls"] = {}
    return <dict>calls


cdef _TilesCall _tiles_call(shape, packed, stride, padding, dilation, route, bint corder):
    """The _TilesCall of _conv_cl_amx_tiles for input `shape` (see there)."""
    cdef _TilesCall t = _TilesCall()
    if corder:
        n, c, d, h, wdt = shape
    else:
        n, d, h, wdt, c = shape
    kd, kh, kw = packed["kernel"]
    o = packed["O"]
    (pd, ph, pw), (sd, sh, sw), (dd, dh, dwl) = padding, stride, dilation
    dp, hp, wp_ = d + 2 * pd, h + 2 * ph, wdt + 2 * pw
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    # a stride past the padded width leaves one output column, whatever its value: clamped,
    # the tiles' strided reads (and the slack below) stay small
    sw = min(sw, wp_)
    cp = (c + 63) // 64 * 64
    t.flat = route == "amx_flat"
    # strided flat convs (2-D) read the padded input split by the stride into phase planes
    # of hq x wq pixels (qconv_nhwc_fill_phases); the planes stand in for depth slices
    t.phases = t.flat and (sh > 1 or sw > 1)
    # channels that leave much of each 64-byte pixel empty (32, 40, 80): at unit dilation
    # along W a kernel row's KW pixels are one run of KW x C bytes in a copy that holds C
    # bytes a pixel, read as ceil(KW C / 64) chunks instead of KW ceil(C / 64)
    # (_nhwc_weights_runs): a third fewer tile products for 32 or 80 channels, 3 wide
    runs = (kw > 1 and dwl == 1 and not t.phases
            and (kw * c + 63) // 64 <= _RUNS_RATIO[0] * kw * (cp // 64))
    wb = _nhwc_weights_runs(packed) if runs else _nhwc_weights(packed)
    # the padded copy's pixel stride; the chunks a tap (a kernel row with runs) reads
    cpix = c if runs else cp
    nchk = (kw * c + 63) // 64 if runs else cp // 64
    t.psh, t.psw = sh, sw
    t.hq, t.wq = (hp + sh - 1) // sh, (wp_ + sw - 1) // sw
    t.rows, t.orows = n * dp * hp, n * od * oh
    t.prows = n * sh * sw * t.hq
    # slack past the end: the last pixel tiles read up to 32 strided pixels past a row (and
    # flat tiles up to 32 pixels and a row of taps past the image)
    size = t.prows * t.wq * cp if t.phases else t.rows * wp_ * cpix
    # no padding (2-D): the tiles read the input as it lies, a pixel every c bytes (a copy
    # of a large input costs as much as a 1x1 conv's products). With c not a multiple of 64
    # the last 64-byte chunk of a pixel runs on into the next pixel's bytes, which meet the
    # zero weights of the channels past c. The last image's trailing output rows whose tiles
    # read past the input's end run on a copy of its last rows with slack ("tail" rows).
    t.direct = (route == "amx_padded" and not (pd or ph or pw) and d == 1 and n > 0
                and not corder)
    t.tail_rows = 0
    oh0 = oh
    img = h * wdt * c
    # the last tap's offset along W within a window: its pixel (a run starts at kw 0)
    last_tap = 0 if runs else (kw - 1) * dwl

    def reach(r):       # bytes of an image that output row r's tiles read up to
        return ((r * sh + (kh - 1) * dh) * wdt + ((ow + 31) // 32 * 32 - 1) * sw
                + last_tap) * c + nchk * 64
    if t.direct:
        last = reach(oh - 1)
        t.direct = last - img <= img               # other images' overshoot stays in the next
    if t.direct:
        while oh0 > 0 and reach(oh0 - 1) > img:
            oh0 -= 1
        t.tail_rows = oh - oh0
        if t.tail_rows:
            # the tail copy: its length, the bytes copied into it from the last image (at
            # tail_src), and where its rows' output starts
            t.tail_len = max(last, img) - oh0 * sh * wdt * c + 64
            t.tail_copy = (h - oh0 * sh) * wdt * c
            t.tail_src = ((n - 1) * h + oh0 * sh) * wdt * c
            t.tail_out = ((n - 1) * oh + oh0) * ow * o
        size = 0
    # the pixel stride of what the tiles read: the input's c, or the padded copy's cp
    cs = c if t.direct else cpix
    t.xpad_len = size + (32 * sw + wp_ + 64) * cp
    t.f.N, t.f.D, t.f.H, t.f.W, t.f.C = n, d, h, wdt, c
    t.f.pd, t.f.ph, t.f.pw = pd, ph, pw
    t.f.Dp, t.f.Hp, t.f.Wp, t.f.Cp = dp, hp, wp_, cpix
    t.f.corder = corder
    if corder and t.phases:
        raise AssertionError("conv.amx_padded_corder: no stride phases from C order")
    # the taps' offsets, kept per geometry (a model calls each conv on one input size)
    key = ("taps", hp, wp_, cs, dilation, (sh, sw) if t.phases else None, runs)
    taps = packed.get(key)
    if taps is None:
        if runs:        # kernel row (i, j): its run starts at tap kw 0
            taps = np.array([(i * dd * hp + j * dh) * wp_ * cs
                             for i in range(kd) for j in range(kh)], dtype=np.intp)
        elif t.phases:    # tap (j, k) in plane ((j dh) % sh, (k dw) % sw), shifted by the quotients
            taps = np.array(
                [((((j * dh) % sh * sw + (k * dwl) % sw) * t.hq + (j * dh) // sh) * t.wq
                  + (k * dwl) // sw) * cp for j in range(kh) for k in range(kw)], dtype=np.intp)
        else:
            taps = np.array(
                [((i * dd * hp + j * dh) * wp_ + k * dwl) * cs
                 for i in range(kd) for j in range(kh) for k in range(kw)], dtype=np.intp)
        packed[key] = taps
    t.out_shape = (n, od, oh, ow, o)
    if t.phases:
        t.a.Dp, t.a.Hp, t.a.Wp, t.a.Cp = sh * sw, t.hq, t.wq, cp
    else:
        t.a.Dp, t.a.Hp, t.a.Wp, t.a.Cp = dp, hp, wp_, cs
    t.a.sd, t.a.sh, t.a.sw = sd, sh, sw
    t.keep = _nhwc_tiles_args(&t.a, packed, wb, taps, od, oh, ow, nchk)
    t.fill_threads = 0 if t.direct else qops_threads_for(t.rows * wp_ * cp, 1 << 16)
    t.nthreads = qops_threads_for(t.orows * ow * o * c * kd * kh * kw, AMX_GRAIN)
    t.items = qconv_flat_items(&t.a, n)
    if t.flat:
        t.nthreads = min(t.nthreads, t.items)
    return t


def _conv_cl_amx_tiles(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                       stride, padding, dilation, route, corder=False):
    """conv_cl's routes amx_padded and amx_flat: AMX tiles on a padded copy of x (or on x in
    place, without padding). With corder, x is C-order (N, C, D, H, W) and the padded copy
    is filled by transposing each row's pixels out of the channel planes (never in place, nor
    in stride phases). The geometry's work is a _TilesCall, kept per input shape and
    threads."""
    calls = _calls(packed)
    key = ("tiles", x.shape, tuple(stride), tuple(padding), tuple(dilation), route, corder,
           qops_omp_threads())
    cdef _TilesCall t = calls.get(key)
    if t is None:
        t = calls[key] = _tiles_call(x.shape, packed, stride, padding, dilation, route, corder)
    cdef qconv_nhwc_fill_args f = t.f
    cdef qconv_nhwc_args a = t.a
    cdef qconv_nhwc_args at
    xpad = qops_empty(np, (t.xpad_len,), np.uint8)
    out = qops_empty(np, t.out_shape, np.uint8)
    f.x = <const uint8_t*>qops_ptr(x)
    f.xz = x_zero_point
    f.xp = <uint8_t*>qops_ptr(xpad, True)
    a.xp = f.xp
    keep = _nhwc_out_args(&a, bias_term, multiplier, x_zero_point, out_zero_point, relu, out)
    at = a
    if t.direct:
        a.xp = f.x
        if t.tail_rows:       # rows [oh0, oh) of the last image, on the tail copy
            tail = np.zeros(t.tail_len, np.uint8)
            tail[:t.tail_copy] = x.reshape(-1)[t.tail_src:t.tail_src + t.tail_copy]
            at.xp = <const uint8_t*>qops_ptr(tail)
            at.OD, at.OH = 1, t.tail_rows
            at.out = a.out + t.tail_out
    cdef Py_ssize_t i, items = t.items, rows = t.rows, orows = t.orows, prows = t.prows
    cdef Py_ssize_t tail_rows = t.tail_rows, psh = t.psh, psw = t.psw, hq = t.hq, wq = t.wq
    cdef int nthreads = t.nthreads, fill_threads = t.fill_threads
    cdef bint phases = t.phases, flat = t.flat, direct = t.direct
    with nogil:
        if phases:
            for i in prange(fill_threads, schedule="static", num_threads=fill_threads):
                qconv_nhwc_fill_phases(&f, psh, psw, hq, wq, prows * i // fill_threads,
                                       prows * (i + 1) // fill_threads)
        elif not direct:
            for i in prange(fill_threads, schedule="static", num_threads=fill_threads):
                qconv_nhwc_fill(&f, rows * i // fill_threads, rows * (i + 1) // fill_threads)
        if flat:
            # contiguous items per thread: a thread's chunks share their weight pairs
            for i in prange(nthreads, schedule="static", num_threads=nthreads):
                qconv_nhwc_amx_flat(&a, items * i // nthreads, items * (i + 1) // nthreads)
        elif direct:
            for i in prange(nthreads, schedule="static", num_threads=nthreads):
                qconv_nhwc_amx(&a, (orows - tail_rows) * i // nthreads,
                               (orows - tail_rows) * (i + 1) // nthreads)
            if tail_rows:
                qconv_nhwc_amx(&at, 0, tail_rows)
        else:
            # whole output rows per thread, contiguous (each keeps its weight blocks in L1)
            for i in prange(nthreads, schedule="static", num_threads=nthreads):
                qconv_nhwc_amx(&a, orows * i // nthreads, orows * (i + 1) // nthreads)
    return out


cdef void _fill(qconv_fill_args *f, Py_ssize_t rows, int nthreads) noexcept nogil:
    cdef Py_ssize_t chunk = 8, nch = (rows + 7) // 8, i
    for i in prange(nch, schedule="static", num_threads=nthreads):
        qconv_fill_rows(f, threadid(), i * chunk, min(i * chunk + chunk, rows))


cdef void _run_dwr(qconv_dwr_args *r, Py_ssize_t items, int nthreads) noexcept nogil:
    cdef Py_ssize_t i
    for i in prange(items, schedule="static", num_threads=nthreads):
        qconv_dwr_channel(r, threadid(), i // r.C, i % r.C)


cdef void _run(qconv_args *a, bint dw, int mode, Py_ssize_t n, Py_ssize_t rows, int nthreads) noexcept nogil:
    # work item: `rows` output rows x up to QCONV_PIX pixels of one depth slice of one image
    cdef Py_ssize_t nwc = (a.OW + QCONV_PIX - 1) // QCONV_PIX
    cdef Py_ssize_t nrg = (a.OH + rows - 1) // rows
    cdef Py_ssize_t items = n * a.OD * nrg * nwc, i, r, b, od, oh, ow0, ow1
    for i in prange(items, schedule="static", num_threads=nthreads):
        r = i // nwc
        ow0 = (i % nwc) * QCONV_PIX
        ow1 = min(ow0 + QCONV_PIX, a.OW)
        oh = (r % nrg) * rows
        od = (r // nrg) % a.OD
        b = r // (nrg * a.OD)
        if dw:
            qconv_dw(a, mode, b, od, oh, ow0, ow1)
        else:
            qconv_grouped(a, mode, b, od, oh, min(oh + rows, a.OH), ow0, ow1)


def _max_in_memory_order(x):
    """x.max(), read in x's memory order where x is a permuted dense block (a channels-last
    input seen as NCDHW): numpy's strided reduction over such a view is several times slower
    than the contiguous scan."""
    order = memory_order(x)
    return int((x if order is None else x.transpose(order)).max())


def _plan_conv(x, packed, stride, padding, dilation, groups=1, bias_term=None,
               multiplier=None):
    """The route of a conv of x (N, C, D, H, W), by name, with the planes kernel's tier
    (_MODE: 2 AMX, 1 SIMD, 0 portable) and, for 'dw_rows', its padded output width (for
    'amx_padded_corder', the conv_cl route it runs).

    'gemm_im2col': ungrouped, AVX2, at most 4 input channels (the planes kernel's quads of
    channels are mostly padding) and K = taps x C >= _FEW_C_MIN_K (the stems: 7x7 on RGB),
    or _C_ORDER_GEMM_MIN_C+ channels (16+ on output planes of up to _C_ORDER_GEMM_MAX_PIXELS),
    several taps and K >= 128: transposed to channels last, then conv_cl's im2col rows and
    GEMM core (or taps), the result channels last as PyTorch's.
    'taps_through_cl': (before gemm_im2col) the RGB stems of conv_cl's gemm_taps (under 4
    channels, _row_taps): transposed to channels last, then a kernel row a tap.
    'gemm_1x1': ungrouped 1x1 on single pixels (a squeeze-excite block's convs), AVX2, as
    conv_cl's gemm_1x1: one pixel lies the same in both layouts.
    'gemm_1x1_cl': other ungrouped 1x1 convs (stride 1, no padding) from _GEMM_MIN_C
    channels, AVX2: transposed to channels last, then conv_cl's gemm_1x1, the result channels
    last (strided or padded 1x1 convs take 'gemm_im2col'): the planes kernel has no depth to
    vectorize over in a 1x1 conv, the GEMM core has the channels.
    'gemm_1x1_corder': the same convs, C-contiguous, on AVX-512 builds: each GEMM thread
    transposes the rows it reads for itself (a shared copy, half written by each core, made
    2 threads slower than 1 on 14x14 planes).
    'dw_through_cl': depthwise with 16+ channels on AVX2 where the planes run short (at
    most _DW_CL_MAX_PIXELS input pixels a channel) or strided: transposed to channels last,
    then conv_cl's dw_avx2, the result channels last.
    'dw_through_nhwc': symmetric depthwise with _DW_NHWC_MIN_C+ channels at a stride along W
    or on small planes, where the VNNI channels-last kernel wins even with the two transposes
    (at stride 1 on large planes the transposes cost more than they save).
    'dw_rows': other depthwise convs at stride 1 along W with KW <= 4 whose padded rows fit
    the row buffer: qconv_dwr_channel, one channel per work item.
    'amx_pixels_corder': (AMX) ungrouped 1x1 convs at stride 1 without padding, symmetric
    weights, from _NHWC_MIN_C channels, C-contiguous: conv_cl's amx_pixels, each row
    transposed into its thread's stage from the channel planes (the whole channels-last
    copy, written out and read back, cost as much as the conv), under 32 output channels
    too (measured faster there as well than the planes' AMX tier).
    'amx_padded_corder': (AMX, before amx_through_cl) its convs that conv_cl runs on a padded
    copy filled row by row (_amx_tiles_corder), C-contiguous: that copy filled by
    transposing from the channel planes (no channels-last copy first).
    'amx_through_cl': ungrouped, symmetric weights, 32+ output channels, AMX: transposed to
    channels last, then conv_cl's tiles (im2col rows under 32 input channels), the result
    channels last: the channels-last tiles beat the planes' AMX tier by more than both
    copies cost on every shape measured, except 3->16 stems (one 16-channel output block).
    'planes.<tier>': everything else; AMX tiles pay off from 16 input channels per group
    (fewer go to the SIMD tier).
    """
    n, c, d, h, wdt = x.shape
    kd, kh, kw = packed["kernel"]
    o = packed["O"]
    dw = packed["kind"] == "dw"
    mode = _MODE[0] if not dw else min(_MODE[0], 1)
    pd, ph, pw = padding
    sw = stride[2]
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    k = kd * kh * kw * c
    if (not dw and _MODE[0] == 1 and _GEMM[0] and groups == 1 and packed["kind"] == "grouped"
            and d * h * wdt == 1 and (kd, kh, kw) == (1, 1, 1) and tuple(stride) == (1, 1, 1)
            and tuple(padding) == (0, 0, 0) and _GEMM_MIN_C <= c <= _GEMM_MAX_K
            and n > 0 and x.flags.c_contiguous and bias_term is not None
            and _finite(bias_term) and _finite(multiplier)):
        return "gemm_1x1", mode, 0
    gemm_ok = (not dw and _MODE[0] == 1 and _GEMM[0] and groups == 1
               and packed["kind"] == "grouped" and n * od * oh * ow > 0
               and bias_term is not None and _finite(bias_term) and _finite(multiplier))
    if (gemm_ok and (kd, kh, kw) == (1, 1, 1) and tuple(stride) == (1, 1, 1)
            and tuple(padding) == (0, 0, 0) and _GEMM_MIN_C <= c <= _GEMM_MAX_K):
        if not _AVX2 and x.flags.c_contiguous:
            return "gemm_1x1_corder", mode, 0
        return "gemm_1x1_cl", mode, 0
    if gemm_ok and _row_taps(packed, c, dilation):
        return "taps_through_cl", mode, 0
    if (gemm_ok and k <= _GEMM_MAX_K
            and ((c <= 4 and _FEW_C_MIN_K <= k)
                 or (c >= _C_ORDER_GEMM_MIN_C and k >= 128 and kd * kh * kw > 1)
                 or (c >= 16 and k >= 128 and kd * kh * kw > 1
                     and od * oh * ow <= _C_ORDER_GEMM_MAX_PIXELS)
                 or (c >= _GEMM_MIN_C and kd * kh * kw == 1))):
        return "gemm_im2col", mode, 0
    if (dw and _DWCL and mode >= 1 and packed["symmetric"] and c >= _DW_NHWC_MIN_C
            and (sw > 1 or d * h * wdt <= 1024) and x.flags.c_contiguous
            and n * od * oh * ow > 0 and kd * kh <= QCONV_DWCL_MAX_ROWS):
        return "dw_through_nhwc", mode, 0
    if (dw and _DWCL2 and mode >= 1 and c >= 16 and kd * kh * kw <= QCONV_DWCL2_MAX_TAPS
            and (sw > 1 or d * h * wdt <= _DW_CL_MAX_PIXELS) and n * od * oh * ow > 0):
        return "dw_through_cl", mode, 0
    if (dw and mode >= 1 and sw == 1 and kw <= 4 and kd * kh <= qconv_dwr_max_nq()
            and qconv_dwr_available() and x.size > 0 and n * o * od * oh * ow > 0):
        owp = (ow + 15) // 16 * 16
        if (d + 2 * pd) * (h + 2 * ph) * qconv_dwr_rowpix(owp, dilation[2]) * 4 <= (1 << 20):
            return "dw_rows", mode, owp
    amx_ok = (not dw and _MODE[0] == 2 and groups == 1 and packed["kind"] == "grouped"
              and packed["symmetric"] and n * od * oh * ow > 0)
    if (amx_ok and (kd, kh, kw) == (1, 1, 1) and tuple(stride) == (1, 1, 1)
            and tuple(padding) == (0, 0, 0) and c >= _NHWC_MIN_C and x.flags.c_contiguous):
        return "amx_pixels_corder", mode, 0
    if amx_ok and o >= 32:
        cl_route = _amx_tiles_corder(x, packed, stride, padding, dilation, groups, bias_term,
                                     multiplier)
        if cl_route is not None:
            return "amx_padded_corder", mode, cl_route
        return "amx_through_cl", mode, 0
    if mode == 2 and ("wa" not in packed or packed["Kc"] < _AMX_MIN_KC[0]):
        mode = qconv_best_mode()
    return {2: "planes.amx", 1: "planes.simd", 0: "planes.portable"}[mode], mode, 0


def _amx_tiles_corder(x, packed, stride, padding, dilation, groups, bias_term, multiplier):
    """The conv_cl route (amx_padded or amx_flat) that conv.amx_padded_corder runs C-order x
    by, or None: the routes whose padded copy the fill writes row by row (not read in place
    without padding, not split into stride phases). Rows under 16 pixels (a byte loop in the
    transposes) only for one image: measured, from batch 8 on 7x7 and 14x14 planes the whole
    copy's transpose of each plane at once is as fast or faster."""
    if not x.flags.c_contiguous or x.size == 0 or (x.shape[4] < 16 and x.shape[0] > 1):
        return None
    xv = x.transpose(0, 2, 3, 4, 1)
    r = _plan_cl(xv, packed, groups, stride, padding, dilation, bias_term, multiplier)
    if r == "amx_flat" and tuple(stride[1:]) == (1, 1):
        return r
    if r == "amx_padded" and (any(padding) or x.shape[2] > 1):
        return r
    return None


def conv(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
         stride, padding, dilation, groups):
    """Quantized 3-D convolution with requantized uint8 output (NCDHW), by the route
    `_plan_conv` names."""
    cdef qconv_fill_args f
    cdef qconv_args a
    x = np.asarray(x)
    n, c, d, h, wdt = x.shape
    kd, kh, kw = packed["kernel"]
    o = packed["O"]
    dw = packed["kind"] == "dw"
    pd, ph, pw = padding
    sd, sh, sw = stride
    dd, dh, dwl = dilation
    dp, hp, wp_ = d + 2 * pd, h + 2 * ph, wdt + 2 * pw
    od, oh, ow = _out_sizes((d, h, wdt), packed["kernel"], stride, padding, dilation)
    route, mode, extra = _plan_conv(x, packed, stride, padding, dilation, groups, bias_term,
                                    multiplier)
    if _TRACE:
        _traced("conv." + route)
    if route == "gemm_1x1":
        y = _conv_cl_gemm(x.reshape(n, 1, 1, 1, c), packed, x_zero_point, bias_term,
                          multiplier, out_zero_point, relu)
        return y.reshape(n, 1, 1, 1, o).transpose(0, 4, 1, 2, 3)
    if route == "gemm_1x1_corder":
        y = _conv_gemm_1x1_corder(x, packed, x_zero_point, bias_term, multiplier,
                                  out_zero_point, relu)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "gemm_1x1_cl":
        xc = _to_channels_last(x)
        y = _conv_cl_gemm(xc, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                          relu)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "dw_through_cl":
        xc = _to_channels_last(x)
        y = _conv_dw_cl_avx2(xc, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                             relu, stride, padding, dilation)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "gemm_im2col":
        xc = _to_channels_last(x)
        y = _conv_cl_im2col_gemm(xc, packed, x_zero_point, bias_term, multiplier,
                                 out_zero_point, relu, stride, padding, dilation)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "taps_through_cl":
        xc = _to_channels_last(x)
        y = _conv_cl_taps_gemm(xc, packed, x_zero_point, bias_term, multiplier,
                               out_zero_point, relu, stride, padding, dilation)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "amx_pixels_corder":
        y = _conv_cl_amx_pixels(x, packed, x_zero_point, bias_term, multiplier,
                                out_zero_point, relu, corder=True)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "amx_padded_corder":
        if _TRACE:
            _traced("conv_cl." + extra)         # (the conv_cl route it runs)
        y = _conv_cl_amx_tiles(x, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                               relu, stride, padding, dilation, extra, corder=True)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "amx_through_cl":
        xc = _to_channels_last(x)
        y = conv_cl(xc, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                    stride, padding, dilation, groups)
        return y.transpose(0, 4, 1, 2, 3)
    if route == "dw_through_nhwc":
        return _dw_through_nhwc(x, packed, x_zero_point, bias_term, multiplier, out_zero_point,
                                relu, stride, padding, dilation)
    if route == "dw_rows":
        return _conv_dwr(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
                         (kd, kh, kw), (sd, sh), (pd, ph, pw), (dd, dh, dwl), (od, oh, ow),
                         extra)
    # The layout below splits each padded row into `sw` phases of wq pixels, sw * wq >= wp_.
    # A stride past the padded width leaves output column 0 alone, whose taps do not depend
    # on it: clamped, a stride of 10**12 no longer asks for terabytes.
    sw = min(sw, max(wp_, 1))
    ilv = 1 if dw else 4
    c4 = 1 if dw else packed["C4"]
    ng = c if dw else groups
    wq = -(-wp_ // sw)
    c4_stride = sw * wq * ilv
    row_bytes = c4 * c4_stride
    group_bytes = dp * hp * row_bytes
    img_bytes = ng * group_bytes
    # slack past the end for the whole-vector reads of the last pixel block (never stored)
    xq = np.empty(n * img_bytes + 4096, np.uint8)
    cdef const uint8_t[:, :, :, :, :] xv = x
    f.x = &xv[0, 0, 0, 0, 0]
    f.sn, f.sc, f.sd, f.sh, f.sw_x = x.strides
    f.D, f.H, f.W = d, h, wdt
    f.pd, f.ph, f.pw = pd, ph, pw
    f.Dp, f.Hp, f.sw, f.Wq, f.ilv = dp, hp, sw, wq, ilv
    f.NG, f.C4, f.Cg = ng, c4, packed["Cg"]
    f.dw = dw
    f.xz = x_zero_point
    # contiguous arrays by pointer (a typed memoryview costs ~3x as much a call), each kept
    # alive by a local name or by `packed`
    f.xq = <uint8_t*>qops_ptr(xq, True)
    f.group_bytes, f.img_bytes, f.row_bytes, f.c4_stride = group_bytes, img_bytes, row_bytes, c4_stride
    rows = n * ng * dp * hp
    fill_threads = qops_threads_for(n * img_bytes, 1 << 16)
    f.scratch_bytes = 6 * sw * wq + 64
    scratch = np.empty(fill_threads * f.scratch_bytes, np.uint8)
    f.scratch = <uint8_t*>qops_ptr(scratch, True)
    _fill(&f, rows, fill_threads)

    # the taps' offsets, kept per geometry (a model calls each conv on one input size)
    key = ("plane_taps", hp, row_bytes, sw, wq, ilv, dilation)
    taps = packed.get(key)
    if taps is None:
        taps = packed[key] = np.array(
            [(i * dd * hp + j * dh) * row_bytes + (k * dwl) % sw * wq * ilv + (k * dwl) // sw * ilv
             for i in range(kd) for j in range(kh) for k in range(kw)], dtype=np.intp)
    out = np.empty((n, o, od, oh, ow), np.uint8)
    bt = np.ascontiguousarray(bias_term, np.float32)
    mu = np.ascontiguousarray(multiplier, np.float32)
    a.xq = f.xq
    a.img_bytes, a.group_bytes, a.row_bytes, a.c4_stride = img_bytes, group_bytes, row_bytes, c4_stride
    a.Hp, a.sw, a.Wq, a.ilv = hp, sw, wq, ilv
    a.OD, a.OH, a.OW = od, oh, ow
    a.sd, a.sh = sd, sh
    a.ntaps = len(taps)
    a.toff = <const Py_ssize_t*>qops_ptr(taps)
    a.G, a.O = groups, o
    a.bterm = <const float*>qops_ptr(bt)
    a.mult = <const float*>qops_ptr(mu)
    a.xz = x_zero_point
    a.ozp = out_zero_point
    a.lo = out_zero_point if relu else 0
    a.out = <uint8_t*>qops_ptr(out, True)
    a.wv = <const int32_t*>qops_ptr(packed["wv"])
    a.kzw = <const int32_t*>qops_ptr(packed["kzw"])
    a.wz = <const int32_t*>qops_ptr(packed["wz"])
    a.gany = <const uint8_t*>qops_ptr(packed["gany"])
    if dw:
        a.wd = <const int32_t*>qops_ptr(packed["wd"])
        a.wdsum = <const int32_t*>qops_ptr(packed["wdsum"])
    else:
        a.Cg, a.C4, a.Og = packed["Cg"], c4, packed["Og"]
        if "pairmax" in packed:
            a.wvl = <const int32_t*>qops_ptr(packed["wvl"])
            a.wvh = <const int32_t*>qops_ptr(packed["wvh"])
            # no vpmaddubsw pair sum leaves int16 when the largest input (padding holds the
            # zero point) times pairmax fits: always for pairmax <= 128, else the input decides
            xmax = (255 if packed["pairmax"] <= 128 or mode != 1 or not _AVX2 or x.size == 0
                    else max(_max_in_memory_order(x), x_zero_point))
            a.pairsafe = xmax * packed["pairmax"] <= 32767
        a.Kc, a.nch, a.nob = packed["Kc"], packed["nch"], packed["nob"]
        if mode == 2:
            a.wa = <const int8_t*>qops_ptr(packed["wa"])
    cdef Py_ssize_t macs = n * od * oh * ow * o * packed["Cg"] * len(taps)
    nthreads = qops_threads_for(macs, GRAIN)
    rows_per_item = 1
    if mode == 2:
        # several rows per item let the AMX kernel reuse each weight block from L1, as long
        # as every thread still gets a few items
        rows_per_item = max(1, min(4, (n * od * oh) // (4 * nthreads)))
    _run(&a, dw, mode, n, rows_per_item, nthreads)
    return out


def _conv_dwr(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
              kernel, stride, padding, dilation, osize, owp):
    """Depthwise, stride 1 along W, KW <= 4: one channel per work item (qconv_dwr_channel)."""
    cdef qconv_dwr_args r
    n, c, d, h, wdt = x.shape
    kd, kh, kw = kernel
    pd, ph, pw = padding
    dd, dh, dwl = dilation
    od, oh, ow = osize
    dp, hp = d + 2 * pd, h + 2 * ph
    lp = max(owp + 3 * dwl, pw + wdt) + 64
    roff = np.array([i * dd * hp + j * dh for i in range(kd) for j in range(kh)], dtype=np.intp)
    out = np.empty((n, c, od, oh, ow), np.uint8)
    cdef const uint8_t[:, :, :, :, :] xv = x
    cdef const Py_ssize_t[::1] roff_v = roff
    cdef const float[::1] bt_v = np.ascontiguousarray(bias_term, np.float32)
    cdef const float[::1] mu_v = np.ascontiguousarray(multiplier, np.float32)
    cdef uint8_t[::1] out_v = out.reshape(-1)
    cdef const int32_t[::1] wr_v = packed["wrow"].reshape(-1)
    cdef const int32_t[::1] kzw_v = packed["kzw"]
    cdef const int32_t[::1] wz_v = packed["wz"]
    cdef const uint8_t[::1] ga_v = packed["gany"]
    r.x = &xv[0, 0, 0, 0, 0]
    r.sn, r.sc, r.sd, r.sh, r.sw_x = x.strides
    r.D, r.H, r.W = d, h, wdt
    r.pd, r.ph, r.pw = pd, ph, pw
    r.Dp, r.Hp, r.KW, r.dwl = dp, hp, kw, dwl
    r.OD, r.OH, r.OW, r.OWp, r.Lp = od, oh, ow, owp, lp
    r.sdd, r.shh = stride
    r.NQ = kd * kh
    r.roff = &roff_v[0]
    r.C = c
    r.wrow = &wr_v[0]
    r.kzw = &kzw_v[0]
    r.wz = &wz_v[0]
    r.gany = &ga_v[0]
    r.bterm = &bt_v[0]
    r.mult = &mu_v[0]
    r.xz = x_zero_point
    r.ozp = out_zero_point
    r.lo = out_zero_point if relu else 0
    r.out = &out_v[0]
    cdef Py_ssize_t macs = n * od * oh * ow * c * kd * kh * kw
    nthreads = min(qops_threads_for(macs, GRAIN), n * c)
    rowpix = qconv_dwr_rowpix(owp, dwl)
    r.scratch_bytes = (dp * hp * rowpix * 4 + 3 * lp + rowpix + 128 + 63) // 64 * 64
    scratch = np.empty(nthreads * r.scratch_bytes + 64, np.uint8)
    cdef uint8_t[::1] sc_v = scratch
    r.scratch = &sc_v[0]
    _run_dwr(&r, n * c, nthreads)
    return out
