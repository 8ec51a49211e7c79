"""`Module`, the base of every qops layer, and the containers (PyTorch's nn.Module, numpy inside).

Parameters are float32 numpy arrays registered by name; buffers are numpy arrays, QTensors or
Python scalars (a quantized module's `scale` and `zero_point`). Submodules assigned as attributes
are registered as children, so `named_modules()`, `state_dict()` and child swapping by name work
as in PyTorch.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import numbers
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

import numpy as np

from qops._qtensor import QTensor

if TYPE_CHECKING:
    from typing_extensions import Self

    from qops.nn._typing import Array, Tensor

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "Identity", "Flatten", "Dropout",
           "RemovableHandle", "register_module_type", "module_type_table"]

# Every Module subclass defined inside qops.nn, by qualified public name; qops.save/load use
# it to name module types, and refuse any type not in it.
_TYPES = {}


def register_module_type(cls: type[Module], name: Optional[str] = None) -> type[Module]:
    """Add a Module subclass to the table of types `qops.save` and `qops.load` accept.

    Parameters
    ----------
    cls : a Module subclass whose constructor arguments are JSON-friendly (numbers, strings,
        tuples, qops dtypes) and whose state lives in parameters, buffers and children
    name : the name written in saved files (default: "module.QualName")
    """
    if not (isinstance(cls, type) and issubclass(cls, Module)):
        raise TypeError(f"cls must be a qops.nn.Module subclass; got {cls!r}")
    name = name or f"{cls.__module__}.{cls.__qualname__}"
    old = _TYPES.get(name)
    if old is not None and old is not cls:
        raise ValueError(f"module type name {name!r} is already registered for {old!r}")
    _TYPES[name] = cls
    cls._qops_type_name = name
    return cls


def module_type_table() -> dict[str, type[Module]]:
    """A copy of the table {type name: class} of module types qops can save and load."""
    return dict(_TYPES)


def _public_module_name(modname):
    # qops.nn.quantized._modules -> qops.nn.quantized: users see classes under the package.
    parts = [p for p in modname.split(".") if not p.startswith("_")]
    if parts[-1] == "module":
        parts.pop()
    return ".".join(parts)


class RemovableHandle:
    """What `register_forward_hook` returns; `remove()` unregisters the hook."""

    _ids = itertools.count()

    def __init__(self, hooks: Any) -> None:
        self._hooks = hooks
        self.id = next(RemovableHandle._ids)

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _to_numpy(value):
    """A torch tensor (float or quantized) as a numpy array or QTensor; anything else as is."""
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        t = value.detach()
        if getattr(t, "is_quantized", False):
            from qops.nn.quantized._torch import qtensor_from_torch
            return qtensor_from_torch(t)
        return t.cpu().numpy()
    return value



class _Children(OrderedDict):
    """A module's children. Every change to any module's children bumps one count, so a plan
    that holds module objects (GraphModule's) checks in O(1) per call that no tree changed."""
    changes = 0

    def __setitem__(self, key, value):
        _Children.changes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        _Children.changes += 1
        super().__delitem__(key)

    # OrderedDict's C methods below do not go through __setitem__/__delitem__.
    def pop(self, *args):
        _Children.changes += 1
        return super().pop(*args)

    def popitem(self, last=True):
        _Children.changes += 1
        return super().popitem(last)

    def clear(self):
        _Children.changes += 1
        super().clear()

    def setdefault(self, key, default=None):
        _Children.changes += 1
        return super().setdefault(key, default)

    def update(self, *args, **kwargs):
        _Children.changes += 1
        super().update(*args, **kwargs)

class Module:
    """Base class of every qops layer: children, parameters, buffers, hooks, state_dict.

    Subclasses set their parameters with `register_parameter` (float32 arrays), their other
    state with `register_buffer`, assign submodules as attributes, and define `forward`.
    """

    _version = 1
    _qops_type_name = None
    # Public attributes a subclass saves by itself (qops.save skips them).
    _state_attrs = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _recording_init(init)
        if cls.__module__.startswith("qops.nn") and not cls.__name__.startswith("_"):
            register_module_type(cls, f"{_public_module_name(cls.__module__)}.{cls.__qualname__}")

    def __init__(self) -> None:
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent"] = set()
        d["_modules"] = _Children()
        d["_forward_hooks"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d.setdefault("_init_config", {})

    # -- attribute registration -----------------------------------------------------------
    def __getattr__(self, name):
        # Only called when normal lookup fails: parameters, buffers and children live in dicts.
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            s = d.get(store)
            if s is not None and name in s:
                return s[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        d = self.__dict__
        if "_modules" not in d:
            raise AttributeError("cannot assign attributes before Module.__init__() is called")
        params, buffers, modules = d["_parameters"], d["_buffers"], d["_modules"]
        if isinstance(value, Module):
            d.pop(name, None)
            params.pop(name, None)
            buffers.pop(name, None)
            modules[name] = value
        elif name in params:
            params[name] = None if value is None else _as_parameter(value, name)
        elif name in buffers:
            buffers[name] = _to_numpy(value)
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as child module "
                                f"'{name}' (a qops.nn.Module or None is required)")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name):
        for store in ("_parameters", "_buffers", "_modules"):
            s = self.__dict__[store]
            if name in s:
                del s[name]
                self.__dict__["_non_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def register_parameter(self, name: str, value: Any) -> None:
        """Register a float32 parameter (or None) under `name`."""
        self._check_new_name(name, "_parameters")
        self.__dict__.pop(name, None)
        self._parameters[name] = None if value is None else _as_parameter(value, name)

    def register_buffer(self, name: str, value: Any, persistent: bool = True) -> None:
        """Register a buffer (array, QTensor, scalar or None) under `name`.

        Parameters
        ----------
        name : str
        value : numpy array, QTensor, Python number or None
        persistent : bool, whether it goes into `state_dict()`
        """
        self._check_new_name(name, "_buffers")
        self.__dict__.pop(name, None)
        self._buffers[name] = _to_numpy(value)
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Optional[Module]) -> None:
        """Register `module` (a Module or None) as the child called `name`."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {type(module).__name__} is not a qops.nn.Module")
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"module name must be a non-empty string without '.'; got {name!r}")
        if hasattr(type(self), name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists on {type(self).__name__}")
        self.__dict__.pop(name, None)
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        self._modules[name] = module

    register_module = add_module

    def _check_new_name(self, name, store):
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"name must be a non-empty string without '.'; got {name!r}")
        for other in ("_parameters", "_buffers", "_modules"):
            if other != store and name in self.__dict__[other]:
                raise KeyError(f"'{name}' is already registered in {other[1:]}")

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path `target` ("" is this module)."""
        mod = self
        if target == "":
            return mod
        for part in target.split("."):
            children = mod.__dict__.get("_modules", {})
            if part not in children or children[part] is None:
                raise AttributeError(f"{type(mod).__name__} has no submodule '{part}' "
                                     f"(looking up '{target}')")
            mod = children[part]
        return mod

    def set_submodule(self, target: str, module: Module) -> None:
        """Replace the submodule at dotted path `target` with `module`."""
        if not target:
            raise ValueError("set_submodule needs a non-empty target")
        parent, _, name = target.rpartition(".")
        owner = self.get_submodule(parent)
        if name not in owner._modules:
            raise AttributeError(f"{type(owner).__name__} has no submodule '{name}'")
        owner.add_module(name, module)

    # -- traversal ------------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        """Yield (name, child) for each direct child."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo: Optional[set[Any]] = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """Yield (dotted name, module) for this module and every descendant, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name,
                                       remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def _named_members(self, store, prefix, recurse):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, v in m.__dict__[store].items():
                if v is None or id(v) in seen:
                    continue
                seen.add(id(v))
                yield (f"{mprefix}.{name}" if mprefix else name), v

    def named_parameters(self, prefix: str = "",
                         recurse: bool = True) -> Iterator[tuple[str, Array]]:
        """Yield (dotted name, float32 array) for every parameter."""
        yield from self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Array]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Array]]:
        """Yield (dotted name, value) for every buffer."""
        yield from self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Array]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[..., Any]) -> Self:
        """Call `fn(module)` on every child (recursively) then on this module; return self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # -- modes ----------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Self:
        """Set training mode on this module and its descendants; return self."""
        if not isinstance(mode, bool):
            raise TypeError(f"train(mode): mode must be a bool; got {mode!r}")
        self.__dict__["training"] = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> Self:
        """Set evaluation mode (same as `train(False)`); return self."""
        return self.train(False)

    def to(self, *args: Any, **kwargs: Any) -> Self:
        # Everything lives in host memory as numpy; accepted so torch-style code runs.
        return self

    def cpu(self) -> Self:
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        # qops has no autograd; accepted so code written for torch keeps working.
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None

    # -- hooks and call -------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable[..., Any], *,
                                  prepend: bool = False) -> RemovableHandle:
        """Call `hook(module, args)` before forward; a non-None result replaces the args.

        Parameters
        ----------
        hook : callable(module, args)
        prepend : bool, run it before the hooks already registered
        """
        return _add_hook(self._forward_pre_hooks, hook, prepend)

    def register_forward_hook(self, hook: Callable[..., Any], *,
                              prepend: bool = False) -> RemovableHandle:
        """Call `hook(module, args, output)` after forward; a non-None result replaces output.

        Parameters
        ----------
        hook : callable(module, args, output)
        prepend : bool, run it before the hooks already registered (as PyTorch's prepare
            does for observers)
        """
        return _add_hook(self._forward_hooks, hook, prepend)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        if not d["_forward_hooks"] and not d["_forward_pre_hooks"]:
            return self.forward(*args, **kwargs)
        for hook in list(d["_forward_pre_hooks"].values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        out = self.forward(*args, **kwargs)
        for hook in list(d["_forward_hooks"].values()):
            r = hook(self, args, out)
            if r is not None:
                out = r
        return out

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    # -- state ----------------------------------------------------------------------------
    def _save_to_state_dict(self, destination, prefix):
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                destination[prefix + name] = b

    def state_dict(self, destination: Optional[dict[Any, Any]] = None, prefix: str = "",
                   keep_vars: bool = False) -> dict[str, Any]:
        """An ordered {dotted name: value} of parameters and persistent buffers (copies)."""
        if destination is None:
            destination = OrderedDict()
        self._save_to_state_dict(destination, prefix)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination, prefix + name + ".", keep_vars=True)
        if not keep_vars and prefix == "":
            for k, v in destination.items():
                if isinstance(v, np.ndarray):
                    destination[k] = v.copy()
                elif isinstance(v, QTensor):
                    destination[k] = v.clone()
        return destination

    def _state_keys(self):
        """The keys `_load_from_state_dict` of this module expects (no prefix)."""
        d = OrderedDict()
        self._save_to_state_dict(d, "")
        return list(d)

    def _load_from_state_dict(self, state, prefix, errors):
        """Take this module's entries (those under `prefix`) out of `state`; report problems."""
        for name in self._state_keys():
            key = prefix + name
            if key not in state:
                errors["missing"].append(key)
                continue
            value = _to_numpy(state.pop(key))
            self._load_entry(name, value, key, errors)

    def _load_entry(self, name, value, key, errors):
        store = self._parameters if name in self._parameters else self._buffers
        current = store[name]
        if isinstance(current, np.ndarray):
            if isinstance(value, QTensor) or not isinstance(value, np.ndarray):
                value = np.asarray(value) if isinstance(value, numbers.Number) else value
            if not isinstance(value, np.ndarray):
                errors["bad"].append(f"{key}: expected an array, got {type(value).__name__}")
                return
            if value.shape != current.shape:
                errors["bad"].append(f"{key}: shape {value.shape} in the state_dict, "
                                     f"{current.shape} in the model")
                return
            store[name] = value.astype(current.dtype, copy=True)
        elif isinstance(current, QTensor):
            if not isinstance(value, QTensor):
                errors["bad"].append(f"{key}: expected a quantized tensor, got "
                                     f"{type(value).__name__}")
                return
            if value.shape != current.shape:
                errors["bad"].append(f"{key}: shape {value.shape} in the state_dict, "
                                     f"{current.shape} in the model")
                return
            store[name] = value.clone()
        else:
            if isinstance(value, np.ndarray) and value.size == 1:
                value = value.reshape(()).item()
            if isinstance(current, numbers.Number) and not isinstance(value, numbers.Number):
                errors["bad"].append(f"{key}: expected a number, got {type(value).__name__}")
                return
            store[name] = type(current)(value) if isinstance(current, numbers.Number) else value

    def load_state_dict(self, state_dict: dict[Any, Any], strict: bool = True) -> Any:
        """Copy values from `state_dict` into this module and its descendants.

        Parameters
        ----------
        state_dict : mapping of dotted names to arrays / QTensors / numbers (torch tensors are
            converted)
        strict : bool, whether keys missing from or unexpected in `state_dict` are errors

        Returns
        -------
        (missing_keys, unexpected_keys)
        """
        if not hasattr(state_dict, "items"):
            raise TypeError(f"state_dict must be a mapping; got {type(state_dict).__name__}")
        state = OrderedDict(state_dict)
        errors = {"missing": [], "bad": []}
        for prefix, m in self.named_modules():
            m._load_from_state_dict(state, prefix + "." if prefix else "", errors)
        unexpected = list(state)
        problems = list(errors["bad"])
        if strict:
            if errors["missing"]:
                problems.insert(0, "missing keys: " + ", ".join(errors["missing"]))
            if unexpected:
                problems.insert(0, "unexpected keys: " + ", ".join(unexpected))
        if problems:
            raise ValueError(f"error loading state_dict into {type(self).__name__}: "
                             + "; ".join(problems))
        for m in self.modules():
            m._after_load()
        return errors["missing"], unexpected

    def _after_load(self):
        """Rebuild derived state (packed weights) after new values were loaded."""

    # -- description ----------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            mod_str = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {mod_str}")
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def _config(self):
        """The constructor arguments this module was built with (for qops.save)."""
        return dict(self.__dict__.get("_init_config", {}))


