"""The quantized tensor type: constructors, qparams, views, errors, backend and threads."""
import numpy as np
import pytest

import qops
import qops.functional as F


def q(shape=(2, 3, 4), dtype=qops.quint8, scale=0.1, zp=3, seed=0):
    x = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    return qops.quantize_per_tensor(x, scale, zp, dtype)


def qc(shape=(2, 3, 4), axis=1):
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    c = shape[axis]
    return qops.quantize_per_channel(x, np.linspace(0.05, 0.2, c), np.arange(c), axis, qops.quint8)


def test_attributes():
    t = q()
    assert t.is_quantized and qops.is_quantized(t)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.dim() == 3 and t.numel() == 24
    assert t.size() == (2, 3, 4) and t.size(-1) == 4
    assert t.dtype is qops.quint8 and t.qscheme() is qops.per_tensor_affine
    assert t.q_scale() == 0.1 and t.q_zero_point() == 3
    assert t.int_repr().dtype == np.uint8 and t.stride() == (12, 4, 1)
    c = qc()
    assert c.qscheme() is qops.per_channel_affine and c.q_per_channel_axis() == 1
    np.testing.assert_array_equal(c.q_per_channel_zero_points(), [0, 1, 2])
    with pytest.raises(TypeError, match="per-tensor"):
        c.q_scale()
    with pytest.raises(TypeError, match="per-channel"):
        t.q_per_channel_scales()


def test_int_repr_is_a_copy_and_dequantize_formula():
    t = q(dtype=qops.qint8, zp=-5)
    r = t.int_repr()
    r[...] = 0
    assert not np.array_equal(t.int_repr(), r)
    expected = np.float32(0.1) * (t.int_repr().astype(np.float32) + 5)
    np.testing.assert_array_equal(t.dequantize(), expected)


def test_ties_round_half_to_even_with_zero_point_before_rounding():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5], np.float32)
    assert qops.quantize_per_tensor(x, 1.0, 0, qops.qint8).int_repr().tolist() == \
        [0, 2, 2, 0, -2, -2, 4]
    assert qops.quantize_per_tensor(x, 1.0, 1, qops.qint8).int_repr().tolist() == \
        [2, 2, 4, 0, 0, -2, 4]


@pytest.mark.parametrize("backend", ["ref", "fast"])
def test_nan_and_inf(backend):
    x = np.array([[np.nan, np.inf, -np.inf, 1e30, -1e30]], np.float32)
    with qops.backend(backend):
        assert qops.quantize_per_tensor(x, 0.1, 3, qops.quint8).int_repr().tolist() == \
            [[255, 255, 0, 255, 0]]
        assert qops.quantize_per_tensor(x, 0.1, 3, qops.qint8).int_repr().tolist() == \
            [[127, 127, -128, 127, -128]]
        assert qops.quantize_per_channel(x, [0.1], [3], 0, qops.quint8).int_repr().tolist() == \
            [[0, 255, 0, 255, 0]]
        assert qops.quantize_per_channel(x, [0.1], [3], 0, qops.qint8).int_repr().tolist() == \
            [[0, 127, -128, 127, -128]]
        lo, hi = -2**31, 2**31 - 1
        assert qops.quantize_per_tensor(x, 0.1, 3, qops.qint32).int_repr().tolist() == \
            [[lo, hi, lo, hi, lo]]


def test_float64_and_float16_are_converted():
    x = np.array([0.26, -1.3])
    a = qops.quantize_per_tensor(x, 0.1, 0, qops.qint8)
    b = qops.quantize_per_tensor(x.astype(np.float32), 0.1, 0, qops.qint8)
    assert a.equal(b)
    qops.quantize_per_tensor(x.astype(np.float16), 0.1, 0, qops.qint8)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), 1e-46, 1e-39])
def test_bad_scale(scale):
    with pytest.raises(ValueError, match="scale"):
        qops.quantize_per_tensor(np.zeros(3, np.float32), scale, 0, qops.quint8)


