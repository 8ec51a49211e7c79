# Element-wise activations (mirror of qops/_ref/activation.py).
# Contract: uint8/int8 in, same dtype out. An 8-bit input has only 256 possible values, so each
# float-domain activation builds its 256-entry output table here, with its own float32
# arithmetic (D_vec -> f(x) -> Q_vec, the vector-body formula), then looks every element up.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES, every entry point calls it, and qops.show_config(op, *args) reports it
# (qops/_show.py). The table lookup (lut.*) runs VBMI permutes where the avx512 build finds
# VBMI on the CPU, else the build's tier (qops_lut.h); clamp_raw runs the AVX-512 shifted-line
# kernel for 256+ bytes whose source and output lie a multiple of 4 bytes apart, else a loop
# GCC vectorizes (qops_clamp.h). The float GELU (gelu_f32) is one GCC-vectorized loop of
# float32 FMAs (qops_gelu.h), which also gives the quantized GELU's table its values.
from qops._fast._routes import Route, TRACE, trace_routes as _trace_routes

import numpy as np
from cython.parallel cimport prange
from qops._fast._common cimport *

cdef extern from "qops_lut.h" nogil:
    void qops_lut_apply_threads(const uint8_t *src, uint8_t *dst, Py_ssize_t n,
                                const uint8_t *table, int threads)
    int qops_lut_vectorized()
    enum:
        QOPS_LUT_TIER

DEF GRAIN = 262144        # below this a second thread costs more than it saves (L2-resident data)
DEF GELU_GRAIN = 16384    # float GELU values per thread (a second thread costs more below)
DEF GELU_BLOCK = 4096     # values per chunk a thread takes

cdef extern from "qops_sleef.h" nogil:
    float qops_sigmoidf(float x)
    float qops_tanhf(float x)
    float qops_expm1f(float x)

cdef extern from "qops_gelu.h" nogil:
    float qops_gelu_erf(float x)
    float qops_gelu_tanh(float x)
    void qops_gelu_f32(const float *x, float *y, Py_ssize_t n, int tanh_form)

LUT_VECTORIZED = bool(qops_lut_vectorized())   # also initialises the CPU check outside prange


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_LUT_TIER = ("qops_lut_avx2 (AVX2: 16 vpshufb, blends)" if QOPS_LUT_TIER >= 1
             else "qops_lut_scalar (C)")

ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "activation.pyx"),
    Route("lut.vbmi", "qops_lut_vbmi (AVX-512 VBMI vpermi2b)", "qops_lut.h"),
    Route("lut.bytes", _LUT_TIER, "qops_lut.h"),
    Route("clamp.shifted", "qops_clamp_shifted (AVX-512 aligned lines)", "qops_clamp.h"),
    Route("clamp.loop", "qops_clamp_u8/_s8 loop (GCC-vectorized)", "qops_clamp.h"),
    Route("gelu.f32", "qops_gelu_f32 loop (float32 FMAs, GCC-vectorized)", "qops_gelu.h"),
]}


def _built_here(name):
    if name == "lut.vbmi":
        return LUT_VECTORIZED
    if name == "clamp.shifted":
        return bool(QOPS_CLAMP_SHIFTED)
    return True


BUILT = frozenset(n for n in ROUTES if _built_here(n))     # the routes this build can take

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_LUT_VBMI = ROUTES["lut.vbmi"]
cdef object R_LUT = ROUTES["lut.bytes"]
cdef object R_CLAMP_SHIFTED = ROUTES["clamp.shifted"]
cdef object R_CLAMP = ROUTES["clamp.loop"]
cdef object R_GELU = ROUTES["gelu.f32"]
cdef bint _VBMI = LUT_VECTORIZED

# what a call computes, for _plan
DEF P_LUT = 0
DEF P_CLAMP = 1
DEF P_GELU = 2


