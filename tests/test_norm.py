"""Norm family tests beyond the registry's: argument errors, empty inputs, ties vs PyTorch."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._registry import Case
from qops._registry import norm as reg

R = np.random.default_rng(5)


def _q(shape, dtype=qops.quint8, zp=128, scale=0.05):
    lo, hi = dtype.qmin, dtype.qmax
    return qops.make_per_tensor_quantized_tensor(
        R.integers(lo, hi + 1, size=shape).astype(dtype.storage), scale, zp if lo == 0 else 0)


@pytest.fixture(params=["ref", "fast"])
def backend(request):
    with qops.backend(request.param):
        yield request.param


def test_layer_norm_shape_errors(backend):
    x = _q((2, 3, 4))
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(x, (3,))
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(x, (2, 2, 3, 4))
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(x, ())
    with pytest.raises(TypeError, match="normalized_shape"):
        F.layer_norm(x, "4")
    with pytest.raises(ValueError, match="weight"):
        F.layer_norm(x, (3, 4), weight=np.ones(12, np.float32))
    with pytest.raises(ValueError, match="bias"):
        F.layer_norm(x, 4, bias=np.ones(3, np.float32))
    assert F.layer_norm(x, 4).shape == (2, 3, 4)


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan"), float("inf")])
def test_eps_must_be_positive(backend, eps):
    x = _q((2, 4, 3))
    c = np.zeros(4, np.float32)
    for call in (lambda: F.layer_norm(x, 3, eps=eps), lambda: F.group_norm(x, 2, eps=eps),
                 lambda: F.instance_norm(x, eps=eps),
                 lambda: F.batch_norm(x, c, c + 1, eps=eps),
                 lambda: F.batch_norm_relu(x, c, c + 1, eps=eps)):
        with pytest.raises(ValueError, match="eps"):
            call()


def test_group_norm_errors(backend):
    x = _q((2, 6, 5))
    with pytest.raises(ValueError, match="num_groups"):
        F.group_norm(x, 4)
    with pytest.raises(ValueError, match="num_groups"):
        F.group_norm(x, 0)
    with pytest.raises(TypeError, match="num_groups"):
        F.group_norm(x, 2.0)
    with pytest.raises(ValueError, match="input"):
        F.group_norm(_q((2, 6)), 2)
    with pytest.raises(ValueError, match="weight"):
        F.group_norm(x, 2, weight=np.ones(3, np.float32))


def test_instance_and_batch_norm_dims(backend):
    c = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="input"):
        F.instance_norm(_q((2, 3)))
    with pytest.raises(ValueError, match="input"):
        F.instance_norm(_q((1, 3, 1, 1, 1, 2)))
    with pytest.raises(ValueError, match="input"):
        F.batch_norm(_q((3,)), c, c + 1)
    with pytest.raises(ValueError, match="running_mean"):
        F.batch_norm(_q((2, 4, 5)), c, c + 1)
    with pytest.raises(ValueError, match="running_var"):
        F.batch_norm(_q((2, 3, 5)), c, c - 1)
    with pytest.raises(TypeError, match="running_mean"):
        F.batch_norm(_q((2, 3, 5)), None, c + 1)


def test_input_and_qparams_errors(backend):
    x32 = qops.make_per_tensor_quantized_tensor(np.zeros((2, 3, 4), np.int32), 0.1, 0)
    with pytest.raises(TypeError, match="input"):
        F.layer_norm(x32, 4)
    with pytest.raises(TypeError, match="input"):
        F.layer_norm(np.zeros((2, 4), np.int32), 4)
    # a float array is the float layer norm (registry op layer_norm_float), without qparams
    with pytest.raises(ValueError, match="output_scale"):
        F.layer_norm(np.zeros((2, 4), np.float32), 4, output_scale=0.1)
    with pytest.raises(ValueError, match="eps"):
        F.layer_norm(np.zeros((2, 4), np.float32), 4, eps=-1.0)
    pc = qops.quantize_per_channel(np.zeros((2, 3, 4), np.float32), [0.1, 0.2, 0.3], [0, 0, 0], 1,
                                   qops.quint8)
    with pytest.raises(TypeError, match="per-tensor"):
        F.group_norm(pc, 3)
    with pytest.raises(ValueError, match="output_zero_point"):
        F.layer_norm(_q((2, 4)), 4, output_scale=0.1, output_zero_point=256)
    with pytest.raises(ValueError, match="output_scale"):
        F.instance_norm(_q((2, 3, 4)), output_scale=0.0)


def test_empty_inputs_keep_output_qparams(backend):
    c = np.zeros(4, np.float32)
    for out in (F.batch_norm(_q((0, 4, 3)), c, c + 1, output_scale=0.03, output_zero_point=7),
                F.layer_norm(_q((0, 3)), 3, output_scale=0.03, output_zero_point=7),
                F.group_norm(_q((0, 4, 3)), 2, output_scale=0.03, output_zero_point=7)):
        assert out.numel() == 0 and out.q_scale() == 0.03 and out.q_zero_point() == 7


def test_inputs_equal_values(backend):
    # Zero variance: every element normalizes to 0, so the output is the quantized bias.
    x = qops.make_per_tensor_quantized_tensor(np.full((3, 40), 77, np.uint8), 0.1, 90)
    b = np.linspace(-1, 1, 40).astype(np.float32)
    out = F.layer_norm(x, 40, bias=b, output_scale=0.05, output_zero_point=128)
    expect = np.clip(np.rint(b / np.float32(0.05)).astype(np.int64) + 128, 0, 255)
    np.testing.assert_array_equal(out.int_repr(), np.broadcast_to(expect, (3, 40)))


def test_instance_norm_is_group_norm_per_channel(backend):
    x = _q((2, 5, 3, 7))
    w = R.normal(size=5).astype(np.float32)
    a = F.instance_norm(x, w, None, 1e-5, 0.03, 120)
    b = F.group_norm(x, 5, w, None, 1e-5, 0.03, 120)
    assert a.equal(b)


def test_batch_norm_relu_is_clamped_batch_norm(backend):
    x = _q((2, 4, 9), qops.qint8)
    m, v = R.normal(size=4).astype(np.float32), R.uniform(0.5, 2, 4).astype(np.float32)
    a = F.batch_norm(x, m, v, None, None, 1e-5, 0.02, 3).int_repr()
    b = F.batch_norm_relu(x, m, v, None, None, 1e-5, 0.02, 3).int_repr()
    np.testing.assert_array_equal(b, np.maximum(a, 3))


def test_weight_none_is_ones(backend):
    x = _q((3, 33))
    a = F.layer_norm(x, 33, None, None, 1e-5, 0.03, 128)
    b = F.layer_norm(x, 33, np.ones(33), np.zeros(33), 1e-5, 0.03, 128)
    assert a.equal(b)


def test_layer_norm_ties_vs_torch(torch):
    """PyTorch rounds the last N % (vector width) elements of each row with Q_leg: at exact
    ties with an odd zero point they differ by one from qops' single (Q_vec) rounding."""
    data = np.full((2, 70), 5, np.int8)
    x = qops.make_per_tensor_quantized_tensor(data, 0.1, 1)
    b = np.full(70, 0.125, np.float32)              # y / out_scale = 0.5 exactly: a tie
    case = Case((x, (70,), None, b, 1e-5, 0.25, 1))
    with qops.backend("ref"):
        ours = reg.u.canon(F.layer_norm(*case.args))
    theirs = reg.u.canon(reg._torch_ln(case)())
    differ = ours[2] != theirs[2]
    assert differ.any(), "expected PyTorch's scalar tail to round this tie differently"
    assert not differ[:, :64].any()              # the vector body agrees
    reg.compare_ln(case, ours, theirs, max_fraction=1.0)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
