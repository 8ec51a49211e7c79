"""`GraphModule`: a model whose forward is a captured graph of qops modules and functions.

`qops.nn.from_torch` captures a PyTorch model's own `forward` (with torch.fx, see `_fx.py`) and
returns one of these. The graph is plain data: a list of `Node`s whose targets are submodule
paths, method names, or names in `FUNCTIONS`, a fixed table of qops callables. No code object
is stored, so a graph saves and loads without pickle and runs nothing but that table.

Every function in the table takes the values PyTorch's would (numpy float32 arrays where torch
has float tensors, QTensors where it has quantized ones, Python ints for sizes) and computes what
PyTorch computes on them: float arithmetic on float arrays, `qops.functional` on QTensors.
"""
from __future__ import annotations

import operator
from typing import Any, Iterable, Optional

import numpy as np

from qops._dtypes import QDtype, as_qdtype
from qops._qtensor import QTensor
from qops.nn import _float_ops as fo
from qops.nn import _mvit, _swin
from qops.nn.module import Module, _Children, _to_numpy

__all__ = ["GraphModule", "Node", "Ref", "FUNCTIONS", "METHODS"]


class Ref:
    """An argument that is the value of an earlier node, by that node's name."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"%{self.name}"

    def __eq__(self, other):
        return isinstance(other, Ref) and other.name == self.name

    def __hash__(self):
        return hash(("Ref", self.name))


class Node:
    """One step of a graph.

    Parameters
    ----------
    name : str, unique in the graph; later nodes refer to its value as `Ref(name)`
    op : "input" (a forward argument; target: its name), "module" (call the submodule at
        path `target`), "module_method" (call method `target[1]` of the submodule at path
        `target[0]`), "function" (a name in `FUNCTIONS`), "method" (a name in `METHODS`,
        called on the first argument), "attr" (the buffer `target` of the graph module) or
        "output" (args[0] is what forward returns)
    args, kwargs : constants (numbers, strings, None, qops dtypes, slices, tuples, lists,
        dicts) and `Ref`s
    where : where the node came from (the line of the user's forward), for messages
    """

    __slots__ = ("name", "op", "target", "args", "kwargs", "where")
    OPS = ("input", "module", "module_method", "function", "method", "attr", "output")

    def __init__(self, name, op, target, args=(), kwargs=None, where=""):
        if op not in self.OPS:
            raise ValueError(f"node {name!r}: op must be one of {self.OPS}; got {op!r}")
        self.name, self.op, self.target = name, op, target
        self.args, self.kwargs, self.where = tuple(args), dict(kwargs or {}), where

    def __repr__(self):
        def fmt(v):
            if isinstance(v, (tuple, list)):
                inner = ", ".join(fmt(x) for x in v)
                return f"({inner}{',' if len(v) == 1 and isinstance(v, tuple) else ''})" \
                    if isinstance(v, tuple) else f"[{inner}]"
            if isinstance(v, dict):
                return "{" + ", ".join(f"{k!r}: {fmt(x)}" for k, x in v.items()) + "}"
            return repr(v)
        parts = [fmt(a) for a in self.args] + [f"{k}={fmt(v)}" for k, v in self.kwargs.items()]
        target = ".".join(self.target) if self.op == "module_method" else self.target
        if self.op == "input":
            return f"%{self.name} = input {target}"
        if self.op == "output":
            return f"return {', '.join(parts)}"
        if self.op == "method":
            return f"%{self.name} = {parts[0]}.{target}({', '.join(parts[1:])})"
        return f"%{self.name} = {self.op} {target}({', '.join(parts)})"


# -- the functions a graph may call ----------------------------------------------------------
def _F():
    import qops.functional as F
    return F


def _is_q(x):
    return isinstance(x, QTensor)


def _f32(x):
    """Float results stay float32 where torch's stay float32 (numpy would widen ints)."""
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        return x.astype(np.float32)
    return x


def _no_q(name, *xs):
    if any(_is_q(x) for x in xs):
        raise TypeError(f"{name} is not defined on quantized tensors (PyTorch refuses it too); "
                        f"use a FloatFunctional module, or quantize the model with "
                        f"qops.quantization.quantize_fx, which rewrites it")


def _arith(name, fn):
    def call(a, b):
        _no_q(name, a, b)
        return _f32(fn(a, b))
    call.__name__ = name
    return call


def _dim(d, ndim):
    return d + ndim if d < 0 else d


def _flatten(x, start_dim=0, end_dim=-1):
    if _is_q(x):
        return x.flatten(start_dim, end_dim)
    nd = x.ndim
    if nd == 0:
        return x.reshape(1)
    s, e = _dim(start_dim, nd), _dim(end_dim, nd)
    return x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:])


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _reshape(x, *shape):
    shape = _shape_args(shape)
    return x.reshape(*shape) if _is_q(x) else x.reshape(shape)


