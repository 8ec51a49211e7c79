"""Fused quantized layers (torch.ao.nn.intrinsic.quantized): conv/linear/bn with relu."""
from qops.nn.quantized import _modules as nnq

__all__ = ["ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU", "BNReLU2d", "BNReLU3d"]


class ConvReLU1d(nnq.Conv1d):
    """Quantized Conv1d fused with ReLU (one conv1d_relu call)."""
    _RELU = True


class ConvReLU2d(nnq.Conv2d):
    """Quantized Conv2d fused with ReLU (one conv2d_relu call)."""
    _RELU = True


class ConvReLU3d(nnq.Conv3d):
    """Quantized Conv3d fused with ReLU (one conv3d_relu call)."""
    _RELU = True


class LinearReLU(nnq.Linear):
    """Quantized Linear fused with ReLU (one linear_relu call)."""
    _RELU = True


class BNReLU2d(nnq.BatchNorm2d):
    """Quantized BatchNorm2d fused with ReLU (one batch_norm_relu call)."""
    _RELU = True


class BNReLU3d(nnq.BatchNorm3d):
    """Quantized BatchNorm3d fused with ReLU (one batch_norm_relu call)."""
    _RELU = True
