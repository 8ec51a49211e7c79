"""Registry entries of the linear family: linear, linear_relu, linear_dynamic, linear_relu_dynamic,
and the quantized matmul.

Every qops call goes through a weight packed once (`prepack_linear`), as a model would run it;
the PyTorch oracle likewise prepacks once (`quantized::linear_prepack`) outside the timed call.
"""
import numpy as np

import qops
from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

# (leading dims, in_features, out_features): lengths around the 16/64-lane vector widths and
# the 4-byte k groups, a 6-row micro-tile plus one, empty batches, 3-D and 4-D inputs.
SHAPES = [((1,), 1, 1), ((1,), 16, 16), ((3,), 15, 17), ((2,), 63, 65), ((4,), 64, 64),
          ((7,), 65, 33), ((5,), 100, 130), ((2, 3), 17, 9), ((2, 1, 3), 8, 5), ((0,), 8, 5),
          ((13,), 3, 70), ((1,), 257, 129)]


def _weight(r, n, k, per_channel, wzp):
    """A qint8 weight; wzp: "zero" (symmetric), "small" (a few steps) or "limit" (-128/127)."""
    data = r.integers(-128, 128, size=(n, k)).astype(np.int8)
    if per_channel:
        scales = r.uniform(0.002, 0.02, n)
        if wzp == "zero":
            zps = np.zeros(n, np.int64)
        elif wzp == "limit":
            zps = r.choice([-128, 127, 0], size=n)
        else:
            zps = r.integers(-6, 7, n)
        return qops.make_per_channel_quantized_tensor(data, scales, zps, 0)
    zp = {"zero": 0, "small": int(r.integers(-6, 7)), "limit": int(r.choice([-128, 127]))}[wzp]
    return qops.make_per_tensor_quantized_tensor(data, float(r.uniform(0.002, 0.02)), zp)


def _spread_scale(x_scale, w, k):
    """An output scale that spreads the results over about +-60 steps (few saturate)."""
    ws = w._scale if w._axis is None else float(np.mean(w._scales))
    zpw = w._zero_point if w._axis is None else float(np.mean(np.abs(w._zero_points)))
    spread = np.sqrt(max(k, 1)) * 74.0 * (74.0 + abs(zpw))
    return float(x_scale * ws * spread / 60.0)


def _static_case(r, lead, k, n, per_channel=False, wzp="zero", bias=True, x_zp=None,
                 out="spread", layout="c"):
    x_scale = float(r.uniform(0.01, 0.1))
    x = u.random_qtensor(r, lead + (k,), qops.quint8, x_scale,
                         int(r.integers(0, 256)) if x_zp is None else x_zp, layout)
    w = _weight(r, n, k, per_channel, wzp)
    b = r.normal(0, 30 * x_scale * np.sqrt(k), n).astype(np.float32) if bias else None
    if out == "spread":
        kwargs = {"scale": _spread_scale(x_scale, w, k), "zero_point": int(r.integers(60, 200))}
    elif out == "input":
        kwargs = {}
    else:
        kwargs = {"scale": out[0], "zero_point": out[1]}
    label = (f"{lead}x{k}->{n}-{'pc' if per_channel else 'pt'}-wzp_{wzp}-"
             f"{'bias' if bias else 'nobias'}-xzp{x.q_zero_point()}-{layout}-out_{out}")
    return Case((x, w, b), kwargs, label=label)


def _static_cases():
    r = u.rng(30)
    cases = []
    for i, (lead, k, n) in enumerate(SHAPES):
        for per_channel in (False, True):
            wzp = ("zero", "small", "limit")[i % 3]
            cases.append(_static_case(r, lead, k, n, per_channel, wzp, bias=i % 4 != 1,
                                      layout=("c", "t", "neg")[i % 3]))
    # zero points at the limits, output qparams defaulting to the input's, tiny/huge scales
    cases.append(_static_case(r, (4,), 33, 20, False, "small", x_zp=0))
    cases.append(_static_case(r, (4,), 33, 20, True, "limit", x_zp=255))
    cases.append(_static_case(r, (3,), 40, 18, False, "zero", out="input"))
    cases.append(_static_case(r, (3,), 40, 18, True, "small", out=(1e-4, 128)))
    cases.append(_static_case(r, (3,), 40, 18, True, "small", out=(50.0, 0)))
    cases.append(_static_case(r, (3,), 40, 18, False, "small", out=(3.0, 255)))
    return cases


