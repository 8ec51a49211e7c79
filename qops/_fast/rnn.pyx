# One step of the LSTM, GRU and Elman cells (mirror of qops/_ref/rnn.py).
# Contract: float32 C-contiguous gate pre-activations in, float32 states out, bit-equal to the
# reference (the C is in qops_rnn.h). The Python wrappers in qops/_ops/rnn.py validate shapes
# and make the arrays contiguous float32 before these kernels run.
import numpy as np
from cython.parallel cimport prange
from qops._fast._common cimport *

cdef extern from "qops_rnn.h" nogil:
    void qops_lstm_row(const float* gi, const float* gh, const float* c, float* h_out,
                       float* c_out, Py_ssize_t hs)
    void qops_gru_row(const float* gi, const float* gh, const float* h, float* h_out,
                      Py_ssize_t hs)
    void qops_rnn_row(const float* gi, const float* gh, float* h_out, Py_ssize_t hs, int relu)

DEF GRAIN = 16384         # elements per thread below which a second thread costs more


def lstm_cell(gi, gh, c):
    """One LSTM step; see qops._ref.rnn.lstm_cell."""
    cdef Py_ssize_t b = c.shape[0], hs = c.shape[1], r
    h_out = np.empty((b, hs), np.float32)
    c_out = np.empty((b, hs), np.float32)
    if b * hs == 0:
        return h_out, c_out
    cdef const float* gip = <const float*>qops_ptr(gi)
    cdef const float* ghp = <const float*>qops_ptr(gh)
    cdef const float* cp = <const float*>qops_ptr(c)
    cdef float* hop = <float*>qops_ptr(h_out, True)
    cdef float* cop = <float*>qops_ptr(c_out, True)
    cdef int nt = qops_threads_for(b * hs * 4, GRAIN)
    with nogil:
        for r in prange(b, schedule="static", num_threads=nt):
            qops_lstm_row(gip + r * 4 * hs, ghp + r * 4 * hs, cp + r * hs, hop + r * hs,
                          cop + r * hs, hs)
    return h_out, c_out


def gru_cell(gi, gh, h):
    """One GRU step; see qops._ref.rnn.gru_cell."""
    cdef Py_ssize_t b = h.shape[0], hs = h.shape[1], r
    h_out = np.empty((b, hs), np.float32)
    if b * hs == 0:
        return h_out
    cdef const float* gip = <const float*>qops_ptr(gi)
    cdef const float* ghp = <const float*>qops_ptr(gh)
    cdef const float* hp = <const float*>qops_ptr(h)
    cdef float* hop = <float*>qops_ptr(h_out, True)
    cdef int nt = qops_threads_for(b * hs * 3, GRAIN)
    with nogil:
        for r in prange(b, schedule="static", num_threads=nt):
            qops_gru_row(gip + r * 3 * hs, ghp + r * 3 * hs, hp + r * hs, hop + r * hs, hs)
    return h_out


def rnn_cell(gi, gh, relu):
    """One Elman RNN step; see qops._ref.rnn.rnn_cell."""
    cdef Py_ssize_t b = gi.shape[0], hs = gi.shape[1], r
    h_out = np.empty((b, hs), np.float32)
    if b * hs == 0:
        return h_out
    cdef const float* gip = <const float*>qops_ptr(gi)
    cdef const float* ghp = <const float*>qops_ptr(gh)
    cdef float* hop = <float*>qops_ptr(h_out, True)
    cdef int rl = 1 if relu else 0
    cdef int nt = qops_threads_for(b * hs, GRAIN)
    with nogil:
        for r in prange(b, schedule="static", num_threads=nt):
            qops_rnn_row(gip + r * hs, ghp + r * hs, hop + r * hs, hs, rl)
    return h_out


# -- the dynamic quantized layer: the whole time loop of one layer and direction -----------

from qops._fast._gemm cimport *
from libc.math cimport INFINITY

