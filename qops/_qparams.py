"""Quantization parameters: validation and the values kernels consume, prepared once.

Both backends receive what this module prepares (float32 scale, float32 inverse scale,
int zero point), so a reference and a fast kernel can differ only in their own arithmetic.
"""
import math
import numbers

import numpy as np

from qops._dtypes import as_qdtype

F32 = np.float32


def check_scale(scale, argname="scale"):
    """Return `scale` as a Python float after checking it is finite and positive."""
    if type(scale) is float and 1e-38 <= scale <= 3e38:
        return scale            # the common case: clearly finite, > 0, and 1/f32(scale) finite
    if isinstance(scale, np.ndarray) and scale.size == 1:
        scale = scale.reshape(()).item()
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{argname} must be a real number; got {type(scale).__name__}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError(f"{argname} must be finite and > 0; got {scale!r}")
    with np.errstate(over="ignore", divide="ignore"):
        inv = F32(1.0) / F32(scale)
    if not np.isfinite(inv):
        raise ValueError(f"{argname}={scale!r} is too small for float32 (1/scale overflows)")
    return scale


def check_zero_point(zero_point, dtype, argname="zero_point"):
    """Return `zero_point` as an int after checking it lies in `dtype`'s range."""
    dtype = as_qdtype(dtype)
    if isinstance(zero_point, np.ndarray) and zero_point.size == 1:
        zero_point = zero_point.reshape(()).item()
    if isinstance(zero_point, bool) or not isinstance(zero_point, numbers.Integral):
        if isinstance(zero_point, numbers.Real) and float(zero_point).is_integer():
            zero_point = int(zero_point)
        else:
            raise TypeError(f"{argname} must be an integer; got {zero_point!r}")
    zero_point = int(zero_point)
    if not dtype.qmin <= zero_point <= dtype.qmax:
        raise ValueError(f"{argname}={zero_point} is outside the range of {dtype.name} "
                         f"[{dtype.qmin}, {dtype.qmax}]")
    return zero_point


def check_channel_qparams(scales, zero_points, dtype, length, scales_name="scales",
                          zps_name="zero_points"):
    """Validate per-channel qparams; return (float64 scales, int64 zero points)."""
    dtype = as_qdtype(dtype)
    scales = np.asarray(scales)
    zps = np.asarray(zero_points)
    if scales.ndim != 1 or scales.shape[0] != length:
        raise ValueError(f"{scales_name} must be 1-D of length {length} (the size of the axis); "
                         f"got shape {scales.shape}")
    if zps.ndim != 1 or zps.shape[0] != length:
        raise ValueError(f"{zps_name} must be 1-D of length {length} (the size of the axis); "
                         f"got shape {zps.shape}")
    if not np.issubdtype(scales.dtype, np.floating) and not np.issubdtype(scales.dtype, np.integer):
        raise TypeError(f"{scales_name} must be real numbers; got dtype {scales.dtype}")
    scales = scales.astype(np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        bad = ~np.isfinite(scales) | (scales <= 0) | ~np.isfinite(F32(1.0) / scales.astype(F32))
    if bad.any():
        raise ValueError(f"{scales_name} must be finite and > 0; got {scales[bad][0]!r} "
                         f"at index {int(np.flatnonzero(bad)[0])}")
    if not np.issubdtype(zps.dtype, np.integer):
        if np.issubdtype(zps.dtype, np.floating) and np.all(np.mod(zps, 1) == 0):
            zps = zps.astype(np.int64)
        else:
            raise TypeError(f"{zps_name} must be integers; got dtype {zps.dtype}")
    zps = zps.astype(np.int64)
    out = (zps < dtype.qmin) | (zps > dtype.qmax)
    if out.any():
        raise ValueError(f"{zps_name} has {int(zps[out][0])} outside the range of {dtype.name} "
                         f"[{dtype.qmin}, {dtype.qmax}]")
    return scales, zps


def f32(value):
    """The float32 rounding of `value`, as a Python float."""
    return float(F32(value))


def inv_scale(scale):
    """f32(1.0f / f32(scale)): the float32 inverse scale PyTorch's quantize multiplies by."""
    return float(F32(1.0) / F32(scale))


def inv_scales(scales):
    """Per-channel float32 inverse scales, f32(1.0f / f32(scale_c))."""
    return (F32(1.0) / np.asarray(scales).astype(F32)).astype(F32)


def inv_scale_f64(scale):
    """f32(1.0 / scale) computed in double: the inverse some vector kernels use."""
    return float(F32(1.0 / float(scale)))


_quantize_val_cache = {}


def quantize_val(value, scale, zero_point, qmin, qmax):
    """One real `value` quantized by PyTorch's scalar rule (Q_leg), as an int.

    Used to prepare integer bounds (relu6's six, hardtanh/clamp limits) on every call of those
    ops; numpy scalar float32 math costs microseconds, so results are memoized (a model uses a
    handful of (value, qparams) pairs; the memo is dropped when it grows past 4096).
    """
    key = (value, scale, zero_point, qmin, qmax)
    r = _quantize_val_cache.get(key)
    if r is None:
        if len(_quantize_val_cache) >= 4096:
            _quantize_val_cache.clear()
        r = _quantize_val_cache[key] = _quantize_val(value, scale, zero_point, qmin, qmax)
    return r


def _quantize_val(value, scale, zero_point, qmin, qmax):
    t = F32(value) * F32(inv_scale(scale))
    u = t + F32(zero_point)
    r = float(np.rint(u))
    if r != r:
        return 0 if qmax <= 255 else qmin
    return int(min(max(r, qmin), qmax))