def _static_strategy():
    from hypothesis import strategies as st

    def build(args):
        lead, k, n, per_channel, wzp, bias, x_zp, out, seed, layout = args
        return _static_case(u.rng(seed), lead, k, n, per_channel, wzp, bias, x_zp, out, layout)
    out = st.one_of(st.just("spread"), st.just("input"),
                    st.tuples(st.sampled_from([1e-3, 0.05, 0.5, 4.0]), st.integers(0, 255)))
    return st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
                     st.integers(1, 90), st.integers(1, 90), st.booleans(),
                     st.sampled_from(["zero", "small", "limit"]), st.booleans(),
                     st.one_of(st.none(), st.sampled_from([0, 255, 128])), out,
                     st.integers(0, 2**32 - 1), st.sampled_from(["c", "t", "neg"])).map(build)


def _bench_static(m):
    def build():
        r = u.rng(31)
        return _static_case(r, (m,), 768, 3072, per_channel=True, wzp="zero")
    return build


def _runner(op):
    """qops with the weight packed once, outside the timed call."""
    def runner(case):
        x, w, b = case.args
        packed = F.prepack_linear(w, b)
        kwargs = dict(case.kwargs)
        return lambda: op(x, packed, None, **kwargs)
    return runner


def _torch_static(relu):
    def build(case):
        import torch
        x, w, b = case.args
        tx, tw = u.to_torch(x), u.to_torch(w)
        packed = torch.ops.quantized.linear_prepack(tw, None if b is None else torch.from_numpy(b))
        scale = case.kwargs.get("scale", x.q_scale())
        zp = case.kwargs.get("zero_point", x.q_zero_point())
        fn = torch.ops.quantized.linear_relu if relu else torch.ops.quantized.linear
        return lambda: fn(tx, packed, scale, zp)
    return build


# -- dynamic ------------------------------------------------------------------------------

def _floats(r, shape, kind):
    """Float inputs covering every branch of the activation qparams choice."""
    if kind == "normal":
        return r.normal(0.3, 2.0, shape).astype(np.float32)
    if kind == "positive":           # min clipped to 0
        return r.uniform(0.0, 5.0, shape).astype(np.float32)
    if kind == "negative":           # max clipped to 0
        return -r.uniform(0.0, 5.0, shape).astype(np.float32)
    if kind == "tiny":               # scale below 6.1e-5: the small-scale branch
        return r.normal(0, 1e-4, shape).astype(np.float32)
    if kind == "tiny_positive":
        return r.uniform(0, 1e-3, shape).astype(np.float32)
    if kind == "zeros":              # scale 0 -> 0.1
        return np.zeros(shape, np.float32)
    return r.normal(0, 300.0, shape).astype(np.float32)   # "large"


def _dynamic_case(r, lead, k, n, per_channel=False, wzp="zero", bias=True, kind="normal",
                  reduce_range=True, layout="c"):
    x = _floats(r, lead + (k,), kind)
    if layout == "t" and x.ndim >= 2:
        x = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    elif layout == "neg":
        x = np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    w = _weight(r, n, k, per_channel, wzp)
    b = r.normal(0, 1.0, n).astype(np.float32) if bias else None
    label = (f"{lead}x{k}->{n}-{'pc' if per_channel else 'pt'}-wzp_{wzp}-"
             f"{'bias' if bias else 'nobias'}-{kind}-rr{int(reduce_range)}-{layout}")
    return Case((x, w, b), {"reduce_range": reduce_range}, label=label)


KINDS = ("normal", "positive", "negative", "tiny", "tiny_positive", "zeros", "large")


def _dynamic_cases():
    r = u.rng(32)
    cases = []
    for i, (lead, k, n) in enumerate(SHAPES):
        for per_channel in (False, True):
            wzp = ("zero", "small", "limit")[i % 3]
            cases.append(_dynamic_case(r, lead, k, n, per_channel, wzp,
                                       bias=i % 4 != 1, kind=KINDS[i % len(KINDS)],
                                       reduce_range=bool(i % 2 == 0 or per_channel),
                                       layout=("c", "t", "neg")[i % 3]))
    for kind in KINDS:
        cases.append(_dynamic_case(r, (3,), 20, 11, False, "zero", kind=kind, reduce_range=False))
    return cases


def _dynamic_strategy():
    from hypothesis import strategies as st

    def build(args):
        lead, k, n, per_channel, wzp, bias, kind, rr, seed, layout = args
        return _dynamic_case(u.rng(seed), lead, k, n, per_channel, wzp, bias, kind, rr, layout)
    return st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
                     st.integers(1, 90), st.integers(1, 90), st.booleans(),
                     st.sampled_from(["zero", "small", "limit"]), st.booleans(),
                     st.sampled_from(KINDS), st.booleans(), st.integers(0, 2**32 - 1),
                     st.sampled_from(["c", "t", "neg"])).map(build)


def _bench_dynamic(m):
    def build():
        r = u.rng(33)
        return _dynamic_case(r, (m,), 768, 3072, per_channel=False, wzp="zero")
    return build


