"""Pooling ops, named and called as torch.nn.functional / torch.ao.nn.quantized.functional.

Output qparams are the input's. Every pool runs on (N, C, D, H, W) raw values: 1-d and 2-d
pools add unit leading spatial dims, and unbatched inputs (no N) get N = 1, as in PyTorch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional, Sequence, Union, overload

import numpy as np

from qops import _config
from qops._dtypes import qint8, qint32, quint8
from qops._layout import CL_BACK, CL_ORDER, is_channels_last, memory_order
from qops._ops import _check
from qops._qtensor import QTensor

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
           "adaptive_max_pool1d", "adaptive_max_pool2d"]

_ALL = (quint8, qint8, qint32)
_8BIT = (quint8, qint8)
_MAX_WINDOW = 1 << 23     # 8-bit window sums stay exact in int32 (and in float32 up to 2**24)

#: an int for every spatial dimension, or one int for all of them
IntOrTuple = Union[int, Sequence[int]]
#: an adaptive pool's output size: one int, or one per spatial dim (None keeps the input's)
OutputSize = Union[int, Sequence[Optional[int]]]
#: a max pool with return_indices=True: the pooled QTensor and int64 argmax indices
WithIndices = tuple[QTensor, "npt.NDArray[np.int64]"]


def _as5d(input, nsp, dtypes):
    """input's raw values as (N, C, D, H, W), and a function giving results input's layout."""
    # cheap test of what _check.qtensor checks; anything else goes through it for the error
    if not (type(input) is QTensor and input._axis is None and input._dtype in dtypes
            and nsp + 1 <= input._int.ndim <= nsp + 2):
        _check.qtensor(input, "input", dtypes=dtypes, ndims=(nsp + 1, nsp + 2))
    x = input._cint()
    if x.ndim == nsp + 1:
        x = x[None]
    spatial = x.shape[2:]
    if 0 in spatial:
        raise ValueError(f"input must have non-empty spatial dims; got shape {input.shape}")
    x5 = x if nsp == 3 else x.reshape(x.shape[:2] + (1,) * (3 - nsp) + spatial)
    batched = input.ndim == nsp + 2
    if nsp == 3 and batched:
        return x5, _same

    def back(out5):
        shape = out5.shape[:2] + out5.shape[5 - nsp:]
        out = out5.reshape(shape)
        return out if batched else out[0]
    return x5, back


def _same(out5):
    return out5


def _pad3(t, nsp, fill):
    return (fill,) * (3 - nsp) + tuple(t)


def _ints(v, n, argname, minimum, maximum=_check.MAX_DIM):
    """_check.int_tuple, with plain ints and tuples of them accepted without its ABC checks."""
    # exact types only (bool, numpy ints and lists take the full check and its messages); the
    # full check costs most of a small pool's call
    if type(v) is int:
        if minimum <= v <= _check.MAX_DIM:
            return (v,) * n
    elif type(v) is tuple and len(v) == n:
        for e in v:
            if type(e) is not int or not minimum <= e <= _check.MAX_DIM:
                break
        else:
            return v
    return _check.int_tuple(v, n, argname, minimum=minimum, maximum=maximum)


def _plain(v):
    """Whether v is an int or a tuple of ints, exactly (no bools, numpy ints or lists)."""
    if type(v) is int:
        return True
    if type(v) is tuple:
        for e in v:
            if type(e) is not int:
                return False
        return True
    return False


_ARGS: dict = {}          # memo of _pool_args for plain arguments: a model repeats a few shapes


def _pool_args(nsp, kernel_size, stride, padding, dilation, spatial, ceil_mode):
    """Checked (kernel, stride, padding, dilation, out_size) as 3-tuples (D, H, W)."""
    # Only exact ints, tuples of ints, None and bools make a key: values that compare equal
    # (True == 1, 2.0 == 2) but check differently never share an entry. Checking costs
    # a third of a small pool's time; the memo lookup a fraction of that.
    key = None
    if (_plain(kernel_size) and (stride is None or _plain(stride)) and _plain(padding)
            and _plain(dilation) and type(ceil_mode) is bool):
        key = (nsp, kernel_size, stride, padding, dilation, spatial, ceil_mode)
        hit = _ARGS.get(key)
        if hit is not None:
            return hit
    res = _pool_args_checked(nsp, kernel_size, stride, padding, dilation, spatial, ceil_mode)
    if key is not None:
        if len(_ARGS) >= 1024:
            _ARGS.clear()
        _ARGS[key] = res
    return res


def _pool_args_checked(nsp, kernel_size, stride, padding, dilation, spatial, ceil_mode):
    k = _ints(kernel_size, nsp, "kernel_size", 1)
    if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0):
        s = k
    else:
        s = _ints(stride, nsp, "stride", 1, _check.MAX_INDEX)
    p = _ints(padding, nsp, "padding", 0)
    d = _ints(dilation, nsp, "dilation", 1)
    if not isinstance(ceil_mode, (bool, np.bool_)):
        raise TypeError(f"ceil_mode must be a bool; got {ceil_mode!r}")
    out = []
    for L, ki, si, pi, di in zip(spatial[3 - nsp:], k, s, p, d):
        if pi > ki // 2:
            raise ValueError(f"padding must be at most half the kernel size; got padding "
                             f"{p} for kernel_size {k}")
        span = L + 2 * pi - di * (ki - 1) - 1
        if span < 0:
            raise ValueError(f"kernel_size {k} (dilation {d}) is larger than the padded input "
                             f"{tuple(spatial[3 - nsp:])} (padding {p})")
        o = (span + (si - 1 if ceil_mode else 0)) // si + 1
        if ceil_mode and (o - 1) * si >= L + pi:
            o -= 1    # the last window must start inside the input or its left padding
        out.append(o)
    # A stride past the padded input leaves one window, the same for any such stride: the
    # kernels get the padded length (their index arithmetic is int32).
    s = tuple(min(si, L + 2 * pi) for L, si, pi in zip(spatial[3 - nsp:], s, p))
    if nsp == 3:
        return k, s, p, d, tuple(out)
    return (_pad3(k, nsp, 1), _pad3(s, nsp, 1), _pad3(p, nsp, 0), _pad3(d, nsp, 1),
            _pad3(out, nsp, 1))


def _wrap(input, data):
    return QTensor._make(data, input._dtype, input._scale, input._zero_point)


def _bool(v, argname):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{argname} must be a bool; got {v!r}")
    return bool(v)


def _channels_last(input, nsp):
    """input's raw values as (N, D, H, W, C) when they lie channels last (NHWC memory), else
    None."""
    if type(input) is QTensor and nsp == 2 and input._int.ndim == 4:
        x = input._int
        if memory_order(x) is CL_ORDER[4]:
            # an image with C, H, W > 1, known by its strides (the usual call, checked cheaply)
            n, c, h, w = x.shape
            return None if n == 0 else x.transpose(CL_ORDER[4]).reshape(n, 1, h, w, c)
    if (type(input) is not QTensor or input._int.flags.c_contiguous
            or input._int.ndim != nsp + 2 or 0 in input.shape
            or not is_channels_last(input._int)):
        return None
    xm = input._int.transpose(CL_ORDER[nsp + 2])
    return xm.reshape((xm.shape[0],) + (1,) * (3 - nsp) + xm.shape[1:])


def _wrap_cl(input, nsp, y):
    """A pool's (N, OD, OH, OW, C) result as the logical (N, C, ...) QTensor, still lying
    channels last."""
    s = y.shape
    y = y.reshape((s[0], s[3], s[4]) if nsp == 1 else s[:1] + s[4 - nsp:])
    return QTensor._make(y.transpose(CL_BACK[nsp + 2]), input._dtype, input._scale,
                         input._zero_point)


# Channels-last 2-d max pools seen before, by (shape, strides, qtype, arguments): their checked
# arguments and kernel view shape. A model repeats a few such pools, and on a small one the
# layout test, the input check and the argument check cost as much as the kernel; a key is
# only made of exact ints and tuples of them (as _pool_args' memo), so an argument that
# compares equal but checks differently (True, 2.0) never takes an entry.
_CL_CALLS: dict = {}


def _max_pool(nsp, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    key = None
    if (nsp == 2 and return_indices is False and type(input) is QTensor and _plain(kernel_size)
            and (stride is None or _plain(stride)) and _plain(padding) and _plain(dilation)
            and type(ceil_mode) is bool):
        x = input._int
        key = (x.shape, x.strides, input._dtype, input._axis, kernel_size, stride, padding,
               dilation, ceil_mode)
        hit = _CL_CALLS.get(key)
        if hit is not None:
            view, args = hit
            y = _config.impl("pool").max_pool_cl(x.transpose(CL_ORDER[4]).reshape(view), *args)
            return _wrap_cl(input, 2, y)
    xcl = None if return_indices is not False else _channels_last(input, nsp)
    if xcl is not None:
        # channels-last memory: pooled as it lies, and the result lies channels last too, as
        # PyTorch's does (no transpose either way)
        _check.qtensor(input, "input", dtypes=_ALL, ndims=(nsp + 2,))
        args = _pool_args(nsp, kernel_size, stride, padding, dilation, xcl.shape[1:4],
                          ceil_mode)
        if key is not None and input._int.ndim == 4 and memory_order(input._int) is CL_ORDER[4]:
            if len(_CL_CALLS) >= 256:
                _CL_CALLS.clear()
            _CL_CALLS[key] = (xcl.shape, args)
        return _wrap_cl(input, nsp, _config.impl("pool").max_pool_cl(xcl, *args))
    x5, back = _as5d(input, nsp, _ALL)
    k, s, p, d, o = _pool_args(nsp, kernel_size, stride, padding, dilation, x5.shape[2:],
                                ceil_mode)
    with_indices = _bool(return_indices, "return_indices")
    res = _config.impl("pool").max_pool(x5, k, s, p, d, o, with_indices)
    if with_indices:
        return _wrap(input, back(res[0])), back(res[1])
    return _wrap(input, back(res))


@overload
def max_pool1d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: Literal[False] = False) -> QTensor: ...
@overload
def max_pool1d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False, *,
               return_indices: Literal[True]) -> WithIndices: ...
@overload
def max_pool1d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Union[QTensor, WithIndices]: ...


def max_pool1d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Union[QTensor, WithIndices]:
    """1-d max pool over raw values; output qparams = input's.

    Unlike PyTorch's quantized max pool, ``return_indices=True`` works: it returns
    ``(output, indices)`` with int64 indices into each input plane, as PyTorch's float max
    pool gives them (first maximum in scan order).

    Parameters
    ----------
    input : QTensor (N, C, L) or (C, L), quint8, qint8 or qint32
    kernel_size, stride, padding, dilation : int or 1-tuple (stride defaults to kernel_size)
    ceil_mode : bool, round the output length up
    return_indices : bool, also return the argmax indices (int64 ndarray)
    """
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@overload
def max_pool2d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: Literal[False] = False) -> QTensor: ...
@overload
def max_pool2d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False, *,
               return_indices: Literal[True]) -> WithIndices: ...
@overload
def max_pool2d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Union[QTensor, WithIndices]: ...


def max_pool2d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Union[QTensor, WithIndices]:
    """2-d max pool over raw values; output qparams = input's.

    ``return_indices=True`` returns ``(output, indices)`` (int64, flat h*W + w), as PyTorch's
    float max pool does; PyTorch's quantized max pool rejects it.

    Parameters
    ----------
    input : QTensor (N, C, H, W) or (C, H, W), quint8, qint8 or qint32
    kernel_size, stride, padding, dilation : int or 2-tuple (stride defaults to kernel_size)
    ceil_mode : bool, round the output size up
    return_indices : bool, also return the argmax indices (int64 ndarray)
    """
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@overload
def max_pool3d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: Literal[False] = False) -> QTensor: ...
@overload
def max_pool3d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False, *,
               return_indices: Literal[True]) -> WithIndices: ...
@overload
def max_pool3d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Union[QTensor, WithIndices]: ...


def max_pool3d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Union[QTensor, WithIndices]:
    """3-d max pool over raw values; output qparams = input's.

    ``return_indices=True`` returns ``(output, indices)`` (int64, flat (d*H + h)*W + w).

    Parameters
    ----------
    input : QTensor (N, C, D, H, W) or (C, D, H, W), quint8, qint8 or qint32
    kernel_size, stride, padding, dilation : int or 3-tuple (stride defaults to kernel_size)
    ceil_mode : bool, round the output size up
    return_indices : bool, also return the argmax indices (int64 ndarray)
    """
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool(nsp, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    xcl = _channels_last(input, nsp)
    if xcl is not None:
        _check.qtensor(input, "input", dtypes=_8BIT, ndims=(nsp + 2,))
        spatial = xcl.shape[1:4]
    else:
        x5, back = _as5d(input, nsp, _8BIT)
        spatial = x5.shape[2:]
    k, s, p, _, o = _pool_args(nsp, kernel_size, stride, padding, 1, spatial, ceil_mode)
    if k[0] * k[1] * k[2] > _MAX_WINDOW:
        raise ValueError(f"kernel_size {tuple(k[3 - nsp:])} covers more than 2**23 elements "
                         f"(window sums are exact int32)")
    cip = _bool(count_include_pad, "count_include_pad")
    div = 0
    if divisor_override is not None:
        div = _check.integer(divisor_override, "divisor_override")
        if div == 0:
            raise ValueError("divisor_override must not be zero")
        if abs(div) >= 1 << 24:
            raise ValueError(f"divisor_override must be below 2**24 in size; got {div}")
    if xcl is not None:
        # channels-last memory: pooled as it lies, the result channels last (as PyTorch's)
        return _wrap_cl(input, nsp, _config.impl("pool").avg_pool_cl(
            xcl, k, s, p, o, cip, div, input._zero_point))
    res = _config.impl("pool").avg_pool(x5, k, s, p, o, cip, div, input._zero_point)
    return _wrap(input, back(res))


def avg_pool1d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> QTensor:
    """1-d average pool; output qparams = input's (PyTorch's avg_pool2d formula, H = 1).

    Parameters
    ----------
    input : QTensor (N, C, L) or (C, L), quint8 or qint8
    kernel_size, stride, padding : int or 1-tuple (stride defaults to kernel_size)
    ceil_mode : bool, round the output length up
    count_include_pad : bool, divide by the window length including padding
    divisor_override : nonzero int or None, divide by this instead
    """
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool2d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> QTensor:
    """2-d average pool; output qparams = input's, with PyTorch's formula for the layout.

    C-order input: bit-exact with PyTorch's NCHW kernel. Channels-last memory: the vector
    body of its NHWC kernel (zero point added after rounding) for every channel; PyTorch's
    last C % 8 channels (C % 16 with AVX-512) add it before rounding, a difference of 1 at
    exact .5 ties when the zero point is odd.

    Parameters
    ----------
    input : QTensor (N, C, H, W) or (C, H, W), quint8 or qint8
    kernel_size, stride, padding : int or 2-tuple (stride defaults to kernel_size)
    ceil_mode : bool, round the output size up
    count_include_pad : bool, divide by the window area including padding
    divisor_override : nonzero int or None, divide by this instead
    """
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool3d(input: QTensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> QTensor:
    """3-d average pool; output qparams = input's.

    On C-order input, uses the avg_pool2d rounding (zero point added before rounding) for
    every channel; on channels-last memory, PyTorch's channels-last formula (zero point added
    after rounding) for every channel. PyTorch's avg_pool3d always runs its channels-last
    kernel, which adds the zero point after rounding for the first C//8*8 channels (AVX2;
    C//16*16 with AVX-512) and before it for the rest: results differ by 1 at exact .5 ties
    when the zero point is odd (C-order input: in those first channels; channels-last
    input: in the rest).

    Parameters
    ----------
    input : QTensor (N, C, D, H, W) or (C, D, H, W), quint8 or qint8
    kernel_size, stride, padding : int or 3-tuple (stride defaults to kernel_size)
    ceil_mode : bool, round the output size up
    count_include_pad : bool, divide by the window volume including padding
    divisor_override : nonzero int or None, divide by this instead
    """
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _adaptive_size(output_size, nsp, spatial):
    """output_size as a checked tuple; None entries keep the input's size."""
    if type(output_size) is int and 1 <= output_size <= _check.MAX_DIM:
        return (output_size,) * nsp
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != nsp:
            raise ValueError(f"output_size must be an int or {nsp} ints; got {output_size!r}")
        vals = [spatial[i] if v is None else v for i, v in enumerate(output_size)]
    elif output_size is None:
        raise TypeError("output_size must be an int or a tuple of ints, not None")
    else:
        vals = [output_size] * nsp
    return tuple(_check.integer(v, "output_size", minimum=1, maximum=_check.MAX_DIM)
                 for v in vals)


