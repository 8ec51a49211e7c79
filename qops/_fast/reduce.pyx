# Reductions (mirror of qops/_ref/reduce.py): max/min with first-occurrence indices and the
# raw-value mean rint(f32(f32(sum) / f32(n))), over axis 1 of (outer, n, inner) arrays.
# Sums are exact: int64 row sums (reduce_sum.h), or int32 column sums over at most CHUNK rows
# flushed into int64. Parallel work items are independent (row, block) pairs; per-item results
# are combined serially after.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES (<op>.<route>), every entry point calls it, and qops.show_config(op, *args) reports
# it (qops/_show.py).
from qops._fast._routes import Route, TRACE, module_isa, trace_routes as _trace_routes

import numpy as np
from cython.parallel cimport prange
from qops._fast._common cimport *

cdef extern from "reduce_sum.h" nogil:
    int64_t qops_sum_bytes(const uint8_t *p, Py_ssize_t n, int is_signed)
    void qops_run_means(const uint8_t *x, uint8_t *out, Py_ssize_t r0, Py_ssize_t r1,
                        Py_ssize_t n, int is_signed, float mul, float div)
    void qops_col_means(const uint8_t *x, Py_ssize_t stride, Py_ssize_t n, Py_ssize_t c0,
                        Py_ssize_t c1, uint8_t *out, int is_signed)

DEF CHUNK = 65536         # elements summed in int32 before a flush to int64 (65536 * 255 < 2^31)
DEF IBLOCK = 1024         # inner (column) block of the strided mean and max/min: 1 KB rows
DEF GRAIN = 65536         # below this many elements one thread is faster
DEF COL32_MAX = 1 << 23   # rows whose int32 column totals cannot overflow (n * 255 < 2**31)


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_ISA = module_isa(__name__)
_TIER = {"avx512": "AVX-512", "avx2": "AVX2"}.get(_ISA, "C")

ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "reduce.pyx"),
    Route("extreme_all.chunks", "_extreme_chunks (GCC-vectorized runs of CHUNK)", "reduce.pyx"),
    Route("extreme_dim.rows", "_extreme_row (contiguous rows, inner size 1)", "reduce.pyx"),
    Route("extreme_dim.cols", "_extreme_cols (running extreme over IBLOCK columns)",
          "reduce.pyx"),
    Route("mean_dims.row_means", f"qops_run_means ({_TIER})", "reduce_sum.h"),
    Route("mean_dims.row_sums", f"_row_sums: qops_sum_bytes per CHUNK ({_TIER}), int64",
          "reduce_sum.h"),
    Route("mean_dims.col_means", f"qops_col_means ({_TIER})", "reduce_sum.h"),
    Route("mean_dims.col_blocks", "_column_block_mean (int32 per CHUNK rows, int64)",
          "reduce.pyx"),
]}
BUILT = frozenset(ROUTES)      # every build runs every route (the tier is in the kernel text)

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_ALL = ROUTES["extreme_all.chunks"]
cdef object R_DIM_ROWS = ROUTES["extreme_dim.rows"]
cdef object R_DIM_COLS = ROUTES["extreme_dim.cols"]
cdef object R_ROW_MEANS = ROUTES["mean_dims.row_means"]
cdef object R_ROW_SUMS = ROUTES["mean_dims.row_sums"]
cdef object R_COL_MEANS = ROUTES["mean_dims.col_means"]
cdef object R_COL_BLOCKS = ROUTES["mean_dims.col_blocks"]

DEF OP_ALL = 0       # max_all, min_all
DEF OP_DIM = 1       # max_dim, min_dim
DEF OP_MEAN = 2      # mean_dims


cdef object _plan(int op, Py_ssize_t n0, Py_ssize_t n, Py_ssize_t n2):
    """The Route of one call: every kernel choice of the family, in one place.

    op: OP_*; (n0, n, n2): the (outer, reduced, inner) shape (OP_ALL: (1, size, 1))."""
    if n0 * n * n2 == 0 and (op == OP_ALL or n0 * n2 == 0):
        route = R_EMPTY
    elif op == OP_ALL:
        route = R_ALL
    elif op == OP_DIM:
        route = R_DIM_ROWS if n2 == 1 else R_DIM_COLS
    elif n2 == 1:
        # whole groups of 8 rows per thread, or one row short enough for a single run
        route = R_ROW_MEANS if n0 >= 8 or n <= CHUNK else R_ROW_SUMS
    else:
        route = R_COL_MEANS if n <= COL32_MAX else R_COL_BLOCKS
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, q):
    """The Route the fast backend's reduce op `op` takes for q, as passed to that entry point
    ((outer, n, inner) for the *_dim ops and mean_dims)."""
    q = np.asarray(q)
    if op in ("max_all", "min_all"):
        return _plan(OP_ALL, 1, q.size, 1)
    if op not in ("max_dim", "min_dim", "mean_dims"):
        raise ValueError(f"plan: unknown reduce op {op!r}")
    return _plan(OP_MEAN if op == "mean_dims" else OP_DIM, q.shape[0], q.shape[1], q.shape[2])


