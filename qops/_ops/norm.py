"""Public norm ops: batch_norm (+relu), layer_norm, group_norm, instance_norm.

Arguments and arithmetic follow torch.ops.quantized.{batch_norm, layer_norm, group_norm,
instance_norm} (PyTorch 2.13 x86, docs/semantics.md §13); the output qparams are explicit.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Optional, Sequence, Union, overload

import numpy as np

from qops import _config
from qops import _qparams as qp
from qops._layout import inverse, memory_order
from qops._ops import _check
from qops._qtensor import QTensor

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["batch_norm", "batch_norm_relu", "layer_norm", "group_norm", "instance_norm"]

F32 = np.float32
_DTYPES = ("quint8", "qint8")


def _eps(eps):
    eps = _check.real(eps, "eps")
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"eps must be finite and > 0; got {eps!r}")
    return eps


def _param(v: Optional[npt.ArrayLike], argname: str,
           shape: Sequence[int]) -> Optional[npt.NDArray[np.float32]]:
    """An optional float parameter as a contiguous float32 array of `shape` (None stays None)."""
    if v is None:
        return None
    if type(v) is np.ndarray and v.dtype is _check.F32_DTYPE and v.shape == shape \
            and v.flags.c_contiguous:
        return v                        # the usual call: a module's own float32 parameter
    if isinstance(v, QTensor):
        raise TypeError(f"{argname} must be a float array, not a QTensor")
    a = np.asarray(v)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)) \
            or a.dtype == np.bool_:
        raise TypeError(f"{argname} must be a float array; got dtype {a.dtype}")
    if a.shape != tuple(shape):
        raise ValueError(f"{argname} must have shape {tuple(shape)}; got {a.shape}")
    return np.ascontiguousarray(a, dtype=F32)


def _out_qparams(output_scale, output_zero_point, dtype):
    scale = qp.check_scale(output_scale, "output_scale")
    zp = qp.check_zero_point(output_zero_point, dtype, "output_zero_point")
    return scale, zp


def _rows3(data, axis):
    """`data` as a C-contiguous (outer, size[axis], inner) array (a copy only if needed)."""
    shape = data.shape
    # math.prod of Python ints: np.prod of a tuple costs a few microseconds per call
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    return np.ascontiguousarray(data).reshape(outer, shape[axis], inner)


def _batch_norm_affine(running_mean, running_var, weight, bias, eps, in_scale, out_scale):
    """Per-channel (alpha, beta) of the fused batch norm affine, as PyTorch prepares them.

    inv_sigma = f32(1.0 / f64(sqrtf(f32(var + f32(eps))))),
    alpha = f32(f64(f32(inv_sigma * w)) * (in_s / out_s)),
    beta = f32(f64(f32(b - f32(f32(mean * inv_sigma) * w))) / out_s).
    """
    c = running_mean.shape[0]
    w = np.ones(c, F32) if weight is None else weight
    b = np.zeros(c, F32) if bias is None else bias
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        sd = np.sqrt(running_var + F32(eps)).astype(F32)
        inv_sigma = (1.0 / sd.astype(np.float64)).astype(F32)
        alpha = ((inv_sigma * w).astype(np.float64) * (in_scale / out_scale)).astype(F32)
        beta = ((b - (running_mean * inv_sigma) * w).astype(np.float64) / out_scale).astype(F32)
    return np.ascontiguousarray(alpha), np.ascontiguousarray(beta)


def _batch_norm(input, running_mean, running_var, weight, bias, eps, output_scale,
                output_zero_point, relu):
    _check.qtensor(input, "input", dtypes=_DTYPES, ndims=(2, 3, 4, 5))
    c = input.shape[1]
    running_mean = _param(running_mean, "running_mean", (c,))
    running_var = _param(running_var, "running_var", (c,))
    if running_mean is None or running_var is None:
        raise TypeError("running_mean and running_var are required (quantized batch norm "
                        "uses the running statistics)")
    if (running_var < 0).any() or not np.isfinite(running_var).all():
        raise ValueError("running_var must be finite and >= 0")
    weight = _param(weight, "weight", (c,))
    bias = _param(bias, "bias", (c,))
    eps = _eps(eps)
    scale, zp = _out_qparams(output_scale, output_zero_point, input.dtype)
    alpha, beta = _batch_norm_affine(running_mean, running_var, weight, bias, eps,
                                     float(input._scale), scale)
    order = memory_order(input._int)
    if order is not None and order[-1] == 1:
        # channels innermost in memory (channels last): normalized as it lies, rows of C, and
        # the result keeps the layout (PyTorch's batch norm output is channels last too)
        xm = input._int.transpose(order)
        out = _config.impl("norm").batch_norm_cl(xm.reshape(-1, c), alpha, beta,
                                                 input._zero_point, zp, relu)
        out = out.reshape(xm.shape).transpose(inverse(order))
        return QTensor._make(out, input.dtype, scale, zp)
    x3 = _rows3(input._cint(), 1)
    out = _config.impl("norm").batch_norm(x3, alpha, beta, input._zero_point, zp, relu)
    return QTensor._make(out.reshape(input.shape), input.dtype, scale, zp)


def batch_norm(input: QTensor, running_mean: npt.ArrayLike, running_var: npt.ArrayLike,
               weight: Optional[npt.ArrayLike] = None, bias: Optional[npt.ArrayLike] = None,
               eps: float = 1e-5, output_scale: float = 1.0,
               output_zero_point: int = 0) -> QTensor:
    """Quantized batch norm (inference) over channel dim 1 of a 2-D to 5-D tensor.

    Arithmetic of torch.ops.quantized.batch_norm: a per-channel fused affine
    fma(alpha_c, q - zp, beta_c) rounded half to even, plus the output zero point.

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8) of shape (N, C, ...), 2 to 5 dims
    running_mean : float array (C,)
    running_var : float array (C,), >= 0
    weight : float array (C,) or None (ones)
    bias : float array (C,) or None (zeros)
    eps : float > 0, added to the variance
    output_scale : float > 0
    output_zero_point : int in the dtype's range
    """
    return _batch_norm(input, running_mean, running_var, weight, bias, eps, output_scale,
                       output_zero_point, False)


def batch_norm_relu(input: QTensor, running_mean: npt.ArrayLike, running_var: npt.ArrayLike,
                    weight: Optional[npt.ArrayLike] = None, bias: Optional[npt.ArrayLike] = None,
                    eps: float = 1e-5, output_scale: float = 1.0,
                    output_zero_point: int = 0) -> QTensor:
    """Quantized batch norm fused with relu (torch.ops.quantized.batch_norm_relu).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8) of shape (N, C, ...), 2 to 5 dims
    running_mean : float array (C,)
    running_var : float array (C,), >= 0
    weight : float array (C,) or None (ones)
    bias : float array (C,) or None (zeros)
    eps : float > 0, added to the variance
    output_scale : float > 0
    output_zero_point : int in the dtype's range
    """
    return _batch_norm(input, running_mean, running_var, weight, bias, eps, output_scale,
                       output_zero_point, True)


def _normalized_shape(normalized_shape, shape):
    if type(normalized_shape) is int and normalized_shape > 0 and shape \
            and shape[-1] == normalized_shape:
        return (normalized_shape,)      # the usual calls, valid as they stand
    if type(normalized_shape) is tuple and len(normalized_shape) == 1 and shape \
            and type(normalized_shape[0]) is int and normalized_shape[0] > 0 \
            and shape[-1] == normalized_shape[0]:
        return normalized_shape
    if isinstance(normalized_shape, (numbers.Integral, np.integer)) and \
            not isinstance(normalized_shape, bool):
        normalized_shape = (int(normalized_shape),)
    if not isinstance(normalized_shape, (list, tuple, np.ndarray)):
        raise TypeError(f"normalized_shape must be an int or a sequence of ints; "
                        f"got {normalized_shape!r}")
    ns = tuple(_check.integer(n, "normalized_shape", 0) for n in normalized_shape)
    if len(ns) == 0:
        raise ValueError("normalized_shape must have at least one dim")
    if len(ns) > len(shape) or tuple(shape[len(shape) - len(ns):]) != ns:
        raise ValueError(f"normalized_shape {list(ns)} does not match the trailing dims of "
                         f"input of shape {tuple(shape)}")
    return ns


def _layer_norm_float(input, normalized_shape, weight, bias, eps, output_scale,
                      output_zero_point):
    x = _check.float_array(input)
    if output_scale is not None or output_zero_point is not None:
        raise ValueError("output_scale and output_zero_point are for a QTensor input; a float "
                         "input gives a float result")
    ns = _normalized_shape(normalized_shape, x.shape)
    weight = _param(weight, "weight", ns)
    bias = _param(bias, "bias", ns)
    if type(eps) is not float:
        eps = _check.real(eps, "eps")
    if not math.isfinite(eps) or eps < 0.0:
        raise ValueError(f"eps must be finite and >= 0; got {eps!r}")
    # (math.prod of Python ints: np.prod costs microseconds a call, and a transformer calls
    # this a few times a layer)
    n = math.prod(ns)
    m = math.prod(x.shape[:x.ndim - len(ns)])
    if m * n == 0:
        return np.empty(x.shape, np.float32)
    out = _config.impl("norm").layer_norm_f32(
        x.reshape(m, n), None if weight is None else weight.reshape(n),
        None if bias is None else bias.reshape(n), eps)
    return out.reshape(x.shape)


@overload
def layer_norm(input: QTensor, normalized_shape: Union[int, Sequence[int]],
               weight: Optional[npt.ArrayLike] = None, bias: Optional[npt.ArrayLike] = None,
               eps: float = 1e-5, output_scale: Optional[float] = None,
               output_zero_point: Optional[int] = None) -> QTensor: ...
@overload
def layer_norm(input: npt.ArrayLike, normalized_shape: Union[int, Sequence[int]],
               weight: Optional[npt.ArrayLike] = None, bias: Optional[npt.ArrayLike] = None,
               eps: float = 1e-5, output_scale: None = None,
               output_zero_point: None = None) -> npt.NDArray[np.float32]: ...


def layer_norm(input: Union[QTensor, npt.ArrayLike], normalized_shape: Union[int, Sequence[int]],
               weight: Optional[npt.ArrayLike] = None, bias: Optional[npt.ArrayLike] = None,
               eps: float = 1e-5, output_scale: Optional[float] = None,
               output_zero_point: Optional[int] = None
               ) -> Union[QTensor, npt.NDArray[np.float32]]:
    """Layer norm over the trailing `normalized_shape` dims: quantized on a QTensor
    (torch.ops.quantized.layer_norm), float on a float array (torch.nn.functional.layer_norm:
    float64 statistics, one rounding to float32, docs/semantics.md §13.1).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8), or a float array
    normalized_shape : int or sequence of ints, equal to the trailing dims of input
    weight : float array of shape normalized_shape, or None (ones)
    bias : float array of shape normalized_shape, or None (zeros)
    eps : float > 0 (>= 0 for a float input), added to the variance
    output_scale : float > 0, for a QTensor (default 1.0); None for a float input
    output_zero_point : int in the dtype's range, for a QTensor (default 0); None for a float
        input
    """
    if not isinstance(input, QTensor):
        return _layer_norm_float(input, normalized_shape, weight, bias, eps, output_scale,
                                 output_zero_point)
    _check.qtensor(input, "input", dtypes=_DTYPES)
    ns = _normalized_shape(normalized_shape, input.shape)
    weight = _param(weight, "weight", ns)
    bias = _param(bias, "bias", ns)
    eps = _eps(eps)
    scale, zp = _out_qparams(1.0 if output_scale is None else output_scale,
                             0 if output_zero_point is None else output_zero_point,
                             input.dtype)
    n = math.prod(ns)
    m = math.prod(input.shape[:input.ndim - len(ns)])
    out_shape = tuple(input.shape)
    if m * n == 0:
        return QTensor._make(np.empty(out_shape, input._int.dtype), input.dtype, scale, zp)
    x2 = input._cint().reshape(m, n)
    out = _config.impl("norm").layer_norm(
        x2, None if weight is None else weight.reshape(n),
        None if bias is None else bias.reshape(n),
        qp.f32(input._scale), input._zero_point, eps, qp.inv_scale(scale), zp)
    return QTensor._make(out.reshape(out_shape), input.dtype, scale, zp)


def _torch_channels_last(a):
    """Whether PyTorch takes 4-D `a` as channels-last contiguous (is_contiguous(channels_last):
    strides of C, W, H, N in that order, dims of size 1 skipped), as its group norm asks. So
    C-order (N, C, 1, 1) and (N, 1, H, W) arrays count too."""
    if a.ndim != 4:
        return False
    expected = a.itemsize
    for d in (1, 3, 2, 0):
        if a.shape[d] != 1:
            if a.strides[d] != expected:
                return False
            expected *= a.shape[d]
    return True


def _group_norm(input, num_groups, weight, bias, eps, output_scale, output_zero_point):
    c = input.shape[1]
    weight = _param(weight, "weight", (c,))
    bias = _param(bias, "bias", (c,))
    eps = _eps(eps)
    scale, zp = _out_qparams(output_scale, output_zero_point, input.dtype)
    if input.numel() == 0:
        return QTensor._make(np.empty(input.shape, input._int.dtype), input.dtype, scale, zp)
    if _torch_channels_last(input._int):
        # PyTorch runs its NHWC kernel on these (another rounding of the affine): so does qops,
        # and the result keeps the layout
        xm = input._int.transpose(0, 2, 3, 1)
        b_, h, w_, c_ = xm.shape
        out = _config.impl("norm").group_norm_cl(
            np.ascontiguousarray(xm).reshape(b_, h * w_, c_), num_groups, weight, bias,
            qp.f32(input._scale), input._zero_point, eps, qp.inv_scale(scale), zp)
        out = out.reshape(b_, h, w_, c_).transpose(0, 3, 1, 2)
        return QTensor._make(out, input.dtype, scale, zp)
    x3 = _rows3(input._cint(), 1)
    out = _config.impl("norm").group_norm(x3, num_groups, weight, bias, qp.f32(input._scale),
                                          input._zero_point, eps, qp.inv_scale(scale), zp)
    return QTensor._make(out.reshape(input.shape), input.dtype, scale, zp)


def group_norm(input: QTensor, num_groups: int, weight: Optional[npt.ArrayLike] = None,
               bias: Optional[npt.ArrayLike] = None, eps: float = 1e-5,
               output_scale: float = 1.0, output_zero_point: int = 0) -> QTensor:
    """Quantized group norm over channel groups of dim 1 (torch.ops.quantized.group_norm).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8) of shape (N, C, ...), at least 3 dims
    num_groups : int > 0 dividing C
    weight : float array (C,) or None (ones)
    bias : float array (C,) or None (zeros)
    eps : float > 0, added to the variance
    output_scale : float > 0
    output_zero_point : int in the dtype's range
    """
    _check.qtensor(input, "input", dtypes=_DTYPES, min_ndim=3)
    num_groups = _check.integer(num_groups, "num_groups", 1)
    c = input.shape[1]
    if c % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide the number of channels {c}")
    return _group_norm(input, num_groups, weight, bias, eps, output_scale, output_zero_point)


def instance_norm(input: QTensor, weight: Optional[npt.ArrayLike] = None,
                  bias: Optional[npt.ArrayLike] = None, eps: float = 1e-5,
                  output_scale: float = 1.0, output_zero_point: int = 0) -> QTensor:
    """Quantized instance norm: group norm with one group per channel (3-D to 5-D input).

    Parameters
    ----------
    input : per-tensor QTensor (quint8 or qint8) of shape (N, C, ...), 3 to 5 dims
    weight : float array (C,) or None (ones)
    bias : float array (C,) or None (zeros)
    eps : float > 0, added to the variance
    output_scale : float > 0
    output_zero_point : int in the dtype's range
    """
    _check.qtensor(input, "input", dtypes=_DTYPES, ndims=(3, 4, 5))
    if input.shape[1] == 0:
        raise ValueError("input must have at least one channel (dim 1 > 0)")
    return _group_norm(input, input.shape[1], weight, bias, eps, output_scale, output_zero_point)
