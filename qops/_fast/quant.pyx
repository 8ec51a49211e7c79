# Quantize, dequantize and requantize kernels (mirror of qops/_ref/quant.py).
# Contract: float32 <-> uint8/int8/int32; IEEE float32 arithmetic, rint half to even; the
# primitives of qops_common.h (Q_fma, Q_leg, D_sc, D_pc) exactly as the reference states them.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES (<op>.<route>), every entry point calls it, and qops.show_config(op, *args) reports
# it (qops/_show.py). Per-tensor 8-bit ops run the vector kernels of qops_quant.h; int32 the
# scalar primitives; per-channel ops walk one channel's run per row (.channels), or, for runs
# shorter than PC_Q_RUN_MIN / PC_DQ_RUN_MIN, stream rows through position tables (.tables);
# dequantize_per_channel computes in float32 where that gives D_pc's bits (_f32).
from qops._fast._routes import Route, TRACE, trace_routes as _trace_routes
from math import prod

import numpy as np
from cython.parallel cimport prange
from qops._layout import memory_order
from qops._fast._common cimport *

cdef extern from "<string.h>" nogil:
    void* memcpy(void* dst, const void* src, size_t n)


DEF BLOCK = 4096          # elements per parallel chunk: whole cache lines, enough work per thread
DEF GRAIN = 32768         # below this many elements a second thread costs more than it gives
# Per channel: runs of one channel shorter than these go through position tables. The
# dequantize kernel's 16-wide body holds up to runs of 16; quantize's loop, whose tail is
# scalar, falls behind the tables below runs of 128.
DEF PC_Q_RUN_MIN = 128
DEF PC_DQ_RUN_MIN = 16
DEF PC_TABLE = 2048       # positions a table covers at least (rows shorter repeat in it)


# The loops over elements live in small functions taking raw pointers: inside a prange body,
# memoryview fields are shared state GCC must reload after every store, which blocks
# vectorization; function arguments are private and the loops vectorize.

cdef extern from "qops_quant.h":
    void qops_quantize_fma(const float* x, uint8_t* out, Py_ssize_t n, float inv, float zpf,
                           float qmin, float qmax) nogil
    void qops_dequantize_pc8(const uint8_t* q, float* out, Py_ssize_t n, double s, int32_t zp,
                             int sgn) nogil
    void qops_dequantize_sc8(const uint8_t* q, float* out, Py_ssize_t n, float s, int32_t zp,
                             int sgn) nogil
    void qops_dequantize_tab8(const uint8_t* q, float* out, Py_ssize_t n, const float* s,
                              const int32_t* zp, int sgn) nogil
    void qops_transpose8_batch(const uint8_t* src, uint8_t* dst, Py_ssize_t nb, Py_ssize_t rows,
                               Py_ssize_t cols, int threads) nogil
    void qops_requantize8(const uint8_t* q, uint8_t* out, Py_ssize_t n, float s, int32_t zp,
                          float inv, float zpf, float qmin, float qmax) nogil
    enum:
        QOPS_QUANT_TIER


cdef inline void _q_leg32_run(const float* x, int32_t* out, Py_ssize_t n, float inv,
                              float zpf) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = qops_q_leg32(x[i], inv, zpf)


