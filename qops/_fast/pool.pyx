"""Pooling kernels (mirror of qops/_ref/pool.py).

Raw uint8/int8 (int32 for max pools) in (N, C, D, H, W), same dtype out. Max pools compare
raw values; average pools sum exactly in int32 and requantize in float32 (rint half to even)
with the reference's formulas.

This file holds the family's routes and its one plan function; the kernels are in include
files by op, textually part of this module: pool_common.pxi (the row-range runner and scratch
slots the routes share), pool_tables.pxi (average pools' requantize tables), pool_max.pxi,
pool_avg.pxi, pool_adaptive.pxi, pool_cl.pxi (channels-last), with the C declarations in
_pool.pxd. Why includes rather than separate extension modules: the pieces share cdef
functions, structs and enums (_plan, _Rows, _slots, the fused _fold_max). Between modules
Cython shares those only through a .pxd whose dotted name is the module's import path, but
every family is built once per instruction set under its own package (qops._fast._avx2.pool),
so no cimport could name the right one; each extra module would also be one more import per
ISA. Includes keep one module, `qops._fast._<isa>.pool`, exposing the same functions.
"""
# Which kernel runs is decided in one place, plan() below: it returns a named Route, every
# entry point calls it, and qops.show_config(op, *args) reports it (qops/_show.py). The
# routes and where their code lives:
#   simd_rows     8-bit max/average pools with W stride 1 or 2: the vector kernels over
#                 contiguous ranges of output rows, one per thread (qops_pool_rows.h; AVX2
#                 rows or AVX-512 column walks).
#   rows, planes  the scalar paths (int32, other strides, huge windows): the taps of a window
#                 along D and H folded into a row buffer covering the whole padded input width
#                 (stride-1 loops GCC vectorizes), then the W window slid over that buffer;
#                 average pools run over whole (n, c, od) output planes so the requantize
#                 loop runs over a plane (pool_max.pxi, pool_avg.pxi, pool_adaptive.pxi).
#   indices       max pools returning indices: a plain scan keeping the first maximum
#                 (pool_max.pxi, pool_adaptive.pxi).
#   cl            channels-last (N, D, H, W, C) inputs: pool_cl.h. qops/_ops/pool.py sends
#                 inputs lying channels last in memory (max pools without indices) to the
#                 *_cl entry points, whose plan is that one route.
#   global        adaptive average pools to 1x1(x1): one contiguous sum per plane.
# AVX-512 builds only: short (adaptive pools, and max pools whose W windows tile rows of at
# most 64 bytes), short_pairs and avg2x2 (pair-tiling average pools), avg3 (3-tap stride-1
# average pools), vbmi_s2 (stride-2 max pools with byte permutes). Average pools with odd or
# power-of-two divisors requantize there with integer tables (_int_tables in
# pool_tables.pxi) checked against the float formula for every reachable sum.
import numpy as np
from qops._fast._routes import Route, TRACE, trace_routes as _trace_routes
from cython.parallel cimport prange, parallel, threadid
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from qops._fast._common cimport *
from qops._fast._pool cimport *

DEF GRAIN = 32768         # input elements read per thread below which one thread is enough
DEF GLOBAL_GRAIN = 131072    # bytes summed per thread below which one thread is enough


# -- module state -------------------------------------------------------------------------

cdef class _State:
    """The pool family's run-time switches, in one object (no module-level globals)."""
    cdef public bint vbmi      # max pools use their VBMI kernel (the tests switch it off)


cdef _State _S = _State()
_S.vbmi = QP_SHORT and qp_cpu_vbmi()     # the CPU has VBMI and this build AVX-512 kernels
cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py


def _use_vbmi(on=None):
    """Whether max pools use their VBMI kernel; `on` switches it (it stays off where the CPU
    lacks VBMI), for the tests to run both kernels. Returns the previous setting."""
    was = _S.vbmi
    if on is not None:
        _S.vbmi = bool(on) and QP_SHORT and qp_cpu_vbmi()
    return was


