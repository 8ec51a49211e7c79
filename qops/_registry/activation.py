"""Registry entries of the activation family: relu, relu_, relu6, hardtanh, clamp, elu,
leaky_relu, hardsigmoid, hardswish, sigmoid, tanh, gelu (quantized) and gelu_float."""
import numpy as np

import qops
from qops import functional as F
from qops._ref import activation as R
from qops._ref.quant import d_sc, d_vec
from qops._registry import Case, OpSpec
from qops._registry import _util as u

DTYPES = (qops.quint8, qops.qint8)

# -- tie-aware comparison with PyTorch ---------------------------------------------------------
#
# PyTorch's float-domain element-wise kernels quantize the vector body with Q_vec (zero point
# added after rounding) and the scalar tail (the last len % 64 elements of each thread's range)
# with Q_leg (zero point added before rounding, D_sc instead of D_vec, std:: instead of SLEEF
# transcendentals). qops uses the vector formula for every element, so results cannot depend on
# length or threads. The two agree except when y / out_scale is (within a few float32 ulps of)
# a half-integer: there, and only there, PyTorch's tail may differ from qops by 1.

#: mismatches seen per op (elements compared, elements differing by 1 at a tie), for reports
TIE_STATS = {}


def near_half(v):
    """True where float value `v` (in output-scale units) lies within float32 rounding noise of
    a half-integer."""
    v = np.asarray(v, dtype=np.float64)
    frac = np.abs(np.abs(v - np.floor(v)) - 0.5)
    return frac <= 1e-4 + 16.0 * np.abs(v) * 2.0 ** -23


def tie_compare(name, real_of_case):
    """A compare= that is exact except for ±1 at near-ties of real_of_case(case) / out_scale."""
    def compare(case, ours, theirs):
        assert ours[0] == theirs[0] and ours[1] == theirs[1], \
            f"{name}: kind/dtype {ours[:2]} vs {theirs[:2]}"
        assert (ours[3], ours[4]) == (theirs[3], theirs[4]), \
            f"{name} {case.label}: qparams {ours[3:]} vs {theirs[3:]}"
        a, b = ours[2].astype(np.int64), theirs[2].astype(np.int64)
        assert a.shape == b.shape, f"{name} {case.label}: shape {a.shape} vs {b.shape}"
        diff = a != b
        stats = TIE_STATS.setdefault(name, [0, 0])
        stats[0] += a.size
        if not diff.any():
            return
        y = np.broadcast_to(np.asarray(real_of_case(case), dtype=np.float64), a.shape)
        ok = (np.abs(a - b) == 1) & near_half(y / ours[3])
        bad = diff & ~ok
        assert not bad.any(), (
            f"{name} {case.label}: {int(bad.sum())} differences away from ties, e.g. at "
            f"{np.argwhere(bad)[:3].tolist()}: {a[bad][:3]} vs {b[bad][:3]}")
        stats[1] += int(diff.sum())
        # Only the scalar tail (< 64 elements per thread range) may differ.
        assert diff.sum() <= max(128, 0.05 * a.size), \
            f"{name} {case.label}: {int(diff.sum())} tie differences of {a.size}: too many"
    return compare


def _xv(q):
    return d_vec(q._int, np.float32(q._scale), q._zero_point).astype(np.float32)


# -- cases --------------------------------------------------------------------------------------

def _inputs(seed, scale_range=(0.005, 0.2)):
    """QTensors of both dtypes: the edge lengths, zero points at the limits, odd zero points
    (ties), non-contiguous and negative strides, several dims, empty. (0-d inputs are tested
    in tests/test_activation.py: the registry's canon() turns a 0-d result into shape (1,).)"""
    r = u.rng(seed)
    lo, hi = scale_range
    out = []
    for d in DTYPES:
        for n in u.EDGE_LENGTHS:
            out.append(u.random_qtensor(r, (n,), d, scale=float(r.uniform(lo, hi))))
        mid = 0 if d.qmin < 0 else 128
        for zp in (d.qmin, d.qmax, mid + 1, mid - 3):
            out.append(u.random_qtensor(r, (3, 67), d, scale=float(r.uniform(lo, hi)),
                                        zero_point=zp))
        out.append(u.random_qtensor(r, (7, 33), d, scale=float(r.uniform(lo, hi)), layout="t"))
        out.append(u.random_qtensor(r, (5, 40), d, scale=float(r.uniform(lo, hi)), layout="neg"))
        out.append(u.random_qtensor(r, (2, 3, 4, 65), d, scale=float(r.uniform(lo, hi))))
        out.append(u.random_qtensor(r, (2, 0, 3), d))
    return out


