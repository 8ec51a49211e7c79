"""Conv family tests the registry cannot see: errors, prepacking, overflow, padding modes."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._registry import _util as u

from conftest import torch_or_skip


def _x(shape, zp=100, seed=0):
    return u.random_qtensor(u.rng(seed), shape, qops.quint8, scale=0.05, zero_point=zp)


def _w(shape, zp=0, seed=1, per_channel=False, limit=128):
    r = u.rng(seed)
    raw = r.integers(-limit, limit, size=shape).astype(np.int8)
    if per_channel:
        return qops.make_per_channel_quantized_tensor(raw, r.uniform(0.005, 0.01, shape[0]),
                                                      np.full(shape[0], zp), 0)
    return qops.make_per_tensor_quantized_tensor(raw, 0.01, zp)


@pytest.fixture(params=["ref", "fast"])
def backend(request):
    with qops.backend(request.param):
        yield request.param


def _count_calls(monkeypatch, module, name):
    """A list that grows by one on each call of module.name (which still runs)."""
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("transposed", [False, True])
def test_used_packed_conv_pickles_and_copies(backend, transposed):
    # a pack that has run holds per-process packings and per-geometry calls (the kernel
    # module among them, which cannot be pickled): copies and pickles drop them
    import copy
    import pickle

    from qops import nn
    x = _x((2, 8, 9, 9))
    if transposed:
        m = nn.quantized.ConvTranspose2d(8, 4, 3, stride=2, padding=1)
    else:
        m = nn.quantized.Conv2d(8, 16, 3, padding=1, bias=True)
    m.set_weight_bias(_w(tuple(m.weight().shape), per_channel=not transposed), None)
    m.scale, m.zero_point = 0.2, 100
    want = m(x).int_repr()
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        np.testing.assert_array_equal(clone(x).int_repr(), want)
        np.testing.assert_array_equal(clone(x).int_repr(), want)


def test_output_shapes_and_batch0(backend):
    x = _x((0, 4, 9, 9))
    out = F.conv2d(x, _w((8, 2, 3, 3)), None, stride=2, padding=1, groups=2, scale=0.5,
                   zero_point=3)
    assert out.shape == (0, 8, 5, 5) and out.q_scale() == 0.5 and out.q_zero_point() == 3
    assert F.conv1d(_x((2, 3, 10)), _w((5, 3, 4)), dilation=2, scale=1.0).shape == (2, 5, 4)
    assert F.conv3d(_x((1, 2, 3, 4, 5)), _w((3, 2, 3, 4, 5)), scale=1.0).shape == (1, 3, 1, 1, 1)


def test_stride_past_the_input_is_one_column():
    # A stride wider than the padded input (12 here) leaves output column 0 alone, the same
    # as a stride of exactly 12; the fast layout once sized its buffers by the stride
    # (MemoryError for 10**12).
    x, w = _x((1, 4, 2, 10)), _w((6, 4, 2, 3))
    with qops.backend("ref"):
        want = F.conv2d(x, w, None, stride=(1, 12), padding=1, scale=0.5, zero_point=3)
    assert want.shape == (1, 6, 3, 1)
    for sw in (13, 10 ** 12):
        for be in ("ref", "fast"):
            with qops.backend(be):
                got = F.conv2d(x, w, None, stride=(1, sw), padding=1, scale=0.5, zero_point=3)
            assert got.equal(want), (be, sw)


def test_prepacked_equals_unpacked_and_never_repacks(backend, monkeypatch):
    x = _x((2, 6, 8, 7))
    w = _w((10, 3, 3, 2), per_channel=True)
    b = np.linspace(-3, 3, 10).astype(np.float32)
    args = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    direct = F.conv2d_relu(x, w, b, scale=0.3, zero_point=90, **args)
    pk = F.prepack_conv2d(w, b, **args)
    assert pk.weight().equal(w) and pk.weight() is not w   # a copy (issue 19 #8)
    assert np.array_equal(pk.bias(), b)
    assert pk.stride == (2, 1) and pk.padding == (1, 2) and pk.dilation == (1, 2) and pk.groups == 2
    first = F.conv2d_relu(x, pk, scale=0.3, zero_point=90)
    np.testing.assert_array_equal(first._int, direct._int)
    kernels = qops._config.impl("conv")
    calls = _count_calls(monkeypatch, kernels, "pack_weight")
    for _ in range(3):
        again = F.conv2d_relu(x, pk, scale=0.3, zero_point=90)
        np.testing.assert_array_equal(again._int, direct._int)
    assert calls == [], "a prepacked weight was packed again"
    assert int(direct._int.min()) >= 90


def test_checked_geometry_is_reused_only_where_it_holds(backend):
    # a prepacked conv remembers each input geometry it has checked; later calls with that
    # geometry skip the checks, any other input (or bad argument) is checked as the first was
    pk = F.prepack_conv2d(_w((8, 6, 3, 3)), None, padding=1)
    x = _x((2, 6, 9, 7))
    first = F.conv2d(x, pk, scale=0.2, zero_point=60)
    again = F.conv2d(x, pk, scale=0.2, zero_point=60)
    np.testing.assert_array_equal(again._int, first._int)
    other = F.conv2d(x, pk, scale=0.3, zero_point=61)            # other output qparams
    with qops.backend("ref"):
        want = F.conv2d(x, F.prepack_conv2d(_w((8, 6, 3, 3)), None, padding=1), scale=0.3,
                        zero_point=61)
    np.testing.assert_array_equal(other._int, want._int)
    cl = u.random_qtensor(u.rng(0), (2, 6, 9, 7), qops.quint8, scale=0.05, zero_point=100,
                          layout="cl")                           # same shape, other strides
    np.testing.assert_array_equal(np.asarray(F.conv2d(cl, pk, scale=0.2, zero_point=60)._int),
                                  np.asarray(F.conv2d(cl.contiguous(), pk, scale=0.2,
                                                      zero_point=60)._int))
    with pytest.raises(ValueError, match="zero_point"):
        F.conv2d(x, pk, scale=0.2, zero_point=300)
    with pytest.raises(ValueError, match="scale"):
        F.conv2d(x, pk, scale=-1.0, zero_point=60)
    with pytest.raises(ValueError, match="channels"):
        F.conv2d(_x((2, 5, 9, 7)), pk, scale=0.2, zero_point=60)
    with pytest.raises(ValueError, match="packed by prepack_conv2d"):
        F.conv1d(_x((2, 6, 9)), pk, scale=0.2, zero_point=60)
    np.testing.assert_array_equal(F.conv2d(x, pk, scale=0.2, zero_point=60)._int, first._int)


def test_relu_is_clamp_at_zero_point(backend):
    x, w = _x((1, 4, 6, 6)), _w((5, 4, 3, 3))
    plain = F.conv2d(x, w, None, padding=1, scale=0.2, zero_point=128)._int
    fused = F.conv2d_relu(x, w, None, padding=1, scale=0.2, zero_point=128)._int
    np.testing.assert_array_equal(fused, np.maximum(plain, 128))


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"),
                                          ("circular", "wrap")])
def test_padding_modes_pad_the_raw_input(backend, mode, np_mode):
    x, w = _x((1, 3, 5, 6)), _w((4, 3, 3, 3))
    got = F.conv2d(x, w, None, padding=(1, 2), padding_mode=mode, scale=0.4, zero_point=7)
    raw = np.pad(x._int, [(0, 0), (0, 0), (1, 1), (2, 2)], mode=np_mode)
    xp = qops.make_per_tensor_quantized_tensor(raw, x.q_scale(), x.q_zero_point())
    want = F.conv2d(xp, w, None, scale=0.4, zero_point=7)
    np.testing.assert_array_equal(got._int, want._int)


def test_reflect_matches_torch_module():
    torch = torch_or_skip()
    # |w| < 64: fbgemm's AVX2 kernels saturate larger u8 x s8 pair sums (qops is exact)
    x, w = _x((1, 3, 6, 7)), _w((4, 3, 3, 3), limit=64)
    b = np.arange(4, dtype=np.float32)
    m = torch.ao.nn.quantized.Conv2d(3, 4, 3, padding=2, padding_mode="reflect")
    m.set_weight_bias(u.to_torch(w), torch.from_numpy(b))
    m.scale, m.zero_point = 0.4, 7
    prev = torch.backends.quantized.engine
    torch.backends.quantized.engine = "fbgemm"
    try:
        theirs = m(u.to_torch(x)).int_repr().numpy()
    finally:
        torch.backends.quantized.engine = prev
    ours = F.conv2d(x, w, b, padding=2, padding_mode="reflect", scale=0.4, zero_point=7)
    np.testing.assert_array_equal(np.ascontiguousarray(ours._int), theirs)


def test_depthwise_over_100_groups_is_exact(backend):
    # PyTorch's x86 engine sends > 100 groups to fbgemm's int16 depthwise kernel; qops stays exact
    x, w = _x((1, 144, 6, 6), zp=3), _w((144, 1, 3, 3), per_channel=True)
    got = F.conv2d(x, w, None, padding=1, groups=144, scale=0.05, zero_point=128)
    with qops.backend("ref"):
        ref = F.conv2d(x, w, None, padding=1, groups=144, scale=0.05, zero_point=128)
    np.testing.assert_array_equal(np.ascontiguousarray(got._int), ref._int)
    # exact integer check of one output against the formula
    xi = x._int.astype(np.int64) - 3
    acc = int((xi[0, 5, 0:2, 0:2] * w._int[5, 0, 1:3, 1:3].astype(np.int64)).sum())
    atws = np.float32(np.float32(x.q_scale()) * np.float32(w.q_per_channel_scales()[5]))
    m = np.float32(atws / np.float32(0.05))
    want = min(max(int(np.rint(np.float32(np.float32(acc) * m))) + 128, 0), 255)
    assert int(got._int[0, 5, 0, 0]) == want


def test_accumulator_overflow_raises(backend):
    # K = 8192 * 9 taps: 255 * 128 * K exceeds int32, so the sum could wrap
    x = _x((1, 8192, 3, 3), zp=0)
    w = _w((1, 8192, 3, 3))
    with pytest.raises(ValueError, match="accumulator could overflow"):
        F.conv2d(x, w, None, scale=1.0)
    # the largest K that is safe for these zero points runs, and exactly
    k = (2**31 - 1) // (255 * 128)
    x = _x((1, k, 1, 1), zp=0, seed=3)
    raw = np.full((1, k, 1, 1), 255, np.uint8)
    x = qops.make_per_tensor_quantized_tensor(raw, 1.0, 0)
    w = qops.make_per_tensor_quantized_tensor(np.full((1, k, 1, 1), -128, np.int8), 1.0, 0)
    out = F.conv2d(x, w, np.array([0.0], np.float32), scale=2.0**30, zero_point=200)
    # acc = -255*128*k, exactly; scale 2^30 maps it to -2 steps
    assert int(out._int.reshape(-1)[0]) == 200 + int(np.rint(np.float32(-255 * 128 * k) / 2**30))


@pytest.mark.parametrize("call,match", [
    (lambda x, w: F.conv2d(qops.make_per_tensor_quantized_tensor(x._int.view(np.int8), 0.1, 0), w),
     "input must have dtype quint8"),
    (lambda x, w: F.conv2d(x, qops.make_per_tensor_quantized_tensor(w._int.view(np.uint8), 0.1, 0)),
     "weight must have dtype qint8"),
    (lambda x, w: F.conv2d(x, _w((4, 3, 3, 3))), "input has 4 channels but weight expects 3"),
    (lambda x, w: F.conv2d(x, _w((6, 2, 3, 3)), groups=4), "groups=4 must divide"),
    (lambda x, w: F.conv2d(x, w, groups=3), "groups=3 must divide"),
    (lambda x, w: F.conv2d(x, w, stride=0), "stride must be >= 1"),
    (lambda x, w: F.conv2d(x, w, dilation=(1, 0)), "dilation must be >= 1"),
    (lambda x, w: F.conv2d(x, w, padding=-1), "padding must be >= 0"),
    (lambda x, w: F.conv2d(x, w, padding=(1, 2, 3)), "padding must be an int or 2 ints"),
    (lambda x, w: F.conv2d(x, _w((4, 4, 9, 3))), "kernel size .* larger than the padded input"),
    (lambda x, w: F.conv2d(x, w, dilation=5), "kernel size .* larger than the padded input"),
    (lambda x, w: F.conv2d(x, w, np.zeros(3, np.float32)), r"bias must have shape \(4,\)"),
    (lambda x, w: F.conv2d(x, w, np.zeros(4, np.int32)), "bias must be a float array"),
    (lambda x, w: F.conv2d(x, w, padding_mode="mirror"), "padding_mode must be one of"),
    (lambda x, w: F.conv2d(x, w, padding=6, padding_mode="reflect"), "reflect padding 6"),
    (lambda x, w: F.conv2d(x, w, scale=0.0), "scale must be finite and > 0"),
    (lambda x, w: F.conv2d(x, w, zero_point=256), "zero_point=256 is outside"),
    (lambda x, w: F.conv2d(x, w, dtype=qops.qint8), "dtype must be quint8"),
    (lambda x, w: F.conv1d(x, w), "input must have 3 dims"),
    (lambda x, w: F.conv3d(x._int, w), "input must be a quantized tensor"),
    (lambda x, w: F.conv2d(x, F.prepack_conv1d(_w((4, 4, 3)))), "packed by prepack_conv1d"),
    (lambda x, w: F.conv2d(x, qops.quantize_per_channel(
        np.ones((4, 4, 3, 3), np.float32), np.ones(4), np.zeros(4, int), 1, qops.qint8)),
     "per-channel along axis 0"),
])
def test_bad_input_errors(backend, call, match):
    x, w = _x((1, 4, 6, 6)), _w((4, 4, 3, 3))
    with pytest.raises((TypeError, ValueError), match=match):
        call(x, w)


def test_fast_output_feeds_next_conv():
    # fast returns channels-last data behind an NCHW view; chaining must see the same values
    x, w1, w2 = _x((1, 8, 7, 7)), _w((16, 8, 3, 3)), _w((8, 16, 1, 1), seed=4)
    outs = []
    for be in ("ref", "fast"):
        with qops.backend(be):
            y = F.conv2d(x, w1, None, padding=1, scale=2.0, zero_point=100)
            outs.append(np.ascontiguousarray(F.conv2d(y, w2, None, scale=20.0,
                                                      zero_point=100)._int))
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("tier", ["portable", "vnni", "amx"])
def test_every_kernel_tier_equals_ref(tier):
    # the fast module picks its best tier (AMX > VNNI > portable); check the others too
    from qops import _fast
    from qops._registry import get_spec
    kernels = _fast.load("conv")
    previous = kernels._set_mode(tier)
    try:
        for name in ("conv1d", "conv2d", "conv3d_relu"):
            spec = get_spec(name)
            for case in spec.cases():
                outs = []
                for be in ("ref", "fast"):
                    with qops.backend(be):
                        outs.append(u.canon(spec.qops_call(case)()))
                u.assert_same(outs[1], outs[0], f"{name} {case.label} ({tier})")
    finally:
        kernels._set_mode(previous)


@pytest.mark.parametrize("tier", ["portable", "vnni", "amx"])
@pytest.mark.parametrize("cfg", [
    dict(c=70, o=20, k=3, stride=1, padding=1, groups=1, wzp=3),      # 70 channels: 2 AMX chunks
    dict(c=64, o=48, k=3, stride=2, padding=1, groups=2, wzp=0),      # odd number of 16-blocks
    dict(c=32, o=33, k=1, stride=1, padding=0, groups=1, wzp=-5),
    dict(c=96, o=96, k=3, stride=1, padding=2, groups=96, wzp=2),     # depthwise, dilation below
    dict(c=16, o=16, k=5, stride=3, padding=2, groups=1, wzp=0),
])
def test_wide_channels_every_tier(tier, cfg):
    from qops import _fast
    kernels = _fast.load("conv")
    r = u.rng(9)
    x = u.random_qtensor(r, (2, cfg["c"], 9, 37), qops.quint8, scale=0.03, zero_point=77)
    w = _w((cfg["o"], cfg["c"] // cfg["groups"], cfg["k"], cfg["k"]), zp=cfg["wzp"], seed=5)
    b = r.normal(0, 3, cfg["o"]).astype(np.float32)
    args = dict(stride=cfg["stride"], padding=cfg["padding"], groups=cfg["groups"],
                dilation=2 if cfg["groups"] > 1 else 1,
                scale=float(np.sqrt(cfg["c"] // cfg["groups"] * cfg["k"] ** 2)
                            * 74 * 74 * 0.03 * 0.01 / 40),
                zero_point=120)
    with qops.backend("ref"):
        want = F.conv2d(x, w, b, **args)._int
    previous = kernels._set_mode(tier)
    try:
        pk = F.prepack_conv2d(w, b, args["stride"], args["padding"], args["dilation"],
                              args["groups"])
        got = F.conv2d(x, pk, scale=args["scale"], zero_point=120)._int
    finally:
        kernels._set_mode(previous)
    np.testing.assert_array_equal(got, want)
    assert 0.02 < np.mean(want == 120) < 0.5 or np.std(want) > 5


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("channels_last", [False, True])
def test_nonfinite_bias_fast_equals_ref(groups, channels_last):
    # a NaN or infinite bias saturates (NaN to 255, as the clamp order of qops_clampf), in
    # every kernel: channels-last inputs take the im2col rows (4 channels) and the
    # depthwise kernel (groups 4)
    x, w = _x((1, 4, 5, 5)), _w((4, 4 // groups, 3, 3))
    if channels_last:
        x = qops.make_per_tensor_quantized_tensor(
            np.ascontiguousarray(np.moveaxis(x._int, 1, -1)).transpose(0, 3, 1, 2), x._scale,
            x._zero_point)
    b = np.array([np.nan, np.inf, -np.inf, 1e38], np.float32)
    outs = []
    for be in ("ref", "fast"):
        with qops.backend(be):
            outs.append(F.conv2d(x, w, b, padding=1, groups=groups, scale=0.1, zero_point=9)._int)
    np.testing.assert_array_equal(outs[1], outs[0])
    assert ((outs[0][0, 0] == 255).all() and (outs[0][0, 1] == 255).all()
            and (outs[0][0, 2] == 0).all())


@pytest.mark.parametrize("xmax", [255, 129, 127])
@pytest.mark.parametrize("limit", [128, 65, 64, 3])
def test_saturation_prone_weights_are_exact(limit, xmax):
    # AVX2 builds multiply with vpmaddubsw directly only when no weight pair can saturate its
    # int16 sums (|w| <= 64, or inputs <= 127, guarantee that) and split the weights into
    # nibbles otherwise; PyTorch's AVX2 kernels saturate here. Inputs near xmax put the
    # largest products in play.
    from qops import _fast
    r = u.rng(11)
    raw = r.integers(xmax - 55, xmax + 1, size=(2, 24, 7, 19)).astype(np.uint8)
    x = qops.make_per_tensor_quantized_tensor(raw, 0.03, 5)
    w = _w((10, 24, 3, 3), seed=6, limit=limit)
    w._int[0, :2] = -limit if limit <= 64 else -128      # a pair at the bound of each sign
    w._int[1, :2] = min(limit, 127) if limit <= 64 else 127
    packed = _fast.load("conv").pack_weight(w._int, np.zeros(10, np.int64), 1)
    if "pairmax" in packed:                 # AVX2 builds
        assert (packed["pairmax"] <= 128) == (limit <= 64)
    args = dict(padding=1, scale=20.0, zero_point=100)
    with qops.backend("ref"):
        want = F.conv2d(x, w, None, **args)._int
    np.testing.assert_array_equal(F.conv2d(x, w, None, **args)._int, want)


def _ref_and_tier(tier, f, *args, **kw):
    """The raw results of f(*args, **kw) on the reference and on the fast kernels' tier."""
    from qops import _fast
    kernels = _fast.load("conv")
    with qops.backend("ref"):
        want = f(*args, **kw)._int
    previous = kernels._set_mode(tier)
    try:
        return want, f(*args, **kw)._int
    finally:
        kernels._set_mode(previous)


