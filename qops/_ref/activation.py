"""Element-wise activations on raw 8-bit values (the definition; docs/semantics.md §5 and §6).

Contract: uint8/int8 in, same dtype out, same shape. Integer-domain ops (clamp_raw) compare raw
values; float-domain ops dequantize with D_vec (D_sc for sigmoid), compute in float32 and
quantize with Q_vec: PyTorch's vector-body formula, used for every element (docs/semantics.md §0.2).
Transcendentals are evaluated in float64 and rounded once to float32.
"""
import numpy as np

from qops._ref.quant import d_sc, d_vec, q_vec
from qops._ref.rnn import tanh_f32

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


# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0: the Chebyshev fit of Numerical
# Recipes' erfcc (relative error below 1.2e-7); P's coefficients, degree 0 to 9
_ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
             -1.13520398, 1.48851587, -0.82215223, 0.17087277)
# e^r's Taylor coefficients 1/k!, k = 0 to 8 (|r| <= ln2 / 2: relative error below 2.1e-10)
_EXP8 = (1.0, 1.0, 0.5, 0.16666666666666666, 0.041666666666666664, 0.008333333333333333,
         0.001388888888888889, 0.0001984126984126984, 2.48015873015873e-05)
_GELU_BETA = F32(1.4142135623730951 * 1.1283791670955126 * 0.5)     # sqrt(2 / pi)


def gelu_y(x, approximate="none"):
    """GELU of float32 x (docs/semantics.md §6.1).

    "none": f32(x/2 E) in float64, E = erfc(z) for negative x (sign bit set), 2 - erfc(z)
    otherwise, z = |x| / sqrt 2, erfc(z) = t exp(max(P(t) - z^2, -700)) from the fit above,
    exp by Cody-Waite reduction and a degree-8 polynomial, both polynomials by Estrin's
    scheme. "tanh": PyTorch's float32 steps, f32(f32(0.5 x) f32(1 +
    tanh(f32(sqrt(2/pi) f32(x + f32(0.044715 f32(x^3))))))), tanh in float64 rounded once.
    """
    x = np.asarray(x, dtype=F32)
    with np.errstate(over="ignore", invalid="ignore"):     # infinities and NaN: IEEE results
        return _gelu_y(x, approximate)


def _gelu_y(x, approximate):
    if approximate == "tanh":
        x3 = x * x * x
        inner = _GELU_BETA * (x + F32(0.044715) * x3)
        return (F32(0.5) * x * (F32(1) + tanh_f32(inner))).astype(F32)
    xd = x.astype(F64)
    z = np.abs(xd) * F64(0.7071067811865476)
    t = F64(1) / (F64(1) + F64(0.5) * z)
    # P(t) of degree 9 and e^r of degree 8 by Estrin's scheme, grouped as the C twin
    t2 = t * t
    t4 = t2 * t2
    a = [F64(lo) + F64(hi) * t for lo, hi in zip(_ERFC_FIT[::2], _ERFC_FIT[1::2])]
    p = ((a[0] + a[1] * t2) + (a[2] + a[3] * t2) * t4) + a[4] * (t4 * t4)
    y = np.maximum(p - z * z, F64(-700))        # (the C clamps on the bits: same values)
    n = np.rint(y * F64(1.4426950408889634))   # e^y = 2^n e^r, Cody-Waite
    r = (y - n * F64(0.6931471803691238)) - n * F64(1.90821492927058770002e-10)
    r2 = r * r
    r4 = r2 * r2
    c = [F64(1) + r] + [F64(lo) + F64(hi) * r for lo, hi in zip(_EXP8[2:8:2], _EXP8[3:8:2])]
    er = ((c[0] + c[1] * r2) + (c[2] + c[3] * r2) * r4) + F64(_EXP8[8]) * (r4 * r4)
    # 2^n: n + 1023 lands in the low bits of 2^52 + n + 1023; shift it into the exponent
    tn = ((n + F64(4503599627371519.0)).view(np.int64) << np.int64(52)).view(F64)
    erfc_z = t * (tn * er)
    e = np.where(np.signbit(xd), erfc_z, F64(2) - erfc_z)
    return (F64(0.5) * xd * e).astype(F32)


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
