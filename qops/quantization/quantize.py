"""Eager-mode conversion: propagate qconfig, attach observers, calibrate, swap modules.

The same steps and rules as `torch.ao.quantization.quantize` (PyTorch 2.13), on qops modules:
`prepare` gives every leaf module whose type is in the propagation list an output observer
(`activation_post_process`, called by a forward hook); `convert` replaces each module with
the class the mapping table names, built by that class's `from_float(observed_module)`.
Fused modules are swapped as one unit. Errors name the module (its dotted path).
"""
from __future__ import annotations

import copy
import inspect
import itertools
import warnings
from typing import Any, Callable, Optional

import numpy as np

from qops.nn import intrinsic as nni
from qops.nn.module import Module, Sequential
from qops.quantization.fake_quantize import FakeQuantizeBase
from qops.quantization.observer import ObserverBase
from qops.quantization.qconfig import (
    _assert_valid_qconfig,
    default_dynamic_qconfig,
    float16_dynamic_qconfig,
    float_qparams_weight_only_qconfig,
)
from qops.quantization.quantization_mappings import (
    _module_to_fixed_qparams_act,
    get_default_dynamic_quant_module_mappings,
    get_default_qat_module_mappings,
    get_default_qconfig_propagation_list,
    get_default_static_quant_module_mappings,
    no_observer_set,
)
from qops.quantization.stubs import DeQuantStub, QuantWrapper

__all__ = ["propagate_qconfig_", "add_observer_", "add_quant_dequant", "get_observer_dict",
           "swap_module", "prepare", "convert", "quantize", "quantize_dynamic", "prepare_qat",
           "quantize_qat", "default_eval_fn", "get_default_custom_config_dict"]


def get_default_custom_config_dict() -> dict[str, Any]:
    """The default custom-module config: qops has no custom (LSTM / attention) modules."""
    return {"float_to_observed_custom_module_class": {},
            "observed_to_quantized_custom_module_class": {}}


def _is_activation_post_process(m):
    return isinstance(m, (ObserverBase, FakeQuantizeBase))


def _is_fused(m):
    # Fused float modules and the fused QAT modules are swapped whole, never entered.
    return isinstance(m, nni._FusedModule) or type(m).__module__.startswith("qops.nn.intrinsic")


def _leaf(m):
    return not any(c is not None for c in m._modules.values())


def _path(prefix, name):
    return f"{prefix}.{name}" if prefix else name


def _describe(name, mod):
    return f"'{name}' ({type(mod).__name__})" if name else f"the model ({type(mod).__name__})"


# -- qconfig propagation ------------------------------------------------------------------
def _propagate_qconfig_helper(module, qconfig_dict, qconfig_parent=None, prefix="",
                              prepare_custom_config_dict=None):
    module_qconfig = qconfig_dict.get(type(module), qconfig_parent)
    module_qconfig = qconfig_dict.get(prefix, module_qconfig)
    module_qconfig = getattr(module, "qconfig", module_qconfig)
    _assert_valid_qconfig(module_qconfig, module)
    module.qconfig = module_qconfig
    custom = prepare_custom_config_dict or {}
    skip_names = custom.get("non_traceable_module_name", [])
    skip_types = custom.get("non_traceable_module_class", [])
    for name, child in module.named_children():
        if name in skip_names or type(child) in skip_types:
            continue
        _propagate_qconfig_helper(child, qconfig_dict, module_qconfig, _path(prefix, name),
                                  prepare_custom_config_dict)