cdef extern from "qops_rnn.h" nogil:
    void qops_lstm_slice(const float* gi, const float* gh, const float* c, float* h_out,
                         float* c_out, Py_ssize_t hs, Py_ssize_t width)
    void qops_gru_slice(const float* gi, const float* gh, const float* h, float* h_out,
                        Py_ssize_t hs, Py_ssize_t width)
    void qops_lstm_cols(const float* gi, Py_ssize_t sgi, const float* gh, Py_ssize_t sgh,
                        const float* c, float* h_out, float* c_out, Py_ssize_t width,
                        float* mn, float* mx)
    void qops_gru_cols(const float* gi, Py_ssize_t sgi, const float* gh, Py_ssize_t sgh,
                       const float* h, float* h_out, Py_ssize_t width, float* mn, float* mx)
    void qops_rnn_minmax(const float* x, Py_ssize_t n, float* mn, float* mx)
    void qops_rnn_quantize(const float* x, Py_ssize_t n, float inv, float zpf, uint8_t* q)
    void qops_rnn_dyn_qparams(float xmin, float xmax, int qmax, float *scale, int32_t *zp)

cdef extern from "<string.h>" nogil:
    void *memset(void *s, int c, size_t n)

DEF GEMM_GRAIN = 262144   # multiply-adds per thread below which a second thread costs more
DEF CELL_GRAIN = 4096     # gate values per thread of one step's cell
DEF XBLOCK = 65536        # sequence values a task when quantizing the layer's input
# PyTorch's dynamic RNN modules quantize h with reduce_range: [0, 127]
DEF H_QMAX = 127


# Largest K of one exact int32 GEMM (linear.pyx's K_CHUNK): the fused layer's hidden size
K_MAX = 33025


cdef class HiddenWeight:
    """W_hh (N x K int8) in the GEMM core's layout, packed by this module's own copy of
    qops_gemm.h: the packing and the kernel that reads it are always compiled together."""
    cdef readonly Py_ssize_t N, K
    cdef readonly object data           # packed int8, 64-byte aligned
    cdef readonly object wsum           # int32 (N,) row sums
    cdef readonly object wzp            # int32 (N,), or None when every zero point is 0

    def __reduce__(self):
        raise TypeError("HiddenWeight is a per-process cache; pickle the weight instead")


def pack_linear(weight, weight_zero_points):
    """Pack an int8 W_ih or W_hh (N x K, K <= K_MAX) for the fused layer kernels."""
    w = np.ascontiguousarray(weight, dtype=np.int8)
    cdef HiddenWeight p = HiddenWeight()
    p.N, p.K = w.shape[0], w.shape[1]
    if p.K > K_MAX:
        raise ValueError(f"weight has {p.K} columns; the fused layer takes at most {K_MAX}")
    p.data = qops_aligned(np, np.empty(qops_gemm_packed_size(p.N, p.K), np.int8))
    p.wsum = np.zeros(p.N, np.int32)
    cdef const int8_t *wp = <const int8_t *>qops_ptr(w) if w.size else NULL
    cdef int8_t *dp = <int8_t *>qops_ptr(p.data, True)
    cdef int32_t *sp = <int32_t *>qops_ptr(p.wsum, True) if p.N else NULL
    if p.N > 0 and p.K > 0:
        with nogil:
            qops_gemm_pack(wp, p.K, p.N, p.K, dp, sp)
    wzp = np.ascontiguousarray(weight_zero_points, dtype=np.int32)
    p.wzp = wzp if np.any(wzp) else None
    return p


cdef struct _Layer:
    int lstm, reverse, nt_gemm, nt_cell
    Py_ssize_t T, B, H, G, I, cw
    int32_t x_zp
    const uint8_t *xq
    float *gi
    const float *h0
    const float *w_scales
    const float *bias
    float *ys
    float *c
    uint8_t *hq
    float *gh
    float *mult
    float *tmin
    float *tmax


