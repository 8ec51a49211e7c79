"""Quantized layers (torch.ao.nn.quantized names): every forward is one qops.functional call."""
from qops.nn.quantized._embedding import Embedding, EmbeddingBag  # noqa: F401
from qops.nn.quantized._modules import (  # noqa: F401
    ELU,
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    BatchNorm2d,
    BatchNorm3d,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    DeQuantize,
    Dropout,
    FloatFunctional,
    GroupNorm,
    Hardswish,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
    LeakyReLU,
    Linear,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    QFunctional,
    Quantize,
    ReLU6,
    Sigmoid,
    Softmax,
    Tanh,
    Upsample,
)
from qops.nn.quantized._modules import __all__ as _all
from qops.nn.quantized._torch import from_torch, qtensor_from_torch  # noqa: F401

__all__ = list(_all) + ["Embedding", "EmbeddingBag", "from_torch", "qtensor_from_torch",
                        "dynamic"]


def __getattr__(name):
    import importlib
    if name == "dynamic":
        return importlib.import_module("qops.nn.quantized.dynamic")
    raise AttributeError(f"module 'qops.nn.quantized' has no attribute {name!r}")
