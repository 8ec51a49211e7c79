"""Graph-mode quantization: int8 from an unmodified float model (torch's quantize_fx names).

    g = qops.nn.from_torch(float_torch_model)            # or any qops GraphModule
    p = prepare_fx(g, get_default_qconfig_mapping("x86"), example_inputs)
    p(calibration_batch)
    q = convert_fx(p)

Quantization-aware training: `prepare_qat_fx(g.train(), get_default_qat_qconfig_mapping("x86"),
example_inputs)`, train (the forward is float with fake quantization), then `convert_fx`.

The model needs no QuantStub, FloatFunctional or fuse list: `fuse_fx` folds conv/linear +
batch norm (+ relu) by finding them in the graph, `prepare_fx` puts an observer after every
value a quantized op will produce or read, and `convert_fx` swaps in quantized modules and
functions with the observed qparams, quantizes the graph's inputs and dequantizes its outputs.
Which ops observe their output, share their input's qparams or have fixed qparams follows
PyTorch's x86 backend configuration (docs/semantics.md §16.1):

- own output observer: conv/linear (and their fusions), batch/layer/group/instance norm,
  hardswish, elu, leaky_relu, add, mul (with a tensor operand), cat (whose inputs then share
  its observer, so cat never requantizes);
- the input's qparams: pools, adaptive pools, relu, relu6, hardtanh, clamp, dropout, flatten,
  reshape/view, permute/transpose, chunk/split and their items, mean, squeeze/unsqueeze,
  contiguous, interpolate, identity;
- fixed qparams: sigmoid, hardsigmoid and nn.Softmax (1/256, 0), tanh (2/256, 128);
- anything else runs in float between a dequantize and a quantize.
"""
from __future__ import annotations

import copy
import inspect
import re
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from qops._qtensor import QTensor
from qops.nn import _layers as fl
from qops.nn._graph import GraphModule, Node, Ref, _walk

if TYPE_CHECKING:
    from typing_extensions import Self

    from qops.nn.module import Module

__all__ = ["QConfigMapping", "get_default_qconfig_mapping", "get_default_qat_qconfig_mapping",
           "fuse_fx", "prepare_fx", "prepare_qat_fx", "convert_fx", "quantize_jit",
           "quantize_dynamic_jit"]


# -- which qconfig a node gets ----------------------------------------------------------------
class QConfigMapping:
    """Which qconfig each part of a model gets (torch.ao.quantization.QConfigMapping).

    Priority, highest first: module name, module name regex, object type, global. Object types
    are module classes or function/method names ("add", "relu", ...) as the graph names them.
    A qconfig of None leaves that part in float.
    """

    def __init__(self) -> None:
        self.global_qconfig = None
        self.object_type_qconfigs = {}
        self.module_name_regex_qconfigs = {}
        self.module_name_qconfigs = {}

    def set_global(self, global_qconfig: Any) -> Self:
        self.global_qconfig = global_qconfig
        return self

    def set_object_type(self, object_type: Any, qconfig: Any) -> Self:
        self.object_type_qconfigs[object_type] = qconfig
        return self

    def set_module_name_regex(self, module_name_regex: str, qconfig: Any) -> Self:
        self.module_name_regex_qconfigs[module_name_regex] = qconfig
        return self

    def set_module_name(self, module_name: str, qconfig: Any) -> Self:
        self.module_name_qconfigs[module_name] = qconfig
        return self

    def qconfig_for(self, path: Any, kind: str) -> Any:
        """The qconfig of a node: `path` its module path (or None), `kind` its type or name."""
        if path is not None:
            for name, qc in self.module_name_qconfigs.items():
                if path == name or path.startswith(name + ".") or name == "":
                    return qc
            for rx, qc in self.module_name_regex_qconfigs.items():
                if re.fullmatch(rx, path):
                    return qc
        if kind in self.object_type_qconfigs:
            return self.object_type_qconfigs[kind]
        return self.global_qconfig

    def __repr__(self) -> str:
        return (f"QConfigMapping(global={self.global_qconfig!r}, "
                f"object_types={len(self.object_type_qconfigs)}, "
                f"module_names={len(self.module_name_qconfigs)})")


def _fixed(kind, is_qat=False):
    from qops.quantization import fake_quantize as fq
    from qops.quantization import observer as obs
    from qops.quantization.qconfig import QConfig
    act = (obs.default_fixed_qparams_range_neg1to1_observer if kind == "neg1to1"
           else obs.default_fixed_qparams_range_0to1_observer)
    if is_qat:
        # PyTorch's QAT mapping: the same fixed qparams, applied by a fake quantizer
        return QConfig(activation=fq.FixedQParamsFakeQuantize.with_args(observer=act),
                       weight=fq.default_weight_fake_quant)
    return QConfig(activation=act, weight=obs.default_weight_observer)