# -- whole-array max/min ------------------------------------------------------------------

cdef inline q8_t _extreme_run(const q8_t *p, Py_ssize_t n, bint is_max) noexcept nogil:
    # Plain pointer loops (outside any prange body) so GCC vectorizes them.
    cdef Py_ssize_t i
    cdef q8_t m = p[0]
    if is_max:
        for i in range(n):
            m = p[i] if p[i] > m else m
    else:
        for i in range(n):
            m = p[i] if p[i] < m else m
    return m


cdef void _extreme_chunks(const q8_t[::1] q, q8_t[::1] part, bint is_max) noexcept nogil:
    cdef Py_ssize_t n = q.shape[0], nb = part.shape[0], b
    for b in prange(nb, schedule="static", num_threads=qops_threads_for(n, GRAIN)):
        part[b] = _extreme_run(&q[b * CHUNK], min(CHUNK, n - b * CHUNK), is_max)


def _extreme_all(q, bint is_max):
    flat = np.ascontiguousarray(q).reshape(-1)
    _plan(OP_ALL, 1, flat.shape[0], 1)
    part = np.empty((flat.shape[0] + CHUNK - 1) // CHUNK, dtype=flat.dtype)
    if flat.dtype == np.uint8:
        _extreme_chunks[uint8_t](flat, part, is_max)
    else:
        _extreme_chunks[int8_t](flat, part, is_max)
    return np.asarray(part.max() if is_max else part.min(), dtype=flat.dtype)


def max_all(q):
    """The largest raw value of a non-empty array, as a 0-d array of q's dtype."""
    return _extreme_all(q, True)


def min_all(q):
    """The smallest raw value of a non-empty array, as a 0-d array of q's dtype."""
    return _extreme_all(q, False)


# -- max/min over one axis ------------------------------------------------------------------

cdef inline void _extreme_row(const q8_t *p, Py_ssize_t n, q8_t *val, int64_t *idx,
                              bint is_max) noexcept nogil:
    # One contiguous row: the extreme first (vectorizes), then its first position.
    cdef Py_ssize_t j = 0
    cdef q8_t m = _extreme_run(p, n, is_max)
    while p[j] != m:
        j += 1
    val[0] = m
    idx[0] = j


cdef void _extreme_cols(const q8_t[:, :, ::1] q, q8_t[:, ::1] val, int64_t[:, ::1] idx,
                        Py_ssize_t o, Py_ssize_t i0, Py_ssize_t i1, bint is_max) noexcept nogil:
    # Running extreme over rows j of one (outer, inner-block) item; strict comparison keeps
    # the first index.
    cdef Py_ssize_t n = q.shape[1], i, j
    cdef q8_t v
    for i in range(i0, i1):
        val[o, i] = q[o, 0, i]
        idx[o, i] = 0
    for j in range(1, n):
        for i in range(i0, i1):
            v = q[o, j, i]
            if (v > val[o, i]) if is_max else (v < val[o, i]):
                val[o, i] = v
                idx[o, i] = j


cdef void _extreme_dim(const q8_t[:, :, ::1] q, q8_t[:, ::1] val, int64_t[:, ::1] idx,
                       bint is_max, bint rows) noexcept nogil:
    cdef Py_ssize_t n0 = q.shape[0], n = q.shape[1], n2 = q.shape[2]
    cdef Py_ssize_t nbi = (n2 + IBLOCK - 1) // IBLOCK, w, o, i0
    for w in prange(n0 * nbi, schedule="static",
                    num_threads=qops_threads_for(n0 * n * n2, GRAIN)):
        o = w // nbi
        i0 = (w % nbi) * IBLOCK
        if rows:
            _extreme_row(&q[o, 0, 0], n, &val[o, 0], &idx[o, 0], is_max)
        else:
            _extreme_cols(q, val, idx, o, i0, min(i0 + IBLOCK, n2), is_max)


def _extreme_over(q, bint is_max):
    q = np.ascontiguousarray(q)
    val = np.empty((q.shape[0], q.shape[2]), dtype=q.dtype)
    idx = np.empty((q.shape[0], q.shape[2]), dtype=np.int64)
    route = _plan(OP_DIM, q.shape[0], q.shape[1], q.shape[2])
    if route is not R_EMPTY:
        if q.dtype == np.uint8:
            _extreme_dim[uint8_t](q, val, idx, is_max, route is R_DIM_ROWS)
        else:
            _extreme_dim[int8_t](q, val, idx, is_max, route is R_DIM_ROWS)
    return val, idx


def max_dim(q):
    """Largest raw value over axis 1 of (outer, n, inner) and the index of its first occurrence."""
    return _extreme_over(q, True)


def min_dim(q):
    """Smallest raw value over axis 1 of (outer, n, inner) and the index of its first occurrence."""
    return _extreme_over(q, False)


# -- mean -------------------------------------------------------------------------------------

cdef inline int64_t _sum_run(const q8_t *p, Py_ssize_t n) noexcept nogil:
    if q8_t is int8_t:
        return qops_sum_bytes(<const uint8_t *>p, n, 1)
    else:
        return qops_sum_bytes(<const uint8_t *>p, n, 0)


cdef void _row_sums(const q8_t[:, ::1] q, int64_t[:, ::1] part) noexcept nogil:
    # part[r, c] = sum of row r's chunk c.
    cdef Py_ssize_t rows = q.shape[0], n = q.shape[1], nc = part.shape[1], w, r, c
    for w in prange(rows * nc, schedule="static", num_threads=qops_threads_for(rows * n, GRAIN)):
        r = w // nc
        c = w % nc
        part[r, c] = _sum_run(&q[r, c * CHUNK], min(CHUNK, n - c * CHUNK))


cdef void _column_block_mean(const q8_t[:, :, ::1] q, q8_t[:, ::1] out, Py_ssize_t o,
                             Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    # One (outer, inner-block) item; its accumulators live on this call's stack, so each
    # thread has its own.
    cdef Py_ssize_t n = q.shape[1], i, j, j0, j1
    cdef int32_t acc[IBLOCK]
    cdef int64_t acc64[IBLOCK]
    cdef float fn = <float>n
    for i in range(i1 - i0):
        acc64[i] = 0
    for j0 in range(0, n, CHUNK):
        j1 = min(j0 + CHUNK, n)
        for i in range(i1 - i0):
            acc[i] = 0
        for j in range(j0, j1):
            for i in range(i0, i1):
                acc[i - i0] += q[o, j, i]
        for i in range(i1 - i0):
            acc64[i] += acc[i]
    for i in range(i0, i1):
        out[o, i] = <q8_t>qops_rintf(<float>acc64[i - i0] / fn)


cdef void _column_means(const q8_t[:, :, ::1] q, q8_t[:, ::1] out, bint col32) noexcept nogil:
    cdef Py_ssize_t n0 = q.shape[0], n = q.shape[1], n2 = q.shape[2]
    cdef Py_ssize_t nbi = (n2 + IBLOCK - 1) // IBLOCK, w, o, i0
    if col32:
        # int32 column totals suffice (n * 255 < 2**31): reduce_sum.h's 16-bit blocks
        for w in prange(n0 * nbi, schedule="static",
                        num_threads=qops_threads_for(n0 * n * n2, GRAIN)):
            o = w // nbi
            i0 = (w % nbi) * IBLOCK
            qops_col_means(<const uint8_t*>&q[o, 0, 0], n2, n, i0, min(i0 + IBLOCK, n2),
                           <uint8_t*>&out[o, i0], q8_t is int8_t)
        return
    for w in prange(n0 * nbi, schedule="static",
                    num_threads=qops_threads_for(n0 * n * n2, GRAIN)):
        _column_block_mean(q, out, w // nbi, (w % nbi) * IBLOCK,
                           min((w % nbi) * IBLOCK + IBLOCK, n2))


cdef void _row_means(const q8_t[:, ::1] q, q8_t[::1] out) noexcept nogil:
    # Exact int64 sum per row, then the mean (reduce_sum.h); each thread a range of rows in
    # whole groups of 8, as qops_run_means takes them.
    cdef Py_ssize_t rows = q.shape[0], n = q.shape[1], t, a, b
    cdef int nt = qops_threads_for(rows * n, GRAIN)
    cdef int sgn = q8_t is int8_t
    if nt <= 1:
        qops_run_means(<const uint8_t*>&q[0, 0], <uint8_t*>&out[0], 0, rows, n, sgn, 1.0, n)
        return
    for t in prange(nt, schedule="static", num_threads=nt):
        a = (rows * t // nt) // 8 * 8
        b = rows if t == nt - 1 else (rows * (t + 1) // nt) // 8 * 8
        qops_run_means(<const uint8_t*>&q[0, 0], <uint8_t*>&out[0], a, b, n, sgn, 1.0, n)


def mean_dims(q):
    """Mean over axis 1 of (outer, n, inner) on raw values: rint(f32(f32(sum) / f32(n)))."""
    q = np.ascontiguousarray(q)
    n0, n, n2 = q.shape
    out = np.empty((n0, n2), dtype=q.dtype)
    route = _plan(OP_MEAN, n0, n, n2)
    if route is R_EMPTY:
        return out
    if route is R_ROW_MEANS:
        if q.dtype == np.uint8:
            _row_means[uint8_t](q.reshape(n0, n), out.reshape(-1))
        else:
            _row_means[int8_t](q.reshape(n0, n), out.reshape(-1))
        return out
    if route is R_ROW_SUMS:
        rows = q.reshape(n0, n)
        part = np.empty((n0, (n + CHUNK - 1) // CHUNK), dtype=np.int64)
        if q.dtype == np.uint8:
            _row_sums[uint8_t](rows, part)
        else:
            _row_sums[int8_t](rows, part)
        total = part.sum(axis=1) if part.shape[1] > 1 else part[:, 0]
        out[:, 0] = np.rint(total.astype(np.float32) / np.float32(n))
        return out
    if q.dtype == np.uint8:
        _column_means[uint8_t](q, out, route is R_COL_MEANS)
    else:
        _column_means[int8_t](q, out, route is R_COL_MEANS)
    return out
