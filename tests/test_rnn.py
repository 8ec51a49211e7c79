"""Recurrent layers: float and dynamic quantized LSTM/GRU/RNN and cells against PyTorch.

The gate GEMMs of the dynamic layers are qops' dynamic linear (bit-exact with fbgemm); the
sigmoid is PyTorch's vector sigmoid bit for bit, the tanh differs from PyTorch's by <= 1
float32 ulp (qops/_registry/rnn.py states and measures the tolerances). The float layers
differ by float32 GEMM order as well.
"""
import os
import tempfile
import warnings

import numpy as np
import pytest

import qops
from qops import nn as qnn
from qops._registry import rnn as reg
from qops.nn.quantized import dynamic as nnqd

F32 = np.float32
FLOAT_ATOL = 2e-5          # float32 GEMMs in another summation order, plus SLEEF vs libm


def _flat(out):
    if isinstance(out, (tuple, list)):
        r = []
        for o in out:
            r.extend(_flat(o))
        return r
    return [np.asarray(out.detach().numpy() if hasattr(out, "detach") else out)]


def _max_diff(ours, theirs):
    a, b = _flat(ours), _flat(theirs)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape, (x.shape, y.shape)
        assert x.dtype == np.float32
    return max(float(np.abs(x.astype(np.float64) - y).max()) if x.size else 0.0
               for x, y in zip(a, b))


