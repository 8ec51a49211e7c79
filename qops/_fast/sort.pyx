# Sort and top-k kernels (mirror of qops/_ref/sort.py).
# Contract: rows of uint8/int8 (int32 through numpy's stable sort); values and int64 indices,
# equal values in increasing index order. 8-bit values have 256 keys, so sort is a counting
# sort and top-k a threshold search on 64-byte masks: both O(n), neither compares elements.
# Keys are the raw bytes XOR `flip`: 0x80 maps int8 to unsigned order, 0xFF reverses it.
# Sort: one counting pass, values written as runs, then one scatter pass storing index i at
# its key's next slot (prefetching a line ahead); a long row is split between
# threads by index range, each range owning, per key, the slots after the earlier ranges'.
# Top-k with small k: a bound from the 64 lane maxima, then one compare-mask pass collecting
# the few candidates, so the row is read twice with vector loads; with AVX-512 and at most 64
# candidates, each candidate's output slot is its rank among them (two mask compares). Rows
# go in batches of 8 whose bound searches interleave; with VBMI2 the candidates of a block are
# collected by one byte compress, so no branch depends on the data.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES (<op>.<route>), every entry point calls it, and qops.show_config(op, *args) reports
# it (qops/_show.py).
from qops._fast._routes import Route, TRACE, module_isa, trace_routes as _trace_routes

import numpy as np
from cython.parallel cimport prange
from qops._fast._common cimport *

cdef extern from "qops_sort.h":
    void qops_hist256(const uint8_t* x, Py_ssize_t n, int64_t* h) nogil
    void qops_fill_runs(uint8_t* vals, const int64_t* cnt, const int64_t* start, uint8_t flip,
                        Py_ssize_t lo, Py_ssize_t hi) nogil
    void qops_scatter(const uint8_t* x, Py_ssize_t lo, Py_ssize_t hi, int64_t* pos,
                      int64_t* idx) nogil
    void qops_starts(const int64_t* cnt, uint8_t flip, int64_t* start) nogil
    void qops_sort_row(const uint8_t* x, Py_ssize_t n, uint8_t flip, uint8_t* vals,
                       int64_t* idx) nogil
    void qops_topk_row(const uint8_t* x, Py_ssize_t n, Py_ssize_t k, uint8_t flip,
                       uint8_t* vals, int64_t* idx) nogil
    void qops_topk_batch(const uint8_t* x, Py_ssize_t n, Py_ssize_t k, uint8_t flip,
                         uint8_t* vals, int64_t* idx) nogil
    int QOPS_TOPK_BATCH
    int qops_topk_use_vbmi
    int qops_cpu_vbmi2()

qops_topk_use_vbmi = qops_cpu_vbmi2()


def _topk_vbmi(on=None):
    """Whether top-k uses its VBMI2 candidate collection; `on` switches it (it stays off on
    CPUs without VBMI2), for the tests to run both. Returns the previous setting."""
    global qops_topk_use_vbmi
    was = bool(qops_topk_use_vbmi)
    if on is not None:
        qops_topk_use_vbmi = 1 if (on and qops_cpu_vbmi2()) else 0
    return was


DEF GRAIN = 8192         # elements per thread below which a second thread costs more than it gives
DEF LONG_ROW = 65536     # from here one row is split between the threads
DEF TOPK_SMALL = 64      # top-k up to this k bounds its threshold from the 64 lane maxima


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

_ISA = module_isa(__name__)
_TIER = {"avx512": "AVX-512BW", "avx2": "AVX2"}.get(_ISA, "C")
cdef bint _VECTOR = _ISA in ("avx512", "avx2")   # the lane-max top-k kernels are built

ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "sort.pyx"),
    Route("sort.stable32", "numpy stable argsort (int32 keys)", "sort.pyx"),
    Route("sort.rows", "qops_sort_row (counting sort, a row per thread)", "qops_sort.h"),
    Route("sort.long_row", "_sort_long_row (one row's index ranges split between threads)",
          "sort.pyx"),
    Route("topk.stable32", "numpy stable argsort (int32 keys)", "sort.pyx"),
    Route("topk.small", f"qops_topk_batch: lane-max bound, compare masks ({_TIER}; "
          "qops_topk_row past 64 candidates)", "qops_sort.h"),
    Route("topk.small_vbmi2", "qops_topk_batch: lane-max bound, VBMI2 byte compress",
          "qops_sort.h"),
    Route("topk.general", "qops_topk_row (block-max bound, candidate scan)", "qops_sort.h"),
]}


