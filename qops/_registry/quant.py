"""Registry entries of the quant family: quantize, dequantize, requantize, clone."""
import numpy as np

import qops
from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

DTYPES = (qops.quint8, qops.qint8, qops.qint32)


def _floats(r, n, scale, zp):
    """Random floats with many exact half-integer ties of x/scale, plus NaN and infinities."""
    x = (r.integers(-300, 300, size=n) + r.choice([0.0, 0.5, 0.25], size=n)) * scale
    x = x.astype(np.float32)
    noisy = r.random(n) < 0.3
    x[noisy] = r.normal(0, 50 * scale, size=int(noisy.sum()))
    if n >= 4:
        x[:3] = [np.nan, np.inf, -np.inf]
    return x


def _xs(seed):
    r = u.rng(seed)
    out = []
    for n in u.EDGE_LENGTHS:
        out.append(_floats(r, n, 0.25, 0))
    out.append(_floats(r, 4097, 0.1, 0).reshape(17, 241)[:, ::3])      # strided rows
    out.append(_floats(r, 300, 0.5, 0)[::-1])                           # negative stride
    return out


def _qpt_cases():
    cases = []
    for i, x in enumerate(_xs(0)):
        for d in DTYPES:
            for scale, zp in ((0.25, 0), (0.25, 1 if d is not qops.quint8 else 3),
                              (0.1, d.qmin), (1e-3, d.qmax if d.qmax < 300 else 77), (37.0, 0)):
                cases.append(Case((x, scale, zp, d), label=f"n{x.size}-{d.name}-s{scale}-z{zp}"))
    cases.append(Case((np.zeros((2, 0, 3), np.float32), 0.5, 1, qops.quint8), label="empty"))
    cases.append(Case((np.float64(1.25), 0.5, 1, qops.quint8), label="0-d float64"))
    cases.append(Case((np.arange(-4, 4, dtype=np.float16), 0.5, 1, qops.qint8), label="float16"))
    return cases


def _qpt_strategy():
    from hypothesis import strategies as st

    def build(args):
        (d, scale, zp), shape, seed, tie_scale = args
        r = u.rng(seed)
        n = int(np.prod(shape))
        x = ((r.integers(-400, 400, size=n) + r.choice([0.0, 0.5], size=n))
             * (scale if tie_scale else 0.37))
        x = x + r.normal(0, scale, size=n) * (r.random(n) < 0.5)
        return Case((x.astype(np.float32).reshape(shape), scale, zp, d))
    return st.tuples(u.qparams_strategy(DTYPES),
                     u.shape_strategy(), st.integers(0, 2**32 - 1), st.booleans()).map(build)


def _torch_qpt(case):
    import torch
    x, scale, zp, d = case.args
    t = torch.from_numpy(u._c(np.asarray(x, dtype=np.float32)))
    return lambda: torch.quantize_per_tensor(t, scale, zp, u.torch_dtype(d))


def _qpc_case(r, shape, axis, d, layout="c"):
    c = shape[axis]
    scales = r.choice([0.5, 0.25, 0.1, 0.013, 3.0], size=c)
    zps = r.integers(max(d.qmin, -500), min(d.qmax, 500) + 1, size=c)
    x = (r.integers(-300, 300, size=shape) + r.choice([0.0, 0.5], size=shape))
    others = tuple(i for i in range(len(shape)) if i != axis)
    x = (x * np.expand_dims(scales, others)).astype(np.float32)
    if x.size >= 3:
        x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    return Case((u._layout(x, layout), scales, zps, axis, d),
                label=f"{shape}-ax{axis}-{d.name}-{layout}")


def _qpc_cases():
    r = u.rng(1)
    cases = []
    for d in DTYPES:
        # short runs of one channel go through position tables: blocks of whole rows (100x64
        # ax1: 32-row blocks, the last one short), tiles of rows longer than the table (3x40x60
        # ax1, 7x2100 ax1); runs of 128 and more take the one-channel loop (2x3x130 ax1)
        for shape, axis in (((3, 17), 0), ((4, 5, 16), 1), ((2, 3, 65), 2), ((1,), 0),
                            ((5, 0, 2), 0), ((8, 3, 3, 3), 0), ((100, 64), 1), ((3, 40, 60), 1),
                            ((7, 2100), 1), ((2, 3, 130), 1)):
            for layout in ("c", "t"):
                cases.append(_qpc_case(r, shape, axis, d, layout))
    return cases


