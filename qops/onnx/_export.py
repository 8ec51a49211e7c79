"""Trace a qops quantized model on example inputs and write it as an ONNX graph.

The model runs once on `args`; every leaf module call, QFunctional method and (for a
GraphModule) every graph node is recorded with its actual input and output values, so each
quantized tensor's scale and zero point are known exactly. Each recorded step becomes a group
of ONNX nodes (an "op record", used by `compare` to run each op alone in ONNX Runtime).

Forms: "qdq" (DequantizeLinear -> float op -> QuantizeLinear, what ORT's quantizer writes) and
"qoperator" (QLinearConv, QGemm, QLinearAdd, ...; the com.microsoft domain where the ONNX
standard has no such op). Data moving ops (reshape, flatten, nearest resize) work on the
integer tensors directly in both forms: they do not change values or qparams.
"""
import inspect
import numbers

import numpy as np

from qops._dtypes import qint8, quint8
from qops._qtensor import QTensor

MS = "com.microsoft"
F32 = np.float32


class ExportError(ValueError):
    """A model (or one of its nodes) that has no faithful ONNX form."""


class _Val:
    """A tensor of the ONNX graph: its name, and for a quantized one its qparams."""

    __slots__ = ("name", "scale", "zp", "dtype", "shape")

    def __init__(self, name, shape, scale=None, zp=None, dtype=None):
        self.name, self.shape = name, tuple(shape)
        self.scale, self.zp, self.dtype = scale, zp, dtype

    @property
    def q(self):
        return self.dtype is not None


def _np_qdtype(qt):
    if qt.dtype is quint8:
        return np.uint8
    if qt.dtype is qint8:
        return np.int8
    raise ExportError(f"only quint8/qint8 tensors can be exported; got {qt.dtype!r}")


class Record:
    """The ONNX nodes of one traced step, with the values it read and wrote."""

    def __init__(self, label, kind, inputs):
        self.label, self.kind = label, kind
        self.inputs = list(inputs)      # [(_Val, actual value)]
        self.outputs = []               # [(_Val, actual value)]
        self.nodes, self.inits = [], []

    @property
    def where(self):
        return f"node {self.label!r} ({self.kind})"


class _Builder:
    def __init__(self, form, opset):
        try:
            import onnx
            from onnx import helper, numpy_helper
        except ImportError:
            raise ImportError("qops.onnx needs the onnx package: pip install qops[onnx]") \
                from None
        self.onnx, self.helper, self.nh = onnx, helper, numpy_helper
        if form not in ("qdq", "qoperator"):
            raise ValueError(f"form must be 'qdq' or 'qoperator'; got {form!r}")
        if not isinstance(opset, numbers.Integral) or opset < 13:
            raise ValueError(f"opset_version must be an integer >= 13 (per-axis QuantizeLinear);"
                             f" got {opset!r}")
        self.form, self.opset = form, int(opset)
        self.nodes, self.inits, self.records = [], [], []
        self.vals, self.keep = {}, []
        self.used, self.rec = set(), None
        self.uses_ms = False
        # graph input / output names -> ONNX dims, where not ["N", rest...]
        self.dims, self.graph_input_names = {}, set()
        self.inputs = []            # (name, example value) of the graph inputs, in order
        # set by recurrent layers, whose batch axis is 1 (seq-first): the outputs computed
        # after them keep no declared batch dimension (their batch axis is not known here)
        self.loose_outputs = False

    # -- names, constants, nodes -------------------------------------------------------------
    def uname(self, hint):
        hint = "".join(c if c.isalnum() or c in "_." else "_" for c in hint) or "t"
        name, i = hint, 1
        while name in self.used:
            i += 1
            name = f"{hint}_{i}"
        self.used.add(name)
        return name

    def const(self, hint, array):
        name = self.uname(hint)
        t = self.nh.from_array(np.asarray(array), name)
        self.inits.append(t)
        if self.rec is not None:
            self.rec.inits.append(t)
        return name

    def node(self, op, inputs, n_out=1, hint=None, domain=None, **attrs):
        outs = [self.uname(f"{hint or op}_out{i if n_out > 1 else ''}") for i in range(n_out)]
        n = self.helper.make_node(op, list(inputs), outs, name=self.uname(f"{hint or op}_{op}"),
                                  domain=domain, **attrs)
        if domain == MS:
            self.uses_ms = True
        self.nodes.append(n)
        if self.rec is not None:
            self.rec.nodes.append(n)
        return outs if n_out > 1 else outs[0]

    def scale_c(self, hint, scale):
        return self.const(hint + "_scale", np.array(scale, dtype=F32))

    def zp_c(self, hint, zp, dtype):
        return self.const(hint + "_zp", np.array(zp, dtype=dtype))

    # -- value bookkeeping -------------------------------------------------------------------
    def bind(self, value, val):
        self.keep.append(value)
        self.vals[id(value)] = val

    def get(self, value, where):
        if isinstance(value, (QTensor, np.ndarray)) and id(value) in self.vals:
            return self.vals[id(value)]
        raise ExportError(f"{where}: an input was computed outside any step the exporter traces "
                          f"(a qops module, a QFunctional method or a graph node); move that "
                          f"computation into a module")

    # -- QDQ helpers -------------------------------------------------------------------------
    def dq(self, v, hint):
        return self.node("DequantizeLinear", [v.name, self.scale_c(hint, v.scale),
                                              self.zp_c(hint, v.zp, v.dtype)], hint=hint + "_dq")

    def q(self, fname, out, hint):
        """QuantizeLinear of float tensor `fname` with `out`'s qparams; binds `out`."""
        dt = _np_qdtype(out)
        s, z = float(out.q_scale()), int(out.q_zero_point())
        name = self.node("QuantizeLinear", [fname, self.scale_c(hint + "_y", s),
                                            self.zp_c(hint + "_y", z, dt)], hint=hint + "_q")
        val = _Val(name, out.shape, s, z, dt)
        self.bind(out, val)
        return val

    def qparams(self, v, hint):
        return [self.scale_c(hint, v.scale), self.zp_c(hint, v.zp, v.dtype)]

    def out_qparams(self, out, hint):
        return [self.scale_c(hint + "_y", float(out.q_scale())),
                self.zp_c(hint + "_y", int(out.q_zero_point()), _np_qdtype(out))]

    def clip_q(self, name, out, lo, hi, hint):
        """Clip on the integer tensor: the quantized relu/relu6 (exact in the integer domain)."""
        dt = _np_qdtype(out)
        args = [name, "" if lo is None else self.const(hint + "_lo", np.array(lo, dt))]
        if hi is not None:
            args.append(self.const(hint + "_hi", np.array(hi, dt)))
        return self.node("Clip", args, hint=hint + "_clip")


# -- weights -------------------------------------------------------------------------------
def _weight_qparams(w):
    """(int8 values, scales (C,) or scalar, zero points, axis or None) of a qint8 weight."""
    if not isinstance(w, QTensor) or w.dtype is not qint8:
        raise ExportError("weights must be qint8 QTensors")
    data = np.asarray(w.int_repr(), dtype=np.int8)
    if w.is_per_channel:
        return (data, np.asarray(w.q_per_channel_scales(), F32),
                np.asarray(w.q_per_channel_zero_points(), np.int8), int(w.q_per_channel_axis()))
    return data, np.array(w.q_scale(), F32), np.array(w.q_zero_point(), np.int8), None


def _int32_bias(b, x_scale, w_scale):
    """ONNX's int32 bias: round(b / (x_scale * w_scale)) with that product as its scale."""
    bscale = (F32(x_scale) * np.asarray(w_scale, F32)).astype(F32)
    bscale = np.broadcast_to(bscale, b.shape).astype(F32)
    q = np.rint(b.astype(np.float64) / bscale.astype(np.float64))
    if np.any(np.abs(q) > 2 ** 31 - 1):
        raise ExportError("bias / (x_scale * w_scale) does not fit in int32")
    return q.astype(np.int32), bscale


def _dq_weight(b, h, wd, ws, wz, axis):
    """DequantizeLinear of the int8 weight (per channel: one scale per output channel)."""
    per_axis = {"axis": 0} if axis is not None else {}
    return b.node("DequantizeLinear", [b.const(h + "_w", wd), b.const(h + "_w_scale", ws),
                                       b.const(h + "_w_zp", wz)], hint=h + "_w_dq", **per_axis)


def _dq_bias(b, h, bq, bscale, axis):
    """DequantizeLinear of the int32 bias, scale x_scale * w_scale, zero point 0."""
    if axis is None:
        return b.node("DequantizeLinear", [b.const(h + "_b", bq),
                                           b.const(h + "_b_scale", bscale[:1].reshape(())),
                                           b.const(h + "_b_zp", np.zeros((), np.int32))],
                      hint=h + "_b_dq")
    return b.node("DequantizeLinear", [b.const(h + "_b", bq), b.const(h + "_b_scale", bscale),
                                       b.const(h + "_b_zp", np.zeros(bq.shape, np.int32))],
                  hint=h + "_b_dq", axis=0)


def _tuple(v, n):
    if isinstance(v, numbers.Integral):
        return (int(v),) * n
    v = tuple(int(a) for a in v)
    return v * n if len(v) == 1 else v


# -- emitters: one per kind of step ----------------------------------------------------------
def emit_quantize(b, rec, x, out):
    xv = b.get(x, rec.where)
    if xv.q:
        raise ExportError(f"{rec.where}: quantize of a tensor that is already quantized")
    return b.q(xv.name, out, rec.label)


def emit_dequantize(b, rec, x, out):
    xv = b.get(x, rec.where)
    if not xv.q:
        b.bind(out, xv)
        return xv
    name = b.dq(xv, rec.label)
    val = _Val(name, out.shape)
    b.bind(out, val)
    return val


def emit_conv(b, rec, x, out, weight, bias, stride, padding, dilation, groups, relu,
              padding_mode="zeros"):
    h = rec.label
    if padding_mode != "zeros":
        raise ExportError(f"{rec.where}: padding_mode={padding_mode!r} has no QLinearConv form")
    xv = b.get(x, rec.where)
    n = len(weight.shape) - 2
    wd, ws, wz, axis = _weight_qparams(weight)
    pads = list(_tuple(padding, n)) * 2
    attrs = dict(strides=list(_tuple(stride, n)), pads=pads, dilations=list(_tuple(dilation, n)),
                 group=int(groups), kernel_shape=list(weight.shape[2:]))
    if axis not in (None, 0):
        raise ExportError(f"{rec.where}: per-channel weight on axis {axis}; ONNX Conv needs axis 0")
    if bias is not None:
        bq, bscale = _int32_bias(np.asarray(bias, F32), xv.scale, ws)
    if b.form == "qdq":
        ins = [b.dq(xv, h + "_x"), _dq_weight(b, h, wd, ws, wz, axis)]
        if bias is not None:
            ins.append(_dq_bias(b, h, bq, bscale, axis))
        y = b.node("Conv", ins, hint=h, **attrs)
        if relu:
            y = b.node("Relu", [y], hint=h + "_relu")
        return b.q(y, out, h)
    ins = [xv.name] + b.qparams(xv, h + "_x") + [
        b.const(h + "_w", wd), b.const(h + "_w_scale", ws), b.const(h + "_w_zp", wz)] \
        + b.out_qparams(out, h)
    if bias is not None:
        ins.append(b.const(h + "_b", bq))
    y = b.node("QLinearConv", ins, hint=h, **attrs)
    if relu:
        y = b.clip_q(y, out, int(out.q_zero_point()), None, h)
    return _bind(b, y, out)


