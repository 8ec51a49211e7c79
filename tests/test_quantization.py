"""qops.quantization: observers, fake quant, qparams formulas, fusion, errors, report, demo.

PyTorch (the oracle) is used where installed: observers and fake quantization must give the
same qparams and outputs bit for bit on the same float32 data.
"""
import io
import math
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qops
import qops.nn as qnn
import qops.quantization as qq
from qops.quantization import _choose_qparams as cq

from conftest import torch_or_skip

F32 = np.float32


# -- data -----------------------------------------------------------------------------------
def _batches(seed, n_batches, kind=None):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        n = int(rng.integers(1, 700))
        k = int(rng.integers(0, 5)) if kind is None else kind
        scale = 10.0 ** rng.uniform(-4, 2)
        if k == 0:
            x = rng.standard_normal(n) * scale
        elif k == 1:
            x = np.maximum(rng.standard_normal(n), 0) * scale
        elif k == 2:
            x = rng.laplace(size=n) * scale + rng.uniform(-1, 1) * scale
        elif k == 3:
            x = rng.standard_cauchy(n)
        else:
            x = rng.integers(-3, 4, n) * scale  # few distinct values, exact ties
        out.append(x.astype(F32))
    return out


def _tdtype(torch, d):
    return {"quint8": torch.quint8, "qint8": torch.qint8}[d]


def _tscheme(torch, sym, per_channel=False):
    if per_channel:
        return torch.per_channel_symmetric if sym else torch.per_channel_affine
    return torch.per_tensor_symmetric if sym else torch.per_tensor_affine


def _qscheme(sym, per_channel=False):
    if per_channel:
        return qops.per_channel_symmetric if sym else qops.per_channel_affine
    return qops.per_tensor_symmetric if sym else qops.per_tensor_affine


def _same_qparams(ta, qa):
    ts, tz = ta
    qs, qz = qa
    np.testing.assert_array_equal(ts.numpy(), qs, strict=False)
    np.testing.assert_array_equal(tz.numpy().astype(np.int64), np.asarray(qz, np.int64))
    assert qs.dtype == F32


# -- the shared formula ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype,scheme,rr,qrange,expect", [
    # docs/semantics.md §14 (e35): [-1, 0.5, 3]
    (qops.quint8, qops.per_tensor_affine, False, None, (4 / 255, 64)),
    (qops.quint8, qops.per_tensor_affine, True, None, (4 / 127, 32)),
    (qops.qint8, qops.per_tensor_symmetric, False, None, (3 / 127.5, 0)),
    (qops.quint8, qops.per_tensor_symmetric, False, None, (3 / 127.5, 128)),
    (qops.qint8, qops.per_tensor_affine, False, None, (4 / 255, -64)),
    (qops.quint8, qops.per_tensor_affine, False, (0, 15), (4 / 15, 4)),
])
def test_calculate_qparams_documented_values(dtype, scheme, rr, qrange, expect):
    kw = {} if qrange is None else {"quant_min": qrange[0], "quant_max": qrange[1]}
    obs = qq.MinMaxObserver(dtype=dtype, qscheme=scheme, reduce_range=rr, **kw)
    obs(np.array([-1, 0.5, 3], F32))
    s, z = obs.calculate_qparams()
    assert s.shape == (1,) and z.shape == (1,)
    assert abs(float(s[0]) - expect[0]) <= 1e-6 * expect[0]
    assert int(z[0]) == expect[1]


def test_calculate_qparams_edge_cases():
    obs = qq.MinMaxObserver()
    with pytest.warns(UserWarning, match="must run observer"):
        s, z = obs.calculate_qparams()
    assert float(s[0]) == 1.0 and int(z[0]) == 0
    obs(np.zeros(5, F32))
    s, z = obs.calculate_qparams()
    assert float(s[0]) == float(np.finfo(F32).eps) and int(z[0]) == 0
    obs = qq.MinMaxObserver()
    obs(np.array([2, 3], F32))
    s, z = obs.calculate_qparams()
    assert abs(float(s[0]) - 3 / 255) < 1e-9 and int(z[0]) == 0
    obs(np.zeros(0, F32))  # empty input is ignored
    with pytest.raises(NotImplementedError, match="reduce range"):
        qq.MinMaxObserver(qscheme=qops.per_tensor_symmetric, reduce_range=True)
    with pytest.raises(ValueError, match="include 0"):
        qq.MinMaxObserver(quant_min=1, quant_max=10)
    with pytest.raises(NotImplementedError):
        qq.MinMaxObserver(qscheme=qops.per_channel_affine)
    with pytest.raises(TypeError, match="float array"):
        qq.MinMaxObserver()(np.array(["a"]))


def test_observers_delegate_to_one_formula(monkeypatch):
    calls = []
    real = cq.calculate_qparams

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(cq, "calculate_qparams", spy)
    x = np.linspace(-1, 2, 50, dtype=F32)
    for obs in (qq.MinMaxObserver(), qq.MovingAverageMinMaxObserver(), qq.HistogramObserver(),
                qq.PerChannelMinMaxObserver(), qq.PercentileObserver(), qq.EntropyObserver()):
        obs(x.reshape(5, 10))
        obs.calculate_qparams()
    assert len(calls) == 6


