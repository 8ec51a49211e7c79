"""Registry entries of the pool family: max, average and adaptive pools (1-d, 2-d, 3-d)."""
import numpy as np

import qops
from qops import functional as F
from qops._layout import memory_order
from qops._registry import Case, OpSpec
from qops._registry import _util as u

Q8 = (qops.quint8, qops.qint8)
QALL = (qops.quint8, qops.qint8, qops.qint32)


def _q(r, shape, d, layout="c", zp=None, scale=None):
    if zp is None:
        zp = {"quint8": 3, "qint8": -5, "qint32": 1001}[d.name]
    return u.random_qtensor(r, shape, d, scale=scale or 0.05, zero_point=zp, layout=layout)


def _out_len(L, k, s, p, d, ceil):
    span = L + 2 * p - d * (k - 1) - 1
    if span < 0:
        return 0
    o = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= L + p:
        o -= 1
    return o


def _valid(nsp, shape, kw):
    """True if the pool arguments in `kw` give a non-empty output for `shape`."""
    k, s, p = kw["kernel_size"], kw.get("stride") or kw["kernel_size"], kw.get("padding", 0)
    d, ceil = kw.get("dilation", 1), kw.get("ceil_mode", False)
    for i, L in enumerate(shape[-nsp:]):
        ki, si, pi, di = (v[i] if isinstance(v, tuple) else v for v in (k, s, p, d))
        if pi > ki // 2 or L == 0 or _out_len(L, ki, si, pi, di, ceil) < 1:
            return False
    return True


# -- shapes and parameters shared by the fixed cases ---------------------------------------

_SHAPES = {
    # (2, 3, 200): rows of several 64-output chunks of the 3-tap kernel
    1: [(2, 3, 17), (1, 2, 65), (3, 16), (2, 3, 200), (0, 3, 9), (1, 0, 9)],
    # (1, 2, 70, 9): more input rows than the 64-row ring of the AVX-512 column walks
    # (2, 3, 9, 64): pairs tiling a whole vector of W; (2, 3, 10, 56): even H and W <= 64,
    # every 2x2 window full (the flat 2x2 kernel, its pairs of output rows crossing planes)
    2: [(2, 3, 9, 11), (1, 2, 16, 17), (1, 1, 5, 65), (1, 2, 70, 9), (3, 7, 6), (2, 3, 9, 64),
        (2, 3, 10, 56), (0, 3, 5, 5), (1, 0, 4, 4)],
    # (1, 2, 5, 9, 57), (2, 3, 5, 7, 56): odd sizes with rows near a vector's width; the
    # second with windows tiling its rows (the short-row kernel of 2x2x2 max pools)
    3: [(1, 3, 5, 6, 7), (2, 17, 3, 4, 5), (2, 4, 5, 6), (1, 2, 5, 9, 57), (2, 3, 5, 7, 56),
        (0, 2, 3, 3, 3)],
}

_MAX_ARGS = {
    1: [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=1, dilation=2),
        dict(kernel_size=4, stride=3, padding=2, ceil_mode=True), dict(kernel_size=1)],
    # kernel 3, stride 1 along H: the column walk's rotation of three row maxima
    2: [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=1, dilation=2),
        dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), ceil_mode=True),
        dict(kernel_size=3, stride=3, padding=1, ceil_mode=True), dict(kernel_size=(1, 4)),
        dict(kernel_size=3, stride=1, padding=1), dict(kernel_size=(3, 2), stride=(1, 2))],
    3: [dict(kernel_size=2), dict(kernel_size=(3, 3, 2), stride=(2, 2, 2), ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(2, 3, 3), stride=1, padding=(0, 1, 1)),
        dict(kernel_size=(1, 2, 3), stride=(1, 2, 1), dilation=(1, 1, 2), ceil_mode=True)],
}

# Besides the usual windows: 3-tap stride-1 W windows with odd divisors (the AVX-512 3-tap
# kernel, with and without padding, over one or several D planes), power-of-two divisors
# (integer rounding half to even: kernel 2 or 4, clipped edges of 2 and 1 taps, overrides) and
# pairs tiling W with padding along D and H (the short-row kernel).
_AVG_ARGS = {
    1: [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
        dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False),
        dict(kernel_size=3, padding=1, divisor_override=5),
        dict(kernel_size=3, stride=1, padding=1, count_include_pad=False),
        dict(kernel_size=5, stride=1, padding=2), dict(kernel_size=3, stride=1),
        dict(kernel_size=2, ceil_mode=True, count_include_pad=False),
        dict(kernel_size=4, stride=2, padding=1, divisor_override=8)],
    2: [dict(kernel_size=3, stride=1, padding=1), dict(kernel_size=2),
        dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), ceil_mode=True,
             count_include_pad=False),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, divisor_override=7),
        dict(kernel_size=(1, 4), stride=(2, 1)),
        dict(kernel_size=3, stride=1, padding=1, count_include_pad=False),
        dict(kernel_size=3, stride=1), dict(kernel_size=2, ceil_mode=True,
                                            count_include_pad=False),
        dict(kernel_size=2, padding=(1, 0), divisor_override=16)],
    3: [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
        dict(kernel_size=(1, 2, 3), stride=(1, 2, 1), ceil_mode=True, divisor_override=3),
        dict(kernel_size=(1, 3, 3), stride=1, padding=(0, 1, 1)),
        dict(kernel_size=(3, 1, 3), stride=1, padding=(1, 0, 1)),
        dict(kernel_size=2, padding=(1, 1, 0), count_include_pad=False)],
}