def test_bad_arguments():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="zero_point=256"):
        qops.quantize_per_tensor(x, 0.1, 256, qops.quint8)
    with pytest.raises(ValueError, match="zero_point"):
        qops.quantize_per_tensor(x, 0.1, -129, qops.qint8)
    with pytest.raises(TypeError, match="zero_point"):
        qops.quantize_per_tensor(x, 0.1, 1.5, qops.quint8)
    with pytest.raises(TypeError, match="dtype"):
        qops.quantize_per_tensor(x, 0.1, 0, "float32")
    with pytest.raises(TypeError, match="input"):
        qops.quantize_per_tensor(np.arange(3), 0.1, 0, qops.quint8)
    with pytest.raises(TypeError, match="scale"):
        qops.quantize_per_tensor(x, "0.1", 0, qops.quint8)
    with pytest.raises(ValueError, match="axis"):
        qops.quantize_per_channel(x, [0.1, 0.1], [0, 0], 2, qops.quint8)
    with pytest.raises(ValueError, match="scales"):
        qops.quantize_per_channel(x, [0.1], [0, 0], 0, qops.quint8)
    with pytest.raises(ValueError, match="zero_points"):
        qops.quantize_per_channel(x, [0.1, 0.2], [0], 0, qops.quint8)
    with pytest.raises(ValueError, match="zero_points"):
        qops.quantize_per_channel(x, [0.1, 0.2], [0, 300], 0, qops.quint8)
    with pytest.raises(ValueError, match="scales"):
        qops.quantize_per_channel(x, [0.1, -0.2], [0, 0], 0, qops.quint8)
    with pytest.raises(TypeError, match="integer"):
        qops.make_per_tensor_quantized_tensor(x, 0.1, 0)
    with pytest.raises(TypeError):
        qops.make_per_tensor_quantized_tensor(np.zeros(3, np.int16), 0.1, 0)


def test_make_quantized_tensors_do_not_copy():
    raw = np.arange(6, dtype=np.int8).reshape(2, 3)
    t = qops.make_per_tensor_quantized_tensor(raw, 0.5, -1)
    assert t.dtype is qops.qint8
    np.testing.assert_array_equal(t.dequantize(), 0.5 * (raw + 1))
    c = qops.make_per_channel_quantized_tensor(raw, [0.5, 0.25], [0, 1], 0)
    np.testing.assert_array_equal(c.dequantize(), (raw - [[0], [1]]) * np.array([[0.5], [0.25]]))


def test_views_share_and_match_numpy():
    t = q((2, 3, 4))
    raw = t.int_repr()
    cases = [(t.reshape(6, 4), raw.reshape(6, 4)), (t.view(3, 8), raw.reshape(3, 8)),
             (t.flatten(), raw.reshape(-1)), (t.flatten(1), raw.reshape(2, 12)),
             (t.transpose(0, 2), raw.transpose(2, 1, 0)),
             (t.permute(1, 2, 0), raw.transpose(1, 2, 0)),
             (t.unsqueeze(0), raw[None]), (t[None].squeeze(0), raw), (t.select(1, 2), raw[:, 2]),
             (t[1, :, ::2], raw[1, :, ::2]), (t[..., -1], raw[..., -1]),
             (t[:1].expand(3, 3, 4), np.broadcast_to(raw[:1], (3, 3, 4))),
             (t.transpose(0, 1).contiguous(), raw.transpose(1, 0, 2)), (t.T, raw.T),
             (t.clone(), raw)]
    for view, expected in cases:
        np.testing.assert_array_equal(view.int_repr(), expected)
        assert view.q_scale() == 0.1 and view.q_zero_point() == 3
    assert t.transpose(0, 1).contiguous().is_contiguous()
    with pytest.raises(ValueError, match="view"):
        t.transpose(0, 1).view(-1)
    with pytest.raises(ValueError, match="reshape"):
        t.reshape(5, 5)