# -- observers vs PyTorch -------------------------------------------------------------------
@given(seed=st.integers(0, 2 ** 31 - 1), dtype=st.sampled_from(["quint8", "qint8"]),
       sym=st.booleans(), rr=st.booleans(), custom=st.booleans())
def test_minmax_observers_match_torch(seed, dtype, sym, rr, custom):
    torch = torch_or_skip()
    import torch.ao.quantization.observer as to
    if sym and rr and dtype == "quint8":
        rr = False
    kw = {"reduce_range": rr}
    if custom:
        kw.update(quant_min=0 if dtype == "quint8" else -64, quant_max=63)
    batches = _batches(seed, 3)
    for tcls, qcls, extra in ((to.MinMaxObserver, qq.MinMaxObserver, {}),
                              (to.MovingAverageMinMaxObserver, qq.MovingAverageMinMaxObserver,
                               {"averaging_constant": 0.25})):
        a = tcls(dtype=_tdtype(torch, dtype), qscheme=_tscheme(torch, sym), **kw, **extra)
        b = qcls(dtype=getattr(qops, dtype), qscheme=_qscheme(sym), **kw, **extra)
        for x in batches:
            a(torch.from_numpy(x))
            assert b(x) is x
        _same_qparams(a.calculate_qparams(), b.calculate_qparams())


@given(seed=st.integers(0, 2 ** 31 - 1), sym=st.booleans(), axis=st.integers(0, 2),
       moving=st.booleans())
def test_per_channel_observers_match_torch(seed, sym, axis, moving):
    torch = torch_or_skip()
    import torch.ao.quantization.observer as to
    rng = np.random.default_rng(seed)
    if moving:
        a = to.MovingAveragePerChannelMinMaxObserver(averaging_constant=0.3, ch_axis=axis,
                                                     dtype=torch.qint8,
                                                     qscheme=_tscheme(torch, sym, True))
        b = qq.MovingAveragePerChannelMinMaxObserver(averaging_constant=0.3, ch_axis=axis,
                                                     dtype=qops.qint8,
                                                     qscheme=_qscheme(sym, True))
    else:
        a = to.PerChannelMinMaxObserver(ch_axis=axis, dtype=torch.qint8,
                                        qscheme=_tscheme(torch, sym, True))
        b = qq.PerChannelMinMaxObserver(ch_axis=axis, dtype=qops.qint8,
                                        qscheme=_qscheme(sym, True))
    for _ in range(3):
        x = (rng.standard_normal((3, 4, 5)) * 10.0 ** rng.uniform(-3, 2)).astype(F32)
        a(torch.from_numpy(x))
        b(x)
    _same_qparams(a.calculate_qparams(), b.calculate_qparams())


@pytest.mark.parametrize("seed", range(12))
def test_histogram_observer_matches_torch(seed):
    """Histograms (histc, upsampling merge) and the L2 search reproduce PyTorch bit for bit."""
    torch = torch_or_skip()
    import torch.ao.quantization.observer as to
    dtype = ["quint8", "qint8"][seed % 2]
    sym = seed % 3 == 0
    rr = seed % 4 < 2 and not (sym and dtype == "quint8")
    a = to.HistogramObserver(dtype=_tdtype(torch, dtype), qscheme=_tscheme(torch, sym),
                             reduce_range=rr)
    b = qq.HistogramObserver(dtype=getattr(qops, dtype), qscheme=_qscheme(sym), reduce_range=rr)
    for x in _batches(seed, 1 + seed % 4):
        a(torch.from_numpy(x))
        b(x)
        np.testing.assert_array_equal(a.histogram.numpy(), b.histogram)
        assert float(a.min_val) == float(b.min_val) and float(a.max_val) == float(b.max_val)
    _same_qparams(a.calculate_qparams(), b.calculate_qparams())