def _view(x, *shape):
    shape = _shape_args(shape)
    return x.view(*shape) if _is_q(x) else x.reshape(shape)


def _permute(x, *dims):
    dims = _shape_args(dims)
    return x.permute(*dims) if _is_q(x) else x.transpose(dims)


def _transpose(x, dim0, dim1):
    if _is_q(x):
        return x.transpose(dim0, dim1)
    return np.swapaxes(x, dim0, dim1)


def _contiguous(x, memory_format=None):
    return x.contiguous() if _is_q(x) else np.ascontiguousarray(x)


def _size(x, dim=None):
    if dim is None:
        return tuple(x.shape)
    return x.shape[dim]


def _split_sizes(n, split_size_or_sections):
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        return [min(step, n - i) for i in range(0, n, step)] or [0]
    return list(split_size_or_sections)


def _split(x, split_size_or_sections, dim=0):
    if _is_q(x):
        return x.split(split_size_or_sections, dim)
    n = x.shape[dim]
    d = _dim(dim, len(x.shape))
    out, start = [], 0
    for s in _split_sizes(n, split_size_or_sections):
        index = (slice(None),) * d + (slice(start, start + s),)
        out.append(x[index])
        start += s
    return tuple(out)


def _chunk(x, chunks, dim=0):
    if _is_q(x):
        return x.chunk(chunks, dim)
    n = x.shape[dim]
    step = -(-n // chunks) if n else 1
    return _split(x, step, dim)


def _mean(x, dim=None, keepdim=False, dtype=None):
    if _is_q(x):
        return x.mean(dim, keepdim)
    axis = tuple(dim) if isinstance(dim, (list, tuple)) else dim
    return np.mean(x, axis=axis, keepdims=keepdim, dtype=np.float32).astype(np.float32)


def _cat(tensors, dim=0):
    tensors = list(tensors)
    if any(_is_q(t) for t in tensors):
        # torch.cat of quantized tensors keeps the first input's qparams, as quantized::cat.
        q = tensors[0]
        return _F().cat(tensors, dim, q.q_scale(), q.q_zero_point())
    return np.concatenate(tensors, axis=dim)


def _unary(qname, float_fn):
    def call(x, *args, inplace=False, **kwargs):
        if _is_q(x):
            return getattr(_F(), qname)(x, *args, **kwargs)
        return float_fn(x, *args, **kwargs)
    call.__name__ = qname
    return call


def _clamp(x, min=None, max=None):
    if _is_q(x):
        lo = -np.inf if min is None else min
        hi = np.inf if max is None else max
        return _F().clamp(x, lo, hi)
    return np.clip(x, min, max).astype(np.float32, copy=False)


def _hardtanh(x, min_val=-1.0, max_val=1.0, inplace=False):
    if _is_q(x):
        return _F().hardtanh(x, min_val, max_val)
    return fo.hardtanh(x, min_val, max_val)


def _relu6(x, inplace=False):
    return _F().relu6(x) if _is_q(x) else fo.hardtanh(x, 0.0, 6.0)


def _prelu(x, weight):
    if _is_q(x):
        raise TypeError("prelu takes a float array (qops has no quantized PReLU: "
                        "docs/semantics.md §6.3)")
    return fo.prelu(x, weight)


def _leaky_relu(x, negative_slope=0.01, inplace=False):
    return _F().leaky_relu(x, negative_slope) if _is_q(x) else fo.leaky_relu(x, negative_slope)


def _elu(x, alpha=1.0, inplace=False):
    _no_q("elu (functional, without output qparams)", x)
    return fo.elu(x, alpha)


def _hardswish(x, inplace=False):
    _no_q("hardswish (functional, without output qparams)", x)
    return fo.hardswish(x)


def _dropout(x, p=0.5, training=False, inplace=False):
    if training:
        raise ValueError("dropout in training mode is not supported by a captured graph; "
                         "call model.eval() before running it")
    return x


def _pool(kind, n):
    def call(x, *args, **kwargs):
        if _is_q(x):
            return getattr(_F(), f"{kind}_pool{n}d")(x, *args, **kwargs)
        if kind == "max":
            return _max_pool_float(x, n, *args, **kwargs)
        return _avg_pool_float(x, n, *args, **kwargs)
    call.__name__ = f"{kind}_pool{n}d"
    return call


def _max_pool_float(x, n, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                    return_indices=False):
    if return_indices:
        raise ValueError("max_pool with return_indices=True is not supported")
    return fo.max_pool(x, n, kernel_size, stride if stride else kernel_size, padding, dilation,
                       ceil_mode)


def _avg_pool_float(x, n, kernel_size, stride=None, padding=0, ceil_mode=False,
                    count_include_pad=True, divisor_override=None):
    return fo.avg_pool(x, n, kernel_size, stride if stride else kernel_size, padding, ceil_mode,
                       count_include_pad, divisor_override)


def _adaptive(n):
    def call(x, output_size):
        if _is_q(x):
            return getattr(_F(), f"adaptive_avg_pool{n}d")(x, output_size)
        return fo.adaptive_avg_pool(x, n, output_size)
    call.__name__ = f"adaptive_avg_pool{n}d"
    return call


def _interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None, antialias=False):
    if antialias:
        raise ValueError("interpolate(antialias=True) is not supported")
    if _is_q(x):
        return _F().interpolate(x, size, scale_factor, mode, align_corners)
    return fo.interpolate(x, size, scale_factor, mode, align_corners)