def propagate_qconfig_(module: Module, qconfig_dict: Optional[dict[Any, Any]] = None,
                       prepare_custom_config_dict: Optional[dict[Any, Any]] = None) -> None:
    """Give every submodule a `qconfig`: its own, else the dict's (by name, then type), else
    its parent's.

    Parameters
    ----------
    module : qops.nn.Module, modified in place
    qconfig_dict : {module type or dotted name ("" = root): QConfig or None}
    prepare_custom_config_dict : {"non_traceable_module_name": [...],
        "non_traceable_module_class": [...]} subtrees left without qconfig
    """
    if not isinstance(module, Module):
        raise TypeError(f"propagate_qconfig_: module must be a qops.nn.Module; got "
                        f"{type(module).__name__}")
    qconfig_dict = {} if qconfig_dict is None else dict(qconfig_dict)
    names = {n for n, _ in module.named_modules()}
    unknown = [k for k in qconfig_dict if isinstance(k, str) and k not in names]
    if unknown:
        raise ValueError(f"qconfig names {unknown} that are not submodules of "
                         f"{type(module).__name__}; known names: {sorted(n for n in names if n)}")
    _propagate_qconfig_helper(module, qconfig_dict,
                              prepare_custom_config_dict=prepare_custom_config_dict)


# -- observers ----------------------------------------------------------------------------
def _observer_forward_hook(self, input, output):
    """Forward hook: run the module's output through its observer."""
    return self.activation_post_process(output)


def _observer_forward_pre_hook(self, input):
    """Forward pre-hook: run the module's input through its (memoryless) observer."""
    return self.activation_post_process(input[0])


def _register_activation_post_process_hook(module, pre_hook=False):
    if not hasattr(module, "activation_post_process"):
        raise ValueError(f"{type(module).__name__} needs an activation_post_process before its "
                         "observer hook is registered")
    if pre_hook:
        module.register_forward_pre_hook(_observer_forward_pre_hook)
    else:
        module.register_forward_hook(_observer_forward_hook)


def get_activation_post_process(
        qconfig: Any,
        device: Any = None,
        special_act_post_process: Optional[dict[Any, Any]] = None) -> Module:
    """A new output observer from `qconfig.activation` (or the special factory)."""
    factory = qconfig.activation if special_act_post_process is None \
        else special_act_post_process
    return factory()


def _is_memoryless(observer):
    return getattr(observer, "averaging_constant", None) == 1


def _activation_is_memoryless(qconfig):
    act = qconfig.activation()
    if isinstance(act, FakeQuantizeBase) and hasattr(act, "activation_post_process"):
        return _is_memoryless(act.activation_post_process)
    return _is_memoryless(act)


def _needs_observation(m):
    return getattr(m, "qconfig", None) is not None


def _add_observer_(module, qconfig_propagation_list=None, non_leaf_module_list=None,
                   device=None, custom_module_class_mapping=None):
    if qconfig_propagation_list is None:
        qconfig_propagation_list = get_default_qconfig_propagation_list()
    custom_module_class_mapping = custom_module_class_mapping or {}
    special = _module_to_fixed_qparams_act()
    from qops.nn.module import Dropout
    from qops.nn.quantized import FloatFunctional, QFunctional

    def insert(m, special_factory=None):
        if _needs_observation(m) and not isinstance(m, DeQuantStub):
            m.add_module("activation_post_process",
                         get_activation_post_process(m.qconfig, device, special_factory))
            _register_activation_post_process_hook(
                m, pre_hook=_activation_is_memoryless(m.qconfig))

    for name, child in list(module.named_children()):
        if type(child) is Dropout:
            continue
        if isinstance(child, (FloatFunctional, QFunctional)):
            if _needs_observation(child):
                child.activation_post_process = get_activation_post_process(child.qconfig, device)
        elif isinstance(child, nni._FusedModule):
            if _needs_observation(child):
                insert(child)
        elif non_leaf_module_list is not None and type(child) in non_leaf_module_list:
            if _needs_observation(child):
                insert(child)
        elif child.training and type(child) in special:
            insert(child, special[type(child)])
        elif type(child) in custom_module_class_mapping:
            observed_cls = custom_module_class_mapping[type(child)]
            observed = observed_cls.from_float(child)
            setattr(module, name, observed)
            if not issubclass(observed_cls, tuple(no_observer_set())):
                insert(observed)
        else:
            _add_observer_(child, qconfig_propagation_list, non_leaf_module_list, device,
                           custom_module_class_mapping)

    # Only leaves get an output observer; a QuantStub observes the model's input.
    if _leaf(module) and not isinstance(module, Sequential) \
            and type(module) in qconfig_propagation_list:
        insert(module)
    if hasattr(module, "weight_fake_quant") and not isinstance(module, Sequential) \
            and type(module) in qconfig_propagation_list \
            and not hasattr(module, "activation_post_process"):
        insert(module)


