"""qops.save / qops.load: a whole model in one .npz file, without pickle.

The file is a numpy .npz archive. Entry "__qops__" holds a JSON description: a format name and
version, and the module tree, each node naming its type from qops' module table
(`qops.nn.module_type_table()`), its constructor arguments, its training flag, its state
(arrays by reference to other entries of the archive, QTensors as integers plus qparams) and
its children. Loading uses `np.load(allow_pickle=False)` and rebuilds only types from the
table, so a file cannot run code.
"""
import json
import math
import numbers
import os
import zipfile

import numpy as np

from qops._dtypes import QDtype, as_qdtype, as_qscheme
from qops._qtensor import (
    QTensor,
    make_per_channel_quantized_tensor,
    make_per_tensor_quantized_tensor,
)

__all__ = ["save", "load", "LoadError", "FORMAT", "VERSION"]

FORMAT = "qops.nn.model"
VERSION = 1
_META = "__qops__"


class _Writer:
    def __init__(self):
        self.arrays = {}

    def array(self, a):
        key = f"a{len(self.arrays)}"
        a = np.asarray(a)
        if a.dtype.hasobject:
            raise TypeError("object arrays cannot be saved")
        # (np.ascontiguousarray would turn 0-d arrays into 1-d ones.)
        self.arrays[key] = a if a.flags.c_contiguous else a.copy(order="C")
        return key


def _encode_config(value, where):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, QDtype):
        return {"qdtype": value.name}
    if isinstance(value, tuple):
        return {"tuple": [_encode_config(v, where) for v in value]}
    if isinstance(value, list):
        return [_encode_config(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode_config(v, where) for k, v in value.items()}}
    raise TypeError(f"qops.save: cannot save constructor argument of type "
                    f"{type(value).__name__} ({where})")


def _decode_config(value, where):
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, list):
        return [_decode_config(v, where) for v in value]
    if isinstance(value, dict) and len(value) == 1:
        (kind, v), = value.items()
        if kind == "qdtype":
            return as_qdtype(v)
        if kind == "tuple" and isinstance(v, list):
            return tuple(_decode_config(x, where) for x in v)
        if kind == "dict" and isinstance(v, dict):
            return {k: _decode_config(x, where) for k, x in v.items()}
    raise _Bad(f"malformed constructor argument {value!r} ({where})")


def _encode_value(value, w, where):
    if value is None:
        return None
    if isinstance(value, QTensor):
        d = {"int": w.array(value._int), "dtype": value.dtype.name,
             "qscheme": value.qscheme().name}
        if value._axis is None:
            d.update(scale=float(value._scale), zero_point=int(value._zero_point))
        else:
            d.update(scales=w.array(np.asarray(value._scales, np.float64)),
                     zero_points=w.array(np.asarray(value._zero_points, np.int64)),
                     axis=int(value._axis))
        return {"qtensor": d}
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return {"array": w.array(value)}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, numbers.Integral):
        return {"int": int(value)}
    if isinstance(value, numbers.Real):
        return {"float": float(value)}
    raise TypeError(f"qops.save: cannot save state of type {type(value).__name__} ({where})")


def _changed_attrs(m, where):
    """Public attributes set or changed after construction, encoded; refuse what can't be."""
    from qops.nn.module import _public_attrs
    at_init = m.__dict__.get("_init_attrs")
    if at_init is None:
        return {}
    out = {}
    for k, v in _public_attrs(m).items():
        if k in at_init and (at_init[k] is v or _equal_config(at_init[k], v)):
            continue
        try:
            out[k] = _encode_config(v, f"{where}: attribute {k!r}")
        except TypeError:
            raise TypeError(f"qops.save: module '{where}' has attribute {k!r} (a "
                            f"{type(v).__name__}) set after it was built, which a model file "
                            f"cannot hold; delete it before saving, or keep it in a buffer "
                            f"(register_buffer)") from None
    return out


