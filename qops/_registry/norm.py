"""Registry entries of the norm family: batch_norm (+relu), layer_norm, group_norm,
instance_norm, and the float layer norm (layer_norm_float)."""
import numpy as np

import qops
from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

DTYPES = (qops.quint8, qops.qint8)


def _x(r, shape, d, layout="c", zp=None, scale=None):
    """Input whose dequantized values are roughly N(0.3, 1) (typical activations), with
    qparams drawn per call; zero point at the limits when asked."""
    if scale is None:
        scale = float(r.choice([0.02, 0.05, 0.011]))
    if zp is None:
        zp = int(r.integers(d.qmin + 60, d.qmax - 59))
    data = np.clip(np.rint(r.normal(0.3, 1.0, size=shape) / scale) + zp, d.qmin, d.qmax)
    data = u._layout(data.astype(d.storage), layout)
    return qops.make_per_tensor_quantized_tensor(data, scale, zp)


def _out(r, d):
    """Output qparams that keep a normalized (|y| ~ 3) result mostly inside the range."""
    scale = float(r.choice([0.03, 0.025, 0.0371, 0.05]))
    zp = int(r.integers(-20, 21)) + (128 if d is qops.quint8 else 0)
    return scale, zp


def _vec(r, n, kind):
    if kind == "none":
        return None
    if kind == "ones":
        return np.ones(n, np.float32)
    return r.normal(0, 0.7, size=n).astype(np.float32)


# -- layer norm ---------------------------------------------------------------------------

def _ln_case(r, shape, nd, d, layout="c", affine="rand", eps=1e-5, zp=None, label=""):
    ns = tuple(shape[len(shape) - nd:])
    x = _x(r, shape, d, layout, zp)
    n = int(np.prod(ns, dtype=np.int64))
    w = _vec(r, n, affine)
    b = _vec(r, n, affine)
    w = None if w is None else w.reshape(ns)
    b = None if b is None else b.reshape(ns)
    s, z = _out(r, d)
    return Case((x, ns, w, b, eps, s, z),
                label=label or f"{shape}-nd{nd}-{d.name}-{layout}-{affine}")


def _ln_cases():
    r = u.rng(30)
    cases = []
    for d in DTYPES:
        for n in (1, 15, 16, 17, 63, 64, 65, 1000):
            cases.append(_ln_case(r, (3, n), 1, d))
        cases.append(_ln_case(r, (2, 3, 40), 2, d, "t", "none"))
        cases.append(_ln_case(r, (4, 5, 33), 1, d, "neg", "ones", eps=1e-3))
        cases.append(_ln_case(r, (2, 7, 9), 3, d, "c", "rand", zp=d.qmin))
        cases.append(_ln_case(r, (3, 70), 1, d, "c", "rand", zp=d.qmax))
        cases.append(_ln_case(r, (3, 0, 4), 1, d, label=f"empty-{d.name}"))
    x = qops.make_per_tensor_quantized_tensor(np.full((3, 20), 100, np.uint8), 0.1, 90)
    cases.append(Case((x, (20,), None, None, 1e-5, 0.03, 128), label="all-equal"))
    cases.append(Case((x, (20,), None, np.linspace(-1, 1, 20).astype(np.float32), 0.1, 0.03, 128),
                      label="all-equal-bias"))
    return cases


def _ln_strategy():
    from hypothesis import strategies as st

    def build(a):
        shape, nd_frac, seed, d, layout, affine, eps = a
        nd = max(1, int(round(nd_frac * len(shape))))
        return _ln_case(u.rng(seed), shape, nd, d, layout, affine, eps)
    return st.tuples(u.shape_strategy(min_side=1, max_side=70), st.floats(0, 1),
                     st.integers(0, 2**32 - 1), st.sampled_from(DTYPES),
                     st.sampled_from(["c", "t", "neg"]), st.sampled_from(["rand", "none", "ones"]),
                     st.sampled_from([1e-5, 1e-3, 0.5])).map(build)


def _torch_vec(v):
    import torch
    return None if v is None else torch.from_numpy(np.ascontiguousarray(v, np.float32))


