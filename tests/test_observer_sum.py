"""HistogramObserver's float32 sums in ATen's order (issue 19 #18): `_torch_sum.torch_sum`.

torch.sum adds float32 in a cascade of 8-lane vectors (PyTorch 2.13 runs its AVX2 sum kernel
under the AVX-512 capability too: measured) and, from 32768 elements, on ATen's
thread count. The oracle here is torch.sum itself, in this process (the capability PyTorch
picks on this machine) and in subprocesses with ATEN_CPU_CAPABILITY forcing lower ones.
"""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import qops.quantization as qq
from qops.quantization import _torch_sum as ts

from conftest import torch_or_skip

F32 = np.float32
# Around every chunk boundary of the cascade: lane and ilp tails, the 16-row level steps and
# their carries (16*16 and 16**3 rows of 4 vectors), the thread split, and 1e6 (issue 19).
_LONG = (16383, 16384, 16385, 65535, 65536, 65537, 262143, 262145, 32767, 32768, 32769,
         40000, 100001, 1000000, 2 ** 20 + 3)


def _data(rng, n, kind):
    if kind == 0:
        return rng.standard_normal(n).astype(F32)
    # Mixed magnitudes and signs: every ordering difference shows in the last bits.
    return (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(F32)


def _bits(v):
    return np.asarray(v, dtype=F32).tobytes()


def _literal_sum(x, width):
    """SumKernel.cpp's loops transcribed one addition at a time (a second derivation)."""
    x = np.asarray(x, dtype=F32)
    n = len(x)

    def multi_row_sum(rows):  # rows: list of (ncols,) float32 arrays
        size = len(rows)
        cl2 = 1 if size <= 2 else (size - 1).bit_length()
        power = max(4, cl2 // 4)
        step, mask0 = 1 << power, (1 << power) - 1
        ncols = rows[0].shape[0] if rows else 4
        acc = [np.zeros(ncols, F32) for _ in range(4)]
        i = 0
        while i + step <= size:
            for _ in range(step):
                acc[0] = acc[0] + rows[i]
                i += 1
            for j in range(1, 4):
                acc[j] = acc[j] + acc[j - 1]
                acc[j - 1] = np.zeros(ncols, F32)
                if i & (mask0 << (j * power)):
                    break
        while i < size:
            acc[0] = acc[0] + rows[i]
            i += 1
        for j in range(1, 4):
            acc[0] = acc[0] + acc[j]
        return acc[0]

    def row_sum(elems, ncols):  # elems: list of (ncols,) arrays; ilp factor 4
        size_ilp = len(elems) // 4
        if size_ilp:
            rows = [np.concatenate(elems[4 * r:4 * r + 4]) for r in range(size_ilp)]
            flat = multi_row_sum(rows)
        else:
            flat = np.zeros(4 * ncols, F32)
        part = [flat[k * ncols:(k + 1) * ncols] for k in range(4)]
        for e in elems[4 * size_ilp:]:
            part[0] = part[0] + e
        for k in range(1, 4):
            part[0] = part[0] + part[k]
        return part[0]

    if n < width:
        return F32(F32(0) + row_sum([x[i:i + 1] for i in range(n)], 1)[0])
    nvec = n // width
    lanes = row_sum([x[v * width:(v + 1) * width] for v in range(nvec)], width)
    acc = F32(0)
    for k in range(nvec * width, n):
        acc = F32(acc + x[k])
    for v in lanes:
        acc = F32(acc + v)
    return F32(F32(0) + acc)


# issue 19 #18: torch_sum is torch.sum bit for bit, lengths 1..5000, on 1 thread
def test_issue19_torch_sum_matches_torch_every_length():
    torch = torch_or_skip()
    assert torch.backends.cpu.get_cpu_capability().lower() == ts.torch_cpu_capability()
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = np.random.default_rng(18)
        bad = []
        for n in range(0, 5001):
            x = _data(rng, n, n % 2)
            if _bits(torch.sum(torch.from_numpy(x)).item()) != _bits(ts.torch_sum(x)):
                bad.append(n)
        assert bad == []
    finally:
        torch.set_num_threads(old)


# issue 19 #18: long rows (cascade levels, 1e6) on 1 and 2 ATen threads (two-pass reduction)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_issue19_torch_sum_long_rows_and_threads(threads):
    torch = torch_or_skip()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rng = np.random.default_rng(threads)
        for n in _LONG:
            for kind in (0, 1):
                x = _data(rng, n, kind)
                want = torch.sum(torch.from_numpy(x)).item()
                assert _bits(want) == _bits(ts.torch_sum(x, threads=threads)), (n, kind)
    finally:
        torch.set_num_threads(old)


_SUBPROCESS = textwrap.dedent("""
    import sys
    import numpy as np, torch
    from qops.quantization import _torch_sum as ts
    cap = sys.argv[1]
    torch.set_num_threads(1)
    assert torch.backends.cpu.get_cpu_capability().lower() == cap, \
        torch.backends.cpu.get_cpu_capability()
    assert ts.torch_cpu_capability() == cap
    rng = np.random.default_rng(7)
    lengths = list(range(0, 600)) + [int(n) for n in rng.integers(600, 5001, 150)] + %r
    bad = 0
    for n in lengths:
        for kind in (0, 1):
            x = rng.standard_normal(n).astype(np.float32)
            if kind:
                x = (x * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
            t = np.float32(torch.sum(torch.from_numpy(x)).item())
            bad += t.tobytes() != np.float32(ts.torch_sum(x)).tobytes()
    print("cases", 2 * len(lengths), "bad", bad)
""") % (list(_LONG[:6]) + [10 ** 6],)


def _capabilities():
    best = ts.torch_cpu_capability()
    return [c for c in ("default", "avx2", "avx512")
            if ("default", "avx2", "avx512").index(c) <= ("default", "avx2", "avx512").index(best)]


# issue 19 #18: each ATen capability this CPU can run (ATEN_CPU_CAPABILITY), same bits
@pytest.mark.parametrize("cap", _capabilities())
def test_issue19_torch_sum_each_capability(cap):
    torch_or_skip()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, ATEN_CPU_CAPABILITY=cap, PYTHONPATH=path)
    out = subprocess.run([sys.executable, "-c", _SUBPROCESS, cap], env=env, capture_output=True,
                         text=True, timeout=600, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("bad 0"), out.stdout


# issue 19 #18: the numpy cascade is the C loops' order, under every capability (all 8 lanes)
@pytest.mark.parametrize("cap", ["avx2", "avx512"])
def test_issue19_torch_sum_cascade_equals_literal_loops(cap):
    width = 8
    rng = np.random.default_rng(len(cap))
    lengths = list(range(0, 80)) + [127, 255, 256, 257, 1023, 1025, 4095, 4097, 16383,
                                    16385, 65537]
    for n in lengths:
        x = _data(rng, n, 1)
        assert _bits(ts.torch_sum(x, capability=cap)) == _bits(_literal_sum(x, width)), n


def test_issue19_torch_sum_arguments():
    assert ts.torch_sum(np.zeros(0, F32)) == 0
    assert _bits(ts.torch_sum(np.full(3, -0.0, F32))) == _bits(F32(0.0))  # 0 + (-0) = +0
    with pytest.raises(ValueError, match="1-D"):
        ts.torch_sum(np.zeros((2, 2), F32))
    with pytest.raises(ValueError, match="threads"):
        ts.torch_sum(np.zeros(3, F32), threads=0)
    with pytest.raises(ValueError, match="capability"):
        ts.torch_sum(np.zeros(3, F32), capability="sse")
    assert ts.torch_vector_width("avx512") == 8 and ts.torch_vector_width("default") == 8


# issue 19 #18: the capability (hence the vector width) is chosen as ATen chooses it
def test_issue19_torch_cpu_capability_rules(monkeypatch):
    skx = {"FMA3": True, "AVX2": True, "AVX512F": True, "AVX512VL": True, "AVX512BW": True,
           "AVX512DQ": True, "AVX512VNNI": False}  # AVX-512 without VNNI: still ATen's avx512
    zen3 = {"FMA3": True, "AVX2": True}
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    for feats, env, want in [(skx, None, "avx512"), (skx, "avx2", "avx2"),
                             (skx, "default", "default"), (skx, "AVX2", "avx512"),
                             (zen3, None, "avx2"), (zen3, "avx512", "avx2"), ({}, None, "default"),
                             ({"AVX2": True}, None, "default")]:
        monkeypatch.setattr(ts, "_cpu_features", lambda f=feats: f)
        if env is None:
            monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
        else:
            monkeypatch.setenv("ATEN_CPU_CAPABILITY", env)
        assert ts.torch_cpu_capability() == want, (feats, env)


def _three_batches(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(500_000).astype(F32) for _ in range(3)]


# issue 19 #18: three batches of 500,000 normals whose histogram total numpy's pairwise order
# puts 1 ulp off (1500000.0 vs 1500000.125), which flipped the L2 search's first bin
def test_issue19_histogram_observer_sum_order():
    obs = qq.HistogramObserver()
    batches = _three_batches(0)
    for x in batches:
        obs(x)
    total = ts.torch_sum(obs.histogram)
    assert total != np.sum(obs.histogram, dtype=F32)  # the data exposes the order
    scale, zp = obs.calculate_qparams()
    if ts.torch_vector_width() == 8:  # PyTorch 2.13 on default/AVX2 (measured)
        assert float(total) == 1500000.125
        assert _bits(scale[0]) == _bits(F32(0.030757760629057884)) and int(zp[0]) == 128
    try:
        import torch
    except ImportError:
        return
    import torch.ao.quantization.observer as to
    t = to.HistogramObserver()
    for x in batches:
        t(torch.from_numpy(x))
    np.testing.assert_array_equal(t.histogram.numpy(), obs.histogram)
    ts_, tz = t.calculate_qparams()
    assert _bits(ts_.numpy()) == _bits(scale) and int(tz[0]) == int(zp[0])


# issue 19 #18: the L2 error of every candidate range is summed in ATen's order
def test_issue19_histogram_l2_error_sum_matches_torch():
    torch = torch_or_skip()
    import torch.ao.quantization.observer as to
    rng = np.random.default_rng(5)
    a, b = to.HistogramObserver(), qq.HistogramObserver()
    for scale in (1.0, 3.0):
        x = (rng.standard_normal(200_000) * scale + 0.5).astype(F32)
        a(torch.from_numpy(x))
        b(x)
    np.testing.assert_array_equal(a.histogram.numpy(), b.histogram)
    bad = []
    for start in range(0, 900, 37):
        for end in range(2047, 1100, -41):
            want, got = a._compute_quantization_error(start, end), \
                b._compute_quantization_error(start, end)
            if _bits(want) != _bits(got):
                bad.append((start, end, want, got))
    assert bad == []


# issue 19 #18: more seeds of the issue's data, qparams equal to PyTorch's
@pytest.mark.parametrize("seed", [12, 17])
def test_issue19_histogram_observer_sum_order_more_seeds(seed):
    torch = torch_or_skip()
    import torch.ao.quantization.observer as to
    a, b = to.HistogramObserver(), qq.HistogramObserver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in _three_batches(seed):
            a(torch.from_numpy(x))
            b(x)
    ts_, tz = a.calculate_qparams()
    s, z = b.calculate_qparams()
    assert _bits(ts_.numpy()) == _bits(s) and int(tz[0]) == int(z[0])