def test_per_channel_views():
    c = qc((2, 3, 4), axis=1)
    assert c.unsqueeze(0).q_per_channel_axis() == 2
    assert c[0].q_per_channel_axis() == 0
    assert c[:, 1:].q_per_channel_scales().shape == (2,)
    assert c.reshape(2, 3, 2, 2).q_per_channel_axis() == 1
    assert c.flatten(2).q_per_channel_axis() == 1
    sel = c.select(1, 2)                       # one channel: per-tensor with that channel's qparams
    assert sel.qscheme() is qops.per_tensor_affine
    assert sel.q_scale() == c.q_per_channel_scales()[2] and sel.q_zero_point() == 2
    np.testing.assert_array_equal(sel.dequantize(), c.dequantize()[:, 2])
    for bad in (lambda: c.transpose(0, 1), lambda: c.permute(2, 1, 0),
                lambda: c.expand(2, 2, 3, 4)):
        with pytest.raises(TypeError, match="per-channel"):
            bad()
    with pytest.raises(ValueError, match="channel axis"):
        c.reshape(6, 4)
    with pytest.raises(TypeError, match="per-channel"):
        c[np.array([0, 1])]


def test_equal_clone_copy_resize():
    t = q()
    assert t.equal(t.clone()) and t.clone()._int is not t._int
    assert not t.equal(q(zp=4)) and not t.equal(q(scale=0.10000001))
    assert not t.equal(q(dtype=qops.qint8)) and not t.equal(q(shape=(24,)))
    u = q(seed=5)
    u.copy_(t)
    assert u.equal(t)
    with pytest.raises(TypeError, match="dtype"):
        u.copy_(q(dtype=qops.qint8))
    r = t.clone().resize_(3, 2)
    assert r.shape == (3, 2)
    np.testing.assert_array_equal(r.int_repr().ravel(), t.int_repr().ravel()[:6])
    assert t.clone().resize_(30).int_repr()[24:].tolist() == [0] * 6
    with pytest.raises(TypeError, match="equal"):
        t.equal(np.zeros(3))


def test_repr_and_numpy_refusal():
    text = repr(q((2, 2)))
    assert "dtype=qops.quint8" in text and "scale=0.1" in text and "zero_point=3" in text
    assert "axis=1" in repr(qc())
    with pytest.raises(TypeError, match="int_repr"):
        np.asarray(q())
    with pytest.raises(TypeError):
        bool(q())


def test_requantize_errors():
    with pytest.raises(TypeError, match="input"):
        F.requantize(np.zeros(3), 0.1, 0)
    with pytest.raises(ValueError, match="zero_point"):
        F.requantize(q(), 0.1, 999)


def test_backend_and_threads_settings():
    assert qops.get_backend() == "fast"
    with qops.backend("ref"):
        assert qops.get_backend() == "ref"
    assert qops.get_backend() == "fast"
    with pytest.raises(ValueError, match="backend"):
        qops.set_backend("gpu")
    n = qops.get_num_threads()
    with qops.threads(1):
        assert qops.get_num_threads() == 1
    assert qops.get_num_threads() == n
    with pytest.raises(ValueError, match="threads"):
        qops.set_num_threads(0)


def test_show_config(capsys):
    qops.show_config()
    out = capsys.readouterr().out
    for key in ("numpy", "OpenMP", "threads", "ISAs compiled", "ISA in use", "VBMI kernels",
                "int8 conv kernel", "channels-last conv kernels"):
        assert key in out


# -- issue 19: hostile and careless use of QTensor and its qparams -------------------------

def pcq(shape, axis, scales, zps, dtype=qops.quint8, seed=2):
    raw = np.random.default_rng(seed).integers(0, 50, size=shape).astype(dtype.storage)
    return qops.make_per_channel_quantized_tensor(raw, scales, zps, axis)


