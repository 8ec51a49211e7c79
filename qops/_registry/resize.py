"""Registry entries of the resize family: interpolate and the upsample aliases."""
import numpy as np

import qops
from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

Q8 = (qops.quint8, qops.qint8)
QALL = (qops.quint8, qops.qint8, qops.qint32)


def _q(r, shape, d, layout="c", zp=None):
    if zp is None:
        zp = {"quint8": 3, "qint8": -5, "qint32": 1001}[d.name]
    return u.random_qtensor(r, shape, d, scale=0.05, zero_point=zp, layout=layout)


# (shape, size, scale_factor) per input rank; modes and align_corners vary per case
_GEOMETRY_4D = [
    ((2, 3, 9, 11), None, 2), ((1, 2, 5, 7), None, 1.7), ((1, 3, 6, 5), (13, 7), None),
    ((2, 2, 8, 10), None, (0.6, 1.3)), ((1, 1, 4, 65), None, (3, 0.5)),
    ((1, 2, 16, 17), (16, 17), None),
    ((1, 3, 2, 2), None, (1.7, 1.3)), ((1, 3, 1, 1), (3, 4), None), ((1, 1, 1, 1), None, 2),
    ((0, 2, 4, 4), None, 2), ((1, 2, 7, 9), (1, 1), None), ((1, 2, 5, 6), (5, 12), None),
    # exact x2 by size and by factor, one row, rows over 64: bilinear's integer x2 kernel
    ((1, 2, 3, 70), (6, 140), None), ((2, 1, 1, 33), None, 2), ((1, 1, 4, 1), None, 2.0),
]
_GEOMETRY_5D = [
    ((1, 2, 3, 4, 5), None, 2), ((2, 1, 4, 5, 6), None, (1.5, 2, 0.7)),
    ((1, 2, 2, 3, 3), (3, 5, 4), None), ((1, 3, 1, 1, 1), 2, None),
]


def _interp_cases(modes=("nearest", "nearest-exact", "bilinear"), seed=0, ac_values=(False, True)):
    r = u.rng(seed)
    cases = []
    i = 0
    for shape, size, sf in _GEOMETRY_4D + _GEOMETRY_5D:
        for mode in modes:
            if mode == "bilinear" and len(shape) != 4:
                continue
            acs = ac_values if mode == "bilinear" else (None,)
            for ac in acs:
                dtypes = Q8 if mode == "bilinear" else QALL
                d = dtypes[i % len(dtypes)]
                layout = ("c", "t", "neg")[i % 3]
                zp = d.qmax if i % 5 == 1 and d.qmax < 300 else None
                kw = dict(size=size, scale_factor=sf, mode=mode)
                if ac is not None:
                    kw["align_corners"] = ac
                cases.append(Case((_q(r, shape, d, layout, zp),), kw,
                                  label=f"{shape}-{size}-{sf}-{mode}-{ac}-{d.name}"))
                i += 1
    return cases


def _interp_strategy(modes=("nearest", "nearest-exact", "bilinear")):
    from hypothesis import strategies as st

    def build(args):
        (d, scale, zp), mode, five, lead, sp, use_size, sizes, factors, ac, seed, layout = args
        nsp = 3 if five and mode != "bilinear" else 2
        if mode == "bilinear" and d is qops.qint32:
            d, zp = qops.quint8, 128
        shape = tuple(lead) + tuple(sp[:nsp])
        kw = dict(mode=mode)
        if use_size:
            kw["size"] = tuple(sizes[:nsp])
        else:
            # at least 1 output per dim
            kw["scale_factor"] = tuple(f if np.floor(L * f) >= 1 else 1.0
                                       for f, L in zip(factors[:nsp], sp[:nsp]))
        if mode == "bilinear":
            kw["align_corners"] = ac
        q = u.random_qtensor(u.rng(seed), shape, d, scale, zp, layout)
        return Case((q,), kw, label=f"{shape}-{kw}")
    return st.tuples(
        u.qparams_strategy(list(QALL)), st.sampled_from(list(modes)), st.booleans(),
        st.tuples(st.integers(0, 2), st.integers(1, 5)),
        st.lists(st.integers(1, 9), min_size=3, max_size=3), st.booleans(),
        st.lists(st.integers(1, 20), min_size=3, max_size=3),
        st.lists(st.floats(0.3, 3.5, allow_nan=False), min_size=3, max_size=3),
        st.booleans(), st.integers(0, 2**32 - 1), st.sampled_from(["c", "t", "neg"]),
    ).map(build)