def add_observer_(module: Module, qconfig_propagation_list: Any = None,
                  non_leaf_module_list: Any = None, device: Any = None,
                  custom_module_class_mapping: Optional[dict[Any, Any]] = None) -> None:
    """Attach an output observer (and its forward hook) to every leaf module with a qconfig.

    Parameters
    ----------
    module : qops.nn.Module whose submodules carry `qconfig` (see `propagate_qconfig_`)
    qconfig_propagation_list : module types that get observers (default: PyTorch's list)
    non_leaf_module_list : module types observed as a whole even though they have children
    device : ignored (CPU only)
    custom_module_class_mapping : {float type: observed type} built by `from_float`
    """
    _add_observer_(module, qconfig_propagation_list, non_leaf_module_list, device,
                   custom_module_class_mapping)


def add_quant_dequant(module: Module) -> Module:
    """Wrap every leaf module that has a qconfig in a QuantWrapper (quantize in, dequantize out).

    Parameters
    ----------
    module : qops.nn.Module with qconfig set
    """
    if _leaf(module) and getattr(module, "qconfig", None):
        return QuantWrapper(module)
    for name, child in list(module.named_children()):
        module._modules[name] = add_quant_dequant(child)
    return module


def get_observer_dict(mod: Module, target_dict: dict[Any, Any], prefix: str = "") -> None:
    """Fill `target_dict` with {"<path>.activation_post_process": observer} for the whole tree.

    Parameters
    ----------
    mod : qops.nn.Module
    target_dict : dict, filled in place
    prefix : str, the path of `mod`
    """
    def with_dot(p):
        return p if p == "" else p + "."

    if "activation_post_process" in getattr(mod, "_modules", {}):
        target_dict[with_dot(prefix) + "activation_post_process"] = mod.activation_post_process
    for name, child in mod.named_children():
        get_observer_dict(child, target_dict, with_dot(prefix) + name if prefix else name)


def _remove_activation_post_process(module):
    if "activation_post_process" in module._modules and \
            _is_activation_post_process(module._modules["activation_post_process"]):
        del module._modules["activation_post_process"]
    for hooks, fn in ((module._forward_pre_hooks, _observer_forward_pre_hook),
                      (module._forward_hooks, _observer_forward_hook)):
        for k in [k for k, h in hooks.items() if h is fn]:
            del hooks[k]


def _remove_qconfig(module):
    for child in module.children():
        _remove_qconfig(child)
    if "qconfig" in module.__dict__:
        del module.__dict__["qconfig"]
    _remove_activation_post_process(module)


# -- prepare / convert --------------------------------------------------------------------
def _check_model(model, fn):
    if not isinstance(model, Module):
        raise TypeError(f"{fn}: model must be a qops.nn.Module; got {type(model).__name__}")


