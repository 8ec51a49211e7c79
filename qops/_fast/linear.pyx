# Quantized linear and dynamic linear (mirror of qops/_ref/linear.py) on the int8 GEMM core of
# qops_gemm.h: exact int32 accumulation, zero-point corrections from precomputed row sums of the
# weight, the float32 output stage fused into the GEMM's store; OpenMP over output tiles.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES, every entry point calls it, and qops.show_config(op, *args) reports it
# (qops/_show.py). The routes (<op>.<route>, op linear or linear_dynamic):
#   gemm          qops_gemm_mt at this build's tier: AVX-512 VNNI, AVX2 or portable C. On AVX2
#                 each weight panel and row block picks the pair-safe kernel (vpmaddubsw +
#                 vpmaddwd) where xmax * S <= 32767, else the nibble kernel (qops_gemm.h).
#   gemm_pairsafe AVX2, weights whose pair sums S are all <= 128: pair-safe for any input.
#   amx           AVX-512 build on a CPU granting AMX, K a multiple of 64 and 16+ rows: AMX
#                 tiles for blocks of 32/16 rows, VNNI for the rest.
#   chunked       K above K_CHUNK: exact int32 products per chunk of columns, summed in int64,
#                 then the output stage here (_finish_u8/_finish_f32).
# and minmax.scan, the min/max of dynamic linear's float input; matmul.gemm / matmul.chunked,
# quantized matmul: each batch entry's b^T packed as a linear weight (8-bit values moved to
# u8 x s8 by flipping the sign bit, zero points moved with them), the GEMM core's exact int32
# (or chunked int64) sums, then matmul's output stage (_finish_mm).
from qops._fast._routes import Route, TRACE, trace_routes as _trace_routes

import numpy as np
from cython.parallel cimport prange, threadid
from libc.stdlib cimport malloc, free
from qops._fast._common cimport *

from qops._fast._gemm cimport *

# AMX tiles where the CPU has them (the VNNI kernels stay for rows and K it does not cover)
_AMX = bool(qops_gemm_amx(1))


def _amx(on=None):
    """Whether the AMX path runs; `on` switches it (tests; off stays off, on needs the CPU)."""
    was = bool(qops_gemm_amx(-1))
    if on is not None:
        qops_gemm_amx(1 if on else 0)
    return was

DEF GRAIN = 262144        # multiply-adds per thread below which a second thread costs more
DEF QBLOCK = 4096         # elements per parallel chunk when quantizing the dynamic input

# Largest K whose exact accumulator fits in int32 for any zero points: |x - x_zp| <= 255 and
# |w - w_zp| <= 255, and 33025 * 255 * 255 < 2**31. Longer rows are split into chunks of this
# many columns whose int32 results are summed in int64.
K_CHUNK = 33025


cdef class PackedWeight:
    """An int8 weight (N x K) in the GEMM core's layout, with its row sums and zero points."""
    cdef readonly Py_ssize_t N, K
    cdef readonly list chunks          # (k0, k1, packed int8 array, row sums int32 array)
    cdef readonly object wzp           # int32 (N,), or None when every zero point is 0
    cdef readonly int pair_max         # largest per-sign sum of a weight pair (AVX2 routes)
    cdef readonly Py_ssize_t paired    # panels with k reordered so that no pair can saturate

    def __reduce__(self):
        raise TypeError("PackedWeight is a per-process cache; pickle the weight instead")


def pack_linear(weight, weight_zero_points):
    """Prepare an int8 weight for repeated products: pack it for the GEMM core."""
    return _pack(weight, weight_zero_points, True)


cdef PackedWeight _pack(weight, weight_zero_points, bint analyse):
    # analyse: look for the AVX2 routes' pair-safe weights (worth it for a weight packed once;
    # matmul packs an operand per call)
    cdef const int8_t[:, ::1] w = np.ascontiguousarray(weight, dtype=np.int8)
    cdef int8_t[::1] buf
    cdef int32_t[::1] sums
    cdef Py_ssize_t N = w.shape[0], K = w.shape[1], k0, k1
    cdef PackedWeight p = PackedWeight()
    p.N, p.K, p.chunks = N, K, []
    for k0 in range(0, max(K, 1), K_CHUNK):
        k1 = min(k0 + K_CHUNK, K)
        # 64-byte aligned: one packed weight group row is a whole number of cache lines
        packed = qops_aligned(np, np.empty(qops_gemm_packed_size(N, k1 - k0), np.int8))
        wsum = np.zeros(N, np.int32)
        buf, sums = packed, wsum
        if N > 0 and k1 > k0:
            with nogil:
                qops_gemm_pack_ex(&w[0, k0], K, N, k1 - k0, &buf[0], &sums[0], analyse)
        p.chunks.append((k0, k1, packed, wsum))
    wzp = np.ascontiguousarray(weight_zero_points, dtype=np.int32)
    p.wzp = wzp if np.any(wzp) else None
    p.pair_max = _pair_max(np.asarray(w)) if analyse and QL_TIER == 1 and K <= K_CHUNK \
        else 256
    p.paired = 0
    if analyse and len(p.chunks) == 1 and N > 0 and K > 0 and p.pair_max > 128:
        p.paired = qops_gemm_packed_paired(<const int8_t*>qops_ptr(p.chunks[0][2]), N, K)
    return p


