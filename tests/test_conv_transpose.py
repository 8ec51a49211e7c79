"""Quantized transposed convolutions (qops/_ops/conv_transpose.py, docs/semantics.md §16.2):
PyTorch 2.13's x86 quantized ConvTranspose1d/2d/3d as oracle, both backends, both routes."""
import numpy as np
import pytest

import qops
import qops.functional as F
import qops.nn as qnn
import qops.quantization as qq
from qops._ops.conv_transpose import PackedConvTranspose
from qops.nn import quantized as nnq

from conftest import torch_or_skip


def _random_case(rng):
    nd = int(rng.integers(1, 4))
    g = int(rng.choice([1, 1, 2, 3]))
    c, o = g * int(rng.integers(1, 5)), g * int(rng.integers(1, 5))
    k = tuple(int(v) for v in rng.integers(1, 5, nd))
    s = tuple(int(v) for v in rng.integers(1, 4, nd))
    d = tuple(int(v) for v in rng.integers(1, 3, nd))
    p = tuple(int(rng.integers(0, dd * (kk - 1) + 2)) for kk, dd in zip(k, d))
    op = tuple(int(rng.integers(0, max(ss, dd))) for ss, dd in zip(s, d))
    if rng.random() < 0.3:          # the shuffle route: kernel == stride
        s, g, d, op = k, 1, (1,) * nd, (0,) * nd
        p = tuple(int(rng.integers(0, kk)) for kk in k)
        c, o = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    size = tuple(int(v) for v in rng.integers(1, 7, nd))
    return nd, c, o, k, s, p, op, g, d, size


def _fbgemm_wrong(nd, c, o, k, s, p, g, d):
    """PyTorch 2.13's fbgemm path for 2x2/2 transposed 2-D convs with channel counts that are
    multiples of 8 gives wrong results (off by up to ~27 steps past the first output row,
    against its own float definition and its qnnpack engine): docs/semantics.md §16.2."""
    return nd == 2 and k == (2, 2) and s == (2, 2) and not any(p) and g == 1 \
        and d == (1, 1) and c % 8 == 0 and o % 8 == 0


