"""A TFLite/LiteRT int8 peer for the benchmarks: one registry case as a one-operator model.

Benchmark support only; needs the optional `ai_edge_litert` (``pip install qops[peers]``),
imported inside the functions, never when qops is imported.

The model is built in memory with the flatbuffers builder and LiteRT's generated schema from
the case's own data: CONV_2D for conv2d and for conv1d (a 1 x L image), DEPTHWISE_CONV_2D when
groups == in channels, FULLY_CONNECTED for linear; NHWC, transposed once here. quint8
activations become int8 by subtracting 128 from the values and the zero point (the same real
values); weights stay qint8 and must be symmetric (TFLite requires weight zero point 0); the
float bias is quantized to int32 at scale in_scale * w_scale[channel], as TFLite's converter
does; a fused ReLU becomes the operator's fused activation. Padding that is neither TFLite's
VALID nor its SAME (e.g. PyTorch's 1 on both sides of a stride-2 3x3 conv over an even size,
where SAME pads 0 before and 1 after) gets a separate PAD op in front of a VALID conv, as
TFLite's converter emits for such PyTorch models; XNNPACK runs both in the one delegate node.

XNNPACK: LiteRT applies its default CPU delegate (XNNPACK, quantized operators included) to
models run with the default op resolver (``OpResolverType.AUTO``) when tensors are allocated,
and logs "Created TensorFlow Lite XNNPACK delegate for CPU". `prepare` checks it took the
whole model: after ``allocate_tensors()`` the interpreter's node list (``_get_ops_details()``)
keeps the model's own operators and adds a ``DELEGATE`` node for each part a delegate took;
there must be exactly one, reading the model's input and no tensor another operator computes,
and writing the model's output, so every operator between input and output runs inside
XNNPACK; otherwise `prepare` raises. (With ``OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES``
the same models list no DELEGATE node, and their builtin kernels run several times slower.)

TFLite requantizes with a 31-bit fixed-point multiplier and its own rounding, qops and PyTorch
in float32: outputs may differ by one step (tests/test_bench_tflite.py counts them).
"""
import numpy as np

__all__ = ["Unsupported", "build", "import_litert", "prepare", "xnnpack_call"]

#: registry ops the builder knows, and whether their output has a fused ReLU
OPS = {"conv1d": False, "conv2d": False, "conv1d_relu": True, "conv2d_relu": True,
       "linear": False, "linear_relu": True}


class Unsupported(Exception):
    """A case the builder cannot express as a TFLite int8 operator; the message says why."""


def import_litert():
    """LiteRT's interpreter and schema modules, or an ImportError saying how to install them."""
    try:
        from ai_edge_litert import interpreter, schema_py_generated
    except ImportError as e:
        raise ImportError("the TFLite peer needs LiteRT: pip install ai-edge-litert==2.3.0 "
                          "(or qops[peers])") from e
    return interpreter, schema_py_generated


def _tuple(v, nd):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd


def _qparams(t):
    """(scales, zero points) of a QTensor as arrays, one entry for a per-tensor one."""
    if t.is_per_channel:
        return t.q_per_channel_scales(), t.q_per_channel_zero_points()
    return np.array([t.q_scale()]), np.array([t.q_zero_point()])