# issue 19 #2: copy_ of a broadcast per-channel source left more channels than scales
@pytest.mark.parametrize("backend", ["ref", "fast"])
@pytest.mark.parametrize("src_shape, src_axis, dst_shape, dst_axis", [
    ((1, 4), 0, (3, 4), 0),        # one channel broadcast to three: its qparams repeated
    ((4,), 0, (3, 4), 1),          # a new leading dim: the channel axis moves to 1
    ((4,), 0, (2, 3, 4), 2),
    ((3, 1), 0, (3, 5), 0),        # channels kept, another axis broadcast
    ((1, 1, 2), 1, (2, 3, 2), 1),
    ((3, 4), 1, (3, 4), 1),        # no broadcast
])
def test_issue19_copy_per_channel_broadcast_qparams(backend, src_shape, src_axis, dst_shape,
                                                    dst_axis):
    c = src_shape[src_axis]
    src = pcq(src_shape, src_axis, np.linspace(0.1, 0.4, c), np.arange(c) + 2)
    nd = dst_shape[dst_axis]
    dst = pcq(dst_shape, dst_axis, np.full(nd, 0.7), np.zeros(nd, np.int64), seed=3)
    with qops.backend(backend):
        dst.copy_(src)
        axis = dst.q_per_channel_axis()
        assert axis == src_axis + len(dst_shape) - len(src_shape)
        assert dst.q_per_channel_scales().shape == (dst_shape[axis],)
        assert dst.q_per_channel_zero_points().shape == (dst_shape[axis],)
        np.testing.assert_array_equal(dst.dequantize(),
                                      np.broadcast_to(src.dequantize(), dst_shape))


# issue 19 #2: the issue's case: a per-channel (1, C) source into a larger per-tensor tensor
@pytest.mark.parametrize("backend", ["ref", "fast"])
def test_issue19_copy_per_channel_into_per_tensor(backend):
    src = pcq((1, 3), 1, [0.1, 0.2, 0.3], [0, 1, 2])
    with qops.backend(backend):
        dst = q((4, 3)).copy_(src)
        assert dst.q_per_channel_axis() == 1 and dst.q_per_channel_scales().shape == (3,)
        np.testing.assert_array_equal(dst.dequantize(), np.broadcast_to(src.dequantize(), (4, 3)))
        src1 = pcq((1, 3), 0, [0.25], [4])                   # one channel, broadcast to four
        dst = q((4, 3)).copy_(src1)
        assert dst.q_per_channel_axis() == 0
        np.testing.assert_array_equal(dst.q_per_channel_scales(), [0.25] * 4)
        np.testing.assert_array_equal(dst.q_per_channel_zero_points(), [4] * 4)
        np.testing.assert_array_equal(dst.dequantize(), np.broadcast_to(src1.dequantize(), (4, 3)))
        back = dst.copy_(q((3,)))                            # and back to per tensor
        assert not back.is_per_channel and back.q_scale() == 0.1


# issue 19 #15: copy_ into a read-only view said the shapes do not broadcast
def test_issue19_copy_into_read_only_view():
    t = q((1, 4))
    for view in (t.expand(3, 4), qops.make_per_tensor_quantized_tensor(
            np.frombuffer(bytes(12), np.uint8).reshape(3, 4), 0.1, 0)):
        with pytest.raises(ValueError, match="read-only"):
            view.copy_(q((3, 4)))