# -- routes -------------------------------------------------------------------------------

_TIER = ("AVX-512 column walks", "qops_pool_avx512_cols.h") if QP_SIMD == 2 else (
    ("AVX2 rows", "qops_pool_avx2.h") if QP_SIMD == 1 else ("none in this build", "-"))

# every route of the family: (name, kernel, file, built here); the test table covers them all
ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "pool.pyx"),
    Route("max_pool.short", "qp_short_rows", "qops_pool_avx512_short.h"),
    Route("max_pool.vbmi_s2", "qp_max_s2_rows", "qops_pool_avx512_vbmi.h"),
    Route("max_pool.simd_rows", f"qp_max_rows ({_TIER[0]})", _TIER[1]),
    Route("max_pool.indices", "_max_indices", "pool_max.pxi"),
    Route("max_pool.rows", "_max_rows", "pool_max.pxi"),
    Route("max_pool_cl.cl", "qpc_max_row", "pool_cl.h"),
    Route("avg_pool.avg2x2", "qp_avg2x2_rows", "qops_pool_avx512_short.h"),
    Route("avg_pool.short_pairs", "qp_short_avg_rows", "qops_pool_avx512_short.h"),
    Route("avg_pool.avg3", "qp_avg3_rows", "qops_pool_avx512_avg3.h"),
    Route("avg_pool.simd_rows", f"qp_avg_rows ({_TIER[0]})", _TIER[1]),
    Route("avg_pool.planes", "_avg_planes", "pool_avg.pxi"),
    Route("avg_pool_cl.cl", "qpc_avg_row", "pool_cl.h"),
    Route("adaptive_avg_pool.global", "qops_run_means", "reduce_sum.h"),
    Route("adaptive_avg_pool.short", "qp_short_rows", "qops_pool_avx512_short.h"),
    Route("adaptive_avg_pool.planes", "_adaptive_avg_planes", "pool_adaptive.pxi"),
    Route("adaptive_avg_pool_cl.cl", "qpc_avg_row", "pool_cl.h"),
    Route("adaptive_max_pool.indices", "_adaptive_max_rows", "pool_adaptive.pxi"),
    Route("adaptive_max_pool.short", "qp_short_rows", "qops_pool_avx512_short.h"),
    Route("adaptive_max_pool.planes", "_amax_planes", "pool_adaptive.pxi"),
]}


def _built_here(name):
    # the AVX-512 routes need this build's AVX-512 kernels (vbmi_s2 also a CPU with VBMI),
    # simd_rows a vector tier
    if name == "max_pool.vbmi_s2":
        return bool(QP_SHORT and qp_cpu_vbmi())
    if "avx512" in ROUTES[name].where:
        return bool(QP_SHORT)
    if name.endswith(".simd_rows"):
        return QP_SIMD > 0
    return True


BUILT = frozenset(n for n in ROUTES if _built_here(n))     # the routes this build can take

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_MAX_SHORT = ROUTES["max_pool.short"]
cdef object R_MAX_S2 = ROUTES["max_pool.vbmi_s2"]
cdef object R_MAX_SIMD = ROUTES["max_pool.simd_rows"]
cdef object R_MAX_IDX = ROUTES["max_pool.indices"]
cdef object R_MAX_ROWS = ROUTES["max_pool.rows"]
cdef object R_MAX_CL = ROUTES["max_pool_cl.cl"]
cdef object R_AVG_2X2 = ROUTES["avg_pool.avg2x2"]
cdef object R_AVG_PAIRS = ROUTES["avg_pool.short_pairs"]
cdef object R_AVG3 = ROUTES["avg_pool.avg3"]
cdef object R_AVG_SIMD = ROUTES["avg_pool.simd_rows"]
cdef object R_AVG_PLANES = ROUTES["avg_pool.planes"]
cdef object R_AVG_CL = ROUTES["avg_pool_cl.cl"]
cdef object R_AAVG_GLOBAL = ROUTES["adaptive_avg_pool.global"]
cdef object R_AAVG_SHORT = ROUTES["adaptive_avg_pool.short"]
cdef object R_AAVG_PLANES = ROUTES["adaptive_avg_pool.planes"]
cdef object R_AAVG_CL = ROUTES["adaptive_avg_pool_cl.cl"]
cdef object R_AMAX_IDX = ROUTES["adaptive_max_pool.indices"]
cdef object R_AMAX_SHORT = ROUTES["adaptive_max_pool.short"]
cdef object R_AMAX_PLANES = ROUTES["adaptive_max_pool.planes"]


