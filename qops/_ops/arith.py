"""Public arithmetic ops (PyTorch's QFunctional / quantized::add, mul, cat; docs/semantics.md §7).

add/mul take explicit output qparams and broadcast as PyTorch does; add_scalar and mul_scalar
derive their output qparams from the scalar; cat defaults to the first input's qparams.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Union

import numpy as np

from qops import _config
from qops import _qparams as qp
from qops._dtypes import qint8, quint8
from qops._layout import CL_BACK, CL_ORDER, elementwise, elementwise2, inverse, memory_order
from qops._ops import _check
from qops._qtensor import QTensor, _axis_arg

__all__ = ["add", "add_relu", "mul", "mul_relu", "add_scalar", "mul_scalar", "cat", "cat_relu"]

_DTYPES = (quint8, qint8)
F32 = np.float32
_CL4, _CL4_BACK = CL_ORDER[4], CL_BACK[4]


def _kernels():
    return _config.impl("arith")


def _ok(t):
    return type(t) is QTensor and t._axis is None and t._dtype in _DTYPES


def _binary_inputs(a, b, scale, zero_point, what):
    if (type(a) is QTensor and type(b) is QTensor and a._axis is None and b._axis is None
            and a._dtype is b._dtype and a._dtype in _DTYPES and a._int.shape == b._int.shape):
        # the usual call (two same-shape operands), checked in one pass
        return (a._int, b._int, qp.check_scale(scale),
                qp.check_zero_point(zero_point, a._dtype))
    if not (_ok(a) and _ok(b)):
        _check.qtensor(a, "a", dtypes=_DTYPES)
        _check.qtensor(b, "b", dtypes=_DTYPES)
    if a.dtype is not b.dtype:
        raise TypeError(f"{what}: a and b must have the same dtype; got {a.dtype.name} and "
                        f"{b.dtype.name}")
    shape = a.shape
    if b.shape != shape:
        try:
            shape = _broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ValueError(f"{what}: shapes of a {a.shape} and b {b.shape} "
                             f"do not broadcast") from None
    scale = qp.check_scale(scale)
    zero_point = qp.check_zero_point(zero_point, a.dtype)
    # Broadcast operands are materialised so both kernels see two arrays of the output shape,
    # laid out as the operand that has it: x * scale of a channels-last x (a squeeze-excite
    # block) stays channels last, as PyTorch's, and the kernels run over the memory as it lies.
    ra = a._int if a.shape == shape else _broadcast(a._int, shape, b._int)
    rb = b._int if b.shape == shape else _broadcast(b._int, shape, a._int)
    return ra, rb, scale, zero_point


def _broadcast_shapes(s, t):
    """np.broadcast_shapes(s, t), without its cost for shapes of equal length (a
    squeeze-excite scale (N, C, 1, 1) against its (N, C, H, W) input)."""
    if len(s) != len(t):
        return np.broadcast_shapes(s, t)
    out = []
    for x, y in zip(s, t):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ValueError(f"shapes {s} and {t} do not broadcast")
    return tuple(out)


def _broadcast(r, shape, other):
    """r broadcast to `shape` as a dense block, in the memory order of `other` where that
    has the shape (C order otherwise)."""
    full = np.broadcast_to(r, shape)
    order = memory_order(other) if other.shape == shape else None
    if order is None:
        return np.ascontiguousarray(full)
    return np.ascontiguousarray(full.transpose(order)).transpose(inverse(order))


def _add(a, b, scale, zero_point, relu, what):
    ra, rb, scale, zero_point = _binary_inputs(a, b, scale, zero_point, what)
    data = elementwise2(_kernels().add, ra, rb, qp.f32(a._scale), a._zero_point, qp.f32(b._scale),
                          b._zero_point, qp.inv_scale(scale), zero_point, relu)
    return QTensor._make(data, a.dtype, scale, zero_point)


def add(a: QTensor, b: QTensor, scale: float, zero_point: int) -> QTensor:
    """Quantized add: quantize(dequantize(a) + dequantize(b)) with the given output qparams.

    Parameters
    ----------
    a, b : per-tensor QTensors of one dtype (quint8 or qint8), broadcastable shapes
    scale : float > 0, output scale
    zero_point : int, output zero point
    """
    return _add(a, b, scale, zero_point, False, "add")


def add_relu(a: QTensor, b: QTensor, scale: float, zero_point: int) -> QTensor:
    """Quantized add followed by relu (max(sum, 0) before quantizing).

    Parameters
    ----------
    a, b : per-tensor QTensors of one dtype (quint8 or qint8), broadcastable shapes
    scale : float > 0, output scale
    zero_point : int, output zero point
    """
    return _add(a, b, scale, zero_point, True, "add_relu")


def _scale_operands(a, b):
    """(image, scale, channels_last) when one of a, b is an image (N, C, H, W), channels last
    or C-contiguous, and the other its per-channel scale (N, C, 1, 1) (a squeeze-excite
    block), else None."""
    if (type(a) is not QTensor or type(b) is not QTensor or a._axis is not None
            or b._axis is not None or a._dtype is not b._dtype or a._dtype not in _DTYPES):
        return None
    sa, sb = a._int.shape, b._int.shape
    if len(sa) != 4 or len(sb) != 4 or sa[:2] != sb[:2]:
        return None
    for x, v in ((a, b), (b, a)):
        if v._int.shape[2:] == (1, 1) and x._int.shape[2] * x._int.shape[3] > 1:
            if memory_order(x._int) is _CL4:
                return x, v, True
            if x._int.flags.c_contiguous:
                return x, v, False
    return None


def _mul(a, b, scale, zero_point, relu, what):
    scaled = _scale_operands(a, b)
    if scaled is not None:
        # the kernel repeats the scale, never broadcast in full (the product is symmetric, so
        # which operand was `a` is moot): a channels-last image's memory as (N, H*W, C) rows
        # against one row an image, a C-order one as (N*C, H*W) planes against one value each
        x, v, cl = scaled
        scale = qp.check_scale(scale)
        zero_point = qp.check_zero_point(zero_point, a._dtype)
        n, c, h, w = x._int.shape
        m = float(F32(F32(a._scale) * F32(b._scale)) * F32(qp.inv_scale(scale)))
        vs = np.ascontiguousarray(v._int)
        if cl:
            data = _kernels().mul(x._int.transpose(_CL4).reshape(n, h * w, c),
                                  vs.reshape(n, 1, c), x._zero_point, v._zero_point, m,
                                  zero_point, relu).reshape(n, h, w, c).transpose(_CL4_BACK)
        else:
            data = _kernels().mul(x._int.reshape(n * c, h * w), vs.reshape(n * c, 1),
                                  x._zero_point, v._zero_point, m, zero_point,
                                  relu).reshape(n, c, h, w)
        return QTensor._make(data, a.dtype, scale, zero_point)
    ra, rb, scale, zero_point = _binary_inputs(a, b, scale, zero_point, what)
    m = float(F32(F32(a._scale) * F32(b._scale)) * F32(qp.inv_scale(scale)))
    data = elementwise2(_kernels().mul, ra, rb, a._zero_point, b._zero_point, m, zero_point, relu)
    return QTensor._make(data, a.dtype, scale, zero_point)


def mul(a: QTensor, b: QTensor, scale: float, zero_point: int) -> QTensor:
    """Quantized mul: integer product of (a - za)(b - zb) rescaled to the output qparams.

    Parameters
    ----------
    a, b : per-tensor QTensors of one dtype (quint8 or qint8), broadcastable shapes
    scale : float > 0, output scale
    zero_point : int, output zero point
    """
    return _mul(a, b, scale, zero_point, False, "mul")


def mul_relu(a: QTensor, b: QTensor, scale: float, zero_point: int) -> QTensor:
    """Quantized mul followed by relu (max(out, zero_point)).

    Parameters
    ----------
    a, b : per-tensor QTensors of one dtype (quint8 or qint8), broadcastable shapes
    scale : float > 0, output scale
    zero_point : int, output zero point
    """
    return _mul(a, b, scale, zero_point, True, "mul_relu")


def _scalar(other, what):
    if isinstance(other, bool) or not isinstance(other, numbers.Real):
        raise TypeError(f"{what}: other must be a real number; got {other!r}")
    try:
        other = float(other)
    except OverflowError:
        raise ValueError(f"{what}: other must be finite; got a number too large for a "
                         f"float") from None
    if not math.isfinite(other):
        raise ValueError(f"{what}: other must be finite; got {other!r}")
    return other


def add_scalar(input: QTensor, other: float) -> QTensor:
    """Quantized input + scalar: the scalar, rounded to a multiple of the scale, shifts the
    zero point; when that leaves the dtype's range the data are requantized.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    other : float
    """
    _check.qtensor(input, "input", dtypes=_DTYPES)
    other = _scalar(other, "add_scalar")
    d = input.dtype
    s, z = input._scale, input._zero_point
    c = np.rint(other / s)                      # float64 division, ties to even
    if not abs(c) < 2 ** 62:                    # also inf: other / s can overflow float64
        # PyTorch holds c_q in an int64 (undefined beyond it); the kernels add it to q - z
        raise ValueError(f"add_scalar: other={other!r} is too large for the input's scale {s!r}")
    c_q = int(c)
    z_new = z - c_q
    if d.qmin <= z_new <= d.qmax:
        return QTensor._make(np.array(input._int, copy=True), d, s, z_new)
    if z_new < d.qmin:
        s_new = (d.qmax - z_new) / (d.qmax - d.qmin) * s
        zp_new = d.qmin
    else:
        s_new = (z_new - d.qmin) / (d.qmax - d.qmin) * s
        zp_new = d.qmax
    _result_scale(s_new, other, s, "add_scalar")
    m = float(F32(s) * F32(qp.inv_scale(s_new)))
    data = elementwise(_kernels().requant_int, input._int, z, c_q, m, zp_new)
    return QTensor._make(data, d, s_new, zp_new)


def mul_scalar(input: QTensor, other: float) -> QTensor:
    """Quantized input * scalar: the scalar goes into the scale (c > 0), the values are
    reflected (c < 0), or all become 0 with scale 1 (c == 0).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    other : float
    """
    _check.qtensor(input, "input", dtypes=_DTYPES)
    other = _scalar(other, "mul_scalar")
    d = input.dtype
    s, z = input._scale, input._zero_point
    if other == 0.0:
        return QTensor._make(np.zeros(input.shape, dtype=d.storage), d, 1.0, 0)
    if other > 0:
        data, scale, zp = np.array(input._int, copy=True), other * s, z
    else:
        data = elementwise(_kernels().reflect, input._int)
        scale, zp = -other * s, d.qmax - (z - d.qmin)
    _result_scale(scale, other, s, "mul_scalar")
    return QTensor._make(data, d, scale, zp)


def _result_scale(scale, other, s, what):
    # a derived scale must be a usable float32 scale too; the error names the scalar
    try:
        qp.check_scale(scale, "result scale")
    except ValueError:
        raise ValueError(f"{what}: other={other!r} with the input's scale {s!r} gives the result "
                         f"scale {scale!r}, outside float32's positive finite range (its "
                         f"inverse too)") from None


def _cat_ok(tensors, dim):
    """dim normalized when `tensors` is a valid cat input (the usual call, checked in one
    cheap pass), else None: `_cat_check` then finds the fault and names it."""
    first = tensors[0]
    if type(first) is not QTensor or first._axis is not None or first._dtype not in _DTYPES:
        return None
    shape = first._int.shape
    nd = len(shape)
    if type(dim) is not int or not -nd <= dim < nd:
        return None
    dim %= nd
    for t in tensors:
        if type(t) is not QTensor or t._axis is not None or t._dtype is not first._dtype:
            return None
        s = t._int.shape
        if len(s) != nd or s[:dim] != shape[:dim] or s[dim + 1:] != shape[dim + 1:]:
            return None
    return dim


def _cat_check(tensors, dim, what):
    """Raise the error that names what is wrong with the cat input; else dim normalized."""
    for i, t in enumerate(tensors):
        _check.qtensor(t, f"tensors[{i}]", dtypes=_DTYPES)
    first = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        if t.dtype is not first.dtype:
            raise TypeError(f"{what}: tensors[{i}] has dtype {t.dtype.name}, tensors[0] has "
                            f"{first.dtype.name}; all must be the same")
        if t.ndim != first.ndim:
            raise ValueError(f"{what}: tensors[{i}] has {t.ndim} dims, tensors[0] has {first.ndim}")
    if first.ndim == 0:
        raise ValueError(f"{what}: zero-dimensional tensors cannot be concatenated")
    dim = _axis_arg(dim, first.ndim, "dim")
    for i, t in enumerate(tensors[1:], 1):
        if t.shape[:dim] != first.shape[:dim] or t.shape[dim + 1:] != first.shape[dim + 1:]:
            raise ValueError(f"{what}: tensors[{i}] has shape {t.shape}, which differs from "
                             f"tensors[0] {first.shape} outside dim {dim}")
    return dim


_CAT_IMAGES: dict = {}
# memo of the channels-last image cats a model repeats: the inputs' layouts and qparams and
# the output's -> the kernel's arguments (checking and deriving them is most of the Python
# side of a small cat)


def _cat_images(tensors, scale, zero_point, relu):
    """cat along C of per-tensor (N, C, H, W) images all lying channels last (H, W, C > 1),
    as an inception block's branches: the general path's result, checked and laid out in one
    pass, the checks memoized per call signature. None for any other input, which the general
    path then takes."""
    # the types of the output qparams are part of the key: True == 1 must not find 1's entry
    key = [type(scale), scale, type(zero_point), zero_point]
    for t in tensors:
        if type(t) is not QTensor or t._axis is not None:
            return None
        r = t._int
        key += (r.shape, r.strides, t._dtype, t._scale, t._zero_point)
    try:
        key = tuple(key)
        hit = _CAT_IMAGES.get(key)
    except TypeError:           # an array for a qparam: checked, not memoized
        key, hit = None, None
    if hit is None:
        hit = _cat_images_plan(tensors, scale, zero_point) or False
        if key is not None:
            if len(_CAT_IMAGES) >= 256:
                _CAT_IMAGES.clear()
            _CAT_IMAGES[key] = hit
    if hit is False:            # not such images (known from the key's layouts and dtypes)
        return None
    shape, sizes, offsets, scales, zps, inv, requants, scale, zero_point = hit
    rows = shape[0] * shape[1] * shape[2]
    first = tensors[0]
    qs = [t._int.transpose(_CL4).reshape(rows, c) for t, c in zip(tensors, sizes)]
    out = np.empty(shape, dtype=first._int.dtype)
    _kernels().cat_into(qs, out.reshape(rows, shape[3]), offsets, scales, zps, inv, zero_point,
                        requants, relu)
    return QTensor._make(out.transpose(_CL4_BACK), first._dtype, scale, zero_point)


def _cat_images_plan(tensors, scale, zero_point):
    """_cat_images' checks and kernel arguments: (output shape (N, H, W, C), sizes, column
    offsets, input scales and zero points, output inverse scale, requantize flags, output
    scale and zero point), or None when the inputs are not such images."""
    first = tensors[0]
    if first._dtype not in _DTYPES or first._int.ndim != 4:
        return None
    dt = first._dtype
    n, _, h, w = first._int.shape
    sizes = []
    for t in tensors:
        r = t._int
        if t._dtype is not dt or r.ndim != 4 or memory_order(r) is not _CL4:
            return None
        tn, c, th, tw = r.shape
        if tn != n or th != h or tw != w:
            return None
        sizes.append(c)
    scale, zero_point, scales, zps, requants = _cat_qparams(tensors, scale, zero_point)
    return ((n, h, w, sum(sizes)), sizes, _col_offsets(sizes, 1), scales, zps,
            qp.inv_scale(scale), requants, scale, zero_point)


def _col_offsets(sizes, inner):
    """Where each cat input's columns start in a row of the output."""
    offsets = [0] * len(sizes)
    for i in range(1, len(sizes)):
        offsets[i] = offsets[i - 1] + sizes[i - 1] * inner
    return offsets


