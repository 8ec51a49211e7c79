"""Compare qops' fast kernels with its reference and with PyTorch, in one process.

    python -m qops.bench [--ops conv2d,linear] [--family conv] [--threads 1,2] [--seconds 0.3]
                         [--xnnpack]
    python -m qops.bench --models [resnet18,...] [--batch 1,8] [--threads 1,2] [--profile]
    python -m qops.bench --zoo [resnet50,...] [--batch 1] [--no-ref]   # every layer shape

Prints one table row per op and benchmark case: median microseconds per call for `ref`,
`fast` and PyTorch (when installed), then fast's speed-up over ref and over PyTorch. The
cases and the PyTorch calls are the registry's, the same data the tests and asv use.

With --bandwidth, two more columns: fast's effective bandwidth (bytes of every array input and
output, read once and written once, per second) and that as a share of a plain copy moving the
same number of bytes on this machine (numpy copyto, one thread), the yardstick of memory-bound ops.

With --xnnpack, two more columns: TFLite/LiteRT with XNNPACK running the same case as a
one-operator int8 model (qops/_bench_tflite.py; needs `pip install qops[peers]`), timed in the
same rotation as fast and PyTorch at each thread count, and fast's speed-up over it. Cases the
model builder cannot express (conv3d, dynamic linear, asymmetric weights, ...) show `-`, with
the reason under the table.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

import qops
from qops._registry import all_specs


def _median_us(fn, seconds, max_single=2.0):
    """Median time of `fn` in microseconds over repeated calls within about `seconds`."""
    t0 = time.perf_counter()
    fn()                                         # warm-up (and a measure of one call)
    first = time.perf_counter() - t0
    if first > max_single:                       # slow reference: one more call is enough
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 2000):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e6


def _rotated_us(calls, seconds, rounds=5):
    """Median times (µs) of several callables timed in alternating blocks.

    Each gets `rounds` blocks of about seconds / rounds, in turn, and reports the smallest of
    its block medians: a drift of the machine's speed (shared VM, clocks, a neighbour) then
    hits every callable alike instead of whichever happened to run during it, and noise, which
    only ever slows a block down, is left out as far as one block is free of it.
    """
    return {name: min(v) for name, v in _rotated_blocks(calls, seconds, rounds).items()}


def _rotated_blocks(calls, seconds, rounds=5):
    """{name: [block median (µs) per round]} of callables timed in alternating blocks."""
    for fn in calls.values():
        fn()                                     # warm-up
    blocks = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            blocks[name].append(_median_us(fn, seconds / rounds))
    return blocks


def _nbytes(obj):
    """Bytes of the arrays in `obj` (QTensors, ndarrays, and tuples/lists of them)."""
    if isinstance(obj, qops.QTensor):
        return obj._int.nbytes
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(o) for o in obj)
    return 0


def _copy_us(nbytes, seconds):
    """Median time of a one-thread copy moving `nbytes` (half read, half written)."""
    src = np.ones(max(nbytes // 2, 1), np.uint8)
    dst = np.empty_like(src)
    return _median_us(lambda: np.copyto(dst, src), seconds)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.backends.quantized.engine = "x86"
    return torch


def _progress(i, n, label):
    # Only a terminal gets the redrawn bar: in a log or a pipe it is noise.
    if not sys.stderr.isatty():
        return
    width = 30
    done = int(width * i / max(n, 1))
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label[:40]:<40}")
    sys.stderr.flush()
    if i == n:
        sys.stderr.write("\n")


def _settle_allocator():
    """Free one large block first, so every case sees glibc's raised mmap threshold.

    In a fresh process glibc serves each multi-MB allocation with new pages (one fault per
    4 KB) until a large block has been freed; PyTorch's sort of 1e6 bytes then spends half of
    its 8.3 ms faulting in its outputs, and the same case measured 4.3-4.9 ms after other cases.
    """
    block = np.empty(24 << 20, np.uint8)
    block.fill(0)
    del block


def _zoo_cases(spec, models, batches):
    """The op's layer-zoo cases of any of `models` ("all": every model) at `batches`."""
    from qops._registry import _zoo
    found = _zoo.models(spec.name)
    return {name: build for name, build in spec.zoo.items()
            if (models == "all" or set(found[name]) & set(models))
            and (not batches or any(name.endswith((f"_b{b}", f"_b{b}_cl")) for b in batches))}