cdef tuple _ONE = (1, 1, 1)
cdef tuple _ZERO = (0, 0, 0)


cdef enum _Op:
    OP_MAX
    OP_AVG
    OP_AAVG
    OP_AMAX
    OP_MAX_CL
    OP_AVG_CL
    OP_AAVG_CL

_OPS = {"max_pool": OP_MAX, "avg_pool": OP_AVG, "adaptive_avg_pool": OP_AAVG,
        "adaptive_max_pool": OP_AMAX, "max_pool_cl": OP_MAX_CL, "avg_pool_cl": OP_AVG_CL,
        "adaptive_avg_pool_cl": OP_AAVG_CL}


cdef object _plan(_Op op, x, tuple out_size, tuple k, tuple s, tuple p, tuple d,
                  bint with_indices, object tabs, const Py_ssize_t* lim):
    """The Route of one pool call: every kernel choice of the family, in one place.

    op: the entry point (_OPS); x: the (N, C, D, H, W) input ((N, D, H, W, C) for the _cl
    ops); out_size (OD, OH, OW); k, s, p, d: kernel, stride, padding, dilation (D, H, W);
    with_indices: max pools' flag; tabs: avg_pool's tables (_pool_tables); lim: adaptive
    pools' windows (d0, d1, h0, h1, w0, w1)."""
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    cdef tuple shape = x.shape
    cdef bint cl = op >= OP_MAX_CL                    # x is (N, D, H, W, C)
    cdef Py_ssize_t W = shape[3] if cl else shape[4]
    cdef Py_ssize_t C = shape[4] if cl else shape[1]
    cdef Py_ssize_t N = shape[0]
    cdef Py_ssize_t kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW
    cdef bint byte = (op == OP_MAX or op == OP_AMAX) and x.itemsize == 1
    cdef bint simd = False          # the simd_rows kernels take the W stride
    if op == OP_MAX or op == OP_AVG:
        kD, kH, kW = k
        sD, sH, sW = s
        pD, pH, pW = p
        dD, dH, dW = d
        simd = QP_SIMD > 0 and (sW == 1 or sW == 2)
    route = None
    if N * C * OD * OH * OW == 0:
        route = R_EMPTY
    elif op == OP_MAX:
        if with_indices:
            route = R_MAX_IDX
        elif (byte and QP_SHORT and dD == dH == dW == 1 and pW == 0 and sW == kW
                and kW in (2, 4, 8) and OW * kW == W <= 64):
            # windows tiling short rows (3-d 2x2x2 pools on 56-wide planes): each row reduced
            # in place, no column walk over several planes
            route = R_MAX_SHORT
        elif (byte and _S.vbmi and sW == 2 and kW <= 3 and dH == dW == 1 and kD == sD == 1
                and pD == 0 and W <= 128 and OW <= 64):
            # stride-2 columns of rows up to two vectors (3x3/2 and 2x2/2 on 112-wide planes)
            route = R_MAX_S2
        elif byte and simd and kD * kH <= QP_MAX_ROWS and kW <= QP_MAX_ROWS:
            route = R_MAX_SIMD
        else:
            route = R_MAX_ROWS
    elif op == OP_AVG:
        it, t3, uniform = tabs[3], tabs[4], tabs[5]
        if (QP_SHORT and it is not None and kD == sD == 1 and kH == sH == kW == sW == 2
                and pH == pW == 0 and OW * 2 == W <= 64 and OH * 2 == shape[3]
                and shape[2] == 1 and uniform):
            # 2-d 2x2 stride-2 pools on short rows, every window full and one divisor: a flat
            # stream of row pairs
            route = R_AVG_2X2
        elif QP_SHORT and kW == sW == 2 and pW == 0 and OW * 2 == W <= 64 and kD * kH <= 128:
            # W windows of pairs tiling short rows (2x2 stride-2 pools on 56-wide planes, 3-d
            # 2x2x2): each input row reduced in place
            route = R_AVG_PAIRS
        elif t3 is not None and kD * kH <= QP_MAX_ROWS and kH <= 64 and kD * kH * 3 <= 256:
            # 3-tap stride-1 windows (3x3 stride-1 pools, 1-d 3-tap pools): 64 outputs per
            # chunk from three loads
            route = R_AVG3
        elif simd and kD * kH <= QP_MAX_ROWS and kW <= QP_MAX_ROWS and kD * kH * kW <= 256:
            # 16-bit window sums are exact up to 256 taps
            route = R_AVG_SIMD
        else:
            route = R_AVG_PLANES
    elif op == OP_AAVG:
        if OD == 1 and OH == 1 and OW == 1:
            route = R_AAVG_GLOBAL
        elif _short_ok(lim, OD, OH, OW, W, True):
            route = R_AAVG_SHORT
        else:
            route = R_AAVG_PLANES
    elif op == OP_AMAX:
        if with_indices:
            route = R_AMAX_IDX
        elif byte and _short_ok(lim, OD, OH, OW, W, False):
            route = R_AMAX_SHORT
        else:
            route = R_AMAX_PLANES
    elif op == OP_MAX_CL:
        route = R_MAX_CL
    elif op == OP_AVG_CL:
        route = R_AVG_CL
    else:
        route = R_AAVG_CL
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, x, *args):
    """The Route the fast backend's pool op `op` takes for arguments (x, *args), as passed to
    that entry point (e.g. plan("max_pool", x5, k, s, p, d, out_size, False))."""
    x = np.asarray(x)
    if op not in _OPS:
        raise ValueError(f"plan: unknown pool op {op!r}; one of {sorted(_OPS)}")
    cdef _Op o_ = _OPS[op]
    if op in ("max_pool", "max_pool_cl"):
        k, s, p, d, o = args[:5]
        return _plan(o_, x, tuple(o), tuple(k), tuple(s), tuple(p), tuple(d),
                     bool(args[5]) if len(args) > 5 else False, None, NULL)
    if op in ("avg_pool", "avg_pool_cl"):
        k, s, p, o, cip, div, zp = args
        tabs = (_pool_tables(x, k, s, p, o, cip, div, zp) if op == "avg_pool" else None)
        return _plan(o_, x, tuple(o), tuple(k), tuple(s), tuple(p), _ONE, False, tabs, NULL)
    o = tuple(args[0])
    if op == "adaptive_avg_pool":
        lim_a, _ = _adaptive_tables(o, x.shape[2:])
        return _plan(o_, x, o, _ONE, _ONE, _ZERO, _ONE, False, None,
                     <const Py_ssize_t*>qops_ptr(lim_a))
    if op == "adaptive_max_pool":
        lim_a = _adaptive_max_lim(o, x.shape[2:])
        return _plan(o_, x, o, _ONE, _ONE, _ZERO, _ONE, bool(args[1]), None,
                     <const Py_ssize_t*>qops_ptr(lim_a))
    return _plan(o_, x, o, _ONE, _ONE, _ZERO, _ONE, False, None, NULL)


# -- the kernels, by op (see the docstring) ---------------------------------------------------

include "pool_common.pxi"
include "pool_tables.pxi"
include "pool_max.pxi"
include "pool_avg.pxi"
include "pool_adaptive.pxi"
include "pool_cl.pxi"
