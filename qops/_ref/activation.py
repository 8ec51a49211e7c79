"""Element-wise activations on raw 8-bit values (the definition; docs/semantics.md §5 and §6).

Contract: uint8/int8 in, same dtype out, same shape. Integer-domain ops (clamp_raw) compare raw
values; float-domain ops dequantize with D_vec (D_sc for sigmoid), compute in float32 and
quantize with Q_vec: PyTorch's vector-body formula, used for every element (docs/semantics.md §0.2).
Transcendentals are evaluated in float64 and rounded once to float32.
"""
import numpy as np

from qops._ref.quant import d_sc, d_vec, q_vec

F32 = np.float32


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
    """x if x > 0 else f32(f32(expm1(x)) * alpha), expm1 in float64 rounded once."""
    em1 = np.expm1(np.minimum(x, F32(0)).astype(np.float64)).astype(F32)
    return np.where(x > 0, x, em1 * F32(alpha)).astype(F32)


def sigmoid_y(x):
    """f32(1 / f32(1 + f32(exp(-x)))), exp in float64 rounded once."""
    with np.errstate(over="ignore"):
        e = np.exp(-x.astype(np.float64)).astype(F32)
    return (F32(1) / (F32(1) + e)).astype(F32)


def tanh_y(x):
    """f32(tanh(x)), tanh in float64 rounded once."""
    return np.tanh(x.astype(np.float64)).astype(F32)


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
