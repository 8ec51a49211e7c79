"""torch.sum of a 1-D float32 array, bit for bit: ATen's CPU cascade sum (SumKernel.cpp) in numpy.

Float32 addition is not associative, and PyTorch's observers compare such sums against
thresholds (HistogramObserver's total and L2 error), so the order of the additions is part of
the result. ATen adds a contiguous float32 row as 8-lane vectors (on every CPU: PyTorch 2.13
runs its AVX2 sum kernel under the AVX-512 capability too), four vector accumulators side by
side, each a cascade of
`2**p`-element chunks on up to four levels; then the scalar tail, then the lanes, in order.
From 32768 elements on and with more than one ATen thread, each thread sums its own chunk
first and the per-thread results are summed in turn.

Every sum here is float32 addition in the order given, through `np.add.accumulate` (strictly
sequential, never numpy's pairwise summation). ATen starts each accumulator at +0.0; starting
at the first element instead changes only the sign of a zero, and the final `0 + sum` of the
output store makes every zero result +0.0 either way.
"""
import os

import numpy as np

F32 = np.float32

__all__ = ["torch_sum", "torch_cpu_capability", "torch_vector_width"]

# at::internal::GRAIN_SIZE: below it (or on one thread) a reduction runs serially.
GRAIN_SIZE = 32768


def _cpu_features():
    """{feature: bool} of this CPU and OS, named as numpy names them (AVX512VL, FMA3, ...)."""
    for mod in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return dict(__import__(mod, fromlist=["__cpu_features__"]).__cpu_features__)
        except (ImportError, AttributeError):
            pass
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return {}
    names = {"fma": "FMA3", "avx2": "AVX2", "avx512f": "AVX512F", "avx512vl": "AVX512VL",
             "avx512bw": "AVX512BW", "avx512dq": "AVX512DQ"}
    return {v: k in flags for k, v in names.items()}


def torch_cpu_capability():
    """The ATen CPU capability PyTorch picks here: "avx512", "avx2" or "default".

    As ATen's `compute_cpu_capability`: the environment variable ATEN_CPU_CAPABILITY wins
    (only ever lowering it), else AVX-512 when the CPU has AVX512 F/VL/BW/DQ and FMA3, else
    AVX2 when it has AVX2 and FMA3. (qops' own `_fast` tiers are no guide: its avx512 tier
    also needs VNNI, which ATen's AVX-512 capability does not.)
    """
    feats = _cpu_features()
    fma = feats.get("FMA3", False)
    if (fma and feats.get("AVX512F", False) and feats.get("AVX512VL", False)
            and feats.get("AVX512BW", False) and feats.get("AVX512DQ", False)):
        best = "avx512"
    elif fma and feats.get("AVX2", False):
        best = "avx2"
    else:
        best = "default"
    order = ("default", "avx2", "avx512")
    forced = os.environ.get("ATEN_CPU_CAPABILITY", "")  # ATen compares case-sensitively
    if forced in order and order.index(forced) <= order.index(best):
        return forced
    return best


_detected = []


def torch_vector_width(capability=None):
    """float32 lanes of ATen's sum kernel for a capability: 8 on each of them.

    ATen's AVX-512 Vectorized<float> has 16 lanes, but PyTorch 2.13 registers the sum kernel
    without its AVX-512 variant (REGISTER_DISPATCH, not ALSO_REGISTER_AVX512_DISPATCH), so
    the AVX-512 capability runs the AVX2 kernel: measured on an Intel Xeon (AVX-512, AMX),
    torch.sum equals the 8-lane cascade on 3000 of 3000 lengths, the 16-lane one on 624.
    """
    if capability is None:
        # ATen too decides once per process.
        if not _detected:
            _detected.append(torch_cpu_capability())
        capability = _detected[0]
    cap = capability
    if cap not in ("default", "avx2", "avx512"):
        raise ValueError(f"capability must be 'default', 'avx2' or 'avx512'; got {cap!r}")
    return 8