cdef inline void _q_leg_run(const float* x, qint_t* out, Py_ssize_t n, float inv, float zpf,
                            float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if qint_t is int32_t:
            out[i] = qops_q_leg32(x[i], inv, zpf)
        else:
            out[i] = <qint_t>qops_q_leg8(x[i], inv, zpf, qmin, qmax)


cdef inline void _d_sc_run(const qint_t* q, float* out, Py_ssize_t n, float s,
                           int32_t zp) noexcept nogil:
    cdef Py_ssize_t i
    if qint_t is int32_t:
        for i in range(n):
            out[i] = qops_d_sc(q[i], s, zp)
    else:
        qops_dequantize_sc8(<const uint8_t*>q, out, n, s, zp, qint_t is int8_t)


cdef inline void _d_pc_run(const qint_t* q, float* out, Py_ssize_t n, double s,
                           int32_t zp) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = qops_d_pc(q[i], s, zp)


# Per-channel ops whose runs of one channel are short (the channel axis last, as in
# channels-last activations or a weight quantized along its columns): one call per run then
# costs more than the run. Element j
# of an (outer, L = C * inner) row always takes channel (j // inner) % C, so the parameters
# are laid out per position once, for `reps` whole rows, and the rows stream through that
# table with vector loads.

cdef inline void _q_leg_tab_run(const float* x, qint_t* out, Py_ssize_t n, const float* inv,
                                const float* zpf, float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if qint_t is int32_t:
            out[i] = qops_q_leg32(x[i], inv[i], zpf[i])
        else:
            out[i] = <qint_t>qops_q_leg8(x[i], inv[i], zpf[i], qmin, qmax)


cdef inline void _d_sc_tab_run(const q8_t* q, float* out, Py_ssize_t n, const float* s,
                               const int32_t* zp) noexcept nogil:
    qops_dequantize_tab8(<const uint8_t*>q, out, n, s, zp, q8_t is int8_t)


cdef inline void _d_pc_tab_run(const qint_t* q, float* out, Py_ssize_t n, const double* s,
                               const int32_t* zp) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = qops_d_pc(q[i], s[i], zp[i])


ctypedef fused tab_t:
    float
    double
    int32_t


cdef void _pc_fill(const tab_t[::1] params, Py_ssize_t inner, tab_t[::1] tab) noexcept nogil:
    # filled here, not by numpy's repeat and tile, whose temporaries show in a dequantize
    cdef Py_ssize_t nc = params.shape[0], row = nc * inner, c, k
    for c in range(nc):
        for k in range(inner):
            tab[c * inner + k] = params[c]
    k = row
    while k < tab.shape[0]:
        memcpy(&tab[k], &tab[0], row * sizeof(tab_t))
        k += row


def _pc_table(params, inner, reps, dtype):
    """Per-channel `params` laid out per position of `reps` rows of C * inner elements."""
    p = np.ascontiguousarray(params, dtype)
    tab = np.empty(p.shape[0] * inner * reps, dtype)
    if tab.shape[0]:
        if tab.dtype == np.float32:
            _pc_fill[float](p, inner, tab)
        elif tab.dtype == np.float64:
            _pc_fill[double](p, inner, tab)
        else:
            _pc_fill[int32_t](p, inner, tab)
    return tab


cdef inline Py_ssize_t _pc_reps(Py_ssize_t row) noexcept nogil:
    return max(1, PC_TABLE // row) if row else 1


cdef inline Py_ssize_t _pc_units(Py_ssize_t n0, Py_ssize_t row) noexcept nogil:
    # Work units of an (n0, row) array: blocks of `reps` whole rows when a row is at most
    # PC_TABLE long, else (tile, row) pairs of PC_TABLE columns, tile-major, so that the part
    # of the table in use (8-24 KB) stays in L1 while the rows pass through it.
    cdef Py_ssize_t reps = _pc_reps(row)
    return ((row + PC_TABLE - 1) // PC_TABLE) * ((n0 + reps - 1) // reps)


cdef inline Py_ssize_t _pc_unit(Py_ssize_t k, Py_ssize_t n0, Py_ssize_t row, Py_ssize_t* off,
                                Py_ssize_t* j0) noexcept nogil:
    # unit k of _pc_units: its first element in `off`, its first table position in `j0`;
    # returns its length. Reps > 1 only when one tile is the whole row, so a unit is
    # contiguous either way.
    cdef Py_ssize_t reps = _pc_reps(row), nb = (n0 + reps - 1) // reps
    cdef Py_ssize_t t = k // nb, b = k - t * nb
    j0[0] = t * PC_TABLE
    off[0] = b * reps * row + j0[0]
    return min(reps, n0 - b * reps) * min(row - j0[0], PC_TABLE)


cdef inline void _requant_run(const q8_t* q, q8_t* out, Py_ssize_t n, float s, int32_t zp,
                              float inv, float zpf, float qmin, float qmax) noexcept nogil:
    qops_requantize8(<const uint8_t*>q, <uint8_t*>out, n, s, zp, inv, zpf, qmin, qmax)


cdef void _q_fma_ptr(const float* xp, uint8_t* op, Py_ssize_t n, float inv, float zpf,
                     float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t nb = (n + BLOCK - 1) // BLOCK, b
    cdef int threads = qops_threads_for(n, GRAIN)
    if threads == 1:        # no parallel region, which costs more than a small op
        qops_quantize_fma(xp, op, n, inv, zpf, qmin, qmax)
        return
    for b in prange(nb, schedule="static", num_threads=threads):
        qops_quantize_fma(xp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), inv, zpf,
                          qmin, qmax)


cdef void _q_leg32_flat(const float[::1] x, int32_t[::1] out, float inv, float zpf) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0], nb = (n + BLOCK - 1) // BLOCK, b
    cdef const float* xp = &x[0] if n else NULL
    cdef int32_t* op = &out[0] if n else NULL
    for b in prange(nb, schedule="static", num_threads=qops_threads_for(n, GRAIN)):
        _q_leg32_run(xp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), inv, zpf)


cdef void _q_leg_channels(const float[:, :, ::1] x, qint_t[:, :, ::1] out,
                          const float[::1] inv, const int32_t[::1] zp,
                          float qmin, float qmax) noexcept nogil:
    # (outer, C, inner) view: parallel over outer*C rows, each row one channel's qparams.
    cdef Py_ssize_t n0 = x.shape[0], nc = x.shape[1], n2 = x.shape[2], r
    if n0 * nc * n2 == 0:
        return
    cdef const float* xp = &x[0, 0, 0]
    cdef qint_t* op = &out[0, 0, 0]
    cdef const float* ip = &inv[0]
    cdef const int32_t* zpp = &zp[0]
    for r in prange(n0 * nc, schedule="static",
                    num_threads=qops_threads_for(n0 * nc * n2, GRAIN)):
        _q_leg_run(xp + r * n2, op + r * n2, n2, ip[r % nc], <float>zpp[r % nc], qmin, qmax)


cdef void _q_leg_rows(const float[:, ::1] x, qint_t[:, ::1] out, const float[::1] inv,
                      const float[::1] zpf, float qmin, float qmax) noexcept nogil:
    # (outer, L) view; the tables cover one row or `reps` rows (see _pc_units)
    cdef Py_ssize_t n0 = x.shape[0], row = x.shape[1], k, n, off, j0
    if n0 * row == 0:
        return
    cdef const float* xp = &x[0, 0]
    cdef qint_t* op = &out[0, 0]
    for k in prange(_pc_units(n0, row), schedule="static",
                    num_threads=qops_threads_for(n0 * row, GRAIN)):
        # off and j0 assigned in the body, so Cython makes them thread-private (written
        # only through pointers, they were shared by the threads: issue 19 #3)
        off = 0
        j0 = 0
        n = _pc_unit(k, n0, row, &off, &j0)
        _q_leg_tab_run(xp + off, op + off, n, &inv[j0], &zpf[j0], qmin, qmax)


cdef void _d_sc_flat(const qint_t[::1] q, float[::1] out, float s, int32_t zp) noexcept nogil:
    cdef Py_ssize_t n = q.shape[0], nb = (n + BLOCK - 1) // BLOCK, b
    cdef const qint_t* qp = &q[0] if n else NULL
    cdef float* op = &out[0] if n else NULL
    cdef int threads = qops_threads_for(n, GRAIN)
    if threads == 1:        # no parallel region, which costs more than a small op
        _d_sc_run(qp, op, n, s, zp)
        return
    for b in prange(nb, schedule="static", num_threads=threads):
        _d_sc_run(qp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), s, zp)


cdef bint _pc_zp_small(const int32_t[::1] zp) noexcept nogil:
    # the 8-bit kernels need f32(q) - f32(zp) to be the integer q - zp: |zp| <= 2**23
    cdef Py_ssize_t c
    for c in range(zp.shape[0]):
        if not -(1 << 23) <= zp[c] <= (1 << 23):
            return False
    return True


cdef bint _pc_scales_f32(const double[::1] scales) noexcept nogil:
    # D_pc in float32 gives the same bits when every scale is a float32 (and _pc_zp_small):
    # 8-bit q - zp is an integer of at most 24 bits, so the double product of two 24-bit
    # significands is exact and both paths round it to float once. Observers' scales are
    # float32 (PyTorch's as ours).
    cdef Py_ssize_t c
    for c in range(scales.shape[0]):
        if <double><float>scales[c] != scales[c]:
            return False
    return True


cdef void _d_pc_channels(const qint_t[:, :, ::1] q, float[:, :, ::1] out, const double[::1] scales,
                         const int32_t[::1] zp, int mode) noexcept nogil:
    # mode (from _plan): 2 float32 scales (D_sc's kernel), 1 8-bit D_pc kernel, 0 scalar D_pc
    cdef Py_ssize_t n0 = q.shape[0], nc = q.shape[1], n2 = q.shape[2], r
    if n0 * nc * n2 == 0:
        return
    cdef const qint_t* qp = &q[0, 0, 0]
    cdef float* op = &out[0, 0, 0]
    cdef const double* sp = &scales[0]
    cdef const int32_t* zpp = &zp[0]
    cdef int threads = qops_threads_for(n0 * nc * n2, GRAIN)
    if qint_t is not int32_t and mode == 2:
        for r in prange(n0 * nc, schedule="static", num_threads=threads):
            _d_sc_run(qp + r * n2, op + r * n2, n2, <float>sp[r % nc], zpp[r % nc])
    elif qint_t is not int32_t and mode == 1:
        for r in prange(n0 * nc, schedule="static", num_threads=threads):
            qops_dequantize_pc8(<const uint8_t*>(qp + r * n2), op + r * n2, n2, sp[r % nc],
                                zpp[r % nc], qint_t is int8_t)
    else:
        for r in prange(n0 * nc, schedule="static", num_threads=threads):
            _d_pc_run(qp + r * n2, op + r * n2, n2, sp[r % nc], zpp[r % nc])


cdef void _d_sc_rows(const q8_t[:, ::1] q, float[:, ::1] out, const float[::1] s,
                     const int32_t[::1] zp) noexcept nogil:
    # (outer, L) view through position tables, as _q_leg_rows
    cdef Py_ssize_t n0 = q.shape[0], row = q.shape[1], k, n, off, j0
    if n0 * row == 0:
        return
    cdef const q8_t* qp = &q[0, 0]
    cdef float* op = &out[0, 0]
    for k in prange(_pc_units(n0, row), schedule="static",
                    num_threads=qops_threads_for(n0 * row, GRAIN)):
        # off and j0 assigned in the body, so Cython makes them thread-private (written
        # only through pointers, they were shared by the threads: issue 19 #3)
        off = 0
        j0 = 0
        n = _pc_unit(k, n0, row, &off, &j0)
        _d_sc_tab_run(qp + off, op + off, n, &s[j0], &zp[j0])


cdef void _d_pc_rows(const qint_t[:, ::1] q, float[:, ::1] out, const double[::1] s,
                     const int32_t[::1] zp) noexcept nogil:
    cdef Py_ssize_t n0 = q.shape[0], row = q.shape[1], k, n, off, j0
    if n0 * row == 0:
        return
    cdef const qint_t* qp = &q[0, 0]
    cdef float* op = &out[0, 0]
    for k in prange(_pc_units(n0, row), schedule="static",
                    num_threads=qops_threads_for(n0 * row, GRAIN)):
        # off and j0 assigned in the body, so Cython makes them thread-private (written
        # only through pointers, they were shared by the threads: issue 19 #3)
        off = 0
        j0 = 0
        n = _pc_unit(k, n0, row, &off, &j0)
        _d_pc_tab_run(qp + off, op + off, n, &s[j0], &zp[j0])


cdef void _requant_flat(const q8_t[::1] q, q8_t[::1] out, float s, int32_t zp, float inv,
                        float zpf, float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t n = q.shape[0], nb = (n + BLOCK - 1) // BLOCK, b
    cdef const q8_t* qp = &q[0] if n else NULL
    cdef q8_t* op = &out[0] if n else NULL
    cdef int threads = qops_threads_for(n, GRAIN)
    if threads == 1:
        _requant_run(qp, op, n, s, zp, inv, zpf, qmin, qmax)
        return
    for b in prange(nb, schedule="static", num_threads=threads):
        _requant_run(qp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), s, zp, inv,
                     zpf, qmin, qmax)


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_TIER = ("AVX-512", "AVX2", "C")[2 - QOPS_QUANT_TIER]
# requantize's 256-bit loop has no AVX-512 counterpart: AVX-512 builds run the C loop
_RQ_TIER = "AVX2" if QOPS_QUANT_TIER == 1 else "C"

ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty array", "quant.pyx"),
    Route("quantize_per_tensor.fma8", f"qops_quantize_fma ({_TIER})", "qops_quant.h"),
    Route("quantize_per_tensor.leg32", "_q_leg32_flat (Q_leg, int32)", "quant.pyx"),
    Route("quantize_per_channel.tables", "_q_leg_rows (position tables)", "quant.pyx"),
    Route("quantize_per_channel.channels", "_q_leg_channels (a run per channel)", "quant.pyx"),
    Route("dequantize_per_tensor.sc8", f"qops_dequantize_sc8 ({_TIER})", "qops_quant.h"),
    Route("dequantize_per_tensor.sc32", "_d_sc_run (int32)", "quant.pyx"),
    Route("dequantize_per_channel.tables_f32",
          f"_d_sc_rows: qops_dequantize_tab8 ({_TIER})", "qops_quant.h"),
    Route("dequantize_per_channel.tables", "_d_pc_rows (D_pc, double scales)", "quant.pyx"),
    Route("dequantize_per_channel.channels_f32",
          f"_d_pc_channels: qops_dequantize_sc8 ({_TIER})", "qops_quant.h"),
    Route("dequantize_per_channel.channels_pc8",
          f"_d_pc_channels: qops_dequantize_pc8 ({_TIER})", "qops_quant.h"),
    Route("dequantize_per_channel.channels", "_d_pc_channels: _d_pc_run (D_pc)", "quant.pyx"),
    Route("requantize_per_tensor.direct8", f"qops_requantize8 ({_RQ_TIER})", "qops_quant.h"),
    Route("requantize_per_tensor.via_float",
          "dequantize_per_tensor, then quantize_per_tensor (their routes follow)", "quant.pyx"),
    Route("copy_raw.copy", "_copy_flat (memcpy per thread)", "quant.pyx"),
    Route("copy_raw.transpose", "qops_transpose8_batch", "qops_transpose.h"),
    Route("copy_raw.strided", "np.ascontiguousarray", "quant.pyx"),
]}
BUILT = frozenset(ROUTES)      # every build runs every route (the tier is in the kernel text)

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_Q_FMA8 = ROUTES["quantize_per_tensor.fma8"]
cdef object R_Q_LEG32 = ROUTES["quantize_per_tensor.leg32"]
cdef object R_QC_TABLES = ROUTES["quantize_per_channel.tables"]
cdef object R_QC_CHANNELS = ROUTES["quantize_per_channel.channels"]
cdef object R_D_SC8 = ROUTES["dequantize_per_tensor.sc8"]
cdef object R_D_SC32 = ROUTES["dequantize_per_tensor.sc32"]
cdef object R_DC_TABLES_F32 = ROUTES["dequantize_per_channel.tables_f32"]
cdef object R_DC_TABLES = ROUTES["dequantize_per_channel.tables"]
cdef object R_DC_F32 = ROUTES["dequantize_per_channel.channels_f32"]
cdef object R_DC_PC8 = ROUTES["dequantize_per_channel.channels_pc8"]
cdef object R_DC_CHANNELS = ROUTES["dequantize_per_channel.channels"]
cdef object R_RQ_DIRECT = ROUTES["requantize_per_tensor.direct8"]
cdef object R_RQ_FLOAT = ROUTES["requantize_per_tensor.via_float"]
cdef object R_COPY = ROUTES["copy_raw.copy"]
cdef object R_COPY_T = ROUTES["copy_raw.transpose"]
cdef object R_COPY_STRIDED = ROUTES["copy_raw.strided"]

