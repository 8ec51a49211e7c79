# Normalization kernels (mirror of qops/_ref/norm.py).
# Contract: uint8/int8 in and out; exact integer statistics (int64);
# float32 affine steps in PyTorch's order (fmaf exactly where it fuses); Q_vec requantization.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES (<op>.<route>), every entry point calls it, and qops.show_config(op, *args) reports
# it (qops/_show.py). Rows of at least LUT_MIN elements go through 256-entry tables where the
# lookup is vectorized (VBMI); the row kernels pick their vector body inside qops_norm.h when
# the weights bound the float range (qops_norm_vec_ok), else a C loop: same bits.
from qops._fast._routes import Route, TRACE, trace_routes as _trace_routes

import numpy as np
from cython.parallel cimport prange
from libc.math cimport sqrt, fmaf
from qops._fast._common cimport *

cdef extern from "qops_norm.h":
    void qops_norm_sums(const uint8_t* p, Py_ssize_t n, uint8_t flip, int64_t* s_out,
                        int64_t* ss_out) nogil
    void qops_norm_sums_cols(const uint8_t* x, Py_ssize_t npix, Py_ssize_t C, Py_ssize_t c0,
                             Py_ssize_t nc, uint8_t flip, int64_t* s, int64_t* ss) nogil
    void qops_gn_cl(const uint8_t* x, uint8_t* out, Py_ssize_t r0, Py_ssize_t r1,
                    Py_ssize_t npix, Py_ssize_t C, const float* s, const float* t, int32_t zp,
                    float inv, int32_t ozp, float lo, float hi, int sgn) nogil
    void qops_bn_row(const uint8_t* x, uint8_t* out, Py_ssize_t n, float a, float b, int32_t zp,
                     int32_t ozp, float lo, float hi, int relu, int sgn) nogil
    void qops_bn_cl(const uint8_t* x, uint8_t* out, Py_ssize_t npix, Py_ssize_t C,
                    const float* a, const float* b, int32_t zp, int32_t ozp, float lo, float hi,
                    int sgn) nogil
    void qops_gn_row(const uint8_t* x, uint8_t* out, Py_ssize_t n, float mean, float g, float b,
                     int32_t zp, float inv, int32_t ozp, float lo, float hi, int sgn) nogil
    void qops_ln_row(const uint8_t* x, uint8_t* out, Py_ssize_t n, const float* w,
                     const float* b, double wb_max, float mean, float r, int32_t zp, float inv,
                     int32_t ozp, float lo, float hi, int sgn) nogil
    void qops_gn_table(const float* d, float g, float b, float inv, int32_t ozp, float lo,
                       float hi, uint8_t* table) nogil
    void qops_lnf_row(const float *x, float *y, Py_ssize_t n, const float *w, const float *b,
                      double eps) nogil
    void qops_lnf_rows_own(const float *x, float *y, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n,
                           const float *w, const float *b, double eps) nogil
    enum:
        QOPS_NORM_TIER
        QOPS_LNF_F64

cdef extern from "qops_lut.h" nogil:
    void qops_lut_apply(const uint8_t *src, uint8_t *dst, Py_ssize_t n, const uint8_t *table)
    int qops_lut_vectorized()

DEF GRAIN = 16384         # elements per thread below which a second thread costs more than it gives
DEF LUT_MIN = 512         # a 256-entry table pays for itself on rows at least this long
DEF LNF_F64_MAX = 16384   # float layer norm rows kept in float64 up to this long (<= 512 KB a thread)

LUT_VECTORIZED = bool(qops_lut_vectorized())   # runs the CPU check once, outside any prange