def emit_conv_transpose(b, rec, x, out, mod):
    """A quantized transposed conv as DequantizeLinear -> ConvTranspose -> QuantizeLinear in
    both forms (ONNX has no QLinear transposed conv; ORT fuses the QDQ group where it can)."""
    h = rec.label
    xv = b.get(x, rec.where)
    weight, bias = mod.weight(), mod.bias()
    wd, ws, wz, axis = _weight_qparams(weight)
    ins = [b.dq(xv, h + "_x"), _dq_weight(b, h, wd, ws, wz, axis)]
    if bias is not None:
        bq, bscale = _int32_bias(np.asarray(bias, F32), xv.scale, ws)
        ins.append(_dq_bias(b, h, bq, bscale, axis))
    y = b.node("ConvTranspose", ins, hint=h, strides=list(mod.stride),
               pads=list(mod.padding) * 2, dilations=list(mod.dilation), group=int(mod.groups),
               kernel_shape=list(weight.shape[2:]), output_padding=list(mod.output_padding))
    return b.q(y, out, h)


def _bind(b, name, out):
    val = _Val(name, out.shape, float(out.q_scale()), int(out.q_zero_point()), _np_qdtype(out))
    b.bind(out, val)
    return val


def emit_linear(b, rec, x, out, weight, bias, relu):
    h = rec.label
    xv = b.get(x, rec.where)
    wd, ws, wz, axis = _weight_qparams(weight)
    if axis not in (None, 0):
        raise ExportError(f"{rec.where}: per-channel linear weight on axis {axis}; expected axis 0")
    if bias is not None:
        bq, bscale = _int32_bias(np.asarray(bias, F32), xv.scale, ws)
    nd = len(xv.shape)
    if b.form == "qdq":
        xf = b.dq(xv, h + "_x")
        wf = _dq_weight(b, h, wd, ws, wz, axis)
        if bias is not None:
            bf = _dq_bias(b, h, bq, bscale, axis)
        if nd == 2:
            y = b.node("Gemm", [xf, wf] + ([bf] if bias is not None else []), hint=h, transB=1)
        else:
            wt = b.node("Transpose", [wf], hint=h + "_wT", perm=[1, 0])
            y = b.node("MatMul", [xf, wt], hint=h)
            if bias is not None:
                y = b.node("Add", [y, bf], hint=h + "_bias")
        if relu:
            y = b.node("Relu", [y], hint=h + "_relu")
        return b.q(y, out, h)
    # QOperator: com.microsoft QGemm carries the int32 bias (QLinearMatMul has none).
    xin = xv.name
    if nd != 2:
        xin = b.node("Reshape", [xin, b.const(h + "_shape2d", np.array([-1, xv.shape[-1]],
                                                                        np.int64))], hint=h)
    ins = [xin] + b.qparams(xv, h + "_x") + [
        b.const(h + "_w", wd), b.const(h + "_w_scale", ws), b.const(h + "_w_zp", wz),
        b.const(h + "_b", bq) if bias is not None else ""] + b.out_qparams(out, h)
    y = b.node("QGemm", ins, hint=h, domain=MS, transB=1)
    if nd != 2:
        y = b.node("Reshape", [y, b.const(h + "_shape", np.array((-1,) + tuple(out.shape[1:]),
                                                                  np.int64))], hint=h)
    if relu:
        y = b.clip_q(y, out, int(out.q_zero_point()), None, h)
    return _bind(b, y, out)


