"""Registry entries of the arith family: add, add_relu, mul, mul_relu, add_scalar, mul_scalar,
cat, cat_relu."""
import numpy as np

import qops
from qops import functional as F
from qops._ref.quant import d_vec
from qops._registry import Case, OpSpec
from qops._registry import _util as u
from qops._registry.activation import _TIE_REASON, tie_compare

DTYPES = (qops.quint8, qops.qint8)

# (shape of a, shape of b): equal shapes around the vector widths, broadcasting either way
_SHAPES = [((n,), (n,)) for n in u.EDGE_LENGTHS] + [
    ((3, 67), (3, 67)), ((2, 3, 4), (3, 1)), ((3, 1), (2, 3, 4)), ((4, 1, 5), (1, 3, 1)),
    ((2, 5, 7), (7,)), ((6, 17), ()), ((2, 0, 3), (2, 0, 3))]


def _pair(r, sa, sb, d, layout="c", tie=False):
    if tie:
        # equal input scales and out scale = 2 x: half the sums are exact ties
        s = float(r.choice([0.02, 0.05]))
        a = u.random_qtensor(r, sa, d, scale=s, layout=layout if len(sa) >= 2 else "c")
        b = u.random_qtensor(r, sb, d, scale=s)
        zo = int(r.integers(d.qmin, d.qmax + 1)) | 1
        return a, b, 2 * s, zo
    a = u.random_qtensor(r, sa, d, layout=layout if len(sa) >= 2 else "c")
    b = u.random_qtensor(r, sb, d, layout=layout if len(sb) >= 2 else "c")
    return a, b, float(r.uniform(0.02, 0.3)), int(r.integers(d.qmin, d.qmax + 1))


def _binary_cases(seed, mul=False):
    def cases():
        r = u.rng(seed)
        out = []
        for d in DTYPES:
            for sa, sb in _SHAPES:
                a, b, s, z = _pair(r, sa, sb, d)
                if mul:
                    # products of full-range values need a larger output scale
                    s = float(a._scale * b._scale * r.uniform(30, 120))
                out.append(Case((a, b, s, z), label=f"{d.name}-{sa}x{sb}"))
            for layout in ("t", "neg"):
                a, b, s, z = _pair(r, (5, 33), (5, 33), d, layout)
                out.append(Case((a, b, s, z), label=f"{d.name}-{layout}"))
            a, b, s, z = _pair(r, (4, 70), (4, 70), d, tie=True)
            out.append(Case((a, b, s, z), label=f"{d.name}-ties"))
            for zp in (d.qmin, d.qmax):
                a, b, s, _ = _pair(r, (3, 65), (3, 65), d)
                out.append(Case((a, b, s, zp), label=f"{d.name}-zo{zp}"))
        return out
    return cases


def _binary_strategy():
    from hypothesis import strategies as st

    def build(args):
        (d, s, z), shape, bcast, seed, layout = args
        r = u.rng(seed)
        sb = tuple(1 if (bcast >> i) & 1 else n for i, n in enumerate(shape))
        a = u.random_qtensor(r, shape, d, layout=layout)
        b = u.random_qtensor(r, sb, d, layout=layout)
        return Case((a, b, s, z), label=f"{d.name}-{shape}x{sb}")
    return st.tuples(u.qparams_strategy(list(DTYPES)), u.shape_strategy(max_dims=3),
                     st.integers(0, 7), st.integers(0, 2**32 - 1),
                     st.sampled_from(["c", "t", "neg"])).map(build)


def _torch_binary(opname):
    def oracle(case):
        import torch
        a, b, s, z = case.args
        ta, tb = u.to_torch(a), u.to_torch(b)
        fn = getattr(torch.ops.quantized, opname)
        return lambda: fn(ta, tb, s, z)
    return oracle


def _add_y(relu):
    def y(case):
        a, b = case.args[:2]
        x = (d_vec(a._int, np.float32(a._scale), a._zero_point).astype(np.float32)
             + d_vec(b._int, np.float32(b._scale), b._zero_point).astype(np.float32))
        return np.maximum(x, np.float32(0)) if relu else x
    return y


def _bench_pair(shape, seed=7):
    r = u.rng(seed)
    a = u.random_qtensor(r, shape, qops.quint8, scale=0.05, zero_point=120)
    b = u.random_qtensor(r, shape, qops.quint8, scale=0.07, zero_point=131)
    return a, b


# -- add_scalar / mul_scalar -----------------------------------------------------------------------

def _scalar_cases(seed, values):
    def cases():
        r = u.rng(seed)
        out = []
        for d in DTYPES:
            for n in u.EDGE_LENGTHS:
                q = u.random_qtensor(r, (n,), d)
                c = float(r.choice(values)) * q._scale * float(r.uniform(0.5, 2))
                out.append(Case((q, c), label=f"{d.name}-n{n}-c{c:.3g}"))
            for v in values:
                q = u.random_qtensor(r, (3, 40), d, layout="t")
                out.append(Case((q, float(v) * q._scale), label=f"{d.name}-c{v}s"))
            q = u.random_qtensor(r, (4, 9), d, scale=0.1)
            out.append(Case((q, 0.25), label=f"{d.name}-tie-0.25/0.1"))
        return out
    return cases


