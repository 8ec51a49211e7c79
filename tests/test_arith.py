"""Arith family: errors, broadcasting, the qparams rules of add_scalar/mul_scalar and cat, and
the tie differences of add against PyTorch."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._registry import _util as u

BACKENDS = ["ref", "fast"]


def _q(shape=(4, 70), dtype=qops.quint8, scale=0.05, zp=None, seed=0, layout="c"):
    return u.random_qtensor(u.rng(seed), shape, dtype, scale=scale, zero_point=zp, layout=layout)


@pytest.mark.parametrize("f", [F.add, F.add_relu, F.mul, F.mul_relu])
def test_binary_errors(f):
    a = _q()
    with pytest.raises(TypeError, match="a must be a quantized tensor"):
        f(a.int_repr(), a, 0.1, 0)
    with pytest.raises(TypeError, match="b must be a quantized tensor"):
        f(a, 3.0, 0.1, 0)
    with pytest.raises(TypeError, match="same dtype"):
        f(a, _q(dtype=qops.qint8), 0.1, 0)
    with pytest.raises(ValueError, match="do not broadcast"):
        f(a, _q(shape=(3, 70)), 0.1, 0)
    pc = qops.quantize_per_channel(np.zeros((4, 70), np.float32), np.full(4, 0.1), np.zeros(4), 0,
                                   qops.quint8)
    with pytest.raises(TypeError, match="per-tensor"):
        f(a, pc, 0.1, 0)
    with pytest.raises(ValueError, match="scale"):
        f(a, a, -1.0, 0)
    with pytest.raises(ValueError, match="zero_point"):
        f(a, a, 0.1, 256)
    q32 = qops.quantize_per_tensor(np.zeros(3, np.float32), 0.1, 0, qops.qint32)
    with pytest.raises(TypeError, match="dtype quint8 or qint8"):
        f(q32, q32, 0.1, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcasting_either_side(backend):
    with qops.backend(backend):
        a = _q(shape=(2, 3, 4))
        b = _q(shape=(3, 1), seed=1)
        for f in (F.add, F.mul):
            x, y = f(a, b, 0.1, 3), f(b, a, 0.1, 3)
            assert x.shape == y.shape == (2, 3, 4)
        # broadcast equals the explicitly expanded operand
        big = b.expand(2, 3, 4).contiguous()
        np.testing.assert_array_equal(F.add(a, b, 0.1, 3).int_repr(),
                                      F.add(a, big, 0.1, 3).int_repr())


def test_add_scalar_qparams_rules():
    q = _q(zp=100, scale=0.1)
    out = F.add_scalar(q, 0.25)          # 0.25 / 0.1 = 2.5 -> 2 (half to even)
    assert (out.q_scale(), out.q_zero_point()) == (0.1, 98)
    np.testing.assert_array_equal(out.int_repr(), q.int_repr())
    assert out._int is not q._int
    for backend in BACKENDS:
        with qops.backend(backend):
            low = F.add_scalar(q, 20.0)      # zp 100 - 200 < 0: rescaled, zp = qmin
            assert low.q_zero_point() == 0
            assert low.q_scale() == pytest.approx((255 + 100) / 255 * 0.1)
            high = F.add_scalar(q, -20.0)
            assert high.q_zero_point() == 255
    with pytest.raises(ValueError, match="finite"):
        F.add_scalar(q, float("inf"))
    for backend in BACKENDS:
        with qops.backend(backend):
            big = F.add_scalar(q, 1e17)       # 1e18 steps of the scale: still an int64
            assert big.q_zero_point() == 0 and (big.int_repr() == 255).all()
            with pytest.raises(ValueError, match="too large"):
                F.add_scalar(q, 1e38)         # beyond int64: OverflowError from the kernel
    with pytest.raises(TypeError, match="other"):
        F.add_scalar(q, "1")


def test_mul_scalar_qparams_rules():
    q = _q(dtype=qops.qint8, zp=5, scale=0.1)
    pos = F.mul_scalar(q, 2.0)
    assert (pos.q_scale(), pos.q_zero_point()) == (0.2, 5)
    zero = F.mul_scalar(q, 0.0)
    assert (zero.q_scale(), zero.q_zero_point()) == (1.0, 0) and not zero.int_repr().any()
    for backend in BACKENDS:
        with qops.backend(backend):
            neg = F.mul_scalar(q, -0.5)
            assert (neg.q_scale(), neg.q_zero_point()) == (0.05, 127 - (5 + 128))
            np.testing.assert_array_equal(neg.int_repr(),
                                          (-1 - q.int_repr().astype(int)).astype(np.int8))
            np.testing.assert_allclose(neg.dequantize(), -0.5 * q.dequantize(),
                                       rtol=1e-6, atol=1e-6)


def test_cat_errors():
    a = _q(shape=(2, 3))
    with pytest.raises(ValueError, match="must not be empty"):
        F.cat([])
    with pytest.raises(TypeError, match="list or tuple"):
        F.cat(a)
    with pytest.raises(TypeError, match=r"tensors\[1\] must be a quantized tensor"):
        F.cat([a, a.int_repr()])
    with pytest.raises(TypeError, match=r"tensors\[1\] has dtype qint8"):
        F.cat([a, _q(shape=(2, 3), dtype=qops.qint8)])
    with pytest.raises(ValueError, match="outside dim"):
        F.cat([a, _q(shape=(3, 4))], dim=0)
    with pytest.raises(ValueError, match="dims"):
        F.cat([a, _q(shape=(2, 3, 1))])
    with pytest.raises(ValueError, match="out of range"):
        F.cat([a, a], dim=2)
    with pytest.raises(ValueError, match="zero_point"):
        F.cat([a, a], 0, 0.1, -1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_qparams_and_copy(backend):
    with qops.backend(backend):
        a, b = _q(shape=(2, 3), zp=7), _q(shape=(2, 5), zp=9, seed=1)
        out = F.cat([a, b], 1)
        assert (out.q_scale(), out.q_zero_point()) == (a.q_scale(), 7)
        np.testing.assert_array_equal(out.int_repr()[:, :3], a.int_repr())    # same qparams: copy
        rel = F.cat_relu([a, b], -1, 0.1, 100)
        assert rel.int_repr().min() >= 100 and rel.shape == (2, 8)


def test_add_ties_with_pytorch_are_in_the_tail(torch):
    """Equal input scales and an output scale twice as large: half of the sums are exact ties,
    and with an odd output zero point PyTorch's scalar tail rounds them the other way."""
    torch.set_num_threads(1)
    for n in (4099, 10000):
        a = _q(shape=(n,), scale=0.05, seed=n)
        b = _q(shape=(n,), scale=0.05, seed=n + 1)
        ours = F.add(a, b, 0.1, 131).int_repr().astype(np.int64)
        theirs = torch.ops.quantized.add(u.to_torch(a), u.to_torch(b), 0.1, 131)
        theirs = theirs.int_repr().numpy().astype(np.int64)
        d = ours != theirs
        assert np.abs(ours - theirs).max() <= 1
        assert not d[: n - n % 64].any()
        assert d.sum() <= n % 64


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("relu", [False, True])
def test_cat_requantize_equals_ref(dtype, relu):
    """cat's requantization (the vector formula on AVX2, a table elsewhere) equals the
    reference over block tails (1..70 columns), zero points, both clamps (scale ratios far
    above and below 1) and channels-last inputs."""
    f = F.cat_relu if relu else F.cat
    lo, hi = (-128, 127) if dtype is qops.qint8 else (0, 255)
    rng = np.random.default_rng(7)
    for cols in (1, 7, 31, 32, 33, 64, 70):
        for in_scale, out_scale in ((0.03, 0.04), (0.5, 0.001), (1e-4, 0.3), (0.02, 0.02)):
            parts = [_q(shape=(5, c), dtype=dtype, scale=in_scale * (1 + i / 7),
                        zp=int(rng.integers(lo, hi + 1)), seed=cols + i)
                     for i, c in enumerate((cols, cols + 3, 2))]
            zo = int(rng.integers(lo, hi + 1))
            with qops.backend("ref"):
                want = f(parts, 1, out_scale, zo).int_repr()
            with qops.backend("fast"):
                got = f(parts, 1, out_scale, zo).int_repr()
            np.testing.assert_array_equal(got, want)
    for layout in ("cl",):
        parts = [_q(shape=(2, c, 3, 5), dtype=dtype, scale=0.03 + 0.01 * c, seed=c, layout=layout)
                 for c in (40, 24, 33)]
        with qops.backend("ref"):
            want = f(parts, 1, 0.05, 3).int_repr()
        with qops.backend("fast"):
            got = f(parts, 1, 0.05, 3).int_repr()
            # (the channels-last images' one-pass path against the general one on C order)
            plain = f([p.contiguous() for p in parts], 1, 0.05, 3).int_repr()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(plain, want)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("relu", [False, True])