def _default_mapping(qconfig, is_qat):
    from qops.quantization import observer as obs
    from qops.quantization.qconfig import QConfig
    m = QConfigMapping().set_global(qconfig)
    # layer norms get the backend's activation qconfig by type, as in PyTorch's mapping (its
    # weights stay float): a set_global() afterwards does not reach them
    layernorm = QConfig(activation=qconfig.activation, weight=obs.default_placeholder_observer)
    for kind in (fl.LayerNorm, "layer_norm"):
        m.set_object_type(kind, layernorm)
    zero_one, neg_one = _fixed("0to1", is_qat), _fixed("neg1to1", is_qat)
    # (nn.Softmax too, which convert turns into quantized.Softmax; F.softmax stays float)
    for kind in (fl.Hardsigmoid, "hardsigmoid", fl.Sigmoid, "sigmoid", fl.Softmax):
        m.set_object_type(kind, zero_one)
    for kind in (fl.Tanh, "tanh"):
        m.set_object_type(kind, neg_one)
    # transposed convs take per-tensor weights (PyTorch's mapping; its kernels have no
    # per-channel form)
    from qops.quantization import fake_quantize as fq
    transpose = QConfig(activation=qconfig.activation,
                        weight=fq.default_weight_fake_quant if is_qat
                        else obs.default_weight_observer)
    for kind in (fl.ConvTranspose1d, fl.ConvTranspose2d, fl.ConvTranspose3d):
        m.set_object_type(kind, transpose)
    return m


def get_default_qconfig_mapping(backend: str = "x86", version: int = 0) -> QConfigMapping:
    """PyTorch's default mapping: the backend's qconfig, fixed qparams for sigmoid/tanh."""
    from qops.quantization.qconfig import get_default_qconfig
    return _default_mapping(get_default_qconfig(backend, version), False)


def get_default_qat_qconfig_mapping(backend: str = "x86", version: int = 1) -> QConfigMapping:
    """PyTorch's default QAT mapping: the backend's QAT qconfig, fixed-qparams fake quants."""
    from qops.quantization.qconfig import get_default_qat_qconfig
    return _default_mapping(get_default_qat_qconfig(backend, version), True)


def _as_mapping(qconfig_mapping):
    if isinstance(qconfig_mapping, QConfigMapping):
        return qconfig_mapping
    if isinstance(qconfig_mapping, dict):       # the older qconfig_dict form
        m = QConfigMapping().set_global(qconfig_mapping.get(""))
        for kind, qc in qconfig_mapping.get("object_type", []):
            m.set_object_type(kind, qc)
        for name, qc in qconfig_mapping.get("module_name", []):
            m.set_module_name(name, qc)
        for rx, qc in qconfig_mapping.get("module_name_regex", []):
            m.set_module_name_regex(rx, qc)
        return m
    raise TypeError(f"qconfig_mapping must be a QConfigMapping or a dict; got "
                    f"{type(qconfig_mapping).__name__}")


# -- graph helpers ----------------------------------------------------------------------------
def _check_graph(model, what):
    if not isinstance(model, GraphModule):
        raise TypeError(f"{what}: expected a qops.nn.GraphModule (qops.nn.from_torch of a torch "
                        f"model, a qops.nn.Sequential, or GraphModule(nodes, modules)); got "
                        f"{type(model).__name__}")


def _as_graph(model, what):
    """A GraphModule for `model`: itself, or the chain of a qops Sequential's children."""
    from qops.nn.module import Sequential
    if isinstance(model, Sequential):
        model = copy.deepcopy(model)
        nodes, prev = [Node("input", "input", "input")], "input"
        for name in model._modules:
            nodes.append(Node(f"n_{name}", "module", name, [Ref(prev)]))
            prev = f"n_{name}"
        nodes.append(Node("output", "output", "output", [Ref(prev)]))
        g = GraphModule(nodes, dict(model._modules), class_name="Sequential")
        g.train(model.training)
        return g
    _check_graph(model, what)
    return model


def _refs(x):
    """Names of the nodes referred to inside a nested argument, in order."""
    found = []
    _walk(x, lambda r: found.append(r.name) or r)
    return found


def _node_refs(node):
    return _refs(list(node.args)) + _refs(list(node.kwargs.values()))


def _users(nodes):
    users = {n.name: [] for n in nodes}
    for n in nodes:
        for r in _node_refs(n):
            users[r].append(n)
    return users


def _replace_refs(x, old, new):
    return _walk(x, lambda r: Ref(new) if r.name == old else r)


def _rewire(nodes, old, new):
    for n in nodes:
        n.args = _replace_refs(n.args, old, new)
        n.kwargs = _replace_refs(n.kwargs, old, new)


def _delete_module(model, path):
    *parents, leaf = path.split(".")
    owner = model
    for p in parents:
        owner = owner._modules[p]
    del owner._modules[leaf]