def test_matches_pytorch_on_random_shapes_both_backends():
    torch = torch_or_skip()
    from qops.nn._torch import qtensor_from_torch
    rng = np.random.default_rng(0)
    ran = {"conv_transpose.shuffle": 0, "conv_transpose.spread": 0}
    for _ in range(120):
        nd, c, o, k, s, p, op, g, d, size = _random_case(rng)
        outs = [(n - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1
                for n, ss, pp, dd, kk, oo in zip(size, s, p, d, k, op)]
        if min(outs) <= 0 or _fbgemm_wrong(nd, c, o, k, s, p, g, d):
            continue
        n = int(rng.integers(1, 3))
        qx = torch.quantize_per_tensor(torch.randn((n, c) + size), 0.05,
                                       int(rng.integers(0, 256)), torch.quint8)
        if nd == 2 and rng.random() < 0.5:
            qx = qx.contiguous(memory_format=torch.channels_last)
        # |w| < 64: fbgemm's AVX2 kernels saturate larger u8 x s8 pair sums (qops is exact;
        # docs/semantics.md §8)
        qw = torch.quantize_per_tensor(torch.randn((c, o // g) + k).clamp(-2.5, 2.5) * 0.1,
                                       0.004, 0, torch.qint8)
        b = torch.randn(o) if rng.random() < 0.8 else None
        m = getattr(torch.ao.nn.quantized, f"ConvTranspose{nd}d")(c, o, k, s, p, op, g,
                                                                  b is not None, d)
        m.set_weight_bias(qw, b)
        m.scale, m.zero_point = 0.03, int(rng.integers(0, 256))
        want = m(qx).int_repr().numpy()
        pack = getattr(F, f"prepack_conv_transpose{nd}d")(
            qtensor_from_torch(qw), None if b is None else b.numpy(), s, p, op, g, d)
        ran[pack.route] += 1
        for backend in ("ref", "fast"):
            with qops.backend(backend):
                got = getattr(F, f"conv_transpose{nd}d")(
                    qtensor_from_torch(qx), pack, scale=0.03, zero_point=m.zero_point)
            np.testing.assert_array_equal(got.int_repr(), want)
    assert min(ran.values()) >= 10, ran


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_shuffle_route_equals_spread_route(nd):
    rng = np.random.default_rng(nd)
    for _ in range(6):
        k = tuple(int(v) for v in rng.integers(1, 4, nd))
        c, o = int(rng.integers(1, 20)), int(rng.integers(1, 20))
        size = tuple(int(v) for v in rng.integers(1, 6, nd))
        p = tuple(min(int(rng.integers(0, kk)), (n * kk - 1) // 2) for kk, n in zip(k, size))
        x = qops.quantize_per_tensor(rng.normal(size=(2, c) + size).astype(np.float32), 0.05,
                                     int(rng.integers(0, 256)), qops.quint8)
        w = qops.quantize_per_tensor(rng.normal(size=(c, o) + k).astype(np.float32) * 0.1,
                                     0.004, 0, qops.qint8)
        b = rng.normal(size=o).astype(np.float32)
        pack = getattr(F, f"prepack_conv_transpose{nd}d")(w, b, k, p)
        assert pack.route == "conv_transpose.shuffle"
        spread = getattr(F, f"prepack_conv_transpose{nd}d")(w, b, k, p)
        spread.route = "conv_transpose.spread"
        fn = getattr(F, f"conv_transpose{nd}d")
        got = fn(x, pack, scale=0.02, zero_point=9)
        np.testing.assert_array_equal(got.int_repr(), fn(x, spread, scale=0.02,
                                                         zero_point=9).int_repr())


def test_2x2_stride_2_with_8_channels_follows_the_definition():
    # where PyTorch's fbgemm kernel is wrong (_fbgemm_wrong), qops equals the float
    # definition quantized; 1 step allowed: the float32 requantization against float64 here
    torch = torch_or_skip()
    rng = np.random.default_rng(3)
    x = qops.quantize_per_tensor(rng.normal(size=(2, 8, 7, 9)).astype(np.float32), 0.05, 7,
                                 qops.quint8)
    w = qops.quantize_per_tensor(rng.normal(size=(8, 16, 2, 2)).astype(np.float32) * 0.1,
                                 0.003, 0, qops.qint8)
    b = rng.normal(size=16).astype(np.float32)
    got = F.conv_transpose2d(x, w, b, 2, scale=0.07, zero_point=60).int_repr().astype(int)
    ref = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x.dequantize().astype(np.float64)),
        torch.from_numpy(w.dequantize().astype(np.float64)),
        torch.from_numpy(b.astype(np.float64)), 2).numpy()
    want = np.clip(np.round(ref / 0.07) + 60, 0, 255)
    assert np.abs(got - want).max() <= 1


def test_errors_name_the_argument():
    w = qops.quantize_per_tensor(np.zeros((4, 2, 3, 3), np.float32), 0.1, 0, qops.qint8)
    x = qops.quantize_per_tensor(np.zeros((1, 4, 5, 5), np.float32), 0.1, 0, qops.quint8)
    wc = qops.quantize_per_channel(np.zeros((4, 2, 3, 3), np.float32), np.full(4, 0.1),
                                   np.zeros(4, np.int64), 0, qops.qint8)
    with pytest.raises(ValueError, match="per-tensor"):
        F.conv_transpose2d(x, wc)
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose2d(x, w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="channels"):
        F.conv_transpose2d(qops.quantize_per_tensor(np.zeros((1, 3, 5, 5), np.float32), 0.1,
                                                    0, qops.quint8), w)
    with pytest.raises(ValueError, match="output would have size"):
        F.conv_transpose2d(x, w, padding=4)
    with pytest.raises(TypeError, match="input"):
        F.conv_transpose2d(np.zeros((1, 4, 5, 5), np.float32), w)
    pack = F.prepack_conv_transpose2d(w, None, 2)
    with pytest.raises(ValueError, match="stride"):
        F.conv_transpose2d(x, pack, stride=3)
    assert isinstance(pack, PackedConvTranspose) and pack.out_channels == 2
    before = x.int_repr().copy()
    F.conv_transpose2d(x, pack)
    np.testing.assert_array_equal(x.int_repr(), before)      # the input is not modified


def _float_decoder():
    m = qnn.Sequential(qq.QuantStub(), qnn.Conv2d(3, 6, 3, 2, 1),
                       qnn.ConvTranspose2d(6, 5, 3, 2, 1, 1), qnn.ConvTranspose2d(5, 4, 2, 2),
                       qq.DeQuantStub())
    return m.eval()


def test_eager_flow_save_load_and_per_channel_refusal(tmp_path):
    m = _float_decoder()
    m.qconfig = qq.get_default_qconfig("x86")
    transpose = qq.QConfig(activation=m.qconfig.activation, weight=qq.default_weight_observer)
    m[2].qconfig = m[3].qconfig = transpose
    x = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype(np.float32)
    p = qq.prepare(m)
    p(x)
    q = qq.convert(p)
    assert type(q[2]) is nnq.ConvTranspose2d and type(q[3]) is nnq.ConvTranspose2d
    y = q(x)
    assert y.shape == (2, 4, 16, 16)
    qops.save(q, tmp_path / "m.qops")
    np.testing.assert_array_equal(qops.load(tmp_path / "m.qops")(x), y)
    m2 = _float_decoder()
    m2.qconfig = qq.get_default_qconfig("x86")      # per-channel weights: PyTorch refuses too
    p2 = qq.prepare(m2)
    p2(x)
    with pytest.raises(ValueError, match="per-tensor"):
        qq.convert(p2)


def test_pytorch_eager_model_imports_exactly():
    torch = torch_or_skip()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.dq = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
            self.c = torch.nn.Conv2d(3, 12, 3, 2, 1)
            self.t1 = torch.nn.ConvTranspose2d(12, 6, 3, 2, 1, 1)
            self.t3 = torch.nn.ConvTranspose1d(6, 5, 2, 2)

        def forward(self, x):
            y = self.t1(torch.relu(self.c(self.q(x))))
            return self.dq(self.t3(y.flatten(2)))

    torch.manual_seed(0)
    m = M().eval()
    qc = torch.ao.quantization.get_default_qconfig("x86")
    m.qconfig = qc
    m.t1.qconfig = m.t3.qconfig = torch.ao.quantization.QConfig(
        activation=qc.activation, weight=torch.ao.quantization.default_weight_observer)
    p = torch.ao.quantization.prepare(m)
    x = torch.randn(2, 3, 8, 8)
    p(x)
    c = torch.ao.quantization.convert(p)
    g = nnq.from_torch(c)
    assert type(g.get_submodule("t3")) is nnq.ConvTranspose1d
    np.testing.assert_array_equal(g(x.numpy()), c(x).numpy())
    sd = g.get_submodule("t1").state_dict()
    assert set(sd) == {"weight", "bias", "scale", "zero_point"}
    assert sd["weight"].shape == (12, 6, 3, 3)


@pytest.mark.parametrize("nd", [2, 3])
def test_functional_transposed_conv_quantized_by_torch_fx_imports_exactly(nd):
    # PyTorch's graph mode leaves quantized::conv_transpose{nd}d(x, packed, scale, zp) where a
    # forward calls F.conv_transpose{nd}d on weights of its own (it needs list arguments
    # there: ints fail in its prepack, and conv_transpose1d's prepack fails in PyTorch 2.13)
    torch = torch_or_skip()
    import torch.nn.functional as TF
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = getattr(torch.nn, f"Conv{nd}d")(3, 6, 3)
            self.w = torch.nn.Parameter(torch.randn((6, 5) + (3,) * nd) * 0.1)
            self.b = torch.nn.Parameter(torch.randn(5))

        def forward(self, x):
            return getattr(TF, f"conv_transpose{nd}d")(self.c(x), self.w, self.b, [2] * nd,
                                                       [1] * nd, [1] * nd, 1, [1] * nd)

    torch.manual_seed(0)
    x = torch.randn((2, 3) + (7,) * nd)
    p = prepare_fx(M().eval(), get_default_qconfig_mapping("x86"), (x,))
    p(x)
    q = convert_fx(p)
    g = nnq.from_torch(q)
    assert any(type(m) is getattr(nnq, f"ConvTranspose{nd}d") for m in g.modules())
    np.testing.assert_array_equal(g(x.numpy()), q(x).numpy())
