"""Whole-model parity with torch.ao.quantization: same float model, same data, same result.

PTQ on the shipped digits CNN (fuse, prepare, calibrate, convert), quantize_dynamic on a
linear-heavy model, and QAT (fuse_modules_qat, prepare_qat, train-mode forwards, convert).

Tolerance, one place only: an activation observer in a prepared model sees the output of a
*float* conv/linear, and qops' numpy float32 sums are ordered differently from oneDNN's, so
an observed min/max (hence a scale) can differ in the last ulp. Weights, folded weights,
zero points and every observer fed identical data are bit-exact (tests/test_quantization.py).
"""
from collections import OrderedDict

import numpy as np
import pytest

import qops.nn as qnn
import qops.quantization as qq
from qops.quantization import _demo

from conftest import torch_or_skip

F32 = np.float32
SCALE_RTOL = 4 * float(np.finfo(F32).eps)  # a few ulp: float conv summation order (see top)


def _torch_digits(torch):
    """The demo CNN in torch with the shipped weights, names as in qops' Sequential."""
    import torch.ao.quantization as tq
    n = torch.nn
    m = n.Sequential(OrderedDict([
        ("quant", tq.QuantStub()),
        ("conv1", n.Conv2d(1, 16, 3, padding=1)), ("bn1", n.BatchNorm2d(16)), ("relu1", n.ReLU()),
        ("conv2", n.Conv2d(16, 32, 3, padding=1)), ("bn2", n.BatchNorm2d(32)),
        ("relu2", n.ReLU()), ("pool", n.MaxPool2d(2)),
        ("conv3", n.Conv2d(32, 32, 3, padding=1)), ("bn3", n.BatchNorm2d(32)),
        ("relu3", n.ReLU()), ("flatten", n.Flatten()),
        ("fc1", n.Linear(512, 64)), ("relu4", n.ReLU()), ("fc2", n.Linear(64, 10)),
        ("dequant", tq.DeQuantStub())]))
    with np.load(_demo.DATA_FILE) as d:
        state = {k[len("state."):]: torch.from_numpy(d[k]) for k in d.files
                 if k.startswith("state.")}
    m.load_state_dict(state, strict=False)
    return m.eval()


def _record(model, names):
    out = {}
    for name in names:
        def hook(mod, args, o, _n=name):
            out[_n] = o
        model.get_submodule(name).register_forward_hook(hook)
    return out


@pytest.fixture(scope="module")
def digits():
    model, calib, test, labels = _demo.load_data()
    return model, calib[:128], test[:96]


