"""Fused dynamic quantized layers (torch.ao.nn.intrinsic.quantized.dynamic)."""
from qops.nn.quantized.dynamic import Linear as _DynamicLinear

__all__ = ["LinearReLU"]


class LinearReLU(_DynamicLinear):
    """Dynamic quantized Linear fused with ReLU (one linear_relu_dynamic call)."""
    _RELU = True