def _equal_config(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:   # noqa: BLE001 - arrays and odd types: treat as changed
        return False


def _encode_module(m, w, path):
    from qops.nn.module import _TYPES
    where = path or "<root>"
    name = type(m)._qops_type_name
    if name is None or _TYPES.get(name) is not type(m):
        raise TypeError(f"qops.save: module '{where}' has type {type(m).__module__}."
                        f"{type(m).__qualname__}, which is not in qops' module table; only "
                        f"qops.nn types (or types added with qops.nn.register_module_type) "
                        f"can be saved")
    config = {k: _encode_config(v, f"{where}: argument {k!r}") for k, v in m._config().items()}
    state = {}
    own = {}
    m._save_to_state_dict(own, "")
    for k, v in own.items():
        state[k] = _encode_value(v, w, f"{where}: {k!r}")
    children = {}
    for cname, child in m._modules.items():
        cpath = f"{path}.{cname}" if path else cname
        children[cname] = None if child is None else _encode_module(child, w, cpath)
    node = {"type": name, "config": config, "training": bool(m.training), "state": state,
            "children": children}
    attrs = _changed_attrs(m, where)
    if attrs:
        node["attrs"] = attrs
    graph = getattr(m, "_graph_data", None)
    if graph is not None:
        # A captured graph is data too: node kinds, targets named from a fixed table, args.
        node["graph"] = graph()
    return node


def save(module, path):
    """Save a qops model (structure, weights, qparams) to `path` as one .npz file.

    Parameters
    ----------
    module : qops.nn.Module built from qops.nn types (quantized, float, fused, dynamic)
    path : str or os.PathLike, the file to write (written as given; no suffix is added)
    """
    from qops.nn.module import Module
    if not isinstance(module, Module):
        raise TypeError(f"qops.save: module must be a qops.nn.Module; got {type(module).__name__}")
    import qops
    w = _Writer()
    tree = _encode_module(module, w, "")
    meta = {"format": FORMAT, "version": VERSION, "qops_version": qops.__version__,
            "model": tree}
    arrays = dict(w.arrays)
    arrays[_META] = np.array(json.dumps(meta))
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)


class LoadError(ValueError):
    """`qops.load` could not load a file: the message names the file and what is wrong."""


class _Bad(Exception):
    # What is wrong with the file; load() adds the file's name and raises a LoadError.
    pass


# A description ("__qops__") larger than this is not one qops wrote for any sane model.
_MAX_META_BYTES = 64 << 20
# Nesting of the description (JSON levels): three per module level, far above real models,
# and far below the recursion limit the decoders (and json) would otherwise hit.
_MAX_NESTING = 192
# Deflate cannot expand data more than ~1032 times: an entry claiming more is corrupt (and
# would have numpy allocate its claimed size before the data runs out).
_MAX_RATIO = 1100
# Elements a module's constructor may allocate beyond what the file stores for it.
_SLACK = 1 << 16


def _describe(e):
    """An exception as text for a LoadError, without numpy's advice to load with pickle."""
    msg = str(e)
    if "pickle" in msg.lower():
        msg = "unreadable .npy header or data"
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


