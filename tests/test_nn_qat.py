"""qops.nn.qat and qops.nn.intrinsic.qat: fake-quantized weights in forward, folding, convert."""
import numpy as np
import pytest

import qops.nn as nn
import qops.nn.quantized as nnq
import qops.quantization as qz
from qops.nn import intrinsic as nni
from qops.nn import qat as nnqat
from qops.nn.intrinsic import qat as nniqat
from qops.nn.intrinsic import quantized as nniq

F32 = np.float32


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def _qat_qconfig():
    return qz.default_qat_qconfig


def test_qat_conv_and_linear_apply_weight_fake_quant():
    qconfig = _qat_qconfig()
    conv = nn.Conv2d(3, 4, 3)
    conv.qconfig = qconfig
    q = nnqat.Conv2d.from_float(conv)
    assert q.qconfig is qconfig and q.weight is not None
    x = _rand(1, 3, 6, 6)
    out = q(x)
    fq = q.weight_fake_quant.calculate_qparams()
    ref = conv._conv_forward(x, q.weight_fake_quant(conv.weight), conv.bias)
    np.testing.assert_array_equal(out, ref)
    assert np.asarray(fq[0]).size == np.asarray(fq[1]).size
    assert not np.array_equal(out, conv(x))  # the weight really was fake-quantized
    lin = nn.Linear(5, 3)
    lin.qconfig = qconfig
    ql = nnqat.Linear.from_float(lin)
    xl = _rand(2, 5)
    np.testing.assert_array_equal(ql(xl), _with_weight(lin, ql)(xl))
    with pytest.raises(ValueError, match="qconfig"):
        nnqat.Conv2d(3, 4, 3)


def _with_weight(lin, ql):
    lin2 = nn.Linear(lin.in_features, lin.out_features)
    lin2.weight = ql.weight_fake_quant(ql.weight)
    lin2.bias = ql.bias
    return lin2


def test_qat_convbn_matches_torch(torch):
    qconfig = _qat_qconfig()
    import torch.ao.nn.intrinsic as tnni
    import torch.ao.nn.intrinsic.qat as tnniqat
    import torch.ao.quantization as tqz
    t = torch.nn
    torch.manual_seed(0)
    tf = tnni.ConvBnReLU2d(t.Conv2d(3, 4, 3, bias=False), t.BatchNorm2d(4), t.ReLU())
    with torch.no_grad():
        tf[1].running_mean.uniform_(-0.3, 0.3)
        tf[1].running_var.uniform_(0.5, 1.5)
        tf[1].weight.uniform_(0.5, 1.5)
    ours_f = nn.from_torch(tf)
    assert type(ours_f) is nni.ConvBnReLU2d
    tf.qconfig = tqz.default_qat_qconfig
    ours_f.qconfig = qconfig
    tq = tnniqat.ConvBnReLU2d.from_float(tf).train()
    oq = nniqat.ConvBnReLU2d.from_float(ours_f).train()
    x = _rand(4, 3, 7, 7, seed=1)
    for _ in range(2):
        with torch.no_grad():
            ref = tq(torch.from_numpy(x)).numpy()
        out = oq(x)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(oq.bn.running_mean, tq.bn.running_mean.numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(oq.bn.running_var, tq.bn.running_var.numpy(), rtol=1e-5)
    # convert: the bn is folded, the folded weight fake-quantized and observed.
    tq.eval(), oq.eval()
    tq.activation_post_process = tqz.default_observer()
    oq.activation_post_process = qz.default_observer()
    with torch.no_grad():
        act = tq(torch.from_numpy(x))
    tq.activation_post_process(act)
    oq.activation_post_process(act.numpy())
    tconv = torch.ao.nn.intrinsic.quantized.ConvReLU2d.from_float(tq)
    oconv = nniq.ConvReLU2d.from_float(oq)
    # The running statistics come from float conv outputs summed in another order (last-ulp
    # differences), and they scale the weight before folding: a folded weight sitting on a
    # rounding tie may then land one step away. Everything else is the same integer.
    d = np.abs(oconv.weight().int_repr().astype(int) - tconv.weight().int_repr().numpy())
    assert d.max() <= 1 and np.count_nonzero(d) <= 0.03 * d.size
    np.testing.assert_allclose(oconv.bias(), tconv.bias().detach().numpy(), rtol=1e-6, atol=1e-7)
    assert oconv.zero_point == tconv.zero_point
    with pytest.raises(TypeError, match="relu-fused"):
        nnq.Conv2d.from_float(oq)


def test_qat_convbn_freeze_and_to_float():
    qconfig = _qat_qconfig()
    f = nni.ConvBn2d(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3))
    f.qconfig = qconfig
    q = nniqat.ConvBn2d.from_float(f)
    q.freeze_bn_stats()
    before = q.bn.running_mean.copy()
    q.train()(_rand(2, 2, 3, 3) + 5)
    np.testing.assert_array_equal(q.bn.running_mean, before)
    q.update_bn_stats()
    q(_rand(2, 2, 3, 3) + 5)
    assert not np.array_equal(q.bn.running_mean, before)
    back = q.to_float()
    assert type(back) is nn.Conv2d
    w, b = q._folded_weight_bias()
    np.testing.assert_array_equal(back.weight, w)
    with pytest.raises(TypeError, match="QAT module"):
        import qops
        qops.save(q, "/dev/null")


def test_qat_linear_bn_and_relu():
    qconfig = _qat_qconfig()
    f = nni.LinearBn1d(nn.Linear(4, 3), nn.BatchNorm1d(3))
    f.qconfig = qconfig
    q = nniqat.LinearBn1d.from_float(f).eval()
    x = _rand(5, 4)
    ref = q.to_float()(x)
    np.testing.assert_allclose(q(x), ref, atol=0.05)
    lr = nni.LinearReLU(nn.Linear(4, 3), nn.ReLU())
    lr.qconfig = qconfig
    qlr = nniqat.LinearReLU.from_float(lr)
    assert np.all(qlr(x) >= 0)
    assert type(qlr.to_float()) is nni.LinearReLU
