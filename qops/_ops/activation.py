"""Public activation ops (see qops/_ops/__init__.py for the wrapper contract).

Output qparams follow PyTorch 2.13 (docs/semantics.md §5 and §6): relu, relu6, hardtanh,
clamp and leaky_relu keep the input's; hardswish and elu take them as arguments; hardsigmoid,
sigmoid and tanh use fixed ones.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union, overload

import numpy as np

from qops import _config
from qops import _qparams as qp
from qops._dtypes import qint8, quint8
from qops._layout import elementwise
from qops._ops import _check
from qops._qtensor import QTensor

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["relu", "relu_", "relu6", "hardtanh", "clamp", "elu", "leaky_relu", "hardsigmoid",
           "hardswish", "sigmoid", "tanh", "gelu"]

_DTYPES = (quint8, qint8)

# Fixed output qparams (scale, zero point per dtype, float32 inverse scale), as PyTorch sets them.
_HARDSIGMOID = (0.00390625, {"quint8": 0, "qint8": -128}, 256.0)
_SIGMOID = (0.00390625, {"quint8": 0, "qint8": -128}, 256.0)
_TANH = (0.0078125, {"quint8": 128, "qint8": 0}, 128.0)


def _input(input, argname="input"):
    # The common case in a few attribute checks; anything else gets _check's error message.
    if type(input) is QTensor and input._axis is None and input._dtype in _DTYPES:
        return input
    return _check.qtensor(input, argname, dtypes=_DTYPES)


def _kernels():
    return _config.impl("activation")


def _raw_bound(value, t, argname):
    """The raw value of real `value` in `t`'s qparams, by PyTorch's scalar quantize (Q_leg)."""
    if type(value) is not float:
        value = _check.real(value, argname)
    if value != value:
        raise ValueError(f"{argname} must not be NaN")
    d = t._dtype
    return qp.quantize_val(value, t._scale, t._zero_point, d.qmin, d.qmax)


def _finish(input, data, inplace, scale=None, zero_point=None):
    """Wrap `data`, or write it into `input` (in place) and return `input`."""
    if scale is None:
        scale, zero_point = input._scale, input._zero_point
    if inplace:
        if not input._int.flags.writeable:
            raise ValueError("inplace=True needs a writeable input (this one is a read-only view)")
        np.copyto(input._int, data)
        input._scale, input._zero_point = scale, zero_point
        return input
    return QTensor._make(data, input.dtype, scale, zero_point)


_PREPARED: dict[Any, Any] = {}


def _prepared(key, make):
    """make() memoized by `key`: the checked, float32-rounded kernel arguments of a call.

    Keys hold each argument's type next to its value (1 and 1.0 and True differ), so a hit is
    an argument list that was checked before; a model calls each activation with a handful of
    qparams, and the checks and numpy float32 scalars cost microseconds per call.
    """
    try:
        v = _PREPARED.get(key)
    except TypeError:             # an unhashable argument: make() names it in its error
        return make()
    if v is None:
        v = make()
        if len(_PREPARED) >= 4096:
            _PREPARED.clear()
        _PREPARED[key] = v
    return v


def _bool(v, argname):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{argname} must be a bool; got {v!r}")
    return bool(v)


def _clamp(input, lo, hi, inplace):
    q = input._int
    if inplace is False:          # the common call: one kernel call and one wrap
        return QTensor._make(elementwise(_config.impl("activation").clamp_raw, q, lo, hi),
                             input._dtype, input._scale, input._zero_point)
    if inplace and q.flags.c_contiguous and q.flags.writeable:
        _kernels().clamp_raw(q, lo, hi, out=q)      # in one pass, without a temporary
        return input
    return _finish(input, elementwise(_kernels().clamp_raw, q, lo, hi), inplace)


def relu(input: QTensor, inplace: bool = False) -> QTensor:
    """Quantized relu: max(q, zero_point) on raw values; output qparams are the input's.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    inplace : bool, write the result into `input`'s raw data and return it
    """
    d = input._dtype if type(input) is QTensor else None
    if inplace is False and d in _DTYPES and input._axis is None:
        # the common call in one Python frame: after a streaming kernel the interpreter's own
        # code and data come back from L3, so each extra frame costs more than usual here
        zp = input._zero_point
        return QTensor._make(elementwise(_config.impl("activation").clamp_raw, input._int, zp,
                                         d.qmax), d, input._scale, zp)
    _input(input)
    if inplace is not False:
        inplace = _bool(inplace, "inplace")
    return _clamp(input, input._zero_point, input._dtype.qmax, inplace)


def relu_(input: QTensor) -> QTensor:
    """Quantized relu in place on `input`'s raw data; returns `input`.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8), writeable
    """
    return relu(input, inplace=True)


def relu6(input: QTensor, inplace: bool = False) -> QTensor:
    """Quantized relu6: min(max(q, zero_point), quantize(6.0)); output qparams are the input's.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    inplace : bool, write the result into `input` and return it
    """
    _input(input)
    if inplace is not False:
        inplace = _bool(inplace, "inplace")
    return _clamp(input, input._zero_point, _raw_bound(6.0, input, "six"), inplace)


def hardtanh(input: QTensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> QTensor:
    """Quantized hardtanh: raw clamp between quantize(min_val) and quantize(max_val).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    min_val, max_val : float, the real bounds (quantized with the input's qparams)
    inplace : bool, write the result into `input` and return it
    """
    _input(input)
    if inplace is not False:
        inplace = _bool(inplace, "inplace")
    lo = _raw_bound(min_val, input, "min_val")
    hi = _raw_bound(max_val, input, "max_val")
    return _clamp(input, lo, hi, inplace)


def clamp(input: QTensor, min_: Optional[float], max_: Optional[float]) -> QTensor:
    """Quantized clamp (qF.clamp): raw clamp between ``quantize(min_)`` and ``quantize(max_)``.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    min_ : float or None (no lower bound)
    max_ : float or None (no upper bound)
    """
    _input(input)
    if min_ is None and max_ is None:
        raise ValueError("clamp: at least one of min_ and max_ must be given")
    lo = input.dtype.qmin if min_ is None else _raw_bound(min_, input, "min_")
    hi = input.dtype.qmax if max_ is None else _raw_bound(max_, input, "max_")
    return _clamp(input, lo, hi, False)


def leaky_relu(input: QTensor, negative_slope: float = 0.01, inplace: bool = False,
               scale: Optional[float] = None, zero_point: Optional[int] = None) -> QTensor:
    """Quantized leaky_relu: x > 0 ? x : negative_slope * x, requantized.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    negative_slope : float
    inplace : bool, write the result into `input` (not with scale/zero_point)
    scale, zero_point : output qparams; both None keeps the input's
    """
    _input(input)
    inplace = _bool(inplace, "inplace")

    def make():
        slope = qp.f32(_check.real(negative_slope, "negative_slope"))
        if (scale is None) != (zero_point is None):
            raise ValueError("leaky_relu: give both scale and zero_point, or neither")
        if scale is None:
            out_scale, out_zp = input._scale, input._zero_point
        else:
            out_scale = qp.check_scale(scale)
            out_zp = qp.check_zero_point(zero_point, input.dtype)
        return (qp.f32(input._scale), slope, qp.inv_scale(out_scale), out_scale, out_zp)
    sf, slope, inv, out_scale, out_zp = _prepared(
        ("leaky_relu", input._dtype, input._scale, input._zero_point, type(negative_slope),
         negative_slope, type(scale), scale, type(zero_point), zero_point), make)
    if inplace and scale is not None:
        raise ValueError("leaky_relu: cannot rescale (scale/zero_point given) with inplace=True")
    data = elementwise(_kernels().leaky_relu, input._int,
                       sf, input._zero_point, slope, inv, out_zp)
    return _finish(input, data, inplace, out_scale, out_zp)


def _f32_scale(input):
    # the input's scale rounded to float32 (memoized: making a numpy scalar is not free)
    return _prepared(("f32", input._scale), lambda: qp.f32(input._scale))


def _fixed(input, fixed):
    scale, zps, inv = fixed
    return scale, zps[input.dtype.name], inv


def hardsigmoid(input: QTensor, inplace: bool = False) -> QTensor:
    """Quantized hardsigmoid: clamp(x + 3, 0, 6) / 6, output scale 1/256, zero point 0
    (quint8) or -128 (qint8).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    inplace : bool, write the result and the new qparams into `input` and return it
    """
    _input(input)
    inplace = _bool(inplace, "inplace")
    scale, zp, inv = _fixed(input, _HARDSIGMOID)
    data = elementwise(_kernels().hardsigmoid, input._int,
                       _f32_scale(input), input._zero_point, inv, zp)
    return _finish(input, data, inplace, scale, zp)


def hardswish(input: QTensor, scale: float, zero_point: int) -> QTensor:
    """Quantized hardswish: x * clamp(x + 3, 0, 6) / 6, quantized with the given qparams.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    scale : float > 0, output scale
    zero_point : int, output zero point
    """
    _input(input)

    def make():
        out_scale = qp.check_scale(scale)
        out_zp = qp.check_zero_point(zero_point, input.dtype)
        return qp.f32(input._scale), qp.inv_scale_f64(out_scale), out_scale, out_zp
    sf, inv, out_scale, out_zp = _prepared(
        ("hardswish", input._dtype, input._scale, input._zero_point, type(scale), scale,
         type(zero_point), zero_point), make)
    data = elementwise(_kernels().hardswish, input._int, sf, input._zero_point, inv, out_zp)
    return QTensor._make(data, input._dtype, out_scale, out_zp)


def elu(input: QTensor, scale: float, zero_point: int, alpha: float = 1.0) -> QTensor:
    """Quantized elu: x > 0 ? x : alpha * (exp(x) - 1), quantized with the given qparams.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    scale : float > 0, output scale
    zero_point : int, output zero point
    alpha : float
    """
    _input(input)

    def make():
        out_scale = qp.check_scale(scale)
        out_zp = qp.check_zero_point(zero_point, input.dtype)
        a = qp.f32(_check.real(alpha, "alpha"))
        # PyTorch: float o_scale, then 1.0 / o_scale in double, rounded to float.
        return qp.f32(input._scale), a, qp.inv_scale_f64(qp.f32(out_scale)), out_scale, out_zp
    sf, a, inv, out_scale, out_zp = _prepared(
        ("elu", input._dtype, input._scale, input._zero_point, type(scale), scale,
         type(zero_point), zero_point, type(alpha), alpha), make)
    data = elementwise(_kernels().elu, input._int, sf, input._zero_point, a, inv, out_zp)
    return QTensor._make(data, input._dtype, out_scale, out_zp)


def sigmoid(input: QTensor) -> QTensor:
    """Quantized sigmoid; output scale 1/256, zero point 0 (quint8) or -128 (qint8).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    """
    _input(input)
    scale, zp, inv = _fixed(input, _SIGMOID)
    data = elementwise(_kernels().sigmoid, input._int,
                       _f32_scale(input), input._zero_point, inv, zp)
    return QTensor._make(data, input.dtype, scale, zp)


def tanh(input: QTensor) -> QTensor:
    """Quantized tanh; output scale 2/256, zero point 128 (quint8) or 0 (qint8).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8)
    """
    _input(input)
    scale, zp, inv = _fixed(input, _TANH)
    data = elementwise(_kernels().tanh, input._int,
                       _f32_scale(input), input._zero_point, inv, zp)
    return QTensor._make(data, input.dtype, scale, zp)


@overload
def gelu(input: QTensor, approximate: str = "none") -> QTensor: ...
@overload
def gelu(input: npt.ArrayLike, approximate: str = "none") -> npt.NDArray[np.float32]: ...


def gelu(input: Union[QTensor, npt.ArrayLike],
         approximate: str = "none") -> Union[QTensor, npt.NDArray[np.float32]]:
    """GELU, x * Phi(x), of a QTensor or a float array (torch.nn.functional.gelu).

    A QTensor gives a QTensor with the input's qparams, the scale rounded to float32 as
    PyTorch's quantized GELU does (dequantize, GELU, quantize); a float array gives float32.
    The exact form is accurate to 2.2 float32 ulps (docs/semantics.md §6.1); "tanh" follows
    PyTorch's float32 steps.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8), or a float array of any shape
    approximate : "none" (x/2 erfc(-x / sqrt 2)) or "tanh"
        (x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh'; got {approximate!r}")
    if not isinstance(input, QTensor):
        x = _check.float_array(input)
        # in its memory order, the result laid out alike (a channels-last conv's output is
        # not copied first)
        return elementwise(_kernels().gelu_f32, x, approximate)
    _input(input)
    sf = qp.f32(input._scale)
    # PyTorch's output scale is the input's rounded to float32
    out_scale = float(sf)
    inv = qp.inv_scale_f64(out_scale)
    data = elementwise(_kernels().gelu, input._int, sf, input._zero_point, approximate, inv,
                       input._zero_point)
    return QTensor._make(data, input._dtype, out_scale, input._zero_point)