class _Archive:
    """The .npy entries of a zip archive, read without pickle and within declared sizes."""

    def __init__(self, zf):
        self.zf = zf
        self.names = {}
        for info in zf.infolist():
            if info.filename.endswith(".npy"):
                self.names.setdefault(info.filename[:-4], info)
        self.headers = {}

    def header(self, key, where):
        """(shape, dtype, info) of entry `key`, checked against the entry's size."""
        if not isinstance(key, str) or key == _META and where != "the description" \
                or key not in self.names:
            raise _Bad(f"array {key!r} referenced by {where} is missing")
        hit = self.headers.get(key)
        if hit is not None:
            return hit
        info = self.names[key]
        if info.file_size > _MAX_RATIO * max(info.compress_size, 1) + 4096:
            raise _Bad(f"array {key!r} referenced by {where} cannot be read (its entry claims "
                       f"{info.file_size} bytes from {info.compress_size} compressed)")
        try:
            with self.zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise _Bad(f"array {key!r} referenced by {where} cannot be read (.npy "
                               f"format version {version})")
                offset = f.tell()
        except _Bad:
            raise
        except Exception as e:
            raise _Bad(f"array {key!r} referenced by {where} cannot be read "
                       f"({_describe(e)})") from None
        if dtype.hasobject:
            raise _Bad(f"array {key!r} referenced by {where} cannot be read (it holds Python "
                       f"objects; qops files hold numbers only)")
        if any(d < 0 for d in shape):
            raise _Bad(f"array {key!r} referenced by {where} cannot be read (shape {shape})")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if offset + nbytes != info.file_size:
            raise _Bad(f"array {key!r} referenced by {where} cannot be read (its header "
                       f"declares {shape} {dtype}, {nbytes} bytes, but the entry holds "
                       f"{info.file_size - offset})")
        hit = self.headers[key] = (tuple(shape), dtype, info)
        return hit

    def array(self, key, where):
        """The array of entry `key` (its header checked first)."""
        self.header(key, where)
        try:
            with self.zf.open(self.names[key]) as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except Exception as e:
            raise _Bad(f"array {key!r} referenced by {where} cannot be read "
                       f"({_describe(e)})") from None


def _bad_attrs(where):
    raise _Bad(f"bad attributes at {where}")


def _need(d, key, types, where):
    types = types if isinstance(types, tuple) else (types,)
    if not isinstance(d, dict) or key not in d or not isinstance(d[key], types) \
            or (isinstance(d[key], bool) and bool not in types):
        raise _Bad(f"{where} lacks a valid {key!r}")
    return d[key]


