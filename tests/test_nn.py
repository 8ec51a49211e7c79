"""qops.nn: the Module base and the float layers (against their PyTorch twins)."""
from collections import OrderedDict

import numpy as np
import pytest

import qops
import qops.nn as nn

F32 = np.float32


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


# -- Module base ---------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.block = nn.Sequential(nn.ReLU(), nn.Conv2d(4, 4, 1, bias=False))
        self.fc = nn.Linear(4, 2)
        self.register_buffer("steps", np.zeros((), np.int64))

    def forward(self, x):
        y = self.block(self.conv(x))
        return self.fc(y.mean(axis=(2, 3)))


def test_registration_and_traversal():
    m = Net()
    assert [n for n, _ in m.named_children()] == ["conv", "block", "fc"]
    assert [n for n, _ in m.named_modules()] == ["", "conv", "block", "block.0", "block.1", "fc"]
    assert [n for n, _ in m.named_parameters()] == ["conv.weight", "conv.bias", "block.1.weight",
                                                    "fc.weight", "fc.bias"]
    assert [n for n, _ in m.named_buffers()] == ["steps"]
    assert all(p.dtype == F32 for p in m.parameters())
    assert list(m.state_dict()) == ["steps", "conv.weight", "conv.bias", "block.1.weight",
                                    "fc.weight", "fc.bias"]
    assert m.get_submodule("block.1") is m.block[1]
    with pytest.raises(AttributeError, match="no submodule 'nope'"):
        m.get_submodule("block.nope")


def test_setattr_parameter_converts_and_child_swap():
    m = Net()
    m.fc.weight = np.ones((2, 4), np.float64)
    assert m.fc.weight.dtype == F32
    new = nn.Identity()
    m.set_submodule("block.0", new)
    assert m.block[0] is new
    setattr(m, "conv", nn.Identity())
    assert isinstance(dict(m.named_children())["conv"], nn.Identity)
    m.qconfig = "anything"
    assert m.qconfig == "anything" and "qconfig" not in m.state_dict()


def test_train_eval_apply():
    m = Net()
    assert all(x.training for x in m.modules())
    assert m.eval() is m
    assert not any(x.training for x in m.modules())
    seen = []
    m.apply(lambda x: seen.append(type(x).__name__))
    assert seen[-1] == "Net" and "ReLU" in seen
    with pytest.raises(TypeError, match="bool"):
        m.train("yes")


def test_hooks():
    m = Net().eval()
    x = _rand(1, 3, 5, 5)
    calls = []
    h1 = m.conv.register_forward_pre_hook(lambda mod, args: calls.append(("pre", args[0].shape)))
    h2 = m.conv.register_forward_hook(lambda mod, args, out: calls.append(("post", out.shape)))
    h3 = m.fc.register_forward_hook(lambda mod, args, out: out * 0)
    y = m(x)
    assert calls == [("pre", (1, 3, 5, 5)), ("post", (1, 4, 5, 5))]
    assert np.all(y == 0)
    for h in (h1, h2, h3):
        h.remove()
    assert np.any(m(x) != 0) and len(calls) == 2


def test_state_dict_round_trip_and_errors():
    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    x = _rand(2, 3, 4, 4)
    np.testing.assert_array_equal(a.eval()(x), b.eval()(x))
    sd = a.state_dict()
    sd["fc.weight"][...] = 7  # a copy: the model is untouched
    assert not np.any(a.fc.weight == 7)
    bad = OrderedDict(sd)
    bad["fc.weight"] = np.zeros((3, 4), F32)
    with pytest.raises(ValueError, match=r"fc\.weight: shape \(3, 4\)"):
        b.load_state_dict(bad)
    missing = OrderedDict(sd)
    del missing["conv.bias"]
    with pytest.raises(ValueError, match=r"missing keys: conv\.bias"):
        b.load_state_dict(missing)
    extra = OrderedDict(sd)
    extra["fc.gamma"] = np.zeros(2, F32)
    with pytest.raises(ValueError, match=r"unexpected keys: fc\.gamma"):
        b.load_state_dict(extra)
    assert b.load_state_dict(extra, strict=False) == ([], ["fc.gamma"])


def test_repr_like_pytorch():
    r = repr(nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, bias=False), nn.ReLU()))
    assert r == ("Sequential(\n  (0): Conv2d(3, 4, kernel_size=(3, 3), stride=(2, 2), bias=False)"
                 "\n  (1): ReLU()\n)")


