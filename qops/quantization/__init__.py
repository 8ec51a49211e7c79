"""qops.quantization: observers, fake quantization, QConfig, fusion and eager-mode conversion.

The workflow of `torch.ao.quantization` (prepare / calibrate / convert, quantize_dynamic, QAT)
on qops modules, graph mode on captured models (`qops.quantization.quantize_fx`: prepare_fx,
convert_fx, QConfigMapping), plus a per-layer error report (`qops.quantization.report`).
"""
from qops.quantization._choose_qparams import calculate_qparams, choose_quantization_params  # noqa: F401
from qops.quantization.fake_quantize import *  # noqa: F401,F403
from qops.quantization.fuse_modules import *  # noqa: F401,F403
from qops.quantization.observer import *  # noqa: F401,F403
from qops.quantization.qconfig import *  # noqa: F401,F403
from qops.quantization.quantization_mappings import *  # noqa: F401,F403
from qops.quantization.quantize import *  # noqa: F401,F403
from qops.quantization.stubs import *  # noqa: F401,F403

_FX = ("QConfigMapping", "get_default_qconfig_mapping", "get_default_qat_qconfig_mapping",
       "quantize_jit", "quantize_dynamic_jit")


def __getattr__(name):
    import importlib
    if name in ("report", "_demo", "quantize_fx"):
        return importlib.import_module(f"qops.quantization.{name}")
    if name in _FX:
        return getattr(importlib.import_module("qops.quantization.quantize_fx"), name)
    if name in ("compare_layers", "LayerReport"):
        return getattr(importlib.import_module("qops.quantization.report"), name)
    raise AttributeError(f"module 'qops.quantization' has no attribute {name!r}")
