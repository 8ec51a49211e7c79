"""Reference kernels of the rnn family: one step of the LSTM, GRU and Elman cells, and the
time loop of a dynamic quantized LSTM/GRU layer.

Contract: float32 gate pre-activations in, float32 states out, every operation rounded to
float32 in PyTorch's order (docs/semantics.md §21). sigmoid is PyTorch's vector formula
with its float32 exp (SLEEF's expf, u10, with fused multiply-adds), so it gives PyTorch's bits;
tanh (which PyTorch's x86 build takes from MKL, not reproducible) is computed in float64 and
rounded once, with qops' own expm1 (`exp_parts`: IEEE +, -, *, /, rint and bit operations
only, so numpy and the C twin give the same bits, and the C vectorizes):

    sigmoid(x) = f32(1 / f32(expf(0 - x) + 1))          (expf: qops/_ref/_vecmath.py)
    tanh(x)    = f32(copysign(-q / (q + 2), x)),  q = expm1(-2 min(|x|, 20))   (float64)
"""
import numpy as np

from qops._ref._vecmath import expf

__all__ = ["lstm_cell", "gru_cell", "rnn_cell", "exp_parts", "sigmoid_f32", "tanh_f32",
           "pack_linear", "lstm_dynamic_layer", "gru_dynamic_layer"]

F32 = np.float32
F64 = np.float64


# Taylor coefficients 1/k!, k = 11 down to 1 (Horner order)
_EXP_COEF = (2.505210838544172e-08, 2.755731922398589e-07, 2.7557319223985893e-06,
             2.48015873015873e-05, 0.0001984126984126984, 0.001388888888888889,
             0.008333333333333333, 0.041666666666666664, 0.16666666666666666, 0.5, 1.0)


def exp_parts(y):
    """(2^n, e^r - 1) with y = n ln2 + r (Cody-Waite), e^r - 1 by a degree-11 Taylor
    polynomial, 2^n built in the exponent bits; float64, |y| <= 100."""
    n = np.rint(y * F64(1.4426950408889634))
    r = (y - n * F64(0.6931471803691238)) - n * F64(1.90821492927058770002e-10)
    p = np.full_like(r, _EXP_COEF[0])
    for coef in _EXP_COEF[1:]:
        p = p * r + F64(coef)
    # 2^n: n + 1023 lands in the low bits of 2^52 + n + 1023; shift it into the exponent
    t = (n + F64(4503599627371519.0)).view(np.int64) << np.int64(52)
    return t.view(F64), p * r


def _min_abs(a, lim):
    # min(a, lim) for a >= 0, NaN becoming lim: the C twin's integer select on the bits
    return np.minimum(a.view(np.int64), np.array(lim, F64).view(np.int64)).view(F64)


def _keep_nan(x, v):
    return np.where(np.isnan(x), x, v)


def sigmoid_f32(x):
    """PyTorch's vectorized float32 sigmoid: f32(1 / f32(expf(0 - x) + 1)), SLEEF's expf
    (qops/_ref/_vecmath.py); NaN kept."""
    x = np.asarray(x, F32)
    e = expf(F32(0) - x)
    with np.errstate(over="ignore", invalid="ignore"):
        return _keep_nan(x, (F32(1) / (e + F32(1))).astype(F32))


def tanh_f32(x):
    """f32(copysign(-q / (q + 2), x)) with q = expm1(-2 min(|x|, 20)) in float64
    (2^n (e^r - 1) + (2^n - 1)); NaN kept."""
    a = _min_abs(np.abs(x.astype(F64)), 20.0)
    t, pm1 = exp_parts(F64(-2) * a)
    q = t * pm1 + (t - F64(1))
    return _keep_nan(x, np.copysign(-q / (q + F64(2)), x.astype(F64)).astype(F32))


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


# -- dynamic quantized layers: the time loop of one layer and direction -----------------------

def pack_linear(weight, weight_zero_points):
    """W_ih or W_hh (N x K int8) prepared for the layer kernels: the reference linear's
    packing."""
    from qops._ref import linear
    return linear.pack_linear(weight, weight_zero_points)


def _gates(x, packed, w_scales, bias):
    """x W^T + b by the reference dynamic linear, x (rows, K) quantized as PyTorch's dynamic
    RNN modules do: qparams from x's min and max with reduce_range ([0, 127])."""
    from qops._ops.linear import choose_dynamic_qparams
    from qops._ref import linear
    scale, zp = choose_dynamic_qparams(float(x.min()), float(x.max()), True)
    mult = (F32(scale) * w_scales).astype(F32)
    return linear.linear_dynamic(x, F32(1.0 / scale), zp, packed, mult, bias, False)


def _input_gates(x, ih):
    """The input GEMM of the whole sequence x (steps, batch, K) at once, as PyTorch's CPU path
    computes linear_ih: one set of qparams for the sequence."""
    g = _gates(x.reshape(-1, x.shape[2]), *ih)
    return g.reshape(x.shape[0], x.shape[1], g.shape[1])


def lstm_dynamic_layer(x, h0, c0, ih, hh, reverse):
    """All steps of one dynamic quantized LSTM layer and direction.

    gi = dynamic linear of the whole sequence x (W_ih, b_ih); then per step t (backwards when
    `reverse`): gh = dynamic linear of h (W_hh, b_hh; qparams of h per step), and
    (h, c) = lstm_cell(gi[t], gh, c).

    Parameters
    ----------
    x : float32 (steps, batch, input), finite, the layer's input sequence
    h0, c0 : float32 (batch, hidden), finite initial states
    ih, hh : (packed, w_scales, bias) of W_ih and W_hh: the weight packed by this backend's
        pack_linear, float32 (4 * hidden,) scales per output row, float32 bias or None
    reverse : bool, run from the last step to the first

    Returns (ys (steps, batch, hidden), h_n, c_n), all float32.
    """
    gi = _input_gates(x, ih)
    ys = np.empty((gi.shape[0],) + h0.shape, F32)
    h, c = h0, c0
    for t in (range(gi.shape[0] - 1, -1, -1) if reverse else range(gi.shape[0])):
        h, c = lstm_cell(gi[t], _gates(h, *hh), c)
        ys[t] = h
    return ys, np.array(h, F32), np.array(c, F32)


def gru_dynamic_layer(x, h0, ih, hh, reverse):
    """All steps of one dynamic quantized GRU layer and direction (as lstm_dynamic_layer).

    Parameters
    ----------
    x : float32 (steps, batch, input); h0 : float32 (batch, hidden), finite
    ih, hh, reverse : as lstm_dynamic_layer (3 * hidden rows)

    Returns (ys (steps, batch, hidden), h_n).
    """
    gi = _input_gates(x, ih)
    ys = np.empty((gi.shape[0],) + h0.shape, F32)
    h = h0
    for t in (range(gi.shape[0] - 1, -1, -1) if reverse else range(gi.shape[0])):
        h = gru_cell(gi[t], _gates(h, *hh), h)
        ys[t] = h
    return ys, np.array(h, F32)