def _depthwise_inputs(seed, c, size, k, wzp=0, channels_last=False):
    """Depthwise input (image 0 all 0 or 255, image 1 random), weight and bias, with
    saturation-prone weights: channel 0 all -128, the last all 127."""
    r = u.rng(seed)
    raw = r.choice(np.array([0, 255], np.uint8), size=(2,) + size + (c,))
    raw[1] = r.integers(0, 256, size=size + (c,))
    raw = np.moveaxis(raw, -1, 1)
    x = qops.make_per_tensor_quantized_tensor(raw if channels_last else np.ascontiguousarray(raw),
                                              0.03, 77)
    w = _w((c, 1) + k, zp=wzp, seed=7, per_channel=channels_last)
    w._int[0] = -128
    w._int[-1] = 127
    return x, w, r.normal(0, 3, c).astype(np.float32)


@pytest.mark.parametrize("tier", ["portable", "vnni"])
@pytest.mark.parametrize("nd,k,stride,dilation,padding,size,wzp", [
    (2, (3, 3), 1, 1, 1, (13, 37), 0),          # row-pair kernels: tails past 32 and 8 pixels
    (2, (3, 3), 1, 1, 1, (9, 70), 3),           # window sums (weight zero points)
    (2, (2, 4), 1, (2, 3), (1, 2), (11, 45), -2),   # KW 4 with dilation
    (2, (5, 1), 1, 1, (2, 0), (6, 17), 0),      # KW 1
    (2, (3, 2), (2, 1), 1, 1, (10, 23), 1),     # KW 2, stride along H only
    (2, (3, 3), 2, 1, 1, (14, 51), 0),          # stride 2: the planes kernel
    (2, (3, 5), 1, 2, 2, (12, 40), 4),          # KW 5: the planes kernel, odd tap count
    (2, (3, 3), 1, 1, 1, (600, 450), 0),        # too large for the row scratch: planes kernel
    (1, (3,), 1, 1, 1, (150,), 2),
    (1, (7,), 3, 1, 3, (101,), 0),
    (3, (3, 3, 3), 1, 1, 1, (5, 6, 19), 1),
    (3, (2, 3, 5), (1, 2, 2), (2, 1, 1), 1, (6, 7, 21), 0),
])
def test_depthwise_kernels_equal_ref(tier, nd, k, stride, dilation, padding, size, wzp):
    # every depthwise kernel (VNNI / AVX2 row quads or pairs, planes kernels, portable) with
    # saturation-prone weights (|w| up to 128) and inputs at 0 and 255
    c = 2 if size[-1] * np.prod(size[:-1]) > 100000 else 5
    x, w, b = _depthwise_inputs(13, c, size, k, wzp=wzp)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=c,
                scale=float(np.prod(k)) * 0.05, zero_point=120)
    want, got = _ref_and_tier(tier, fn, x, w, b, **args)
    np.testing.assert_array_equal(got, want)
    assert np.std(want) > 5