cdef object _plan(int what, Py_ssize_t n, Py_ssize_t off):
    """The Route of one call: every kernel choice of the family, in one place.

    what: P_LUT (a table activation), P_CLAMP (clamp_raw) or P_GELU (the float GELU);
    n: elements; off: clamp's source minus output address."""
    if n == 0:
        route = R_EMPTY
    elif what == P_GELU:
        route = R_GELU
    elif what == P_CLAMP:
        # (each thread's share starts on a 64-byte boundary: the offset is the same for all)
        route = (R_CLAMP_SHIFTED if QOPS_CLAMP_SHIFTED and n >= 256 and off % 4 == 0
                 else R_CLAMP)
    else:
        route = R_LUT_VBMI if _VBMI else R_LUT
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, q, out=None):
    """The Route the fast backend's activation `op` ("clamp_raw", "gelu_f32", or any table
    activation, e.g. "sigmoid") takes for input q (and clamp_raw's `out`)."""
    q = np.ascontiguousarray(q)
    if op == "gelu_f32":
        return _plan(P_GELU, q.size, 0)
    if op != "clamp_raw":
        return _plan(P_LUT, q.size, 0)
    if out is None:
        out = qops_empty(np, q.shape, q.dtype)
    return _plan(P_CLAMP, q.size,
                 q.size and (<Py_ssize_t>qops_ptr(q) - <Py_ssize_t>qops_ptr(out)))

# Which formula a table holds.
DEF K_LEAKY = 0
DEF K_HARDSIGMOID = 1
DEF K_HARDSWISH = 2
DEF K_ELU = 3
DEF K_SIGMOID = 4
DEF K_TANH = 5
DEF K_GELU = 6
DEF K_GELU_TANH = 7


cdef inline float _f(int kind, float x, float xsc, float p) noexcept nogil:
    # x: D_vec value; xsc: D_sc value (sigmoid's dequantize); p: slope or alpha.
    # float-typed constants: a bare 3.0 would make C compute in double and round twice
    cdef float c, zero = 0.0, one = 1.0, three = 3.0, six = 6.0
    if kind == K_LEAKY:
        return x if x > zero else x * p
    if kind == K_HARDSIGMOID:
        c = x + three
        c = c if c > zero else zero
        c = c if c < six else six
        return c / six
    if kind == K_HARDSWISH:
        c = x + three
        c = c if c > zero else zero
        c = c if c < six else six
        c = x * c
        return c / six
    if kind == K_ELU:
        if x > zero:
            return x
        c = qops_expm1f(x)
        return c * p
    if kind == K_SIGMOID:
        return qops_sigmoidf(xsc)
    if kind == K_GELU:
        return qops_gelu_erf(x)
    if kind == K_GELU_TANH:
        return qops_gelu_tanh(x)
    return qops_tanhf(x)


cdef void _build_table(uint8_t[::1] table, int kind, float scale, int32_t zp, float p,
                       float out_inv, int32_t out_zp, int qmin, int qmax) noexcept nogil:
    cdef int r
    cdef float s_negzp = scale * <float>(-zp)
    cdef float lo = <float>(qmin - out_zp), hi = <float>(qmax - out_zp)
    cdef float x, xsc, y
    for r in range(qmin, qmax + 1):
        x = qops_d_vec(r, scale, s_negzp)
        xsc = qops_d_sc(r, scale, zp)
        y = _f(kind, x, xsc, p)
        table[<uint8_t>r] = <uint8_t>qops_q_vec(y, out_inv, out_zp, lo, hi)




_TABLES = {}


def _map(q, int kind, float scale, int32_t zero_point, float p, float out_inv_scale,
         int32_t out_zero_point):
    shape = q.shape                       # ascontiguousarray makes 0-d arrays 1-d
    q = np.ascontiguousarray(q)
    qmin, qmax = qops_range8(q.dtype)
    # A model calls each activation with a few parameter sets: keep their tables (building
    # one runs the float formula 256 times, elu's with expm1).
    key = (kind, scale, zero_point, p, out_inv_scale, out_zero_point, qmin)
    table = _TABLES.get(key)
    if table is None:
        table = np.empty(256, dtype=np.uint8)
        _build_table(table, kind, scale, zero_point, p, out_inv_scale, out_zero_point, qmin, qmax)
        table.flags.writeable = False
        if len(_TABLES) >= 1024:
            _TABLES.clear()
        _TABLES[key] = table
    out = qops_empty(np, shape, q.dtype)
    cdef Py_ssize_t n = q.size
    if _plan(P_LUT, n, 0) is not R_EMPTY:
        # int8 data is looked up through its two's-complement byte (the table is indexed so)
        qops_lut_apply_threads(<const uint8_t*>qops_ptr(q), <uint8_t*>qops_ptr(out, True), n,
                               <const uint8_t*>qops_ptr(table), qops_threads_for(n, GRAIN))
    return out