def _qpc_strategy():
    from hypothesis import strategies as st

    def build(args):
        shape, axis_frac, seed, d, layout = args
        axis = min(int(axis_frac * len(shape)), len(shape) - 1)
        return _qpc_case(u.rng(seed), shape, axis, d, layout)
    return st.tuples(u.shape_strategy(min_side=1), st.floats(0, 1), st.integers(0, 2**32 - 1),
                     st.sampled_from(DTYPES), st.sampled_from(["c", "t", "neg"])).map(build)


def _torch_qpc(case):
    import torch
    x, scales, zps, axis, d = case.args
    t = torch.from_numpy(u._c(x))
    s = torch.from_numpy(np.asarray(scales, np.float64))
    z = torch.from_numpy(np.asarray(zps, np.int64))
    return lambda: torch.quantize_per_channel(t, s, z, axis, u.torch_dtype(d))


def _dq_cases():
    r = u.rng(2)
    cases = []
    for d in DTYPES:
        for n in u.EDGE_LENGTHS:
            cases.append(Case((u.random_qtensor(r, (n,), d),), label=f"pt-{d.name}-n{n}"))
        cases.append(Case((u.random_qtensor(r, (7, 33), d, layout="t"),), label=f"pt-{d.name}-t"))
        cases.append(Case((qops.quantize_per_channel(
            r.normal(size=(5, 9)).astype(np.float32), r.uniform(0.01, 1, 5),
            r.integers(-5, 5, 5) + (128 if d is qops.quint8 else 0), 0, d),),
            label=f"pc-{d.name}"))
        cases.append(Case((qops.quantize_per_channel(
            r.normal(size=(2, 3, 70)).astype(np.float32), r.uniform(0.01, 1, 70),
            r.integers(0, 5, 70), 2, d),),
            label=f"pc-{d.name}-ax2"))
        # float32 scales, as observers give: the 8-bit kernels multiply in float32 then
        cases.append(Case((qops.quantize_per_channel(
            r.normal(size=(3, 6, 40)).astype(np.float32),
            r.uniform(1e-6, 1e3, 6).astype(np.float32),
            r.integers(-3, 3, 6) + (128 if d is qops.quint8 else 0), 1, d),),
            label=f"pc-{d.name}-f32"))
        # runs shorter than 16 use position tables: blocks of 32 rows (the last one short) and
        # tiles of rows longer than the table, with double and with float32 scales
        for shape, label in (((100, 64), "rows"), ((3, 2100), "tiles")):
            for sdt in (np.float64, np.float32):
                c = shape[1]
                cases.append(Case((qops.quantize_per_channel(
                    r.normal(size=shape).astype(np.float32), r.uniform(0.01, 1, c).astype(sdt),
                    r.integers(-3, 3, c) + (128 if d is qops.quint8 else 0), 1, d),),
                    label=f"pc-{d.name}-{label}-{np.dtype(sdt).name}"))
    cases += [Case((q,), label=label) for q, label in _qint32_extremes(r)]
    return cases


def _qint32_extremes(r):
    """qint32 tensors whose q - zero_point leaves int32 (it wraps, as in PyTorch), with
    lengths that cover vector bodies and tails; per channel the subtraction is in float."""
    out = []
    for n in (1, 7, 8, 9, 33, 1000):
        raw = r.integers(-2 ** 31, 2 ** 31, size=n, dtype=np.int64)
        raw[:min(n, 4)] = [2 ** 31 - 1, -2 ** 31, 0, -1][:min(n, 4)]
        raw = raw.astype(np.int32)
        for zp in (-2 ** 31, 2 ** 31 - 1, -1000, 77):
            out.append((qops.make_per_tensor_quantized_tensor(raw, 0.5, zp),
                        f"qint32-wrap-n{n}-z{zp}"))
    raw = r.integers(-2 ** 31, 2 ** 31, size=(3, 40), dtype=np.int64).astype(np.int32)
    out.append((qops.make_per_channel_quantized_tensor(raw, [0.5, 1e-3, 3.0],
                                                       [-2 ** 31, 2 ** 31 - 1, 5], 0),
                "qint32-pc-extreme"))
    return out