# issue 19 #4: qint32 q - zero_point wraps in int32 as PyTorch's; ref computed it exactly
@pytest.mark.parametrize("backend", ["ref", "fast"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 33])
def test_issue19_qint32_dequantize_wraps_like_torch(torch, backend, n):
    raw = np.resize(np.array([2**31 - 1, -2**31, 0, -1, 1000, -1000, 2**30], np.int32), n)
    for zp in (-2**31, 2**31 - 1, -1000, 1000):
        theirs = torch._make_per_tensor_quantized_tensor(torch.from_numpy(raw), 0.5, zp)
        with qops.backend(backend):
            t = qops.make_per_tensor_quantized_tensor(raw, 0.5, zp)
            np.testing.assert_array_equal(t.dequantize(), theirs.dequantize().numpy())
            # requantize is quantize(dequantize(x)): the same wrapped values
            r = F.requantize(t, 2.0**20, 3, qops.qint32)
            expected = torch.quantize_per_tensor(theirs.dequantize(), 2.0**20, 3, torch.qint32)
            np.testing.assert_array_equal(r.int_repr(), expected.int_repr().numpy())
    # the wrap, spelled out: (2**31 - 1) - (-1000) is -2**31 + 999
    t = qops.make_per_tensor_quantized_tensor(np.array([2**31 - 1], np.int32), 1.0, -1000)
    assert t.dequantize()[0] == np.float32(-2**31 + 999)


# issue 19 #5: scales beyond float32 (or whose float32 inverse overflows) were accepted
@pytest.mark.parametrize("scale", [1e300, 3.5e38, 3.4028236e38, 10**400, 1e-46, 1e-39])
def test_issue19_scales_beyond_float32(scale):
    x = np.zeros((2, 3), np.float32)
    calls = [lambda: qops.quantize_per_tensor(x, scale, 0, qops.quint8),
             lambda: qops.make_per_tensor_quantized_tensor(np.zeros(3, np.uint8), scale, 0),
             lambda: F.requantize(q(), scale, 0)]
    for call in calls:
        with pytest.raises(ValueError, match="scale"):
            call()
    if scale != 10**400:
        for call in (lambda: qops.quantize_per_channel(x, [0.1, scale], [0, 0], 0, qops.quint8),
                     lambda: qops.make_per_channel_quantized_tensor(
                         np.zeros((2, 3), np.int8), [scale, 0.1], [0, 0], 0)):
            with pytest.raises(ValueError, match="scales"):
                call()


# issue 19 #5: the extremes float32 can hold are still accepted, and finite when dequantized
def test_issue19_float32_extreme_scales_accepted():
    top = float(np.finfo(np.float32).max)
    for scale in (top, 3.4028235e38, float(np.finfo(np.float32).tiny) * 4):
        t = qops.make_per_tensor_quantized_tensor(np.array([0, 1], np.uint8), scale, 0)
        assert np.isfinite(t.dequantize()).all()


# issue 19 #5: scalar ops computed result scales above float32 (1e39), or named no argument
def test_issue19_scalar_ops_result_scale_in_float32():
    big = qops.make_per_tensor_quantized_tensor(np.arange(10, dtype=np.uint8), 1e38, 5)
    tiny = qops.make_per_tensor_quantized_tensor(np.arange(10, dtype=np.uint8), 1e-30, 5)
    huge = qops.make_per_tensor_quantized_tensor(np.arange(10, dtype=np.uint8), 3e38, 5)
    for call in (lambda: F.mul_scalar(big, 10.0), lambda: F.mul_scalar(q(), 1e300),
                 lambda: F.mul_scalar(q(), -1e300), lambda: F.mul_scalar(q(), 1e-300),
                 lambda: F.add_scalar(tiny, 1e300),          # other / scale overflows float64
                 lambda: F.add_scalar(huge, -3e38 * 300),    # requantized scale 3.6e38
                 lambda: F.add_scalar(q(), 10**400), lambda: F.mul_scalar(q(), 10**400)):
        with pytest.raises(ValueError, match="other"):
            call()
    r = F.mul_scalar(big, 3.0)                               # 3e38 still fits
    assert r.q_scale() == 3e38 and not np.isnan(r.dequantize()).any()


