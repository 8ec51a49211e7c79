"""Whole-model benchmarks: torchvision's int8 models in PyTorch and imported into qops.

    python -m qops.bench --models [resnet18,mobilenet_v2] [--threads 1,2] [--batch 1,8]
    python -m qops.bench --models resnet50 --profile        # where the time goes, per layer

Each model (random weights) is fused, calibrated with min/max observers on one batch and
converted by PyTorch (x86 engine), then imported with `qops.nn.quantized.from_torch`; both run
the same input, timed in alternating blocks; the ratio is the median over the rounds of
the two blocks of each round (_paired_ratio). `encoder_dynamic` is a BERT-base-sized
transformer encoder (2 layers, d_model 768, 12 heads, feed-forward 3072, GELU) in plain torch,
dynamic-quantized by PyTorch (`quantize_dynamic`: int8 feed-forward linears, float attention),
on sequences of 128 (batch = sequences). `unet` is a three-level U-Net (32-64-128 channels,
2x2/2 transposed convs, skip connections by torch.cat) on 128x128 images, quantized by
PyTorch's graph mode (prepare_fx / convert_fx). `swin_t` and `maxvit_t` are torchvision's float
classes quantized by PyTorch's graph mode the same way (its attention stays float there, as in
qops' import). `--profile` times every leaf module in both (by
its name, through forward hooks) and prints the layers by their share of qops' time. The
graph runner's own cost per node is measured on a chain of no-op nodes.
"""
import sys
import time
import warnings

import numpy as np

import qops

MODELS = {"resnet18": 224, "resnet50": 224, "mobilenet_v2": 224, "mobilenet_v3_large": 224,
          "shufflenet_v2_x1_0": 224, "googlenet": 224, "inception_v3": 299,
          "encoder_dynamic": 128, "unet": 128, "swin_t": 224, "maxvit_t": 224}
#: models of plain torch, not torchvision's (their size is the sequence length)
TEXT_MODELS = ("encoder_dynamic",)
#: models of plain torch (defined here; need no torchvision)
PLAIN_MODELS = TEXT_MODELS + ("unet",)
#: torchvision's float classes, quantized by PyTorch's graph mode: their float attention feeds
#: quantizes, where numpy's sums can put a value a step from PyTorch's (README)
FX_MODELS = ("swin_t", "maxvit_t")
#: the layer zoo's models (tools/gen_layer_zoo.py): torchvision's quantizable classes
ZOO_MODELS = tuple(m for m in MODELS if m not in PLAIN_MODELS + FX_MODELS)


def _unet(torch):
    """(PyTorch int8 U-Net converted by its graph mode, qops import, import seconds)."""
    nn = torch.nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self, c=32):
            super().__init__()
            self.e1, self.e2, self.e3 = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
            self.pool = nn.MaxPool2d(2)
            self.u2, self.d2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, 2), block(4 * c, 2 * c)
            self.u1, self.d1 = nn.ConvTranspose2d(2 * c, c, 2, 2), block(2 * c, c)
            self.head = nn.Conv2d(c, 2, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.e2(self.pool(a))
            m = self.e3(self.pool(b))
            y = self.d2(torch.cat([self.u2(m), b], 1))
            return self.head(self.d1(torch.cat([self.u1(y), a], 1)))

    from torch.ao.quantization import get_default_qconfig_mapping
    torch.manual_seed(0)
    x = torch.randn(2, 3, 128, 128)
    return _fx_convert_import(torch, UNet().eval(), get_default_qconfig_mapping("x86"), x)


def _fx_convert_import(torch, model, mapping, x):
    """(PyTorch's graph mode conversion of float `model` with `mapping`, calibrated on x,
    qops import, import seconds)."""
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    p = prepare_fx(model, mapping, (x,))
    with torch.no_grad():
        p(x)
    m = convert_fx(p)
    import qops.nn.quantized as nnq
    t0 = time.perf_counter()
    g = nnq.from_torch(m)
    return m, g, time.perf_counter() - t0


def _fx_torchvision(torch, name, size):
    """(PyTorch int8 model of torchvision's float class `name` converted by its graph mode with
    min/max observers, qops import, import seconds)."""
    import torchvision.models as tvm  # (its package made importable by quantization_models)
    from torch.ao.quantization import get_default_qconfig_mapping
    tq = torch.ao.quantization
    torch.manual_seed(0)
    m = getattr(tvm, name)(weights=None).eval()
    mapping = get_default_qconfig_mapping("x86").set_global(
        tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True),
                   weight=tq.get_default_qconfig("x86").weight))
    return _fx_convert_import(torch, m, mapping, torch.randn(2, 3, size, size))