def _built_here(name):
    if name == "topk.small_vbmi2":
        return bool(qops_cpu_vbmi2())
    if name == "topk.small":
        return _VECTOR
    return True


BUILT = frozenset(n for n in ROUTES if _built_here(n))     # the routes this build can take

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_SORT32 = ROUTES["sort.stable32"]
cdef object R_SORT_ROWS = ROUTES["sort.rows"]
cdef object R_SORT_LONG = ROUTES["sort.long_row"]
cdef object R_TOPK32 = ROUTES["topk.stable32"]
cdef object R_TOPK_SMALL = ROUTES["topk.small"]
cdef object R_TOPK_VBMI2 = ROUTES["topk.small_vbmi2"]
cdef object R_TOPK = ROUTES["topk.general"]


cdef object _plan(bint topk, Py_ssize_t itemsize, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k):
    """The Route of one call: every kernel choice of the family, in one place.

    topk: topk (else sort); itemsize: bytes per element; (m, n): rows and row length; k: top-k's
    k."""
    if itemsize != 1:
        route = R_TOPK32 if topk else R_SORT32
    elif m * (k if topk else n) == 0:
        route = R_EMPTY
    elif not topk:
        route = R_SORT_LONG if n >= LONG_ROW else R_SORT_ROWS
    elif _VECTOR and k <= TOPK_SMALL:
        route = R_TOPK_VBMI2 if qops_topk_use_vbmi else R_TOPK_SMALL
    else:
        route = R_TOPK
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, x, *args):
    """The Route the fast backend's sort op `op` ("sort" or "topk") takes for 2-D x (and
    topk's k)."""
    x = np.asarray(x)
    if op not in ("sort", "topk"):
        raise ValueError(f"plan: unknown sort op {op!r}")
    return _plan(op == "topk", x.itemsize, x.shape[0], x.shape[1], args[0] if args else 0)


cdef void _sort_rows(const uint8_t* x, Py_ssize_t m, Py_ssize_t n, uint8_t* vals, int64_t* idx,
                     uint8_t flip, int nthreads) noexcept nogil:
    cdef Py_ssize_t r
    if nthreads == 1:
        for r in range(m):
            qops_sort_row(x + r * n, n, flip, vals + r * n, idx + r * n)
        return
    for r in prange(m, schedule="static", num_threads=nthreads):
        qops_sort_row(x + r * n, n, flip, vals + r * n, idx + r * n)