def _torch_states(torch, kind, layers, dirs, batch, hidden, proj, unbatched, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (layers * dirs,) + (() if unbatched else (batch,))
    h = torch.randn(shape + (proj or hidden,), generator=g)
    if kind == "LSTM":
        return (h, torch.randn(shape + (hidden,), generator=g))
    return h


def _np_states(hx):
    if isinstance(hx, tuple):
        return tuple(t.numpy() for t in hx)
    return hx.numpy()


FLOAT_CONFIGS = [
    ("LSTM", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("LSTM", dict(num_layers=1, bias=False)),
    ("LSTM", dict(num_layers=2, proj_size=3)),
    ("LSTM", dict(num_layers=2, proj_size=4, bidirectional=True)),
    ("GRU", dict(num_layers=3, bidirectional=True)),
    ("GRU", dict(num_layers=1, batch_first=True, bias=False)),
    ("RNN", dict(num_layers=2, nonlinearity="relu")),
    ("RNN", dict(num_layers=1, bidirectional=True, batch_first=True)),
]


@pytest.mark.parametrize("kind,kw", FLOAT_CONFIGS, ids=[f"{k}-{i}" for i, (k, _) in
                                                         enumerate(FLOAT_CONFIGS)])
@pytest.mark.parametrize("unbatched", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_float_layers_match_torch(torch, kind, kw, unbatched, with_state):
    torch.manual_seed(1)
    tm = getattr(torch.nn, kind)(6, 9, **kw).eval()
    qm = qnn.from_torch(tm)
    assert isinstance(qm, getattr(qnn, kind))
    assert list(qm.state_dict()) == list(tm.state_dict())
    seq, batch = 5, 3
    if unbatched:
        x = torch.randn(seq, 6)
    else:
        x = torch.randn(batch, seq, 6) if kw.get("batch_first") else torch.randn(seq, batch, 6)
    dirs = 2 if kw.get("bidirectional") else 1
    hx = (_torch_states(torch, kind, kw.get("num_layers", 1), dirs, batch, 9,
                        kw.get("proj_size", 0), unbatched, 3) if with_state else None)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = tm(x, hx)
    ours = qm(x.numpy(), None if hx is None else _np_states(hx))
    assert _max_diff(ours, theirs) <= FLOAT_ATOL


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("unbatched", [False, True])
def test_float_cells_match_torch(torch, kind, unbatched):
    torch.manual_seed(2)
    kw = dict(nonlinearity="relu") if kind == "RNNCell" else {}
    tm = getattr(torch.nn, kind)(5, 7, **kw)
    qm = qnn.from_torch(tm)
    x = torch.randn(5) if unbatched else torch.randn(4, 5)
    with torch.no_grad():
        theirs0 = tm(x)
        h = torch.randn(7) if unbatched else torch.randn(4, 7)
        hx = (h, h * 0.5) if kind == "LSTMCell" else h
        theirs1 = tm(x, hx)
    assert _max_diff(qm(x.numpy()), theirs0) <= FLOAT_ATOL
    assert _max_diff(qm(x.numpy(), _np_states(hx)), theirs1) <= FLOAT_ATOL


def _quantized_pair(torch, tmod, dtype):
    from qops.nn._torch import from_torch_quantized
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(tmod), dtype=dtype)
    return tq, from_torch_quantized(tq)


DYN_CONFIGS = [(k, h, layers, bi, bf, seq, batch)
               for k in ("LSTM", "GRU")
               for (h, layers, bi, bf, seq, batch) in ((1, 1, False, False, 1, 1),
                                                        (16, 2, True, False, 9, 3),
                                                        (33, 2, False, True, 17, 2),
                                                        (64, 3, True, True, 5, 6))]


@pytest.mark.parametrize("cfg", DYN_CONFIGS, ids=[f"{c[0]}-h{c[1]}-l{c[2]}-bi{int(c[3])}"
                                                  for c in DYN_CONFIGS])
@pytest.mark.parametrize("dtype", ["qint8", "float16"])
def test_dynamic_layers_match_torch(torch, cfg, dtype):
    kind, hidden, layers, bi, bf, seq, batch = cfg
    torch.manual_seed(hidden + layers)
    tmod = getattr(torch.nn, kind)(11, hidden, layers, batch_first=bf, bidirectional=bi).eval()
    tq, q = _quantized_pair(torch, tmod, getattr(torch, dtype))
    assert isinstance(q[0], getattr(nnqd, kind))
    assert q[0].dtype == (qops.qint8 if dtype == "qint8" else "float16")
    x = torch.randn((batch, seq, 11) if bf else (seq, batch, 11)) * 2
    hx = _torch_states(torch, kind, layers, 2 if bi else 1, batch, hidden, 0, False, 5)
    with torch.no_grad():
        for state in (None, hx):
            theirs = tq(x) if state is None else tq[0](x, state)
            ours = q(x.numpy()) if state is None else q[0](x.numpy(), _np_states(state))
            # qint8: gate GEMMs bit-exact, nonlinearities within 2 ulps (LAYER_TOLERANCE);
            # float16: fbgemm's fp16 GEMM sums in another order than numpy's float32 one.
            assert _max_diff(ours, theirs) <= (reg.LAYER_ATOL if dtype == "qint8" else 1e-5)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("dtype", ["qint8", "float16"])
def test_dynamic_cells_match_torch(torch, kind, dtype):
    torch.manual_seed(4)
    kw = dict(nonlinearity="relu") if kind == "RNNCell" else {}
    tq, q = _quantized_pair(torch, getattr(torch.nn, kind)(13, 21, **kw), getattr(torch, dtype))
    assert isinstance(q[0], getattr(nnqd, kind))
    x = torch.randn(5, 13) * 3
    h = torch.randn(5, 21)
    hx = (h, h * 2) if kind == "LSTMCell" else h
    with torch.no_grad():
        assert _max_diff(q(x.numpy()), tq(x)) <= reg.LAYER_ATOL
        assert _max_diff(q[0](x.numpy(), _np_states(hx)), tq[0](x, hx)) <= reg.LAYER_ATOL


def test_dynamic_lstm_mostly_bit_exact(torch):
    """Most outputs equal PyTorch's bit for bit (the sigmoid is PyTorch's; only the tanh's
    last-ulp differences remain)."""
    torch.manual_seed(6)
    tq, q = _quantized_pair(torch, torch.nn.LSTM(32, 64, 2).eval(), torch.qint8)
    x = torch.randn(20, 4, 32)
    with torch.no_grad():
        theirs = tq(x)[0].numpy()
    ours = q(x.numpy())[0]
    assert np.mean(ours == theirs) > 0.95         # measured: 0.975 (0.90 before the
    # sigmoid was PyTorch's own)
    assert np.abs(ours - theirs).max() <= reg.LAYER_ATOL


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_dynamic_fast_equals_ref(kind):
    m = reg._layer(kind, 9, 24, 2, True, False, 11)
    x = np.random.default_rng(0).standard_normal((7, 3, 9)).astype(F32)
    with qops.backend("ref"):
        ref = m(x)
    with qops.backend("fast"):
        fast = m(x)
    for a, b in zip(_flat(ref), _flat(fast)):
        np.testing.assert_array_equal(a, b, strict=True)


def _per_step(m, x, hx=None):
    """The layer run step by step in Python (dynamic linear per step, then the cell step),
    instead of the fused kernel that runs a layer's whole time loop."""
    import qops._ops.rnn as ops_rnn
    fused = ops_rnn._fused_hh
    ops_rnn._fused_hh = lambda *args: None
    try:
        return m(x, hx)
    finally:
        ops_rnn._fused_hh = fused


# hidden sizes around the vector widths; 1024 at batch 1 and 333 at batch 4 are split into a
# column block per thread at 2 threads (333: blocks of 167 and 166 columns); 7 steps of batch 3
# take the input GEMM in chunks of 6 steps and 1
FUSED_SHAPES = [(1, 1, 1), (17, 3, 1), (31, 2, 5), (64, 1, 16), (1024, 1, 1), (333, 3, 4),
                (24, 7, 3)]


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("hidden,steps,batch", FUSED_SHAPES)
@pytest.mark.parametrize("state", ["zeros", "given", "tiny", "positive"])
def test_fused_layer_equals_per_step(kind, hidden, steps, batch, state):
    """The fused time loop (fast and ref) gives the per-step path's bits, at 1 and 2 threads;
    the states pick each branch of the dynamic qparams (zero range, tiny range, min 0)."""
    r = np.random.default_rng(hidden + steps + batch)
    m = reg._layer(kind, 5, hidden, 2, hidden < 1000, False, 11)
    dirs = 2 if m.bidirectional else 1
    x = r.standard_normal((steps, batch, 5)).astype(F32)
    shape = (2 * dirs, batch, hidden)
    h = {"zeros": None, "given": r.standard_normal(shape).astype(F32),
         "tiny": (r.standard_normal(shape) * 1e-7).astype(F32),
         "positive": r.uniform(0, 3, shape).astype(F32)}[state]
    hx = None if h is None else ((h, h * F32(0.5)) if kind == "LSTM" else h)
    want = _flat(_per_step(m, x, hx))
    for backend, threads in (("ref", 1), ("fast", 1), ("fast", 2)):
        with qops.backend(backend), qops.threads(threads):
            got = _flat(m(x, hx))
        for a, b in zip(want, got):
            np.testing.assert_array_equal(b, a, strict=True, err_msg=f"{backend} {threads}")


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("amx", [True, False])
def test_fused_layer_amx_gemms_equal_ref(kind, amx):
    """On AMX CPUs the fused layer's gate GEMMs take AMX tiles where K is a multiple of 64 and
    16+ rows are multiplied (a batch of 16+, or the input GEMM's steps): both ways give ref's
    bits, over row tails (batch 20, the input GEMM's 3 steps of 7), both directions, threads."""
    from qops import _fast
    if "avx512" not in _fast.ISAS or _fast.ISA != "avx512":
        pytest.skip("the AMX path is in the avx512 build")
    kern = _fast.load("rnn")
    if amx and not kern._AMX:
        pytest.skip("this CPU has no AMX-INT8")
    was = kern._amx(amx)
    try:
        r = np.random.default_rng(7)
        for inp, hidden, steps, batch in ((64, 64, 3, 16), (128, 192, 7, 20), (64, 128, 4, 5)):
            m = reg._layer(kind, inp, hidden, 2, True, False, 13)
            x = r.standard_normal((steps, batch, inp)).astype(F32)
            with qops.backend("ref"):
                want = _flat(m(x))
            for threads in (1, 2):
                with qops.backend("fast"), qops.threads(threads):
                    got = _flat(m(x))
                for a, b in zip(want, got):
                    np.testing.assert_array_equal(b, a, strict=True,
                                                  err_msg=f"{inp} {hidden} {batch} {threads}")
    finally:
        kern._amx(was)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_fused_layer_refuses_nonfinite_states(kind):
    m = reg._layer(kind, 4, 6, 1, False, False, 3)
    x = np.zeros((2, 1, 4), F32)
    h = np.zeros((1, 1, 6), F32)
    bad = np.full((1, 1, 6), np.inf, F32)
    for backend in ("ref", "fast"):
        with qops.backend(backend):
            with pytest.raises(ValueError, match="h_0 must be finite"):
                m(x, (bad, h) if kind == "LSTM" else bad)
            if kind == "LSTM":
                with pytest.raises(ValueError, match="c_0 must be finite"):
                    m(x, (h, bad))


def test_quantize_dynamic_default_set():
    """PyTorch's default: Linear, LSTM, GRU and the three cells; RNN stays float."""
    from qops.quantization import quantize_dynamic
    model = qnn.Sequential(qnn.LSTM(4, 8), qnn.GRU(8, 8), qnn.LSTMCell(4, 8),
                           qnn.GRUCell(4, 8), qnn.RNNCell(4, 8), qnn.RNN(4, 8),
                           qnn.Linear(8, 2))
    for dtype in (qops.qint8, "float16"):
        q = quantize_dynamic(model, dtype=dtype)
        names = [type(m).__name__ for m in q.children()]
        assert names == ["LSTM", "GRU", "LSTMCell", "GRUCell", "RNNCell", "RNN", "Linear"]
        kinds = [type(m).__module__ for m in q.children()]
        assert all("dynamic" in k for i, k in enumerate(kinds) if i != 5)
        assert "dynamic" not in kinds[5]
        assert all(m.dtype == dtype for i, m in enumerate(q.children()) if i not in (5, 6))


@pytest.mark.parametrize("dtype", [qops.qint8, "float16"])
def test_save_load_round_trip(dtype):
    from qops.quantization import quantize_dynamic

    def build(proj):
        # PyTorch's dynamic LSTM has no projection: quantize_dynamic refuses one
        return qnn.Sequential(qnn.LSTM(4, 8, 2, bidirectional=True),
                              qnn.GRU(4, 5, batch_first=True), qnn.GRUCell(4, 5),
                              qnn.LSTMCell(4, 3), qnn.RNNCell(4, 3, nonlinearity="relu"),
                              qnn.RNN(4, 3, nonlinearity="relu"), qnn.LSTM(4, 6, proj_size=proj))

    x = np.random.default_rng(1).standard_normal((3, 2, 4)).astype(F32)
    for m in (build(2), quantize_dynamic(build(0), dtype=dtype)):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "m.qops")
            qops.save(m, p)
            m2 = qops.load(p)
        assert [type(c) for c in m2.children()] == [type(c) for c in m.children()]
        for c, c2 in zip(m.children(), m2.children()):
            inp = x[0] if "Cell" in type(c).__name__ else x
            for a, b in zip(_flat(c(inp)), _flat(c2(inp))):
                np.testing.assert_array_equal(a, b, strict=True)


# -- hostile inputs -----------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: qnn.LSTM(4, 6), lambda: nnqd.LSTM(4, 6),
                                  lambda: qnn.GRU(4, 6), lambda: nnqd.GRU(4, 6),
                                  lambda: qnn.RNN(4, 6)])
