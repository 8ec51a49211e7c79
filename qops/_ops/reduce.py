"""Public reductions: max, min and mean of a quantized tensor (docs/semantics.md §4).

The results keep the input's qparams. This module defines functions named max and min, so the
builtins are reached through `builtins`.
"""
from __future__ import annotations

import builtins
import math
import numbers
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence, Union, overload

import numpy as np

from qops import _config
from qops._dtypes import qint8, quint8
from qops._layout import memory_order
from qops._ops import _check
from qops._qtensor import _axis_arg

if TYPE_CHECKING:
    import numpy.typing as npt

    from qops._qtensor import QTensor

__all__ = ["max", "min", "mean"]

_DTYPES = (quint8, qint8)

class ReductionResult(NamedTuple):
    """(values, indices) result of max/min over one dimension, as torch.return_types.max."""

    values: QTensor
    indices: npt.NDArray[np.int64]


def _kernels():
    return _config.impl("reduce")


def _bool(v, argname):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{argname} must be a bool; got {v!r}")
    return bool(v)


def _split3(data, axis):
    """A C-contiguous (outer, n, inner) view of `data` reducing over `axis`."""
    shape = data.shape
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    return np.ascontiguousarray(data).reshape(outer, shape[axis], inner)


def _extreme(input, dim, keepdim, is_max):
    name = "max" if is_max else "min"
    _check.qtensor(input, "input", dtypes=_DTYPES)
    keepdim = _bool(keepdim, "keepdim")
    k = _kernels()
    if dim is None:
        if input.numel() == 0:
            raise ValueError(f"{name}(): the input is empty (no {name}imum to take)")
        raw = (k.max_all if is_max else k.min_all)(input._int)
        return input._like(np.asarray(raw, dtype=input.dtype.storage).reshape(()))
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"{name}(): dim must be an int or None; got {dim!r}")
    nd = builtins.max(input.ndim, 1)
    axis = _axis_arg(dim, nd, "dim")
    data = input._int.reshape(1) if input.ndim == 0 else input._cint()
    if data.shape[axis] == 0:
        raise ValueError(f"{name}(): input has an empty dimension {dim} (shape {input.shape})")
    values, indices = (k.max_dim if is_max else k.min_dim)(_split3(data, axis))
    out_shape = data.shape[:axis] + ((1,) if keepdim else ()) + data.shape[axis + 1:]
    if input.ndim == 0:
        out_shape = ()
    values = np.asarray(values).reshape(out_shape)
    indices = np.asarray(indices, dtype=np.int64).reshape(out_shape)
    return ReductionResult(input._like(values), indices)


@overload
def max(input: QTensor, dim: None = None, keepdim: bool = False) -> QTensor: ...
@overload
def max(input: QTensor, dim: int, keepdim: bool = False) -> ReductionResult: ...


def max(input: QTensor, dim: Optional[int] = None,
        keepdim: bool = False) -> Union[QTensor, ReductionResult]:
    """The largest value of a quantized tensor, or the largest along `dim` with its index.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    dim : int or None; None reduces everything to a 0-d QTensor
    keepdim : bool, keep `dim` with size 1 (only with `dim`)

    Returns
    -------
    A 0-d QTensor (dim None), else (values QTensor, int64 indices of the first maximum).
    """
    return _extreme(input, dim, keepdim, True)


@overload
def min(input: QTensor, dim: None = None, keepdim: bool = False) -> QTensor: ...
@overload
def min(input: QTensor, dim: int, keepdim: bool = False) -> ReductionResult: ...


def min(input: QTensor, dim: Optional[int] = None,
        keepdim: bool = False) -> Union[QTensor, ReductionResult]:
    """The smallest value of a quantized tensor, or the smallest along `dim` with its index.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    dim : int or None; None reduces everything to a 0-d QTensor
    keepdim : bool, keep `dim` with size 1 (only with `dim`)

    Returns
    -------
    A 0-d QTensor (dim None), else (values QTensor, int64 indices of the first minimum).
    """
    return _extreme(input, dim, keepdim, False)


def _dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return tuple(range(ndim))
        axes = [_axis_arg(d, builtins.max(ndim, 1), "dim") for d in dim]
        if len(set(axes)) != len(axes):
            raise ValueError(f"mean(): dim {tuple(dim)} names a dimension twice")
        return tuple(sorted(axes))
    return (_axis_arg(dim, builtins.max(ndim, 1), "dim"),)


def _mean_in_memory_order(data, axes, n, kept):
    """mean_dims over `axes` of a permuted dense block, reduced as it lies in memory, or None.

    The mean over H, W of channels-last NHWC memory is the mean over the middle axis of
    (N, H*W, C): no transpose. None when `data` is not such a block or the reduced axes are
    not one block of its memory order.
    """
    order = memory_order(data)
    if order is None or not n:
        return None
    pos = sorted(order.index(a) for a in axes)
    if pos != list(range(pos[0], pos[-1] + 1)):
        return None
    mem = data.transpose(order)
    out = np.asarray(_kernels().mean_dims(mem.reshape(math.prod(mem.shape[:pos[0]]), n, -1)))
    # the kept axes in memory order, then in the input's order
    kept_mem = [a for a in order if a not in axes]
    out = out.reshape([data.shape[a] for a in kept_mem])
    return np.ascontiguousarray(np.transpose(out, [kept_mem.index(a) for a in kept]))


def mean(input: QTensor, dim: Union[int, Sequence[int], None] = None,
         keepdim: bool = False) -> QTensor:
    """The mean of a quantized tensor over `dim`, computed on raw values and rounded half to
    even: rint(f32(f32(sum q) / f32(n))); the output keeps the input's qparams.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    dim : int, sequence of ints, or None (all dimensions)
    keepdim : bool, keep the reduced dimensions with size 1
    """
    _check.qtensor(input, "input", dtypes=_DTYPES)
    keepdim = _bool(keepdim, "keepdim")
    data = input._int
    if data.ndim == 0:
        _dims(dim, 0)
        return input._like(data.copy())
    axes = _dims(dim, data.ndim)
    kept = tuple(a for a in range(data.ndim) if a not in axes)
    n = math.prod([data.shape[a] for a in axes])
    kept_shape = tuple(data.shape[a] for a in kept)
    if n == 0 and math.prod(kept_shape) > 0:
        raise ValueError(f"mean(): the reduced dimensions {axes} of input (shape "
                         f"{input.shape}) are empty (the mean of nothing is undefined)")
    out = _mean_in_memory_order(data, axes, n, kept)
    if out is None:
        if axes == tuple(range(axes[0], axes[-1] + 1)):
            # One contiguous block of dimensions: no transpose needed.
            outer = math.prod(data.shape[:axes[0]])
            inner = math.prod(data.shape[axes[-1] + 1:])
            q3 = input._cint().reshape(outer, n, inner)
        else:
            q3 = np.ascontiguousarray(np.transpose(data, kept + axes)).reshape(
                math.prod(kept_shape), n, 1)
        out = np.asarray(_kernels().mean_dims(q3))
    if keepdim:
        out_shape = tuple(1 if a in axes else s for a, s in enumerate(data.shape))
    else:
        out_shape = kept_shape
    return input._like(out.reshape(out_shape))