def test_long_channels_fast_equals_ref(dtype):
    # Channels of >= 512 elements take the fast kernels' per-channel lookup tables (on CPUs
    # with AVX512-VBMI); the registry's cases are too small to reach them.
    r = np.random.default_rng(9)
    zp = 128 if dtype is qops.quint8 else -3
    raw = np.clip(np.rint(r.normal(zp, 30, size=(2, 6, 23, 29))), dtype.qmin, dtype.qmax)
    x = qops.make_per_tensor_quantized_tensor(raw.astype(dtype.storage), 0.04, zp)
    c = 6
    w, b = r.normal(1, 0.3, c).astype(np.float32), r.normal(0, 0.3, c).astype(np.float32)
    m, v = r.normal(0, 0.2, c).astype(np.float32), r.uniform(0.5, 2, c).astype(np.float32)
    calls = [lambda: F.batch_norm(x, m, v, w, b, 1e-5, 0.03, zp + 1),
             lambda: F.batch_norm_relu(x, m, v, None, b, 1e-5, 0.03, zp + 1),
             lambda: F.group_norm(x, 3, w, b, 1e-5, 0.03, zp + 1),
             lambda: F.instance_norm(x, None, b, 1e-3, 0.025, zp)]
    for call in calls:
        with qops.backend("ref"):
            ref = call()
        for threads in (1, 2):
            with qops.threads(threads):
                assert call().equal(ref)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("params", [(0.05, 0.03, 1.0, 0.0), (0.5, 0.25, 0.5, 0.25),
                                    (1.0, 0.0625, 1.0, 0.5), (0.02, 1.0, 3.0, -7.0)])