def test_histogram_observer_inf_and_constant():
    torch = torch_or_skip()
    import torch.ao.quantization.observer as to
    a, b = to.HistogramObserver(), qq.HistogramObserver()
    for x in (np.array([1.0, np.inf, -2.0], F32), np.full(7, 0.5, F32),
              np.array([0.25, 3.0], F32)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a(torch.from_numpy(x))
            b(x)
    _same_qparams(a.calculate_qparams(), b.calculate_qparams())


_HIST_OBSERVERS = (qq.HistogramObserver, qq.PercentileObserver, qq.EntropyObserver)
_FMAX = float(np.finfo(F32).max)


# issue 19 #15: values near +-3e38 whose max - min overflows float32 (PyTorch: a NaN scale),
# or NaN: a clear ValueError before the statistics change
@pytest.mark.parametrize("cls", _HIST_OBSERVERS)
@pytest.mark.parametrize("data", [[-3e38, 0.0, 1.0, 3e38], [-_FMAX, _FMAX], [-2e38, 2e38],
                                  [1.0, np.nan]])
def test_issue19_histogram_observers_huge_values(cls, data):
    sym = cls is qq.PercentileObserver
    obs = cls(dtype=qops.qint8 if sym else qops.quint8,
              qscheme=qops.per_tensor_symmetric if sym else qops.per_tensor_affine)
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.forward\(\).*span.*finite float32"):
        obs(np.array(data, F32))
    assert float(obs.min_val) == np.inf  # nothing recorded
    ok = np.random.default_rng(0).standard_normal(1000).astype(F32)
    obs(ok)
    before = obs.histogram.copy(), float(obs.min_val), float(obs.max_val)
    with pytest.raises(ValueError, match="span"):  # and across batches
        obs(np.array(data, F32))
    np.testing.assert_array_equal(obs.histogram, before[0])
    assert (float(obs.min_val), float(obs.max_val)) == before[1:]
    s, z = obs.calculate_qparams()
    assert np.isfinite(s).all() and s[0] > 0


# issue 19 #15: two batches, each fine alone, whose union overflows
@pytest.mark.parametrize("cls", _HIST_OBSERVERS)
def test_issue19_histogram_observers_union_overflows(cls):
    obs = cls()
    obs(np.array([-2e38, 0.0], F32))
    with pytest.raises(ValueError, match="span"):
        obs(np.array([0.0, 2e38], F32))
    assert float(obs.max_val) == 0.0


# issue 19 #15: a range up to float32's maximum, where (x - min) * bins overflows (PyTorch
# puts every value in bin 0): the histogram is still right and the qparams cover the data
@pytest.mark.parametrize("cls", _HIST_OBSERVERS)
@pytest.mark.parametrize("data", [[0.0, 1.0, 3.4e38], [-3.4e38, 0.0, 1.0],
                                  [-1e35, 5.0, 1e35, 2e35]])
def test_issue19_histogram_observers_near_float32_max(cls, data):
    obs = cls()
    x = np.array(data, F32)
    obs(x)
    assert obs.histogram.sum() == x.size and obs.histogram[0] >= 1 and obs.histogram[-1] >= 1
    s, z = obs.calculate_qparams()
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    assert np.isfinite(s).all() and s[0] > 0 and 0 <= int(z[0]) <= 255
    assert (hi - lo) / 255 * 0.99 <= float(s[0]) <= (hi - lo) / 255 * 1.01


# issue 19 #15: Histogram's L2 search on ranges whose error cubes overflow float32 (from
# ~1e13; PyTorch compares NaN and returns half the range): the search runs on the range
# scaled by a power of two, so x * 2**k gets the qparams of x with the scale times 2**k
@pytest.mark.parametrize("k", [44, 60, 100])
def test_issue19_histogram_observer_wide_ranges_scale_exactly(k):
    x = np.random.default_rng(1).standard_normal(5000).astype(F32)
    x[:3] = [9.0, -7.0, 12.0]
    base = qq.HistogramObserver()
    base(x)
    s0, z0 = base.calculate_qparams()
    wide = qq.HistogramObserver()
    wide(np.ldexp(x, k).astype(F32))
    s, z = wide.calculate_qparams()
    assert float(s[0]) == math.ldexp(float(s0[0]), k) and int(z[0]) == int(z0[0])
    for cls in (qq.PercentileObserver, qq.EntropyObserver):
        obs = cls()
        obs(np.ldexp(x, k).astype(F32))
        s, z = obs.calculate_qparams()
        assert np.isfinite(s).all() and s[0] > 0 and 0 <= int(z[0]) <= 255


# issue 19 #15: tiny ranges keep PyTorch's result (the scale clamps to eps)
def test_issue19_histogram_observer_tiny_range():
    tiny = qq.HistogramObserver()
    tiny((np.random.default_rng(1).standard_normal(5000) * 1e-36).astype(F32))
    s, z = tiny.calculate_qparams()
    assert float(s[0]) == float(np.finfo(F32).eps) and int(z[0]) == 0


# issue 19 #15: a constant too large for +-1 to widen its range in float32 (above 2**24):
# PyTorch puts it in the middle bin; qops failed in numpy's bincount
@pytest.mark.parametrize("value", [1e8, 1e30, -3.4e38])
def test_issue19_histogram_observer_large_constant(value):
    obs = qq.HistogramObserver()
    obs(np.full(5, value, F32))
    assert obs.histogram[1024] == 5
    s, z = obs.calculate_qparams()
    want = {1e8: (392156.875, 0), 1e30: (3.9215688253537837e+27, 0),
            -3.4e38: (1.333333282253755e+36, 255)}[value]  # PyTorch 2.13
    assert (float(s[0]), int(z[0])) == want


# issue 19 #15: a min/max whose difference overflows float32 gives no inf scale
def test_issue19_minmax_observer_range_overflow():
    obs = qq.MinMaxObserver()
    obs(np.array([-3e38, 3e38], F32))
    with pytest.raises(ValueError, match="min_val=-3e\\+38, max_val=3e\\+38.*not a finite"):
        obs.calculate_qparams()
    sym = qq.MinMaxObserver(dtype=qops.qint8, qscheme=qops.per_tensor_symmetric)
    sym(np.array([-3e38, 3e38], F32))
    s, z = sym.calculate_qparams()  # max(|min|, |max|) / 127.5 is representable
    assert np.isfinite(s).all() and int(z[0]) == 0


def test_fixed_placeholder_recording_noop():
    obs = qq.default_fixed_qparams_range_0to1_observer()
    s, z = obs.calculate_qparams()
    assert float(s[0]) == 1 / 256 and int(z[0]) == 0
    rec = qq.RecordingObserver()
    x = np.arange(3, dtype=F32)
    rec(x)
    x[0] = 9
    assert rec.get_tensor_value()[0][0] == 0
    for cls in (qq.PlaceholderObserver, qq.NoopObserver, qq.RecordingObserver):
        with pytest.raises(RuntimeError, match="calculate_qparams should not be called"):
            cls().calculate_qparams()
    assert qq.default_dynamic_quant_observer().is_dynamic


def test_with_args_and_callable_args():
    f = qq.MinMaxObserver.with_args(dtype=qops.qint8).with_args(reduce_range=True)
    a, b = f(), f()
    assert a is not b and a.dtype is qops.qint8 and a.quant_max == 63
    counter = iter(range(100))
    g = qq.MovingAverageMinMaxObserver.with_callable_args(
        averaging_constant=lambda: 0.5 + next(counter))
    assert g().averaging_constant == 0.5 and g().averaging_constant == 1.5


def test_percentile_and_entropy_observers_clip_outliers():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(20000).astype(F32)
    x[:3] = [60.0, -55.0, 80.0]  # outliers a min/max observer would keep
    mm = qq.MinMaxObserver()
    mm(x)
    for obs in (qq.PercentileObserver(percentile=99.9), qq.EntropyObserver()):
        obs(x)
        s, z = obs.calculate_qparams()
        assert float(s[0]) < float(mm.calculate_qparams()[0][0]) / 4
        assert qops.quint8.qmin <= int(z[0]) <= qops.quint8.qmax
    sym = qq.PercentileObserver(percentile=99.0, dtype=qops.qint8,
                                qscheme=qops.per_tensor_symmetric)
    sym(x)
    s, z = sym.calculate_qparams()
    assert int(z[0]) == 0 and 2.0 / 127.5 < float(s[0]) < 4.0 / 127.5
    relu = qq.EntropyObserver()
    relu(np.abs(x))
    assert int(relu.calculate_qparams()[1][0]) == 0  # non-negative data keeps zp at 0
    with pytest.raises(ValueError, match="percentile"):
        qq.PercentileObserver(percentile=0)


def test_observer_state_dict_round_trip():
    a = qq.PerChannelMinMaxObserver(dtype=qops.qint8, qscheme=qops.per_channel_symmetric)
    a(np.arange(12, dtype=F32).reshape(3, 4) - 5)
    b = qq.PerChannelMinMaxObserver(dtype=qops.qint8, qscheme=qops.per_channel_symmetric)
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a.calculate_qparams()[0], b.calculate_qparams()[0])


