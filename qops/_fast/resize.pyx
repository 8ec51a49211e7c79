# Interpolation kernels (mirror of qops/_ref/resize.py): raw uint8/int8/int32 (N, C, D, H, W)
# in, same dtype out. Nearest modes gather raw values; bilinear blends in float32 exactly as
# the reference writes it (no fused multiply-add: the build uses -ffp-contract=off) and
# quantizes with Q_leg, rint half to even. An exact x2 without align_corners has weights 0,
# 1/4, 3/4 and 1, where that float formula is exact: an integer kernel computes its bits.
#
# Source indices and weights per output coordinate are computed once per call (numpy, the
# reference's float32 formulas); the kernels then run per output row. prange goes over
# (n, c, od) planes, each thread keeping its own row buffers.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES (<op>.<route>), every entry point calls it, and qops.show_config(op, *args) reports
# it (qops/_show.py).
import functools
from qops._fast._routes import Route, TRACE, module_isa, trace_routes as _trace_routes

import numpy as np
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from qops._fast._common cimport *

DEF GRAIN = 32768         # output elements per thread below which one thread is enough
DEF PF_BYTES = 8 << 20    # outputs above this are prefetched (see qops_double_bytes)


@functools.lru_cache(maxsize=256)
def _nearest_index(out_len, in_len, ratio, exact):
    # Memoized: a model resizes the same few shapes over and over, and these numpy steps cost
    # more than the kernel on small maps. Read-only, since every call shares the array.
    dst = np.arange(out_len).astype(np.float32)
    if exact:
        dst = dst + np.float32(0.5)
    src = np.floor(dst * np.float32(ratio)).astype(np.int64)
    idx = np.minimum(src, in_len - 1).astype(np.int32)
    idx.flags.writeable = False
    return idx


@functools.lru_cache(maxsize=256)
def _is_twice(out_len, in_len, ratio, exact):
    # whether output column j reads input column j // 2 (an exact 2x)
    return out_len == 2 * in_len and np.array_equal(
        _nearest_index(out_len, in_len, ratio, exact), np.arange(out_len, dtype=np.int32) // 2)


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_ISA = module_isa(__name__)
_TIER = "AVX-512BW" if _ISA == "avx512" else "C"

ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "resize.pyx"),
    Route("upsample_nearest.gather", "_nearest_plane (gather of raw values, row runs)",
          "resize.pyx"),
    Route("upsample_nearest.twice", f"qops_double_bytes ({_TIER}, exact 2x rows)",
          "qops_resize.h"),
    Route("upsample_nearest.twice_prefetch",
          f"qops_double_bytes ({_TIER}, exact 2x rows, outputs above PF_BYTES prefetched)",
          "qops_resize.h"),
    Route("upsample_bilinear.x2", f"qops_bilinear2x_plane ({_TIER}, exact integer x2)",
          "qops_resize.h"),
    Route("upsample_bilinear.planes", "_bilinear_planes (float32, blended-row buffers)",
          "resize.pyx"),
]}
BUILT = frozenset(ROUTES)      # every build runs every route (the tier is in the kernel text)

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_NEAREST = ROUTES["upsample_nearest.gather"]
cdef object R_TWICE = ROUTES["upsample_nearest.twice"]
cdef object R_TWICE_PF = ROUTES["upsample_nearest.twice_prefetch"]
cdef object R_BL_X2 = ROUTES["upsample_bilinear.x2"]
cdef object R_BL = ROUTES["upsample_bilinear.planes"]


cdef object _plan(bint bilinear, x, out, out_size, ratios, bint flag):
    """The Route of one call: every kernel choice of the family, in one place.

    bilinear: upsample_bilinear (else upsample_nearest); x, out: the (N, C, D, H, W) input
    and output; out_size, ratios: the entry point's; flag: align_corners (bilinear) or
    exact (nearest)."""
    if out.size == 0:
        route = R_EMPTY
    elif bilinear:
        # x2 with ratio 1/2: weights 0, 1/4, 3/4, 1, so the float formula is exact and an
        # integer kernel gives its bits
        route = (R_BL_X2 if (not flag and out_size[1] == 2 * x.shape[3]
                             and out_size[2] == 2 * x.shape[4]
                             and np.float32(ratios[1]) == 0.5 and np.float32(ratios[2]) == 0.5)
                 else R_BL)
    elif x.itemsize == 1 and _is_twice(out_size[2], x.shape[4], ratios[2], flag):
        route = R_TWICE_PF if out.nbytes > PF_BYTES else R_TWICE
    else:
        route = R_NEAREST
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, x, out_size, ratios, *args):
    """The Route the fast backend's resize op `op` takes for arguments (x, out_size, ratios,
    *args), as passed to that entry point."""
    x = np.asarray(x)
    if op not in ("upsample_nearest", "upsample_bilinear"):
        raise ValueError(f"plan: unknown resize op {op!r}")
    out = np.empty(x.shape[:2] + tuple(out_size), x.dtype)
    return _plan(op == "upsample_bilinear", x, out, tuple(out_size), tuple(ratios),
                 bool(args[0]))


