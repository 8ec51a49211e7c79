"""Fused QAT layers (torch.ao.nn.intrinsic.qat): conv+bn(+relu), conv+relu, linear+relu.

ConvBn layers simulate the folded conv as PyTorch does: the weight is scaled by
gamma / sqrt(running_var + eps) before fake quantization, the conv output is scaled back and
passed through the (training-mode) batch norm, so running statistics keep updating.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from qops.nn import _layers as fl
from qops.nn import intrinsic as nni
from qops.nn import qat as nnqat
from qops.nn.utils.fusion import fuse_conv_bn_weights

if TYPE_CHECKING:
    from typing_extensions import Self

    from qops.nn._typing import IntOrTuple, Tensor
    from qops.nn.module import Module

__all__ = ["ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d", "ConvBnReLU3d",
           "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU", "LinearBn1d"]

F32 = np.float32


class _ConvReLUMixin:
    _HAS_RELU = True

    def forward(self, input: Tensor) -> Tensor:
        return fl.fo.relu(super().forward(input))

    def to_float(self) -> Module:
        conv = self._float_conv()
        return getattr(nni, f"ConvReLU{self._NDIM}d")(conv, fl.ReLU())


class ConvReLU1d(_ConvReLUMixin, nnqat.Conv1d):
    """QAT Conv1d fused with ReLU."""


class ConvReLU2d(_ConvReLUMixin, nnqat.Conv2d):
    """QAT Conv2d fused with ReLU."""


class ConvReLU3d(_ConvReLUMixin, nnqat.Conv3d):
    """QAT Conv3d fused with ReLU."""


class LinearReLU(nnqat.Linear):
    """QAT Linear fused with ReLU."""
    _HAS_RELU = True

    def forward(self, input: Tensor) -> Tensor:
        return fl.fo.relu(super().forward(input))

    def to_float(self) -> Module:
        return nni.LinearReLU(super().to_float(), fl.ReLU())


_BN = {1: fl.BatchNorm1d, 2: fl.BatchNorm2d, 3: fl.BatchNorm3d}


class _ConvBnMixin:
    _HAS_RELU = False

    def _init_bn(self, bias, eps, momentum, freeze_bn):
        # The conv itself is built without a bias; the module's own bias (if any) is added
        # after the scale is undone, as PyTorch does.
        if not bias:
            self._parameters["bias"] = None
        self.bn = _BN[self._NDIM](self.out_channels, eps, momentum, True, True)
        self.freeze_bn = bool(freeze_bn)
        if freeze_bn:
            self.bn.train(False)

    def train(self, mode: bool = True) -> Self:
        super().train(mode)
        if self.freeze_bn:
            self.bn.train(False)
        return self

    def freeze_bn_stats(self) -> Self:
        self.freeze_bn = True
        self.bn.train(False)
        return self

    def update_bn_stats(self) -> Self:
        self.freeze_bn = False
        self.bn.train(self.training)
        return self

    def _scale_factor(self):
        bn = self.bn
        std = np.sqrt(bn.running_var + F32(bn.eps)).astype(F32)
        w = bn.weight if bn.weight is not None else np.ones(self.out_channels, F32)
        return (w / std).astype(F32)

    def forward(self, input: Tensor) -> Tensor:
        sf = self._scale_factor()
        wshape = (-1,) + (1,) * (self.weight.ndim - 1)
        bshape = (1, -1) + (1,) * (self.weight.ndim - 2)
        scaled_w = nnqat._fake_quant(self.weight_fake_quant,
                                     (self.weight * sf.reshape(wshape)).astype(F32))
        conv = self._conv_forward(input, scaled_w, np.zeros(self.out_channels, F32))
        conv_orig = (conv / sf.reshape(bshape)).astype(F32)
        if self.bias is not None:
            conv_orig = conv_orig + self.bias.reshape(bshape)
        out = self.bn(conv_orig)
        return fl.fo.relu(out) if self._HAS_RELU else out

    def _folded_weight_bias(self):
        """(weight, bias) with the batch norm's running statistics folded in (for convert)."""
        bn = self.bn
        return fuse_conv_bn_weights(self.weight, self.bias, bn.running_mean, bn.running_var,
                                    bn.eps, bn.weight, bn.bias)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A QAT ConvBn(ReLU) from the float fused ConvBn(ReLU) carrying `qconfig`."""
        owner = cls.__name__
        qconfig = getattr(mod, "qconfig", None)
        nnqat._need_qconfig(qconfig, f"{owner}.from_float ({type(mod).__name__} has no qconfig)")
        want = getattr(nni, f"ConvBn{'ReLU' if cls._HAS_RELU else ''}{cls._NDIM}d")
        if type(mod) is not want:
            raise TypeError(f"{owner}.from_float: expected {want.__name__}; got "
                            f"{type(mod).__name__}")
        conv, bn = mod[0], mod[1]
        q = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                conv.padding, conv.dilation, conv.groups, conv.bias is not None,
                conv.padding_mode, bn.eps, bn.momentum, False, qconfig)
        q.weight = conv.weight
        if conv.bias is not None:
            q.bias = conv.bias
        q.bn.weight, q.bn.bias = bn.weight, bn.bias
        q.bn.running_mean = bn.running_mean.copy()
        q.bn.running_var = bn.running_var.copy()
        q.bn.num_batches_tracked = bn.num_batches_tracked.copy()
        return q

    def to_float(self) -> Module:
        """The float conv with the batch norm folded in (followed by ReLU if fused)."""
        conv = self._float_conv()
        w, b = self._folded_weight_bias()
        conv.weight = w
        conv._parameters["bias"] = b
        if self._HAS_RELU:
            return getattr(nni, f"ConvReLU{self._NDIM}d")(conv, fl.ReLU())
        return conv


def _convbn(name, base, ndim, relu):
    def __init__(self: Any, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 groups: int = 1, bias: Optional[bool] = None, padding_mode: str = "zeros",
                 eps: float = 1e-05, momentum: float = 0.1, freeze_bn: bool = False,
                 qconfig: Any = None) -> None:
        base.__init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                      groups, True, padding_mode, qconfig=qconfig)
        self._init_bn(bool(bias), eps, momentum, freeze_bn)

    doc = f"QAT Conv{ndim}d + BatchNorm{ndim}d{' + ReLU' if relu else ''} (folding simulated)."
    return type(name, (_ConvBnMixin, base), {"__init__": __init__, "__doc__": doc,
                                             "_HAS_RELU": relu, "__module__": __name__})


ConvBn1d = _convbn("ConvBn1d", nnqat.Conv1d, 1, False)
ConvBn2d = _convbn("ConvBn2d", nnqat.Conv2d, 2, False)
ConvBn3d = _convbn("ConvBn3d", nnqat.Conv3d, 3, False)
ConvBnReLU1d = _convbn("ConvBnReLU1d", nnqat.Conv1d, 1, True)
ConvBnReLU2d = _convbn("ConvBnReLU2d", nnqat.Conv2d, 2, True)
ConvBnReLU3d = _convbn("ConvBnReLU3d", nnqat.Conv3d, 3, True)


class LinearBn1d(nnqat.Linear):
    """QAT Linear + BatchNorm1d (folding simulated as in ConvBn)."""

    _HAS_RELU = False

    def __init__(self, in_features: int, out_features: int, bias: bool = True, eps: float = 1e-05,
                 momentum: float = 0.1, freeze_bn: bool = False, qconfig: Any = None) -> None:
        super().__init__(in_features, out_features, bias, qconfig=qconfig)
        self.bn = fl.BatchNorm1d(out_features, eps, momentum, True, True)
        self.freeze_bn = bool(freeze_bn)
        if freeze_bn:
            self.bn.train(False)

    def train(self, mode: bool = True) -> Self:
        super().train(mode)
        if self.freeze_bn:
            self.bn.train(False)
        return self

    freeze_bn_stats = _ConvBnMixin.freeze_bn_stats
    update_bn_stats = _ConvBnMixin.update_bn_stats

    def forward(self, input: Tensor) -> Tensor:
        bn = self.bn
        std = np.sqrt(bn.running_var + F32(bn.eps)).astype(F32)
        sf = (bn.weight / std).astype(F32)
        scaled_w = nnqat._fake_quant(self.weight_fake_quant,
                                     (self.weight * sf[:, None]).astype(F32))
        out = fl.fo.linear(input, scaled_w, np.zeros(self.out_features, F32))
        out = (out / sf).astype(F32)
        if self.bias is not None:
            out = out + self.bias
        return self.bn(out)

    def _folded_weight_bias(self):
        """(weight, bias) with the batch norm's running statistics folded in (for convert)."""
        from qops.nn.utils.fusion import fuse_linear_bn_weights
        bn = self.bn
        return fuse_linear_bn_weights(self.weight, self.bias, bn.running_mean, bn.running_var,
                                      bn.eps, bn.weight, bn.bias)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A QAT LinearBn1d from the float fused LinearBn1d carrying `qconfig`."""
        owner = cls.__name__
        qconfig = getattr(mod, "qconfig", None)
        nnqat._need_qconfig(qconfig, f"{owner}.from_float ({type(mod).__name__} has no qconfig)")
        if type(mod) is not nni.LinearBn1d:
            raise TypeError(f"{owner}.from_float: expected LinearBn1d; got {type(mod).__name__}")
        lin, bn = mod[0], mod[1]
        q = cls(lin.in_features, lin.out_features, lin.bias is not None, bn.eps, bn.momentum,
                False, qconfig)
        q.weight = lin.weight
        if lin.bias is not None:
            q.bias = lin.bias
        q.bn.weight, q.bn.bias = bn.weight, bn.bias
        q.bn.running_mean = bn.running_mean.copy()
        q.bn.running_var = bn.running_var.copy()
        q.bn.num_batches_tracked = bn.num_batches_tracked.copy()
        return q

    def to_float(self) -> Module:
        """The float Linear with the batch norm folded in."""
        lin = fl.Linear(self.in_features, self.out_features, True)
        lin.weight, lin.bias = self._folded_weight_bias()
        return lin
