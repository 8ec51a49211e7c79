# The LSTM, GRU and Elman cell steps, and the dynamic quantized LSTM/GRU layer's whole time
# loop (mirror of qops/_ref/rnn.py). Contract: float32 C-contiguous gate pre-activations (or
# layer input) in, float32 states out, bit-equal to the reference (the C is in qops_rnn.h).
# The Python wrappers in qops/_ops/rnn.py validate shapes and make the arrays contiguous
# float32 before these kernels run.
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
    # a tanh costs about as much as an LSTM gate's share of its cell (counted 4 a row value
    # there); relu is a memory pass
    cdef int nt = qops_threads_for(b * hs * (1 if relu else 4), GRAIN)
    with nogil:
        for r in prange(b, schedule="static", num_threads=nt):
            qops_rnn_row(gip + r * hs, ghp + r * hs, hop + r * hs, hs, rl)
    return h_out


# -- the dynamic quantized layer: the whole time loop of one layer and direction -----------

from qops._fast._gemm cimport *

# AMX tiles for the gate GEMMs where the CPU grants them (this module's own copy of the GEMM
# core starts with them off): 16+ rows (the batch, or S steps of it) and K a multiple of 64
_AMX = bool(qops_gemm_amx(1))


def _amx(on=None):
    """Whether the gate GEMMs take AMX tiles; `on` switches them (tests)."""
    was = bool(qops_gemm_amx(-1))
    if on is not None:
        qops_gemm_amx(1 if on else 0)
    return was

cdef extern from "qops_rnn.h" nogil:
    void qops_rnn_minmax(const float* x, Py_ssize_t n, float* mn, float* mx)
    void qops_rnn_quantize(const float* x, Py_ssize_t n, float inv, float zpf, uint8_t* q)
    void qops_rnn_dyn_qparams(float xmin, float xmax, int qmax, float *scale, int32_t *zp)
    ctypedef struct qops_rnn_block:
        qops_gemm_b wi, wh
        const float *bias_i
        const float *bias_h
        const float *scale_h
        float *mult_i
        float *mult_h
        float *gi
        float *gh
        Py_ssize_t j0, w
    ctypedef struct qops_rnn_layer:
        int lstm, reverse, nblk
        Py_ssize_t T, B, H, I, S
        const uint8_t *xq
        int32_t x_zp
        const float *h0
        float *c
        float *ys
        uint8_t *hq
        float *mm
        const qops_rnn_block *blk
    void qops_rnn_layer_run(const qops_rnn_layer *L)

cdef extern from "<string.h>" nogil:
    void *memset(void *s, int c, size_t n)

DEF GEMM_GRAIN = 262144   # multiply-adds per thread below which a second thread costs more
DEF XBLOCK = 65536        # sequence values a task when quantizing the layer's input
# rows an input GEMM takes at least (whole steps): W_ih is streamed once per input GEMM, and
# AMX multiplies 32-row blocks (16 left a batch-16 layer streaming it every step)
DEF X_ROWS = 64
# PyTorch's dynamic RNN modules quantize h with reduce_range: [0, 127]
DEF H_QMAX = 127


# Largest K of one exact int32 GEMM (linear.pyx's K_CHUNK): the fused layer's hidden and
# input sizes
K_MAX = 33025


cdef class HiddenWeight:
    """W_ih or W_hh (N = gates * H rows x K int8) for the fused layer: packed in the GEMM
    core's layout by this module's own copy of qops_gemm.h (the packing and the kernel that
    reads it are always compiled together), by column blocks of h on first use."""
    cdef readonly Py_ssize_t N, K
    cdef readonly object w              # int8 (N, K)
    cdef readonly object wzp            # int32 (N,), or None when every zero point is 0
    cdef readonly dict blocks           # (gates, blocks) -> [(rows, data, wsum, wzp)]

    def __reduce__(self):
        raise TypeError("HiddenWeight is a per-process cache; pickle the weight instead")


def pack_linear(weight, weight_zero_points):
    """Prepare an int8 W_ih or W_hh (N x K, K <= K_MAX) for the fused layer kernels."""
    cdef HiddenWeight p = HiddenWeight()
    p.w = np.ascontiguousarray(weight, dtype=np.int8)
    p.N, p.K = p.w.shape[0], p.w.shape[1]
    if p.K > K_MAX:
        raise ValueError(f"weight has {p.K} columns; the fused layer takes at most {K_MAX}")
    wzp = np.ascontiguousarray(weight_zero_points, dtype=np.int32)
    p.wzp = wzp if np.any(wzp) else None
    p.blocks = {}
    return p


cdef list _block_packs(HiddenWeight p, Py_ssize_t ng, Py_ssize_t nblk):
    # the rows of each column block (gate-major) packed apart, cached per block count
    key = (ng, nblk)
    packs = p.blocks.get(key)
    if packs is not None:
        return packs
    cdef Py_ssize_t H = p.N // ng, wb = (H + nblk - 1) // nblk, b, n
    cdef const int8_t *wp
    cdef int8_t *dp
    cdef int32_t *sp
    packs = []
    for b in range(nblk):
        j0, j1 = b * wb, min(H, (b + 1) * wb)
        rows = np.concatenate([np.arange(g * H + j0, g * H + j1) for g in range(ng)])
        sub = np.ascontiguousarray(p.w[rows])
        n = sub.shape[0]
        data = qops_aligned(np, np.empty(qops_gemm_packed_size(n, p.K), np.int8))
        wsum = np.zeros(n, np.int32)
        if n > 0 and p.K > 0:
            wp = <const int8_t *>qops_ptr(sub)
            dp = <int8_t *>qops_ptr(data, True)
            sp = <int32_t *>qops_ptr(wsum, True)
            with nogil:
                qops_gemm_pack(wp, p.K, n, p.K, dp, sp)
        packs.append((rows, data, wsum, p.wzp[rows] if p.wzp is not None else None))
    p.blocks[key] = packs
    return packs