cdef extern from "qops_resize.h":
    void qops_double_bytes(const uint8_t* src, uint8_t* dst, Py_ssize_t n, int copies,
                           Py_ssize_t stride, int pf) nogil
    void qops_bilinear2x_plane(const uint8_t* x, uint8_t* out, Py_ssize_t H, Py_ssize_t W,
                               int sgn, uint8_t* pad, int16_t* hb) nogil


cdef inline void _nearest_plane(const qint_t* x, qint_t* o, Py_ssize_t H, Py_ssize_t W,
                                Py_ssize_t OH, Py_ssize_t OW, const int32_t* hi,
                                const int32_t* wi, int twice) noexcept nogil:
    # One output plane from one input plane (pointers, so the row loops vectorize). Output
    # rows with the same source row are runs: the row is made once and stored `run` times.
    cdef Py_ssize_t oh = 0, ow, run, k
    cdef const qint_t* src
    while oh < OH:
        run = 1
        while oh + run < OH and hi[oh + run] == hi[oh]:
            run += 1
        src = x + hi[oh] * W
        if twice and qint_t is not int32_t:
            qops_double_bytes(<const uint8_t*>src, <uint8_t*>o, W, <int>run, OW, twice == 2)
        else:
            for ow in range(OW):
                o[ow] = src[wi[ow]]
            for k in range(1, run):
                memcpy(o + k * OW, o, OW * sizeof(qint_t))
        o += run * OW
        oh += run