DEF OP_Q = 0         # quantize_per_tensor: x, out dtype
DEF OP_QC = 1        # quantize_per_channel: x, run
DEF OP_D = 2         # dequantize_per_tensor: q
DEF OP_DC = 3        # dequantize_per_channel: q, run, (scales, zero points)
DEF OP_RQ = 4        # requantize_per_tensor: q, out dtype
DEF OP_COPY = 5      # copy_raw: q, its _batch_transpose


cdef object _plan(int op, a, Py_ssize_t run, extra):
    """The Route of one call: every kernel choice of the family, in one place.

    op: OP_*; a: the input array; run: per-channel ops' elements per run of one channel
    (OP_COPY: whether a is C-contiguous); extra: the output array (OP_Q), the out dtype (OP_RQ), (scales f64, zero points i32) (OP_DC), or
    _batch_transpose(a) (OP_COPY)."""
    cdef bint byte
    if a.size == 0:
        route = R_EMPTY
    elif op == OP_Q:
        route = R_Q_FMA8 if extra.itemsize == 1 else R_Q_LEG32
    elif op == OP_QC:
        route = R_QC_TABLES if run < PC_Q_RUN_MIN else R_QC_CHANNELS
    elif op == OP_D:
        route = R_D_SC8 if a.itemsize == 1 else R_D_SC32
    elif op == OP_DC:
        # the 8-bit kernels need f32(q) - f32(zp) exact; float32 math gives D_pc's bits when
        # every scale is a float32 (_pc_scales_f32)
        byte = a.itemsize == 1
        small = byte and _pc_zp_small(extra[1])
        f32 = small and _pc_scales_f32(extra[0])
        if run < PC_DQ_RUN_MIN:
            route = R_DC_TABLES_F32 if f32 else R_DC_TABLES
        else:
            route = R_DC_F32 if f32 else (R_DC_PC8 if small else R_DC_CHANNELS)
    elif op == OP_RQ:
        route = R_RQ_FLOAT if a.dtype != np.dtype(extra) or a.itemsize != 1 else R_RQ_DIRECT
    else:
        route = R_COPY if run else (R_COPY_STRIDED if extra is None else R_COPY_T)
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, x, *args):
    """The Route the fast backend's quant op `op` takes for arguments (x, *args), as passed to
    that entry point (e.g. plan("dequantize_per_channel", q, scales, zero_points, axis))."""
    x = np.asarray(x)
    if op == "quantize_per_tensor":
        return _plan(OP_Q, x, 0, np.empty(0, args[2]))
    if op == "quantize_per_channel":
        return _plan(OP_QC, x, _split(x.shape, args[2])[2], None)
    if op == "dequantize_per_tensor":
        return _plan(OP_D, x, 0, None)
    if op == "dequantize_per_channel":
        return _plan(OP_DC, x, _split(x.shape, args[2])[2],
                     (np.ascontiguousarray(args[0], dtype=np.float64),
                      np.ascontiguousarray(args[1], dtype=np.int32)))
    if op == "requantize_per_tensor":
        return _plan(OP_RQ, x, 0, args[4])
    if op == "copy_raw":
        c = x.flags.c_contiguous
        return _plan(OP_COPY, x, c, None if c else _batch_transpose(x))
    raise ValueError(f"plan: unknown quant op {op!r}")


