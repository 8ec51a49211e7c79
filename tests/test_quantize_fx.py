"""Graph-mode quantization (qops.quantization.quantize_fx) against PyTorch's prepare_fx/convert_fx.

The same float model (the plain-torch classes of tests/test_nn_graph.py, no stubs and no fuse
list needed), the same QConfigMapping and calibration data through PyTorch's graph mode and
through qops' (on the model captured by qops.nn.from_torch). Observers see float layers, whose
sums qops orders differently from oneDNN, so a scale may differ in its last few ulp (as in
eager mode, tests/test_quantization_parity.py) and an output then by one step; the graph, the
quantized modules and the zero points are the same.

Measured (torch 2.13.0+cpu, AVX2 Zen 3), max over the 8 plain-torch models (+ the fixed-qparams
one): with PyTorch's default x86 mapping (HistogramObserver activations) scales differ by at
most 2.3e-7 relative (fed the same values qops' HistogramObserver is bit-exact; the float layers
feeding it sum in another order), zero points never, and 99.8% of outputs are bit-exact, the
rest one step off (inverted_residual). QAT (prepare_qat_fx, get_default_qat_qconfig_mapping,
two training-mode batches, no optimizer step): scales within 2.2e-7, zero points equal, outputs
bit-exact except inverted_residual (99.6%, one step).
"""
import copy

import numpy as np
import pytest

import qops
import qops.nn as qnn
import qops.quantization as qq
from qops.quantization import quantize_fx as qfx

from conftest import torch_or_skip
from test_nn_graph import FLOAT, _data, _model

SCALE_RTOL = 4 * float(np.finfo(np.float32).eps)


def _mappings(torch):
    tq = torch.ao.quantization
    theirs = tq.get_default_qconfig_mapping("x86").set_global(
        tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True),
                   weight=tq.get_default_qconfig("x86").weight))
    ours = qfx.get_default_qconfig_mapping("x86").set_global(
        qq.QConfig(activation=qq.MinMaxObserver.with_args(reduce_range=True),
                   weight=qq.get_default_qconfig("x86").weight))
    return theirs, ours


def _both(torch, name, how="minmax"):
    """PyTorch's and qops' converted models and an input; `how` is "minmax" (the x86 mapping
    with min/max activation observers), "default" (get_default_qconfig_mapping("x86"), the
    histogram observers) or "qat" (prepare_qat_fx with get_default_qat_qconfig_mapping("x86"),
    two batches in training mode: fake quantizers and batch norms update, no optimizer)."""
    tq_ = torch.ao.quantization
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx, prepare_qat_fx
    m = _model(name) if isinstance(name, str) else name
    x = _data(torch, 1, seed=9)[0]
    calib = _data(torch, 2)
    if how == "minmax":
        theirs_map, ours_map = _mappings(torch)
    elif how == "default":
        theirs_map = tq_.get_default_qconfig_mapping("x86")
        ours_map = qfx.get_default_qconfig_mapping("x86")
    else:
        theirs_map = tq_.get_default_qat_qconfig_mapping("x86")
        ours_map = qfx.get_default_qat_qconfig_mapping("x86")
    m.train(how == "qat")
    prep, our_prep = (prepare_qat_fx, qfx.prepare_qat_fx) if how == "qat" else (
        prepare_fx, qfx.prepare_fx)
    p = prep(copy.deepcopy(m), theirs_map, (x,))
    with torch.no_grad():
        for c in calib:
            p(c)
    tq = convert_fx(p)
    gp = our_prep(qnn.from_torch(m).train(how == "qat"), ours_map, (x.numpy(),))
    for c in calib:
        gp(c.numpy())
    return tq, qfx.convert_fx(gp), x