def _label(q, extra=""):
    return f"{q.dtype.name}-{q.shape}-s{q._scale:.4g}-z{q._zero_point}{extra}"


def _unary_cases(seed, args_of=lambda r, q: (), kwargs_of=lambda r, q: {},
                 scale_range=(0.005, 0.2)):
    def cases():
        r = u.rng(seed + 1000)
        return [Case((q,) + tuple(args_of(r, q)), dict(kwargs_of(r, q)), label=_label(q))
                for q in _inputs(seed, scale_range)]
    return cases


def _unary_strategy(args_of=lambda r, q: (), kwargs_of=lambda r, q: {}):
    """Random QTensors (any qparams, layout, 1-4 dims) with op arguments drawn by args_of."""
    def build(args):
        q, seed = args
        r = u.rng(seed)
        return Case((q,) + tuple(args_of(r, q)), dict(kwargs_of(r, q)), label=_label(q))

    def strategy():                           # hypothesis imported only when tests ask
        from hypothesis import strategies as st
        return st.tuples(u.qtensor_strategy(shape=None, dtype=list(DTYPES)),
                         st.integers(0, 2**32 - 1)).map(build)
    return strategy


def _out_qparams(r, q):
    """Output (scale, zero point) near the input's range: a fresh scale, or the input's own
    (tie-heavy), with a random zero point."""
    d = q.dtype
    if r.random() < 0.3:
        return (q._scale, q._zero_point)
    return (float(r.uniform(0.01, 0.1)), int(r.integers(d.qmin, d.qmax + 1)))


def _bench_q(dtype=qops.quint8, scale=0.05, zp=128, shape=(1, 64, 112, 112)):
    r = u.rng(42)
    return u.random_qtensor(r, shape, dtype, scale=scale, zero_point=zp)


_LARGE = (8, 64, 112, 112)     # 6.4 MB: past the L2 cache, for the bandwidth yardstick


# -- PyTorch oracles ----------------------------------------------------------------------------

def _tq(q):
    return u.to_torch(q)


def _torch_relu(case):
    import torch
    t = _tq(case.args[0])
    return lambda: torch.relu(t)


def _torch_relu_(case):
    import torch
    t = _tq(case.args[0])
    return lambda: torch.relu_(t.clone())


def _torch_relu6(case):
    import torch
    t = _tq(case.args[0])
    return lambda: torch.nn.functional.relu6(t)


def _torch_hardtanh(case):
    import torch.ao.nn.quantized.functional as qF
    t = _tq(case.args[0])
    lo, hi = case.args[1:3]
    return lambda: qF.hardtanh(t, lo, hi)


def _torch_clamp(case):
    import torch.ao.nn.quantized.functional as qF
    t = _tq(case.args[0])
    lo, hi = case.args[1:3]
    return lambda: qF.clamp(t, lo, hi)


def _torch_elu(case):
    import torch.ao.nn.quantized.functional as qF
    t = _tq(case.args[0])
    s, z, alpha = case.args[1:4]
    return lambda: qF.elu(t, s, z, alpha)


def _torch_leaky(case):
    import torch.ao.nn.quantized.functional as qF
    t = _tq(case.args[0])
    kw = case.kwargs
    return lambda: qF.leaky_relu(t, case.args[1], False, kw.get("scale"), kw.get("zero_point"))


def _torch_hardsigmoid(case):
    import torch.ao.nn.quantized.functional as qF
    t = _tq(case.args[0])
    return lambda: qF.hardsigmoid(t)


def _torch_hardswish(case):
    import torch.ao.nn.quantized.functional as qF
    t = _tq(case.args[0])
    s, z = case.args[1:3]
    return lambda: qF.hardswish(t, s, z)


def _torch_sigmoid(case):
    import torch
    t = _tq(case.args[0])
    return lambda: torch.sigmoid(t)


def _torch_tanh(case):
    import torch
    t = _tq(case.args[0])
    return lambda: torch.tanh(t)


def _torch_gelu(case):
    import torch
    x = case.args[0]
    t = _tq(x) if isinstance(x, qops.QTensor) else torch.from_numpy(np.require(x, None, "C"))
    return lambda: torch.nn.functional.gelu(t, **case.kwargs)