# issue 19 #10: negative sizes were taken as "infer" (resize_(-3) on 10 elements gave (7,))
def test_issue19_resize_and_views_refuse_negative_sizes():
    t = q((10,))
    for call, match in ((lambda: t.clone().resize_(-3), "negative"),
                        (lambda: t.clone().resize_(2, -1), "negative"),
                        (lambda: t.reshape(-3), "negative"), (lambda: t.reshape(2, -5), "negative"),
                        (lambda: t.view(-2, 5), "negative"), (lambda: t.reshape(-1, -1), "-1"),
                        (lambda: t.expand(-2), "negative"),
                        (lambda: t[:1].expand(-1, 3, 1), "leading"),
                        (lambda: t.clone().resize_(2**62, 4), "too many"),
                        (lambda: t.reshape(2**64), "2\\*\\*63")):
        with pytest.raises(ValueError, match=match):
            call()
    for bad in ((True, 10), (1.5,), ("10",)):
        with pytest.raises(TypeError, match="shape"):
            t.reshape(*bad)
    assert t.clone().resize_(0).shape == (0,) and t.reshape(2, -1).shape == (2, 5)
    assert t[:2].expand(3, -1).shape == (3, 2)


# issue 19 #15: make_per_channel_quantized_tensor on a 0-d array raised IndexError
def test_issue19_make_per_channel_0d():
    with pytest.raises(ValueError, match="dimension"):
        qops.make_per_channel_quantized_tensor(np.array(3, np.uint8), [0.1], [0], 0)


# issue 19 #15: zero_point=True / 2.0 were accepted as 1 / 2
@pytest.mark.parametrize("zp", [True, False, np.bool_(True), 2.0, np.float64(2.0),
                                np.array(2.0), np.array([True]), "2", None])
def test_issue19_zero_point_must_be_an_integer(zp):
    x = np.zeros(3, np.float32)
    for call in (lambda: qops.quantize_per_tensor(x, 0.1, zp, qops.quint8),
                 lambda: qops.make_per_tensor_quantized_tensor(np.zeros(3, np.uint8), 0.1, zp),
                 lambda: F.requantize(q(), 0.1, zp)):
        with pytest.raises(TypeError, match="zero_point"):
            call()


# issue 19 #15: the integer types PyTorch accepts as a zero point still work
@pytest.mark.parametrize("zp", [2, np.int64(2), np.uint8(2), np.int32(2), np.int8(2), np.array(2),
                                np.array([2], np.int16)])
def test_issue19_zero_point_integer_types_accepted(zp):
    q = qops.quantize_per_tensor(np.zeros(3, np.float32), 0.1, zp, qops.quint8)
    assert q.q_zero_point() == 2


# issue 19 #15: bool scales and axes are refused, naming them
def test_issue19_bool_scale_and_axis():
    x = np.zeros((2, 3), np.float32)
    for scale in (True, np.array(True)):
        with pytest.raises(TypeError, match="scale"):
            qops.quantize_per_tensor(x, scale, 0, qops.quint8)
    with pytest.raises(TypeError, match="scales"):
        qops.quantize_per_channel(x, [True, True], [0, 0], 0, qops.quint8)
    with pytest.raises(TypeError, match="axis"):
        qops.quantize_per_channel(x, [0.1, 0.1], [0, 0], True, qops.quint8)
    with pytest.raises(TypeError, match="axis"):
        qops.make_per_channel_quantized_tensor(np.zeros((2, 3), np.uint8), [0.1, 0.1], [0, 0], 0.0)


# issue 19 #15: per-channel zero points were converted before the range check (uint64 2**64-1
# wrapped to -1, 1e30 to INT64_MIN)
@pytest.mark.parametrize("zps", [np.array([0, 2**64 - 1], np.uint64), np.array([0.0, 1e30]),
                                 np.array([0.0, np.nan])])
def test_issue19_per_channel_zero_points_range_before_conversion(zps):
    with pytest.raises(ValueError, match="zero_points"):
        qops.quantize_per_channel(np.zeros((2, 3), np.float32), [0.1, 0.1], zps, 0, qops.qint8)