def test_layer_bad_inputs(make):
    m = make()
    with pytest.raises(ValueError, match="input"):
        m(np.zeros((3, 2, 5), F32))                  # wrong input size
    with pytest.raises(ValueError, match="input"):
        m(np.zeros((3, 2, 4, 1), F32))               # 4-D
    with pytest.raises(ValueError, match="input"):
        m(np.zeros((0, 2, 4), F32))                  # empty sequence
    with pytest.raises(ValueError, match="input"):
        m(np.full((3, 2, 4), np.nan, F32))
    with pytest.raises(TypeError, match="input"):
        m(np.zeros((3, 2, 4), np.int32))
    bad_h = np.zeros((2, 2, 6), F32)
    with pytest.raises((ValueError, TypeError), match="h"):
        m(np.zeros((3, 2, 4), F32), (bad_h, bad_h) if "LSTM" in type(m).__name__ else bad_h)


@pytest.mark.parametrize("make", [lambda: qnn.LSTMCell(4, 6), lambda: nnqd.LSTMCell(4, 6),
                                  lambda: nnqd.GRUCell(4, 6), lambda: nnqd.RNNCell(4, 6)])
def test_cell_bad_inputs(make):
    m = make()
    with pytest.raises(ValueError, match="input"):
        m(np.zeros((2, 5), F32))
    with pytest.raises(ValueError, match="input"):
        m(np.zeros((2, 3, 4), F32))
    with pytest.raises(ValueError, match="hx"):
        h = np.zeros((3, 6), F32)
        m(np.zeros((2, 4), F32), (h, h) if "LSTM" in type(m).__name__ else h)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="hidden_size"):
        qnn.LSTM(4, 0)
    with pytest.raises(ValueError, match="proj_size"):
        qnn.LSTM(4, 6, proj_size=6)
    with pytest.raises(TypeError, match="proj_size"):
        qnn.GRU(4, 6, proj_size=2)
    with pytest.raises(ValueError, match="dropout"):
        qnn.GRU(4, 6, dropout=2.0)
    with pytest.raises(ValueError, match="nonlinearity"):
        qnn.RNN(4, 6, nonlinearity="sigmoid")
    with pytest.raises(TypeError, match="dtype"):
        nnqd.LSTM(4, 6, dtype=qops.quint8)
    with pytest.raises(ValueError, match="proj_size"):
        nnqd.LSTM.from_float(qnn.LSTM(4, 6, proj_size=2))