@pytest.mark.parametrize("qconfig_name", ["x86", "default_qconfig", "default_per_channel_qconfig"])
def test_ptq_digits_cnn_matches_torch(digits, qconfig_name):
    torch = torch_or_skip()
    import torch.ao.quantization as tq
    model, calib, test = digits
    if qconfig_name == "x86":
        tqc, qqc = tq.get_default_qconfig("x86"), qq.get_default_qconfig("x86")
    else:
        tqc, qqc = getattr(tq, qconfig_name), getattr(qq, qconfig_name)

    tm = _torch_digits(torch)
    tf = tq.fuse_modules(tm, _demo.FUSE_GROUPS)
    tf.qconfig = tqc
    tp = tq.prepare(tf)
    for i in range(0, len(calib), 32):
        tp(torch.from_numpy(calib[i:i + 32]))
    tc = tq.convert(tp)

    qf = qq.fuse_modules(model, _demo.FUSE_GROUPS)
    qf.qconfig = qqc
    qp = qq.prepare(qf)
    for i in range(0, len(calib), 32):
        qp(calib[i:i + 32])
    qc = qq.convert(qp)

    for name in ("conv1", "conv2", "conv3"):  # folding: bit-exact (docs/semantics.md §16)
        np.testing.assert_array_equal(tf.get_submodule(name)[0].weight.detach().numpy(),
                                      qf.get_submodule(name)[0].weight)
        np.testing.assert_array_equal(tf.get_submodule(name)[0].bias.detach().numpy(),
                                      qf.get_submodule(name)[0].bias)
    layers = ["quant", "conv1", "conv2", "conv3", "fc1", "fc2"]
    for name in layers:
        a, b = tc.get_submodule(name), qc.get_submodule(name)
        assert type(a).__name__ == type(b).__name__, name
        assert int(a.zero_point) == int(b.zero_point), name
        assert float(b.scale) == pytest.approx(float(a.scale), rel=SCALE_RTOL, abs=0), name
        if name != "quant":
            wa, wb = a.weight(), b.weight()
            np.testing.assert_array_equal(wa.int_repr().numpy(), wb.int_repr(), err_msg=name)
            if wb.is_per_channel:
                np.testing.assert_array_equal(wa.q_per_channel_scales().numpy(),
                                              wb.q_per_channel_scales())
                np.testing.assert_array_equal(wa.q_per_channel_zero_points().numpy(),
                                              wb.q_per_channel_zero_points())
            else:
                assert wa.q_scale() == wb.q_scale() and wa.q_zero_point() == wb.q_zero_point()

    names = ["quant", "conv1", "conv2", "pool", "conv3", "fc1", "fc2"]  # forward order
    ta, qa = _record(tc, names), _record(qc, names)
    ya = tc(torch.from_numpy(test)).numpy()
    yb = qc(test)
    exact_so_far = True
    for name in names:
        ia = ta[name].int_repr().numpy().astype(np.int64)
        ib = qa[name].int_repr().astype(np.int64)
        same_scale = F32(ta[name].q_scale()) == F32(qa[name].q_scale())
        if exact_so_far and same_scale:
            # Same input ints, same qparams: the int outputs are identical.
            np.testing.assert_array_equal(ia, ib, err_msg=name)
        else:
            # Downstream of a last-ulp scale difference a value can cross a rounding tie.
            diff = np.abs(ia - ib)
            assert diff.max() <= 1 and (diff > 0).mean() <= 1e-2, (name, int((diff > 0).sum()))
        exact_so_far = exact_so_far and bool(np.array_equal(ia, ib))
    assert (ya.argmax(1) == yb.argmax(1)).mean() >= 0.99
    np.testing.assert_allclose(yb, ya, atol=2 * float(tc.fc2.scale))


