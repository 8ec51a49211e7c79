"""Pool-family tests the registry cannot express: errors, tie counting, PyTorch quirks."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._registry import _util as u
from qops._registry.pool import _avg_sums


def _q(shape, d=qops.quint8, zp=3, seed=0):
    return u.random_qtensor(u.rng(seed), shape, d, scale=0.1, zero_point=zp)


@pytest.fixture(params=["ref", "fast"])
def backend(request):
    with qops.backend(request.param):
        yield request.param


@pytest.mark.parametrize("fn,kw,exc,match", [
    (F.max_pool2d, dict(kernel_size=5), ValueError, "larger than the padded input"),
    (F.avg_pool2d, dict(kernel_size=5), ValueError, "larger than the padded input"),
    (F.max_pool2d, dict(kernel_size=3, dilation=3), ValueError, "larger than the padded input"),
    (F.max_pool2d, dict(kernel_size=2, stride=0), ValueError, "stride"),
    (F.avg_pool2d, dict(kernel_size=2, stride=(1, 0)), ValueError, "stride"),
    (F.max_pool2d, dict(kernel_size=2, padding=-1), ValueError, "padding"),
    (F.avg_pool2d, dict(kernel_size=2, padding=2), ValueError, "padding must be at most half"),
    (F.max_pool2d, dict(kernel_size=3, padding=(0, 2)), ValueError, "padding must be at most half"),
    (F.max_pool2d, dict(kernel_size=0), ValueError, "kernel_size"),
    (F.max_pool2d, dict(kernel_size=(2, 2, 2)), ValueError, "kernel_size"),
    (F.max_pool2d, dict(kernel_size=2, dilation=0), ValueError, "dilation"),
    (F.max_pool2d, dict(kernel_size=2.0), TypeError, "kernel_size"),
    (F.max_pool2d, dict(kernel_size=2, ceil_mode=1), TypeError, "ceil_mode"),
    (F.avg_pool2d, dict(kernel_size=2, divisor_override=0), ValueError, "divisor_override"),
    (F.avg_pool2d, dict(kernel_size=2, count_include_pad="yes"), TypeError, "count_include_pad"),
    (F.adaptive_avg_pool2d, dict(output_size=0), ValueError, "output_size"),
    (F.adaptive_avg_pool2d, dict(output_size=(2, -1)), ValueError, "output_size"),
    (F.adaptive_avg_pool2d, dict(output_size=(2, 2, 2)), ValueError, "output_size"),
    (F.adaptive_max_pool2d, dict(output_size=None), TypeError, "output_size"),
    (F.adaptive_max_pool2d, dict(output_size=2.5), TypeError, "output_size"),
])
def test_bad_arguments(backend, fn, kw, exc, match):
    with pytest.raises(exc, match=match):
        fn(_q((1, 2, 4, 4)), **kw)


@pytest.mark.parametrize("fn,args", [
    (F.max_pool1d, (2,)), (F.max_pool2d, (2,)), (F.max_pool3d, (2,)),
    (F.avg_pool1d, (2,)), (F.avg_pool2d, (2,)), (F.avg_pool3d, (2,)),
    (F.adaptive_avg_pool1d, (2,)), (F.adaptive_avg_pool2d, (2,)), (F.adaptive_avg_pool3d, (2,)),
    (F.adaptive_max_pool1d, (2,)), (F.adaptive_max_pool2d, (2,)),
])
def test_wrong_inputs(fn, args):
    nsp = int(fn.__name__[-2])
    with pytest.raises(ValueError, match="dims"):
        fn(_q((1,) * (nsp + 3)), *args)                    # one dim too many
    with pytest.raises(ValueError, match="dims"):
        fn(_q((4,) * nsp), *args)                          # no channel dim
    with pytest.raises(ValueError, match="non-empty spatial"):
        fn(_q((1, 2) + (0,) * nsp), *args)
    with pytest.raises(TypeError, match="QTensor"):
        fn(np.zeros((1, 2) + (4,) * nsp, np.uint8), *args)
    pc = qops.quantize_per_channel(np.zeros((2,) + (4,) * nsp, np.float32), [0.1, 0.2], [0, 0], 0,
                                   qops.quint8)
    with pytest.raises(TypeError, match="per-tensor"):
        fn(pc, *args)
    if "avg" in fn.__name__:
        with pytest.raises(TypeError, match="dtype"):
            fn(_q((1, 2) + (4,) * nsp, qops.qint32, 0), *args)


def test_kernel_larger_than_input_raises_where_pytorch_returns_empty(torch):
    # PyTorch's avg_pool2d silently returns an empty tensor here and its max_pool2d raises;
    # qops raises for both, naming the problem.
    q = _q((1, 2, 3, 3))
    t = u.to_torch(q)
    assert torch.nn.functional.avg_pool2d(t, 4).numel() == 0
    with pytest.raises(RuntimeError):
        torch.nn.functional.max_pool2d(t, 4)
    for fn in (F.avg_pool2d, F.max_pool2d):
        with pytest.raises(ValueError, match="larger than the padded input"):
            fn(q, 4)


def test_output_keeps_input_qparams_and_unbatched(backend):
    q = _q((3, 7, 6), qops.qint8, -7)
    for out in (F.max_pool2d(q, 2), F.avg_pool2d(q, 2), F.adaptive_avg_pool2d(q, 3),
                F.adaptive_max_pool2d(q, 3)):
        assert out.dtype is qops.qint8 and out.q_scale() == q.q_scale()
        assert out.q_zero_point() == -7 and out.shape == (3, 3, 3)
    batched = F.avg_pool2d(q.unsqueeze(0), 3, 1, 1)
    u.assert_same(u.canon(F.avg_pool2d(q, 3, 1, 1)), u.canon(batched[0]), "unbatched")


def test_global_average_pool_shortcut_equals_general_path(backend):
    # adaptive_avg_pool2d(x, 1) on a C-order batch skips the general checks; the same pool
    # asked as (1, 1) takes them: both give the same tensor, and odd inputs still get errors
    for dtype, zp, shape in ((qops.quint8, 100, (2, 33, 7, 5)), (qops.qint8, -3, (1, 5, 1, 1)),
                             (qops.quint8, 0, (0, 4, 3, 3))):
        q = _q(shape, dtype, zp)
        a, b = F.adaptive_avg_pool2d(q, 1), F.adaptive_avg_pool2d(q, (1, 1))
        assert a.dtype is dtype and a.shape == shape[:2] + (1, 1)
        u.assert_same(u.canon(a), u.canon(b), f"global pool {shape}")
    with pytest.raises(ValueError, match="non-empty spatial"):
        F.adaptive_avg_pool2d(_q((1, 2, 0, 3), qops.quint8, 1), 1)
    with pytest.raises(TypeError):
        F.adaptive_avg_pool2d(_q((1, 2, 3, 3), qops.quint8, 1), True)


def test_return_indices_match_float_max_pool(backend, torch):
    q = _q((2, 3, 9, 11), qops.quint8, 0)
    q._int[:] //= 32             # many equal values: the first maximum must win
    out, idx = F.max_pool2d(q, 3, 2, 1, return_indices=True)
    f = torch.from_numpy(q._int.astype(np.float32))
    tout, tidx = torch.nn.functional.max_pool2d(f, 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(idx, tidx.numpy())
    np.testing.assert_array_equal(out._int, tout.numpy().astype(np.uint8))
    assert idx.dtype == np.int64
    u.assert_same(u.canon(F.max_pool2d(q, 3, 2, 1)), u.canon(out), "same values")
    aout, aidx = F.adaptive_max_pool2d(q, (4, 5), return_indices=True)
    tout, tidx = torch.nn.functional.adaptive_max_pool2d(f, (4, 5), return_indices=True)
    np.testing.assert_array_equal(aidx, tidx.numpy())


def test_max_pool_matches_pytorch_pytorch_rejects_indices(torch):
    t = u.to_torch(_q((1, 2, 6, 6)))
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.nn.functional.max_pool2d(t, 2, return_indices=True)


def test_avg_pool3d_ties_counted(torch):
    """avg_pool3d: qops' one formula vs PyTorch's two; the difference is exactly the odd-zp ties."""
    r = u.rng(5)
    # 2x2x2 windows of raw values whose sums hit .5 ties often; 40 channels = 32 vector + 8 tail
    q = u.random_qtensor(r, (2, 40, 4, 6, 6), qops.quint8, scale=0.1, zero_point=7)
    ours = F.avg_pool3d(q, 2)._int.astype(np.int64)
    theirs = u.to_torch(q)
    theirs = torch.nn.functional.avg_pool3d(theirs, 2).int_repr().numpy().astype(np.int64)
    acc, size, div = _avg_sums(q._int, dict(kernel_size=2))
    t = (acc - size * 7).astype(np.float32) * np.float32(1.0 / 8)
    tie = (t - np.floor(t)) == 0.5
    diff = ours != theirs
    assert tie.mean() > 0.05, "the case should have many ties"
    # PyTorch rounds ties of the first 32 channels (its vector blocks) with the zero point
    # added after rounding; every such tie differs by one, nothing else differs. The last 8
    # channels are its scalar tail on AVX-512 builds (no difference) but another vector step
    # on AVX2 ones (ties differ): there only "differences are ties" holds on every CPU.
    np.testing.assert_array_equal(diff[:, :32], tie[:, :32])
    assert not (diff[:, 32:] & ~tie[:, 32:]).any()
    assert np.abs(ours - theirs).max() == 1
    print(f"avg_pool3d ties: {int(tie.sum())} of {tie.size}; differing: {int(diff.sum())}")
    # an even zero point has no differences at all
    q2 = u.random_qtensor(r, (2, 40, 4, 6, 6), qops.quint8, scale=0.1, zero_point=8)
    theirs2 = torch.nn.functional.avg_pool3d(u.to_torch(q2), 2).int_repr().numpy()
    np.testing.assert_array_equal(F.avg_pool3d(q2, 2)._int, theirs2)


def test_avg_pool3d_equals_avg_pool2d_with_unit_depth(backend):
    q = _q((2, 5, 7, 9))
    a = F.avg_pool2d(q, 3, 2, 1, True, False)
    b = F.avg_pool3d(q.unsqueeze(2), (1, 3, 3), (1, 2, 2), (0, 1, 1), True, False)
    u.assert_same(u.canon(a), u.canon(b.squeeze(2)), "2d vs 3d")


def test_adaptive_avg_1x1_spatial_pytorch_bug(backend, torch):
    """PyTorch scrambles channels for 1x1 spatial inputs with C > 1; qops does not."""
    q = _q((1, 4, 1, 1), zp=0)
    q._int[:, :, 0, 0] = [10, 20, 30, 40]
    ours = F.adaptive_avg_pool2d(q, 2)
    expected = np.broadcast_to(np.array([10, 20, 30, 40], np.uint8)[None, :, None, None],
                               (1, 4, 2, 2))
    np.testing.assert_array_equal(ours._int, expected)
    theirs = torch.nn.functional.adaptive_avg_pool2d(u.to_torch(q), 2).int_repr().numpy()
    if np.array_equal(theirs, expected):
        pytest.skip("this PyTorch build no longer has the 1x1 channels-last bug")
    assert not np.array_equal(theirs, expected)


def test_large_values_and_threads():
    # sums of many 255s stay exact in int32; fast == ref at 1 and 2 threads on a row-split case
    q = qops.make_per_tensor_quantized_tensor(np.full((1, 3, 40, 40), 255, np.uint8), 0.1, 0)
    for threads in (1, 2):
        with qops.threads(threads):
            assert (F.adaptive_avg_pool2d(q, 1)._int == 255).all()
            assert (F.avg_pool2d(q, 5)._int == 255).all()


@pytest.mark.parametrize("name", ["max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool2d"])
def test_max_pools_without_vbmi(name):
    # The AVX-512 build has a VBMI kernel for stride-2 max pools and falls back to the column
    # walk on CPUs without VBMI: with it switched off, the fallback must agree with ref too.
    from qops._config import impl
    from qops._registry import all_specs
    with qops.backend("fast"):
        pool = impl("pool")
    spec = next(s for s in all_specs() if s.name == name)
    was = pool._use_vbmi(False)
    try:
        for case in spec.cases():
            with qops.backend("ref"):
                want = case.call(spec.op)
            with qops.backend("fast"):
                got = case.call(spec.op)
            for g, w in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,)):
                assert (g.equal(w) if isinstance(w, qops.QTensor)
                        else np.array_equal(g, w)), case.label
    finally:
        pool._use_vbmi(was)


def test_argument_memo_keeps_checks():
    # _pool_args memoizes plain int arguments: forms that compare equal to a memoized key but
    # are not plain ints (bool, float) must still be checked and refused
    q = qops.quantize_per_tensor(np.zeros((1, 2, 8, 8), np.float32), 0.1, 3, qops.quint8)
    F.max_pool2d(q, 2, 1)
    F.max_pool2d(q, (2, 2), (1, 1))
    for kw in (dict(kernel_size=2.0, stride=1), dict(kernel_size=2, stride=True),
               dict(kernel_size=(2, 2), stride=(1, 1.0)),
               dict(kernel_size=2, stride=1, ceil_mode=1)):
        with pytest.raises((TypeError, ValueError)):
            F.max_pool2d(q, **kw)


def _cl(raw, scale=0.1, zp=3):
    """A per-tensor QTensor of `raw` (N, C, ...) lying channels last in memory."""
    return qops.make_per_tensor_quantized_tensor(u._layout(raw, "cl"), scale, zp)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
def test_channels_last_max_pool_blocks_and_tails_equal_ref(dtype):
    # channel counts around the 64-, 32- and 16-byte blocks and the byte tail (AVX2), the
    # masked last 64-byte block (AVX-512), windows cut by padding and ceil mode, a dilation:
    # the fast kernel (C order's values) vs the ref
    r = u.rng(23)
    info = np.iinfo(dtype)
    for c in (1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 80, 97, 130, 191, 480, 832):
        raw = r.integers(max(info.min, -5000), min(info.max, 5000) + 1,
                         size=(2, c, 9, 11)).astype(dtype)
        x = _cl(raw, zp=0)
        for kw in (dict(kernel_size=3, stride=1, padding=1, ceil_mode=True),
                   dict(kernel_size=3, stride=2, padding=0, ceil_mode=True),
                   dict(kernel_size=2, stride=2),
                   dict(kernel_size=3, stride=2, padding=1, dilation=2),
                   # windows of 1, 3, 16 and 25 taps (the loops; 2x2 and 3x3 ones inside
                   # the input take straight-line code)
                   dict(kernel_size=1), dict(kernel_size=(1, 3), stride=1, padding=(0, 1)),
                   dict(kernel_size=4, stride=3, padding=2),
                   dict(kernel_size=5, stride=2, padding=2)):
            with qops.backend("fast"):
                got = F.max_pool2d(x, **kw)
            with qops.backend("ref"):
                want = F.max_pool2d(x, **kw)
            np.testing.assert_array_equal(got.int_repr(), want.int_repr(), err_msg=f"{c} {kw}")


def test_channels_last_max_pool_checks_every_call():
    # the pools memoize their argument checks per call signature: arguments equal to a
    # memoized call's but of another type (1 for True, 3.0 for 3) and a per-channel input of
    # the same shape are still refused after a call that filled the memo
    raw = u.rng(5).integers(0, 256, size=(1, 40, 9, 9)).astype(np.uint8)
    x = _cl(raw)
    first = F.max_pool2d(x, 3, 2, 1, 1, True)
    again = F.max_pool2d(x, 3, 2, 1, 1, True)
    with qops.backend("ref"):
        want = F.max_pool2d(x, 3, 2, 1, 1, True)
    for y in (first, again):
        np.testing.assert_array_equal(y.int_repr(), want.int_repr())
        assert (y.q_scale(), y.q_zero_point()) == (x.q_scale(), x.q_zero_point())
    for args in ((3, 2, 1, 1, 1), (3.0, 2, 1, 1, True), (3, (2, 2.0), 1, 1, True)):
        with pytest.raises(TypeError):
            F.max_pool2d(x, *args)
    pc = qops.make_per_channel_quantized_tensor(u._layout(raw, "cl"), np.full(40, 0.1),
                                                np.zeros(40, np.int64), 1)
    assert pc._int.strides == x._int.strides
    with pytest.raises(TypeError, match="per-tensor"):
        F.max_pool2d(pc, 3, 2, 1, 1, True)


# issue 19 #3: channels-last avg/adaptive/max pools shared a struct filled in a prange body
@pytest.mark.parametrize("op", ["avg", "adaptive", "max"])
def test_issue19_channels_last_pools_two_threads(op):
    raw = u.rng(19).integers(-128, 128, size=(2, 64, 40, 41)).astype(np.int8)
    x = _cl(raw)
    call = {"avg": lambda: F.avg_pool2d(x, 2, 2),
            "adaptive": lambda: F.adaptive_avg_pool2d(x, (7, 9)),
            "max": lambda: F.max_pool2d(x, 3, 2, 1)}[op]
    with qops.backend("fast"):
        with qops.threads(1):
            one = call()._int.copy()
        with qops.threads(2):
            for i in range(30):
                np.testing.assert_array_equal(call()._int, one, err_msg=f"call {i}")


# issue 19 #6: adaptive_avg_pool3d(x, 1) is PyTorch's mean, not the pool's reciprocal chain
def test_issue19_adaptive_avg_pool3d_one_rounds_as_mean(backend, torch):
    # 30 taps summing to 75 (mean 2.5): the chain f32(f32(1/2)/3)/5 gives 3, the mean 2
    raw = np.full((1, 2, 2, 3, 5), 2, np.uint8)
    raw[0, 0].reshape(-1)[:15] = 3
    raw[0, 1].reshape(-1)[:21] = 8          # 21*8 + 9*2 = 186: mean 6.2, no tie
    q = qops.make_per_tensor_quantized_tensor(raw, 0.1, 0)
    ours = F.adaptive_avg_pool3d(q, 1)
    assert ours._int.ravel().tolist() == [2, 6]
    theirs = torch.nn.functional.adaptive_avg_pool3d(u.to_torch(q), 1).int_repr().numpy()
    np.testing.assert_array_equal(ours._int, theirs)
    np.testing.assert_array_equal(F.adaptive_avg_pool3d(q, (1, 1, 1))._int, theirs)


# issue 19 #19: channels-last adaptive pools round as PyTorch's NHWC kernel (MobileNetV3 SE)
def test_issue19_adaptive_avg_pool2d_channels_last_tie(backend, torch):
    raw = np.full((1, 2, 14, 14), 8, np.uint8)
    raw[:, :, :7] = 9                       # 98 of 196 taps are 9: a mean of exactly 8.5
    x = _cl(raw, zp=8)
    ours = F.adaptive_avg_pool2d(x, 1)
    assert ours._int.ravel().tolist() == [8, 8]
    t = u.to_torch(x).contiguous(memory_format=torch.channels_last)
    theirs = torch.nn.functional.adaptive_avg_pool2d(t, 1).int_repr().numpy()
    np.testing.assert_array_equal(ours._int, theirs)
    # the same values in C order keep PyTorch's NCHW formula, rint(sum * f32(f32(1/14)/14))
    # on raw values, which rounds this tie up
    c = qops.make_per_tensor_quantized_tensor(raw, 0.1, 8)
    ours_c = F.adaptive_avg_pool2d(c, 1)._int
    assert ours_c.ravel().tolist() == [9, 9]
    theirs_c = torch.nn.functional.adaptive_avg_pool2d(u.to_torch(c), 1).int_repr().numpy()
    np.testing.assert_array_equal(ours_c, theirs_c)


# issue 19 #19: channels-last avg pools add the zero point after rounding (PyTorch's vector body)
@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_issue19_avg_pool_channels_last_ties(backend, torch, nsp):
    r = u.rng(nsp)
    # 16 channels: whole vectors of PyTorch's kernel on AVX2 and AVX-512 builds alike
    shape = (2, 16) + (6, 7, 5)[3 - nsp:]
    raw = (7 + r.integers(0, 2, size=shape)).astype(np.uint8)
    x = _cl(raw, zp=7)
    fn = getattr(F, f"avg_pool{nsp}d")
    ours = fn(x, 2, 1)._int.astype(np.int64)
    t = u.to_torch(x).movedim(1, -1).contiguous().movedim(-1, 1)
    theirs = getattr(torch.nn.functional, f"avg_pool{nsp}d")(t, 2, 1).int_repr().numpy()
    np.testing.assert_array_equal(ours, theirs)
    # the C-order rule differs at these ties: the case exercises them
    c = fn(qops.make_per_tensor_quantized_tensor(raw, 0.1, 7), 2, 1)._int.astype(np.int64)
    assert (c != ours).mean() > 0.05


# -- the route table: every kernel route of pool.pyx's plan(), reached and equal to ref ------

def _raw(shape, dtype=np.uint8, seed=24):
    lo, hi = (-128, 128) if dtype == np.int8 else ((0, 256) if dtype == np.uint8 else (-999, 999))
    return u.rng(seed).integers(lo, hi, size=shape).astype(dtype)


def _qt(shape, dtype=np.uint8, zp=3):
    return qops.make_per_tensor_quantized_tensor(_raw(shape, dtype), 0.1, zp)


def _qcl(shape, dtype=np.uint8, zp=3):
    return _cl(_raw(shape, dtype), zp=zp)


# (route, op, input, arguments): on builds without the route's kernel (the AVX-512 routes on
# AVX2, simd_rows on baseline) the case still checks fast == ref on the route taken instead
ROUTE_CASES = [
    ("empty", F.max_pool2d, lambda: _qt((0, 3, 8, 8)), dict(kernel_size=2)),
    ("max_pool.short", F.max_pool2d, lambda: _qt((2, 3, 8, 32)), dict(kernel_size=2)),
    ("max_pool.short", F.max_pool3d, lambda: _qt((1, 2, 4, 6, 32), np.int8),
     dict(kernel_size=2)),
    ("max_pool.vbmi_s2", F.max_pool2d, lambda: _qt((2, 3, 17, 33)),
     dict(kernel_size=3, stride=2)),
    ("max_pool.vbmi_s2", F.max_pool2d, lambda: _qt((1, 2, 16, 112), np.int8),
     dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool.simd_rows", F.max_pool2d, lambda: _qt((2, 3, 20, 150)),
     dict(kernel_size=3, stride=2)),
    ("max_pool.simd_rows", F.max_pool2d, lambda: _qt((1, 3, 20, 70), np.int8),
     dict(kernel_size=3, stride=1, padding=1)),
    ("max_pool.indices", F.max_pool2d, lambda: _qt((2, 3, 9, 11)),
     dict(kernel_size=3, stride=2, return_indices=True)),
    ("max_pool.rows", F.max_pool2d, lambda: _qt((2, 3, 10, 12)), dict(kernel_size=3, stride=3)),
    ("max_pool.rows", F.max_pool1d, lambda: _qt((2, 3, 40), np.int32, zp=0),
     dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool_cl.cl", F.max_pool2d, lambda: _qcl((2, 16, 9, 10), np.int8),
     dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool.avg2x2", F.avg_pool2d, lambda: _qt((2, 3, 8, 32)), dict(kernel_size=2)),
    ("avg_pool.short_pairs", F.avg_pool2d, lambda: _qt((2, 3, 9, 32), np.int8),
     dict(kernel_size=2, padding=(1, 0))),
    ("avg_pool.short_pairs", F.avg_pool3d, lambda: _qt((1, 2, 4, 6, 32)), dict(kernel_size=2)),
    ("avg_pool.avg3", F.avg_pool2d, lambda: _qt((2, 3, 20, 100)),
     dict(kernel_size=3, stride=1, padding=1)),
    ("avg_pool.simd_rows", F.avg_pool2d, lambda: _qt((2, 3, 20, 100), np.int8),
     dict(kernel_size=2, stride=2)),
    ("avg_pool.simd_rows", F.avg_pool2d, lambda: _qt((1, 3, 20, 100)),
     dict(kernel_size=(3, 4), stride=(2, 1), padding=1, count_include_pad=False)),
    ("avg_pool.planes", F.avg_pool2d, lambda: _qt((2, 3, 12, 13)), dict(kernel_size=3, stride=3)),
    ("avg_pool_cl.cl", F.avg_pool2d, lambda: _qcl((2, 16, 9, 10)),
     dict(kernel_size=2, stride=2)),
    ("adaptive_avg_pool.global", F.adaptive_avg_pool2d, lambda: _qt((2, 5, 7, 7), np.int8),
     dict(output_size=1)),
    ("adaptive_avg_pool.short", F.adaptive_avg_pool2d, lambda: _qt((2, 3, 20, 40)),
     dict(output_size=(5, 10))),
    ("adaptive_avg_pool.planes", F.adaptive_avg_pool2d, lambda: _qt((2, 3, 20, 100)),
     dict(output_size=(5, 7))),
    ("adaptive_avg_pool_cl.cl", F.adaptive_avg_pool2d, lambda: _qcl((2, 16, 9, 10), np.int8),
     dict(output_size=(3, 4))),
    ("adaptive_max_pool.indices", F.adaptive_max_pool2d, lambda: _qt((2, 3, 9, 11)),
     dict(output_size=(3, 4), return_indices=True)),
    ("adaptive_max_pool.short", F.adaptive_max_pool2d, lambda: _qt((2, 3, 20, 40), np.int8),
     dict(output_size=(5, 10))),
    ("adaptive_max_pool.planes", F.adaptive_max_pool2d, lambda: _qt((2, 3, 20, 100)),
     dict(output_size=(5, 7))),
    ("adaptive_max_pool.planes", F.adaptive_max_pool1d, lambda: _qt((2, 3, 50), np.int32, zp=0),
     dict(output_size=7)),
]


def _pool_module():
    from qops._config import impl
    with qops.backend("fast"):
        return impl("pool")


def test_route_table_covers_every_route():
    assert {r for r, *_ in ROUTE_CASES} == set(_pool_module().ROUTES)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("route,fn,make,kw", ROUTE_CASES,
                         ids=[f"{r}-{i}" for i, (r, *_) in enumerate(ROUTE_CASES)])
def test_route(route, fn, make, kw, threads):
    from qops._show import explain
    pool = _pool_module()
    x = make()
    with qops.threads(threads):
        taken = [r.name for r in explain(fn, x, **kw)]
        with qops.backend("fast"):
            got = fn(x, **kw)
    with qops.backend("ref"):
        want = fn(x, **kw)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert g.equal(w) if isinstance(w, qops.QTensor) else np.array_equal(g, w)
    if route not in pool.BUILT:
        pytest.skip(f"{route}: not in this build ({qops._fast.ISA}); took {taken}")
    assert taken == [route]


def test_plan_names_the_route_of_a_direct_call():
    pool = _pool_module()
    x5 = _raw((1, 2, 1, 6, 8))
    r = pool.plan("max_pool", x5, (1, 3, 3), (1, 3, 3), (0, 0, 0), (1, 1, 1), (1, 2, 2), False)
    assert r.name == "max_pool.rows" and r.where == "pool_max.pxi"
    r = pool.plan("adaptive_avg_pool", x5, (1, 1, 1))
    assert r.name == "adaptive_avg_pool.global"


def test_show_config_with_an_op_names_its_kernel(capsys):
    qops.show_config(F.max_pool2d, _qt((1, 2, 9, 11)), 3, 2, return_indices=True)
    out = capsys.readouterr().out
    assert "route max_pool.indices, kernel _max_indices in pool_max.pxi" in out


def test_generated_pool_variants_header_is_current():
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parent.parent / "tools" / "gen_pool_variants.py"
    res = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
def test_global_avg_pool_channels_last_fast_path(dtype):
    """Global pooling of channels-last images (output_size 1 or (1, 1), the fast path) equals
    the general path (output_size [1, 1]) and the reference."""
    r = np.random.default_rng(3)
    for shape in [(1, 40, 7, 7), (2, 72, 5, 3), (3, 1000, 2, 2), (2, 13, 3, 4), (1, 77, 5, 5)]:
        x = u.random_qtensor(r, shape, dtype, layout="cl")
        outs = {}
        for backend in ("ref", "fast"):
            with qops.backend(backend):
                for size in (1, (1, 1), [1, 1]):
                    y = F.adaptive_avg_pool2d(x, size)
                    assert y.shape == shape[:2] + (1, 1)
                    outs[backend, str(size)] = y.int_repr()
        first = next(iter(outs.values()))
        for v in outs.values():
            np.testing.assert_array_equal(v, first)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
def test_channels_last_avg_pools_channel_tails_equal_ref(dtype):
    """Channels-last average pools over channel counts that leave 8-channel groups and single
    channels past the 64-channel blocks equal the reference."""
    r = np.random.default_rng(11)
    for c in (8, 13, 40, 72, 77, 120, 136, 288):
        x = u.random_qtensor(r, (2, c, 9, 7), dtype, layout="cl")
        for f, args in ((F.avg_pool2d, dict(kernel_size=3, stride=2, padding=1)),
                        (F.adaptive_avg_pool2d, dict(output_size=(3, 2)))):
            with qops.backend("ref"):
                want = f(x, **args).int_repr()
            with qops.backend("fast"):
                got = f(x, **args).int_repr()
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("pool", ["max", "avg", "avg_no_pad"])
def test_pool_short_rows_equal_ref(dtype, pool):
    # C-order planes too narrow for a whole vector of interior outputs (up to 40 wide) take
    # padded copies of their rows and vector chunks (qp_max_row_short, qp_avg_row_short on
    # AVX2): every width 1..40 with stride 1 and 2, padding, ceil mode and wide kernels,
    # equal ref
    fn = F.max_pool2d if pool == "max" else F.avg_pool2d
    extra = {"count_include_pad": False} if pool == "avg_no_pad" else {}
    r = u.rng(5)
    for w in range(1, 41):
        for k, s, p, ceil in ((3, 1, 1, False), (3, 2, 0, True), (2, 2, 0, True), (5, 1, 2, True),
                              (min(w, 9), 1, 0, False), (3, 2, 1, False)):
            if k > w + 2 * p:
                continue
            x = u.random_qtensor(r, (2, 3, 4, w), dtype, scale=0.1, zero_point=0)
            args = dict(kernel_size=(2, k), stride=(1, s), padding=(1, p), ceil_mode=ceil,
                        **extra)
            with qops.backend("ref"):
                want = fn(x, **args).int_repr()
            with qops.backend("fast"):
                got = fn(x, **args).int_repr()
            np.testing.assert_array_equal(got, want, err_msg=f"w={w} k={k} s={s} p={p}")