def _relu_inplace_runner(case):
    # relu_ writes into its input: run it on a fresh clone each call, as PyTorch's runner does.
    q = case.args[0]
    return lambda: F.relu_(q.clone())


# -- real values before rounding, for the tie-aware comparisons -----------------------------------

def _y_leaky(case):
    return R.leaky_relu_y(_xv(case.args[0]), np.float32(case.args[1]))


def _y_hardsigmoid(case):
    return R.hardsigmoid_y(_xv(case.args[0]))


def _y_hardswish(case):
    return R.hardswish_y(_xv(case.args[0]))


def _y_elu(case):
    return R.elu_y(_xv(case.args[0]), np.float32(case.args[3]))


def _y_sigmoid(case):
    q = case.args[0]
    return R.sigmoid_y(d_sc(q._int, np.float32(q._scale), q._zero_point).astype(np.float32))


def _y_tanh(case):
    return R.tanh_y(_xv(case.args[0]))


def _y_gelu(case):
    return R.gelu_y(_xv(case.args[0]), case.kwargs.get("approximate", "none"))


# -- the float GELU ----------------------------------------------------------------------------

_SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 1e-8,
                      -1e-8, 37.5, -37.5, 5.0, -5.0, 10.0, -10.0], np.float32)


def _float_input(r, shape, scale):
    return (r.standard_normal(shape) * scale).astype(np.float32)


def _gelu_float_cases():
    r = u.rng(1211)
    out = []
    for ap in ("none", "tanh"):
        kw = {"approximate": ap}
        for n in u.EDGE_LENGTHS:
            out.append(Case((_float_input(r, (n,), 3.0),), kw, label=f"{ap}-{n}"))
        out.append(Case((_SPECIALS,), kw, label=f"{ap}-specials"))
        out.append(Case((np.linspace(-40, 12, 5001, dtype=np.float32),), kw, label=f"{ap}-ramp"))
        out.append(Case((_float_input(r, (33, 7), 2.0).T,), kw, label=f"{ap}-transposed"))
        out.append(Case((_float_input(r, (2, 3, 4, 65), 6.0),), kw, label=f"{ap}-4d"))
        out.append(Case((_float_input(r, (3, 5), 1.0).astype(np.float64),), kw,
                        label=f"{ap}-float64"))
    return out


def _gelu_float_strategy():
    from hypothesis import strategies as st

    def build(args):
        seed, shape, scale, ap, n_special = args
        r = u.rng(seed)
        x = _float_input(r, shape, scale)
        flat = x.reshape(-1)
        if flat.size and n_special:
            at = r.integers(0, flat.size, n_special)
            flat[at] = r.choice(_SPECIALS, n_special)
        return Case((x,), {"approximate": ap}, label=f"{ap}-{shape}-x{scale:g}")
    return st.tuples(st.integers(0, 2**32 - 1),
                     st.lists(st.integers(0, 9), min_size=0, max_size=4).map(tuple),
                     st.sampled_from([0.01, 1.0, 3.0, 10.0, 1e4]),
                     st.sampled_from(["none", "tanh"]), st.integers(0, 3)).map(build)


def _compare_gelu_float(case, ours, theirs):
    a, b = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    x = np.asarray(case.args[0], np.float32).astype(np.float64)
    assert a.shape == b.shape, f"gelu_float {case.label}: shape {a.shape} vs {b.shape}"
    # PyTorch's exact GELU on AVX-512 CPUs (oneDNN's) overflows an intermediate above
    # FLT_MAX / 2: inf there and NaN at +inf (measured on an Intel Xeon, whatever ATen's
    # capability); qops, as ATen's formula, returns x
    ovf = (x > np.finfo(np.float32).max / 2) & ~np.isfinite(b)
    assert (a[ovf] == x[ovf]).all(), f"gelu_float {case.label}: not x above FLT_MAX / 2"
    a, b, x = a[~ovf], b[~ovf], x[~ovf]
    assert (np.isnan(a) == np.isnan(b)).all(), f"gelu_float {case.label}: NaN positions differ"
    fin = np.isfinite(b)
    assert (a[~fin] == b[~fin])[~np.isnan(b[~fin])].all(), \
        f"gelu_float {case.label}: infinities differ"
    tol = 4 * np.spacing(np.abs(b[fin]).astype(np.float32)) + 5e-7 * np.abs(x[fin])
    err = np.abs(a[fin] - b[fin])
    assert (err <= tol).all(), (
        f"gelu_float {case.label}: {int((err > tol).sum())} values past the tolerance, e.g. x = "
        f"{x[fin][err > tol][:3]}: {a[fin][err > tol][:3]} vs {b[fin][err > tol][:3]}")


