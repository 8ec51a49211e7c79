"""Interpolation ops, named and called as torch.ao.nn.quantized.functional.

Output qparams are the input's. Modes: nearest and nearest-exact (4-D and 5-D inputs),
bilinear (4-D). Inputs are handled as (N, C, D, H, W) with D = 1 for 4-D inputs.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import numpy as np

from qops import _config
from qops._dtypes import qint8, qint32, quint8
from qops._ops import _check
from qops._qtensor import QTensor

__all__ = ["interpolate", "upsample", "upsample_bilinear", "upsample_nearest"]

_MODES = ("nearest", "nearest-exact", "bilinear")
F32 = np.float32


def _sizes(input, size, scale_factor, nsp):
    """(output sizes, scale factors or None) from exactly one of size and scale_factor."""
    if (size is None) == (scale_factor is None):
        raise ValueError("exactly one of size and scale_factor must be given")
    spatial = input.shape[2:]
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != nsp:
                raise ValueError(f"size must be an int or {nsp} ints for a {input.ndim}-D "
                                 f"input; got {size!r}")
        out = _check.int_tuple(size, nsp, "size", minimum=1, maximum=_check.MAX_DIM)
        return out, None
    if isinstance(scale_factor, (list, tuple)):
        if len(scale_factor) != nsp:
            raise ValueError(f"scale_factor must be a number or {nsp} numbers for a "
                             f"{input.ndim}-D input; got {scale_factor!r}")
        scales = tuple(_check.real(v, "scale_factor") for v in scale_factor)
    else:
        scales = (_check.real(scale_factor, "scale_factor"),) * nsp
    for v in scales:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"scale_factor must be finite and > 0; got {scale_factor!r}")
    # as PyTorch's C++ does: floor of the double product
    out = tuple(int(math.floor(L * v)) for L, v in zip(spatial, scales))
    if any(o < 1 for o in out):
        raise ValueError(f"scale_factor {scale_factor!r} gives an empty output {out} for input "
                         f"size {tuple(spatial)}")
    if any(o >= 1 << 31 for o in out):
        raise ValueError(f"scale_factor {scale_factor!r} gives a too large output {out}")
    return out, scales


def _ratio(in_len, out_len, scale):
    """PyTorch's compute_scales_value: f32(1.0 / scale) if a scale was given, else in/out."""
    if scale is not None:
        return F32(1.0 / scale)
    return F32(in_len) / F32(out_len)


def interpolate(input: QTensor, size: Union[int, Sequence[int], None] = None,
                scale_factor: Union[float, Sequence[float], None] = None,
                mode: str = "nearest", align_corners: Optional[bool] = None) -> QTensor:
    """Resize a quantized image batch; output qparams = input's.

    Bit-exact with PyTorch's NCHW kernels. When every spatial size is unchanged the input is
    copied. PyTorch returns channel-scrambled results for 1x1 spatial inputs with C > 1;
    qops returns the correct result there.

    Parameters
    ----------
    input : QTensor (N, C, H, W) or, for the nearest modes, (N, C, D, H, W); quint8 or qint8
        (and qint32 for the nearest modes)
    size : int or tuple of ints, the output spatial size (exclusive with scale_factor)
    scale_factor : float or tuple of floats > 0; the output size is floor(size * factor) and
        the kernel uses 1/factor as its coordinate ratio, as PyTorch does
    mode : "nearest", "nearest-exact" or "bilinear"
    align_corners : bool or None, bilinear only (None means False)
    """
    _check.qtensor(input, "input", dtypes=(quint8, qint8, qint32), ndims=(4, 5))
    x = input._cint()
    key: Optional[tuple[Any, ...]] = (x.shape, input._dtype is qint32, _hashable(size),
                                      _hashable(scale_factor), mode, align_corners)
    try:
        plan = _plans.get(key)
    except TypeError:          # an unhashable argument: plan without the memo
        key, plan = None, None
    if plan is None:
        plan = _plan(input, size, scale_factor, mode, align_corners)
        if key is not None:
            if len(_plans) >= 256:
                _plans.clear()
            _plans[key] = plan
    x5_shape, out5, ratios, out_shape = plan
    if ratios is None:
        # PyTorch copies when no size changes (whatever the scale factors say)
        data = np.array(x, copy=True)
    else:
        k = _config.impl("resize")
        x5 = x.reshape(x5_shape)
        if mode == "bilinear":
            res = k.upsample_bilinear(x5, out5, ratios, bool(align_corners), input._zero_point)
        else:
            res = k.upsample_nearest(x5, out5, ratios, mode == "nearest-exact")
        data = res.reshape(out_shape)
    return QTensor._make(data, input._dtype, input._scale, input._zero_point)


