"""Registry entries of the reduce family: max, min, mean."""
import numpy as np

import qops
from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

DTYPES = (qops.quint8, qops.qint8)


def _same_0d(a, b):
    """`a` reshaped to `b`'s shape when one is 0-d and the other (1,) (canon()'s artefact)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape != b.shape \
            and {a.shape, b.shape} == {(), (1,)}:
        return a.reshape(b.shape)
    return a


def _fix_0d(ours, theirs):
    """ours with each raw array reshaped to theirs' shape where canon() made one 0-d result
    (1,): np.ascontiguousarray returns at least 1-d arrays, np.asarray does not."""
    if isinstance(ours, tuple) and ours and ours[0] == "q" and isinstance(theirs, tuple):
        return ours[:2] + (_same_0d(ours[2], theirs[2]),) + ours[3:]
    if isinstance(ours, tuple) and isinstance(theirs, tuple) and len(ours) == len(theirs):
        return tuple(_fix_0d(o, t) for o, t in zip(ours, theirs))
    return _same_0d(ours, theirs)


def _exact(case, ours, theirs):
    u.assert_same(_fix_0d(ours, theirs), theirs, f"{case.label}: ref vs PyTorch")


_EXACT_0D = ("exact (the compare only undoes canon()'s reshape of 0-d raw arrays to shape (1,), "
             "np.ascontiguousarray's at-least-1-d rule)")


def _axes(q, dim):
    if dim is None or dim == () or dim == []:
        return tuple(range(q.ndim))
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    return tuple(sorted(d % q.ndim for d in dims))


def _mean_compare(case, ours, theirs):
    """Exact, except +-1 where the exact mean of the raw values is a near-tie."""
    ours = _fix_0d(ours, theirs)
    q = case.args[0]
    dim = case.args[1] if len(case.args) > 1 else case.kwargs.get("dim")
    keepdim = case.args[2] if len(case.args) > 2 else case.kwargs.get("keepdim", False)
    assert ours[3:] == theirs[3:], f"{case.label}: qparams {ours[3:]} vs {theirs[3:]}"
    a, b = ours[2].astype(np.int64), theirs[2].astype(np.int64)
    assert a.shape == b.shape, f"{case.label}: shape {a.shape} vs {b.shape}"
    diff = a != b
    if not diff.any():
        return
    exact = q._int.astype(np.float64).mean(axis=_axes(q, dim), keepdims=keepdim)
    frac = np.abs(np.abs(exact - np.floor(exact)) - 0.5)
    ok = (np.abs(a - b) == 1) & (np.reshape(frac, a.shape) <= 1e-3)
    bad = diff & ~ok
    assert not bad.any(), f"{case.label}: {int(bad.sum())} differences away from ties: " \
                          f"{a[bad][:5]} vs {b[bad][:5]}"


_MEAN_TOLERANCE = (
    "qops computes every mean as rint(f32(f32(sum of raw q) / f32(n))) (PyTorch's exact fast "
    "path for trailing contiguous dims, dim=None included). For other dims PyTorch dequantizes, "
    "takes a float32 mean (its own summation order) and requantizes with Q_fma, which can land "
    "on the other side of a half: there, and only where the exact raw mean is within 1e-3 of a "
    "half-integer, +-1 is allowed; trailing-dim means are asserted bit-exact in "
    "tests/test_reduce.py")


# -- cases --------------------------------------------------------------------------------------

_DIMS = [None, 0, 1, 3, -1, (2, 3), (1, 2, 3), (0, 2), (1, 3), (0, 1), ()]


def _extreme_cases():
    r = u.rng(21)
    out = []
    for d in DTYPES:
        for n in u.EDGE_LENGTHS[1:]:
            q = u.random_qtensor(r, (n,), d)
            out.append(Case((q,), label=f"{d.name}-n{n}"))
            out.append(Case((q, 0), label=f"{d.name}-n{n}-dim0"))
        q = u.random_qtensor(r, (3, 5, 7, 9), d)
        for dim in (0, 1, 2, 3, -1):
            for keepdim in (False, True):
                out.append(Case((q, dim, keepdim), label=f"{d.name}-dim{dim}-k{keepdim}"))
        # few distinct values: many ties, first index wins
        few = qops.make_per_tensor_quantized_tensor(
            r.integers(0, 3, size=(6, 70)).astype(d.storage), 0.1, 1)
        out.append(Case((few, 1), label=f"{d.name}-ties-dim1"))
        out.append(Case((few, 0), label=f"{d.name}-ties-dim0"))
        out.append(Case((u.random_qtensor(r, (7, 33), d, layout="t"), 1), label=f"{d.name}-t"))
        out.append(Case((u.random_qtensor(r, (5, 40), d, layout="neg"),), label=f"{d.name}-neg"))
        out.append(Case((u.random_qtensor(r, (2, 0, 3), d), 2), label=f"{d.name}-empty-dim2"))
        out.append(Case((u.random_qtensor(r, (2, 70000), d), 1), label=f"{d.name}-long-rows"))
    return out


def _extreme_strategy():
    from hypothesis import strategies as st

    def build(args):
        q, dim_frac, mode, keepdim = args
        if q.numel() == 0:          # max/min of nothing is an error (tests/test_reduce.py)
            q = qops.make_per_tensor_quantized_tensor(np.arange(3, dtype=q.dtype.storage), 0.1, 0)
        if mode == 0:
            return Case((q,), label=f"{q.dtype.name}-{q.shape}")
        dim = min(int(dim_frac * q.ndim), q.ndim - 1)
        return Case((q, dim, keepdim), label=f"{q.dtype.name}-{q.shape}-dim{dim}-k{keepdim}")
    return st.tuples(u.qtensor_strategy(dtype=list(DTYPES)), st.floats(0, 1), st.integers(0, 1),
                     st.booleans()).map(build)


def _torch_extreme(name):
    def oracle(case):
        import torch
        t = u.to_torch(case.args[0])
        fn = getattr(torch, name)
        rest = case.args[1:]
        return lambda: fn(t, *rest)
    return oracle


def _mean_cases():
    r = u.rng(22)
    out = []
    for d in DTYPES:
        for n in u.EDGE_LENGTHS[1:]:
            q = u.random_qtensor(r, (n,), d)
            out.append(Case((q,), label=f"{d.name}-n{n}"))
        q = u.random_qtensor(r, (3, 5, 7, 9), d)
        for dim in _DIMS:
            for keepdim in (False, True):
                out.append(Case((q, dim, keepdim), label=f"{d.name}-dim{dim}-k{keepdim}"))
        ties = u.random_qtensor(r, (64, 2), d)
        out.append(Case((ties, 1), label=f"{d.name}-pairs-ties"))
        out.append(Case((u.random_qtensor(r, (4, 2, 9), d), 1), label=f"{d.name}-pairs-middle"))
        out.append(Case((u.random_qtensor(r, (7, 33), d, layout="t"), 1), label=f"{d.name}-t"))
        out.append(Case((u.random_qtensor(r, (5, 40), d, layout="neg"), (0, 1)),
                        label=f"{d.name}-neg"))
        out.append(Case((u.random_qtensor(r, (0, 5), d), 1), label=f"{d.name}-empty-kept"))
        out.append(Case((u.random_qtensor(r, (2, 70000), d), 1), label=f"{d.name}-long-rows"))
        out.append(Case((u.random_qtensor(r, (1, 70000, 3), d), 1), label=f"{d.name}-long-cols"))
        out.append(Case((u.random_qtensor(r, (2, 5, 300), d), 1), label=f"{d.name}-wide-inner"))
        # over 256 rows (two 16-bit column blocks) and 64 + 6 columns; 8-row batches of runs
        out.append(Case((u.random_qtensor(r, (2, 300, 70), d), 1), label=f"{d.name}-cols-blocks"))
        out.append(Case((u.random_qtensor(r, (19, 3, 7, 7), d), (2, 3)), label=f"{d.name}-hw-7x7"))
    return out


def _mean_strategy():
    from hypothesis import strategies as st

    def build(args):
        q, mask, keepdim, as_none = args
        if as_none:
            if q.numel() == 0:
                q = qops.make_per_tensor_quantized_tensor(np.ones(3, q.dtype.storage), 0.1, 0)
            return Case((q,), label=f"{q.dtype.name}-{q.shape}")
        dims = tuple(i for i in range(q.ndim) if (mask >> i) & 1) or (q.ndim - 1,)
        kept = [q.shape[i] for i in range(q.ndim) if i not in dims]
        n = int(np.prod([q.shape[i] for i in dims]))
        if n == 0 and int(np.prod(kept)) > 0:
            dims = tuple(i for i in range(q.ndim) if q.shape[i] > 0) or (q.ndim - 1,)
            kept = [q.shape[i] for i in range(q.ndim) if i not in dims]
            if int(np.prod([q.shape[i] for i in dims])) == 0 and int(np.prod(kept)) > 0:
                return Case((q, tuple(range(q.ndim)), keepdim)) if q.numel() else \
                    Case((qops.make_per_tensor_quantized_tensor(np.ones(3, q.dtype.storage),
                                                                0.1, 0),))
        return Case((q, dims, keepdim), label=f"{q.dtype.name}-{q.shape}-dims{dims}-k{keepdim}")
    return st.tuples(u.qtensor_strategy(dtype=list(DTYPES)), st.integers(1, 15), st.booleans(),
                     st.booleans()).map(build)


def _torch_mean(case):
    import torch
    t = u.to_torch(case.args[0])
    rest = case.args[1:]
    if rest and isinstance(rest[0], tuple):
        rest = (list(rest[0]),) + tuple(rest[1:])
    return lambda: torch.mean(t, *rest)


def _bench_mean(shape, dim):
    q = u.random_qtensor(u.rng(31), shape, qops.quint8, scale=0.05, zero_point=128)
    return Case((q, dim))


def _bench_big():
    return Case((u.random_qtensor(u.rng(32), (1, 64, 112, 112), qops.quint8, scale=0.05,
                                  zero_point=128),))


SPECS = [
    OpSpec("max", "reduce", ("max_all", "max_dim"), F.max, _extreme_cases, _extreme_strategy,
           bench={"max_64_112": _bench_big,
                  "max_dim1_8x512x7": lambda: _bench_mean((8, 512, 7, 7), 1)},
           torch=_torch_extreme("max"), compare=_exact, tolerance=_EXACT_0D),
    OpSpec("min", "reduce", ("min_all", "min_dim"), F.min, _extreme_cases, _extreme_strategy,
           bench={"min_64_112": _bench_big}, torch=_torch_extreme("min"), compare=_exact,
           tolerance=_EXACT_0D),
    OpSpec("mean", "reduce", ("mean_dims",), F.mean, _mean_cases, _mean_strategy,
           bench={"mean_hw_8x512x7": lambda: _bench_mean((8, 512, 7, 7), (2, 3)),
                  "mean_hw_8x512x14": lambda: _bench_mean((8, 512, 14, 14), (2, 3)),
                  "mean_seq_8x128x768": lambda: _bench_mean((8, 128, 768), 1)},
           torch=_torch_mean, compare=_mean_compare, tolerance=_MEAN_TOLERANCE),
]