def _split(shape, axis):
    return (prod(shape[:axis]), shape[axis], prod(shape[axis + 1:]))


# Bounds of the 8-bit types, looked up here: np.iinfo costs a noticeable share of a small op.
_Q8_RANGE = {np.dtype(np.uint8): (0.0, 255.0), np.dtype(np.int8): (-128.0, 127.0)}


def quantize_per_tensor(x, inv_scale, zero_point, dtype):
    """Quantize float32 `x` with one scale: Q_fma for 8-bit types, Q_leg for int32."""
    x = np.require(x, np.float32, "C")
    out = qops_empty(np, x.shape, dtype)
    route = _plan(OP_Q, x, 0, out)
    if route is R_Q_LEG32:
        _q_leg32_flat(x.reshape(-1), out.reshape(-1), inv_scale, zero_point)
    elif route is R_Q_FMA8:
        bounds = _Q8_RANGE[out.dtype]
        # raw pointers: typed memoryviews cost more than the whole op on small tensors
        _q_fma_ptr(<const float*>qops_ptr(x), <uint8_t*>qops_ptr(out, True), x.size,
                   inv_scale, zero_point, bounds[0], bounds[1])
    return out


def quantize_per_channel(x, inv_scales, zero_points, axis, dtype):
    """Quantize float32 `x` with one scale per index of `axis` (Q_leg)."""
    x = np.require(x, np.float32, "C")
    out = qops_empty(np, x.shape, dtype)
    info = np.iinfo(out.dtype)
    shape3 = _split(x.shape, axis)
    inv = np.ascontiguousarray(inv_scales, dtype=np.float32)
    zp = np.ascontiguousarray(zero_points, dtype=np.int32)
    route = _plan(OP_QC, x, shape3[2], None)
    if route is R_EMPTY:
        return out
    if route is R_QC_TABLES:
        shape2 = (shape3[0], shape3[1] * shape3[2])
        reps = _pc_reps(shape2[1])
        ti = _pc_table(inv, shape3[2], reps, np.float32)
        tz = _pc_table(zp, shape3[2], reps, np.float32)
        if out.dtype == np.uint8:
            _q_leg_rows[uint8_t](x.reshape(shape2), out.reshape(shape2), ti, tz, info.min, info.max)
        elif out.dtype == np.int8:
            _q_leg_rows[int8_t](x.reshape(shape2), out.reshape(shape2), ti, tz, info.min, info.max)
        else:
            _q_leg_rows[int32_t](x.reshape(shape2), out.reshape(shape2), ti, tz, info.min, info.max)
    elif out.dtype == np.uint8:
        _q_leg_channels[uint8_t](x.reshape(shape3), out.reshape(shape3), inv, zp, info.min, info.max)
    elif out.dtype == np.int8:
        _q_leg_channels[int8_t](x.reshape(shape3), out.reshape(shape3), inv, zp, info.min, info.max)
    else:
        _q_leg_channels[int32_t](x.reshape(shape3), out.reshape(shape3), inv, zp, info.min, info.max)
    return out


