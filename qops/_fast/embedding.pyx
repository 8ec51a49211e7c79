# Embedding-bag lookups and row-wise quantization (mirror of qops/_ref/embedding.py).
# Every bag's indices are checked against the table's rows before the bag reads a row; a bag
# with a bad one is skipped and the lookups return the first bad position (index order) or -1.
# Contract: uint8 tables of fused rows (8-bit values, or 4-bit values two a byte, low nibble
# first, then the row's float32 scale and bias), or float32 tables; float32 results, bit-equal to the
# reference: each entry is added as fmaf(scale * w, q, acc + bias * w) in index order.
# Bags are independent: prange over bags, one output row each, no shared accumulators.
import numpy as np
from cython.parallel cimport parallel, prange
from qops._fast._common cimport *

cdef extern from "qops_embedding.h" nogil:
    void qops_eb_bag_q(int bits, const uint8_t *table, Py_ssize_t row_bytes,
                       const int64_t *idx, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t n_idx,
                       const float *psw, int mode, int64_t padding_idx, float *out,
                       Py_ssize_t d, int flags)
    void qops_eb_bag2_q(int bits, const uint8_t *table, Py_ssize_t row_bytes,
                        const int64_t *idx, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi,
                        Py_ssize_t n_idx, const float *psw, int mode, int64_t padding_idx,
                        float *out0, Py_ssize_t d, int flags)
    void qops_eb_bag_f32(const float *table, const int64_t *idx, Py_ssize_t lo, Py_ssize_t hi,
                         Py_ssize_t n_idx, const float *psw, int mode, int64_t padding_idx,
                         float *out, Py_ssize_t d, int flags)
    Py_ssize_t qops_eb_first_bad(const int64_t *idx, Py_ssize_t lo, Py_ssize_t hi,
                                 int64_t n_rows)
    void qops_eb_note_bad(int64_t *first, int64_t pos)
    void qops_eb_fence()
    int qops_eb_stream_with_prefetch()
    int QOPS_EB_PF
    int QOPS_EB_NT
    void qops_eb_quantize_row(const float *x, Py_ssize_t d, float qmax, float eps, uint8_t *q,
                              float *scale, float *zero_point)

cdef extern from "<stdint.h>" nogil:
    int64_t INT64_MAX

DEF GRAIN = 16384       # looked-up values per thread below which one thread is faster
# Tables past these sizes have the rows of later entries prefetched: past a core's L1 the
# prefetches hide the latency of L2 (a Zen 3 core's is 512 KB) as well as of L3 and memory;
# smaller tables stay in L1, where they only cost issue slots. The bag pairs (D <= 32) run
# without prefetch and stay the faster below about half of L2. Float tables only gained past
# L2 (at 250 KB, D = 128, they lost).
DEF PREFETCH_BYTES = 1 << 16
DEF PAIRS_PREFETCH_BYTES = 1 << 18
DEF F32_PREFETCH_BYTES = 1 << 19
# Outputs past this size (twice a Zen 3 core's L2) are written with non-temporal stores.
DEF STREAM_BYTES = 1 << 20
# Bag pairs a thread takes at a time: dynamic, so that a thread the OS holds back (a busy
# machine) does not keep the other waiting at the end with half the bags still to do.
DEF CHUNK = 32

cdef float EPS32 = np.finfo(np.float32).eps
cdef int STREAM_WITH_PREFETCH = qops_eb_stream_with_prefetch()


