"""Element-wise activations on raw 8-bit values (the definition; docs/semantics.md §5 and §6).

Contract: uint8/int8 in, same dtype out, same shape. Integer-domain ops (clamp_raw) compare raw
values; float-domain ops dequantize with D_vec (D_sc for sigmoid), compute in float32 and
quantize with Q_vec: PyTorch's vector-body formula, used for every element (docs/semantics.md §0.2).
elu, sigmoid, tanh and GELU are PyTorch's vectorized float32 formulas (SLEEF's expm1f, expf
and tanhf, its erf, with FMAs: qops/_ref/_vecmath.py).
"""
import numpy as np

from qops._ref._vecmath import expf, expm1f, fmaf, tanhf
from qops._ref.quant import d_sc, d_vec, q_vec
from qops._ref.rnn import sigmoid_f32

F32 = np.float32
F64 = np.float64


def _limits(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _quantize(y, out_inv_scale, out_zero_point, dtype):
    qmin, qmax = _limits(dtype)
    return np.asarray(q_vec(y, out_inv_scale, out_zero_point, qmin, qmax)).astype(dtype)


def _x(q, scale, zero_point):
    """D_vec: the float32 value of each raw element, as PyTorch's vector body computes it."""
    return d_vec(q, scale, zero_point).astype(F32)


# -- float formulas (float32 in, float32 out), one per activation ----------------------------

def leaky_relu_y(x, negative_slope):
    """x if x > 0 else f32(x * slope)."""
    return np.where(x > 0, x, x * F32(negative_slope)).astype(F32)


def hardsigmoid_y(x):
    """f32(min(max(x + 3, 0), 6) / 6)."""
    return (np.minimum(np.maximum(x + F32(3), F32(0)), F32(6)) / F32(6)).astype(F32)


def hardswish_y(x):
    """f32(f32(x * min(max(x + 3, 0), 6)) / 6): multiply first, then divide."""
    return ((x * np.minimum(np.maximum(x + F32(3), F32(0)), F32(6))) / F32(6)).astype(F32)


def elu_y(x, alpha):
    """x if x > 0 else f32(expm1f(x) * alpha), SLEEF's expm1f (_vecmath)."""
    em1 = expm1f(np.minimum(x, F32(0)))
    return np.where(x > 0, x, em1 * F32(alpha)).astype(F32)


def sigmoid_y(x):
    """PyTorch's vectorized sigmoid, f32(1 / f32(1 + expf(-x))) with SLEEF's expf."""
    return sigmoid_f32(x)


def tanh_y(x):
    """PyTorch's vectorized tanh: SLEEF's tanhf (qops/_ref/_vecmath.py)."""
    return tanhf(x)


# erf by Abramowitz and Stegun 7.1.26 as PyTorch's vectorized erf computes it:
# t = 1 / (1 + p |v|), erf(|v|) ~ 1 - (a1 t + a2 t^2 + ... + a5 t^5) exp(-v^2)
_ERF_P = F32(0.3275911)
_ERF_A = tuple(F32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736,
                                0.254829592))                  # a5 down to a1 (Horner)
_SQRT1_2 = F32(0.7071067811865476)
_GELU_BETA = F32(1.4142135623730951 * 1.1283791670955126 * 0.5)     # sqrt(2 / pi)


def erf_f32(v):
    """PyTorch's vectorized float32 erf: t = 1 / fma(p, |v|, 1), r = a1 + t (a2 + ...) by
    fmas, e = expf(-(v v)), erf = sign(v) fma(f32(-e t), r, 1)."""
    v = np.asarray(v, F32)
    t = (F32(1) / fmaf(_ERF_P, np.abs(v), F32(1))).astype(F32)
    r = fmaf(_ERF_A[0], t, _ERF_A[1])
    for a in _ERF_A[2:]:
        r = fmaf(r, t, a)
    e = expf(-(v * v))
    y = fmaf((-e * t).astype(F32), r, F32(1))
    return np.where(np.signbit(v), -y, y).astype(F32)


def gelu_y(x, approximate="none"):
    """GELU of float32 x (docs/semantics.md §6.1), PyTorch's vectorized float32 formulas.

    "none": f32(f32(0.5 x) f32(1 + erf_f32(f32(x / sqrt 2)))). "tanh": f32(f32(0.5 x) f32(1 +
    tanhf(f32(sqrt(2/pi) fma(0.044715, f32(x^3), x))))), SLEEF's tanhf (_vecmath).
    """
    x = np.asarray(x, dtype=F32)
    with np.errstate(over="ignore", invalid="ignore"):     # infinities and NaN: IEEE results
        return _gelu_y(x, approximate)


def _gelu_y(x, approximate):
    if approximate == "tanh":
        # PyTorch's compiler fuses x + kappa x^3 into an fma (measured: bit for bit only so)
        x3 = x * x * x
        inner = _GELU_BETA * fmaf(F32(0.044715), x3, x)
        return (F32(0.5) * x * (F32(1) + tanhf(inner))).astype(F32)
    half = (x * F32(0.5)).astype(F32)
    return (half * (F32(1) + erf_f32((x * _SQRT1_2).astype(F32)))).astype(F32)