cdef void _run_layer(_Layer *L, const qops_gemm_b *wi, const qops_gemm_out *oi,
                     const qops_gemm_b *wb) noexcept nogil:
    # Per step: the input GEMM of this step's rows of the quantized sequence (b_ih in its
    # float32 store; per step rather than once for the sequence: the gates are then read by
    # the cell from cache, and a GEMM of B rows runs faster than one of T * B), h's qparams
    # from its min and max (the previous step's cell left them per task), h quantized, the
    # hidden GEMM with b_hh, then the cell by column slices, each slice's min and max taken
    # while it is in cache.
    cdef Py_ssize_t T = L.T, B = L.B, H = L.H, G = L.G, I = L.I, cw = L.cw
    cdef Py_ssize_t per_row = (H + cw - 1) // cw
    cdef Py_ssize_t ntask = B * per_row, s, t, i, n, task, r, j0, w
    cdef const float *h = L.h0
    cdef const float *gt
    cdef float *hout
    cdef float mn, mx, scale, inv, zpf
    cdef int32_t zp
    cdef qops_gemm_out o
    memset(&o, 0, sizeof(o))
    o.kind = QOPS_GEMM_F32
    o.bias = L.bias
    o.mult = L.mult
    o.out_zp = 0
    o.relu = 0
    o.out = L.gh
    o.ldc = G
    for s in range(T):
        t = T - 1 - s if L.reverse else s
        if s == 0:
            qops_rnn_minmax(h, B * H, &mn, &mx)
        else:
            mn, mx = L.tmin[0], L.tmax[0]
            for i in range(1, ntask):
                mn = L.tmin[i] if L.tmin[i] < mn else mn
                mx = L.tmax[i] if L.tmax[i] > mx else mx
        qops_rnn_dyn_qparams(mn, mx, H_QMAX, &scale, &zp)
        inv = <float>(1.0 / <double>scale)
        zpf = <float>zp
        qops_rnn_quantize(h, B * H, inv, zpf, L.hq)
        for n in range(G):
            L.mult[n] = scale * L.w_scales[n]
        qops_gemm_mt(L.xq + t * B * I, I, B, L.x_zp, wi, oi, L.nt_gemm)
        qops_gemm_mt(L.hq, H, B, zp, wb, &o, L.nt_gemm)
        gt = L.gi
        hout = L.ys + t * B * H
        for task in prange(ntask, schedule="static", num_threads=L.nt_cell):
            r = task // per_row
            j0 = (task - r * per_row) * cw
            w = min(cw, H - j0)
            L.tmin[task] = INFINITY
            L.tmax[task] = -INFINITY
            if L.lstm:
                qops_lstm_cols(gt + r * G + j0, H, L.gh + r * G + j0, H, L.c + r * H + j0,
                               hout + r * H + j0, L.c + r * H + j0, w,
                               &L.tmin[task], &L.tmax[task])
            else:
                qops_gru_cols(gt + r * G + j0, H, L.gh + r * G + j0, H, h + r * H + j0,
                              hout + r * H + j0, w, &L.tmin[task], &L.tmax[task])
        h = hout


cdef int _gemm_b(qops_gemm_b *wb, HiddenWeight p) except -1:
    memset(wb, 0, sizeof(qops_gemm_b))
    wb.data = <const int8_t *>qops_ptr(p.data)
    wb.wsum = <const int32_t *>qops_ptr(p.wsum)
    wb.wzp = <const int32_t *>qops_ptr(p.wzp) if p.wzp is not None else NULL
    wb.N, wb.K = p.N, p.K
    return 0


cdef void _quantize_seq(const float *x, Py_ssize_t n, uint8_t *xq, float *scale, int32_t *zp,
                        int nt) noexcept nogil:
    # linear_dynamic's quantization of the whole sequence: qparams from its min and max
    # (reduce_range), then Q_fma in blocks over the threads
    cdef float mn = 0.0, mx = 0.0, inv
    cdef Py_ssize_t nb = (n + XBLOCK - 1) // XBLOCK, b
    if n > 0:
        qops_rnn_minmax(x, n, &mn, &mx)
    qops_rnn_dyn_qparams(mn, mx, H_QMAX, scale, zp)
    inv = <float>(1.0 / <double>scale[0])
    for b in prange(nb, schedule="static", num_threads=nt):
        qops_rnn_quantize(x + b * XBLOCK, min(XBLOCK, n - b * XBLOCK), inv, <float>zp[0],
                          xq + b * XBLOCK)