def _linear(x, weight, bias=None):
    _no_q("linear (functional)", x)
    return fo.linear(x, weight, bias)


def _getattr(x, name):
    if name not in ("shape", "ndim", "dtype", "is_quantized", "T"):
        raise ValueError(f"attribute {name!r} is not one a graph may read")
    if name == "is_quantized":
        return _is_q(x)
    if name == "shape":
        return tuple(x.shape)
    return getattr(x, name)


def _quantize_per_tensor(x, scale, zero_point, dtype):
    return _F().quantize_per_tensor(x, float(scale), int(zero_point), dtype)


def _dequantize(x):
    if isinstance(x, (list, tuple)):
        return type(x)(_dequantize(v) for v in x)
    return x.dequantize() if _is_q(x) else x


def _q_binary(name):
    def call(a, b, scale=None, zero_point=None):
        if scale is None and name in ("add", "mul") and not (_is_q(a) and _is_q(b)):
            # quantized::add/mul.Scalar (qa, b) and .Scalar2 (b, qa): the scalar kernels
            return getattr(_F(), f"{name}_scalar")(*((a, b) if _is_q(a) else (b, a)))
        if scale is None:
            raise TypeError(f"quantized.{name} of two tensors needs the output scale and "
                            f"zero point")
        return getattr(_F(), name)(a, b, float(scale), int(zero_point))
    call.__name__ = f"quantized_{name}"
    return call


def _q_scalar(name):
    def call(a, b):
        return getattr(_F(), name)(a, b)
    call.__name__ = f"quantized_{name}"
    return call


def _q_cat(qx, dim=0, scale=None, zero_point=None):
    # torch.ops.quantized.cat(Tensor[] qx, int dim, float? scale, int? zero_point)
    if scale is None:
        return _cat(qx, dim)
    return _F().cat(list(qx), dim, float(scale), int(zero_point))


def _q_hardswish(input, output_scale, output_zero_point):
    # torch.ops.quantized.hardswish(Tensor input, float output_scale, int output_zero_point)
    return _F().hardswish(input, float(output_scale), int(output_zero_point))


def _q_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5,
                  output_scale=1.0, output_zero_point=0):
    # torch.ops.quantized.layer_norm(Tensor input, int[] normalized_shape, Tensor? weight,
    #     Tensor? bias, float eps, float output_scale, int output_zero_point)
    return _F().layer_norm(input, tuple(normalized_shape), weight, bias, float(eps),
                           float(output_scale), int(output_zero_point))


def _add(a, b, alpha=1):
    _no_q("add", a, b)
    return _f32(a + alpha * b if alpha != 1 else a + b)


def _mul(a, b):
    _no_q("mul", a, b)
    return _f32(a * b)


def _sigmoid(x):
    return _F().sigmoid(x) if _is_q(x) else fo.sigmoid(x)


def _tanh(x):
    return _F().tanh(x) if _is_q(x) else fo.tanh(x)


def _relu(x, inplace=False):
    return _F().relu(x) if _is_q(x) else fo.relu(x)


def _hardsigmoid(x, inplace=False):
    return _F().hardsigmoid(x) if _is_q(x) else fo.hardsigmoid(x)