def _cat_qparams(tensors, scale, zero_point):
    """The output qparams (None: the first tensor's), checked, and the inputs' float32 scales,
    zero points and whether each needs requantizing."""
    first = tensors[0]
    scale = first._scale if scale is None else qp.check_scale(scale)
    zero_point = first._zero_point if zero_point is None else \
        qp.check_zero_point(zero_point, first._dtype)
    so = qp.f32(scale)
    scales = [qp.f32(t._scale) for t in tensors]
    zps = [t._zero_point for t in tensors]
    # Equal qparams reproduce the input exactly (Q_fma(D_sc(q)) == q for a normal scale).
    normal = so >= 1.2e-38
    requants = [not (normal and si == so and z == zero_point) for si, z in zip(scales, zps)]
    return scale, zero_point, scales, zps, requants


def _cat_into(tensors, qs, sizes, inner, out, scale, zero_point, relu):
    """Run the cat kernel: qs[i] (outer, sizes[i] * inner) into out, whose memory is (outer,
    sum(sizes) * inner); returns the output qparams (None: the first tensor's)."""
    scale, zero_point, scales, zps, requants = _cat_qparams(tensors, scale, zero_point)
    offsets = _col_offsets(sizes, inner)
    total = offsets[-1] + sizes[-1] * inner
    _kernels().cat_into(qs, out.reshape(qs[0].shape[0], total), offsets, scales, zps,
                        qp.inv_scale(scale), zero_point, requants, relu)
    return scale, zero_point


