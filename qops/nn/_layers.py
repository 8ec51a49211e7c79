"""Float layers of qops.nn: PyTorch's names, constructor arguments and state_dict keys.

Forward runs float32 numpy (qops/nn/_float_ops.py). Layers that PyTorch also runs on quantized
tensors (relu, hardtanh, relu6, leaky_relu, hardsigmoid, sigmoid, tanh, pooling, upsampling,
flatten, identity, dropout) accept a QTensor too and then call the qops.functional op.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from qops._qtensor import QTensor
from qops.nn import _float_ops as fo
from qops.nn.module import Module

if TYPE_CHECKING:
    from qops.nn._typing import IntOrTuple, OutputSize, Tensor

F32 = np.float32

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
           "ConvTranspose3d", "PReLU", "Linear", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
           "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "ReLU", "ReLU6", "ELU", "LeakyReLU", "Hardtanh", "Hardsigmoid", "Hardswish",
           "Sigmoid", "Tanh", "SiLU", "GELU", "Softmax", "MaxPool1d", "MaxPool2d", "MaxPool3d",
           "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "AdaptiveAvgPool3d", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]

_rng = np.random.default_rng()


def qfunctional(name: str) -> Callable[..., Any]:
    """The qops.functional op `name`, or a clear error if this build does not have it yet."""
    from qops import functional
    fn = getattr(functional, name, None)
    if fn is None:
        raise NotImplementedError(f"qops.functional.{name} is not available in this build")
    return fn


def _ntuple(v, n, argname):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise ValueError(f"{argname} must be an int or {n} ints; got {v!r}")
        return tuple(int(x) for x in v)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{argname} must be an int or {n} ints; got {v!r}")
    return (int(v),) * n


def _uniform(shape, bound):
    return _rng.uniform(-bound, bound, size=shape).astype(F32)


# -- convolution and linear ----------------------------------------------------------------
class _ConvNd(Module):
    _NDIM = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        n = self._NDIM
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must be positive and divide in_channels "
                             f"({in_channels}) and out_channels ({out_channels})")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be 'zeros', 'reflect', 'replicate' or "
                             f"'circular'; got {padding_mode!r}")
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n, "padding")
        self.dilation = _ntuple(dilation, n, "dilation")
        self.groups = int(groups)
        self.padding_mode = padding_mode
        self.transposed = False
        self.output_padding = (0,) * n
        fan_in = in_channels // groups * int(np.prod(self.kernel_size))
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
        self.register_parameter(
            "weight", _uniform((out_channels, in_channels // groups) + self.kernel_size, bound))
        self.register_parameter("bias", _uniform((out_channels,), bound) if bias else None)

    def _conv_forward(self, input, weight, bias):
        return fo.conv(input, weight, bias, self.stride, self.padding, self.dilation,
                       self.groups, self.padding_mode)

    def forward(self, input: Tensor) -> Tensor:
        return self._conv_forward(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._NDIM:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._NDIM:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def _config(self):
        return dict(in_channels=self.in_channels, out_channels=self.out_channels,
                    kernel_size=self.kernel_size, stride=self.stride, padding=self.padding,
                    dilation=self.dilation, groups=self.groups, bias=self.bias is not None,
                    padding_mode=self.padding_mode)


class Conv1d(_ConvNd):
    """1-D float convolution over (N, C, L) inputs."""
    _NDIM = 1


class Conv2d(_ConvNd):
    """2-D float convolution over (N, C, H, W) inputs."""
    _NDIM = 2


class Conv3d(_ConvNd):
    """3-D float convolution over (N, C, D, H, W) inputs."""
    _NDIM = 3


class _ConvTransposeNd(Module):
    _NDIM = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                 output_padding: IntOrTuple = 0, groups: int = 1, bias: bool = True,
                 dilation: IntOrTuple = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        n = self._NDIM
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must be positive and divide in_channels "
                             f"({in_channels}) and out_channels ({out_channels})")
        if padding_mode != "zeros":
            raise ValueError(f"ConvTranspose{n}d supports padding_mode='zeros' only (as "
                             f"PyTorch); got {padding_mode!r}")
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        self.padding = _ntuple(padding, n, "padding")
        self.output_padding = _ntuple(output_padding, n, "output_padding")
        self.dilation = _ntuple(dilation, n, "dilation")
        for o, s, d in zip(self.output_padding, self.stride, self.dilation):
            if o >= max(s, d):
                raise ValueError(f"output_padding {self.output_padding} must be smaller than "
                                 f"stride or dilation")
        self.groups = int(groups)
        self.padding_mode = padding_mode
        self.transposed = True
        fan_in = out_channels // groups * int(np.prod(self.kernel_size))
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
        self.register_parameter(
            "weight", _uniform((in_channels, out_channels // groups) + self.kernel_size, bound))
        self.register_parameter("bias", _uniform((out_channels,), bound) if bias else None)

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:
        if output_size is not None:
            raise ValueError(f"ConvTranspose{self._NDIM}d: output_size is not supported "
                             "(give output_padding)")
        if isinstance(input, QTensor):
            raise TypeError(f"ConvTranspose{self._NDIM}d takes a float array (the quantized "
                            f"one is qops.nn.quantized.ConvTranspose{self._NDIM}d)")
        return fo.conv_transpose(input, self.weight, self.bias, self.stride, self.padding,
                                 self.output_padding, self.groups, self.dilation)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, "
                f"output_padding={self.output_padding}, dilation={self.dilation}, "
                f"groups={self.groups}, bias={self.bias is not None}")

    def _config(self):
        return dict(in_channels=self.in_channels, out_channels=self.out_channels,
                    kernel_size=self.kernel_size, stride=self.stride, padding=self.padding,
                    output_padding=self.output_padding, groups=self.groups,
                    bias=self.bias is not None, dilation=self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D float transposed convolution over (N, C, L) inputs."""
    _NDIM = 1