def _pair_max(w):
    # The S of qops_gemm_pack over all panels: the largest sum of the positive parts, or of
    # the magnitudes of the negative parts, of W[n, 2i], W[n, 2i + 1]
    if w.size == 0:
        return 0
    w = w.astype(np.int16)
    if w.shape[1] % 2:
        w = np.concatenate([w, np.zeros((w.shape[0], 1), np.int16)], axis=1)
    pairs = w.reshape(w.shape[0], -1, 2)
    return int(max(np.maximum(pairs, 0).sum(-1).max(), np.maximum(-pairs, 0).sum(-1).max()))


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_TIER = ("AVX-512 VNNI" if QL_TIER == 2 else
         "AVX2: pair-safe (or its two-group int16 form) or nibble kernel per panel by the "
         "input's max" if QL_TIER == 1
         else "portable C")
_MINMAX_TIER = "AVX-512" if QL_TIER == 2 else ("SSE2" if QL_TIER == 1 else "SSE2 or C")


def _routes():
    out = [Route("empty", "none: an empty output", "linear.pyx"),
           Route("minmax.scan", f"qops_lin_minmax ({_MINMAX_TIER})", "qops_linear.h")]
    for op in ("linear", "linear_dynamic"):
        out += [Route(f"{op}.gemm", f"qops_gemm_mt ({_TIER})", "qops_gemm.h"),
                Route(f"{op}.gemm_pairsafe", "qops_gemm_mt (AVX2 pair-safe kernel)",
                      "qops_gemm.h"),
                Route(f"{op}.gemm_paired", "qops_gemm_mt (AVX2 pair-safe kernel on the panels "
                      "whose k could be reordered so that no pair can saturate; nibble kernel "
                      "on the others by the input's max)", "qops_gemm.h"),
                Route(f"{op}.amx", "qops_gemm_mt (AMX tiles + AVX-512 VNNI)", "qops_gemm.h"),
                Route(f"{op}.chunked", f"_acc64: qops_gemm_mt per {K_CHUNK} columns ({_TIER}),"
                      " int64 sums", "linear.pyx")]
    out += [Route("matmul.gemm", f"per batch entry: b^T packed, qops_gemm int32 sums "
                  f"({_TIER}), then the output stage", "linear.pyx"),
            Route("matmul.int16", "AVX2: both operands centred to int16, vpmaddwd 6x16 "
                  "tiles (exact: no pair sum can saturate), then the output stage",
                  "qops_matmul.h"),
            Route("matmul.chunked", f"per batch entry: _acc64 per {K_CHUNK} columns, int64 "
                  f"sums, _finish_mm", "linear.pyx")]
    return {r.name: r for r in out}


def _built_here(name):
    if name.endswith((".gemm_pairsafe", ".gemm_paired")):
        return QL_TIER == 1
    if name.endswith(".amx"):
        return bool(qops_gemm_amx(-1))
    if name == "matmul.int16":
        return QL_TIER == 1
    if name == "matmul.gemm":
        return QL_TIER != 1
    return True


ROUTES = _routes()
BUILT = frozenset(n for n in ROUTES if _built_here(n))     # the routes this build can take

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_MINMAX = ROUTES["minmax.scan"]
cdef object R_GEMM = ROUTES["linear.gemm"]
cdef object R_SAFE = ROUTES["linear.gemm_pairsafe"]
cdef object R_PAIRED = ROUTES["linear.gemm_paired"]
cdef object R_AMX = ROUTES["linear.amx"]
cdef object R_CHUNK = ROUTES["linear.chunked"]
cdef object RD_GEMM = ROUTES["linear_dynamic.gemm"]
cdef object RD_SAFE = ROUTES["linear_dynamic.gemm_pairsafe"]
cdef object RD_PAIRED = ROUTES["linear_dynamic.gemm_paired"]
cdef object RD_AMX = ROUTES["linear_dynamic.amx"]
cdef object RD_CHUNK = ROUTES["linear_dynamic.chunked"]
cdef object RM_GEMM = ROUTES["matmul.gemm"]
cdef object RM_CHUNK = ROUTES["matmul.chunked"]
cdef object RM_INT16 = ROUTES["matmul.int16"]


