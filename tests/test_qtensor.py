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
    assert qops.quantize_per_tensor(x, 1.0, 0, qops.qint8).int_repr().tolist() == [0, 2, 2, 0, -2, -2, 4]
    assert qops.quantize_per_tensor(x, 1.0, 1, qops.qint8).int_repr().tolist() == [2, 2, 4, 0, 0, -2, 4]


@pytest.mark.parametrize("backend", ["ref", "fast"])
def test_nan_and_inf(backend):
    x = np.array([[np.nan, np.inf, -np.inf, 1e30, -1e30]], np.float32)
    with qops.backend(backend):
        assert qops.quantize_per_tensor(x, 0.1, 3, qops.quint8).int_repr().tolist() == [[255, 255, 0, 255, 0]]
        assert qops.quantize_per_tensor(x, 0.1, 3, qops.qint8).int_repr().tolist() == [[127, 127, -128, 127, -128]]
        assert qops.quantize_per_channel(x, [0.1], [3], 0, qops.quint8).int_repr().tolist() == [[0, 255, 0, 255, 0]]
        assert qops.quantize_per_channel(x, [0.1], [3], 0, qops.qint8).int_repr().tolist() == [[0, 127, -128, 127, -128]]
        lo, hi = -2**31, 2**31 - 1
        assert qops.quantize_per_tensor(x, 0.1, 3, qops.qint32).int_repr().tolist() == [[lo, hi, lo, hi, lo]]


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
             (t.transpose(0, 2), raw.transpose(2, 1, 0)), (t.permute(1, 2, 0), raw.transpose(1, 2, 0)),
             (t.unsqueeze(0), raw[None]), (t[None].squeeze(0), raw), (t.select(1, 2), raw[:, 2]),
             (t[1, :, ::2], raw[1, :, ::2]), (t[..., -1], raw[..., -1]),
             (t[:1].expand(3, 3, 4), np.broadcast_to(raw[:1], (3, 3, 4))),
             (t.transpose(0, 1).contiguous(), raw.transpose(1, 0, 2)), (t.T, raw.T), (t.clone(), raw)]
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
    for bad in (lambda: c.transpose(0, 1), lambda: c.permute(2, 1, 0), lambda: c.expand(2, 2, 3, 4)):
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