def _scalar_strategy(lo, hi):
    def build(args):
        q, c = args
        c = c if abs(c) >= 1e-3 else 0.0      # a tiny factor makes a scale float32 cannot hold
        return Case((q, c * q._scale), label=f"{q.dtype.name}-{q.shape}-c{c:.3g}")

    def strategy():                           # hypothesis imported only when tests ask
        from hypothesis import strategies as st
        factors = st.one_of(st.floats(lo, hi), st.integers(int(lo), int(hi)).map(float))
        return st.tuples(u.qtensor_strategy(dtype=list(DTYPES)), factors).map(build)
    return strategy


def _torch_scalar(opname):
    def oracle(case):
        import torch
        q, c = case.args
        t = u.to_torch(q)
        fn = getattr(torch.ops.quantized, opname)
        return lambda: fn(t, c)
    return oracle


# -- cat -----------------------------------------------------------------------------------

def _cat_case(r, shapes, dim, d, same=False, layout="c", qparams=True):
    ts = []
    s0, z0 = float(r.uniform(0.02, 0.2)), int(r.integers(d.qmin, d.qmax + 1))
    for shp in shapes:
        if same:
            ts.append(u.random_qtensor(r, shp, d, scale=s0, zero_point=z0, layout=layout))
        else:
            ts.append(u.random_qtensor(r, shp, d, layout=layout))
    kwargs = {}
    if qparams:
        kwargs = {"scale": s0, "zero_point": z0} if same else \
            {"scale": float(r.uniform(0.02, 0.2)),
             "zero_point": int(r.integers(d.qmin, d.qmax + 1))}
    return Case((ts, dim), kwargs, label=f"{d.name}-{[t.shape for t in ts]}-dim{dim}"
                                         f"{'-same' if same else ''}-{layout}")


def _cat_cases(seed):
    def cases():
        r = u.rng(seed)
        out = []
        for d in DTYPES:
            out.append(_cat_case(r, [(3, 5), (4, 5), (1, 5)], 0, d))
            out.append(_cat_case(r, [(3, 5), (3, 17), (3, 64)], 1, d))
            out.append(_cat_case(r, [(3, 5), (3, 17)], -1, d, same=True))
            out.append(_cat_case(r, [(2, 3, 4, 5), (2, 7, 4, 5)], 1, d))
            out.append(_cat_case(r, [(2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 5)], 1, d, same=True))
            out.append(_cat_case(r, [(2, 3, 65), (2, 3, 1)], 2, d, layout="t"))
            out.append(_cat_case(r, [(5, 6), (2, 6)], 0, d, layout="neg"))
            out.append(_cat_case(r, [(2, 0, 3), (2, 4, 3)], 1, d))
            out.append(_cat_case(r, [(7,), (9,)], 0, d, qparams=False))
            out.append(_cat_case(r, [(1000,), (17,)], 0, d))
            # large enough for the fast kernel's table-lookup path (4096+ elements an input)
            out.append(_cat_case(r, [(2, 3, 40, 41), (2, 5, 40, 41)], 1, d))
            out.append(_cat_case(r, [(2, 3, 40, 41), (2, 3, 40, 41)], 1, d, same=True))
            # channels-last inputs, concatenated as they lie: rows of 3..70 channels
            out.append(_cat_case(r, [(2, 3, 4, 5), (2, 70, 4, 5), (2, 1, 4, 5)], 1, d,
                                 layout="cl"))
            out.append(_cat_case(r, [(2, 64, 3, 5), (2, 64, 3, 5)], 1, d, same=True,
                                 layout="cl"))
            out.append(_cat_case(r, [(2, 6, 3, 5), (2, 6, 3, 2)], 3, d, layout="cl"))
        return out
    return cases


def _cat_strategy():
    from hypothesis import strategies as st

    def build(args):
        shape, k, dim_frac, seed, same, layout, d = args
        r = u.rng(seed)
        dim = min(int(dim_frac * len(shape)), len(shape) - 1)
        shapes = []
        for _ in range(k):
            s = list(shape)
            s[dim] = int(r.integers(0, 6))
            shapes.append(tuple(s))
        return _cat_case(r, shapes, dim, d, same=same, layout=layout)
    return st.tuples(u.shape_strategy(min_side=1, max_side=7, max_numel=600), st.integers(1, 4),
                     st.floats(0, 1), st.integers(0, 2**32 - 1), st.booleans(),
                     st.sampled_from(["c", "t", "neg", "cl"]), st.sampled_from(DTYPES)).map(build)


