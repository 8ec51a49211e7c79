"""Quantized layers (torch.ao.nn.quantized): each forward is one qops.functional call.

Weights are qint8 QTensors prepacked once (at construction, `set_weight_bias` or load);
`weight()` / `bias()` are methods, as in PyTorch, and state_dict keys are PyTorch's
(`weight`, `bias`, `scale`, `zero_point`). `from_float(observed)` builds a layer from a float
layer carrying `qconfig` and an `activation_post_process` observer.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

import qops.functional as F
from qops._dtypes import (
    as_qdtype,
    as_qscheme,
    per_channel_affine,
    per_channel_symmetric,
    per_tensor_affine,
    per_tensor_symmetric,
    qint8,
    quint8,
)
from qops._qtensor import QTensor, quantize_per_channel, quantize_per_tensor
from qops.nn import _layers as fl
from qops.nn.module import Dropout as _FloatDropout
from qops.nn.module import Module, _to_numpy

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import Self

    from qops.nn._typing import Array, IntOrTuple, Tensor

__all__ = ["Quantize", "DeQuantize", "FloatFunctional", "QFunctional", "Conv1d", "Conv2d",
           "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Linear",
           "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "ReLU6", "ELU",
           "LeakyReLU", "Hardswish", "Sigmoid", "Tanh", "Softmax", "BatchNorm2d", "BatchNorm3d",
           "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "Upsample", "Dropout"]

F32 = np.float32


# -- helpers shared with the fused, dynamic and QAT layers -----------------------------------
def dtype_name(dtype: Any) -> str:
    """'qint8', 'quint8', 'qint32', 'float16', 'float32' for a qops, torch or numpy dtype."""
    try:
        return as_qdtype(dtype).name
    except TypeError:
        pass
    name = str(dtype).replace("torch.", "")
    if name in ("float16", "half"):
        return "float16"
    if name in ("float32", "float"):
        return "float32"
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}") from None


def _one(value, what, owner):
    a = np.asarray(_to_numpy(value))
    if a.size != 1:
        raise ValueError(f"{owner}: {what} must hold one value (a per-tensor observer); got "
                         f"shape {a.shape}")
    return a.reshape(()).item()



def pop_linear_weight_bias(state: dict[Any, Any], prefix: str, errors: Any) -> Any:
    """Take (weight, bias) of a linear layer out of `state`, from qops' keys or PyTorch's packed
    "_packed_params._packed_params"; record missing keys in `errors` and return None then."""
    packed_key = prefix + "_packed_params._packed_params"
    if packed_key in state:
        w, b = state.pop(packed_key)
        state.pop(prefix + "_packed_params.dtype", None)
        state[prefix + "weight"], state[prefix + "bias"] = w, b
    w_key, b_key = prefix + "weight", prefix + "bias"
    missing = [k for k in (w_key, b_key) if k not in state]
    errors["missing"].extend(missing)
    if missing:
        return None
    return _to_numpy(state.pop(w_key)), _to_numpy(state.pop(b_key))

def activation_qparams(mod: Module, owner: Any) -> tuple[float, int]:
    """(scale, zero_point) from `mod.activation_post_process`, with a clear error if absent."""
    obs = getattr(mod, "activation_post_process", None)
    if obs is None:
        raise ValueError(f"{owner}.from_float: the {type(mod).__name__} module has no "
                         f"activation_post_process (observer); prepare and calibrate it first")
    scale, zp = obs.calculate_qparams()
    return float(_one(scale, "scale", owner)), int(_one(zp, "zero_point", owner))


def _check_relu(cls, mod):
    """A relu-fused source (float, fused or QAT) must map to a relu-fused quantized layer."""
    has_relu = bool(getattr(mod, "_HAS_RELU", False))
    if has_relu != cls._RELU:
        want = "a relu-fused" if has_relu else "a plain (not relu-fused)"
        raise TypeError(f"{cls.__module__.replace('._modules', '')}.{cls.__name__}.from_float: "
                        f"{type(mod).__name__} needs {want} quantized layer")


def _needs_qconfig(mod, owner):
    if getattr(mod, "qconfig", None) is None:
        raise ValueError(f"{owner}.from_float: the {type(mod).__name__} module has no qconfig")


def quantize_weight(weight: npt.ArrayLike, observer: Any,
                    owner: Any = "quantize_weight") -> QTensor:
    """Quantize a float weight with the qparams of `observer` (already run on it), as PyTorch.

    Parameters
    ----------
    weight : float32 array
    observer : an observer (or FakeQuantize) with `dtype`, `qscheme`, `ch_axis` and
        `calculate_qparams()`
    owner : name used in error messages
    """
    dtype = as_qdtype(getattr(observer, "dtype", qint8))
    qscheme = as_qscheme(getattr(observer, "qscheme", per_tensor_affine))
    scale, zp = observer.calculate_qparams()
    scale, zp = np.asarray(_to_numpy(scale)), np.asarray(_to_numpy(zp))
    if qscheme in (per_tensor_affine, per_tensor_symmetric):
        return quantize_per_tensor(weight, float(_one(scale, "scale", owner)),
                                   int(_one(zp, "zero_point", owner)), dtype)
    if qscheme in (per_channel_affine, per_channel_symmetric):
        axis = int(getattr(observer, "ch_axis", 0))
        return quantize_per_channel(weight, scale.astype(np.float64).reshape(-1),
                                    zp.astype(np.int64).reshape(-1), axis, dtype)
    raise ValueError(f"{owner}: weight qscheme {qscheme!r} is not supported for int8 weights")


def _observe(observer, x):
    observer(x) if callable(observer) else observer.forward(x)


def _check_weight_dtype(observer, owner, allowed=("qint8",)):
    name = dtype_name(getattr(observer, "dtype", qint8))
    if name not in allowed:
        raise ValueError(f"{owner}.from_float: weight observer dtype must be "
                         f"{' or '.join(allowed)}; got {name}")


def _float_arg(v, argname, owner):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{owner}: {argname} must be a real number; got {v!r}")
    return float(v)


class _QParamsMixin:
    """Output `scale` / `zero_point` attributes, saved in state_dict as PyTorch saves them."""

    def _get_name(self):
        # PyTorch's repr names: QuantizedConv2d, QuantizedLinear, QuantizedConvReLU2d, ...
        return "Quantized" + type(self).__name__

    def _save_qparams(self, destination, prefix):
        destination[prefix + "scale"] = np.asarray(self.scale, dtype=np.float64)
        destination[prefix + "zero_point"] = np.asarray(self.zero_point, dtype=np.int64)

    # The output zero point's range: quint8's for layers whose output is quint8, else the
    # union of quint8's and qint8's (the output dtype follows the input's).
    _ZP_RANGE = (-128, 255)

    def _load_qparams(self, state, prefix, errors):
        from qops import _qparams as qp
        for name in ("scale", "zero_point"):
            key = prefix + name
            if key not in state:
                errors["missing"].append(key)
                continue
            v = np.asarray(_to_numpy(state.pop(key)))
            if v.size != 1:
                errors["bad"].append(f"{key}: expected one value, got shape {v.shape}")
                continue
            value = v.reshape(()).item()
            # checked here so that a bad file names the module, not a later call
            try:
                if name == "scale":
                    value = qp.check_scale(value, key)
                elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise TypeError(f"{key} must be an integer; got {value!r}")
                elif not self._ZP_RANGE[0] <= value <= self._ZP_RANGE[1]:
                    raise ValueError(f"{key}={value} is outside [{self._ZP_RANGE[0]}, "
                                     f"{self._ZP_RANGE[1]}]")
            except (TypeError, ValueError) as e:
                errors["bad"].append(str(e))
                continue
            setattr(self, name, int(value) if name == "zero_point" else value)


# -- quantize / dequantize -----------------------------------------------------------------
class Quantize(Module):
    """Quantize a float array per tensor with fixed `scale`, `zero_point` and `dtype`."""

    def __init__(self, scale: float, zero_point: int, dtype: Any,
                 factory_kwargs: Optional[dict[Any, Any]] = None) -> None:
        super().__init__()
        from qops import _qparams as qp
        self.dtype = as_qdtype(dtype)
        self.register_buffer("scale", np.asarray(qp.check_scale(scale), dtype=np.float64))
        self.register_buffer("zero_point", np.asarray(
            qp.check_zero_point(zero_point, self.dtype), dtype=np.int64))
        self._cache()

    def _cache(self):
        self.__dict__["_s"] = float(self.scale)
        self.__dict__["_z"] = int(self.zero_point)

    def _load_from_state_dict(self, state, prefix, errors):
        from qops import _qparams as qp
        # checked here so that a bad file names the module, not a later call
        for name, check in (("scale", lambda v, k: qp.check_scale(v, k)),
                            ("zero_point", lambda v, k: qp.check_zero_point(v, self.dtype, k))):
            key = prefix + name
            if key in state:
                try:
                    v = np.asarray(_to_numpy(state[key]))
                    if v.size != 1:
                        raise ValueError(f"{key}: expected one value, got shape {v.shape}")
                    check(v.reshape(()).item(), key)
                except (TypeError, ValueError) as e:
                    errors["bad"].append(str(e))
        super()._load_from_state_dict(state, prefix, errors)

    def _after_load(self):
        self._cache()

    def forward(self, X: npt.ArrayLike) -> QTensor:
        return quantize_per_tensor(X, self._s, self._z, self.dtype)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        dtype = getattr(mod.activation_post_process, "dtype", quint8)
        return cls(scale, zp, dtype)

    def extra_repr(self) -> str:
        return f"scale={self.scale.reshape(1)!r}, zero_point={self.zero_point.reshape(1)!r}, " \
               f"dtype={self.dtype!r}"

    def _config(self):
        return dict(scale=float(self.scale), zero_point=int(self.zero_point), dtype=self.dtype)


class DeQuantize(Module):
    """The float32 values of a QTensor."""

    def forward(self, Xq: QTensor) -> Array:
        return Xq.dequantize()

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        return cls()


# -- functional wrappers -------------------------------------------------------------------
class FloatFunctional(Module):
    """Float add/mul/cat as modules, so an observer (`activation_post_process`) can see them."""

    def __init__(self) -> None:
        super().__init__()
        self.activation_post_process = fl_identity()

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError("FloatFunctional is not meant to be called; use its add, mul, cat, "
                           "... methods")

    def add(self, x: Tensor, y: Tensor) -> Tensor:
        return self.activation_post_process(np.add(x, y, dtype=F32))

    def add_scalar(self, x: Tensor, y: float) -> Tensor:
        # Not observed: the quantized op derives its output qparams (PyTorch does the same).
        return np.add(x, F32(y), dtype=F32)

    def mul(self, x: Tensor, y: Tensor) -> Tensor:
        return self.activation_post_process(np.multiply(x, y, dtype=F32))

    def mul_scalar(self, x: Tensor, y: float) -> Tensor:
        return np.multiply(x, F32(y), dtype=F32)

    def cat(self, x: Union[list[Tensor], tuple[Tensor, ...]], dim: int = 0) -> Tensor:
        return self.activation_post_process(np.concatenate([np.asarray(t, F32) for t in x],
                                                           axis=dim))

    def add_relu(self, x: Tensor, y: Tensor) -> Tensor:
        return self.activation_post_process(np.maximum(np.add(x, y, dtype=F32), F32(0)))

    def mul_relu(self, x: Tensor, y: Tensor) -> Tensor:
        return self.activation_post_process(np.maximum(np.multiply(x, y, dtype=F32), F32(0)))

    def matmul(self, x: Tensor, y: Tensor) -> Tensor:
        return self.activation_post_process(np.matmul(np.asarray(x, F32), np.asarray(y, F32)))


def fl_identity() -> Any:
    from qops.nn.module import Identity
    return Identity()


class QFunctional(_QParamsMixin, Module):
    """Quantized add/mul/cat with the output `scale` / `zero_point` found by calibration."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0
        self.zero_point = 0
        self.activation_post_process = fl_identity()

    def forward(self, x: QTensor) -> QTensor:
        raise RuntimeError("QFunctional is not meant to be called; use its add, mul, cat, "
                           "... methods")

    def add(self, x: QTensor, y: QTensor) -> QTensor:
        return self.activation_post_process(F.add(x, y, scale=self.scale,
                                                  zero_point=self.zero_point))

    def add_scalar(self, x: QTensor, y: float) -> QTensor:
        return self.activation_post_process(F.add_scalar(x, y))

    def mul(self, x: QTensor, y: QTensor) -> QTensor:
        return self.activation_post_process(F.mul(x, y, scale=self.scale,
                                                  zero_point=self.zero_point))

    def mul_scalar(self, x: QTensor, y: float) -> QTensor:
        return self.activation_post_process(F.mul_scalar(x, y))

    def cat(self, x: Union[list[QTensor], tuple[QTensor, ...]], dim: int = 0) -> QTensor:
        return self.activation_post_process(F.cat(x, dim=dim, scale=self.scale,
                                                  zero_point=self.zero_point))

    def add_relu(self, x: QTensor, y: QTensor) -> QTensor:
        return self.activation_post_process(F.add_relu(x, y, scale=self.scale,
                                                       zero_point=self.zero_point))

    def mul_relu(self, x: QTensor, y: QTensor) -> QTensor:
        return self.activation_post_process(F.mul_relu(x, y, scale=self.scale,
                                                       zero_point=self.zero_point))

    def matmul(self, x: QTensor, y: QTensor) -> QTensor:
        return self.activation_post_process(F.matmul(x, y, scale=self.scale,
                                                     zero_point=self.zero_point))

    def _save_to_state_dict(self, destination, prefix):
        self._save_qparams(destination, prefix)

    def _state_keys(self):
        return ["scale", "zero_point"]

    def _load_from_state_dict(self, state, prefix, errors):
        self._load_qparams(state, prefix, errors)

    def extra_repr(self) -> str:
        return f"scale={self.scale}, zero_point={self.zero_point}"

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        new = cls()
        new.scale, new.zero_point = scale, zp
        return new


