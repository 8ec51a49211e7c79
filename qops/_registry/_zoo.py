"""The layer zoo: a benchmark case for every distinct layer of the benchmark models.

`_zoo_layers.LAYERS` lists each conv, linear, pool, add, mul and cat shape of ResNet-18/50,
MobileNetV2/V3-Large, ShuffleNetV2, GoogLeNet and Inception-v3 (tools/gen_layer_zoo.py). Each
becomes cases at batch 1 and 8 and, for 4-D inputs, in C order and channels-last memory
(`_cl`, where PyTorch runs on the same memory), in the op's `zoo` dict of benchmark cases:
`python -m qops.bench --zoo [models]` and the asv `time_zoo_<op>` benchmarks run them.

Inputs look like the activations those layers see: the models' x86 qconfig calibrates with
reduce_range, so a ReLU output is 0..127 at zero point 0 (half of it zero), and the stem sees
a quantized image around zero point 64. Weights are per-channel symmetric qint8, as PyTorch's
x86 default. The data only matter for speed where a kernel's choice depends on them (qops'
AVX2 GEMM takes a faster route for inputs up to 127).
"""
import numpy as np

import qops
from qops._registry import Case
from qops._registry import _util as u
from qops._registry._zoo_layers import LAYERS

BATCHES = (1, 8)


def _activation(r, shape, layout="c"):
    """A post-ReLU activation (0..127, zero point 0, half zeros); an image for 3 channels."""
    if len(shape) == 4 and shape[1] == 3:
        raw, zp = np.clip(np.rint(r.normal(64, 25, shape)), 0, 127), 64
    else:
        v = np.minimum(127, np.rint(np.abs(r.normal(0, 45, shape))))
        raw, zp = np.where(r.random(shape) < 0.5, 0, v), 0
    data = u._layout(raw.astype(np.uint8), layout)
    return qops.make_per_tensor_quantized_tensor(data, 0.03, zp)


def _tag(v):
    """(3, 3) -> "3", (1, 7) -> "1x7"."""
    v = tuple(v)
    return str(v[0]) if len(set(v)) == 1 else "x".join(map(str, v))


def _hw(hw):
    return f"{hw[0]}x{hw[1]}"


def _conv(p, n, layout):
    from qops._registry import conv
    c, o, g = p["c"], p["o"], p["groups"]
    name = f"{_tag(p['k'])}s{_tag(p['stride'])}p{_tag(p['padding'])}"
    if p["dilation"] != (1, 1):
        name += f"d{_tag(p['dilation'])}"
    if g > 1:
        name += "dw" if g == c == o else f"g{g}"
    name += f"_{c}to{o}_{_hw(p['hw'])}"

    def build():
        r = u.rng(7)
        x = _activation(r, (n, c) + tuple(p["hw"]), layout)
        w = conv._weight(r, (o, c // g) + tuple(p["k"]), per_channel=True)
        b = r.normal(0, 2.0, o).astype(np.float32)
        kw = dict(bias=b, stride=p["stride"], padding=p["padding"], dilation=p["dilation"],
                  groups=g, padding_mode="zeros", scale=conv._out_scale(x, w), zero_point=0)
        # "bench-": PyTorch's peer runs its default x86 engine, as its users get
        return Case((x, w), kw, label="bench-2d" + (u.CL_BENCH if layout == "cl" else ""))
    return name, build


def _linear(p, n, layout):
    from qops._registry import linear

    def build():
        r = u.rng(31)
        case = linear._static_case(r, (n,), p["in"], p["out"], per_channel=True, wzp="zero")
        x = _activation(r, (n, p["in"]))
        return Case((x,) + case.args[1:], case.kwargs, label=case.label)
    return f"{p['in']}to{p['out']}", build


def _pool(op):
    def make(p, n, layout):
        shape = (n, p["c"]) + tuple(p["hw"])
        kw = {k: v for k, v in p.items() if k not in ("c", "hw")}
        if op == "adaptive_avg_pool2d":
            name = _tag(kw["output_size"])
        else:
            name = f"{_tag(kw['kernel_size'])}s{_tag(kw['stride'])}p{_tag(kw['padding'])}"
            if kw.get("ceil_mode"):
                name += "ceil"
            if op == "avg_pool2d" and not kw.get("count_include_pad", True):
                name += "nopad"
        name += f"_{p['c']}_{_hw(p['hw'])}"

        def build():
            x = _activation(u.rng(20), shape, layout)
            return Case((x,), dict(kw), label=str(shape) + (u.CL_BENCH if layout == "cl" else ""))
        return name, build
    return make


def _binary(op):
    def make(p, n, layout):
        a, b = p["a"], p["b"]
        name = "x".join(map(str, a)) + ("" if a == b else "_by_" + "x".join(map(str, b)))

        def build():
            r = u.rng(7)
            x = _activation(r, (n,) + tuple(a), layout)
            y = _activation(r, (n,) + tuple(b), layout)
            y = qops.make_per_tensor_quantized_tensor(y._int, 0.05, 3)
            return Case((x, y, 0.06 if op != "mul" else 0.01, 10),
                        label=op + (u.CL_BENCH if layout == "cl" else ""))
        return name, build
    return make


def _cat(p, n, layout):
    shapes = p["shapes"]
    name = "+".join(str(s[0]) for s in shapes) + "_" + "x".join(map(str, shapes[0][1:]))

    def build():
        r = u.rng(11)
        ts = [_activation(r, (n,) + tuple(s), layout) for s in shapes]
        ts = [qops.make_per_tensor_quantized_tensor(t._int, 0.03 + 0.002 * i, 0)
              for i, t in enumerate(ts)]
        return Case((ts, p["dim"]), {"scale": 0.04, "zero_point": 0},
                    label="cat" + (u.CL_BENCH if layout == "cl" else ""))
    return name, build


_MAKERS = {"conv2d": _conv, "linear": _linear, "max_pool2d": _pool("max_pool2d"),
           "avg_pool2d": _pool("avg_pool2d"), "adaptive_avg_pool2d": _pool("adaptive_avg_pool2d"),
           "add": _binary("add"), "add_relu": _binary("add_relu"), "mul": _binary("mul"),
           "cat": _cat}
ZOO_OPS = tuple(_MAKERS)            # the registry ops the zoo has cases of


def cases(op):
    """{case name: () -> Case} of the zoo's layers of `op`, each with the models it is in.

    Returns a dict of name -> builder; `models(op)` gives name -> the models' names.
    """
    return {name: build for name, (build, _) in _entries(op).items()}


def models(op):
    """{case name: (model, ...)} for the zoo cases of `op`."""
    return {name: ms for name, (_, ms) in _entries(op).items()}


_ENTRIES = {}


def _entries(op):
    if op not in _ENTRIES:
        out = {}
        make = _MAKERS.get(op)
        for layer_op, params, ms in LAYERS if make else ():
            if layer_op != op:
                continue
            p = dict(params)
            layouts = ("c",) if op == "linear" else ("c", "cl")
            for n in BATCHES:
                for layout in layouts:
                    name, build = make(p, n, layout)
                    name += f"_b{n}" + ("_cl" if layout == "cl" else "")
                    if name in out:
                        raise RuntimeError(f"zoo case {op} {name} named twice")
                    out[name] = (build, ms)
        _ENTRIES[op] = out
    return _ENTRIES[op]