@pytest.mark.parametrize("tier", ["portable", "vnni"])
@pytest.mark.parametrize("c,nd,k,stride,dilation,padding,size", [
    (32, 2, (3, 3), 1, 1, 1, (7, 45)),          # two pixels a vector; a row of 45: a tail
    (16, 2, (3, 3), 1, 1, 2, (5, 30)),          # four pixels a vector, padding past the taps
    (1, 2, (3, 3), 1, 1, 1, (4, 131)),          # 64 pixels a vector
    (3, 2, (3, 3), 1, 1, 1, (6, 20)),           # 3 does not divide 64: a masked pixel
    (40, 2, (3, 3), 2, 1, 1, (9, 33)),          # a partial block at stride 2
    (144, 2, (3, 3), 1, 1, 1, (6, 21)),         # blocks of 64, 64 and 16
    (70, 2, (2, 4), (1, 2), (2, 3), (1, 2), (9, 31)),   # 4 taps to a quad, dilated
    (24, 2, (5, 7), 1, 1, 3, (8, 19)),          # two quads (7 taps) and 5 rows
    (64, 1, (3,), 1, 1, 1, (150,)),
    (8, 1, (9,), 3, 1, 4, (101,)),
    (48, 3, (3, 3, 3), 1, 1, 1, (4, 5, 17)),
    (32, 3, (2, 3, 5), (1, 2, 1), (2, 1, 1), 1, (5, 7, 21)),
    (8, 3, (17, 16, 1), 1, 1, 0, (17, 16, 3)),  # 272 kernel rows: past the kernel's 256
])
def test_channels_last_depthwise_equals_ref(tier, c, nd, k, stride, dilation, padding, size):
    # the channels-last depthwise kernel (VNNI; the portable tier takes the planes) with
    # saturation-prone weights (-128 and 127 rows), inputs at 0 and 255, both clamps
    from qops import _fast
    kernels = _fast.load("conv")
    x, w, b = _depthwise_inputs(17, c, size, k, channels_last=True)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    relu_fn = {1: F.conv1d_relu, 2: F.conv2d_relu, 3: F.conv3d_relu}[nd]
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=c,
                scale=float(np.prod(k)) * 0.02, zero_point=120)
    for f in (fn, relu_fn):
        want, got = _ref_and_tier(tier, f, x, w, b, **args)
        np.testing.assert_array_equal(got, want)
        assert np.std(want) > 5
        if tier == "vnni" and kernels._DWCL and c > 1 and np.prod(k[:-1]) <= 256:
            # the kernel's result lies channels last, as its input (and as PyTorch's)
            assert got.strides[1] == 1