cdef object _plan(int op, Py_ssize_t M, PackedWeight p, Py_ssize_t N=0, Py_ssize_t K=0):
    """The Route of one call: every kernel choice of the family, in one place.

    op: 0 linear, 1 linear_dynamic, 2 minmax (M = its element count), 3 matmul (M: batch
    entries times rows, N and K its sizes); M: rows of x; p: the packed weight."""
    if op == 2:
        route = R_MINMAX
    elif op == 3:
        # AVX2: the u8 x s8 core would need its nibble kernel (full-range operands)
        route = R_EMPTY if M == 0 or N == 0 else (
            RM_CHUNK if K > K_CHUNK else (RM_INT16 if QL_TIER == 1 else RM_GEMM))
    elif M == 0 or p.N == 0:
        route = R_EMPTY
    elif len(p.chunks) > 1:
        route = RD_CHUNK if op else R_CHUNK
    elif QL_TIER == 2 and M >= 16 and p.K % 64 == 0 and qops_gemm_amx(-1):
        # qg_amx_k: AMX blocks need whole 64-value tiles of k and 16 rows
        route = RD_AMX if op else R_AMX
    elif QL_TIER == 1 and p.pair_max <= 128:
        # 255 * 128 <= 32767: no vpmaddubsw pair sum can saturate, whatever the input
        route = RD_SAFE if op else R_SAFE
    elif QL_TIER == 1 and p.paired:
        route = RD_PAIRED if op else R_PAIRED
    else:
        route = RD_GEMM if op else R_GEMM
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, x, packed=None):
    """The Route the fast backend's linear op `op` ("linear", "linear_dynamic", "minmax" or
    "matmul") takes for input x and PackedWeight `packed` (matmul: the second operand)."""
    x = np.asarray(x)
    if op == "minmax":
        return _plan(2, x.size, None)
    if op == "matmul":
        # x: the first operand (B, M, K); packed: the second (B, K, N)
        return _plan(3, x.shape[0] * x.shape[1], None, np.shape(packed)[2], x.shape[2])
    if op not in ("linear", "linear_dynamic"):
        raise ValueError(f"plan: unknown linear op {op!r}")
    return _plan(1 if op == "linear_dynamic" else 0, x.shape[0], packed)



# -- kernels ------------------------------------------------------------------------------

cdef void _gemm(const uint8_t[:, ::1] x, int32_t x_zp, PackedWeight p, Py_ssize_t c,
                int kind, const float *bias, const float *mult, int32_t out_zp, int relu,
                void *out, Py_ssize_t ldc) except *:
    cdef qops_gemm_b b
    cdef qops_gemm_out o
    cdef const int8_t[::1] data
    cdef const int32_t[::1] wsum
    cdef const int32_t[::1] wzp
    cdef Py_ssize_t M = x.shape[0], k0, k1
    k0, k1, packed, sums = p.chunks[c]
    data, wsum = packed, sums
    b.data = &data[0]
    b.wsum = &wsum[0] if p.N > 0 else NULL
    b.wzp = NULL
    if p.wzp is not None:
        wzp = p.wzp
        b.wzp = &wzp[0]
    b.N, b.K = p.N, k1 - k0
    o.kind, o.bias, o.mult, o.out_zp = kind, bias, mult, out_zp
    o.relu, o.out, o.ldc = relu, out, ldc
    cdef int nt = qops_threads_for(M * p.N * max(k1 - k0, 1), GRAIN)
    if M == 0 or p.N == 0:
        return
    with nogil:
        qops_gemm_mt(&x[0, 0] if k1 > k0 else <const uint8_t *>&data[0], x.shape[1], M, x_zp,
                     &b, &o, nt)
    # k0 is applied by the caller through the row offset of x (see _acc64)