def _cat(tensors, dim, scale, zero_point, relu, what):
    if isinstance(tensors, QTensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{what}: tensors must be a list or tuple of QTensors; got "
                        f"{type(tensors).__name__}")
    if len(tensors) == 0:
        raise ValueError(f"{what}: tensors must not be empty")
    if type(dim) is int and (dim == 1 or dim == -3):
        out = _cat_images(tensors, scale, zero_point, relu)
        if out is not None:
            return out
    d = _cat_ok(tensors, dim)
    dim = _cat_check(tensors, dim, what) if d is None else d
    first = tensors[0]
    # Inputs that all lie in one permuted memory order (channels last) are concatenated in
    # that order, and the result lies in it too, as PyTorch's NHWC cat: no transposes.
    order = memory_order(first._int)
    for t in tensors[1:]:
        if order is None:
            break
        o = memory_order(t._int)
        if o is not order and o != order:
            order = None
    if order is None:
        raws = [t._cint() for t in tensors]
    else:
        raws = [t._int.transpose(order) for t in tensors]
        dim = order.index(dim)
    sizes = [r.shape[dim] for r in raws]
    shape = raws[0].shape
    shape = shape[:dim] + (sum(sizes),) + shape[dim + 1:]
    out = np.empty(shape, dtype=first._int.dtype)
    outer = math.prod(shape[:dim])
    inner = math.prod(shape[dim + 1:])
    qs = [r.reshape(outer, c * inner) for r, c in zip(raws, sizes)]
    scale, zero_point = _cat_into(tensors, qs, sizes, inner, out, scale, zero_point, relu)
    if order is not None:
        out = out.transpose(inverse(order))
    return QTensor._make(out, first.dtype, scale, zero_point)


