"""QAT layers (torch.ao.nn.qat): float layers whose weight passes through a fake quantizer.

`weight_fake_quant = qconfig.weight()` is built at construction and applied to the weight in
every forward; the activation fake quantizer is attached by `prepare_qat`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qops.nn import _layers as fl

if TYPE_CHECKING:
    from typing_extensions import Self

    from qops.nn._typing import IntOrTuple, Tensor
    from qops.nn.module import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "Linear"]


def _need_qconfig(qconfig, owner):
    if qconfig is None:
        raise ValueError(f"{owner}: a qconfig is required for a QAT module")
    if getattr(qconfig, "weight", None) is None:
        raise ValueError(f"{owner}: qconfig.weight must make the weight fake quantizer")
    return qconfig


def _fake_quant(fq, w):
    return fq(w) if callable(fq) else fq.forward(w)


class _QATConvMixin:
    def _init_qat(self, qconfig):
        self.qconfig = _need_qconfig(qconfig, type(self).__name__)
        self.weight_fake_quant = qconfig.weight()

    def forward(self, input: Tensor) -> Tensor:
        return self._conv_forward(input, _fake_quant(self.weight_fake_quant, self.weight),
                                  self.bias)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A QAT conv from a float conv (or fused ConvReLU) carrying `qconfig`."""
        from qops.nn import intrinsic as nni
        owner = cls.__name__
        qconfig = getattr(mod, "qconfig", None)
        _need_qconfig(qconfig, f"{owner}.from_float ({type(mod).__name__} has no qconfig)")
        conv = mod[0] if isinstance(mod, nni._FusedModule) else mod
        if not isinstance(conv, fl._ConvNd) or conv._NDIM != cls._NDIM:
            raise TypeError(f"{owner}.from_float: expected a float Conv{cls._NDIM}d; got "
                            f"{type(mod).__name__}")
        if bool(getattr(mod, "_HAS_RELU", False)) != bool(getattr(cls, "_HAS_RELU", False)):
            raise TypeError(f"{owner}.from_float: {type(mod).__name__} does not match "
                            f"{owner} (relu fusion differs)")
        q = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                conv.padding, conv.dilation, conv.groups, conv.bias is not None,
                conv.padding_mode, qconfig=qconfig)
        q.weight = conv.weight
        if conv.bias is not None:
            q.bias = conv.bias
        return q

    def _float_conv(self):
        c = getattr(fl, f"Conv{self._NDIM}d")(self.in_channels, self.out_channels,
                                             self.kernel_size, self.stride, self.padding,
                                             self.dilation, self.groups, self.bias is not None,
                                             self.padding_mode)
        c.weight = self.weight.copy()
        if self.bias is not None:
            c.bias = self.bias.copy()
        return c

    def to_float(self) -> Module:
        """The float conv with this module's weights."""
        return self._float_conv()

    def _config(self):
        raise TypeError(f"{type(self).__name__} is a QAT module (its fake quantizers are not "
                        f"saved); convert() the model before qops.save")


class Conv1d(_QATConvMixin, fl.Conv1d):
    """Conv1d with a fake-quantized weight."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 qconfig: Any = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode)
        self._init_qat(qconfig)


class Conv2d(_QATConvMixin, fl.Conv2d):
    """Conv2d with a fake-quantized weight."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 qconfig: Any = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode)
        self._init_qat(qconfig)


class Conv3d(_QATConvMixin, fl.Conv3d):
    """Conv3d with a fake-quantized weight."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 qconfig: Any = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode)
        self._init_qat(qconfig)


class Linear(fl.Linear):
    """Linear with a fake-quantized weight."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, qconfig: Any = None,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_features, out_features, bias)
        self.qconfig = _need_qconfig(qconfig, type(self).__name__)
        self.weight_fake_quant = qconfig.weight()

    def forward(self, input: Tensor) -> Tensor:
        from qops.nn import _float_ops as fo
        return fo.linear(input, _fake_quant(self.weight_fake_quant, self.weight), self.bias)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A QAT linear from a float Linear (or fused LinearReLU) carrying `qconfig`."""
        from qops.nn import intrinsic as nni
        owner = cls.__name__
        qconfig = getattr(mod, "qconfig", None)
        _need_qconfig(qconfig, f"{owner}.from_float ({type(mod).__name__} has no qconfig)")
        lin = mod[0] if isinstance(mod, nni._FusedModule) else mod
        if not isinstance(lin, fl.Linear):
            raise TypeError(f"{owner}.from_float: expected a float Linear; got "
                            f"{type(mod).__name__}")
        if bool(getattr(mod, "_HAS_RELU", False)) != bool(getattr(cls, "_HAS_RELU", False)):
            raise TypeError(f"{owner}.from_float: {type(mod).__name__} does not match "
                            f"{owner} (relu fusion differs)")
        q = cls(lin.in_features, lin.out_features, lin.bias is not None, qconfig=qconfig)
        q.weight = lin.weight
        if lin.bias is not None:
            q.bias = lin.bias
        return q

    def to_float(self) -> Module:
        """The float Linear with this module's weights."""
        lin = fl.Linear(self.in_features, self.out_features, self.bias is not None)
        lin.weight = self.weight.copy()
        if self.bias is not None:
            lin.bias = self.bias.copy()
        return lin

    def _config(self):
        raise TypeError(f"{type(self).__name__} is a QAT module (its fake quantizers are not "
                        f"saved); convert() the model before qops.save")