def prepare(model: Module, inplace: bool = False, allow_list: Any = None,
            observer_non_leaf_module_list: Any = None,
            prepare_custom_config_dict: Optional[dict[Any, Any]] = None) -> Module:
    """Attach observers to a float model so that running data through it calibrates them.

    Parameters
    ----------
    model : qops.nn.Module with `qconfig` set on it or on submodules (eval mode for PTQ)
    inplace : bool, modify `model` instead of a copy
    allow_list : module types that get observers (default: the propagation list)
    observer_non_leaf_module_list : module types observed as a whole
    prepare_custom_config_dict : {"float_to_observed_custom_module_class": {...}, ...}

    Returns
    -------
    the prepared model
    """
    _check_model(model, "prepare")
    custom = prepare_custom_config_dict or get_default_custom_config_dict()
    custom_map = custom.get("float_to_observed_custom_module_class", {})
    if not inplace:
        model = copy.deepcopy(model)
    propagation = allow_list if allow_list is not None else get_default_qconfig_propagation_list()
    propagate_qconfig_(model, qconfig_dict=None)
    if not any(getattr(m, "qconfig", None) for m in model.modules()):
        # PyTorch only warns here; a model that would silently stay float is an error in qops.
        raise ValueError(f"prepare: no module of {type(model).__name__} has a qconfig; set "
                         "model.qconfig = qops.quantization.get_default_qconfig('x86') (or a "
                         "submodule's .qconfig) before prepare()")
    _add_observer_(model, propagation, observer_non_leaf_module_list,
                   custom_module_class_mapping=custom_map)
    return model


def _from_float(qcls, mod, name, use_precomputed_fake_quant):
    try:
        params = inspect.signature(qcls.from_float).parameters
        if "use_precomputed_fake_quant" in params:
            return qcls.from_float(mod, use_precomputed_fake_quant=use_precomputed_fake_quant)
        return qcls.from_float(mod)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise type(e)(f"convert: cannot turn {_describe(name, mod)} into "
                      f"{qcls.__module__.replace('._modules', '')}.{qcls.__name__}: {e}") from e
    except AttributeError as e:
        raise ValueError(f"convert: cannot turn {_describe(name, mod)} into {qcls.__name__}: "
                         f"{e} (was prepare() run and the model calibrated?)") from e


def swap_module(mod: Module, mapping: dict[Any, Any],
                custom_module_class_mapping: Optional[dict[Any, Any]] = None,
                use_precomputed_fake_quant: bool = False, _name: Any = "") -> Module:
    """The module that replaces `mod` in convert: `mapping[type(mod)].from_float(mod)` if `mod`
    has a qconfig and its type is mapped, else `mod` itself.

    Parameters
    ----------
    mod : qops.nn.Module
    mapping : {float type: quantized type}
    custom_module_class_mapping : {observed type: quantized type with `from_observed`}
    use_precomputed_fake_quant : bool, passed to from_float when it accepts it
    """
    custom_module_class_mapping = custom_module_class_mapping or {}
    new_mod = mod
    if getattr(mod, "qconfig", None) is None:
        return new_mod
    swapped = False
    if type(mod) in custom_module_class_mapping:
        new_mod = custom_module_class_mapping[type(mod)].from_observed(mod)
        swapped = True
    elif type(mod) in mapping:
        new_mod = _from_float(mapping[type(mod)], mod, _name, use_precomputed_fake_quant)
        swapped = True
    if swapped:
        # Keep user hooks: pre-hooks see quantized input, post-hooks (except ours) the output.
        for hook in mod._forward_pre_hooks.values():
            if hook is not _observer_forward_pre_hook:
                new_mod.register_forward_pre_hook(hook)
        for hook in mod._forward_hooks.values():
            if hook is not _observer_forward_hook:
                new_mod.register_forward_hook(hook)
    return new_mod


def _warn_uncalibrated(mod, name):
    obs = mod._modules.get("activation_post_process") if hasattr(mod, "_modules") else None
    if isinstance(obs, ObserverBase) and hasattr(obs, "min_val"):
        mv = np.asarray(obs.min_val)
        if mv.size == 0 or (mv.ndim == 0 and mv == np.inf):
            warnings.warn(f"convert: the observer of {_describe(name, mod)} has seen no data; "
                          "its qparams default to scale 1.0, zero point 0 (calibrate the "
                          "prepared model before convert)", stacklevel=4)