@pytest.mark.parametrize("case", ["qint8", "per_channel", "float16", "fused"])
def test_quantize_dynamic_matches_torch(case):
    torch = torch_or_skip()
    import torch.ao.quantization as tq
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                             torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    qm = qnn.from_torch(tm).eval()
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(F32)
    if case == "qint8":
        a, b = tq.quantize_dynamic(tm), qq.quantize_dynamic(qm)
    elif case == "per_channel":
        a = tq.quantize_dynamic(tm, {torch.nn.Linear: tq.per_channel_dynamic_qconfig})
        b = qq.quantize_dynamic(qm, {qnn.Linear: qq.per_channel_dynamic_qconfig})
    elif case == "float16":
        a = tq.quantize_dynamic(tm, dtype=torch.float16)
        b = qq.quantize_dynamic(qm, dtype="float16")
    else:
        groups = [["0", "1"], ["2", "3"]]
        tf, qf = tq.fuse_modules(tm, groups), qq.fuse_modules(qm, groups)
        a = tq.quantize_dynamic(tf, {torch.ao.nn.intrinsic.LinearReLU, torch.nn.Linear})
        b = qq.quantize_dynamic(qf, {qnn.intrinsic.LinearReLU, qnn.Linear})
    assert [type(m).__name__ for m in a] == [type(m).__name__ for m in b]
    ya = a(torch.from_numpy(x)).detach().numpy()
    yb = b(x)
    if case == "float16":
        # fbgemm's fp16 GEMM sums in another order: float32 rounding only.
        np.testing.assert_allclose(yb, ya, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(yb, ya)  # docs/semantics.md §10: bit-exact


def test_qat_matches_torch():
    torch = torch_or_skip()
    import torch.ao.quantization as tq
    torch.manual_seed(0)
    t = torch.nn
    tm = t.Sequential(OrderedDict([
        ("quant", tq.QuantStub()), ("conv", t.Conv2d(2, 4, 3)), ("bn", t.BatchNorm2d(4)),
        ("relu", t.ReLU()), ("flatten", t.Flatten()), ("fc", t.Linear(64, 8)),
        ("relu2", t.ReLU()), ("fc2", t.Linear(8, 3)), ("dequant", tq.DeQuantStub())]))
    qm = qnn.Sequential(OrderedDict([
        ("quant", qq.QuantStub()), ("conv", qnn.Conv2d(2, 4, 3)), ("bn", qnn.BatchNorm2d(4)),
        ("relu", qnn.ReLU()), ("flatten", qnn.Flatten()), ("fc", qnn.Linear(64, 8)),
        ("relu2", qnn.ReLU()), ("fc2", qnn.Linear(8, 3)), ("dequant", qq.DeQuantStub())]))
    qm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()
                        if not k.endswith("num_batches_tracked")}, strict=False)
    tm.train()
    qm.train()
    groups = [["conv", "bn", "relu"], ["fc", "relu2"]]
    tf, qf = tq.fuse_modules_qat(tm, groups), qq.fuse_modules_qat(qm, groups)
    tf.qconfig, qf.qconfig = tq.get_default_qat_qconfig("x86"), qq.get_default_qat_qconfig("x86")
    tp, qp = tq.prepare_qat(tf), qq.prepare_qat(qf)
    assert [type(m).__name__ for m in tp.children()] == [type(m).__name__ for m in qp.children()]
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((8, 2, 6, 6)).astype(F32)
        np.testing.assert_allclose(qp(x), tp(torch.from_numpy(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    tp.eval()
    qp.eval()
    tc, qc = tq.convert(tp), qq.convert(qp)
    assert [type(m).__name__ for m in tc.children()] == [type(m).__name__ for m in qc.children()]
    for name in ("quant", "conv", "fc", "fc2"):
        a, b = tc.get_submodule(name), qc.get_submodule(name)
        assert int(a.zero_point) == int(b.zero_point)
        assert float(b.scale) == pytest.approx(float(a.scale), rel=SCALE_RTOL, abs=0)
    x = rng.standard_normal((8, 2, 6, 6)).astype(F32)
    np.testing.assert_allclose(qc(x), tc(torch.from_numpy(x)).numpy(),
                               atol=2 * float(tc.fc2.scale))


def test_ptq_mixed_layers_match_torch():
    """The mapping tables on a model with hardswish, FloatFunctional add, pools, layer norm,
    leaky relu, linear and sigmoid: same module types and qparams as torch after convert."""
    torch = torch_or_skip()
    import torch.ao.quantization as tq
    torch.manual_seed(0)

    def build(nn, stubs, ff):
        class M(nn.Module):
            def __init__(s):
                super().__init__()
                s.quant, s.dequant = stubs.QuantStub(), stubs.DeQuantStub()
                s.conv = nn.Conv2d(3, 8, 3, padding=1)
                s.hs = nn.Hardswish()
                s.conv2 = nn.Conv2d(8, 8, 1)
                s.add = ff()
                s.pool = nn.AvgPool2d(2)
                s.ln = nn.LayerNorm([8, 4, 4])
                s.lrelu = nn.LeakyReLU(0.1)
                s.gap = nn.AdaptiveAvgPool2d(1)
                s.flat = nn.Flatten()
                s.fc = nn.Linear(8, 5)
                s.sig = nn.Sigmoid()

            def forward(s, x):
                y = s.hs(s.conv(s.quant(x)))
                y = s.lrelu(s.ln(s.pool(s.add.add(y, s.conv2(y)))))
                return s.dequant(s.sig(s.fc(s.flat(s.gap(y)))))
        return M().eval()

    tm = build(torch.nn, tq, torch.ao.nn.quantized.FloatFunctional)
    qm = build(qnn, qq, qnn.quantized.FloatFunctional)
    qm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    tm.qconfig, qm.qconfig = tq.get_default_qconfig("x86"), qq.get_default_qconfig("x86")
    tp, qp = tq.prepare(tm), qq.prepare(qm)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((4, 3, 8, 8)).astype(F32)
        tp(torch.from_numpy(x))
        qp(x)
    tc, qc = tq.convert(tp), qq.convert(qp)
    assert ([(n, type(m).__name__) for n, m in tc.named_children()]
            == [(n, type(m).__name__) for n, m in qc.named_children()])
    for name in ("quant", "conv", "hs", "conv2", "add", "ln", "lrelu", "fc"):
        a, b = tc.get_submodule(name), qc.get_submodule(name)
        assert int(a.zero_point) == int(b.zero_point), name
        assert float(b.scale) == pytest.approx(float(a.scale), rel=SCALE_RTOL, abs=0), name
    x = rng.standard_normal((4, 3, 8, 8)).astype(F32)
    np.testing.assert_allclose(qc(x), tc(torch.from_numpy(x)).numpy(), atol=2 / 256)
