"""Reduce family: errors, result shapes and qparams, the QTensor methods, first-occurrence
indices, and bit-exactness of mean against PyTorch's fast path (trailing dims)."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._registry import _util as u

BACKENDS = ["ref", "fast"]


def _q(shape=(3, 5, 7), dtype=qops.quint8, scale=0.05, zp=None, seed=0, layout="c"):
    return u.random_qtensor(u.rng(seed), shape, dtype, scale=scale, zero_point=zp, layout=layout)


@pytest.mark.parametrize("backend", BACKENDS)
def test_methods_and_shapes(backend):
    with qops.backend(backend):
        q = _q(zp=9)
        m = q.max()
        assert m.shape == () and (m.q_scale(), m.q_zero_point()) == (q.q_scale(), 9)
        assert int(m.int_repr()) == q.int_repr().max()
        assert int(q.min().int_repr()) == q.int_repr().min()
        v, i = q.max(1)
        assert v.shape == (3, 7) and i.shape == (3, 7) and i.dtype == np.int64
        v, i = q.min(-1, keepdim=True)
        assert v.shape == (3, 5, 1)
        r = F.max(q, 0)
        assert r.values.shape == (5, 7) and r.indices.shape == (5, 7)
        assert q.mean().shape == ()
        assert q.mean((0, 2), keepdim=True).shape == (1, 5, 1)
        assert q.mean([]).shape == ()
        assert (q.mean(1).q_scale(), q.mean(1).q_zero_point()) == (q.q_scale(), 9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_index_wins(backend):
    with qops.backend(backend):
        q = qops.make_per_tensor_quantized_tensor(np.array([[3, 7, 7, 1, 7], [1, 1, 0, 0, 2]],
                                                           np.uint8), 0.1, 3)
        v, i = F.max(q, 1)
        np.testing.assert_array_equal(i, [1, 4])
        v, i = F.min(q, 1)
        np.testing.assert_array_equal(i, [3, 2])
        v, i = F.max(q.transpose(0, 1).contiguous(), 0)
        np.testing.assert_array_equal(i, [1, 4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_rounds_half_to_even_on_raw_values(backend):
    with qops.backend(backend):
        q = qops.make_per_tensor_quantized_tensor(np.array([[1, 2], [3, 4], [2, 3]], np.uint8),
                                                  0.1, 0)
        np.testing.assert_array_equal(F.mean(q, 1).int_repr(), [2, 4, 2])
        q = qops.make_per_tensor_quantized_tensor(np.array([[-3, -2], [-1, 0]], np.int8), 0.1, 5)
        np.testing.assert_array_equal(F.mean(q, 1).int_repr(), [-2, 0])


def test_errors():
    q = _q()
    for f in (F.max, F.min, F.mean):
        with pytest.raises(TypeError, match="input must be a quantized tensor"):
            f(q.int_repr())
        with pytest.raises(ValueError, match="out of range"):
            f(q, 3)
        pc = qops.quantize_per_channel(np.zeros((2, 3), np.float32), [0.1, 0.2], [0, 0], 0,
                                       qops.quint8)
        with pytest.raises(TypeError, match="per-tensor"):
            f(pc)
    with pytest.raises(TypeError, match="dim must be an int"):
        F.max(q, (0, 1))
    with pytest.raises(ValueError, match="empty"):
        F.max(_q(shape=(0, 3)))
    with pytest.raises(ValueError, match="empty"):
        F.min(_q(shape=(2, 0)), 1)
    with pytest.raises(ValueError, match="empty"):
        F.mean(_q(shape=(2, 0)), 1)
    with pytest.raises(ValueError, match="twice"):
        F.mean(q, (1, -2))
    with pytest.raises(TypeError, match="keepdim"):
        F.mean(q, 1, keepdim=None)
    assert F.mean(_q(shape=(0, 4)), 1).shape == (0,)


@pytest.mark.parametrize("shape,dim", [((8, 64, 7, 7), (2, 3)), ((5, 33, 65), -1),
                                       ((3, 4, 5), None), ((2, 3, 70001), 2), ((4, 6, 9), (1, 2))])
@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
def test_mean_trailing_dims_bit_exact_with_pytorch(torch, shape, dim, dtype):
    q = _q(shape=shape, dtype=dtype, zp=3 if dtype is qops.qint8 else 130)
    t = u.to_torch(q)
    theirs = (torch.mean(t) if dim is None else torch.mean(t, dim)).int_repr().numpy()
    for backend in BACKENDS:
        with qops.backend(backend):
            ours = F.mean(q, dim).int_repr()
        np.testing.assert_array_equal(ours.reshape(theirs.shape), theirs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_rows_sum_exactly(backend):
    # sums beyond int32's reach of a naive 8-bit accumulator and past the chunk size
    with qops.backend(backend):
        q = qops.make_per_tensor_quantized_tensor(np.full((2, 200000), 255, np.uint8), 0.1, 0)
        np.testing.assert_array_equal(F.mean(q, 1).int_repr(), [255, 255])
        np.testing.assert_array_equal(F.mean(q).int_repr(), 255)
        q = qops.make_per_tensor_quantized_tensor(np.full((1, 70000, 3), -128, np.int8), 0.1, 0)
        np.testing.assert_array_equal(F.mean(q, 1).int_repr(), [[-128, -128, -128]])
