"""Graph-mode quantization (qops.quantization.quantize_fx) against PyTorch's prepare_fx/convert_fx.

The same float model (the plain-torch classes of tests/test_nn_graph.py, no stubs and no fuse
list needed), the same QConfigMapping and calibration data through PyTorch's graph mode and
through qops' (on the model captured by qops.nn.from_torch). Observers see float layers, whose
sums qops orders differently from oneDNN, so a scale may differ in its last few ulp (as in
eager mode, tests/test_quantization_parity.py) and an output then by one step; the graph, the
quantized modules and the zero points are the same.
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


def _both(torch, name):
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    m = _model(name)
    x = _data(torch, 1, seed=9)[0]
    calib = _data(torch, 2)
    theirs_map, ours_map = _mappings(torch)
    p = prepare_fx(copy.deepcopy(m), theirs_map, (x,))
    with torch.no_grad():
        for c in calib:
            p(c)
    tq = convert_fx(p)
    gp = qfx.prepare_fx(qnn.from_torch(m), ours_map, (x.numpy(),))
    for c in calib:
        gp(c.numpy())
    return tq, qfx.convert_fx(gp), x


@pytest.mark.parametrize("name", FLOAT)
def test_prepare_convert_fx_match_torch(name):
    torch = torch_or_skip()
    tq, gq, x = _both(torch, name)
    theirs = {n: (float(m.scale), int(m.zero_point)) for n, m in tq.named_modules()
              if hasattr(m, "scale") and not callable(m.scale)}
    ours = dict(gq.named_modules())
    for n, (s, z) in theirs.items():
        assert n in ours, f"{n}: PyTorch quantized it, qops has no module there"
        mine = ours[n]
        assert type(mine).__name__ == type(tq.get_submodule(n)).__name__, n
        assert int(np.asarray(mine.zero_point).ravel()[0]) == z, n
        np.testing.assert_allclose(float(np.asarray(mine.scale).ravel()[0]), s,
                                   rtol=SCALE_RTOL, err_msg=n)
    # qparams of the quantize nodes PyTorch keeps as buffers (inputs, adds, muls, ...)
    their_q = sorted(float(b) for n, b in tq.named_buffers() if n.endswith("scale_0")
                     or "_scale_" in n)
    our_q = sorted(n.args[1] if n.target in ("quantize_per_tensor", "quantized.hardswish")
                   else n.args[2]
                   for n in gq.nodes if n.op == "function" and n.target in (
                       "quantize_per_tensor", "quantized.add", "quantized.add_relu",
                       "quantized.mul", "quantized.mul_relu", "quantized.hardswish"))
    assert len(their_q) == len(our_q)
    np.testing.assert_allclose(our_q, their_q, rtol=SCALE_RTOL)
    with torch.no_grad():
        want = tq(x).numpy()
    got = gq(x.numpy())
    step = max([s for s, _ in theirs.values()] + their_q)
    assert np.abs(got - want).max() <= step * 1.0001


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
    with pytest.raises(NotImplementedError, match="prepare_qat"):
        qfx.prepare_qat_fx(qnn.from_torch(m), qfx.get_default_qconfig_mapping(), (x,))
    d = qq.quantize_dynamic_jit(qnn.from_torch(_model("mlp")))
    assert type(d.fc1).__name__ == "Linear" and "dynamic" in type(d.fc1).__module__