def dequantize_per_tensor(q, scale, zero_point):
    """Dequantize integer `q` with one float32 scale (D_sc); float32 result."""
    q = np.require(q, requirements="C")
    out = qops_empty(np, q.shape, np.float32)
    route = _plan(OP_D, q, 0, None)
    if route is R_EMPTY:
        return out
    if route is R_D_SC32:
        _d_sc_flat[int32_t](q.reshape(-1), out.reshape(-1), scale, zero_point)
    elif q.dtype.kind == "u":      # (cheaper than `== np.uint8`, which builds a dtype)
        _d_sc_flat[uint8_t](q.reshape(-1), out.reshape(-1), scale, zero_point)
    else:
        _d_sc_flat[int8_t](q.reshape(-1), out.reshape(-1), scale, zero_point)
    return out


def dequantize_per_channel(q, scales, zero_points, axis):
    """Dequantize integer `q` per channel of `axis` with float64 scales (D_pc)."""
    q = np.require(q, requirements="C")
    out = qops_empty(np, q.shape, np.float32)
    shape3 = _split(q.shape, axis)
    sc = np.ascontiguousarray(scales, dtype=np.float64)
    zp = np.ascontiguousarray(zero_points, dtype=np.int32)
    route = _plan(OP_DC, q, shape3[2], (sc, zp))
    if route is R_EMPTY:
        return out
    cdef int mode = 2 if route is R_DC_F32 else (1 if route is R_DC_PC8 else 0)
    if route is R_DC_TABLES or route is R_DC_TABLES_F32:
        _dequantize_rows(q.reshape(shape3[0], shape3[1] * shape3[2]),
                         out.reshape(shape3[0], shape3[1] * shape3[2]), sc, zp, shape3[2],
                         route is R_DC_TABLES_F32)
    elif q.dtype == np.uint8:
        _d_pc_channels[uint8_t](q.reshape(shape3), out.reshape(shape3), sc, zp, mode)
    elif q.dtype == np.int8:
        _d_pc_channels[int8_t](q.reshape(shape3), out.reshape(shape3), sc, zp, mode)
    else:
        _d_pc_channels[int32_t](q.reshape(shape3), out.reshape(shape3), sc, zp, mode)
    return out


