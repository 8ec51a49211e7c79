"""`python -m qops demo`: quantize a small CNN trained on the scikit-learn digits, end to end.

Loads the float model and images shipped in qops/data/digits_cnn.npz (made by
tools/train_digits.py), fuses conv+bn+relu, prepares with the x86 default qconfig,
calibrates (a progress bar on stderr when it is a terminal), converts, then prints float and
int8 accuracy, int8's speed against qops' numpy float layers and, where installed, PyTorch
float32, the same model quantized in graph mode (prepare_fx / convert_fx, no fuse list), the
per-layer error report, and the save/load round trip.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

DATA_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                         "digits_cnn.npz")


def build_model():
    """The demo CNN in qops.nn (same layer names as tools/train_digits.py), float, eval mode.

    A Sequential with named children, so the quantized model saves and loads with no custom
    module class (qops.save / qops.load only rebuild qops' own types).
    """
    from collections import OrderedDict

    from qops import nn
    from qops.quantization import DeQuantStub, QuantStub

    return nn.Sequential(OrderedDict([
        ("quant", QuantStub()),
        ("conv1", nn.Conv2d(1, 16, 3, padding=1)), ("bn1", nn.BatchNorm2d(16)),
        ("relu1", nn.ReLU()),
        ("conv2", nn.Conv2d(16, 32, 3, padding=1)), ("bn2", nn.BatchNorm2d(32)),
        ("relu2", nn.ReLU()),
        ("pool", nn.MaxPool2d(2)),
        ("conv3", nn.Conv2d(32, 32, 3, padding=1)), ("bn3", nn.BatchNorm2d(32)),
        ("relu3", nn.ReLU()),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(32 * 4 * 4, 64)), ("relu4", nn.ReLU()),
        ("fc2", nn.Linear(64, 10)),
        ("dequant", DeQuantStub()),
    ])).eval()


FUSE_GROUPS = [["conv1", "bn1", "relu1"], ["conv2", "bn2", "relu2"], ["conv3", "bn3", "relu3"],
               ["fc1", "relu4"]]


def load_data(path=DATA_FILE):
    """(float model with the shipped weights, calibration images, test images, test labels)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"demo data not found at {path}; run tools/train_digits.py")
    with np.load(path, allow_pickle=False) as d:
        state = {k[len("state."):]: d[k] for k in d.files if k.startswith("state.")}
        div = np.float32(d["input_divisor"])
        calib = (d["calib_images"].astype(np.float32) / div)[:, None]
        test = (d["test_images"].astype(np.float32) / div)[:, None]
        labels = d["test_labels"].astype(np.int64)
    model = build_model()
    model.load_state_dict(state, strict=False)
    model.eval()
    return model, calib, test, labels


def _progress(i, n, label, stream, width=30):
    # A bar redrawn with \r is noise in a log or a pipe: only a terminal gets it.
    if not getattr(stream, "isatty", lambda: False)():
        return
    done = int(width * i / n)
    stream.write(f"\r{label} [{'#' * done}{'.' * (width - done)}] {i}/{n}")
    if i == n:
        stream.write("\n")
    stream.flush()


def calibrate(model, images, batch_size=32, stream=None, label="calibrating"):
    """Run `images` through a prepared model in batches, drawing a progress bar on `stream`."""
    stream = sys.stderr if stream is None else stream
    n = (len(images) + batch_size - 1) // batch_size
    for b in range(n):
        model(images[b * batch_size:(b + 1) * batch_size])
        _progress(b + 1, n, label, stream)


def accuracy(model, images, labels, batch_size=120):
    """Top-1 accuracy of `model` (float output logits) on `images`."""
    preds = []
    for i in range(0, len(images), batch_size):
        preds.append(np.asarray(model(images[i:i + batch_size])).argmax(axis=1))
    return float((np.concatenate(preds) == labels).mean())


def _best_time(fn, repeat):
    # Best of `repeat` after a warm-up: the least disturbed run on a shared machine.
    fn()
    times = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.min(times))