def _conv(n):
    def call(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        _no_q(f"conv{n}d (functional)", input)
        return fo.conv(input, weight, bias, stride, padding, dilation, groups)
    call.__name__ = f"conv{n}d"
    return call


def _silu(x, inplace=False):
    _no_q("silu", x)
    return fo.silu(x)


def _gelu(x, approximate="none"):
    if isinstance(x, QTensor):
        return _F().gelu(x, approximate)
    return fo.gelu(x, approximate)


def _softmax(x, dim=None, _stacklevel=3, dtype=None):
    # F.softmax(x, dim, _stacklevel, dtype) and x.softmax(dim): float, as PyTorch's graph mode
    # leaves the function float (nn.Softmax becomes quantized.Softmax)
    _no_q("softmax (functional)", x)
    if dtype is not None:
        raise ValueError("softmax with a dtype is not supported by a captured forward")
    return fo.softmax(x, dim)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    _no_q("layer_norm (functional, without output qparams)", x)
    return fo.layer_norm(x, tuple(normalized_shape), weight, bias, eps)


def _stochastic_depth(x, p, mode, training=True):
    # torchvision.ops.stochastic_depth: the identity in eval mode (as dropout)
    if training and p > 0:
        raise ValueError("stochastic_depth in training mode is not supported by a captured "
                         "graph; call model.eval() before capturing it")
    return x


def _expand(x, *sizes):
    _no_q("expand", x)
    sizes = _shape_args(sizes)
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise ValueError(f"expand: {len(sizes)} sizes for a tensor of {x.ndim} dims")
    # -1 keeps a dim; new leading dims must be given; numpy's broadcast checks the rest
    shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s
                  for i, s in enumerate(sizes))
    if any(s < 0 for s in shape):
        raise ValueError(f"expand: size -1 is only allowed for an existing dim; got {sizes}")
    return np.broadcast_to(x, shape)


def _assert(condition, message=""):
    # torch._assert, as forwards use it to check shapes (torchvision's ViT)
    if not condition:
        raise AssertionError(message)


def _squeeze(x, dim=None):
    if _is_q(x):
        return x.squeeze(dim)
    return np.squeeze(x) if dim is None else (np.squeeze(x, dim) if x.shape[dim] == 1 else x)


def _unsqueeze(x, dim):
    return x.unsqueeze(dim) if _is_q(x) else np.expand_dims(x, _dim(dim, x.ndim + 1))


def _numel(x):
    return int(np.prod(x.shape))


def _sum(x, dim=None, keepdim=False, dtype=None):
    _no_q("sum", x)
    if dtype is not None:
        raise ValueError("sum with a dtype is not supported by a captured forward")
    axis = tuple(dim) if isinstance(dim, (list, tuple)) else dim
    return np.asarray(np.sum(x, axis=axis, keepdims=keepdim, dtype=np.float32), np.float32)


def _matmul(a, b):
    _no_q("matmul", a, b)
    return fo.matmul(a, b)


def _einsum(equation, *operands):
    # torch.einsum(eq, a, b, ...) or torch.einsum(eq, [a, b, ...]); spaces allowed in eq
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    _no_q("einsum", *operands)
    return fo.einsum(equation, *operands)


def _roll(x, shifts, dims=None):
    _no_q("roll", x)
    if dims is None:
        return np.roll(x.reshape(-1), shifts).reshape(x.shape)
    shifts = tuple(shifts) if isinstance(shifts, (list, tuple)) else shifts
    dims = tuple(dims) if isinstance(dims, (list, tuple)) else dims
    return np.roll(x, shifts, axis=dims)


def _pad(x, pad, mode="constant", value=None):
    # F.pad: pad = (last dim's before, after, the dim before it's ..., ...); negative crops
    _no_q("pad", x)
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: {len(pad)} values for a {x.ndim}-d input (pairs, at most "
                         f"{x.ndim})")
    pairs = [(pad[i], pad[i + 1]) for i in range(0, len(pad), 2)][::-1]
    lead = x.ndim - len(pairs)
    x = x[(slice(None),) * lead + tuple(slice(max(-a, 0), x.shape[lead + i] - max(-b, 0))
                                        for i, (a, b) in enumerate(pairs))]
    return fo.pad(x, [(max(a, 0), max(b, 0)) for a, b in pairs], mode,
                  0.0 if value is None else value)


def _slices(x, dim, bounds):
    d = _dim(dim, len(x.shape))
    return tuple(x[(slice(None),) * d + (slice(a, b),)] for a, b in zip(bounds, bounds[1:]))


def _tensor_split(x, indices_or_sections=None, dim=0, *, indices=None, sections=None):
    # torch.tensor_split(x, indices_or_sections | indices= | sections=, dim)
    if indices_or_sections is None:
        indices_or_sections = sections if indices is None else tuple(indices)
    n = x.shape[dim]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k < 1:
            raise ValueError(f"tensor_split: sections must be at least 1; got {k}")
        q, r = divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        return _slices(x, dim, [sum(sizes[:i]) for i in range(k + 1)])
    return _slices(x, dim, [0] + [int(i) for i in indices_or_sections] + [n])


def _unbind(x, dim=0):
    d = _dim(dim, len(x.shape))
    return tuple(x[(slice(None),) * d + (i,)] for i in range(x.shape[d]))