# -- fbgemm ChooseQuantizationParams --------------------------------------------------------
@given(seed=st.integers(0, 2 ** 31 - 1), rr=st.booleans())
def test_choose_quantization_params_matches_torch(seed, rr):
    torch = torch_or_skip()
    rng = np.random.default_rng(seed)
    for _ in range(20):
        x = (rng.standard_normal(int(rng.integers(1, 40))) * 10.0 ** rng.uniform(-9, 3)
             + rng.uniform(-1, 1) * 10.0 ** rng.uniform(-9, 2)).astype(F32)
        if rng.random() < 0.3:
            x = np.abs(x)
        ts, tz = torch._choose_qparams_per_tensor(torch.from_numpy(x), rr)
        qs, qz = qq.choose_quantization_params(float(x.min()), float(x.max()), 0, 255, False, rr)
        assert (ts, tz) == (qs, qz)


def test_choose_quantization_params_small_scale_and_sparsity():
    s, z = qq.choose_quantization_params(0.0, 1e-6, 0, 255)
    assert s == float(F32(6.1e-5)) and z == 0
    s, z = qq.choose_quantization_params(-1.0, 2.0, -128, 127, preserve_sparsity=True)
    assert z == 0  # (qmin + qmax) / 2 = -0.5 rounds to even
    s, z = qq.choose_quantization_params(-1.0, 2.0, 0, 255, preserve_sparsity=True)
    assert z == 128
    with pytest.raises(ValueError, match="min"):
        qq.choose_quantization_params(2.0, 1.0, 0, 255)