def _dq_strategy():
    from hypothesis import strategies as st
    pt = u.qtensor_strategy(dtype=None)
    pc = _qpc_strategy().map(lambda c: qops.quantize_per_channel(*c.args))
    return st.one_of(pt, pc).map(lambda q: Case((q,)))


def _torch_dq(case):
    t = u.to_torch(case.args[0])
    return lambda: t.dequantize()


def _rq_cases():
    r = u.rng(3)
    cases = []
    for d in (qops.quint8, qops.qint8):
        for n in u.EDGE_LENGTHS:
            q = u.random_qtensor(r, (n,), d, scale=0.1, zero_point=3)
            cases.append(Case((q, 0.2, 5, d), label=f"{d.name}-n{n}-ties"))
            cases.append(Case((q, 0.0371, d.qmax, d), label=f"{d.name}-n{n}"))
        cases.append(Case((u.random_qtensor(r, (9, 31), d, layout="t"), 0.05, 0, qops.qint32),
                          label="to-qint32"))
    for q, label in _qint32_extremes(r):
        if not q.is_per_channel:
            cases.append(Case((q, 2.0 ** 20, 3, qops.qint32), label=label))
            cases.append(Case((q, 1e7, 100, qops.quint8), label=label + "-to-quint8"))
    return cases


def _rq_strategy():
    from hypothesis import strategies as st

    def build(args):
        q, (d, scale, zp) = args
        return Case((q, scale, zp, d))
    return st.tuples(u.qtensor_strategy(), u.qparams_strategy()).map(build)


def _torch_rq(case):
    import torch
    q, scale, zp, d = case.args
    t = u.to_torch(q)
    return lambda: torch.quantize_per_tensor(t.dequantize(), scale, zp, u.torch_dtype(d))


def _clone_cases():
    r = u.rng(4)
    cases = []
    for d in DTYPES:
        for n in u.EDGE_LENGTHS:
            cases.append(Case((u.random_qtensor(r, (n,), d),), label=f"{d.name}-n{n}"))
        for layout in ("t", "neg"):
            cases.append(Case((u.random_qtensor(r, (33, 70), d, layout=layout),),
                              label=f"{d.name}-{layout}"))
        cases.append(Case((u.random_qtensor(r, (300, 301), d),), label=f"{d.name}-300x301"))
    cases.append(Case((qops.quantize_per_channel(r.normal(size=(3, 4, 5)).astype(np.float32),
                                                 np.array([0.1, 0.2, 0.3]), np.array([1, 2, 3]), 0,
                                                 qops.qint8),), label="per-channel"))
    return cases


def _clone_strategy():
    return u.qtensor_strategy(dtype=None).map(lambda q: Case((q,)))


def _torch_clone(case):
    t = u.to_torch(case.args[0])
    return lambda: t.clone()


def _clone(q):
    return q.clone()


def channels_last(r, shape, d=qops.quint8):
    """A random QTensor of `shape` (N, C, ...) whose memory is channels last (N, ..., C)."""
    perm = (0,) + tuple(range(2, len(shape))) + (1,)
    raw = r.integers(d.qmin, d.qmax + 1, size=tuple(shape[i] for i in perm)).astype(d.storage)
    return qops.make_per_tensor_quantized_tensor(raw.transpose(np.argsort(perm)), 0.1, 3)


def _contiguous_cases():
    r = u.rng(5)
    cases = []
    for d in DTYPES:
        # 16x16 tiles with strips left over on both sides, whole tiles, 3-d, size-1 axes
        for shape in ((2, 5, 7, 3), (1, 17, 33, 16), (3, 64, 16, 16), (2, 3, 4, 5, 6),
                      (1, 1, 19, 1), (2, 40, 1, 37)):
            cases.append(Case((channels_last(r, shape, d),), label=f"{d.name}-cl-{shape}"))
        for layout in ("t", "neg", "c"):
            cases.append(Case((u.random_qtensor(r, (33, 70), d, layout=layout),),
                              label=f"{d.name}-{layout}"))
        # a transposed middle pair (memory N, H, C, W): not one batched transpose
        raw = r.integers(0, 100, size=(2, 6, 5, 7)).astype(d.storage)
        cases.append(Case((qops.make_per_tensor_quantized_tensor(raw.transpose(0, 2, 1, 3),
                                                                 0.1, 3),),
                          label=f"{d.name}-mid"))
    return cases


