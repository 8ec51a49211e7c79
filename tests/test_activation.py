"""Activation family: what the registry tests cannot see (errors, in-place ops, qparams rules,
0-d inputs, the number of tie differences against PyTorch)."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._registry import _util as u
from qops._registry.activation import near_half

BACKENDS = ["ref", "fast"]


def _q(shape=(4, 70), dtype=qops.quint8, scale=0.05, zp=None, seed=0, layout="c"):
    return u.random_qtensor(u.rng(seed), shape, dtype, scale=scale, zero_point=zp, layout=layout)


@pytest.mark.parametrize("backend", BACKENDS)
def test_relu_inplace_modifies_raw_data(backend):
    with qops.backend(backend):
        q = _q(layout="t")
        expected = F.relu(q).int_repr()
        view = q._int
        out = F.relu_(q)
        assert out is q and q._int is view
        np.testing.assert_array_equal(q.int_repr(), expected)
        q2 = _q(seed=1)
        e2 = F.hardtanh(q2, -0.3, 0.4).int_repr()
        assert F.hardtanh(q2, -0.3, 0.4, inplace=True) is q2
        np.testing.assert_array_equal(q2.int_repr(), e2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_changes_qparams_where_pytorch_does(backend):
    with qops.backend(backend):
        q = _q(dtype=qops.qint8, zp=3)
        expected = F.hardsigmoid(q)
        assert F.hardsigmoid(q, inplace=True) is q
        assert (q.q_scale(), q.q_zero_point()) == (1 / 256, -128)
        np.testing.assert_array_equal(q.int_repr(), expected.int_repr())
        q = _q(zp=7)
        expected = F.leaky_relu(q, 0.2)
        assert F.leaky_relu(q, 0.2, inplace=True) is q
        np.testing.assert_array_equal(q.int_repr(), expected.int_repr())


def test_fixed_output_qparams():
    for d, (hs, ht) in ((qops.quint8, (0, 128)), (qops.qint8, (-128, 0))):
        q = _q(dtype=d)
        assert (F.hardsigmoid(q).q_scale(), F.hardsigmoid(q).q_zero_point()) == (0.00390625, hs)
        assert (F.sigmoid(q).q_scale(), F.sigmoid(q).q_zero_point()) == (0.00390625, hs)
        assert (F.tanh(q).q_scale(), F.tanh(q).q_zero_point()) == (0.0078125, ht)
        for f in (F.relu, F.relu6, F.leaky_relu, lambda t: F.hardtanh(t),
                  lambda t: F.clamp(t, -1, 1)):
            out = f(q)
            assert (out.q_scale(), out.q_zero_point()) == (q.q_scale(), q.q_zero_point())
        out = F.hardswish(q, 0.3, 5)
        assert (out.q_scale(), out.q_zero_point()) == (0.3, 5)
        out = F.leaky_relu(q, 0.1, scale=0.2, zero_point=9)
        assert (out.q_scale(), out.q_zero_point()) == (0.2, 9)


def test_bounds_use_scalar_quantize():
    # s=1, zp=97, min=-0.5: x*inv + zp = 96.5 -> 96 (half to even, zero point added first)
    q = qops.make_per_tensor_quantized_tensor(np.arange(90, 105, dtype=np.uint8), 1.0, 97)
    out = F.hardtanh(q, -0.5, 3.5).int_repr()
    assert out.min() == 96 and out.max() == 100
    out = F.clamp(q, None, 2.0).int_repr()
    assert out.min() == 90 and out.max() == 99


def test_zero_dim_and_empty():
    for backend in BACKENDS:
        with qops.backend(backend):
            q = qops.make_per_tensor_quantized_tensor(np.array(3, np.uint8), 0.1, 10)
            out = F.relu(q)
            assert out.shape == () and int(out.int_repr()) == 10
            assert F.hardswish(q, 0.1, 10).shape == ()
            e = _q(shape=(0, 5))
            assert F.sigmoid(e).shape == (0, 5)


@pytest.mark.parametrize("f", [F.relu, F.relu6, F.hardsigmoid, F.sigmoid, F.tanh,
                               lambda t: F.hardswish(t, 0.1, 0), lambda t: F.elu(t, 0.1, 0)])
def test_bad_inputs(f):
    with pytest.raises(TypeError, match="input must be a quantized tensor"):
        f(np.zeros(3, np.uint8))
    q32 = qops.quantize_per_tensor(np.zeros(3, np.float32), 0.1, 0, qops.qint32)
    with pytest.raises(TypeError, match="input must have dtype quint8 or qint8"):
        f(q32)
    pc = qops.quantize_per_channel(np.zeros((2, 3), np.float32), [0.1, 0.2], [0, 0], 0, qops.quint8)
    with pytest.raises(TypeError, match="per-tensor"):
        f(pc)


def test_bad_arguments():
    q = _q()
    with pytest.raises(ValueError, match="scale"):
        F.hardswish(q, 0.0, 0)
    with pytest.raises(ValueError, match="zero_point"):
        F.elu(q, 0.1, 300)
    with pytest.raises(TypeError, match="negative_slope"):
        F.leaky_relu(q, "0.1")
    with pytest.raises(ValueError, match="both scale and zero_point"):
        F.leaky_relu(q, 0.1, scale=0.2)
    with pytest.raises(ValueError, match="inplace"):
        F.leaky_relu(q, 0.1, True, 0.2, 3)
    with pytest.raises(ValueError, match="min_val must not be NaN"):
        F.hardtanh(q, float("nan"), 1.0)
    with pytest.raises(ValueError, match="at least one"):
        F.clamp(q, None, None)
    with pytest.raises(TypeError, match="inplace must be a bool"):
        F.relu(q, 1)
    ro = qops.make_per_tensor_quantized_tensor(np.broadcast_to(np.uint8(3), (4,)), 0.1, 0)
    with pytest.raises(ValueError, match="writeable"):
        F.relu_(ro)


def test_lut_matches_formula_on_every_raw_value():
    # all 256 raw values, every float activation, both dtypes, odd zero points: fast == ref
    for d in (qops.quint8, qops.qint8):
        raw = np.arange(d.qmin, d.qmax + 1).astype(d.storage)
        for zp in (d.qmin, 1, d.qmax):
            q = qops.make_per_tensor_quantized_tensor(raw, 0.037, zp)
            for f in (lambda t: F.hardswish(t, 0.02, 3), lambda t: F.elu(t, 0.03, 5, 1.3),
                      lambda t: F.leaky_relu(t, 0.1, scale=0.01, zero_point=1), F.hardsigmoid,
                      F.sigmoid, F.tanh):
                with qops.backend("ref"):
                    a = f(q).int_repr()
                with qops.backend("fast"):
                    b = f(q).int_repr()
                np.testing.assert_array_equal(a, b)


def test_tie_differences_with_pytorch_are_few(torch):
    """Tie-heavy data (leaky_relu, same qparams; hardswish to half the scale), one thread: the
    elements PyTorch computes with its scalar tail are the only ones allowed to differ, so the
    differences stay a small share and sit exactly at near-ties."""
    import torch.ao.nn.quantized.functional as qF
    torch.set_num_threads(1)
    total = differ = 0
    for seed, n in enumerate((10000, 4099, 777)):
        q = _q(shape=(n,), zp=131, scale=0.1, seed=seed)
        t = u.to_torch(q)
        for ours, theirs in ((F.leaky_relu(q, 0.25), qF.leaky_relu(t, 0.25)),
                             (F.hardswish(q, 0.05, 131), qF.hardswish(t, 0.05, 131))):
            a = ours.int_repr().astype(np.int64)
            b = theirs.int_repr().numpy().astype(np.int64)
            d = a != b
            assert np.abs(a - b).max() <= 1
            total += a.size
            differ += int(d.sum())
            # only the scalar tail (last n % 64 elements) takes PyTorch's other formula
            assert not d[: n - n % 64].any()
    assert differ / total < 0.01


def test_near_half():
    assert near_half(np.array([0.5, 2.5000001, -3.5]))[0:3].all()
    assert not near_half(np.array([0.4, 2.0, 7.75])).any()


@pytest.mark.parametrize("dtype", [qops.quint8, qops.qint8])
def test_clamps_at_every_offset_and_length(dtype):
    # the clamp kernel shifts aligned loads together when the input lies a multiple of 4
    # bytes off the output's alignment (and runs a plain loop otherwise): every offset within
    # a cache line, lengths around its 256-byte floor and its 64-byte steps, in place too
    r = u.rng(21)
    base = np.empty(4096 + 128, np.uint8 if dtype is qops.quint8 else np.int8)
    info = np.iinfo(base.dtype)
    for off in range(64):
        for n in (255, 256, 257, 319, 320, 1000, 4096):
            raw = base[off:off + n]
            raw[:] = r.integers(info.min, info.max + 1, n)
            q = qops.make_per_tensor_quantized_tensor(raw, 0.1, 5)
            want = np.clip(raw, 5, info.max)
            got = F.relu(q).int_repr()
            np.testing.assert_array_equal(got, want, err_msg=f"relu offset {off} length {n}")
            got = F.hardtanh(q, -2.0, 3.0).int_repr()
            np.testing.assert_array_equal(got, np.clip(raw, 5 - 20, 5 + 30),
                                          err_msg=f"hardtanh offset {off} length {n}")
            F.relu_(q)
            np.testing.assert_array_equal(q.int_repr(), want, err_msg=f"relu_ offset {off}")


def test_float_gelu_keeps_a_channels_last_layout():
    # a channels-last conv's dequantized output reaches GELU as it lies (no copy into C order
    # first); the result lies alike and equals the C-order result, on both backends
    x = np.random.default_rng(3).standard_normal((2, 5, 6, 7)).astype(np.float32)
    cl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for backend in ("ref", "fast"):
        with qops.backend(backend):
            want = F.gelu(x)
            got = F.gelu(cl)
        assert got.strides == cl.strides
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gelu_is_pytorchs_vector_formula(torch, backend, approximate):
    """GELU is ATen's vectorized one bit for bit (docs/semantics.md §6.1): the float GELU
    where oneDNN does not take PyTorch's exact form (its own erf there, a tolerance in the
    registry) and the tanh form everywhere, and the quantized GELU, which never goes to
    oneDNN."""
    torch.set_num_threads(1)
    r = np.random.default_rng(61)
    n = 1 << 18 if backend == "fast" else 1 << 14
    x = np.concatenate([(r.standard_normal(n) * s).astype(np.float32) for s in (0.1, 1, 4)])
    x[:12] = [np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 9.0, -9.0, 13.5, -13.5]
    with torch.backends.mkldnn.flags(enabled=False), qops.backend(backend):
        want = torch.nn.functional.gelu(torch.from_numpy(x), approximate=approximate).numpy()
        np.testing.assert_array_equal(F.gelu(x, approximate=approximate), want, strict=True)
        for scale, zp in ((0.02, 128), (0.07, 30)):
            tq = torch.quantize_per_tensor(torch.from_numpy(x[12:]), scale, zp, torch.quint8)
            q = qops.quantize_per_tensor(x[12:], scale, zp, qops.quint8)
            np.testing.assert_array_equal(
                F.gelu(q, approximate=approximate).int_repr(),
                torch.nn.functional.gelu(tq, approximate=approximate).int_repr().numpy())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["sigmoid", "tanh", "elu"])
def test_sigmoid_tanh_are_pytorchs_vector_formulas(torch, backend, op):
    """Quantized sigmoid, tanh and elu equal PyTorch's with no tie left (their float parts are
    SLEEF's expf, tanhf and expm1f, which qops computes; 1 thread and a multiple of 64 values,
    so PyTorch takes no scalar tail): every raw value of both 8-bit types at several input
    qparams."""
    torch.set_num_threads(1)
    for dtype, tdtype in ((qops.quint8, torch.quint8), (qops.qint8, torch.qint8)):
        info = np.iinfo(dtype.storage)
        raw = np.tile(np.arange(info.min, info.max + 1, dtype=dtype.storage), 4)
        for scale, zp in ((0.003, 5), (0.0371, -20), (0.1, 100), (0.9, 0)):
            zp = int(np.clip(zp, info.min, info.max))
            q = qops.make_per_tensor_quantized_tensor(raw, scale, zp)
            tq = torch._make_per_tensor_quantized_tensor(torch.from_numpy(raw), scale, zp)
            assert tq.dtype == tdtype
            if op == "elu":
                out = (0.08, 7 if dtype is qops.qint8 else 100, 0.37)
                with qops.backend(backend):
                    got = F.elu(q, *out)
                want = torch.ao.nn.quantized.functional.elu(tq, *out)
            else:
                with qops.backend(backend):
                    got = getattr(F, op)(q)
                want = getattr(torch, op)(tq)
            assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
            np.testing.assert_array_equal(got.int_repr(), want.int_repr().numpy(),
                                          err_msg=f"{op} {dtype} {scale} {zp}")
