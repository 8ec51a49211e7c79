"""Reference kernels of the rnn family: one step of the LSTM, GRU and Elman cells.

Contract: float32 gate pre-activations in, float32 states out, every operation rounded to
float32 in PyTorch's order (docs/semantics.md, "Recurrent layers"). The transcendental
functions are computed in float64 and rounded once, with libm's exp and expm1 (numpy's
float64 exp/expm1 call them), so that the C twin gives the same bits:

    sigmoid(x) = f32(1 / f32(1 + f32(exp(-x))))
    tanh(x)    = f32(copysign(-e / (e + 2), x)),  e = expm1(-2 min(|x|, 20))   (in float64)
"""
import numpy as np

__all__ = ["lstm_cell", "gru_cell", "rnn_cell", "sigmoid_f32", "tanh_f32"]

F32 = np.float32
F64 = np.float64


def sigmoid_f32(x):
    """f32(1 / f32(1 + f32(exp(-x)))), exp in float64 rounded once."""
    e = np.exp(-x.astype(F64)).astype(F32)
    return (F32(1) / (F32(1) + e)).astype(F32)


def tanh_f32(x):
    """tanh(x) rounded once to float32, from expm1 in float64 (|x| >= 20 gives +-1)."""
    a = np.minimum(np.abs(x.astype(F64)), F64(20))
    e = np.expm1(F64(-2) * a)
    return np.copysign(-e / (e + F64(2)), x.astype(F64)).astype(F32)


def lstm_cell(gi, gh, c):
    """One LSTM step (PyTorch's LSTMCell): gates = gh + gi, chunks (i, f, g, o).

    Parameters
    ----------
    gi, gh : float32 (batch, 4 * hidden), input and hidden gate pre-activations (biases in)
    c : float32 (batch, hidden), the cell state

    Returns (h, c') with c' = f32(f32(f * c) + f32(i * g)) and h = f32(o * tanh(c')).
    """
    hs = c.shape[1]
    gates = (gh + gi).astype(F32)
    i = sigmoid_f32(gates[:, 0 * hs:1 * hs])
    f = sigmoid_f32(gates[:, 1 * hs:2 * hs])
    g = tanh_f32(gates[:, 2 * hs:3 * hs])
    o = sigmoid_f32(gates[:, 3 * hs:4 * hs])
    c_new = (f * c).astype(F32) + (i * g).astype(F32)
    h_new = (o * tanh_f32(c_new)).astype(F32)
    return h_new, c_new.astype(F32)


def gru_cell(gi, gh, h):
    """One GRU step (PyTorch's GRUCell): chunks (r, z, n) of gi and gh.

    Parameters
    ----------
    gi, gh : float32 (batch, 3 * hidden), input and hidden gate pre-activations (biases in)
    h : float32 (batch, hidden), the hidden state

    Returns h' = f32(f32(f32(h - n) * z) + n) with r = sigmoid(gh_r + gi_r),
    z = sigmoid(gh_z + gi_z), n = tanh(gi_n + f32(gh_n * r)).
    """
    hs = h.shape[1]
    r = sigmoid_f32((gh[:, 0:hs] + gi[:, 0:hs]).astype(F32))
    z = sigmoid_f32((gh[:, hs:2 * hs] + gi[:, hs:2 * hs]).astype(F32))
    n = tanh_f32((gi[:, 2 * hs:] + (gh[:, 2 * hs:] * r).astype(F32)).astype(F32))
    return (((h - n).astype(F32) * z).astype(F32) + n).astype(F32)


def rnn_cell(gi, gh, relu):
    """One Elman RNN step: tanh(gh + gi), or relu(gh + gi) when `relu`.

    Parameters
    ----------
    gi, gh : float32 (batch, hidden), input and hidden pre-activations (biases in)
    relu : bool, relu instead of tanh
    """
    s = (gh + gi).astype(F32)
    if relu:
        # max(s, 0) keeping NaN, as torch.relu
        return np.where(s > 0, s, np.where(np.isnan(s), s, F32(0))).astype(F32)
    return tanh_f32(s)