# issue 19 #2: t[True] on a per-channel tensor moved the data's axes but not the channel axis
def test_issue19_per_channel_bool_index():
    c = qc((2, 3, 4), axis=1)
    for key in (True, (slice(None), False), np.bool_(True)):
        with pytest.raises(TypeError, match="basic indexing"):
            c[key]
    v = c[None, ..., 1:]                                     # basic keys keep working
    assert v.q_per_channel_axis() == 2 and v.q_per_channel_scales().shape == (3,)
    np.testing.assert_array_equal(v.dequantize(), c.dequantize()[None, ..., 1:])


# issue 19 #15: select() errors name the index
def test_issue19_select_index_errors():
    t = q((10,))
    with pytest.raises(IndexError, match="index=20"):
        t.select(0, 20)
    with pytest.raises(TypeError, match="index"):
        t.select(0, 1.0)
    assert t.select(0, -10).shape == ()


# issue 19 #5: a torch tensor's unvalidated scale (1e300) or, #2, a channel axis that no
# longer matches its scales (reshape of a per-channel tensor) came into a QTensor unchecked
def test_issue19_qtensor_from_torch_checks_qparams(torch):
    from qops.nn._torch import qtensor_from_torch
    t = torch._make_per_tensor_quantized_tensor(torch.zeros(3, dtype=torch.uint8), 1e300, 0)
    with pytest.raises(ValueError, match="scale"):
        qtensor_from_torch(t)
    c = torch.quantize_per_channel(torch.randn(3, 4),
                                   torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64),
                                   torch.tensor([0, 1, 2]), 0, torch.quint8)
    with pytest.raises(ValueError, match="scales"):
        qtensor_from_torch(c.reshape(12))
    v = qtensor_from_torch(c[:, 1])                        # torch reports axis -1 here
    assert v.q_per_channel_axis() == 0
    np.testing.assert_array_equal(v.dequantize(), c.dequantize()[:, 1].numpy())


def test_shape_args_fast_path_checks_as_general():
    # reshape/view/flatten take plain ints by a fast path: the same results and errors as
    # the general checks (one level of tuple only, bools and floats refused, one -1)
    t = q((2, 3))
    assert t.reshape(3, 2).shape == t.reshape((3, 2)).shape == t.reshape([3, 2]).shape == (3, 2)
    assert t.reshape(-1).shape == (6,) and t.reshape(np.int64(6)).shape == (6,)
    assert t.flatten().shape == t.flatten(0, -1).shape == (6,)
    with pytest.raises(TypeError):
        t.reshape(((2, 3),))                  # a tuple in a tuple
    bad_args = [((True, 6), TypeError), ((2.0, 3), TypeError),
                ((-1, -1), ValueError), ((2, -2), ValueError), ((2 ** 63, 1), ValueError)]
    for args, err in bad_args:
        with pytest.raises(err):
            t.reshape(*args)
    with pytest.raises(ValueError, match="end_dim"):
        t.flatten(0, 2)


def test_qtensor_from_torch_keeps_memory_layout(torch):
    # a quantized conv's channels-last output stays channels last (the layout-following ops
    # then run as PyTorch's on it); other strided views come over as C-order copies
    from qops._layout import is_channels_last
    from qops.nn._torch import qtensor_from_torch
    t = torch.quantize_per_tensor(torch.rand(2, 5, 3, 4), 0.02, 3, torch.quint8)
    cl = t.contiguous(memory_format=torch.channels_last)
    for src, want_cl in ((cl, True), (t, False), (cl[:, :, 1:], True), (t[:, :, :, ::2], False)):
        v = qtensor_from_torch(src)
        assert is_channels_last(v._int) == want_cl
        np.testing.assert_array_equal(v.int_repr(), src.int_repr().numpy())
        assert not np.shares_memory(v._int, src.int_repr().numpy())