def test_long_channels_equal_ref(dtype, params):
    # channels of 2048+ values may run as one fma where that gives the same bytes for all 256
    # raw values (AVX2 builds check); power-of-two scales and weights put values on .5 ties
    scale, out_scale, wv, bv = params
    r = np.random.default_rng(3)
    raw = r.integers(dtype.qmin, dtype.qmax + 1, size=(2, 3, 64, 48)).astype(dtype.storage)
    x = qops.make_per_tensor_quantized_tensor(raw, scale, 3)
    w, b = np.full(3, wv, np.float32), np.full(3, bv, np.float32)
    outs = []
    for be in ("ref", "fast"):
        with qops.backend(be):
            outs.append(F.instance_norm(x, w, b, 1e-5, out_scale,
                                        1 if dtype is qops.qint8 else 129))
    np.testing.assert_array_equal(outs[1].int_repr(), outs[0].int_repr())


# -- issue 19 #7: the variance and affine steps are fused as in PyTorch's AVX2 kernel --------
# PyTorch 2.13's x86 wheels run the AVX2 build of quantized_normalize_kernel, which GCC
# compiled with FMA contraction: SS/N - m*m is one vfnmadd, (..) * gamma + beta one vfmadd.

F32 = np.float32


def _emulate(x3, groups, w, b, xs, zp, eps, inv, fused):
    """f32(y * inv) of group norm (x3 (B, C, L)) or of layer norm (groups=None, x3 (M, 1, N)),
    with the variance and the affine fused or (qops before issue 19 #7) rounded step by step."""
    from qops._ref.quant import fma_f32
    nb, c, length = x3.shape
    g = 1 if groups is None else groups
    v = x3.astype(np.int64).reshape(nb * g, -1)
    n = F32(v.shape[1])
    m1 = v.sum(1).astype(F32) / n
    t = (v * v).sum(1).astype(F32) / n
    var = np.maximum(fma_f32(-m1, m1, t) if fused else t - m1 * m1, F32(0))
    r = (np.float64(xs) / np.sqrt((var * F32(xs) * F32(xs)).astype(np.float64) + eps)).astype(F32)
    mean = (m1 - F32(zp)).reshape(nb, g, 1, 1)
    r = r.reshape(nb, g, 1, 1)
    d = (x3.astype(np.int64) - zp).astype(F32).reshape(nb, g, -1, length) - mean
    if groups is None:           # layer norm: t = f32(d * r), then t * w_i + b_i
        a, m, bb = d * r, w.reshape(1, 1, 1, length), b.reshape(1, 1, 1, length)
    else:                        # group norm: d * f32(r * w_c) + b_c
        a, m, bb = d, r * w.reshape(1, g, -1, 1), b.reshape(1, g, -1, 1)
    y = fma_f32(a, m, bb) if fused else a * m + bb
    return (y * F32(inv)).reshape(x3.shape)