# name -> callable; the only functions a graph can name (saved files name these strings).
FUNCTIONS = {
    "getitem": operator.getitem,
    "getattr": _getattr,
    "add": _arith("add", operator.add),
    "sub": _arith("sub", operator.sub),
    "mul": _arith("mul", operator.mul),
    "truediv": _arith("truediv", operator.truediv),
    "floordiv": _arith("floordiv", operator.floordiv),
    "neg": lambda x: _f32(-x) if not _is_q(x) else _no_q("neg", x),
    "torch.add": _add,
    "torch.mul": _mul,
    "cat": _cat,
    "flatten": _flatten,
    "reshape": _reshape,
    "permute": _permute,
    "transpose": _transpose,
    "chunk": _chunk,
    "split": _split,
    "mean": _mean,
    "squeeze": _squeeze,
    "unsqueeze": _unsqueeze,
    "relu": _relu,
    "torch.relu": _relu,
    "relu6": _relu6,
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "clamp": _clamp,
    "hardtanh": _hardtanh,
    "hardsigmoid": _hardsigmoid,
    "hardswish": _hardswish,
    "elu": _elu,
    "leaky_relu": _leaky_relu,
    "prelu": _prelu,
    "dropout": _dropout,
    "silu": _silu,
    "conv1d": _conv(1), "conv2d": _conv(2), "conv3d": _conv(3),
    "gelu": _gelu,
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "stochastic_depth": _stochastic_depth,
    "max_pool1d": _pool("max", 1), "max_pool2d": _pool("max", 2), "max_pool3d": _pool("max", 3),
    "avg_pool1d": _pool("avg", 1), "avg_pool2d": _pool("avg", 2), "avg_pool3d": _pool("avg", 3),
    "adaptive_avg_pool1d": _adaptive(1), "adaptive_avg_pool2d": _adaptive(2),
    "adaptive_avg_pool3d": _adaptive(3),
    "interpolate": _interpolate,
    "linear": _linear,
    "quantize_per_tensor": _quantize_per_tensor,
    "dequantize": _dequantize,
    "quantized.add": _q_binary("add"),
    "quantized.add_relu": _q_binary("add_relu"),
    "quantized.mul": _q_binary("mul"),
    "quantized.mul_relu": _q_binary("mul_relu"),
    "quantized.matmul": _q_binary("matmul"),
    "quantized.add_scalar": _q_scalar("add_scalar"),
    "quantized.mul_scalar": _q_scalar("mul_scalar"),
    "quantized.cat": _q_cat,
    "quantized.hardswish": _q_hardswish,
    "quantized.layer_norm": _q_layer_norm,
    "numel": _numel,
    "sum": _sum,
    "matmul": _matmul,
    "torch.matmul": _matmul,
    "einsum": _einsum,
    "roll": _roll,
    "pad": _pad,
    "tensor_split": _tensor_split,
    "unbind": _unbind,
    "swapaxes": _transpose,
    "torchvision.swin.patch_merging_pad": _swin.patch_merging_pad,
    "torchvision.swin.relative_position_bias": _swin.relative_position_bias,
    "torchvision.swin.shifted_window_attention": _swin.shifted_window_attention,
    "torchvision.swin.window_and_shift_size": _swin.window_and_shift_size,
    "torchvision.swin.pad_size_3d": _swin.pad_size_3d,
    "torchvision.swin.relative_position_bias_3d": _swin.relative_position_bias_3d,
    "torchvision.swin.shifted_window_attention_3d": _swin.shifted_window_attention_3d,
    "torchvision.mvit.unsqueeze": _mvit.unsqueeze_to,
    "torchvision.mvit.squeeze": _mvit.squeeze_from,
    "torchvision.mvit.add_rel_pos": _mvit.add_rel_pos,
    "torchvision.mvit.add_shortcut": _mvit.add_shortcut,
    "assert": _assert,
    "eq": operator.eq, "ne": operator.ne,
    "int": int, "float": float, "len": len,
}

# method name -> callable(self, *args, **kwargs): what `x.<name>(...)` does on arrays and
# QTensors alike (numpy's own methods of those names mean other things: view, size, flatten).
METHODS = {
    "view": _view,
    "reshape": _reshape,
    "flatten": _flatten,
    "size": _size,
    "dim": lambda x: len(x.shape),
    "numel": _numel,
    "contiguous": _contiguous,
    "permute": _permute,
    "transpose": _transpose,
    "swapaxes": _transpose,
    "swapdims": _transpose,
    "sum": _sum,
    "matmul": _matmul,
    "bmm": _matmul,
    "roll": _roll,
    "tensor_split": _tensor_split,
    "unbind": _unbind,
    "mean": _mean,
    "chunk": _chunk,
    "split": _split,
    "squeeze": _squeeze,
    "unsqueeze": _unsqueeze,
    "expand": _expand,
    "dequantize": _dequantize,
    "relu": _relu,
    "torch.relu": _relu,
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "clamp": _clamp,
    "hardsigmoid": _hardsigmoid,
    "softmax": _softmax,
    "add": _add,
    "mul": _mul,
    "int_repr": lambda x: x.int_repr(),
    "q_scale": lambda x: x.q_scale(),
    "q_zero_point": lambda x: x.q_zero_point(),
}