# -- convolution ---------------------------------------------------------------------------
class _ConvNd(_QParamsMixin, Module):
    _NDIM = 2
    _TRANSPOSED = False
    _RELU = False
    _ZP_RANGE = (0, 255)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self._build(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                    bias, padding_mode, 0)

    def _build(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
               bias, padding_mode, output_padding):
        n = self._NDIM
        owner = type(self).__name__
        if not isinstance(groups, numbers.Integral) or groups <= 0 \
                or in_channels % groups or out_channels % groups:
            raise ValueError(f"{owner}: groups={groups} must be positive and divide in_channels "
                             f"({in_channels}) and out_channels ({out_channels})")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{owner}: padding_mode must be 'zeros', 'reflect', 'replicate' or "
                             f"'circular'; got {padding_mode!r}")
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = fl._ntuple(kernel_size, n, "kernel_size")
        self.stride = fl._ntuple(stride, n, "stride")
        self.padding = fl._ntuple(padding, n, "padding")
        self.dilation = fl._ntuple(dilation, n, "dilation")
        self.groups = int(groups)
        self.padding_mode = padding_mode
        self.transposed = self._TRANSPOSED
        self.output_padding = fl._ntuple(output_padding, n, "output_padding")
        w = quantize_per_tensor(np.zeros(self._weight_shape(), F32), 1.0, 0, qint8)
        b = np.zeros(out_channels, F32) if bias else None
        self.set_weight_bias(w, b)
        self.scale = 1.0
        self.zero_point = 0
        name = f"conv{n}d" + ("_relu" if self._RELU else "")
        self.__dict__["_op"] = getattr(F, name)

    def _weight_shape(self) -> tuple:
        return (self.out_channels, self.in_channels // self.groups) + self.kernel_size

    def set_weight_bias(self, w: Any, b: Optional[npt.ArrayLike]) -> None:
        """Set and prepack the qint8 weight `w` (QTensor) and float bias `b` (or None)."""
        b = None if b is None else np.asarray(_to_numpy(b), dtype=F32)
        pack = getattr(F, f"prepack_conv{self._NDIM}d")
        self.__dict__["_packed_params"] = pack(_to_numpy(w), b, self.stride, self.padding,
                                               self.dilation, self.groups, self.padding_mode)

    def weight(self) -> QTensor:
        return self._packed_params.weight()

    def bias(self) -> Optional[Array]:
        return self._packed_params.bias()

    def _weight_bias(self):
        return self.weight(), self.bias()

    def forward(self, input: QTensor) -> QTensor:
        return self._op(input, self._packed_params, scale=self.scale, zero_point=self.zero_point)

    def _save_to_state_dict(self, destination, prefix):
        destination[prefix + "weight"] = self.weight()
        destination[prefix + "bias"] = self.bias()
        self._save_qparams(destination, prefix)

    def _state_keys(self):
        return ["weight", "bias", "scale", "zero_point"]

    def _load_from_state_dict(self, state, prefix, errors):
        owner = type(self).__name__
        w_key, b_key = prefix + "weight", prefix + "bias"
        for k in (w_key, b_key):
            if k not in state:
                errors["missing"].append(k)
        if w_key in state and b_key in state:
            w, b = _to_numpy(state.pop(w_key)), _to_numpy(state.pop(b_key))
            cur = self._packed_params._weight
            if not isinstance(w, QTensor) or w.dtype is not qint8:
                errors["bad"].append(f"{w_key}: expected a qint8 QTensor, got "
                                     f"{getattr(w, 'dtype', type(w).__name__)}")
            elif w.shape != cur.shape:
                errors["bad"].append(f"{w_key}: shape {w.shape} in the state_dict, {cur.shape} "
                                     f"in {owner}")
            elif b is not None and np.shape(b) != (self.out_channels,):
                errors["bad"].append(f"{b_key}: shape {np.shape(b)} in the state_dict, "
                                     f"({self.out_channels},) in {owner}")
            else:
                self.set_weight_bias(w, b)
        self._load_qparams(state, prefix, errors)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, scale={self.scale}, zero_point={self.zero_point}")
        if self.padding != (0,) * self._NDIM:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._NDIM:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias() is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def _config(self):
        return dict(in_channels=self.in_channels, out_channels=self.out_channels,
                    kernel_size=self.kernel_size, stride=self.stride, padding=self.padding,
                    dilation=self.dilation, groups=self.groups, bias=self.bias() is not None,
                    padding_mode=self.padding_mode)

    @classmethod
    def _float_conv(cls, mod):
        """The conv holding the weights, the module holding the observer, the weight observer."""
        from qops.nn import intrinsic as nni
        owner = cls.__name__
        _check_relu(cls, mod)
        if hasattr(mod, "weight_fake_quant"):
            # QAT module: conv+bn variants fold the bn first, as PyTorch's convert does.
            if hasattr(mod, "bn") and hasattr(mod, "_folded_weight_bias"):
                w, b = mod._folded_weight_bias()
            else:
                w, b = mod.weight, mod.bias
            return mod, mod, w, b, mod.weight_fake_quant
        _needs_qconfig(mod, owner)
        conv = mod
        if isinstance(mod, nni._FusedModule):
            conv = mod[0]
        if not isinstance(conv, fl._ConvNd) or conv._NDIM != cls._NDIM:
            raise TypeError(f"{owner}.from_float: expected a float Conv{cls._NDIM}d (or a fused "
                            f"conv); got {type(mod).__name__}")
        if isinstance(mod, (nni.ConvBn1d, nni.ConvBn2d, nni.ConvBn3d, nni.ConvBnReLU1d,
                            nni.ConvBnReLU2d, nni.ConvBnReLU3d)):
            raise TypeError(f"{owner}.from_float: {type(mod).__name__} still has an unfolded "
                            f"BatchNorm; fuse in eval mode (folding) before converting")
        return mod, conv, conv.weight, conv.bias, mod.qconfig.weight()

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A quantized conv from an observed float conv (or fused conv, or QAT conv)."""
        owner = cls.__name__
        holder, conv, w, b, wobs = cls._float_conv(mod)
        _observe(wobs, w)
        _check_weight_dtype(wobs, owner)
        qweight = quantize_weight(w, wobs, owner)
        q = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                conv.dilation, conv.groups, b is not None, conv.padding_mode)
        q.set_weight_bias(qweight, b)
        q.scale, q.zero_point = activation_qparams(holder, owner)
        return q

    @classmethod
    def from_reference(cls, ref_qconv: Module, output_scale: float, output_zero_point: int) -> Self:
        raise NotImplementedError("reference modules are not part of qops")


class Conv1d(_ConvNd):
    """Quantized 1-D convolution: quint8 input (N, C, L), qint8 weight, float bias."""
    _NDIM = 1


class Conv2d(_ConvNd):
    """Quantized 2-D convolution: quint8 input (N, C, H, W), qint8 weight, float bias."""
    _NDIM = 2


class Conv3d(_ConvNd):
    """Quantized 3-D convolution: quint8 input (N, C, D, H, W), qint8 weight, float bias."""
    _NDIM = 3


class _ConvTransposeNd(_ConvNd):
    """Quantized transposed convolution: PyTorch's torch.ao.nn.quantized.ConvTranspose*d
    (arguments, state_dict, per-tensor qint8 weight (C_in, C_out / groups, kernel...))."""
    _TRANSPOSED = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                 output_padding: IntOrTuple = 0, groups: int = 1, bias: bool = True,
                 dilation: IntOrTuple = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        owner = type(self).__name__
        if padding_mode != "zeros":
            raise ValueError(f"{owner}: padding_mode must be 'zeros' (as PyTorch's); got "
                             f"{padding_mode!r}")
        Module.__init__(self)
        self._build(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                    bias, padding_mode, output_padding)
        self.__dict__["_op"] = getattr(F, f"conv_transpose{self._NDIM}d")

    def set_weight_bias(self, w: Any, b: Optional[npt.ArrayLike]) -> None:
        """Set and prepack the qint8 weight `w` (C_in, C_out / groups, kernel...) and bias `b`."""
        b = None if b is None else np.asarray(_to_numpy(b), dtype=F32)
        pack = getattr(F, f"prepack_conv_transpose{self._NDIM}d")
        self.__dict__["_packed_params"] = pack(_to_numpy(w), b, self.stride, self.padding,
                                               self.output_padding, self.groups, self.dilation)

    def _weight_shape(self) -> tuple:
        return (self.in_channels, self.out_channels // self.groups) + self.kernel_size

    def extra_repr(self) -> str:
        s = super().extra_repr()
        if self.output_padding != (0,) * self._NDIM:
            s += f", output_padding={self.output_padding}"
        return s

    def _config(self):
        c = super()._config()
        c["output_padding"] = self.output_padding
        return c

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A quantized transposed conv from an observed float ConvTranspose*d."""
        owner = cls.__name__
        _needs_qconfig(mod, owner)
        if not isinstance(mod, fl._ConvTransposeNd) or mod._NDIM != cls._NDIM:
            raise TypeError(f"{owner}.from_float: expected a float ConvTranspose{cls._NDIM}d; "
                            f"got {type(mod).__name__}")
        wobs = mod.qconfig.weight()
        _observe(wobs, mod.weight)
        _check_weight_dtype(wobs, owner)
        qweight = quantize_weight(mod.weight, wobs, owner)
        if qweight._axis is not None:
            raise ValueError(f"{owner}.from_float: the weight observer is per-channel; a "
                             f"transposed conv takes per-tensor weights (as PyTorch's: "
                             f"get_default_qconfig_mapping gives them one)")
        q = cls(mod.in_channels, mod.out_channels, mod.kernel_size, mod.stride, mod.padding,
                mod.output_padding, mod.groups, mod.bias is not None, mod.dilation)
        q.set_weight_bias(qweight, mod.bias)
        q.scale, q.zero_point = activation_qparams(mod, owner)
        return q


class ConvTranspose1d(_ConvTransposeNd):
    """Quantized 1-D transposed convolution: quint8 input (N, C, L), qint8 weight, float bias."""
    _NDIM = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Quantized 2-D transposed convolution: quint8 input (N, C, H, W)."""
    _NDIM = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Quantized 3-D transposed convolution: quint8 input (N, C, D, H, W)."""
    _NDIM = 3


# -- linear --------------------------------------------------------------------------------
class Linear(_QParamsMixin, Module):
    """Quantized linear: quint8 input (..., in_features), qint8 weight, float bias."""

    _RELU = False
    _ZP_RANGE = (0, 255)

    def __init__(self, in_features: int, out_features: int, bias_: bool = True,
                 dtype: Any = qint8) -> None:
        super().__init__()
        if dtype_name(dtype) != "qint8":
            raise TypeError(f"{type(self).__name__}: dtype must be qint8; got {dtype!r}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        w = quantize_per_tensor(np.zeros((out_features, in_features), F32), 1.0, 0, qint8)
        self.set_weight_bias(w, np.zeros(out_features, F32) if bias_ else None)
        self.scale = 1.0
        self.zero_point = 0
        self.__dict__["_op"] = getattr(F, "linear_relu" if self._RELU else "linear", None)

    def set_weight_bias(self, w: Any, b: Optional[npt.ArrayLike]) -> None:
        """Set and prepack the qint8 weight `w` and float bias `b` (or None)."""
        w = _to_numpy(w)
        b = None if b is None else np.asarray(_to_numpy(b), dtype=F32)
        if not isinstance(w, QTensor) or w.dtype is not qint8:
            raise TypeError(f"{type(self).__name__}: weight must be a qint8 QTensor")
        prepack = getattr(F, "prepack_linear", None)
        if prepack is None:
            self.__dict__["_packed_params"] = _UnpackedLinear(w, b)
        else:
            self.__dict__["_packed_params"] = prepack(w, b)

    def weight(self) -> QTensor:
        return self._packed_params.weight()

    def bias(self) -> Optional[Array]:
        return self._packed_params.bias()

    def _weight_bias(self):
        return self.weight(), self.bias()

    def forward(self, x: QTensor) -> QTensor:
        op = self._op
        if op is None:
            op = self.__dict__["_op"] = getattr(F, "linear_relu" if self._RELU else "linear")
        return op(x, self._packed_params, None, self.scale, self.zero_point)

    def _save_to_state_dict(self, destination, prefix):
        destination[prefix + "weight"] = self.weight()
        destination[prefix + "bias"] = self.bias()
        self._save_qparams(destination, prefix)

    def _state_keys(self):
        return ["weight", "bias", "scale", "zero_point"]

    def _load_from_state_dict(self, state, prefix, errors):
        owner = type(self).__name__
        w_key, b_key = prefix + "weight", prefix + "bias"
        wb = pop_linear_weight_bias(state, prefix, errors)
        if wb is not None:
            w, b = wb
            shape = (self.out_features, self.in_features)
            if not isinstance(w, QTensor) or w.dtype is not qint8:
                errors["bad"].append(f"{w_key}: expected a qint8 QTensor, got "
                                     f"{getattr(w, 'dtype', type(w).__name__)}")
            elif w.shape != shape:
                errors["bad"].append(f"{w_key}: shape {w.shape} in the state_dict, {shape} in "
                                     f"{owner}")
            elif b is not None and np.shape(b) != (self.out_features,):
                errors["bad"].append(f"{b_key}: shape {np.shape(b)} in the state_dict, "
                                     f"({self.out_features},) in {owner}")
            else:
                self.set_weight_bias(w, b)
        self._load_qparams(state, prefix, errors)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"scale={self.scale}, zero_point={self.zero_point}, qscheme="
                f"{self.weight().qscheme()!r}")

    def _config(self):
        return dict(in_features=self.in_features, out_features=self.out_features,
                    bias_=self.bias() is not None)

    @classmethod
    def _float_linear(cls, mod):
        from qops.nn import intrinsic as nni
        owner = cls.__name__
        _check_relu(cls, mod)
        if hasattr(mod, "weight_fake_quant"):
            if hasattr(mod, "bn") and hasattr(mod, "_folded_weight_bias"):
                w, b = mod._folded_weight_bias()
            else:
                w, b = mod.weight, mod.bias
            return mod, w, b, mod.weight_fake_quant
        _needs_qconfig(mod, owner)
        lin = mod[0] if isinstance(mod, nni._FusedModule) else mod
        if not isinstance(lin, fl.Linear):
            raise TypeError(f"{owner}.from_float: expected a float Linear (or LinearReLU); got "
                            f"{type(mod).__name__}")
        if isinstance(mod, nni.LinearBn1d):
            raise TypeError(f"{owner}.from_float: LinearBn1d still has an unfolded BatchNorm; "
                            f"fuse in eval mode before converting")
        return mod, lin.weight, lin.bias, mod.qconfig.weight()

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A quantized linear from an observed float Linear (or LinearReLU, or QAT Linear)."""
        owner = cls.__name__
        holder, w, b, wobs = cls._float_linear(mod)
        _observe(wobs, w)
        _check_weight_dtype(wobs, owner)
        qweight = quantize_weight(w, wobs, owner)
        q = cls(w.shape[1], w.shape[0])
        q.set_weight_bias(qweight, b)
        q.scale, q.zero_point = activation_qparams(holder, owner)
        return q


class _UnpackedLinear:
    """Stand-in for a packed linear weight when qops.functional has no prepack_linear."""

    def __init__(self, w, b):
        self._w, self._b = w, b

    def weight(self):
        return self._w

    def bias(self):
        return self._b


# -- pooling and resizing (the float layers already dispatch QTensors to qops.functional) ----
def _same_config_from_float(cls, mod):
    return cls(**mod._config())


class _FromFloatSame:
    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        return _same_config_from_float(cls, mod)


class MaxPool1d(_FromFloatSame, fl.MaxPool1d):
    """Quantized 1-D max pooling (output qparams = input's)."""


class MaxPool2d(_FromFloatSame, fl.MaxPool2d):
    """Quantized 2-D max pooling (output qparams = input's)."""


class MaxPool3d(_FromFloatSame, fl.MaxPool3d):
    """Quantized 3-D max pooling (output qparams = input's)."""


class AvgPool1d(_FromFloatSame, fl.AvgPool1d):
    """Quantized 1-D average pooling (output qparams = input's)."""


class AvgPool2d(_FromFloatSame, fl.AvgPool2d):
    """Quantized 2-D average pooling (output qparams = input's)."""


class AvgPool3d(_FromFloatSame, fl.AvgPool3d):
    """Quantized 3-D average pooling (output qparams = input's)."""


class AdaptiveAvgPool1d(_FromFloatSame, fl.AdaptiveAvgPool1d):
    """Quantized 1-D adaptive average pooling (output qparams = input's)."""


class AdaptiveAvgPool2d(_FromFloatSame, fl.AdaptiveAvgPool2d):
    """Quantized 2-D adaptive average pooling (output qparams = input's)."""


class AdaptiveAvgPool3d(_FromFloatSame, fl.AdaptiveAvgPool3d):
    """Quantized 3-D adaptive average pooling (output qparams = input's)."""


class Upsample(_FromFloatSame, fl.Upsample):
    """Quantized upsampling (nearest, nearest-exact, bilinear; output qparams = input's)."""


class Dropout(_FromFloatSame, _FloatDropout):
    """Dropout on quantized tensors: the identity."""

    def _get_name(self):
        return "QuantizedDropout"

    def forward(self, input: QTensor) -> QTensor:
        return input


# -- activations ---------------------------------------------------------------------------
class ReLU6(Module):
    """Quantized relu6: min(max(q, zp), q(6)); output qparams = input's."""

    def _get_name(self):
        return "QuantizedReLU6"

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: QTensor) -> QTensor:
        return F.relu6(input)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        return cls(getattr(mod, "inplace", False))


class _OutQParamsActivation(_QParamsMixin, Module):
    """An activation whose output scale and zero point are attributes (saved in state_dict)."""

    def _save_to_state_dict(self, destination, prefix):
        self._save_qparams(destination, prefix)

    def _state_keys(self):
        return ["scale", "zero_point"]

    def _load_from_state_dict(self, state, prefix, errors):
        self._load_qparams(state, prefix, errors)


class Hardswish(_OutQParamsActivation):
    """Quantized hardswish with output `scale` and `zero_point`."""

    def __init__(self, scale: float, zero_point: int, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.scale = _float_arg(scale, "scale", "Hardswish")
        self.zero_point = int(zero_point)

    def forward(self, input: QTensor) -> QTensor:
        return F.hardswish(input, self.scale, self.zero_point)

    def extra_repr(self) -> str:
        return f"scale={self.scale}, zero_point={self.zero_point}"

    def _config(self):
        return dict(scale=self.scale, zero_point=self.zero_point)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        return cls(*activation_qparams(mod, cls.__name__))


class ELU(_OutQParamsActivation):
    """Quantized ELU with output `scale` and `zero_point`."""

    def __init__(self, scale: float, zero_point: int, alpha: float = 1.0) -> None:
        super().__init__()
        self.scale = _float_arg(scale, "scale", "ELU")
        self.zero_point = int(zero_point)
        self.alpha = float(alpha)

    def forward(self, input: QTensor) -> QTensor:
        return F.elu(input, self.scale, self.zero_point, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, scale={self.scale}, zero_point={self.zero_point}"

    def _config(self):
        return dict(scale=self.scale, zero_point=self.zero_point, alpha=self.alpha)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        return cls(scale, zp, mod.alpha)


class LeakyReLU(_OutQParamsActivation):
    """Quantized leaky relu with output `scale` and `zero_point`."""

    def __init__(self, scale: float, zero_point: int, negative_slope: float = 0.01,
                 inplace: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.scale = _float_arg(scale, "scale", "LeakyReLU")
        self.zero_point = int(zero_point)
        self.negative_slope = float(negative_slope)
        self.inplace = inplace

    def forward(self, input: QTensor) -> QTensor:
        return F.leaky_relu(input, self.negative_slope, False, self.scale, self.zero_point)

    def extra_repr(self) -> str:
        return (f"negative_slope={self.negative_slope}, scale={self.scale}, "
                f"zero_point={self.zero_point}")

    def _config(self):
        return dict(scale=self.scale, zero_point=self.zero_point,
                    negative_slope=self.negative_slope)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        return cls(scale, zp, mod.negative_slope)


class Sigmoid(_OutQParamsActivation):
    """Quantized sigmoid; PyTorch's fixed output qparams (1/256, 0) unless others are given.

    Other output qparams requantize the fixed-qparams result (two roundings).
    """

    def __init__(self, output_scale: float = 1.0 / 256.0, output_zero_point: int = 0) -> None:
        super().__init__()
        self.scale = _float_arg(output_scale, "output_scale", "Sigmoid")
        self.zero_point = int(output_zero_point)

    def forward(self, input: QTensor) -> QTensor:
        out = F.sigmoid(input)
        if out.q_scale() != self.scale or out.q_zero_point() != self.zero_point:
            out = F.requantize(out, self.scale, self.zero_point)
        return out

    def extra_repr(self) -> str:
        return f"output_scale={self.scale}, output_zero_point={self.zero_point}"

    def _config(self):
        return dict(output_scale=self.scale, output_zero_point=self.zero_point)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        return cls(*activation_qparams(mod, cls.__name__))


class Tanh(Module):
    """Quantized tanh with PyTorch's fixed output qparams (2/256, zp 128 for quint8)."""

    def forward(self, input: QTensor) -> QTensor:
        return F.tanh(input)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        return cls()


class Softmax(Module):
    """Quantized softmax over `dim` with output `scale` and `zero_point`, as PyTorch's x86
    quantized::softmax: dequantize, float softmax, quantize (docs/semantics.md §6.2); graph
    mode and convert give it PyTorch's fixed qparams (1/256, 0). As PyTorch's, its qparams
    are attributes, not state."""

    def __init__(self, dim: Optional[int] = None, scale: float = 1.0,
                 zero_point: int = 0) -> None:
        super().__init__()
        self.dim = None if dim is None else int(dim)
        self.scale = _float_arg(scale, "scale", "Softmax")
        self.zero_point = int(zero_point)

    def forward(self, input: QTensor) -> QTensor:
        from qops.nn import _float_ops as fo
        if not isinstance(input, QTensor):
            raise TypeError(f"Softmax takes a QTensor; got {type(input).__name__} (the float "
                            "layer is qops.nn.Softmax)")
        dim = fo.softmax_dim(input.ndim) if self.dim is None else self.dim
        y = fo.softmax(F.dequantize(input), dim)
        return F.quantize_per_tensor(y, self.scale, self.zero_point, input.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, scale={self.scale}, zero_point={self.zero_point}"

    def _config(self):
        return dict(dim=self.dim, scale=self.scale, zero_point=self.zero_point)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        return cls(mod.dim, scale, zp)


# -- normalization -------------------------------------------------------------------------
class _QNorm(_QParamsMixin, Module):
    """Float affine parameters and running stats as in the float layer, plus scale/zero_point."""

    def _save_to_state_dict(self, destination, prefix):
        Module._save_to_state_dict(self, destination, prefix)
        self._save_qparams(destination, prefix)

    def _own_keys(self):
        d = {}
        Module._save_to_state_dict(self, d, "")
        return list(d)

    def _state_keys(self):
        return self._own_keys() + ["scale", "zero_point"]

    def _load_from_state_dict(self, state, prefix, errors):
        for name in self._own_keys():
            key = prefix + name
            if key not in state:
                errors["missing"].append(key)
                continue
            self._load_entry(name, _to_numpy(state.pop(key)), key, errors)
        self._load_qparams(state, prefix, errors)


def _check_bn_eval(mod, owner):
    bn = mod[0] if hasattr(mod, "_modules") and "0" in mod._modules else mod
    if bn.training:
        raise ValueError(f"{owner}.from_float: the {type(mod).__name__} module is in training "
                         f"mode (its running statistics are still moving); call .eval() on the "
                         f"model before converting")
    return bn


class _BatchNorm(_QNorm):
    _NDIM = 4
    _RELU = False

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        c = int(num_features)
        self.num_features = c
        self.eps = float(eps)
        self.momentum = momentum
        self.register_parameter("weight", np.ones(c, F32))
        self.register_parameter("bias", np.zeros(c, F32))
        self.register_buffer("running_mean", np.zeros(c, F32))
        self.register_buffer("running_var", np.ones(c, F32))
        self.register_buffer("num_batches_tracked", np.array(0, dtype=np.int64))
        self.scale = 1.0
        self.zero_point = 0
        self.__dict__["_op"] = F.batch_norm_relu if self._RELU else F.batch_norm

    def forward(self, input: QTensor) -> QTensor:
        if input.ndim != self._NDIM:
            raise ValueError(f"{type(self).__name__} expects a {self._NDIM}-D input; got shape "
                             f"{input.shape}")
        return self._op(input, self.running_mean, self.running_var, self.weight, self.bias,
                        self.eps, self.scale, self.zero_point)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"

    def _config(self):
        return dict(num_features=self.num_features, eps=self.eps, momentum=self.momentum)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        owner = cls.__name__
        _check_relu(cls, mod)
        bn = _check_bn_eval(mod, owner)
        scale, zp = activation_qparams(mod, owner)
        q = cls(bn.num_features, bn.eps)
        q.weight = bn.weight if bn.weight is not None else np.ones(bn.num_features, F32)
        q.bias = bn.bias if bn.bias is not None else np.zeros(bn.num_features, F32)
        if bn.running_mean is None:
            raise ValueError(f"{owner}.from_float: the BatchNorm has no running statistics "
                             f"(track_running_stats=False)")
        q.running_mean = bn.running_mean.copy()
        q.running_var = bn.running_var.copy()
        q.scale, q.zero_point = scale, zp
        return q


class BatchNorm2d(_BatchNorm):
    """Quantized 2-D batch norm (inference) with output `scale` / `zero_point`."""
    _NDIM = 4


class BatchNorm3d(_BatchNorm):
    """Quantized 3-D batch norm (inference) with output `scale` / `zero_point`."""
    _NDIM = 5


class LayerNorm(_QNorm):
    """Quantized layer norm with output `scale` / `zero_point`."""

    def __init__(self, normalized_shape: IntOrTuple, weight: Optional[npt.ArrayLike] = None,
                 bias: Optional[bool] = None, scale: float = 1.0, zero_point: int = 0,
                 eps: float = 1e-5, elementwise_affine: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        ns = self.normalized_shape
        # As PyTorch's quantized norms: weight and bias are always present and always used
        # (`affine` only matters to the float layer they came from).
        self.register_parameter("weight", np.ones(ns, F32) if weight is None else weight)
        self.register_parameter("bias", np.zeros(ns, F32) if bias is None else bias)
        self.scale = float(scale)
        self.zero_point = int(zero_point)

    def forward(self, input: QTensor) -> QTensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps,
                            self.scale, self.zero_point)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")

    def _config(self):
        return dict(normalized_shape=self.normalized_shape, eps=self.eps,
                    elementwise_affine=self.elementwise_affine)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        return cls(mod.normalized_shape, mod.weight, mod.bias, scale, zp, mod.eps,
                   mod.elementwise_affine)


class GroupNorm(_QNorm):
    """Quantized group norm with output `scale` / `zero_point`."""

    def __init__(self, num_groups: int, num_channels: int, weight: Optional[npt.ArrayLike] = None,
                 bias: Optional[bool] = None, scale: float = 1.0, zero_point: int = 0,
                 eps: float = 1e-5, affine: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups = int(num_groups)
        self.num_channels = int(num_channels)
        self.eps = float(eps)
        self.affine = bool(affine)
        c = self.num_channels
        self.register_parameter("weight", np.ones(c, F32) if weight is None else weight)
        self.register_parameter("bias", np.zeros(c, F32) if bias is None else bias)
        self.scale = float(scale)
        self.zero_point = int(zero_point)

    def forward(self, input: QTensor) -> QTensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps,
                            self.scale, self.zero_point)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"

    def _config(self):
        return dict(num_groups=self.num_groups, num_channels=self.num_channels, eps=self.eps,
                    affine=self.affine)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        return cls(mod.num_groups, mod.num_channels, mod.weight, mod.bias, scale, zp, mod.eps,
                   mod.affine)


class _InstanceNorm(_QNorm):
    _NDIMS = (3, 4)

    def __init__(self, num_features: int, weight: Optional[npt.ArrayLike] = None,
                 bias: Optional[bool] = None, scale: float = 1.0, zero_point: int = 0,
                 eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        c = int(num_features)
        self.num_features = c
        self.eps = float(eps)
        self.momentum = momentum
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        self.register_parameter("weight", np.ones(c, F32) if weight is None else weight)
        self.register_parameter("bias", np.zeros(c, F32) if bias is None else bias)
        if track_running_stats:
            self.register_buffer("running_mean", np.zeros(c, F32))
            self.register_buffer("running_var", np.ones(c, F32))
            self.register_buffer("num_batches_tracked", np.array(0, dtype=np.int64))
        self.scale = float(scale)
        self.zero_point = int(zero_point)

    def forward(self, input: QTensor) -> QTensor:
        if input.ndim not in self._NDIMS:
            raise ValueError(f"{type(self).__name__} expects a "
                             f"{' or '.join(map(str, self._NDIMS))}-D input; got shape "
                             f"{input.shape}")
        if input.ndim == self._NDIMS[0]:
            return F.instance_norm(input.unsqueeze(0), self.weight, self.bias, self.eps,
                                   self.scale, self.zero_point).squeeze(0)
        return F.instance_norm(input, self.weight, self.bias, self.eps, self.scale,
                               self.zero_point)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")

    def _config(self):
        return dict(num_features=self.num_features, eps=self.eps, momentum=self.momentum,
                    affine=self.affine, track_running_stats=self.track_running_stats)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """This layer for an observed float one (its activation_post_process gives the qparams)."""
        scale, zp = activation_qparams(mod, cls.__name__)
        return cls(mod.num_features, mod.weight, mod.bias, scale, zp, mod.eps, mod.momentum,
                   mod.affine, mod.track_running_stats)


class InstanceNorm1d(_InstanceNorm):
    """Quantized 1-D instance norm with output `scale` / `zero_point`."""
    _NDIMS = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Quantized 2-D instance norm with output `scale` / `zero_point`."""
    _NDIMS = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    """Quantized 3-D instance norm with output `scale` / `zero_point`."""
    _NDIMS = (4, 5)