# -- fake quantization ----------------------------------------------------------------------
@given(seed=st.integers(0, 2 ** 31 - 1), rng_idx=st.integers(0, 3), ties=st.booleans())
def test_fake_quantize_functions_match_torch(seed, rng_idx, ties):
    torch = torch_or_skip()
    rng = np.random.default_rng(seed)
    qmin, qmax = [(0, 255), (-128, 127), (0, 127), (0, 15)][rng_idx]
    s = float(F32(10.0 ** rng.uniform(-3, 1)))
    zp = int(rng.integers(qmin, qmax + 1))
    x = (rng.standard_normal(int(rng.integers(1, 200))) * 10.0 ** rng.uniform(-2, 2)).astype(F32)
    if ties:
        x = ((np.round(x / s) + 0.5) * s).astype(F32)
    np.testing.assert_array_equal(
        torch.fake_quantize_per_tensor_affine(torch.from_numpy(x), s, zp, qmin, qmax).numpy(),
        qq.fake_quantize_per_tensor_affine(x, s, zp, qmin, qmax))
    xc = (rng.standard_normal((2, 3, 5)) * 3).astype(F32)
    sc = (10.0 ** rng.uniform(-2, 0, 3)).astype(F32)
    zc = rng.integers(qmin, qmax + 1, 3)
    np.testing.assert_array_equal(
        torch.fake_quantize_per_channel_affine(torch.from_numpy(xc), torch.from_numpy(sc),
                                               torch.from_numpy(zc).int(), 1, qmin,
                                               qmax).numpy(),
        qq.fake_quantize_per_channel_affine(xc, sc, zc, 1, qmin, qmax))


def test_fake_quantize_tie_rule_and_mask():
    # docs/semantics.md §15: zp added after rounding, half to even:
    # [-0.5, 0.5, 1.5, 2.5], s=1, zp=3.
    out = qq.fake_quantize_per_channel_affine(np.array([[-0.5, 0.5, 1.5, 2.5]], F32),
                                              np.array([1.0]), np.array([3]), 0, 0, 255)
    np.testing.assert_array_equal(out + 3, [[3, 3, 5, 5]])
    y, mask = qq.fake_quantize_per_tensor_affine_with_mask(np.array([-1, 0.5, 9], F32), 0.1, 0,
                                                           0, 50)
    np.testing.assert_array_equal(mask, [False, True, False])
    np.testing.assert_allclose(y, [0, 0.5, 5.0], rtol=1e-6)
    with pytest.raises(ValueError, match="quant_min"):
        qq.fake_quantize_per_tensor_affine(np.zeros(2, F32), 0.1, 0, 10, 0)
    with pytest.raises(ValueError, match="scale"):
        qq.fake_quantize_per_tensor_affine(np.zeros(2, F32), 0.0, 0, 0, 255)


@pytest.mark.parametrize("name", ["default_fake_quant", "default_per_channel_weight_fake_quant",
                                  "default_fused_act_fake_quant", "default_fused_wt_fake_quant",
                                  "default_fused_per_channel_wt_fake_quant",
                                  "default_weight_fake_quant", "default_histogram_fake_quant"])
def test_fake_quantize_modules_match_torch(name):
    torch = torch_or_skip()
    import torch.ao.quantization as tq
    a, b = getattr(tq, name)(), getattr(qq, name)()
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for k in range(5):
        x = (rng.standard_normal((4, 3, 5)) * rng.uniform(0.5, 3) + rng.uniform(-1, 1)).astype(F32)
        if k == 3:
            a.disable_observer()
            b.disable_observer()
        np.testing.assert_array_equal(a(torch.from_numpy(x)).detach().numpy(), b(x))
        np.testing.assert_array_equal(a.scale.numpy(), b.scale)
    _same_qparams(a.calculate_qparams(), b.calculate_qparams())
    b.disable_fake_quant()
    x = np.ones((4, 3, 5), F32)
    assert b(x) is x


def test_fake_quant_switches_with_apply():
    m = qnn.Sequential(qnn.Linear(3, 3))
    m.fq = qq.default_fake_quant()
    m.apply(qq.disable_observer)
    assert int(m.fq.observer_enabled[0]) == 0
    m.apply(qq.enable_observer)
    m.apply(qq.disable_fake_quant)
    assert int(m.fq.fake_quant_enabled[0]) == 0 and int(m.fq.observer_enabled[0]) == 1


# -- qconfig --------------------------------------------------------------------------------
def test_qconfig_defaults():
    q = qq.get_default_qconfig("x86")
    act, w = q.activation(), q.weight()
    assert isinstance(act, qq.HistogramObserver) and act.reduce_range
    assert isinstance(w, qq.PerChannelMinMaxObserver) and w.qscheme is qops.per_channel_symmetric
    assert w.dtype is qops.qint8
    assert qq.qconfig_equals(q, qq.get_default_qconfig("fbgemm"))
    assert not qq.qconfig_equals(q, qq.default_qconfig)
    qat = qq.get_default_qat_qconfig("x86")
    assert isinstance(qat.activation(), qq.FusedMovingAvgObsFakeQuantize)
    assert qat.activation().quant_max == 127
    assert qq.float16_dynamic_qconfig.weight().dtype == np.float16
    with pytest.raises(ValueError, match="backend"):
        qq.get_default_qconfig("arm")
    with pytest.raises(ValueError, match="observer instance"):
        qq.QConfig(activation=qq.MinMaxObserver(), weight=qq.MinMaxObserver)