def _pad_mode(size, kernel, stride, dilation, before, after):
    """The TFLite paddings ({"VALID", "SAME"}) that equal explicit padding on one axis."""
    span = dilation * (kernel - 1) + 1
    out = (size + before + after - span) // stride + 1
    modes = set()
    if before == 0 and out == (size - span) // stride + 1:
        modes.add("VALID")
    same_out = -(-size // stride)
    total = max((same_out - 1) * stride + span - size, 0)
    # SAME pads total // 2 before; padding past what the last window reads changes nothing
    if out == same_out and before == total // 2:
        modes.add("SAME")
    return modes


def _conv_layout(op, case):
    """Check a conv case; return (x NCHW raw, w OIHW raw, groups, strides, dilations, pads)
    with conv1d as a 1 x L image, or raise Unsupported."""
    x, w = case.args
    kw = case.kwargs
    nd = 1 if op.startswith("conv1d") else 2
    if kw.get("padding_mode", "zeros") != "zeros":
        raise Unsupported(f"padding_mode {kw['padding_mode']!r} (TFLite pads with zeros)")
    groups = kw.get("groups", 1)
    if groups not in (1, x.shape[1]):
        raise Unsupported(f"grouped conv (groups={groups}, neither 1 nor depthwise)")
    stride, dilation = _tuple(kw.get("stride", 1), nd), _tuple(kw.get("dilation", 1), nd)
    kernel = w.shape[2:]
    padding = kw.get("padding", 0)
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * nd
        else:       # PyTorch's "same" (stride 1): the extra pad after, as TFLite's SAME
            pads = [((d * (k - 1)) // 2, d * (k - 1) - (d * (k - 1)) // 2)
                    for k, d in zip(kernel, dilation)]
    else:
        pads = [(p, p) for p in _tuple(padding, nd)]
    xr, wr = x.int_repr(), w.int_repr()
    if nd == 1:
        xr, wr = xr[:, :, None, :], wr[:, :, None, :]
        stride, dilation, pads = (1,) + stride, (1,) + dilation, [(0, 0)] + pads
    return xr, wr, groups, stride, dilation, pads


class _Model:
    """Tensors, buffers and operators of a one-subgraph TFLite model under construction."""

    def __init__(self, schema):
        self.s = schema
        self.tensors, self.buffers, self.ops, self.codes = [], [schema.BufferT()], [], []

    def tensor(self, name, shape, dtype, scales=None, zero_points=None, axis=0, data=None):
        s = self.s
        t = s.TensorT()
        t.name, t.shape = name, list(shape)
        t.type = {np.int8: s.TensorType.INT8, np.int32: s.TensorType.INT32}[dtype]
        if scales is not None:
            q = s.QuantizationParametersT()
            q.scale = [float(v) for v in np.asarray(scales, np.float32)]
            q.zeroPoint = [int(v) for v in zero_points]
            q.quantizedDimension = axis
            t.quantization = q
        if data is not None:
            b = s.BufferT()
            b.data = np.ascontiguousarray(np.asarray(data, dtype)).view(np.uint8).ravel()
            t.buffer = len(self.buffers)
            self.buffers.append(b)
        else:
            t.buffer = 0            # buffer 0: the empty sentinel, a runtime tensor
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, code, inputs, outputs, options_type=0, options=None):
        s = self.s
        if code not in self.codes:
            self.codes.append(code)
        o = s.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self.codes.index(code), inputs, outputs
        o.builtinOptionsType, o.builtinOptions = options_type, options
        self.ops.append(o)

    def finish(self, inputs, outputs):
        import flatbuffers
        s = self.s
        g = s.SubGraphT()
        g.tensors, g.inputs, g.outputs, g.operators = self.tensors, inputs, outputs, self.ops
        m = s.ModelT()
        m.version, m.subgraphs, m.buffers, m.description = 3, [g], self.buffers, "qops peer"
        m.operatorCodes = []
        for code in self.codes:
            c = s.OperatorCodeT()
            # builtin codes below 127 go in the deprecated int8 field too (old readers)
            c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
            m.operatorCodes.append(c)
        b = flatbuffers.Builder(1 << 20)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def build(op, case):
    """A one-operator int8 TFLite model of registry case `case` of op `op`.

    Parameters
    ----------
    op : registry op name, one of `OPS`
    case : the registry Case (conv: args (x, w), kwargs bias, stride, ...; linear: args
        (x, w, b), kwargs scale and zero_point, the input's when absent)

    Returns (model bytes, int8 input array to set, function turning the int8 output array
    into the raw quint8 values in qops' layout). Raises Unsupported with the reason.
    """
    _, s = import_litert()
    if op not in OPS:
        raise Unsupported(f"no TFLite int8 builder for {op}")
    x, w = case.args[:2]
    if x.dtype.name != "quint8" or w.dtype.name != "qint8" or x.is_per_channel:
        raise Unsupported("needs a per-tensor quint8 input and a qint8 weight")
    if x.numel() == 0:
        raise Unsupported("empty input")
    w_scales, w_zps = _qparams(w)
    if np.any(w_zps != 0):
        raise Unsupported("asymmetric weights (TFLite requires weight zero point 0)")
    if w.is_per_channel and w.q_per_channel_axis() != 0:
        raise Unsupported("per-channel weight scales not on the output-channel axis")
    x_scale, x_zp = x.q_scale(), x.q_zero_point()
    act = s.ActivationFunctionType.RELU if OPS[op] else s.ActivationFunctionType.NONE
    m = _Model(s)
    o = w.shape[0]
    if op.startswith("linear"):
        bias = case.args[2]
        out_scale = case.kwargs.get("scale", x_scale)
        out_zp = case.kwargs.get("zero_point", x_zp)
        xi = (x.int_repr().astype(np.int16) - 128).astype(np.int8)
        out_shape = x.shape[:-1] + (o,)
        w_data, w_shape, w_axis = w.int_repr(), list(w.shape), 0
    else:
        bias = case.kwargs.get("bias")
        out_scale, out_zp = case.kwargs["scale"], case.kwargs["zero_point"]
        xr, wr, groups, stride, dilation, pads = _conv_layout(op, case)
        xi = (np.transpose(xr, (0, 2, 3, 1)).astype(np.int16) - 128).astype(np.int8)
        depthwise = groups > 1
        if depthwise:   # [1, KH, KW, C*M]: output channel c*M + m, PyTorch's group order
            w_data, w_axis = np.transpose(wr, (1, 2, 3, 0)), 3
        else:           # [O, KH, KW, I]
            w_data, w_axis = np.transpose(wr, (0, 2, 3, 1)), 0
        w_shape = list(w_data.shape)
        modes = set.intersection(*(_pad_mode(xr.shape[2 + i], wr.shape[2 + i], stride[i],
                                             dilation[i], *pads[i]) for i in range(2)))
        n, _, h, wd = xr.shape
        spans = [dilation[i] * (wr.shape[2 + i] - 1) + 1 for i in range(2)]
        out_hw = [(size + sum(p) - sp) // st + 1
                  for size, p, sp, st in zip((h, wd), pads, spans, stride)]
        out_shape = (n, out_hw[0], out_hw[1], o)
    b_scales = np.float32(x_scale) * w_scales.astype(np.float32)
    if bias is None:
        b_q = np.zeros(o, np.int32)
    else:
        per = np.broadcast_to(b_scales, (o,)).astype(np.float64)
        b_q = np.clip(np.rint(np.asarray(bias, np.float64) / per), -2**31, 2**31 - 1)
        b_q = b_q.astype(np.int32)
    t_x = m.tensor("input", xi.shape, np.int8, [x_scale], [x_zp - 128])
    t_w = m.tensor("weight", w_shape, np.int8, w_scales, np.zeros(len(w_scales), np.int64),
                   w_axis, data=w_data)
    t_b = m.tensor("bias", [o], np.int32, b_scales, np.zeros(len(b_scales), np.int64), 0,
                   data=b_q)
    t_y = m.tensor("output", out_shape, np.int8, [out_scale], [out_zp - 128])
    if op.startswith("linear"):
        opt = s.FullyConnectedOptionsT()
        opt.fusedActivationFunction = act
        opt.keepNumDims = x.ndim != 2
        m.op(s.BuiltinOperator.FULLY_CONNECTED, [t_x, t_w, t_b], [t_y],
             s.BuiltinOptions.FullyConnectedOptions, opt)

        def to_qops(y):
            return (y.astype(np.int16) + 128).astype(np.uint8).reshape(out_shape)
    else:
        src = t_x
        if modes:
            padding = s.Padding.SAME if "SAME" in modes else s.Padding.VALID
        else:       # explicit padding TFLite cannot name: PAD with the zero point, then VALID
            padded = (n, h + sum(pads[0]), wd + sum(pads[1]), xr.shape[1])
            t_p = m.tensor("paddings", [4, 2], np.int32,
                           data=np.array([(0, 0), pads[0], pads[1], (0, 0)], np.int32))
            src = m.tensor("padded", padded, np.int8, [x_scale], [x_zp - 128])
            m.op(s.BuiltinOperator.PAD, [t_x, t_p], [src], s.BuiltinOptions.PadOptions,
                 s.PadOptionsT())
            padding = s.Padding.VALID
        if depthwise:
            opt = s.DepthwiseConv2DOptionsT()
            opt.depthMultiplier = o // xr.shape[1]
            code = s.BuiltinOperator.DEPTHWISE_CONV_2D
            otype = s.BuiltinOptions.DepthwiseConv2DOptions
        else:
            opt = s.Conv2DOptionsT()
            code, otype = s.BuiltinOperator.CONV_2D, s.BuiltinOptions.Conv2DOptions
        opt.padding, opt.fusedActivationFunction = padding, act
        opt.strideH, opt.strideW = stride
        opt.dilationHFactor, opt.dilationWFactor = dilation
        m.op(code, [src, t_w, t_b], [t_y], otype, opt)
        squeeze = op.startswith("conv1d")

        def to_qops(y):
            y = np.transpose((y.astype(np.int16) + 128).astype(np.uint8), (0, 3, 1, 2))
            return y[:, :, 0, :] if squeeze else y
    return m.finish([t_x], [t_y]), xi, to_qops


class Prepared:
    """A LiteRT interpreter holding one case's model with its input already set.

    `invoke` is the zero-argument call to time (the operator only, as PyTorch and qops are
    timed on inputs already quantized); `output()` reads the result as raw quint8 values in
    qops' layout; `nodes` lists the interpreter's nodes as (name, inputs, outputs).
    """

    def __init__(self, interp, to_qops, nodes):
        self.interpreter = interp
        self.invoke = interp.invoke
        self._out = interp.get_output_details()[0]["index"]
        self._to_qops = to_qops
        self.nodes = nodes

    @property
    def delegated(self):
        """True when one delegate node runs every operator from the model's input to its
        output (the model's own operators stay listed beside it, replaced)."""
        io = self.interpreter
        graph_in = {d["index"] for d in io.get_input_details()}
        graph_out = {d["index"] for d in io.get_output_details()}
        delegates = [n for n in self.nodes if n[0] == "DELEGATE"]
        computed = {t for n in self.nodes if n[0] != "DELEGATE" for t in n[2]}
        if len(delegates) != 1:
            return False
        _, ins, outs = delegates[0]
        return graph_in <= ins and not (ins & computed) and outs == graph_out

    def output(self):
        return self._to_qops(self.interpreter.get_tensor(self._out))


def prepare(op, case, num_threads=1, xnnpack=True):
    """Build case `case` of op `op` into a LiteRT interpreter and set its input once.

    Parameters
    ----------
    op, case : as for `build`
    num_threads : the interpreter's (and XNNPACK's) thread count
    xnnpack : False for LiteRT's builtin kernels without its default delegate

    Raises Unsupported for a case the builder cannot express, RuntimeError when xnnpack is
    asked for but the delegate did not take the whole model.
    """
    interpreter, _ = import_litert()
    content, xi, to_qops = build(op, case)
    resolver = (interpreter.OpResolverType.AUTO if xnnpack else
                interpreter.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp = interpreter.Interpreter(model_content=content, num_threads=int(num_threads),
                                     experimental_op_resolver_type=resolver)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], xi)
    nodes = [(d["op_name"], {int(t) for t in d["inputs"]}, {int(t) for t in d["outputs"]})
             for d in interp._get_ops_details()]
    p = Prepared(interp, to_qops, nodes)
    if xnnpack and not p.delegated:
        raise RuntimeError(f"XNNPACK did not take the whole {op} model; nodes: {nodes}")
    return p


def xnnpack_call(op, case, num_threads=1):
    """A zero-argument callable running LiteRT + XNNPACK once on case `case` of op `op`
    (input set beforehand: the call is ``invoke()`` only). Raises Unsupported."""
    return prepare(op, case, num_threads).invoke