def _rebuild(model, nodes):
    model.__dict__["nodes"] = nodes
    model._check()
    model.__dict__["_plan"] = None
    return model


# -- fusion -----------------------------------------------------------------------------------
_CONVS = (fl.Conv1d, fl.Conv2d, fl.Conv3d)
_BNS = (fl.BatchNorm1d, fl.BatchNorm2d, fl.BatchNorm3d)


def _is_relu(model, node, after_binary=False):
    """Whether `node` is a relu PyTorch's graph mode fuses into the op before it: nn.ReLU and
    F.relu after a conv or linear; torch.relu too after add/mul; never x.relu()."""
    if node.op == "module":
        return type(model.get_submodule(node.target)) is fl.ReLU
    return node.op == "function" and (node.target == "relu" or
                                      (after_binary and node.target == "torch.relu"))


_FF_METHODS = {"add": ["add"], "mul": ["mul"], "cat": ["cat"], "add_relu": ["add", "relu"],
               "mul_relu": ["mul", "relu"]}


def _lower_float_functional(model, nodes):
    """FloatFunctional calls as the functions they run (torch.fx traces through them so)."""
    from qops.nn.quantized import FloatFunctional
    out, drop = [], set()
    for n in nodes:
        if n.op == "module_method" and isinstance(model.get_submodule(n.target[0]),
                                                  FloatFunctional) \
                and n.target[1] in _FF_METHODS:
            steps = _FF_METHODS[n.target[1]]
            args, kwargs = n.args, dict(n.kwargs)
            if steps[0] == "cat" and "x" in kwargs:
                args = (kwargs.pop("x"),) + tuple(args)
            name = n.name if len(steps) == 1 else f"{n.name}_{steps[0]}"
            out.append(Node(name, "function", steps[0], args, kwargs, n.where))
            if len(steps) == 2:
                out.append(Node(n.name, "function", "relu", [Ref(name)], where=n.where))
            drop.add(n.target[0])
            continue
        out.append(n)
    for path in drop:
        if not any(m.op in ("module", "module_method") and (m.target == path or (
                isinstance(m.target, tuple) and m.target[0] == path)) for m in out):
            _delete_module(model, path)
    return out


def fuse_fx(model: Module, fuse_custom_config: Optional[dict[Any, Any]] = None,
            backend_config: Optional[dict[Any, Any]] = None) -> Module:
    """Fold conv/linear + batch norm (+ relu), and fuse batch norm + relu, found in the graph.

    Parameters
    ----------
    model : qops.nn.GraphModule in eval mode (a copy is fused)
    """
    model = _as_graph(model, "fuse_fx")
    from qops.quantization.fuse_modules import fuse_known_modules
    model = copy.deepcopy(model)
    nodes = _lower_float_functional(model, list(model.nodes))
    removed = set()
    for n in nodes:
        if n.name in removed or n.op != "module":
            continue
        first = model.get_submodule(n.target)
        if not isinstance(first, _CONVS + (fl.Linear,) + _BNS):
            continue
        chain, mods = [n], [first]
        users = _users([m for m in nodes if m.name not in removed])
        cur = n
        for step in ("bn", "relu"):
            us = users.get(cur.name, [])
            if len(us) != 1 or us[0].name in removed:
                break
            nxt = us[0]
            if step == "bn" and nxt.op == "module" and isinstance(first, _CONVS + (fl.Linear,)) \
                    and isinstance(model.get_submodule(nxt.target), _BNS):
                chain.append(nxt)
                mods.append(model.get_submodule(nxt.target))
                cur = nxt
                continue
            # no batch norm (or after it): a relu may follow
            if _is_relu(model, nxt) and _refs(list(nxt.args))[:1] == [cur.name]:
                chain.append(nxt)
                mods.append(model.get_submodule(nxt.target) if nxt.op == "module"
                            else fl.ReLU())
                cur = nxt
            break
        if len(mods) == 1 or (isinstance(first, _BNS) and isinstance(first, fl.BatchNorm1d)):
            continue
        # a conv/linear the graph also calls elsewhere cannot be replaced by a fused one (a
        # shared bn or relu can: only this call of it is folded, the module stays)
        if sum(m.op == "module" and m.target == n.target and m.name not in removed
               for m in nodes) > 1:
            continue
        try:
            fused = fuse_known_modules(mods, is_qat=model.training)
        except (NotImplementedError, ValueError, KeyError, TypeError):
            continue
        model._place(n.target, fused[0])
        for extra in chain[1:]:
            _rewire(nodes, extra.name, n.name)
            removed.add(extra.name)
            if extra.op == "module":
                still = [m for m in nodes if m.name not in removed and m.op == "module"
                         and m.target == extra.target]
                if not still:
                    _delete_module(model, extra.target)
    return _rebuild(model, [n for n in nodes if n.name not in removed])