def _adaptive(nsp, input, output_size, kind, return_indices=False):
    xcl = _channels_last(input, nsp) if kind == "avg" else None
    if xcl is not None:
        _check.qtensor(input, "input", dtypes=_8BIT, ndims=(nsp + 2,))
        spatial = xcl.shape[1:4]
    else:
        x5, back = _as5d(input, nsp, _8BIT if kind == "avg" else _ALL)
        spatial = x5.shape[2:]
    o = _adaptive_size(output_size, nsp, spatial[3 - nsp:])
    o = (1,) * (3 - nsp) + o
    nc = (xcl.shape[0], xcl.shape[4]) if xcl is not None else x5.shape[:2]
    itemsize = input._int.itemsize
    if kind == "max" and _bool(return_indices, "return_indices"):
        itemsize += 8                            # the int64 indices
    _check.out_shape(nc + o, "output_size", itemsize)
    if kind == "avg":
        # adaptive windows are at most ceil(L/O) + 1 long per dim
        if o == (1, 1, 1):
            win = spatial[0] * spatial[1] * spatial[2]
        else:
            win = 1
            for oi, L in zip(o, spatial):
                win *= min(L, -(-L // oi) + 1)
        if win > _MAX_WINDOW:
            raise ValueError(f"adaptive average windows over more than 2**23 elements are not "
                             f"supported (input {input.shape})")
        if nsp == 3 and o == (1, 1, 1):
            # PyTorch's adaptive_avg_pool3d(x, 1) is x.mean((-3, -2, -1), keepdim=True), whose
            # fast path rounds f32(f32(sum) / f32(n)), not the pool's product with a chained
            # reciprocal (issue 19 #6). On channels-last memory PyTorch's mean averages the
            # dequantized floats instead: qops keeps the exact raw formula there.
            from qops._ops.reduce import mean
            return mean(input, dim=(-3, -2, -1), keepdim=True)
        if xcl is not None:
            return _wrap_cl(input, nsp, _config.impl("pool").adaptive_avg_pool_cl(
                xcl, o, input._zero_point))
        return _wrap(input, back(_config.impl("pool").adaptive_avg_pool(x5, o)))
    with_indices = _bool(return_indices, "return_indices")
    res = _config.impl("pool").adaptive_max_pool(x5, o, with_indices)
    if with_indices:
        return _wrap(input, back(res[0])), back(res[1])
    return _wrap(input, back(res))


def adaptive_avg_pool1d(input: QTensor, output_size: OutputSize) -> QTensor:
    """1-d adaptive average pool; output qparams = input's (PyTorch's 2-d formula, H = 1).

    Parameters
    ----------
    input : QTensor (N, C, L) or (C, L), quint8 or qint8
    output_size : int or 1-tuple, >= 1
    """
    return _adaptive(1, input, output_size, "avg")


def adaptive_avg_pool2d(input: QTensor, output_size: OutputSize) -> QTensor:
    """2-d adaptive average pool; output qparams = input's, bit-exact with PyTorch.

    C-order input: PyTorch's NCHW formula rint(f32(sum * r)) on raw values; channels-last
    memory: its NHWC formula (window sum less size*zp, times f32(1/f32(1/f32(1/size))),
    zero point added before rounding).

    PyTorch scrambles channels when the input is 1x1 spatially with C > 1 (it takes its
    channels-last path); qops returns the correct result there.

    Parameters
    ----------
    input : QTensor (N, C, H, W) or (C, H, W), quint8 or qint8
    output_size : int or 2-tuple (None keeps that input size), each >= 1
    """
    # The usual call, global pooling (output_size 1 or (1, 1)) of a C-order or channels-last
    # batch, skips the general checks: they cost about as much as the kernel
    if ((type(output_size) is int and output_size == 1
         or type(output_size) is tuple and output_size == (1, 1)
         and type(output_size[0]) is int and type(output_size[1]) is int)
            and type(input) is QTensor and input._axis is None and input._dtype in _8BIT):
        x = input._int
        if x.ndim == 4 and x.size > 0 and x.shape[2] * x.shape[3] <= _MAX_WINDOW:
            n, c, h, w = x.shape
            if x.flags.c_contiguous:
                out = _config.impl("pool").adaptive_avg_pool(x.reshape(n, c, 1, h, w),
                                                             (1, 1, 1))
                return QTensor._make(out.reshape(n, c, 1, 1), input._dtype, input._scale,
                                     input._zero_point)
            if memory_order(x) is CL_ORDER[4]:
                # channels-last memory (the global pool closing a CNN), pooled as it lies
                out = _config.impl("pool").adaptive_avg_pool_cl(
                    x.transpose(CL_ORDER[4]).reshape(n, 1, h, w, c), (1, 1, 1),
                    input._zero_point)
                return QTensor._make(out.reshape(n, 1, 1, c).transpose(CL_BACK[4]),
                                     input._dtype, input._scale, input._zero_point)
    return _adaptive(2, input, output_size, "avg")


def adaptive_avg_pool3d(input: QTensor, output_size: OutputSize) -> QTensor:
    """3-d adaptive average pool; output qparams = input's, with PyTorch's formulas.

    Output size 1: PyTorch's mean, rint(f32(f32(sum) / f32(n))) on raw values (PyTorch
    averages dequantized floats on channels-last memory: ±1 near ties there). Otherwise as
    adaptive_avg_pool2d: the NCDHW formula on C-order input, the NDHWC one on channels-last
    memory.

    Parameters
    ----------
    input : QTensor (N, C, D, H, W) or (C, D, H, W), quint8 or qint8
    output_size : int or 3-tuple (None keeps that input size), each >= 1
    """
    if type(output_size) is int and output_size == 1 and type(input) is QTensor:
        # the usual call (a global pool of a C-order batch), checked here at once: the
        # kernel mean() would call (below), without its checks and memory-order search
        q = input._int
        if q.ndim == 5 and input._axis is None and input._dtype in _8BIT \
                and q.flags.c_contiguous and q.size and q[0, 0].size <= _MAX_WINDOW:
            n, c = q.shape[:2]
            out = _config.impl("reduce").mean_dims(q.reshape(n * c, q.size // (n * c), 1))
            return _wrap(input, out.reshape(n, c, 1, 1, 1))
    return _adaptive(3, input, output_size, "avg")


@overload
def adaptive_max_pool1d(input: QTensor, output_size: OutputSize,
                        return_indices: Literal[False] = False) -> QTensor: ...
@overload
def adaptive_max_pool1d(input: QTensor, output_size: OutputSize, *,
                        return_indices: Literal[True]) -> WithIndices: ...
@overload
def adaptive_max_pool1d(input: QTensor, output_size: OutputSize,
                        return_indices: bool = False) -> Union[QTensor, WithIndices]: ...


def adaptive_max_pool1d(input: QTensor, output_size: OutputSize,
                        return_indices: bool = False) -> Union[QTensor, WithIndices]:
    """1-d adaptive max pool over raw values; output qparams = input's.

    PyTorch has no quantized adaptive max pool; this matches its float one on int_repr().

    Parameters
    ----------
    input : QTensor (N, C, L) or (C, L), quint8, qint8 or qint32
    output_size : int or 1-tuple, >= 1
    return_indices : bool, also return int64 argmax indices
    """
    return _adaptive(1, input, output_size, "max", return_indices)


@overload
def adaptive_max_pool2d(input: QTensor, output_size: OutputSize,
                        return_indices: Literal[False] = False) -> QTensor: ...
@overload
def adaptive_max_pool2d(input: QTensor, output_size: OutputSize, *,
                        return_indices: Literal[True]) -> WithIndices: ...
@overload
def adaptive_max_pool2d(input: QTensor, output_size: OutputSize,
                        return_indices: bool = False) -> Union[QTensor, WithIndices]: ...


def adaptive_max_pool2d(input: QTensor, output_size: OutputSize,
                        return_indices: bool = False) -> Union[QTensor, WithIndices]:
    """2-d adaptive max pool over raw values; output qparams = input's.

    PyTorch has no quantized adaptive max pool; this matches its float one on int_repr().

    Parameters
    ----------
    input : QTensor (N, C, H, W) or (C, H, W), quint8, qint8 or qint32
    output_size : int or 2-tuple (None keeps that input size), each >= 1
    return_indices : bool, also return int64 argmax indices (flat h*W + w)
    """
    return _adaptive(2, input, output_size, "max", return_indices)