def _near_tie_input(dtype, shape, spread, seed):
    """Raw values around a per-row (first axis) mean: narrow spreads make m*m large against the
    variance (its rounding matters most), wide ones the typical 1e-5 near-misses."""
    r = np.random.default_rng(seed)
    zp = 128 if dtype is qops.quint8 else 0
    lo, hi = spread
    one = (shape[0],) + (1,) * (len(shape) - 1)
    # raw means of 50-90 in magnitude: m*m is then large, as in activations away from zp
    centre = (128 + r.uniform(-40, 40, one) if dtype is qops.quint8 else
              r.choice([-1, 1], one) * r.uniform(50, 90, one))
    sd = r.uniform(lo, hi, one)
    raw = np.clip(np.rint(r.normal(centre, sd, shape)), dtype.qmin, dtype.qmax)
    return raw.astype(dtype.storage), zp


def _select_rows(raw, groups, w, b, xs, zp, inv, max_rows=64):
    """Rows (first axis) where the fused and step-by-step results round differently."""
    x3 = raw if groups is not None else raw[:, None, :]
    new = np.rint(_emulate(x3, groups, w, b, xs, zp, 1e-5, inv, True))
    old = np.rint(_emulate(x3, groups, w, b, xs, zp, 1e-5, inv, False))
    differ = (new != old).reshape(raw.shape[0], -1).any(axis=1)
    y = _emulate(x3, groups, w, b, xs, zp, 1e-5, inv, True).reshape(raw.shape[0], -1)
    return np.flatnonzero(differ)[:max_rows], y


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("spread", [(10, 40), (0.4, 3)])
def test_issue19_layer_norm_variance_fused_near_ties(torch, dtype, spread):
    # issue 19 #7: layer_norm rounded m*m before SS/N - m*m; PyTorch fuses it (one rounding)
    n, xs, out_s = 64, 0.05, 0.05           # 64: no scalar tail in PyTorch's kernel
    raw, zp = _near_tie_input(dtype, (20000, n), spread, 7)
    r = np.random.default_rng(8)
    w, b = r.normal(1, 0.3, n).astype(F32), r.normal(0, 0.3, n).astype(F32)
    rows, y = _select_rows(raw, None, w, b, xs, zp, F32(1) / F32(out_s))
    assert len(rows) >= 2
    if spread == (10, 40):                  # these sit within a few ulps of a .5 boundary
        yr = y[rows].astype(np.float64)
        old = np.rint(_emulate(raw[rows][:, None], None, w, b, xs, zp, 1e-5, 1 / F32(out_s),
                               False)[:, 0])
        near = np.abs(yr - np.floor(yr) - 0.5)[old != np.rint(yr)]
        assert near.max() < 1e-3
    x = qops.make_per_tensor_quantized_tensor(raw[rows], xs, zp)
    ozp = 128 if dtype is qops.quint8 else 0
    theirs = torch.ops.quantized.layer_norm(
        reg.u.to_torch(x), [n], weight=torch.from_numpy(w), bias=torch.from_numpy(b), eps=1e-5,
        output_scale=out_s, output_zero_point=ozp).int_repr().numpy()
    for be in ("ref", "fast"):
        with qops.backend(be):
            ours = F.layer_norm(x, n, w, b, 1e-5, out_s, ozp).int_repr()
        np.testing.assert_array_equal(ours, theirs, err_msg=be)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("groups", [2, 4])
