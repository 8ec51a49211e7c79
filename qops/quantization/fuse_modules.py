"""fuse_modules: merge conv/linear + batch norm (+ relu) into one module (docs/semantics.md §16).

In eval mode batch norm is folded into the conv or linear weights (float32, as
`torch.nn.utils.fusion`); the fused module replaces the first module of each group and the
others become `Identity`. In QAT mode (`fuse_modules_qat`, train mode) the modules are grouped
into `qops.nn.intrinsic` fused modules without folding. The fuser-method table
(`get_fuser_method`) is PyTorch's and can be extended through
`fuse_custom_config_dict["additional_fuser_method_mapping"]`.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, Optional

from qops.nn import _layers as fl
from qops.nn import intrinsic as nni
from qops.nn.module import Identity
from qops.nn.utils import fusion as _fusion

if TYPE_CHECKING:
    from qops.nn.module import Module

__all__ = ["fuse_modules", "fuse_modules_qat", "fuse_known_modules", "get_fuser_method",
           "fuse_conv_bn", "fuse_conv_bn_relu", "fuse_linear_bn", "DEFAULT_OP_LIST_TO_FUSER_METHOD"]


def _same_mode(a, b):
    if a.training != b.training:
        raise ValueError(f"{type(a).__name__} and {type(b).__name__} must both be in the same "
                         "mode (train or eval)")


def fuse_conv_bn(is_qat: bool, conv: Module, bn: Module) -> Module:
    """Conv + BatchNorm: folded conv (eval) or nni.ConvBn{1,2,3}d (QAT).

    Parameters
    ----------
    is_qat : bool, QAT fusion (no folding)
    conv : Conv1d/2d/3d
    bn : BatchNorm1d/2d/3d with num_features == conv.out_channels
    """
    _same_mode(conv, bn)
    fused_cls = {fl.Conv1d: nni.ConvBn1d, fl.Conv2d: nni.ConvBn2d, fl.Conv3d: nni.ConvBn3d}
    if is_qat:
        if bn.num_features != conv.out_channels:
            raise ValueError("Output channel of Conv must match num_features of BatchNorm")
        if not (bn.affine and bn.track_running_stats):
            raise ValueError("Only support fusing BatchNorm with affine set to True and "
                             "track_running_stats set to True")
        return fused_cls[type(conv)](conv, bn)
    return _fusion.fuse_conv_bn_eval(conv, bn)


def fuse_conv_bn_relu(is_qat: bool, conv: Module, bn: Module, relu: bool) -> Module:
    """Conv + BatchNorm + ReLU: nni.ConvReLU of the folded conv (eval) or nni.ConvBnReLU (QAT).

    Parameters
    ----------
    is_qat : bool
    conv, bn, relu : the three modules, in order
    """
    _same_mode(conv, bn)
    if is_qat:
        if bn.num_features != conv.out_channels:
            raise ValueError("Output channel of Conv must match num_features of BatchNorm")
        if not (bn.affine and bn.track_running_stats):
            raise ValueError("Only support fusing BatchNorm with affine set to True and "
                             "track_running_stats set to True")
        cls = {fl.Conv1d: nni.ConvBnReLU1d, fl.Conv2d: nni.ConvBnReLU2d,
               fl.Conv3d: nni.ConvBnReLU3d}[type(conv)]
        return cls(conv, bn, relu)
    cls = {fl.Conv1d: nni.ConvReLU1d, fl.Conv2d: nni.ConvReLU2d,
           fl.Conv3d: nni.ConvReLU3d}[type(conv)]
    return cls(_fusion.fuse_conv_bn_eval(conv, bn), relu)


def fuse_linear_bn(is_qat: bool, linear: Module, bn: Module) -> Module:
    """Linear + BatchNorm1d: folded linear (eval) or nni.LinearBn1d (QAT).

    Parameters
    ----------
    is_qat : bool
    linear : Linear
    bn : BatchNorm1d with num_features == linear.out_features
    """
    _same_mode(linear, bn)
    if is_qat:
        if bn.num_features != linear.out_features:
            raise ValueError("Output features of Linear must match num_features of BatchNorm1d")
        if not (bn.affine and bn.track_running_stats):
            raise ValueError("Only support fusing BatchNorm1d with affine set to True and "
                             "track_running_stats set to True")
        return nni.LinearBn1d(linear, bn)
    return _fusion.fuse_linear_bn_eval(linear, bn)


def _sequential_wrapper2(sequential):
    def fuser_method(is_qat, m1, m2):
        return sequential(m1, m2)
    fuser_method.__name__ = f"fuse_{sequential.__name__}"
    return fuser_method


DEFAULT_OP_LIST_TO_FUSER_METHOD = {
    (fl.Conv1d, fl.BatchNorm1d): fuse_conv_bn,
    (fl.Conv1d, fl.BatchNorm1d, fl.ReLU): fuse_conv_bn_relu,
    (fl.Conv2d, fl.BatchNorm2d): fuse_conv_bn,
    (fl.Conv2d, fl.BatchNorm2d, fl.ReLU): fuse_conv_bn_relu,
    (fl.Conv3d, fl.BatchNorm3d): fuse_conv_bn,
    (fl.Conv3d, fl.BatchNorm3d, fl.ReLU): fuse_conv_bn_relu,
    (fl.Conv1d, fl.ReLU): _sequential_wrapper2(nni.ConvReLU1d),
    (fl.Conv2d, fl.ReLU): _sequential_wrapper2(nni.ConvReLU2d),
    (fl.Conv3d, fl.ReLU): _sequential_wrapper2(nni.ConvReLU3d),
    (fl.Linear, fl.BatchNorm1d): fuse_linear_bn,
    (fl.Linear, fl.ReLU): _sequential_wrapper2(nni.LinearReLU),
    (fl.BatchNorm2d, fl.ReLU): _sequential_wrapper2(nni.BNReLU2d),
    (fl.BatchNorm3d, fl.ReLU): _sequential_wrapper2(nni.BNReLU3d),
}


def get_fuser_method(op_list: Any, additional_fuser_method_mapping: Optional[dict[Any, Any]] = None
                     ) -> Optional[Callable[..., Any]]:
    """The fuser method for a tuple of module types, or None.

    Parameters
    ----------
    op_list : tuple of module classes, in forward order
    additional_fuser_method_mapping : dict ``{tuple of classes: fn(is_qat, *mods)}`` tried first
    """
    table = dict(DEFAULT_OP_LIST_TO_FUSER_METHOD)
    table.update(additional_fuser_method_mapping or {})
    return table.get(tuple(op_list))


def fuse_known_modules(
        mod_list: Any,
        is_qat: bool,
        additional_fuser_method_mapping: Optional[dict[Any, Any]] = None) -> list[Module]:
    """Fuse a list of modules; return the new list (fused module, then Identity for the rest).

    Parameters
    ----------
    mod_list : list of modules in forward order
    is_qat : bool
    additional_fuser_method_mapping : dict of extra fuser methods
    """
    types = tuple(type(m) for m in mod_list)
    fuser = get_fuser_method(types, additional_fuser_method_mapping)
    if fuser is None:
        names = ", ".join(t.__name__ for t in types)
        known = "; ".join("(" + ", ".join(t.__name__ for t in k) + ")"
                          for k in DEFAULT_OP_LIST_TO_FUSER_METHOD)
        raise NotImplementedError(f"Cannot fuse modules: ({names}); fusable patterns: {known}")
    fused = fuser(is_qat, *mod_list)
    # Hooks move with the modules they wrap: pre-hooks of the first, post-hooks of the last.
    for hook in list(mod_list[0]._forward_pre_hooks.values()):
        fused.register_forward_pre_hook(hook)
    mod_list[0]._forward_pre_hooks.clear()
    for hook in list(mod_list[-1]._forward_hooks.values()):
        fused.register_forward_hook(hook)
    mod_list[-1]._forward_hooks.clear()
    new = [fused]
    for _ in mod_list[1:]:
        ident = Identity()
        ident.train(mod_list[0].training)
        new.append(ident)
    return new


def _get_module(model, name):
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise AttributeError(f"fuse_modules: {type(model).__name__} has no submodule named "
                             f"{name!r}") from None


def _fuse_group(model, names, is_qat, fuser_func, custom):
    if not isinstance(names, (list, tuple)) or not names or \
            not all(isinstance(n, str) for n in names):
        raise TypeError(f"fuse_modules: each group must be a list of module names; got {names!r}")
    if len(names) < 2:
        raise ValueError(f"fuse_modules: a group needs at least two modules; got {list(names)}")
    mods = [_get_module(model, n) for n in names]
    extra = (custom or {}).get("additional_fuser_method_mapping", {})
    try:
        new = fuser_func(mods, is_qat, extra)
    except (NotImplementedError, ValueError, TypeError) as e:
        raise type(e)(f"fuse_modules: cannot fuse {list(names)}: {e}") from None
    for n, m in zip(names, new):
        model.set_submodule(n, m)


def _fuse_modules(model, modules_to_fuse, is_qat, inplace=False, fuser_func=fuse_known_modules,
                  fuse_custom_config_dict=None):
    if not inplace:
        model = copy.deepcopy(model)
    if modules_to_fuse and all(isinstance(m, str) for m in modules_to_fuse):
        _fuse_group(model, modules_to_fuse, is_qat, fuser_func, fuse_custom_config_dict)
    else:
        for group in modules_to_fuse:
            _fuse_group(model, group, is_qat, fuser_func, fuse_custom_config_dict)
    return model


def fuse_modules(model: Module, modules_to_fuse: Any, inplace: bool = False,
                 fuser_func: Callable[..., Any] = fuse_known_modules,
                 fuse_custom_config_dict: Optional[dict[Any, Any]] = None) -> Module:
    """Fuse groups of modules of an eval-mode model (batch norm folded into the weights).

    Parameters
    ----------
    model : qops.nn.Module
    modules_to_fuse : list of module names (one group) or list of such lists
    inplace : bool, modify `model` instead of a copy
    fuser_func : fn(mod_list, is_qat, additional_mapping) -> new mod_list
    fuse_custom_config_dict : {"additional_fuser_method_mapping": {types: fn}}

    Returns
    -------
    the fused model
    """
    return _fuse_modules(model, modules_to_fuse, False, inplace, fuser_func,
                         fuse_custom_config_dict)


def fuse_modules_qat(model: Module, modules_to_fuse: Any, inplace: bool = False,
                     fuser_func: Callable[..., Any] = fuse_known_modules,
                     fuse_custom_config_dict: Optional[dict[Any, Any]] = None) -> Module:
    """Fuse groups of modules for QAT (train mode): fused modules, batch norm kept.

    Parameters
    ----------
    model, modules_to_fuse, inplace, fuser_func, fuse_custom_config_dict : as `fuse_modules`
    """
    return _fuse_modules(model, modules_to_fuse, True, inplace, fuser_func,
                         fuse_custom_config_dict)
