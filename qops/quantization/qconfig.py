"""QConfig: which observer (or fake quant) to build for a layer's activations and weights.

Names and defaults follow `torch.ao.quantization.qconfig` (PyTorch 2.13, x86 backend).
A QConfig holds observer *factories* (classes or `with_args` partials), never instances.
"""
from __future__ import annotations

import warnings
from collections import namedtuple
from typing import Any

import numpy as np

from qops.nn.module import Identity, Module
from qops.quantization.fake_quantize import (
    FakeQuantize,
    FusedMovingAvgObsFakeQuantize,
    default_dynamic_fake_quant,
    default_fake_quant,
    default_fused_act_fake_quant,
    default_fused_per_channel_wt_fake_quant,
    default_fused_wt_fake_quant,
    default_per_channel_weight_fake_quant,
    default_weight_fake_quant,
)
from qops.quantization.observer import (
    HistogramObserver,
    MovingAverageMinMaxObserver,
    NoopObserver,
    PlaceholderObserver,
    default_debug_observer,
    default_dynamic_quant_observer,
    default_float_qparams_observer,
    default_observer,
    default_per_channel_weight_observer,
    default_placeholder_observer,
    default_reuse_input_observer,
    default_weight_observer,
)

__all__ = ["QConfig", "QConfigDynamic", "default_qconfig", "default_debug_qconfig",
           "default_per_channel_qconfig", "default_dynamic_qconfig", "float16_dynamic_qconfig",
           "float16_static_qconfig", "per_channel_dynamic_qconfig",
           "float_qparams_weight_only_qconfig", "default_qat_qconfig",
           "default_dynamic_qat_qconfig", "default_weight_only_qconfig",
           "default_activation_only_qconfig", "default_qat_qconfig_v2",
           "default_reuse_input_qconfig", "get_default_qconfig", "get_default_qat_qconfig",
           "qconfig_equals"]

_BACKENDS = ("fbgemm", "x86", "qnnpack", "onednn")


class QConfig(namedtuple("QConfig", ["activation", "weight"])):
    """How to observe a layer: `activation` and `weight` observer factories.

    Parameters
    ----------
    activation : observer class or `Observer.with_args(...)` factory for the layer's output
    weight : observer factory for the layer's weight
    """

    __slots__ = ()

    def __new__(cls, activation, weight):
        if isinstance(activation, Module) or isinstance(weight, Module):
            raise ValueError("QConfig received an observer instance; pass an observer class "
                             "instead (use MyObserver.with_args(x=1) to set constructor "
                             "arguments)")
        return super().__new__(cls, activation, weight)


class QConfigDynamic(namedtuple("QConfigDynamic", ["activation", "weight"])):
    """Deprecated in PyTorch: a QConfig for dynamic quantization (use QConfig).

    Parameters
    ----------
    activation : observer factory (Identity by default)
    weight : observer factory for the weights
    """

    __slots__ = ()

    def __new__(cls, activation=Identity, weight=Identity):
        warnings.warn("QConfigDynamic is deprecated, use QConfig instead", FutureWarning,
                      stacklevel=2)
        if isinstance(weight, Module):
            raise ValueError("QConfigDynamic received an observer instance; pass an observer "
                             "class instead")
        return super().__new__(cls, activation, weight)


default_qconfig = QConfig(activation=default_observer, weight=default_weight_observer)
default_debug_qconfig = QConfig(weight=default_weight_observer, activation=default_debug_observer)
default_per_channel_qconfig = QConfig(activation=default_observer,
                                      weight=default_per_channel_weight_observer)
default_dynamic_qconfig = QConfig(activation=default_dynamic_quant_observer,
                                  weight=default_weight_observer)
float16_dynamic_qconfig = QConfig(
    activation=PlaceholderObserver.with_args(dtype=np.float16, is_dynamic=True),
    weight=PlaceholderObserver.with_args(dtype=np.float16))
float16_static_qconfig = QConfig(activation=PlaceholderObserver.with_args(dtype=np.float16),
                                 weight=PlaceholderObserver.with_args(dtype=np.float16))
per_channel_dynamic_qconfig = QConfig(activation=default_dynamic_quant_observer,
                                      weight=default_per_channel_weight_observer)
