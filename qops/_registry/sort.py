"""Registry entries of the sort family: sort, argsort, topk."""
import numpy as np

import qops
from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

DTYPES = (qops.quint8, qops.qint8, qops.qint32)
#: row lengths around the 64-byte mask blocks of the fast top-k and the 4-way split of the sort
LENGTHS = u.EDGE_LENGTHS + (3, 4, 5, 127, 128, 129, 257)


def _q(r, shape, d, kind="uniform", layout="c"):
    """A QTensor whose raw values are uniform, normal-shaped (sparse tails), few distinct
    (many ties), two values next to the middle (long runs, the top key below the maximum) or
    all equal."""
    lo, hi = (d.qmin, d.qmax) if d.qmax <= 255 else (-3000, 3000)
    mid = (lo + hi) // 2
    if kind == "uniform":
        data = r.integers(lo, hi + 1, size=shape)
    elif kind == "normal":
        data = np.clip(np.rint(r.normal(mid, (hi - lo) / 10, size=shape)), lo, hi)
    elif kind == "ties":
        data = r.choice([lo, mid - 1, mid, hi], size=shape)
    elif kind == "two":
        data = r.choice([mid - 5, mid + 2], size=shape)
    else:
        data = np.full(shape, mid + 3)
    data = u._layout(np.asarray(data).astype(d.storage), layout)
    return qops.make_per_tensor_quantized_tensor(data, float(r.uniform(0.01, 0.2)),
                                                 0 if d.qmin < 0 else 128)


def _inputs(seed):
    """(QTensor, dim) pairs: every edge length, 2-D and 3-D along each dim, strided inputs."""
    r = u.rng(seed)
    out = []
    for d in DTYPES:
        for n in LENGTHS:
            out.append((_q(r, (n,), d, "uniform"), -1, f"{d.name}-n{n}"))
        out.append((_q(r, (300,), d, "ties"), 0, f"{d.name}-ties"))
        out.append((_q(r, (65,), d, "equal"), -1, f"{d.name}-all-equal"))
        out.append((_q(r, (7, 130), d, "normal", "t"), -1, f"{d.name}-7x130-t"))
        out.append((_q(r, (7, 130), d, "ties", "neg"), 0, f"{d.name}-7x130-neg-dim0"))
        out.append((_q(r, (3, 5, 66), d, "uniform"), 1, f"{d.name}-3x5x66-dim1"))
        out.append((_q(r, (3, 5, 66), d, "normal"), -3, f"{d.name}-3x5x66-dim-3"))
        out.append((_q(r, (4, 0, 3), d, "uniform"), -1, f"{d.name}-empty"))
    out.append((_q(r, (), qops.quint8, "uniform"), -1, "0-d"))
    out.append((_q(r, (2000,), qops.quint8, "normal"), -1, "quint8-normal-2000"))
    out.append((_q(r, (2000,), qops.qint8, "normal")[::3], 0, "qint8-normal-strided"))
    # rows past the fast top-k's candidate buffer (512) whose k-th key is not the largest
    # possible one, and runs longer than the sort's 16-byte value stores
    for d in DTYPES:
        out.append((_q(r, (2, 1500), d, "two"), -1, f"{d.name}-2x1500-two"))
    return out


def _input_strategy():
    from hypothesis import strategies as st

    def build(args):
        shape, seed, d, kind, layout, dim_frac = args
        r = u.rng(seed)
        q = _q(r, shape, d, kind, layout)
        dim = min(int(dim_frac * len(shape)), len(shape) - 1) - (len(shape) if seed % 2 else 0)
        return q, dim
    return st.tuples(u.shape_strategy(min_side=0, max_side=140), st.integers(0, 2**32 - 1),
                     st.sampled_from(DTYPES),
                     st.sampled_from(["uniform", "normal", "ties", "two", "equal"]),
                     st.sampled_from(["c", "t", "neg"]), st.floats(0, 1)).map(build)


# -- comparison with PyTorch --------------------------------------------------------------

def _rows(a, dim):
    a = np.asarray(a)
    if a.ndim == 0:
        return a.reshape(1, 1)
    a = np.moveaxis(a, dim, -1)
    return a.reshape(int(np.prod(a.shape[:-1], dtype=np.int64)), a.shape[-1])


def _check_indices(q, dim, values, indices, descending, what):
    """Our indices pick our values from the input, are distinct, and equal values come in
    increasing index order (the documented tie rule)."""
    x = _rows(q._int, dim).astype(np.int64)
    v = _rows(values, dim).astype(np.int64)
    i = _rows(indices, dim)
    assert i.dtype == np.int64, f"{what}: indices dtype {i.dtype}"
    if i.size == 0:
        return
    assert np.array_equal(np.take_along_axis(x, i, axis=1), v), \
        f"{what}: indices do not pick values"
    assert all(len(set(row)) == len(row) for row in i.tolist()), f"{what}: repeated indices"
    step = np.diff(v, axis=1) * (-1 if descending else 1)
    assert (step >= 0).all(), f"{what}: values out of order"
    tie = step == 0
    assert (np.diff(i, axis=1)[tie] > 0).all(), \
        f"{what}: equal values not in increasing index order"


def _zero_d(theirs, q):
    # canon() passes torch results through np.ascontiguousarray, which makes 0-d arrays 1-d.
    return np.asarray(theirs).reshape(()) if q.ndim == 0 else theirs


def _compare_sort(case, ours, theirs):
    q, dim, descending, stable = case.args
    what = f"sort {case.label}"
    u.assert_same(ours[0], theirs[0], f"{what}: values vs PyTorch")
    _check_indices(q, dim, ours[0][2], ours[1], descending, what)
    if stable:
        u.assert_same(ours[1], _zero_d(theirs[1], q), f"{what}: stable indices vs PyTorch")


