"""Run a qops model and its ONNX export in ONNX Runtime; count where they agree.

Per output: the share of elements that are equal and the largest difference in quantization
steps (for a float output made by DequantizeLinear, the step is the dequantized tensor's
scale). Per op: each traced step is cut out of the graph as a model of its own, fed qops' own
input values, and its output compared with qops' output, so a difference is the op's own and
not one carried in from upstream.
"""
import numpy as np

from qops._qtensor import QTensor

# Why ONNX Runtime's result differs from qops' (= PyTorch's) for an op, as measured on
# single-op models (tests/test_onnx.py; docs/onnx.md has the numbers and the experiments).
REASONS = {
    "conv": "ONNX's int32 bias round(b / (x_s*w_s)): PyTorch adds the float bias before its "
            "one rounding (the same layer without bias is exact)",
    "linear": "ONNX's int32 bias round(b / (x_s*w_s)), as conv",
    # conv / linear off by more than one step
    "u8s8": "activations above 127 with full-range int8 weights overflow the int16 pair sums "
            "of ORT's u8s8 kernels on AVX2 without VNNI (7-bit activations, PyTorch's x86 "
            "qconfig with reduce_range, are exact but for the bias)",
    "add": "ties: every difference is an exact (to a few float32 ulps) .5 result that "
           "PyTorch's (s_a*(a-z_a) + s_b*(b-z_b)) * (1/s_y) and ORT's QLinearAdd round to "
           "different sides",
    "mul": "ties, as add (ORT's QLinearMul)",
    "cat": "ties where an input with other qparams is requantized (ORT's QLinearConcat)",
    "adaptive": "ties with an odd zero point: PyTorch's NCHW adaptive_avg_pool rounds the "
                "mean of the raw q half to even (docs/semantics.md §11), ORT's global pool the "
                "mean of q - zp",
    "hardswish": "ties: the differing values are within 1e-5 of a .5 boundary",
    "elu": "ties: the differing values are within 1e-5 of a .5 boundary",
    "quantize": "ties: ORT's QuantizeLinear rounds x / s (reproduced exactly), PyTorch rounds "
                "fma(x, 1/s, zp); inputs on exact .5 boundaries differ by one step",
    "resize": "ORT's linear Resize rounds the interpolated value differently from PyTorch's "
              "quantized bilinear (1 step; not isolated further)",
}

_KIND = {
    "Conv1d": "conv", "Conv2d": "conv", "Conv3d": "conv", "ConvReLU1d": "conv",
    "ConvReLU2d": "conv", "ConvReLU3d": "conv", "Linear": "linear", "LinearReLU": "linear",
    "AvgPool1d": "avgpool", "AvgPool2d": "avgpool", "AvgPool3d": "avgpool",
    "avg_pool1d": "avgpool", "avg_pool2d": "avgpool", "avg_pool3d": "avgpool",
    "AdaptiveAvgPool1d": "adaptive", "AdaptiveAvgPool2d": "adaptive",
    "AdaptiveAvgPool3d": "adaptive", "adaptive_avg_pool2d": "adaptive", "mean": "adaptive",
    "quantized.add": "add", "quantized.add_relu": "add", "quantized.mul": "mul",
    "quantized.mul_relu": "mul", "quantized.add_scalar": "add", "quantized.mul_scalar": "mul",
    "add": "add", "add_relu": "add", "mul": "mul", "mul_relu": "mul", "add_scalar": "add",
    "quantized.cat": "cat", "cat": "cat", "Hardswish": "hardswish", "hardswish": "hardswish",
    "quantized.hardswish": "hardswish", "Hardsigmoid": "hardsigmoid",
    "hardsigmoid": "hardsigmoid", "ELU": "elu", "Sigmoid": "sigmoid", "sigmoid": "sigmoid",
    "Tanh": "tanh", "tanh": "tanh", "LeakyReLU": "leaky_relu", "leaky_relu": "leaky_relu",
    "BatchNorm2d": "batchnorm", "BatchNorm3d": "batchnorm", "BNReLU2d": "batchnorm",
    "BNReLU3d": "batchnorm", "Quantize": "quantize", "quantize_per_tensor": "quantize",
    "Upsample": "resize", "interpolate": "resize",
}


def _session(model_bytes_or_path, optimize=True):
    try:
        import onnxruntime as ort
    except ImportError:
        raise ImportError("qops.onnx.compare needs onnxruntime: pip install qops[onnx]") \
            from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not optimize:
        # ORT's reference semantics: each QDQ node run as written, no fused QLinear kernels
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes_or_path, opts, providers=["CPUExecutionProvider"])


def _steps(ours, theirs, step):
    """(exact share, max |difference| in steps) of qops' value `ours` and ORT's `theirs`."""
    if isinstance(ours, QTensor):
        a = ours.int_repr().astype(np.int64)
        d = np.abs(a - np.asarray(theirs).astype(np.int64))
        return (float(np.mean(d == 0)) if d.size else 1.0), int(d.max(initial=0))
    a = np.asarray(ours, np.float64)
    t = np.asarray(theirs, np.float64)
    d = np.abs(a - t)
    same = float(np.mean(a == t)) if a.size else 1.0
    if step:
        return same, int(np.rint(d / step).max(initial=0))
    return same, float(d.max(initial=0))


