"""Capture a PyTorch model's forward with torch.fx and rebuild it as a qops GraphModule.

torch is imported only inside these functions. Every torch layer qops can convert is a leaf of
the trace (it becomes one "module" node); everything else the forward does must be a call in
`_FUNCTION_NAMES` / a method in `qops.nn._graph.METHODS`, or the capture fails with a list of
every node it cannot run.
"""
import builtins
import operator
import re

from qops.nn._graph import METHODS, GraphModule, Node, Ref

__all__ = ["capture"]


def _function_names(torch):
    """torch callable -> name in qops.nn._graph.FUNCTIONS."""
    F = torch.nn.functional
    names = {
        operator.getitem: "getitem", builtins.getattr: "getattr",
        operator.add: "add", operator.sub: "sub", operator.mul: "mul",
        operator.truediv: "truediv", operator.floordiv: "floordiv", operator.neg: "neg",
        operator.iadd: "add", operator.imul: "mul",
        torch.add: "torch.add", torch.mul: "torch.mul", torch.cat: "cat", torch.concat: "cat",
        torch.flatten: "flatten", torch.reshape: "reshape", torch.permute: "permute",
        torch.transpose: "transpose", torch.chunk: "chunk", torch.split: "split",
        torch.mean: "mean", torch.squeeze: "squeeze", torch.unsqueeze: "unsqueeze",
        # torch.relu apart from F.relu: PyTorch fuses it into add/mul only, not into convs
        torch.relu: "torch.relu", torch.relu_: "torch.relu", torch.sigmoid: "sigmoid",
        torch.tanh: "tanh",
        torch.clamp: "clamp", torch.clip: "clamp", torch.numel: "numel",
        F.relu: "relu", F.relu6: "relu6", F.sigmoid: "sigmoid", F.tanh: "tanh",
        F.hardtanh: "hardtanh", F.hardsigmoid: "hardsigmoid", F.hardswish: "hardswish",
        F.elu: "elu", F.leaky_relu: "leaky_relu", F.prelu: "prelu", F.dropout: "dropout",
        F.silu: "silu", F.gelu: "gelu", F.layer_norm: "layer_norm", F.softmax: "softmax",
        torch.softmax: "softmax",
        F.conv1d: "conv1d", F.conv2d: "conv2d", F.conv3d: "conv3d",
        F.max_pool1d: "max_pool1d", F.max_pool2d: "max_pool2d", F.max_pool3d: "max_pool3d",
        F.avg_pool1d: "avg_pool1d", F.avg_pool2d: "avg_pool2d", F.avg_pool3d: "avg_pool3d",
        F.adaptive_avg_pool1d: "adaptive_avg_pool1d",
        F.adaptive_avg_pool2d: "adaptive_avg_pool2d",
        F.adaptive_avg_pool3d: "adaptive_avg_pool3d",
        F.interpolate: "interpolate", F.linear: "linear",
        torch.quantize_per_tensor: "quantize_per_tensor", torch.dequantize: "dequantize",
        builtins.int: "int", builtins.float: "float", builtins.len: "len",
        torch._assert: "assert", operator.eq: "eq", operator.ne: "ne",
        # torch.matmul apart: PyTorch's graph mode quantizes it (quantized::matmul), not @,
        # torch.bmm or x.matmul
        torch.sum: "sum", torch.matmul: "torch.matmul", operator.matmul: "matmul",
        torch.bmm: "matmul",
        torch.einsum: "einsum", torch.roll: "roll", F.pad: "pad",
        # (not "transpose": PyTorch's graph mode runs these in float)
        torch.swapaxes: "swapaxes", torch.swapdims: "swapaxes",
        torch.tensor_split: "tensor_split", torch.unbind: "unbind",
    }
    for fname in ("max_pool1d_with_indices", "max_pool2d_with_indices",
                  "max_pool3d_with_indices"):
        if hasattr(F, fname):
            names[getattr(F, fname)] = fname.replace("_with_indices", "")
    q = torch.ops.quantized
    for op in ("add", "add_relu", "mul", "mul_relu", "add_scalar", "mul_scalar", "cat",
               "hardswish", "layer_norm", "matmul"):
        packet = getattr(q, op, None)
        if packet is not None:
            names[packet] = f"quantized.{op}"
            for overload in packet.overloads():
                names[getattr(packet, overload)] = f"quantized.{op}"
    return names