@pytest.mark.parametrize("c,nd,k,stride,dilation,padding,size,wzp", [
    (32, 2, (3, 3), 1, 1, 1, (7, 45), 0),       # one block; pairs of pixels and a last one
    (37, 2, (3, 3), 2, 1, 1, (9, 33), 0),       # the last block overlaps the first, stride 2
    (100, 2, (3, 3), 1, 1, 1, (6, 21), 5),      # four blocks, weight zero point
    (72, 2, (5, 5), 2, 1, 2, (11, 17), 0),      # 25 taps, padding past the taps
    (33, 2, (2, 4), (1, 2), (2, 3), (1, 2), (9, 31), -3),   # dilated, an even tap count
    (40, 1, (7,), 3, 1, 3, (101,), 0),
    (48, 3, (3, 3, 3), 1, 1, 1, (4, 5, 17), 2),
    (64, 2, (3, 3), 1, 1, 0, (3, 3), 0),        # one output pixel, no border column
    (32, 2, (1, 1), 1, 1, 0, (5, 9), 0),        # one tap, paired with itself
    (35, 2, (3, 3), (1, 40), 1, 1, (5, 9), 0),  # a stride past the row: one column
    (34, 2, (3, 3), 1, 1, 4, (2, 3), 0),        # padding wider than the input
    (32, 2, (9, 9), 1, 1, 4, (10, 12), 0),      # 81 taps: past the kernel's 64, the planes
    (16, 2, (3, 3), 1, 1, 1, (7, 45), 0),       # one 16-channel block
    (24, 2, (3, 3), 2, 1, 1, (9, 33), 2),       # two 16-blocks overlapping by 8, stride 2
    (17, 2, (2, 4), (1, 2), (2, 3), (1, 2), (9, 31), 0),   # 16-blocks, dilated, even taps
    (31, 3, (3, 3, 3), 1, 1, 1, (4, 5, 17), -1),
    (20, 2, (1, 1), 1, 1, 0, (5, 9), 0),        # 16-blocks, one tap paired with itself
])
def test_channels_last_depthwise_avx2_equals_ref(monkeypatch, c, nd, k, stride, dilation,
                                                 padding, size, wzp):
    # AVX2's channels-last depthwise kernel (32-channel blocks of vpmaddwd pairs) with
    # saturation-prone weights (-128 and 127 rows), inputs at 0 and 255, both clamps,
    # symmetric and asymmetric weights; the portable tier takes the planes
    from qops import _fast
    kernels = _fast.load("conv")
    calls = _count_calls(monkeypatch, kernels, "_conv_dw_cl_avx2")
    x, w, b = _depthwise_inputs(29, c, size, k, wzp=wzp, channels_last=True)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    relu_fn = {1: F.conv1d_relu, 2: F.conv2d_relu, 3: F.conv3d_relu}[nd]
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=c,
                scale=float(np.prod(k)) * 0.02, zero_point=120)
    for tier in ("vnni", "portable"):
        for f in (fn, relu_fn):
            want, got = _ref_and_tier(tier, f, x, w, b, **args)
            np.testing.assert_array_equal(got, want)
            assert np.std(want) > 5 and got.strides[1] == 1
    if kernels._DWCL2 and np.prod(k) <= 64:
        assert len(calls) == 2
    else:
        assert not calls


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("c", [16, 17, 24, 31, 33, 40])
@pytest.mark.parametrize("k,stride,padding,dilation,size,wzp", [
    ((3, 3), 1, 1, 1, (7, 13), 0),              # pairs of pixels and a last one
    ((3, 3), 2, 1, 1, (12, 15), 3),             # ShuffleNetV2's downsampling depthwise conv
    ((5, 5), 1, 2, 1, (9, 11), 0),              # 25 taps: the last one paired with itself
    ((5, 5), 2, 2, 1, (11, 10), -2),
    ((3, 3), (1, 2), 3, 2, (8, 17), 0),         # dilated, a stride along W only
])
def test_depthwise_avx2_16_channel_blocks_equal_ref(monkeypatch, n, c, k, stride, padding,
                                                    dilation, size, wzp):
    # AVX2's depthwise kernel in 16-channel blocks (16 to 31 channels; the last block
    # overlapping the one before) and in 32-blocks just past 32, channels last and through
    # conv's C-order route, with saturation-prone weights (-128 and 127 rows), an image at 0
    # and 255, both clamps, symmetric and asymmetric weights
    from qops import _fast
    kernels = _fast.load("conv")
    calls = _count_calls(monkeypatch, kernels, "_conv_dw_cl_avx2")
    r = u.rng(41 + c)
    raw = r.integers(0, 256, size=(n,) + size + (c,)).astype(np.uint8)
    raw[0] = r.choice(np.array([0, 255], np.uint8), size=size + (c,)) if n > 1 else raw[0]
    w = _w((c, 1) + k, zp=wzp, seed=7, per_channel=True)
    w._int[0] = -128
    w._int[-1] = 127
    b = r.normal(0, 3, c).astype(np.float32)
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=c,
                scale=float(np.prod(k)) * 0.02, zero_point=120)
    for data in (np.moveaxis(raw, -1, 1), np.ascontiguousarray(np.moveaxis(raw, -1, 1))):
        x = qops.make_per_tensor_quantized_tensor(data, 0.03, 77)
        for f in (F.conv2d, F.conv2d_relu):
            want, got = _ref_and_tier("vnni", f, x, w, b, **args)
            np.testing.assert_array_equal(got, want)
            assert np.std(want) > 5
    if kernels._DWCL2:
        assert len(calls) == 4