def _compare(torch, tq, gq, x):
    """(max relative scale difference, max zero-point difference, share of bit-exact outputs,
    max output difference in steps) over every quantized module and quantize node."""
    theirs = {n: (float(m.scale), int(m.zero_point)) for n, m in tq.named_modules()
              if hasattr(m, "scale") and not callable(m.scale)}
    ours = dict(gq.named_modules())
    rel, zpd = [0.0], [0]
    for n, (s, z) in theirs.items():
        assert n in ours, f"{n}: PyTorch quantized it, qops has no module there"
        mine = ours[n]
        assert type(mine).__name__ == type(tq.get_submodule(n)).__name__, n
        zpd.append(abs(int(np.asarray(mine.zero_point).ravel()[0]) - z))
        rel.append(abs(float(np.asarray(mine.scale).ravel()[0]) - s) / s)
    # qparams of the quantize nodes PyTorch keeps as buffers (inputs, adds, muls, ...)
    their_q = sorted(float(b) for n, b in tq.named_buffers() if n.endswith("scale_0")
                     or "_scale_" in n)
    at = {"quantize_per_tensor": 1, "quantized.hardswish": 1, "quantized.layer_norm": 5}
    our_q = sorted(n.args[at.get(n.target, 2)]
                   for n in gq.nodes if n.op == "function" and n.target in (
                       "quantize_per_tensor", "quantized.add", "quantized.add_relu",
                       "quantized.mul", "quantized.mul_relu", "quantized.hardswish",
                       "quantized.layer_norm", "quantized.matmul"))
    assert len(their_q) == len(our_q)
    rel += [abs(a - b) / b for a, b in zip(our_q, their_q)]
    with torch.no_grad():
        want = tq(x).numpy()
    got = gq(x.numpy())
    step = np.diff(np.unique(want)).min()        # the output's scale
    d = np.abs(got - want) / step
    return max(rel), max(zpd), float(np.mean(d < 1e-3)), float(d.max())


@pytest.mark.parametrize("name", FLOAT)
def test_prepare_convert_fx_match_torch(name):
    torch = torch_or_skip()
    rel, zpd, exact, steps = _compare(torch, *_both(torch, name))
    assert rel <= SCALE_RTOL and zpd == 0
    assert exact >= 0.998 and steps <= 1.0001


@pytest.mark.parametrize("name", FLOAT + ["gates"])
def test_default_histogram_mapping_matches_torch(name):
    # PyTorch's default mapping as is: HistogramObserver activations, fixed qparams for
    # sigmoid/hardsigmoid/tanh
    torch = torch_or_skip()
    m = _gates(torch) if name == "gates" else name
    rel, zpd, exact, steps = _compare(torch, *_both(torch, m, "default"))
    assert rel <= SCALE_RTOL and zpd == 0
    assert exact >= 0.998 and steps <= 1.0001


@pytest.mark.parametrize("name", FLOAT + ["gates"])
def test_prepare_qat_fx_convert_fx_match_torch(name):
    torch = torch_or_skip()
    m = _gates(torch) if name == "gates" else name
    rel, zpd, exact, steps = _compare(torch, *_both(torch, m, "qat"))
    assert rel <= SCALE_RTOL and zpd == 0
    assert exact >= 0.996 and steps <= 1.0001