# issue 19 #2: no view of a per-channel tensor may have other than one scale per channel
# (random basic keys, bools among them, and the reshaping views, against numpy)
def test_issue19_per_channel_views_fuzz():
    import random
    rnd, rng = random.Random(19), np.random.default_rng(19)
    for _ in range(800):
        nd = rnd.randint(1, 4)
        shape = tuple(rnd.randint(0, 4) for _ in range(nd))
        axis = rnd.randrange(nd)
        raw = rng.integers(0, 255, size=shape).astype(np.uint8)
        c = shape[axis]
        t = qops.make_per_channel_quantized_tensor(raw, rng.uniform(0.1, 1, c),
                                                   rng.integers(0, 10, c), axis)
        full = t.dequantize()
        key = tuple(rnd.choice([None, Ellipsis, True, rnd.randint(-5, 5),
                                slice(rnd.choice([None, -3, 0, 1]), rnd.choice([None, -1, 2, 5]),
                                      rnd.choice([None, 1, 2, -1]))])
                    for _ in range(rnd.randint(0, nd + 1)))
        views = [lambda: t[key], t.squeeze, t.flatten,
                 lambda: t.unsqueeze(rnd.randint(-nd - 1, nd)),
                 lambda: t.select(rnd.randrange(nd), rnd.randint(-2, 2)), lambda: t.reshape(-1)]
        for make in views:
            try:
                v = make()
            except (IndexError, ValueError, TypeError):
                continue
            if v.is_per_channel:
                a = v.q_per_channel_axis()
                assert 0 <= a < v.ndim and v.q_per_channel_scales().shape == (v.shape[a],), \
                    (shape, axis, key)
            d = v.dequantize()
            if make is views[0]:
                np.testing.assert_allclose(d, full[key], rtol=1e-6)    # D_sc vs D_pc: 1 ulp
                np.testing.assert_array_equal(v.int_repr(), raw[key])
            elif d.size == full.size:
                np.testing.assert_allclose(d.reshape(-1), full.reshape(-1), rtol=1e-6)


# issue 19 #15: QTensor() gave an empty object whose every method failed with AttributeError
def test_issue19_qtensor_constructor_refused():
    import copy
    import pickle
    with pytest.raises(TypeError, match="quantize_per_tensor"):
        qops.QTensor()
    c = qc()
    assert pickle.loads(pickle.dumps(c)).equal(c) and copy.deepcopy(c).equal(c)


@pytest.mark.parametrize("args", [(3, 1), (7, 1), (2, 0), (1, 2), (4, 1), (5, 2)])
def test_chunk_and_split_as_torch(args, torch):
    # issue 20: real forwards call x.chunk(2, dim=1) (ShuffleNetV2) on quantized tensors
    x = np.arange(2 * 7 * 3, dtype=np.float32).reshape(2, 7, 3)
    q = qops.quantize_per_tensor(x, 0.5, 3, qops.quint8)
    t = torch.quantize_per_tensor(torch.from_numpy(x), 0.5, 3, torch.quint8)
    for ours, theirs in [(q.chunk(*args), t.chunk(*args)), (q.split(*args), t.split(*args))]:
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a.int_repr(), b.int_repr().numpy())
    # per-channel pieces keep one scale per channel (PyTorch's own fail to report theirs)
    pc = qops.quantize_per_channel(x, np.linspace(0.1, 0.7, 7), np.arange(7), 1, qops.quint8)
    pieces = pc.chunk(*args)
    np.testing.assert_array_equal(np.concatenate([p.dequantize() for p in pieces], args[1]),
                                  pc.dequantize())
    for p in pieces:
        assert len(p.q_per_channel_scales()) == p.shape[1]


def test_split_sections_checked():
    q = qops.quantize_per_tensor(np.zeros((4, 6), np.float32), 0.5, 3, qops.quint8)
    assert [p.shape for p in q.split([1, 5], 1)] == [(4, 1), (4, 5)]
    with pytest.raises(ValueError, match="add up"):
        q.split([1, 2], 1)
    with pytest.raises(ValueError, match="chunks"):
        q.chunk(0)
    with pytest.raises(ValueError, match="dim"):
        q.split(2, 5)
