"""Registry entries of the embedding family: row-wise quantization (prepack), the 8- and 4-bit
quantized embedding-bag lookups and the float embedding bag."""
import numpy as np

from qops import functional as F
from qops._ops.embedding import EmbeddingPackedParams
from qops._registry import Case, OpSpec
from qops._registry import _util as u

F32 = np.float32
MODES = ("sum", "mean", "max")
#: embedding dims around the 8- and 16-float vector widths (and odd ones for 4-bit packing)
DIMS = (1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128)
#: 4-bit tables need even dims: tails of 2 to 14 values after the 16-value vector steps
DIMS4 = (2, 4, 14, 16, 18, 30, 32, 34, 62, 64, 66, 128)


# -- inputs -----------------------------------------------------------------------------------

def random_weight(r, n, d):
    """A float table with rows of different ranges, a constant row and a row of zeros."""
    w = (r.standard_normal((n, d)) * r.uniform(0.01, 5.0, (n, 1))
         + r.standard_normal((n, 1))).astype(F32)
    if n > 2:
        w[1] = F32(0.75)
        w[2] = F32(0.0)
    return w


def random_packed(r, n, d, dtype):
    """A table of random raw values with random float qparams (no float table needed)."""
    qmax = 255 if dtype == "quint8" else 15
    q = r.integers(0, qmax + 1, size=(n, d), dtype=np.uint8)
    scales = r.uniform(1e-3, 0.1, n).astype(F32)
    zps = r.uniform(0, qmax, n).astype(F32)
    if dtype == "quint4x2":
        from qops._ops.embedding import pack_nibbles
        q = pack_nibbles(q)
    return EmbeddingPackedParams(q, scales, zps, dtype, embedding_dim=d)


def random_bags(r, n_rows, n_bags, max_len, empty_frac=0.1):
    """(indices, offsets) of n_bags bags of 0..max_len random rows (some bags empty)."""
    lengths = r.integers(0, max_len + 1, n_bags)
    lengths[r.random(n_bags) < empty_frac] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    indices = r.integers(0, max(n_rows, 1), int(lengths.sum())).astype(np.int64)
    return indices, offsets


def _bag_case(table, indices, offsets, mode="sum", psw=None, last=False, pad=None, label=""):
    kw = {"mode": mode}
    if psw is not None:
        kw["per_sample_weights"] = psw
    if last:
        offsets = np.concatenate([offsets, [indices.shape[0]]]).astype(offsets.dtype)
        kw["include_last_offset"] = True
    if pad is not None:
        kw["padding_idx"] = pad
    return Case((table, indices, offsets), kw, label=label)


def _lookup_cases(make_table, seed, dims=DIMS):
    """Edge cases of a bag lookup; make_table(r, n, d) builds the first argument."""
    r = u.rng(seed)
    out = []
    for d in dims:
        t = make_table(r, 23, d)
        idx, off = random_bags(r, 23, 9, 6)
        for mode in MODES:
            out.append(_bag_case(t, idx, off, mode, label=f"d{d}-{mode}"))
        psw = r.uniform(-2, 2, idx.shape[0]).astype(F32)
        out.append(_bag_case(t, idx, off, "sum", psw=psw, label=f"d{d}-psw"))
    t = make_table(r, 40, 34)
    idx, off = random_bags(r, 40, 30, 12)
    idx[::3] = 5
    for mode in MODES:
        out.append(_bag_case(t, idx, off, mode, pad=5, label=f"pad-{mode}"))
        out.append(_bag_case(t, idx, off, mode, last=True, label=f"last-{mode}"))
        out.append(_bag_case(t, idx.astype(np.int32), off.astype(np.int32), mode,
                             label=f"int32-{mode}"))
    out.append(_bag_case(t, idx, off, "sum", psw=r.uniform(0, 1, idx.shape[0]).astype(F32),
                         last=True, pad=5, label="psw-last-pad"))
    out.append(_bag_case(t, idx, off, "mean", pad=-35, label="pad-negative"))
    # D = 64: the register-accumulator path, with padding and per-sample weights
    t64 = make_table(r, 40, 64)
    out.append(_bag_case(t64, idx, off, "sum", psw=r.uniform(-1, 1, idx.shape[0]).astype(F32),
                         pad=5, label="d64-psw-pad"))
    out.append(_bag_case(t64, idx, off, "mean", pad=5, label="d64-mean-pad"))
    two_d = r.integers(0, 40, (7, 5)).astype(np.int64)
    for mode in MODES:
        out.append(Case((t, two_d, None), {"mode": mode}, label=f"2d-{mode}"))
    out.append(_bag_case(t, np.zeros(0, np.int64), np.zeros(4, np.int64), "mean",
                         label="all-empty"))
    out.append(_bag_case(t, np.zeros(0, np.int64), np.zeros(0, np.int64), "sum",
                         label="no-bags"))
    one = make_table(r, 1, 16)
    out.append(_bag_case(one, np.zeros(50, np.int64), np.array([0, 10, 10], np.int64), "sum",
                         label="one-row-long-bag"))
    big = make_table(r, 3000, 64)
    idx, off = random_bags(r, 3000, 700, 30)
    out.append(_bag_case(big, idx, off, "sum", label="3000x64-700bags"))
    out.append(_bag_case(big, idx, off, "max", label="3000x64-700bags-max"))
    return out