# Functions of libraries beside torch, by module and name (not imported here: torchvision's
# package may not load beside this torch, its model code still can).
_LIBRARY_FUNCTIONS = {
    ("torchvision.ops.stochastic_depth", "stochastic_depth"): "stochastic_depth",
    # torch.fx.wrap-ped: their bodies branch on sizes (qops/nn/_swin.py)
    ("torchvision.models.swin_transformer", "_patch_merging_pad"):
        "torchvision.swin.patch_merging_pad",
    ("torchvision.models.swin_transformer", "_get_relative_position_bias"):
        "torchvision.swin.relative_position_bias",
    ("torchvision.models.swin_transformer", "shifted_window_attention"):
        "torchvision.swin.shifted_window_attention",
    ("torchvision.models.video.swin_transformer", "_get_window_and_shift_size"):
        "torchvision.swin.window_and_shift_size",
    ("torchvision.models.video.swin_transformer", "_compute_pad_size_3d"):
        "torchvision.swin.pad_size_3d",
    ("torchvision.models.video.swin_transformer", "_get_relative_position_bias"):
        "torchvision.swin.relative_position_bias_3d",
    ("torchvision.models.video.swin_transformer", "shifted_window_attention_3d"):
        "torchvision.swin.shifted_window_attention_3d",
    # (qops/nn/_mvit.py)
    ("torchvision.models.video.mvit", "_unsqueeze"): "torchvision.mvit.unsqueeze",
    ("torchvision.models.video.mvit", "_squeeze"): "torchvision.mvit.squeeze",
    ("torchvision.models.video.mvit", "_add_rel_pos"): "torchvision.mvit.add_rel_pos",
    ("torchvision.models.video.mvit", "_add_shortcut"): "torchvision.mvit.add_shortcut",
}


def _packed_ops(torch):
    """torch.ops.quantized op (packet or overload) -> (layer, relu) for the ops PyTorch's graph
    mode leaves where a forward called F.conv*d / F.linear with weights of its own: their
    packed weights are get_attr nodes of a script object, which qops unpacks into a module."""
    q = torch.ops.quantized
    ops = {}
    for layer in ("conv1d", "conv2d", "conv3d", "linear", "conv_transpose1d",
                  "conv_transpose2d", "conv_transpose3d"):
        for relu in (False, True):
            packet = getattr(q, layer + ("_relu" if relu else ""), None)
            if packet is None:
                continue
            ops[packet] = (layer, relu)
            for overload in packet.overloads():
                ops[getattr(packet, overload)] = (layer, relu)
    return ops


def _packed_module(torch, layer, relu, packed, scale, zero_point):
    """The qops quantized Conv*d / ConvTranspose*d / Linear (+ReLU) of a PyTorch packed weight
    and qparams."""
    from qops.nn._torch import _np
    from qops.nn.intrinsic import quantized as nniq
    from qops.nn.quantized import _modules as nnq
    w, b = packed.unpack()
    if layer == "linear":
        m = (nniq.LinearReLU if relu else nnq.Linear)(w.shape[1], w.shape[0],
                                                      bias_=b is not None)
    elif packed.transpose():
        nd = int(layer[-2])
        stride, padding, output_padding, dilation = (tuple(int(v) for v in f()) for f in (
            packed.stride, packed.padding, packed.output_padding, packed.dilation))
        if nd == 1 and w.dim() == 4:
            # PyTorch packs conv_transpose1d as a conv_transpose2d of height 1
            w, stride, padding = w.squeeze(2), stride[1:], padding[1:]
            output_padding, dilation = output_padding[1:], dilation[1:]
        groups = int(packed.groups())
        m = getattr(nnq, f"ConvTranspose{nd}d")(
            w.shape[0], w.shape[1] * groups, tuple(w.shape[2:]), stride, padding,
            output_padding, groups, b is not None, dilation)
    else:
        nd = int(layer[4])
        stride, padding, dilation = (tuple(int(v) for v in f()) for f in (
            packed.stride, packed.padding, packed.dilation))
        if nd == 1 and w.dim() == 4:
            # PyTorch packs conv1d as a conv2d of height 1
            w, stride, padding, dilation = w.squeeze(2), stride[1:], padding[1:], dilation[1:]
        groups = int(packed.groups())
        cls = getattr(nniq if relu else nnq, f"ConvReLU{nd}d" if relu else f"Conv{nd}d")
        m = cls(w.shape[1] * groups, w.shape[0], tuple(w.shape[2:]), stride, padding,
                dilation, groups, bias=b is not None)
    m.set_weight_bias(_np(w), _np(b))
    m.scale, m.zero_point = float(scale), int(zero_point)
    return m


