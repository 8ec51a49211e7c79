"""qops/_blas.py: the float layers' products on qops' threads, numpy's OpenBLAS held at one
thread meanwhile (it contended with qops' OpenMP threads for the cores)."""
import numpy as np
import pytest

import qops
from qops import _blas, nn
from qops.nn import _float_ops as fo

F32 = np.float32


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


needs_openblas = pytest.mark.skipif(_blas._openblas() is None,
                                    reason="numpy's BLAS here is not a loaded OpenBLAS")


@pytest.mark.parametrize("m,n,k", [(1, 10, 7), (128, 2304, 768), (37, 100, 3), (5, 0, 4),
                                   (0, 6, 4), (3, 5, 0)])
def test_linear_matches_numpy(m, n, k):
    x, w = _rand(m, k), _rand(n, k, seed=1)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    for backend in ("fast", "ref"):
        with qops.backend(backend):
            got = _blas.linear(x, w)
        assert got.dtype == F32 and got.shape == (m, n)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * max(k, 1) ** 0.5)


@pytest.mark.parametrize("trans_b", [False, True])
def test_bmm_matches_numpy(trans_b):
    a = _rand(12, 33, 16)
    b = _rand(12, 40, 16, seed=2) if trans_b else _rand(12, 16, 40, seed=2)
    want = np.matmul(a, b.transpose(0, 2, 1) if trans_b else b)
    np.testing.assert_allclose(_blas.bmm(a, b, trans_b), want, rtol=1e-5, atol=1e-5)


@needs_openblas
@pytest.mark.parametrize("m", [128, 1024])
def test_split_products_at_two_threads(m):
    # column blocks (up to ROW_SPLIT rows) or row blocks, one sgemm call per thread
    x, w = _rand(m, 768), _rand(3072, 768, seed=1)
    a, b = _rand(24, 64, 32, seed=3), _rand(24, 50, 32, seed=4)
    with qops.threads(2):
        y, s = _blas.linear(x, w), _blas.bmm(a, b, True)
        assert np.array_equal(y, _blas.linear(x, w))          # repeatable
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(s, a @ b.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


@needs_openblas
def test_openblas_threads_restored():
    get, set_ = _blas._openblas()[:2]
    before = get()
    try:
        set_(2)
        _blas.linear(_rand(64, 256), _rand(512, 256, seed=1))
        assert get() == 2
        with _blas.single_threaded():
            assert get() == 1
        assert get() == 2
    finally:
        set_(before)


def test_transformer_layer_at_one_and_two_threads():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0).eval()
    m = nn.from_torch(layer)
    x = _rand(10, 3, 64)
    with torch.no_grad():
        want = layer(torch.from_numpy(x)).numpy()
    for n in (1, 2):
        with qops.threads(n):
            np.testing.assert_allclose(m(x), want, rtol=1e-4, atol=2e-5)


def test_show_config_names_the_blas(capsys):
    qops.show_config()
    assert "numpy BLAS (float layers)" in capsys.readouterr().out
    assert isinstance(_blas.describe(), str)


def test_float_linear_keeps_its_contract():
    # fo.linear: 1-d and 3-d inputs, bias, a feature mismatch
    w, b = _rand(5, 4), _rand(5, seed=1)
    x = _rand(2, 3, 4)
    np.testing.assert_allclose(fo.linear(x, w, b), x @ w.T + b, rtol=1e-5, atol=1e-6)
    assert fo.linear(x[0, 0], w, None).shape == (5,)
    with pytest.raises(ValueError, match="features"):
        fo.linear(_rand(2, 3), w, None)