# -- kernels ----------------------------------------------------------------------------------

def clamp_raw(q, lo, hi, out=None):
    """min(max(q, lo), hi) on raw values (relu, relu6, hardtanh, clamp).

    Parameters
    ----------
    q : uint8 or int8 ndarray
    lo, hi : int, raw bounds (already in the dtype's range)
    out : None, or a C-contiguous array of q's shape and dtype to write into (may be q itself)
    """
    result = np.minimum(np.maximum(q, q.dtype.type(lo)), q.dtype.type(hi))
    if out is None:
        return np.asarray(result)
    out[...] = result
    return out


def leaky_relu(q, scale, zero_point, negative_slope, out_inv_scale, out_zero_point):
    """Quantized leaky_relu: D_vec, x > 0 ? x : x*slope, Q_vec.

    Parameters
    ----------
    q : uint8 or int8 ndarray
    scale : float, f32 input scale
    zero_point : int, input zero point
    negative_slope : float, f32 slope
    out_inv_scale : float, f32 1/out_scale
    out_zero_point : int
    """
    y = leaky_relu_y(_x(q, scale, zero_point), negative_slope)
    return _quantize(y, out_inv_scale, out_zero_point, q.dtype)


def hardsigmoid(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized hardsigmoid: D_vec, clamp(x + 3, 0, 6) / 6, Q_vec (fixed output qparams).

    Parameters
    ----------
    q : uint8 or int8 ndarray
    scale, zero_point : input qparams (f32 scale)
    out_inv_scale, out_zero_point : 256 and 0 (quint8) / -128 (qint8)
    """
    y = hardsigmoid_y(_x(q, scale, zero_point))
    return _quantize(y, out_inv_scale, out_zero_point, q.dtype)


def hardswish(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized hardswish: D_vec, x * clamp(x + 3, 0, 6) / 6, Q_vec.

    Parameters
    ----------
    q : uint8 or int8 ndarray
    scale, zero_point : input qparams (f32 scale)
    out_inv_scale : float, f32(1.0 / out_scale) computed in double
    out_zero_point : int
    """
    y = hardswish_y(_x(q, scale, zero_point))
    return _quantize(y, out_inv_scale, out_zero_point, q.dtype)


def elu(q, scale, zero_point, alpha, out_inv_scale, out_zero_point):
    """Quantized elu: D_vec, x > 0 ? x : alpha * expm1(x), Q_vec.

    Parameters
    ----------
    q : uint8 or int8 ndarray
    scale, zero_point : input qparams (f32 scale)
    alpha : float, f32 alpha
    out_inv_scale : float, f32(1.0 / f32(out_scale)) computed in double
    out_zero_point : int
    """
    y = elu_y(_x(q, scale, zero_point), alpha)
    return _quantize(y, out_inv_scale, out_zero_point, q.dtype)


def sigmoid(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized sigmoid: D_sc (PyTorch's two-argument dequantize), 1 / (1 + exp(-x)), Q_vec.

    Parameters
    ----------
    q : uint8 or int8 ndarray
    scale, zero_point : input qparams (f32 scale)
    out_inv_scale, out_zero_point : 256 and 0 (quint8) / -128 (qint8)
    """
    y = sigmoid_y(d_sc(q, scale, zero_point).astype(F32))
    return _quantize(y, out_inv_scale, out_zero_point, q.dtype)


def tanh(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized tanh: D_vec, tanh(x), Q_vec.

    Parameters
    ----------
    q : uint8 or int8 ndarray
    scale, zero_point : input qparams (f32 scale)
    out_inv_scale, out_zero_point : 128 and 128 (quint8) / 0 (qint8)
    """
    y = tanh_y(_x(q, scale, zero_point))
    return _quantize(y, out_inv_scale, out_zero_point, q.dtype)


def gelu(q, scale, zero_point, approximate, out_inv_scale, out_zero_point):
    """Quantized GELU: D_vec, gelu_y(x, approximate), Q_vec (PyTorch's output qparams are the
    input's).

    Parameters
    ----------
    q : uint8 or int8 ndarray
    scale, zero_point : input qparams (f32 scale)
    approximate : "none" or "tanh"
    out_inv_scale : float, f32(1.0 / f32(out_scale)) computed in double
    out_zero_point : int
    """
    y = gelu_y(_x(q, scale, zero_point), approximate)
    return _quantize(y, out_inv_scale, out_zero_point, q.dtype)


def gelu_f32(x, approximate):
    """Float GELU of a float32 array (any shape): gelu_y.

    Parameters
    ----------
    x : float32 ndarray
    approximate : "none" or "tanh"
    """
    return gelu_y(np.asarray(x, dtype=F32), approximate).reshape(np.shape(x))
