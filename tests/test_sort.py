"""Sort family tests beyond the registry's: errors, k edge values, tie rule, long rows."""
import numpy as np
import pytest

import qops
from qops import functional as F

R = np.random.default_rng(6)


def _q(shape, dtype=qops.quint8, high=None):
    hi = dtype.qmax if high is None else high
    return qops.make_per_tensor_quantized_tensor(
        R.integers(dtype.qmin, hi + 1, size=shape).astype(dtype.storage), 0.1,
        0 if dtype.qmin < 0 else 128)


@pytest.fixture(params=["ref", "fast"])
def backend(request):
    with qops.backend(request.param):
        yield request.param


def test_topk_errors(backend):
    x = _q((3, 5))
    with pytest.raises(ValueError, match="k"):
        F.topk(x, 6)
    with pytest.raises(ValueError, match="k"):
        F.topk(x, -1)
    with pytest.raises(TypeError, match="k"):
        F.topk(x, 2.0)
    with pytest.raises(ValueError, match="dim"):
        F.topk(x, 1, dim=2)
    with pytest.raises(TypeError, match="largest"):
        F.topk(x, 1, largest=None)
    with pytest.raises(ValueError, match="k"):
        F.topk(_q(()), 0)


def test_sort_errors(backend):
    x = _q((3, 5))
    with pytest.raises(ValueError, match="dim"):
        F.sort(x, dim=-3)
    with pytest.raises(TypeError, match="descending"):
        F.sort(x, descending=1)
    with pytest.raises(TypeError, match="input"):
        F.sort(np.zeros(3))
    pc = qops.quantize_per_channel(np.zeros((2, 3), np.float32), [0.1, 0.2], [0, 0], 0, qops.quint8)
    for call in (lambda: F.sort(pc), lambda: F.argsort(pc), lambda: F.topk(pc, 1)):
        with pytest.raises(TypeError, match="per-tensor"):
            call()


def test_k_zero_and_k_n(backend):
    x = _q((4, 9), qops.qint8)
    v, i = F.topk(x, 0)
    assert v.shape == (4, 0) and i.shape == (4, 0) and i.dtype == np.int64
    v, i = F.topk(x, 9)
    sv, si = F.sort(x, descending=True)
    assert v.equal(sv) and np.array_equal(i, si)
    v, i = F.topk(x, 9, largest=False)
    sv, si = F.sort(x)
    assert v.equal(sv) and np.array_equal(i, si)


def test_negative_dim_and_noncontiguous(backend):
    base = _q((5, 6, 7))
    x = base.transpose(0, 2)                     # (7, 6, 5), not contiguous
    assert not x.is_contiguous()
    xc = x.contiguous()
    for dim in (0, 1, 2):
        a = F.sort(x, dim=dim - 3, descending=True)
        b = F.sort(xc, dim=dim, descending=True)
        assert a[0].equal(b[0]) and np.array_equal(a[1], b[1])
        a = F.topk(x, 3, dim=dim - 3)
        b = F.topk(xc, 3, dim=dim)
        assert a[0].equal(b[0]) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8, qops.qint32])
def test_all_equal_tie_rule(backend, dtype):
    x = qops.make_per_tensor_quantized_tensor(np.full((2, 70), 3, dtype.storage), 0.1, 0)
    for desc in (False, True):
        _, i = F.sort(x, descending=desc)
        np.testing.assert_array_equal(i, np.broadcast_to(np.arange(70), (2, 70)))
    for largest in (False, True):
        _, i = F.topk(x, 5, largest=largest)
        np.testing.assert_array_equal(i, np.broadcast_to(np.arange(5), (2, 5)))


def test_stable_flag_does_not_change_order(backend):
    x = _q((3, 200), high=3)                     # few distinct values: many ties
    for desc in (False, True):
        a = F.sort(x, descending=desc, stable=False)
        b = F.sort(x, descending=desc, stable=True)
        assert a[0].equal(b[0]) and np.array_equal(a[1], b[1])
        assert np.array_equal(F.argsort(x, descending=desc), a[1])


def test_qtensor_methods(backend):
    x = _q((4, 10))
    v, i = x.sort(dim=0, descending=True)
    w, j = F.sort(x, 0, True)
    assert v.equal(w) and np.array_equal(i, j)
    v, i = x.topk(2, dim=0)
    w, j = F.topk(x, 2, 0)
    assert v.equal(w) and np.array_equal(i, j)
    assert v.q_scale() == x.q_scale() and v.q_zero_point() == x.q_zero_point()


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_long_rows_threads_and_ref(dtype, kind):
    # Long single rows take the fast kernels' split-row paths (the registry's cases are small).
    n = 300001
    if kind == "uniform":
        x = _q((n,), dtype)
    else:
        raw = np.clip(np.rint(R.normal(0, 20, n)), dtype.qmin, dtype.qmax).astype(dtype.storage)
        x = qops.make_per_tensor_quantized_tensor(raw, 0.1, 0)
    with qops.backend("ref"):
        ref_sort = F.sort(x, descending=True)
        ref_topk = F.topk(x, 1000, largest=False)
    for threads in (1, 2):
        with qops.threads(threads):
            s = F.sort(x, descending=True)
            t = F.topk(x, 1000, largest=False)
        assert s[0].equal(ref_sort[0]) and np.array_equal(s[1], ref_sort[1])
        assert t[0].equal(ref_topk[0]) and np.array_equal(t[1], ref_topk[1])
    with qops.threads(2):
        for k in (1, 10, 70000):
            a = F.topk(x, k)
            with qops.backend("ref"):
                b = F.topk(x, k)
            assert a[0].equal(b[0]) and np.array_equal(a[1], b[1])


def test_topk_without_vbmi2():
    # The AVX-512 build collects top-k candidates with VBMI2 where the CPU has it, and one by
    # one elsewhere: with VBMI2 switched off, that path must agree with ref on the registry's
    # cases and on batches of rows (8 rows share one bound search) with ties and odd sizes.
    from qops._config import impl
    from qops._registry import all_specs
    with qops.backend("fast"):
        sort = impl("sort")
    spec = next(s for s in all_specs() if s.name == "topk")
    r = np.random.default_rng(11)
    extra = [qops.make_per_tensor_quantized_tensor(r.integers(0, 256, (m, n)).astype(np.uint8),
                                                   0.1, 0)
             for m, n in ((16, 1000), (19, 70), (24, 3), (8, 200))]
    extra.append(qops.make_per_tensor_quantized_tensor(np.full((17, 130), 7, np.int8), 0.1, 0))
    was = sort._topk_vbmi(False)
    try:
        for off in (False, True):
            sort._topk_vbmi(not off and was)
            for case in spec.cases():
                with qops.backend("ref"):
                    want = case.call(spec.op)
                with qops.backend("fast"):
                    got = case.call(spec.op)
                assert got[0].equal(want[0]) and np.array_equal(got[1], want[1]), case.label
            for q in extra:
                for k in sorted({1, min(10, q.shape[1]), min(64, q.shape[1]), q.shape[1]}):
                    with qops.backend("ref"):
                        want = F.topk(q, k)
                    for threads in (1, 2):
                        with qops.backend("fast"), qops.threads(threads):
                            got = F.topk(q, k)
                        assert got[0].equal(want[0]) and np.array_equal(got[1], want[1])
    finally:
        sort._topk_vbmi(was)