def _dequantize_rows(q, out, sc, zp, inner, f32):
    # the tables hold the float32 scales where the kernels' float32 formula is exact (f32,
    # as _plan decides), and the double scales otherwise
    reps = _pc_reps(q.shape[1])
    tz = _pc_table(zp, inner, reps, np.int32)
    if f32:
        ts = _pc_table(sc, inner, reps, np.float32)
        if q.dtype == np.uint8:
            _d_sc_rows[uint8_t](q, out, ts, tz)
        else:
            _d_sc_rows[int8_t](q, out, ts, tz)
        return
    ts = _pc_table(sc, inner, reps, np.float64)
    if q.dtype == np.uint8:
        _d_pc_rows[uint8_t](q, out, ts, tz)
    elif q.dtype == np.int8:
        _d_pc_rows[int8_t](q, out, ts, tz)
    else:
        _d_pc_rows[int32_t](q, out, ts, tz)


def requantize_per_tensor(q, scale, zero_point, inv_out_scale, out_zero_point, dtype):
    """Re-express `q` with new qparams: D_sc, then quantize as quantize_per_tensor does."""
    q = np.require(q, requirements="C")
    route = _plan(OP_RQ, q, 0, dtype)
    if route is R_RQ_FLOAT:
        return quantize_per_tensor(dequantize_per_tensor(q, scale, zero_point),
                                   inv_out_scale, out_zero_point, dtype)
    out = qops_empty(np, q.shape, dtype)
    if route is R_EMPTY:
        return out
    info = np.iinfo(out.dtype)
    if q.dtype == np.uint8:
        _requant_flat[uint8_t](q.reshape(-1), out.reshape(-1), scale, zero_point,
                               inv_out_scale, out_zero_point, info.min, info.max)
    else:
        _requant_flat[int8_t](q.reshape(-1), out.reshape(-1), scale, zero_point,
                              inv_out_scale, out_zero_point, info.min, info.max)
    return out


