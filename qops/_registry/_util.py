"""Shared helpers for registry entries: random quantized inputs, hypothesis strategies,
conversion to and from PyTorch, and output comparison. Test and benchmark support only."""
import numpy as np

import qops
from qops._qtensor import QTensor

#: lengths around the vector widths (16 and 64 lanes) that every elementwise op is run on
EDGE_LENGTHS = (0, 1, 15, 16, 17, 63, 64, 65, 1000)


def rng(seed):
    return np.random.default_rng(seed)


def random_qtensor(r, shape, dtype=qops.quint8, scale=None, zero_point=None, layout="c"):
    """A per-tensor QTensor of uniformly random raw values; layout "c", "t" (transposed
    view), "neg" (negative strides) or "cl" (channels last)."""
    dtype = qops._dtypes.as_qdtype(dtype)
    if scale is None:
        scale = float(r.uniform(0.005, 0.2))
    if zero_point is None:
        zero_point = int(r.integers(max(dtype.qmin, -1000), min(dtype.qmax, 1000) + 1))
    lo, hi = (dtype.qmin, dtype.qmax) if dtype.qmax <= 255 else (-100000, 100000)
    data = r.integers(lo, hi + 1, size=shape).astype(dtype.storage)
    data = _layout(data, layout)
    return qops.make_per_tensor_quantized_tensor(data, scale, zero_point)


def _layout(data, layout):
    if layout == "t" and data.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(data, -1, -2)).swapaxes(-1, -2)
    if layout == "neg" and data.ndim >= 1:
        return np.ascontiguousarray(data[..., ::-1])[..., ::-1]
    if layout == "cl" and data.ndim >= 3:          # channels last: axis 1 innermost in memory
        return np.ascontiguousarray(np.moveaxis(data, 1, -1)).transpose(
            (0, data.ndim - 1) + tuple(range(1, data.ndim - 1)))
    return data


def qparams_strategy(dtype=None):
    """Hypothesis strategy of (dtype, scale, zero_point) with extremes; `dtype` is one QDtype,
    a list of them, or None for quint8 and qint8."""
    from hypothesis import strategies as st

    if dtype is None:
        dtype = [qops.quint8, qops.qint8]
    dtypes = st.sampled_from(list(dtype)) if isinstance(dtype, (list, tuple)) else st.just(dtype)

    def with_zp(d):
        zp = st.one_of(st.sampled_from([d.qmin, d.qmax, 0 if d.qmin < 0 else 128]),
                       st.integers(d.qmin, d.qmax))
        scale = st.one_of(st.sampled_from([1.0, 0.1, 1e-3, 0.5, 2.0]),
                          st.floats(1e-4, 10.0, allow_nan=False, allow_infinity=False))
        return st.tuples(st.just(d), scale, zp)
    return dtypes.flatmap(with_zp)


def shape_strategy(min_dims=1, max_dims=4, min_side=0, max_side=9, max_numel=4000):
    from hypothesis import strategies as st
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(tuple).filter(
        lambda s: int(np.prod(s, dtype=np.int64)) <= max_numel)


def qtensor_strategy(shape=None, dtype=None, layouts=("c", "t", "neg")):
    """Hypothesis strategy of per-tensor QTensors (random layout and qparams)."""
    from hypothesis import strategies as st

    shapes = shape_strategy() if shape is None else st.just(shape)

    def build(args):
        (d, scale, zp), shp, seed, layout = args
        return random_qtensor(rng(seed), shp, d, scale, zp, layout)
    return st.tuples(qparams_strategy(dtype), shapes, st.integers(0, 2**32 - 1),
                     st.sampled_from(layouts)).map(build)


# -- PyTorch conversion (torch imported only when called) ---------------------------------

def torch_dtype(qdtype):
    import torch
    return {"quint8": torch.quint8, "qint8": torch.qint8, "qint32": torch.qint32}[qdtype.name]


CL_BENCH = "-channels_last"       # the label suffix of channels-last bench cases


def cl_bench(case):
    """True for a channels-last bench case: its PyTorch peer runs on the same memory (its NHWC
    kernels). Test cases keep PyTorch on C order, whose formulas qops follows where the two
    differ (average pools' ties, cat's requantize; see docs/semantics.md §7 and §11)."""
    return case.label.endswith(CL_BENCH)


def to_torch(t):
    """A torch quantized tensor equal to QTensor `t` (same raw values and qparams)."""
    import torch
    if not isinstance(t, QTensor):
        return torch.from_numpy(_c(t))
    raw = torch.from_numpy(_c(t._int))
    if t._axis is None:
        return torch._make_per_tensor_quantized_tensor(raw, t._scale, t._zero_point)
    return torch._make_per_channel_quantized_tensor(
        raw, torch.from_numpy(t._scales.astype(np.float64)),
        torch.from_numpy(t._zero_points.astype(np.int64)), t._axis)


