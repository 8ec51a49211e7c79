"""Element-wise arithmetic and concatenation on raw 8-bit values (docs/semantics.md §7).

Contract: uint8/int8 in, same dtype out. add dequantizes with D_vec, adds in float32 and
quantizes with Q_vec (PyTorch's vector-body formula, for every element); mul and the add_scalar
requantization are integer products rescaled by one float32 multiplier (R_int); cat
dequantizes with D_sc and requantizes with Q_fma, or copies when the qparams do not change.
"""
import numpy as np

from qops._ref.quant import d_sc, d_vec, q_fma, q_vec

F32 = np.float32


def _limits(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _r_int(acc, multiplier, out_zero_point, qmin, qmax):
    """R_int: clampQ(rint(f32(f32(acc) * M)) + zp), as int64."""
    r = np.rint(np.asarray(acc).astype(F32) * F32(multiplier)).astype(np.float64) + out_zero_point
    return np.asarray(np.clip(r, qmin, qmax)).astype(np.int64)


def add(a, b, a_scale, a_zero_point, b_scale, b_zero_point, out_inv_scale, out_zero_point, relu):
    """Quantized add: Q_vec(D_vec(a) + D_vec(b)), relu = max(sum, 0) before quantizing.

    Parameters
    ----------
    a, b : uint8 or int8 ndarrays of one shape and dtype
    a_scale, b_scale : float, f32 input scales
    a_zero_point, b_zero_point : int
    out_inv_scale : float, f32(1.0f / f32(out_scale))
    out_zero_point : int
    relu : bool
    """
    y = (d_vec(a, a_scale, a_zero_point) + d_vec(b, b_scale, b_zero_point)).astype(F32)
    if relu:
        y = np.maximum(y, F32(0))
    qmin, qmax = _limits(a.dtype)
    return np.asarray(q_vec(y, out_inv_scale, out_zero_point, qmin, qmax)).astype(a.dtype)


def mul(a, b, a_zero_point, b_zero_point, multiplier, out_zero_point, relu):
    """Quantized mul: R_int((a - za) * (b - zb), M), relu = max(out, out_zero_point).

    Parameters
    ----------
    a, b : uint8 or int8 ndarrays of one dtype, one shape or a (M, R, C) and b (M, 1, C)
        (b's row broadcast over a's R rows), or a (M, R) and b (M, 1) (a value per row)
    a_zero_point, b_zero_point : int
    multiplier : float, M = f32(f32(f32(sa) * f32(sb)) * f32(1 / f32(so)))
    out_zero_point : int
    relu : bool
    """
    acc = (a.astype(np.int32) - a_zero_point) * (b.astype(np.int32) - b_zero_point)
    qmin, qmax = _limits(a.dtype)
    out = _r_int(acc, multiplier, out_zero_point, qmin, qmax)
    if relu:
        out = np.maximum(out, out_zero_point)
    return np.asarray(out).astype(a.dtype)


def requant_int(q, zero_point, offset, multiplier, out_zero_point):
    """add_scalar's requantization: R_int((q - zero_point) + offset, M).

    Parameters
    ----------
    q : uint8 or int8 ndarray
    zero_point : int, the input zero point
    offset : int, the scalar in units of the input scale
    multiplier : float, f32(f32(s) * f32(1 / f32(s')))
    out_zero_point : int
    """
    acc = (q.astype(np.int64) - zero_point) + offset
    qmin, qmax = _limits(q.dtype)
    return _r_int(acc, multiplier, out_zero_point, qmin, qmax).astype(q.dtype)


def reflect(q):
    """qmax + qmin - q: the raw values of x * c for c < 0 (mul_scalar).

    Parameters
    ----------
    q : uint8 or int8 ndarray
    """
    qmin, qmax = _limits(q.dtype)
    return np.asarray(qmax + qmin - q.astype(np.int64)).astype(q.dtype)


def cat_into(qs, out, col_offsets, scales, zero_points, out_inv_scale, out_zero_point, requants,
             relu):
    """Write each cat input into its columns of out: Q_fma(D_sc(q)) or a copy, then relu.

    Parameters
    ----------
    qs : list of uint8 or int8 ndarrays of shape (rows, cols_i), C-contiguous, out's dtype
    out : C-contiguous ndarray (rows, total columns), the result, written in place
    col_offsets : list of int, first column of each input's slot in `out`
    scales, zero_points : lists, each input's qparams (f32 scales)
    out_inv_scale, out_zero_point : the output's (f32 inverse scale)
    requants : list of bool, False where an input's qparams equal the output's
        (Q_fma(D_sc(q)) == q then)
    relu : bool, max(q, out_zero_point) after requantizing
    """
    qmin, qmax = _limits(out.dtype)
    for q, off, s, zp, requant in zip(qs, col_offsets, scales, zero_points, requants):
        if requant:
            v = q_fma(d_sc(q, s, zp), out_inv_scale, out_zero_point, qmin, qmax)
        else:
            v = q.astype(np.int64)
        if relu:
            v = np.maximum(v, out_zero_point)
        out[:, off:off + q.shape[1]] = v.astype(out.dtype)
