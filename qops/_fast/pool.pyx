# Pooling kernels (mirror of qops/_ref/pool.py): raw uint8/int8 (int32 for max pools) in
# (N, C, D, H, W), same dtype out. Max pools compare raw values; average pools sum exactly in
# int32 and requantize in float32 (rint half to even) with the reference's formulas.
#
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
#                 loop runs over a plane. Here, in pool.pyx.
#   indices       max pools returning indices: a plain scan keeping the first maximum.
#   cl            channels-last (N, D, H, W, C) inputs: pool_cl.h. qops/_ops/pool.py sends
#                 inputs lying channels last in memory (max pools without indices) to the
#                 *_cl entry points, whose plan is that one route.
#   global        adaptive average pools to 1x1(x1): one contiguous sum per plane.
# AVX-512 builds only: short (adaptive pools, and max pools whose W windows tile rows of at
# most 64 bytes), short_pairs and avg2x2 (pair-tiling average pools), avg3 (3-tap stride-1
# average pools), vbmi_s2 (stride-2 max pools with byte permutes). Average pools with odd or
# power-of-two divisors requantize there with integer tables (_int_tables) checked against the
# float formula for every reachable sum.
import numpy as np
from collections import namedtuple
from cython.parallel cimport prange, parallel, threadid
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from qops._fast._common cimport *

DEF GRAIN = 32768         # input elements read per thread below which one thread is enough
DEF GLOBAL_GRAIN = 131072    # bytes summed per thread below which one thread is enough

cdef extern from "qops_pool.h" nogil:
    # opaque here: qops_pool_common.h declares the fields, the *_init functions fill them
    ctypedef struct qp_geom:
        pass
    ctypedef struct qp_irq:
        pass
    ctypedef struct qp_avgq:
        pass
    void qp_geom_init(qp_geom* g, Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD,
                      Py_ssize_t OH, Py_ssize_t OW, const Py_ssize_t* k, const Py_ssize_t* s,
                      const Py_ssize_t* p, const Py_ssize_t* d)
    void qp_irq_init(qp_irq* iq, const int16_t* t, Py_ssize_t stride, int sh, int kind)
    void qp_avgq_init(qp_avgq* aq, const int32_t* cls, const int32_t* zt, const float* mt,
                      float zp, const qp_irq* iq)
    void qp_short_lim(const qp_geom* g, Py_ssize_t* lim)
    int QP_SIMD
    int QP_SHORT
    int QP_AVG3
    int QP_MAX_ROWS
    int QP_ERR_NOMEM
    int qp_cpu_vbmi()
    int qp_max_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                    Py_ssize_t g1, int sgn)
    int qp_avg_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                    Py_ssize_t g1, const int32_t* cls, const int32_t* zt, const float* mt,
                    float zp, int32_t qmin, int32_t qmax, int sgn, const qp_irq* iq)
    void qp_avg3_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                      Py_ssize_t g1, const int32_t* cls, const qp_irq* iq, Py_ssize_t ow3,
                      int cmp, int sgn)
    void qp_max_s2_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                        Py_ssize_t g1, int sgn)
    void qp_avg2x2_rows_g(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                          Py_ssize_t g1, int sgn, const qp_irq* iq, Py_ssize_t cz)
    int qp_short_avg_rows_g(const uint8_t* x, uint8_t* out, const qp_geom* g,
                            const Py_ssize_t* lim, Py_ssize_t g0, Py_ssize_t g1, int sgn,
                            const qp_avgq* aq)
    int qp_short_rows_g(const uint8_t* x, uint8_t* out, const qp_geom* g, const Py_ssize_t* lim,
                        const float* recip, Py_ssize_t g0, Py_ssize_t g1, int avg, int sgn)
    void qp_fold_max128(const uint8_t* x, Py_ssize_t W, Py_ssize_t rows, uint8_t* buf, int first,
                        int sgn)
    void qp_row_u8(int32_t* a, const uint8_t* s, Py_ssize_t n, int first)
    void qp_row_s8(int32_t* a, const int8_t* s, Py_ssize_t n, int first)
    float floorf(float)
    float ceilf(float)

cdef extern from "reduce_sum.h" nogil:
    void qops_run_means(const uint8_t* x, uint8_t* out, Py_ssize_t r0, Py_ssize_t r1,
                        Py_ssize_t n, int is_signed, float mul, float div)

cdef extern from "pool_cl.h" nogil:
    void qpc_avg_row(const void* x, void* out, int sgn, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                     Py_ssize_t OW, Py_ssize_t d0, Py_ssize_t d1, Py_ssize_t h0, Py_ssize_t h1,
                     const Py_ssize_t* w0, const Py_ssize_t* w1, const int32_t* sub,
                     const float* mul, float add, float post, float qmin, float qmax)
    void qpc_max_row(const void* const* rows, void* out, int kind, Py_ssize_t W, Py_ssize_t C,
                     Py_ssize_t OW, Py_ssize_t sW, Py_ssize_t pW, Py_ssize_t kW, Py_ssize_t dW,
                     Py_ssize_t nrows)


# -- module state -------------------------------------------------------------------------

cdef class _State:
    """The pool family's run-time switches, in one object (no module-level globals)."""
    cdef public bint vbmi      # max pools use their VBMI kernel (the tests switch it off)
    cdef public object trace   # a list collecting the Route of every call, or None


cdef _State _S = _State()
_S.vbmi = QP_SHORT and qp_cpu_vbmi()     # the CPU has VBMI and this build AVX-512 kernels
_S.trace = None


def _use_vbmi(on=None):
    """Whether max pools use their VBMI kernel; `on` switches it (it stays off where the CPU
    lacks VBMI), for the tests to run both kernels. Returns the previous setting."""
    was = _S.vbmi
    if on is not None:
        _S.vbmi = bool(on) and QP_SHORT and qp_cpu_vbmi()
    return was


def _trace_routes(routes):
    """Append the Route of every following call to list `routes` (None: stop). For
    qops._show.explain."""
    _S.trace = routes


# -- routes -------------------------------------------------------------------------------

Route = namedtuple("Route", "name kernel where")
Route.__doc__ = """The kernel a pool call runs: name "<op>.<route>", the function, its file."""

_TIER = ("AVX-512 column walks", "qops_pool_avx512_cols.h") if QP_SIMD == 2 else (
    ("AVX2 rows", "qops_pool_avx2.h") if QP_SIMD == 1 else ("none in this build", "-"))

# every route of the family: (name, kernel, file, built here); the test table covers them all
ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "pool.pyx"),
    Route("max_pool.short", "qp_short_rows", "qops_pool_avx512_short.h"),
    Route("max_pool.vbmi_s2", "qp_max_s2_rows", "qops_pool_avx512_vbmi.h"),
    Route("max_pool.simd_rows", f"qp_max_rows ({_TIER[0]})", _TIER[1]),
    Route("max_pool.indices", "_max_indices", "pool.pyx"),
    Route("max_pool.rows", "_max_rows", "pool.pyx"),
    Route("max_pool_cl.cl", "qpc_max_row", "pool_cl.h"),
    Route("avg_pool.avg2x2", "qp_avg2x2_rows", "qops_pool_avx512_short.h"),
    Route("avg_pool.short_pairs", "qp_short_avg_rows", "qops_pool_avx512_short.h"),
    Route("avg_pool.avg3", "qp_avg3_rows", "qops_pool_avx512_avg3.h"),
    Route("avg_pool.simd_rows", f"qp_avg_rows ({_TIER[0]})", _TIER[1]),
    Route("avg_pool.planes", "_avg_planes", "pool.pyx"),
    Route("avg_pool_cl.cl", "qpc_avg_row", "pool_cl.h"),
    Route("adaptive_avg_pool.global", "qops_run_means", "reduce_sum.h"),
    Route("adaptive_avg_pool.short", "qp_short_rows", "qops_pool_avx512_short.h"),
    Route("adaptive_avg_pool.planes", "_adaptive_avg_planes", "pool.pyx"),
    Route("adaptive_avg_pool_cl.cl", "qpc_avg_row", "pool_cl.h"),
    Route("adaptive_max_pool.indices", "_adaptive_max_rows", "pool.pyx"),
    Route("adaptive_max_pool.short", "qp_short_rows", "qops_pool_avx512_short.h"),
    Route("adaptive_max_pool.planes", "_amax_planes", "pool.pyx"),
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
    if _S.trace is not None:
        _S.trace.append(route)
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