def _compare_argsort(case, ours, theirs):
    q, dim, descending, stable = case.args
    what = f"argsort {case.label}"
    x = _rows(q._int, dim)
    ours_v = np.take_along_axis(x, _rows(ours, dim), axis=1)
    theirs_v = np.take_along_axis(x, _rows(theirs, dim), axis=1)
    assert np.array_equal(ours_v, theirs_v), f"{what}: sorted values differ from PyTorch's"
    vals = np.moveaxis(ours_v.reshape(np.moveaxis(np.asarray(ours), dim, -1).shape), -1, dim) \
        if np.ndim(ours) else ours_v.reshape(())
    _check_indices(q, dim, vals, ours, descending, what)
    if stable:
        u.assert_same(ours, _zero_d(theirs, q), f"{what}: stable indices vs PyTorch")


def _compare_topk(case, ours, theirs):
    q, k, dim, largest, sorted_ = case.args
    what = f"topk {case.label}"
    ov, tv = ours[0], theirs[0]
    assert ov[:2] == tv[:2] and ov[3:] == tv[3:], \
        f"{what}: dtype/qparams {ov[:2] + ov[3:]} vs {tv[:2] + tv[3:]}"
    a, b = np.asarray(ov[2]), np.asarray(tv[2])
    if not sorted_ and a.ndim:
        # PyTorch's sorted=False order is unspecified: compare the values as multisets.
        a, b = np.sort(a, axis=dim), np.sort(b, axis=dim)
    u.assert_same(a, b, f"{what}: values vs PyTorch")
    _check_indices(q, dim, ov[2], ours[1], largest, what)


# -- cases --------------------------------------------------------------------------------

def _sort_cases():
    cases = []
    for i, (q, dim, label) in enumerate(_inputs(0)):
        cases.append(Case((q, dim, bool(i % 2), i % 3 == 0), label=label))
    q = _inputs(1)[20][0]
    for desc in (False, True):
        for stable in (False, True):
            cases.append(Case((q, -1, desc, stable), label=f"desc{desc}-stable{stable}"))
    return cases


def _sort_strategy():
    from hypothesis import strategies as st
    return st.tuples(_input_strategy(), st.booleans(), st.booleans()).map(
        lambda a: Case((a[0][0], a[0][1], a[1], a[2])))


def _torch_sort(case):
    import torch
    q, dim, descending, stable = case.args
    t = u.to_torch(q)
    return lambda: torch.sort(t, dim=dim, descending=descending, stable=stable)


def _torch_argsort(case):
    import torch
    q, dim, descending, stable = case.args
    t = u.to_torch(q)
    return lambda: torch.argsort(t, dim=dim, descending=descending, stable=stable)


def _topk_cases():
    cases = []
    for i, (q, dim, label) in enumerate(_inputs(2)):
        n = 1 if q.ndim == 0 else q.shape[dim]
        ks = {1} if q.ndim == 0 else {0, min(1, n), min(3, n), n // 2, n}
        for k in sorted(ks):
            cases.append(Case((q, k, dim, bool(i % 2 == 0 or k % 2), i % 4 != 3),
                              label=f"{label}-k{k}"))
    return cases


def _topk_strategy():
    from hypothesis import strategies as st

    def build(a):
        (q, dim), kfrac, largest, sorted_ = a
        if q.ndim == 0:
            return Case((q, 1, dim, largest, sorted_))
        return Case((q, int(round(kfrac * q.shape[dim])), dim, largest, sorted_))
    return st.tuples(_input_strategy(),
                     st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.01, 1.0])),
                     st.booleans(), st.booleans()).map(build)


def _torch_topk(case):
    import torch
    q, k, dim, largest, sorted_ = case.args
    t = u.to_torch(q)
    return lambda: torch.topk(t, k, dim=dim, largest=largest, sorted=sorted_)


def _bench_q(shape, kind="normal"):
    return _q(u.rng(20), shape, qops.quint8, kind)


# Indices: qops puts equal values in increasing index order; PyTorch does so only when
# stable=True and leaves it unspecified otherwise (and always for topk), so the comparison
# checks there that our indices pick our values, are distinct and follow that rule.
_TOL_SORT = ("values exact; indices exact when stable=True, otherwise valid and in qops' tie "
             "order (PyTorch's is unspecified)")
_TOL_TOPK = ("values exact (as multisets when sorted=False); indices valid and in qops' tie "
             "order (PyTorch's is unspecified)")

SPECS = [
    OpSpec("sort", "sort", ("sort",), F.sort, _sort_cases, _sort_strategy,
           bench={"1e6": lambda: Case((_bench_q((1000000,)), -1, False, False)),
                  "64x1000": lambda: Case((_bench_q((64, 1000)), -1, False, False))},
           torch=_torch_sort, compare=_compare_sort, tolerance=_TOL_SORT),
    OpSpec("argsort", "sort", ("sort",), F.argsort, _sort_cases, _sort_strategy,
           bench={"64x1000": lambda: Case((_bench_q((64, 1000)), -1, False, False))},
           torch=_torch_argsort, compare=_compare_argsort, tolerance=_TOL_SORT),
    OpSpec("topk", "sort", ("topk",), F.topk, _topk_cases, _topk_strategy,
           bench={"k10_1e6": lambda: Case((_bench_q((1000000,)), 10, -1, True, True)),
                  "k10_64x1000": lambda: Case((_bench_q((64, 1000)), 10, -1, True, True)),
                  "k10_1e6_uniform":
                      lambda: Case((_bench_q((1000000,), "uniform"), 10, -1, True, True))},
           torch=_torch_topk, compare=_compare_topk, tolerance=_TOL_TOPK),
]
