"""Quantization parameters: validation and the values kernels consume, prepared once.

Both backends receive what this module prepares (float32 scale, float32 inverse scale,
int zero point), so a reference and a fast kernel can differ only in their own arithmetic.
"""
import math
import numbers

import numpy as np

from qops._dtypes import QDtype, as_qdtype

F32 = np.float32


def check_scale(scale, argname="scale"):
    """Return `scale` as a Python float after checking it is a finite positive float32.

    Kernels use f32(scale) and f32(1/f32(scale)): a scale that rounds to inf (above
    3.4028235e38) or to 0, or whose float32 inverse overflows, would give NaN results.
    """
    if type(scale) is float and 1e-38 <= scale <= 3e38:
        return scale            # the common case: clearly finite, > 0, and 1/f32(scale) finite
    if isinstance(scale, np.ndarray) and scale.size == 1:
        scale = scale.reshape(()).item()
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{argname} must be a real number; got {type(scale).__name__}")
    try:
        scale = float(scale)
    except OverflowError:       # an int beyond float64
        raise ValueError(f"{argname} is too large for float32; got an int of "
                         f"{len(str(abs(scale)))} digits") from None
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError(f"{argname} must be finite and > 0; got {scale!r}")
    with np.errstate(over="ignore", divide="ignore"):
        s32 = F32(scale)
        inv = F32(1.0) / s32
    if not np.isfinite(s32):
        raise ValueError(f"{argname}={scale!r} is too large for float32 (above 3.4028235e+38)")
    if not np.isfinite(inv):
        raise ValueError(f"{argname}={scale!r} is too small for float32 (1/scale overflows)")
    return scale


def check_zero_point(zero_point, dtype, argname="zero_point"):
    """Return `zero_point` as an int after checking it is an integer in `dtype`'s range.

    Python and numpy integers (and one-element integer arrays) are accepted; bools and floats,
    even integral ones, are refused as PyTorch refuses them.
    """
    if type(zero_point) is int and type(dtype) is QDtype and \
            dtype.qmin <= zero_point <= dtype.qmax:
        return zero_point       # the common case, checked on every call of a small op
    dtype = as_qdtype(dtype)
    if isinstance(zero_point, np.ndarray) and zero_point.size == 1:
        zero_point = zero_point.reshape(()).item()
    if isinstance(zero_point, (bool, np.bool_)) or not isinstance(zero_point, numbers.Integral):
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
        s32 = scales.astype(F32)
        bad = ~np.isfinite(s32) | (scales <= 0) | ~np.isfinite(F32(1.0) / s32)
    if bad.any():
        raise ValueError(f"{scales_name} must be finite positive float32 values (1/scale finite "
                         f"too); got {scales[bad][0].item()!r} "
                         f"at index {int(np.flatnonzero(bad)[0])}")
    if zps.dtype == np.bool_ or not (np.issubdtype(zps.dtype, np.integer)
                                     or np.issubdtype(zps.dtype, np.floating)):
        raise TypeError(f"{zps_name} must be integers; got dtype {zps.dtype}")
    # the range is checked on the values as given: converting first would wrap a uint64 or
    # a huge float into range
    with np.errstate(invalid="ignore"):
        out = ~((zps >= dtype.qmin) & (zps <= dtype.qmax))
    if out.any():
        raise ValueError(f"{zps_name} has {zps[out][0].item()!r} outside the range of {dtype.name} "
                         f"[{dtype.qmin}, {dtype.qmax}]")
    if np.issubdtype(zps.dtype, np.floating) and not np.all(np.mod(zps, 1) == 0):
        raise TypeError(f"{zps_name} must be integers; got dtype {zps.dtype} with fractions")
    zps = zps.astype(np.int64)
    return scales, zps


# Memos of f32 and inv_scale for positive Python floats: a model passes the same few scales
# on every call, and each would otherwise be a numpy scalar round trip.
# Only positive results are kept (-0.0 == 0.0 would share an entry); bounded, cleared when
# full.
_F32_MEMO: dict = {}
_INV_MEMO: dict = {}
_MEMO_MAX = 4096


def f32(value):
    """The float32 rounding of `value`, as a Python float."""
    try:
        return _F32_MEMO[value]
    except (KeyError, TypeError):
        pass
    r = float(F32(value))
    if type(value) is float and r > 0:
        if len(_F32_MEMO) >= _MEMO_MAX:
            _F32_MEMO.clear()
        _F32_MEMO[value] = r
    return r


def inv_scale(scale):
    """f32(1.0f / f32(scale)): the float32 inverse scale PyTorch's quantize multiplies by."""
    try:
        return _INV_MEMO[scale]
    except (KeyError, TypeError):
        pass
    r = float(F32(1.0) / F32(scale))
    if type(scale) is float and r > 0:
        if len(_INV_MEMO) >= _MEMO_MAX:
            _INV_MEMO.clear()
        _INV_MEMO[scale] = r
    return r


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