@pytest.mark.parametrize("c,o,nd,k,stride,padding,dilation,size,wzp,route", [
    (32, 16, 2, (1, 1), 1, 0, 1, (5, 7), 0, "gemm_1x1"),
    (67, 33, 2, (1, 1), 1, 0, 1, (3, 11), 3, "gemm_1x1"),     # weight zero points
    (300, 17, 1, (1,), 1, 0, 1, (9,), 0, "gemm_1x1"),
    (40, 70, 3, (1, 1, 1), 1, 0, 1, (2, 3, 4), -5, "gemm_1x1"),
    (64, 20, 2, (3, 3), 1, 1, 1, (7, 9), 0, "gemm_im2col"),
    (48, 24, 2, (3, 3), 2, 1, 1, (9, 8), 2, "gemm_im2col"),
    (128, 16, 2, (1, 1), 2, 0, 1, (7, 7), 0, "gemm_im2col"),  # a strided 1x1
    (64, 24, 2, (1, 1), 2, 0, 1, (9, 8), 1, "gemm_im2col"),   # ResNet's downsample, K = 64
    (32, 8, 2, (1, 1), 1, 1, 1, (5, 6), 0, "gemm_im2col"),    # a padded 1x1
    (16, 8, 2, (3, 3), 1, 2, 2, (6, 10), 0, "gemm_im2col"),   # dilated, padding past taps
    (40, 12, 3, (3, 3, 3), 1, 1, 1, (3, 4, 5), 0, "gemm_im2col"),
    (20, 9, 1, (7,), 3, 3, 1, (40,), -1, "gemm_im2col"),
    (33, 10, 2, (3, 3), (1, 50), 1, 1, (5, 9), 0, "gemm_im2col"),   # one output column
    (34, 8, 2, (3, 3), 1, 4, 1, (2, 3), 0, "gemm_im2col"),    # padding wider than the input
    (16, 8, 2, (2, 2), 1, 0, 1, (4, 5), 0, "planes"),          # K = 64: too short
    (3, 16, 2, (3, 3), 2, 1, 1, (9, 11), 0, "gemm_im2col"),    # RGB 3x3/2: K = 27
    (2, 16, 2, (3, 3), 1, 1, 1, (9, 11), 0, "gemm_im2col"),    # 2 channels: K = 18
    (3, 16, 2, (1, 3), (1, 2), (0, 1), 1, (9, 11), 0, "planes"),  # K = 9: a C-order copy
    (8, 8, 2, (2, 2), (1, 2), 0, 1, (6, 9), 0, "planes"),      # strided along W: a copy
    (31, 16, 2, (1, 1), 1, 0, 1, (4, 5), 0, "gemm_1x1"),       # K under 32: padded rows
    (15, 16, 2, (1, 1), 1, 0, 1, (4, 5), 0, "gemm_1x1"),       # K = 15: padded to 16
    (6, 16, 2, (1, 1), 1, 0, 1, (4, 5), 0, "gemm_1x1"),        # K = 6: padded to 8
    (5, 8, 2, (1, 1), 2, 0, 1, (7, 7), 0, "gemm_im2col"),      # a strided 1x1, 5 channels
])
def test_channels_last_gemm_routes_equal_ref(monkeypatch, c, o, nd, k, stride, padding, dilation,
                                            size, wzp, route):
    # AVX2's GEMM routes for ungrouped channels-last convs (1x1 as it lies, the rest on
    # im2col rows) with saturation-prone weights (-128 and 127 rows, pair sums past int16),
    # inputs at 0 and 255, both clamps, symmetric and asymmetric weights
    from qops import _fast
    kernels = _fast.load("conv")
    routes = []
    real = kernels._plan_cl
    monkeypatch.setattr(kernels, "_plan_cl", lambda *a: routes.append(real(*a)) or routes[-1])
    r = u.rng(31)
    raw = r.choice(np.array([0, 255], np.uint8), size=(2,) + size + (c,))
    raw[1] = r.integers(0, 256, size=size + (c,))
    x = qops.make_per_tensor_quantized_tensor(np.moveaxis(raw, -1, 1), 0.03, 77)
    w = _w((o, c) + k, zp=wzp, seed=9, per_channel=True)
    w._int[0] = -128
    w._int[-1] = 127
    b = r.normal(0, 3, o).astype(np.float32)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    relu_fn = {1: F.conv1d_relu, 2: F.conv2d_relu, 3: F.conv3d_relu}[nd]
    args = dict(stride=stride, padding=padding, dilation=dilation,
                scale=float(np.sqrt(c * np.prod(k))) * 0.3, zero_point=120)
    for f in (fn, relu_fn):
        want, got = _ref_and_tier("vnni", f, x, w, b, **args)
        np.testing.assert_array_equal(got, want)
        assert np.std(want) > 5
    if _fast.ISA == "avx2":
        assert routes == [route, route]
    # an infinite bias term: the GEMM's NaN rule differs, the planes take it
    b[1] = np.inf
    routes.clear()
    want, got = _ref_and_tier("vnni", fn, x, w, b, **args)
    np.testing.assert_array_equal(got, want)
    assert "gemm" not in "".join(routes)


