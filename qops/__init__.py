"""qops: quantized (int8) neural-network operators without PyTorch.

Quantized tensors (`QTensor`), the quantized operators of PyTorch's eager mode
(`qops.functional`), nn-style modules (`qops.nn`) and observer-driven conversion
(`qops.quantization`), each op with a readable numpy reference and a fast OpenMP kernel.
"""
__version__ = "0.2.0"

from qops._config import (  # noqa: F401
    backend,
    get_backend,
    get_num_threads,
    set_backend,
    set_num_threads,
    threads,
)
from qops._dtypes import (  # noqa: F401
    QDtype,
    QScheme,
    per_channel_affine,
    per_channel_affine_float_qparams,
    per_channel_symmetric,
    per_tensor_affine,
    per_tensor_symmetric,
    qint8,
    qint32,
    quint8,
)
from qops._qtensor import (  # noqa: F401
    QTensor,
    dequantize,
    is_quantized,
    make_per_channel_quantized_tensor,
    make_per_tensor_quantized_tensor,
    quantize_per_channel,
    quantize_per_tensor,
)
from qops._show import show_config  # noqa: F401


def __getattr__(name):
    # Submodules that import the heavier layers load on first use.
    import importlib
    if name in ("functional", "nn", "quantization", "bench"):
        return importlib.import_module(f"qops.{name}")
    if name in ("save", "load", "LoadError"):
        return getattr(importlib.import_module("qops.nn._serialize"), name)
    raise AttributeError(f"module 'qops' has no attribute {name!r}")
