# Element-wise arithmetic and concatenation (mirror of qops/_ref/arith.py).
# Contract: uint8/int8 in, same dtype out; add = Q_vec(D_vec(a) + D_vec(b)) in float32, mul and
# add_scalar's requantization = R_int (int product, one float32 multiply); cat = Q_fma(D_sc(q))
# or a copy. Maps of one 8-bit input (add_scalar, cat's requantize) are 256-entry table lookups,
# except on AVX2 without VBMI (the formula per element is faster there); add, mul and those
# formulas are qops_arith.h; add splits one contiguous chunk per thread, mul blocks of
# BLOCK.
#
# Which kernel runs is decided in one place, _plan() below: it returns a named Route from
# ROUTES (<op>.<route>), every entry point calls it, and qops.show_config(op, *args) reports
# it (qops/_show.py).
from qops._fast._routes import Route, TRACE, trace_routes as _trace_routes

import numpy as np
from cython.parallel cimport prange
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset
from qops._fast._common cimport *

cdef extern from "qops_arith.h" nogil:
    ctypedef struct qops_add_params:
        float sa, sa_negzp, sb, sb_negzp, inv, lo, hi
        int32_t zo
        int relu
    void qops_add_run(const void *a, const void *b, void *out, Py_ssize_t n, int is_signed,
                      const qops_add_params *p)
    ctypedef struct qops_mul_params:
        int32_t za, zb, zo
        float m, lo, hi
        int clamp_lo
    void qops_mul_run(const void *a, const void *b, void *out, Py_ssize_t n, int is_signed,
                      const qops_mul_params *p)
    void qops_fill_planes(char *tile, const char *b, Py_ssize_t per, Py_ssize_t R)
    ctypedef struct qops_requant_params:
        int32_t base, zo
        float m, hi
    int qops_requant_ok(int is_signed, int64_t base, int32_t zo)
    void qops_requant_run(const uint8_t *src, uint8_t *dst, Py_ssize_t n, int is_signed,
                          const qops_requant_params *p)
    ctypedef struct qops_cat_params:
        float s, inv, zof, qmin, qmax
        int32_t zp, zo
        int relu
    void qops_cat_requant(const uint8_t *src, uint8_t *dst, Py_ssize_t n, int is_signed,
                          const qops_cat_params *p)
    enum:
        QOPS_ARITH_TIER

cdef extern from "qops_lut.h" nogil:
    void qops_lut_apply(const uint8_t *src, uint8_t *dst, Py_ssize_t n, const uint8_t *table)
    void qops_lut_apply_threads(const uint8_t *src, uint8_t *dst, Py_ssize_t n,
                                const uint8_t *table, int threads)
    int qops_lut_vectorized()
    enum:
        QOPS_LUT_TIER

DEF BLOCK = 16384         # elements per parallel chunk
DEF GRAIN = 131072        # below this many elements one thread is faster
DEF LUT_GRAIN = 262144    # the same for a table lookup (L2-resident data, cheaper per byte)
DEF PLANE_TILE = 4096     # values a vector run of mul.planes takes at most
DEF PLANES_GRAIN = 32768  # mul.planes: 3x an add's work a value, and no thread reads b's copy

cdef int _lut_vbmi = qops_lut_vectorized()      # runs the CPU check once, outside any prange
LUT_VECTORIZED = bool(_lut_vbmi)
DEF SHORT_COLS = 256      # cat inputs' rows at most this long take the row-block kernel
# cat requantizes by the formula (qops_cat_requant) where the build has it in vectors and the
# CPU no vector byte permute; a table lookup is faster with VBMI, and in the portable build
CAT_FORMULA = QOPS_ARITH_TIER >= 1 and not _lut_vbmi
cdef bint _cat_formula = CAT_FORMULA


# -- routes -------------------------------------------------------------------------------

cdef list _TRACE = TRACE      # the trace of qops/_fast/_routes.py

# (the AVX2 bodies fall back to the C loop for zero points outside the dtype's range, which
# the ops never pass)
_TIER = ("AVX-512 64-wide", "AVX2", "C loop")[2 - QOPS_ARITH_TIER]
_LUT_TIER = ("qops_lut_avx2 (AVX2: 16 vpshufb, blends)" if QOPS_LUT_TIER >= 1
             else "qops_lut_scalar (C)")