# float op in QDQ form: (onnx op, attrs from params)
def _float_unary(kind, params):
    if kind == "relu":
        return [("Relu", {}, [])]
    if kind in ("relu6", "hardtanh", "clamp"):
        lo, hi = params
        return [("Clip", {}, [("lo", lo), ("hi", hi)])]
    if kind == "hardswish":
        return [("HardSwish", {}, [])]
    if kind == "hardsigmoid":
        return [("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}, [])]
    if kind == "elu":
        return [("Elu", {"alpha": float(params[0])}, [])]
    if kind == "leaky_relu":
        return [("LeakyRelu", {"alpha": float(params[0])}, [])]
    if kind == "sigmoid":
        return [("Sigmoid", {}, [])]
    if kind == "tanh":
        return [("Tanh", {}, [])]
    raise ExportError(f"no ONNX form for {kind}")


def emit_unary(b, rec, x, out, kind, params=()):
    h = rec.label
    xv = b.get(x, rec.where)
    if not xv.q:
        return _float_chain(b, h, xv, out, kind, params)
    if b.form == "qoperator":
        same = (float(out.q_scale()) == xv.scale and int(out.q_zero_point()) == xv.zp)
        if kind in ("relu", "relu6", "hardtanh", "clamp") and same:
            # max(q, q(lo)) / min(q, q(hi)): PyTorch's integer-domain clamp
            # (docs/semantics.md §5), the bounds quantized as its Q_leg does.
            lo, hi = (0.0, None) if kind == "relu" else params
            y = b.clip_q(xv.name, out, _q_bound(lo, xv), _q_bound(hi, xv), h)
            return _bind(b, y, out)
        if kind == "leaky_relu":
            y = b.node("QLinearLeakyRelu", [xv.name] + b.qparams(xv, h + "_x")
                       + b.out_qparams(out, h), hint=h, domain=MS, alpha=float(params[0]))
            return _bind(b, y, out)
        if kind == "sigmoid":
            y = b.node("QLinearSigmoid", [xv.name] + b.qparams(xv, h + "_x")
                       + b.out_qparams(out, h), hint=h, domain=MS)
            return _bind(b, y, out)
    xf = b.dq(xv, h + "_x")
    y = _float_ops(b, h, xf, kind, params)
    return b.q(y, out, h)


def _bind_float(b, name, out):
    val = _Val(name, np.shape(out))
    b.bind(out, val)
    return val


def emit_softmax(b, rec, x, out, dim):
    """Softmax over `dim` (opset 13+: along one axis, as PyTorch's); on a quantized input
    between DequantizeLinear and QuantizeLinear with the layer's output qparams."""
    h = rec.label
    xv = b.get(x, rec.where)
    nd = len(xv.shape)
    if dim is None:
        from qops.nn._float_ops import softmax_dim
        dim = softmax_dim(nd)
    name = b.dq(xv, h + "_x") if xv.q else xv.name
    y = b.node("Softmax", [name], hint=h, axis=int(dim) % max(nd, 1))
    return b.q(y, out, h) if xv.q else _bind_float(b, y, out)


def emit_silu(b, rec, x, out):
    """x * Sigmoid(x) (float only, as qops.nn.SiLU)."""
    h = rec.label
    xv = b.get(x, rec.where)
    y = b.node("Mul", [xv.name, b.node("Sigmoid", [xv.name], hint=h)], hint=h)
    return _bind_float(b, y, out)


def emit_prelu(b, rec, x, out, weight):
    """PRelu (float only, as qops.nn.PReLU): the slopes shaped to broadcast over dim 1."""
    h = rec.label
    xv = b.get(x, rec.where)
    w = np.asarray(weight, F32).reshape(-1)
    if w.size > 1:
        w = w.reshape((w.size,) + (1,) * max(len(xv.shape) - 2, 0))
    y = b.node("PRelu", [xv.name, b.const(h + "_slope", w)], hint=h)
    return _bind_float(b, y, out)


def emit_gelu(b, rec, x, out, approximate):
    """Gelu (opset 20) or its formula: 0.5 x (1 + Erf(x / sqrt 2)), or the tanh form; on a
    quantized input between DequantizeLinear and QuantizeLinear (the input's qparams)."""
    h = rec.label
    xv = b.get(x, rec.where)
    name = b.dq(xv, h + "_x") if xv.q else xv.name
    y = _gelu_formula(b, h, name, approximate)
    return b.q(y, out, h) if xv.q else _bind_float(b, y, out)


def _gelu_formula(b, h, xname, approximate):
    if b.opset >= 20:
        return b.node("Gelu", [xname], hint=h, approximate=approximate)

    def c(name, v):
        return b.const(f"{h}_{name}", np.array(v, F32))
    if approximate == "tanh":
        cube = b.node("Mul", [xname, b.node("Mul", [xname, xname], hint=h)], hint=h)
        inner = b.node("Add", [xname, b.node("Mul", [cube, c("k", 0.044715)], hint=h)],
                       hint=h)
        t = b.node("Tanh", [b.node("Mul", [inner, c("s", np.sqrt(2.0 / np.pi))], hint=h)],
                   hint=h)
    else:
        t = b.node("Erf", [b.node("Mul", [xname, c("r", np.sqrt(0.5))], hint=h)], hint=h)
    half_x = b.node("Mul", [xname, c("half", 0.5)], hint=h)
    return b.node("Mul", [half_x, b.node("Add", [t, c("one", 1.0)], hint=h)], hint=h)


def _q_bound(v, xv):
    if v is None or not np.isfinite(v):
        if v is None:
            return None
        info = np.iinfo(xv.dtype)
        return info.min if v < 0 else info.max
    info = np.iinfo(xv.dtype)
    t = F32(F32(v) * F32(1.0 / F32(xv.scale)))
    return int(np.clip(np.rint(F32(t + F32(xv.zp))), info.min, info.max))


def _float_ops(b, h, xf, kind, params):
    if kind == "hardswish" and b.opset < 14:
        raise ExportError(f"node {h!r}: HardSwish needs opset_version >= 14")
    y = xf
    for op, attrs, consts in _float_unary(kind, params):
        ins = [y] + [b.const(f"{h}_{cn}", np.array(-np.inf if cv is None and cn == "lo" else
                                                   np.inf if cv is None else cv, F32))
                     for cn, cv in consts]
        y = b.node(op, ins, hint=h, **attrs)
    return y


def _float_chain(b, h, xv, out, kind, params):
    y = _float_ops(b, h, xv.name, kind, params)
    val = _Val(y, np.shape(out))
    b.bind(out, val)
    return val


def _pool_attrs(n, kernel_size, stride, padding, ceil_mode, dilation=None):
    k = _tuple(kernel_size, n)
    s = _tuple(stride if stride not in (None, (), []) else kernel_size, n)
    p = _tuple(padding, n)
    attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(p) * 2,
                 ceil_mode=int(bool(ceil_mode)))
    if dilation is not None and any(d != 1 for d in _tuple(dilation, n)):
        attrs["dilations"] = list(_tuple(dilation, n))
    return attrs


def emit_maxpool(b, rec, x, out, n, kernel_size, stride, padding, dilation, ceil_mode):
    h = rec.label
    xv = b.get(x, rec.where)
    attrs = _pool_attrs(n, kernel_size, stride, padding, ceil_mode, dilation)
    if b.form == "qoperator" or not xv.q:
        # The max of integers is exact: MaxPool runs on the uint8/int8 tensor itself.
        y = b.node("MaxPool", [xv.name], hint=h, **attrs)
        return _bind(b, y, out) if xv.q else _set_float(b, y, out)
    y = b.node("MaxPool", [b.dq(xv, h + "_x")], hint=h, **attrs)
    return b.q(y, out, h)


def _set_float(b, name, out):
    val = _Val(name, np.shape(out))
    b.bind(out, val)
    return val


def emit_avgpool(b, rec, x, out, n, kernel_size, stride, padding, ceil_mode, count_include_pad,
                 divisor_override):
    h = rec.label
    if divisor_override is not None:
        raise ExportError(f"{rec.where}: avg_pool with divisor_override has no ONNX form")
    xv = b.get(x, rec.where)
    attrs = _pool_attrs(n, kernel_size, stride, padding, ceil_mode)
    attrs["count_include_pad"] = int(bool(count_include_pad))
    if b.form == "qoperator" and xv.q:
        y = b.node("QLinearAveragePool", [xv.name] + b.qparams(xv, h + "_x")
                   + b.out_qparams(out, h), hint=h, domain=MS, **attrs)
        return _bind(b, y, out)
    if not xv.q:
        return _set_float(b, b.node("AveragePool", [xv.name], hint=h, **attrs), out)
    y = b.node("AveragePool", [b.dq(xv, h + "_x")], hint=h, **attrs)
    return b.q(y, out, h)


def emit_adaptive(b, rec, x, out):
    h = rec.label
    xv = b.get(x, rec.where)
    in_sp, out_sp = xv.shape[2:], tuple(np.shape(out)[2:])
    if all(o == 1 for o in out_sp):
        if b.form == "qoperator" and xv.q:
            y = b.node("QLinearGlobalAveragePool", [xv.name] + b.qparams(xv, h + "_x")
                       + b.out_qparams(out, h), hint=h, domain=MS, channels_last=0)
            return _bind(b, y, out)
        op, attrs = "GlobalAveragePool", {}
    elif all(i % o == 0 for i, o in zip(in_sp, out_sp)):
        k = [i // o for i, o in zip(in_sp, out_sp)]
        op, attrs = "AveragePool", dict(kernel_shape=k, strides=k)
        if b.form == "qoperator" and xv.q:
            y = b.node("QLinearAveragePool", [xv.name] + b.qparams(xv, h + "_x")
                       + b.out_qparams(out, h), hint=h, domain=MS, **attrs)
            return _bind(b, y, out)
    else:
        raise ExportError(f"{rec.where}: adaptive average pooling from {in_sp} to {out_sp} "
                          f"has uneven windows, which ONNX pooling cannot express")
    if not xv.q:
        return _set_float(b, b.node(op, [xv.name], hint=h, **attrs), out)
    y = b.node(op, [b.dq(xv, h + "_x")], hint=h, **attrs)
    return b.q(y, out, h)


def emit_batchnorm(b, rec, x, out, mean, var, weight, bias, eps, relu):
    h = rec.label
    xv = b.get(x, rec.where)
    c = np.shape(mean)[0]
    w = np.ones(c, F32) if weight is None else np.asarray(weight, F32)
    bb = np.zeros(c, F32) if bias is None else np.asarray(bias, F32)
    ins = [b.const(h + "_gamma", w), b.const(h + "_beta", bb),
           b.const(h + "_mean", np.asarray(mean, F32)), b.const(h + "_var", np.asarray(var, F32))]
    y = b.node("BatchNormalization", [b.dq(xv, h + "_x")] + ins, hint=h, epsilon=float(eps))
    if relu:
        y = b.node("Relu", [y], hint=h + "_relu")
    return b.q(y, out, h)


def emit_norm(b, rec, x, out, kind, weight, bias, eps, groups_or_shape=None):
    """Layer / group / instance norm: DQ -> float ONNX norm -> Q (float input: the float op).

    LayerNormalization (opset 17), InstanceNormalization, and group norm decomposed as
    Reshape (N, G, -1) -> InstanceNormalization -> Reshape -> Mul weight -> Add bias (ONNX's
    GroupNormalization changed its scale/bias meaning between opsets 18 and 21).
    """
    h = rec.label
    xv = b.get(x, rec.where)
    xf = b.dq(xv, h + "_x") if xv.q else xv.name
    nd = len(xv.shape)
    w = None if weight is None else np.asarray(weight, F32)
    bb = None if bias is None else np.asarray(bias, F32)
    if kind == "layer":
        if b.opset < 17:
            raise ExportError(f"{rec.where}: LayerNormalization needs opset_version >= 17")
        ns = tuple(groups_or_shape)
        ins = [xf, b.const(h + "_gamma", np.ones(ns, F32) if w is None else w)]
        if bb is not None:
            ins.append(b.const(h + "_beta", bb))
        y = b.node("LayerNormalization", ins, hint=h, axis=-len(ns), epsilon=float(eps))
    else:
        c = xv.shape[1] if nd > 1 else 0
        if nd < 2 or (kind == "instance" and nd < 3):
            raise ExportError(f"{rec.where}: {kind} norm of a {nd}-D input has no export")
        g = int(groups_or_shape) if kind == "group" else c
        t = xf
        if kind == "group":
            t = b.node("Reshape", [xf, b.const(h + "_gshape", np.array([0, g, -1], np.int64))],
                       hint=h + "_groups")
        gw = np.ones(g, F32) if kind == "group" or w is None else w
        gb = np.zeros(g, F32) if kind == "group" or bb is None else bb
        y = b.node("InstanceNormalization", [t, b.const(h + "_gamma", gw),
                                             b.const(h + "_beta", gb)],
                   hint=h, epsilon=float(eps))
        if kind == "group":
            y = b.node("Reshape", [y, b.node("Shape", [xf], hint=h + "_shape")], hint=h + "_back")
            bshape = (c,) + (1,) * (nd - 2)
            if w is not None:
                y = b.node("Mul", [y, b.const(h + "_w", w.reshape(bshape))], hint=h + "_affine")
            if bb is not None:
                y = b.node("Add", [y, b.const(h + "_b", bb.reshape(bshape))], hint=h + "_bias")
    if not xv.q:
        return _set_float(b, y, out)
    return b.q(y, out, h)


def emit_binary(b, rec, a, c, out, kind, relu):
    h = rec.label
    av, cv = b.get(a, rec.where), b.get(c, rec.where)
    if not (av.q and cv.q):
        raise ExportError(f"{rec.where}: quantized {kind} of a float tensor")
    if b.form == "qoperator":
        op = {"add": "QLinearAdd", "mul": "QLinearMul"}[kind]
        y = b.node(op, [av.name] + b.qparams(av, h + "_a") + [cv.name] + b.qparams(cv, h + "_b")
                   + b.out_qparams(out, h), hint=h, domain=MS)
        if relu:
            y = b.clip_q(y, out, int(out.q_zero_point()), None, h)
        return _bind(b, y, out)
    y = b.node({"add": "Add", "mul": "Mul"}[kind], [b.dq(av, h + "_a"), b.dq(cv, h + "_b")],
               hint=h)
    if relu:
        y = b.node("Relu", [y], hint=h + "_relu")
    return b.q(y, out, h)


def emit_scalar(b, rec, a, scalar, out, kind):
    """add_scalar / mul_scalar (docs/semantics.md §7): mostly new qparams on the same data."""
    h = rec.label
    av = b.get(a, rec.where)
    if (kind == "add" and float(out.q_scale()) == av.scale) or (kind == "mul" and scalar > 0):
        # PyTorch keeps the integers and only shifts the zero point (add) or scales the
        # scale (mul): the ONNX tensor is the same, read with the output's qparams.
        return _bind(b, av.name, out)
    if kind == "add":
        # PyTorch adds the scalar rounded to a multiple of the scale: rint_f64(c / s) * s.
        scalar = float(np.rint(float(scalar) / av.scale)) * av.scale
    op = {"add": "Add", "mul": "Mul"}[kind]
    y = b.node(op, [b.dq(av, h + "_a"), b.const(h + "_c", np.array(scalar, F32))], hint=h)
    return b.q(y, out, h)


def emit_cat(b, rec, xs, out, dim):
    h = rec.label
    vs = [b.get(x, rec.where) for x in xs]
    if not isinstance(out, QTensor):
        y = b.node("Concat", [v.name for v in vs], hint=h, axis=int(dim))
        return _set_float(b, y, out)
    if b.form == "qoperator":
        ins = b.out_qparams(out, h)
        for i, v in enumerate(vs):
            ins += [v.name] + b.qparams(v, f"{h}_x{i}")
        y = b.node("QLinearConcat", ins, hint=h, domain=MS, axis=int(dim))
        return _bind(b, y, out)
    y = b.node("Concat", [b.dq(v, f"{h}_x{i}") for i, v in enumerate(vs)], hint=h,
               axis=int(dim))
    return b.q(y, out, h)


def emit_reshape(b, rec, x, out):
    h = rec.label
    xv = b.get(x, rec.where)
    shape = list(np.shape(out))
    # A leading dimension equal to the input's is written as 0 (copy): the batch size of the
    # exported graph stays free.
    if shape and xv.shape and shape[0] == xv.shape[0]:
        shape[0] = 0
    y = b.node("Reshape", [xv.name, b.const(h + "_shape", np.array(shape, np.int64))], hint=h)
    if xv.q:
        return _bind(b, y, out)
    return _set_float(b, y, out)


def emit_identity(b, rec, x, out):
    v = b.get(x, rec.where)
    b.bind(out, v)
    return v


def emit_resize(b, rec, x, out, mode, align_corners):
    h = rec.label
    xv = b.get(x, rec.where)
    in_sp, out_sp = xv.shape[2:], tuple(np.shape(out)[2:])
    scales = np.array([1.0, 1.0] + [o / i for i, o in zip(in_sp, out_sp)], F32)
    roi = ""
    if mode == "nearest":
        attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor")
    elif mode == "nearest-exact":
        attrs = dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                     nearest_mode="round_prefer_ceil")
    elif mode in ("bilinear", "linear", "trilinear"):
        attrs = dict(mode="linear", coordinate_transformation_mode="align_corners"
                     if align_corners else "pytorch_half_pixel")
    else:
        raise ExportError(f"{rec.where}: interpolate mode {mode!r} has no ONNX Resize form")
    if any(o % i for i, o in zip(in_sp, out_sp)) and mode.startswith("nearest"):
        # PyTorch's nearest uses the scale in_size/out_size; Resize with `scales` uses its
        # inverse, which differs for non-integer ratios: give the sizes instead.
        sizes = b.const(h + "_sizes", np.array(np.shape(out), np.int64))
        extra = [roi, "", sizes]
    else:
        extra = [roi, b.const(h + "_scales", scales)]
    if mode.startswith("nearest") or not xv.q:
        y = b.node("Resize", [xv.name] + extra, hint=h, **attrs)
        return _bind(b, y, out) if xv.q else _set_float(b, y, out)
    y = b.node("Resize", [b.dq(xv, h + "_x")] + extra, hint=h, **attrs)
    return b.q(y, out, h)


def emit_dynamic_linear(b, rec, x, out, weight, bias, relu, reduce_range=True):
    """PyTorch's dynamic linear (docs/semantics.md §10) in float and integer ONNX ops."""
    xv = b.get(x, rec.where)
    if xv.q:
        raise ExportError(f"{rec.where}: dynamic linear expects a float input")
    y = _dyn_matmul(b, rec.label, rec.where, xv.name, weight, bias, reduce_range)
    if relu:
        y = b.node("Relu", [y], hint=rec.label + "_relu")
    return _set_float(b, y, out)


def _dyn_qparams(b, h, xname, qmax):
    """PyTorch's dynamic activation (scale, zero point) from x's min and max, in ONNX ops.

    qops' choose_dynamic_qparams (docs/semantics.md §10): min/max with 0 in float32, the scale
    (max - min) / qmax in double, 0.1 where its float32 value is 0 or has no float32
    reciprocal, the small-scale branch (scale < 6.1e-5: scale 6.1e-5 and min/max amplified
    in float32), the zero point from the end with the smaller error term, in double, rounded
    half to even. Returns (float32 scale, zero point as a double, zero point as uint8).
    """
    D, F = b.onnx.TensorProto.DOUBLE, b.onnx.TensorProto.FLOAT
    small = F32(6.1e-5)

    def c(hint, v, dt=np.float64):
        return b.const(f"{h}_{hint}", np.array(v, dt))

    def n(op, ins, hint, **kw):
        return b.node(op, ins, hint=f"{h}_{hint}", **kw)
    zero = c("zero", 0.0, F32)
    mn32 = n("Min", [n("ReduceMin", [xname], "min", keepdims=0), zero], "min0")
    mx32 = n("Max", [n("ReduceMax", [xname], "max", keepdims=0), zero], "max0")
    mn, mx = n("Cast", [mn32], "mind", to=D), n("Cast", [mx32], "maxd", to=D)
    scale = n("Div", [n("Sub", [mx, mn], "range"), c("levels", qmax)], "scaled")
    s32 = n("Cast", [scale], "scale32", to=F)
    bad = n("Or", [n("Equal", [s32, zero], "is0"),
                   n("IsInf", [n("Div", [c("one32", 1.0, F32), s32], "inv0")], "isinf")], "bad")
    scale = n("Where", [bad, c("s01", 0.1), scale], "scale01")
    is_small = n("Less", [scale, c("small", float(small))], "is_small")
    amp = n("Div", [c("small32", small, F32), s32], "amp")
    mn_is0, mx_is0 = n("Equal", [mn32, zero], "mn_is0"), n("Equal", [mx32, zero], "mx_is0")
    mn_a = n("Where", [mn_is0, mn32, n("Where", [mx_is0, c("mn_small", -small * F32(qmax), F32),
                                                 n("Mul", [mn32, amp], "mn_amp")], "mn_a1")],
             "mn_a")
    mx_a = n("Where", [mn_is0, c("mx_small", small * F32(qmax), F32),
                       n("Where", [mx_is0, mx32, n("Mul", [mx32, amp], "mx_amp")], "mx_a1")],
             "mx_a")
    mn = n("Where", [is_small, n("Cast", [mn_a], "mn_ad", to=D), mn], "mn_f")
    mx = n("Where", [is_small, n("Cast", [mx_a], "mx_ad", to=D), mx], "mx_f")
    scale = n("Where", [is_small, c("small_d", float(small)), scale], "scale_f")
    a_min, a_max = n("Div", [mn, scale], "a_min"), n("Div", [mx, scale], "a_max")
    err_min = n("Neg", [n("Abs", [a_min], "abs_min")], "err_min")
    err_max = n("Sub", [c("qmax_d", qmax), n("Abs", [a_max], "abs_max")], "err_max")
    init = n("Where", [n("Less", [err_min, err_max], "pick"), n("Neg", [a_min], "zp_min"),
                       n("Sub", [c("qmax_d2", qmax), a_max], "zp_max")], "zp_init")
    zp = n("Clip", [n("Round", [init], "zp_round"), c("zero_d", 0.0), c("qmax_d3", qmax)],
           "zp_d")
    return n("Cast", [scale], "scale", to=F), zp, n("Cast", [zp], "zp", to=b.onnx.TensorProto.UINT8)


def _dyn_matmul(b, h, where, xname, weight, bias, reduce_range=True):
    """x W^T + bias with x quantized dynamically over the whole tensor; returns the float name.

    qops' dynamic linear (PyTorch's fbgemm path) in ONNX ops: the qparams of _dyn_qparams,
    x quantized as rint(fma(x, f32(1 / scale), zp)) (Q_fma), MatMulInteger, then
    fma(f32(acc), f32(scale * w_scale), bias). Each fma is a float64 Mul (exact: both factors
    have 24 bits) and Add with one Cast to float32: it can differ from the fma only where the
    float64 sum rounds onto a float32 halfway point (double rounding).
    """
    D, F = b.onnx.TensorProto.DOUBLE, b.onnx.TensorProto.FLOAT
    wd, ws, wz, axis = _weight_qparams(weight)
    if np.any(wz != 0):
        raise ExportError(f"{where}: dynamic linear weight with nonzero zero points")
    qmax = 127.0 if reduce_range else 255.0
    scale, zpd, zp = _dyn_qparams(b, h, xname, qmax)
    inv = b.node("Div", [b.const(h + "_one", np.array(1.0, F32)), scale], hint=h + "_inv")
    t = b.node("Add", [b.node("Mul", [b.node("Cast", [xname], hint=h + "_xd", to=D),
                                      b.node("Cast", [inv], hint=h + "_invd", to=D)],
                              hint=h + "_xs"), zpd], hint=h + "_xz")
    xq = b.node("Clip", [b.node("Round", [b.node("Cast", [t], hint=h + "_xf", to=F)],
                                hint=h + "_xr"),
                         b.const(h + "_q0", np.array(0.0, F32)),
                         b.const(h + "_q255", np.array(255.0, F32))], hint=h + "_xc")
    xq = b.node("Cast", [xq], hint=h + "_xq", to=b.onnx.TensorProto.UINT8)
    acc = b.node("MatMulInteger", [xq, b.const(h + "_wT", np.ascontiguousarray(wd.T)), zp,
                                   b.const(h + "_w_zp", np.zeros(wd.shape[0] if axis is not None
                                                                 else (), np.int8))],
                 hint=h + "_mm")
    accf = b.node("Cast", [acc], hint=h + "_accf", to=F)
    mult = b.node("Mul", [scale, b.const(h + "_w_scale", ws)], hint=h + "_xw")
    if bias is None:
        return b.node("Mul", [accf, mult], hint=h + "_deq")
    y = b.node("Add", [b.node("Mul", [b.node("Cast", [accf], hint=h + "_accd", to=D),
                                      b.node("Cast", [mult], hint=h + "_multd", to=D)],
                              hint=h + "_deq"),
                       b.const(h + "_b", np.asarray(bias, np.float64))], hint=h + "_bias")
    return b.node("Cast", [y], hint=h + "_y", to=F)


def _float_matmul(b, h, xname, weight, bias):
    y = b.node("MatMul", [xname, b.const(h + "_wT", np.ascontiguousarray(
        np.asarray(weight, F32).T))], hint=h)
    if bias is not None:
        y = b.node("Add", [y, b.const(h + "_b", np.asarray(bias, F32))], hint=h + "_bias")
    return y


# -- recurrent layers and cells: a Scan over the time steps per layer and direction ---------
def _gate_gemm(b, h, where, cell, part, xname):
    """x W_part^T + b_part of one cell: dynamic qint8, float16-valued or float weights."""
    bias = getattr(cell, "b_" + part)
    if getattr(cell, "qint8", False):
        return _dyn_matmul(b, h, where, xname, getattr(cell, "w_" + part), bias)
    # float16 dynamic cells hold the float16-rounded weights in _ih/_hh (fbgemm's fp16 path
    # computes in float32 on them); float cells their float32 weights
    w = getattr(cell, "_" + part) if hasattr(cell, "qint8") else getattr(cell, "w_" + part)
    return _float_matmul(b, h, xname, w, bias)


def _zeros_state(b, h, xname, batch_axis, size):
    """A float32 zero state (batch, size), the batch read from the input's shape."""
    n = b.node("Gather", [b.node("Shape", [xname], hint=h + "_shape"),
                          b.const(h + "_bax", np.array([batch_axis], np.int64))],
               hint=h + "_batch")
    shape = b.node("Concat", [n, b.const(h + "_hsz", np.array([size], np.int64))],
                   hint=h + "_zshape", axis=0)
    return b.node("ConstantOfShape", [shape], hint=h + "_zeros",
                  value=b.nh.from_array(np.zeros(1, F32), "zero"))


def _fma_f32(b, h, a, x, c):
    """f32(a * x + c) in float64 ONNX ops: a * x is exact in float64 and the sum is rounded to
    float64 before float32, which differs from one fused rounding only where that float64 sum
    lands exactly on a float32 midpoint the exact sum was not on (docs/onnx.md)."""
    D, F = b.onnx.TensorProto.DOUBLE, b.onnx.TensorProto.FLOAT

    def wide(v, name):
        if isinstance(v, float):
            return b.const(h + name, np.array(np.float32(v), np.float64))
        return b.node("Cast", [v], hint=h + name, to=D)
    p = b.node("Mul", [wide(a, "_a"), wide(x, "_x")], hint=h + "_p")
    return b.node("Cast", [b.node("Add", [p, wide(c, "_c")], hint=h + "_s")], hint=h, to=F)


def _expf(b, h, d):
    """qops' float32 exp (docs/semantics.md §21: SLEEF's expf u10, as PyTorch's vector kernels):
    q = rint(d / ln2), s = d - q ln2 in two fmas, a degree-6 polynomial in fmas, times 2^q (one
    rounding, a float64 product: 2^q from a table); 0 below -104, inf above 100."""
    from qops._ref import _vecmath as ref
    D = b.onnx.TensorProto.DOUBLE
    F32c = lambda name, v: b.const(h + name, np.array(v, F32))  # noqa: E731
    # q from d clamped to +-128 (NaN as 0): the table index stays in range; beyond +-104 the
    # selects below decide, and a NaN d makes s NaN
    safe = b.node("Where", [b.node("IsNaN", [d], hint=h + "_nan"), F32c("_zero", 0.0), d],
                  hint=h + "_safe")
    dc = b.node("Clip", [safe, F32c("_lo", -128.0), F32c("_hi", 128.0)], hint=h + "_dc")
    qf = b.node("Round", [b.node("Mul", [dc, F32c("_rln2", ref.R_LN2)], hint=h + "_dl")],
                hint=h + "_q")
    s = _fma_f32(b, h + "_s1", qf, float(-ref.L2U), d)
    s = _fma_f32(b, h + "_s2", qf, float(-ref.L2L), s)
    u = _fma_f32(b, h + "_u1", float(ref.EXPF_COEF[0]), s, float(ref.EXPF_COEF[1]))
    for k, coef in enumerate(ref.EXPF_COEF[2:]):
        u = _fma_f32(b, h + f"_u{k + 2}", u, s, float(coef))
    s2 = b.node("Mul", [s, s], hint=h + "_ss")
    u = b.node("Add", [F32c("_one", 1.0), _fma_f32(b, h + "_u7", s2, u, s)], hint=h + "_e0")
    idx = b.node("Cast", [b.node("Add", [qf, F32c("_off", 192.0)], hint=h + "_qo")],
                 hint=h + "_qi", to=b.onnx.TensorProto.INT64)
    table = b.const(h + "_pow2", np.ldexp(1.0, np.arange(-192, 193)).astype(np.float64))
    p2 = b.node("Gather", [table, idx], hint=h + "_p2", axis=0)
    e = b.node("Cast", [b.node("Mul", [b.node("Cast", [u], hint=h + "_ud", to=D), p2],
                               hint=h + "_scaled")], hint=h + "_e1", to=b.onnx.TensorProto.FLOAT)
    e = b.node("Where", [b.node("Less", [d, F32c("_m104", -104.0)], hint=h + "_under"),
                         F32c("_z", 0.0), e], hint=h + "_e2")
    return b.node("Where", [b.node("Less", [F32c("_c100", 100.0), d], hint=h + "_over"),
                            F32c("_inf", np.inf), e], hint=h)


def _sigmoid_f32(b, h, x):
    """qops' sigmoid (docs/semantics.md §21, PyTorch's vector sigmoid):
    f32(1 / f32(expf(0 - x) + 1))."""
    d = b.node("Sub", [b.const(h + "_zero", np.array(0.0, F32)), x], hint=h + "_neg")
    e = _expf(b, h + "_exp", d)
    one = b.const(h + "_one", np.array(1.0, F32))
    # Reciprocal, not Div(1, .): ORT's DivMulFusion turns Mul(a, Div(1, b)) into Div(a, b),
    # which rounds once instead of twice (measured: 19% of GRU cell outputs moved)
    return b.node("Reciprocal", [b.node("Add", [e, one], hint=h + "_1pe")], hint=h)


def _tanh_f32(b, h, x):
    """qops' tanh (docs/semantics.md §21): f32(copysign(-q / (q + 2), x)), q = expm1(-2 min(|x|,
    20)) in float64. ONNX has no expm1: Kahan's (u - 1) * y / log(u), u = exp(y) (y where
    u == 1), accurate to a few float64 ulp, far below the one float32 rounding."""
    D, F = b.onnx.TensorProto.DOUBLE, b.onnx.TensorProto.FLOAT
    xd = b.node("Cast", [x], hint=h + "_d", to=D)
    y = b.node("Mul", [b.const(h + "_m2", np.array(-2.0)),
                       b.node("Min", [b.node("Abs", [xd], hint=h + "_abs"),
                                      b.const(h + "_c20", np.array(20.0))], hint=h + "_clamp")],
               hint=h + "_y")
    u = b.node("Exp", [y], hint=h + "_u")
    one = b.const(h + "_one", np.array(1.0))
    kahan = b.node("Div", [b.node("Mul", [b.node("Sub", [u, one], hint=h + "_um1"), y],
                                  hint=h + "_num"), b.node("Log", [u], hint=h + "_log")],
                   hint=h + "_kahan")
    q = b.node("Where", [b.node("Equal", [u, one], hint=h + "_u1"), y, kahan], hint=h + "_q")
    v = b.node("Div", [b.node("Neg", [q], hint=h + "_nq"),
                       b.node("Add", [q, b.const(h + "_two", np.array(2.0))], hint=h + "_q2")],
               hint=h + "_v")
    return b.node("Cast", [b.node("Mul", [v, b.node("Sign", [xd], hint=h + "_sign")],
                                  hint=h + "_signed")], hint=h, to=F)


def _cell_ops(b, h, mode, gi, gh, hprev, cprev, hidden):
    """One cell step in float ONNX ops, in the order of the rnn family (docs/semantics.md §21)."""
    if mode == "LSTM":
        g = b.node("Add", [gh, gi], hint=h + "_gates")
        i, f, gg, o = b.node("Split", [g, b.const(h + "_split", np.array([hidden] * 4,
                                                                         np.int64))],
                             n_out=4, hint=h + "_chunks", axis=1)
        i = _sigmoid_f32(b, h + "_i", i)
        f = _sigmoid_f32(b, h + "_f", f)
        gg = _tanh_f32(b, h + "_g", gg)
        o = _sigmoid_f32(b, h + "_o", o)
        c = b.node("Add", [b.node("Mul", [f, cprev], hint=h + "_fc"),
                           b.node("Mul", [i, gg], hint=h + "_ig")], hint=h + "_c")
        return b.node("Mul", [o, _tanh_f32(b, h + "_tc", c)], hint=h + "_h"), c
    if mode == "GRU":
        split = b.const(h + "_split", np.array([hidden] * 3, np.int64))
        ir, iz, in_ = b.node("Split", [gi, split], n_out=3, hint=h + "_gi", axis=1)
        hr, hz, hn = b.node("Split", [gh, split], n_out=3, hint=h + "_gh", axis=1)
        r = _sigmoid_f32(b, h + "_r", b.node("Add", [hr, ir], hint=h + "_rs"))
        z = _sigmoid_f32(b, h + "_z", b.node("Add", [hz, iz], hint=h + "_zs"))
        n = _tanh_f32(b, h + "_n", b.node("Add", [in_, b.node("Mul", [hn, r], hint=h + "_hnr")],
                                              hint=h + "_ns"))
        hz_ = b.node("Mul", [b.node("Sub", [hprev, n], hint=h + "_hmn"), z], hint=h + "_hz")
        return b.node("Add", [hz_, n], hint=h + "_h"), None
    s = b.node("Add", [gh, gi], hint=h + "_s")
    if mode == "RNN_RELU":
        return b.node("Relu", [s], hint=h + "_h"), None
    return _tanh_f32(b, h + "_h", s), None


def _state_at(b, h, where, state, k):
    """state[k] of a (layers * directions, batch, size) graph tensor, or None."""
    if state is None:
        return None
    v = b.get(state, where)
    return b.node("Gather", [v.name, b.const(h + "_k", np.array(k, np.int64))], hint=h)


def _scan_direction(b, hk, where, mode, cell, gi_all, h0, c0, hidden, reverse):
    """One layer and direction as an ONNX Scan over the time axis of gi_all.

    The body is one step: the hidden GEMM (h quantized dynamically, per step, as qops does),
    the cell, the LSTM projection. Returns (ys (seq, batch, out), h_n, c_n or None).
    """
    helper, onnx = b.helper, b.onnx
    lstm = mode == "LSTM"
    saved, saved_rec = b.nodes, b.rec
    b.nodes, b.rec = [], None
    try:
        h_in, c_in, g_in = b.uname(hk + "_h_in"), b.uname(hk + "_c_in"), b.uname(hk + "_gi_t")
        gh = _gate_gemm(b, hk + "_hh", where, cell, "hh", h_in)
        hnew, cnew = _cell_ops(b, hk + "_cell", mode, g_in, gh, h_in, c_in if lstm else None,
                               hidden)
        if lstm and cell.hr is not None:
            hnew = _float_matmul(b, hk + "_hr", hnew, cell.w_hr, None)
        h_out = b.node("Identity", [hnew], hint=hk + "_h_out")
        outs = [h_out]
        if lstm:
            outs.append(b.node("Identity", [cnew], hint=hk + "_c_out"))
        outs.append(b.node("Identity", [hnew], hint=hk + "_y_t"))
        body_nodes = b.nodes
    finally:
        b.nodes, b.rec = saved, saved_rec

    def vi(name):
        return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
    body = helper.make_graph(body_nodes, hk + "_step",
                             [vi(h_in)] + ([vi(c_in)] if lstm else []) + [vi(g_in)],
                             [vi(o) for o in outs])
    states = [h0] + ([c0] if lstm else [])
    res = b.node("Scan", states + [gi_all], n_out=len(outs), hint=hk + "_scan", body=body,
                 num_scan_inputs=1, scan_input_directions=[int(reverse)],
                 scan_output_directions=[int(reverse)])
    return res[-1], res[0], (res[1] if lstm else None)


def emit_recurrent(b, rec, mode, cells, args, out, hidden, num_layers, bidirectional,
                   batch_first):
    """A multi-layer LSTM / GRU / RNN: per layer and direction an ONNX Scan over the steps.

    As qops' `recurrent` (PyTorch's CPU path): per layer and direction the input GEMM over the
    whole sequence (one dynamic quantization of it), then per step (the Scan body) the hidden
    GEMM (one dynamic quantization of h) and the cell in float ops. Sequence length and batch
    stay free.
    """
    h, where = rec.label, rec.where
    x = args[0]
    hx = args[1] if len(args) > 1 else None
    xv = b.get(x, where)
    if xv.q or len(xv.shape) != 3:
        raise ExportError(f"{where}: recurrent layers export for a float 3-D input (batched); "
                          f"got {'a quantized' if xv.q else f'a {len(xv.shape)}-D'} input")
    lstm = mode == "LSTM"
    h0 = c0 = None
    if hx is not None:
        h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
    xs = b.node("Transpose", [xv.name], hint=h + "_tm", perm=[1, 0, 2]) if batch_first \
        else xv.name
    seq_dims = ["N", "S"] if batch_first else ["S", "N"]
    b.loose_outputs = True
    if xv.name in b.graph_input_names:
        b.dims[xv.name] = seq_dims + [xv.shape[2]]
    dirs = 2 if bidirectional else 1
    layer_in, hn, cn = xs, [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            cell, hk = cells[k], f"{h}_l{layer}" + ("r" if d else "")
            gi_all = _gate_gemm(b, hk + "_ih", where, cell, "ih", layer_in)
            hcur = _state_at(b, hk + "_h0", where, h0, k) or \
                _zeros_state(b, hk + "_h0", layer_in, 1, hidden if cell.hr is None else
                             cell.w_hr.shape[0])
            ccur = (_state_at(b, hk + "_c0", where, c0, k) or
                    _zeros_state(b, hk + "_c0", layer_in, 1, hidden)) if lstm else None
            ys, hlast, clast = _scan_direction(b, hk, where, mode, cell, gi_all, hcur, ccur,
                                               hidden, d == 1)
            hn.append(hlast)
            cn.append(clast)
            outs.append(ys)
        layer_in = outs[0] if dirs == 1 else b.node("Concat", outs, hint=f"{h}_l{layer}_cat",
                                                    axis=2)
    y = b.node("Transpose", [layer_in], hint=h + "_bm", perm=[1, 0, 2]) if batch_first \
        else layer_in
    o = out[0]
    _set_float(b, y, o)
    b.dims[y] = seq_dims + [o.shape[2]]

    def stack(names, value, hint):
        ax = b.const(hint + "_ax", np.array([0], np.int64))
        parts = [b.node("Unsqueeze", [n, ax], hint=hint) for n in names]
        name = b.node("Concat", parts, hint=hint, axis=0) if len(parts) > 1 else parts[0]
        _set_float(b, name, value)
        b.dims[name] = [value.shape[0], "N", value.shape[2]]
    if lstm:
        stack(hn, out[1][0], h + "_hn")
        stack(cn, out[1][1], h + "_cn")
    else:
        stack(hn, out[1], h + "_hn")
    for st in ((h0, c0) if lstm else (h0,)):
        if st is not None and b.get(st, where).name in b.graph_input_names:
            b.dims[b.get(st, where).name] = [np.shape(st)[0], "N", np.shape(st)[2]]
    return True


def emit_cell(b, rec, mode, cell, args, out, hidden):
    """One LSTMCell / GRUCell / RNNCell step (the states given, or zeros)."""
    h, where = rec.label, rec.where
    x = args[0]
    hx = args[1] if len(args) > 1 else None
    xv = b.get(x, where)
    if xv.q or len(xv.shape) != 2:
        raise ExportError(f"{where}: recurrent cells export for a float 2-D input (batched)")
    lstm = mode == "LSTM"
    if hx is None:
        hprev = _zeros_state(b, h + "_h0", xv.name, 0, hidden)
        cprev = _zeros_state(b, h + "_c0", xv.name, 0, hidden) if lstm else None
    elif lstm:
        hprev, cprev = b.get(hx[0], where).name, b.get(hx[1], where).name
    else:
        hprev, cprev = b.get(hx, where).name, None
    gi = _gate_gemm(b, h + "_ih", where, cell, "ih", xv.name)
    gh = _gate_gemm(b, h + "_hh", where, cell, "hh", hprev)
    hnew, cnew = _cell_ops(b, h, mode, gi, gh, hprev, cprev, hidden)
    if lstm:
        _set_float(b, hnew, out[0])
        _set_float(b, cnew, out[1])
    else:
        _set_float(b, hnew, out)
    return True


# -- embeddings: Gather on the integer table, rows dequantized as qops does --------------------
def _row_params(packed):
    """(values (N, D) uint8, scales (N,), biases (N,)) of a row-wise quantized table, the scale
    and bias as the lookup kernels read them (fbgemm's fused rows; float16-rounded for 4-bit)."""
    tail = np.ascontiguousarray(packed.fused[:, -8:]).view(F32)
    return np.ascontiguousarray(packed.int_repr(), dtype=np.uint8), tail[:, 0].copy(), \
        tail[:, 1].copy()


def _to_double(b, h, name):
    return b.node("Cast", [name], hint=h, to=b.onnx.TensorProto.DOUBLE)


def _to_float(b, h, name):
    return b.node("Cast", [name], hint=h, to=b.onnx.TensorProto.FLOAT)


def emit_embedding(b, rec, idx, out, packed):
    """Quantized Embedding: fma(scale, q, bias) per looked-up value.

    The fma is a float64 Mul (exact: 24-bit scale times 8-bit value) then a float64 Add and
    one Cast to float32 (a double rounding, which can differ from the fma's single rounding
    only when the float64 sum lands exactly halfway between two float32 values).
    """
    h = rec.label
    iv = b.get(idx, rec.where)
    q, sc, bi = _row_params(packed)
    vals = b.node("Gather", [b.const(h + "_table", q), iv.name], hint=h + "_rows", axis=0)
    last = b.const(h + "_last", np.array([-1], np.int64))
    s = b.node("Unsqueeze", [b.node("Gather", [b.const(h + "_scales", sc), iv.name],
                                    hint=h + "_s", axis=0), last], hint=h + "_s1")
    c = b.node("Unsqueeze", [b.node("Gather", [b.const(h + "_biases", bi), iv.name],
                                    hint=h + "_c", axis=0), last], hint=h + "_c1")
    prod = b.node("Mul", [_to_double(b, h + "_sd", s), _to_double(b, h + "_qd", vals)],
                  hint=h + "_sq")
    y = _to_float(b, h + "_y", b.node("Add", [prod, _to_double(b, h + "_cd", c)], hint=h + "_fma"))
    return _set_float(b, y, out)


def emit_embedding_bag(b, rec, args, out, packed, mode, include_last_offset, padding_idx,
                       fweight=None):
    """Quantized EmbeddingBag: an ONNX Loop over the entries, in index order.

    Each entry adds fma(scale * w, q, acc + bias * w) to its bag (docs/semantics.md §20), the
    fma as in emit_embedding; the entry's bag is the number of bag starts <= its position,
    minus one. Mean divides by the entry count, max keeps the largest fma(scale, q, bias)
    (the first counted entry of a bag starts it); entries equal to padding_idx are skipped
    and not counted. Indices, offsets and weights stay graph inputs. With `fweight` (a float
    table, `packed` None) the float EmbeddingBag: acc + row, or with per-sample weights
    fma(w, row, acc) (acc + f32(w * row) when a padding_idx is given), as qops.
    """
    from qops._ops.embedding import _bag_args
    h, where = rec.label, rec.where
    helper, onnx = b.helper, b.onnx
    F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    idx = args[0]
    offsets = args[1] if len(args) > 1 else None
    psw = args[2] if len(args) > 2 else None
    _, _, _, _, pad = _bag_args(idx, offsets, include_last_offset, psw, mode, padding_idx,
                                packed.num_embeddings if fweight is None else
                                np.shape(fweight)[0])
    iv = b.get(idx, where)
    i64 = {"to": I64}

    def c(hint, v, dt=np.int64):
        return b.const(f"{h}_{hint}", np.array(v, dt))

    def n(op, ins, hint, **kw):
        return b.node(op, ins, hint=f"{h}_{hint}", **kw)
    if np.ndim(idx) == 2:
        if iv.name in b.graph_input_names:
            b.dims[iv.name] = ["N", "L"]
        flat = n("Reshape", [iv.name, c("flat", [-1])], "flat")
        shape = n("Shape", [iv.name], "shape")
        length = n("Gather", [shape, c("one_i", 1)], "len", axis=0)
        total = n("Mul", [n("Gather", [shape, c("zero_i", 0)], "nb", axis=0), length], "total")
        starts = n("Range", [c("zero_i2", 0), total, length], "starts")
        ends = n("Add", [starts, length], "ends")
    else:
        flat = n("Cast", [iv.name], "idx64", **i64)
        if iv.name in b.graph_input_names:
            b.dims[iv.name] = ["M"]
        ov = b.get(offsets, where)
        if ov.name in b.graph_input_names:
            b.dims[ov.name] = ["B"]
        off = n("Cast", [ov.name], "off64", **i64)
        if include_last_offset:
            starts = n("Slice", [off, c("s0", [0]), c("s1", [-1])], "starts")
            ends = n("Slice", [off, c("e0", [1]), c("e1", [2 ** 62])], "ends")
        else:
            count = n("Shape", [flat], "n")
            starts = off
            ends = n("Concat", [n("Slice", [off, c("e0", [1]), c("e1", [2 ** 62])], "ends0"),
                                count], "ends", axis=0)
    w = None
    if psw is not None:
        wv = b.get(psw, where)
        if wv.name in b.graph_input_names:
            b.dims[wv.name] = ["M"] if np.ndim(idx) == 1 else ["N", "L"]
        w = n("Reshape", [wv.name, c("wflat", [-1])], "wflat")
    if fweight is not None:
        fw = np.asarray(fweight, F32)
        d = fw.shape[1]
        prod = n("Gather", [b.const(h + "_table", fw), flat], "rows", axis=0)
    else:
        q, sc, bi = _row_params(packed)
        d = q.shape[1]
        vals = _to_double(b, h + "_qd", n("Gather", [b.const(h + "_table", q), flat], "rows",
                                          axis=0))
        s = n("Gather", [b.const(h + "_scales", sc), flat], "s", axis=0)
        cb = n("Gather", [b.const(h + "_biases", bi), flat], "c", axis=0)
        if w is not None:
            s = n("Mul", [s, w], "sw")
            cb = n("Mul", [cb, w], "cw")
        s = n("Unsqueeze", [s, c("last", [-1])], "s1")
        prod = n("Mul", [_to_double(b, h + "_sd", s), vals], "sq")     # exact in float64
    if mode == "max" and fweight is None:
        prod = _to_float(b, h + "_v", n("Add", [prod, _to_double(
            b, h + "_cd", n("Unsqueeze", [cb, c("last2", [-1])], "c1"))], "fma"))
    nbags = n("Shape", [starts], "nbags")
    acc0 = n("ConstantOfShape", [n("Concat", [nbags, c("dim", [d])], "accshape", axis=0)],
             "acc0", value=b.nh.from_array(np.zeros(1, F32), "zero"))
    cnt0 = n("ConstantOfShape", [nbags], "cnt0", value=b.nh.from_array(np.zeros(1, F32), "zero"))
    trips = n("ReduceMax", [ends], "trips", keepdims=0) if b.opset < 18 else \
        n("ReduceMax", [ends, c("ax0", [0])], "trips", keepdims=0)
    # the Loop body: one entry
    saved, saved_rec = b.nodes, b.rec
    b.nodes, b.rec = [], None
    try:
        it, cond, acc = b.uname(h + "_i"), b.uname(h + "_cond"), b.uname(h + "_acc")
        cnt = b.uname(h + "_cnt")
        le = n("Cast", [n("LessOrEqual", [starts, it], "le")], "le64", **i64)
        k = n("Sub", [n("ReduceSum", [le, c("ax0b", [0])], "nle", keepdims=0),
                      c("one_k", 1)], "k")
        acck = n("Gather", [acc, k], "acck", axis=0)
        row = n("Gather", [prod, it], "row", axis=0)
        cntk = n("Gather", [cnt, k], "cntk", axis=0)
        if mode == "max":
            first = n("Equal", [cntk, c("zero_f", 0.0, F32)], "first")
            new = n("Where", [first, row, n("Max", [acck, row], "max")], "new")
        elif fweight is not None and w is None:
            new = n("Add", [acck, row], "sum")
        elif fweight is not None and pad >= 0:
            new = n("Add", [acck, n("Mul", [n("Gather", [w, it], "wi", axis=0), row], "wrow")],
                    "sum")
        elif fweight is not None:
            wd = _to_double(b, h + "_wd", n("Gather", [w, it], "wi", axis=0))
            new = _to_float(b, h + "_new", n("Add", [
                n("Mul", [wd, _to_double(b, h + "_rowd", row)], "wrow"),
                _to_double(b, h + "_accd", acck)], "fma_e"))
        else:
            t = n("Add", [acck, n("Gather", [cb, it], "ci", axis=0)], "accb")
            new = _to_float(b, h + "_new", n("Add", [row, _to_double(b, h + "_td", t)],
                                             "fma_e"))
        newc = n("Add", [cntk, c("one_f", 1.0, F32)], "newc")
        if pad >= 0:
            # entries of padding_idx are skipped and not counted
            skip = n("Equal", [n("Gather", [flat, it], "idx_i", axis=0), c("pad", pad)], "skip")
            new = n("Where", [skip, acck, new], "new_pad")
            newc = n("Where", [skip, cntk, newc], "newc_pad")
        kk = n("Reshape", [k, c("kshape", [1, 1])], "kk")
        acc_out = n("ScatterND", [acc, kk, n("Unsqueeze", [new, c("ax0c", [0])], "new1")],
                    "scatter")
        cnt_out = n("ScatterND", [cnt, kk, n("Reshape", [newc, c("one_shape", [1])], "newc1")],
                    "scatter_cnt")
        cond_out = n("Identity", [cond], "cond_out")
        body_nodes = b.nodes
    finally:
        b.nodes, b.rec = saved, saved_rec
    body = helper.make_graph(
        body_nodes, h + "_entry",
        [helper.make_tensor_value_info(it, I64, []),
         helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info(acc, F, None), helper.make_tensor_value_info(cnt, F, None)],
        [helper.make_tensor_value_info(cond_out, onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info(acc_out, F, None),
         helper.make_tensor_value_info(cnt_out, F, None)])
    y, counts = n("Loop", [trips, "", acc0, cnt0], "loop", n_out=2, body=body)
    if mode == "mean":
        # acc / count where a bag has entries (empty bags stay zeros)
        cnt1 = n("Max", [counts, c("one_c", 1.0, F32)], "cnt1")
        y = n("Div", [y, n("Unsqueeze", [cnt1, c("last3", [-1])], "cnt2")], "mean")
    _set_float(b, y, out)
    b.dims[y] = ["N" if np.ndim(idx) == 2 else "B", d]
    return True


def emit_float_embedding(b, rec, idx, out, weight):
    iv = b.get(idx, rec.where)
    y = b.node("Gather", [b.const(rec.label + "_w", np.asarray(weight, F32)), iv.name],
               hint=rec.label, axis=0)
    return _set_float(b, y, out)


def emit_float_linear(b, rec, x, out, weight, bias, relu=False):
    h = rec.label
    xv = b.get(x, rec.where)
    if xv.q:
        raise ExportError(f"{rec.where}: a float Linear got a quantized input")
    y = b.node("MatMul", [xv.name, b.const(h + "_wT", np.ascontiguousarray(
        np.asarray(weight, F32).T))], hint=h)
    if bias is not None:
        y = b.node("Add", [y, b.const(h + "_b", np.asarray(bias, F32))], hint=h + "_bias")
    if relu:
        y = b.node("Relu", [y], hint=h + "_relu")
    return _set_float(b, y, out)


def emit_float_conv(b, rec, x, out, mod):
    h = rec.label
    xv = b.get(x, rec.where)
    if xv.q:
        raise ExportError(f"{rec.where}: a float conv got a quantized input")
    if isinstance(mod.padding, str) or mod.padding_mode != "zeros":
        raise ExportError(f"{rec.where}: float conv with padding {mod.padding!r} / padding_mode "
                          f"{mod.padding_mode!r} has no export (yet)")
    n = len(mod.kernel_size)
    ins = [xv.name, b.const(h + "_w", np.asarray(mod.weight, F32))]
    if mod.bias is not None:
        ins.append(b.const(h + "_b", np.asarray(mod.bias, F32)))
    y = b.node("Conv", ins, hint=h, strides=list(mod.stride), pads=list(mod.padding) * 2,
               dilations=list(mod.dilation), group=mod.groups, kernel_shape=list(
                   mod.kernel_size[:n]))
    return _set_float(b, y, out)


def emit_float_batchnorm(b, rec, x, out, mod):
    h = rec.label
    xv = b.get(x, rec.where)
    if xv.q or mod.running_mean is None or mod.training:
        raise ExportError(f"{rec.where}: only an eval-mode float BatchNorm with running "
                          f"statistics exports")
    c = mod.num_features
    w = np.ones(c, F32) if mod.weight is None else np.asarray(mod.weight, F32)
    bb = np.zeros(c, F32) if mod.bias is None else np.asarray(mod.bias, F32)
    y = b.node("BatchNormalization", [xv.name, b.const(h + "_gamma", w),
                                      b.const(h + "_beta", bb),
                                      b.const(h + "_mean", np.asarray(mod.running_mean, F32)),
                                      b.const(h + "_var", np.asarray(mod.running_var, F32))],
               hint=h, epsilon=float(mod.eps))
    return _set_float(b, y, out)


# -- dispatch: a traced step -> an emitter call ----------------------------------------------
def _module_step(b, rec, mod, args, out):
    """Emit a leaf module call; returns False if the module is not one the exporter knows."""
    from qops.nn import _layers as fl
    from qops.nn import module as nm
    from qops.nn.quantized import _modules as nnq
    from qops.nn.quantized import dynamic as nnqd
    x = args[0] if args else None
    relu = bool(getattr(mod, "_RELU", False))
    if isinstance(mod, nnq.Quantize):
        return emit_quantize(b, rec, x, out)
    if isinstance(mod, nnq.DeQuantize):
        return emit_dequantize(b, rec, x, out)
    if isinstance(mod, nnq._ConvTransposeNd):
        return emit_conv_transpose(b, rec, x, out, mod)
    if isinstance(mod, nnq._ConvNd):
        return emit_conv(b, rec, x, out, mod.weight(), mod.bias(), mod.stride, mod.padding,
                         mod.dilation, mod.groups, relu, mod.padding_mode)
    from qops.nn import _embedding as femb
    from qops.nn.quantized import _embedding as qemb
    if isinstance(mod, qemb.EmbeddingBag):
        return emit_embedding_bag(b, rec, args, out, mod.weight(), mod.mode,
                                  mod.include_last_offset, mod.padding_idx)
    if isinstance(mod, qemb.Embedding):
        return emit_embedding(b, rec, x, out, mod.weight())
    if isinstance(mod, femb.EmbeddingBag):
        return emit_embedding_bag(b, rec, args, out, None, mod.mode, mod.include_last_offset,
                                  mod.padding_idx, fweight=mod.weight)
    if isinstance(mod, femb.Embedding):
        return emit_float_embedding(b, rec, x, out, mod.weight)
    if isinstance(mod, (nnq.LayerNorm, fl.LayerNorm)):
        return emit_norm(b, rec, x, out, "layer", mod.weight, mod.bias, mod.eps,
                         mod.normalized_shape)
    if isinstance(mod, (nnq.GroupNorm, fl.GroupNorm)):
        return emit_norm(b, rec, x, out, "group", mod.weight, mod.bias, mod.eps, mod.num_groups)
    if isinstance(mod, (nnq._InstanceNorm, fl._InstanceNorm)):
        if isinstance(mod, fl._InstanceNorm) and mod.track_running_stats:
            raise ExportError(f"{rec.where}: float InstanceNorm with running statistics has "
                              f"no export (yet)")
        if np.ndim(x) == mod._NDIMS[0]:
            raise ExportError(f"{rec.where}: InstanceNorm of an unbatched input has no export")
        return emit_norm(b, rec, x, out, "instance", mod.weight, mod.bias, mod.eps)
    rnn = _recurrent_step(b, rec, mod, args, out)
    if rnn is not None:
        return rnn
    if isinstance(mod, nnqd.Linear):
        if mod.dtype is not qint8:
            w = mod.weight()
            return emit_float_linear(b, rec, x, out, np.asarray(w, F32), mod.bias(), relu)
        return emit_dynamic_linear(b, rec, x, out, mod.weight(), mod.bias(), relu)
    if isinstance(mod, nnq.Linear):
        return emit_linear(b, rec, x, out, mod.weight(), mod.bias(), relu)
    if isinstance(mod, nnq._BatchNorm):
        return emit_batchnorm(b, rec, x, out, mod.running_mean, mod.running_var, mod.weight,
                              mod.bias, mod.eps, relu)
    if isinstance(mod, nnq.Hardswish):
        return emit_unary(b, rec, x, out, "hardswish")
    if isinstance(mod, nnq.ELU):
        return emit_unary(b, rec, x, out, "elu", (mod.alpha,))
    if isinstance(mod, nnq.LeakyReLU):
        return emit_unary(b, rec, x, out, "leaky_relu", (mod.negative_slope,))
    if isinstance(mod, (nnq.Softmax, fl.Softmax)):
        return emit_softmax(b, rec, x, out, mod.dim)
    if isinstance(mod, nnq.Sigmoid):
        return emit_unary(b, rec, x, out, "sigmoid")
    if isinstance(mod, (nnq.Tanh, fl.Tanh)):
        return emit_unary(b, rec, x, out, "tanh")
    if isinstance(mod, (nnq.ReLU6, fl.ReLU6)):
        return emit_unary(b, rec, x, out, "relu6", (0.0, 6.0))
    if isinstance(mod, fl.Hardtanh):
        return emit_unary(b, rec, x, out, "hardtanh", (mod.min_val, mod.max_val))
    if isinstance(mod, fl.ReLU):
        return emit_unary(b, rec, x, out, "relu")
    if isinstance(mod, fl.LeakyReLU):
        return emit_unary(b, rec, x, out, "leaky_relu", (mod.negative_slope,))
    if isinstance(mod, fl.Hardsigmoid):
        return emit_unary(b, rec, x, out, "hardsigmoid")
    if isinstance(mod, fl.Sigmoid):
        return emit_unary(b, rec, x, out, "sigmoid")
    if isinstance(mod, fl.ELU):
        return emit_unary(b, rec, x, out, "elu", (mod.alpha,))
    if isinstance(mod, fl.Hardswish):
        return emit_unary(b, rec, x, out, "hardswish")
    if isinstance(mod, fl.SiLU):
        return emit_silu(b, rec, x, out)
    if isinstance(mod, fl.PReLU):
        return emit_prelu(b, rec, x, out, mod.weight)
    if isinstance(mod, fl.GELU):
        return emit_gelu(b, rec, x, out, mod.approximate)
    if isinstance(mod, fl._MaxPoolNd):
        return emit_maxpool(b, rec, x, out, mod._NDIM, mod.kernel_size, mod.stride, mod.padding,
                            mod.dilation, mod.ceil_mode)
    if isinstance(mod, fl._AvgPoolNd):
        return emit_avgpool(b, rec, x, out, mod._NDIM, mod.kernel_size, mod.stride, mod.padding,
                            mod.ceil_mode, mod.count_include_pad, mod.divisor_override)
    if isinstance(mod, fl._AdaptiveAvgPoolNd):
        return emit_adaptive(b, rec, x, out)
    if isinstance(mod, fl.Upsample):
        return emit_resize(b, rec, x, out, mod.mode, mod.align_corners)
    if isinstance(mod, nm.Flatten):
        return emit_reshape(b, rec, x, out)
    if isinstance(mod, (nm.Identity, nm.Dropout, nnq.Dropout)):
        return emit_identity(b, rec, x, out)
    if isinstance(mod, fl.Linear):
        return emit_float_linear(b, rec, x, out, mod.weight, mod.bias)
    if isinstance(mod, fl._ConvNd):
        return emit_float_conv(b, rec, x, out, mod)
    if isinstance(mod, fl._BatchNorm):
        return emit_float_batchnorm(b, rec, x, out, mod)
    return None


def _recurrent_step(b, rec, mod, args, out):
    from qops.nn import _rnn as frnn
    from qops.nn.quantized.dynamic import _rnn as drnn
    if isinstance(mod, drnn.RNNBase):
        return emit_recurrent(b, rec, mod.mode, mod._cells, args, out, mod.hidden_size,
                              mod.num_layers, mod.bidirectional, mod.batch_first)
    if isinstance(mod, frnn.RNNBase):
        return emit_recurrent(b, rec, mod.mode, mod._cells(), args, out, mod.hidden_size,
                              mod.num_layers, mod.bidirectional, mod.batch_first)
    if isinstance(mod, drnn.RNNCellBase):
        return emit_cell(b, rec, mod._mode(), mod._cells[0], args, out, mod.hidden_size)
    if isinstance(mod, frnn.RNNCellBase):
        cell = frnn._FloatCell(mod.weight_ih, mod.weight_hh, mod.bias_ih, mod.bias_hh)
        return emit_cell(b, rec, mod._mode(), cell, args, out, mod.hidden_size)
    return None


_RESHAPES = ("flatten", "reshape", "view", "squeeze", "unsqueeze")


def _bind_args(fname, args, kwargs):
    import qops.functional as F
    sig = inspect.signature(getattr(F, fname))
    ba = sig.bind(*args, **kwargs)
    ba.apply_defaults()
    return ba.arguments


def _function_step(b, rec, target, args, kwargs, out):
    """Emit a graph function or tensor method node (qops.nn._graph FUNCTIONS / METHODS)."""
    x = args[0] if args else None
    t = "relu" if target == "torch.relu" else target
    if t in _RESHAPES:
        return emit_reshape(b, rec, x, out)
    if t in ("dropout", "contiguous"):
        return emit_identity(b, rec, x, out)
    if t == "dequantize":
        return emit_dequantize(b, rec, x, out)
    if t == "quantize_per_tensor":
        return emit_quantize(b, rec, x, out)
    if t in ("relu", "sigmoid", "tanh", "hardsigmoid"):
        return emit_unary(b, rec, x, out, t)
    if t == "relu6":
        return emit_unary(b, rec, x, out, "relu6", (0.0, 6.0))
    if t == "hardtanh":
        a = {"min_val": -1.0, "max_val": 1.0}
        a.update(dict(zip(("min_val", "max_val"), args[1:3])), **kwargs)
        return emit_unary(b, rec, x, out, "hardtanh", (a["min_val"], a["max_val"]))
    if t == "clamp":
        a = {"min": None, "max": None}
        a.update(dict(zip(("min", "max"), args[1:3])), **kwargs)
        return emit_unary(b, rec, x, out, "clamp", (a["min"], a["max"]))
    if t == "leaky_relu":
        slope = args[1] if len(args) > 1 else kwargs.get("negative_slope", 0.01)
        return emit_unary(b, rec, x, out, "leaky_relu", (slope,))
    if t in ("quantized.hardswish", "hardswish"):
        return emit_unary(b, rec, x, out, "hardswish")
    if t.startswith("max_pool") or t.startswith("avg_pool"):
        n = int(t[-2])
        kind = t[:3]
        a = _bind_args(f"{kind}_pool{n}d", args, kwargs)
        if kind == "max":
            return emit_maxpool(b, rec, x, out, n, a["kernel_size"], a["stride"], a["padding"],
                                a["dilation"], a["ceil_mode"])
        return emit_avgpool(b, rec, x, out, n, a["kernel_size"], a["stride"], a["padding"],
                            a["ceil_mode"], a["count_include_pad"], a.get("divisor_override"))
    if t.startswith("adaptive_avg_pool") or (t == "mean" and _is_global_mean(x, args, kwargs)):
        # x.mean((2, 3), keepdim=True) on an NCHW QTensor is a global average pool
        return emit_adaptive(b, rec, x, out)
    if t == "interpolate":
        a = _bind_args("interpolate", args, kwargs)
        return emit_resize(b, rec, x, out, a["mode"], a["align_corners"])
    if t in ("cat", "quantized.cat"):
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        return emit_cat(b, rec, list(args[0]), out, dim)
    for kind in ("add", "mul"):
        if t in (f"quantized.{kind}", f"quantized.{kind}_relu"):
            return emit_binary(b, rec, args[0], args[1], out, kind, t.endswith("_relu"))
        if t == f"quantized.{kind}_scalar":
            return emit_scalar(b, rec, args[0], args[1], out, kind)
    if t in ("add", "torch.add", "mul", "torch.mul") and not isinstance(out, QTensor):
        av, cv = b.get(args[0], rec.where), b.get(args[1], rec.where)
        op = "Add" if t.endswith("add") else "Mul"
        return _set_float(b, b.node(op, [av.name, cv.name], hint=rec.label), out)
    if t == "linear" and not isinstance(out, QTensor):
        return emit_float_linear(b, rec, x, out, args[1], args[2] if len(args) > 2 else
                                 kwargs.get("bias"))
    raise ExportError(f"{rec.where}: {t} has no ONNX export (yet)")


def _is_global_mean(x, args, kwargs):
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    return isinstance(x, QTensor) and x.ndim == 4 and keep and \
        sorted(d % 4 for d in (dim if isinstance(dim, (list, tuple)) else [dim])) == [2, 3]


# -- tracing -------------------------------------------------------------------------------
class _Tracer:
    """Runs the model once, emitting each traced step as it happens."""

    def __init__(self, builder, model):
        self.b, self.model = builder, model
        # > 0 while inside a traced step: QTensor methods called there are its own business
        self.inside, self.n_methods = 0, 0

    def step(self, label, kind, fn):
        rec = Record(label, kind, [])
        self.b.records.append(rec)
        prev, self.b.rec = self.b.rec, rec
        try:
            fn(rec)
        finally:
            self.b.rec = prev
        return rec

    def _inputs_of(self, rec, values):
        for v in _flat(values):
            if isinstance(v, (QTensor, np.ndarray)) and id(v) in self.b.vals:
                rec.inputs.append((self.b.vals[id(v)], v))

    def _finish(self, rec, out):
        for o in _flat(out):
            if isinstance(o, (QTensor, np.ndarray)) and id(o) in self.b.vals:
                rec.outputs.append((self.b.vals[id(o)], o))

    def module_call(self, path, mod, args, out):
        def run(rec):
            self._inputs_of(rec, args)
            r = _module_step(self.b, rec, mod, args, out)
            if r is None:
                raise ExportError(f"module {path!r} ({type(mod).__name__}) has no ONNX export")
            self._finish(rec, out)
        self.step(path, type(mod).__name__, run)

    def function_call(self, label, target, args, kwargs, out):
        flat = []
        for a in list(args) + list(kwargs.values()):
            flat.extend(a if isinstance(a, (list, tuple)) else [a])
        tensors_in = [a for a in flat if isinstance(a, (QTensor, np.ndarray))]
        if not isinstance(out, (QTensor, np.ndarray)):
            if isinstance(out, (tuple, list)) and any(isinstance(o, (QTensor, np.ndarray))
                                                      for o in out):
                raise ExportError(f"node {label!r}: {target} returning several tensors has no ONNX "
                                  f"export (yet)")
            return          # sizes, shapes and other Python values: no ONNX node
        if not tensors_in:
            raise ExportError(f"node {label!r}: {target} makes a tensor from no tensor input")

        def run(rec):
            self._inputs_of(rec, tensors_in)
            _function_step(self.b, rec, target, args, kwargs, out)
            self._finish(rec, out)
        self.step(label, target, run)


def _is_leaf(mod):
    from qops.nn._graph import GraphModule
    return not isinstance(mod, GraphModule) and not mod._modules


_QFUNC_METHODS = ("add", "mul", "cat", "add_relu", "mul_relu", "add_scalar", "mul_scalar")
# QTensor methods a custom eager forward may call between modules (x.flatten(1), ...)
_QTENSOR_METHODS = ("flatten", "reshape", "view", "squeeze", "unsqueeze", "contiguous",
                    "dequantize")


def _trace(b, model, args):
    """Run `model(*args)` recording every step; returns the output."""
    from qops.nn._graph import GraphModule
    from qops.nn.quantized._modules import QFunctional
    tr = _Tracer(b, model)
    handles, patched = [], []
    qf_paths = [p for p, m in model.named_modules() if isinstance(m, QFunctional)]

    def pre(mod, a):
        tr.inside += 1

    def hook(mod, a, out, path):
        tr.inside -= 1
        tr.module_call(path, mod, a, out)

    for path, m in model.named_modules():
        if any(path.startswith(p + ".") for p in qf_paths):
            continue    # a QFunctional's own observer slot: the wrapped method records it
        if isinstance(m, QFunctional):
            for meth in _QFUNC_METHODS:
                m.__dict__[meth] = _wrap_qfunc(tr, path or "qfunctional", m, meth)
            patched.append(m)
        elif _is_leaf(m) and (m is not model or not isinstance(model, GraphModule)):
            path = path or type(model).__name__
            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(
                lambda mod, a, out, path=path: hook(mod, a, out, path)))
    originals = {name: getattr(QTensor, name) for name in _QTENSOR_METHODS}
    for name, fn in originals.items():
        setattr(QTensor, name, _wrap_method(tr, name, fn))
    try:
        if isinstance(model, GraphModule):
            return _run_graph(tr, model, args)
        return model(*args)
    finally:
        for name, fn in originals.items():
            setattr(QTensor, name, fn)
        for h in handles:
            h.remove()
        for m in patched:
            for meth in _QFUNC_METHODS:
                m.__dict__.pop(meth, None)


def _wrap_method(tr, name, fn):
    def call(self, *args, **kwargs):
        tr.inside += 1
        try:
            out = fn(self, *args, **kwargs)
        finally:
            tr.inside -= 1
        if tr.inside == 0:
            tr.n_methods += 1
            tr.function_call(f"{name}_{tr.n_methods}", name, (self,) + args, kwargs, out)
        return out
    return call


def _wrap_qfunc(tr, path, mod, meth):
    fn = getattr(type(mod), meth)

    def call(*args, **kwargs):
        tr.inside += 1
        try:
            out = fn(mod, *args, **kwargs)
        finally:
            tr.inside -= 1
        tr.function_call(f"{path}.{meth}", f"quantized.{meth}", args, kwargs, out)
        return out
    return call


def _inside(tr, fn, a, kw):
    tr.inside += 1
    try:
        return fn(*a, **kw)
    finally:
        tr.inside -= 1


def _run_graph(tr, gm, args):
    """GraphModule.forward, one node at a time, each tensor-valued node traced."""
    from qops.nn._graph import FUNCTIONS, METHODS, _walk
    env = {}
    inputs = [n for n in gm.nodes if n.op == "input"]
    for k, node in enumerate(inputs):
        env[node.name] = args[k] if k < len(args) else node.args[0]
    for node in gm.nodes:
        if node.op == "input":
            continue

        def val(x):
            return _walk(x, lambda r: env[r.name])
        a = [val(x) for x in node.args]
        kw = {k: val(v) for k, v in node.kwargs.items()}
        if node.op == "output":
            return a[0]
        label = node.name
        if node.op == "module":
            env[node.name] = gm.get_submodule(node.target)(*a, **kw)
        elif node.op == "module_method":
            # QFunctional methods are wrapped by _trace and record themselves.
            env[node.name] = getattr(gm.get_submodule(node.target[0]), node.target[1])(*a, **kw)
        elif node.op == "function":
            out = _inside(tr, FUNCTIONS[node.target], a, kw)
            env[node.name] = out
            if node.target != "getitem":
                tr.function_call(label, node.target, a, kw, out)
            elif isinstance(out, (QTensor, np.ndarray)) and id(out) not in tr.b.vals:
                raise ExportError(f"node {label!r}: indexing a tensor has no ONNX export (yet)")
        elif node.op == "method":
            out = _inside(tr, METHODS[node.target], a, kw)
            env[node.name] = out
            tr.function_call(label, node.target, a, kw, out)
        else:
            raise ExportError(f"node {label!r}: graph attributes (constants) have no ONNX "
                              f"export (yet)")
    raise ExportError("graph has no output node")


def build(model, args, form="qdq", opset_version=17, input_names=None, output_names=None):
    """Trace `model` on `args`; returns (onnx ModelProto, builder with records, outputs)."""
    if not isinstance(args, tuple):
        args = (args,)
    b = _Builder(form, opset_version)
    helper, onnx = b.helper, b.onnx
    flat_args = _flat(args)
    names = []
    for i, a in enumerate(flat_args):
        if isinstance(a, QTensor) or not isinstance(a, np.ndarray) or (
                a.dtype != F32 and a.dtype not in (np.int64, np.int32)):
            raise TypeError(f"args[{i}] must be a float32 numpy array (the model's float input,"
                            f" or a tuple of them for recurrent states), or an int64 / int32 one"
                            f" (embedding indices); got {type(a).__name__}")
        name = input_names[i] if input_names and i < len(input_names) else \
            ("input" if len(flat_args) == 1 else f"input_{i}")
        b.used.add(name)
        b.graph_input_names.add(name)
        b.bind(a, _Val(name, a.shape))
        names.append(name)
    out = _trace(b, model, args)
    graph_inputs = []
    for name, a in zip(names, flat_args):
        dims = b.dims.get(name, ["N"] + list(a.shape[1:]) if a.ndim else [])
        b.inputs.append((name, a))
        graph_inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), dims))
    outs = _flat(out)
    graph_outputs, scales = [], []
    for i, o in enumerate(outs):
        v = b.get(o, f"output {i}")
        want = output_names[i] if output_names and i < len(output_names) else \
            ("output" if len(outs) == 1 else f"output_{i}")
        b.rec = None
        b.used.add(want)
        b.nodes.append(helper.make_node("Identity", [v.name], [want], name=f"{want}_id"))
        elem = onnx.TensorProto.FLOAT if not v.q else \
            helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype))
        dims = b.dims.get(v.name, ["N"] + list(v.shape[1:]) if v.shape else [])
        if b.loose_outputs and v.name not in b.dims:
            dims = [None] * len(v.shape)
        graph_outputs.append(helper.make_tensor_value_info(want, elem, dims))
        scales.append(_output_scale(b, o))
    graph = helper.make_graph(b.nodes, type(model).__name__, graph_inputs, graph_outputs,
                              initializer=b.inits)
    opsets = [helper.make_opsetid("", b.opset)]
    if b.uses_ms:
        opsets.append(helper.make_opsetid(MS, 1))
    m = helper.make_model(graph, opset_imports=opsets, producer_name="qops",
                          ir_version=_ir_version(helper, b.opset))
    helper.set_model_props(m, {"qops.form": form,
                               "qops.output_steps": ",".join(repr(s) for s in scales)})
    return m, b, outs


