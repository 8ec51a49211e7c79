"""Public sort ops: sort, argsort, topk on per-tensor QTensors (raw-value order).

Tie rule (deterministic, every backend, every thread count): equal values come out in
increasing index order, for ascending and descending sorts and for topk. This is the order of
PyTorch's stable sort, so `stable=True` matches PyTorch's indices exactly; with
`stable=False` PyTorch leaves the order of equal values unspecified (its values are the same).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from qops import _config
from qops._ops import _check
from qops._qtensor import QTensor, _axis_arg

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["sort", "argsort", "topk"]


def _input(input):
    if isinstance(input, QTensor) and input._axis is not None:
        raise TypeError("input must be per-tensor quantized: sort and topk are not supported "
                        "on per-channel quantized tensors (as in PyTorch)")
    return _check.qtensor(input, "input")


def _bool(v, argname):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{argname} must be a bool; got {v!r}")
    return bool(v)


def _dim(dim, ndim):
    """`dim` normalized; plain in-range ints (the usual call) skip the general check."""
    if type(dim) is int and -ndim <= dim < ndim:
        return dim % ndim
    return _axis_arg(dim, ndim, "dim")


def _rows(data, d):
    """(rows (M, n) contiguous with dim `d` last, the moved shape)."""
    if data.ndim == 0:
        return data.reshape(1, 1), (1,)
    if d == data.ndim - 1 and data.flags.c_contiguous:
        # the common case (last dim, contiguous): the array itself or a view, no copy
        if data.ndim == 2:
            return data, data.shape
        return data.reshape(math.prod(data.shape[:-1]), data.shape[-1]), data.shape
    moved = np.moveaxis(data, d, -1)
    rows = np.ascontiguousarray(moved).reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    return rows, moved.shape


def _unrows(a, moved_shape, d, ndim):
    if ndim == 0:
        return a.reshape(())
    if ndim == 2 and d == 1:
        return a
    out = a.reshape(moved_shape)
    return out if d == ndim - 1 else np.ascontiguousarray(np.moveaxis(out, -1, d))


def sort(input: QTensor, dim: int = -1, descending: bool = False,
         stable: bool = False) -> tuple[QTensor, npt.NDArray[np.int64]]:
    """Sort a QTensor along `dim`: (values with the input's qparams, int64 indices).

    Equal values come out in increasing index order whether or not `stable` is set (the
    order PyTorch's stable sort gives, so indices equal PyTorch's when stable=True).

    Parameters
    ----------
    input : per-tensor QTensor
    dim : int, the dimension to sort (negative counts from the end)
    descending : bool
    stable : bool, accepted for PyTorch compatibility; qops' sort is always stable
    """
    _input(input)
    descending = _bool(descending, "descending")
    _bool(stable, "stable")
    d = _dim(dim, input.ndim)
    rows, shape = _rows(input._int, d)
    values, indices = _config.impl("sort").sort(rows, descending)
    return (input._like(_unrows(values, shape, d, input.ndim)),
            _unrows(indices, shape, d, input.ndim))


def argsort(input: QTensor, dim: int = -1, descending: bool = False,
            stable: bool = False) -> npt.NDArray[np.int64]:
    """The int64 indices that sort a QTensor along `dim` (ties in increasing index order).

    Parameters
    ----------
    input : per-tensor QTensor
    dim : int, the dimension to sort (negative counts from the end)
    descending : bool
    stable : bool, accepted for PyTorch compatibility; qops' sort is always stable
    """
    return sort(input, dim, descending, stable)[1]


def topk(input: QTensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[QTensor, npt.NDArray[np.int64]]:
    """The `k` largest (or smallest) values of a QTensor along `dim`, with int64 indices.

    Values come out sorted (largest first when `largest`, else smallest first) and equal
    values in increasing index order; among equal values at the cut, the ones with the
    smallest indices are kept. `sorted=False` returns the same (sorted) result.

    Parameters
    ----------
    input : per-tensor QTensor
    k : int, 0 <= k <= size of `dim`
    dim : int (negative counts from the end)
    largest : bool
    sorted : bool, accepted for PyTorch compatibility (results are always sorted)
    """
    data = input._int if type(input) is QTensor and input._axis is None else None
    if (data is not None and data.ndim == 2 and type(k) is int and type(dim) is int
            and (dim == -1 or dim == 1) and largest is True and sorted is True
            and 0 <= k <= data.shape[1]):
        # the common call (rows of a matrix, last dim) in one Python frame
        values, indices = _config.impl("sort").topk(data, k, True)
        return input._like(values), indices
    _input(input)
    if type(k) is not int or k < 0:
        k = _check.integer(k, "k", 0)
    largest = _bool(largest, "largest")
    _bool(sorted, "sorted")
    d = _dim(dim, input.ndim)
    size = 1 if input.ndim == 0 else input.shape[d]
    if k > size:
        raise ValueError(f"k={k} is larger than the size {size} of dim {dim}")
    if input.ndim == 0 and k != 1:
        # PyTorch returns an uninitialized 0-d value for k=0 here; a 0-d result has one value.
        raise ValueError(f"k must be 1 for a 0-d input; got {k}")
    rows, shape = _rows(input._int, d)
    values, indices = _config.impl("sort").topk(rows, k, largest)
    shape = shape[:-1] + (k,)
    return (input._like(_unrows(values, shape, d, input.ndim)),
            _unrows(indices, shape, d, input.ndim))