def test_mul_by_channel_scale_rows_equals_ref(dtype, relu):
    """A channels-last image times its (N, C, 1, 1) scale (squeeze-excite) runs the row
    kernel: equal to the reference, to the C-order product, either operand first, over
    channel counts off and on the 32-byte block."""
    f = F.mul_relu if relu else F.mul
    r = np.random.default_rng(5)
    for n, c, h, w in [(1, 72, 28, 28), (2, 40, 5, 3), (1, 33, 4, 4), (3, 1000, 2, 3),
                       (1, 7, 9, 9)]:
        x = u.random_qtensor(r, (n, c, h, w), dtype, layout="cl")
        s = u.random_qtensor(r, (n, c, 1, 1), dtype)
        with qops.backend("ref"):
            want = f(x, s, 0.07, 5).int_repr()
        with qops.backend("fast"):
            for args in ((x, s), (s, x)):
                np.testing.assert_array_equal(f(*args, 0.07, 5).int_repr(), want)
            np.testing.assert_array_equal(f(x.contiguous(), s, 0.07, 5).int_repr(), want)


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_mul_by_channel_scale_planes_equals_ref(dtype, relu, threads):
    """A C-order image times its (N, C, 1, 1) scale runs the planes kernel (mul.planes): equal
    to the reference and to the materialized broadcast, either operand first: small planes
    many to a tile (7x7, 3x5), planes past the tile (70x70: pieces of one plane), plane runs
    split over threads, one channel."""
    from qops._show import explain
    f = F.mul_relu if relu else F.mul
    r = np.random.default_rng(6)
    for n, c, h, w in [(8, 672, 7, 7), (2, 40, 5, 3), (1, 3, 70, 70), (1, 480, 14, 14),
                       (2, 1, 9, 9), (1, 129, 1, 2)]:
        x = u.random_qtensor(r, (n, c, h, w), dtype)
        s = u.random_qtensor(r, (n, c, 1, 1), dtype)
        with qops.backend("ref"):
            want = f(x, s, 0.07, 5).int_repr()
            full = qops.make_per_tensor_quantized_tensor(
                np.ascontiguousarray(np.broadcast_to(s.int_repr(), x.shape)), s.q_scale(),
                s.q_zero_point())
            np.testing.assert_array_equal(f(x, full, 0.07, 5).int_repr(), want)
        with qops.backend("fast"), qops.threads(threads):
            for args in ((x, s), (s, x)):
                np.testing.assert_array_equal(f(*args, 0.07, 5).int_repr(), want)
                assert [q.name for q in explain(f, *args, 0.07, 5)] == ["mul.planes"]