def _flat(values):
    """Tensors of a nested tuple / list, in order (an LSTM returns (out, (h_n, c_n)))."""
    if isinstance(values, (tuple, list)):
        return [t for v in values for t in _flat(v)]
    return [values]


def _ir_version(helper, opset):
    # The oldest IR version that holds the opset: what older runtimes still read.
    return helper.find_min_ir_version_for([helper.make_opsetid("", opset)])


def _output_scale(b, o):
    """The quantization step of an output: its own scale, or that of the tensor it dequantizes."""
    if isinstance(o, QTensor):
        return float(o.q_scale())
    for rec in reversed(b.records):
        for v, value in rec.outputs:
            if value is o:
                for iv, _ in rec.inputs:
                    if iv.q and rec.kind in ("DeQuantize", "dequantize"):
                        return iv.scale
    return 0.0


def export(model, args, f, opset_version=17, form="qdq", input_names=None, output_names=None):
    """Export a qops quantized model to ONNX (traced on example inputs, like torch.onnx.export).

    Parameters
    ----------
    model : a qops model: Sequential or custom eager model of qops.nn modules, a GraphModule,
        quantized (static or dynamic), fused, with float parts
    args : float32 array, or tuple of them: example inputs (the batch size stays free); int64
        / int32 arrays for embedding indices; a nested tuple for recurrent states, e.g.
        (x, (h0, c0)). Embedding bags keep the example's bags (offsets): they are fixed in
        the graph
    f : path (str or os.PathLike) or a binary file object to write the model to
    opset_version : ONNX opset (>= 13)
    form : "qdq" (QuantizeLinear / DequantizeLinear around float ops) or "qoperator"
        (QLinearConv, com.microsoft QGemm / QLinearAdd / QLinearMul / QLinearConcat /
        QLinearAveragePool / QLinearGlobalAveragePool / QLinearLeakyRelu / QLinearSigmoid)
    input_names, output_names : lists of names for the graph inputs and outputs

    Returns the onnx.ModelProto written. Raises ExportError naming the module or graph node
    that has no faithful ONNX form.
    """
    m, b, _ = build(model, args, form, opset_version, input_names, output_names)
    onnx = b.onnx
    onnx.checker.check_model(m)
    if hasattr(f, "write"):
        f.write(m.SerializeToString())
    else:
        onnx.save(m, f)
    return m