def run(ops=None, families=None, threads=(1,), seconds=0.3, backends=("ref", "fast", "torch"),
        cases=None, out=sys.stdout, bandwidth=False, zoo=None, batches=None, xnnpack=False):
    """Time the selected registry ops; return rows (op, case, threads, {backend: us}).

    zoo : None for the ops' benchmark cases; "all" or a list of model names for the layer
        zoo's cases of those models (qops/_registry/_zoo.py), at `batches` (None: all)
    xnnpack : also time TFLite/LiteRT with XNNPACK (qops._bench_tflite) where it can run the
        case (raises ImportError without ai_edge_litert)
    """
    torch = _torch() if "torch" in backends else None
    if xnnpack:
        from qops import _bench_tflite
        _bench_tflite.import_litert()       # fail before timing anything, not case by case
    skipped = {}                            # {(op, case): why xnnpack has no time}
    _settle_allocator()
    specs = [s for s in all_specs()
             if (not ops or s.name in ops) and (not families or s.family in families)]
    jobs = [(s, name, build) for s in specs
            for name, build in (s.bench if zoo is None else _zoo_cases(s, zoo, batches)).items()
            if not cases or name in cases]
    rows = []
    total = len(jobs) * len(threads)
    step = 0
    for spec, name, build in jobs:
        case = build()
        for n in threads:
            _progress(step, total, f"{spec.name} {name} t{n}")
            times = {}
            with qops.threads(n):
                if "ref" in backends:
                    with qops.backend("ref"):
                        times["ref"] = _median_us(spec.qops_call(case), seconds)
                calls = {}
                if "fast" in backends:
                    calls["fast"] = spec.qops_call(case)
                if torch is not None and spec.torch is not None:
                    torch.set_num_threads(n)
                    calls["torch"] = spec.torch(case)
                if xnnpack:
                    try:
                        calls["xnnpack"] = _bench_tflite.xnnpack_call(spec.name, case, n)
                    except (_bench_tflite.Unsupported, RuntimeError) as e:
                        skipped[(spec.name, name)] = str(e)
                # fast, PyTorch and XNNPACK in alternating blocks ("fast" is the backend throughout)
                with qops.backend("fast"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    times.update(_rotated_us(calls, seconds))
                    if zoo is not None and spec.name in ("conv2d", "linear") and "fast" in calls:
                        times["macs"] = _macs(spec.name, case, calls["fast"]())
                    if bandwidth and "fast" in calls:
                        moved = _nbytes(case.args) + _nbytes(calls["fast"]())
                        times["bytes"] = moved
                        times["copy"] = _copy_us(moved, seconds)
            rows.append((spec.name, name, n, times))
            step += 1
    _progress(total, total, "done")
    _print(rows, out, torch is not None, bandwidth, skipped if xnnpack else None)
    if zoo is not None and torch is not None:
        _zoo_summary(rows, out)
    return rows


def _macs(op, case, result):
    """Multiply-adds of one conv2d or linear call (from its weight and result shapes)."""
    w = case.args[1]
    per_output = int(np.prod(w.shape[1:]))      # (C / groups) x taps, or in_features
    return int(np.prod(result.shape)) * per_output


def _peak():
    """(int8 products per second per core, how counted) of the tier in use, at the clock the
    OS reports (a VM's nominal clock: the true one may differ)."""
    from qops._show import config_info
    kernel = config_info()["gemm_kernel"]
    mhz, two_ports = 0.0, False
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        family = next(int(line.split(":")[1]) for line in info.splitlines()
                      if line.startswith("cpu family"))
        # Intel's AVX-512 server cores (on a Xeon the GEMM core ran faster than one a cycle
        # allows) and AMD Zen 5 (family 26, a full 512-bit datapath) issue two 512-bit
        # vpdpbusd a cycle; Zen 4 (family 25) splits each into two 256-bit halves
        two_ports = "GenuineIntel" in info or ("AuthenticAMD" in info and family >= 26)
        mhz = next(float(line.split(":")[1]) for line in info.splitlines()
                   if line.startswith("cpu MHz"))
    except (OSError, StopIteration, ValueError):
        pass
    vnni = (128, "VNNI: 2 x 64") if two_ports else (64, "VNNI: 64")
    per_cycle, what = ((1024, "AMX: 1024") if "AMX" in kernel else
                       vnni if "VNNI" in kernel else
                       (32, "AVX2: 32") if "AVX2" in kernel else (0, "portable C"))
    return per_cycle * mhz * 1e6, f"{what} products a cycle at {mhz:.0f} MHz"


def _zoo_summary(rows, out, floor=0.9, big=50e6, share=0.8):
    """How many zoo cases are below `floor` x PyTorch, the slowest listed; and the conv and
    linear cases of more than `big` multiply-adds below `share` of the tier's int8 peak."""
    ratios = sorted((t["torch"] / t["fast"], op, case, n) for op, case, n, t in rows
                    if t.get("torch") and t.get("fast"))
    low = [r for r in ratios if r[0] < floor]
    out.write(f"zoo: {len(ratios)} cases, {len(low)} below {floor}x PyTorch; "
              f"median {ratios[len(ratios) // 2][0]:.2f}x\n" if ratios else "zoo: no cases\n")
    for ratio, op, case, n in low:
        out.write(f"  {ratio:.2f}x  {op} {case} t{n}\n")
    peak, how = _peak()
    if peak <= 0:           # the portable build, or no clock known: no peak to compare with
        return
    heavy = sorted((t["macs"] / (t["fast"] * 1e-6) / (peak * n), op, case, n, t["macs"])
                   for op, case, n, t in rows if t.get("macs", 0) > big and t.get("fast"))
    if heavy:
        under = [h for h in heavy if h[0] < share]
        out.write(f"zoo: {len(heavy)} conv/linear cases over {big / 1e6:.0f} M multiply-adds, "
                  f"{len(under)} below {share:.0%} of the int8 peak ({how}); median "
                  f"{heavy[len(heavy) // 2][0]:.0%}\n")
        for frac, op, case, n, macs in under:
            out.write(f"  {frac:4.0%}  {op} {case} t{n} ({macs / 1e6:.0f} M)\n")


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def _print(rows, out, have_torch, bandwidth=False, xnnpack_skipped=None):
    """The table; xnnpack_skipped: None without --xnnpack, else {(op, case): why no time}."""
    xnnpack = xnnpack_skipped is not None
    head = ["op", "case", "thr", "ref us", "fast us", "torch us", "fast vs ref", "fast vs torch"]
    if xnnpack:
        head[6:6] = ["xnnpack us"]
        head += ["fast vs xnnpack"]
    if bandwidth:
        head += ["fast GB/s", "of copy"]
    table = [head]
    for op, case, n, t in rows:
        row = [op, case, str(n), _fmt(t.get("ref")), _fmt(t.get("fast")),
               _fmt(t.get("torch")) if have_torch else "n/a",
               _ratio(t.get("ref"), t.get("fast")), _ratio(t.get("torch"), t.get("fast"))]
        if xnnpack:
            row[6:6] = [_fmt(t.get("xnnpack"))]
            row += [_ratio(t.get("xnnpack"), t.get("fast"))]
        if bandwidth:
            fast, moved = t.get("fast"), t.get("bytes")
            ok = fast and moved
            row += [f"{moved / fast / 1e3:.1f}" if ok else "-",
                    f"{100 * t['copy'] / fast:.0f}%" if ok else "-"]
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for j, r in enumerate(table):
        cells = (c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        out.write("  ".join(cells) + "\n")
        if j == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")
    out.write("(fast vs X = X's time / fast's time: above 1x means qops fast is faster)\n")
    if xnnpack:
        out.write("(xnnpack: TFLite/LiteRT int8, XNNPACK delegate, NHWC, one-operator model)\n")
        for (op, case), why in xnnpack_skipped.items():
            out.write(f"(xnnpack -: {op} {case}: {why})\n")
    if bandwidth:
        out.write("(GB/s: bytes of inputs + outputs / fast's time; of copy: a one-thread numpy "
                  "copy moving the same bytes takes that share of fast's time)\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m qops.bench", description=__doc__.split("\n")[0])
    p.add_argument("--ops", help="comma-separated op names (default: all)")
    p.add_argument("--family", help="comma-separated op families (conv, pool, ...)")
    p.add_argument("--cases", help="comma-separated benchmark case names")
    p.add_argument("--threads", default="1", help="comma-separated thread counts, e.g. 1,2")
    p.add_argument("--seconds", type=float, default=0.3, help="time budget per measurement")
    p.add_argument("--no-ref", action="store_true", help="skip the (slow) reference backend")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    p.add_argument("--bandwidth", action="store_true",
                   help="add fast's GB/s and its share of a plain copy's speed")
    p.add_argument("--xnnpack", action="store_true",
                   help="add TFLite/LiteRT with XNNPACK (pip install qops[peers]) and fast's "
                        "speed-up over it")
    p.add_argument("--list", action="store_true", help="list ops and cases, then exit")
    p.add_argument("--models", nargs="?", const="all", default=None,
                   help="time whole torchvision int8 models in PyTorch and imported into qops "
                        "(comma-separated names, default all) instead of the ops")
    p.add_argument("--zoo", nargs="?", const="all", default=None,
                   help="time the layer zoo (every distinct layer shape of the benchmark "
                        "models; comma-separated model names, default all) instead of the "
                        "ops' benchmark cases")
    p.add_argument("--batch", default=None,
                   help="with --models or --zoo: comma-separated batch sizes (--models: 1)")
    p.add_argument("--profile", action="store_true",
                   help="with --models: per-layer times and ratios, largest share first")
    a = p.parse_args(argv)
    if a.models is not None and a.xnnpack:
        p.error("--xnnpack times the ops' cases (and --zoo's), not whole --models")
    if a.models is not None:
        from qops import _bench_models
        names = None if a.models == "all" else a.models.split(",")
        unknown = set(names or ()) - set(_bench_models.MODELS)
        if unknown:
            p.error(f"unknown models {sorted(unknown)}; choose from {sorted(_bench_models.MODELS)}")
        _bench_models.run(names, [int(t) for t in a.threads.split(",")],
                          [int(b) for b in (a.batch or "1").split(",")], max(a.seconds, 1.0),
                          a.profile)
        return 0
    zoo = None
    if a.zoo is not None:
        from qops import _bench_models
        zoo = "all" if a.zoo == "all" else a.zoo.split(",")
        unknown = set(zoo if zoo != "all" else ()) - set(_bench_models.ZOO_MODELS)
        if unknown:
            p.error(f"unknown models {sorted(unknown)}; choose from "
                    f"{sorted(_bench_models.ZOO_MODELS)}")
    batches = [int(b) for b in a.batch.split(",")] if a.batch else None
    if a.list:
        try:
            for s in all_specs():
                names = s.bench if zoo is None else _zoo_cases(s, zoo, batches)
                if names:
                    print(f"{s.family:<11} {s.name:<24} {', '.join(names)}")
            sys.stdout.flush()
        except BrokenPipeError:
            # `... --list | head` closed the pipe: stop quietly, as Unix tools do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    backends = [b for b in ("ref", "fast", "torch")
                if not (b == "ref" and a.no_ref) and not (b == "torch" and a.no_torch)]
    split = lambda v: [x for x in v.split(",") if x] if v else None  # noqa: E731
    if a.xnnpack:
        from qops import _bench_tflite
        try:
            _bench_tflite.import_litert()
        except ImportError as e:
            p.error(str(e))
    run(split(a.ops), split(a.family), [int(t) for t in a.threads.split(",")], a.seconds,
        backends, split(a.cases), bandwidth=a.bandwidth, zoo=zoo, batches=batches,
        xnnpack=a.xnnpack)
    return 0


if __name__ == "__main__":
    sys.exit(main())