def _torch_float_time(model, images, repeat):
    """PyTorch float32's time for the same float model and images, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    t = torch.nn
    layers = {"Conv2d": lambda m: t.Conv2d(m.in_channels, m.out_channels, m.kernel_size,
                                           padding=m.padding),
              "BatchNorm2d": lambda m: t.BatchNorm2d(m.num_features), "ReLU": lambda m: t.ReLU(),
              "MaxPool2d": lambda m: t.MaxPool2d(m.kernel_size), "Flatten": lambda m: t.Flatten(),
              "Linear": lambda m: t.Linear(m.in_features, m.out_features),
              "QuantStub": lambda m: t.Identity(), "DeQuantStub": lambda m: t.Identity()}
    from collections import OrderedDict
    tm = t.Sequential(OrderedDict((name, layers[type(m).__name__](m))
                                  for name, m in model.named_children())).eval()
    tm.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in model.state_dict().items()
                        if k in tm.state_dict()}, strict=False)
    x = torch.from_numpy(images)
    torch.set_num_threads(__import__("qops").get_num_threads())
    with torch.no_grad():
        return _best_time(lambda: tm(x), repeat)


def _onnx_accuracy(qmodel, images, labels):
    """The int8 model exported to ONNX (QDQ) and run in ONNX Runtime: a line of text, or None
    when onnx / onnxruntime are not installed."""
    try:
        import onnxruntime as ort

        from qops.onnx import export
    except ImportError:
        return None
    import io
    buf = io.BytesIO()
    export(qmodel, images[:1], buf)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"input": images})[0]
    ours = np.asarray(qmodel(images))
    acc = float((logits.argmax(axis=1) == labels).mean())
    same = float(np.mean(logits == ours))
    # The difference is measured, not hidden: docs/onnx.md (mostly ONNX's int32 conv bias).
    return (f"int8 in ONNX Runtime {ort.__version__} (qops.onnx.export, QDQ): accuracy "
            f"{acc:.2%}; logits identical to qops' for {same:.2%} of values")


def quantize_demo_model(model, calib, qconfig=None, stream=None):
    """Fuse, prepare, calibrate and convert a copy of the demo float model."""
    import qops.quantization as qq
    fused = qq.fuse_modules(model, FUSE_GROUPS)
    fused.qconfig = qconfig if qconfig is not None else qq.get_default_qconfig("x86")
    prepared = qq.prepare(fused)
    calibrate(prepared, calib, stream=stream)
    return fused, qq.convert(prepared)


def main(argv=None):
    """Run the demo; return 0 on success.

    Parameters
    ----------
    argv : list of command-line arguments (default: sys.argv[1:])
    """
    import qops
    from qops.quantization.report import compare_layers, format_report, plot_report

    p = argparse.ArgumentParser(prog="python -m qops demo", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None,
                   help="directory to save the quantized model in (default: a new temp dir)")
    p.add_argument("--repeat", type=int, default=5, help="timing repetitions (the best is shown)")
    p.add_argument("--plot", default=None,
                   help="save a per-layer SQNR plot to this PNG file (needs matplotlib)")
    args = p.parse_args(argv)

    model, calib, test, labels = load_data()
    print(f"qops {qops.__version__} demo: a small CNN on the scikit-learn digits "
          f"({len(calib)} calibration images, {len(test)} test images, 8x8 pixels)")
    fused, qmodel = quantize_demo_model(model, calib)
    float_acc = accuracy(model, test, labels)
    int8_acc = accuracy(qmodel, test, labels)
    print(f"float32 accuracy: {float_acc:.2%}")
    print(f"int8 accuracy:    {int8_acc:.2%}  ({(int8_acc - float_acc) * 100:+.2f} points)")
    onnx_line = _onnx_accuracy(qmodel, test, labels)
    if onnx_line:
        print(onnx_line)

    t_float = _best_time(lambda: model(test), args.repeat)
    t_int8 = _best_time(lambda: qmodel(test), args.repeat)
    print(f"time for {len(test)} images (best of {args.repeat}, {qops.get_num_threads()} "
          f"threads): qops int8 {t_int8 * 1e3:.1f} ms; qops' float32 layers (numpy) "
          f"{t_float * 1e3:.1f} ms ({t_float / t_int8:.2f}x int8's time)")
    t_torch = _torch_float_time(model, test, args.repeat)
    if t_torch is not None:
        print(f"  PyTorch float32 on the same model and images: {t_torch * 1e3:.1f} ms "
              f"({t_torch / t_int8:.2f}x qops int8's time)")

    # Graph mode: the float model as it is, no fuse list and no stubs needed.
    from qops.quantization import quantize_fx
    prepared = quantize_fx.prepare_fx(model, quantize_fx.get_default_qconfig_mapping("x86"),
                                      (calib[:1],))
    calibrate(prepared, calib, label="calibrating (graph mode)")
    graph_model = quantize_fx.convert_fx(prepared)
    print(f"graph mode (prepare_fx / convert_fx on the unfused float model): int8 accuracy "
          f"{accuracy(graph_model, test, labels):.2%}")

    rows = compare_layers(fused, qmodel, test[:120])
    print()
    print(format_report(rows))
    if args.plot:
        where = plot_report(rows, args.plot)
        print(f"plot: {where}" if where else "plot: skipped (matplotlib is not installed)")

    out_dir = args.out or tempfile.mkdtemp(prefix="qops-demo-")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "digits_cnn_int8.qops")
    try:
        qops.save(qmodel, path)
        size = os.path.getsize(path)
        back = qops.load(path)
        same = np.array_equal(back(test[:120]), qmodel(test[:120]))
        print(f"\nquantized model saved ({size // 1024} KB) and loaded back: outputs "
              f"{'identical' if same else 'DIFFERENT'}")
    except Exception as e:  # noqa: BLE001 -- saving is the last step; report, don't hide results
        print(f"\ncould not save the quantized model to {path}: {e}")
        return 1
    finally:
        if args.out is None:
            # A temporary folder is not left behind: --out keeps the file.
            shutil.rmtree(out_dir, ignore_errors=True)
    if args.out is not None:
        print(f"kept at {path}; reload it with qops.load({path!r})")
    else:
        print("(saved to a temporary folder, now removed; --out DIR keeps the file)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