cdef object _acc64(const uint8_t[:, ::1] x, int32_t x_zp, PackedWeight p):
    # Rows longer than K_CHUNK: exact int32 products per chunk, summed in int64.
    cdef Py_ssize_t M = x.shape[0], c
    acc = np.zeros((M, p.N), np.int64)
    part = np.empty((M, p.N), np.int32)
    cdef int32_t[:, ::1] pv = part
    for c in range(len(p.chunks)):
        k0, k1 = p.chunks[c][0], p.chunks[c][1]
        xs = np.ascontiguousarray(np.asarray(x)[:, k0:k1])
        _gemm(xs, x_zp, p, c, QOPS_GEMM_I32, NULL, NULL, 0, 0, &pv[0, 0] if M and p.N else NULL,
              p.N)
        acc += part
    return acc


cdef void _finish_u8(const int64_t[:, ::1] acc, const float *bias, const float[::1] mult,
                     int32_t zp, int relu, uint8_t[:, ::1] out) noexcept nogil:
    cdef Py_ssize_t M = acc.shape[0], N = acc.shape[1], m, n
    cdef float lo = <float>((zp if relu else 0) - zp), hi = <float>(255 - zp), y, z
    for m in prange(M, schedule="static", num_threads=qops_threads_for(M * N, 65536)):
        for n in range(N):
            y = <float>acc[m, n]
            if bias != NULL:
                y = y + bias[n]
            z = y * mult[n]
            z = z if z > lo else lo
            z = z if z < hi else hi
            out[m, n] = <uint8_t>(<int32_t>qops_rintf(z) + zp)


cdef void _finish_f32(const int64_t[:, ::1] acc, const float *bias, const float[::1] mult,
                      int relu, float[:, ::1] out) noexcept nogil:
    cdef Py_ssize_t M = acc.shape[0], N = acc.shape[1], m, n
    cdef float r
    for m in prange(M, schedule="static", num_threads=qops_threads_for(M * N, 65536)):
        for n in range(N):
            r = fmaf(<float>acc[m, n], mult[n], bias[n] if bias != NULL else 0.0)
            if relu and not (r > 0):
                r = 0
            out[m, n] = r


cdef extern from "<math.h>" nogil:
    float fmaf(float, float, float)


def linear(x, x_zero_point, packed, bias_term, multiplier, out_zero_point, relu):
    """Quantized linear: int32 accumulation, float bias term, requantization to quint8."""
    cdef const uint8_t[:, ::1] xv = np.ascontiguousarray(x, dtype=np.uint8)
    cdef PackedWeight p = packed
    cdef const float[::1] mult = np.ascontiguousarray(multiplier, dtype=np.float32)
    cdef const float[::1] bt
    cdef const float *bptr = NULL
    cdef Py_ssize_t M = xv.shape[0]
    out = np.empty((M, p.N), np.uint8)
    cdef uint8_t[:, ::1] ov = out
    if bias_term is not None and p.N > 0:
        bt = np.ascontiguousarray(bias_term, dtype=np.float32)
        bptr = &bt[0]
    route = _plan(0, M, p)
    if route is R_EMPTY:
        return out
    if route is not R_CHUNK:
        _gemm(xv, x_zero_point, p, 0, QOPS_GEMM_U8, bptr, &mult[0], out_zero_point,
              1 if relu else 0, &ov[0, 0], p.N)
    else:
        _finish_u8(_acc64(xv, x_zero_point, p), bptr, mult, out_zero_point, 1 if relu else 0, ov)
    return out


cdef void _quantize_rows(const float[:, ::1] x, uint8_t[:, ::1] out, float inv,
                         float zpf) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0] * x.shape[1], nb = (n + QBLOCK - 1) // QBLOCK, b, i, end
    cdef const float *xp = &x[0, 0]
    cdef uint8_t *op = &out[0, 0]
    for b in prange(nb, schedule="static", num_threads=qops_threads_for(n, 65536)):
        end = min((b + 1) * QBLOCK, n)
        for i in range(b * QBLOCK, end):
            op[i] = <uint8_t>qops_q_fma(xp[i], inv, zpf, 0.0, 255.0)


cdef extern from "qops_linear.h" nogil:
    enum:
        QL_TIER
    void qops_lin_minmax(const float *x, Py_ssize_t n, float *lo, float *hi, int *nan) nogil


DEF MAXBLOCKS = 64