def _contiguous_strategy():
    from hypothesis import strategies as st
    shapes = st.lists(st.integers(1, 40), min_size=2, max_size=5).map(tuple).filter(
        lambda s: int(np.prod(s)) <= 20000)
    return st.tuples(shapes, st.integers(0, 2**32 - 1), st.sampled_from(DTYPES)).map(
        lambda a: Case((channels_last(u.rng(a[1]), a[0], a[2]),)))


def _torch_contiguous(case):
    import torch
    t = u.to_torch(case.args[0])
    if t.dim() == 4:        # the same channels-last memory (to_torch makes a C-order copy)
        t = t.contiguous(memory_format=torch.channels_last)
    return lambda: t.contiguous()


def _contiguous(q):
    return q.contiguous()


def _bench_x():
    return u.rng(10).normal(0, 1, size=(1, 64, 112, 112)).astype(np.float32)


def _bench_x_last():
    return np.ascontiguousarray(_bench_x().transpose(0, 2, 3, 1))


SPECS = [
    OpSpec("quantize_per_tensor", "quant", ("quantize_per_tensor",), qops.quantize_per_tensor,
           _qpt_cases, _qpt_strategy,
           bench={"64x112x112_quint8": lambda: Case((_bench_x(), 0.02, 128, qops.quint8)),
                  "64x112x112_qint32": lambda: Case((_bench_x(), 0.02, 0, qops.qint32))},
           torch=_torch_qpt),
    OpSpec("quantize_per_channel", "quant", ("quantize_per_channel",), qops.quantize_per_channel,
           _qpc_cases, _qpc_strategy,
           bench={"64x112x112_ax1": lambda: Case((_bench_x(), np.linspace(0.01, 0.05, 64),
                                                  np.arange(64) + 100, 1, qops.quint8)),
                  # channels last: runs of one element per channel
                  "112x112x64_ax3": lambda: Case((_bench_x_last(), np.linspace(0.01, 0.05, 64),
                                                  np.arange(64) + 100, 3, qops.quint8))},
           torch=_torch_qpc),
    OpSpec("dequantize", "quant", ("dequantize_per_tensor", "dequantize_per_channel"),
           qops.dequantize, _dq_cases, _dq_strategy,
           bench={"64x112x112": lambda: Case((qops.quantize_per_tensor(
                      _bench_x(), 0.02, 128, qops.quint8),)),
                  "64x112x112_per_channel": lambda: Case((qops.quantize_per_channel(
                      _bench_x(), np.linspace(0.01, 0.05, 64), np.arange(64) + 100, 1,
                      qops.quint8),)),
                  # scales that are float32 values, as observers produce
                  "64x112x112_per_channel_f32": lambda: Case((qops.quantize_per_channel(
                      _bench_x(), np.linspace(0.01, 0.05, 64, dtype=np.float32),
                      np.arange(64) + 100, 1, qops.quint8),)),
                  "112x112x64_per_channel_ax3": lambda: Case((qops.quantize_per_channel(
                      _bench_x_last(), np.linspace(0.01, 0.05, 64, dtype=np.float32),
                      np.arange(64) + 100, 3, qops.quint8),))},
           torch=_torch_dq),
    OpSpec("requantize", "quant", ("requantize_per_tensor",), F.requantize, _rq_cases,
           _rq_strategy,
           bench={"64x112x112": lambda: Case((qops.quantize_per_tensor(
                      _bench_x(), 0.02, 128, qops.quint8), 0.03, 120, qops.quint8))},
           torch=_torch_rq),
    # QTensor.contiguous: its copy transposes channels-last blocks in 16x16 tiles
    OpSpec("contiguous", "quant", ("copy_raw",), _contiguous, _contiguous_cases,
           _contiguous_strategy,
           bench={"8x64x56x56_channels_last":
                  lambda: Case((channels_last(u.rng(11), (8, 64, 56, 56)),))},
           torch=_torch_contiguous),
    OpSpec("clone", "quant", ("copy_raw",), _clone, _clone_cases, _clone_strategy,
           bench={"64x112x112": lambda: Case((qops.quantize_per_tensor(
                      _bench_x(), 0.02, 128, qops.quint8),))},
           torch=_torch_clone),
]
