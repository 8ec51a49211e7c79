"""Memory-bound ops at sizes beyond the caches, against a plain copy (qops fast only).

    python tools/dram_bandwidth.py            # batch 64: a 51 MB 64x112x112 input per item
    python tools/dram_bandwidth.py 32 --threads 1,2

The registry's "large" benchmark cases (6.4 MB) fit the last-level cache of some machines
(32 MB here), so their share of a copy's speed measures cache bandwidth. This script uses
inputs well beyond it. The copy is `a.copy()`: it allocates its output as the ops do, so both
pay the same page faults. Medians of 7 calls; the VM is shared, so compare within one run.
"""
import argparse
import time
import warnings

import numpy as np

import qops
import qops.functional as F


def _median_seconds(f, n=7):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("batch", nargs="?", type=int, default=64)
    p.add_argument("--threads", default="1,2")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    shape = (args.batch, 64, 112, 112)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    q = qops.quantize_per_tensor(x, 0.05, 128, qops.quint8)
    del x
    q2 = q.clone()
    nb = q.int_repr().nbytes
    # (name, call, input bytes per input byte, output bytes per input byte)
    b = args.batch
    q3 = q.reshape(b, 32, 8, 56, 56)         # the same bytes as 3-d and 1-d pooling inputs
    q1 = q.reshape(b, 64, 12544)
    q7 = q.reshape(b, 16384, 7, 7)           # many short planes, as a network's last maps
    # (name, call, input bytes per input byte, output bytes per input byte): the memory-bound
    # ops with a "large" benchmark case in the registry, plus nearest x2 (bilinear computes
    # 4 taps per output and is not memory-bound)
    cases = [
        ("relu", lambda: F.relu(q), 1, 1),
        ("hardswish", lambda: F.hardswish(q, 0.05, 128), 1, 1),
        ("add", lambda: F.add(q, q2, 0.1, 128), 2, 1),
        ("mul", lambda: F.mul(q, q2, 0.1, 128), 2, 1),
        ("cat of two (dim 1)", lambda: F.cat([q, q2], 1, 0.05, 128), 2, 2),
        ("max_pool2d 3x3/2", lambda: F.max_pool2d(q, 3, 2), 1, 0.25),
        ("max_pool3d 2x2x2", lambda: F.max_pool3d(q3, 2), 1, 0.125),
        ("avg_pool1d 3/1 pad 1", lambda: F.avg_pool1d(q1, 3, 1, 1), 1, 1),
        ("avg_pool2d 2x2/2", lambda: F.avg_pool2d(q, 2, 2), 1, 0.25),
        ("avg_pool2d 3x3/1 pad 1", lambda: F.avg_pool2d(q, 3, 1, 1), 1, 1),
        ("avg_pool3d 2x2x2", lambda: F.avg_pool3d(q3, 2), 1, 0.125),
        ("adaptive_avg_pool2d 7x7", lambda: F.adaptive_avg_pool2d(q, (7, 7)), 1, 0),
        ("adaptive_max_pool2d 7x7", lambda: F.adaptive_max_pool2d(q, (7, 7)), 1, 0),
        ("adaptive_avg_pool2d 1x1", lambda: F.adaptive_avg_pool2d(q, 1), 1, 0),
        ("mean over H, W", lambda: q.mean((2, 3)), 1, 0),
        ("adaptive_avg 1x1 7x7 maps", lambda: F.adaptive_avg_pool2d(q7, 1), 1, 0),
        ("interpolate nearest x2", lambda: F.interpolate(q, scale_factor=2, mode="nearest"), 1, 4),
    ]
    a = q.int_repr()
    copy_bw = 2 * nb / _median_seconds(lambda: a.copy())
    print(f"input {shape}, {nb / 1e6:.0f} MB; a one-thread a.copy(): {copy_bw / 1e9:.1f} GB/s")
    print(f"{'op':26s} {'thr':>3s} {'ms':>8s} {'GB/s':>6s} {'of copy':>8s}")
    for nt in (int(t) for t in args.threads.split(",")):
        with qops.threads(nt):
            for name, f, fin, fout in cases:
                s = _median_seconds(f)
                bw = (fin + fout) * nb / s
                print(f"{name:26s} {nt:3d} {s * 1e3:8.2f} {bw / 1e9:6.1f} "
                      f"{100 * bw / copy_bw:7.0f}%")


if __name__ == "__main__":
    main()