class ConvTranspose2d(_ConvTransposeNd):
    """2-D float transposed convolution over (N, C, H, W) inputs."""
    _NDIM = 2


class ConvTranspose3d(_ConvTransposeNd):
    """3-D float transposed convolution over (N, C, D, H, W) inputs."""
    _NDIM = 3


class Linear(Module):
    """y = x W^T + b over the last dimension (float32)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.register_parameter("weight", _uniform((out_features, in_features), bound))
        self.register_parameter("bias", _uniform((out_features,), bound) if bias else None)

    def forward(self, input: Tensor) -> Tensor:
        return fo.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")

    def _config(self):
        return dict(in_features=self.in_features, out_features=self.out_features,
                    bias=self.bias is not None)


# -- normalization -------------------------------------------------------------------------
class _NormBase(Module):
    _NDIMS = (3, 4)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.num_features = int(num_features)
        self.eps = float(eps)
        self.momentum = momentum
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        c = self.num_features
        self.register_parameter("weight", np.ones(c, F32) if affine else None)
        self.register_parameter("bias", np.zeros(c, F32) if affine else None)
        if track_running_stats:
            self.register_buffer("running_mean", np.zeros(c, F32))
            self.register_buffer("running_var", np.ones(c, F32))
            self.register_buffer("num_batches_tracked", np.array(0, dtype=np.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def _check_input(self, x):
        nd = np.ndim(x) if not isinstance(x, QTensor) else x.ndim
        if nd not in self._NDIMS:
            raise ValueError(f"{type(self).__name__} expects a "
                             f"{' or '.join(map(str, self._NDIMS))}-D input; got {nd}-D")

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")

    def _config(self):
        return dict(num_features=self.num_features, eps=self.eps, momentum=self.momentum,
                    affine=self.affine, track_running_stats=self.track_running_stats)


class _BatchNorm(_NormBase):
    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        use_batch = self.training or self.running_mean is None
        momentum = self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked = np.asarray(self.num_batches_tracked + 1)
            if momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        x = fo.as_f32(input)
        return fo.batch_norm(x, self.running_mean if self.track_running_stats else None,
                             self.running_var if self.track_running_stats else None,
                             self.weight, self.bias, use_batch, momentum or 0.0, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) inputs."""
    _NDIMS = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) inputs."""
    _NDIMS = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch norm over (N, C, D, H, W) inputs."""
    _NDIMS = (5,)


class _InstanceNorm(_NormBase):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        x = fo.as_f32(input)
        unbatched = x.ndim == self._NDIMS[0]
        if unbatched:
            x = x[None]
        if self.track_running_stats and not self.training:
            y = fo.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              False, 0.0, self.eps)
        else:
            y = fo.group_norm(x, x.shape[1], self.weight, self.bias, self.eps)
        return y[0] if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance norm over (N, C, L) (or unbatched (C, L)) inputs."""
    _NDIMS = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance norm over (N, C, H, W) (or unbatched) inputs."""
    _NDIMS = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over (N, C, D, H, W) (or unbatched) inputs."""
    _NDIMS = (4, 5)


class LayerNorm(Module):
    """Layer norm over the trailing `normalized_shape` dims."""

    def __init__(self, normalized_shape: IntOrTuple, eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        ns = self.normalized_shape
        self.register_parameter("weight", np.ones(ns, F32) if elementwise_affine else None)
        self.register_parameter("bias", np.zeros(ns, F32)
                                if elementwise_affine and bias else None)

    def forward(self, input: Tensor) -> Tensor:
        return fo.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")

    def _config(self):
        return dict(normalized_shape=self.normalized_shape, eps=self.eps,
                    elementwise_affine=self.elementwise_affine, bias=self.bias is not None)


class GroupNorm(Module):
    """Group norm: `num_groups` groups over the channels of (N, C, ...) inputs."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups = int(num_groups)
        self.num_channels = int(num_channels)
        self.eps = float(eps)
        self.affine = bool(affine)
        self.register_parameter("weight", np.ones(num_channels, F32) if affine else None)
        self.register_parameter("bias", np.zeros(num_channels, F32) if affine else None)

    def forward(self, input: Tensor) -> Tensor:
        return fo.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"

    def _config(self):
        return dict(num_groups=self.num_groups, num_channels=self.num_channels, eps=self.eps,
                    affine=self.affine)