def test_containers():
    s = nn.Sequential(OrderedDict(a=nn.ReLU(), b=nn.Identity()))
    assert len(s) == 2 and isinstance(s[-1], nn.Identity) and isinstance(s[:1], nn.Sequential)
    ml = nn.ModuleList([nn.ReLU()]).append(nn.Tanh())
    assert [n for n, _ in ml.named_children()] == ["0", "1"]
    with pytest.raises(TypeError, match="not a qops.nn.Module"):
        s.add_module("c", object())


def test_dropout_identity_in_eval():
    x = _rand(100)
    d = nn.Dropout(0.5)
    assert np.any(d(x) != x)
    np.testing.assert_array_equal(d.eval()(x), x)


def test_float_layer_refuses_qtensor():
    xq = qops.quantize_per_tensor(_rand(1, 3, 4, 4), 0.1, 128, qops.quint8)
    with pytest.raises(TypeError, match="QTensor"):
        nn.Conv2d(3, 3, 1)(xq)


# -- float layers against PyTorch -----------------------------------------------------------
def _cases():
    import torch.nn as t
    return [
        ("conv1d", lambda: t.Conv1d(4, 6, 3, stride=2, padding=1), (2, 4, 17)),
        ("conv2d", lambda: t.Conv2d(3, 8, 3, padding=1), (2, 3, 9, 9)),
        ("conv2d_groups", lambda: t.Conv2d(8, 8, 3, stride=2, dilation=2, groups=4, bias=False),
         (1, 8, 11, 10)),
        ("conv2d_reflect", lambda: t.Conv2d(3, 4, 3, padding=2, padding_mode="reflect"),
         (1, 3, 7, 7)),
        ("conv2d_same", lambda: t.Conv2d(3, 4, 4, padding="same"), (1, 3, 7, 7)),
        ("conv2d_circular", lambda: t.Conv2d(3, 4, 3, padding=(1, 2), padding_mode="circular"),
         (1, 3, 6, 7)),
        ("conv1d_replicate", lambda: t.Conv1d(3, 4, 3, padding=2, padding_mode="replicate"),
         (2, 3, 8)),
        ("conv3d", lambda: t.Conv3d(2, 4, 3, padding=1), (1, 2, 4, 5, 6)),
        ("linear", lambda: t.Linear(7, 5), (3, 2, 7)),
        ("bn1d", lambda: t.BatchNorm1d(5), (4, 5)),
        ("bn2d", lambda: t.BatchNorm2d(4), (2, 4, 5, 5)),
        ("bn3d", lambda: t.BatchNorm3d(3), (2, 3, 2, 3, 3)),
        ("layernorm", lambda: t.LayerNorm([4, 5]), (2, 3, 4, 5)),
        ("groupnorm", lambda: t.GroupNorm(2, 6), (2, 6, 3, 3)),
        ("instnorm1d", lambda: t.InstanceNorm1d(3, affine=True), (2, 3, 9)),
        ("instnorm2d", lambda: t.InstanceNorm2d(3), (2, 3, 4, 5)),
        ("instnorm3d", lambda: t.InstanceNorm3d(3, affine=True), (1, 3, 2, 3, 4)),
        ("relu", lambda: t.ReLU(), (3, 17)),
        ("relu6", lambda: t.ReLU6(), (3, 17)),
        ("elu", lambda: t.ELU(0.7), (3, 17)),
        ("leaky", lambda: t.LeakyReLU(0.2), (3, 17)),
        ("hardtanh", lambda: t.Hardtanh(-0.5, 2.0), (3, 17)),
        ("hardsigmoid", lambda: t.Hardsigmoid(), (3, 17)),
        ("hardswish", lambda: t.Hardswish(), (3, 17)),
        ("sigmoid", lambda: t.Sigmoid(), (3, 17)),
        ("tanh", lambda: t.Tanh(), (3, 17)),
        ("silu", lambda: t.SiLU(), (3, 17)),
        ("gelu", lambda: t.GELU(), (3, 17)),
        ("gelu_tanh", lambda: t.GELU(approximate="tanh"), (3, 17)),
        ("maxpool1d", lambda: t.MaxPool1d(3, 2, 1), (2, 3, 10)),
        ("maxpool2d", lambda: t.MaxPool2d(3, 2, 1, dilation=1, ceil_mode=True), (1, 3, 10, 9)),
        ("maxpool2d_dil", lambda: t.MaxPool2d(2, 1, 0, dilation=2), (1, 2, 7, 7)),
        ("maxpool3d", lambda: t.MaxPool3d(2), (1, 2, 4, 4, 5)),
        ("avgpool1d", lambda: t.AvgPool1d(3, 2, 1, count_include_pad=False), (2, 3, 10)),
        ("avgpool2d", lambda: t.AvgPool2d(3, 2, 1, ceil_mode=True), (1, 3, 10, 9)),
        ("avgpool2d_div", lambda: t.AvgPool2d(2, divisor_override=3), (1, 3, 6, 6)),
        ("avgpool3d", lambda: t.AvgPool3d(2, 1), (1, 2, 3, 4, 5)),
        ("adaptive1d", lambda: t.AdaptiveAvgPool1d(4), (2, 3, 10)),
        ("adaptive2d", lambda: t.AdaptiveAvgPool2d((3, 2)), (1, 3, 7, 5)),
        ("adaptive2d_up", lambda: t.AdaptiveAvgPool2d(6), (1, 2, 4, 4)),
        ("adaptive3d", lambda: t.AdaptiveAvgPool3d(2), (1, 2, 3, 4, 5)),
        ("up_nearest", lambda: t.Upsample(scale_factor=2), (1, 2, 3, 4)),
        ("up_nearest_size", lambda: t.Upsample(size=(5, 7)), (1, 2, 3, 4)),
        ("up_nearest3d", lambda: t.Upsample(scale_factor=1.5), (1, 2, 2, 3, 4)),
        ("up_bilinear", lambda: t.Upsample(scale_factor=2, mode="bilinear"), (1, 2, 3, 4)),
        ("up_bilinear_ac", lambda: t.Upsample(size=(5, 9), mode="bilinear", align_corners=True),
         (1, 2, 3, 4)),
        ("upnearest2d", lambda: t.UpsamplingNearest2d(scale_factor=3), (1, 2, 3, 3)),
        ("upbilinear2d", lambda: t.UpsamplingBilinear2d(size=(6, 5)), (1, 2, 3, 4)),
        ("flatten", lambda: t.Flatten(), (2, 3, 4)),
        ("identity", lambda: t.Identity(), (2, 3)),
        ("dropout", lambda: t.Dropout(0.3), (2, 3)),
    ]


