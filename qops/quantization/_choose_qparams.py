"""The qparams formulas every observer and fake-quant module delegates to
(docs/semantics.md §10, §14, §15).

Two formulas exist in PyTorch and both are kept, bit for bit:
* `calculate_qparams` -- the observers' `_calculate_qparams` (float32 tensor arithmetic);
* `choose_quantization_params` -- fbgemm's `ChooseQuantizationParams` (double arithmetic,
  small-scale threshold), used by dynamic linear and by the fused QAT fake-quant.
These are pure functions of (min, max, range, scheme); they could move to `qops/_qparams.py`.
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from qops._dtypes import QDtype, as_qscheme, per_channel_affine_float_qparams

if TYPE_CHECKING:
    import numpy.typing as npt

F32 = np.float32
EPS = float(np.finfo(np.float32).eps)
SMALL_SCALE_THRESHOLD = float(F32(6.1e-5))

__all__ = ["calculate_qmin_qmax", "validate_qmin_qmax", "calculate_qparams",
           "choose_quantization_params", "check_min_max_valid"]


def _dtype_name(dtype):
    if isinstance(dtype, QDtype):
        return dtype.name
    if dtype is None:
        return None
    return str(dtype).replace("torch.", "").replace("qops.", "")


def validate_qmin_qmax(quant_min: int, quant_max: int) -> Any:
    """Check a user quantization range: it includes 0 and quant_min < quant_max."""
    if not quant_min <= 0 <= quant_max:
        raise ValueError(f"quant_min={quant_min}, quant_max={quant_max}: a user-specified "
                         "quantization range must include 0")
    if quant_min >= quant_max:
        raise ValueError(f"quant_min={quant_min} must be strictly less than "
                         f"quant_max={quant_max}")


def calculate_qmin_qmax(quant_min: int, quant_max: int, has_customized_qrange: bool, dtype: Any,
                        reduce_range: bool) -> Any:
    """The (qmin, qmax) an observer uses: dtype range, custom range, reduce_range halving.

    Parameters
    ----------
    quant_min, quant_max : int or None, the user's range
    has_customized_qrange : bool, both quant_min and quant_max were given
    dtype : quantized dtype (quint8, qint8, qint32 or their names)
    reduce_range : bool, halve the range (x86 activations)
    """
    name = _dtype_name(dtype)
    if has_customized_qrange:
        qrange_len = quant_max - quant_min + 1
        if name in ("qint8", "int8") and not 0 < qrange_len <= 256:
            raise ValueError("quantization range should be positive and not exceed the maximum "
                             "bit range (=256)")
        if name in ("qint32", "int32") and not 0 < qrange_len <= 2 ** 32:
            raise ValueError("quantization range should be positive and not exceed the maximum "
                             "bit range (=4294967296)")
        if reduce_range:
            quant_min, quant_max = quant_min // 2, quant_max // 2
        return quant_min, quant_max
    if name in ("qint8", "int8"):
        return (-64, 63) if reduce_range else (-128, 127)
    if name in ("quint8", "uint8"):
        return (0, 127) if reduce_range else (0, 255)
    if name in ("qint32", "int32"):
        return -(2 ** 31), 2 ** 31 - 1
    if name == "uint16":
        return 0, 2 ** 16 - 1
    if name == "int16":
        return -(2 ** 15), 2 ** 15 - 1
    return 0, 15


def check_min_max_valid(min_val: float, max_val: float) -> Any:
    """False (with a warning) when the statistics are uninitialised; error if min > max."""
    min_val = np.asarray(min_val)
    max_val = np.asarray(max_val)
    if min_val.size == 0 or max_val.size == 0:
        warnings.warn("must run observer before calling calculate_qparams. Returning default "
                      "values.", stacklevel=3)
        return False
    if min_val.ndim == 0 or max_val.ndim == 0:
        if min_val == np.inf and max_val == -np.inf:
            warnings.warn("must run observer before calling calculate_qparams. Returning "
                          "default values.", stacklevel=3)
            return False
        if min_val > max_val:
            raise ValueError(f"min {min_val} should be less than max {max_val}")
    elif np.any(min_val > max_val):
        raise ValueError(f"min {min_val} should be less than max {max_val}")
    return True


def calculate_qparams(min_val: npt.ArrayLike, max_val: npt.ArrayLike, quant_min: int,
                      quant_max: int, qscheme: Any, dtype: Any, eps: float = EPS,
                      has_customized_qrange: bool = False) -> tuple[Any, Any]:
    """Scale and zero point from observed min/max: PyTorch's observer formula
    (docs/semantics.md §14).

    Parameters
    ----------
    min_val, max_val : float32 scalar (per tensor) or 1-D array (per channel)
    quant_min, quant_max : int, the quantized range (already reduced if reduce_range)
    qscheme : per_tensor_affine, per_tensor_symmetric, per_channel_affine,
        per_channel_symmetric or per_channel_affine_float_qparams
    dtype : the quantized dtype (quint8 takes zero point 128 when symmetric)
    eps : float, the smallest scale
    has_customized_qrange : bool, symmetric quint8 then takes (qmin + qmax) // 2 as zero point

    Returns
    -------
    (scale, zero_point) : float32 array and int64 array (float32 for float qparams), with one
        element per tensor or one per channel
    """
    qscheme = as_qscheme(qscheme)
    min_val = np.asarray(min_val, dtype=F32)
    max_val = np.asarray(max_val, dtype=F32)
    if not check_min_max_valid(min_val, max_val):
        return np.array([1.0], dtype=F32), np.array([0], dtype=np.int64)
    eps32 = F32(eps)
    zero = F32(0.0)
    min_neg = np.minimum(min_val, zero)
    max_pos = np.maximum(max_val, zero)
    name = _dtype_name(dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if qscheme.symmetric:
            max_pos = np.maximum(-min_neg, max_pos)
            scale = np.maximum((max_pos / F32((quant_max - quant_min) / 2)).astype(F32), eps32)
            if name in ("quint8", "uint8"):
                zp_value = (quant_min + quant_max) // 2 if has_customized_qrange else 128
            elif name == "uint16":
                zp_value = 2 ** 15
            else:
                zp_value = 0
            zero_point = np.full(scale.shape, zp_value, dtype=np.int64)
        elif qscheme is per_channel_affine_float_qparams:
            scale = ((max_val - min_val) / F32(quant_max - quant_min)).astype(F32)
            scale = np.where(scale > eps32, scale, F32(1.0)).astype(F32)
            zero_point = ((F32(-1.0) * min_val) / scale).astype(F32)
        else:
            scale = np.maximum(((max_pos - min_neg) / F32(quant_max - quant_min)).astype(F32),
                               eps32)
            zero_point = quant_min - np.rint((min_neg / scale).astype(F32)).astype(np.int64)
            zero_point = np.clip(zero_point, quant_min, quant_max).astype(np.int64)
    # A range wider than float32's (or a NaN min/max) gives an inf/NaN scale that every op
    # would reject later without saying where it came from (PyTorch returns it as is).
    bad = ~np.isfinite(np.atleast_1d(scale))
    if bad.any():
        i = int(np.argmax(bad))
        lo, hi = np.atleast_1d(min_val), np.atleast_1d(max_val)
        lo, hi = float(lo[i % lo.size]), float(hi[i % hi.size])
        raise ValueError(f"calculate_qparams: min_val={lo:.7g}, max_val={hi:.7g} give the scale "
                         f"{float(np.atleast_1d(scale)[i])}, not a finite float32; the observed "
                         f"range is too wide (or NaN) to quantize")
    return np.atleast_1d(scale).astype(F32), np.atleast_1d(zero_point)


def choose_quantization_params(min: float, max: float, qmin: int, qmax: int,
                               preserve_sparsity: bool = False, reduce_range: bool = False) -> Any:
    """fbgemm's ChooseQuantizationParams (docs/semantics.md §10): (scale as float, zero point
    as int).

    Parameters
    ----------
    min, max : float, the observed range (taken as float32)
    qmin, qmax : int, the quantized range
    preserve_sparsity : bool, symmetric range around zero (the fused QAT fake quant's
        symmetric schemes)
    reduce_range : bool, halve qmin and qmax first (C integer division)

    Returns
    -------
    (scale, zero_point) : scale a Python float (double, as fbgemm returns it; kernels use its
        float32 rounding), zero_point an int
    """
    fmin, fmax = F32(min), F32(max)
    if not fmin <= fmax:
        raise ValueError(f"min={float(fmin)} should be less than or equal to max={float(fmax)}")
    if reduce_range:
        qmin, qmax = int(qmin / 2), int(qmax / 2)  # C division truncates toward zero
    if fmin < 0 and fmax > 0 and preserve_sparsity:
        sym_qmin = -((qmax - qmin) // 2 + 1)
        sym_qmax = (qmax - qmin) // 2
        lo_s, hi_s = abs(F32(fmin / F32(sym_qmin))), abs(F32(fmax / F32(sym_qmax)))
        max_scale = float(hi_s if lo_s < hi_s else lo_s)  # std::max in float
        fmin = F32(max_scale * sym_qmin)
        fmax = F32(max_scale * sym_qmax)
    fmin = F32(0.0) if F32(0.0) < fmin else fmin
    fmax = F32(0.0) if fmax < F32(0.0) else fmax
    if not qmin < qmax:
        raise ValueError(f"qmin={qmin} should be less than qmax={qmax}")
    scale = (float(fmax) - float(fmin)) / (qmax - qmin)
    with np.errstate(divide="ignore", over="ignore"):
        if F32(scale) == 0 or math.isinf(float(F32(1.0) / F32(scale))):
            scale = 0.1
    if scale < SMALL_SCALE_THRESHOLD:
        org_scale = F32(scale)
        scale = SMALL_SCALE_THRESHOLD
        if fmin == 0:
            fmax = F32(F32(SMALL_SCALE_THRESHOLD) * F32(qmax - qmin))
        elif fmax == 0:
            fmin = F32(F32(-SMALL_SCALE_THRESHOLD) * F32(qmax - qmin))
        else:
            amplifier = F32(F32(SMALL_SCALE_THRESHOLD) / org_scale)
            fmin = F32(fmin * amplifier)
            fmax = F32(fmax * amplifier)
    zp_from_min = qmin - float(fmin) / scale
    zp_from_max = qmax - float(fmax) / scale
    zp_from_min_error = abs(qmin) - abs(float(fmin) / scale)
    zp_from_max_error = abs(qmax) - abs(float(fmax) / scale)
    initial = zp_from_min if zp_from_min_error < zp_from_max_error else zp_from_max
    if fmin < 0 and fmax > 0 and preserve_sparsity:
        initial = (qmin + qmax) / 2
    if initial < qmin:
        zp = qmin
    elif initial > qmax:
        zp = qmax
    else:
        zp = int(np.rint(initial))
    return float(scale), int(zp)