def _dyn_runner(op):
    def runner(case):
        x, w, b = case.args
        packed = F.prepack_linear(w, b)
        return lambda: op(x, packed, None, **case.kwargs)
    return runner


def _torch_dynamic(relu):
    def build(case):
        import torch
        x, w, b = case.args
        tx = torch.from_numpy(np.ascontiguousarray(x))
        packed = torch.ops.quantized.linear_prepack(
            u.to_torch(w), None if b is None else torch.from_numpy(b))
        fn = torch.ops.quantized.linear_relu_dynamic if relu else torch.ops.quantized.linear_dynamic
        rr = case.kwargs["reduce_range"]
        return lambda: fn(tx, packed, rr)
    return build


# -- matmul -------------------------------------------------------------------------------

# (a shape, b shape): 1-D operands, broadcast batch dims, a 2-D second operand under a batch
# (one product over every row), empty sizes, K = 0, and K past K_CHUNK (the chunked route)
MM_SHAPES = [((1, 1), (1, 1)), ((3, 16), (16, 5)), ((2, 4, 33), (2, 33, 7)),
             ((2, 1, 4, 8), (3, 8, 5)), ((8,), (8, 3)), ((4, 8), (8,)), ((9,), (9,)),
             ((0, 5), (5, 3)), ((2, 0), (0, 3)), ((2, 3, 65), (65, 17)), ((1, 70000), (70000, 2)),
             ((4, 12, 64), (4, 64, 12))]


def _matmul_case(r, a_shape, b_shape, dtype="quint8", layout="c", out="spread"):
    dt = qops.quint8 if dtype == "quint8" else qops.qint8
    a = u.random_qtensor(r, a_shape, dt, float(r.uniform(0.01, 0.1)), layout=layout)
    b = u.random_qtensor(r, b_shape, dt, float(r.uniform(0.01, 0.1)), layout=layout)
    if out == "spread":
        # about +-60 steps: centred values ~74 rms, sqrt(k) terms
        k = a_shape[-1]
        out = (a.q_scale() * b.q_scale() * 74.0 * 74.0 * np.sqrt(max(k, 1)) / 60.0,
               int(r.integers(dt.qmin + 60, dt.qmax - 59)))
    label = f"{a_shape}@{b_shape}-{dtype}-{layout}-out_{out[0]:.3g}_{out[1]}"
    return Case((a, b, float(out[0]), int(out[1])), label=label)


def _matmul_cases():
    r = u.rng(34)
    cases = [_matmul_case(r, a, b, ("quint8", "qint8")[i % 2], ("c", "t", "neg")[i % 3])
             for i, (a, b) in enumerate(MM_SHAPES)]
    cases.append(_matmul_case(r, (5, 20), (20, 6), "quint8", out=(1e-4, 128)))   # saturates
    cases.append(_matmul_case(r, (5, 20), (20, 6), "qint8", out=(50.0, -128)))
    cases.append(_matmul_case(r, (2, 5, 20), (2, 20, 6), "qint8", out=(3.0, 127)))
    # batches big enough for two threads, each task packing its own entry: zero points near
    # the middle and output qparams spanning the product's range
    for a_shape, b_shape, dt, layout in (((5, 37, 70), (5, 70, 45), qops.quint8, "c"),
                                         ((7, 33, 81), (7, 81, 29), qops.qint8, "t")):
        mid = (dt.qmin + dt.qmax + 1) // 2
        a = u.random_qtensor(r, a_shape, dt, 0.05, mid + 3, layout)
        b = u.random_qtensor(r, b_shape, dt, 0.02, mid - 5, layout)
        prod = np.matmul(a.dequantize(), b.dequantize())
        lo, hi = float(prod.min()), float(prod.max())
        scale = (hi - lo) / 250.0
        zp = int(np.clip(round(dt.qmin + 2 - lo / scale), dt.qmin, dt.qmax))
        cases.append(Case((a, b, scale, zp), label=f"{a_shape}@{b_shape}-{dt}-{layout}-"
                          "two-threads"))
    return cases


def _matmul_strategy():
    from hypothesis import strategies as st

    def build(args):
        batch, m, k, n, dtype, layout, seed = args
        return _matmul_case(u.rng(seed), batch + (m, k), batch + (k, n), dtype, layout)
    return st.tuples(st.lists(st.integers(1, 3), max_size=2).map(tuple), st.integers(1, 40),
                     st.integers(1, 90), st.integers(1, 40),
                     st.sampled_from(["quint8", "qint8"]), st.sampled_from(["c", "t", "neg"]),
                     st.integers(0, 2**32 - 1)).map(build)


def _bench_matmul(batch, m, k, n):
    def build():
        return _matmul_case(u.rng(35), batch + (m, k), batch + (k, n))
    return build