@pytest.mark.parametrize("tier", ["portable", "vnni"])
@pytest.mark.parametrize("c,nd,k,stride,padding,size", [
    (64, 2, (3, 3), 2, 1, (13, 29)),            # stride 2: through the channels-last kernel
    (96, 2, (3, 3), (1, 2), 1, (9, 40)),        # stride along W only
    (144, 2, (3, 3), 1, 1, (7, 7)),             # a small plane, three channel blocks
    (40, 3, (3, 3, 3), 1, 1, (3, 5, 6)),
    (32, 1, (5,), 2, 2, (61,)),
    (48, 2, (3, 3), 1, 1, (40, 40)),            # a large plane at stride 1: the planes
    (24, 2, (3, 3), 2, 1, (28, 28)),            # 16-channel blocks
    (16, 2, (5, 5), 1, 2, (9, 13)),             # one 16-block on a small plane
])
def test_c_order_depthwise_through_channels_last_equals_ref(tier, c, nd, k, stride, padding,
                                                            size):
    # C-order depthwise convs with 16+ channels (32+ and symmetric weights with VNNI) at a
    # stride along W or on small planes run a channels-last kernel between transposes; the
    # result lies
    # channels last, as every conv's (and PyTorch's)
    x, w, b = _depthwise_inputs(23, c, size, k)
    fn = {1: F.conv1d_relu, 2: F.conv2d, 3: F.conv3d}[nd]
    args = dict(stride=stride, padding=padding, groups=c, scale=float(np.prod(k)) * 0.02,
                zero_point=120)
    want, got = _ref_and_tier(tier, fn, x, w, b, **args)
    np.testing.assert_array_equal(got, want)
    assert np.std(want) > 5 and (got.strides[1] == 1 or got.shape[1] == 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block_bytes", [1, 3000, 200000])
@pytest.mark.parametrize("c,layout", [(3, "c"), (24, "cl"), (11, "cl"), (42, "cl"), (43, "cl")])
def test_im2col_gemm_blocks_across_images_equal_ref(monkeypatch, threads, block_bytes, c,
                                                    layout):
    # the im2col route fills and multiplies a block of rows at a time per thread: blocks of
    # 6 rows (the least), of a few dozen, and of all rows (the GEMM then sweeps its small
    # weight by groups of rows), starting and ending inside images, with odd grids, padding
    # and a weight zero point, equal ref at 1 and 2 threads; kernel rows of 33, 72 and 126
    # bytes (32-byte moves, the last overlapping) and of 129 (a library copy)
    from qops import _fast
    kernels = _fast.load("conv")
    if _fast.ISA != "avx2":
        pytest.skip("the im2col GEMM route is AVX2's")
    monkeypatch.setattr(kernels, "_IM2COL_BLOCK_BYTES", block_bytes)
    r = u.rng(37)
    raw = r.integers(0, 256, size=(3, 11, 13, c)).astype(np.uint8)
    data = np.moveaxis(raw, -1, 1) if layout == "cl" else np.ascontiguousarray(
        np.moveaxis(raw, -1, 1))
    x = qops.make_per_tensor_quantized_tensor(data, 0.03, 77)
    k = 7 if c == 3 else 3
    w = _w((19, c, k, k), zp=2, seed=9, per_channel=True)
    b = r.normal(0, 3, 19).astype(np.float32)
    args = dict(stride=(2, 1), padding=k // 2, scale=float(np.sqrt(c * k * k)) * 0.05,
                zero_point=120)
    with qops.threads(threads):
        want, got = _ref_and_tier("vnni", F.conv2d, x, w, b, **args)
    np.testing.assert_array_equal(got, want)
    assert np.std(want) > 5


@pytest.mark.parametrize("k,size,padding", [
    ((3, 3, 3), (6, 9, 8), 1),       # runs of 9 bytes (16-byte moves) across kernel planes
    ((2, 7, 7), (4, 7, 7), 0),       # runs of 21 (32-byte moves); windows end at the input's end
])
def test_im2col_inside_rows_3d_equal_ref(k, size, padding):
    # the im2col fill copies a window lying inside the input run by run with moves longer
    # than a run (qconv_i2c_inside): 3-D windows (runs in several kernel planes), 3 channels,
    # windows touching the input's last byte, equal ref
    from qops._show import explain
    r = u.rng(41)
    raw = r.integers(0, 256, size=(2,) + size + (3,)).astype(np.uint8)
    x = qops.make_per_tensor_quantized_tensor(np.moveaxis(raw, -1, 1), 0.03, 77)
    w = _w((10, 3) + k, zp=0, seed=5, per_channel=True)
    b = r.normal(0, 3, 10).astype(np.float32)
    args = dict(padding=padding, scale=float(np.sqrt(3 * np.prod(k))) * 0.05, zero_point=100)
    want, got = _ref_and_tier("vnni", F.conv3d, x, w, b, **args)
    np.testing.assert_array_equal(got, want)
    assert np.std(want) > 5
    from qops import _fast
    if _fast.ISA == "avx2":
        routes = [e.name for e in explain(lambda: F.conv3d(x, w, b, **args))]
        assert routes == ["conv_cl.gemm_im2col"]


@pytest.mark.parametrize("n,c,o,k,stride,padding,size,wzp,bell", [
    (2, 3, 64, 7, 2, 3, (45, 38), 0, True),      # a ResNet/GoogLeNet stem, trained-like
    (1, 3, 20, 7, 2, 3, (31, 31), 0, False),     # full-range weights: the nibble kernel
    (3, 4, 17, 5, 1, 2, (12, 13), 3, True),      # asymmetric weights, K tail
    (1, 1, 9, 9, 3, 0, (40, 40), 0, False),      # one channel, K = 81
    (5, 3, 16, 7, 2, 3, (224, 224), 0, True),    # many fused blocks per thread, across images
])
def test_few_channel_gemm_route_equals_ref(monkeypatch, n, c, o, k, stride, padding, size, wzp,
                                           bell):
    # AVX2's route for C-order convs on at most 4 channels (im2col rows and the GEMM core,
    # channels-last result): bit-exact with ref, inputs at 0 and 255, both clamps
    from qops import _fast
    kernels = _fast.load("conv")
    routes = []
    real = kernels._plan_conv
    monkeypatch.setattr(kernels, "_plan_conv",
                        lambda *a: routes.append(real(*a)[0]) or real(*a))
    r = u.rng(32)
    raw = r.integers(0, 256, size=(n, c) + size).astype(np.uint8)
    raw[0, :, :3] = 255
    raw[-1, :, -3:] = 0
    x = qops.make_per_tensor_quantized_tensor(raw, 0.03, 77)
    if bell:
        wf = r.normal(0, 1, (o, c, k, k))
        wq = np.round(wf / np.abs(wf).reshape(o, -1).max(1)[:, None, None, None] * 127)
        w = qops.make_per_channel_quantized_tensor(wq.astype(np.int8), r.uniform(0.005, 0.01, o),
                                                   np.full(o, wzp), 0)
    else:
        w = _w((o, c, k, k), zp=wzp, seed=9, per_channel=True)
    b = r.normal(0, 3, o).astype(np.float32)
    args = dict(stride=stride, padding=padding,
                scale=float(np.sqrt(c * k * k)) * 0.05, zero_point=120)
    for f in (F.conv2d, F.conv2d_relu):
        want, got = _ref_and_tier("vnni", f, x, w, b, **args)
        np.testing.assert_array_equal(got, want)
        assert len(np.unique(want)) > 20
    if _fast.ISA == "avx2":
        assert routes == ["gemm_im2col", "gemm_im2col"]
    # the same input in channels-last memory takes the route directly, not through conv's
    # C-order planes
    xcl = qops.make_per_tensor_quantized_tensor(
        np.ascontiguousarray(raw.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2), 0.03, 77)
    cl_routes = []
    real_cl = kernels._plan_cl
    monkeypatch.setattr(kernels, "_plan_cl",
                        lambda *a: cl_routes.append(real_cl(*a)) or real_cl(*a))
    for f in (F.conv2d, F.conv2d_relu):
        want, got = _ref_and_tier("vnni", f, xcl, w, b, **args)
        np.testing.assert_array_equal(got, want)
    if _fast.ISA == "avx2" and c > 1:          # (one channel: the same memory as C order)
        assert cl_routes == ["gemm_im2col", "gemm_im2col"]


@pytest.mark.parametrize("flat", [True, False])
def test_unpadded_channels_last_convs_read_the_input_in_place(flat):
    # AMX: with no padding and whole 64-byte pixels the padded-copy kernels read the input as
    # it lies, and the last image's rows whose tiles read past its end run on a copy of them
    # (conv_cl, 'direct'); with the flat route off every size goes through that path
    from qops._fast import load
    kernels = load("conv")
    rng = np.random.default_rng(11)
    was = getattr(kernels, "_AMX_FLAT", [True])[0]
    if hasattr(kernels, "_AMX_FLAT"):
        kernels._AMX_FLAT[0] = flat
    try:
        # channels that are not a multiple of 64 too: a pixel's last 64-byte chunk then runs
        # on into the next pixel's bytes (and past the input's end on the tail copy)
        for n, c, o, k, s, d, h, w in [(1, 64, 33, 1, 1, 1, 7, 9), (3, 128, 16, 3, 1, 1, 5, 37),
                                       (2, 64, 64, 2, 2, 1, 9, 40), (1, 192, 17, 3, 1, 2, 6, 61),
                                       (2, 64, 48, 1, 1, 1, 56, 56), (1, 64, 16, 3, 2, 1, 11, 3),
                                       (1, 40, 33, 1, 1, 1, 7, 9), (3, 100, 24, 3, 1, 1, 5, 37),
                                       (2, 144, 24, 1, 2, 1, 9, 40), (1, 72, 17, 3, 1, 2, 6, 61),
                                       (2, 33, 56, 1, 1, 1, 3, 5)]:
            data = rng.integers(0, 256, (n, h, w, c)).astype(np.uint8)
            x = qops.make_per_tensor_quantized_tensor(data, 0.05, 7).permute(0, 3, 1, 2)
            wq = qops.quantize_per_channel(rng.normal(0, 0.1, (o, c, k, k)).astype(np.float32),
                                           np.full(o, 0.002), np.zeros(o, int), 0, qops.qint8)
            b = rng.normal(0, 1, o).astype(np.float32)
            kw = dict(stride=s, dilation=d, scale=0.3, zero_point=5)
            with qops.backend("ref"):
                want = F.conv2d(x, wq, b, **kw)
            with qops.backend("fast"):
                assert F.conv2d(x, wq, b, **kw).equal(want), (n, c, o, k, s, d, h, w)
    finally:
        if hasattr(kernels, "_AMX_FLAT"):
            kernels._AMX_FLAT[0] = was


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_taps_route_equals_ref(threads):
    # AVX-512 VNNI tier: channels-last convs with symmetric weights and 32+ channels (a
    # multiple of 4) multiply each window in place, tap by tap, from a padded copy (or the
    # input itself without padding): padding, stride, dilation, 3-D, partial weight panels,
    # row tails of the 6-row tiles, ReLU
    from qops import _fast
    from qops._show import explain
    kernels = _fast.load("conv")
    if not kernels._TAPS[0]:
        pytest.skip("the taps route is in the AVX-512 VNNI build")
    previous = kernels._set_mode("vnni")
    r = u.rng(17)
    try:
        for n, c, o, size, k, stride, padding, dilation in [
                (1, 32, 70, (9, 13), (3, 3), 1, 1, 1), (2, 64, 16, (8, 8), (3, 3), 2, 1, 1),
                (1, 36, 100, (11, 10), (5, 5), 1, 2, 2), (1, 32, 24, (5, 6, 7), (3, 3, 3), 1, 1, 1),
                (3, 40, 64, (4, 5, 6), (2, 3, 3), (1, 2, 1), (0, 1, 0), 1),
                (1, 128, 130, (7, 7), (3, 3), 1, 1, 1),
                # under 4 channels (RGB stems): a tap is a kernel row of KW x C bytes, read as
                # a multiple of 4 from a copy with slack; dilation along H only
                (1, 3, 32, (20, 22), (3, 3), 2, 1, 1), (2, 3, 64, (15, 17), (7, 7), 2, 3, 1),
                (1, 1, 16, (9, 9), (3, 3), 1, 0, 1), (1, 2, 24, (8, 9), (5, 3), (1, 2), (2, 1),
                                                      (2, 1)),
                (1, 3, 8, (4, 5, 6), (2, 3, 3), 1, 1, 1)]:
            dims = len(size)
            x = u.random_qtensor(r, (n, c) + size, qops.quint8, scale=0.03, zero_point=77)
            perm = (0,) + tuple(range(2, dims + 2)) + (1,)
            back = (0, dims + 1) + tuple(range(1, dims + 1))
            x = x.permute(*perm).contiguous().permute(*back)
            w = _w((o, c) + k, zp=0, seed=c + o)
            b = r.normal(0, 3, o).astype(np.float32)
            fn = F.conv2d if dims == 2 else F.conv3d_relu
            args = dict(stride=stride, padding=padding, dilation=dilation,
                        scale=float(np.sqrt(c * np.prod(k)) * 74 * 0.03 * 0.01), zero_point=120)
            with qops.backend("ref"):
                want = fn(x, w, b, **args)._int
            with qops.threads(threads):
                taken = [rr.name for rr in explain(fn, x, w, b, **args)]
                got = fn(x, w, b, **args)._int
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=str(taken))
            assert len(np.unique(np.asarray(want))) > 20
            # (one channel: the same memory as C order, which conv's own routes take)
            if ((n, c, o) == (1, 32, 70) or threads == 1) and c > 1:
                assert "conv_cl.gemm_taps" in taken, taken
    finally:
        kernels._set_mode(previous)


