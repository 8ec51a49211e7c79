"""Float PReLU (qops.nn.PReLU, F.prelu in captured forwards); PyTorch 2.13 as oracle. Float
only: PyTorch's quantized PReLU is wrong in its own flow (docs/semantics.md §6.3)."""
import numpy as np
import pytest

import qops.nn as qnn
from qops.nn import GraphModule
from qops.nn import quantized as nnq
from qops.quantization import quantize_fx as qfx

from conftest import torch_or_skip


def _model(torch):
    import torch.nn.functional as TF

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv2d(3, 6, 3, padding=1)
            self.p1, self.p6 = torch.nn.PReLU(), torch.nn.PReLU(6, init=0.1)
            self.w = torch.nn.Parameter(torch.linspace(-0.5, 0.5, 6))

        def forward(self, x):
            y = self.p6(self.c(x))
            return self.p1(TF.prelu(y, self.w) - 0.1)

    torch.manual_seed(0)
    m = M().eval()
    with torch.no_grad():
        m.p1.weight.fill_(-0.3)
    return m


def test_float_import_matches_torch_and_saves(tmp_path):
    torch = torch_or_skip()
    import qops
    m = _model(torch)
    g = qnn.from_torch(m)
    assert isinstance(g, GraphModule)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        want = m(x).numpy()
    # the conv's float32 sums in another order: ulps (as every float import)
    np.testing.assert_allclose(g(x.numpy()), want, rtol=1e-5, atol=1e-5)
    qops.save(g, tmp_path / "p.qops")
    np.testing.assert_array_equal(qops.load(tmp_path / "p.qops")(x.numpy()), g(x.numpy()))
    # PReLU alone: one float32 product per value, exact
    y = torch.randn(2, 6, 4, 4)
    with torch.no_grad():
        np.testing.assert_array_equal(g.get_submodule("p6")(y.numpy()), m.p6(y).numpy())
    with pytest.raises(ValueError, match="channels"):
        qnn.PReLU(4)(np.zeros((2, 3, 5), np.float32))
    with pytest.raises(TypeError, match="quantized PReLU"):
        qnn.PReLU()(qops.quantize_per_tensor(np.zeros(3, np.float32), 0.1, 0, qops.quint8))


def test_graph_mode_runs_prelu_in_float():
    torch = torch_or_skip()
    m = _model(torch)
    x = torch.randn(2, 3, 8, 8)
    g = qnn.from_torch(m)
    p = qfx.prepare_fx(g, qfx.get_default_qconfig_mapping("x86"),
                                  (x.numpy(),))
    p(x.numpy())
    q = qfx.convert_fx(p)
    assert type(q.get_submodule("c")) is nnq.Conv2d
    assert type(q.get_submodule("p6")) is qnn.PReLU
    with torch.no_grad():
        want = m(x).numpy()
    assert np.abs(q(x.numpy()) - want).max() < 0.1