cdef int _gemm_b(qops_gemm_b *wb, tuple pack, Py_ssize_t K) except -1:
    rows, data, wsum, wzp = pack
    memset(wb, 0, sizeof(qops_gemm_b))
    wb.data = <const int8_t *>qops_ptr(data)
    wb.wsum = <const int32_t *>qops_ptr(wsum)
    wb.wzp = <const int32_t *>qops_ptr(wzp) if wzp is not None else NULL
    wb.N, wb.K = rows.shape[0], K
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


cdef float *_f32p(object a) except? NULL:
    return <float *>qops_ptr(a, True) if a is not None else NULL


cdef object _dynamic_layer(int lstm, x, h0, c0, ih, hh, bint reverse):
    cdef Py_ssize_t T = x.shape[0], B = x.shape[1], I = x.shape[2], H = h0.shape[1]
    cdef Py_ssize_t ng = 4 if lstm else 3, G = ng * H, b, nblk, wmax
    ih_packed, ih_scales, ih_bias = ih
    hh_packed, hh_scales, hh_bias = hh
    cdef HiddenWeight pi = ih_packed
    cdef HiddenWeight ph = hh_packed
    ys = np.empty((T, B, H), np.float32)
    c = np.array(c0, np.float32, copy=True) if lstm else None
    if T == 0 or B * H == 0:
        return ys, np.array(h0, np.float32, copy=True), c
    # one column block per thread (a block's gates come from its own rows of W_ih and W_hh)
    nblk = min(qops_threads_for(B * G * (H + I), GEMM_GRAIN), H)
    wmax = (H + nblk - 1) // nblk
    nblk = (H + wmax - 1) // wmax
    packs_i = _block_packs(pi, ng, nblk)
    packs_h = _block_packs(ph, ng, nblk)
    xq = np.empty(T * B * I, np.uint8)
    hq = np.empty(nblk * B * H, np.uint8)
    cdef Py_ssize_t S = min(T, (X_ROWS + B - 1) // B)
    gi_all = np.empty((nblk, S * B * ng * wmax), np.float32)
    gh_all = np.empty((nblk, B * ng * wmax), np.float32)
    mults = np.empty((nblk, ng * wmax), np.float32)
    mm = np.empty(4 * nblk, np.float32)
    blocks = np.zeros(nblk * sizeof(qops_rnn_block), np.uint8)
    cdef qops_rnn_block *bl = <qops_rnn_block *>qops_ptr(blocks, True)
    keep = []                           # the blocks' scales and biases, alive for the call
    cdef float xs
    cdef int32_t xzp
    cdef const float *xp = <const float *>qops_ptr(x)
    cdef uint8_t *xqp = <uint8_t *>qops_ptr(xq, True)
    with nogil:
        _quantize_seq(xp, T * B * I, xqp, &xs, &xzp, qops_threads_for(T * B * I, XBLOCK))
    wsi = np.ascontiguousarray(ih_scales, dtype=np.float32)
    wsh = np.ascontiguousarray(hh_scales, dtype=np.float32)
    for b in range(nblk):
        rows = packs_h[b][0]
        _gemm_b(&bl[b].wi, packs_i[b], I)
        _gemm_b(&bl[b].wh, packs_h[b], H)
        # mult_i = f32(x_scale * w_scale), as linear_dynamic's
        mi = (np.float32(xs) * wsi[rows]).astype(np.float32)
        sh = np.ascontiguousarray(wsh[rows])
        bi = np.ascontiguousarray(ih_bias[rows], dtype=np.float32) if ih_bias is not None \
            else None
        bh = np.ascontiguousarray(hh_bias[rows], dtype=np.float32) if hh_bias is not None \
            else None
        keep.append((mi, sh, bi, bh))
        bl[b].mult_i = _f32p(mi)
        bl[b].scale_h = _f32p(sh)
        bl[b].bias_i = _f32p(bi)
        bl[b].bias_h = _f32p(bh)
        bl[b].mult_h = <float *>qops_ptr(mults, True) + b * ng * wmax
        bl[b].gi = <float *>qops_ptr(gi_all, True) + b * S * B * ng * wmax
        bl[b].gh = <float *>qops_ptr(gh_all, True) + b * B * ng * wmax
        bl[b].j0 = b * wmax
        bl[b].w = rows.shape[0] // ng
    cdef qops_rnn_layer L
    L.lstm, L.reverse, L.nblk = lstm, reverse, <int>nblk
    L.T, L.B, L.H, L.I, L.S = T, B, H, I, S
    L.xq = <const uint8_t *>qops_ptr(xq)
    L.x_zp = xzp
    L.h0 = <const float *>qops_ptr(h0)
    L.c = <float *>qops_ptr(c, True) if lstm else NULL
    L.ys = <float *>qops_ptr(ys, True)
    L.hq = <uint8_t *>qops_ptr(hq, True)
    L.mm = <float *>qops_ptr(mm, True)
    L.blk = bl
    with nogil:
        qops_rnn_layer_run(&L)
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