def _ln_tie_mask(case):
    """Where f32(y * inv_out_scale) of layer_norm is exactly a half-integer (a rounding tie)."""
    from qops import _qparams as qp
    from qops._ref import norm as ref
    from qops._ref.quant import fma_f32
    x, ns, w, b, eps, s, z = case.args
    n = int(np.prod(ns, dtype=np.int64))
    x2 = np.ascontiguousarray(x._int).reshape(-1, n)
    mean, r = ref._group_stats(x2, x._zero_point, qp.f32(x._scale), eps)
    y = ((x2.astype(np.int64) - x._zero_point).astype(np.float32) - mean[:, None]) * r[:, None]
    w = np.ones(n, np.float32) if w is None else np.asarray(w, np.float32).reshape(n)
    b = np.zeros(n, np.float32) if b is None else np.asarray(b, np.float32).reshape(n)
    y = fma_f32(y, w[None, :], b[None, :])
    t = (y * np.float32(qp.inv_scale(s))).astype(np.float64)
    return ((t - np.floor(t)) == 0.5).reshape(x.shape)


def compare_ln(case, ours, theirs, max_fraction=0.02):
    """Equal except +-1 at exact rounding ties, which PyTorch's scalar tail rounds with the
    zero point added first (Q_leg) while qops rounds every element as the vector body (Q_vec)."""
    assert ours[:2] == theirs[:2] and ours[3:] == theirs[3:], \
        f"layer_norm {case.label}: qparams {ours[3:]} vs {theirs[3:]}"
    a, t = np.asarray(ours[2]).astype(np.int64), np.asarray(theirs[2]).astype(np.int64)
    assert a.shape == t.shape, f"layer_norm {case.label}: shape {a.shape} vs {t.shape}"
    bad = a != t
    if not bad.any():
        return
    tie = _ln_tie_mask(case)
    assert (np.abs(a - t)[bad] == 1).all() and tie[bad].all(), \
        f"layer_norm {case.label}: {int(bad.sum())} differ, not all +-1 at ties"
    assert bad.mean() <= max_fraction, \
        f"layer_norm {case.label}: {bad.mean():.3f} of outputs at ties"


def _torch_ln(case):
    import torch
    x, ns, w, b, eps, s, z = case.args
    t = u.to_torch(x)
    tw, tb = _torch_vec(w), _torch_vec(b)
    return lambda: torch.ops.quantized.layer_norm(t, list(ns), weight=tw, bias=tb, eps=eps,
                                                  output_scale=s, output_zero_point=z)


# -- group and instance norm --------------------------------------------------------------

def _gn_case(r, shape, g, d, layout="c", affine="rand", eps=1e-5, zp=None, label=""):
    x = _x(r, shape, d, layout, zp)
    c = shape[1]
    s, z = _out(r, d)
    return Case((x, g, _vec(r, c, affine), _vec(r, c, affine), eps, s, z),
                label=label or f"{shape}-g{g}-{d.name}-{layout}-{affine}")


def _gn_cases():
    r = u.rng(31)
    cases = []
    for d in DTYPES:
        for shape, g in (((2, 4, 1), 2), ((2, 6, 17), 3), ((1, 8, 16), 8), ((3, 6, 5, 13), 1),
                         ((2, 4, 63), 4), ((2, 4, 65), 2), ((1, 6, 3, 4, 5), 3),
                         ((2, 32, 7, 7), 8)):
            cases.append(_gn_case(r, shape, g, d))
        cases.append(_gn_case(r, (2, 6, 5, 7), 2, d, "t", "none"))
        cases.append(_gn_case(r, (2, 6, 5, 7), 3, d, "neg", "ones", eps=1e-3, zp=d.qmin))
        cases.append(_gn_case(r, (2, 4, 30), 2, d, "c", "rand", zp=d.qmax))
        cases.append(_gn_case(r, (0, 4, 3), 2, d, label=f"empty-{d.name}"))
        # channels last (PyTorch's NHWC kernel, another rounding of the affine), and C-order
        # arrays PyTorch takes as channels last too ((N, C, 1, 1), (N, 1, H, W))
        cases.append(_gn_case(r, (2, 64, 5, 7), 2, d, "cl"))
        cases.append(_gn_case(r, (2, 6, 5, 7), 3, d, "cl", "none"))
        cases.append(_gn_case(r, (1, 40, 3, 4), 40, d, "cl", "ones", zp=d.qmin))
        cases.append(_gn_case(r, (3, 8, 1, 1), 4, d))
        cases.append(_gn_case(r, (2, 1, 6, 5), 1, d))
    return cases