# -- activations ---------------------------------------------------------------------------
class ReLU(Module):
    """max(x, 0); on a QTensor, qops.functional.relu (output qparams = input's)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("relu")(input)
        return fo.relu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardtanh(Module):
    """clamp(x, min_val, max_val); on a QTensor, qops.functional.hardtanh."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be greater than min_val "
                             f"({min_val})")
        self.min_val = float(min_val)
        self.max_val = float(max_val)
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("hardtanh")(input, self.min_val, self.max_val)
        return fo.hardtanh(input, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class ReLU6(Hardtanh):
    """clamp(x, 0, 6); on a QTensor, qops.functional.relu6."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("relu6")(input)
        return fo.hardtanh(input, 0.0, 6.0)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""

    def _config(self):
        return dict(inplace=self.inplace)


class ELU(Module):
    """x if x > 0 else alpha * (exp(x) - 1) (float only, as torch.nn.ELU)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return fo.elu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class LeakyReLU(Module):
    """x if x > 0 else negative_slope * x; on a QTensor, qops.functional.leaky_relu."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = float(negative_slope)
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("leaky_relu")(input, self.negative_slope)
        return fo.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class PReLU(Module):
    """x if x > 0 else weight * x, with a learned slope (one, or one per channel: dim 1).

    Float only: PyTorch 2.13's quantized PReLU scales positive inputs by the quantized 1.0
    of the weight's qparams, which its own observers leave out of range (docs/semantics.md
    §6.3), so qops' graph mode runs PReLU in float between a dequantize and a quantize.
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if not isinstance(num_parameters, int) or num_parameters < 1:
            raise ValueError(f"PReLU: num_parameters must be a positive int; got "
                             f"{num_parameters!r}")
        self.num_parameters = num_parameters
        self.init = float(init)
        self.register_parameter("weight", np.full(num_parameters, init, np.float32))

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            raise TypeError("PReLU takes a float array (qops has no quantized PReLU: "
                            "docs/semantics.md §6.3)")
        return fo.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class Hardsigmoid(Module):
    """clamp(x + 3, 0, 6) / 6; on a QTensor, qops.functional.hardsigmoid (fixed qparams)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("hardsigmoid")(input)
        return fo.hardsigmoid(input)


class Hardswish(Module):
    """x * clamp(x + 3, 0, 6) / 6 (float only; quantized: qops.nn.quantized.Hardswish)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return fo.hardswish(input)


class Sigmoid(Module):
    """1 / (1 + exp(-x)); on a QTensor, qops.functional.sigmoid (fixed qparams)."""

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("sigmoid")(input)
        return fo.sigmoid(input)


