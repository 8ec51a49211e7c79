"""qops.save / qops.load: a whole model in one .npz file, without pickle.

The file is a numpy .npz archive. Entry "__qops__" holds a JSON description: a format name and
version, and the module tree, each node naming its type from qops' module table
(`qops.nn.module_type_table()`), its constructor arguments, its training flag, its state
(arrays by reference to other entries of the archive, QTensors as integers plus qparams) and
its children. Loading uses `np.load(allow_pickle=False)` and rebuilds only types from the
table, so a file cannot run code.
"""
import json
import numbers
import zipfile

import numpy as np

from qops._dtypes import QDtype, as_qdtype, as_qscheme
from qops._qtensor import (QTensor, make_per_channel_quantized_tensor,
                           make_per_tensor_quantized_tensor)

__all__ = ["save", "load", "FORMAT", "VERSION"]

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
    raise ValueError(f"malformed constructor argument {value!r} ({where})")


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
    return {"type": name, "config": config, "training": bool(m.training), "state": state,
            "children": children}


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


class _Reader:
    def __init__(self, npz):
        self.npz = npz

    def array(self, key, where):
        if not isinstance(key, str) or key == _META or key not in self.npz.files:
            raise ValueError(f"qops.load: malformed file: array {key!r} referenced by {where} "
                             f"is missing")
        try:
            return self.npz[key]
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            raise ValueError(f"qops.load: malformed file: array {key!r} referenced by {where} "
                             f"cannot be read ({e})") from None


def _need(d, key, types, where):
    if not isinstance(d, dict) or key not in d or not isinstance(d[key], types):
        raise ValueError(f"qops.load: malformed file: {where} lacks a valid {key!r}")
    return d[key]


def _decode_value(enc, r, where):
    if enc is None:
        return None
    if not isinstance(enc, dict) or len(enc) != 1:
        raise ValueError(f"qops.load: malformed file: bad value at {where}")
    (kind, v), = enc.items()
    if kind == "array":
        return r.array(v, where)
    if kind in ("int", "float", "bool"):
        if not isinstance(v, (int, float, bool)):
            raise ValueError(f"qops.load: malformed file: bad number at {where}")
        return {"int": int, "float": float, "bool": bool}[kind](v)
    if kind == "qtensor":
        try:
            dtype = as_qdtype(_need(v, "dtype", str, where))
            qscheme = as_qscheme(_need(v, "qscheme", str, where))
        except TypeError as e:
            raise ValueError(f"qops.load: malformed file: {e} at {where}") from None
        data = r.array(_need(v, "int", str, where), where)
        if data.dtype != dtype.storage:
            raise ValueError(f"qops.load: malformed file: {where} has {data.dtype} integers "
                             f"for dtype {dtype.name}")
        try:
            if "axis" in v:
                t = make_per_channel_quantized_tensor(
                    data, r.array(_need(v, "scales", str, where), where),
                    r.array(_need(v, "zero_points", str, where), where),
                    _need(v, "axis", int, where))
            else:
                t = make_per_tensor_quantized_tensor(data, _need(v, "scale", (int, float), where),
                                                     _need(v, "zero_point", int, where))
        except (TypeError, ValueError) as e:
            raise ValueError(f"qops.load: malformed file: {e} at {where}") from None
        t._qscheme = qscheme
        return t
    raise ValueError(f"qops.load: malformed file: unknown value kind {kind!r} at {where}")


def _decode_module(node, r, path, state):
    from qops.nn.module import Module, ModuleDict, ModuleList, Sequential, _TYPES
    where = f"module '{path or '<root>'}'"
    name = _need(node, "type", str, where)
    cls = _TYPES.get(name)
    if cls is None:
        raise ValueError(f"qops.load: unknown module type {name!r} at {where}; it is not in "
                         f"qops' module table (qops.nn.module_type_table())")
    config = {k: _decode_config(v, where) for k, v in _need(node, "config", dict, where).items()}
    children = _need(node, "children", dict, where)
    built = {}
    for cname, cnode in children.items():
        cpath = f"{path}.{cname}" if path else cname
        built[cname] = None if cnode is None else _decode_module(cnode, r, cpath, state)
    if issubclass(cls, (Sequential, ModuleList, ModuleDict)):
        if config:
            raise ValueError(f"qops.load: malformed file: container {where} has arguments")
        m = cls.__new__(cls)
        Module.__init__(m)
        m.__dict__["_init_config"] = {}
    else:
        try:
            m = cls(**config)
        except (TypeError, ValueError) as e:
            raise ValueError(f"qops.load: malformed file: cannot build {name} at {where}: "
                             f"{e}") from None
    for cname, child in built.items():
        m.add_module(cname, child)
    for k, enc in _need(node, "state", dict, where).items():
        state[(f"{path}." if path else "") + k] = _decode_value(enc, r, f"{where}, {k!r}")
    training = node.get("training", False)
    if not isinstance(training, bool):
        raise ValueError(f"qops.load: malformed file: bad training flag at {where}")
    m.__dict__["training"] = training
    return m


def load(path):
    """Load a model saved by `qops.save` (no pickle; only qops module types).

    Parameters
    ----------
    path : str or os.PathLike
    """
    import qops.nn
    qops.nn._load_all_types()
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"qops.load: {path!r} is not a qops model file ({e})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"qops.load: {path!r} is not a qops model file (not an .npz archive)")
    with npz:
        if _META not in npz.files:
            raise ValueError(f"qops.load: {path!r} is not a qops model file (no {_META!r} entry)")
        try:
            meta = json.loads(str(npz[_META]))
        except (ValueError, TypeError) as e:
            raise ValueError(f"qops.load: malformed file {path!r}: bad description ({e})") \
                from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"qops.load: {path!r} is not a qops model file (format "
                             f"{meta.get('format') if isinstance(meta, dict) else None!r})")
        version = meta.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"qops.load: malformed file {path!r}: no format version")
        if version != VERSION:
            raise ValueError(f"qops.load: {path!r} has format version {version}; this qops "
                             f"reads version {VERSION}")
        state = {}
        model = _decode_module(meta.get("model"), _Reader(npz), "", state)
        training = {n: m.training for n, m in model.named_modules()}
        try:
            model.load_state_dict(state, strict=True)
        except ValueError as e:
            raise ValueError(f"qops.load: malformed file {path!r}: {e}") from None
        for n, m in model.named_modules():
            m.__dict__["training"] = training[n]
    return model