def _gn_strategy():
    from hypothesis import strategies as st

    def build(a):
        (b, g, cpg, spatial), seed, d, layout, affine, eps = a
        return _gn_case(u.rng(seed), (b, g * cpg) + tuple(spatial), g, d, layout, affine, eps)
    dims = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4),
                     st.lists(st.integers(1, 12), min_size=1, max_size=3))
    return st.tuples(dims, st.integers(0, 2**32 - 1), st.sampled_from(DTYPES),
                     st.sampled_from(["c", "t", "neg", "cl"]),
                     st.sampled_from(["rand", "none", "ones"]),
                     st.sampled_from([1e-5, 1e-3, 0.5])).map(build)


def _to_torch_gn(x):
    """The input as PyTorch's group norm should see it: channels last where qops' is."""
    import torch

    from qops._ops.norm import _torch_channels_last
    t = u.to_torch(x)
    if _torch_channels_last(x._int):
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def _gn_tail_near_tie(x, g, w, b, eps, s):
    """For a channels-last input: where PyTorch's NHWC kernel rounds with its scalar tail
    (Q_leg, the zero point added before rounding) and f32(y * inv) lies within 1e-3 of a .5
    tie, so the two roundings may differ; elsewhere False."""
    from qops import _qparams as qp
    from qops._ops.norm import _torch_channels_last
    from qops._ref import norm as ref
    from qops._ref.quant import fma_f32
    a = x._int
    mask = np.zeros(a.shape, bool)
    if not _torch_channels_last(a) or a.size == 0:
        return mask
    nb, c, h, wd = a.shape
    cpg = c // g
    xm = np.ascontiguousarray(a.transpose(0, 2, 3, 1)).reshape(nb, h * wd, c)
    groups = xm.reshape(nb, h * wd, g, cpg).transpose(0, 2, 1, 3).reshape(nb * g, -1)
    mean, r = ref._group_stats(groups, x._zero_point, qp.f32(x._scale), eps)
    wv = np.ones(c, np.float32) if w is None else np.asarray(w, np.float32)
    bv = np.zeros(c, np.float32) if b is None else np.asarray(b, np.float32)
    sc = r.reshape(nb, g, 1) * wv.reshape(1, g, cpg)
    t = fma_f32(-sc, mean.reshape(nb, g, 1), bv.reshape(1, g, cpg))
    k = (xm.astype(np.int64) - x._zero_point).astype(np.float32)
    y = fma_f32(k, sc.reshape(nb, 1, c), t.reshape(nb, 1, c)) * np.float32(qp.inv_scale(s))
    frac = np.abs(y.astype(np.float64) - np.floor(y) - 0.5)
    # the vector body covers whole 32-byte vectors: of each group's channels below 512
    # positions, of all C channels from 512 on
    ch = np.arange(c)
    tail = (ch % cpg >= cpg // 32 * 32) if h * wd < 512 else (ch >= c // 32 * 32)
    near = (frac < 1e-3) & tail[None, None, :]
    return near.reshape(nb, h, wd, c).transpose(0, 3, 1, 2)


def _compare_gn(case, ours, theirs, groups):
    """Equal except +-1 in PyTorch's channels-last scalar tail within 1e-3 of a .5 tie."""
    x, g, w, b, eps, s = (case.args[0], groups(case), case.args[-5], case.args[-4],
                          case.args[-3], case.args[-2])
    assert ours[:2] == theirs[:2] and ours[3:] == theirs[3:], \
        f"{case.label}: qparams {ours[3:]} vs {theirs[3:]}"
    a, t = np.asarray(ours[2]).astype(np.int64), np.asarray(theirs[2]).astype(np.int64)
    assert a.shape == t.shape, f"{case.label}: shape {a.shape} vs {t.shape}"
    bad = a != t
    if bad.any():
        near = _gn_tail_near_tie(x, g, w, b, eps, s)
        assert (np.abs(a - t)[bad] == 1).all() and near[bad].all(), \
            f"{case.label}: {int(bad.sum())} differ, not all +-1 near ties in PyTorch's tail"


def compare_gn(case, ours, theirs):
    return _compare_gn(case, ours, theirs, lambda c: c.args[1])


def compare_in(case, ours, theirs):
    return _compare_gn(case, ours, theirs, lambda c: c.args[0].shape[1])


def _per_batch_if_wrapping(op, x, g):
    """`op(t)` on PyTorch's view of `x`, batch by batch where its NHWC kernel would go wrong:
    it steps the batch index modulo the group size N (data_index_step(n, N, g, G)), so with
    more batches than N the later batches are never written (qops computes them)."""
    import torch
    t = _to_torch_gn(x)
    n = int(np.prod(x.shape[1:], dtype=np.int64)) // g if x.ndim else 0
    if t.ndim != 4 or not t.is_contiguous(memory_format=torch.channels_last) or x.shape[0] <= n:
        return lambda: op(t)
    parts = [t[i:i + 1].contiguous(memory_format=torch.channels_last) for i in range(x.shape[0])]
    return lambda: torch.cat([op(p) for p in parts])


def _torch_gn(case):
    import torch
    x, g, w, b, eps, s, z = case.args
    tw, tb = _torch_vec(w), _torch_vec(b)
    return _per_batch_if_wrapping(lambda t: torch.ops.quantized.group_norm(t, g, tw, tb, eps, s, z),
                                  x, g)


def _in_cases():
    out = []
    for c in _gn_cases():
        x, g, w, b, eps, s, z = c.args
        if x.ndim <= 5 and x.shape[1] > 0:
            out.append(Case((x, w, b, eps, s, z), label=c.label))
    return out


def _in_strategy():
    return _gn_strategy().map(lambda c: Case(c.args[:1] + c.args[2:]))


def _torch_in(case):
    import torch
    x, w, b, eps, s, z = case.args
    tw, tb = _torch_vec(w), _torch_vec(b)
    return _per_batch_if_wrapping(lambda t: torch.ops.quantized.instance_norm(t, tw, tb, eps, s, z),
                                  x, max(x.shape[1], 1))


# -- batch norm ---------------------------------------------------------------------------

def _bn_case(r, shape, d, layout="c", affine="rand", eps=1e-5, zp=None, label=""):
    x = _x(r, shape, d, layout, zp)
    c = shape[1]
    mean = r.normal(0.3, 0.3, size=c).astype(np.float32)
    var = r.uniform(0.5, 2.0, size=c).astype(np.float32)
    s, z = _out(r, d)
    return Case((x, mean, var, _vec(r, c, affine), _vec(r, c, affine), eps, s, z),
                label=label or f"{shape}-{d.name}-{layout}-{affine}")


def _bn_cases():
    r = u.rng(32)
    cases = []
    for d in DTYPES:
        for shape in ((5, 3), (2, 4, 17), (2, 3, 8, 8), (1, 5, 3, 4, 5), (2, 16, 65), (1, 3, 1, 1),
                      (2, 70, 3, 3)):
            cases.append(_bn_case(r, shape, d))
        cases.append(_bn_case(r, (2, 6, 5, 7), d, "t", "none"))
        cases.append(_bn_case(r, (2, 6, 5, 7), d, "neg", "ones", eps=1e-3, zp=d.qmin))
        cases.append(_bn_case(r, (3, 4, 30), d, "c", "rand", zp=d.qmax))
        # channels innermost in memory (channels last), with vector-width channel tails
        cases.append(_bn_case(r, (2, 70, 3, 3), d, "cl"))
        cases.append(_bn_case(r, (2, 16, 5), d, "cl", "none", zp=d.qmin))
        cases.append(_bn_case(r, (1, 33, 2, 3, 4), d, "cl", "ones"))
        # (an empty batch is tested in tests/test_norm.py: PyTorch returns it with the
        # input's qparams instead of the output ones)
    return cases


def _bn_strategy():
    from hypothesis import strategies as st

    def build(a):
        shape, seed, d, layout, affine, eps = a
        return _bn_case(u.rng(seed), shape, d, layout, affine, eps)
    return st.tuples(u.shape_strategy(min_dims=2, max_dims=5, min_side=1, max_side=9),
                     st.integers(0, 2**32 - 1), st.sampled_from(DTYPES),
                     st.sampled_from(["c", "t", "neg", "cl"]),
                     st.sampled_from(["rand", "none", "ones"]),
                     st.sampled_from([1e-5, 1e-3, 0.5])).map(build)


def _torch_bn(relu):
    def make(case):
        import torch
        x, mean, var, w, b, eps, s, z = case.args
        c = x.shape[1]
        t = u.to_torch(x)
        if u.cl_bench(case):
            t = t.contiguous(memory_format=torch.channels_last)
        # PyTorch's kernel requires weight and bias; qops' None means ones and zeros.
        tw = _torch_vec(np.ones(c, np.float32) if w is None else w)
        tb = _torch_vec(np.zeros(c, np.float32) if b is None else b)
        tm, tv = _torch_vec(mean), _torch_vec(var)
        op = torch.ops.quantized.batch_norm_relu if relu else torch.ops.quantized.batch_norm
        return lambda: op(t, tw, tb, tm, tv, eps, s, z)
    return make


# -- benchmarks ---------------------------------------------------------------------------

def _bench_ln():
    r = u.rng(40)
    x = _x(r, (8, 128, 768), qops.quint8, scale=0.05, zp=128)
    return Case((x, (768,), r.normal(1, 0.1, 768).astype(np.float32),
                 r.normal(0, 0.1, 768).astype(np.float32), 1e-5, 0.03, 128))


def _bench_gn(shape, g):
    def build():
        r = u.rng(41)
        x = _x(r, shape, qops.quint8, scale=0.05, zp=128)
        c = shape[1]
        return Case((x, g, r.normal(1, 0.1, c).astype(np.float32),
                     r.normal(0, 0.1, c).astype(np.float32), 1e-5, 0.03, 128))
    return build


def _bench_in():
    c = _bench_gn((8, 64, 56, 56), 64)()
    return Case(c.args[:1] + c.args[2:])


def _bench_bn(layout="c"):
    r = u.rng(42)
    x = _x(r, (8, 64, 56, 56), qops.quint8, layout=layout, scale=0.05, zp=128)
    return Case((x, r.normal(0.3, 0.1, 64).astype(np.float32),
                 r.uniform(0.8, 1.2, 64).astype(np.float32),
                 r.normal(1, 0.1, 64).astype(np.float32), r.normal(0, 0.1, 64).astype(np.float32),
                 1e-5, 0.03, 128), label="2d_8x64x56" + (u.CL_BENCH if layout == "cl" else ""))



# PyTorch's NHWC group norm kernel (channels-last 4-D inputs) rounds the channels past its
# last whole 32-byte vector (all of them for instance norm) with Q_leg; qops rounds every
# element as the vector body (Q_vec), as for layer norm.
_GN_TOLERANCE = ("exact except +-1 within 1e-3 of .5 rounding ties in the scalar tail of "
                 "PyTorch's channels-last kernel (Q_leg there, Q_vec in qops)")

# -- the float layer norm ----------------------------------------------------------------------

def _lnf_case(r, shape, k, affine, label, offset=0.0, spread=1.0, eps=1e-5):
    x = (r.normal(offset, spread, size=shape)).astype(np.float32)
    ns = tuple(shape[len(shape) - k:])
    w = r.normal(1, 0.5, ns).astype(np.float32) if affine in ("w", "wb") else None
    b = r.normal(0, 0.5, ns).astype(np.float32) if affine in ("b", "wb") else None
    return Case((x, ns, w, b, eps), label=f"{label}-{shape}-k{k}-{affine}")


def _lnf_cases():
    r = u.rng(1311)
    out = []
    for n in (1, 2, 15, 16, 17, 31, 33, 64, 100, 768, 1000):
        out.append(_lnf_case(r, (3, n), 1, "wb", "n"))
    for affine in ("none", "w", "b", "wb"):
        out.append(_lnf_case(r, (2, 5, 24), 1, affine, "affine"))
    # enough for two threads, each with whole groups of rows and a remainder
    out.append(_lnf_case(r, (37, 1000), 1, "wb", "threads"))
    out.append(_lnf_case(r, (67, 500), 1, "none", "threads"))
    out.append(_lnf_case(r, (2, 3, 4, 5), 2, "wb", "two-dims"))
    out.append(_lnf_case(r, (2, 3, 4, 5), 3, "none", "three-dims"))
    out.append(_lnf_case(r, (4, 40), 1, "wb", "offset", offset=1000.0, spread=0.01))
    out.append(_lnf_case(r, (4, 40), 1, "wb", "tiny", spread=1e-6, eps=1e-12))
    out.append(_lnf_case(r, (2, 33), 1, "wb", "wide", spread=1e4))
    c = _lnf_case(r, (3, 17), 1, "wb", "constant-rows")
    c.args[0][:] = 2.5
    out.append(c)
    # x - mean = +0 times weights of both signs, no bias: +0 and -0 outputs (the float64
    # rows route adds -0.0 for an absent bias, which keeps both)
    for n in (17, 32):
        c = _lnf_case(r, (3, n), 1, "w", "constant-rows-signed-zeros")
        c.args[0][:] = -1.25
        c.args[2][::2] = -c.args[2][::2]
        out.append(c)
    c = _lnf_case(r, (5, 48), 1, "wb", "non-finite")
    c.args[0][0, 3], c.args[0][1, 40], c.args[0][2, 7] = np.inf, -np.inf, np.nan
    out.append(c)
    t = _lnf_case(r, (6, 33), 1, "w", "transposed")
    xt = np.asarray(t.args[0]).T.copy().T                   # (6, 33), column-major
    out.append(Case((xt,) + t.args[1:], label="transposed-(6,33)"))
    t = r.normal(size=(2, 0, 7)).astype(np.float32)
    out.append(Case((t, (7,), None, None, 1e-5), label="empty"))
    out.append(Case((r.normal(size=(3, 8)).astype(np.float64), (8,), None, None, 1e-5),
                    label="float64-input"))
    return out


def _lnf_strategy():
    from hypothesis import strategies as st

    def build(args):
        seed, lead, ns, affine, offset, spread = args
        return _lnf_case(u.rng(seed), tuple(lead) + tuple(ns), len(ns), affine, "random",
                         offset=offset, spread=spread)
    return st.tuples(st.integers(0, 2**32 - 1), st.lists(st.integers(0, 5), max_size=2),
                     st.lists(st.integers(1, 40), min_size=1, max_size=2),
                     st.sampled_from(["none", "w", "b", "wb"]),
                     st.sampled_from([0.0, 3.0, -50.0]),
                     st.sampled_from([1e-3, 1.0, 100.0])).map(build)


def _torch_lnf(case):
    import torch
    x, ns, w, b, eps = case.args
    t = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    tw = None if w is None else torch.from_numpy(w)
    tb = None if b is None else torch.from_numpy(b)
    return lambda: torch.nn.functional.layer_norm(t, list(ns), tw, tb, eps)


def compare_lnf(case, ours, theirs):
    """Within PyTorch's float32 rounding of x * r + (-mean * r), then * w + b (see
    _LNF_TOLERANCE)."""
    x, ns, w, b, eps = case.args
    a, t = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert a.shape == t.shape, f"layer_norm_float {case.label}: shape {a.shape} vs {t.shape}"
    if a.size == 0:
        return
    k = len(ns)
    v = np.asarray(x, np.float64).reshape(-1, int(np.prod(ns)))
    mean = v.mean(axis=1, keepdims=True)
    r = 1 / np.sqrt(v.var(axis=1, keepdims=True) + eps)
    wa = np.ones(v.shape[1]) if w is None else np.abs(np.asarray(w, np.float64).reshape(-1))
    ba = np.zeros(v.shape[1]) if b is None else np.abs(np.asarray(b, np.float64).reshape(-1))
    # PyTorch's float32 mean is off by up to ~log2(n) float32 ulps of the row's mean |x|,
    # which shows where x is close to the mean (measured 7e-9 on a row of 500 values)
    tol = (2e-6 * (np.abs(v) + np.abs(mean) + np.abs(v).mean(axis=1, keepdims=True)) * r * wa
           + 4 * np.spacing(np.abs(t.reshape(v.shape)).astype(np.float32)) + 1e-7 * ba)
    a, t = a.reshape(v.shape), t.reshape(v.shape)
    with np.errstate(invalid="ignore"):
        err = np.abs(a - t)
        # rows with an inf or NaN: NaN where PyTorch has NaN
        ok = (err <= tol) | (np.isnan(a) & np.isnan(t))
    assert ok.all(), (
        f"layer_norm_float {case.label} (k={k}): {int((~ok).sum())} values past the "
        f"tolerance; worst {err[~ok].max() if (~ok).any() else 0:.3g}")


_LNF_TOLERANCE = (
    "2e-6 (abs(x) + abs(mean) + the row's mean abs(x)) r abs(w) + 4 float32 ulps of PyTorch's "
    "value + 1e-7 abs(b): "
    "PyTorch computes mean and variance in float32 (Welford) and y = (x * r + (-mean * r)) * w "
    "+ b in float32, which cancels where abs(mean) >> std; qops computes the statistics in "
    "float64 and ((x - mean) * r) * w + b in float64, rounded once")


SPECS = [
    OpSpec("batch_norm", "norm", ("batch_norm", "batch_norm_cl"), F.batch_norm, _bn_cases,
           _bn_strategy, bench={"2d_8x64x56": _bench_bn,
                  "2d_8x64x56_channels_last": lambda: _bench_bn("cl")}, torch=_torch_bn(False)),
    OpSpec("batch_norm_relu", "norm", ("batch_norm", "batch_norm_cl"), F.batch_norm_relu,
           _bn_cases, _bn_strategy, bench={"2d_8x64x56": _bench_bn}, torch=_torch_bn(True)),
    OpSpec("layer_norm", "norm", ("layer_norm",), F.layer_norm, _ln_cases, _ln_strategy,
           bench={"8x128x768": _bench_ln}, torch=_torch_ln, compare=compare_ln,
           # PyTorch's scalar tail (the last N % 32 elements of each row: its x86 wheels run
           # the AVX2 build of this kernel on AVX-512 machines too) adds the zero point before
           # rounding (Q_leg); qops rounds every element as the vector body (Q_vec).
           tolerance="exact except +-1 at exact .5 rounding ties in PyTorch's scalar tail (Q_leg "
                     "there, Q_vec in qops)"),
    OpSpec("layer_norm_float", "norm", ("layer_norm_f32",), F.layer_norm, _lnf_cases,
           _lnf_strategy,
           bench={"f32_128x768": lambda: _lnf_case(u.rng(41), (128, 768), 1, "wb", "bench"),
                  # Swin-T's first stage: many short rows
                  "f32_3136x96": lambda: _lnf_case(u.rng(42), (3136, 96), 1, "wb", "bench")},
           torch=_torch_lnf, compare=compare_lnf, tolerance=_LNF_TOLERANCE),
    OpSpec("group_norm", "norm", ("group_norm", "group_norm_cl"), F.group_norm, _gn_cases,
           _gn_strategy,
           bench={"8x256x28x28_g32": _bench_gn((8, 256, 28, 28), 32),
                  "256x56_g32": _bench_gn((1, 256, 56, 56), 32)},
           torch=_torch_gn, compare=compare_gn, tolerance=_GN_TOLERANCE),
    OpSpec("instance_norm", "norm", ("group_norm", "group_norm_cl"), F.instance_norm, _in_cases,
           _in_strategy,
           bench={"8x64x56": _bench_in}, torch=_torch_in, compare=compare_in,
           tolerance=_GN_TOLERANCE),
]