def _convert(module, mapping=None, inplace=False, is_reference=False,
             convert_custom_config_dict=None, use_precomputed_fake_quant=False, prefix=""):
    if is_reference:
        raise NotImplementedError("qops has no reference (float-simulated) quantized modules")
    if mapping is None:
        mapping = get_default_static_quant_module_mappings()
    custom = convert_custom_config_dict or get_default_custom_config_dict()
    custom_map = custom.get("observed_to_quantized_custom_module_class", {})
    if not inplace:
        module = copy.deepcopy(module)
    reassign = {}
    for name, mod in list(module.named_children()):
        path = _path(prefix, name)
        if not _is_fused(mod) and type(mod) not in custom_map:
            _convert(mod, mapping, True, is_reference, convert_custom_config_dict,
                     use_precomputed_fake_quant, path)
        if type(mod) in mapping and getattr(mod, "qconfig", None) is not None:
            _warn_uncalibrated(mod, path)
        reassign[name] = swap_module(mod, mapping, custom_map, use_precomputed_fake_quant, path)
    for key, value in reassign.items():
        module._modules[key] = value
    return module


def convert(module: Module, mapping: Optional[dict[Any, Any]] = None, inplace: bool = False,
            remove_qconfig: bool = True, is_reference: bool = False,
            convert_custom_config_dict: Optional[dict[Any, Any]] = None,
            use_precomputed_fake_quant: bool = False) -> Module:
    """Swap every observed module for its quantized twin (from the mapping table).

    Parameters
    ----------
    module : a prepared and calibrated qops.nn.Module
    mapping : {float type: quantized type} (default: the static quantization table)
    inplace : bool, modify `module` instead of a copy
    remove_qconfig : bool, drop `qconfig` attributes and observers afterwards
    is_reference : must be False (qops has no reference modules)
    convert_custom_config_dict : {"observed_to_quantized_custom_module_class": {...}}
    use_precomputed_fake_quant : bool, passed to from_float where accepted

    Returns
    -------
    the converted model
    """
    _check_model(module, "convert")
    if not any(getattr(m, "qconfig", None) is not None for m in module.modules()):
        raise ValueError(f"convert: no module of {type(module).__name__} has a qconfig, so "
                         "nothing would be quantized; set qconfig and run prepare() and "
                         "calibration first")
    if mapping is None and not any(_is_activation_post_process(m) for m in module.modules()):
        # Static conversion needs the observers prepare() attaches; without them PyTorch
        # silently returns the float model.
        raise ValueError(f"convert: {type(module).__name__} has no observers; run "
                         "prepare(model) and calibrate it (or prepare_qat and train) before "
                         "convert()")
    if not inplace:
        module = copy.deepcopy(module)
    _convert(module, mapping, True, is_reference, convert_custom_config_dict,
             use_precomputed_fake_quant)
    if remove_qconfig:
        _remove_qconfig(module)
    return module


def quantize(model: Module, run_fn: Callable[..., Any], run_args: Any,
             mapping: Optional[dict[Any, Any]] = None, inplace: bool = False) -> Module:
    """Post-training static quantization: prepare, `run_fn(model, *run_args)`, convert.

    Parameters
    ----------
    model : float qops.nn.Module with qconfig set
    run_fn : function calibrating the prepared model (e.g. `default_eval_fn`)
    run_args : tuple of extra arguments for run_fn
    mapping : convert's mapping (default: static table)
    inplace : bool
    """
    if mapping is None:
        mapping = get_default_static_quant_module_mappings()
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    prepare(model, inplace=True)
    run_fn(model, *run_args)
    convert(model, mapping, inplace=True)
    return model


def _dtype_key(dtype):
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        dtype = np.dtype(dtype)
    name = getattr(dtype, "name", None) or str(dtype)
    name = str(name).replace("torch.", "").replace("qops.", "")
    return {"half": "float16", "float": "float32"}.get(name, name)