# -- shared helpers -----------------------------------------------------------------------

cdef enum _Kern:
    K_MAX_ROWS
    K_AVG_ROWS
    K_AVG3
    K_MAX_S2
    K_AVG2X2
    K_SHORT_AVG
    K_SHORT


cdef struct _Rows:
    # the arguments of one row-range kernel call (the fields a kernel does not take unused)
    const uint8_t* x
    uint8_t* out
    const qp_geom* g
    const int32_t* cls
    const int32_t* zt
    const float* mt
    float zp
    int32_t qmin
    int32_t qmax
    int sgn
    int avg
    const qp_irq* iq
    const qp_avgq* aq
    const Py_ssize_t* lim
    const float* recip
    Py_ssize_t cz
    Py_ssize_t ow3
    int cmp


cdef int _rows(_Kern kern, const _Rows* a, Py_ssize_t g0, Py_ssize_t g1) noexcept nogil:
    # output rows [g0, g1) by kernel kern; 0, or the kernel's QP_ERR_* flags
    if kern == K_MAX_ROWS:
        return qp_max_rows(a.x, a.out, a.g, g0, g1, a.sgn)
    if kern == K_AVG_ROWS:
        return qp_avg_rows(a.x, a.out, a.g, g0, g1, a.cls, a.zt, a.mt, a.zp, a.qmin, a.qmax,
                           a.sgn, a.iq)
    if kern == K_AVG3:
        qp_avg3_rows(a.x, a.out, a.g, g0, g1, a.cls, a.iq, a.ow3, a.cmp, a.sgn)
    elif kern == K_MAX_S2:
        qp_max_s2_rows(a.x, a.out, a.g, g0, g1, a.sgn)
    elif kern == K_AVG2X2:
        qp_avg2x2_rows_g(a.x, a.out, a.g, g0, g1, a.sgn, a.iq, a.cz)
    elif kern == K_SHORT_AVG:
        return qp_short_avg_rows_g(a.x, a.out, a.g, a.lim, g0, g1, a.sgn, a.aq)
    elif kern == K_SHORT:
        return qp_short_rows_g(a.x, a.out, a.g, a.lim, a.recip, g0, g1, a.avg, a.sgn)
    return 0