def minmax(x):
    """The min and max of float32 `x` (NaN if it holds one), as Python floats."""
    cdef const float[::1] xv = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    cdef Py_ssize_t n = xv.shape[0], nb, b, step
    cdef int nt = qops_threads_for(n, 65536)
    cdef float lo[MAXBLOCKS]
    cdef float hi[MAXBLOCKS]
    cdef int nan[MAXBLOCKS]
    cdef float mn, mx
    cdef int bad = 0
    if _TRACE:
        _plan(2, n, None)
    nb = min(nt * 4, MAXBLOCKS) if nt > 1 else 1
    step = (n + nb - 1) // nb
    with nogil:
        # Each block reduces privately; the blocks are combined after (no shared accumulator).
        for b in prange(nb, schedule="static", num_threads=nt):
            if b * step < n:
                qops_lin_minmax(&xv[b * step], min(step, n - b * step), &lo[b], &hi[b], &nan[b])
            else:
                lo[b] = xv[0]
                hi[b] = xv[0]
                nan[b] = 0
        mn, mx = lo[0], hi[0]
        for b in range(nb):
            mn = lo[b] if lo[b] < mn else mn
            mx = hi[b] if hi[b] > mx else mx
            bad = bad | nan[b]
    if bad:
        return float("nan"), float("nan")
    return mn, mx


def linear_dynamic(x, x_inv_scale, x_zero_point, packed, multiplier, bias, relu):
    """Dynamic linear: quantize float32 `x` (Q_fma), int32 accumulation, float32 output."""
    cdef const float[:, ::1] xv = np.ascontiguousarray(x, dtype=np.float32)
    cdef PackedWeight p = packed
    cdef const float[::1] mult = np.ascontiguousarray(multiplier, dtype=np.float32)
    cdef const float[::1] bv
    cdef const float *bptr = NULL
    cdef Py_ssize_t M = xv.shape[0]
    out = np.empty((M, p.N), np.float32)
    cdef float[:, ::1] ov = out
    if bias is not None and p.N > 0:
        bv = np.ascontiguousarray(bias, dtype=np.float32)
        bptr = &bv[0]
    route = _plan(1, M, p)
    if route is R_EMPTY:
        return out
    xq = np.empty((M, xv.shape[1]), np.uint8)
    cdef uint8_t[:, ::1] xqv = xq
    if xv.shape[1] > 0:
        _quantize_rows(xv, xqv, x_inv_scale, x_zero_point)
    if route is not RD_CHUNK:
        _gemm(xqv, x_zero_point, p, 0, QOPS_GEMM_F32, bptr, &mult[0], 0, 1 if relu else 0,
              &ov[0, 0], p.N)
    else:
        _finish_f32(_acc64(xqv, x_zero_point, p), bptr, mult, 1 if relu else 0, ov)
    return out


# -- quantized matmul ---------------------------------------------------------------------

cdef extern from "qops_matmul.h" nogil:
    Py_ssize_t qops_mm16_packed_len(Py_ssize_t N, Py_ssize_t K)
    void qops_mm16_pack(const void *b, int sgn, Py_ssize_t K, Py_ssize_t N, int32_t zp,
                        int16_t *packed)
    void qops_mm16_center(const void *a, int sgn, Py_ssize_t K, int32_t zp, Py_ssize_t rows,
                          int16_t *out)
    void qops_mm16_rows(const int16_t *A, Py_ssize_t lda, Py_ssize_t m0, Py_ssize_t m1,
                        const int16_t *packed, Py_ssize_t N, Py_ssize_t K, int32_t *acc,
                        Py_ssize_t ldc)
    void qops_mm_finish_u8(const int32_t *acc, Py_ssize_t n, double P, float inv, float zpf,
                           float qmin, float qmax, uint8_t *out)
    void qops_mm_finish_s8(const int32_t *acc, Py_ssize_t n, double P, float inv, float zpf,
                           float qmin, float qmax, int8_t *out)
    void qops_mm_finish64_u8(const int64_t *acc, Py_ssize_t n, double P, float inv, float zpf,
                             float qmin, float qmax, uint8_t *out)
    void qops_mm_finish64_s8(const int64_t *acc, Py_ssize_t n, double P, float inv, float zpf,
                             float qmin, float qmax, int8_t *out)


cdef inline void _finish_mm_row(const int32_t *acc32, const int64_t *acc64, Py_ssize_t n,
                                double P, float inv, float zpf, float qmin, float qmax,
                                int sgn, char *out) noexcept nogil:
    # r = f32(f64(acc) * P), then Q_fma with the output's qparams (qops_matmul.h)
    if acc32 != NULL and sgn:
        qops_mm_finish_s8(acc32, n, P, inv, zpf, qmin, qmax, <int8_t *>out)
    elif acc32 != NULL:
        qops_mm_finish_u8(acc32, n, P, inv, zpf, qmin, qmax, <uint8_t *>out)
    elif sgn:
        qops_mm_finish64_s8(acc64, n, P, inv, zpf, qmin, qmax, <int8_t *>out)
    else:
        qops_mm_finish64_u8(acc64, n, P, inv, zpf, qmin, qmax, <uint8_t *>out)