ROUTES = {r.name: r for r in [
    Route("empty", "none: an empty output", "arith.pyx"),
    Route("add.vector", f"qops_add_run ({_TIER})", "qops_arith.h"),
    Route("mul.vector", f"qops_mul_run ({_TIER})", "qops_arith.h"),
    Route("mul.rows", f"_mul_rows: qops_mul_run ({_TIER}) against a tiled row of b",
          "arith.pyx"),
    Route("mul.planes", f"_mul_planes: qops_mul_run ({_TIER}) over runs of whole planes, "
          "each plane's value of b repeated in a tile", "arith.pyx"),
    Route("requant_int.formula", "qops_requant_run (AVX2, R_int per element)", "qops_arith.h"),
    Route("requant_int.lut_vbmi", "qops_lut_vbmi (AVX-512 VBMI) of a 256-byte table",
          "qops_lut.h"),
    Route("requant_int.lut", f"{_LUT_TIER} of a 256-byte table", "qops_lut.h"),
    Route("reflect.not", "_not_flat (bitwise NOT, GCC-vectorized)", "arith.pyx"),
    Route("cat_into.short", "_cat_short (row blocks of every input)", "arith.pyx"),
    Route("cat_into.parts", "_cat_parts (BLOCK-column items of each input)", "arith.pyx"),
]}


def _built_here(name):
    if name == "requant_int.lut_vbmi":
        return LUT_VECTORIZED
    if name == "requant_int.formula":
        # the formula runs only where the lookup has no vector form
        return QOPS_ARITH_TIER >= 1 and not LUT_VECTORIZED
    return True


BUILT = frozenset(n for n in ROUTES if _built_here(n))     # the routes this build can take

cdef object R_EMPTY = ROUTES["empty"]
cdef object R_ADD = ROUTES["add.vector"]
cdef object R_MUL = ROUTES["mul.vector"]
cdef object R_MUL_ROWS = ROUTES["mul.rows"]
cdef object R_MUL_PLANES = ROUTES["mul.planes"]
cdef object R_RQ_FORMULA = ROUTES["requant_int.formula"]
cdef object R_RQ_VBMI = ROUTES["requant_int.lut_vbmi"]
cdef object R_RQ_LUT = ROUTES["requant_int.lut"]
cdef object R_REFLECT = ROUTES["reflect.not"]
cdef object R_CAT_SHORT = ROUTES["cat_into.short"]
cdef object R_CAT_PARTS = ROUTES["cat_into.parts"]

DEF OP_ADD = 0
DEF OP_MUL = 1
DEF OP_REQUANT = 2     # also: is_signed, base, zo
DEF OP_REFLECT = 3
DEF OP_CAT = 4         # n: bytes written; also rows, widest


cdef object _plan(int op, Py_ssize_t n, bint is_signed=False, int64_t base=0, int32_t zo=0,
                  Py_ssize_t rows=0, Py_ssize_t widest=0):
    """The Route of one call: every kernel choice of the family, in one place.

    op: OP_*; n: elements (cat: bytes written); requant_int's int8 flag, base and output
    zero point; cat's rows and widest input row (mul: rows 1 when b is a row broadcast, 2
    when one value a plane)."""
    if n == 0:
        route = R_EMPTY
    elif op == OP_ADD:
        route = R_ADD
    elif op == OP_MUL:
        route = R_MUL_PLANES if rows == 2 else R_MUL_ROWS if rows else R_MUL
    elif op == OP_REQUANT:
        # without a vector table lookup (AVX512-VBMI) the formula per element is the faster
        # map; it gives the table's bytes where qops_requant_ok
        if _lut_vbmi:
            route = R_RQ_VBMI
        elif qops_requant_ok(is_signed, base, zo):
            route = R_RQ_FORMULA
        else:
            route = R_RQ_LUT
    elif op == OP_REFLECT:
        route = R_REFLECT
    else:
        route = R_CAT_SHORT if widest <= SHORT_COLS and rows > 1 else R_CAT_PARTS
    if _TRACE:
        _TRACE[0].append(route)
    return route