def _op_model(b, rec):
    """The nodes of one traced step as a model whose inputs are the step's input tensors."""
    import onnx
    from onnx import helper
    ins, seen = [], set()
    for v, value in rec.inputs:
        if v.name in seen:
            continue
        seen.add(v.name)
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype if v.q else np.float32))
        ins.append(helper.make_tensor_value_info(v.name, elem, list(np.shape(value))))
    outs = []
    for v, value in rec.outputs:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype if v.q else np.float32))
        outs.append(helper.make_tensor_value_info(v.name, elem, list(np.shape(value))))
    graph = helper.make_graph(rec.nodes, rec.label, ins, outs, initializer=rec.inits)
    opsets = [helper.make_opsetid("", b.opset)]
    if any(n.domain == "com.microsoft" for n in rec.nodes):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    from qops.onnx._export import _ir_version
    m = helper.make_model(graph, opset_imports=opsets, ir_version=_ir_version(helper, b.opset))
    onnx.checker.check_model(m)
    return m


def _feed(v, value):
    if isinstance(value, QTensor):
        return np.ascontiguousarray(value.int_repr())
    return np.ascontiguousarray(np.asarray(value, np.float32))


def compare(model, onnx_path, inputs, per_op=True, optimize=True):
    """Run `model` (qops) and the ONNX model at `onnx_path` (ONNX Runtime) on `inputs`.

    Parameters
    ----------
    model : the qops model that was exported
    onnx_path : path of the exported model (or its bytes)
    inputs : float32 array, or tuple of them
    per_op : also run every traced step alone in ONNX Runtime on qops' own inputs
    optimize : ORT's default graph optimizations (QDQ groups fused into QLinear kernels);
        False runs every node as written (float ops between QuantizeLinear/DequantizeLinear)

    Returns a dict: "outputs": [{"name", "exact", "max_steps", "n"}], "ops": [{"label", "kind",
    "exact", "max_steps", "n", "reason"}] (only the ops with a quantized output) and "form".
    "exact" is the share of equal values; "max_steps" the largest difference in quantization
    steps (for a float output made by DeQuantize, in steps of the dequantized tensor; for
    other float outputs, the largest absolute difference).
    """
    try:
        import onnx
    except ImportError:
        raise ImportError("qops.onnx.compare needs the onnx package: pip install qops[onnx]") \
            from None

    from qops.onnx._export import build
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    proto = onnx.load(onnx_path) if not isinstance(onnx_path, (bytes, bytearray)) else \
        onnx.load_from_string(bytes(onnx_path))
    props = {p.key: p.value for p in proto.metadata_props}
    form = props.get("qops.form", "qdq")
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    _, b, outs = build(model, inputs, form, opset)
    sess = _session(proto.SerializeToString(), optimize)
    # by position (the file may use other names); bag offsets are held in the graph
    feed = {i.name: np.ascontiguousarray(x) for i, (_, x) in zip(sess.get_inputs(), b.inputs)}
    got = sess.run(None, feed)
    steps = [float(s) for s in props.get("qops.output_steps", "").split(",") if s]
    report = {"form": form, "outputs": [], "ops": []}
    for k, (o, t) in enumerate(zip(outs, got)):
        step = steps[k] if k < len(steps) else 0.0
        exact, mx = _steps(o, t, step)
        report["outputs"].append({"name": sess.get_outputs()[k].name, "exact": exact,
                                  "max_steps": mx, "n": int(np.size(t))})
    if per_op:
        for rec in b.records:
            qouts = [(v, value) for v, value in rec.outputs if v.q]
            if not rec.nodes or not qouts:
                continue
            sub = _session(_op_model(b, rec).SerializeToString(), optimize)
            names = [o.name for o in sub.get_inputs()]
            byname = {v.name: _feed(v, value) for v, value in rec.inputs}
            res = sub.run(None, {n: byname[n] for n in names})
            exact, mx = _steps(qouts[0][1], res[0], 0)
            kind = _KIND.get(rec.kind, rec.kind)
            if kind in ("conv", "linear") and mx > 1:
                kind = "u8s8"
            report["ops"].append({"label": rec.label, "kind": rec.kind, "exact": exact,
                                  "max_steps": mx, "n": int(np.size(res[0])),
                                  "reason": "" if exact == 1.0 else REASONS.get(kind, "")})
    return report


def format_compare(report):
    """A compare() report as text: one line per output, then one per op that differs."""
    lines = [f"ONNX Runtime vs qops ({report['form']}):"]
    for o in report["outputs"]:
        lines.append(f"  output {o['name']}: {o['exact']:.3%} exact, max {o['max_steps']} "
                     f"step(s) apart ({o['n']} values)")
    for r in report["ops"]:
        if r["exact"] < 1.0:
            lines.append(f"  op {r['label']} ({r['kind']}): {r['exact']:.3%} exact, max "
                         f"{r['max_steps']} step(s); {r['reason'] or 'reason not measured'}")
    return "\n".join(lines)