# -- the graph module ------------------------------------------------------------------------
def _fill_placeholders(module, state, prefix):
    """Buffers qops.load registered as None (the values of a graph's "attr" nodes, which no
    constructor declares) take the kind and shape of the state's entries, then load as any."""
    for name, b in module._buffers.items():
        if b is None and prefix + name in state:
            module._buffers[name] = _to_numpy(state[prefix + name])


class GraphSubmodules(Module):
    """A level of the submodule tree of a GraphModule (a torch module the graph went through)."""

    _attr_buffers = True        # holds buffers of "attr" nodes (qops.load registers them)

    def _load_from_state_dict(self, state, prefix, errors):
        _fill_placeholders(self, state, prefix)
        super()._load_from_state_dict(state, prefix, errors)

    def __init__(self, original_name: str = "") -> None:
        super().__init__()
        self.original_name = original_name

    def _get_name(self):
        return self.original_name or "GraphSubmodules"

    def _config(self):
        return {"original_name": self.original_name}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._get_name()} was captured into its parent's graph; call the "
                           f"GraphModule, not this level of its submodule tree")


def _walk(x, fn):
    """Apply fn to every Ref inside a nested argument, rebuilding the structure."""
    if isinstance(x, Ref):
        return fn(x)
    if isinstance(x, tuple):
        return tuple(_walk(v, fn) for v in x)
    if isinstance(x, list):
        return [_walk(v, fn) for v in x]
    if isinstance(x, dict):
        return {k: _walk(v, fn) for k, v in x.items()}
    if isinstance(x, slice):
        return slice(_walk(x.start, fn), _walk(x.stop, fn), _walk(x.step, fn))
    return x


def _with_frees(steps, slots):
    """Each step with the value slots to drop after it: those it used last (and its own value
    if nothing uses it). Holding every value until the forward returns made the peak memory
    the sum of all activations, all handed back at once at the end, and glibc then returned
    that heap to the system, so that each forward page-faulted it in again."""
    last = {}
    for s, (i, _, _, _, node) in enumerate(steps):
        def note(r, s=s):
            last[slots[r.name]] = s
        _walk(node.args, note)
        _walk(node.kwargs, note)
        last.setdefault(i, s)
    frees = [[] for _ in steps]
    for j, s in last.items():
        frees[s].append(j)
    return [step + (tuple(f),) for step, f in zip(steps, frees)]


def _has_ref(x):
    found = []
    _walk(x, lambda r: found.append(r))
    return bool(found)


def _check_constant(x, where):
    ok = (type(None), bool, int, float, str, QDtype, Ref, type(Ellipsis))
    if isinstance(x, (tuple, list)):
        for v in x:
            _check_constant(v, where)
    elif isinstance(x, dict):
        for k, v in x.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: dict keys in a graph must be strings; got {k!r}")
            _check_constant(v, where)
    elif isinstance(x, slice):
        for v in (x.start, x.stop, x.step):
            _check_constant(v, where)
    elif not isinstance(x, ok):
        raise TypeError(f"{where}: {type(x).__name__} is not a constant a graph can hold")