float_qparams_weight_only_qconfig = QConfig(activation=default_placeholder_observer,
                                            weight=default_float_qparams_observer)
default_qat_qconfig = QConfig(activation=default_fake_quant, weight=default_weight_fake_quant)
default_dynamic_qat_qconfig = QConfig(activation=default_dynamic_fake_quant,
                                      weight=default_weight_fake_quant)
default_weight_only_qconfig = QConfig(activation=Identity, weight=default_weight_fake_quant)
default_activation_only_qconfig = QConfig(activation=default_fake_quant, weight=Identity)
default_qat_qconfig_v2 = QConfig(activation=default_fused_act_fake_quant,
                                 weight=default_fused_wt_fake_quant)
default_reuse_input_qconfig = QConfig(activation=default_reuse_input_observer,
                                      weight=NoopObserver)


def _check_backend(backend):
    if backend not in _BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported; backend must be one of "
                         f"{list(_BACKENDS)}")


def get_default_qconfig(backend: str = "x86", version: int = 0) -> QConfig:
    """The default post-training qconfig of a backend (x86: histogram activations, reduce_range,
    per-channel symmetric qint8 weights).

    Parameters
    ----------
    backend : "x86" (default), "fbgemm", "qnnpack" or "onednn"
    version : 0
    """
    _check_backend(backend)
    if version != 0:
        raise ValueError(f"version {version!r} of get_default_qconfig is not supported; use 0")
    if backend in ("fbgemm", "x86"):
        return QConfig(activation=HistogramObserver.with_args(reduce_range=True),
                       weight=default_per_channel_weight_observer)
    if backend == "qnnpack":
        return QConfig(activation=HistogramObserver.with_args(reduce_range=False),
                       weight=default_weight_observer)
    return QConfig(activation=HistogramObserver.with_args(reduce_range=False),
                   weight=default_per_channel_weight_observer)


def get_default_qat_qconfig(backend: str = "x86", version: int = 1) -> QConfig:
    """The default QAT qconfig of a backend (version 1: fused moving-average fake quant).

    Parameters
    ----------
    backend : "x86" (default), "fbgemm", "qnnpack" or "onednn"
    version : 0 (FakeQuantize modules) or 1 (fused modules, default)
    """
    _check_backend(backend)
    reduce = backend in ("fbgemm", "x86")
    if version == 0:
        act = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0,
                                     quant_max=255, reduce_range=reduce)
        weight = (default_weight_fake_quant if backend == "qnnpack"
                  else default_per_channel_weight_fake_quant)
    elif version == 1:
        act = FusedMovingAvgObsFakeQuantize.with_args(observer=MovingAverageMinMaxObserver,
                                                      quant_min=0, quant_max=255,
                                                      reduce_range=reduce)
        weight = (default_fused_wt_fake_quant if backend == "qnnpack"
                  else default_fused_per_channel_wt_fake_quant)
    else:
        raise ValueError(f"version {version!r} of get_default_qat_qconfig is not supported; "
                         "use 0 or 1")
    return QConfig(activation=act, weight=weight)


def _partial_equals(a, b):
    pa, pb = getattr(a, "p", None), getattr(b, "p", None)
    if pa is not None and pb is not None:
        return (pa.func == pb.func and pa.args == pb.args and pa.keywords == pb.keywords
                and a.callable_args == b.callable_args)
    return a == b


def qconfig_equals(q1: Any, q2: Any) -> bool:
    """True if two qconfigs build the same observers (compares the factories' arguments)."""
    if q1 is None or q2 is None:
        return q1 is q2
    return (_partial_equals(q1.activation, q2.activation)
            and _partial_equals(q1.weight, q2.weight))


def _assert_valid_qconfig(qconfig, mod):
    """Refuse a qconfig that is not a QConfig (or None), naming the module."""
    if qconfig is None:
        return
    if not (isinstance(qconfig, tuple) and hasattr(qconfig, "activation")
            and hasattr(qconfig, "weight")):
        raise TypeError(f"qconfig of {type(mod).__name__} must be a QConfig or None; got "
                        f"{type(qconfig).__name__}")