def _torch_interp(fn_name="interpolate"):
    def oracle(case):
        import torch
        import torch.ao.nn.quantized.functional as qF
        fn = getattr(qF, fn_name)
        q = case.args[0]
        t = u.to_torch(q)
        kw = case.kwargs
        if q.numel() == 0:
            # PyTorch rejects some empty batches; run a one-sample stand-in and empty it again
            z = qops.make_per_tensor_quantized_tensor(
                np.zeros((1, 1) + q.shape[2:], q._int.dtype), q.q_scale(), q.q_zero_point())
            tz = u.to_torch(z)
            n, c = q.shape[:2]
            return lambda: fn(tz, **kw).narrow(0, 0, n).narrow(1, 0, min(c, 1)).expand(n, c, *(
                [-1] * (q.ndim - 2)))
        one_pixel = all(n == 1 for n in q.shape[2:])
        if one_pixel and q.shape[1] > 1:
            # PyTorch bug: 1x1 spatial inputs with C > 1 take its channels-last kernel with an
            # NCHW output and come back channel-scrambled; one channel at a time is correct.
            return lambda: torch.cat([fn(c, **kw) for c in t.split(1, dim=1)], dim=1)
        if q.shape[1] == 1 and not one_pixel and q.shape[0] > 0:
            # A 1-channel tensor is also "channels-last contiguous", so PyTorch runs its NHWC
            # kernel (bilinear: ±1 near ties, docs/semantics.md §12); with the channel
            # doubled it runs the NCHW kernel that qops follows.
            t2 = torch.cat([t, t], dim=1).contiguous()
            return lambda: fn(t2, **kw)[:, :1]
        return lambda: fn(t, **kw)
    return oracle


def _bq(shape, seed=21):
    x = u.rng(seed).normal(0, 1, size=shape).astype(np.float32)
    return qops.quantize_per_tensor(x, 0.02, 128, qops.quint8)


def _b(shape, **kw):
    return lambda: Case((_bq(shape),), kw, label=str(shape))


def _alias_cases(mode):
    cases = []
    for c in _interp_cases((mode,), seed=3, ac_values=(True,)):
        kw = {k: v for k, v in c.kwargs.items() if k in ("size", "scale_factor")}
        cases.append(Case(c.args, kw, label=c.label))
    return cases


def _alias_strategy(mode):
    def strip(c):
        return Case(c.args, {k: v for k, v in c.kwargs.items() if k in ("size", "scale_factor")},
                    label=c.label)
    return _interp_strategy((mode,)).map(strip)


SPECS = [
    OpSpec("interpolate", "resize", ("upsample_nearest", "upsample_bilinear"), F.interpolate,
           _interp_cases, _interp_strategy,
           bench={"nearest_x2_64_56": _b((1, 64, 56, 56), scale_factor=2, mode="nearest"),
                  "nearest_exact_x2_64_56": _b((1, 64, 56, 56), scale_factor=2,
                                               mode="nearest-exact"),
                  "bilinear_x2_64_56": _b((1, 64, 56, 56), scale_factor=2, mode="bilinear",
                                          align_corners=False),
                  "bilinear_x2_64_56_ac": _b((1, 64, 56, 56), scale_factor=2, mode="bilinear",
                                             align_corners=True),
                  "nearest_x2_3d_32x8x28": _b((1, 32, 8, 28, 28), scale_factor=2, mode="nearest")},
           torch=_torch_interp()),
    OpSpec("upsample", "resize", ("upsample_nearest", "upsample_bilinear"), F.upsample,
           lambda: _interp_cases(seed=1)[::3], _interp_strategy,
           bench={"bilinear_x2_64_56": _b((1, 64, 56, 56), scale_factor=2, mode="bilinear",
                                          align_corners=False)},
           torch=_torch_interp("upsample")),
    OpSpec("upsample_bilinear", "resize", ("upsample_bilinear",), F.upsample_bilinear,
           lambda: _alias_cases("bilinear"), lambda: _alias_strategy("bilinear"),
           bench={"x2_64_56": _b((1, 64, 56, 56), scale_factor=2)},
           torch=_torch_interp("upsample_bilinear")),
    OpSpec("upsample_nearest", "resize", ("upsample_nearest",), F.upsample_nearest,
           lambda: _alias_cases("nearest"), lambda: _alias_strategy("nearest"),
           bench={"x2_64_56": _b((1, 64, 56, 56), scale_factor=2)},
           torch=_torch_interp("upsample_nearest")),
]