def _c(a):
    # np.ascontiguousarray would turn a 0-d array into 1-d.
    return np.require(a, requirements="C")


def canon(out):
    """A plain, comparable form of an op result: QTensors become (raw ints, qparams)."""
    try:
        import torch
    except ImportError:
        torch = None
    if isinstance(out, (tuple, list)):
        return tuple(canon(o) for o in out)
    if isinstance(out, QTensor):
        if out._axis is None:
            return ("q", out.dtype.name, _c(out._int), float(out._scale),
                    int(out._zero_point))
        return ("qc", out.dtype.name, _c(out._int), out._scales.astype(np.float64),
                out._zero_points.astype(np.int64), int(out._axis))
    if torch is not None and isinstance(out, torch.Tensor):
        if out.is_quantized:
            name = str(out.dtype).replace("torch.", "")
            raw = out.int_repr().contiguous().numpy()
            if out.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
                return ("q", name, raw, float(out.q_scale()), int(out.q_zero_point()))
            return ("qc", name, raw, out.q_per_channel_scales().numpy().astype(np.float64),
                    out.q_per_channel_zero_points().numpy().astype(np.int64),
                    int(out.q_per_channel_axis()))
        return _c(out.detach().numpy())
    if isinstance(out, np.ndarray) or np.isscalar(out):
        return np.asarray(out)
    return out


def assert_same(a, b, what="", check_dtype=True):
    """Assert two canon() forms are identical (bit for bit, same dtypes and shapes)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        assert len(a) == len(b), f"{what}: {len(a)} results vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{what}[{i}]", check_dtype)
        return
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
        if check_dtype:
            assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
        if a.dtype.kind == "f":
            same = (a == b) | (np.isnan(a) & np.isnan(b))
        else:
            same = a == b
        if not same.all():
            idx = np.argwhere(~same)[:5]
            raise AssertionError(f"{what}: {int((~same).sum())} of {a.size} differ, e.g. at "
                                 f"{idx.tolist()}: {a[tuple(idx.T)]} vs {b[tuple(idx.T)]}")
        return
    assert a == b, f"{what}: {a!r} vs {b!r}"


def saturated_fraction(out):
    """Fraction of raw outputs at the dtype's limits (for the not-vacuous test)."""
    if isinstance(out, (tuple, list)):
        fr = [saturated_fraction(o) for o in out if isinstance(o, QTensor)]
        return fr[0] if fr else None
    if isinstance(out, QTensor) and out.numel() > 0:
        d = out.dtype
        v = out._int
        return float(np.mean((v == d.qmin) | (v == d.qmax)))
    return None


_SATURATES = []


def torch_int8_saturates():
    """Whether PyTorch's int8 conv/linear kernels saturate 16-bit pair sums on this CPU.

    fbgemm's AVX2 kernels (CPUs without AVX512-VNNI) multiply with vpmaddubsw, which adds each
    pair of u8 x s8 products into int16 with saturation: 255*127 + 255*127 comes out as 32767.
    (This is why PyTorch's x86 qconfigs default to reduce_range.) VNNI kernels are exact, as
    qops is everywhere. Probed once with a two-element linear whose exact result is 64770.
    """
    if not _SATURATES:
        import torch
        x = torch.quantize_per_tensor(torch.full((1, 2), 255.0), 1.0, 0, torch.quint8)
        w = torch.quantize_per_tensor(torch.full((1, 2), 127.0), 1.0, 0, torch.qint8)
        prev = torch.backends.quantized.engine
        torch.backends.quantized.engine = "fbgemm"
        try:
            y = torch.ops.quantized.linear(x, torch.ops.quantized.linear_prepack(w, None),
                                           1024.0, 0)
        finally:
            torch.backends.quantized.engine = prev
        _SATURATES.append(int(y.int_repr().item()) != round(64770 / 1024))
    return _SATURATES[0]


def saturation_free(case, weight_index=1, limit=64):
    """`case` with its qint8 weight's raw values clipped to [-limit, limit] where PyTorch's
    int8 kernels saturate (torch_int8_saturates), so that PyTorch computes the exact sums
    qops does: with |w| <= 64 every u8 x s8 pair sum fits int16. Elsewhere the case itself."""
    if not torch_int8_saturates():
        return case
    from qops._registry import Case
    w = case.args[weight_index]
    raw = np.clip(w.int_repr(), -limit, limit).astype(np.int8)
    if w._axis is not None:
        w2 = qops.make_per_channel_quantized_tensor(raw, w.q_per_channel_scales(),
                                                    w.q_per_channel_zero_points(),
                                                    w.q_per_channel_axis())
    else:
        w2 = qops.make_per_tensor_quantized_tensor(raw, w.q_scale(), w.q_zero_point())
    args = case.args[:weight_index] + (w2,) + case.args[weight_index + 1:]
    return Case(args, case.kwargs, label=case.label + f" (|w| <= {limit})")