class GraphModule(Module):
    """A model whose forward runs a captured graph (see `qops.nn.from_torch`).

    Parameters
    ----------
    nodes : list of Node, in execution order (one "output" node last)
    modules : dict {path: Module}, the submodules the graph calls, placed in a tree by path
    buffers : dict {path: array or QTensor}, values of the graph's "attr" nodes
    class_name : the name of the model class the graph was captured from (printed)
    """

    _state_attrs = ("nodes", "class_name")
    _attr_buffers = True

    def __init__(self, nodes: Iterable[Node] = (), modules: Optional[dict[str, Module]] = None,
                 buffers: Optional[dict[str, Any]] = None,
                 class_name: str = "GraphModule") -> None:
        super().__init__()
        self.__dict__["class_name"] = class_name
        if not nodes:
            # An empty graph returns its input (qops.load fills the nodes in afterwards).
            nodes = [Node("x", "input", "x"), Node("output", "output", "output", [Ref("x")])]
        for path, m in (modules or {}).items():
            self._place(path, m)
        for path, value in (buffers or {}).items():
            *parents, leaf = path.split(".")
            owner = self
            for p in parents:
                owner = self._level(owner, p)
            owner.register_buffer(leaf, value)
        self.__dict__["nodes"] = list(nodes)
        self._check()
        self.__dict__["_plan"] = None

    def _load_from_state_dict(self, state, prefix, errors):
        _fill_placeholders(self, state, prefix)
        super()._load_from_state_dict(state, prefix, errors)

    def _level(self, owner, name):
        child = owner._modules.get(name)
        if child is None:
            child = GraphSubmodules()
            owner.add_module(name, child)
        return child

    def _place(self, path, module):
        *parents, leaf = path.split(".")
        owner = self
        for p in parents:
            owner = self._level(owner, p)
        owner.add_module(leaf, module)

    def _check(self):
        names = set()
        if not self.nodes or self.nodes[-1].op != "output":
            raise ValueError("a graph must end with one 'output' node")
        for node in self.nodes:
            where = f"node {node.name!r}" + (f" ({node.where})" if node.where else "")
            if node.name in names:
                raise ValueError(f"{where}: name used twice")
            for arg in list(node.args) + list(node.kwargs.values()):
                _check_constant(arg, where)
                _walk(arg, lambda r: r.name in names or _raise(
                    ValueError(f"{where}: refers to %{r.name}, which is not an earlier node")))
            if node.op == "function" and node.target not in FUNCTIONS:
                raise ValueError(f"{where}: {node.target!r} is not a function a graph may call")
            if node.op == "method" and node.target not in METHODS:
                raise ValueError(f"{where}: {node.target!r} is not a method a graph may call")
            if node.op in ("module", "module_method"):
                path = node.target[0] if node.op == "module_method" else node.target
                try:
                    self.get_submodule(path)
                except (AttributeError, KeyError) as e:
                    raise ValueError(f"{where}: no submodule {path!r}") from e
            if node.op == "attr":
                try:
                    self._attr(node.target)
                except (AttributeError, KeyError) as e:
                    raise ValueError(f"{where}: no buffer {node.target!r}") from e
            if node.op == "output" and node is not self.nodes[-1]:
                raise ValueError(f"{where}: 'output' must be the last node")
            names.add(node.name)

    # -- running ---------------------------------------------------------------------------
    def _compile(self):
        """One closure per node over a list of value slots: no dict lookups while running."""
        slot = {}
        steps = []
        inputs = []
        for i, node in enumerate(self.nodes):
            slot[node.name] = i

            def resolver(x):
                if not _has_ref(x):
                    return lambda env, x=x: x
                if isinstance(x, Ref):
                    j = slot[x.name]
                    return lambda env, j=j: env[j]
                return lambda env, x=x: _walk(x, lambda r: env[slot[r.name]])

            if node.op == "input":
                inputs.append((i, node))
                continue
            getters = [resolver(a) for a in node.args]
            kw = [(k, resolver(v)) for k, v in node.kwargs.items()]
            if node.op == "output":
                steps.append((i, None, getters, kw, node))
                continue
            if node.op == "module":
                fn = self.get_submodule(node.target)
            elif node.op == "module_method":
                fn = getattr(self.get_submodule(node.target[0]), node.target[1])
            elif node.op == "function":
                fn = FUNCTIONS[node.target]
            elif node.op == "method":
                fn = METHODS[node.target]
            else:   # attr
                value = self._attr(node.target)
                fn = (lambda v: (lambda: v))(value)
            steps.append((i, fn, getters, kw, node))
        return inputs, _with_frees(steps, slot), len(self.nodes)

    def _attr(self, path):
        *parents, leaf = path.split(".")
        owner = self
        for p in parents:
            owner = owner._modules[p]
        return owner._buffers[leaf]

    def _plan_now(self):
        # Modules may have been swapped by name since the last call (prepare/convert, or a
        # user's set_submodule): the plan holds the module objects, so it is rebuilt if any
        # of them is no longer in the tree. Only when some module's children changed at all
        # since the plan was checked (one global count) are its modules looked up again.
        d = self.__dict__
        plan = d["_plan"]
        if plan is not None and d.get("_plan_checked") != _Children.changes:
            for path, m in plan[3]:
                if self.get_submodule(path) is not m:
                    plan = None
                    break
        if plan is None:
            inputs, steps, n = self._compile()
            used = [(node.target if node.op == "module" else node.target[0],
                     self.get_submodule(node.target if node.op == "module" else node.target[0]))
                    for node in self.nodes if node.op in ("module", "module_method")]
            plan = (inputs, steps, n, used)
            d["_plan"] = plan
        d["_plan_checked"] = _Children.changes
        return plan

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        inputs, steps, n, _ = self._plan_now()
        env = [None] * n
        for k, (i, node) in enumerate(inputs):
            if k < len(args):
                env[i] = args[k]
            elif node.target in kwargs:
                env[i] = kwargs[node.target]
            elif node.args:
                env[i] = node.args[0]
            else:
                raise TypeError(f"{self.class_name}.forward() missing argument {node.target!r}")
        if len(args) > len(inputs):
            raise TypeError(f"{self.class_name}.forward() takes {len(inputs)} arguments; "
                            f"got {len(args)}")
        for i, fn, getters, kw, node, frees in steps:
            a = [g(env) for g in getters]
            if fn is None:
                return a[0]
            try:
                if kw:
                    env[i] = fn(*a, **{k: g(env) for k, g in kw})
                else:
                    env[i] = fn(*a)
            except Exception as e:
                if not getattr(e, "_qops_node", False) and hasattr(e, "add_note"):
                    e.add_note(f"in node %{node.name}: {node!r}"
                               + (f"\n  from {node.where}" if node.where else ""))
                    e._qops_node = True
                raise
            del a               # the arguments: a dropped slot's value must not live on here
            for j in frees:
                env[j] = None
        raise RuntimeError("graph has no output node")

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if isinstance(value, Module):
            self.__dict__["_plan"] = None

    # -- printing and saving -----------------------------------------------------------------
    def _get_name(self):
        return f"GraphModule[{self.class_name}]"

    def code(self) -> str:
        """The graph as text: one line per node, as `print(model)` shows it after the modules."""
        return "\n".join(repr(n) for n in self.nodes)

    def __repr__(self):
        body = super().__repr__()
        graph = "\n  ".join(self.code().split("\n"))
        return body[:-1] + ("\n" if not body.endswith("(\n)") else "") + \
            f"  graph:\n  {graph}\n)"

    def _config(self):
        return {"class_name": self.class_name}

    def _graph_data(self):
        """The nodes as JSON-friendly data (qops.save)."""
        return [node_to_data(n) for n in self.nodes]

    def _set_graph(self, data):
        """Replace the nodes with ones read by `node_from_data` (qops.load), checked."""
        self.__dict__["nodes"] = [node_from_data(d) for d in data]
        self._check()
        self.__dict__["_plan"] = None


