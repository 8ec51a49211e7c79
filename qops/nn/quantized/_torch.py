"""PyTorch interop for quantized models (implementation in qops/nn/_torch.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional

from qops.nn._torch import from_torch_quantized, qtensor_from_torch

if TYPE_CHECKING:
    from qops.nn.module import Module

__all__ = ["from_torch", "qtensor_from_torch"]


def from_torch(module: Any, target: Optional[Module] = None,
               leaf_modules: Iterable[str] = ()) -> Module:
    """The qops quantized model equivalent to a model quantized by torch.ao.quantization.

    Parameters
    ----------
    module : torch.nn.Module after torch.ao.quantization.convert (or quantize_dynamic):
        quantized conv/linear/norm/activation layers, Quantize/DeQuantize, QFunctional and the
        float layers PyTorch runs on quantized tensors (pooling, relu, flatten, ...)
        A model class with its own forward is captured with torch.fx as a
        `qops.nn.GraphModule` (see `qops.nn.from_torch`).
    target : optional qops model with the same submodule names; each torch layer is converted
        and put in its place (for a forward that torch.fx cannot trace)
    leaf_modules : names of submodules to keep whole instead of tracing into them
    """
    return from_torch_quantized(module, target, leaf_modules)