cdef int _split_rows(_Kern kern, const _Rows* a, Py_ssize_t rows, int nt) noexcept nogil:
    # one contiguous range of output rows per thread: the kernels' per-call cost stays tiny.
    # Returns 0, or the kernels' QP_ERR_* flags (or-ed) when some rows were not written.
    cdef Py_ssize_t t
    cdef int err = 0
    if nt <= 1:
        return _rows(kern, a, 0, rows)
    for t in prange(nt, schedule="static", num_threads=nt):
        err |= _rows(kern, a, rows * t // nt, rows * (t + 1) // nt)
    return err


cdef object _run_rows(_Kern kern, _Rows* a, x, out, int nt):
    # _split_rows over every output row of out (rows of OW outputs) from x's buffer
    a.x = <const uint8_t*>qops_ptr(x)
    a.out = <uint8_t*>qops_ptr(out, True)
    cdef Py_ssize_t rows = out.size // out.shape[4]
    cdef int err
    with nogil:
        err = _split_rows(kern, a, rows, nt)
    if err & QP_ERR_NOMEM:
        raise MemoryError()
    if err:
        raise RuntimeError(f"pool: the vector kernel refused this geometry (status {err})")
    return out


cdef void* _slots(int nt, size_t nbytes, size_t* slot) noexcept nogil:
    # one block of per-thread scratch slots (rounded to 64 bytes), allocated before a parallel
    # region; slot t starts at block + t * slot[0]. NULL when it cannot be had.
    slot[0] = (nbytes + 63) & ~(<size_t>63)
    return malloc((nt if nt > 1 else 1) * slot[0] if slot[0] else 64)


cdef qp_geom _geom(x, out, k, s, p, d):
    cdef qp_geom g
    cdef Py_ssize_t kk[3]
    cdef Py_ssize_t ss[3]
    cdef Py_ssize_t pp[3]
    cdef Py_ssize_t dd[3]
    kk[:] = [k[0], k[1], k[2]]
    ss[:] = [s[0], s[1], s[2]]
    pp[:] = [p[0], p[1], p[2]]
    dd[:] = [d[0], d[1], d[2]]
    qp_geom_init(&g, x.shape[2], x.shape[3], x.shape[4], out.shape[2], out.shape[3],
                 out.shape[4], kk, ss, pp, dd)
    return g


cdef bint _short_ok(const Py_ssize_t* lim, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                    Py_ssize_t W, bint avg) noexcept nogil:
    # the short-row kernel's limits: rows of one vector, 16-bit window sums of <= 256 taps
    cdef Py_ssize_t i, kd = 0, kh = 0, kw = 0
    if not QP_SHORT or W > 64 or OW > 32:
        return False
    for i in range(OD):
        kd = max(kd, lim[OD + i] - lim[i])
    for i in range(OH):
        kh = max(kh, lim[2 * OD + OH + i] - lim[2 * OD + i])
    for i in range(OW):
        kw = max(kw, lim[2 * OD + 2 * OH + OW + i] - lim[2 * OD + 2 * OH + i])
    return not avg or kd * kh * kw <= 256


cdef void _axis_counts(Py_ssize_t O, Py_ssize_t s, Py_ssize_t p, Py_ssize_t k, Py_ssize_t L,
                       int64_t* size, int64_t* pool) noexcept nogil:
    # as _avg_window of qops/_ref/pool.py: window start o*s - p, end min(start + k, L + p),
    # pool = end - start, size = end - start clipped to [0, L)
    cdef Py_ssize_t o, a, b
    for o in range(O):
        a = o * s - p
        b = min(a + k, L + p)
        pool[o] = b - a
        size[o] = min(b, L) - max(a, 0)


def _avg_tables(out_size, stride, padding, kernel_size, in_size, bint cip, int64_t div_o,
                int64_t zp):
    """Row classes of an average pool: cls[od*OH + oh] indexes rows of zt = size*zp and
    mt = f32(1.0 / div) over ow; consecutive output rows with the same D*H window counts share
    a class (only edge rows differ), so the tables stay small and cost O(classes * OW)."""
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    cdef Py_ssize_t od, oh, ow, n = 0, r
    cdef int64_t vs, vp, ls = -1, lp = -1, dv
    cdef int64_t* cnt = <int64_t*>malloc(2 * (OD + OH + OW) * sizeof(int64_t))
    if cnt == NULL:
        raise MemoryError()
    cdef int64_t* ds = cnt
    cdef int64_t* dp = cnt + OD
    cdef int64_t* hs = cnt + 2 * OD
    cdef int64_t* hp = hs + OH
    cdef int64_t* ws = hs + 2 * OH
    cdef int64_t* wp = ws + OW
    _axis_counts(OD, stride[0], padding[0], kernel_size[0], in_size[0], ds, dp)
    _axis_counts(OH, stride[1], padding[1], kernel_size[1], in_size[1], hs, hp)
    _axis_counts(OW, stride[2], padding[2], kernel_size[2], in_size[2], ws, wp)
    cls = np.empty(OD * OH, np.int32)
    cdef int32_t* c = <int32_t*>qops_ptr(cls, True)
    for od in range(OD):
        for oh in range(OH):
            vs = ds[od] * hs[oh]
            vp = dp[od] * hp[oh]
            if vs != ls or vp != lp:
                n += 1
                ls, lp = vs, vp
            c[od * OH + oh] = <int32_t>(n - 1)
    # 32 spare entries past the end: the vector requantize loads whole 16-lane rows
    zt = np.zeros(n * OW + 32, np.int32)[:n * OW].reshape(n, OW)
    mt = np.zeros(n * OW + 32, np.float32)[:n * OW].reshape(n, OW)
    sz = np.empty((n, OW), np.int64)
    dvs = np.empty((n, OW), np.int64)
    cdef int32_t* z = <int32_t*>qops_ptr(zt, True)
    cdef float* m = <float*>qops_ptr(mt, True)
    cdef int64_t* szv = <int64_t*>qops_ptr(sz, True)
    cdef int64_t* dvv = <int64_t*>qops_ptr(dvs, True)
    r = -1
    ls = lp = -1
    for od in range(OD):
        for oh in range(OH):
            vs = ds[od] * hs[oh]
            vp = dp[od] * hp[oh]
            if vs == ls and vp == lp:
                continue
            ls, lp = vs, vp
            r += 1
            for ow in range(OW):
                dv = div_o if div_o else (vp * wp[ow] if cip else vs * ws[ow])
                z[r * OW + ow] = <int32_t>(vs * ws[ow] * zp)
                m[r * OW + ow] = <float>(1.0 / <double>dv)          # f32(1.0 / div)
                szv[r * OW + ow] = vs * ws[ow]
                dvv[r * OW + ow] = dv
    free(cnt)
    return cls, zt, mt, sz, dvs


def _int_tables(sz, dvs, int64_t zp, bint sgn):
    """Integer requantize tables (qp_irq of qops_pool_common.h) equal to the float formula
    clampQ(rint(f32(f32(s - size*zp) * f32(1/div)) + f32(zp))) for every reachable window sum
    s, checked here sum by sum: (int16 table (3, entries + 64), shift, kind), or None (the
    float path runs).

    kind 0, odd divisors: the exact quotient never ends in .5, so rounding to nearest is
    floor((s - size*zp + (div-1)/2) / div), and floor(x / div) is
    mulhi(x, ceil(2**(16+sh) / div)) >> sh for the x that occur.
    kind 1, divisors 2**k: f32(1/div) is exact and so is the float sum, so the formula is
    t / 2**k rounded half to even with t = s - size*zp + div*zp, in shifts (see qp_irq).
    Other even divisors have ties the float products round either way: None."""
    cdef int64_t qmin = -128 if sgn else 0, qmax = 127 if sgn else 255
    pairs = sorted(set(zip(sz.ravel().tolist(), dvs.ravel().tolist())))
    if any(d <= 0 for _, d in pairs):
        return None
    if all((d & (d - 1)) == 0 for _, d in pairs):
        return _pow2_tables(sz, dvs, pairs, zp, qmin, qmax)
    if any(d % 2 == 0 for _, d in pairs):
        return None
    for sh in range(8):
        params = {}
        for size, d in pairs:
            lo, hi, z = qmin * size, qmax * size, size * zp
            a = lo - z + (d - 1) // 2
            b = a % d
            M = -(-(1 << (16 + sh)) // d)
            e = zp - (b - a) // d
            if M > 0xFFFF or hi - lo + b > 0xFFFF or not -32768 <= e <= 32767:
                break
            c = (b - lo) & 0xFFFF
            s = np.arange(lo, hi + 1, dtype=np.int64)
            ref = _float_ref(s, size, d, zp, qmin, qmax)
            v = ((((s & 0xFFFF) + c) & 0xFFFF) * M >> (16 + sh)) + e
            v = ((v + 32768) & 0xFFFF) - 32768                      # int16 lanes
            if not np.array_equal(np.clip(v, qmin, qmax), ref):
                break
            params[size, d] = (c, M, e & 0xFFFF)
        else:
            return _table(sz, dvs, params), sh, 0
    return None


def _float_ref(s, int64_t size, int64_t d, int64_t zp, int64_t qmin, int64_t qmax):
    # the reference's formula for window sums s (int64 array)
    ref = np.rint((s - size * zp).astype(np.float32) * np.float32(1.0 / d) + np.float32(zp))
    return np.clip(ref, qmin, qmax)


def _table(sz, dvs, params):
    # (3, entries + 64) int16: per output the three values of its (size, div) pair
    tab = np.zeros((3, sz.size + 64), np.uint16)
    for i, (size, d) in enumerate(zip(sz.ravel().tolist(), dvs.ravel().tolist())):
        tab[:, i] = params[size, d]
    return tab.view(np.int16)


def _pow2_tables(sz, dvs, pairs, int64_t zp, int64_t qmin, int64_t qmax):
    """kind 1 tables (c, k, h): x = s + c, q = (x + h + ((x >> k) & min(k, 1))) >> k in int16
    lanes (arithmetic shifts), c = (div - size)*zp, h = 2**(k-1) - 1 (0 for k = 0): round
    half to even of x / 2**k; checked for every reachable sum, None if any differs."""
    params = {}
    for size, d in pairs:
        k = d.bit_length() - 1
        c = (d - size) * zp
        h = (1 << k >> 1) - 1 if k else 0
        s = np.arange(qmin * size, qmax * size + 1, dtype=np.int64)
        x = s + c
        # every intermediate must be the true value in int16 lanes (sums wrap modulo 2**16)
        if x.min() < -32768 or x.max() + h + 1 > 32767:
            return None
        v = (x + h + ((x >> k) & min(k, 1))) >> k
        if not np.array_equal(np.clip(v, qmin, qmax), _float_ref(s, size, d, zp, qmin, qmax)):
            return None
        params[size, d] = (c & 0xFFFF, k, h)
    return _table(sz, dvs, params), 0, 1


# -- max pool -----------------------------------------------------------------------------

cdef inline void _hmax(const qint_t* v, qint_t* o, Py_ssize_t OW, Py_ssize_t kW, Py_ssize_t sW,
                       Py_ssize_t dW) noexcept nogil:
    # Sliding max along W; strides 1 and 2 get loops with constant strides GCC vectorizes.
    cdef Py_ssize_t ow, k
    cdef const qint_t* vk
    cdef qint_t a, b
    if sW == 1:
        for ow in range(OW):
            o[ow] = v[ow]
        for k in range(1, kW):
            vk = v + k * dW
            for ow in range(OW):
                a = o[ow]
                b = vk[ow]
                o[ow] = a if a > b else b
    elif sW == 2:
        for ow in range(OW):
            o[ow] = v[2 * ow]
        for k in range(1, kW):
            vk = v + k * dW
            for ow in range(OW):
                a = o[ow]
                b = vk[2 * ow]
                o[ow] = a if a > b else b
    else:
        for ow in range(OW):
            o[ow] = v[sW * ow]
        for k in range(1, kW):
            vk = v + k * dW
            for ow in range(OW):
                a = o[ow]
                b = vk[sW * ow]
                o[ow] = a if a > b else b


cdef inline void _fold_max(qint_t* buf, const qint_t* src, Py_ssize_t W, bint first) noexcept nogil:
    # buf = src (the window's first row) or max(buf, src): the vertical half of a max window.
    cdef Py_ssize_t w
    cdef qint_t a, b
    if first:
        memcpy(buf, src, W * sizeof(qint_t))
        return
    for w in range(W):
        a = buf[w]
        b = src[w]
        buf[w] = a if a > b else b


cdef int _max_rows(const qint_t* x, qint_t* out, Py_ssize_t planes, Py_ssize_t D, Py_ssize_t H,
                   Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kD,
                   Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH, Py_ssize_t sW,
                   Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t dD, Py_ssize_t dH,
                   Py_ssize_t dW, Py_ssize_t Wp, qint_t lowest, int nthreads) noexcept nogil:
    # Each thread's padded row buffer is a slot of one block allocated before the parallel
    # region; returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t rows = planes * OD * OH
    cdef Py_ssize_t r, i, w, kd, kh, idd, ih, od, oh, plane
    cdef int first
    cdef size_t slot
    cdef qint_t* vbuf = NULL
    cdef qint_t* vrow = NULL
    cdef char* block = <char*>_slots(nthreads, Wp * sizeof(qint_t), &slot)
    if block == NULL:
        return -1
    i = 0
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        vbuf = <qint_t*>(block + threadid() * slot)
        # padded slots stay at the dtype's lowest value, so they never win a max
        for i in range(Wp):
            vbuf[i] = lowest
        vrow = vbuf + pW
        for r in prange(rows, schedule="static"):
            oh = r % OH
            od = (r // OH) % OD
            plane = r // (OH * OD)
            first = 1
            for kd in range(kD):
                idd = od * sD - pD + kd * dD
                if idd < 0 or idd >= D:
                    continue
                for kh in range(kH):
                    ih = oh * sH - pH + kh * dH
                    if ih < 0 or ih >= H:
                        continue
                    _fold_max(vrow, x + ((plane * D + idd) * H + ih) * W, W, first)
                    first = 0
            if first:
                for w in range(W):
                    vrow[w] = lowest
            _hmax(vbuf, out + r * OW, OW, kW, sW, dW)
    free(block)
    return 0


cdef void _max_indices(const qint_t* x, qint_t* out, int64_t* index, Py_ssize_t planes,
                       Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH,
                       Py_ssize_t OW, Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD,
                       Py_ssize_t sH, Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW,
                       Py_ssize_t dD, Py_ssize_t dH, Py_ssize_t dW, qint_t lowest,
                       int nthreads) noexcept nogil:
    # With indices: a plain scan of each window in (d, h, w) order, keeping the first maximum.
    cdef Py_ssize_t rows = planes * OD * OH
    cdef Py_ssize_t r, ow, kd, kh, kw, idd, ih, iw, od, oh, best_i
    cdef const qint_t* xp
    cdef int found
    cdef qint_t best, v
    for r in prange(rows, schedule="static", num_threads=nthreads):
        oh = r % OH
        od = (r // OH) % OD
        xp = x + (r // (OH * OD)) * D * H * W
        for ow in range(OW):
            best = lowest
            best_i = 0
            found = 0
            for kd in range(kD):
                idd = od * sD - pD + kd * dD
                if idd < 0 or idd >= D:
                    continue
                for kh in range(kH):
                    ih = oh * sH - pH + kh * dH
                    if ih < 0 or ih >= H:
                        continue
                    for kw in range(kW):
                        iw = ow * sW - pW + kw * dW
                        if iw < 0 or iw >= W:
                            continue
                        v = xp[(idd * H + ih) * W + iw]
                        if found == 0 or v > best:
                            best = v
                            best_i = (idd * H + ih) * W + iw
                            found = 1
            out[r * OW + ow] = best
            index[r * OW + ow] = best_i


cdef int _max_cl(const qint_t* x, qint_t* out, Py_ssize_t N, Py_ssize_t D, Py_ssize_t H,
                 Py_ssize_t W, Py_ssize_t C, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                 Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH,
                 Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t dD,
                 Py_ssize_t dH, Py_ssize_t dW, int nt) noexcept nogil:
    # One output row (n, od, oh) per work item: the window's valid input rows (D and H taps)
    # are listed, then pool_cl.h takes each pixel's max over them in 64-byte registers
    # (rather than taking each tap's max through an output row in memory). The row lists are
    # per-thread slots of one block allocated before the parallel region; returns -1, nothing
    # written, if it cannot be had.
    cdef Py_ssize_t r, n, od, oh, i, j, id_, ih, nr
    cdef int kind = 2 if qint_t is int32_t else (1 if qint_t is int8_t else 0)
    cdef size_t slot
    cdef const qint_t** rows = NULL
    cdef char* block = <char*>_slots(nt, kD * kH * sizeof(qint_t*), &slot)
    if block == NULL:
        return -1
    with parallel(num_threads=nt if nt > 1 else 1):
        rows = <const qint_t**>(block + threadid() * slot)
        for r in prange(N * OD * OH, schedule="static"):
            n = r // (OD * OH)
            od = r // OH - n * OD
            oh = r - (n * OD + od) * OH
            nr = 0
            for i in range(kD):
                id_ = od * sD - pD + i * dD
                if id_ < 0 or id_ >= D:
                    continue
                for j in range(kH):
                    ih = oh * sH - pH + j * dH
                    if 0 <= ih < H:
                        rows[nr] = x + ((n * D + id_) * H + ih) * W * C
                        nr = nr + 1
            qpc_max_row(<const void* const*>rows, out + r * OW * C, kind, W, C, OW, sW, pW, kW,
                        dW, nr)
    free(block)
    return 0


def max_pool_cl(x, kernel_size, stride, padding, dilation, out_size):
    """max_pool (without indices) of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, C)."""
    x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW) = kernel_size, stride
    (pD, pH, pW), (dD, dH, dW) = padding, dilation
    N, D, H, W, C = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (N, OD, OH, OW, C), x.dtype)
    if _plan(OP_MAX_CL, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, False, None,
             NULL) is R_EMPTY:
        return out
    nt = qops_threads_for(x.size + out.size * kW, GRAIN)
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    if x.dtype == np.uint8:
        err = _max_cl[uint8_t](xp, op, N, D, H, W, C, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD,
                               pH, pW, dD, dH, dW, nt)
    elif x.dtype == np.int8:
        err = _max_cl[int8_t](<const int8_t*>xp, <int8_t*>op, N, D, H, W, C, OD, OH, OW, kD, kH,
                              kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, nt)
    else:
        err = _max_cl[int32_t](<const int32_t*>xp, <int32_t*>op, N, D, H, W, C, OD, OH, OW, kD,
                               kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, nt)
    if err:
        raise MemoryError()
    return out


def max_pool(x, kernel_size, stride, padding, dilation, out_size, with_indices):
    """Max of raw values over the valid (non-padded) taps of each dilated window."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW) = kernel_size, stride
    (pD, pH, pW), (dD, dH, dW) = padding, dilation
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    route = _plan(OP_MAX, x, tuple(out_size), tuple(kernel_size), tuple(stride),
                  tuple(padding), tuple(dilation), with_indices, None, NULL)
    if route is R_EMPTY:
        return (out, np.zeros(shape, np.int64)) if with_indices else out
    cdef bint sgn = x.dtype.kind == "i"
    nt = qops_threads_for(out.size * kD * kH * max(kW, 1) if with_indices
                          else x.size + out.size * kW, GRAIN)
    cdef qp_geom g
    cdef _Rows a
    cdef int64_t* ip
    if route is R_MAX_SHORT or route is R_MAX_S2 or route is R_MAX_SIMD:
        g = _geom(x, out, kernel_size, stride, padding, dilation)
        a.g = &g
        a.sgn = sgn
        if route is R_MAX_SIMD:
            return _run_rows(K_MAX_ROWS, &a, x, out, nt)
        if route is R_MAX_S2:
            return _run_rows(K_MAX_S2, &a, x, out, nt)
        lim = np.empty(2 * (shape[2] + shape[3] + shape[4]), np.intp)
        a.lim = <const Py_ssize_t*>qops_ptr(lim, True)
        qp_short_lim(&g, <Py_ssize_t*>a.lim)
        a.recip = NULL
        a.avg = 0
        return _run_rows(K_SHORT, &a, x, out, nt)
    cdef Py_ssize_t planes = shape[0] * shape[1]
    cdef Py_ssize_t D = x.shape[2], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = shape[2], OH = shape[3], OW = shape[4]
    cdef const char* xp = qops_ptr(x)
    cdef char* op = qops_ptr(out, True)
    lo = -(1 << 31) if x.itemsize == 4 else (-128 if sgn else 0)
    if route is R_MAX_IDX:
        index = np.empty(shape, dtype=np.int64)
        ip = <int64_t*>qops_ptr(index, True)
        if x.dtype == np.uint8:
            _max_indices[uint8_t](<const uint8_t*>xp, <uint8_t*>op, ip, planes, D, H, W, OD, OH,
                                  OW, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        elif x.dtype == np.int8:
            _max_indices[int8_t](<const int8_t*>xp, <int8_t*>op, ip, planes, D, H, W, OD, OH,
                                 OW, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        else:
            _max_indices[int32_t](<const int32_t*>xp, <int32_t*>op, ip, planes, D, H, W, OD, OH,
                                  OW, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        return out, index
    Wp = max(W + 2 * pW, (OW - 1) * sW + (kW - 1) * dW + 1)
    if x.dtype == np.uint8:
        err = _max_rows[uint8_t](<const uint8_t*>xp, <uint8_t*>op, planes, D, H, W, OD, OH, OW,
                                 kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    elif x.dtype == np.int8:
        err = _max_rows[int8_t](<const int8_t*>xp, <int8_t*>op, planes, D, H, W, OD, OH, OW,
                                kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    else:
        err = _max_rows[int32_t](<const int32_t*>xp, <int32_t*>op, planes, D, H, W, OD, OH, OW,
                                 kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    if err:
        raise MemoryError()
    return out


# -- average pool -------------------------------------------------------------------------

cdef int _avg_planes(const q8_t* x, q8_t* out, Py_ssize_t planes, Py_ssize_t D, Py_ssize_t H,
                     Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                     Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH,
                     Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t Wp,
                     const float* mult, const int32_t* szp, int32_t zp, float qmin, float qmax,
                     int nthreads) noexcept nogil:
    # One (n, c, od) output plane per iteration: window sums of every row go to a plane-sized
    # buffer, then one long requantize loop over the plane (rows alone are too short to fill
    # 512-bit vectors). mult[od, oh, ow] = f32(1/div) and szp = size*zp are prepared per call.
    # Each thread's row and plane buffers are slots of one block allocated before the parallel
    # region; returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t nplanes = planes * OD, area = OH * OW
    cdef Py_ssize_t p, i, j, w, ow, k, idd, ih, od, d0, d1, h0, h1, oh
    cdef int first
    cdef int32_t* vbuf = NULL
    cdef int32_t* vrow = NULL
    cdef int32_t* sums = NULL
    cdef int32_t* hs
    cdef const q8_t* src
    cdef const q8_t* base
    cdef const int32_t* vk
    cdef const float* m
    cdef const int32_t* z
    cdef q8_t* o
    cdef float zpf = <float>zp, t
    cdef Py_ssize_t wpr = (Wp + 15) & ~(<Py_ssize_t>15)
    cdef size_t slot
    cdef char* block = <char*>_slots(nthreads, (wpr + area) * sizeof(int32_t), &slot)
    if block == NULL:
        return -1
    i = 0
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        vbuf = <int32_t*>(block + threadid() * slot)
        sums = vbuf + wpr
        for i in range(Wp):
            vbuf[i] = 0          # padding adds nothing to a sum
        vrow = vbuf + pW
        for p in prange(nplanes, schedule="static"):
            od = p % OD
            base = x + (p // OD) * D * H * W
            d0 = max(od * sD - pD, 0)
            d1 = min(od * sD - pD + kD, D)
            for oh in range(OH):
                h0 = max(oh * sH - pH, 0)
                h1 = min(oh * sH - pH + kH, H)
                first = 1
                for idd in range(d0, d1):
                    for ih in range(h0, h1):
                        src = base + (idd * H + ih) * W
                        if first:
                            for w in range(W):
                                vrow[w] = src[w]
                            first = 0
                        else:
                            for w in range(W):
                                vrow[w] = vrow[w] + src[w]
                hs = sums + oh * OW
                for ow in range(OW):
                    hs[ow] = vbuf[sW * ow]
                for k in range(1, kW):
                    vk = vbuf + k
                    if sW == 1:
                        for ow in range(OW):
                            hs[ow] = hs[ow] + vk[ow]
                    elif sW == 2:
                        for ow in range(OW):
                            hs[ow] = hs[ow] + vk[2 * ow]
                    else:
                        for ow in range(OW):
                            hs[ow] = hs[ow] + vk[sW * ow]
            o = out + p * area
            m = mult + od * area
            z = szp + od * area
            for j in range(area):
                # Q_leg with m = f32(1/div): zero point added before rounding
                t = <float>(sums[j] - z[j]) * m[j]
                o[j] = <q8_t><int32_t>qops_clampf(qops_rintf(t + zpf), qmin, qmax)
    free(block)
    return 0


def _split_tables(tab, Py_ssize_t classes, Py_ssize_t OW):
    """The integer tables de-interleaved for the 3-tap kernel: each class row padded to whole
    64-output chunks, each chunk's 32 even outputs first, then its 32 odd ones. Returns the
    table, a class row's length and 1 if the rows keep only their first, one inner and last
    chunk (more than three chunks whose inner ones are all equal: long 1-d rows), else 0."""
    cdef Py_ssize_t nc = (OW + 63) // 64
    t = np.zeros((3, classes, nc * 64), np.int16)
    t[:, :, :OW] = tab[:, :classes * OW].reshape(3, classes, OW)
    t = t.reshape(3, classes, nc, 32, 2).transpose(0, 1, 2, 4, 3)
    t = t.reshape(3, classes, nc, 64)
    cmp = nc > 3 and bool((t[:, :, 1:nc - 1] == t[:, :, 1:2]).all())
    if cmp:
        t = t[:, :, [0, 1, nc - 1]]
    n = t.shape[1] * t.shape[2] * 64
    out = np.zeros((3, n + 64), np.int16)
    out[:, :n] = t.reshape(3, n)
    return out, t.shape[2] * 64, int(cmp)


_TABLES = {}

def _pool_tables(x, kernel_size, stride, padding, out_size, count_include_pad,
                 divisor_override, zero_point):
    """avg_pool's tables, kept per geometry and zero point (models call the same pool often):
    (cls, zt, mt) of _avg_tables, the integer tables it (or None), their 3-tap form t3 (or
    None), and whether every window has one divisor (the flat 2x2 kernel needs one row)."""
    cdef bint sgn = x.dtype.kind == "i"
    key = (tuple(out_size), tuple(stride), tuple(padding), tuple(kernel_size), x.shape[2:],
           bool(count_include_pad), divisor_override, zero_point, sgn)
    tabs = _TABLES.get(key)
    if tabs is not None:
        return tabs
    kD, kH, kW = kernel_size
    cls, zt, mt, sz, dvs = _avg_tables(out_size, stride, padding, kernel_size, x.shape[2:],
                                       count_include_pad, divisor_override, zero_point)
    it = None
    if QP_SHORT and kD * kH * kW <= 256:
        # only the AVX-512 kernels use them (QP_SHORT: this build has those)
        it = _int_tables(sz, dvs, zero_point, sgn)
    t3 = None
    if it is not None and QP_AVG3 and kW == 3 and stride[2] == 1:
        t3 = _split_tables(it[0], zt.shape[0], out_size[2])
    tabs = cls, zt, mt, it, t3, bool((cls == cls[0]).all())
    if len(_TABLES) >= 64:
        _TABLES.clear()
    _TABLES[key] = tabs
    return tabs


def avg_pool(x, kernel_size, stride, padding, out_size, count_include_pad, divisor_override,
             zero_point):
    """Average pool: exact integer window sums, requantized as PyTorch's NCHW avg_pool2d."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW), (pD, pH, pW) = kernel_size, stride, padding
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    tabs = None
    if out.size:
        tabs = _pool_tables(x, kernel_size, stride, padding, out_size, count_include_pad,
                            divisor_override, zero_point)
    route = _plan(OP_AVG, x, tuple(out_size), tuple(kernel_size), tuple(stride),
                  tuple(padding), _ONE, False, tabs, NULL)
    if route is R_EMPTY:
        return out
    cls, zt, mt, it, t3, uniform = tabs
    cdef bint sgn = x.dtype.kind == "i"
    cdef int32_t qmin = -128 if sgn else 0
    cdef int32_t qmax = 127 if sgn else 255
    nt = qops_threads_for(x.size * kD + out.size * kW, GRAIN)
    cdef qp_irq iq
    cdef qp_avgq aq
    cdef qp_geom g = _geom(x, out, kernel_size, stride, padding, (1, 1, 1))
    cdef _Rows a
    qp_irq_init(&iq, NULL, 0, 0, 0)
    if it is not None:
        qp_irq_init(&iq, <const int16_t*>qops_ptr(it[0]), it[0].shape[1], it[1], it[2])
    a.g = &g
    a.sgn = sgn
    a.iq = &iq
    if route is R_AVG_2X2:
        a.cz = <Py_ssize_t>cls[0] * out_size[2]
        return _run_rows(K_AVG2X2, &a, x, out, nt)
    if route is R_AVG_PAIRS:
        lim = np.empty(2 * (shape[2] + shape[3] + shape[4]), np.intp)
        a.lim = <const Py_ssize_t*>qops_ptr(lim, True)
        qp_short_lim(&g, <Py_ssize_t*>a.lim)
        qp_avgq_init(&aq, <const int32_t*>qops_ptr(cls), <const int32_t*>qops_ptr(zt),
                     <const float*>qops_ptr(mt), <float>zero_point, &iq)
        a.aq = &aq
        return _run_rows(K_SHORT_AVG, &a, x, out, nt)
    if route is R_AVG3:
        qp_irq_init(&iq, <const int16_t*>qops_ptr(t3[0]), t3[0].shape[1], it[1], it[2])
        a.cls = <const int32_t*>qops_ptr(cls)
        a.ow3 = t3[1]
        a.cmp = t3[2]
        return _run_rows(K_AVG3, &a, x, out, nt)
    if route is R_AVG_SIMD:
        a.cls = <const int32_t*>qops_ptr(cls)
        a.zt = <const int32_t*>qops_ptr(zt)
        a.mt = <const float*>qops_ptr(mt)
        a.zp = <float>zero_point
        a.qmin = qmin
        a.qmax = qmax
        return _run_rows(K_AVG_ROWS, &a, x, out, nt)
    Wp = max(x.shape[4] + 2 * pW, (shape[4] - 1) * sW + kW)
    mult = mt[cls]
    szp = zt[cls]
    cdef Py_ssize_t planes = shape[0] * shape[1]
    cdef Py_ssize_t D = x.shape[2], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = shape[2], OH = shape[3], OW = shape[4]
    cdef const float* mp = <const float*>qops_ptr(mult)
    cdef const int32_t* zp_ = <const int32_t*>qops_ptr(szp)
    if not sgn:
        err = _avg_planes[uint8_t](<const uint8_t*>qops_ptr(x), <uint8_t*>qops_ptr(out, True),
                                   planes, D, H, W, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD, pH,
                                   pW, Wp, mp, zp_, zero_point, qmin, qmax, nt)
    else:
        err = _avg_planes[int8_t](<const int8_t*>qops_ptr(x), <int8_t*>qops_ptr(out, True),
                                  planes, D, H, W, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD, pH,
                                  pW, Wp, mp, zp_, zero_point, qmin, qmax, nt)
    if err:
        raise MemoryError()
    return out


# -- adaptive pools -----------------------------------------------------------------------

cdef int _adaptive_avg_planes(const uint8_t* x, uint8_t* out, Py_ssize_t planes,
                              Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                              Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                              const Py_ssize_t* lim, const float* recip, int sgn,
                              int nthreads) noexcept nogil:
    # One (n, c, od) output plane per iteration: the rows of each (od, oh) window are added
    # into a W-long row buffer, the W windows summed from it into a plane buffer, then one
    # rounding loop over the plane. lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW].
    # The buffers are per-thread slots of one block allocated before the parallel region;
    # returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t area = OH * OW, HW = H * W
    cdef Py_ssize_t p, i, w, ow, idd, ih, od, oh
    cdef Py_ssize_t wr = (W + 15) & ~(<Py_ssize_t>15)
    cdef int first
    cdef int32_t* vrow = NULL
    cdef int32_t* sums = NULL
    cdef int32_t s
    cdef const uint8_t* base
    cdef const uint8_t* src
    cdef const float* rc
    cdef uint8_t* o
    cdef const Py_ssize_t* d0 = lim
    cdef const Py_ssize_t* d1 = lim + OD
    cdef const Py_ssize_t* h0 = lim + 2 * OD
    cdef const Py_ssize_t* h1 = lim + 2 * OD + OH
    cdef const Py_ssize_t* w0 = lim + 2 * OD + 2 * OH
    cdef const Py_ssize_t* w1 = lim + 2 * OD + 2 * OH + OW
    cdef size_t slot
    cdef char* block = <char*>_slots(nthreads, (wr + area) * sizeof(int32_t), &slot)
    if block == NULL:
        return -1
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        vrow = <int32_t*>(block + threadid() * slot)
        sums = vrow + wr
        for p in prange(planes, schedule="static"):
            od = p % OD
            base = x + (p // OD) * D * HW
            for oh in range(OH):
                first = 1
                for idd in range(d0[od], d1[od]):
                    for ih in range(h0[oh], h1[oh]):
                        src = base + idd * HW + ih * W
                        if sgn:
                            qp_row_s8(vrow, <const int8_t*>src, W, first)
                        else:
                            qp_row_u8(vrow, src, W, first)
                        first = 0
                for ow in range(OW):
                    s = 0
                    for w in range(w0[ow], w1[ow]):
                        s = s + vrow[w]
                    sums[oh * OW + ow] = s
            o = out + p * area
            rc = recip + od * area
            if sgn:
                for i in range(area):
                    # raw values, no zero point, no clamp: an average is always in range
                    (<int8_t*>o)[i] = <int8_t><int32_t>qops_rintf(<float>sums[i] * rc[i])
            else:
                for i in range(area):
                    o[i] = <uint8_t><int32_t>qops_rintf(<float>sums[i] * rc[i])
    free(block)
    return 0


cdef void _plane_mean(const uint8_t* x, uint8_t* out, Py_ssize_t P, Py_ssize_t L, float recip,
                      int sgn, int nthreads) noexcept nogil:
    # Output 1x1(x1): one contiguous exact sum per (n, c) plane, rint(f32(f32(sum) * recip))
    # (the "/ 1" of reduce_sum.h's formula is exact); each thread a range of planes (whole
    # groups of 8, as qops_run_means takes them).
    cdef Py_ssize_t t, a, b
    if nthreads <= 1:
        qops_run_means(x, out, 0, P, L, sgn, recip, 1.0)
        return
    for t in prange(nthreads, schedule="static", num_threads=nthreads):
        a = (P * t // nthreads) // 8 * 8
        b = P if t == nthreads - 1 else (P * (t + 1) // nthreads) // 8 * 8
        qops_run_means(x, out, a, b, L, sgn, recip, 1.0)


def adaptive_avg_pool(x, out_size):
    """Adaptive average pool on raw values: out = rint(f32(f32(sum q) * r)), no zero point."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    cdef Py_ssize_t n, c, D, H, W, OD, OH, OW, P
    cdef float r
    cdef int sgn, nt, err
    n, c, D, H, W = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (n, c, OD, OH, OW), x.dtype)
    cdef const Py_ssize_t* lim = NULL
    cdef const float* recip = NULL
    cdef bint one = OD == 1 and OH == 1 and OW == 1
    if not one and n * c * OD * OH * OW:
        lim_a, recip_a = _adaptive_tables(out_size, (D, H, W))
        lim = <const Py_ssize_t*>qops_ptr(lim_a)
        recip = <const float*>qops_ptr(recip_a)
    route = _plan(OP_AAVG, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, False, None,
                  lim)
    if route is R_EMPTY:
        return out
    sgn = x.dtype.kind == "i"
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    P = n * c
    if route is R_AAVG_GLOBAL:
        # r = f32(f32(f32(1.0 / D) / H) / W), float32 arithmetic as the reference
        r = <float>1.0 / <float>D
        r = r / <float>H
        r = r / <float>W
        nt = qops_threads_for(P * D * H * W, GLOBAL_GRAIN)
        with nogil:
            _plane_mean(xp, op, P, D * H * W, r, sgn, nt)
        return out
    nt = qops_threads_for(n * c * D * H * W, GRAIN)
    cdef qp_geom g
    cdef _Rows a
    if route is R_AAVG_SHORT:
        g = _geom(x, out, (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1))
        a.g = &g
        a.lim = lim
        a.recip = recip
        a.avg = 1
        a.sgn = sgn
        return _run_rows(K_SHORT, &a, x, out, nt)
    with nogil:
        err = _adaptive_avg_planes(xp, op, P * OD, D, H, W, OD, OH, OW, lim, recip, sgn, nt)
    if err:
        raise MemoryError()
    return out


def _adaptive_tables(out_size, in_size):
    """An adaptive average pool's windows and multipliers: lim = d0[OD], d1[OD], h0[OH],
    h1[OH], w0[OW], w1[OW] with start = floor(f32(o*L) / f32(O)), end = ceil(f32((o+1)*L) /
    f32(O)), and recip[od, oh, ow] = f32(f32(f32(1.0 / kD) / kH) / kW) of the window lengths.
    Kept per geometry (models repeat a pool)."""
    key = (tuple(out_size), tuple(in_size))
    tabs = _ADAPTIVE_TABLES.get(key)
    if tabs is not None:
        return tabs
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    cdef Py_ssize_t O, L, i, j, k, off = 0
    lim_a = np.empty(2 * (OD + OH + OW), np.intp)
    recip_a = np.empty(OD * OH * OW, np.float32)
    cdef Py_ssize_t* lim = <Py_ssize_t*>qops_ptr(lim_a, True)
    cdef float* recip = <float*>qops_ptr(recip_a, True)
    cdef float r
    for O, L in zip(out_size, in_size):
        for i in range(O):
            lim[off + i] = <Py_ssize_t>floorf(<float>(i * L) / <float>O)
            lim[off + O + i] = <Py_ssize_t>ceilf(<float>((i + 1) * L) / <float>O)
        off += 2 * O
    cdef Py_ssize_t bh = 2 * OD, bw = 2 * OD + 2 * OH
    for i in range(OD):
        for j in range(OH):
            for k in range(OW):
                r = <float>1.0 / <float>(lim[OD + i] - lim[i])
                r = r / <float>(lim[bh + OH + j] - lim[bh + j])
                r = r / <float>(lim[bw + OW + k] - lim[bw + k])
                recip[(i * OH + j) * OW + k] = r
    if len(_ADAPTIVE_TABLES) >= 64:
        _ADAPTIVE_TABLES.clear()
    _ADAPTIVE_TABLES[key] = lim_a, recip_a
    return lim_a, recip_a


_ADAPTIVE_TABLES = {}


cdef void _adaptive_max_rows(const qint_t* x, qint_t* out, int64_t* index, Py_ssize_t planes,
                             Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD,
                             Py_ssize_t OH, Py_ssize_t OW, const Py_ssize_t* lim,
                             int nthreads) noexcept nogil:
    # A plain scan of each window in (d, h, w) order keeping the first maximum; lim as
    # _adaptive_max_lim.
    cdef Py_ssize_t rows = planes * OD * OH
    cdef Py_ssize_t r, ow, idd, ih, iw, od, oh, best_i
    cdef const Py_ssize_t* d0 = lim
    cdef const Py_ssize_t* d1 = lim + OD
    cdef const Py_ssize_t* h0 = lim + 2 * OD
    cdef const Py_ssize_t* h1 = lim + 2 * OD + OH
    cdef const Py_ssize_t* w0 = lim + 2 * OD + 2 * OH
    cdef const Py_ssize_t* w1 = lim + 2 * OD + 2 * OH + OW
    cdef const qint_t* xp
    cdef qint_t best, v
    for r in prange(rows, schedule="static", num_threads=nthreads):
        oh = r % OH
        od = (r // OH) % OD
        xp = x + (r // (OH * OD)) * D * H * W
        for ow in range(OW):
            best_i = (d0[od] * H + h0[oh]) * W + w0[ow]
            best = xp[best_i]
            for idd in range(d0[od], d1[od]):
                for ih in range(h0[oh], h1[oh]):
                    for iw in range(w0[ow], w1[ow]):
                        v = xp[(idd * H + ih) * W + iw]
                        if v > best:
                            best = v
                            best_i = (idd * H + ih) * W + iw
            out[r * OW + ow] = best
            index[r * OW + ow] = best_i


cdef inline void _amax_plane(const qint_t* xp, qint_t* o, qint_t* buf, Py_ssize_t H,
                             Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t d0,
                             Py_ssize_t d1, const Py_ssize_t* lim) noexcept nogil:
    # One (n, c, od) output plane: the window's rows max-folded into buf (stride-1 loops GCC
    # vectorizes), then the short W windows over buf. lim = h0[OH], h1[OH], w0[OW], w1[OW].
    cdef Py_ssize_t oh, ow, idd, ih, w
    cdef const Py_ssize_t* h0 = lim
    cdef const Py_ssize_t* h1 = lim + OH
    cdef const Py_ssize_t* w0 = lim + 2 * OH
    cdef const Py_ssize_t* w1 = lim + 2 * OH + OW
    cdef qint_t a, b
    cdef int first
    for oh in range(OH):
        first = 1
        for idd in range(d0, d1):
            if qint_t is not int32_t and QP_SHORT and W <= 128:
                qp_fold_max128(<const uint8_t*>(xp + (idd * H + h0[oh]) * W), W, h1[oh] - h0[oh],
                               <uint8_t*>buf, first, qint_t is int8_t)
                first = 0
                continue
            for ih in range(h0[oh], h1[oh]):
                _fold_max(buf, xp + (idd * H + ih) * W, W, first)
                first = 0
        for ow in range(OW):
            a = buf[w0[ow]]
            for w in range(w0[ow] + 1, w1[ow]):
                b = buf[w]
                a = a if a > b else b
            o[oh * OW + ow] = a




cdef int _amax_planes(const qint_t* x, qint_t* out, Py_ssize_t planes, Py_ssize_t D,
                      Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                      const Py_ssize_t* lim, int nthreads) noexcept nogil:
    # lim = d0[OD], d1[OD], then _amax_plane's h0, h1, w0, w1; one W-long buffer per thread,
    # slots of one block allocated before the parallel region (the short-row fold writes up
    # to 128 bytes); returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t p, od
    cdef size_t slot
    cdef qint_t* buf = NULL
    cdef char* block = <char*>_slots(nthreads, max(<size_t>W * sizeof(qint_t), <size_t>128), &slot)
    if block == NULL:
        return -1
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        buf = <qint_t*>(block + threadid() * slot)
        for p in prange(planes, schedule="static"):
            od = p % OD
            _amax_plane(x + (p // OD) * D * H * W, out + p * OH * OW, buf, H, W, OH, OW,
                        lim[od], lim[OD + od], lim + 2 * OD)
    free(block)
    return 0


def _adaptive_max_lim(out_size, in_size):
    """An adaptive max pool's windows [floor(o*L/O), ceil((o+1)*L/O)) in exact integers:
    lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW]."""
    cdef Py_ssize_t i, O, L, off = 0
    lim_a = np.empty(2 * sum(out_size), np.intp)
    cdef Py_ssize_t* lim = <Py_ssize_t*>qops_ptr(lim_a, True)
    for O, L in zip(out_size, in_size):
        for i in range(O):
            lim[off + i] = (i * L) // O
            lim[off + O + i] = ((i + 1) * L + O - 1) // O
        off += 2 * O
    return lim_a


def adaptive_max_pool(x, out_size, with_indices):
    """Adaptive max pool on raw values; windows as PyTorch's float adaptive max pool."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    cdef Py_ssize_t n, c, D, H, W
    n, c, D, H, W = x.shape
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    shape = (n, c, OD, OH, OW)
    out = qops_empty(np, shape, x.dtype)
    lim_a = _adaptive_max_lim(out_size, (D, H, W))
    cdef const Py_ssize_t* lim = <const Py_ssize_t*>qops_ptr(lim_a)
    route = _plan(OP_AMAX, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, with_indices,
                  None, lim)
    if route is R_EMPTY:
        return (out, np.empty(shape, np.int64)) if with_indices else out
    cdef int nt = qops_threads_for(x.size + out.size, GRAIN)
    cdef Py_ssize_t planes = n * c
    cdef char* xp = qops_ptr(x)
    cdef char* op = qops_ptr(out, True)
    cdef int64_t* ip
    cdef int err = 0, kind
    cdef qp_geom g
    cdef _Rows a
    if route is R_AMAX_IDX:
        index = np.empty(shape, dtype=np.int64)
        ip = <int64_t*>qops_ptr(index, True)
        kind = 2 if x.itemsize == 4 else (1 if x.dtype.kind == "i" else 0)
        with nogil:
            if kind == 2:
                _adaptive_max_rows[int32_t](<const int32_t*>xp, <int32_t*>op, ip, planes, D, H,
                                            W, OD, OH, OW, lim, nt)
            elif kind == 1:
                _adaptive_max_rows[int8_t](<const int8_t*>xp, <int8_t*>op, ip, planes, D, H, W,
                                           OD, OH, OW, lim, nt)
            else:
                _adaptive_max_rows[uint8_t](<const uint8_t*>xp, <uint8_t*>op, ip, planes, D, H,
                                            W, OD, OH, OW, lim, nt)
        return out, index
    if route is R_AMAX_SHORT:
        g = _geom(x, out, (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1))
        a.g = &g
        a.lim = lim
        a.recip = NULL
        a.avg = 0
        a.sgn = x.dtype.kind == "i"
        return _run_rows(K_SHORT, &a, x, out, nt)
    kind = 2 if x.itemsize == 4 else (1 if x.dtype.kind == "i" else 0)
    with nogil:
        if kind == 0:
            err = _amax_planes[uint8_t](<const uint8_t*>xp, <uint8_t*>op, planes * OD, D, H, W,
                                        OD, OH, OW, lim, nt)
        elif kind == 1:
            err = _amax_planes[int8_t](<const int8_t*>xp, <int8_t*>op, planes * OD, D, H, W, OD,
                                       OH, OW, lim, nt)
        else:
            err = _amax_planes[int32_t](<const int32_t*>xp, <int32_t*>op, planes * OD, D, H, W,
                                        OD, OH, OW, lim, nt)
    if err:
        raise MemoryError()
    return out


# -- channels-last average pools ----------------------------------------------------------

cdef void _avg_cl(const q8_t* x, q8_t* out, Py_ssize_t N, Py_ssize_t D, Py_ssize_t H,
                  Py_ssize_t W, Py_ssize_t C, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                  const Py_ssize_t* lim, const int32_t* sub, const float* mul, float add,
                  float post, float qmin, float qmax, int nt) noexcept nogil:
    # One output row (n, od, oh) per work item (pool_cl.h sums each pixel's window in
    # registers). lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW], clipped to the input.
    cdef Py_ssize_t r, n, od, oh
    cdef int sgn = q8_t is int8_t
    for r in prange(N * OD * OH, schedule="static", num_threads=nt):
        n = r // (OD * OH)
        od = r // OH - n * OD
        oh = r - (n * OD + od) * OH
        qpc_avg_row(x + n * D * H * W * C, out + r * OW * C, sgn, H, W, C, OW, lim[od],
                    lim[OD + od], lim[2 * OD + oh], lim[2 * OD + OH + oh],
                    lim + 2 * OD + 2 * OH, lim + 2 * OD + 2 * OH + OW,
                    sub + (od * OH + oh) * OW, mul + (od * OH + oh) * OW, add, post, qmin, qmax)


_CL_TABLES = {}


cdef object _avg_cl_run(_Op op, x, out_size, tables):
    """Run _avg_cl on x (N, D, H, W, C) with tables = (lim, sub, mul, add, post): the
    clipped windows per axis (d0, d1, h0, h1, w0, w1) and sub and mul per output (OD, OH,
    OW)."""
    cdef Py_ssize_t N, D, H, W, C, OD, OH, OW
    N, D, H, W, C = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (N, OD, OH, OW, C), x.dtype)
    if _plan(op, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, False, None, NULL) is R_EMPTY:
        return out
    lim_a, sub_a, mul_a, add_o, post_o = tables
    cdef float add = add_o, post = post_o
    cdef const Py_ssize_t* lim = <const Py_ssize_t*>qops_ptr(lim_a)
    cdef const int32_t* sp = <const int32_t*>qops_ptr(sub_a)
    cdef const float* mp = <const float*>qops_ptr(mul_a)
    cdef int nt = qops_threads_for(x.size + out.size, GRAIN)
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op_ = <uint8_t*>qops_ptr(out, True)
    if x.dtype == np.uint8:
        with nogil:
            _avg_cl[uint8_t](xp, op_, N, D, H, W, C, OD, OH, OW, lim, sp, mp, add, post, 0.0,
                             255.0, nt)
    else:
        with nogil:
            _avg_cl[int8_t](<const int8_t*>xp, <int8_t*>op_, N, D, H, W, C, OD, OH, OW, lim,
                            sp, mp, add, post, -128.0, 127.0, nt)
    return out


def _cl_tables(key, lim, sub, mul, add, post):
    """The kernel's tables as contiguous arrays, kept per geometry (models repeat a pool)."""
    tables = (np.ascontiguousarray(lim, dtype=np.intp), np.ascontiguousarray(sub, dtype=np.int32),
              np.ascontiguousarray(mul, dtype=np.float32), add, post)
    if len(_CL_TABLES) >= 64:
        _CL_TABLES.clear()
    _CL_TABLES[key] = tables
    return tables


def avg_pool_cl(x, kernel_size, stride, padding, out_size, count_include_pad, divisor_override,
                zero_point):
    """avg_pool of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, C), PyTorch's
    channels-last formula clampQ(rint(f32(f32(acc) * f32(1/div))) + zp)."""
    x = np.ascontiguousarray(x)
    key = ("avg", tuple(out_size), tuple(stride), tuple(padding), tuple(kernel_size),
           x.shape[1:4], bool(count_include_pad), divisor_override, zero_point)
    tables = _CL_TABLES.get(key)
    if tables is not None:
        return _avg_cl_run(OP_AVG_CL, x, out_size, tables)
    # windows clipped to the input: start = max(o*s - p, 0), end = min(o*s - p + k, L)
    lims = []
    for o, s, p, k, L in zip(out_size, stride, padding, kernel_size, x.shape[1:4]):
        start = np.arange(o, dtype=np.intp) * s - p
        lims += [np.maximum(start, 0), np.minimum(start + k, L)]
    # size*zp and f32(1/div) per output, as the C-order kernels' tables (rows by class); the
    # zero point added after rounding (post)
    cls, zt, mt, _, _ = _avg_tables(out_size, stride, padding, kernel_size, x.shape[1:4],
                                    count_include_pad, divisor_override, zero_point)
    return _avg_cl_run(OP_AVG_CL, x, out_size,
                       _cl_tables(key, np.concatenate(lims), zt[cls], mt[cls], 0.0,
                                  float(zero_point)))


def adaptive_avg_pool_cl(x, out_size, zero_point):
    """adaptive_avg_pool of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, C),
    PyTorch's channels-last formula clampQ(rint(f32(f32((sum - size*zp) * inv) + zp)))."""
    x = np.ascontiguousarray(x)
    key = ("adaptive", tuple(out_size), x.shape[1:4], zero_point)
    tables = _CL_TABLES.get(key)
    if tables is None:
        lim, _ = _adaptive_tables(out_size, x.shape[1:4])
        off = 0
        lens = []
        for O in out_size:
            lens.append(lim[off + O:off + 2 * O] - lim[off:off + O])
            off += 2 * O
        size = (lens[0][:, None, None] * lens[1][None, :, None] * lens[2][None, None, :]).ravel()
        # m = f32(1/size); inv = f32(1/f32(1/m)), the inverse of the scale PyTorch hands
        # its quantizer
        m = np.float32(1) / size.astype(np.float32)
        inv = np.float32(1) / (np.float32(1) / m)
        tables = _cl_tables(key, lim, size * zero_point, inv, float(zero_point), 0.0)
    return _avg_cl_run(OP_AAVG_CL, x, out_size, tables)