def _lookup_strategy(make_table, even=False):
    from hypothesis import strategies as st

    def build(args):
        seed, n, d, n_bags, max_len, mode, flags = args
        r = u.rng(seed)
        d = d + (d & 1) if even else d
        t = make_table(r, n, d)
        idx, off = random_bags(r, n, n_bags, max_len)
        psw = r.uniform(-3, 3, idx.shape[0]).astype(F32) if (flags & 1 and mode == "sum") \
            else None
        pad = int(r.integers(-n, n)) if flags & 2 else None
        return _bag_case(t, idx, off, mode, psw=psw, last=bool(flags & 4), pad=pad,
                         label=f"{n}x{d}-{n_bags}bags-{mode}-f{flags}")
    return st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 70),
                     st.integers(0, 12), st.integers(0, 10), st.sampled_from(MODES),
                     st.integers(0, 7)).map(build)


# -- PyTorch oracles ----------------------------------------------------------------------------

def _fused_rows(t):
    """PyTorch's fused rows of table `t`: values, then f32 scale and bias (8-bit) or f16 scale
    and bias (4-bit), exactly as embedding_bag_prepack stores them."""
    tail = t.fused[:, -8:].copy().view(F32)
    if t.dtype == "quint4x2":
        tail = tail.astype(np.float16)
    return np.ascontiguousarray(np.concatenate([t.data, tail.view(np.uint8)], axis=1))


def _normalized(case):
    """(indices, offsets with end, weights, mode, padding) of a bag case, as the op sees them."""
    from qops._ops.embedding import _bag_args
    table, input, offsets = case.args
    if not isinstance(table, EmbeddingPackedParams):
        input, table = table, input
    kw = case.kwargs
    n = table.num_embeddings if isinstance(table, EmbeddingPackedParams) else table.shape[0]
    return _bag_args(input, offsets, kw.get("include_last_offset", False),
                     kw.get("per_sample_weights"), kw.get("mode", "sum"), kw.get("padding_idx"),
                     n)


def _without_padding(idx, off, psw, pad):
    """The bags with every padding entry removed (PyTorch's quantized ops have no padding_idx)."""
    keep = idx != pad
    ends = np.concatenate([[0], np.cumsum(keep)])
    new_off = ends[off]
    return idx[keep], new_off, None if psw is None else psw[keep]