def _module_method(path, method, *args, **kwargs):
    """Stands in the traced graph for `<submodule at path>.<method>(...)` (never run)."""
    raise RuntimeError("_module_method is a tracing marker")


# Methods of FloatFunctional / QFunctional that forwards call instead of forward().
_FUNCTIONAL_METHODS = ("add", "add_scalar", "mul", "mul_scalar", "cat", "add_relu",
                       "mul_relu", "matmul")


def _where(node):
    """'file.py:LINE in forward: <code>' from the node's recorded stack, or ''."""
    trace = getattr(node, "stack_trace", None) or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\w+)\n\s*(.*)', trace)
    # The innermost frame outside torch's own package is the user's line.
    frames = [f for f in frames if "/torch/" not in f[0].replace("\\", "/")]
    if not frames:
        return ""
    path, line, func, code = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line} in {func}: {code.strip()}"


def _tracer_class(torch, leaf_types, leaf_modules):
    import torch.fx as fx

    class Tracer(fx.Tracer):
        def __init__(self, record_stack_traces=False):
            super().__init__()
            # Stack traces cost about a third of a trace: they are recorded only when a
            # capture failed and its message needs the lines of the user's forward.
            self.record_stack_traces = record_stack_traces

        def is_leaf_module(self, m, qualname):
            if qualname in leaf_modules or type(m) in leaf_types:
                return True
            if type(m) in (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict):
                return False
            return super().is_leaf_module(m, qualname)

    return Tracer


def _patched_functional_methods(torch, tracer):
    """Route FloatFunctional/QFunctional method calls on proxies to _module_method nodes."""
    import torch.fx as fx
    classes = [torch.ao.nn.quantized.FloatFunctional, torch.ao.nn.quantized.QFunctional]
    saved = []

    def has_proxy(args):
        found = []
        fx.node.map_aggregate(args, lambda a: found.append(a) if isinstance(a, fx.Proxy)
                              else None)
        return bool(found)

    for cls in classes:
        for name in _FUNCTIONAL_METHODS:
            original = cls.__dict__.get(name)
            if original is None:
                continue

            def wrapper(self, *args, _name=name, _original=original, **kwargs):
                if not has_proxy((args, kwargs)):
                    return _original(self, *args, **kwargs)
                path = tracer.path_of_module(self)
                return tracer.create_proxy("call_function", _module_method,
                                           (path, _name) + args, kwargs)
            saved.append((cls, name, original))
            setattr(cls, name, wrapper)
    return saved


def _convert_constant(torch, value, where):
    if isinstance(value, torch.dtype):
        from qops._dtypes import as_qdtype
        name = str(value).replace("torch.", "")
        try:
            return as_qdtype(name)
        except (TypeError, ValueError):
            return name
    if isinstance(value, torch.memory_format):
        return str(value).replace("torch.", "")
    if isinstance(value, torch.Size):
        return tuple(int(v) for v in value)
    if isinstance(value, torch.device):
        return str(value)
    return value