def _drop_stubs(model):
    """The graph without QuantStub/DeQuantStub calls (identities in float), as PyTorch's
    prepare_fx leaves them: observing their outputs again would count the same values twice
    in a histogram and move a moving average."""
    from qops.quantization.stubs import DeQuantStub, QuantStub
    nodes, drop = list(model.nodes), set()
    for n in nodes:
        if n.op == "module" and isinstance(model.get_submodule(n.target),
                                           (QuantStub, DeQuantStub)) \
                and len(n.args) == 1 and not n.kwargs and isinstance(n.args[0], Ref):
            _rewire(nodes, n.name, n.args[0].name)
            drop.add(n.name)
    if not drop:
        return model
    nodes = [n for n in nodes if n.name not in drop]
    used = {n.target for n in nodes if n.op == "module"}
    for n in model.nodes:
        if n.name in drop and n.target not in used and n.target in model._modules:
            del model._modules[n.target]
    return _rebuild(model, nodes)


# -- node roles ---------------------------------------------------------------------------------
_OWN_MODULES = ("Conv1d", "Conv2d", "Conv3d", "Linear", "ConvReLU1d", "ConvReLU2d",
                "ConvReLU3d", "LinearReLU", "ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d",
                "ConvBnReLU2d", "ConvBnReLU3d", "BatchNorm2d", "BatchNorm3d", "BNReLU2d",
                "BNReLU3d", "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
                "InstanceNorm3d", "Hardswish", "ELU", "LeakyReLU", "Softmax", "ConvTranspose1d",
                "ConvTranspose2d", "ConvTranspose3d")
_SHARE_MODULES = ("ReLU", "ReLU6", "Hardtanh", "MaxPool1d", "MaxPool2d", "MaxPool3d",
                  "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
                  "AdaptiveAvgPool3d", "Flatten", "Dropout", "Identity", "Upsample",
                  "UpsamplingNearest2d", "UpsamplingBilinear2d", "QuantStub", "DeQuantStub")