DEF MM_ROWS = 64          # rows of one output stage task


cdef void _finish_mm(const int32_t *acc32, const int64_t *acc64, Py_ssize_t M, Py_ssize_t N,
                     double P, float inv, float zpf, float qmin, float qmax, int sgn,
                     char *out) noexcept nogil:
    cdef Py_ssize_t t, m0, nt = (M + MM_ROWS - 1) // MM_ROWS
    for t in prange(nt, schedule="static", num_threads=qops_threads_for(M * N, 65536)):
        m0 = t * MM_ROWS
        _finish_mm_row(acc32 + m0 * N if acc32 != NULL else NULL,
                       acc64 + m0 * N if acc64 != NULL else NULL,
                       (MM_ROWS if m0 + MM_ROWS <= M else M - m0) * N, P, inv, zpf, qmin, qmax,
                       sgn, out + m0 * N)


def matmul(a, b, a_zero_point, b_zero_point, scale_product, inv_scale, zero_point):
    """Quantized batched matmul of raw 8-bit values, requantized to a's type."""
    a = np.asarray(a)
    b = np.asarray(b)
    cdef int sgn = a.dtype == np.int8
    cdef Py_ssize_t nb = a.shape[0], M = a.shape[1], K = a.shape[2], N = b.shape[2], i
    out = np.empty((nb, M, N), a.dtype)
    route = _plan(3, nb * M, None, N, K)
    if route is R_EMPTY:
        return out
    cdef double P = scale_product
    cdef float inv = inv_scale, zpf = zero_point
    cdef float qmin = -128.0 if sgn else 0.0, qmax = 127.0 if sgn else 255.0
    cdef char *op = <char *>qops_ptr(out, True)
    # u8 x s8 for the GEMM core: a signed a moves up by 128 (its sign bit flipped), an
    # unsigned b down by 128, each zero point with it: the differences, so the sums, stay
    if route is RM_INT16:
        _matmul16(a, b, a_zero_point, b_zero_point, P, inv, zpf, qmin, qmax, sgn, op)
        return out
    cdef int32_t x_zp = a_zero_point + (128 if sgn else 0)
    cdef int32_t w_zp = b_zero_point - (0 if sgn else 128)
    x = np.ascontiguousarray(a.view(np.uint8))
    if sgn:
        x = x ^ np.uint8(0x80)
    wzp = np.full(N, w_zp, np.int32)
    if route is RM_CHUNK:
        wt = np.ascontiguousarray(b.transpose(0, 2, 1)).view(np.uint8)
        if not sgn:
            wt = wt ^ np.uint8(0x80)
        wt = wt.view(np.int8)
    cdef const int64_t[:, ::1] acc64
    cdef const uint8_t *xp = <const uint8_t *>qops_ptr(x)
    if route is RM_CHUNK:
        for i in range(nb):
            acc64 = _acc64(x[i], x_zp, _pack(wt[i], wzp, False))
            with nogil:
                _finish_mm(NULL, &acc64[0, 0], M, N, P, inv, zpf, qmin, qmax, sgn,
                           op + i * M * N)
        return out
    acc = np.empty((nb, M, N), np.int32)
    cdef int32_t *accp = <int32_t *>qops_ptr(acc, True)
    if K == 0:
        acc[...] = 0
    cdef qops_gemm_b *bs = NULL
    cdef qops_gemm_out o
    cdef int nt
    cdef Py_ssize_t pstride = 0
    cdef const uint8_t *bp = NULL
    cdef uint8_t *tmpp = NULL
    cdef char *bufp = NULL
    cdef int32_t *sump = NULL
    cdef uint8_t flip = 0 if sgn else 0x80
    if K > 0:
        # each entry's b^T packed by the task that multiplies it (one aligned block; the pair
        # analysis would cost more than the product gains), transposed through its thread's
        # tmp rows (one product: before it, by the calling thread)
        nt = qops_threads_for(nb * M * N * K, GRAIN) if nb > 1 else 1
        pstride = (qops_gemm_packed_size(N, K) + 63) // 64 * 64
        bufs = np.empty(nb * pstride + 64, np.uint8)
        bufp = <char *>qops_ptr(bufs, True)
        bufp += (64 - (<size_t>bufp) % 64) % 64
        sums = np.empty((nb, N), np.int32)
        sump = <int32_t *>qops_ptr(sums, True)
        bc = np.ascontiguousarray(b).view(np.uint8)
        bp = <const uint8_t *>qops_ptr(bc)
        tmps = np.empty((max(nt, 1), N * K), np.uint8)
        tmpp = <uint8_t *>qops_ptr(tmps, True)
    if K > 0:
        bs = <qops_gemm_b *>malloc(nb * sizeof(qops_gemm_b))
        if bs == NULL:
            raise MemoryError()
        for i in range(nb):
            bs[i].data = <const int8_t *>(bufp + i * pstride)
            bs[i].wsum = sump + i * N
            bs[i].wzp = <const int32_t *>qops_ptr(wzp) if w_zp != 0 else NULL
            bs[i].N, bs[i].K = N, K
    o.kind, o.bias, o.mult, o.out_zp, o.relu, o.ldc = QOPS_GEMM_I32, NULL, NULL, 0, 0, N
    try:
        with nogil:
            if nb == 1:
                # one product: its row blocks and panels over the threads
                if K > 0:
                    qops_gemm_pack_t(bp, N, N, K, flip, tmpp, <int8_t *>bufp, sump)
                    o.out = accp
                    qops_gemm_mt(xp, K, M, x_zp, &bs[0], &o,
                                 qops_threads_for(M * N * K, GRAIN))
                _finish_mm(accp, NULL, M, N, P, inv, zpf, qmin, qmax, sgn, op)
            else:
                # many: one entry a task (its packing, the product, then its output stage)
                nt = qops_threads_for(nb * M * N * max(K, 1), GRAIN)
                for i in prange(nb, schedule="dynamic", num_threads=nt if nt < nb else nb):
                    if K > 0:
                        qops_gemm_pack_t(bp + i * K * N, N, N, K, flip,
                                         tmpp + threadid() * N * K,
                                         <int8_t *>(bufp + i * pstride), sump + i * N)
                    _mm_entry(xp + i * M * K, K, M, x_zp, bs + i if K > 0 else NULL,
                              accp + i * M * N, P, inv, zpf, qmin, qmax, sgn, op + i * M * N,
                              N)
    finally:
        free(bs)
    return out