def _torch_quantized(case):
    import torch
    t = case.args[0]
    idx, off, psw, mode, pad = _normalized(case)
    idx, off, psw = _without_padding(idx, off, psw, pad)
    rows = torch.from_numpy(_fused_rows(t))
    op = (torch.ops.quantized.embedding_bag_byte_rowwise_offsets if t.dtype == "quint8"
          else torch.ops.quantized.embedding_bag_4bit_rowwise_offsets)
    ti, to = torch.from_numpy(idx), torch.from_numpy(off)
    tw = None if psw is None else torch.from_numpy(psw)
    counts = torch.from_numpy(np.maximum(np.diff(off), 1).astype(F32))[:, None]
    if mode == 0:
        return lambda: op(rows, ti, to, False, 0, False, tw, None, True)
    if mode == 1:
        return lambda: op(rows, ti, to, False, 0, False, None, None, True) / counts
    # max: PyTorch's float max over the rows its quantized lookup returns for each index
    n = t.num_embeddings
    every = torch.arange(n, dtype=torch.int64)
    table = op(rows, every, torch.arange(n + 1, dtype=torch.int64), False, 0, False, None,
               None, True)
    return lambda: torch.nn.functional.embedding_bag(ti, table, to, mode="max",
                                                     include_last_offset=True)


# The details (why mean and max need a derived oracle) are in docs/semantics.md §20: PyTorch's
# quantized embedding-bag ops ignore `mode` and have no padding_idx, so the sum is
# embedding_bag_byte/_4bit_rowwise_offsets on the same fused rows with padding entries removed,
# mean is that sum / f32(count), max is F.embedding_bag(mode='max') over PyTorch's own rows.
_Q_TOLERANCE = "exact (mean and max against PyTorch's sum and rows: its quantized ops only sum)"


def _torch_float(case):
    import torch
    input, w, offsets = case.args
    kw = dict(case.kwargs)
    if kw.get("per_sample_weights") is not None:
        kw["per_sample_weights"] = torch.from_numpy(kw["per_sample_weights"])
    tw = torch.from_numpy(np.ascontiguousarray(w))
    ti = torch.from_numpy(input)
    to = None if offsets is None else torch.from_numpy(offsets)
    return lambda: torch.nn.functional.embedding_bag(ti, tw, to, **kw)


def _torch_prepack(case):
    import torch
    from torch.ao.quantization.observer import PerChannelMinMaxObserver
    w, dtype = case.args
    dt = torch.quint8 if dtype == "quint8" else torch.quint4x2
    tw = torch.from_numpy(w)

    def run():
        obs = PerChannelMinMaxObserver(dtype=dt, qscheme=torch.per_channel_affine_float_qparams,
                                       ch_axis=0)
        obs(tw)
        s, z = obs.calculate_qparams()
        q = torch.quantize_per_channel(tw, s.float(), z.float(), 0, dt)
        # quint4x2 int_repr is flat (two values a byte across the whole tensor)
        raw = q.int_repr().numpy().reshape(w.shape[0], -1)
        return (raw, s.float().numpy(), z.float().numpy())
    return run


def _input_first(case):
    """A lookup case as F.embedding_bag takes it: (input, weight, offsets)."""
    table, input, offsets = case.args
    return Case((input, table, offsets), case.kwargs, case.label)


def _prepack_runner(case):
    def run():
        p = F.embedding_bag_prepack(*case.args)
        return (np.ascontiguousarray(p.data), p.scales, p.zero_points)
    return run


def _prepack_cases():
    r = u.rng(61)
    out = []
    for dtype in ("quint8", "quint4x2"):
        for d in (DIMS if dtype == "quint8" else DIMS4):
            out.append(Case((random_weight(r, 11, d), dtype), label=f"{dtype}-d{d}"))
        out.append(Case((np.zeros((3, 6), F32), dtype), label=f"{dtype}-zeros"))
        out.append(Case((np.full((2, 8), -1e-9, F32), dtype), label=f"{dtype}-tiny-const"))
        tiny = (r.standard_normal((4, 40)) * 1e-7).astype(F32)
        out.append(Case((tiny, dtype), label=f"{dtype}-range-below-eps"))
        out.append(Case((random_weight(r, 2000, 64), dtype), label=f"{dtype}-2000x64"))
        out.append(Case(((r.standard_normal((5, 34)) * 1e4).astype(F32), dtype),
                        label=f"{dtype}-wide"))
    return out