cdef extern from "qops_clamp.h" nogil:
    enum:
        QOPS_CLAMP_SHIFTED
    void qops_clamp_u8(const uint8_t* src, uint8_t* dst, Py_ssize_t n, uint8_t lo, uint8_t hi,
                       int threads) nogil
    void qops_clamp_s8(const int8_t* src, int8_t* dst, Py_ssize_t n, int8_t lo, int8_t hi,
                       int threads) nogil


def clamp_raw(q, lo, hi, out=None):
    """min(max(q, lo), hi) on raw values (relu, relu6, hardtanh, clamp).

    out: None, or a C-contiguous array of q's shape and dtype to write into (may be q itself).
    """
    if out is None:
        out = qops_empty(np, q.shape, q.dtype)
    q = np.ascontiguousarray(q)           # (0-d becomes 1-d: out keeps the shape)
    cdef Py_ssize_t n = q.size
    if n == 0:
        _plan(P_CLAMP, 0, 0)
        return out
    cdef char* src = qops_ptr(q)
    cdef char* dst = qops_ptr(out, True)
    _plan(P_CLAMP, n, <Py_ssize_t>src - <Py_ssize_t>dst)
    if q.dtype.kind == "u":       # (cheaper than `== np.uint8`, which builds a dtype)
        qops_clamp_u8(<const uint8_t*>src, <uint8_t*>dst, n, lo, hi, qops_threads_for(n, GRAIN))
    else:
        qops_clamp_s8(<const int8_t*>src, <int8_t*>dst, n, lo, hi, qops_threads_for(n, GRAIN))
    return out


def leaky_relu(q, scale, zero_point, negative_slope, out_inv_scale, out_zero_point):
    """Quantized leaky_relu: D_vec, x > 0 ? x : x*slope, Q_vec."""
    return _map(q, K_LEAKY, scale, zero_point, negative_slope, out_inv_scale, out_zero_point)


def hardsigmoid(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized hardsigmoid: D_vec, clamp(x + 3, 0, 6) / 6, Q_vec (fixed output qparams)."""
    return _map(q, K_HARDSIGMOID, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def hardswish(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized hardswish: D_vec, x * clamp(x + 3, 0, 6) / 6, Q_vec."""
    return _map(q, K_HARDSWISH, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def elu(q, scale, zero_point, alpha, out_inv_scale, out_zero_point):
    """Quantized elu: D_vec, x > 0 ? x : alpha * expm1(x), Q_vec."""
    return _map(q, K_ELU, scale, zero_point, alpha, out_inv_scale, out_zero_point)


def sigmoid(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized sigmoid: D_sc, 1 / (1 + exp(-x)), Q_vec."""
    return _map(q, K_SIGMOID, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def tanh(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized tanh: D_vec, tanh(x), Q_vec."""
    return _map(q, K_TANH, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def gelu(q, scale, zero_point, approximate, out_inv_scale, out_zero_point):
    """Quantized GELU: D_vec, gelu(x) (approximate "none" or "tanh", as gelu_f32), Q_vec."""
    kind = K_GELU_TANH if approximate == "tanh" else K_GELU
    return _map(q, kind, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def gelu_f32(x, approximate):
    """Float GELU of a float32 array (any shape): x/2 erfc(-x / sqrt 2) in float64 rounded
    once, or PyTorch's tanh form with approximate="tanh" (qops_gelu.h)."""
    shape = x.shape
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = qops_empty(np, shape, np.float32)
    cdef Py_ssize_t n = x.size, b, n_blocks = (n + GELU_BLOCK - 1) // GELU_BLOCK, lo
    if _plan(P_GELU, n, 0) is R_EMPTY:
        return out
    cdef const float *xp = <const float *>qops_ptr(x)
    cdef float *op = <float *>qops_ptr(out, True)
    cdef int tanh_form = approximate == "tanh"
    cdef int nt = qops_threads_for(n, GELU_GRAIN)
    with nogil:
        for b in prange(n_blocks, schedule="static", num_threads=nt):
            lo = b * GELU_BLOCK
            qops_gelu_f32(xp + lo, op + lo, min(GELU_BLOCK, n - lo), tanh_form)
    return out