# -- fusion ---------------------------------------------------------------------------------
def _conv_bn_model(seed=0):
    rng = np.random.default_rng(seed)
    m = qnn.Sequential()
    m.add_module("conv", qnn.Conv2d(3, 4, 3, bias=seed % 2 == 0))
    m.add_module("bn", qnn.BatchNorm2d(4))
    m.add_module("relu", qnn.ReLU())
    m.add_module("flat", qnn.Flatten())
    m.add_module("fc", qnn.Linear(4 * 3 * 3, 5))
    m.add_module("bn1d", qnn.BatchNorm1d(5))
    m.add_module("relu2", qnn.ReLU())
    m.conv.weight = rng.standard_normal(m.conv.weight.shape).astype(F32)
    for bn in (m.bn, m.bn1d):
        n = bn.num_features
        bn.running_mean = rng.standard_normal(n).astype(F32)
        bn.running_var = rng.uniform(0.1, 2, n).astype(F32)
        bn.weight = rng.uniform(0.5, 1.5, n).astype(F32)
        bn.bias = rng.standard_normal(n).astype(F32)
    return m.eval()


@pytest.mark.parametrize("seed", [0, 1])
def test_fuse_folds_batch_norm_like_torch(seed):
    torch = torch_or_skip()
    import torch.ao.quantization as tq
    m = _conv_bn_model(seed)
    tm = torch.nn.Sequential()
    tm.add_module("conv", torch.nn.Conv2d(3, 4, 3, bias=seed % 2 == 0))
    tm.add_module("bn", torch.nn.BatchNorm2d(4))
    tm.add_module("relu", torch.nn.ReLU())
    tm.add_module("flat", torch.nn.Flatten())
    tm.add_module("fc", torch.nn.Linear(36, 5))
    tm.add_module("bn1d", torch.nn.BatchNorm1d(5))
    tm.add_module("relu2", torch.nn.ReLU())
    tm.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in m.state_dict().items()},
                       strict=False)
    tm.eval()
    tf = tq.fuse_modules(tm, [["conv", "bn", "relu"], ["fc", "bn1d"]])
    qf = qq.fuse_modules(m, [["conv", "bn", "relu"], ["fc", "bn1d"]])
    assert type(qf.conv).__name__ == "ConvReLU2d" and type(qf.bn).__name__ == "Identity"
    assert type(qf.fc) is qnn.Linear and type(m.conv) is qnn.Conv2d  # not in place
    # docs/semantics.md §16: the folded weights are bit-exact with torch.
    np.testing.assert_array_equal(tf.conv[0].weight.detach().numpy(), qf.conv[0].weight)
    np.testing.assert_array_equal(tf.conv[0].bias.detach().numpy(), qf.conv[0].bias)
    np.testing.assert_array_equal(tf.fc.weight.detach().numpy(), qf.fc.weight)
    np.testing.assert_array_equal(tf.fc.bias.detach().numpy(), qf.fc.bias)
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 5)).astype(F32)
    np.testing.assert_allclose(qf(x), m(x), rtol=1e-5, atol=1e-5)


def test_fuse_patterns_and_qat_fusion():
    m = qnn.Sequential()
    m.add_module("conv", qnn.Conv1d(2, 3, 1))
    m.add_module("relu", qnn.ReLU())
    m.add_module("bn", qnn.BatchNorm2d(3))
    m.add_module("relu2", qnn.ReLU())
    m.add_module("fc", qnn.Linear(3, 3))
    m.add_module("relu3", qnn.ReLU())
    f = qq.fuse_modules(m.eval(), [["conv", "relu"], ["bn", "relu2"], ["fc", "relu3"]])
    assert [type(c).__name__ for c in f.children()] == [
        "ConvReLU1d", "Identity", "BNReLU2d", "Identity", "LinearReLU", "Identity"]
    t = _conv_bn_model().train()
    f = qq.fuse_modules_qat(t, [["conv", "bn", "relu"], ["fc", "bn1d"]])
    assert type(f.conv).__name__ == "ConvBnReLU2d" and type(f.fc).__name__ == "LinearBn1d"


def test_fuse_errors_name_the_modules():
    m = _conv_bn_model()
    with pytest.raises(NotImplementedError, match=r"\['relu', 'conv'\].*ReLU, Conv2d"):
        qq.fuse_modules(m, ["relu", "conv"])
    with pytest.raises(AttributeError, match="no submodule named 'conv9'"):
        qq.fuse_modules(m, [["conv9", "bn"]])
    m.bn.train()
    with pytest.raises(ValueError, match=r"\['conv', 'bn'\].*same mode"):
        qq.fuse_modules(m, ["conv", "bn"])
    with pytest.raises(ValueError, match="training mode"):
        qq.fuse_modules(m.train(), ["conv", "bn"])
    with pytest.raises(ValueError, match="at least two"):
        qq.fuse_modules(m, [["conv"]])


def test_fuse_keeps_hooks():
    m = _conv_bn_model()
    seen = []
    m.conv.register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    m.relu.register_forward_hook(lambda mod, args, out: seen.append("post"))
    f = qq.fuse_modules(m, ["conv", "bn", "relu"], inplace=True)
    assert f is m
    f(np.zeros((1, 3, 5, 5), F32))
    # As in PyTorch, the folded conv is a copy that keeps its own pre-hook too.
    assert seen == ["pre", "pre", "post"]