def _raise(e):
    raise e


def node_to_data(node):
    """A node as JSON-friendly data (qops.save): Refs and special constants tagged."""
    def enc(x):
        if isinstance(x, Ref):
            return {"$ref": x.name}
        if isinstance(x, QDtype):
            return {"$qdtype": x.name}
        if isinstance(x, slice):
            return {"$slice": [enc(x.start), enc(x.stop), enc(x.step)]}
        if x is Ellipsis:
            return {"$ellipsis": True}
        if isinstance(x, tuple):
            return {"$tuple": [enc(v) for v in x]}
        if isinstance(x, list):
            return [enc(v) for v in x]
        if isinstance(x, dict):
            return {"$dict": {k: enc(v) for k, v in x.items()}}
        if isinstance(x, float) and not np.isfinite(x):
            return {"$float": repr(x)}
        return x
    target = list(node.target) if isinstance(node.target, tuple) else node.target
    return {"name": node.name, "op": node.op, "target": target,
            "args": [enc(a) for a in node.args],
            "kwargs": {k: enc(v) for k, v in node.kwargs.items()}, "where": node.where}


def node_from_data(d, depth=0):
    """The inverse of `node_to_data`, refusing anything but the tagged forms it writes."""
    def dec(x, level=0):
        if level > 64:
            raise ValueError("graph argument nested deeper than 64 levels")
        if isinstance(x, list):
            return [dec(v, level + 1) for v in x]
        if isinstance(x, dict):
            if len(x) != 1:
                raise ValueError(f"bad graph argument {x!r}")
            (tag, v), = x.items()
            if tag == "$ref":
                return Ref(str(v))
            if tag == "$qdtype":
                return as_qdtype(v)
            if tag == "$slice":
                return slice(*[dec(p, level + 1) for p in v])
            if tag == "$ellipsis":
                return Ellipsis
            if tag == "$tuple":
                return tuple(dec(p, level + 1) for p in v)
            if tag == "$dict":
                return {str(k): dec(p, level + 1) for k, p in v.items()}
            if tag == "$float":
                return float(v)
            raise ValueError(f"bad graph argument tag {tag!r}")
        if isinstance(x, (type(None), bool, int, float, str)):
            return x
        raise ValueError(f"bad graph argument {x!r}")
    if not isinstance(d, dict):
        raise ValueError("a graph node must be a mapping")
    target = d.get("target")
    if d.get("op") == "module_method":
        if not (isinstance(target, list) and len(target) == 2
                and all(isinstance(t, str) for t in target)):
            raise ValueError(f"node {d.get('name')!r}: bad module_method target")
        target = tuple(target)
    elif not isinstance(target, str):
        raise ValueError(f"node {d.get('name')!r}: target must be a string")
    return Node(str(d.get("name")), d.get("op"), target,
                [dec(a) for a in d.get("args", [])],
                {str(k): dec(v) for k, v in d.get("kwargs", {}).items()}, str(d.get("where", "")))