cdef inline bint _use_lut(Py_ssize_t length) noexcept nogil:
    # Only where the lookup is vectorized: a byte loop is no faster than the float loop.
    return length >= LUT_MIN and qops_lut_vectorized()


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_TIER = ("AVX-512", "AVX2", "C")[2 - QOPS_NORM_TIER]

ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "norm.pyx"),
    Route("batch_norm.lut", "per-channel tables, qops_lut_vbmi (AVX-512 VBMI)", "qops_lut.h"),
    Route("batch_norm.rows", f"qops_bn_row ({_TIER})", "qops_norm.h"),
    Route("batch_norm_cl.cl", f"qops_bn_cl ({_TIER})", "qops_norm.h"),
    Route("layer_norm.rows", f"_stats + qops_ln_row ({_TIER})", "qops_norm.h"),
    Route("layer_norm_f32.rows", "qops_lnf_row (float64 sums in 16 lanes: AVX2 vectors, or a plain loop)", "qops_norm.h"),
    Route("layer_norm_f32.f64rows", "qops_lnf_rows_own (each row converted to float64 once, weight and bias as float64, in each thread's own block; AVX2 and AVX-512)", "qops_norm.h"),
    Route("group_norm.lut", "per-group tables (qops_gn_table), qops_lut_vbmi", "qops_norm.h"),
    Route("group_norm.rows", f"_stats + qops_gn_row ({_TIER})", "qops_norm.h"),
    Route("group_norm_cl.cl", f"qops_norm_sums_cols + qops_gn_cl ({_TIER})", "qops_norm.h"),
]}


def _built_here(name):
    if name == "layer_norm_f32.f64rows":
        return bool(QOPS_LNF_F64)
    return LUT_VECTORIZED if name.endswith(".lut") else True


BUILT = frozenset(n for n in ROUTES if _built_here(n))     # the routes this build can take

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_BN_LUT = ROUTES["batch_norm.lut"]
cdef object R_BN_ROWS = ROUTES["batch_norm.rows"]
cdef object R_BN_CL = ROUTES["batch_norm_cl.cl"]
cdef object R_LN_ROWS = ROUTES["layer_norm.rows"]
cdef object R_LNF_ROWS = ROUTES["layer_norm_f32.rows"]
cdef object R_LNF_F64 = ROUTES["layer_norm_f32.f64rows"]
cdef object R_GN_LUT = ROUTES["group_norm.lut"]
cdef object R_GN_ROWS = ROUTES["group_norm.rows"]
cdef object R_GN_CL = ROUTES["group_norm_cl.cl"]

DEF OP_BN = 0
DEF OP_BN_CL = 1
DEF OP_LN = 2
DEF OP_GN = 3
DEF OP_GN_CL = 4
DEF OP_LNF = 5


cdef object _plan(int op, Py_ssize_t size, Py_ssize_t nb, Py_ssize_t length):
    """The Route of one call: every kernel choice of the family, in one place.

    op: OP_*; size: elements; nb: batch (x.shape[0]); length: elements per channel row."""
    if size == 0:
        route = R_EMPTY
    elif op == OP_BN:
        # tables only where the lookup is vectorized and they are reused (2 * 256 elements)
        route = R_BN_LUT if _use_lut(length) and nb * length >= 2 * 256 else R_BN_ROWS
    elif op == OP_GN:
        route = R_GN_LUT if _use_lut(length) else R_GN_ROWS
    elif op == OP_LN:
        route = R_LN_ROWS
    elif op == OP_LNF:
        # each thread's block holds float64 weights and QOPS_LNF_R rows: longer rows go
        # without one
        route = R_LNF_F64 if QOPS_LNF_F64 and length <= LNF_F64_MAX else R_LNF_ROWS
    elif op == OP_BN_CL:
        route = R_BN_CL
    else:
        route = R_GN_CL
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, x, *args):
    """The Route the fast backend's norm op `op` takes for input x (the entry point's layout:
    (N, C, L) for batch_norm and group_norm, (rows, n) layer_norm and layer_norm_f32,
    channels last for *_cl)."""
    x = np.asarray(x)
    ops = {"batch_norm": OP_BN, "batch_norm_cl": OP_BN_CL, "layer_norm": OP_LN,
           "group_norm": OP_GN, "group_norm_cl": OP_GN_CL, "layer_norm_f32": OP_LNF}
    if op not in ops:
        raise ValueError(f"plan: unknown norm op {op!r}")
    if op == "layer_norm_f32":
        return _plan(OP_LNF, x.size, x.shape[0], x.shape[1])
    return _plan(ops[op], x.size, x.shape[0], x.shape[2] if x.ndim == 3 else 0)


cdef void _affine_lut(q8_t dummy, uint8_t* lut, float a, float b, int32_t zp, int32_t ozp,
                     float lo, float hi) noexcept nogil:
    # lut[byte] = the result for raw value (q8_t)byte: the same formula as qops_bn_row.
    # (`dummy`, a value of the element type, only selects the fused-type specialization.)
    cdef int u
    for u in range(256):
        lut[u] = <uint8_t><q8_t>qops_q_vec(fmaf(a, <float>(<int32_t>(<q8_t>u) - zp), b), 1.0, ozp,
                                            lo, hi)