cdef void _matmul16(a, b, int32_t a_zp, int32_t b_zp, double P, float inv, float zpf,
                    float qmin, float qmax, int sgn, char *op) except *:
    # route matmul.int16 (qops_matmul.h): each entry's b packed, then tasks of MM_ROWS rows,
    # each centring its rows of a into its thread's buffer, multiplying, finishing
    cdef Py_ssize_t nb = a.shape[0], M = a.shape[1], K = a.shape[2], N = b.shape[2]
    cdef Py_ssize_t K2 = (K + 1) // 2, plen = qops_mm16_packed_len(N, K), i, t, e, m0, m1
    cdef Py_ssize_t pstride = max(plen, 1), blocks = (M + MM_ROWS - 1) // MM_ROWS
    cdef int nt = qops_threads_for(nb * M * N * max(K, 1), GRAIN)
    ac = np.ascontiguousarray(a)
    bc = np.ascontiguousarray(b)
    packed = np.empty((nb, pstride), np.int16)
    acc = np.empty((nb, M, N), np.int32)
    bufs = np.empty((nt, MM_ROWS * 2 * K2 + 1), np.int16)
    cdef const char *ap = <const char *>qops_ptr(ac)
    cdef const char *bp = <const char *>qops_ptr(bc)
    cdef int16_t *pp = <int16_t *>qops_ptr(packed, True)
    cdef int32_t *cp = <int32_t *>qops_ptr(acc, True)
    cdef int16_t *wp = <int16_t *>qops_ptr(bufs, True)
    cdef int16_t *buf
    with nogil:
        for i in prange(nb, schedule="static", num_threads=nt if nt < nb else nb):
            qops_mm16_pack(bp + i * K * N, sgn, K, N, b_zp, pp + i * pstride)
        for t in prange(nb * blocks, schedule="static", num_threads=nt):
            e = t // blocks
            m0 = (t % blocks) * MM_ROWS
            m1 = m0 + MM_ROWS if m0 + MM_ROWS < M else M
            buf = wp + threadid() * (MM_ROWS * 2 * K2 + 1)
            qops_mm16_center(ap + (e * M + m0) * K, sgn, K, a_zp, m1 - m0, buf)
            qops_mm16_rows(buf, 2 * K2, 0, m1 - m0, pp + e * pstride, N, K,
                           cp + (e * M + m0) * N, N)
            _finish_mm_row(cp + (e * M + m0) * N, NULL, (m1 - m0) * N, P, inv, zpf, qmin,
                           qmax, sgn, op + (e * M + m0) * N)