@pytest.mark.parametrize("spread", [(4, 12), (0.4, 3)])
def test_issue19_group_norm_variance_fused_near_ties(torch, dtype, groups, spread):
    # issue 19 #7: group_norm/instance_norm rounded m*m before SS/N - m*m; PyTorch fuses it
    c, length, xs, out_s = 4, 24, 0.05, 0.05
    raw, zp = _near_tie_input(dtype, (12000, c, length), spread, 9)
    r = np.random.default_rng(10)
    w, b = r.normal(1, 0.3, c).astype(F32), r.normal(0, 0.3, c).astype(F32)
    rows, _ = _select_rows(raw, groups, w, b, xs, zp, F32(1) / F32(out_s))
    assert len(rows) >= 5
    x = qops.make_per_tensor_quantized_tensor(raw[rows], xs, zp)
    ozp = 128 if dtype is qops.quint8 else 0
    tx, tw, tb = reg.u.to_torch(x), torch.from_numpy(w), torch.from_numpy(b)
    if groups == c:
        theirs = torch.ops.quantized.instance_norm(tx, tw, tb, 1e-5, out_s, ozp)
    else:
        theirs = torch.ops.quantized.group_norm(tx, groups, tw, tb, 1e-5, out_s, ozp)
    for be in ("ref", "fast"):
        with qops.backend(be):
            ours = (F.instance_norm(x, w, b, 1e-5, out_s, ozp) if groups == c else
                    F.group_norm(x, groups, w, b, 1e-5, out_s, ozp))
        np.testing.assert_array_equal(ours.int_repr(), theirs.int_repr().numpy(), err_msg=be)


def _tie_bias(p):
    """b with f32(f32(p) + b) == +-0.5 exactly (asserted), for products p (float64) with
    2 <= |p| < 4: the exact p + b is then more than half an ulp of 0.5 off the tie whenever
    the product is inexact, so a fused sum rounds away from the tie."""
    assert ((np.abs(p) >= 2) & (np.abs(p) < 4)).all()
    target = np.where(p > 0, 0.5, -0.5)
    b = (target - p.astype(F32).astype(np.float64)).astype(F32)
    assert (p.astype(F32) + b == target).all()
    return b


def _weights_for(base, r):
    """Weights w (float32) putting |base * w| in [2, 4), jittered."""
    base = np.where(base == 0, F32(1), base).astype(np.float64)
    w = (r.uniform(2.2, 3.8, base.shape) / np.abs(base)).astype(F32)
    return np.where(np.abs(base * w) >= 2, w, w * F32(1.1)).astype(F32)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
def test_issue19_layer_norm_affine_fused_at_ties(torch, dtype):
    # issue 19 #7: layer_norm rounded t * gamma before + beta; PyTorch fuses them (vfmadd):
    # each beta below puts f32(f32(t * gamma) + beta) exactly on a .5 tie of row 0, so only
    # the fused sum, a hair off the tie, rounds as PyTorch does
    n = 96                                   # a multiple of 32: no scalar tail in PyTorch
    raw, zp = _near_tie_input(dtype, (3, n), (10, 40), 11)
    r = np.random.default_rng(12)
    t = _emulate(raw[:, None], None, np.ones(n, F32), np.zeros(n, F32), 0.05, zp, 1e-5, 1.0,
                 True)[0, 0]
    w = _weights_for(t, r)
    p = t.astype(np.float64) * w.astype(np.float64)
    b = _tie_bias(p)
    x = qops.make_per_tensor_quantized_tensor(raw, 0.05, zp)
    ozp = 128 if dtype is qops.quint8 else 0
    theirs = torch.ops.quantized.layer_norm(
        reg.u.to_torch(x), [n], weight=torch.from_numpy(w), bias=torch.from_numpy(b), eps=1e-5,
        output_scale=1.0, output_zero_point=ozp).int_repr().numpy()
    unfused = np.rint(p.astype(F32) + b) + ozp
    assert (unfused != theirs[0]).sum() >= 10      # PyTorch does not round these as ties
    for be in ("ref", "fast"):
        with qops.backend(be):
            ours = F.layer_norm(x, n, w, b, 1e-5, 1.0, ozp).int_repr()
        np.testing.assert_array_equal(ours, theirs, err_msg=be)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("length", [5, 40, 2100])