def _gates(torch):
    """A conv feeding every fixed-qparams op of PyTorch's mapping as module, function and
    method (softmax aside: qops has no quantized softmax)."""
    nn, TF = torch.nn, torch.nn.functional

    class Gates(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.sig, self.tanh, self.hs = nn.Sigmoid(), nn.Tanh(), nn.Hardsigmoid()

        def forward(self, x):
            y = self.conv(x)
            a = self.sig(y) + torch.tanh(y)
            b = y.sigmoid() * self.tanh(y)
            c = TF.hardsigmoid(y) + y.tanh()
            return torch.cat([a, b, self.hs(c)], 1)

    torch.manual_seed(0)
    return Gates()


def test_graph_mode_fuses_observes_and_prints():
    torch = torch_or_skip()
    _, gq, x = _both(torch, "residual_plus")
    ops = [(n.op, n.target) for n in gq.nodes]
    # conv+bn+relu folded, add+relu fused, the input quantized and the output dequantized
    assert type(gq.conv1).__name__ == "ConvReLU2d" and "bn1" not in dict(gq.named_children())
    assert ("function", "quantized.add_relu") in ops
    assert ops[1] == ("function", "quantize_per_tensor") and ops[-2] == ("function",
                                                                         "dequantize")
    assert not any(str(t).startswith("activation_post_process") for _, t in ops)
    assert "quantized.add_relu" in repr(gq)


def test_graph_mode_model_saves_and_loads(tmp_path):
    torch = torch_or_skip()
    _, gq, x = _both(torch, "inverted_residual")
    qops.save(gq, tmp_path / "g.qops")
    back = qops.load(tmp_path / "g.qops")
    np.testing.assert_array_equal(back(x.numpy()), gq(x.numpy()))


def test_qconfig_mapping_leaves_parts_float():
    torch = torch_or_skip()
    m = _model("mlp")
    x = _data(torch, 1)[0].numpy()
    mapping = qfx.get_default_qconfig_mapping("x86").set_module_name("fc2", None)
    p = qfx.prepare_fx(qnn.from_torch(m), mapping, (x,))
    p(x)
    q = qfx.convert_fx(p)
    assert type(q.fc1).__name__ == "LinearReLU" and type(q.fc2).__name__ == "Linear"
    assert q.fc2.__module__.startswith("qops.nn._layers")          # float
    assert ("function", "dequantize") in [(n.op, n.target) for n in q.nodes]
    with torch.no_grad():
        want = m(torch.from_numpy(x)).numpy()
    assert np.abs(q(x) - want).max() < 0.1


def test_quantize_jit_and_errors():
    torch = torch_or_skip()
    m = _model("shuffle")
    x = _data(torch, 1)[0].numpy()
    calib = [c.numpy() for c in _data(torch, 2)]

    def run(model, data):
        for c in data:
            model(c)
    q = qq.quantize_jit(qnn.from_torch(m), {"": qq.get_default_qconfig("x86")}, run, [calib])
    assert np.abs(q(x) - m(torch.from_numpy(x)).detach().numpy()).max() < 0.2
    with pytest.raises(TypeError, match="GraphModule"):
        qfx.prepare_fx(qnn.ReLU(), qfx.get_default_qconfig_mapping(), (x,))
    with pytest.raises(ValueError, match="not prepared"):
        qfx.convert_fx(qnn.from_torch(m))
    with pytest.raises(ValueError, match="eval mode"):
        qfx.prepare_qat_fx(qnn.from_torch(m), qfx.get_default_qat_qconfig_mapping(), (x,))
    with pytest.raises(ValueError, match="training mode"):
        qfx.prepare_fx(qnn.from_torch(m).train(), qfx.get_default_qconfig_mapping(), (x,))
    d = qq.quantize_dynamic_jit(qnn.from_torch(_model("mlp")))
    assert type(d.fc1).__name__ == "Linear" and "dynamic" in type(d.fc1).__module__


def test_prepare_qat_fx_trains_in_float_with_fake_quant():
    torch = torch_or_skip()
    from qops.nn import qat as nnqat
    from qops.nn.intrinsic import qat as nniqat
    x = _data(torch, 1, seed=9)[0].numpy()
    p = qfx.prepare_qat_fx(qnn.from_torch(_model("residual_plus").train()),
                           qfx.get_default_qat_qconfig_mapping("x86"), (x,))
    assert type(p.conv1) is nniqat.ConvBnReLU2d and type(p.conv2) is nniqat.ConvBn2d
    assert type(p.fc) is nnqat.Linear and "quant" not in dict(p.named_children())
    fqs = [m for n, m in p.named_children() if n.startswith("activation_post_process_")]
    assert fqs and all(type(m).__name__ == "FusedMovingAvgObsFakeQuantize" for m in fqs)
    before = p.conv1.bn.running_mean.copy()
    out = p(x)
    # batch norms train on batch statistics; the output is the last fake quantizer's
    assert not np.array_equal(p.conv1.bn.running_mean, before)
    last = p.get_submodule(p.nodes[-2].target)
    s, z = float(last.scale[0]), int(last.zero_point[0])
    np.testing.assert_allclose(out / s + z, np.rint(out / s + z), atol=1e-3)
    assert last.last_mask is not None and last.last_mask.shape == out.shape
    # no autograd in qops: a training step is whatever changes the float weights
    p.fc.weight = (p.fc.weight * 0.5).astype(np.float32)
    assert not np.allclose(p(x), out)
    q = qfx.convert_fx(p)
    assert type(q.conv1).__name__ == "ConvReLU2d" and type(q.fc).__name__ == "Linear"
    assert np.abs(q(x) - p.eval()(x)).max() < 0.1
    # a qops Sequential goes through the same path
    seq = qnn.Sequential(qnn.Conv2d(3, 4, 3), qnn.BatchNorm2d(4), qnn.ReLU()).train()
    sp = qfx.prepare_qat_fx(seq, qfx.get_default_qat_qconfig_mapping(), (x,))
    sp(x)
    assert type(qfx.convert_fx(sp).get_submodule("0")).__name__ == "ConvReLU2d"
