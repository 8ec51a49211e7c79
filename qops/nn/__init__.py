"""qops.nn: PyTorch-style modules.

Float layers (numpy forward) under PyTorch's names, the `Module` base, and the sub-packages
`qops.nn.quantized` (+ `.dynamic`), `qops.nn.intrinsic` (+ `.quantized`, `.qat`) and
`qops.nn.qat`. `qops.save` / `qops.load` store and restore whole models without pickle.
"""
from qops.nn._attention import (  # noqa: F401
    MultiheadAttention,
    NonDynamicallyQuantizableLinear,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from qops.nn._embedding import Embedding, EmbeddingBag  # noqa: F401
from qops.nn._graph import GraphModule  # noqa: F401
from qops.nn._layers import (  # noqa: F401
    ELU,
    GELU,
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    GroupNorm,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
    LeakyReLU,
    Linear,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
from qops.nn._layers import __all__ as _layers_all
from qops.nn._rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401
from qops.nn._torch import from_torch  # noqa: F401
from qops.nn.module import (  # noqa: F401
    Dropout,
    Flatten,
    Identity,
    Module,
    ModuleDict,
    ModuleList,
    RemovableHandle,
    Sequential,
    module_type_table,
    register_module_type,
)

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "Identity", "Flatten",
           "Dropout", "GraphModule", "from_torch", "register_module_type",
           "module_type_table"] + list(_layers_all) + [
               "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"] + [
               "Embedding", "EmbeddingBag", "MultiheadAttention",
               "NonDynamicallyQuantizableLinear", "TransformerEncoderLayer", "TransformerEncoder",
               "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]

_SUBPACKAGES = ("quantized", "intrinsic", "qat", "utils")


def __getattr__(name):
    import importlib
    if name in _SUBPACKAGES:
        return importlib.import_module(f"qops.nn.{name}")
    raise AttributeError(f"module 'qops.nn' has no attribute {name!r}")


def _load_all_types():
    """Import every qops.nn sub-package so the module type table is complete."""
    import importlib
    for name in ("quantized", "quantized.dynamic", "intrinsic", "intrinsic.quantized",
                 "intrinsic.quantized.dynamic", "intrinsic.qat", "qat"):
        importlib.import_module(f"qops.nn.{name}")
    importlib.import_module("qops.quantization.stubs")