def _encoder_dynamic(torch):
    """(PyTorch dynamic int8 encoder, qops import, import seconds)."""
    torch.manual_seed(0)
    # PyTorch 2.13 cannot run its own dynamic-quantized encoder on the fast path (README)
    torch.backends.mha.set_fastpath_enabled(False)
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu")
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    m = torch.ao.quantization.quantize_dynamic(enc, {torch.nn.Linear}, dtype=torch.qint8)
    import qops.nn.quantized as nnq
    t0 = time.perf_counter()
    g = nnq.from_torch(m)
    return m, g, time.perf_counter() - t0


def _input(torch, name, batch, size):
    if name in TEXT_MODELS:
        return torch.randn(size, batch, 768)
    return torch.randn(batch, 3, size, size)


def build(torch, q, name, size):
    """(PyTorch int8 model, qops model, import seconds) for model `name` (torchvision's
    quantizable classes from `q`, or one of PLAIN_MODELS)."""
    if name == "encoder_dynamic":
        return _encoder_dynamic(torch)
    if name == "unet":
        return _unet(torch)
    if name in FX_MODELS:
        return _fx_torchvision(torch, name, size)
    torch.manual_seed(0)
    kw = dict(weights=None, quantize=False)
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=False)
    m = getattr(q, name)(**kw).eval()
    m.fuse_model()
    tq = torch.ao.quantization
    m.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True),
                           weight=tq.get_default_qconfig("x86").weight)
    tq.prepare(m, inplace=True)
    with torch.no_grad():
        m(torch.randn(2, 3, size, size))
    tq.convert(m, inplace=True)
    import qops.nn.quantized as nnq
    t0 = time.perf_counter()
    g = nnq.from_torch(m)
    return m, g, time.perf_counter() - t0


def node_overhead_us(n=200, repeats=200):
    """The graph runner's cost per node: a chain of `n` no-op nodes on a tiny QTensor."""
    from qops.nn._graph import GraphModule, Node, Ref
    nodes = [Node("x", "input", "x")]
    for i in range(n):
        nodes.append(Node(f"n{i}", "function", "dropout", [Ref(nodes[-1].name)]))
    nodes.append(Node("out", "output", "output", [Ref(nodes[-1].name)]))
    g = GraphModule(nodes)
    x = qops.quantize_per_tensor(np.zeros((1, 4), np.float32), 0.1, 0, qops.quint8)
    g(x)
    t0 = time.perf_counter()
    for _ in range(repeats):
        g(x)
    return (time.perf_counter() - t0) / repeats / n * 1e6


def _leaf_times(model, run, is_qops):
    """{module name: seconds of its calls} over one run(), through forward hooks."""
    spent, started, handles = {}, {}, []
    for name, mod in model.named_modules():
        children = list(mod.children()) if not is_qops else list(mod._modules.values())
        if not name or children and not _is_fused(mod):
            continue

        def pre(m, inp, name=name):
            started[name] = time.perf_counter()

        def post(m, inp, out, name=name):
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - started[name]
        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return spent


def _is_fused(mod):
    n = type(mod).__name__
    return n.startswith(("Conv", "Linear", "BN")) and ("ReLU" in n or "BatchNorm" in n)


#: alternating blocks per library and cell
ROUNDS = 7


def _paired_ratio(theirs, ours):
    """PyTorch's time over qops', the median over rounds of each round's two adjacent blocks.

    The shared VMs these run on change speed within seconds: the two blocks of a round see
    nearly the same machine, so their ratio cancels that drift, which the ratio of each
    library's best block does not (each may have met its quiet moment at a different time).
    """
    return float(np.median(np.asarray(theirs) / np.asarray(ours)))


