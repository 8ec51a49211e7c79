"""Fused float modules (torch.ao.nn.intrinsic): a Sequential of the layers fusion grouped.

`fuse_modules` (qops.quantization) builds them; prepare/convert map them to the fused QAT and
quantized layers of `qops.nn.intrinsic.qat` and `qops.nn.intrinsic.quantized`.
"""
from __future__ import annotations

from typing import Any

from qops.nn import _layers as fl
from qops.nn.module import Sequential

__all__ = ["ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d", "ConvBnReLU3d",
           "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU", "LinearBn1d", "BNReLU2d",
           "BNReLU3d"]


class _FusedModule(Sequential):
    """Base of the fused modules: children "0", "1" (, "2"), checked by type."""

    _PARTS = ()
    _HAS_RELU = False

    def __init__(self, *mods: Any) -> None:
        owner = type(self).__name__
        if len(mods) != len(self._PARTS):
            raise TypeError(f"{owner} takes {len(self._PARTS)} modules "
                            f"({', '.join(p.__name__ for p in self._PARTS)}); got {len(mods)}")
        for m, part in zip(mods, self._PARTS):
            if type(m) is not part:
                raise TypeError(f"{owner}: expected {' + '.join(p.__name__ for p in self._PARTS)}"
                                f"; got {' + '.join(type(x).__name__ for x in mods)}")
        super().__init__(*mods)


def _fused(name, parts, doc):
    cls = type(name, (_FusedModule,), {"_PARTS": parts, "__doc__": doc,
                                       "_HAS_RELU": parts[-1] is fl.ReLU,
                                       "__module__": __name__})
    return cls


ConvReLU1d = _fused("ConvReLU1d", (fl.Conv1d, fl.ReLU), "Conv1d followed by ReLU.")
ConvReLU2d = _fused("ConvReLU2d", (fl.Conv2d, fl.ReLU), "Conv2d followed by ReLU.")
ConvReLU3d = _fused("ConvReLU3d", (fl.Conv3d, fl.ReLU), "Conv3d followed by ReLU.")
ConvBn1d = _fused("ConvBn1d", (fl.Conv1d, fl.BatchNorm1d), "Conv1d followed by BatchNorm1d.")
ConvBn2d = _fused("ConvBn2d", (fl.Conv2d, fl.BatchNorm2d), "Conv2d followed by BatchNorm2d.")
ConvBn3d = _fused("ConvBn3d", (fl.Conv3d, fl.BatchNorm3d), "Conv3d followed by BatchNorm3d.")
ConvBnReLU1d = _fused("ConvBnReLU1d", (fl.Conv1d, fl.BatchNorm1d, fl.ReLU),
                      "Conv1d, BatchNorm1d and ReLU.")
ConvBnReLU2d = _fused("ConvBnReLU2d", (fl.Conv2d, fl.BatchNorm2d, fl.ReLU),
                      "Conv2d, BatchNorm2d and ReLU.")
ConvBnReLU3d = _fused("ConvBnReLU3d", (fl.Conv3d, fl.BatchNorm3d, fl.ReLU),
                      "Conv3d, BatchNorm3d and ReLU.")
LinearReLU = _fused("LinearReLU", (fl.Linear, fl.ReLU), "Linear followed by ReLU.")
LinearBn1d = _fused("LinearBn1d", (fl.Linear, fl.BatchNorm1d), "Linear followed by BatchNorm1d.")
BNReLU2d = _fused("BNReLU2d", (fl.BatchNorm2d, fl.ReLU), "BatchNorm2d followed by ReLU.")
BNReLU3d = _fused("BNReLU3d", (fl.BatchNorm3d, fl.ReLU), "BatchNorm3d followed by ReLU.")


def __getattr__(name):
    import importlib
    if name in ("quantized", "qat"):
        return importlib.import_module(f"qops.nn.intrinsic.{name}")
    raise AttributeError(f"module 'qops.nn.intrinsic' has no attribute {name!r}")
