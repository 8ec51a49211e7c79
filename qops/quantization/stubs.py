"""QuantStub, DeQuantStub, QuantWrapper: where a float model enters and leaves the int8 domain.

Before `convert` the stubs are identities (QuantStub carries an observer after `prepare`);
`convert` swaps them for `qops.nn.quantized.Quantize` / `DeQuantize`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qops.nn.module import Module, register_module_type

if TYPE_CHECKING:
    from qops.nn._typing import Tensor

__all__ = ["QuantStub", "DeQuantStub", "QuantWrapper"]


class QuantStub(Module):
    """Identity until convert, where it becomes `Quantize` with the observed qparams.

    Parameters
    ----------
    qconfig : QConfig or None, the qconfig of this stub (else propagated from its parent)
    """

    def __init__(self, qconfig: Any = None) -> None:
        super().__init__()
        if qconfig:
            self.qconfig = qconfig

    def forward(self, x: Tensor) -> Tensor:
        return x


class DeQuantStub(Module):
    """Identity until convert, where it becomes `DeQuantize`.

    Parameters
    ----------
    qconfig : QConfig or None
    """

    def __init__(self, qconfig: Any = None) -> None:
        super().__init__()
        if qconfig:
            self.qconfig = qconfig

    def forward(self, x: Tensor) -> Tensor:
        return x


# Float models imported from PyTorch keep their stubs, and qops.save must be able to name them.
register_module_type(QuantStub, "qops.quantization.QuantStub")
register_module_type(DeQuantStub, "qops.quantization.DeQuantStub")


class QuantWrapper(Module):
    """Wrap a float module: quantize its input, run it, dequantize its output.

    Parameters
    ----------
    module : the float module to wrap (its `qconfig`, if any, is copied to the stubs)
    """

    def __init__(self, module: Module) -> None:
        super().__init__()
        qconfig = getattr(module, "qconfig", None)
        self.add_module("quant", QuantStub(qconfig))
        self.add_module("dequant", DeQuantStub(qconfig))
        self.add_module("module", module)
        self.train(module.training)

    def forward(self, X: Any) -> Tensor:
        X = self.quant(X)
        X = self.module(X)
        return self.dequant(X)