def capture(module, table, what, leaf_modules=(), convert=None):
    """A GraphModule running `module`'s forward, its layers converted through `table`.

    Parameters
    ----------
    module : torch.nn.Module
    table : {torch class: build(torch_module, convert_child)} of convertible layers
    what : the public function's name, for messages
    leaf_modules : qualified names of submodules to keep whole (not traced into)
    convert : function(torch_module, path) -> qops module (defaults to the table's builders)
    """
    try:
        return _capture(module, table, what, leaf_modules, convert, False)
    except _Unsupported:
        # Trace again with stack traces, so the message gives the lines of the forward.
        try:
            return _capture(module, table, what, leaf_modules, convert, True)
        except _Unsupported as e:
            raise TypeError(str(e)) from None


class _Unsupported(Exception):
    pass


def _capture(module, table, what, leaf_modules, convert, record_stack_traces):
    import torch
    import torch.fx as fx

    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
    # Fused modules (ConvReLU2d, ...) subclass Sequential but convert whole: only the plain
    # containers are traced into.
    leaf_types = {t for t in table if t not in containers}
    leaf_modules = set(leaf_modules)
    unknown = leaf_modules - {n for n, _ in module.named_modules()}
    if unknown:
        raise ValueError(f"{what}: leaf_modules names no submodule {sorted(unknown)}")
    tracer = _tracer_class(torch, leaf_types, leaf_modules)(record_stack_traces)
    saved = _patched_functional_methods(torch, tracer)
    was_training = module.training
    try:
        graph = tracer.trace(module)
    except fx.proxy.TraceError as e:
        raise TypeError(
            f"{what}: torch.fx could not trace {type(module).__name__}.forward: {e}\n"
            f"Its forward takes a branch or a loop on the values of a tensor, which a graph "
            f"cannot record. Either build the model in qops and pass it as target= (the "
            f"weights are copied by submodule name), or pass leaf_modules=['<name>', ...] to "
            f"keep the submodules whose forward does this whole (they must be layers qops "
            f"converts)") from e
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)
        module.train(was_training)

    names = _function_names(torch)
    packed_ops = _packed_ops(torch)
    nodes, modules, buffers, problems = [], {}, {}, []
    packed, ready = {}, {}    # packed-weight get_attr nodes; qops modules built from them
    mods = dict(module.named_modules())
    params = dict(module.named_parameters())
    node_name = {}

    def attr_value(target):
        if target in params:
            return params[target]
        owner_path, _, leaf = target.rpartition(".")
        return getattr(module.get_submodule(owner_path) if owner_path else module, leaf)

    def ref_of(n):
        if n.name in packed:
            problems.append(f"node %{n.name}: a packed weight read by an op qops does not "
                            f"unpack")
            return None
        return Ref(node_name[n.name])

    def arg(a, where):
        if isinstance(a, fx.Node):
            return ref_of(a)
        if isinstance(a, tuple):
            return tuple(arg(v, where) for v in a)
        if isinstance(a, list):
            return [arg(v, where) for v in a]
        if isinstance(a, dict):
            return {k: arg(v, where) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(arg(a.start, where), arg(a.stop, where), arg(a.step, where))
        if isinstance(a, torch.Tensor):
            problems.append(f"{where}: a tensor constant in the arguments is not supported")
            return None
        return _convert_constant(torch, a, where)

    def convert_module(tm, path):
        if convert is not None:
            return convert(tm, path)
        build = table[type(tm)]
        m = build(tm, lambda child, name: convert_module(child, f"{path}.{name}"))
        m.train(tm.training)
        return m

    for n in graph.nodes:
        name = re.sub(r"\W", "_", n.name)
        node_name[n.name] = name
        where = _where(n)
        label = f"node %{name} ({n.op} {getattr(n.target, '__name__', n.target)})" + \
            (f" at {where}" if where else "")
        if n.op == "call_function" and n.target in packed_ops and len(n.args) == 4 \
                and isinstance(n.args[1], fx.Node) and n.args[1].name in packed:
            # torch.ops.quantized.conv2d(x, packed, scale, zero_point) and the like: a module
            layer, relu = packed_ops[n.target]
            qparams = [attr_value(a.target) if isinstance(a, fx.Node) and a.op == "get_attr"
                       else a for a in n.args[2:]]
            try:
                m = _packed_module(torch, layer, relu, packed[n.args[1].name], *qparams)
            except (TypeError, ValueError, RuntimeError) as e:
                problems.append(f"{label}: cannot unpack its weight: {e}")
                continue
            # a weight read by several calls gets a module per call (their qparams differ)
            path, k = n.args[1].target, 1
            while path in ready:
                path, k = f"{n.args[1].target}_{k}", k + 1
            ready[path] = m
            nodes.append(Node(name, "module", path, (arg(n.args[0], label),), {}, where))
            continue
        args = tuple(arg(a, label) for a in n.args)
        kwargs = {k: arg(v, label) for k, v in n.kwargs.items()}
        if n.op == "placeholder":
            default = () if not n.args else (n.args[0],)
            nodes.append(Node(name, "input", n.target, default, where=where))
        elif n.op == "output":
            nodes.append(Node(name, "output", "output", args, where=where))
        elif n.op == "call_module":
            tm = mods[n.target]
            if type(tm) not in table:
                problems.append(f"{label}: no qops equivalent for module "
                                f"{type(tm).__module__}.{type(tm).__name__} at '{n.target}'")
                continue
            if n.target not in modules:
                modules[n.target] = tm
            nodes.append(Node(name, "module", n.target, args, kwargs, where))
        elif n.op == "get_attr":
            value = attr_value(n.target)
            if isinstance(value, torch.ScriptObject) and hasattr(value, "unpack"):
                packed[n.name] = value            # unpacked by the op that reads it
            elif isinstance(value, torch.Tensor):
                from qops.nn.module import _to_numpy
                buffers[n.target] = _to_numpy(value)
                nodes.append(Node(name, "attr", n.target, where=where))
            else:
                problems.append(f"{label}: attribute of type {type(value).__name__}")
        elif n.op == "call_function":
            if n.target is _module_method:
                path, method = n.args[0], n.args[1]
                tm = mods[path]
                if type(tm) not in table:
                    problems.append(f"{label}: no qops equivalent for module "
                                    f"{type(tm).__name__} at '{path}'")
                    continue
                if path not in modules:
                    modules[path] = tm
                nodes.append(Node(name, "module_method", (path, method), args[2:], kwargs,
                                  where))
                continue
            fname = names.get(n.target) or _LIBRARY_FUNCTIONS.get(
                (getattr(n.target, "__module__", None), getattr(n.target, "__name__", None)))
            if fname is None:
                target = getattr(n.target, "__qualname__", None) or str(n.target)
                mod = getattr(n.target, "__module__", "") or ""
                problems.append(f"{label}: function {mod + '.' if mod else ''}{target} is not "
                                f"supported")
                continue
            if fname.startswith("max_pool") and "with_indices" in getattr(
                    n.target, "__name__", ""):
                kwargs.setdefault("return_indices", False)
            nodes.append(Node(name, "function", fname, args, kwargs, where))
        elif n.op == "call_method":
            if n.target not in METHODS:
                problems.append(f"{label}: tensor method .{n.target}() is not supported")
                continue
            nodes.append(Node(name, "method", n.target, args, kwargs, where))
        else:
            problems.append(f"{label}: node kind {n.op} is not supported")
    if problems:
        raise _Unsupported(f"{what}: {len(problems)} node(s) of {type(module).__name__}.forward "
                        f"cannot run in qops:\n  " + "\n  ".join(problems)
                        + "\n(a submodule qops cannot convert may be given as target= with a "
                          "qops model; see qops.nn.from_torch)")
    # Converted only once the whole graph is known to run (weights are copied and packed).
    modules = {path: convert_module(tm, path) for path, tm in modules.items()}
    modules.update(ready)
    gm = GraphModule(nodes, modules, buffers, class_name=type(module).__name__)
    # Keep the torch names of the levels the graph went through (for printing).
    for path, m in gm.named_modules():
        if path and path in mods and type(m).__name__ == "GraphSubmodules":
            m.__dict__["original_name"] = type(mods[path]).__name__
    gm.train(was_training)
    return gm