cdef object _dynamic_layer(int lstm, x, h0, c0, ih, hh, bint reverse):
    cdef Py_ssize_t T = x.shape[0], B = x.shape[1], I = x.shape[2], H = h0.shape[1]
    ih_packed, ih_scales, ih_bias = ih
    hh_packed, hh_scales, hh_bias = hh
    cdef HiddenWeight pi = ih_packed
    cdef HiddenWeight p = hh_packed
    cdef Py_ssize_t G = p.N
    ys = np.empty((T, B, H), np.float32)
    c = np.array(c0, np.float32, copy=True) if lstm else None
    if T == 0 or B * H == 0:
        return ys, np.array(h0, np.float32, copy=True), c
    cdef _Layer L
    L.lstm, L.reverse = lstm, reverse
    L.T, L.B, L.H, L.G, L.I = T, B, H, G, I
    L.nt_gemm = qops_threads_for(B * G * H, GEMM_GRAIN)
    L.nt_cell = qops_threads_for(B * G, CELL_GRAIN)
    # whole rows when there are enough for the threads, else column slices (8 wide)
    L.cw = H if B >= L.nt_cell else ((H + L.nt_cell - 1) // L.nt_cell + 7) // 8 * 8
    cdef Py_ssize_t ntask = B * ((H + L.cw - 1) // L.cw)
    xq = np.empty(T * B * I, np.uint8)
    hq = np.empty(B * H, np.uint8)
    gi = np.empty((B, G), np.float32)
    gh = np.empty((B, G), np.float32)
    mult = np.empty(G, np.float32)
    ih_mult = np.empty(G, np.float32)
    tmm = np.empty((2, ntask), np.float32)
    ws = np.ascontiguousarray(hh_scales, dtype=np.float32)
    wsi = np.ascontiguousarray(ih_scales, dtype=np.float32)
    cdef float[:, ::1] tv = tmm
    cdef const float *xp = <const float *>qops_ptr(x)
    cdef const float *wsip = <const float *>qops_ptr(wsi)
    cdef float *imp = <float *>qops_ptr(ih_mult, True)
    L.xq = <const uint8_t *>qops_ptr(xq)
    L.gi = <float *>qops_ptr(gi, True)
    L.h0 = <const float *>qops_ptr(h0)
    L.w_scales = <const float *>qops_ptr(ws)
    L.bias = <const float *>qops_ptr(hh_bias) if hh_bias is not None else NULL
    L.ys = <float *>qops_ptr(ys, True)
    L.c = <float *>qops_ptr(c, True) if lstm else NULL
    L.hq = <uint8_t *>qops_ptr(hq, True)
    L.gh = <float *>qops_ptr(gh, True)
    L.mult = <float *>qops_ptr(mult, True)
    L.tmin = &tv[0, 0]
    L.tmax = &tv[1, 0]
    cdef qops_gemm_b wb, wi
    _gemm_b(&wb, p)
    _gemm_b(&wi, pi)
    cdef qops_gemm_out oi
    memset(&oi, 0, sizeof(oi))
    oi.kind = QOPS_GEMM_F32
    oi.bias = <const float *>qops_ptr(ih_bias) if ih_bias is not None else NULL
    oi.mult = imp
    oi.out = L.gi
    oi.ldc = G
    cdef float xs
    cdef Py_ssize_t n
    with nogil:
        _quantize_seq(xp, T * B * I, <uint8_t *>L.xq, &xs, &L.x_zp,
                      qops_threads_for(T * B * I, XBLOCK))
        for n in range(G):
            imp[n] = xs * wsip[n]
        _run_layer(&L, &wi, &oi, &wb)
    last = 0 if reverse else T - 1
    return ys, ys[last].copy(), c


def lstm_dynamic_layer(x, h0, c0, ih, hh, reverse):
    """The time loop of a dynamic quantized LSTM layer, input GEMM included; see
    qops._ref.rnn.lstm_dynamic_layer."""
    return _dynamic_layer(1, x, h0, c0, ih, hh, reverse)


def gru_dynamic_layer(x, h0, ih, hh, reverse):
    """The time loop of a dynamic quantized GRU layer, input GEMM included; see
    qops._ref.rnn.gru_dynamic_layer."""
    ys, h_n, _ = _dynamic_layer(0, x, h0, None, ih, hh, reverse)
    return ys, h_n