def _need_amx():
    """The conv kernels module, or a skip where the CPU has no AMX tiles."""
    from qops import _fast
    kernels = _fast.load("conv")
    if not getattr(kernels, "_AMX", False):
        pytest.skip("the AMX routes need a CPU with AMX-INT8")
    return kernels


@pytest.mark.parametrize("flat", [True, False])
def test_amx_pair_store_equals_ref(flat):
    # AMX channels-last routes requantize two pixels x 32 output channels at a time where two
    # 16-channel blocks meet, the second's channels possibly ending early (saturating packs
    # for the lower clamp and the zero point, masked stores):
    # both clamps hit (a small output scale saturates most outputs, ReLU with a high zero
    # point), odd widths (a last pixel without its pair), a third partial block, padding
    # pixels of the flat route between the pairs, the im2col rows of few channels
    from qops._show import explain
    kernels = _need_amx()
    was = kernels._AMX_FLAT[0]
    kernels._AMX_FLAT[0] = flat
    r = u.rng(29)
    taken = set()
    try:
        for n, c, o, k, s, pad, h, w in [(1, 64, 32, 1, 1, 0, 7, 9), (2, 64, 40, 3, 1, 1, 5, 13),
                                         (1, 128, 96, 3, 2, 1, 9, 11), (1, 16, 64, 3, 1, 1, 6, 7),
                                         (1, 64, 72, 1, 1, 0, 3, 33), (2, 80, 48, 3, 1, 2, 4, 5),
                                         (1, 144, 24, 1, 1, 0, 5, 7), (2, 64, 56, 3, 1, 1, 4, 9)]:
            raw = r.integers(0, 256, (n, h, w, c)).astype(np.uint8)
            x = qops.make_per_tensor_quantized_tensor(raw, 0.05, 131).permute(0, 3, 1, 2)
            wt = _w((o, c, k, k), per_channel=True, seed=o + c)
            b = r.normal(0, 2, o).astype(np.float32)
            b[:3] = (1e30, -1e30, 0.0)
            for fn, scale, zp in [(F.conv2d, 0.02, 3), (F.conv2d_relu, 0.5, 250),
                                  (F.conv2d, 3.0, 128), (F.conv2d_relu, 0.05, 0)]:
                args = dict(stride=s, padding=pad, scale=scale, zero_point=zp)
                with qops.backend("ref"):
                    want = np.asarray(fn(x, wt, b, **args)._int)
                taken |= {rr.name for rr in explain(fn, x, wt, b, **args)}
                got = np.asarray(fn(x, wt, b, **args)._int)
                np.testing.assert_array_equal(got, want, err_msg=f"{(n, c, o, k, s, h, w)} {zp}")
    finally:
        kernels._AMX_FLAT[0] = was
    assert taken & {"conv_cl.amx_flat", "conv_cl.amx_padded", "conv_cl.amx_im2col"}, taken