cdef void _mm_entry(const uint8_t *x, Py_ssize_t K, Py_ssize_t M, int32_t x_zp,
                    const qops_gemm_b *b, int32_t *acc, double P, float inv, float zpf,
                    float qmin, float qmax, int sgn, char *out, Py_ssize_t N) noexcept nogil:
    cdef qops_gemm_out o
    if b != NULL:
        o.kind, o.bias, o.mult, o.out_zp, o.relu = QOPS_GEMM_I32, NULL, NULL, 0, 0
        o.out, o.ldc = acc, N
        qops_gemm(x, K, M, x_zp, b, &o)
    _finish_mm_row(acc, NULL, M * N, P, inv, zpf, qmin, qmax, sgn, out)


# -- float products through numpy's BLAS, on qops' threads (qops/_blas.py) -----------------------
# The float layers' products call numpy's own sgemm (found by qops/_blas.py, its address passed
# in) from qops' OpenMP threads, OpenBLAS itself held at one thread: one pool of threads, so
# qops' kernels and the products never contend for the cores. Tasks are fixed (column blocks,
# batch entries): each is the same sgemm call at any thread count.
ctypedef void (*sgemm64_t)(int order, int ta, int tb, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc) noexcept nogil
ctypedef void (*sgemm32_t)(int order, int ta, int tb, int m, int n, int k, float alpha,
                           const float *a, int lda, const float *b, int ldb, float beta,
                           float *c, int ldc) noexcept nogil

DEF CBLAS_ROW_MAJOR = 101
DEF CBLAS_NO_TRANS = 111
DEF CBLAS_TRANS = 112


def blas_bmm(size_t sgemm, bint ilp64, a, b, bint trans_b, Py_ssize_t blocks,
             Py_ssize_t row_step, int threads):
    """out[i] = a[i] @ (b[i].T if trans_b else b[i]) for float32 C-contiguous a (B, M, K) and
    b (B, N, K) or (B, K, N), by the sgemm at address `sgemm` (64-bit integers if ilp64),
    each product in `blocks` column blocks times row blocks of `row_step` rows, the calls
    spread over `threads`."""
    cdef const float[:, :, ::1] av = a
    cdef const float[:, :, ::1] bv = b
    cdef Py_ssize_t nb = av.shape[0], M = av.shape[1], K = av.shape[2]
    cdef Py_ssize_t N = bv.shape[1] if trans_b else bv.shape[2]
    out = np.empty((nb, M, N), np.float32)
    if nb * M * N == 0:
        return out
    if K == 0:
        out[...] = 0
        return out
    cdef float[:, :, ::1] ov = out
    cdef Py_ssize_t step = (N + blocks - 1) // blocks
    cdef Py_ssize_t nblk = (N + step - 1) // step
    cdef Py_ssize_t rstep = row_step if 0 < row_step < M else M
    cdef Py_ssize_t nrow = (M + rstep - 1) // rstep
    cdef Py_ssize_t per = nrow * nblk
    cdef Py_ssize_t t, i, n0, n1, m0, m1
    cdef int tb = CBLAS_TRANS if trans_b else CBLAS_NO_TRANS
    cdef Py_ssize_t ldb = K if trans_b else N
    cdef sgemm64_t f64 = <sgemm64_t>sgemm
    cdef sgemm32_t f32 = <sgemm32_t>sgemm
    cdef const float *ap = &av[0, 0, 0]
    cdef const float *bp = &bv[0, 0, 0]
    cdef float *op = &ov[0, 0, 0]
    cdef int nt = threads if threads < nb * per else <int>(nb * per)
    with nogil:
        for t in prange(nb * per, schedule="static", num_threads=nt):
            i = t // per
            m0 = (t % per) // nblk * rstep
            m1 = m0 + rstep if m0 + rstep < M else M
            n0 = (t % nblk) * step
            n1 = n0 + step if n0 + step < N else N
            if ilp64:
                f64(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, tb, m1 - m0, n1 - n0, K, 1.0,
                    ap + i * M * K + m0 * K, K,
                    bp + i * (N * K) + (n0 * K if trans_b else n0), ldb, 0.0,
                    op + i * M * N + m0 * N + n0, N)
            else:
                f32(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, tb, <int>(m1 - m0), <int>(n1 - n0),
                    <int>K, 1.0, ap + i * M * K + m0 * K, <int>K,
                    bp + i * (N * K) + (n0 * K if trans_b else n0), <int>ldb, 0.0,
                    op + i * M * N + m0 * N + n0, <int>N)
    return out