def _add_hook(hooks, hook, prepend):
    if not callable(hook):
        raise TypeError(f"hook must be callable; got {type(hook).__name__}")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def _public_attrs(module):
    """The plain attributes of a module a user may set (not its tensors, children or caches)."""
    return {k: v for k, v in module.__dict__.items()
            if not k.startswith("_") and k != "training" and k not in module._state_attrs}


def _recording_init(init):
    sig = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        # The outermost constructor records its arguments: qops.save rebuilds from them.
        outer = "_init_config" not in self.__dict__
        if outer:
            try:
                bound = sig.bind(self, *args, **kwargs)
                cfg = dict(bound.arguments)
                cfg.pop("self", None)
                for pname, p in sig.parameters.items():
                    if p.kind is p.VAR_KEYWORD and pname in cfg:
                        cfg.update(cfg.pop(pname))
            except TypeError:
                cfg = {}
            object.__setattr__(self, "_init_config", cfg)
        init(self, *args, **kwargs)
        if outer:
            # What the constructor left in the public attributes: qops.save stores (or refuses)
            # whatever differs from this later, instead of silently losing it.
            object.__setattr__(self, "_init_attrs", _public_attrs(self))

    __init__.__signature__ = sig
    return __init__


def _as_parameter(value, name):
    value = _to_numpy(value)
    if isinstance(value, QTensor):
        raise TypeError(f"parameter '{name}' must be a float array, not a QTensor")
    a = np.asarray(value)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"parameter '{name}' must be a float array; got dtype {a.dtype}")
    return np.array(a, dtype=np.float32, copy=a.dtype != np.float32 or not a.flags.writeable)