cdef void _copy_flat(const char* src, char* dst, Py_ssize_t n, int threads) noexcept nogil:
    # Each thread copies its own 64-byte-aligned share, so a clone is as parallel as the op
    # that follows it (a one-thread copy leaves the other core to read its half from afar).
    cdef Py_ssize_t chunk = qops_chunk64(n, threads), start
    cdef int t
    if threads == 1:        # no parallel region: it alone costs as much as a small copy
        memcpy(dst, src, n)
        return
    for t in prange(threads, schedule="static", num_threads=threads):
        start = t * chunk
        if start < n:
            memcpy(dst + start, src + start, min(chunk, n - start))


cdef void _transpose8_batch(const uint8_t* src, uint8_t* dst, Py_ssize_t nb, Py_ssize_t rows,
                            Py_ssize_t cols) noexcept nogil:
    qops_transpose8_batch(src, dst, nb, rows, cols,
                          qops_threads_for(nb * rows * cols, GRAIN * 4))


def _batch_transpose(q):
    """(memory order, nb, rows, cols) if `q` is a batch of transposed dense byte matrices,
    else None.

    That is q's memory order moving one group of axes in front of the next group (a
    channels-last NHWC block seen as NCHW: nb = N, rows = H * W, cols = C), each element one
    byte: np.ascontiguousarray copies such arrays at about 2 ns a byte.
    """
    if q.itemsize != 1 or q.size == 0:
        return None
    order = memory_order(q)
    if order is None:
        return None
    # skip the leading axes already in place (the batch) and size-1 axes, whose strides are
    # arbitrary; what is left must be a rotation of its sorted self
    axes = [i for i in order if q.shape[i] != 1]
    srt = sorted(axes)
    lead = 0
    while lead < len(axes) and axes[lead] == srt[lead]:
        lead += 1
    rest, srt = axes[lead:], srt[lead:]
    for cut in range(1, len(rest)):
        if rest == srt[cut:] + srt[:cut]:
            return (order, prod(q.shape[i] for i in axes[:lead]),
                    prod(q.shape[i] for i in srt[cut:]), prod(q.shape[i] for i in srt[:cut]))
    return None


def copy_raw(q):
    """A C-contiguous copy of integer array `q` (QTensor.clone's data), 64-byte aligned."""
    cdef bint contiguous = q.flags.c_contiguous
    bt = None if contiguous else _batch_transpose(q)
    route = _plan(OP_COPY, q, contiguous, bt)
    if route is R_COPY_STRIDED:
        return np.ascontiguousarray(q)      # already a fresh copy
    if route is R_COPY_T:
        order, nb, rows, cols = bt
        out = qops_empty(np, q.shape, q.dtype)
        # the source's memory in its own order is a C-contiguous (nb, rows, cols) block
        _transpose8_batch(<const uint8_t*>qops_ptr(q.transpose(order)),
                          <uint8_t*>qops_ptr(out, True), nb, rows, cols)
        return out
    out = qops_empty(np, q.shape, q.dtype)
    cdef Py_ssize_t n = q.nbytes
    if n:
        _copy_flat(<const char*>qops_ptr(q), <char*>qops_ptr(out, True), n,
                   qops_threads_for(n, GRAIN))
    return out
