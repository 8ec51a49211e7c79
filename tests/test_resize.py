"""Resize-family tests the registry cannot express: errors, copies, PyTorch quirks."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._registry import _util as u


def _q(shape, d=qops.quint8, zp=3, seed=0):
    return u.random_qtensor(u.rng(seed), shape, d, scale=0.1, zero_point=zp)


@pytest.fixture(params=["ref", "fast"])
def backend(request):
    with qops.backend(request.param):
        yield request.param


@pytest.mark.parametrize("kw,exc,match", [
    (dict(), ValueError, "exactly one of size and scale_factor"),
    (dict(size=4, scale_factor=2), ValueError, "exactly one of size and scale_factor"),
    (dict(size=0), ValueError, "size"),
    (dict(size=(4, -1)), ValueError, "size"),
    (dict(size=(4, 4, 4)), ValueError, "size"),
    (dict(size=4.5), TypeError, "size"),
    (dict(scale_factor=0), ValueError, "scale_factor"),
    (dict(scale_factor=-2), ValueError, "scale_factor"),
    (dict(scale_factor=float("nan")), ValueError, "scale_factor"),
    (dict(scale_factor=float("inf")), ValueError, "scale_factor"),
    (dict(scale_factor=(2, 2, 2)), ValueError, "scale_factor"),
    (dict(scale_factor=0.1), ValueError, "empty output"),
    (dict(scale_factor="2"), TypeError, "scale_factor"),
    (dict(size=4, mode="linear"), ValueError, "mode"),
    (dict(size=4, mode="bicubic"), ValueError, "mode"),
    (dict(size=4, mode="nearest", align_corners=True), ValueError, "align_corners"),
    (dict(size=4, mode="bilinear", align_corners=1), TypeError, "align_corners"),
])
def test_bad_arguments(backend, kw, exc, match):
    with pytest.raises(exc, match=match):
        F.interpolate(_q((1, 2, 5, 5)), **kw)


def test_bad_inputs(backend):
    with pytest.raises(ValueError, match="dims"):
        F.interpolate(_q((2, 5, 5)), size=4)
    with pytest.raises(ValueError, match="dims"):
        F.interpolate(_q((1, 1, 2, 5, 5, 1)), size=4)
    with pytest.raises(ValueError, match="bilinear mode needs a 4-D"):
        F.interpolate(_q((1, 2, 3, 5, 5)), size=4, mode="bilinear")
    with pytest.raises(TypeError, match="qint32"):
        F.interpolate(_q((1, 2, 5, 5), qops.qint32, 0), size=4, mode="bilinear")
    with pytest.raises(ValueError, match="non-empty spatial"):
        F.interpolate(_q((1, 2, 0, 5)), size=4)
    with pytest.raises(TypeError, match="QTensor"):
        F.interpolate(np.zeros((1, 2, 5, 5), np.uint8), size=4)


def test_same_size_is_a_copy(backend):
    q = _q((1, 2, 5, 6))
    out = F.interpolate(q, size=(5, 6), mode="bilinear")
    np.testing.assert_array_equal(out._int, q._int)
    assert not np.shares_memory(out._int, q._int)
    assert (out.q_scale(), out.q_zero_point()) == (q.q_scale(), q.q_zero_point())


def test_no_per_dim_identity_shortcut(backend, torch):
    # scale (1.7, 1.3) on 2x2 keeps W = 2, yet the quantized kernel maps both columns to 0
    q = _q((1, 1, 2, 2))
    ours = F.interpolate(q, scale_factor=(1.7, 1.3))
    assert ours.shape == (1, 1, 3, 2)
    np.testing.assert_array_equal(ours._int[..., 1], ours._int[..., 0])
    theirs = torch.ao.nn.quantized.functional.interpolate(u.to_torch(q), scale_factor=(1.7, 1.3))
    np.testing.assert_array_equal(ours._int, theirs.int_repr().numpy())


def test_aliases(backend):
    q = _q((1, 3, 4, 5))
    u.assert_same(u.canon(F.upsample_bilinear(q, scale_factor=2)),
                  u.canon(F.interpolate(q, scale_factor=2, mode="bilinear", align_corners=True)),
                  "upsample_bilinear")
    u.assert_same(u.canon(F.upsample_nearest(q, size=(7, 3))),
                  u.canon(F.interpolate(q, size=(7, 3))), "upsample_nearest")
    u.assert_same(u.canon(F.upsample(q, size=(7, 3), mode="nearest-exact")),
                  u.canon(F.interpolate(q, size=(7, 3), mode="nearest-exact")), "upsample")


def test_one_pixel_input_pytorch_bug(backend, torch):
    """PyTorch scrambles channels for 1x1 spatial inputs with C > 1; qops does not."""
    q = _q((1, 4, 1, 1), zp=0)
    q._int[:, :, 0, 0] = [10, 20, 30, 40]
    expected = np.broadcast_to(np.array([10, 20, 30, 40], np.uint8)[None, :, None, None],
                               (1, 4, 3, 2))
    for mode in ("nearest", "bilinear"):
        np.testing.assert_array_equal(F.interpolate(q, size=(3, 2), mode=mode)._int, expected)
    theirs = torch.ao.nn.quantized.functional.interpolate(u.to_torch(q), size=(3, 2))
    if np.array_equal(theirs.int_repr().numpy(), expected):
        pytest.skip("this PyTorch build no longer has the 1x1 channels-last bug")


def test_one_channel_bilinear_takes_pytorch_nhwc_path(torch):
    """A 1-channel tensor is also channels-last to PyTorch, whose NHWC bilinear rounds .5 ties
    with the zero point added after rounding; qops uses the NCHW formula for every C."""
    q = _q((1, 1, 4, 65), zp=3)
    ours = F.interpolate(q, scale_factor=(3, 0.5), mode="bilinear")._int.astype(int)
    qF = torch.ao.nn.quantized.functional
    one = qF.interpolate(u.to_torch(q), scale_factor=(3, 0.5), mode="bilinear")
    two = qF.interpolate(torch.cat([u.to_torch(q)] * 2, 1).contiguous(), scale_factor=(3, 0.5),
                         mode="bilinear")
    np.testing.assert_array_equal(ours, two.int_repr().numpy()[:, :1])
    diff = ours - one.int_repr().numpy()
    assert np.abs(diff).max() <= 1
    assert (diff != 0).mean() < 0.05


def test_nearest_5d_and_qint32(backend, torch):
    q = _q((1, 2, 3, 4, 5), qops.qint32, 17)
    ours = F.interpolate(q, scale_factor=(2, 1.5, 0.6))
    theirs = torch.ao.nn.quantized.functional.interpolate(u.to_torch(q), scale_factor=(2, 1.5, 0.6))
    u.assert_same(u.canon(ours), u.canon(theirs), "5-D qint32 nearest")