# -- containers and trivial layers ---------------------------------------------------------
class Sequential(Module):
    """Run children in order; `Sequential(a, b)` or `Sequential(OrderedDict(...))`."""

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], (dict, OrderedDict)):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def _config(self):
        return {}

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._modules.values())

    def __getitem__(self, idx: int) -> Any:
        keys = list(self._modules)
        if isinstance(idx, slice):
            return Sequential(OrderedDict((k, self._modules[k]) for k in keys[idx]))
        return self._modules[keys[_index(idx, len(keys))]]

    def __setitem__(self, idx: int, module: Module) -> None:
        keys = list(self._modules)
        self.add_module(keys[_index(idx, len(keys))], module)

    def __delitem__(self, idx: int) -> None:
        keys = list(self._modules)
        del self._modules[keys[_index(idx, len(keys))]]

    def append(self, module: Module) -> Self:
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input: Tensor) -> Any:
        for m in self._modules.values():
            input = m(input)
        return input


def _index(idx, n):
    import operator
    i = operator.index(idx)
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of range for {n} modules")
    return i % n


class ModuleList(Module):
    """A list of modules registered as children "0", "1", ..."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def _config(self):
        return {}

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._modules.values())

    def __getitem__(self, idx: int) -> Any:
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self)))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_index(idx, len(self))), module)

    def append(self, module: Module) -> Self:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Any) -> Self:
        for m in modules:
            self.append(m)
        return self


class ModuleDict(Module):
    """A dict of modules registered as children under their keys."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        for k, m in (modules or {}).items():
            self.add_module(k, m)

    def _config(self):
        return {}

    def __getitem__(self, key: str) -> Any:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __contains__(self, key):
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._modules)

    def keys(self) -> Iterable[str]:
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        return self._modules.values()


class Identity(Module):
    """Return the input unchanged (float or quantized)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.__dict__["_init_config"] = {}

    def forward(self, input: Tensor) -> Tensor:
        return input


class Flatten(Module):
    """Flatten dimensions start_dim..end_dim (float arrays and QTensors)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, QTensor):
            return input.flatten(self.start_dim, self.end_dim)
        x = np.asarray(input)
        nd = x.ndim
        s, e = self.start_dim % nd, self.end_dim % nd
        return x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:]) if nd else x.reshape(1)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Dropout(Module):
    """Dropout: identity in eval mode; in training mode zeroes elements with probability p."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability p must be in [0, 1]; got {p}")
        self.p = p
        self.inplace = inplace
        self._rng = np.random.default_rng()

    def forward(self, input: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or isinstance(input, QTensor):
            return input
        x = np.asarray(input, dtype=np.float32)
        if self.p == 1.0:
            return np.zeros_like(x)
        keep = self._rng.random(x.shape) >= self.p
        return (x * keep * np.float32(1.0 / (1.0 - self.p))).astype(np.float32)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
