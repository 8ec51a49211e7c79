"""Mapping tables (float type -> QAT or quantized type); they drive prepare and convert.

The tables are PyTorch's (`torch/ao/quantization/quantization_mappings.py`) restricted to the
module types qops has; they are built on first use so that a class missing from `qops.nn` is
simply absent from the table.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Optional

__all__ = ["get_default_static_quant_module_mappings", "get_default_qat_module_mappings",
           "get_default_dynamic_quant_module_mappings", "get_default_qconfig_propagation_list",
           "get_default_float_to_quantized_operator_mappings", "no_observer_set",
           "get_quantized_operator", "get_static_quant_module_class",
           "get_dynamic_quant_module_class", "get_default_compare_output_module_list",
           "get_default_static_sparse_quant_module_mappings"]

# (float module, target module) as "package:Class" pairs, in PyTorch's order.
_STATIC = [
    ("qops.quantization.stubs:QuantStub", "qops.nn.quantized:Quantize"),
    ("qops.quantization.stubs:DeQuantStub", "qops.nn.quantized:DeQuantize"),
    ("qops.nn:BatchNorm2d", "qops.nn.quantized:BatchNorm2d"),
    ("qops.nn:Softmax", "qops.nn.quantized:Softmax"),
    ("qops.nn:BatchNorm3d", "qops.nn.quantized:BatchNorm3d"),
    ("qops.nn:Dropout", "qops.nn.quantized:Dropout"),
    ("qops.nn:Conv1d", "qops.nn.quantized:Conv1d"),
    ("qops.nn:Conv2d", "qops.nn.quantized:Conv2d"),
    ("qops.nn:Conv3d", "qops.nn.quantized:Conv3d"),
    ("qops.nn:ConvTranspose1d", "qops.nn.quantized:ConvTranspose1d"),
    ("qops.nn:ConvTranspose2d", "qops.nn.quantized:ConvTranspose2d"),
    ("qops.nn:ConvTranspose3d", "qops.nn.quantized:ConvTranspose3d"),
    ("qops.nn:ELU", "qops.nn.quantized:ELU"),
    ("qops.nn:Embedding", "qops.nn.quantized:Embedding"),
    ("qops.nn:EmbeddingBag", "qops.nn.quantized:EmbeddingBag"),
    ("qops.nn:GroupNorm", "qops.nn.quantized:GroupNorm"),
    ("qops.nn:Hardswish", "qops.nn.quantized:Hardswish"),
    ("qops.nn:InstanceNorm1d", "qops.nn.quantized:InstanceNorm1d"),
    ("qops.nn:InstanceNorm2d", "qops.nn.quantized:InstanceNorm2d"),
    ("qops.nn:InstanceNorm3d", "qops.nn.quantized:InstanceNorm3d"),
    ("qops.nn:LayerNorm", "qops.nn.quantized:LayerNorm"),
    ("qops.nn:LeakyReLU", "qops.nn.quantized:LeakyReLU"),
    ("qops.nn:Linear", "qops.nn.quantized:Linear"),
    ("qops.nn:ReLU6", "qops.nn.quantized:ReLU6"),
    ("qops.nn.quantized:FloatFunctional", "qops.nn.quantized:QFunctional"),
    ("qops.nn.intrinsic:BNReLU2d", "qops.nn.intrinsic.quantized:BNReLU2d"),
    ("qops.nn.intrinsic:BNReLU3d", "qops.nn.intrinsic.quantized:BNReLU3d"),
    ("qops.nn.intrinsic:ConvReLU1d", "qops.nn.intrinsic.quantized:ConvReLU1d"),
    ("qops.nn.intrinsic:ConvReLU2d", "qops.nn.intrinsic.quantized:ConvReLU2d"),
    ("qops.nn.intrinsic:ConvReLU3d", "qops.nn.intrinsic.quantized:ConvReLU3d"),
    ("qops.nn.intrinsic:LinearReLU", "qops.nn.intrinsic.quantized:LinearReLU"),
    ("qops.nn.intrinsic.qat:ConvBn1d", "qops.nn.quantized:Conv1d"),
    ("qops.nn.intrinsic.qat:ConvBn2d", "qops.nn.quantized:Conv2d"),
    ("qops.nn.intrinsic.qat:ConvBn3d", "qops.nn.quantized:Conv3d"),
    ("qops.nn.intrinsic.qat:ConvBnReLU1d", "qops.nn.intrinsic.quantized:ConvReLU1d"),
    ("qops.nn.intrinsic.qat:ConvBnReLU2d", "qops.nn.intrinsic.quantized:ConvReLU2d"),
    ("qops.nn.intrinsic.qat:ConvBnReLU3d", "qops.nn.intrinsic.quantized:ConvReLU3d"),
    ("qops.nn.intrinsic.qat:ConvReLU1d", "qops.nn.intrinsic.quantized:ConvReLU1d"),
    ("qops.nn.intrinsic.qat:ConvReLU2d", "qops.nn.intrinsic.quantized:ConvReLU2d"),
    ("qops.nn.intrinsic.qat:ConvReLU3d", "qops.nn.intrinsic.quantized:ConvReLU3d"),
    ("qops.nn.intrinsic.qat:LinearReLU", "qops.nn.intrinsic.quantized:LinearReLU"),
    ("qops.nn.intrinsic.qat:LinearBn1d", "qops.nn.quantized:Linear"),
    ("qops.nn.qat:Linear", "qops.nn.quantized:Linear"),
    ("qops.nn.qat:Conv1d", "qops.nn.quantized:Conv1d"),
    ("qops.nn.qat:Conv2d", "qops.nn.quantized:Conv2d"),
    ("qops.nn.qat:Conv3d", "qops.nn.quantized:Conv3d"),
]

_QAT = [
    ("qops.nn:Conv1d", "qops.nn.qat:Conv1d"),
    ("qops.nn:Conv2d", "qops.nn.qat:Conv2d"),
    ("qops.nn:Conv3d", "qops.nn.qat:Conv3d"),
    ("qops.nn:Linear", "qops.nn.qat:Linear"),
    ("qops.nn.intrinsic:ConvBn1d", "qops.nn.intrinsic.qat:ConvBn1d"),
    ("qops.nn.intrinsic:ConvBn2d", "qops.nn.intrinsic.qat:ConvBn2d"),
    ("qops.nn.intrinsic:ConvBn3d", "qops.nn.intrinsic.qat:ConvBn3d"),
    ("qops.nn.intrinsic:ConvBnReLU1d", "qops.nn.intrinsic.qat:ConvBnReLU1d"),
    ("qops.nn.intrinsic:ConvBnReLU2d", "qops.nn.intrinsic.qat:ConvBnReLU2d"),
    ("qops.nn.intrinsic:ConvBnReLU3d", "qops.nn.intrinsic.qat:ConvBnReLU3d"),
    ("qops.nn.intrinsic:ConvReLU1d", "qops.nn.intrinsic.qat:ConvReLU1d"),
    ("qops.nn.intrinsic:ConvReLU2d", "qops.nn.intrinsic.qat:ConvReLU2d"),
    ("qops.nn.intrinsic:ConvReLU3d", "qops.nn.intrinsic.qat:ConvReLU3d"),
    ("qops.nn.intrinsic:LinearReLU", "qops.nn.intrinsic.qat:LinearReLU"),
    ("qops.nn.intrinsic:LinearBn1d", "qops.nn.intrinsic.qat:LinearBn1d"),
]

_DYNAMIC = [
    ("qops.nn:Linear", "qops.nn.quantized.dynamic:Linear"),
    ("qops.nn.intrinsic:LinearReLU", "qops.nn.intrinsic.quantized.dynamic:LinearReLU"),
    ("qops.nn.intrinsic:LinearReLU", "qops.nn.quantized.dynamic:LinearReLU"),
    ("qops.nn:LSTM", "qops.nn.quantized.dynamic:LSTM"),
    ("qops.nn:GRU", "qops.nn.quantized.dynamic:GRU"),
    ("qops.nn:LSTMCell", "qops.nn.quantized.dynamic:LSTMCell"),
    ("qops.nn:GRUCell", "qops.nn.quantized.dynamic:GRUCell"),
    ("qops.nn:RNNCell", "qops.nn.quantized.dynamic:RNNCell"),
    ("qops.nn:EmbeddingBag", "qops.nn.quantized:EmbeddingBag"),
    ("qops.nn:Embedding", "qops.nn.quantized:Embedding"),
]

# Float functional ops -> quantized ops (eager mode keeps these only for reference).
_OPERATORS = [
    ("qops.nn._float_ops:relu", "qops.functional:relu"),
    ("qops.nn._float_ops:hardswish", "qops.functional:hardswish"),
    ("qops.nn._float_ops:elu", "qops.functional:elu"),
    ("qops.nn._float_ops:leaky_relu", "qops.functional:leaky_relu"),
]

# Output observers with fixed qparams for QAT (PyTorch's DEFAULT_MODULE_TO_ACT_POST_PROCESS).
_FIXED_QPARAMS_ACT = [
    ("qops.nn:Hardsigmoid", "default_fixed_qparams_range_0to1_fake_quant"),
    ("qops.nn:Sigmoid", "default_fixed_qparams_range_0to1_fake_quant"),
    ("qops.nn:Softmax", "default_fixed_qparams_range_0to1_fake_quant"),
    ("qops.nn:Tanh", "default_fixed_qparams_range_neg1to1_fake_quant"),
]


def _resolve(ref):
    mod, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError):
        return None


def _table(pairs):
    out = {}
    for a, b in pairs:
        ka, kb = _resolve(a), _resolve(b)
        if ka is not None and kb is not None and ka not in out:
            out[ka] = kb
    return out


def get_default_static_quant_module_mappings() -> Any:
    """{float / fused / QAT module type: quantized module type} for post-training quantization."""
    return _table(_STATIC)


def get_default_static_sparse_quant_module_mappings() -> Any:
    """qops has no sparse modules: an empty table (kept for API parity)."""
    return {}


def get_default_qat_module_mappings() -> Any:
    """{float / fused module type: QAT module type} for prepare_qat."""
    return _table(_QAT)


def get_default_dynamic_quant_module_mappings() -> Any:
    """{float module type: dynamic quantized module type} for quantize_dynamic."""
    return _table(_DYNAMIC)


def get_default_float_to_quantized_operator_mappings() -> Any:
    """{float function: quantized function}."""
    return _table(_OPERATORS)


def get_quantized_operator(float_op: Callable[..., Any]) -> Any:
    """The quantized function for a float function, or a ValueError naming it."""
    q = get_default_float_to_quantized_operator_mappings().get(float_op)
    if q is None:
        raise ValueError(f"Operator {getattr(float_op, '__name__', float_op)!r} does not have a "
                         "corresponding quantized op")
    return q


def _module_to_fixed_qparams_act():
    from qops.quantization import fake_quantize as fq
    out = {}
    for a, name in _FIXED_QPARAMS_ACT:
        k = _resolve(a)
        if k is not None:
            out[k] = getattr(fq, name)
    return out


def get_default_qconfig_propagation_list() -> Any:
    """Module types that get a qconfig and an output observer in prepare (PyTorch's list)."""
    from qops.nn.module import Sequential
    return (set(get_default_static_quant_module_mappings())
            | set(get_default_qat_module_mappings())
            | set(get_default_dynamic_quant_module_mappings()) | {Sequential})


def get_default_compare_output_module_list() -> Any:
    """Module types whose outputs the numeric-suite style comparisons look at."""
    return (set(get_default_static_quant_module_mappings().values())
            | set(get_default_qat_module_mappings().values())
            | set(get_default_dynamic_quant_module_mappings().values())
            | set(get_default_static_quant_module_mappings())
            | set(get_default_qat_module_mappings())
            | set(get_default_dynamic_quant_module_mappings()))


def no_observer_set() -> Any:
    """Module types that need no output observer (the dynamic ones handle their own)."""
    return set()


def get_static_quant_module_class(float_module_class: Any,
                                  additional_static_quant_mapping: Optional[dict[Any, Any]] = None,
                                  is_reference: bool = False) -> Any:
    """The quantized class for a float module class, or a ValueError naming it."""
    if is_reference:
        raise NotImplementedError("qops has no reference (float-simulated) quantized modules")
    table = get_default_static_quant_module_mappings()
    table.update(additional_static_quant_mapping or {})
    q = table.get(float_module_class)
    if q is None:
        raise ValueError(f"Floating point module class {float_module_class.__name__} does not "
                         "have a corresponding quantized module class")
    return q


def get_dynamic_quant_module_class(
        float_module_class: Any,
        additional_dynamic_quant_mapping: Optional[dict[Any, Any]] = None) -> Any:
    """The dynamic quantized class for a float module class, or a ValueError naming it."""
    table = get_default_dynamic_quant_module_mappings()
    table.update(additional_dynamic_quant_mapping or {})
    q = table.get(float_module_class)
    if q is None:
        raise ValueError(f"Floating point module class {float_module_class.__name__} does not "
                         "have a corresponding dynamically quantized module class")
    return q