# -- prepare / convert basics and errors ----------------------------------------------------
def _small_static_model():
    m = qnn.Sequential()
    m.add_module("quant", qq.QuantStub())
    m.add_module("fc", qnn.Linear(6, 4))
    m.add_module("relu", qnn.ReLU())
    m.add_module("fc2", qnn.Linear(4, 3))
    m.add_module("dequant", qq.DeQuantStub())
    return m.eval()


def test_prepare_attaches_observers_and_convert_swaps():
    m = _small_static_model()
    m.qconfig = qq.default_qconfig
    p = qq.prepare(m)
    assert "activation_post_process" not in m.fc._modules  # not in place
    obs = {}
    qq.get_observer_dict(p, obs)
    assert sorted(obs) == ["fc.activation_post_process", "fc2.activation_post_process",
                           "quant.activation_post_process"]
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(F32)
    p(x)
    assert float(p.fc.activation_post_process.max_val) > 0
    q = qq.convert(p)
    assert type(q.fc).__name__ == "Linear" and type(q.fc).__module__.startswith("qops.nn.quantized")
    assert type(q.quant).__name__ == "Quantize" and type(q.dequant).__name__ == "DeQuantize"
    assert not hasattr(q.fc2, "qconfig") and "activation_post_process" not in q.fc2._modules
    y = q(x)
    assert y.shape == (8, 3) and np.abs(y - m(x)).max() < 0.1


def test_quantize_and_default_eval_fn():
    m = _small_static_model()
    m.qconfig = qq.default_qconfig
    data = [np.random.default_rng(i).standard_normal((4, 6)).astype(F32) for i in range(3)]
    q = qq.quantize(m, qq.default_eval_fn, [data])
    assert type(q.fc2).__name__ == "Linear" and type(m.fc2) is qnn.Linear
    q2 = qq.quantize(m, qq.default_eval_fn, [[(d, 0) for d in data]])
    x = data[0]
    np.testing.assert_array_equal(q(x), q2(x))


def test_add_quant_dequant_and_quant_wrapper():
    m = qnn.Sequential(qnn.Linear(3, 3), qnn.ReLU())
    m[0].qconfig = qq.default_qconfig
    out = qq.add_quant_dequant(m)
    assert isinstance(out[0], qq.QuantWrapper) and type(out[1]) is qnn.ReLU
    w = qq.QuantWrapper(qnn.Linear(3, 2))
    assert [n for n, _ in w.named_children()] == ["quant", "dequant", "module"]


def test_propagate_qconfig_by_name_and_type():
    m = _small_static_model()
    qq.propagate_qconfig_(m, {"fc": qq.default_qconfig, qnn.Linear: qq.default_per_channel_qconfig})
    assert m.fc.qconfig is qq.default_qconfig
    assert m.fc2.qconfig is qq.default_per_channel_qconfig
    assert m.relu.qconfig is None
    with pytest.raises(ValueError, match="fc9"):
        qq.propagate_qconfig_(_small_static_model(), {"fc9": qq.default_qconfig})


def test_conversion_errors_name_the_module():
    m = _small_static_model()
    with pytest.raises(ValueError, match="no module of Sequential has a qconfig"):
        qq.prepare(m)
    with pytest.raises(ValueError, match="no module of Sequential has a qconfig"):
        qq.convert(m)
    m.qconfig = qq.default_qconfig
    with pytest.raises(ValueError, match="has no observers; run prepare"):
        qq.convert(m)  # convert before prepare
    p = qq.prepare(m)
    del p.fc._modules["activation_post_process"]  # one layer left unprepared
    with pytest.raises(ValueError, match=r"convert: cannot turn 'fc' \(Linear\)"):
        qq.convert(p)
    m.fc2.qconfig = None
    p = qq.prepare(m)
    with pytest.warns(UserWarning, match=r"'fc' \(Linear\) has seen no data"):
        qq.convert(p)
    with pytest.raises(ValueError, match="training mode"):
        qq.prepare_qat(_small_static_model())
    with pytest.raises(TypeError, match="qops.nn.Module"):
        qq.prepare(object())
    with pytest.raises(TypeError, match="qconfig"):
        qq.propagate_qconfig_(_small_static_model(), {qnn.Linear: "x86"})


def test_quantize_dynamic_arguments():
    m = qnn.Sequential(qnn.Linear(4, 4), qnn.ReLU(), qnn.Linear(4, 2))
    q = qq.quantize_dynamic(m)
    assert type(q[0]).__module__.startswith("qops.nn.quantized.dynamic")
    assert type(m[0]) is qnn.Linear
    q = qq.quantize_dynamic(m, {"2"})
    assert type(q[0]) is qnn.Linear and type(q[2]).__module__.startswith("qops.nn.quantized")
    with pytest.raises(ValueError, match="dtype"):
        qq.quantize_dynamic(m, dtype="qint32")
    with pytest.raises(TypeError, match="qconfig_spec"):
        qq.quantize_dynamic(m, qconfig_spec="Linear")