# Validated plans (5-D input shape, 5-D output spatial size, kernel ratios, output shape) by
# (input shape, qint32?, size, scale_factor, mode, align_corners): a model resizes the same
# few shapes each call, and working the plan out costs more than a small kernel.
_plans: dict[Any, tuple[Any, ...]] = {}


def _hashable(v):
    # with the types, so that 2 and 2.0 (or True) are not taken for one another
    if isinstance(v, (list, tuple)):
        return type(v), tuple((type(e), e) for e in v)
    return type(v), v


def _plan(input, size, scale_factor, mode, align_corners):
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}; got {mode!r}")
    if mode == "bilinear":
        if input.ndim != 4:
            raise ValueError(f"bilinear mode needs a 4-D input; got shape {input.shape}")
        if input.dtype is qint32:
            raise TypeError("input must be quint8 or qint8 for bilinear mode; got qint32")
        if align_corners is None:
            align_corners = False
        elif not isinstance(align_corners, (bool, np.bool_)):
            raise TypeError(f"align_corners must be a bool or None; got {align_corners!r}")
    elif align_corners is not None:
        raise ValueError("align_corners can only be set with mode='bilinear'")
    nsp = input.ndim - 2
    shape = input.shape
    spatial = shape[2:]
    if any(L == 0 for L in spatial):
        raise ValueError(f"input must have non-empty spatial dims; got shape {shape}")
    out_sp, scales = _sizes(input, size, scale_factor, nsp)
    x5_shape = shape[:2] + (1,) * (3 - nsp) + spatial
    out5 = (1,) * (3 - nsp) + tuple(out_sp)
    out_shape = shape[:2] + tuple(out_sp)
    _check.out_shape(out_shape, "size" if size is not None else "scale_factor",
                     input._int.itemsize)
    if tuple(out_sp) == tuple(spatial):
        return x5_shape, out5, None, out_shape
    sc = (None,) * (3 - nsp) + (scales if scales is not None else (None,) * nsp)
    in5 = x5_shape[2:]
    if mode == "bilinear" and align_corners:
        ratios = tuple(F32(i - 1) / F32(o - 1) if o > 1 else F32(0) for i, o in zip(in5, out5))
    else:
        ratios = tuple(_ratio(i, o, s) for i, o, s in zip(in5, out5, sc))
    return x5_shape, out5, ratios, out_shape


def upsample(input: QTensor, size: Union[int, Sequence[int], None] = None,
             scale_factor: Union[float, Sequence[float], None] = None,
             mode: str = "nearest", align_corners: Optional[bool] = None) -> QTensor:
    """Resize a quantized image batch: the same as `interpolate`.

    Parameters
    ----------
    input : QTensor (N, C, H, W) or (N, C, D, H, W)
    size : int or tuple of ints, the output spatial size (exclusive with scale_factor)
    scale_factor : float or tuple of floats > 0
    mode : "nearest", "nearest-exact" or "bilinear"
    align_corners : bool or None, bilinear only
    """
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_bilinear(input: QTensor, size: Union[int, Sequence[int], None] = None,
                      scale_factor: Union[float, Sequence[float], None] = None) -> QTensor:
    """Bilinear resize with align_corners=True (as PyTorch's upsample_bilinear).

    Parameters
    ----------
    input : QTensor (N, C, H, W), quint8 or qint8
    size : int or 2-tuple of ints (exclusive with scale_factor)
    scale_factor : float or 2-tuple of floats > 0
    """
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def upsample_nearest(input: QTensor, size: Union[int, Sequence[int], None] = None,
                     scale_factor: Union[float, Sequence[float], None] = None) -> QTensor:
    """Nearest-neighbour resize (as PyTorch's upsample_nearest).

    Parameters
    ----------
    input : QTensor (N, C, H, W) or (N, C, D, H, W)
    size : int or tuple of ints (exclusive with scale_factor)
    scale_factor : float or tuple of floats > 0
    """
    return interpolate(input, size, scale_factor, mode="nearest")