_FIXED_MODULES = ("Sigmoid", "Hardsigmoid", "Tanh")
# PyTorch's x86 lists (backend_config/_common_operator_config_utils.py). chunk and split are
# not in them: PyTorch runs them (and the items taken from their results) in float, and each
# item a quantized op reads gets an observer of its own; so do x.flatten(), torch.reshape and
# torch.permute (the methods .reshape() and .permute() and torch.flatten share). Dropout is
# outside the share list too but sees the values its input's observer saw: sharing gives the
# same ints.
_SHARE_FUNCTIONS = {"relu", "relu6", "hardtanh", "clamp", "dropout", "flatten",
                    "transpose", "mean", "squeeze", "unsqueeze",
                    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
                    "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                    "adaptive_avg_pool3d", "interpolate"}
_SHARE_METHODS = {"view", "reshape", "contiguous", "permute", "transpose", "mean",
                  "squeeze", "unsqueeze", "relu", "clamp"}
_FIXED_FUNCTIONS = {"sigmoid", "hardsigmoid", "tanh"}
# functions with an output observer of their own; only their first argument is an
# activation (layer_norm's weight and bias stay float, as PyTorch's)
_OWN_FUNCTIONS = {"hardswish", "layer_norm"}
_BINARY = {"add", "torch.add", "mul", "torch.mul", "torch.matmul"}
_BINARY_RELU = {"add", "torch.add", "mul", "torch.mul"}      # (no matmul + relu pattern)


def _role(model, node, kinds):
    """'own', 'share', 'fixed', 'cat', 'binary', 'own_fn' or None (float) for a node."""
    if node.op == "module":
        name = type(model.get_submodule(node.target)).__name__
        if name in _OWN_MODULES:
            return "own"
        if name in _SHARE_MODULES:
            return "share"
        if name in _FIXED_MODULES:
            return "fixed"
        return None
    if node.op == "function":
        t = node.target
        if t in _BINARY:
            tensors = [r for r in _refs(list(node.args)[:2]) if kinds.get(r) == "tensor"]
            return "binary" if len(tensors) == 2 else None
        if t == "cat":
            return "cat"
        if t in _OWN_FUNCTIONS:
            return "own_fn"
        if t in _FIXED_FUNCTIONS:
            return "fixed"
        if t in _SHARE_FUNCTIONS:
            return "share"
        return None
    if node.op == "method":
        if node.target in _SHARE_METHODS:
            return "share"
        if node.target in _FIXED_FUNCTIONS:
            return "fixed"
    return None


def _kind_of(value):
    if isinstance(value, (np.ndarray, QTensor)):
        return "tensor"
    # (attention returns (output, None) without its weights; MViT's _unsqueeze (x, ndim))
    if isinstance(value, (tuple, list)) and any(isinstance(v, (np.ndarray, QTensor))
                                                for v in value):
        return "tensors"
    return "other"


def _value_kinds(model, example_inputs):
    """{node name: 'tensor' | 'tensors' | 'other'} from one float run on example_inputs."""
    kinds = {}
    inputs, steps, n, _ = model._plan_now()
    env = [None] * n
    for k, (i, node) in enumerate(inputs):
        env[i] = example_inputs[k] if k < len(example_inputs) else (
            node.args[0] if node.args else None)
        kinds[node.name] = _kind_of(env[i])
    for i, fn, getters, kw, node, frees in steps:
        if fn is None:
            continue
        env[i] = fn(*[g(env) for g in getters], **{k: g(env) for k, g in kw})
        kinds[node.name] = _kind_of(env[i])
        for j in frees:
            env[j] = None
    return kinds


def _kind(node, model):
    if node.op == "module":
        return type(model.get_submodule(node.target))
    return node.target


# -- prepare ----------------------------------------------------------------------------------
def prepare_fx(model: Module, qconfig_mapping: Any, example_inputs: Any = (),
               prepare_custom_config: Optional[dict[Any, Any]] = None,
               _equalization_config: Optional[dict[Any, Any]] = None,
               backend_config: Optional[dict[Any, Any]] = None) -> Module:
    """Fuse, then attach observers where the quantized model will need qparams.

    Parameters
    ----------
    model : qops.nn.GraphModule (float; `qops.nn.from_torch` of any torch model) or a qops
        Sequential (its chain of children becomes the graph)
    qconfig_mapping : QConfigMapping (or a qconfig_dict)
    example_inputs : tuple of float32 arrays the forward takes (tells tensors from sizes)
    """
    model = _as_graph(model, "prepare_fx")
    if model.training:
        raise ValueError("prepare_fx: the model is in training mode; call model.eval() first "
                         "(batch norm is folded; for quantization-aware training use "
                         "prepare_qat_fx)")
    return _prepare(model, qconfig_mapping, example_inputs, False)


def _prepare(model, qconfig_mapping, example_inputs, is_qat):
    mapping = _as_mapping(qconfig_mapping)
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    model = _drop_stubs(fuse_fx(model))
    # one float run tells tensors from sizes; in eval mode on a copy, so that no batch norm
    # statistics move and no dropout fires
    probe = copy.deepcopy(model).eval() if is_qat else model
    kinds = _value_kinds(probe, [np.asarray(x, np.float32) for x in example_inputs])
    nodes = list(model.nodes)
    users = _users(nodes)
    qparams_of = {}          # node name -> observer path whose qparams its value has
    obs_count = [0]
    new_nodes = []
    observed = {}            # node name -> observer node name inserted after it
    qconfigs = {}

    def add_observer(after, qconfig):
        path = f"activation_post_process_{obs_count[0]}"
        obs_count[0] += 1
        model.add_module(path, qconfig.activation())
        name = f"{after.name}_{path}"
        new_nodes.append(Node(name, "module", path, [Ref(after.name)], where=after.where))
        observed[after.name] = name
        qparams_of[after.name] = path
        return path

    def input_quantized(ref):
        return ref in qparams_of

    # add/mul followed by relu is one pattern (quantized add_relu): its observer goes after
    # the relu, as PyTorch places it, so the qparams see the relu's output.
    qnodes = set()           # nodes whose value is a QTensor once converted
    shares = set()           # nodes that take their input's qparams
    relu_after = {}
    for node in nodes:
        us = users[node.name]
        if _role(model, node, kinds) == "binary" and node.target in _BINARY_RELU \
                and len(us) == 1 \
                and _is_relu(model, us[0], after_binary=True) \
                and _refs(list(us[0].args))[:1] == [node.name]:
            relu_after[us[0].name] = node.name

    for node in nodes:
        new_nodes.append(node)
        orig_refs = _node_refs(node)
        path = node.target if node.op == "module" else None
        qconfig = mapping.qconfig_for(path, _kind(node, model)) if node.op != "output" else None
        role = _role(model, node, kinds) if qconfig is not None else None
        for r in orig_refs:
            # (in QAT the model returns the fake-quantized values, as PyTorch's does)
            if r in observed and (node.op != "output" or is_qat):
                node.args = _replace_refs(node.args, r, observed[r])
                node.kwargs = _replace_refs(node.kwargs, r, observed[r])
        if node.op == "output":
            continue
        kind = kinds.get(node.name, "other")
        if node.op == "input":
            if kind == "tensor" and qconfig is not None and any(
                    _role(model, u, kinds) for u in users[node.name]):
                qconfigs[node.name] = qconfig
                add_observer(node, qconfig)
                qnodes.add(node.name)
            continue
        if node.name in relu_after and relu_after[node.name] in qconfigs:
            qnodes.add(node.name)
            add_observer(node, qconfig)
            qparams_of[relu_after[node.name]] = qparams_of[node.name]
            continue
        src_ins = [r for r in orig_refs if kinds.get(r) in ("tensor", "tensors")]
        if role == "own_fn":
            src_ins = [r for r in _refs(list(node.args[:1])) if r in src_ins]
        if role is None or kind not in ("tensor", "tensors"):
            continue
        if role == "share":
            first = src_ins[0] if src_ins else None
            if first is not None and first in qnodes:
                qparams_of[node.name] = qparams_of[first]
                qconfigs[node.name] = qconfig
                qnodes.add(node.name)
                shares.add(node.name)
                if kind == "tensor":
                    # PyTorch gives the op an output observer that is its input's observer:
                    # that observer then also sees the op's outputs (a histogram counts them)
                    _observer_node(node, qparams_of[first], new_nodes, observed)
            continue
        if not all(r in qnodes for r in src_ins) and role in ("own", "binary", "cat",
                                                                     "own_fn"):
            # a float input: observe it where it is produced (PyTorch's input observer)
            for r in src_ins:
                if not input_quantized(r):
                    _observe_value(model, r, qconfig, new_nodes, observed, qparams_of,
                                   obs_count)
            node.args = _replace_all(node.args, observed)
            node.kwargs = _replace_all(node.kwargs, observed)
        qconfigs[node.name] = qconfig
        qnodes.add(node.name)
        if role == "own" and node.op == "module":
            model.get_submodule(node.target).qconfig = qconfig
        if role == "fixed":
            add_observer(node, qconfig)
            continue
        if role == "binary" and node.name in relu_after.values():
            continue                      # observed after its relu
        if role == "cat":
            # As PyTorch's prepare: the observer found after the first input observes every
            # input (the observers after the others are made that one: a conv's output then
            # takes the combined qparams; a pool's keeps its input's but is counted) and the
            # output. torch.cat of quantized tensors keeps the first input's qparams.
            tensors = node.args[0] if node.args else node.kwargs.get("tensors")
            ins0 = [_base(r, observed) for r in _refs(tensors)]
            if ins0:
                shared = qparams_of[ins0[0]]
                for r in ins0[1:]:
                    _rebind(r, shared, observed, qparams_of, shares, new_nodes)
                qparams_of[node.name] = shared
                _observer_node(node, shared, new_nodes, observed)
            continue
        add_observer(node, qconfig)
    if is_qat:
        _swap_qat_modules(model, new_nodes)
    model.__dict__["_qops_fx"] = {"qnodes": qnodes, "kinds": kinds,
                                  "qparams_of": qparams_of, "observed": observed}
    return _rebuild(model, new_nodes)


def _swap_qat_modules(model, nodes):
    """Conv/linear (and their fusions) that got a qconfig become their QAT modules."""
    from qops.quantization.quantization_mappings import get_default_qat_module_mappings
    qat = get_default_qat_module_mappings()
    done = set()
    for n in nodes:
        if n.op != "module" or n.target in done:
            continue
        mod = model.get_submodule(n.target)
        if type(mod) in qat and getattr(mod, "qconfig", None) is not None:
            model._place(n.target, qat[type(mod)].from_float(mod).train(model.training))
            done.add(n.target)


def _base(ref, observed):
    # a reference to an observer node stands for the node it observes
    for k, v in observed.items():
        if v == ref:
            return k
    return ref


def _replace_all(x, observed):
    for k, v in observed.items():
        x = _replace_refs(x, k, v)
    return x


def _observer_node(node, path, new_nodes, observed):
    """A node calling observer `path` on `node`'s value, right after it."""
    name = f"{node.name}_{path}"
    at = next(i for i, n in enumerate(new_nodes) if n.name == node.name)
    new_nodes.insert(at + 1, Node(name, "module", path, [Ref(node.name)], where=node.where))
    observed[node.name] = name


def _rebind(ref, shared, observed, qparams_of, shares, new_nodes):
    """Make the observer node after value `ref` call observer `shared` (cat's rule)."""
    obs_name = observed.get(ref)
    obs = next((n for n in new_nodes if n.name == obs_name), None) if obs_name else None
    if obs is None or obs.target == shared:
        return
    obs.target = shared
    if ref not in shares:
        # the value's own observer: its qparams become the shared ones (a share op keeps its
        # input's, its observer only counts its outputs)
        qparams_of[ref] = shared


def _observe_value(model, ref, qconfig, new_nodes, observed, qparams_of, count):
    path = f"activation_post_process_{count[0]}"
    count[0] += 1
    model.add_module(path, qconfig.activation())
    name = f"{ref}_{path}"
    at = next(i for i, n in enumerate(new_nodes) if n.name == ref)
    new_nodes.insert(at + 1, Node(name, "module", path, [Ref(ref)]))
    observed[ref] = name
    qparams_of[ref] = path


def prepare_qat_fx(model: Module, qconfig_mapping: Any, example_inputs: Any = (),
                   prepare_custom_config: Optional[dict[Any, Any]] = None,
                   backend_config: Optional[dict[Any, Any]] = None) -> Module:
    """Prepare a float model in training mode for quantization-aware training, in graph mode.

    As prepare_fx, with the QAT side of each step (torch's prepare_qat_fx): conv/linear + batch
    norm (+ relu) fuse into the QAT modules that simulate the folding (qops.nn.intrinsic.qat),
    conv/linear layers get a fake-quantized weight (qops.nn.qat), and the qconfig's activation
    fake quantizers go where prepare_fx puts observers. The model then trains as eager QAT
    models do (qops has no autograd: the forward is the fake-quantized float one, the fake
    quantizers keep their straight-through masks); convert_fx gives the int8 graph.

    Parameters
    ----------
    model : qops.nn.GraphModule (or qops Sequential) in training mode
    qconfig_mapping : QConfigMapping (get_default_qat_qconfig_mapping("x86")) or qconfig_dict
    example_inputs : tuple of float32 arrays the forward takes (tells tensors from sizes)
    """
    model = _as_graph(model, "prepare_qat_fx")
    if not model.training:
        raise ValueError("prepare_qat_fx: the model is in eval mode; call model.train() first "
                         "(prepare_fx is the post-training path)")
    return _prepare(model, qconfig_mapping, example_inputs, True)


# -- convert ----------------------------------------------------------------------------------
def _qparams(model, path):
    scale, zp = model.get_submodule(path).calculate_qparams()
    return float(np.asarray(scale).ravel()[0]), int(np.asarray(zp).ravel()[0])


def convert_fx(graph_module: Module, convert_custom_config: Optional[dict[Any, Any]] = None,
               _remove_qconfig: bool = True, qconfig_mapping: Any = None,
               backend_config: Optional[dict[Any, Any]] = None) -> Module:
    """Swap observed modules and ops for quantized ones; quantize inputs, dequantize outputs.

    Parameters
    ----------
    graph_module : the model prepare_fx (after calibration) or prepare_qat_fx (after training)
        returned
    """
    _check_graph(graph_module, "convert_fx")
    info = graph_module.__dict__.get("_qops_fx")
    if info is None:
        raise ValueError("convert_fx: the model was not prepared by prepare_fx")
    from qops.quantization.quantization_mappings import get_default_static_quant_module_mappings
    from qops.quantization.quantize import _from_float
    model = copy.deepcopy(graph_module)
    mapping = get_default_static_quant_module_mappings()
    qparams_of = info["qparams_of"]
    obs_nodes = {n.name: n for n in model.nodes if n.op == "module"
                 and n.target.startswith("activation_post_process_")}
    out_nodes = []
    last_call = {n.target: n.name for n in model.nodes if n.op == "module"
                 and n.name in info["qnodes"]}
    quantized = set()     # names of nodes whose value is a QTensor in the converted graph
    alias = {}            # observer node name -> the node it observed
    quantize_of = {}      # float node name -> the quantize node made of it

    def q_ref(r):
        return alias.get(r, r)

    for node in model.nodes:
        if node.name in obs_nodes:
            src = node.args[0].name
            alias[node.name] = q_ref(src)
            continue
        node.args = _resolve_aliases(node.args, alias)
        node.kwargs = _resolve_aliases(node.kwargs, alias)
        if node.op == "input":
            out_nodes.append(node)
            if node.name in qparams_of:
                s, z = _qparams(model, qparams_of[node.name])
                qn = Node(f"{node.name}_quantize", "function", "quantize_per_tensor",
                          [Ref(node.name), s, z, _quint8()], where=node.where)
                out_nodes.append(qn)
                alias[node.name] = qn.name
                quantized.add(qn.name)
            continue
        if node.op == "output":
            node.args = (_dequantize_refs(node.args[0], quantized, out_nodes),)
            out_nodes.append(node)
            continue
        ins = list(dict.fromkeys(_refs(list(node.args)) + _refs(list(node.kwargs.values()))))
        qin = [r for r in ins if r in quantized]
        mine = node.name in info["qnodes"]
        if not mine and info["kinds"].get(node.name) == "other":
            # sizes, shapes and the like read quantized tensors as they are
            out_nodes.append(node)
            continue
        if not mine:
            # a float node: its quantized inputs are dequantized first
            for r in qin:
                dn = Node(f"{r}_dequantize_for_{node.name}", "function", "dequantize", [Ref(r)])
                out_nodes.append(dn)
                node.args = _replace_refs(node.args, r, dn.name)
                node.kwargs = _replace_refs(node.kwargs, r, dn.name)
            out_nodes.append(node)
            continue
        path = qparams_of[node.name]
        # float inputs of a quantized node: quantize them with their observed qparams, once
        # for all the nodes that read them (as PyTorch's convert)
        for r in ins:
            if r not in quantized and r in qparams_of and info["kinds"].get(r) == "tensor":
                if r not in quantize_of:
                    s, z = _qparams(model, qparams_of[r])
                    qn = Node(f"{r}_quantize_for_{node.name}", "function",
                              "quantize_per_tensor", [Ref(r), s, z, _quint8()])
                    out_nodes.append(qn)
                    quantized.add(qn.name)
                    quantize_of[r] = qn.name
                node.args = _replace_refs(node.args, r, quantize_of[r])
                node.kwargs = _replace_refs(node.kwargs, r, quantize_of[r])
        if node.op == "module":
            mod = model.get_submodule(node.target)
            if type(mod) in mapping and getattr(mod, "qconfig", None) is not None:
                # A module called more than once is swapped once, with the qparams its last
                # call observed (as PyTorch's convert, whose later swap wins).
                path = qparams_of[last_call[node.target]]
                mod.activation_post_process = model.get_submodule(path)
                model._place(node.target, _from_float(mapping[type(mod)], mod, node.target,
                                                      False))
        elif node.op == "function" and node.target in _BINARY:
            s, z = _qparams(model, path)
            op = {"add": "add", "torch.add": "add", "torch.matmul": "matmul"}.get(node.target,
                                                                                 "mul")
            node.target = f"quantized.{op}"
            node.args = tuple(node.args[:2]) + (s, z)
            node.kwargs = {}
        elif node.op == "function" and node.target == "hardswish":
            s, z = _qparams(model, path)
            node.target, node.args, node.kwargs = "quantized.hardswish", (node.args[0], s, z), {}
        elif node.op == "function" and node.target == "layer_norm":
            s, z = _qparams(model, path)
            # the float call's arguments, defaults filled in, then the output qparams
            from qops.nn._graph import FUNCTIONS
            bound = inspect.signature(FUNCTIONS["layer_norm"]).bind(*node.args, **node.kwargs)
            bound.apply_defaults()
            node.target, node.kwargs = "quantized.layer_norm", {}
            node.args = tuple(bound.arguments.values()) + (s, z)
        out_nodes.append(node)
        quantized.add(node.name)
    # add + relu: quantized.add_relu (relu then shares its qparams, as in PyTorch)
    out_nodes = _fuse_add_relu(model, out_nodes)
    for path in [p for p in list(model._modules) if p.startswith("activation_post_process_")]:
        del model._modules[path]
    model.__dict__.pop("_qops_fx", None)
    return _rebuild(model, out_nodes)


def _quint8():
    from qops._dtypes import quint8
    return quint8


def _resolve_aliases(x, alias):
    for k, v in alias.items():
        x = _replace_refs(x, k, v)
    return x


def _dequantize_refs(x, quantized, out_nodes):
    def one(r):
        if r.name not in quantized:
            return r
        dn = Node(f"{r.name}_dequantize", "function", "dequantize", [r])
        out_nodes.append(dn)
        return Ref(dn.name)
    return _walk(x, one)


def _fuse_add_relu(model, nodes):
    users = _users(nodes)
    drop = set()
    for n in nodes:
        if n.op == "function" and n.target in ("quantized.add", "quantized.mul"):
            us = users[n.name]
            if len(us) == 1 and _is_relu(model, us[0], after_binary=True) \
                    and _refs(list(us[0].args))[:1] == [n.name]:
                n.target += "_relu"
                _rewire(nodes, us[0].name, n.name)
                drop.add(us[0].name)
    return [n for n in nodes if n.name not in drop]


# -- the names of PyTorch's documentation -----------------------------------------------------
def quantize_jit(model: Module, qconfig_dict: dict[Any, Any], run_fn: Callable[..., Any],
                 run_args: Any, inplace: bool = False, debug: bool = False) -> Module:
    """Static quantization of a captured model: prepare_fx, ``run_fn(model, *run_args)``, convert.

    Parameters
    ----------
    model : qops.nn.GraphModule
    qconfig_dict : {"": qconfig} or a QConfigMapping
    run_fn : calibration function, called as ``run_fn(prepared_model, *run_args)``
    run_args : its further arguments; run_args[0] must hold an example input (or a batch list)
    """
    example = run_args[0][0] if isinstance(run_args[0], (list, tuple)) else run_args[0]
    prepared = prepare_fx(model, qconfig_dict, (example,))
    run_fn(prepared, *run_args)
    return convert_fx(prepared)


def quantize_dynamic_jit(model: Module, qconfig_dict: Optional[dict[Any, Any]] = None,
                         inplace: bool = False, debug: bool = False) -> Module:
    """Dynamic quantization (weights int8, activations per call) of a captured model's layers."""
    from qops.quantization.quantize import quantize_dynamic
    _check_graph(model, "quantize_dynamic_jit")
    return quantize_dynamic(model, inplace=inplace)