# -- report and demo ------------------------------------------------------------------------
def test_layer_report_table():
    m = _small_static_model()
    m.qconfig = qq.default_qconfig
    p = qq.prepare(m)
    x = np.random.default_rng(0).standard_normal((32, 6)).astype(F32)
    p(x)
    q = qq.convert(p)
    rows = qq.report.compare_layers(m, q, x)
    assert [r.name for r in rows] == ["quant", "fc", "relu", "fc2", "dequant"]
    for r in rows:
        assert 15 < r.sqnr_db < 80 and r.max_abs_error < 0.1
    assert rows[1].saturated_fraction == 0.0 and rows[1].scale > 0
    text = qq.report.format_report(rows)
    assert "SQNR" in text and "fc2" in text and "largest SQNR drop" in text
    assert qq.report.sqnr(np.ones(3), np.ones(3)) == math.inf
    with pytest.raises(ValueError, match="share no layer names"):
        qq.report.compare_layers(qnn.Sequential(), q, x)


def test_report_plot_needs_matplotlib(tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert qq.report.plot_report([], str(tmp_path / "p.png")) is None
        return
    rows = [qq.report.LayerReport("a", "Linear", 30.0, 0.1, 0.0, 0.1, 0, 10)]
    assert qq.report.plot_report(rows, str(tmp_path / "p.png")) == str(tmp_path / "p.png")


def test_demo_runs_and_saves(tmp_path, capsys):
    from qops.quantization import _demo
    assert _demo.main(["--out", str(tmp_path), "--repeat", "1"]) == 0
    out, err = capsys.readouterr()
    assert "float32 accuracy" in out and "int8 accuracy" in out and "SQNR" in out
    assert "calibrating" not in err          # no progress bar outside a terminal
    int8 = float(out.split("int8 accuracy:")[1].split("%")[0])
    assert int8 > 95.0
    saved = tmp_path / "digits_cnn_int8.qops"
    assert saved.exists()
    model, calib, test, labels = _demo.load_data()
    _, q = _demo.quantize_demo_model(model, calib, stream=io.StringIO())
    back = qops.load(str(saved))
    np.testing.assert_array_equal(back(test[:50]), q(test[:50]))


def test_demo_data_is_small():
    import os

    from qops.quantization import _demo
    assert os.path.getsize(_demo.DATA_FILE) < 400 * 1024


def test_custom_module_mappings():
    class MyFloat(qnn.Module):
        def __init__(self):
            super().__init__()
            self.fc = qnn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x) * 2

    class MyObserved(MyFloat):
        @classmethod
        def from_float(cls, mod):
            new = cls()
            new.fc = mod.fc
            new.qconfig = mod.qconfig
            return new

    class MyQuantized(qnn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, x):
            return x

        @classmethod
        def from_observed(cls, mod):
            return cls(float(mod.activation_post_process.calculate_qparams()[0][0]))

    m = qnn.Sequential()
    m.add_module("quant", qq.QuantStub())
    m.add_module("custom", MyFloat())
    m.add_module("dequant", qq.DeQuantStub())
    m.eval().qconfig = qq.default_qconfig
    p = qq.prepare(m, prepare_custom_config_dict={
        "float_to_observed_custom_module_class": {MyFloat: MyObserved}})
    assert type(p.custom) is MyObserved and "activation_post_process" in p.custom._modules
    p(np.ones((2, 3), F32))
    q = qq.convert(p, convert_custom_config_dict={
        "observed_to_quantized_custom_module_class": {MyObserved: MyQuantized}})
    assert type(q.custom) is MyQuantized and q.custom.scale > 0


def test_observer_state_dict_helpers():
    m = _small_static_model()
    m.qconfig = qq.default_qconfig
    p = qq.prepare(m)
    p(np.random.default_rng(0).standard_normal((8, 6)).astype(F32))
    saved = qq.get_observer_state_dict(p)
    assert "fc.activation_post_process.min_val" in saved
    fresh = qq.prepare(m)
    qq.load_observer_state_dict(fresh, saved)
    for name in ("quant", "fc", "fc2"):
        a = p.get_submodule(name).activation_post_process.calculate_qparams()
        b = fresh.get_submodule(name).activation_post_process.calculate_qparams()
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    with pytest.raises(KeyError, match="fc2"):
        qq.load_observer_state_dict(fresh, {k: v for k, v in saved.items()
                                            if not k.startswith("fc2.")})


def test_quantize_qat_end_to_end():
    m = qnn.Sequential(qq.QuantStub(), qnn.Conv2d(2, 3, 3), qnn.BatchNorm2d(3), qnn.ReLU(),
                       qq.DeQuantStub()).train()
    m = qq.fuse_modules_qat(m, ["1", "2", "3"])
    m.qconfig = qq.get_default_qat_qconfig()
    x = np.random.default_rng(0).standard_normal((4, 2, 5, 5)).astype(F32)
    seen = []

    def train(model, data):
        for d in data:
            seen.append(type(model[1]).__module__)
            model(d)
    q = qq.quantize_qat(m, train, [[x, 2 * x]])
    assert seen[0].startswith("qops.nn.intrinsic.qat")
    assert [type(c).__name__ for c in q.children()] == [
        "Quantize", "ConvReLU2d", "Identity", "Identity", "DeQuantize"]
    assert type(q[1]).__module__.startswith("qops.nn.intrinsic.quantized")
    y = q(x)
    assert y.shape == (4, 3, 3, 3) and y.min() >= 0