def quantize_rows(weight, qmax):
    """Row-wise quantization with float scale and zero point (float_qparams observer)."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    cdef Py_ssize_t n = w.shape[0], d = w.shape[1], r
    q = np.empty((n, d), np.uint8)
    scales = np.empty(n, np.float32)
    zps = np.empty(n, np.float32)
    cdef const float *x = <const float *>qops_ptr(w)
    cdef uint8_t *qp = <uint8_t *>qops_ptr(q, True)
    cdef float *sp = <float *>qops_ptr(scales, True)
    cdef float *zp = <float *>qops_ptr(zps, True)
    cdef float fq = <float>qmax, eps = EPS32
    cdef int nt = qops_threads_for(n * d, GRAIN * 4)
    with nogil:
        for r in prange(n, schedule="static", num_threads=nt):
            qops_eb_quantize_row(x + r * d, d, fq, eps, qp + r * d, sp + r, zp + r)
    return q, scales, zps


cdef inline bint _bad(const int64_t *idx, Py_ssize_t lo, Py_ssize_t hi, int64_t n_rows,
                      int64_t *first) noexcept nogil:
    cdef Py_ssize_t b = qops_eb_first_bad(idx, lo, hi, n_rows)
    if b >= 0:
        qops_eb_note_bad(first, b)
    return b >= 0


cdef void _bags_q(int bits, const uint8_t *table, Py_ssize_t row_bytes, int64_t n_rows,
                  const int64_t *idx, const int64_t *off, Py_ssize_t n_bags, Py_ssize_t n_idx,
                  const float *psw, int mode, int64_t pad, float *out, Py_ssize_t d, int pf,
                  int nt, int64_t *first) noexcept nogil:
    # bags two at a time (the kernel interleaves a pair where that pays), a last odd one alone
    cdef Py_ssize_t p, n_pairs = n_bags // 2
    if nt == 1:
        for p in range(n_pairs):
            if not _bad(idx, off[2 * p], off[2 * p + 2], n_rows, first):
                qops_eb_bag2_q(bits, table, row_bytes, idx, off[2 * p], off[2 * p + 1],
                               off[2 * p + 2], n_idx, psw, mode, pad, out + 2 * p * d, d, pf)
    else:
        with parallel(num_threads=nt):
            # contiguous ranges: a thread's prefetches run on into its own next bags (dynamic
            # chunks started each chunk on rows nobody had prefetched)
            for p in prange(n_pairs, schedule="static"):
                if not _bad(idx, off[2 * p], off[2 * p + 2], n_rows, first):
                    qops_eb_bag2_q(bits, table, row_bytes, idx, off[2 * p], off[2 * p + 1],
                                   off[2 * p + 2], n_idx, psw, mode, pad, out + 2 * p * d, d,
                                   pf)
            qops_eb_fence()             # each thread's streamed stores (QOPS_EB_NT)
    if n_bags % 2 and not _bad(idx, off[n_bags - 1], off[n_bags], n_rows, first):
        qops_eb_bag_q(bits, table, row_bytes, idx, off[n_bags - 1], off[n_bags], n_idx, psw,
                      mode, pad, out + (n_bags - 1) * d, d, pf)
    qops_eb_fence()


cdef int _flags(Py_ssize_t table_bytes, Py_ssize_t out_bytes, const float *out, Py_ssize_t d,
                Py_ssize_t limit):
    """The kernels' QOPS_EB_PF and QOPS_EB_NT flags for these sizes (qops_embedding.h);
    limit: the table size past which rows are prefetched."""
    cdef int f = QOPS_EB_PF if table_bytes > limit else 0
    # streamed rows must start 32-byte aligned: a 32-byte aligned output and D % 8 == 0
    if (out_bytes > STREAM_BYTES and d % 8 == 0 and (<size_t>out) % 32 == 0
            and (STREAM_WITH_PREFETCH or not f & QOPS_EB_PF)):
        f |= QOPS_EB_NT
    return f


cdef object _result(out, int64_t first):
    return out, (-1 if first == INT64_MAX else first)


def _lookup_q(int bits, weight, indices, offsets, per_sample_weights, int mode,
              int64_t padding_idx):
    tab = np.ascontiguousarray(weight, dtype=np.uint8)
    ix = np.ascontiguousarray(indices, dtype=np.int64)
    of = np.ascontiguousarray(offsets, dtype=np.int64)
    cdef Py_ssize_t row_bytes = tab.shape[1]
    cdef Py_ssize_t d = (row_bytes - 8) * (8 // bits)
    cdef Py_ssize_t n_bags = of.shape[0] - 1, n_idx = ix.shape[0]
    cdef int64_t first = INT64_MAX
    if n_bags == 0 or d == 0:
        # no row is read: only the indices are checked
        if n_idx and of.shape[0]:
            first = _first_bad(ix, of[0], of[of.shape[0] - 1], tab.shape[0])
        return _result(np.zeros((n_bags, d), np.float32), first)
    out = qops_empty(np, (n_bags, d), np.float32)
    cdef const float *psw = NULL
    if per_sample_weights is not None:
        pw = np.ascontiguousarray(per_sample_weights, dtype=np.float32)
        if pw.shape[0] > 0:
            psw = <const float *>qops_ptr(pw)
    cdef const uint8_t *tp = <const uint8_t *>qops_ptr(tab) if tab.size else NULL
    cdef const int64_t *ip = <const int64_t *>qops_ptr(ix) if n_idx else NULL
    cdef const int64_t *op = <const int64_t *>qops_ptr(of)
    cdef float *o = <float *>qops_ptr(out, True)
    cdef int nt = qops_threads_for(max(n_idx, n_bags) * d, GRAIN)
    # D <= 32: the bag pairs (qops_eb_bag2_q), which run without prefetch
    cdef int pf = _flags(tab.nbytes, out.nbytes, o, d,
                         PAIRS_PREFETCH_BYTES if d <= 32 else PREFETCH_BYTES)
    cdef int64_t n_rows = tab.shape[0]
    with nogil:
        _bags_q(bits, tp, row_bytes, n_rows, ip, op, n_bags, n_idx, psw, mode, padding_idx, o,
                d, pf, nt, &first)
    return _result(out, first)


cdef int64_t _first_bad(ix, int64_t lo, int64_t hi, int64_t n_rows):
    cdef Py_ssize_t b = qops_eb_first_bad(<const int64_t *>qops_ptr(ix), lo, hi, n_rows)
    return INT64_MAX if b < 0 else b


def embedding_bag_8bit(weight, indices, offsets, per_sample_weights, mode, padding_idx):
    """Sum, mean or max of bags of fused 8-bit rows (D values, f32 scale, f32 bias);
    returns (out, the first bad index position or -1)."""
    return _lookup_q(8, weight, indices, offsets, per_sample_weights, mode, padding_idx)


def embedding_bag_4bit(weight, indices, offsets, per_sample_weights, mode, padding_idx):
    """Sum, mean or max of bags of fused 4-bit rows (D / 2 bytes, f32 scale, f32 bias);
    returns (out, the first bad index position or -1)."""
    return _lookup_q(4, weight, indices, offsets, per_sample_weights, mode, padding_idx)


cdef void _bags_f32(const float *table, int64_t n_rows, const int64_t *idx,
                    const int64_t *off, Py_ssize_t n_bags, Py_ssize_t n_idx, const float *psw,
                    int mode, int64_t pad, float *out, Py_ssize_t d, int pf, int nt,
                    int64_t *first) noexcept nogil:
    cdef Py_ssize_t b
    if nt == 1:
        for b in range(n_bags):
            if not _bad(idx, off[b], off[b + 1], n_rows, first):
                qops_eb_bag_f32(table, idx, off[b], off[b + 1], n_idx, psw, mode, pad,
                                out + b * d, d, pf)
        qops_eb_fence()
        return
    with parallel(num_threads=nt):
        for b in prange(n_bags, schedule="dynamic", chunksize=2 * CHUNK):
            if not _bad(idx, off[b], off[b + 1], n_rows, first):
                qops_eb_bag_f32(table, idx, off[b], off[b + 1], n_idx, psw, mode, pad,
                                out + b * d, d, pf)
        qops_eb_fence()                 # each thread's streamed stores (QOPS_EB_NT)


def embedding_bag_f32(weight, indices, offsets, per_sample_weights, mode, padding_idx):
    """Sum, mean or max of bags of float32 rows (PyTorch's float EmbeddingBag); returns
    (out, the first bad index position or -1)."""
    tab = np.ascontiguousarray(weight, dtype=np.float32)
    ix = np.ascontiguousarray(indices, dtype=np.int64)
    of = np.ascontiguousarray(offsets, dtype=np.int64)
    cdef Py_ssize_t n_bags = of.shape[0] - 1, n_idx = ix.shape[0], d = tab.shape[1]
    cdef int64_t first = INT64_MAX
    if n_bags == 0 or d == 0:
        if n_idx and of.shape[0]:
            first = _first_bad(ix, of[0], of[of.shape[0] - 1], tab.shape[0])
        return _result(np.zeros((n_bags, d), np.float32), first)
    out = qops_empty(np, (n_bags, d), np.float32)
    cdef const float *psw = NULL
    if per_sample_weights is not None:
        pw = np.ascontiguousarray(per_sample_weights, dtype=np.float32)
        if pw.shape[0] > 0:
            psw = <const float *>qops_ptr(pw)
    cdef const float *tp = <const float *>qops_ptr(tab) if tab.size else NULL
    cdef const int64_t *ip = <const int64_t *>qops_ptr(ix) if n_idx else NULL
    cdef const int64_t *op = <const int64_t *>qops_ptr(of)
    cdef float *o = <float *>qops_ptr(out, True)
    cdef int nt = qops_threads_for(max(n_idx, n_bags) * d, GRAIN)
    cdef int m = mode
    cdef int64_t pad = padding_idx
    cdef int pf = _flags(tab.nbytes, out.nbytes, o, d, F32_PREFETCH_BYTES)
    cdef int64_t n_rows = tab.shape[0]
    with nogil:
        _bags_f32(tp, n_rows, ip, op, n_bags, n_idx, psw, m, pad, o, d, pf, nt, &first)
    return _result(out, first)