def cat(tensors: Union[list[QTensor], tuple[QTensor, ...]], dim: int = 0,
        scale: Optional[float] = None, zero_point: Optional[int] = None) -> QTensor:
    """Concatenate quantized tensors along `dim`, requantized to (scale, zero_point).

    Inputs that all lie channels last (or in any one permuted order) are concatenated as they
    lie and give a result in that layout, with the values of C-order inputs: PyTorch's NHWC
    path requantizes with another formula (about 7% of values 1 apart when qparams differ).

    Parameters
    ----------
    tensors : list of per-tensor QTensors of one dtype, equal shapes outside `dim`
    dim : int
    scale : float > 0 or None (the first tensor's)
    zero_point : int or None (the first tensor's)
    """
    return _cat(tensors, dim, scale, zero_point, False, "cat")


def cat_relu(tensors: Union[list[QTensor], tuple[QTensor, ...]], dim: int = 0,
             scale: Optional[float] = None, zero_point: Optional[int] = None) -> QTensor:
    """Concatenate as `cat`, then relu (max(q, zero_point)).

    Parameters
    ----------
    tensors : list of per-tensor QTensors of one dtype, equal shapes outside `dim`
    dim : int
    scale : float > 0 or None (the first tensor's)
    zero_point : int or None (the first tensor's)
    """
    return _cat(tensors, dim, scale, zero_point, True, "cat_relu")