def _seq(rows):
    """Sequential float32 sum over axis 0 (shape rows.shape[1:]); 0 if there are no rows."""
    if rows.shape[0] == 0:
        return np.zeros(rows.shape[1:], dtype=F32)
    return np.add.accumulate(rows, axis=0, dtype=F32)[-1]


def _seq_groups(rows, step):
    """Sequential sums of consecutive groups of `step` rows (whole groups only) and the count."""
    n = rows.shape[0] // step
    g = rows[:n * step].reshape((n, step) + rows.shape[1:])
    return np.add.accumulate(g, axis=1, dtype=F32)[:, -1], n * step


def _ceil_log2(x):
    return 1 if x <= 2 else int(x - 1).bit_length()


def _multi_row_sum(rows):
    """ATen's multi_row_sum over axis 0: chunks of 2**p rows cascaded on four levels."""
    size = rows.shape[0]
    step = 1 << max(4, _ceil_log2(size) // 4)
    # Level 0 sums `step` rows, level 1 `step` level-0 sums, level 2 `step` level-1 sums;
    # level 3 takes every level-2 sum. Partial groups stay in their level's accumulator.
    lvl0, used0 = _seq_groups(rows, step)
    lvl1, used1 = _seq_groups(lvl0, step)
    lvl2, used2 = _seq_groups(lvl1, step)
    acc0 = _seq(rows[used0:])
    acc1 = _seq(lvl0[used1:])
    acc2 = _seq(lvl1[used2:])
    acc3 = _seq(lvl2)
    return ((acc0 + acc1) + acc2) + acc3


def _row_sum(elems):
    """ATen's row_sum: four interleaved accumulators (ilp), then the remainder, then 1..3."""
    size = elems.shape[0]
    size_ilp = size // 4
    partial = _multi_row_sum(elems[:size_ilp * 4].reshape((size_ilp, 4) + elems.shape[1:]))
    acc = partial[0]
    for r in elems[size_ilp * 4:]:
        acc = acc + r
    return ((acc + partial[1]) + partial[2]) + partial[3]


def _inner_sum(x, width):
    """One call of cascade_sum's loop over a contiguous row `x`."""
    n = x.shape[0]
    if n < width:
        return F32(F32(0) + _row_sum(x))
    nvec = n // width
    lanes = _row_sum(x[:nvec * width].reshape(nvec, width))
    # final_acc: the scalar tail first, then the vector's lanes in order.
    tail = np.concatenate([x[nvec * width:], lanes.astype(F32)])
    return F32(F32(0) + _seq(tail))


def _chunks(n, threads):
    """(begin, end) of each thread's share in at::parallel_for(0, n, GRAIN_SIZE) on OpenMP."""
    nt = min(threads, -(-n // GRAIN_SIZE))
    chunk = -(-n // nt)
    return [(b, min(n, b + chunk)) for b in range(0, n, chunk)]


def torch_sum(x, capability=None, threads=1):
    """`torch.sum(x)` of a 1-D float32 array on CPU, the same float32 bits.

    Parameters
    ----------
    x : 1-D array, taken as float32 (any stride; summed in index order as a contiguous copy,
        which is what ATen does for a contiguous tensor)
    capability : "default", "avx2", "avx512" or None (PyTorch's choice on this machine,
        `torch_cpu_capability()`)
    threads : int, ATen's thread count (`torch.get_num_threads()`); it matters from 32768
        elements on, where each thread sums a chunk first
    """
    a = np.ascontiguousarray(x, dtype=F32)
    if a.ndim != 1:
        raise ValueError(f"x must be 1-D; got shape {a.shape}")
    if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive int; got {threads!r}")
    width = torch_vector_width(capability)
    n = a.shape[0]
    if n == 0:
        return F32(0)
    if n < GRAIN_SIZE or threads == 1:
        return _inner_sum(a, width)
    # two_pass_reduction: a zeroed buffer of one slot per thread, each thread adds its
    # chunk's sum into its slot, then the buffer is summed like any row.
    buf = np.zeros(int(threads), dtype=F32)
    for t, (b, e) in enumerate(_chunks(n, int(threads))):
        buf[t] = F32(0) + _inner_sum(a[b:e], width)
    return _inner_sum(buf, width)