cdef void _batch_norm_rows(const q8_t[:, :, ::1] x, q8_t[:, :, ::1] out, const float[::1] alpha,
                           const float[::1] beta, int32_t zp, int32_t ozp, float lo,
                           float hi, bint relu, uint8_t[:, ::1] luts, bint lut) noexcept nogil:
    # One (batch, channel) row per iteration: alpha/beta are constants of the inner loop. Long
    # rows use per-channel tables built once (luts[c]) before the parallel loop.
    cdef Py_ssize_t nb = x.shape[0], nc = x.shape[1], length = x.shape[2], r, c
    if lut:
        for c in range(nc):
            _affine_lut(x[0, 0, 0], &luts[c, 0], alpha[c], beta[c], zp, ozp, lo, hi)
    for r in prange(nb * nc, schedule="static", num_threads=qops_threads_for(nb * nc * length, GRAIN)):
        c = r % nc
        if lut:
            qops_lut_apply(<const uint8_t*>&x[r // nc, c, 0], <uint8_t*>&out[r // nc, c, 0],
                               length, &luts[c, 0])
        else:
            qops_bn_row(<const uint8_t*>&x[r // nc, c, 0], <uint8_t*>&out[r // nc, c, 0], length,
                        alpha[c], beta[c], zp, ozp, lo, hi, relu, q8_t is int8_t)


def batch_norm(x, alpha, beta, zero_point, output_zero_point, relu):
    """Per-channel fused affine: out = Q_vec(fma(alpha_c, f32(q - zp), beta_c)), optional relu."""
    x = np.ascontiguousarray(x)
    out = qops_empty(np, x.shape, x.dtype)
    info = np.iinfo(x.dtype)
    # relu clamps below at the output zero point: fold it into Q_vec's lower bound.
    lo = (0 if relu else info.min - output_zero_point)
    hi = info.max - output_zero_point
    a = np.ascontiguousarray(alpha, dtype=np.float32)
    b = np.ascontiguousarray(beta, dtype=np.float32)
    route = _plan(OP_BN, x.size, x.shape[0], x.shape[2])
    if route is R_EMPTY:
        return out
    luts = np.empty((x.shape[1], 256), np.uint8)
    lut = route is R_BN_LUT
    if x.dtype == np.uint8:
        _batch_norm_rows[uint8_t](x, out, a, b, zero_point, output_zero_point, lo, hi, relu, luts,
                                  lut)
    else:
        _batch_norm_rows[int8_t](x, out, a, b, zero_point, output_zero_point, lo, hi, relu, luts,
                                 lut)
    return out


def batch_norm_cl(x, alpha, beta, zero_point, output_zero_point, relu):
    """batch_norm of channels-last data: x (P, C), every row one position's channels."""
    x = np.ascontiguousarray(x)
    out = qops_empty(np, x.shape, x.dtype)
    info = np.iinfo(x.dtype)
    # relu clamps below at the output zero point: fold it into Q_vec's lower bound
    cdef float lo = 0 if relu else info.min - output_zero_point
    cdef float hi = info.max - output_zero_point
    a = np.ascontiguousarray(alpha, dtype=np.float32)
    b = np.ascontiguousarray(beta, dtype=np.float32)
    cdef Py_ssize_t P = x.shape[0], C = x.shape[1], t, nt
    if _plan(OP_BN_CL, x.size, 0, 0) is R_EMPTY:
        return out
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    cdef const float* ap = <const float*>qops_ptr(a)
    cdef const float* bp = <const float*>qops_ptr(b)
    cdef int32_t zp = zero_point, ozp = output_zero_point
    cdef int sgn = x.dtype == np.int8
    nt = min(P, qops_threads_for(P * C, GRAIN))
    with nogil:
        for t in prange(nt, schedule="static", num_threads=nt):
            qops_bn_cl(xp + P * t // nt * C, op + P * t // nt * C,
                       P * (t + 1) // nt - P * t // nt, C, ap, bp, zp, ozp, lo, hi, sgn)
    return out


cdef inline void _stats(const q8_t* p, Py_ssize_t n, int32_t zp, float xs, double eps,
                        float* mean_out, float* r_out) noexcept nogil:
    # Exact integer S and SS of n contiguous values, then _stats_of.
    cdef int64_t s, ss, su, ssu
    if q8_t is uint8_t:
        qops_norm_sums(<const uint8_t*>p, n, 0, &s, &ss)
    else:
        # bytes ^ 0x80 are u = q + 128: S = Su - 128 n, SS = SSu - 256 Su + 16384 n (exact)
        qops_norm_sums(<const uint8_t*>p, n, 0x80, &su, &ssu)
        s = su - 128 * n
        ss = ssu - 256 * su + 16384 * n
    _stats_of(s, ss, n, zp, xs, eps, mean_out, r_out)


cdef inline void _stats_of(int64_t s, int64_t ss, Py_ssize_t n, int32_t zp, float xs, double eps,
                           float* mean_out, float* r_out) noexcept nogil:
    # The float32/double steps of docs/semantics.md §13 from exact S and SS of n values.
    cdef float m1, var, nf = <float>n
    m1 = <float>s / nf
    mean_out[0] = m1 - <float>zp
    # one rounding: PyTorch's AVX2 kernel computes SS/N - m1*m1 as a fused multiply-subtract
    var = fmaf(-m1, m1, <float>ss / nf)
    if not (var > 0.0):
        var = 0.0
    r_out[0] = <float>(<double>xs / sqrt(<double>(var * xs * xs) + eps))


cdef void _layer_norm_rows(const q8_t[:, ::1] x, q8_t[:, ::1] out, const float[::1] w,
                           const float[::1] b, double wb_max, float xs, int32_t zp, double eps,
                           float inv, int32_t ozp, float lo, float hi) noexcept nogil:
    cdef Py_ssize_t m = x.shape[0], n = x.shape[1], row
    cdef float mean, r
    for row in prange(m, schedule="static", num_threads=qops_threads_for(m * n, GRAIN)):
        mean = 0.0      # assigned in the loop body so each thread has its own copy
        r = 0.0
        _stats(&x[row, 0], n, zp, xs, eps, &mean, &r)
        qops_ln_row(<const uint8_t*>&x[row, 0], <uint8_t*>&out[row, 0], n, &w[0], &b[0], wb_max,
                    mean, r, zp, inv, ozp, lo, hi, q8_t is int8_t)


def layer_norm(x, weight, bias, scale, zero_point, eps, inv_output_scale, output_zero_point):
    """Normalize each row of `x` over its last axis, then an elementwise affine (Q_vec)."""
    x = np.ascontiguousarray(x)
    out = qops_empty(np, x.shape, x.dtype)
    n = x.shape[1]
    info = np.iinfo(x.dtype)
    # A missing weight/bias is 1/0: multiplying by 1 and adding +0 leave the float32 value
    # (up to the sign of zero, which rint and the zero point erase), so one kernel serves both.
    w = np.ones(n, np.float32) if weight is None else np.ascontiguousarray(weight, np.float32)
    b = np.zeros(n, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32)
    lo = info.min - output_zero_point
    hi = info.max - output_zero_point
    if _plan(OP_LN, x.size, 0, 0) is R_EMPTY:
        return out
    # A bound on |w| and |b| for the vector path's range check (inf or NaN: never taken).
    wb_max = float(np.max(np.abs(np.concatenate([w, b]))))
    if x.dtype == np.uint8:
        _layer_norm_rows[uint8_t](x, out, w, b, wb_max, scale, zero_point, eps, inv_output_scale,
                                  output_zero_point, lo, hi)
    else:
        _layer_norm_rows[int8_t](x, out, w, b, wb_max, scale, zero_point, eps, inv_output_scale,
                                 output_zero_point, lo, hi)
    return out


def layer_norm_f32(x, weight, bias, eps):
    """Float layer norm of each row of float32 `x` (M, N) over its N values: float64 mean and
    variance, y = f32(((x - mean) / sqrt(var + eps)) * w + b) (qops_lnf_row)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = qops_empty(np, x.shape, np.float32)
    cdef Py_ssize_t m = x.shape[0], n = x.shape[1], row
    route = _plan(OP_LNF, x.size, m, n)
    if route is R_EMPTY:
        return out
    w = None if weight is None else np.ascontiguousarray(weight, np.float32)
    b = None if bias is None else np.ascontiguousarray(bias, np.float32)
    cdef const float *xp = <const float *>qops_ptr(x)
    cdef float *op = <float *>qops_ptr(out, True)
    cdef const float *wp = NULL if w is None else <const float *>qops_ptr(w)
    cdef const float *bp = NULL if b is None else <const float *>qops_ptr(b)
    cdef double e = eps
    cdef int nt = qops_threads_for(m * n, GRAIN), t
    if route is R_LNF_F64:
        nt = max(1, min(nt, m))
        with nogil:
            for t in prange(nt, schedule="static", num_threads=nt):
                qops_lnf_rows_own(xp, op, m * t // nt, m * (t + 1) // nt, n, wp, bp, e)
        return out
    with nogil:
        for row in prange(m, schedule="static", num_threads=nt):
            qops_lnf_row(xp + row * n, op + row * n, n, wp, bp, e)
    return out


cdef void _group_norm_group(const q8_t* x, q8_t* out, Py_ssize_t cpg, Py_ssize_t length,
                            const float* w, const float* b, float xs, int32_t zp, double eps,
                            float inv, int32_t ozp, float lo, float hi, bint lut) noexcept nogil:
    # One (batch, group): statistics over its cpg * length contiguous elements, then each
    # channel's affine, through a 256-entry table (on this thread's stack) for long channels.
    cdef float mean = 0.0, r = 0.0, g
    cdef uint8_t table[256]
    cdef float d[256]
    cdef Py_ssize_t c
    cdef int u
    _stats(x, cpg * length, zp, xs, eps, &mean, &r)
    if lut:
        for u in range(256):
            d[u] = <float>(<int32_t>(<q8_t>u) - zp) - mean
    for c in range(cpg):
        g = r * w[c]
        if lut:
            qops_gn_table(d, g, b[c], inv, ozp, lo, hi, table)
            qops_lut_apply(<const uint8_t*>(x + c * length), <uint8_t*>(out + c * length),
                               length, table)
        else:
            qops_gn_row(<const uint8_t*>(x + c * length), <uint8_t*>(out + c * length), length,
                        mean, g, b[c], zp, inv, ozp, lo, hi, q8_t is int8_t)


cdef void _group_norm_groups(const q8_t[:, :, ::1] x, q8_t[:, :, ::1] out, Py_ssize_t groups,
                             const float[::1] w, const float[::1] b, float xs, int32_t zp,
                             double eps, float inv, int32_t ozp, float lo,
                             float hi, bint lut) noexcept nogil:
    # One (batch, group) per iteration: its channels are contiguous (cpg * length elements).
    cdef Py_ssize_t nb = x.shape[0], nc = x.shape[1], length = x.shape[2]
    cdef Py_ssize_t cpg = nc // groups, g, c0
    for g in prange(nb * groups, schedule="static",
                    num_threads=qops_threads_for(nb * nc * length, GRAIN)):
        c0 = (g % groups) * cpg
        _group_norm_group(&x[g // groups, c0, 0], &out[g // groups, c0, 0], cpg, length, &w[c0],
                          &b[c0], xs, zp, eps, inv, ozp, lo, hi, lut)


def group_norm(x, num_groups, weight, bias, scale, zero_point, eps, inv_output_scale,
               output_zero_point):
    """Normalize each (batch, group) of `x`, then a per-channel affine folded into r (Q_vec)."""
    x = np.ascontiguousarray(x)
    out = qops_empty(np, x.shape, x.dtype)
    c = x.shape[1]
    info = np.iinfo(x.dtype)
    w = np.ones(c, np.float32) if weight is None else np.ascontiguousarray(weight, np.float32)
    b = np.zeros(c, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32)
    lo = info.min - output_zero_point
    hi = info.max - output_zero_point
    route = _plan(OP_GN, x.size, x.shape[0], x.shape[2])
    if route is R_EMPTY:
        return out
    if x.dtype == np.uint8:
        _group_norm_groups[uint8_t](x, out, num_groups, w, b, scale, zero_point, eps,
                                    inv_output_scale, output_zero_point, lo, hi,
                                    route is R_GN_LUT)
    else:
        _group_norm_groups[int8_t](x, out, num_groups, w, b, scale, zero_point, eps,
                                   inv_output_scale, output_zero_point, lo, hi,
                                   route is R_GN_LUT)
    return out


cdef void _group_norm_cl_stats(const int64_t* su, const int64_t* ssu, Py_ssize_t npix,
                               Py_ssize_t cpg, bint signed8, const float* w, const float* b,
                               float xs, int32_t zp, double eps, float* s,
                               float* t) noexcept nogil:
    # One (batch, group) of channels-last data from its channels' exact sums of u and u^2:
    # the statistics, then each channel's s = f32(r * w) and t = fma(-s, mean, b) (PyTorch's
    # NHWC kernel). The locals live in this call's frame: nothing is shared between threads.
    cdef int64_t sm = 0, ssm = 0
    cdef float mean = 0.0, r = 0.0
    cdef Py_ssize_t c, n = npix * cpg
    for c in range(cpg):
        sm += su[c]
        ssm += ssu[c]
    if signed8:
        # u = q + 128: S = Su - 128 n, SS = SSu - 256 Su + 16384 n (exact)
        ssm = ssm - 256 * sm + 16384 * n
        sm = sm - 128 * n
    _stats_of(sm, ssm, n, zp, xs, eps, &mean, &r)
    for c in range(cpg):
        s[c] = r * w[c]
        t[c] = fmaf(-s[c], mean, b[c])


def group_norm_cl(x, num_groups, weight, bias, scale, zero_point, eps, inv_output_scale,
                  output_zero_point):
    """group_norm of channels-last data: x (B, P, C), every row of C one position's channels."""
    x = np.ascontiguousarray(x)
    out = qops_empty(np, x.shape, x.dtype)
    cdef Py_ssize_t B = x.shape[0], P = x.shape[1], C = x.shape[2], G = num_groups
    cdef Py_ssize_t cpg = C // G, k, t, nt, rows = B * P, nblk = (C + 31) // 32
    info = np.iinfo(x.dtype)
    w = np.ones(C, np.float32) if weight is None else np.ascontiguousarray(weight, np.float32)
    b = np.zeros(C, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32)
    cdef float lo = info.min - output_zero_point, hi = info.max - output_zero_point
    if _plan(OP_GN_CL, x.size, 0, 0) is R_EMPTY:
        return out
    sums = np.empty((2, B, C), np.int64)
    sc = np.empty((B, C), np.float32)
    sh = np.empty((B, C), np.float32)
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    cdef const float* wp = <const float*>qops_ptr(w)
    cdef const float* bp = <const float*>qops_ptr(b)
    cdef int64_t* s1 = <int64_t*>qops_ptr(sums, True)
    cdef int64_t* s2 = s1 + B * C
    cdef float* sp = <float*>qops_ptr(sc, True)
    cdef float* hp = <float*>qops_ptr(sh, True)
    cdef int32_t zp = zero_point, ozp = output_zero_point
    cdef float xs = scale, inv = inv_output_scale
    cdef double e = eps
    cdef int sgn = x.dtype == np.int8
    cdef uint8_t flip = 0x80 if sgn else 0
    with nogil:
        # per-channel sums, one (batch, block of 32 channels) an iteration
        for k in prange(B * nblk, schedule="static",
                        num_threads=qops_threads_for(B * P * C, GRAIN)):
            qops_norm_sums_cols(xp + (k // nblk) * P * C, P, C, (k % nblk) * 32,
                                min(C - (k % nblk) * 32, 32), flip,
                                s1 + (k // nblk) * C + (k % nblk) * 32,
                                s2 + (k // nblk) * C + (k % nblk) * 32)
        for k in range(B * G):
            _group_norm_cl_stats(s1 + (k // G) * C + (k % G) * cpg,
                                 s2 + (k // G) * C + (k % G) * cpg, P, cpg, sgn,
                                 wp + (k % G) * cpg, bp + (k % G) * cpg, xs, zp, e,
                                 sp + (k // G) * C + (k % G) * cpg,
                                 hp + (k // G) * C + (k % G) * cpg)
        nt = min(rows, qops_threads_for(rows * C, GRAIN))
        for t in prange(nt, schedule="static", num_threads=nt):
            qops_gn_cl(xp, op, rows * t // nt, rows * (t + 1) // nt, P, C, sp, hp, zp, inv, ozp,
                       lo, hi, sgn)
    return out