def quantize_dynamic(model: Module, qconfig_spec: Any = None, dtype: Any = None,
                     mapping: Optional[dict[Any, Any]] = None, inplace: bool = False) -> Module:
    """Dynamic quantization: int8 (or float16) weights, activations quantized per call.

    Parameters
    ----------
    model : float qops.nn.Module
    qconfig_spec : None (Linear, LSTM, GRU and the cells), a set of types / names (default
        qconfig of `dtype`), or a dict {type or name: QConfig}
    dtype : qops.qint8 (default) or float16 (weights stored as float16)
    mapping : {float type: dynamic type} (default: the dynamic table)
    inplace : bool
    """
    from qops.nn import Linear
    _check_model(model, "quantize_dynamic")
    key = _dtype_key("qint8" if dtype is None else dtype)
    defaults = {"qint8": default_dynamic_qconfig, "float16": float16_dynamic_qconfig,
                "quint8": float_qparams_weight_only_qconfig}
    if qconfig_spec is None:
        if key not in ("qint8", "float16"):
            raise ValueError(f"quantize_dynamic: no default settings for dtype {dtype!r}; "
                             "pass a qconfig_spec dict")
        # PyTorch's default: Linear and the recurrent layers (a fused LinearReLU stays float
        # unless named; nn.RNN has no dynamic module).
        from qops.nn import GRU, LSTM, GRUCell, LSTMCell, RNNCell
        qconfig_spec = dict.fromkeys((Linear, LSTM, GRU, LSTMCell, RNNCell, GRUCell),
                                     defaults[key])
    elif isinstance(qconfig_spec, (set, frozenset, list, tuple)):
        if key not in defaults:
            raise ValueError(f"quantize_dynamic: unknown dtype {dtype!r}; use qops.qint8 or "
                             "float16")
        qconfig_spec = dict(zip(qconfig_spec, itertools.repeat(defaults[key])))
    elif not isinstance(qconfig_spec, dict):
        raise TypeError("quantize_dynamic: qconfig_spec must be None, a set or a dict; got "
                        f"{type(qconfig_spec).__name__}")
    if mapping is None:
        mapping = get_default_dynamic_quant_module_mappings()
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    propagate_qconfig_(model, qconfig_spec)
    convert(model, mapping, inplace=True)
    return model


def prepare_qat(model: Module, mapping: Optional[dict[Any, Any]] = None,
                inplace: bool = False) -> Module:
    """Prepare a float model (train mode, qconfig set) for quantization-aware training.

    Parameters
    ----------
    model : qops.nn.Module in training mode with a QAT qconfig
    mapping : {float type: QAT type} (default: the QAT table)
    inplace : bool
    """
    _check_model(model, "prepare_qat")
    if not model.training:
        raise ValueError("prepare_qat only works on models in training mode; call model.train()")
    if mapping is None:
        mapping = get_default_qat_module_mappings()
    if not inplace:
        model = copy.deepcopy(model)
    propagate_qconfig_(model, qconfig_dict=None)
    if not any(getattr(m, "qconfig", None) for m in model.modules()):
        raise ValueError(f"prepare_qat: no module of {type(model).__name__} has a qconfig; set "
                         "model.qconfig = qops.quantization.get_default_qat_qconfig('x86')")
    convert(model, mapping=mapping, inplace=True, remove_qconfig=False)
    prepare(model, observer_non_leaf_module_list=set(mapping.values()), inplace=True)
    return model


def quantize_qat(model: Module, run_fn: Callable[..., Any], run_args: Any,
                 inplace: bool = False) -> Module:
    """Quantization-aware training: prepare_qat, `run_fn(model, *run_args)`, convert.

    Parameters
    ----------
    model : float qops.nn.Module with a QAT qconfig
    run_fn : the training function
    run_args : tuple of its extra arguments
    inplace : bool
    """
    if not inplace:
        model = copy.deepcopy(model)
    model.train()
    prepare_qat(model, inplace=True)
    run_fn(model, *run_args)
    convert(model, inplace=True)
    return model


def default_eval_fn(model: Module, calib_data: Any) -> None:
    """Run `model` on every input of `calib_data` (arrays, or (input, target) pairs).

    Parameters
    ----------
    model : the prepared model
    calib_data : iterable of inputs or of (input, target) tuples
    """
    for item in calib_data:
        x = item[0] if isinstance(item, (tuple, list)) else item
        model(x)