cdef void _sort_long_row(const uint8_t* x, Py_ssize_t n, uint8_t flip, uint8_t* vals,
                         int64_t* idx, int64_t* h, int nthreads) noexcept nogil:
    # Range t of the row (in index order) counts its bytes into h[t], then gets for each key
    # the slots after those of ranges < t: every index lands where a sequential stable sort
    # puts it, whatever the split. Each thread also writes its share of the values.
    cdef int64_t cnt[256]
    cdef int64_t start[256]
    cdef int64_t p, c
    cdef Py_ssize_t t, b
    for t in prange(nthreads, schedule="static", num_threads=nthreads):
        qops_hist256(x + n * t // nthreads, n * (t + 1) // nthreads - n * t // nthreads,
                     h + 256 * t)
    for b in range(256):
        c = 0
        for t in range(nthreads):
            c = c + h[256 * t + b]
        cnt[b] = c
    qops_starts(cnt, flip, start)
    for b in range(256):
        p = start[b]
        for t in range(nthreads):
            c = h[256 * t + b]
            h[256 * t + b] = p
            p = p + c
    for t in prange(nthreads, schedule="static", num_threads=nthreads):
        qops_fill_runs(vals, cnt, start, flip, n * t // nthreads, n * (t + 1) // nthreads)
        qops_scatter(x, n * t // nthreads, n * (t + 1) // nthreads, h + 256 * t, idx)


def _stable_order(x, reverse):
    # int32 data: 2^32 keys, no counting sort; numpy's stable argsort (negated keys to reverse).
    key = -x.astype(np.int64) if reverse else x
    return np.argsort(key, axis=-1, kind="stable").astype(np.int64)


def sort(x, descending):
    """Sort each row of `x`: (values, int64 indices), ties by increasing index."""
    cdef Py_ssize_t m, n, r
    x = np.ascontiguousarray(x)
    m, n = x.shape
    dt = x.dtype
    route = _plan(False, dt.itemsize, m, n, 0)
    if route is R_SORT32:
        idx = _stable_order(x, descending)
        return np.take_along_axis(x, idx, axis=-1), idx
    vals = qops_empty(np, (m, n), dt)
    idx = qops_empty(np, (m, n), np.int64)
    if route is R_EMPTY:
        return vals, idx
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* vp = <uint8_t*>qops_ptr(vals, True)
    cdef int64_t* ip = <int64_t*>qops_ptr(idx, True)
    # keys: int8 bytes with the sign bit flipped sort as unsigned; all bits flipped reverse
    cdef uint8_t flip = (0x80 if dt.kind == "i" else 0) ^ (0xFF if descending else 0)
    cdef int nt
    cdef int64_t[:, ::1] h
    if route is R_SORT_LONG:
        nt = qops_threads_for(n, LONG_ROW // 2)
        h = np.empty((nt, 256), np.int64)
        with nogil:
            for r in range(m):
                _sort_long_row(xp + r * n, n, flip, vp + r * n, ip + r * n, &h[0, 0], nt)
    else:
        nt = min(m, qops_threads_for(m * n, GRAIN))
        with nogil:
            _sort_rows(xp, m, n, vp, ip, flip, nt)
    return vals, idx


cdef void _topk_rows(const uint8_t* x, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, uint8_t* vals,
                     int64_t* idx, uint8_t flip, int nthreads) noexcept nogil:
    # whole batches of rows (see qops_topk_batch) split between the threads, then the rest
    cdef Py_ssize_t r, B = QOPS_TOPK_BATCH, nb = m // QOPS_TOPK_BATCH
    if nthreads == 1 or nb < 2:
        for r in range(nb):
            qops_topk_batch(x + r * B * n, n, k, flip, vals + r * B * k, idx + r * B * k)
    else:
        for r in prange(nb, schedule="static", num_threads=nthreads):
            qops_topk_batch(x + r * B * n, n, k, flip, vals + r * B * k, idx + r * B * k)
    for r in range(nb * B, m):
        qops_topk_row(x + r * n, n, k, flip, vals + r * k, idx + r * k)


def topk(x, k, largest):
    """The k largest (or smallest) of each row of `x`, sorted, ties by increasing index."""
    cdef Py_ssize_t m, n, kk = k
    x = np.ascontiguousarray(x)
    m, n = x.shape
    dt = x.dtype
    route = _plan(True, dt.itemsize, m, n, kk)
    if route is R_TOPK32:
        idx = np.ascontiguousarray(_stable_order(x, largest)[:, :k])
        return np.take_along_axis(x, idx, axis=-1), idx
    vals = np.empty((m, kk), dt)
    idx = np.empty((m, kk), np.int64)
    if route is R_EMPTY:
        return vals, idx
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* vp = <uint8_t*>qops_ptr(vals, True)
    cdef int64_t* ip = <int64_t*>qops_ptr(idx, True)
    # Largest keys of the flipped bytes: smallest values when `largest` is false.
    cdef uint8_t flip = (0x80 if dt.kind == "i" else 0) ^ (0 if largest else 0xFF)
    # rows are the parallel axis: never more threads than rows
    cdef int nt = min(m, qops_threads_for(m * n, GRAIN))
    with nogil:
        _topk_rows(xp, m, n, kk, vp, ip, flip, nt)
    return vals, idx