_CASE_IDS = ["conv1d", "conv2d", "conv2d_groups", "conv2d_reflect", "conv2d_same",
             "conv2d_circular", "conv1d_replicate", "conv3d",
             "linear", "bn1d", "bn2d", "bn3d", "layernorm", "groupnorm", "instnorm1d",
             "instnorm2d", "instnorm3d", "relu", "relu6", "elu", "leaky", "hardtanh",
             "hardsigmoid", "hardswish", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh",
             "maxpool1d", "maxpool2d", "maxpool2d_dil", "maxpool3d", "avgpool1d", "avgpool2d",
             "avgpool2d_div", "avgpool3d",
             "adaptive1d", "adaptive2d", "adaptive2d_up", "adaptive3d", "up_nearest",
             "up_nearest_size", "up_nearest3d", "up_bilinear", "up_bilinear_ac", "upnearest2d",
             "upbilinear2d", "flatten", "identity", "dropout"]


def _randomize(tm, torch):
    g = torch.Generator().manual_seed(1)
    for name, b in tm.named_buffers():
        if name.endswith("running_mean"):
            b.copy_(torch.randn(b.shape, generator=g) * 0.3)
        elif name.endswith("running_var"):
            b.copy_(torch.rand(b.shape, generator=g) + 0.5)
    with torch.no_grad():
        for name, p in tm.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def _close(ours, theirs):
    # Float32 with a different summation order: agreement to a few ulps of the magnitude.
    scale = max(1.0, float(np.abs(theirs).max())) if theirs.size else 1.0
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=2e-6 * scale)