def _prepack_strategy():
    from hypothesis import strategies as st

    def build(args):
        seed, n, d, dtype, scale = args
        d = d + (d & 1) if dtype == "quint4x2" else d
        w = (random_weight(u.rng(seed), n, d) * F32(scale)).astype(F32)
        return Case((w, dtype), label=f"{dtype}-{n}x{d}-x{scale:g}")
    return st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 70),
                     st.sampled_from(["quint8", "quint4x2"]),
                     st.sampled_from([1.0, 1e-3, 1e-6, 100.0, 1e5])).map(build)


# -- benchmarks ---------------------------------------------------------------------------------

def _bench_bags(dtype, n, d, n_bags, length, mode="sum", seed=71):
    def build():
        r = u.rng(seed)
        t = random_packed(r, n, d, dtype) if dtype != "float" else \
            r.standard_normal((n, d)).astype(F32)
        idx = r.integers(0, n, n_bags * length).astype(np.int64)
        off = np.arange(n_bags, dtype=np.int64) * length
        case = Case((t, idx, off), {"mode": mode}, label=f"{n}x{d}-{n_bags}x{length}-{mode}")
        return _input_first(case) if dtype == "float" else case
    return build


def _bench_prepack():
    return Case((u.rng(72).standard_normal((100000, 64)).astype(F32), "quint8"))


SPECS = [
    OpSpec("embedding_bag_prepack", "embedding", ("quantize_rows",), F.embedding_bag_prepack,
           _prepack_cases, _prepack_strategy,
           bench={"prepack_100000x64": _bench_prepack,
                  "prepack_4bit_100000x64": lambda: Case((_bench_prepack().args[0],
                                                          "quint4x2"))},
           torch=_torch_prepack, runner=_prepack_runner,
           tolerance="exact"),
    OpSpec("embedding_bag_byte", "embedding", ("embedding_bag_8bit",), F.embedding_bag_byte,
           lambda: _lookup_cases(lambda r, n, d: random_packed(r, n, d, "quint8"), 62),
           lambda: _lookup_strategy(lambda r, n, d: random_packed(r, n, d, "quint8")),
           bench={"1000000x64-10000x20": _bench_bags("quint8", 1000000, 64, 10000, 20),
                  "1000000x64-10000x20-mean": _bench_bags("quint8", 1000000, 64, 10000, 20,
                                                          "mean"),
                  "100000x128-2048x40": _bench_bags("quint8", 100000, 128, 2048, 40),
                  # a table that stays in cache: compute, not memory, is the limit
                  "1000x32-10000x20": _bench_bags("quint8", 1000, 32, 10000, 20)},
           torch=_torch_quantized, tolerance=_Q_TOLERANCE),
    OpSpec("embedding_bag_4bit", "embedding", ("embedding_bag_4bit",), F.embedding_bag_4bit,
           lambda: _lookup_cases(lambda r, n, d: random_packed(r, n, d, "quint4x2"), 63, DIMS4),
           lambda: _lookup_strategy(lambda r, n, d: random_packed(r, n, d, "quint4x2"), True),
           bench={"1000000x64-10000x20": _bench_bags("quint4x2", 1000000, 64, 10000, 20),
                  "100000x128-2048x40": _bench_bags("quint4x2", 100000, 128, 2048, 40)},
           torch=_torch_quantized, tolerance=_Q_TOLERANCE),
    OpSpec("embedding_bag", "embedding", ("embedding_bag_f32",), F.embedding_bag,
           lambda: [_input_first(c) for c in
                    _lookup_cases(lambda r, n, d: random_weight(r, n, d), 64)],
           lambda: _lookup_strategy(lambda r, n, d: random_weight(r, n, d)).map(_input_first),
           bench={"1000000x64-10000x20": _bench_bags("float", 1000000, 64, 10000, 20),
                  "100000x128-2048x40": _bench_bags("float", 100000, 128, 2048, 40)},
           torch=_torch_float,
           tolerance="exact"),
]