def plan(op, q, *args):
    """The Route the fast backend's arith op `op` takes for arguments (q, *args), as passed to
    that entry point (cat_into: plan("cat_into", qs, out))."""
    if op == "cat_into":
        qs = [np.asarray(a) for a in q]
        out = args[0]
        n = sum(a.size for a in qs) if out.shape[0] and out.shape[1] else 0
        return _plan(OP_CAT, n, False, 0, 0, out.shape[0],
                     max([a.shape[1] for a in qs], default=0))
    q = np.asarray(q)
    if op == "requant_int":
        qmin, _ = qops_range8(q.dtype)
        return _plan(OP_REQUANT, q.size, qmin < 0, <int64_t>args[1] - <int64_t>args[0],
                     args[3])
    ops = {"add": OP_ADD, "mul": OP_MUL, "reflect": OP_REFLECT}
    if op not in ops:
        raise ValueError(f"plan: unknown arith op {op!r}")
    rows = op == "mul" and len(args) > 0 and np.shape(args[0]) != q.shape
    return _plan(ops[op], q.size, False, 0, 0, rows)




# Each kernel is a plain pointer loop over one block (a `_run` function), called from a prange
# over blocks: outside the prange body GCC keeps the loop variables in registers and
# vectorizes the loop (prange's lastprivate variables would stop that).

cdef void _add_flat(const char* a, const char* b, char* out, Py_ssize_t n, bint is_signed,
                    const qops_add_params* p) noexcept nogil:
    cdef int threads = qops_threads_for(n, GRAIN), t
    cdef Py_ssize_t chunk = qops_chunk64(n, threads), start
    if threads == 1:
        qops_add_run(a, b, out, n, is_signed, p)
        return
    for t in prange(threads, schedule="static", num_threads=threads):
        start = t * chunk
        if start < n:
            qops_add_run(a + start, b + start, out + start, min(chunk, n - start), is_signed, p)