_GELU_FLOAT_TOLERANCE = (
    "4 float32 ulps of PyTorch's value + 5e-7 abs(x): qops computes PyTorch's vectorized "
    "float32 formula, 0.5 x (1 + erf(x / sqrt 2)) with ATen's erf (Abramowitz-Stegun 7.1.26, "
    "SLEEF's expf, FMAs), bit for bit what PyTorch runs for the quantized GELU and for float "
    "tensors oneDNN does not take (tests/test_activation.py); PyTorch's float GELU of a "
    "contiguous float32 tensor runs oneDNN's instead (a minimax erf on AVX-512 CPUs, "
    "Abramowitz-Stegun with oneDNN's exp on AVX2 ones), and 1 + erf cancels for negative x, so "
    "either erf's error reaches the result times abs(x) / 2 (measured against oneDNN's AVX-512 "
    "GELU: 3.9e-7 abs(x) beyond 4 ulps, near x = -3; against its AVX2 one 1.6e-7 abs(x)); the "
    "tanh form (ATen's only) is bit-exact (SLEEF's tanhf); NaN and infinities exactly, but "
    "above FLT_MAX / 2 on AVX-512 CPUs, where oneDNN's GELU overflows (inf, NaN at +inf) and "
    "qops returns x, as ATen's formula")


_TIE_REASON = ("exact except +-1 at exact ties of y/out_scale: PyTorch quantizes the last "
               "len % 64 elements of each thread's range with its scalar formula (D_sc, zero "
               "point added before rounding, std:: transcendentals) and the rest with the vector "
               "one (D_vec, Q_vec, SLEEF); qops uses the vector formula everywhere "
               "(docs/semantics.md §0.2), so PyTorch's tail may differ by 1 where y/out_scale "
               "is within float32 noise of a half-integer; the differences are counted and "
               "must stay in the tail")
# elu, sigmoid, tanh and GELU: qops computes PyTorch's vector formula itself (SLEEF's expf and
# tanhf, ATen's erf, with FMAs: qops/_ref/_vecmath.py), so only the tail's formula differs
_VECMATH = (" The float function is PyTorch's vectorized float32 one bit for bit ({f}), so the "
            "vector body gives PyTorch's values exactly.")


def _bounds(r, q):
    a, b = sorted(float(v) for v in r.uniform(-60 * q._scale, 60 * q._scale, 2))
    return (a, b)


def _hs_args(r, q):
    return _out_qparams(r, q)


def _elu_args(r, q):
    s, z = _out_qparams(r, q)
    return (s, z, float(r.choice([1.0, 0.5, 1.7])))


def _leaky_args(r, q):
    return (float(r.choice([0.01, 0.1, 0.25, 0.5])),)


def _leaky_kwargs(r, q):
    if r.random() < 0.5:
        return {}
    s, z = _out_qparams(r, q)
    return {"scale": s, "zero_point": z}


