"""Models with their own forward, imported from PyTorch by graph capture (qops.nn.from_torch).

Each model class below is plain torch, written the way real forwards are (residual `+` and
FloatFunctional, an inverted residual with hardswish and squeeze-excitation, channel shuffle,
an inception block with cat, an MLP with `view(x.size(0), -1)`). Each is imported as float and
as converted int8 and compared with PyTorch.

Tolerances: float imports run numpy float32 layers whose sums are ordered differently from
oneDNN's, so outputs agree to ~1e-6 relative, not bit for bit; int8 imports are exact. A float
model quantized by qops' own flow sees those float outputs in its observers, so its scales may
differ from PyTorch's in the last few ulp (as in tests/test_quantization_parity.py), and an
output may then move by one quantization step.
"""
import copy
import functools

import numpy as np
import pytest

import qops
import qops.nn as qnn
import qops.nn.quantized as nnq
import qops.quantization as qq
from qops.nn import GraphModule

from conftest import torch_or_skip

SCALE_RTOL = 4 * float(np.finfo(np.float32).eps)


@functools.lru_cache(None)
def _models():
    torch = torch_or_skip()
    nn, TF = torch.nn, torch.nn.functional
    from torch.ao.quantization import DeQuantStub, QuantStub
    FloatFunctional = torch.ao.nn.quantized.FloatFunctional

    class Residual(nn.Module):
        def __init__(self, functional):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.relu = nn.ReLU()
            self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.functional = functional
            self.skip = FloatFunctional()
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 10)

        def forward(self, x):
            x = self.quant(x)
            x = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(x))
            x = self.skip.add_relu(y, x) if self.functional else TF.relu(x + y)
            x = torch.flatten(self.pool(x), 1)
            return self.dequant(self.fc(x))

    class SqueezeExcitation(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1, self.relu = nn.Conv2d(c, 4, 1), nn.ReLU()
            self.fc2, self.gate = nn.Conv2d(4, c, 1), nn.Hardsigmoid()
            self.mul = FloatFunctional()

        def forward(self, x):
            s = TF.adaptive_avg_pool2d(x, 1)
            s = self.gate(self.fc2(self.relu(self.fc1(s))))
            return self.mul.mul(s, x)

    class InvertedResidual(nn.Module):
        def __init__(self, c=16):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.stem = nn.Conv2d(3, c, 3, padding=1)
            self.expand, self.act = nn.Conv2d(c, 2 * c, 1), nn.Hardswish()
            self.dw = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c)
            self.se = SqueezeExcitation(2 * c)
            self.project = nn.Conv2d(2 * c, c, 1)
            self.skip = FloatFunctional()

        def forward(self, x):
            x = self.stem(self.quant(x))
            y = self.project(self.se(self.act(self.dw(self.act(self.expand(x))))))
            return self.dequant(self.skip.add(x, y))

    class FloatSE(nn.Module):
        """Squeeze-excitation as float forwards write it: `x * scale`."""

        def __init__(self, c=8):
            super().__init__()
            self.conv = nn.Conv2d(3, c, 3, padding=1)
            self.fc = nn.Conv2d(c, c, 1)

        def forward(self, x):
            x = TF.hardswish(self.conv(x))
            scale = TF.hardsigmoid(self.fc(x.mean((2, 3), keepdim=True)))
            return x * scale

    def channel_shuffle(x, groups):
        b, c, h, w = x.size()
        x = x.view(b, groups, c // groups, h, w)
        x = torch.transpose(x, 1, 2).contiguous()
        return x.view(b, -1, h, w)

    class Shuffle(nn.Module):
        def __init__(self, c=16):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.stem = nn.Conv2d(3, c, 3, padding=1)
            self.branch = nn.Sequential(nn.Conv2d(c // 2, c // 2, 1), nn.ReLU())
            self.cat = FloatFunctional()

        def forward(self, x):
            x = self.stem(self.quant(x))
            x1, x2 = x.chunk(2, dim=1)
            x = self.cat.cat([x1, self.branch(x2)], dim=1)
            return self.dequant(channel_shuffle(x, 2))

    class Inception(nn.Module):
        def __init__(self, c=8):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.b1 = nn.Conv2d(3, c, 1)
            self.b2 = nn.Sequential(nn.Conv2d(3, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))
            self.pool, self.b3 = nn.MaxPool2d(3, 1, 1), nn.Conv2d(3, c, 1)
            self.myop = FloatFunctional()

        def forward(self, x):
            x = self.quant(x)
            x = self.myop.cat([self.b1(x), self.b2(x), self.b3(self.pool(x))], 1)
            return self.dequant(TF.max_pool2d(x, 2))

    class FloatInception(nn.Module):
        def __init__(self, c=8):
            super().__init__()
            self.b1, self.b2 = nn.Conv2d(3, c, 1), nn.Conv2d(3, c, 3, padding=1)

        def forward(self, x):
            y = torch.cat([self.b1(x), TF.avg_pool2d(self.b2(x), 3, 1, 1)], 1)
            a, b = torch.split(y, [5, 11], dim=1)
            return torch.cat([b, a], 1).mean([2, 3])

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.fc1, self.relu, self.fc2 = nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, 10)

        def forward(self, x):
            x = self.quant(x)
            x = x.view(x.size(0), -1)
            return self.dequant(self.fc2(self.relu(self.fc1(x))))

    class ConvNeXtBlock(nn.Module):
        """ConvNeXt's and EfficientNet's float idioms: SiLU, a depthwise conv, F.layer_norm
        over channels of a permuted tensor, GELU, a learned layer scale."""

        def __init__(self, c=8):
            super().__init__()
            self.c = c
            self.stem = nn.Conv2d(3, c, 3, padding=1)
            self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
            self.norm_weight = nn.Parameter(torch.rand(c) + 0.5)
            self.norm_bias = nn.Parameter(torch.randn(c) * 0.1)
            self.fc1, self.act, self.fc2 = nn.Linear(c, 2 * c), nn.GELU(), nn.Linear(2 * c, c)
            self.layer_scale = nn.Parameter(torch.full((c, 1, 1), 0.5))

        def forward(self, x):
            x = TF.silu(self.stem(x))
            y = self.dw(x).permute(0, 2, 3, 1)
            y = TF.layer_norm(y, (self.c,), self.norm_weight, self.norm_bias, 1e-6)
            y = self.fc2(self.act(self.fc1(y))).permute(0, 3, 1, 2)
            return x + self.layer_scale * y

    class SoftmaxHead(nn.Module):
        """Classifier and attention idioms: nn.Softmax after a linear (PyTorch's graph mode
        makes it quantized.Softmax, fixed qparams 1/256), F.softmax and x.softmax (float)."""

        def __init__(self, c=8):
            super().__init__()
            self.conv = nn.Conv2d(3, c, 3, padding=1)
            self.q, self.k = nn.Linear(c, c), nn.Linear(c, c)
            self.attn = nn.Softmax(dim=-1)
            self.fc = nn.Linear(c, 10)

        def forward(self, x):
            t = torch.flatten(self.conv(x), 2).transpose(1, 2)
            a = self.attn(self.q(t))
            s = TF.softmax(self.k(t), dim=-1) + a.softmax(1)
            return self.fc(s.mean(1))

    class Decoder(nn.Module):
        """A segmentation decoder's upsampling: transposed convs (k3/s2 with output_padding:
        the spread route; k2/s2: the shuffle route) after a strided conv and batch norm.
        Channel counts not multiples of 8: PyTorch's fbgemm kernel for 2x2/2 transposed convs
        with such counts is wrong (docs/semantics.md §16.2)."""

        def __init__(self):
            super().__init__()
            self.down, self.bn = nn.Conv2d(3, 12, 3, 2, 1), nn.BatchNorm2d(12)
            self.up1 = nn.ConvTranspose2d(12, 6, 3, 2, 1, 1)
            self.up2 = nn.ConvTranspose2d(6, 5, 2, 2)

        def forward(self, x):
            y = torch.relu(self.bn(self.down(x)))
            return self.up2(torch.relu(self.up1(y)))

    class Attention(nn.Module):
        """Self-attention written out with torch.matmul, as a user's own forward has it:
        PyTorch's graph mode makes quantized::matmul of both products (their inputs
        quantized: the softmax's float output too), leaves the softmax float."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, 8, 1)
            self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
            self.out = nn.Linear(8, 4)

        def forward(self, x):
            t = self.embed(x).flatten(2).transpose(1, 2)
            s = torch.matmul(self.q(t), self.k(t).transpose(1, 2))
            a = torch.softmax(s, -1)
            return self.out(torch.matmul(a, self.v(t))).mean(1)

    return dict(residual_plus=functools.partial(Residual, False),
                residual_functional=functools.partial(Residual, True),
                inverted_residual=InvertedResidual, float_se=FloatSE, shuffle=Shuffle,
                inception=Inception, float_inception=FloatInception, mlp=MLP,
                convnext_block=ConvNeXtBlock, softmax_head=SoftmaxHead, decoder=Decoder,
                attention=Attention)


FLOAT = ["residual_plus", "residual_functional", "inverted_residual", "float_se", "shuffle",
         "inception", "float_inception", "mlp", "convnext_block", "softmax_head", "decoder",
         "attention"]
INT8 = {"residual_functional": [["conv1", "bn1", "relu"], ["conv2", "bn2"]],
        "inverted_residual": [], "shuffle": [], "inception": [], "mlp": [["fc1", "relu"]]}


def _model(name, seed=0):
    torch = torch_or_skip()
    torch.manual_seed(seed)
    m = _models()[name]().eval()
    # Non-trivial batch-norm statistics, so folding them is tested.
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    return m


def _data(torch, n=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 8, 8, generator=g) for _ in range(n)]


def _torch_int8(torch, m, fuse, calib):
    m = copy.deepcopy(m)
    if fuse:
        m = torch.ao.quantization.fuse_modules(m, fuse)
    m.qconfig = torch.ao.quantization.get_default_qconfig("x86")
    torch.ao.quantization.prepare(m, inplace=True)
    with torch.no_grad():
        for c in calib:
            m(c)
    torch.ao.quantization.convert(m, inplace=True)
    return m


@pytest.mark.parametrize("name", FLOAT)
def test_float_import_matches_torch(name):
    torch = torch_or_skip()
    m = _model(name)
    g = qnn.from_torch(m)
    assert isinstance(g, GraphModule)
    # Parameters keep the torch model's names.
    assert set(g.state_dict()) == set(m.state_dict()) - {
        k for k in m.state_dict() if k.endswith("num_batches_tracked")} | {
        k for k in g.state_dict() if k.endswith("num_batches_tracked")}
    for x in _data(torch, 2):
        with torch.no_grad():
            want = m(x).numpy()
        for backend in ("fast", "ref"):
            with qops.backend(backend):
                got = g(x.numpy())
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(INT8))
def test_int8_import_is_exact(name):
    torch = torch_or_skip()
    calib = _data(torch)
    tm = _torch_int8(torch, _model(name), INT8[name], calib)
    g = nnq.from_torch(tm)
    assert isinstance(g, GraphModule)
    for x in _data(torch, 3, seed=7):
        want = tm(x).numpy()
        for backend in ("fast", "ref"):
            with qops.backend(backend):
                got = g(x.numpy())
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(INT8))
def test_float_import_then_qops_flow_matches_torch_flow(name):
    torch = torch_or_skip()
    calib = _data(torch)
    m = _model(name)
    tm = _torch_int8(torch, m, INT8[name], calib)
    g = qnn.from_torch(m)
    if INT8[name]:
        g = qq.fuse_modules(g, INT8[name])
    g.qconfig = qq.get_default_qconfig("x86")
    qq.prepare(g, inplace=True)
    for c in calib:
        g(c.numpy())
    qq.convert(g, inplace=True)
    theirs = {n: (float(mm.scale), int(mm.zero_point)) for n, mm in tm.named_modules()
              if hasattr(mm, "scale") and not callable(mm.scale)}
    ours = dict(g.named_modules())
    assert theirs
    for n, (s, z) in theirs.items():
        mine = ours[n]
        assert int(np.asarray(mine.zero_point).ravel()[0]) == z, n
        np.testing.assert_allclose(float(np.asarray(mine.scale).ravel()[0]), s,
                                   rtol=SCALE_RTOL, err_msg=n)
    for x in _data(torch, 3, seed=7):
        want, got = tm(x).numpy(), g(x.numpy())
        step = max(s for s, _ in theirs.values())
        assert np.abs(got - want).max() <= step * 1.0001


def test_graph_prints_its_nodes_and_modules():
    m = _model("mlp")
    g = qnn.from_torch(m)
    text = repr(g)
    assert text.startswith("GraphModule[MLP](")
    assert "(fc1): Linear(in_features=192, out_features=32" in text
    assert "%view = %quant.view(%size, -1)" in text
    assert [n.op for n in g.nodes][:2] == ["input", "module"]


def test_modules_swapped_by_name_are_used():
    torch = torch_or_skip()
    m = _model("mlp")
    g = qnn.from_torch(m)
    x = _data(torch, 1)[0].numpy()
    before = g(x)
    g.set_submodule("relu", qnn.Identity())
    after = g(x)
    assert not np.array_equal(before, after)
    # A swap straight through the children dict (as PyTorch users write it) is seen too.
    g._modules["relu"] = qnn.ReLU()
    np.testing.assert_array_equal(g(x), before)
    del g._modules["relu"]
    with pytest.raises(AttributeError, match="relu"):
        g(x)


def test_unsupported_nodes_are_all_listed_with_their_lines():
    torch = torch_or_skip()

    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 1)
            self.rnn_like = torch.nn.Softplus()

        def forward(self, x):
            x = self.conv(x).exp()
            x = torch.logsumexp(x, 1)
            return self.rnn_like(x)

    with pytest.raises(TypeError) as e:
        qnn.from_torch(Odd().eval())
    msg = str(e.value)
    assert "3 node(s) of Odd.forward" in msg
    assert ".exp()" in msg and "logsumexp" in msg and "Softplus" in msg
    assert "test_nn_graph.py:" in msg and "x = self.conv(x).exp()" in msg


def test_data_dependent_control_flow_points_to_target_and_leaf_modules():
    torch = torch_or_skip()

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 1)

        def forward(self, x):
            if x.sum() > 0:
                return self.conv(x)
            return x

    with pytest.raises(TypeError, match="target=.*leaf_modules="):
        qnn.from_torch(Branchy().eval())


def test_leaf_modules_keep_a_submodule_whole():
    torch_or_skip()
    m = _model("inverted_residual")
    with pytest.raises(ValueError, match="leaf_modules names no submodule"):
        qnn.from_torch(m, leaf_modules=["nope"])
    # A leaf qops cannot convert is reported as such.
    with pytest.raises(TypeError, match="no qops equivalent for module .*SqueezeExcitation"):
        qnn.from_torch(m, leaf_modules=["se"])


def test_qtensor_chunk_split_and_flatten_work_like_torch():
    torch = torch_or_skip()
    from qops.nn._graph import METHODS
    x = np.arange(2 * 6 * 2 * 2, dtype=np.float32).reshape(2, 6, 2, 2)
    q = qops.quantize_per_tensor(x, 0.5, 3, qops.quint8)
    tq = torch.quantize_per_tensor(torch.from_numpy(x), 0.5, 3, torch.quint8)
    for args in [(2, 1), (4, 1), (3, 0)]:
        ours = METHODS["chunk"](q, *args)
        theirs = tq.chunk(*args)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a.int_repr(), b.int_repr().numpy())
    for sizes in [[1, 5], 4]:
        for a, b in zip(METHODS["split"](q, sizes, 1), tq.split(sizes, 1)):
            np.testing.assert_array_equal(a.int_repr(), b.int_repr().numpy())
    np.testing.assert_array_equal(METHODS["flatten"](q, 1).int_repr(),
                                  tq.flatten(1).int_repr().numpy())
    np.testing.assert_array_equal(METHODS["flatten"](x, 1), torch.from_numpy(x).flatten(1))


@pytest.mark.parametrize("name", ["residual_plus", "inverted_residual", "shuffle", "mlp",
                                  "convnext_block", "softmax_head", "decoder"])
def test_captured_models_save_and_load(name, tmp_path):
    torch = torch_or_skip()
    m = _model(name)
    x = _data(torch, 1)[0]
    models = [qnn.from_torch(m)]
    if name in INT8:
        models.append(nnq.from_torch(_torch_int8(torch, m, INT8[name], _data(torch))))
    for g in models:
        path = tmp_path / "g.npz"
        qops.save(g, path)
        back = qops.load(path)
        assert isinstance(back, GraphModule)
        assert repr(back) == repr(g)
        assert list(back.state_dict()) == list(g.state_dict())
        np.testing.assert_array_equal(back(x.numpy()), g(x.numpy()))


def test_loaded_graph_refuses_unknown_targets(tmp_path):
    import json
    import zipfile
    m = qnn.from_torch(_model("mlp"))
    path = tmp_path / "g.npz"
    qops.save(m, path)
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    meta = np.load(path)["__qops__"]
    for bad in ("os.system", "eval", "__import__"):
        d = json.loads(str(meta))
        for node in d["model"]["graph"]:
            if node["op"] == "method":
                node["target"] = bad
        out = tmp_path / f"bad_{bad}.npz"
        arrays = {n[:-4]: np.load(path)[n[:-4]] for n in entries if n != "__qops__.npy"}
        np.savez(out, __qops__=np.array(json.dumps(d)), **arrays)
        with pytest.raises(qops.LoadError, match="not a method a graph may call"):
            qops.load(out)


def test_quantized_calls_left_in_graphs_run():
    # Converted graphs call torch.quantize_per_tensor, torch.ops.quantized.* and dequantize.
    torch = torch_or_skip()

    class Q(torch.nn.Module):
        def forward(self, x, y):
            qx = torch.quantize_per_tensor(x, 0.05, 60, torch.quint8)
            qy = torch.quantize_per_tensor(y, 0.04, 70, torch.quint8)
            s = torch.ops.quantized.add(qx, qy, 0.07, 64)
            r = torch.ops.quantized.add_relu(qx, qy, 0.07, 64)
            m = torch.ops.quantized.mul(qx, qy, 0.1, 50)
            c = torch.ops.quantized.cat([s, r], scale=0.08, zero_point=60, dim=1)
            h = torch.ops.quantized.hardswish(qx, 0.03, 40)
            return c.dequantize(), torch.dequantize(m), h.dequantize(), torch.flatten(
                torch.relu(qx), 1).dequantize()

    g = qnn.from_torch(Q())
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(2, 3, 4, 4, generator=gen), torch.randn(2, 3, 4, 4, generator=gen)
    want = Q()(x, y)
    got = g(x.numpy(), y.numpy())
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b.numpy())


def test_quantized_scalar_calls_run():
    # quantized::mul/add with a scalar (.Scalar (q, s) and .Scalar2 (s, q)): Swin V2's
    # converted graph calls torch.ops.quantized.mul(16, sigmoid(q))
    torch = torch_or_skip()

    class Q(torch.nn.Module):
        def forward(self, x):
            qx = torch.quantize_per_tensor(x, 0.05, 60, torch.quint8)
            return [r.dequantize() for r in (
                torch.ops.quantized.mul(16, torch.sigmoid(qx)), torch.ops.quantized.mul(qx, 3),
                torch.ops.quantized.add(qx, 0.5), torch.ops.quantized.add(-1.25, qx))]

    g = qnn.from_torch(Q())
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(5))
    for a, b in zip(g(x.numpy()), Q()(x)):
        np.testing.assert_array_equal(a, b.numpy())


def test_tensor_functions_of_attention_code_match_torch():
    # matmul/bmm/@ (batch dims broadcast), einsum (spaces, list form, the forms of
    # fo.einsum's batched product), roll, F.pad (modes,
    # negative pads crop), swapaxes/swapdims, tensor_split, unbind: float, as PyTorch's graph
    # mode leaves them
    torch = torch_or_skip()
    TF = torch.nn.functional

    class M(torch.nn.Module):
        def forward(self, x, w):
            a = torch.matmul(x, w) + (x @ w[0]) + torch.bmm(x[0], w[0]).sum()
            b = torch.einsum("b c h i, b c h j -> b c i j", x, x)
            c = torch.einsum("bchi,bchj->bcij", [x, x]) + x.swapaxes(-1, -2).matmul(x)
            d = torch.roll(x, (1, -2), (2, 3)) + torch.roll(x, 3)
            e = TF.pad(x, (1, 2, -1, 0)).sum() + TF.pad(x, (1, 1, 1, 1), mode="reflect").sum()
            f = TF.pad(x, (2, 0), value=-1.5).sum() + TF.pad(x, (1, 1, 2, 0), "replicate").sum()
            g = torch.tensor_split(x, 3, dim=2)[2] + torch.tensor_split(x, (1, 3), 2)[1].sum()
            u, v = torch.unbind(x, 1), x.unbind(-1)
            h = u[0] + u[2] + v[3].sum()
            i = torch.swapdims(x, 0, 3).sum() + x.swapdims(1, 2).sum() + torch.swapaxes(x, 1, 2)
            # einsum as one batched product: summed and batch letters, a letter summed on
            # one side first, an outer product, the output transposed; numpy's otherwise
            j = torch.einsum("bchw,bcvw->bhv", x, x) + torch.einsum("bchw,bcvu->bvh", x, x)
            k = torch.einsum("ij,kl->ljik", x[0, 0], x[1, 1]) + torch.einsum("bchw->bc", x).sum()
            return a, b, c, d, e, f, g, h, i, j, k

    g = qnn.from_torch(M())
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(2, 3, 5, 4, generator=gen), torch.randn(1, 3, 4, 6, generator=gen)
    with torch.no_grad():
        want = M()(x, w)
    got = g(x.numpy(), w.numpy())
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)
        assert np.asarray(a).dtype == np.float32


@pytest.mark.parametrize("name", ["residual_plus", "float_se", "float_inception", "mlp",
                                  "shuffle", "convnext_block", "softmax_head", "decoder",
                                  "attention"])
def test_models_converted_by_torch_fx_import_exactly(name):
    # PyTorch's graph mode (prepare_fx / convert_fx) leaves quantize_per_tensor,
    # torch.ops.quantized.* calls and dequantize in the converted graph.
    torch = torch_or_skip()
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    m = _model(name)
    x = _data(torch, 1, seed=9)[0]
    p = prepare_fx(copy.deepcopy(m), get_default_qconfig_mapping("x86"), (x,))
    with torch.no_grad():
        for c in _data(torch, 2):
            p(c)
    q = convert_fx(p)
    g = nnq.from_torch(q)
    with torch.no_grad():
        want = q(x).numpy()
    np.testing.assert_array_equal(g(x.numpy()), want)


def test_layer_subclasses_functional_convs_and_stochastic_depth():
    # torchvision's video ResNets use nn.Conv3d subclasses that keep its forward (converted as
    # Conv3d); a forward may call F.conv2d with its own parameters; torchvision's stochastic
    # depth is the identity in eval mode and refused in training mode.
    torch = torch_or_skip()
    nn, TF = torch.nn, torch.nn.functional

    class Conv3DSimple(nn.Conv3d):
        @staticmethod
        def get_downsample_stride(stride):
            return stride, stride, stride

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = Conv3DSimple(3, 4, 3, padding=1)
            self.w = nn.Parameter(torch.randn(5, 4, 3, 3) * 0.2)
            self.b = nn.Parameter(torch.randn(5))

        def forward(self, x):
            y = self.conv(x).mean(2)
            return TF.conv2d(y, self.w, self.b, stride=2, padding=1)

    torch.manual_seed(0)
    m = Net().eval()
    g = qnn.from_torch(m)
    assert type(g.conv).__name__ == "Conv3d"
    x = torch.randn(2, 3, 4, 8, 8)
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(g(x.numpy()), want, rtol=1e-5, atol=1e-5)
    from qops.nn._graph import FUNCTIONS
    a = np.ones((2, 3), np.float32)
    assert FUNCTIONS["stochastic_depth"](a, 0.2, "row", False) is a
    with pytest.raises(ValueError, match="training mode"):
        FUNCTIONS["stochastic_depth"](a, 0.2, "row", True)


def test_float_import_of_a_quantized_model_points_to_the_quantized_import():
    torch = torch_or_skip()
    tc = torch.ao.nn.quantized.Conv2d(3, 4, 1)
    with pytest.raises(TypeError, match="qops.nn.quantized.from_torch"):
        qnn.from_torch(tc)
    with pytest.raises(TypeError, match="qops.nn.quantized.from_torch"):
        qnn.from_torch(torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), tc))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_functional_convs_and_linears_quantized_by_torch_fx_import_exactly(nd):
    # PyTorch's graph mode quantizes F.conv*d / F.linear calls on a forward's own parameters
    # into torch.ops.quantized.conv*d(x, packed_weight, scale, zero_point) (and _relu forms)
    # with the packed weight a script object: qops unpacks each into a quantized module.
    torch = torch_or_skip()
    nn, TF = torch.nn, torch.nn.functional
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    conv = getattr(TF, f"conv{nd}d")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Parameter(torch.randn((6, 3) + (3,) * nd) * 0.3)
            self.b1 = nn.Parameter(torch.randn(6))
            self.w2 = nn.Parameter(torch.randn((6, 3) + (3,) * nd) * 0.3)
            self.fc_w = nn.Parameter(torch.randn(5, 6) * 0.3)

        def forward(self, x):
            # (PyTorch's convert needs list arguments: its prepack op takes no ints)
            one = [1] * nd
            y = TF.relu(conv(x, self.w1, self.b1, [2] * nd, one, one, 1))
            y = conv(y, self.w2, None, one, one, one, 2)
            y = y.mean(tuple(range(2, 2 + nd)))
            return TF.relu(TF.linear(y, self.fc_w))

    torch.manual_seed(0)
    m = Net().eval()
    shape = (2, 3) + (7, 8, 5)[:nd]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g)
    p = prepare_fx(copy.deepcopy(m), get_default_qconfig_mapping("x86"), (x,))
    with torch.no_grad():
        for _ in range(2):
            p(torch.randn(shape, generator=g))
    q = convert_fx(p)
    code = q.code
    assert f"quantized.conv{nd}d_relu" in code and "quantized.linear_relu" in code
    imported = nnq.from_torch(q)
    with torch.no_grad():
        want = q(x).numpy()
    np.testing.assert_array_equal(imported(x.numpy()), want)


def test_values_are_dropped_after_their_last_use():
    # The graph runner keeps a value only until the last node that reads it: holding all of
    # them to the end made the peak memory every activation at once, and glibc returned that
    # heap to the system after each forward (ResNet-50 batch 8 page-faulted ~16,000 times a
    # forward). Values a later node reads (through a list too) stay; the output stays.
    import weakref

    from qops.nn._graph import Node, Ref

    class Box:
        def __init__(self, v):
            self.v = v

    alive = {}

    class Make(qnn.Module):
        def __init__(self, name):
            super().__init__()
            self.tag = name

        def forward(self, *xs):
            b = Box(sum(x.v if isinstance(x, Box) else x for x in _flat(xs)))
            alive[self.tag] = weakref.ref(b)
            return b

    class Probe(qnn.Module):
        def forward(self, x):
            # seen while the graph runs: a, b's last users have run; c is read later
            seen.append({k: r() is not None for k, r in alive.items()})
            return x

    def _flat(xs):
        for x in xs:
            if isinstance(x, list):
                yield from _flat(x)
            else:
                yield x

    seen = []
    nodes = [Node("x", "input", "x"),
             Node("a", "module", "ma", [Ref("x")]),
             Node("b", "module", "mb", [Ref("a")]),
             Node("c", "module", "mc", [Ref("b")]),
             Node("d", "module", "md", [[Ref("c"), Ref("x")]]),
             Node("p", "module", "probe", [Ref("d")]),
             Node("e", "module", "me", [Ref("p"), Ref("c")]),
             Node("output", "output", "output", [Ref("e")])]
    g = GraphModule(nodes, {"ma": Make("a"), "mb": Make("b"), "mc": Make("c"), "md": Make("d"),
                            "me": Make("e"), "probe": Probe()})
    out = g(1.0)
    assert out.v == 3.0                 # e = d + c = (c + x) + c
    assert seen == [{"a": False, "b": False, "c": True, "d": True}]
    assert alive["e"]() is out
