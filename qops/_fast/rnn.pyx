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