def test_cat_channels_last_images_checked_every_call():
    """The channels-last image cat memoizes its checks per call signature (layouts, dtypes,
    qparams): a repeated call gives the general path's result, with qparams taken from the
    inputs when not given, and what must fail still fails after a memoized call (True for a
    zero point, a per-channel input of the same layout); qparams given as one-element arrays
    work and are not memoized."""
    parts = [_q(shape=(1, c, 4, 5), scale=0.03 + 0.01 * i, zp=3 + i, seed=c, layout="cl")
             for i, c in enumerate((40, 24))]
    plain = [p.contiguous() for p in parts]
    for kw in ({"scale": 0.05, "zero_point": 0}, {}, {"scale": np.array([0.05]),
                                                     "zero_point": np.array([0])}):
        want = F.cat(plain, 1, **kw)
        for _ in range(2):
            got = F.cat(parts, 1, **kw)
            np.testing.assert_array_equal(got.int_repr(), want.int_repr())
            assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
    with pytest.raises(TypeError):
        F.cat(parts, 1, 0.05, False)
    with pytest.raises(TypeError):
        F.cat(parts, 1, 0.05, 0.0)
    pc = qops.make_per_channel_quantized_tensor(parts[1]._int, np.full(24, 0.1),
                                                np.zeros(24, np.int64), 1)
    with pytest.raises(TypeError, match="per-tensor"):
        F.cat([parts[0], pc], 1, 0.05, 0)