def _pool_cases(nsp, arg_lists, dtypes, seed):
    r = u.rng(seed)
    cases = []
    i = 0
    for shape in _SHAPES[nsp]:
        for kw in arg_lists[nsp]:
            if not _valid(nsp, shape, kw):
                continue
            d = dtypes[i % len(dtypes)]
            layout = ("c", "t", "neg", "cl")[i % 4]
            zp = (d.qmin, d.qmax, None)[(i // 3) % 3] if d.qmax < 300 else None
            if zp is not None and i % 2:
                zp = None
            cases.append(Case((_q(r, shape, d, layout, zp),), dict(kw),
                              label=f"{shape}-{d.name}-{layout}-{kw}"))
            i += 1
    ties = _avg_tie_cases(nsp, seed) if arg_lists is _AVG_ARGS else []
    return cases + _wide_cl_cases(nsp, arg_lists[nsp][:2], dtypes, r) + ties


# Channels-last inputs with 64 channels and more: the channels-last kernels' 64-channel
# register blocks, alone and with a channel tail.
_WIDE_CL = {1: [(2, 70, 9)], 2: [(2, 64, 5, 6), (1, 130, 4, 7)], 3: [(1, 70, 3, 4, 5)]}


def _wide_cl_cases(nsp, arg_list, dtypes, r):
    cases = []
    for i, shape in enumerate(_WIDE_CL[nsp]):
        for j, kw in enumerate(arg_list):
            d = dtypes[(i + j) % len(dtypes)]
            zp = d.qmax if j and d.qmax < 300 else None
            if not _valid(nsp, shape, kw):
                continue
            cases.append(Case((_q(r, shape, d, "cl", zp),), dict(kw),
                              label=f"{shape}-{d.name}-cl-{kw}"))
    return cases


def _pool_strategy(nsp, kind, dtypes):
    """Hypothesis cases: odd sizes, strides, padding, dilation, ceil_mode and qparams."""
    from hypothesis import strategies as st

    def build(args):
        (d, scale, zp), lead, sp, ks, ss, ps, ds, ceil, cip, div, seed, layout = args
        shape = tuple(lead) + tuple(sp)
        ks = [min(k, L) for k, L in zip(ks, sp)]          # mostly valid windows, little filtering
        ps = [min(p, k // 2) for p, k in zip(ps, ks)]
        ds = [d if d * (k - 1) + 1 <= L + 2 * p else 1 for d, k, L, p in zip(ds, ks, sp, ps)]
        kw = dict(kernel_size=tuple(ks), stride=tuple(ss), padding=tuple(ps), ceil_mode=ceil)
        if kind == "max":
            kw["dilation"] = tuple(ds)
        else:
            kw["count_include_pad"] = cip
            kw["divisor_override"] = div
        q = u.random_qtensor(u.rng(seed), shape, d, scale, zp, layout)
        return Case((q,), kw, label=f"{shape}-{kw}")

    dims = st.lists(st.integers(1, 4), min_size=nsp, max_size=nsp)
    chans = st.one_of(st.integers(1, 20 if nsp == 3 else 5), st.integers(63, 65))
    lead = st.one_of(st.tuples(st.integers(0, 2), chans), st.tuples(st.integers(1, 5)))
    return st.tuples(
        u.qparams_strategy(list(dtypes)), lead,
        st.lists(st.integers(1, 9 if nsp < 3 else 5), min_size=nsp, max_size=nsp),
        dims, st.lists(st.integers(1, 3), min_size=nsp, max_size=nsp),
        st.lists(st.integers(0, 2), min_size=nsp, max_size=nsp),
        st.lists(st.integers(1, 2), min_size=nsp, max_size=nsp), st.booleans(), st.booleans(),
        st.one_of(st.none(), st.integers(1, 20)), st.integers(0, 2**32 - 1),
        st.sampled_from(["c", "t", "neg", "cl"]),
    ).map(build).filter(lambda c: _valid(nsp, c.args[0].shape, c.kwargs))


def _is_cl(q, nsp):
    """Whether q's memory is channels last (batched, axis 1 innermost), as qops's pools
    detect it."""
    return q.ndim == nsp + 2 and memory_order(q._int) == [0] + list(range(2, q.ndim)) + [1]


def _torch_batched(fn, q, nsp, same_layout=False):
    """fn on q as PyTorch would run it, where PyTorch needs help: unbatched inputs get a batch
    dim (its quantized 3-d pools take only 5-D), and empty inputs (which it rejects) run on a
    one-element stand-in whose result is sliced back to empty. With `same_layout`, a
    channels-last input stays channels last (PyTorch then runs its NHWC kernels)."""
    t = u.to_torch(q)
    if same_layout and _is_cl(q, nsp):
        t = t.movedim(1, -1).contiguous().movedim(-1, 1)
    unbatched = q.ndim == nsp + 1
    if unbatched:
        t = t.unsqueeze(0)
    empty = [i for i in range(2) if t.shape[i] == 0]
    if empty:
        t = u.to_torch(q.__class__._make(np.zeros([max(n, 1) for n in t.shape], q._int.dtype),
                                         q._dtype, q._scale, q._zero_point))

    def fix(res):
        for i in empty:
            res = res.narrow(i, 0, 0)
        return res[0] if unbatched else res

    def run():
        res = fn(t)
        return tuple(fix(r) for r in res) if isinstance(res, tuple) else fix(res)
    return run


def _torch_pool(fn_name, nsp):
    def oracle(case):
        import torch
        name = fn_name
        kw = dict(case.kwargs)
        q = case.args[0]
        if name == "avg_pool1d" and kw.get("divisor_override", 0) is None:
            del kw["divisor_override"]
        if name == "avg_pool1d" and "divisor_override" in kw:
            # PyTorch's avg_pool1d lacks divisor_override; it is avg_pool2d with H = 1
            k, s, p = (kw.get(a) for a in ("kernel_size", "stride", "padding"))

            def tup(v, d):
                return (d,) + (tuple(v) if isinstance(v, (list, tuple)) else (v,))
            kw.update(kernel_size=tup(k, 1), padding=tup(p or 0, 0))
            if s is not None:
                kw["stride"] = tup(s, 1)
            fn2 = torch.nn.functional.avg_pool2d
            return _torch_batched(lambda t: fn2(t.unsqueeze(2), **kw).squeeze(2), q, nsp, True)
        fn = getattr(torch.nn.functional, name)
        if not kw.pop("return_indices", False):
            # max is exact in any order, so PyTorch's NHWC max pool is a fair oracle and peer;
            # average pools follow PyTorch's formula for the input's layout (issue 19 #19)
            return _torch_batched(lambda t: fn(t, **kw), q, nsp, True)

        def with_indices(t):
            # PyTorch's quantized max pool rejects return_indices: the indices come from its
            # float max pool on the raw values, which picks the same first maximum.
            f = t.int_repr().to(torch.float64)
            return fn(t, **kw), fn(f, return_indices=True, **kw)[1]
        return _torch_batched(with_indices, q, nsp)
    return oracle


def _with_indices_cases(nsp, seed):
    cases = []
    for c in _pool_cases(nsp, _MAX_ARGS, QALL, seed)[::2]:
        kw = dict(c.kwargs, return_indices=True)
        q = c.args[0]
        if 0 in q.shape:
            continue
        # PyTorch's float max pool reports a window without valid taps differently
        if not _every_window_valid(nsp, q.shape, kw):
            continue
        cases.append(Case(c.args, kw, label=c.label + "-indices"))
    return cases


def _every_window_valid(nsp, shape, kw):
    k, s, p = kw["kernel_size"], kw.get("stride") or kw["kernel_size"], kw.get("padding", 0)
    d, ceil = kw.get("dilation", 1), kw.get("ceil_mode", False)
    for i, L in enumerate(shape[-nsp:]):
        ki, si, pi, di = (v[i] if isinstance(v, tuple) else v for v in (k, s, p, d))
        for o in range(_out_len(L, ki, si, pi, di, ceil)):
            taps = [o * si - pi + j * di for j in range(ki)]
            if not any(0 <= t < L for t in taps):
                return False
    return True


def _max_cases(nsp, seed):
    return _pool_cases(nsp, _MAX_ARGS, QALL, seed) + _with_indices_cases(nsp, seed + 100)


def _max_strategy(nsp):
    from hypothesis import strategies as st
    base = _pool_strategy(nsp, "max", QALL)

    def maybe_indices(args):
        c, ri = args
        if ri and 0 not in c.args[0].shape and _every_window_valid(nsp, c.args[0].shape, c.kwargs):
            return Case(c.args, dict(c.kwargs, return_indices=True), label=c.label + "-indices")
        return c
    return st.tuples(base, st.booleans()).map(maybe_indices)


# -- avg_pool3d: PyTorch's formula differs at ties -----------------------------------------

def _avg_sums(x, kw):
    """Exact window sums, valid-tap counts and divisors of an avg pool (test-side model)."""
    x = x.astype(np.int64)
    nsp = x.ndim - 2
    k = kw["kernel_size"]
    k = k if isinstance(k, tuple) else (k,) * nsp
    s = kw.get("stride") or k
    s = s if isinstance(s, tuple) else (s,) * nsp
    p = kw.get("padding", 0)
    p = p if isinstance(p, tuple) else (p,) * nsp
    outs = [_out_len(L, ki, si, pi, 1, kw.get("ceil_mode", False))
            for L, ki, si, pi in zip(x.shape[2:], k, s, p)]
    acc = np.zeros(x.shape[:2] + tuple(outs), np.int64)
    size = np.ones(outs, np.int64)
    pool = np.ones(outs, np.int64)
    for o in np.ndindex(*outs):
        sl, sz, pl = [slice(None), slice(None)], 1, 1
        for oi, ki, si, pi, L in zip(o, k, s, p, x.shape[2:]):
            a = oi * si - pi
            b = min(a + ki, L + pi)
            pl *= b - a
            a, b = max(a, 0), min(b, L)
            sz *= b - a
            sl.append(slice(a, b))
        acc[(slice(None), slice(None)) + o] = x[tuple(sl)].sum(axis=tuple(range(2, x.ndim)))
        size[o], pool[o] = sz, pl
    div = kw.get("divisor_override") or (pool if kw.get("count_include_pad", True) else size)
    return acc, size, div


def _compare_avg(nsp):
    return lambda case, ours, theirs: _compare_avg_nsp(nsp, case, ours, theirs)


def _compare_avg_nsp(nsp, case, ours, theirs):
    """Ours vs PyTorch's where PyTorch mixes two tie rules in one tensor: its channels-last
    kernel adds the zero point after rounding in whole vectors of channels and before it in
    the scalar tail (the last C % 8 channels with AVX2, C % 16 with AVX-512), qops one rule
    per layout: the vector body's on channels-last memory, the NCHW kernel's (before
    rounding) on C order. Differences of 1 are allowed only at exact .5 ties with an odd
    zero point, in the channels where PyTorch uses the other rule."""
    assert ours[0] == theirs[0] and ours[3:] == theirs[3:], "dtype or qparams differ"
    a, b = ours[2].astype(np.int64), theirs[2].astype(np.int64)
    assert a.shape == b.shape, f"shape {a.shape} vs {b.shape}"
    q = case.args[0]
    raw = q._int if q.ndim == nsp + 2 else q._int[None]
    acc, size, div = _avg_sums(raw, case.kwargs)
    zp = q._zero_point
    m = (1.0 / np.asarray(div, np.float64)).astype(np.float32)
    t = (acc - size * zp).astype(np.float32) * m
    tie = ((t - np.floor(t)) == 0.5).reshape(a.shape)
    c = np.arange(raw.shape[1]).reshape((1, -1) + (1,) * nsp)
    if q.ndim < nsp + 2:
        c = c[0]
    C = raw.shape[1]
    other = c >= C // 16 * 16 if _is_cl(q, nsp) else c < C // 8 * 8
    if not _is_cl(q, nsp) and nsp < 3:
        other = np.zeros_like(c, dtype=bool)       # PyTorch's NCHW kernel: one rule
    bad = (a != b) & ~(tie & other & (zp % 2 != 0) & (np.abs(a - b) == 1))
    assert not bad.any(), (f"{case.label}: {int(bad.sum())} differences outside odd-zero-"
                           f"point ties, e.g. ours {a[bad][:5]} vs {b[bad][:5]}")


# -- adaptive pools ------------------------------------------------------------------------

_ADAPTIVE = {
    1: [((2, 3, 17), 4), ((1, 2, 9), 13), ((3, 16), 1), ((1, 4, 65), (7,)), ((0, 2, 5), 2)],
    2: [((2, 3, 9, 11), (4, 7)), ((1, 2, 7, 7), 1), ((1, 3, 5, 6), (13, 17)),
        ((3, 7, 6), (2, None)), ((1, 16, 14, 14), 7), ((1, 3, 1, 1), 2), ((0, 2, 4, 4), 2),
        # uniform windows of 4, 8, 2 (and 3: no shortcut) columns; rows of 33-64 bytes
        ((2, 3, 28, 28), 7), ((1, 4, 16, 56), (4, 7)), ((1, 3, 8, 64), (2, 32)),
        ((1, 2, 5, 33), (3, 11)), ((1, 2, 7, 40), (4, 9)),
        # rows of 65-128 bytes, or more than 32 windows: two-register row folds (max)
        ((1, 2, 9, 112), 7), ((1, 3, 6, 100), (4, 9)), ((2, 1, 3, 128), (2, 5)),
        ((1, 2, 4, 50), (3, 40)),
        # uniform windows whose rows fit two vectors: the flat kernel (kw 8, 2, 4)
        ((1, 2, 6, 16), (3, 2)), ((2, 2, 8, 24), (2, 3)), ((1, 3, 12, 10), (2, 5)),
        ((1, 2, 5, 64), (1, 16))],
    3: [((1, 3, 5, 6, 7), (2, 3, 4)), ((2, 2, 3, 4, 5), 1), ((2, 4, 5, 6), (7, 3, 2)),
        ((1, 2, 2, 3, 3), (3, None, 5)), ((1, 3, 4, 8, 16), (2, 4, 4))],
}


def _tie_q(r, shape, zp, layout, dtype=qops.quint8):
    """Raw values zp or zp + 1 (at random): windows of even size average to exact .5 ties."""
    raw = (zp + r.integers(0, 2, size=shape)).astype(dtype.storage)
    return qops.make_per_tensor_quantized_tensor(u._layout(raw, layout), 0.05, zp)


def _avg_tie_cases(nsp, seed):
    """Exact ties in every layout (issue 19 #19): odd and even zero points, windows of 2**k
    taps, 19 channels (PyTorch's vector channels and its scalar tail)."""
    r = u.rng(seed)
    shape = (2, 19) + (6, 7, 5)[3 - nsp:]
    cases = []
    for layout in ("c", "cl"):
        for zp, d in ((7, qops.quint8), (-4, qops.qint8), (126, qops.qint8)):
            for kw in (dict(kernel_size=2, stride=1), dict(kernel_size=2, stride=1, padding=1)):
                cases.append(Case((_tie_q(r, shape, zp, layout, d),), kw,
                                  label=f"ties-{shape}-{d.name}-zp{zp}-{layout}-{kw}"))
    return cases


def _adaptive_tie_cases(nsp, seed):
    """Exact .5 means in every layout (issue 19 #6, #19). For 2-d, MobileNetV3's squeeze-
    excitation pool: (1, 2, 14, 14) channels last, zero point 8, a mean of exactly 8.5
    (PyTorch 8)."""
    r = u.rng(seed)
    cases = []
    if nsp == 2:
        raw = np.full((1, 2, 14, 14), 8, np.uint8)
        raw[:, :, :7] = 9                                   # 98 of 196 are 9: mean 8.5
        raw[:, 1] -= 1                                      # 7.5 in channel 1
        for layout in ("cl", "c"):
            q = qops.make_per_tensor_quantized_tensor(u._layout(raw, layout), 0.05, 8)
            cases.append(Case((q,), dict(output_size=1), label=f"mobilenet-se-8.5-{layout}"))
    spatial = ((8,), (4, 6), (2, 4, 6))[nsp - 1]
    for layout in ("c", "cl"):
        for zp, o in ((8, 1), (7, 1), (5, tuple(max(1, L // 2) for L in spatial)),
                      (0, tuple(L + 1 for L in spatial))):
            shape = (2, 19) + spatial
            cases.append(Case((_tie_q(r, shape, zp, layout),), dict(output_size=o),
                              label=f"ties-{shape}-{o}-zp{zp}-{layout}"))
    return cases


def _adaptive_cases(nsp, dtypes, seed, indices=False):
    r = u.rng(seed)
    cases = [] if indices else _adaptive_tie_cases(nsp, seed)
    for i, (shape, o) in enumerate(_ADAPTIVE[nsp]):
        for j, d in enumerate(dtypes):
            layout = ("c", "t", "neg", "cl")[(i + j) % 4]
            zp = d.qmin if (i + j) % 4 == 1 and d.qmax < 300 else None
            kw = dict(output_size=o)
            if indices and (i + j) % 2:
                kw["return_indices"] = True
            cases.append(Case((_q(r, shape, d, layout, zp),), kw,
                              label=f"{shape}-{o}-{d.name}-{layout}"))
    for i, shape in enumerate(_WIDE_CL[nsp]):
        o = tuple(max(1, L // 2) for L in shape[2:])
        for j, d in enumerate(dtypes):
            kw = dict(output_size=o if (i + j) % 2 else 1)
            cases.append(Case((_q(r, shape, d, "cl"),), kw, label=f"{shape}-{kw}-{d.name}-cl"))
    if nsp == 3 and not indices:
        # adaptive_avg_pool3d's direct call: C-order batches to output size 1, both types
        for d in dtypes:
            cases.append(Case((_q(r, (3, 5, 2, 3, 7), d, "c"),), dict(output_size=1),
                              label=f"(3, 5, 2, 3, 7)-1-{d.name}-c"))
    return cases


def _adaptive_strategy(nsp, dtypes, indices=False):
    from hypothesis import strategies as st

    def build(args):
        (d, scale, zp), lead, sp, o, seed, layout, ri = args
        q = u.random_qtensor(u.rng(seed), tuple(lead) + tuple(sp), d, scale, zp, layout)
        kw = dict(output_size=tuple(o))
        if indices and ri:
            kw["return_indices"] = True
        return Case((q,), kw, label=f"{q.shape}-{o}")
    # 63..65 channels: the 64-channel blocks of the channels-last kernel, with tails
    chans = st.one_of(st.integers(1, 5), st.integers(63, 65))
    lead = st.one_of(st.tuples(st.integers(0, 2), chans), st.tuples(st.integers(1, 5)))
    return st.tuples(u.qparams_strategy(list(dtypes)), lead,
                     st.lists(st.integers(1, 10), min_size=nsp, max_size=nsp),
                     st.lists(st.integers(1, 12), min_size=nsp, max_size=nsp),
                     st.integers(0, 2**32 - 1), st.sampled_from(["c", "t", "neg", "cl"]),
                     st.booleans()).map(build)


def _torch_adaptive_avg(nsp):
    def oracle(case):
        import torch
        fn = getattr(torch.nn.functional, f"adaptive_avg_pool{nsp}d")
        q = case.args[0]
        o = case.kwargs["output_size"]
        if q.shape[-nsp:] == (1,) * nsp and q.shape[-nsp - 1] > 1:
            # PyTorch bug: 1x1 spatial inputs with C > 1 take its channels-last kernel with an
            # NCHW output and come back channel-scrambled; one channel at a time is correct.
            return _torch_batched(
                lambda t: torch.cat([fn(c, o) for c in t.split(1, dim=1)], dim=1), q, nsp)
        return _torch_batched(lambda t: fn(t, o), q, nsp, True)
    return oracle


def _compare_adaptive(nsp):
    return lambda case, ours, theirs: _compare_adaptive_nsp(nsp, case, ours, theirs)


def _leg_adaptive_cl(raw, out_size, zp):
    """PyTorch's scalar tail of the channels-last adaptive kernel (Q_leg: the product and the
    zero point rounded separately) on (N, C, ...) raw values, as (N, C, *out_size)."""
    from qops._ref.pool import _adaptive_bounds
    F32 = np.float32
    bounds = [_adaptive_bounds(o, L) for o, L in zip(out_size, raw.shape[2:])]
    out = np.empty(raw.shape[:2] + tuple(out_size), np.int64)
    for o in np.ndindex(*out_size):
        sl = tuple(slice(int(b[0][i]), int(b[1][i])) for b, i in zip(bounds, o))
        win = raw[(slice(None), slice(None)) + sl].astype(np.int64)
        size = win[0, 0].size
        acc = win.reshape(raw.shape[:2] + (-1,)).sum(-1) - size * zp
        inv = F32(1) / (F32(1) / (F32(1) / F32(size)))
        out[(slice(None), slice(None)) + o] = np.rint(acc.astype(F32) * inv + F32(zp))
    info = np.iinfo(raw.dtype)
    return np.clip(out, info.min, info.max)


def _compare_adaptive_nsp(nsp, case, ours, theirs):
    """Exact on C-order input. On channels-last memory PyTorch's kernel rounds with Q_fma in
    whole vectors of channels and Q_leg in its scalar tail (the last C % 8 channels with
    AVX2, C % 16 with AVX-512); qops uses the vector body's Q_fma for every channel, so
    there PyTorch may give the Q_leg value (they differ by 1 within a float rounding of .5).
    adaptive_avg_pool3d(x, 1) of channels-last memory: PyTorch averages the dequantized
    floats (its mean's fallback), qops the raw values exactly: ±1 within 1e-4 of a tie."""
    q = case.args[0]
    if not _is_cl(q, nsp):
        u.assert_same(ours, theirs, f"{case.label}: ref vs PyTorch")
        return
    assert ours[0] == theirs[0] and ours[3:] == theirs[3:], "dtype or qparams differ"
    a, b = ours[2].astype(np.int64), theirs[2].astype(np.int64)
    assert a.shape == b.shape, f"shape {a.shape} vs {b.shape}"
    raw = q._int
    o = case.kwargs["output_size"]
    if nsp == 3 and o in (1, (1, 1, 1)):
        mean = raw.reshape(raw.shape[:2] + (-1,)).astype(np.float64).mean(-1).reshape(a.shape)
        ok = (np.abs(mean - np.floor(mean) - 0.5) < 1e-4) & (np.abs(a - b) == 1)
    else:
        C = raw.shape[1]
        tail = np.arange(C).reshape((1, C) + (1,) * nsp) >= C // 16 * 16
        ok = tail & (b == _leg_adaptive_cl(raw, a.shape[2:], q._zero_point))
    bad = (a != b) & ~ok
    assert not bad.any(), (f"{case.label}: {int(bad.sum())} differences, e.g. ours "
                           f"{a[bad][:5]} vs {b[bad][:5]}")


def _torch_adaptive_max(nsp):
    def oracle(case):
        import torch
        fn = getattr(torch.nn.functional, f"adaptive_max_pool{nsp}d")
        q = case.args[0]
        kw = case.kwargs
        tdt = {"quint8": torch.uint8, "qint8": torch.int8, "qint32": torch.int32}[q.dtype.name]

        def run(t):
            # PyTorch has no quantized adaptive max pool: its float one on the raw values
            # (float64 holds every qint32 value exactly)
            out, idx = fn(t.int_repr().to(torch.float64), kw["output_size"], return_indices=True)
            res = torch._make_per_tensor_quantized_tensor(out.to(tdt), q.q_scale(),
                                                          q.q_zero_point())
            return (res, idx) if kw.get("return_indices") else res
        return _torch_batched(run, q, nsp)
    return oracle


# -- benchmark inputs ----------------------------------------------------------------------

def _bq(shape, seed=20):
    r = u.rng(seed)
    x = r.normal(0, 1, size=shape).astype(np.float32)
    return qops.quantize_per_tensor(x, 0.02, 128, qops.quint8)


def _b(shape, **kw):
    return lambda: Case((_bq(shape),), kw, label=str(shape))


def _b_cl(shape, **kw):
    """A bench case on channels-last memory (the same values as _b's)."""
    def case():
        q = _bq(shape)
        raw = np.ascontiguousarray(np.moveaxis(q._int, 1, -1)).transpose(0, 3, 1, 2)
        return Case((qops.make_per_tensor_quantized_tensor(raw, q._scale, q._zero_point),), kw,
                    label=f"{shape}{u.CL_BENCH}")
    return case


_AVG_TOL = ("±1 only at exact .5 ties with an odd zero point, in the channels where PyTorch's "
            "channels-last kernel uses its other tie rule: its scalar tail (the last C % 8 "
            "channels with AVX2) on channels-last memory, where qops uses the vector body's "
            "rule for every channel; and for avg_pool3d, which PyTorch always runs channels "
            "last, its vector channels on C-order input, where qops keeps the NCHW rule")

_ADAPTIVE_TOL = ("exact on C-order input; on channels-last memory PyTorch's scalar tail (the "
                 "last C % 8 channels with AVX2) may give its Q_leg value where qops uses the "
                 "vector body's Q_fma for every channel (±1 within a float rounding of .5)")

SPECS = [
    OpSpec("max_pool1d", "pool", ("max_pool", "max_pool_cl"), F.max_pool1d,
           lambda: _max_cases(1, 1), lambda: _max_strategy(1),
           bench={"3s2_64x12544": _b((1, 64, 12544), kernel_size=3, stride=2, padding=1)},
           torch=_torch_pool("max_pool1d", 1)),
    OpSpec("max_pool2d", "pool", ("max_pool", "max_pool_cl"), F.max_pool2d,
           lambda: _max_cases(2, 2), lambda: _max_strategy(2),
           bench={"3x3s2_64_112": _b((1, 64, 112, 112), kernel_size=3, stride=2, padding=1),
                  "2x2s2_64_112": _b((1, 64, 112, 112), kernel_size=2, stride=2),
                  "3x3s2_8x64_112": _b((8, 64, 112, 112), kernel_size=3, stride=2),
                  "3x3s1p1_64_56": _b((1, 64, 56, 56), kernel_size=3, stride=1, padding=1),
                  "3x3s2p1_8x64_56_channels_last": _b_cl((8, 64, 56, 56), kernel_size=3, stride=2,
                                                         padding=1)},
           torch=_torch_pool("max_pool2d", 2)),
    OpSpec("max_pool3d", "pool", ("max_pool", "max_pool_cl"), F.max_pool3d,
           lambda: _max_cases(3, 3), lambda: _max_strategy(3),
           bench={"2x2x2_64x8x56": _b((1, 64, 8, 56, 56), kernel_size=2),
                  "2x2x2_8x64x8x56": _b((8, 64, 8, 56, 56), kernel_size=2)},
           torch=_torch_pool("max_pool3d", 3)),
    OpSpec("avg_pool1d", "pool", ("avg_pool", "avg_pool_cl"), F.avg_pool1d,
           lambda: _pool_cases(1, _AVG_ARGS, Q8, 4), lambda: _pool_strategy(1, "avg", Q8),
           bench={"3s1p1_64x3136": _b((1, 64, 3136), kernel_size=3, stride=1, padding=1),
                  "3s1p1_8x64x12544": _b((8, 64, 12544), kernel_size=3, stride=1, padding=1)},
           torch=_torch_pool("avg_pool1d", 1), compare=_compare_avg(1), tolerance=_AVG_TOL),
    OpSpec("avg_pool2d", "pool", ("avg_pool", "avg_pool_cl"), F.avg_pool2d,
           lambda: _pool_cases(2, _AVG_ARGS, Q8, 5), lambda: _pool_strategy(2, "avg", Q8),
           bench={"2x2s2_128_56": _b((1, 128, 56, 56), kernel_size=2, stride=2),
                  "2x2s2_64_56": _b((1, 64, 56, 56), kernel_size=2, stride=2),
                  "3x3s1p1_64_56": _b((1, 64, 56, 56), kernel_size=3, stride=1, padding=1),
                  "3x3s1p1_256_28": _b((1, 256, 28, 28), kernel_size=3, stride=1, padding=1),
                  "3x3s1p1_8x256_56": _b((8, 256, 56, 56), kernel_size=3, stride=1, padding=1),
                  "2x2s2_8x256_56": _b((8, 256, 56, 56), kernel_size=2, stride=2),
                  "2x2s2_8x64_56_channels_last": _b_cl((8, 64, 56, 56), kernel_size=2,
                                                       stride=2)},
           torch=_torch_pool("avg_pool2d", 2), compare=_compare_avg(2), tolerance=_AVG_TOL),
    OpSpec("avg_pool3d", "pool", ("avg_pool", "avg_pool_cl"), F.avg_pool3d,
           lambda: _pool_cases(3, _AVG_ARGS, Q8, 6), lambda: _pool_strategy(3, "avg", Q8),
           bench={"2x2x2_64x8x56": _b((1, 64, 8, 56, 56), kernel_size=2),
                  "2x2x2_8x64x8x56": _b((8, 64, 8, 56, 56), kernel_size=2)},
           torch=_torch_pool("avg_pool3d", 3), compare=_compare_avg(3), tolerance=_AVG_TOL),
    OpSpec("adaptive_avg_pool1d", "pool", ("adaptive_avg_pool", "adaptive_avg_pool_cl"),
           F.adaptive_avg_pool1d,
           lambda: _adaptive_cases(1, Q8, 7), lambda: _adaptive_strategy(1, Q8),
           bench={"1_512x196": _b((1, 512, 196), output_size=1)},
           torch=_torch_adaptive_avg(1), compare=_compare_adaptive(1),
           tolerance=_ADAPTIVE_TOL),
    OpSpec("adaptive_avg_pool2d", "pool", ("adaptive_avg_pool", "adaptive_avg_pool_cl"),
           F.adaptive_avg_pool2d,
           lambda: _adaptive_cases(2, Q8, 8), lambda: _adaptive_strategy(2, Q8),
           bench={"1x1_2048x7x7_b1": _b((1, 2048, 7, 7), output_size=1),
                  "7x7_512x28x28": _b((1, 512, 28, 28), output_size=7),
                  "1x1_512x14x14": _b((1, 512, 14, 14), output_size=1),
                  "7x7_512x14x14": _b((1, 512, 14, 14), output_size=7),
                  "1x1_256x56x56": _b((1, 256, 56, 56), output_size=1),
                  "7x7_256x56x56": _b((1, 256, 56, 56), output_size=7),
                  "7x7_8x512x28x28": _b((8, 512, 28, 28), output_size=7),
                  "1x1_8x2048x7x7_channels_last": _b_cl((8, 2048, 7, 7), output_size=1),
                  "7x7_8x64x56x56_channels_last": _b_cl((8, 64, 56, 56), output_size=7)},
           torch=_torch_adaptive_avg(2), compare=_compare_adaptive(2),
           tolerance=_ADAPTIVE_TOL),
    OpSpec("adaptive_avg_pool3d", "pool", ("adaptive_avg_pool", "adaptive_avg_pool_cl"),
           F.adaptive_avg_pool3d,
           lambda: _adaptive_cases(3, Q8, 9), lambda: _adaptive_strategy(3, Q8),
           bench={"1x1x1_256x8x14x14": _b((1, 256, 8, 14, 14), output_size=1),
                  "2x7x7_64x8x28x28": _b((1, 64, 8, 28, 28), output_size=(2, 7, 7))},
           torch=_torch_adaptive_avg(3), compare=_compare_adaptive(3),
           tolerance=_ADAPTIVE_TOL + "; output size 1 on channels-last memory: ±1 within 1e-4 "
                     "of .5 ties (PyTorch averages dequantized floats there, qops the raw "
                     "values exactly)"),
    OpSpec("adaptive_max_pool1d", "pool", ("adaptive_max_pool",), F.adaptive_max_pool1d,
           lambda: _adaptive_cases(1, QALL, 10, indices=True),
           lambda: _adaptive_strategy(1, QALL, indices=True),
           bench={"7_512x196": _b((1, 512, 196), output_size=7)},
           torch=_torch_adaptive_max(1)),
    OpSpec("adaptive_max_pool2d", "pool", ("adaptive_max_pool",), F.adaptive_max_pool2d,
           lambda: _adaptive_cases(2, QALL, 11, indices=True),
           lambda: _adaptive_strategy(2, QALL, indices=True),
           bench={"7x7_512x28x28": _b((1, 512, 28, 28), output_size=7),
                  "7x7_8x512x28x28": _b((8, 512, 28, 28), output_size=7)},
           torch=_torch_adaptive_max(2)),
]