@pytest.mark.parametrize("case", _CASE_IDS)
def test_float_layer_matches_torch(torch, case):
    name, make, shape = next(c for c in _cases() if c[0] == case)
    tm = make()
    _randomize(tm, torch)
    tm.eval()
    qm = nn.from_torch(tm)
    assert type(qm).__name__ == type(tm).__name__
    assert not qm.training
    assert list(qm.state_dict()) == list(tm.state_dict())
    x = _rand(*shape, seed=3)
    with torch.no_grad():
        ref = tm(torch.from_numpy(x)).numpy()
    out = qm(x)
    assert out.dtype == F32 and out.shape == ref.shape
    _close(out, ref)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_silu_over_their_whole_range(torch, approximate):
    # qops' exact GELU is ATen's float32 formula (Abramowitz-Stegun erf, docs/semantics.md
    # §6.1); PyTorch's float GELU of a contiguous tensor is oneDNN's (a minimax erf on AVX-512,
    # A-S with its own exp on AVX2). 1 + erf cancels for negative x, so the two erfs' errors
    # show as an absolute difference there, not a relative one: measured 1.21e-6 at x = -3.39
    # against oneDNN's AVX-512 GELU
    x = np.linspace(-12, 12, 24001, dtype=F32)
    tx = torch.from_numpy(x)
    want = torch.nn.functional.gelu(tx, approximate=approximate).numpy()
    got = nn.GELU(approximate)(x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(nn.SiLU()(x), torch.nn.functional.silu(tx).numpy(),
                               rtol=2e-6, atol=1e-30)
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")
    q = qops.quantize_per_tensor(x, 0.1, 128, qops.quint8)
    with pytest.raises(TypeError, match="float"):
        nn.SiLU()(q)
    # on a QTensor, GELU is PyTorch's quantized GELU (the registry op "gelu"): the input's
    # qparams; equal to PyTorch's but at exact ties of y / scale (the registry test counts them)
    got = nn.GELU(approximate)(q)
    want = torch.nn.functional.gelu(
        torch.quantize_per_tensor(tx, 0.1, 128, torch.quint8), approximate=approximate)
    assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
    diff = np.abs(got.int_repr().astype(int) - want.int_repr().numpy().astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_softmax_float_and_quantized(torch, dim):
    import qops.nn.quantized as nnq
    # float: numpy's float32 exp against PyTorch's vectorized one (within ~1 ulp); dim=None
    # takes PyTorch's legacy rule (0 for 0-, 1- and 3-d inputs, else 1)
    x = (_rand(4, 7, 5, seed=3) * 4).astype(F32)
    tx = torch.from_numpy(x)
    np.testing.assert_allclose(nn.Softmax(dim)(x), torch.nn.Softmax(dim)(tx).numpy(),
                               rtol=1e-6, atol=1e-7)
    # quantized: PyTorch's x86 quantized::softmax (dequantize, float softmax, quantize); the
    # float softmax's last ulp may carry a value across a rounding step: +-1, rarely
    q = qops.quantize_per_tensor(x, 0.05, 128, qops.quint8)
    tq = torch.quantize_per_tensor(tx, 0.05, 128, torch.quint8)
    got = nnq.Softmax(dim, 1.0 / 256, 0)(q)
    want = torch.ao.nn.quantized.Softmax(dim, 1.0 / 256, 0)(tq)
    assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
    diff = np.abs(got.int_repr().astype(int) - want.int_repr().numpy().astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01
    with pytest.raises(TypeError, match="quantized.Softmax"):
        nn.Softmax(1)(q)
    with pytest.raises(TypeError, match="QTensor"):
        nnq.Softmax(1)(x)
    with pytest.raises(ValueError, match="dim"):
        nn.Softmax(3)(x)


def test_softmax_through_eager_convert_and_import(torch):
    # qops' eager flow: nn.Softmax observed with PyTorch's fixed qparams becomes
    # quantized.Softmax(1/256, 0); PyTorch's own converted Softmax imports as it
    import qops.nn.quantized as nnq
    from qops.quantization import DeQuantStub, QuantStub, convert, get_default_qconfig, prepare
    m = nn.Sequential(QuantStub(), nn.Linear(6, 5), nn.Softmax(dim=1), DeQuantStub())
    m.qconfig = get_default_qconfig("x86")
    prepare(m, inplace=True)
    m(_rand(8, 6, seed=4))
    convert(m, inplace=True)
    assert isinstance(m[2], nnq.Softmax) and (m[2].scale, m[2].zero_point) == (1 / 256, 0)
    t = torch.ao.nn.quantized.Softmax(-1, 0.01, 3)
    mine = nnq.from_torch(torch.nn.Sequential(t))
    assert (mine[0].dim, mine[0].scale, mine[0].zero_point) == (-1, 0.01, 3)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_conv_transpose_float_like_torch(torch, n, tmp_path):
    # the adjoint convolution (input spread by the stride, flipped kernel): strides, paddings
    # past dilation * (k - 1) (cropped), output_padding, dilation, groups
    r = np.random.default_rng(n)
    cls = getattr(torch.nn, f"ConvTranspose{n}d")
    for s, p, op, d, g in [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 0, 2, 2), (3, 2, 1, 1, 1),
                           (2, 3, 0, 1, 2), (1, 1, 0, 2, 1)]:
        torch.manual_seed(s + p)
        tm = cls(4, 6, 3, stride=s, padding=p, output_padding=op, dilation=d, groups=g).eval()
        x = r.standard_normal((2, 4) + (5,) * n).astype(F32)
        m = nn.from_torch(tm)
        assert set(m.state_dict()) == set(tm.state_dict())
        with torch.no_grad():
            want = tm(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-5)
    qops.save(m, tmp_path / "ct.qops")
    np.testing.assert_array_equal(qops.load(tmp_path / "ct.qops")(x), m(x))
    with pytest.raises(ValueError, match="output_size"):
        m(x, output_size=(9,) * n)
    with pytest.raises(TypeError, match="float"):
        m(qops.quantize_per_tensor(x, 0.1, 128, qops.quint8))
    with pytest.raises(ValueError, match="padding_mode"):
        getattr(nn, f"ConvTranspose{n}d")(4, 6, 3, padding_mode="reflect")


@pytest.mark.parametrize("cls", ["BatchNorm2d", "InstanceNorm2d"])
def test_batchnorm_training_mode_updates_stats_like_torch(torch, cls):
    kw = {"track_running_stats": True} if cls == "InstanceNorm2d" else {}
    tm = getattr(torch.nn, cls)(3, momentum=0.2, **kw)
    qm = nn.from_torch(tm)
    assert qm.training
    x = _rand(4, 3, 5, 5, seed=4) * 2 + 1
    for _ in range(2):
        with torch.no_grad():
            ref = tm(torch.from_numpy(x)).numpy()
        out = qm(x)
        _close(out, ref)
    if cls == "BatchNorm2d":
        _close(qm.running_mean, tm.running_mean.numpy())
        _close(qm.running_var, tm.running_var.numpy())
        assert int(qm.num_batches_tracked) == 2


def test_from_torch_nested_and_target(torch):
    t = torch.nn
    tm = t.Sequential(t.Conv2d(3, 4, 3), t.BatchNorm2d(4), t.ReLU(),
                      t.Sequential(t.AdaptiveAvgPool2d(1), t.Flatten()), t.Linear(4, 2)).eval()
    _randomize(tm, torch)
    qm = nn.from_torch(tm)
    x = _rand(2, 3, 6, 6, seed=5)
    with torch.no_grad():
        _close(qm(x), tm(torch.from_numpy(x)).numpy())

    class TNet(t.Module):
        def __init__(self):
            super().__init__()
            self.conv = t.Conv2d(3, 4, 3)
            self.fc = t.Linear(4, 2)

        def forward(self, x):
            return self.fc(self.conv(x).mean((2, 3)))

    class QNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(self.conv(x).mean(axis=(2, 3)))

    tnet = TNet().eval()
    # A model class with its own forward is captured as a graph (tests/test_nn_graph.py) ...
    captured = nn.from_torch(tnet)
    assert isinstance(captured, nn.GraphModule)
    with torch.no_grad():
        _close(captured(x), tnet(torch.from_numpy(x)).numpy())
    # ... or copied into a qops model of the same shape with target=.
    qnet = nn.from_torch(tnet, target=QNet())
    with torch.no_grad():
        _close(qnet(x), tnet(torch.from_numpy(x)).numpy())


def test_fused_float_modules(torch):
    import torch.ao.nn.intrinsic as tnni
    t = torch.nn
    tm = tnni.ConvBnReLU2d(t.Conv2d(3, 4, 3), t.BatchNorm2d(4), t.ReLU()).eval()
    _randomize(tm, torch)
    qm = nn.from_torch(tm)
    assert type(qm) is nn.intrinsic.ConvBnReLU2d
    x = _rand(1, 3, 5, 5)
    with torch.no_grad():
        _close(qm(x), tm(torch.from_numpy(x)).numpy())
    with pytest.raises(TypeError, match="expected Conv2d \\+ ReLU"):
        nn.intrinsic.ConvReLU2d(nn.Conv2d(1, 1, 1), nn.Tanh())


def test_fusion_helpers_bit_exact_with_torch(torch):
    from torch.nn.utils.fusion import fuse_conv_bn_eval as t_fuse
    t = torch.nn
    conv, bn = t.Conv2d(3, 5, 3), t.BatchNorm2d(5)
    _randomize(conv, torch)
    _randomize(bn, torch)
    conv.eval(), bn.eval()
    ref = t_fuse(conv, bn)
    ours = nn.utils.fuse_conv_bn_eval(nn.from_torch(conv), nn.from_torch(bn))
    np.testing.assert_array_equal(ours.weight, ref.weight.detach().numpy())
    np.testing.assert_array_equal(ours.bias, ref.bias.detach().numpy())
    with pytest.raises(ValueError, match="eval"):
        nn.utils.fuse_conv_bn_eval(nn.Conv2d(1, 1, 1), nn.BatchNorm2d(1))


def test_hook_order_prepend_and_deepcopy():
    import copy
    m = nn.ReLU()
    order = []
    m.register_forward_hook(lambda *a: order.append("a"))
    m.register_forward_hook(lambda *a: order.append("b"), prepend=True)
    m(np.ones(2, F32))
    assert order == ["b", "a"]
    with pytest.raises(TypeError, match="callable"):
        m.register_forward_hook(3)
    net = Net()
    twin = copy.deepcopy(net)
    twin.fc.weight[...] = 0
    assert np.any(net.fc.weight != 0)
    assert [n for n, _ in twin.named_modules()] == [n for n, _ in net.named_modules()]


@pytest.mark.parametrize("case", ["packed", "kdim_vdim_bias_kv_zero_attn", "batch_first",
                                  "unbatched"])
def test_multihead_attention_matches_torch(torch, case):
    # float attention (transformers' encoders); PyTorch has no quantized one either
    kw = dict(kdim=12, vdim=8, add_bias_kv=True, add_zero_attn=True) \
        if case == "kdim_vdim_bias_kv_zero_attn" else {}
    first = case == "batch_first"
    tm = torch.nn.MultiheadAttention(16, 4, batch_first=first, **kw)
    _randomize(tm, torch)
    tm.eval()
    qm = nn.from_torch(tm)
    assert list(qm.state_dict()) == list(tm.state_dict())
    L, S, N = 5, 7, 3
    shapes = [(L, N, 16), (S, N, kw.get("kdim", 16)), (S, N, kw.get("vdim", 16))]
    if first:
        shapes = [(s[1], s[0], s[2]) for s in shapes]
    if case == "unbatched":
        shapes = [(s[0], s[2]) for s in shapes]
    q, k, v = (_rand(*s, seed=i) for i, s in enumerate(shapes))
    g = torch.Generator().manual_seed(4)
    masks = [dict(), dict(attn_mask=torch.rand(L, S, generator=g) > 0.7),
             dict(attn_mask=torch.randn(L, S, generator=g)),
             dict(is_causal=True,
                  attn_mask=torch.triu(torch.ones(L, S, dtype=torch.bool), 1))]
    if case != "unbatched":
        masks.append(dict(key_padding_mask=torch.rand(N, S, generator=g) > 0.8,
                          average_attn_weights=False))
    for extra in masks:
        targs = {k_: (v_.numpy() if hasattr(v_, "numpy") else v_) for k_, v_ in extra.items()}
        with torch.no_grad():
            want, want_w = tm(*(torch.from_numpy(t) for t in (q, k, v)), **extra)
        got, got_w = qm(q, k, v, **targs)
        _close(got, want.numpy())
        _close(got_w, want_w.numpy())
    out, w = qm(q, k, v, need_weights=False)
    assert w is None
    with pytest.raises(ValueError, match="key has"):
        qm(q, k[..., :-1] if not first else k[..., :-1], v)
    with pytest.raises(TypeError, match="float"):
        qm(qops.quantize_per_tensor(q, 0.1, 0, qops.qint8), k, v)
    with pytest.raises(ValueError, match="is_causal"):
        qm(q, k, v, is_causal=True)
    with pytest.raises(ValueError, match="2-d or all 3-d"):
        qm(q, k[None], v)


@pytest.mark.parametrize("batch_first, norm_first, activation",
                         [(True, False, "relu"), (False, True, "gelu")])
def test_transformer_encoder_float_and_dynamic_match_torch(torch, batch_first, norm_first,
                                                           activation):
    # the classic dynamic-quantization target: an encoder whose feed-forward linears run
    # int8 (attention's output projection stays float, in PyTorch and in qops)
    import copy
    t = torch.nn
    import qops.nn.quantized as nnq
    import qops.quantization as qq

    class Net(t.Module):
        def __init__(self):
            super().__init__()
            self.emb = t.Linear(8, 32)
            layer = t.TransformerEncoderLayer(32, 4, 64, activation=activation,
                                              batch_first=batch_first, norm_first=norm_first)
            self.enc = t.TransformerEncoder(layer, 2, norm=t.LayerNorm(32),
                                            enable_nested_tensor=False)
            self.fc = t.Linear(32, 5)

        def forward(self, x, mask=None, key_padding_mask=None):
            return self.fc(self.enc(self.emb(x), mask=mask,
                                    src_key_padding_mask=key_padding_mask))

    torch.manual_seed(0)
    m = Net().eval()
    x = _rand(*((3, 7, 8) if batch_first else (7, 3, 8)), seed=5)
    g = torch.Generator().manual_seed(6)
    pad = torch.rand(3, 7, generator=g) > 0.7
    pad[:, 0] = False
    causal = t.Transformer.generate_square_subsequent_mask(7)
    ours = nn.from_torch(m)
    with torch.no_grad():
        _close(ours(x), m(torch.from_numpy(x)).numpy())
        _close(ours(x, causal.numpy(), pad.numpy()),
               m(torch.from_numpy(x), causal, pad).numpy())
    # PyTorch 2.13's encoder fast path fails on dynamic-quantized linears with batch_first
    # ("'function' object has no attribute 'device'"): its slow path runs the same math
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        d = torch.ao.quantization.quantize_dynamic(copy.deepcopy(m), {t.Linear},
                                                   dtype=torch.qint8)
        with torch.no_grad():
            want = d(torch.from_numpy(x)).numpy()
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    # the int8 linears are exact; attention, GELU and the norms are float (other sums and
    # formulas than oneDNN's), and a dynamic linear's input range, hence its scale, moves with
    # them: float32 rounding apart, scaled by the steps
    _close(nnq.from_torch(d)(x), want)
    q = qq.quantize_dynamic(nn.from_torch(m), {nn.Linear}, dtype=qops.qint8)
    kinds = {n: type(mm).__name__ for n, mm in q.named_modules()}
    assert kinds["enc.layers.0.self_attn.out_proj"] == "NonDynamicallyQuantizableLinear"
    assert type(q.enc.layers[0].linear1).__module__.startswith("qops.nn.quantized.dynamic")
    _close(q(x), want)


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_float_and_dynamic_match_torch(torch, batch_first):
    # torch.nn.Transformer: an encoder and a decoder with attention over the encoder's memory
    import copy
    t = torch.nn
    import qops.nn.quantized as nnq
    import qops.quantization as qq
    torch.manual_seed(0)
    m = t.Transformer(16, 2, 2, 1, 32, activation="gelu", batch_first=batch_first,
                      norm_first=batch_first).eval()
    src = _rand(*((2, 6, 16) if batch_first else (6, 2, 16)), seed=7)
    tgt = _rand(*((2, 5, 16) if batch_first else (5, 2, 16)), seed=8)
    causal = t.Transformer.generate_square_subsequent_mask(5)
    ours = nn.from_torch(m)
    assert type(ours).__name__ == "Transformer"
    with torch.no_grad():
        _close(ours(src, tgt, tgt_mask=causal.numpy()),
               m(torch.from_numpy(src), torch.from_numpy(tgt), tgt_mask=causal).numpy())
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)      # (see the encoder test)
    try:
        d = torch.ao.quantization.quantize_dynamic(copy.deepcopy(m), {t.Linear},
                                                   dtype=torch.qint8)
        with torch.no_grad():
            want = d(torch.from_numpy(src), torch.from_numpy(tgt), tgt_mask=causal).numpy()
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    # the int8 linears are exact; attention and the norms are float (numpy's sums, not
    # oneDNN's), and here a norm comes last: float32 rounding apart
    _close(nnq.from_torch(d)(src, tgt, tgt_mask=causal.numpy()), want)
    q = qq.quantize_dynamic(nn.from_torch(m), {nn.Linear}, dtype=qops.qint8)
    _close(q(src, tgt, tgt_mask=causal.numpy()), want)