SPECS = [
    OpSpec("relu", "activation", ("clamp_raw",), F.relu, _unary_cases(1), _unary_strategy(),
           bench={"relu_64_112": lambda: Case((_bench_q(),)),
                  "relu_8x64_112": lambda: Case((_bench_q(shape=_LARGE),)),
                  # the fixed cost of a call: 1 KB of work
                  "relu_64_4x4": lambda: Case((_bench_q(shape=(1, 64, 4, 4)),))},
           torch=_torch_relu),
    OpSpec("relu_", "activation", ("clamp_raw",), F.relu_, _unary_cases(2), _unary_strategy(),
           bench={"relu_inplace_64_112": lambda: Case((_bench_q(),))}, torch=_torch_relu_,
           runner=_relu_inplace_runner),
    OpSpec("relu6", "activation", ("clamp_raw",), F.relu6,
           _unary_cases(3, scale_range=(0.02, 0.08)), _unary_strategy(),
           bench={"relu6_64_112": lambda: Case((_bench_q(),))}, torch=_torch_relu6),
    OpSpec("hardtanh", "activation", ("clamp_raw",), F.hardtanh, _unary_cases(4, _bounds),
           _unary_strategy(_bounds),
           bench={"hardtanh_64_112": lambda: Case((_bench_q(), -1.0, 1.0))},
           torch=_torch_hardtanh),
    OpSpec("clamp", "activation", ("clamp_raw",), F.clamp, _unary_cases(5, _bounds),
           _unary_strategy(_bounds), bench={"clamp_64_112": lambda: Case((_bench_q(), -1.0, 2.0))},
           torch=_torch_clamp),
    OpSpec("elu", "activation", ("elu",), F.elu, _unary_cases(6, _elu_args),
           _unary_strategy(_elu_args),
           bench={"elu_64_112": lambda: Case((_bench_q(), 0.05, 128, 1.0))}, torch=_torch_elu,
           compare=tie_compare("elu", _y_elu),
           tolerance=_TIE_REASON + _VECMATH.format(f="alpha expm1f(x), SLEEF's expm1f")),
    OpSpec("leaky_relu", "activation", ("leaky_relu",), F.leaky_relu,
           _unary_cases(7, _leaky_args, _leaky_kwargs), _unary_strategy(_leaky_args, _leaky_kwargs),
           bench={"leaky_relu_64_112": lambda: Case((_bench_q(), 0.01))}, torch=_torch_leaky,
           compare=tie_compare("leaky_relu", _y_leaky), tolerance=_TIE_REASON),
    OpSpec("hardsigmoid", "activation", ("hardsigmoid",), F.hardsigmoid,
           _unary_cases(8, scale_range=(0.01, 0.04)), _unary_strategy(),
           bench={"hardsigmoid_64_112": lambda: Case((_bench_q(),))}, torch=_torch_hardsigmoid,
           compare=tie_compare("hardsigmoid", _y_hardsigmoid),
           tolerance=_TIE_REASON + " (The fixed zero point is even, so in practice none occur.)"),
    OpSpec("hardswish", "activation", ("hardswish",), F.hardswish, _unary_cases(9, _hs_args),
           _unary_strategy(_hs_args),
           bench={"hardswish_64_112": lambda: Case((_bench_q(), 0.05, 10)),
                  "hardswish_8x64_112": lambda: Case((_bench_q(shape=_LARGE), 0.05, 10))},
           torch=_torch_hardswish,
           compare=tie_compare("hardswish", _y_hardswish), tolerance=_TIE_REASON),
    OpSpec("gelu", "activation", ("gelu",), F.gelu,
           _unary_cases(12, kwargs_of=lambda r, q: {"approximate": str(r.choice(["none",
                                                                                 "tanh"]))}),
           _unary_strategy(kwargs_of=lambda r, q: {"approximate": str(r.choice(["none",
                                                                                "tanh"]))}),
           bench={"gelu_64_112": lambda: Case((_bench_q(),))}, torch=_torch_gelu,
           compare=tie_compare("gelu", _y_gelu),
           tolerance=_TIE_REASON + _VECMATH.format(
               f="Abramowitz-Stegun erf with SLEEF's expf; the tanh form with SLEEF's tanhf")),
    OpSpec("gelu_float", "activation", ("gelu_f32",), F.gelu, _gelu_float_cases,
           _gelu_float_strategy,
           bench={"gelu_f32_128x3072": lambda: Case((_float_input(u.rng(43), (128, 3072),
                                                                  1.0),))},
           torch=_torch_gelu, compare=_compare_gelu_float, tolerance=_GELU_FLOAT_TOLERANCE),
    OpSpec("sigmoid", "activation", ("sigmoid",), F.sigmoid,
           _unary_cases(10, scale_range=(0.01, 0.04)), _unary_strategy(),
           bench={"sigmoid_64_112": lambda: Case((_bench_q(),))}, torch=_torch_sigmoid,
           compare=tie_compare("sigmoid", _y_sigmoid),
           tolerance=_TIE_REASON + _VECMATH.format(f="1 / (1 + expf(-x)), SLEEF's expf")),
    OpSpec("tanh", "activation", ("tanh",), F.tanh, _unary_cases(11, scale_range=(0.005, 0.015)),
           _unary_strategy(), bench={"tanh_64_112": lambda: Case((_bench_q(),))},
           torch=_torch_tanh, compare=tie_compare("tanh", _y_tanh),
           tolerance=_TIE_REASON + _VECMATH.format(f="SLEEF's tanhf")),
]