cdef void _nearest_rows(const qint_t* x, qint_t* out, Py_ssize_t N, Py_ssize_t C, Py_ssize_t D,
                        Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                        const int32_t* di, const int32_t* hi, const int32_t* wi, int twice,
                        int nthreads) noexcept nogil:
    cdef Py_ssize_t planes = N * C * OD, p, od
    for p in prange(planes, schedule="static", num_threads=nthreads):
        od = p % OD
        _nearest_plane(x + ((p // OD) * D + di[od]) * H * W, out + p * OH * OW, H, W, OH, OW,
                       hi, wi, twice)


def upsample_nearest(x, out_size, ratios, exact):
    """Nearest-neighbour resize: a gather of raw values."""
    x = np.ascontiguousarray(x)
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    route = _plan(False, x, out, out_size, ratios, exact)
    if route is R_EMPTY:
        return out
    di, hi, wi = (_nearest_index(o, L, r, exact) for o, L, r in zip(out_size, x.shape[2:], ratios))
    W = x.shape[4]
    # twice: 0 a gather, 1 the exact 2x row kernel, 2 the same with prefetching (large outputs)
    twice = 2 if route is R_TWICE_PF else (1 if route is R_TWICE else 0)
    nt = qops_threads_for(out.size, GRAIN)
    N, C, D, H, _ = x.shape
    OD, OH, OW = shape[2:]
    cdef const int32_t* dp = <const int32_t*>qops_ptr(di)
    cdef const int32_t* hp = <const int32_t*>qops_ptr(hi)
    cdef const int32_t* wp = <const int32_t*>qops_ptr(wi)
    if x.dtype.itemsize == 1:      # uint8 and int8: the same bytes either way
        _nearest_rows[uint8_t](<const uint8_t*>qops_ptr(x), <uint8_t*>qops_ptr(out, True),
                               N, C, D, H, W, OD, OH, OW, dp, hp, wp, twice, nt)
    else:
        _nearest_rows[int32_t](<const int32_t*>qops_ptr(x), <int32_t*>qops_ptr(out, True),
                               N, C, D, H, W, OD, OH, OW, dp, hp, wp, twice, nt)
    return out


def _linear_source(out_len, in_len, ratio, align_corners):
    dst = np.arange(out_len).astype(np.float32)
    r = np.float32(ratio)
    if align_corners:
        src = r * dst
    else:
        src = np.maximum(r * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = src.astype(np.int64)
    step = (i0 < in_len - 1).astype(np.int64)
    l1 = src - i0.astype(np.float32)
    l0 = np.float32(1) - l1
    return i0.astype(np.int32), (i0 + step).astype(np.int32), l1, l0


cdef inline void _hblend(const q8_t* src, float* f, float* dst, const int32_t* w0,
                         const int32_t* w1, const float* m0, const float* m1, Py_ssize_t W,
                         Py_ssize_t OW) noexcept nogil:
    # One input row blended along W: dst[ow] = m0*p[w0] + m1*p[w1] (float32, two roundings
    # for the products, one for the sum). The row goes to float first so the gathers are
    # float gathers, which AVX2/AVX-512 have.
    cdef Py_ssize_t w, ow
    for w in range(W):
        f[w] = <float>src[w]
    for ow in range(OW):
        dst[ow] = m0[ow] * f[w0[ow]] + m1[ow] * f[w1[ow]]


cdef void _bilinear_planes(const q8_t[:, :, ::1] x, q8_t[:, :, ::1] out,
                           const int32_t[::1] h0, const int32_t[::1] h1,
                           const float[::1] l1, const float[::1] l0,
                           const int32_t[::1] w0, const int32_t[::1] w1,
                           const float[::1] m1, const float[::1] m0,
                           float zpf, float qmin, float qmax, int nthreads) noexcept nogil:
    cdef Py_ssize_t P = x.shape[0], W = x.shape[2], OH = out.shape[1], OW = out.shape[2]
    cdef Py_ssize_t p, oh, ow, top, bot
    cdef float* frow = NULL
    cdef float* bufs = NULL
    cdef float* a
    cdef float* b
    cdef Py_ssize_t* tags = NULL
    cdef q8_t* o
    cdef float v, la, lb
    with parallel(num_threads=nthreads):
        frow = <float*>malloc(W * sizeof(float))
        bufs = <float*>malloc(2 * OW * sizeof(float))
        # which input rows the two blended-row buffers hold; behind a pointer because prange
        # resets its private scalars every iteration
        tags = <Py_ssize_t*>malloc(2 * sizeof(Py_ssize_t))
        for p in prange(P, schedule="static"):
            tags[0] = -1
            tags[1] = -1
            for oh in range(OH):
                top = h0[oh]
                bot = h1[oh]
                # each input row is blended along W once and reused by the output rows
                # that need it (two per input row when upsampling by 2)
                if tags[0] == top:
                    a = bufs
                elif tags[1] == top:
                    a = bufs + OW
                else:
                    if tags[0] != bot:
                        a = bufs
                        tags[0] = top
                    else:
                        a = bufs + OW
                        tags[1] = top
                    _hblend(&x[p, top, 0], frow, a, &w0[0], &w1[0], &m0[0], &m1[0], W, OW)
                if tags[0] == bot:
                    b = bufs
                elif tags[1] == bot:
                    b = bufs + OW
                else:
                    if a != bufs:
                        b = bufs
                        tags[0] = bot
                    else:
                        b = bufs + OW
                        tags[1] = bot
                    _hblend(&x[p, bot, 0], frow, b, &w0[0], &w1[0], &m0[0], &m1[0], W, OW)
                la = l0[oh]
                lb = l1[oh]
                o = &out[p, oh, 0]
                for ow in range(OW):
                    v = (la * a[ow] + lb * b[ow]) - zpf
                    # Q_leg with scale ratio 1: zero point added back before rounding
                    o[ow] = <q8_t><int32_t>qops_clampf(qops_rintf(v + zpf), qmin, qmax)
        free(frow)
        free(bufs)
        free(tags)


cdef void _bilinear2x_planes(const uint8_t* x, uint8_t* out, Py_ssize_t P, Py_ssize_t H,
                             Py_ssize_t W, int sgn, int nthreads) noexcept nogil:
    cdef Py_ssize_t p
    cdef uint8_t* pad = NULL
    cdef int16_t* hb = NULL
    with parallel(num_threads=nthreads):
        pad = <uint8_t*>malloc(W + 2 + 64)
        hb = <int16_t*>malloc(3 * (2 * W + 64) * sizeof(int16_t))
        for p in prange(P, schedule="static"):
            qops_bilinear2x_plane(x + p * H * W, out + p * 4 * H * W, H, W, sgn, pad, hb)
        free(pad)
        free(hb)


def upsample_bilinear(x, out_size, ratios, align_corners, zero_point):
    """Bilinear resize of (N, C, 1, H, W) as PyTorch's NCHW kernel, output qparams = input's."""
    x = np.ascontiguousarray(x)
    n, c, _, H, W = x.shape
    OH, OW = out_size[1], out_size[2]
    out = qops_empty(np, (n, c, 1, OH, OW), x.dtype)
    route = _plan(True, x, out, out_size, ratios, align_corners)
    if route is R_EMPTY:
        return out
    if route is R_BL_X2:
        _bilinear2x_planes(<const uint8_t*>qops_ptr(x), <uint8_t*>qops_ptr(out, True), n * c,
                           H, W, x.dtype.kind == "i", qops_threads_for(out.size, GRAIN))
        return out
    h0, h1, l1, l0 = _linear_source(OH, H, ratios[1], align_corners)
    w0, w1, m1, m0 = _linear_source(OW, W, ratios[2], align_corners)
    info = np.iinfo(x.dtype)
    nt = qops_threads_for(out.size, GRAIN)
    x3 = x.reshape(n * c, H, W)
    o3 = out.reshape(n * c, OH, OW)
    if x.dtype == np.uint8:
        _bilinear_planes[uint8_t](x3, o3, h0, h1, l1, l0, w0, w1, m1, m0, zero_point,
                                  info.min, info.max, nt)
    else:
        _bilinear_planes[int8_t](x3, o3, h0, h1, l1, l0, w0, w1, m1, m0, zero_point,
                                 info.min, info.max, nt)
    return out