@pytest.mark.parametrize("hidden", [16, 40, 70, 130])
def test_step_ops_special_values_fast_equals_ref(hidden):
    """NaN, infinities, signed zeros and the clamp and select edges (|x| = 20, 100, 104, exp's
    overflow) through the vector body (32 columns with AVX2, 64 with AVX-512) and the scalar
    tail give the reference's bits."""
    r = np.random.default_rng(hidden)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 20.0, -20.0, 100.0, -100.0,
                        1e-30, -1e-30, 3e38, -3e38, 19.999998, 0.5, -0.5], F32)
    edges = np.array([104.0, -104.0, 103.99999, -103.99999, 104.00001, -104.00001, 100.00001,
                      -100.00001, 88.72, -88.72, 87.3, -87.3, 128.0, -128.0, 1e-45, -np.nan],
                     F32)
    if hidden >= 70:
        special = np.concatenate([special, edges])
    gi = r.standard_normal((3, 4 * hidden)).astype(F32)
    gh = np.zeros_like(gi)
    k = special.size
    gi[0, :k] = special
    gi[1, 2 * hidden:2 * hidden + k] = special
    gi[2, -k:] = special
    gi[2, hidden:hidden + k] = special[::-1]
    c = r.standard_normal((3, hidden)).astype(F32)
    c[1, :k] = special
    from qops import functional as F
    calls = ((F.lstm_step, (gi, gh, c)), (F.gru_step, (gi[:, :3 * hidden], gh[:, :3 * hidden], c)),
             (F.rnn_step, (gi[:, :hidden], gh[:, :hidden], "tanh")))
    for op, args in calls:
        with qops.backend("ref"):
            want = op(*args)
        with qops.backend("fast"), qops.threads(1):
            got = op(*args)
        for a, b in zip(_flat(want), _flat(got)):
            np.testing.assert_array_equal(b, a, strict=True, err_msg=op.__name__)