def test_issue19_group_norm_affine_fused_at_ties(torch, dtype, length):
    # issue 19 #7: group_norm rounded d * f32(r * gamma_c) before + beta_c; PyTorch fuses them.
    # beta_c puts position 0 of each channel of batch 0 exactly on a tie when rounded twice.
    # (length 2100: the fast kernels' one-fma fold of long channels must decline these)
    c, groups = 64, 16
    raw, zp = _near_tie_input(dtype, (2, c, length), (10, 40), 13)
    from qops._ref.quant import fma_f32
    r = np.random.default_rng(14)
    v = raw.astype(np.int64).reshape(2 * groups, -1)
    n = F32(v.shape[1])
    m1 = v.sum(1).astype(F32) / n
    var = np.maximum(fma_f32(-m1, m1, (v * v).sum(1).astype(F32) / n), F32(0))
    rr = (np.float64(F32(0.05)) / np.sqrt((var * F32(0.05) * F32(0.05)).astype(np.float64)
                                          + 1e-5)).astype(F32).reshape(2, groups)
    rc = rr[0].repeat(c // groups)                                 # r of each channel, batch 0
    dd = (raw[0, :, 0].astype(np.int64) - zp).astype(F32) - (m1.reshape(2, groups)[0] -
                                                            F32(zp)).repeat(c // groups)
    w = _weights_for(rc * dd, r)
    g = rc * w                                                     # f32(r * gamma_c)
    p = dd.astype(np.float64) * g.astype(np.float64)
    w = np.where((np.abs(p) >= 2) & (np.abs(p) < 4), w, F32(0))   # (rare misses: no tie)
    g = rc * w
    p = np.where(w == 0, 3.0, dd.astype(np.float64) * g.astype(np.float64))
    b = _tie_bias(p)
    x = qops.make_per_tensor_quantized_tensor(raw, 0.05, zp)
    ozp = 128 if dtype is qops.quint8 else 0
    theirs = torch.ops.quantized.group_norm(reg.u.to_torch(x), groups, torch.from_numpy(w),
                                            torch.from_numpy(b), 1e-5, 1.0, ozp).int_repr().numpy()
    unfused = np.rint(p.astype(F32) + b) + ozp
    assert (unfused != theirs[0, :, 0]).sum() >= 5
    for be in ("ref", "fast"):
        with qops.backend(be):
            ours = F.group_norm(x, groups, w, b, 1e-5, 1.0, ozp).int_repr()
        np.testing.assert_array_equal(ours, theirs, err_msg=be)


def _emulate_nhwc(raw, groups, w, b, xs, zp, eps, inv):
    """f32(y * inv) of PyTorch's channels-last group norm kernel for raw (B, C, H, W):
    s_c = f32(r * w_c), t_c = fma(-s_c, mean, b_c), y = fma(q - zp, s_c, t_c)."""
    from qops._ref.quant import fma_f32
    nb, c = raw.shape[:2]
    cpg = c // groups
    v = raw.astype(np.int64).reshape(nb, groups, -1)
    n = F32(v.shape[2])
    m1 = v.sum(2).astype(F32) / n
    var = np.maximum(fma_f32(-m1, m1, (v * v).sum(2).astype(F32) / n), F32(0))
    r = (np.float64(xs) / np.sqrt((var * F32(xs) * F32(xs)).astype(np.float64) + eps)).astype(F32)
    s = r[:, :, None] * w.reshape(1, groups, cpg)
    t = fma_f32(-s, (m1 - F32(zp))[:, :, None], b.reshape(1, groups, cpg))
    k = (raw.astype(np.int64) - zp).astype(F32)
    return fma_f32(k, s.reshape(nb, c, 1, 1), t.reshape(nb, c, 1, 1)) * F32(inv)


def _torch_group_norm_cl(torch, x, groups, w, b, out_s, ozp):
    # batch by batch: PyTorch's channels-last kernel skips the batches past the group size
    t = reg.u.to_torch(x).contiguous(memory_format=torch.channels_last)
    outs = [torch.ops.quantized.group_norm(t[i:i + 1].contiguous(memory_format=torch.channels_last),
                                           groups, torch.from_numpy(w), torch.from_numpy(b),
                                           1e-5, out_s, ozp).int_repr().numpy()
            for i in range(x.shape[0])]
    return np.concatenate(outs)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("layout", ["cl", "c11"])
def test_issue19_group_norm_channels_last_kernel(torch, dtype, layout):
    # issue 19 #7: on channels-last inputs (and C-order (N, C, 1, 1), which PyTorch takes as
    # channels last) PyTorch runs its NHWC kernel, y = fma(q - zp, s_c, fma(-s_c, mean, b_c));
    # qops used the C-order y = fma(q - zp - mean, s_c, b_c), which rounds differently
    c, groups, out_s = 64, 2, 0.05            # 32 channels a group: PyTorch's vector body only
    h, wd = (3, 5) if layout == "cl" else (1, 1)
    r = np.random.default_rng(15)
    zp = 128 if dtype is qops.quint8 else 0
    nb = 3000
    # raw means far from the zero point, small spreads: fma(-s, mean, b) then cancels
    one = (nb, 1, 1, 1)
    centre = (128 + r.choice([-1, 1], one) * r.uniform(80, 110, one) if dtype is qops.quint8
              else r.choice([-1, 1], one) * r.uniform(60, 90, one))
    raw = np.clip(np.rint(r.normal(centre, r.uniform(0.5, 3, (nb, 1, 1, 1)), (nb, c, h, wd))),
                  dtype.qmin, dtype.qmax).astype(dtype.storage)
    w, b = r.normal(1, 0.3, c).astype(F32), r.normal(0, 0.3, c).astype(F32)
    inv = F32(1) / F32(out_s)
    new = np.rint(_emulate_nhwc(raw, groups, w, b, F32(0.05), zp, 1e-5, inv))
    old = np.rint(_emulate(raw.reshape(nb, c, -1), groups, w, b, F32(0.05), zp, 1e-5, inv, True)
                  ).reshape(raw.shape)
    rows = np.flatnonzero((new != old).reshape(nb, -1).any(axis=1))[:40]
    assert len(rows) >= 3
    data = raw[rows]
    if layout == "cl":
        data = np.ascontiguousarray(data.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    x = qops.make_per_tensor_quantized_tensor(data, 0.05, zp)
    ozp = 128 if dtype is qops.quint8 else 0
    theirs = _torch_group_norm_cl(torch, x, groups, w, b, out_s, ozp)
    assert (old[rows] + ozp != theirs).any()          # PyTorch takes the NHWC formula
    for be in ("ref", "fast"):
        with qops.backend(be):
            ours = F.group_norm(x, groups, w, b, 1e-5, out_s, ozp)
        np.testing.assert_array_equal(ours.int_repr(), theirs, err_msg=be)
        if layout == "cl":                            # the result stays channels last
            assert ours._int.transpose(0, 2, 3, 1).flags.c_contiguous


def test_issue19_group_norm_channels_last_detection():
    # issue 19 #7: qops takes the NHWC formula exactly where PyTorch's is_contiguous(
    # channels_last) holds (dims of size 1 skipped), else the C-order one
    from qops._ops.norm import _torch_channels_last
    torch = pytest.importorskip("torch")
    shapes = [(2, 8, 3, 5), (2, 8, 1, 1), (2, 1, 3, 5), (1, 8, 3, 1), (1, 8, 1, 5), (2, 8, 3)]
    for shape in shapes:
        a = np.zeros(shape, np.uint8)
        views = [a, a.transpose(0, 1, 3, 2) if a.ndim == 4 else a, a[..., ::-1]]
        if a.ndim == 4:
            views.append(np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2))
        for v in views:
            # strides of size-1 dims never matter (PyTorch skips them): make them positive
            st = [abs(s) // v.itemsize if n == 1 else s // v.itemsize
                  for s, n in zip(v.strides, v.shape)]
            if any(s < 0 for s in st):           # a reversed dim: never channels last
                assert not _torch_channels_last(v)
                continue
            t = torch.zeros(v.size, dtype=torch.uint8).as_strided(v.shape, st)
            expect = v.ndim == 4 and t.is_contiguous(memory_format=torch.channels_last)
            assert _torch_channels_last(v) == expect, (shape, v.strides)