@pytest.mark.parametrize("flat", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_kernel_row_runs_equal_ref(flat, threads):
    # AMX, channels that leave part of each 64-byte pixel empty: a kernel row read as one run
    # of KW x C bytes of a padded copy holding C bytes a pixel (its last chunk's bytes past
    # the run meet zero weights): 32, 33, 40, 80, 96 and 160 channels; kernels 3x3, 5x5, 2x2,
    # 1x3, 1x7, 3x1 (no run); strides, padding 0 (read in place, the tail rows on a copy),
    # dilation along H, 1-D and 3-D, both layouts, a second call from the kept geometry
    from qops._show import explain
    kernels = _need_amx()
    was = kernels._AMX_FLAT[0]
    kernels._AMX_FLAT[0] = flat
    r = u.rng(33)
    taken = set()
    try:
        with qops.threads(threads):
            for nd, n, c, o, k, s, pad, dil, size in [
                    (2, 1, 32, 64, (3, 3), 1, 1, 1, (13, 37)),
                    (2, 2, 32, 40, (5, 5), 1, 2, 1, (9, 11)),
                    (2, 1, 96, 32, (2, 2), 2, 0, 1, (8, 9)),
                    (2, 1, 160, 48, (1, 7), 1, (0, 3), 1, (5, 17)),
                    (2, 2, 32, 16, (3, 1), 1, 1, 1, (6, 7)),
                    (2, 1, 80, 64, (3, 3), 2, 1, 1, (15, 15)),
                    (2, 1, 33, 96, (3, 3), 1, 0, 1, (12, 35)),
                    (2, 1, 40, 32, (3, 3), 1, 2, (2, 1), (11, 9)),
                    (1, 2, 96, 64, (3,), 1, 1, 1, (50,)),
                    (3, 1, 32, 32, (3, 3, 3), 1, 1, 1, (3, 5, 6))]:
                raw = r.integers(0, 256, (n,) + size + (c,)).astype(np.uint8)
                xcl = qops.make_per_tensor_quantized_tensor(raw, 0.05, 131).permute(
                    0, nd + 1, *range(1, nd + 1))
                xc = qops.make_per_tensor_quantized_tensor(
                    np.ascontiguousarray(np.moveaxis(raw, -1, 1)), 0.05, 131)
                wt = _w((o, c) + k, per_channel=True, seed=o + c + nd)
                b = r.normal(0, 2, o).astype(np.float32)
                fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
                args = dict(stride=s, padding=pad, dilation=dil, scale=0.3, zero_point=100)
                for x in (xcl, xc):
                    with qops.backend("ref"):
                        want = np.asarray(fn(x, wt, b, **args)._int)
                    taken |= {rr.name for rr in explain(fn, x, wt, b, **args)}
                    for _ in range(2):      # the second call from the kept geometry
                        got = np.asarray(fn(x, wt, b, **args)._int)
                        np.testing.assert_array_equal(got, want, err_msg=f"{(nd, n, c, o, k)}")
                    np.testing.assert_array_equal(x._int, xcl._int)      # input unchanged
    finally:
        kernels._AMX_FLAT[0] = was
    assert taken & {"conv_cl.amx_flat", "conv_cl.amx_padded"}, taken


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_pixels_split_and_staged_rows_equal_ref(threads):
    # AMX, 1x1 convs as one GEMM over the pixels (conv_cl.amx_pixels): with too few rows for
    # the threads each thread takes a part of the output block pairs over every row (an odd
    # block count: a part ends on a single block); an input starting off a cache line with
    # whole 64-byte pixels has each row copied to an aligned stage first
    from qops._show import explain
    _need_amx()
    r = u.rng(43)
    for n, c, o, h, w, off in [(1, 1024, 240, 14, 14, 0), (1, 1024, 256, 14, 14, 16),
                               (2, 128, 112, 9, 13, 48), (1, 480, 200, 14, 14, 0),
                               (1, 2048, 512, 7, 7, 32), (1, 64, 24, 3, 5, 16)]:
        buf = np.empty(n * h * w * c + 128, np.uint8)
        start = (-buf.ctypes.data) % 64 + off
        raw = buf[start:start + n * h * w * c].reshape(n, h, w, c)
        raw[...] = r.integers(0, 256, raw.shape)
        x = qops.make_per_tensor_quantized_tensor(raw, 0.05, 131).permute(0, 3, 1, 2)
        assert x._int.ctypes.data % 64 == off
        wt = _w((o, c, 1, 1), per_channel=True, seed=o + c)
        b = r.normal(0, 2, o).astype(np.float32)
        args = dict(scale=0.02 * np.sqrt(c), zero_point=100)
        with qops.backend("ref"):
            want = np.asarray(F.conv2d_relu(x, wt, b, **args)._int)
        with qops.threads(threads):
            taken = [rr.name for rr in explain(F.conv2d_relu, x, wt, b, **args)]
            got = np.asarray(F.conv2d_relu(x, wt, b, **args)._int)
        np.testing.assert_array_equal(got, want, err_msg=str((n, c, o, h, w, off)))
        assert len(np.unique(want)) > 20
        assert taken == ["conv_cl.amx_pixels"], taken


def _corder_conv_routes(r, shape, off, o, kernel, threads, **args):
    """A C-order conv2d_relu (conv3d for 3-D) of random uint8 values of `shape` starting
    `off` bytes past a cache line, fast at `threads` threads against ref, bit for bit, the
    input unchanged; the routes it took."""
    from qops._show import explain
    size = int(np.prod(shape))
    buf = np.empty(size + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + off
    raw = buf[start:start + size].reshape(shape)
    raw[...] = r.integers(0, 256, shape)
    assert raw.ctypes.data % 64 == off
    kept = raw.copy()
    x = qops.make_per_tensor_quantized_tensor(raw, 0.05, 131)
    c = shape[1]
    wt = _w((o, c) + kernel, per_channel=True, seed=o + c)
    b = r.normal(0, 2, o).astype(np.float32)
    fn = F.conv2d_relu if len(shape) == 4 else F.conv3d
    args = dict(args, scale=0.02 * np.sqrt(c * np.prod(kernel)), zero_point=100)
    with qops.backend("ref"):
        want = np.asarray(fn(x, wt, b, **args)._int)
    with qops.threads(threads):
        taken = {rr.name for rr in explain(fn, x, wt, b, **args)}
        got = np.asarray(fn(x, wt, b, **args)._int)
    np.testing.assert_array_equal(got, want, err_msg=str((shape, o, kernel, off, args)))
    assert len(np.unique(want)) > 20
    assert np.array_equal(raw, kept)                    # the input is never written
    return taken


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_pixels_corder_equal_ref(threads):
    # AMX, C-order 1x1 convs (conv.amx_pixels_corder): each thread transposes its rows' pixels
    # out of the channel planes into its stage; rows that cross image boundaries (3-D too),
    # channel counts off 16 and 64, planes off 16 pixels (byte tails), an input off a cache
    # line, under 32 output channels; at 2 threads, rows too few for the threads, which then
    # split the channels (each transposing every row)
    _need_amx()
    r = u.rng(44)
    taken = set()
    for n, c, o, dims, off in [(2, 72, 32, (19, 19), 0), (3, 256, 64, (48, 48), 16),
                               (2, 40, 48, (3, 7, 9), 48), (1, 1024, 256, (14, 14), 0),
                               (4, 136, 96, (5, 13), 32), (1, 32, 512, (1, 1), 0),
                               (1, 512, 24, (14, 14), 16), (2, 40, 16, (9, 11), 0)]:
        taken |= _corder_conv_routes(r, (n, c) + dims, off, o, (1,) * len(dims), threads)
    assert "conv.amx_pixels_corder" in taken, taken


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_padded_corder_equal_ref(threads):
    # AMX, C-order convs whose padded copy conv_cl fills row by row (conv.amx_padded_corder):
    # the fill transposes each row's pixels out of the channel planes; channels off 64 (the
    # bytes past them zeroed), strides, dilation, 3-D, planes off 16 pixels, an input off a
    # cache line, small planes on the flat route (strided there: stride phases, which the
    # whole channels-last copy feeds instead)
    _need_amx()
    r = u.rng(45)
    taken = set()
    for n, c, o, dims, k, s, p, dil, off in [
            (1, 64, 64, (23, 21), 3, 1, 1, 1, 0), (2, 40, 48, (13, 13), 3, 2, 1, 1, 16),
            (2, 40, 48, (9, 64), 3, 1, 1, 1, 16), (1, 64, 32, (56, 56), 3, 2, 1, 1, 0),
            (1, 96, 32, (19, 17), 5, 1, 2, 2, 48), (2, 64, 40, (7, 7), 3, 1, 1, 1, 0),
            (1, 48, 64, (5, 9, 11), 3, 1, 1, 1, 32), (1, 160, 96, (9, 9), (1, 7), 1, (0, 3),
                                                      1, 0)]:
        kk = (k,) * len(dims) if isinstance(k, int) else k
        taken |= _corder_conv_routes(r, (n, c) + dims, off, o, kk, threads, stride=s,
                                     padding=p, dilation=dil)
    assert "conv.amx_padded_corder" in taken, taken
    assert {"conv_cl.amx_padded", "conv_cl.amx_flat"} <= taken, taken


def test_one_row_amx_conv_splits_over_threads():
    # AMX: a conv1d is one output row; whole rows per thread left the second thread idle (2
    # threads ran slower than 1), so stride-1 convs with too few rows take the flat route
    from qops._show import explain
    _need_amx()
    r = u.rng(41)
    # (long enough to be worth a second thread: AMX_GRAIN)
    x = u.random_qtensor(r, (1, 64, 2100), qops.quint8, scale=0.05, zero_point=120)
    w = _w((64, 64, 3), seed=4)
    b = r.normal(0, 1, 64).astype(np.float32)
    args = dict(padding=1, scale=0.4, zero_point=100)
    with qops.backend("ref"):
        want = np.asarray(F.conv1d(x, w, b, **args)._int)
    with qops.threads(2):
        taken = [rr.name for rr in explain(F.conv1d, x, w, b, **args)]
        got = np.asarray(F.conv1d(x, w, b, **args)._int)
    np.testing.assert_array_equal(got, want)
    assert "conv_cl.amx_flat" in taken, taken