cdef inline void _not_run(const uint8_t* q, uint8_t* out, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = ~q[i]


cdef void _not_flat(const uint8_t* q, uint8_t* out, Py_ssize_t n) noexcept nogil:
    cdef int threads = qops_threads_for(n, LUT_GRAIN), t
    cdef Py_ssize_t chunk = qops_chunk64(n, threads), start
    # (always a parallel region, even of one thread: the outlined loop keeps its pointers in
    # registers, where inlined into the Python wrapper GCC spilled them every iteration)
    for t in prange(threads, schedule="static", num_threads=threads):
        start = t * chunk
        if start < n:
            _not_run(q + start, out + start, min(chunk, n - start))


cdef void _mul_flat(const char* a, const char* b, char* out, Py_ssize_t n, bint is_signed,
                    const qops_mul_params* p) noexcept nogil:
    cdef Py_ssize_t nb = (n + BLOCK - 1) // BLOCK, blk, s
    cdef int threads = qops_threads_for(n, GRAIN)
    if threads == 1:
        qops_mul_run(a, b, out, n, is_signed, p)
        return
    for blk in prange(nb, schedule="static", num_threads=threads):
        s = blk * BLOCK
        qops_mul_run(a + s, b + s, out + s, min(BLOCK, n - s), is_signed, p)


cdef void _requant_flat(const uint8_t* q, uint8_t* out, Py_ssize_t n, bint is_signed,
                        const qops_requant_params* p) noexcept nogil:
    cdef int threads = qops_threads_for(n, GRAIN), t
    cdef Py_ssize_t chunk = qops_chunk64(n, threads), start
    if threads == 1:
        qops_requant_run(q, out, n, is_signed, p)
        return
    for t in prange(threads, schedule="static", num_threads=threads):
        start = t * chunk
        if start < n:
            qops_requant_run(q + start, out + start, min(chunk, n - start), is_signed, p)


cdef void _requant_int_table(uint8_t* table, int qmin, int qmax, int64_t base, float m,
                             int32_t zo) noexcept nogil:
    # add_scalar's R_int for each of the 256 raw values (indexed by the raw byte).
    cdef int r
    cdef float lo = <float>(qmin - zo), hi = <float>(qmax - zo)
    for r in range(qmin, qmax + 1):
        table[<uint8_t>r] = <uint8_t>(<int32_t>qops_clampf(
            qops_rintf(<float>(<int64_t>r + base) * m), lo, hi) + zo)


cdef void _cat_table(uint8_t* table, int qmin, int qmax, float s, int32_t zp, float inv,
                     float zo, bint requant, bint relu) noexcept nogil:
    # Q_fma(D_sc(r)) (or r itself), then relu, for each of the 256 raw values r, indexed by
    # the raw byte (int8 through its two's complement).
    cdef int r, v
    for r in range(qmin, qmax + 1):
        v = qops_q_fma(qops_d_sc(r, s, zp), inv, zo, qmin, qmax) if requant else r
        if relu and v < <int>zo:
            v = <int>zo
        table[<uint8_t>r] = <uint8_t>v


ctypedef struct cat_part:
    const uint8_t* src       # (rows, cols) C-contiguous
    const uint8_t* table     # the byte map (requantize and/or relu), or NULL
    const qops_cat_params* rq    # the requantize formula's parameters, or NULL (both: copy)
    bint is_signed           # int8 data (the formula's widening)
    Py_ssize_t cols, off     # its columns and their first column in out
    Py_ssize_t nbc, first    # column blocks per row; its first work item


cdef void _cat_item(const cat_part* parts, Py_ssize_t nparts, Py_ssize_t w, uint8_t* out,
                    Py_ssize_t out_cols) noexcept nogil:
    # Work item w (a row and column block of one input, items numbered input by input).
    cdef Py_ssize_t lo = 0, hi = nparts - 1, mid, r, c0, n
    while lo < hi:                 # the last part whose first item is <= w
        mid = (lo + hi + 1) // 2
        if parts[mid].first <= w:
            lo = mid
        else:
            hi = mid - 1
    cdef const cat_part* p = &parts[lo]
    w -= p.first
    r = w // p.nbc
    c0 = (w % p.nbc) * BLOCK
    n = min(BLOCK, p.cols - c0)
    if p.rq != NULL:
        qops_cat_requant(p.src + r * p.cols + c0, out + r * out_cols + p.off + c0, n,
                         p.is_signed, p.rq)
    elif p.table == NULL:
        memcpy(out + r * out_cols + p.off + c0, p.src + r * p.cols + c0, n)
    else:
        qops_lut_apply(p.src + r * p.cols + c0, out + r * out_cols + p.off + c0, n, p.table)


cdef void _cat_parts(const cat_part* parts, Py_ssize_t nparts, Py_ssize_t items, uint8_t* out,
                     Py_ssize_t out_cols, int nt) noexcept nogil:
    # All inputs in one pass (one parallel region, however many inputs): work items are
    # (input, row, column block), so one wide row (dim 0 or 1 of a batch-1 tensor) still
    # splits across threads.
    cdef Py_ssize_t w
    if nt <= 1:
        for w in range(items):
            _cat_item(parts, nparts, w, out, out_cols)
        return
    for w in prange(items, schedule="static", num_threads=nt):
        _cat_item(parts, nparts, w, out, out_cols)




cdef inline void _copy_short(uint8_t* d, const uint8_t* s, Py_ssize_t n) noexcept nogil:
    # fixed-size memcpy calls, which GCC inlines as vector moves
    cdef Py_ssize_t i = 0
    while i + 64 <= n:
        memcpy(d + i, s + i, 64)
        i += 64
    while i + 16 <= n:
        memcpy(d + i, s + i, 16)
        i += 16
    while i < n:
        d[i] = s[i]
        i += 1


cdef void _cat_short(const cat_part* parts, Py_ssize_t nparts, Py_ssize_t rows, uint8_t* out,
                     Py_ssize_t out_cols, Py_ssize_t rb, int nt) noexcept nogil:
    # Inputs of short rows (the channels of channels-last data, cat along C): work items are
    # blocks of rb whole output rows, each row gathered from every input in turn; a work item
    # and a memcpy call per 64-byte row cost more than the copy.
    cdef Py_ssize_t b, r, i, nb = (rows + rb - 1) // rb
    cdef const cat_part* p
    for b in prange(nb, schedule="static", num_threads=nt):
        for r in range(b * rb, min(rows, b * rb + rb)):
            for i in range(nparts):
                p = &parts[i]
                if p.rq != NULL:
                    qops_cat_requant(p.src + r * p.cols, out + r * out_cols + p.off, p.cols,
                                     p.is_signed, p.rq)
                elif p.table == NULL:
                    _copy_short(out + r * out_cols + p.off, p.src + r * p.cols, p.cols)
                else:
                    qops_lut_apply(p.src + r * p.cols, out + r * out_cols + p.off, p.cols,
                                   p.table)


def add(a, b, a_scale, a_zero_point, b_scale, b_zero_point, out_inv_scale, out_zero_point, relu):
    """Quantized add: Q_vec(D_vec(a) + D_vec(b)), relu = max(sum, 0) before quantizing."""
    out = qops_empty(np, a.shape, a.dtype)
    qmin, qmax = qops_range8(a.dtype)
    cdef qops_add_params p
    p.sa = a_scale
    p.sb = b_scale
    p.sa_negzp = p.sa * <float>(-<int32_t>a_zero_point)
    p.sb_negzp = p.sb * <float>(-<int32_t>b_zero_point)
    p.inv = out_inv_scale
    p.zo = out_zero_point
    p.lo = qmin - p.zo
    p.hi = qmax - p.zo
    p.relu = bool(relu)
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    cdef Py_ssize_t n = a.size
    if _plan(OP_ADD, n) is not R_EMPTY:
        _add_flat(qops_ptr(a), qops_ptr(b), qops_ptr(out, True), n, qmin < 0, &p)
    return out


cdef void _mul_plane_run(const char* a, const char* b, char* out, Py_ssize_t m,
                         Py_ssize_t m1, Py_ssize_t R, bint is_signed,
                         const qops_mul_params* p) noexcept nogil:
    # planes [m, m1), PLANE_TILE values at a time (whole planes, or a piece of one larger
    # plane), b's values repeated into this call's tile: one vector run covers many small
    # planes (83 of 7x7)
    cdef char tile[PLANE_TILE + 64]
    cdef Py_ssize_t k, per
    while m < m1:
        if R >= PLANE_TILE:
            memset(tile, b[m], PLANE_TILE)
            for k in range(0, R, PLANE_TILE):
                qops_mul_run(a + m * R + k, tile, out + m * R + k, min(PLANE_TILE, R - k),
                             is_signed, p)
            m = m + 1
        else:
            per = min(PLANE_TILE // R, m1 - m)
            qops_fill_planes(tile, b + m, per, R)
            qops_mul_run(a + m * R, tile, out + m * R, per * R, is_signed, p)
            m = m + per


cdef void _mul_planes(const char* a, const char* b, char* out, Py_ssize_t M, Py_ssize_t R,
                      bint is_signed, const qops_mul_params* p, int threads) noexcept nogil:
    # plane m of R values times b[m] (a C-order image against its per-channel scale): each
    # thread a contiguous run of planes, so b is never materialized in full and no thread
    # reads what another wrote
    cdef Py_ssize_t t
    if threads <= 1:
        _mul_plane_run(a, b, out, 0, M, R, is_signed, p)
        return
    for t in prange(threads, schedule="static", num_threads=threads):
        _mul_plane_run(a, b, out, M * t // threads, M * (t + 1) // threads, R, is_signed, p)


cdef void _mul_rows(const char* a, const char* b, char* out, Py_ssize_t M, Py_ssize_t R,
                    Py_ssize_t C, bint is_signed, const qops_mul_params* p, char* tile,
                    Py_ssize_t T, int threads) noexcept nogil:
    # b's row of each m tiled T times, then a's rows against it T at a time: one flat kernel
    # call per chunk, with T * C a multiple of the 32-byte block so only a last chunk has a
    # tail (a squeeze-excite scale: one row of C per image, never materialized in full)
    cdef Py_ssize_t m, t, k, nch = (R + T - 1) // T
    for m in range(M):
        for t in range(T):
            memcpy(tile + t * C, b + m * C, C)
        if threads > 1:
            for k in prange(nch, schedule="static", num_threads=threads):
                qops_mul_run(a + (m * R + k * T) * C, tile, out + (m * R + k * T) * C,
                             min(T, R - k * T) * C, is_signed, p)
        else:
            for k in range(nch):
                qops_mul_run(a + (m * R + k * T) * C, tile, out + (m * R + k * T) * C,
                             min(T, R - k * T) * C, is_signed, p)


def mul(a, b, a_zero_point, b_zero_point, multiplier, out_zero_point, relu):
    """Quantized mul: R_int((a - za) * (b - zb), M), relu = max(out, out_zero_point); b of
    a's shape, or (M, 1, C) against a (M, R, C) (a row per m, broadcast), or (M, 1) against
    a (M, R) (a value per m)."""
    out = qops_empty(np, a.shape, a.dtype)
    qmin, qmax = qops_range8(a.dtype)
    cdef qops_mul_params p
    p.za = a_zero_point
    p.zb = b_zero_point
    p.zo = out_zero_point
    p.m = multiplier
    p.lo = qmin - p.zo
    p.hi = qmax - p.zo
    # relu is folded into lo (max(out, zo) == clamp of the rounded value at 0)
    p.clamp_lo = bool(relu) and p.lo < 0
    if p.clamp_lo:
        p.lo = 0
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    cdef Py_ssize_t n = a.size, M, R, C, T
    cdef int rows = b.shape != a.shape
    if rows and a.ndim == 2 and b.shape == (a.shape[0], 1):
        rows = 2
    elif rows and (a.ndim != 3 or b.shape != (a.shape[0], 1, a.shape[2])):
        raise ValueError(f"mul: b {b.shape} is neither a's shape {a.shape}, one row of it, "
                         f"nor one value a row")
    cdef char* tile
    cdef const char* pa
    cdef const char* pb
    cdef char* po
    cdef int threads
    cdef bint is_signed
    route = _plan(OP_MUL, n, False, 0, 0, rows)
    if route is R_MUL:
        _mul_flat(qops_ptr(a), qops_ptr(b), qops_ptr(out, True), n, qmin < 0, &p)
    elif route is R_MUL_PLANES:
        M, R = a.shape
        threads = min(qops_threads_for(n, PLANES_GRAIN), M)
        pa, pb, po = qops_ptr(a), qops_ptr(b), qops_ptr(out, True)
        is_signed = qmin < 0
        with nogil:
            _mul_planes(pa, pb, po, M, R, is_signed, &p, threads)
    elif route is R_MUL_ROWS:
        M, R, C = a.shape
        T = max(1, 4096 // C)
        T = max(T // 32 * 32, 1) if C % 32 else T      # T * C a multiple of 32 (C odd too)
        tile = <char*>malloc(T * C)
        if tile == NULL:
            raise MemoryError()
        threads = qops_threads_for(n, GRAIN)
        pa, pb, po = qops_ptr(a), qops_ptr(b), qops_ptr(out, True)
        is_signed = qmin < 0
        with nogil:
            _mul_rows(pa, pb, po, M, R, C, is_signed, &p, tile, T, threads)
        free(tile)
    return out


def _lut(q, table):
    # out = table[q] (int8 data looked up through its two's-complement byte)
    out = qops_empty(np, q.shape, q.dtype)
    q = np.ascontiguousarray(q)           # (0-d becomes 1-d: out keeps the shape)
    cdef Py_ssize_t n = q.size
    if n:
        qops_lut_apply_threads(<const uint8_t*>qops_ptr(q), <uint8_t*>qops_ptr(out, True), n,
                               <const uint8_t*>qops_ptr(table), qops_threads_for(n, LUT_GRAIN))
    return out


def requant_int(q, zero_point, offset, multiplier, out_zero_point):
    """add_scalar's requantization: R_int((q - zero_point) + offset, M)."""
    qmin, qmax = qops_range8(q.dtype)
    cdef int64_t base = <int64_t>offset - <int64_t>zero_point
    cdef int32_t zo = out_zero_point
    cdef qops_requant_params p
    cdef Py_ssize_t n = q.size
    route = _plan(OP_REQUANT, n, qmin < 0, base, zo)
    if route is R_EMPTY:
        return qops_empty(np, q.shape, q.dtype)
    if route is R_RQ_FORMULA:
        p.base = <int32_t>base
        p.zo = zo
        p.m = multiplier
        p.hi = <float>(<int>qmax - zo)
        out = qops_empty(np, q.shape, q.dtype)
        q = np.ascontiguousarray(q)       # (0-d becomes 1-d: out keeps the shape)
        n = q.size
        if n:
            _requant_flat(<const uint8_t*>qops_ptr(q), <uint8_t*>qops_ptr(out, True), n, qmin < 0,
                          &p)
        return out
    table = np.empty(256, dtype=np.uint8)
    _requant_int_table(<uint8_t*>qops_ptr(table, True), qmin, qmax,
                       <int64_t>offset - <int64_t>zero_point, multiplier, out_zero_point)
    return _lut(q, table)


def reflect(q):
    """qmax + qmin - q: the raw values of x * c for c < 0 (mul_scalar)."""
    # qmax + qmin - q is 255 - q for uint8 and -1 - q for int8: both are the bitwise NOT of
    # the byte, a plain vector loop (faster than a table lookup).
    out = qops_empty(np, q.shape, q.dtype)
    q = np.ascontiguousarray(q)           # (0-d becomes 1-d: out keeps the shape)
    cdef Py_ssize_t n = q.size
    if _plan(OP_REFLECT, n) is not R_EMPTY:
        _not_flat(<const uint8_t*>qops_ptr(q), <uint8_t*>qops_ptr(out, True), n)
    return out


_CAT_TABLES = {}


def _cat_map(dtype, scale, zero_point, out_inv_scale, out_zero_point, requant, relu):
    # The byte map of one input, memoized: a model concatenates the same qparams every call.
    key = (dtype.char, scale, zero_point, out_inv_scale, out_zero_point, requant, relu)
    table = _CAT_TABLES.get(key)
    if table is None:
        qmin, qmax = qops_range8(dtype)
        table = np.empty(256, np.uint8)
        _cat_table(<uint8_t*>qops_ptr(table, True), qmin, qmax, scale, zero_point,
                   out_inv_scale, out_zero_point, requant, relu)
        if len(_CAT_TABLES) >= 256:
            _CAT_TABLES.clear()
        _CAT_TABLES[key] = table
    return table


def cat_into(qs, out, col_offsets, scales, zero_points, out_inv_scale, out_zero_point, requants,
             relu):
    """Write each cat input into its columns of out: Q_fma(D_sc(q)) or a copy, then relu."""
    cdef Py_ssize_t nparts = len(qs), i, items = 0, rows = out.shape[0]
    cdef Py_ssize_t out_cols = out.shape[1], nbytes = 0, widest = 0
    cdef uint8_t* op
    cdef int nt
    cdef bint short_rows
    # Nothing to write, and out_cols == 0 would divide by zero in the row-block size.
    if nparts == 0 or rows == 0 or out_cols == 0:
        _plan(OP_CAT, 0)
        return
    cdef cat_part* parts = <cat_part*>malloc(nparts * (sizeof(cat_part) + sizeof(qops_cat_params)))
    if parts == NULL:
        raise MemoryError()
    cdef qops_cat_params* prm = <qops_cat_params*>(parts + nparts)
    odt = out.dtype
    cdef bint is_signed = odt.kind == "i"
    qmin, qmax = qops_range8(odt)
    keep = []                      # the arrays the parts point into, alive until the end
    cdef Py_ssize_t cols, off
    cdef bint rq
    cdef bint relu_ = relu
    try:
        for i in range(nparts):
            q = qs[i]
            if not q.flags.c_contiguous:
                q = np.ascontiguousarray(q)
            shape = q.shape
            if (q.dtype is not odt and q.dtype != odt) or len(shape) != 2 or shape[0] != rows:
                raise ValueError(f"cat_into: input {i} does not fit its slot of out")
            cols = shape[1]
            off = col_offsets[i]
            if not 0 <= off <= out_cols - cols:
                raise ValueError(f"cat_into: input {i} does not fit its slot of out")
            parts[i].src = <const uint8_t*>qops_ptr(q)
            parts[i].table = NULL
            parts[i].rq = NULL
            parts[i].is_signed = is_signed
            rq = requants[i]
            if rq and _cat_formula:
                prm[i].s = scales[i]
                prm[i].zp = zero_points[i]
                prm[i].inv = out_inv_scale
                prm[i].zo = out_zero_point
                prm[i].zof = <float>prm[i].zo
                prm[i].qmin = qmin
                prm[i].qmax = qmax
                prm[i].relu = relu_
                parts[i].rq = &prm[i]
            elif rq or relu_:
                table = _cat_map(q.dtype, scales[i], zero_points[i], out_inv_scale,
                                 out_zero_point, rq, relu_)
                keep.append(table)
                parts[i].table = <const uint8_t*>qops_ptr(table)
            keep.append(q)
            parts[i].cols = cols
            parts[i].off = off
            parts[i].nbc = (cols + BLOCK - 1) // BLOCK
            parts[i].first = items
            items += rows * parts[i].nbc
            nbytes += rows * cols
            if cols > widest:
                widest = cols
        nt = qops_threads_for(nbytes, GRAIN)
        op = <uint8_t*>qops_ptr(out, True)
        short_rows = _plan(OP_CAT, nbytes, False, 0, 0, rows, widest) is R_CAT_SHORT
        with nogil:
            if short_rows:
                _cat_short(parts, nparts, rows, op, out_cols, max(1, BLOCK // out_cols), nt)
            else:
                _cat_parts(parts, nparts, items, op, out_cols, nt)
    finally:
        free(parts)
