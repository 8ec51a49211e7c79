"""Write qops/_registry/_zoo_layers.py: every distinct layer shape of the benchmark models.

    python tools/gen_layer_zoo.py            # needs torch and torchvision's model code
    python tools/gen_layer_zoo.py --check    # exit 1 if the checked-in file is not current

Each model of `qops._bench_models.ZOO_MODELS` is built as the model benchmark builds it
(torchvision's quantizable class, converted by PyTorch, imported with `from_torch`) and run
once at batch 1;
every call of a conv, linear, pool, add, mul or cat on quantized tensors is recorded with its
input shape (batch left out) and its arguments. Calls with equal records are one layer of the
zoo, listed with the models it occurs in. The registry builds benchmark cases from them
(qops/_registry/_zoo.py).
"""
import argparse
import inspect
import os
import pprint
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
OUT = HERE / "qops" / "_registry" / "_zoo_layers.py"
sys.path.insert(0, str(HERE))

HEADER = '''"""Every distinct conv/linear/pool/add/mul/cat layer of the benchmark models.

Written by tools/gen_layer_zoo.py from torchvision's quantizable models as
`python -m qops.bench --models` builds them; do not edit by hand. Each entry: the registry op,
its input shape without the batch (or shapes, for mul and cat), its arguments, and the models
it occurs in. tests/test_zoo.py checks the file is current where torchvision is found.
"""

LAYERS = (
'''


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _record(node, fn, args, kwargs):
    """(op, params) for one executed node, or None if it is not a zoo op."""
    import qops
    from qops import functional as F
    qs = [a for a in args if isinstance(a, qops.QTensor)]
    if node.op == "module":
        kind = type(fn).__name__
        x = args[0] if args else None
        if not isinstance(x, qops.QTensor):
            return None
        if kind in ("Conv2d", "ConvReLU2d"):
            return ("conv2d", (("c", fn.in_channels), ("o", fn.out_channels),
                               ("hw", tuple(x.shape[2:])), ("k", _pair(fn.kernel_size)),
                               ("stride", _pair(fn.stride)), ("padding", _pair(fn.padding)),
                               ("dilation", _pair(fn.dilation)), ("groups", fn.groups)))
        if kind in ("Linear", "LinearReLU"):
            return ("linear", (("in", fn.in_features), ("out", fn.out_features)))
        if kind == "MaxPool2d":
            bound = dict(kernel_size=fn.kernel_size, stride=fn.stride, padding=fn.padding,
                         dilation=fn.dilation, ceil_mode=fn.ceil_mode)
            return _pool("max_pool2d", x, bound)
        if kind == "AvgPool2d":
            bound = dict(kernel_size=fn.kernel_size, stride=fn.stride, padding=fn.padding,
                         ceil_mode=fn.ceil_mode, count_include_pad=fn.count_include_pad,
                         divisor_override=fn.divisor_override)
            return _pool("avg_pool2d", x, bound)
        if kind == "AdaptiveAvgPool2d":
            return _pool("adaptive_avg_pool2d", x, dict(output_size=fn.output_size))
        return None
    if node.op == "function" and node.target in ("max_pool2d", "avg_pool2d",
                                                 "adaptive_avg_pool2d") and qs:
        b = inspect.signature(getattr(F, node.target)).bind(*args, **kwargs)
        b.apply_defaults()
        bound = {k: v for k, v in b.arguments.items() if k not in ("input", "return_indices")}
        return _pool(node.target, args[0], bound)
    if node.op == "module_method" and node.target[1] in ("add", "add_relu", "mul"):
        a, b = args[:2]
        if not (isinstance(a, qops.QTensor) and isinstance(b, qops.QTensor)):
            return None
        return (node.target[1], (("a", tuple(a.shape[1:])), ("b", tuple(b.shape[1:]))))
    if node.op == "module_method" and node.target[1] == "cat":
        ts = args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        return ("cat", (("shapes", tuple(tuple(t.shape[1:]) for t in ts)), ("dim", dim)))
    return None


def _pool(op, x, bound):
    params = [("c", x.shape[1]), ("hw", tuple(x.shape[2:]))]
    for k in sorted(bound):
        v = bound[k]
        if k in ("kernel_size", "stride", "padding", "dilation", "output_size"):
            v = None if v is None else _pair(v)
        params.append((k, v))
    return (op, tuple(params))


def layers(names=None):
    """{(op, params): [model, ...]} over the benchmark models, in first-seen order."""
    import numpy as np
    import torch

    from qops import _bench_models as bm
    from qops.nn._torchvision import quantization_models
    q = quantization_models()
    if q is None:
        raise SystemExit("torchvision's model code is not found (QOPS_TORCHVISION_PATH)")
    found = {}
    for name in names or bm.ZOO_MODELS:
        size = bm.MODELS[name]
        _, g, _ = bm.build(torch, q, name, size)
        x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
        inputs, steps, n, _ = g._plan_now()
        env = [None] * n
        env[inputs[0][0]] = x
        for i, fn, getters, kw, node, _frees in steps:
            args = [get(env) for get in getters]
            if fn is None:
                break
            kwargs = {k: get(env) for k, get in kw}
            rec = _record(node, fn, args, kwargs)
            if rec is not None:
                models = found.setdefault(rec, [])
                if name not in models:
                    models.append(name)
            env[i] = fn(*args, **kwargs)
    return found


def render(found):
    lines = [HEADER]
    for (op, params), models in found.items():
        entry = pprint.pformat((op, params, tuple(models)), width=95, compact=True)
        lines.append(textwrap.indent(entry, "    ") + ",\n")
    lines.append(")\n")
    return "".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="compare with the checked-in file")
    a = p.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore")
    os.environ.setdefault("QOPS_TORCHVISION_PATH", str(HERE / "build" / "oracle"))
    found = layers()
    text = render(found)
    if a.check:
        same = OUT.exists() and OUT.read_text() == text
        print("current" if same else f"{OUT} is not current: run tools/gen_layer_zoo.py")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(found)} layers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