def test_sigmoid_is_pytorchs_vector_sigmoid(torch):
    """The cells' sigmoid equals torch.sigmoid's vector body bit for bit (SLEEF's expf with
    FMA; docs/semantics.md §21): the reference on 2.6e6 values, the fast kernel through the
    LSTM step (i = sigmoid(-inf) = 0 and c = 1 make c' = f exactly)."""
    from qops import functional as F
    from qops._ref.rnn import sigmoid_f32
    torch.set_num_threads(1)
    rng = np.random.default_rng(21)
    x = np.concatenate([(rng.standard_normal(1 << 19) * s).astype(F32)
                        for s in (1e-3, 0.5, 3.0, 12.0, 60.0)])
    x[:32] = [0.0, -0.0, np.inf, -np.inf, 1e-30, -1e-30, 88.72, -88.72, 100.0, -100.0,
              100.00001, -100.00001, 104.0, -104.0, 104.00001, -104.00001, 3e38, -3e38, 87.3,
              -87.3, 1e-45, -1e-45, 16.635532, -16.635532, 0.5, -0.5, 2.0, -2.0, 9.0, -9.0,
              103.97208, -103.97208]
    want = torch.sigmoid(torch.from_numpy(x)).numpy()       # 2.6e6 values: the vector body
    np.testing.assert_array_equal(sigmoid_f32(x), want, strict=True)
    hidden = 4096
    rows = x[: x.size // hidden * hidden].reshape(-1, hidden)[:64]
    gi = np.zeros((rows.shape[0], 4 * hidden), F32)
    gi[:, :hidden] = -np.inf
    gi[:, hidden:2 * hidden] = rows
    c = np.ones((rows.shape[0], hidden), F32)
    with qops.backend("fast"):
        _, c_new = F.lstm_step(gi, np.zeros_like(gi), c)
    np.testing.assert_array_equal(c_new, torch.sigmoid(torch.from_numpy(rows)).numpy(),
                                  strict=True)


def test_step_ops_validate():
    from qops import functional as F
    c = np.zeros((2, 3), F32)
    with pytest.raises(ValueError, match="gi"):
        F.lstm_step(np.zeros((2, 11), F32), np.zeros((2, 12), F32), c)
    with pytest.raises(ValueError, match="gh"):
        F.gru_step(np.zeros((2, 9), F32), np.zeros((1, 9), F32), c)
    with pytest.raises(ValueError, match="nonlinearity"):
        F.rnn_step(c, c, "gelu")
    with pytest.raises(TypeError, match="c"):
        F.lstm_step(np.zeros((2, 12), F32), np.zeros((2, 12), F32), c.astype(np.int8))


def test_inputs_not_modified():
    m = nnqd.LSTM(4, 6, 2)
    x = np.random.default_rng(2).standard_normal((3, 2, 4)).astype(F32)
    h = np.ones((2, 2, 6), F32)
    c = np.ones((2, 2, 6), F32)
    keep = (x.copy(), h.copy(), c.copy())
    m(x, (h, c))
    for a, b in zip((x, h, c), keep):
        np.testing.assert_array_equal(a, b)


def test_demo_rnn(capsys):
    from qops.quantization import _demo_rnn
    assert _demo_rnn.main(["--n", "300"]) == 0
    out = capsys.readouterr().out
    acc = {line.split(" accuracy:")[0]: float(line.split(":")[1].split("%")[0])
           for line in out.splitlines() if " accuracy:" in line}
    assert acc["float32"] >= 95.0
    assert abs(acc["int8 dynamic"] - acc["float32"]) <= 2.0