def _torch_matmul(case):
    import torch
    a, b, scale, zp = case.args
    ta, tb = u.to_torch(a), u.to_torch(b)
    return lambda: torch.ops.quantized.matmul(ta, tb, scale, zp)


def _matmul_compare(case, ours, theirs):
    """Exact, except +-1 where PyTorch's float32 product can lie on the other side of a
    rounding boundary from the exact one (its sum's error bound straddles a half-step)."""
    a, b, scale, zp = case.args
    assert ours[:2] == theirs[:2] and ours[3:] == theirs[3:], \
        f"{case.label}: type or qparams {ours[:2] + ours[3:]} vs {theirs[:2] + theirs[3:]}"
    x, y = ours[2].astype(np.int64), theirs[2].astype(np.int64)
    assert x.shape == y.shape, f"{case.label}: shape {x.shape} vs {y.shape}"
    diff = x != y
    if not diff.any():
        return
    # PyTorch: D_sc both, a float32 matmul, Q_fma. Its value is within K ulps of the
    # float64 sum of the same products (the float32 sum's error bound, with slack).
    da = (a._int.astype(np.float64) - a._zero_point) * float(np.float32(a._scale))
    db = (b._int.astype(np.float64) - b._zero_point) * float(np.float32(b._scale))
    exact = np.matmul(da, db)
    k = a.shape[-1]
    bound = (k + 2) * 2.0 ** -23 * np.matmul(np.abs(da), np.abs(db))
    inv = float(np.float32(1.0) / np.float32(scale))
    lo, hi = (exact - bound) * inv + zp, (exact + bound) * inv + zp
    straddles = np.floor(lo + 0.5) != np.floor(hi + 0.5)
    ok = (np.abs(x - y) == 1) & np.reshape(straddles, x.shape)
    bad = diff & ~ok
    assert not bad.any(), f"{case.label}: {int(bad.sum())} differences away from a rounding " \
                          f"boundary: {x[bad][:5]} vs {y[bad][:5]}"


_MATMUL_TOLERANCE = (
    "qops sums the integer products exactly and rounds the real product once to float32, then "
    "quantizes as torch.quantize_per_tensor; PyTorch's x86 build dequantizes, multiplies in "
    "float32 (its own summation order) and quantizes: +-1 only where that float32 sum's error "
    "bound straddles a rounding boundary (measured: 22 of 310,157 values on random cases)")


_TOLERANCE = ("exact. On CPUs without AVX512-VNNI PyTorch's fbgemm kernels saturate 16-bit pair "
              "sums (qops is exact), so there the weights compared are clipped to [-64, 64] "
              "(_util.saturation_free)")

SPECS = [
    OpSpec("linear", "linear", ("pack_linear", "linear"), F.linear, _static_cases,
           _static_strategy,
           bench={"linear_b1_768to3072": _bench_static(1),
                  "linear_m128_768to3072": _bench_static(128)},
           torch=_torch_static(False), runner=_runner(F.linear),
           oracle_case=u.saturation_free, tolerance=_TOLERANCE),
    OpSpec("linear_relu", "linear", ("pack_linear", "linear"), F.linear_relu, _static_cases,
           _static_strategy,
           bench={"linear_relu_m128_768to3072": _bench_static(128)},
           torch=_torch_static(True), runner=_runner(F.linear_relu),
           oracle_case=u.saturation_free, tolerance=_TOLERANCE),
    OpSpec("linear_dynamic", "linear", ("pack_linear", "minmax", "linear_dynamic"),
           F.linear_dynamic, _dynamic_cases, _dynamic_strategy,
           bench={"linear_dyn_b1_768to3072": _bench_dynamic(1),
                  "linear_dyn_m128_768to3072": _bench_dynamic(128)},
           torch=_torch_dynamic(False), runner=_dyn_runner(F.linear_dynamic),
           oracle_case=u.saturation_free, tolerance=_TOLERANCE),
    OpSpec("linear_relu_dynamic", "linear", ("pack_linear", "minmax", "linear_dynamic"),
           F.linear_relu_dynamic, _dynamic_cases, _dynamic_strategy,
           bench={"linear_relu_dyn_m128_768to3072": _bench_dynamic(128)},
           torch=_torch_dynamic(True), runner=_dyn_runner(F.linear_relu_dynamic),
           oracle_case=u.saturation_free, tolerance=_TOLERANCE),
    OpSpec("matmul", "linear", ("matmul",), F.matmul, _matmul_cases, _matmul_strategy,
           bench={"matmul_attn_12x197x64": _bench_matmul((12,), 197, 64, 197),
                  "matmul_256x256x256": _bench_matmul((), 256, 256, 256)},
           torch=_torch_matmul, compare=_matmul_compare, tolerance=_MATMUL_TOLERANCE),
]