def run(names=None, threads=(1,), batches=(1,), seconds=1.0, profile=False, out=sys.stdout):
    """Time the models; return rows (model, batch, threads, torch ms, qops ms, ratio).

    The times are each library's best block median; the ratio is _paired_ratio's."""
    warnings.filterwarnings("ignore")
    try:
        import torch
    except ImportError:
        out.write("PyTorch is not installed: model benchmarks compare against it\n")
        return []
    torch.backends.quantized.engine = "x86"
    from qops.nn._torchvision import quantization_models
    names = list(names or MODELS)
    q = quantization_models()
    if q is None and any(n not in PLAIN_MODELS for n in names):
        out.write("torchvision's model code is not found: install torchvision (or unpack it "
                  "and set QOPS_TORCHVISION_PATH); running the plain-torch models only\n")
        names = [n for n in names if n in PLAIN_MODELS]
    from qops.bench import _rotated_blocks
    rows = []
    out.write(f"graph runner: {node_overhead_us():.2f} us per node (no-op nodes)\n")
    for name in names:
        size = MODELS[name]
        tm, g, import_s = build(torch, q, name, size)
        nodes = len(getattr(g, "nodes", ()))
        out.write(f"{name}: imported in {import_s:.2f} s, {nodes} nodes\n")
        for b in batches:
            x = _input(torch, name, b, size)
            xn = x.numpy().copy()
            with torch.no_grad():
                want = tm(x).numpy()
            # the int8 models are bit-exact; the encoder's float parts agree to float32
            # rounding, which now and then moves a dynamic linear's input across a rounding
            # step (batch 8: 0.3% of outputs off by up to 0.008, outputs up to 5)
            same = (np.allclose(g(xn), want, rtol=1e-2, atol=2e-2) if name in TEXT_MODELS
                    else np.array_equal(g(xn), want))
            if name == "unet":
                # PyTorch 2.13's 2x2/2 transposed conv is wrong for these channel counts
                # (multiples of 8; docs/semantics.md §16.2): qops follows its definition
                steps = np.abs(g(xn) - want).max() / float(tm.head.scale)
                out.write(f"  batch {b}: qops vs PyTorch up to {steps:.0f} output steps "
                          f"(PyTorch's 2x2/2 transposed convs, docs/semantics.md §16.2)\n")
            elif name in FX_MODELS:
                out.write(f"  batch {b}: {np.mean(g(xn) == want):.1%} of outputs equal "
                          f"PyTorch's (float attention before quantizes, README)\n")
            elif not same and "avx512" in qops._fast.CPU_ISAS:
                # PyTorch's x86 engine runs convs with symmetric weights on oneDNN on
                # AVX512-VNNI CPUs, whose requantization is one step off now and then
                # (docs/semantics.md §8): the steps spread over the layers
                out.write(f"  batch {b}: {np.mean(g(xn) == want):.1%} of outputs equal PyTorch's "
                          f"(its x86 engine's oneDNN convs on this VNNI CPU: rare +-1 per "
                          f"layer, docs/semantics.md §8)\n")
            elif not same:
                out.write(f"  warning: {name} batch {b}: qops output differs from PyTorch's\n")
            for n in threads:
                torch.set_num_threads(n)
                with qops.threads(n), torch.no_grad():
                    blocks = _rotated_blocks({"torch": lambda: tm(x), "qops": lambda: g(xn)},
                                             seconds, ROUNDS)
                t = {k: min(v) for k, v in blocks.items()}
                ratio = _paired_ratio(blocks["torch"], blocks["qops"])
                rows.append((name, b, n, t["torch"] / 1e3, t["qops"] / 1e3, ratio))
                out.write(f"  batch {b} threads {n}: torch {t['torch'] / 1e3:8.2f} ms  qops "
                          f"{t['qops'] / 1e3:8.2f} ms  {ratio:.2f}x\n")
            if profile:
                _profile(torch, tm, g, x, xn, threads[0], out)
    _table(rows, out)
    return rows


def _profile(torch, tm, g, x, xn, n, out, top=25, reps=7):
    torch.set_num_threads(n)
    with qops.threads(n), torch.no_grad():
        tm(x), g(xn)
        # the fastest of several interleaved runs per layer: one run is too noisy to rank by
        theirs, ours = {}, {}
        for _ in range(reps):
            for acc, t in ((theirs, _leaf_times(tm, lambda: tm(x), False)),
                           (ours, _leaf_times(g, lambda: g(xn), True))):
                for k, v in t.items():
                    acc[k] = min(acc.get(k, v), v)
    total = sum(ours.values())
    out.write(f"  per layer, {n} thread(s) (leaf modules, hook-timed: qops {total * 1e3:.2f} ms, "
              f"torch {sum(theirs.values()) * 1e3:.2f} ms)\n")
    out.write(f"  {'layer':<34} {'type':<22} {'share':>6} {'qops us':>9} {'torch us':>9} "
              f"{'ratio':>6}\n")
    for name, s in sorted(ours.items(), key=lambda kv: -kv[1])[:top]:
        t = theirs.get(name)
        kind = type(g.get_submodule(name)).__name__
        ratio = f"{t / s:.2f}x" if t else "-"
        out.write(f"  {name:<34} {kind:<22} {100 * s / total:5.1f}% {s * 1e6:9.0f} "
                  f"{(t or 0) * 1e6:9.0f} {ratio:>6}\n")


def _table(rows, out):
    if not rows:
        return
    out.write("\nmodel                 batch  thr   torch ms    qops ms   qops vs torch\n")
    for name, b, n, t, q, ratio in rows:
        out.write(f"{name:<21} {b:>5} {n:>4} {t:10.2f} {q:10.2f}   {ratio:6.2f}x\n")
    out.write(f"(qops vs torch = PyTorch's time / qops' time, the median over {ROUNDS} rounds "
              "of two adjacent blocks: above 1x means qops is faster; the times are each "
              "library's best block)\n")