def _nesting(value):
    """The JSON nesting depth of `value`, without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > _MAX_NESTING:
            break
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
    return deepest


class _Value:
    """A state entry as the file describes it; its arrays are read by `read()` only."""

    def __init__(self, enc, ar, where):
        self.where = where
        self.kind = None
        self.shape = None
        self.numel = 0
        if enc is None:
            return
        if not isinstance(enc, dict) or len(enc) != 1:
            raise _Bad(f"bad value at {where}")
        (kind, v), = enc.items()
        self.kind, self.v = kind, v
        if kind == "array":
            self.shape, dtype, _ = ar.header(v, where)
            self.numel = int(np.prod(self.shape, dtype=object))
        elif kind in ("int", "float", "bool"):
            if isinstance(v, bool) != (kind == "bool") or not isinstance(v, (int, float)) \
                    or kind == "int" and not isinstance(v, int):
                raise _Bad(f"bad number at {where}")
        elif kind == "qtensor":
            self._qtensor_header(v, ar, where)
        else:
            raise _Bad(f"unknown value kind {kind!r} at {where}")

    def _qtensor_header(self, v, ar, where):
        try:
            self.qdtype = as_qdtype(_need(v, "dtype", str, where))
            self.qscheme = as_qscheme(_need(v, "qscheme", str, where))
        except TypeError as e:
            raise _Bad(f"{e} at {where}") from None
        shape, dtype, _ = ar.header(_need(v, "int", str, where), where)
        if dtype != self.qdtype.storage:
            raise _Bad(f"{where} has {dtype} integers for dtype {self.qdtype.name}")
        self.shape = shape
        self.numel = int(np.prod(shape, dtype=object))
        per_channel = "axis" in v
        if per_channel != self.qscheme.per_channel:
            have = "per-channel (axis, scales, zero_points)" if per_channel else \
                "per-tensor (scale, zero_point)"
            raise _Bad(f"{where} has qscheme {self.qscheme.name} with {have} qparams")
        if per_channel:
            axis = _need(v, "axis", int, where)
            if not -len(shape) <= axis < len(shape):
                raise _Bad(f"{where} has axis {axis} for shape {shape}")
            for name in ("scales", "zero_points"):
                qshape, qdtype, _ = ar.header(_need(v, name, str, where), where)
                if qshape != (shape[axis],) or qdtype.kind not in "fiu":
                    raise _Bad(f"{where} has {name} of shape {qshape} ({qdtype}) for "
                               f"{shape[axis]} channels")
        else:
            _need(v, "scale", (int, float), where)
            _need(v, "zero_point", int, where)

    def read(self, ar):
        """The value itself: an array, a QTensor or a number."""
        kind, v, where = self.kind, getattr(self, "v", None), self.where
        if kind is None:
            return None
        if kind == "array":
            return ar.array(v, where)
        if kind in ("int", "float", "bool"):
            return {"int": int, "float": float, "bool": bool}[kind](v)
        data = ar.array(v["int"], where)
        try:
            if self.qscheme.per_channel:
                t = make_per_channel_quantized_tensor(
                    data, ar.array(v["scales"], where), ar.array(v["zero_points"], where),
                    v["axis"])
            else:
                t = make_per_tensor_quantized_tensor(data, v["scale"], v["zero_point"])
        except (TypeError, ValueError) as e:
            raise _Bad(f"{e} at {where}") from None
        t._qscheme = self.qscheme
        return t


def _dims(v):
    """The ints a size argument names (an int or a sequence of them); others count 0."""
    items = v if isinstance(v, (list, tuple)) else (v,)
    out = []
    for x in items:
        try:
            out.append(max(int(x), 0))
        except (TypeError, ValueError, OverflowError):
            out.append(0)
    return out


def _declared_numel(cls, config):
    """An upper bound of the elements the constructor of `cls` allocates for `config`.

    Read from PyTorch's size arguments (features, channels, kernel, normalized shape), with
    the class's defaults; 0 for a type without them (user types are trusted).
    """
    import inspect

    from qops.nn.quantized import _modules as nnq
    try:
        bound = inspect.signature(cls).bind_partial(**config)
    except (TypeError, ValueError):
        return 0                   # the constructor refuses these arguments by itself
    bound.apply_defaults()
    a = bound.arguments
    prod = math.prod
    if "in_features" in a and "out_features" in a:
        return prod(_dims(a["in_features"]) + _dims(a["out_features"]))
    if "in_channels" in a and "out_channels" in a and "kernel_size" in a:
        groups = max(_dims(a.get("groups", 1))[0], 1) if len(_dims(a.get("groups", 1))) == 1 \
            else 1
        return prod(_dims(a["out_channels"]) + [_dims(a["in_channels"])[0] // groups]
                    + _dims(a["kernel_size"]))
    always = issubclass(cls, nnq._QNorm)      # the quantized norms always hold weight, bias
    if "normalized_shape" in a:
        return prod(_dims(a["normalized_shape"])) \
            if always or a.get("elementwise_affine", True) else 0
    for key in ("num_features", "num_channels"):
        if key in a:
            used = always or a.get("affine", True) or a.get("track_running_stats", False)
            return _dims(a[key])[0] if used else 0
    if "num_embeddings" in a and "embedding_dim" in a:
        # (4-bit rows store two values a byte)
        return prod(_dims(a["num_embeddings"]) + _dims(a["embedding_dim"])) // 2
    if "input_size" in a and "hidden_size" in a:
        # one gate's weights of the first layer and one hidden-to-hidden weight of every layer
        # and direction: a lower bound of what any of the recurrent types stores
        i, h = _dims(a["input_size"])[0], _dims(a["hidden_size"])[0]
        real = _dims(a.get("proj_size", 0) or h)[0]
        layers = _dims(a.get("num_layers", 1))[0] * (2 if a.get("bidirectional") else 1)
        return h * i + max(layers, 1) * h * real
    if "d_model" in a and "nhead" in a and getattr(cls, "_weights_in_children", False):
        # attention's four projections and the two feed-forward weights
        d, ff = _dims(a["d_model"])[0], _dims(a.get("dim_feedforward", 2048))[0]
        return 4 * d * d + 2 * d * ff
    if "embed_dim" in a and "num_heads" in a:
        e = _dims(a["embed_dim"])[0]
        return e * (e + _dims(a.get("kdim") or e)[0] + _dims(a.get("vdim") or e)[0])
    return 0


class _Plan:
    """One module of the file: its type, arguments, state entries and children, checked."""

    def __init__(self, node, ar, path):
        from qops.nn.module import _TYPES
        self.path = path
        where = self.where = f"module '{path or '<root>'}'"
        name = self.name = _need(node, "type", str, where)
        cls = self.cls = _TYPES.get(name)
        if cls is None:
            raise _Bad(f"unknown module type {name!r} at {where}; it is not in qops' module "
                       f"table (qops.nn.module_type_table())")
        self.config = {}
        for k, v in _need(node, "config", dict, where).items():
            self.config[k] = _decode_config(v, f"{where}: argument {k!r}")
        self.training = node.get("training", False)
        if not isinstance(self.training, bool):
            raise _Bad(f"bad training flag at {where}")
        self.state = {}
        for k, enc in _need(node, "state", dict, where).items():
            if not k or "." in k:
                raise _Bad(f"bad state key {k!r} at {where}")
            self.state[k] = _Value(enc, ar, f"{where}, {k!r}")
        self.attrs = {}
        for k, v in node.get("attrs", {}).items() if isinstance(node.get("attrs", {}), dict) \
                else _bad_attrs(where):
            if not (isinstance(k, str) and k.isidentifier() and not k.startswith("_")):
                raise _Bad(f"bad attribute name {k!r} at {where}")
            if hasattr(self.cls, k) or k == "training":
                raise _Bad(f"attribute {k!r} at {where} would replace a member of {name}")
            self.attrs[k] = _decode_config(v, f"{where}: attribute {k!r}")
        self.graph = node.get("graph")
        if self.graph is not None and not isinstance(self.graph, list):
            raise _Bad(f"bad graph at {where}")
        self.children = {}
        for cname, cnode in _need(node, "children", dict, where).items():
            if not cname or "." in cname:
                raise _Bad(f"bad child name {cname!r} at {where}")
            cpath = f"{path}.{cname}" if path else cname
            self.children[cname] = None if cnode is None else _Plan(cnode, ar, cpath)

    def build(self):
        """The module (children first), after checking that its arguments fit the file."""
        from qops.nn.module import Module, ModuleDict, ModuleList, Sequential
        built = {c: None if p is None else p.build() for c, p in self.children.items()}
        cls, where = self.cls, self.where
        if issubclass(cls, (Sequential, ModuleList, ModuleDict)):
            if self.config:
                raise _Bad(f"container {where} has arguments")
            m = cls.__new__(cls)
            Module.__init__(m)
            m.__dict__["_init_config"] = {}
        else:
            stored = self.stored_numel(getattr(cls, "_weights_in_children", False))
            declared = _declared_numel(cls, self.config)
            if declared > stored + _SLACK:
                raise _Bad(f"{where} ({self.name}) declares {declared} elements with its "
                           f"arguments but the file stores {stored} for it: refusing to build "
                           f"it")
            try:
                m = cls(**self.config)
            except Exception as e:
                raise _Bad(f"cannot build {self.name} at {where}: {_describe(e)}") from None
        for cname, child in built.items():
            m.add_module(cname, child)
        for k, v in self.attrs.items():
            if k in m._parameters or k in m._buffers or k in m._modules:
                raise _Bad(f"attribute {k!r} at {where} names a parameter, buffer or child")
            object.__setattr__(m, k, v)
        if getattr(cls, "_attr_buffers", False):
            # Buffers read by the graph's "attr" nodes (at any level of its submodule tree)
            # are registered as placeholders before the state loads.
            for k in self.state:
                if k not in m._parameters and k not in m._buffers and k not in m._modules:
                    m.register_buffer(k, None)
        if self.graph is not None or hasattr(cls, "_set_graph"):
            if not hasattr(cls, "_set_graph") or self.graph is None:
                raise _Bad(f"{where} ({self.name}): a graph belongs to a GraphModule")
            try:
                m._set_graph(self.graph)
            except (TypeError, ValueError) as e:
                raise _Bad(f"bad graph at {where}: {_describe(e)}") from None
        own = {}
        m._save_to_state_dict(own, "")
        for k, cur in own.items():
            v = self.state.get(k)
            if v is not None and v.shape is not None and hasattr(cur, "shape") \
                    and tuple(cur.shape) != v.shape:
                raise _Bad(f"{where} ({self.name}): {k!r} has shape {v.shape} in the file "
                           f"but {tuple(cur.shape)} from the module's arguments")
        m.__dict__["training"] = self.training
        return m

    def stored_numel(self, subtree=False):
        """Elements the file stores for this module (and, with `subtree`, its descendants:
        for types whose constructor builds the children that hold their weights)."""
        n = sum(v.numel for v in self.state.values())
        if subtree:
            n += sum(p.stored_numel(True) for p in self.children.values() if p is not None)
        return n

    def read_state(self, ar, out):
        """Read every state entry into `out` under its dotted key."""
        prefix = f"{self.path}." if self.path else ""
        for k, v in self.state.items():
            out[prefix + k] = v.read(ar)
        for p in self.children.values():
            if p is not None:
                p.read_state(ar, out)


def _load(zf):
    ar = _Archive(zf)
    if _META not in ar.names:
        raise _Bad(f"not a qops model file (no {_META!r} entry)")
    shape, dtype, info = ar.header(_META, "the description")
    if shape != () or dtype.kind != "U" or info.file_size > _MAX_META_BYTES:
        raise _Bad(f"bad description (entry {_META!r} holds {shape} {dtype})")
    try:
        meta = json.loads(str(ar.array(_META, "the description")))
    except (ValueError, TypeError, RecursionError) as e:
        raise _Bad(f"bad description ({_describe(e)})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _Bad(f"not a qops model file (format "
                   f"{meta.get('format') if isinstance(meta, dict) else None!r})")
    version = meta.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _Bad("malformed file: no format version")
    if version != VERSION:
        raise _Bad(f"has format version {version}; this qops reads version {VERSION}")
    if _nesting(meta) > _MAX_NESTING:
        raise _Bad(f"malformed file: the description nests deeper than {_MAX_NESTING} levels")
    plan = _Plan(meta.get("model"), ar, "")
    model = plan.build()
    state = {}
    plan.read_state(ar, state)
    training = {n: m.training for n, m in model.named_modules()}
    try:
        model.load_state_dict(state, strict=True)
    except Exception as e:
        raise _Bad(f"malformed file: {_describe(e)}") from None
    for n, m in model.named_modules():
        m.__dict__["training"] = training[n]
    return model


def load(path):
    """Load a model saved by `qops.save` (no pickle; only qops module types).

    Every problem with the file raises `qops.LoadError` (a ValueError) naming the file.

    Parameters
    ----------
    path : str or os.PathLike, or a binary file object
    """
    import qops.nn
    qops.nn._load_all_types()
    try:
        name = os.fspath(path)
    except TypeError:                    # a file object
        name = getattr(path, "name", None) or repr(path)
    name = os.fsdecode(name) if isinstance(name, bytes) else str(name)
    try:
        zf = zipfile.ZipFile(path)
    except Exception as e:
        raise LoadError(f"qops.load: {name!r} is not a qops model file (cannot open it as a "
                        f"zip archive: {_describe(e)})") from None
    try:
        with zf:
            return _load(zf)
    except _Bad as e:
        msg = str(e)
        if not msg.startswith(("not a qops", "malformed", "has format", "bad description")):
            msg = f"malformed file: {msg}"
        raise LoadError(f"qops.load: {name!r}: {msg}") from None
    except Exception as e:
        raise LoadError(f"qops.load: {name!r}: malformed file ({_describe(e)})") from None