def _torch_cat(relu):
    def oracle(case):
        import torch
        ts, dim = case.args
        s = case.kwargs.get("scale", ts[0]._scale)
        z = case.kwargs.get("zero_point", ts[0]._zero_point)
        tt = [u.to_torch(t) for t in ts]
        if u.cl_bench(case):
            tt = [t.contiguous(memory_format=torch.channels_last) for t in tt]
        fn = torch.ops.quantized.cat_relu if relu else torch.ops.quantized.cat
        return lambda: fn(tt, dim, s, z)
    return oracle


def _bench_cat_cl():
    """Two 8x64x56x56 channels-last inputs of the output's qparams, along C."""
    r = u.rng(12)
    ts = [u.random_qtensor(r, (8, 64, 56, 56), qops.quint8, scale=0.05, zero_point=128,
                           layout="cl") for _ in range(2)]
    return Case((ts, 1), {"scale": 0.05, "zero_point": 128}, label="cat2" + u.CL_BENCH)


def _bench_cat(k, same):
    r = u.rng(11)
    if same:
        ts = [u.random_qtensor(r, (1, 64, 56, 56), qops.quint8, scale=0.05, zero_point=128)
              for _ in range(k)]
        return Case((ts, 1), {"scale": 0.05, "zero_point": 128})
    ts = [u.random_qtensor(r, (1, 64, 56, 56), qops.quint8, scale=0.04 + 0.01 * i,
                           zero_point=120 + i)
          for i in range(k)]
    return Case((ts, 1), {"scale": 0.06, "zero_point": 125})


SPECS = [
    OpSpec("add", "arith", ("add",), F.add, _binary_cases(1), _binary_strategy,
           bench={"add_64_112": lambda: Case(_bench_pair((1, 64, 112, 112)) + (0.1, 128)),
                  "add_256_56": lambda: Case(_bench_pair((1, 256, 56, 56)) + (0.1, 128)),
                  "add_8x64_112": lambda: Case(_bench_pair((8, 64, 112, 112)) + (0.1, 128)),
                  # the fixed cost of a call: 1 KB of work
                  "add_64_4x4": lambda: Case(_bench_pair((1, 64, 4, 4)) + (0.1, 128))},
           torch=_torch_binary("add"), compare=tie_compare("add", _add_y(False)),
           tolerance=_TIE_REASON),
    OpSpec("add_relu", "arith", ("add",), F.add_relu, _binary_cases(2), _binary_strategy,
           bench={"add_relu_64_112": lambda: Case(_bench_pair((1, 64, 112, 112)) + (0.1, 128))},
           torch=_torch_binary("add_relu"), compare=tie_compare("add_relu", _add_y(True)),
           tolerance=_TIE_REASON),
    OpSpec("mul", "arith", ("mul",), F.mul, _binary_cases(3, mul=True), _binary_strategy,
           bench={"mul_64_112": lambda: Case(_bench_pair((1, 64, 112, 112)) + (0.2, 128))},
           torch=_torch_binary("mul")),
    OpSpec("mul_relu", "arith", ("mul",), F.mul_relu, _binary_cases(4, mul=True), _binary_strategy,
           bench={"mul_relu_64_112": lambda: Case(_bench_pair((1, 64, 112, 112)) + (0.2, 128))},
           torch=_torch_binary("mul_relu")),
    OpSpec("add_scalar", "arith", ("requant_int",), F.add_scalar,
           _scalar_cases(5, [0.0, 0.5, 3.0, -3.0, 40.0, -40.0, 300.0, -300.0]),
           _scalar_strategy(-400.0, 400.0),
           bench={"add_scalar_64_112": lambda: Case((_bench_q(), 9.0))},
           torch=_torch_scalar("add_scalar")),
    OpSpec("mul_scalar", "arith", ("reflect",), F.mul_scalar,
           _scalar_cases(6, [0.0, 0.5, 3.0, -3.0, -0.25]), _scalar_strategy(-50.0, 50.0),
           bench={"mul_scalar_64_112": lambda: Case((_bench_q(), -2.0))},
           torch=_torch_scalar("mul_scalar")),
    OpSpec("cat", "arith", ("cat_into",), F.cat, _cat_cases(7), _cat_strategy,
           bench={"cat4_64_56": lambda: _bench_cat(4, False),
                  "cat2_64_56_dim1": lambda: _bench_cat(2, True),
                  "cat2_8x64_56_channels_last": _bench_cat_cl},
           torch=_torch_cat(False)),
    OpSpec("cat_relu", "arith", ("cat_into",), F.cat_relu, _cat_cases(8), _cat_strategy,
           bench={"cat_relu4_64_56": lambda: _bench_cat(4, False)}, torch=_torch_cat(True)),
]


def _bench_q():
    return u.random_qtensor(u.rng(5), (1, 64, 112, 112), qops.quint8, scale=0.05, zero_point=128)