class SiLU(Module):
    """x * sigmoid(x) (float only: PyTorch has no quantized SiLU; its graph mode runs it in
    float between a dequantize and a quantize, as qops' does)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            raise TypeError("SiLU takes a float array; PyTorch has no quantized SiLU "
                            "(dequantize first)")
        return fo.silu(input)


class GELU(Module):
    """x * Phi(x), the Gaussian CDF's exact form or (approximate="tanh") its tanh form; on a
    QTensor, qops.functional.gelu (the input's qparams, as PyTorch's eager GELU)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh'; got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("gelu")(input, self.approximate)
        return fo.gelu(input, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softmax(Module):
    """exp(x) / sum(exp(x)) over `dim` (float; PyTorch's rule picks the dim when None). The
    quantized layer is qops.nn.quantized.Softmax, which graph mode and convert make of this."""

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()
        self.dim = None if dim is None else int(dim)

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            raise TypeError("Softmax takes a float array; for a QTensor use "
                            "qops.nn.quantized.Softmax (output qparams of its own)")
        return fo.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Tanh(Module):
    """tanh(x); on a QTensor, qops.functional.tanh (fixed qparams)."""

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("tanh")(input)
        return fo.tanh(input)


# -- pooling -------------------------------------------------------------------------------
class _MaxPoolNd(Module):
    _NDIM = 2

    def __init__(self, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
                 padding: IntOrTuple = 0, dilation: IntOrTuple = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        if return_indices:
            raise NotImplementedError("return_indices=True is not supported by qops pooling "
                                      "layers")
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = False
        self.ceil_mode = bool(ceil_mode)

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional(f"max_pool{self._NDIM}d")(
                input, self.kernel_size, self.stride, self.padding, self.dilation,
                self.ceil_mode)
        return fo.max_pool(input, self._NDIM, self.kernel_size, self.stride, self.padding,
                           self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")

    def _config(self):
        return dict(kernel_size=self.kernel_size, stride=self.stride, padding=self.padding,
                    dilation=self.dilation, ceil_mode=self.ceil_mode)


class MaxPool1d(_MaxPoolNd):
    """1-D max pooling (float or QTensor input)."""
    _NDIM = 1


class MaxPool2d(_MaxPoolNd):
    """2-D max pooling (float or QTensor input)."""
    _NDIM = 2


class MaxPool3d(_MaxPoolNd):
    """3-D max pooling (float or QTensor input)."""
    _NDIM = 3


class _AvgPoolNd(Module):
    _NDIM = 2

    def __init__(self, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
                 padding: IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: Optional[int] = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            fn = qfunctional(f"avg_pool{self._NDIM}d")
            if self._NDIM == 1:
                return fn(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)
            return fn(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                      self.count_include_pad, self.divisor_override)
        return fo.avg_pool(input, self._NDIM, self.kernel_size, self.stride, self.padding,
                           self.ceil_mode, self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def _config(self):
        cfg = dict(kernel_size=self.kernel_size, stride=self.stride, padding=self.padding,
                   ceil_mode=self.ceil_mode, count_include_pad=self.count_include_pad)
        if self._NDIM > 1:
            cfg["divisor_override"] = self.divisor_override
        return cfg


class AvgPool1d(_AvgPoolNd):
    """1-D average pooling (float or QTensor input)."""
    _NDIM = 1

    def __init__(self, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
                 padding: IntOrTuple = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool2d(_AvgPoolNd):
    """2-D average pooling (float or QTensor input)."""
    _NDIM = 2


class AvgPool3d(_AvgPoolNd):
    """3-D average pooling (float or QTensor input)."""
    _NDIM = 3


class _AdaptiveAvgPoolNd(Module):
    _NDIM = 2

    def __init__(self, output_size: OutputSize) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional(f"adaptive_avg_pool{self._NDIM}d")(input, self.output_size)
        return fo.adaptive_avg_pool(input, self._NDIM, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """1-D adaptive average pooling (float or QTensor input)."""
    _NDIM = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """2-D adaptive average pooling (float or QTensor input)."""
    _NDIM = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """3-D adaptive average pooling (float or QTensor input)."""
    _NDIM = 3


# -- resizing ------------------------------------------------------------------------------
class Upsample(Module):
    """Resize by `size` or `scale_factor` (float or QTensor input; QTensor keeps its qparams)."""

    def __init__(self, size: Optional[IntOrTuple] = None,
                 scale_factor: Optional[Union[float, Sequence[float]]] = None,
                 mode: str = "nearest", align_corners: Optional[bool] = None,
                 recompute_scale_factor: Optional[bool] = None) -> None:
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor")
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, numbers.Real) \
            else scale_factor
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return qfunctional("interpolate")(input, self.size, self.scale_factor, self.mode,
                                              self.align_corners)
        return fo.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                              self.recompute_scale_factor)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return info + f", mode={self.mode!r}"

    def _config(self):
        return dict(size=self.size, scale_factor=self.scale_factor, mode=self.mode,
                    align_corners=self.align_corners,
                    recompute_scale_factor=self.recompute_scale_factor)


class UpsamplingNearest2d(Upsample):
    """Nearest 2-D upsampling (Upsample with mode='nearest')."""

    def __init__(self, size: Optional[IntOrTuple] = None,
                 scale_factor: Optional[Union[float, Sequence[float]]] = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")

    def _config(self):
        return dict(size=self.size, scale_factor=self.scale_factor)


class UpsamplingBilinear2d(Upsample):
    """Bilinear 2-D upsampling with align_corners=True."""

    def __init__(self, size: Optional[IntOrTuple] = None,
                 scale_factor: Optional[Union[float, Sequence[float]]] = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)

    def _config(self):
        return dict(size=self.size, scale_factor=self.scale_factor)
