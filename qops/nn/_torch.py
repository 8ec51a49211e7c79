"""PyTorch interop: turn torch.nn / torch.ao.nn modules into the equivalent qops modules.

torch is imported only inside these functions. Conversion is table-driven: each supported
torch class maps to a qops class; constructor arguments are read from the torch module's
attributes (same names), and values from its state_dict (or, for quantized layers, from the
unpacked weight, bias and qparams).
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Iterable, Optional

if TYPE_CHECKING:
    from qops._qtensor import QTensor
    from qops.nn.module import Module

__all__ = ["from_torch", "from_torch_quantized", "qtensor_from_torch"]


def qtensor_from_torch(t: Any) -> QTensor:
    """A QTensor with the integer values and qparams of a quantized torch tensor."""
    import numpy as np

    from qops import _layout
    from qops import _qparams as qp
    from qops._dtypes import (
        as_qdtype,
        per_channel_affine,
        per_channel_symmetric,
        per_tensor_affine,
        per_tensor_symmetric,
    )
    from qops._qtensor import QTensor, _axis_arg
    t = t.detach()
    dtype = as_qdtype(str(t.dtype).replace("torch.", ""))
    # the integers in the memory order torch keeps them (a quantized conv's channels-last
    # output stays channels last, so qops' layout-following ops see what PyTorch's see);
    # any other strided layout becomes C order
    raw = t.int_repr().numpy()
    data = np.array(raw, order="K" if _layout.memory_order(raw) is not None else "C")
    qscheme = str(t.qscheme()).replace("torch.", "")
    # PyTorch validates neither scales nor (after some views) the channel axis: check them as
    # qops' own constructors do, so a QTensor never has unusable or mismatched qparams
    if qscheme in ("per_tensor_affine", "per_tensor_symmetric"):
        return QTensor._make(data, dtype, qp.check_scale(float(t.q_scale())),
                             qp.check_zero_point(int(t.q_zero_point()), dtype),
                             qscheme=per_tensor_symmetric if qscheme.endswith("symmetric")
                             else per_tensor_affine)
    if qscheme in ("per_channel_affine", "per_channel_symmetric"):
        if data.ndim == 0:
            raise ValueError("a per-channel torch tensor with no dimensions has no channel axis")
        axis = _axis_arg(int(t.q_per_channel_axis()), data.ndim, "q_per_channel_axis()")
        scales, zps = qp.check_channel_qparams(
            t.q_per_channel_scales().double().numpy().copy(),
            t.q_per_channel_zero_points().long().numpy().copy(), dtype, data.shape[axis])
        return QTensor._make(data, dtype, scales=scales, zero_points=zps, axis=axis,
                             qscheme=per_channel_symmetric if qscheme.endswith("symmetric")
                             else per_channel_affine)
    raise TypeError(f"cannot convert a torch tensor with qscheme {qscheme}")


def _np(t):
    if t is None:
        return None
    t = t.detach()
    if getattr(t, "is_quantized", False):
        return qtensor_from_torch(t)
    return t.cpu().numpy().copy()


_UNSET = object()


def _ctor_kwargs(qcls, tm, skip=(), bias=_UNSET):
    """Constructor arguments of `qcls` read from the same-named attributes of torch module tm."""
    sig = inspect.signature(qcls.__init__)
    kwargs = {}
    for name, p in sig.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or name in skip:
            continue
        if name in ("device", "dtype", "factory_kwargs", "inplace"):
            continue
        if name in ("bias", "bias_"):
            b = getattr(tm, "bias", None) if bias is _UNSET else bias
            if callable(b):
                b = b()
            kwargs[name] = b is not None
            continue
        if hasattr(tm, name):
            v = getattr(tm, name)
            if isinstance(v, (list,)):
                v = tuple(v)
            kwargs[name] = v
    return kwargs


def _float_generic(qcls):
    def build(tm, convert):
        m = qcls(**_ctor_kwargs(qcls, tm))
        state = {k: _np(v) for k, v in tm.state_dict().items()}
        m.load_state_dict(state, strict=True)
        return m
    return build


def _container(qcls):
    def build(tm, convert):
        from qops.nn.module import Module
        m = qcls.__new__(qcls)
        Module.__init__(m)
        m.__dict__["_init_config"] = {}
        for name, child in tm.named_children():
            m.add_module(name, convert(child, name))
        return m
    return build


def _fused(qcls):
    def build(tm, convert):
        return qcls(*[convert(c, n) for n, c in tm.named_children()])
    return build


def _multihead_attention(tm, convert):
    """qops.nn.MultiheadAttention of a torch one (its bias and bias_kv are not attributes)."""
    from qops.nn._attention import MultiheadAttention
    m = MultiheadAttention(tm.embed_dim, tm.num_heads, tm.dropout,
                           bias=tm.in_proj_bias is not None, add_bias_kv=tm.bias_k is not None,
                           add_zero_attn=tm.add_zero_attn, kdim=tm.kdim, vdim=tm.vdim,
                           batch_first=tm.batch_first)
    m.load_state_dict({k: _np(v) for k, v in tm.state_dict().items()}, strict=True)
    return m


def _transformer_layer(tm, convert):
    """qops.nn.TransformerEncoder/DecoderLayer of a torch one (float or with quantized
    linears)."""
    import torch

    from qops.nn import _attention as att
    F = torch.nn.functional
    act = tm.activation
    name = ("relu" if act is F.relu or isinstance(act, torch.nn.ReLU) else
            "gelu" if act is F.gelu or (isinstance(act, torch.nn.GELU)
                                        and act.approximate == "none") else None)
    if name is None:
        raise TypeError(f"{type(tm).__name__}: activation {act!r} has no qops equivalent "
                        f"(relu and gelu have)")
    sa = tm.self_attn
    cls = att.TransformerDecoderLayer if hasattr(tm, "multihead_attn") else \
        att.TransformerEncoderLayer
    m = cls(sa.embed_dim, sa.num_heads, tm.linear1.out_features, tm.dropout.p, name,
            tm.norm1.eps, sa.batch_first, tm.norm_first, bias=tm.norm1.bias is not None)
    for cname, child in tm.named_children():
        if cname != "activation":
            m.add_module(cname, convert(child, cname))
    return m


def _transformer_stack(tm, convert):
    """qops.nn.TransformerEncoder/Decoder of a torch one: its layers and norm converted."""
    import torch

    from qops.nn import _attention as att
    cls = att.TransformerDecoder if isinstance(tm, torch.nn.TransformerDecoder) else \
        att.TransformerEncoder
    m = cls(None, tm.num_layers)
    m.add_module("layers", convert(tm.layers, "layers"))
    m.add_module("norm", None if tm.norm is None else convert(tm.norm, "norm"))
    return m


def _transformer(tm, convert):
    from qops.nn._attention import Transformer
    m = Transformer(None, None, tm.d_model, tm.nhead, tm.batch_first)
    m.add_module("encoder", convert(tm.encoder, "encoder"))
    m.add_module("decoder", convert(tm.decoder, "decoder"))
    return m


def _float_table(torch):
    import qops.nn as qnn
    from qops.nn import intrinsic as qnni
    from qops.nn.quantized import _modules as nnq
    tnn = torch.nn
    table = {}
    for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                 "ConvTranspose3d", "Linear", "BatchNorm1d", "BatchNorm2d",
                 "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
                 "InstanceNorm3d", "ReLU", "ReLU6", "ELU", "LeakyReLU", "Hardtanh", "Hardsigmoid",
                 "Hardswish", "Sigmoid", "Tanh", "SiLU", "GELU", "Softmax", "PReLU", "MaxPool1d",
                 "MaxPool2d",
                 "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
                 "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "Upsample", "UpsamplingNearest2d",
                 "UpsamplingBilinear2d", "Identity", "Flatten", "Dropout"):
        table[getattr(tnn, name)] = _float_generic(getattr(qnn, name))
    table[tnn.MultiheadAttention] = _multihead_attention
    table[tnn.TransformerEncoderLayer] = table[tnn.TransformerDecoderLayer] = _transformer_layer
    table[tnn.TransformerEncoder] = table[tnn.TransformerDecoder] = _transformer_stack
    table[tnn.Transformer] = _transformer
    table[tnn.modules.linear.NonDynamicallyQuantizableLinear] = _float_generic(
        qnn.NonDynamicallyQuantizableLinear)
    from qops.nn import _rnn
    table.update(_rnn.torch_converters(torch))
    from qops.nn import _embedding
    table.update(_embedding.torch_converters(torch))
    table[tnn.Sequential] = _container(qnn.Sequential)
    table[tnn.ModuleList] = _container(qnn.ModuleList)
    table[tnn.ModuleDict] = _container(qnn.ModuleDict)
    tnni = torch.ao.nn.intrinsic
    for name in qnni.__all__:
        if hasattr(tnni, name):
            table[getattr(tnni, name)] = _fused(getattr(qnni, name))
    table[torch.ao.nn.quantized.FloatFunctional] = _float_generic(nnq.FloatFunctional)
    try:
        from torch.ao.quantization import DeQuantStub as TDeQuantStub
        from torch.ao.quantization import QuantStub as TQuantStub

        from qops.quantization import DeQuantStub, QuantStub
        table[TQuantStub] = lambda tm, convert: QuantStub()
        table[TDeQuantStub] = lambda tm, convert: DeQuantStub()
    except ImportError:
        pass
    return table


def _with_qparams(qcls, extra=()):
    def build(tm, convert):
        # Unpack torch's packed weight once (weight(), bias() and the bias attribute would
        # each unpack it again).
        wb = tm._weight_bias() if hasattr(tm, "_weight_bias") else None
        kwargs = _ctor_kwargs(qcls, tm, bias=None if wb is None else wb[1])
        for name in extra:
            kwargs[name] = getattr(tm, name)
        m = qcls(**kwargs)
        if hasattr(m, "set_weight_bias"):
            w, b = wb if wb is not None else (tm.weight(), tm.bias())
            m.set_weight_bias(_np(w), _np(b))
        else:
            state = {k: _np(v) for k, v in tm.state_dict().items()}
            m.load_state_dict(state, strict=True)
        m.scale = float(tm.scale)
        m.zero_point = int(tm.zero_point)
        return m
    return build


def _quantized_table(torch):
    from qops.nn.intrinsic import quantized as qnniq
    from qops.nn.quantized import _modules as nnq
    from qops.nn.quantized import dynamic as nnqd
    tq = torch.ao.nn.quantized
    tniq = torch.ao.nn.intrinsic.quantized
    table = {}
    for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                 "ConvTranspose3d", "Linear", "BatchNorm2d", "BatchNorm3d"):
        table[getattr(tq, name)] = _with_qparams(getattr(nnq, name))
    for name in ("ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU", "BNReLU2d", "BNReLU3d"):
        if hasattr(tniq, name):
            table[getattr(tniq, name)] = _with_qparams(getattr(qnniq, name))

    def norm(qcls):
        def build(tm, convert):
            kwargs = _ctor_kwargs(qcls, tm, skip=("weight", "bias", "scale", "zero_point"))
            m = qcls(**kwargs)
            state = {k: _np(v) for k, v in tm.state_dict().items()}
            m.load_state_dict(state, strict=True)
            return m
        return build
    for name in ("LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
                 "InstanceNorm3d"):
        table[getattr(tq, name)] = norm(getattr(nnq, name))

    table[tq.Quantize] = lambda tm, convert: nnq.Quantize(float(tm.scale), int(tm.zero_point),
                                                          str(tm.dtype).replace("torch.", ""))
    table[tq.DeQuantize] = lambda tm, convert: nnq.DeQuantize()
    table[tq.ReLU6] = lambda tm, convert: nnq.ReLU6()
    table[tq.Hardswish] = lambda tm, convert: nnq.Hardswish(float(tm.scale), int(tm.zero_point))
    table[tq.ELU] = lambda tm, convert: nnq.ELU(float(tm.scale), int(tm.zero_point),
                                                float(tm.alpha))
    table[tq.LeakyReLU] = lambda tm, convert: nnq.LeakyReLU(
        float(tm.scale), int(tm.zero_point), float(tm.negative_slope))
    table[tq.Sigmoid] = lambda tm, convert: nnq.Sigmoid(float(tm.output_scale),
                                                        int(tm.output_zero_point))
    table[tq.Dropout] = lambda tm, convert: nnq.Dropout(tm.p)
    table[tq.Softmax] = lambda tm, convert: nnq.Softmax(tm.dim, float(tm.scale),
                                                        int(tm.zero_point))

    def qfunctional(tm, convert):
        m = nnq.QFunctional()
        m.scale, m.zero_point = float(tm.scale), int(tm.zero_point)
        return m
    table[tq.QFunctional] = qfunctional

    def dynamic(qcls):
        def build(tm, convert):
            w, b = tm._weight_bias()
            dtype = str(tm._packed_params.dtype).replace("torch.", "")
            m = qcls(tm.in_features, tm.out_features, b is not None, dtype=dtype)
            m.set_weight_bias(_np(w) if dtype == "qint8" else w.detach().float().numpy(), _np(b))
            return m
        return build
    table[tq.dynamic.Linear] = dynamic(nnqd.Linear)
    tniqd = getattr(torch.ao.nn.intrinsic.quantized, "dynamic", None)
    if tniqd is not None and hasattr(tniqd, "LinearReLU"):
        from qops.nn.intrinsic.quantized.dynamic import LinearReLU as QDLinearReLU
        table[tniqd.LinearReLU] = dynamic(QDLinearReLU)
    from qops.nn.quantized.dynamic import _rnn as qd_rnn
    table.update(qd_rnn.torch_converters(torch))
    from qops.nn.quantized import _embedding as q_embedding
    table.update(q_embedding.torch_converters(torch))
    return table


def _convert(torch_module, table, what):
    import torch

    def convert(tm, path):
        if not isinstance(tm, torch.nn.Module):
            raise TypeError(f"{what}: expected a torch.nn.Module; got {type(tm).__name__}")
        build = table.get(type(tm))
        if build is None:
            raise TypeError(f"{what}: no qops equivalent for {type(tm).__module__}."
                            f"{type(tm).__name__} at '{path or '<root>'}'; build the model in "
                            f"qops and pass it as target= to copy the weights")
        m = build(tm, lambda child, name: convert(child, f"{path}.{name}" if path else name))
        m.train(tm.training)
        return m

    return convert(torch_module, "")


def _copy_into(target, torch_module, table, what):
    """Copy each submodule of torch_module into the same-named submodule of `target`."""
    import torch

    from qops.nn.module import Module
    if not isinstance(target, Module):
        raise TypeError(f"{what}: target must be a qops.nn.Module; got {type(target).__name__}")
    table = _with_subclasses(table, torch_module)
    t_mods = dict(torch_module.named_modules())
    q_names = {n for n, _ in target.named_modules()}
    # Leaf-most convertible modules: convert each and swap it into the target by name.
    done = set()
    for name, tm in t_mods.items():
        if any(name.startswith(d + ".") for d in done) or name == "":
            continue
        if type(tm) in table and not isinstance(tm, (torch.nn.Sequential, torch.nn.ModuleList,
                                                     torch.nn.ModuleDict)):
            if name not in q_names:
                raise ValueError(f"{what}: the torch model has submodule '{name}' "
                                 f"({type(tm).__name__}) but the target has none by that name")
            target.set_submodule(name, _convert(tm, table, what))
            done.add(name)
    missing = [n for n, tm in t_mods.items() if n and not any(n == d or n.startswith(d + ".")
                                                              for d in done)
               and not list(tm.children()) and list(tm.parameters(recurse=False))]
    if missing:
        raise TypeError(f"{what}: no qops equivalent for the torch submodules {missing}")
    target.train(torch_module.training)
    return target


def _with_subclasses(table, module):
    """`table` plus the subclasses of its layers found in `module` that keep their base's
    forward (torchvision's Conv3DSimple is an nn.Conv3d with a helper method): each
    converts as that base. A subclass with a forward of its own is traced into instead."""
    import torch
    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
    table = dict(table)
    for m in module.modules():
        cls = type(m)
        if cls in table:
            continue
        for base in cls.__mro__[1:]:
            if base in table and base not in containers:
                if cls.forward is base.forward:
                    table[cls] = table[base]
                break
    return table


def _convert_or_capture(module, table, what, leaf_modules):
    import torch
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{what}: expected a torch.nn.Module; got {type(module).__name__}")
    table = _with_subclasses(table, module)
    if type(module) in table and not leaf_modules:
        return _convert(module, table, what)
    # A model class with its own forward: capture that forward as a graph.
    from qops.nn._fx import capture
    return capture(module, table, what, leaf_modules=leaf_modules)


def from_torch(module: Any, target: Optional[Module] = None,
               leaf_modules: Iterable[str] = ()) -> Module:
    """The qops float model equivalent to torch float model `module`, with the same weights.

    A container of known layers converts layer by layer; any other model (a class with its
    own forward) is traced with torch.fx and becomes a `qops.nn.GraphModule` running the same
    forward on qops modules and functions.

    Parameters
    ----------
    module : torch.nn.Module (torch.nn layers, fused torch.ao.nn.intrinsic modules,
        FloatFunctional, QuantStub/DeQuantStub, and any forward built of those and of the
        tensor operations listed in the README)
    target : optional qops model with the same submodule names; each torch layer is converted
        and put in its place (for a forward that torch.fx cannot trace)
    leaf_modules : names of submodules to keep whole instead of tracing into them
    """
    import torch
    table = _float_table(torch)
    if isinstance(module, torch.nn.Module):
        quantized = _quantized_table(torch)
        found = sorted({type(m).__name__ for m in module.modules()
                        if type(m) in quantized and type(m) not in table})
        if found:
            raise TypeError(f"qops.nn.from_torch imports float models; this one has quantized "
                            f"layers ({', '.join(found)}): use qops.nn.quantized.from_torch")
    if target is not None:
        return _copy_into(target, module, table, "qops.nn.from_torch")
    return _convert_or_capture(module, table, "qops.nn.from_torch", tuple(leaf_modules))


def from_torch_quantized(module: Any, target: Optional[Module] = None,
                         leaf_modules: Iterable[str] = ()) -> Module:
    """The qops quantized model equivalent to a model converted by torch.ao.quantization.

    Parameters
    ----------
    module : torch.nn.Module after torch.ao.quantization.convert / quantize_dynamic (a
        container, or any model class: its forward is captured as in `qops.nn.from_torch`)
    target : optional qops model with the same submodule names (see `from_torch`)
    leaf_modules : names of submodules to keep whole instead of tracing into them
    """
    import torch
    table = _float_table(torch)
    table.update(_quantized_table(torch))
    if target is not None:
        return _copy_into(target, module, table, "qops.nn.quantized.from_torch")
    return _convert_or_capture(module, table, "qops.nn.quantized.from_torch",
                               tuple(leaf_modules))

