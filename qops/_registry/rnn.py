"""Registry entries of the rnn family: the LSTM, GRU and Elman cell steps, and the dynamic
quantized LSTM and GRU layers built on them (with qops' dynamic linear for the gate GEMMs)."""
import numpy as np

from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

F32 = np.float32

# -- tolerance with PyTorch ---------------------------------------------------------------------
#
# The sigmoid is PyTorch's vector sigmoid, 1 / (exp(0 - x) + 1) with SLEEF's float32 expf (u10,
# fused multiply-adds), bit for bit (tests/test_rnn.py checks 2.6e6 values). PyTorch's tanh is
# not reproducible (its x86 build takes it from MKL on the vector body): qops rounds its own
# float64 expm1 once (qops/_ref/rnn.py), correctly rounded on the values tested; PyTorch's
# differs from it on 0.9% of values by 1 ulp (2.6e6 values). PyTorch's scalar tail (the last
# len % 32 columns of a row) takes std::exp for the sigmoid (0.15% of values 1-2 ulps off the
# vector formula). The cell's products and sums are rounded in PyTorch's order, so the steps
# agree to a few ulps.
STEP_RTOL, STEP_ATOL = 2e-6, 3e-7
STEP_TOLERANCE = (
    f"abs(ours - torch) <= {STEP_ATOL} + {STEP_RTOL} abs(torch): the sigmoid is PyTorch's vector "
    "sigmoid bit for bit (SLEEF expf); PyTorch's tanh (MKL on its vector body) differs from qops' "
    "float64 tanh rounded once by 1 ulp on 0.9% of values, and its scalar tail (len % 32 "
    "columns) takes std::exp for the sigmoid (<= 2 ulps)")

# A layer feeds each step's h to the next step's dynamic quantization: an ulp of difference can
# move a value across a rounding boundary of the activation quantizer, which changes one int8
# input of the next GEMM by 1. The gate GEMMs themselves are bit-exact (linear_dynamic).
LAYER_ATOL = 1e-4
LAYER_TOLERANCE = (
    f"max abs(ours - torch) <= {LAYER_ATOL}: the gate GEMMs and the sigmoid are bit-exact; the "
    "tanh differs by <= 1 ulp (see the step ops), which the next step's dynamic quantization of "
    "h can turn into a one-step change of an int8 input (measured: 97.5% of a 2-layer LSTM's "
    "outputs bit-exact, max difference over 60 random layers 1.2e-7)")


def _close(rtol, atol):
    def compare(case, ours, theirs):
        a = ours if isinstance(ours, tuple) else (ours,)
        b = theirs if isinstance(theirs, tuple) else (theirs,)
        a, b = _flat(a), _flat(b)
        assert len(a) == len(b), f"{case.label}: {len(a)} results vs {len(b)}"
        for x, y in zip(a, b):
            x, y = np.asarray(x), np.asarray(y)
            assert x.shape == y.shape, f"{case.label}: shape {x.shape} vs {y.shape}"
            assert x.dtype == np.float32, f"{case.label}: dtype {x.dtype}"
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=case.label)
    return compare


def _flat(t):
    out = []
    for v in t:
        if isinstance(v, tuple):
            out.extend(_flat(v))
        else:
            out.append(v)
    return out


# -- step ops -----------------------------------------------------------------------------------

_WIDTH = {"lstm": 4, "gru": 3, "rnn": 1}


def _step_arrays(r, kind, batch, hidden, mag):
    g = _WIDTH[kind] * hidden
    gi = (r.standard_normal((batch, g)) * mag).astype(F32)
    gh = (r.standard_normal((batch, g)) * mag).astype(F32)
    s = (r.standard_normal((batch, hidden)) * mag).astype(F32)
    return gi, gh, s


def _step_case(kind, gi, gh, s, label, relu=False):
    if kind == "lstm":
        return Case((gi, gh, s), label=label)
    if kind == "gru":
        return Case((gi, gh, s), label=label)
    return Case((gi, gh, "relu" if relu else "tanh"), label=label)


def _step_cases(kind):
    def cases():
        r = u.rng({"lstm": 51, "gru": 52, "rnn": 53}[kind])
        out = []
        for hidden in u.EDGE_LENGTHS[1:]:
            for batch in (1, 3):
                gi, gh, s = _step_arrays(r, kind, batch, hidden, 3.0)
                out.append(_step_case(kind, gi, gh, s, f"b{batch}-h{hidden}",
                                      relu=hidden % 2 == 1))
        # saturating gates (|x| up to 40: exp under/overflow paths, tanh clamp at 20)
        gi, gh, s = _step_arrays(r, kind, 4, 33, 20.0)
        out.append(_step_case(kind, gi, gh, s, "huge"))
        # tiny values (tanh(x) ~ x, sigmoid ~ 1/2), exact zeros and signed zeros
        gi, gh, s = _step_arrays(r, kind, 2, 17, 1e-6)
        gi[0, :5] = 0.0
        gh[0, :5] = -0.0
        out.append(_step_case(kind, gi, gh, s, "tiny"))
        # a batch large enough for several threads
        gi, gh, s = _step_arrays(r, kind, 64, 256, 2.0)
        out.append(_step_case(kind, gi, gh, s, "b64-h256"))
        # non-contiguous inputs (the op copies them)
        gi, gh, s = _step_arrays(r, kind, 6, 16, 2.0)
        out.append(_step_case(kind, gi[::2], gh[::2], s[::2], "strided"))
        gi, gh, s = _step_arrays(r, kind, 0, 8, 1.0)
        out.append(_step_case(kind, gi, gh, s, "empty"))
        return out
    return cases


def _step_strategy(kind):
    def strategy():
        from hypothesis import strategies as st

        def build(args):
            batch, hidden, mag, seed, relu = args
            r = u.rng(seed)
            gi, gh, s = _step_arrays(r, kind, batch, hidden, mag)
            return _step_case(kind, gi, gh, s, f"b{batch}-h{hidden}-m{mag:g}", relu=relu)
        return st.tuples(st.integers(0, 9), st.integers(1, 80),
                         st.sampled_from([1e-3, 0.5, 2.0, 6.0, 30.0]), st.integers(0, 2**31),
                         st.booleans()).map(build)
    return strategy


def _torch_lstm_step(case):
    import torch
    gi, gh, c = (torch.from_numpy(np.ascontiguousarray(a)) for a in case.args)

    def run():
        # PyTorch's CPU LSTMCell (aten/src/ATen/native/RNN.cpp) on the same pre-activations
        gates = gh.clone().add_(gi)
        i, f, g, o = gates.unsafe_chunk(4, 1)
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        cy = (f * c).add_(i * g)
        return o * cy.tanh(), cy
    return run


def _torch_gru_step(case):
    import torch
    gi, gh, h = (torch.from_numpy(np.ascontiguousarray(a)) for a in case.args)

    def run():
        ir, iz, inn = gi.unsafe_chunk(3, 1)
        hr, hz, hn = gh.clone().unsafe_chunk(3, 1)
        r = hr.add_(ir).sigmoid()
        z = hz.add_(iz).sigmoid()
        n = inn.add(hn.mul_(r)).tanh()
        return (h - n).mul_(z).add_(n)
    return run


def _torch_rnn_step(case):
    import torch
    gi, gh = (torch.from_numpy(np.ascontiguousarray(a)) for a in case.args[:2])
    relu = case.args[2] == "relu"

    def run():
        s = gh.clone().add_(gi)
        return s.relu() if relu else s.tanh()
    return run


def _bench_step(kind, batch, hidden):
    def build():
        gi, gh, s = _step_arrays(u.rng(61), kind, batch, hidden, 2.0)
        return _step_case(kind, gi, gh, s, f"b{batch}-h{hidden}")
    return build


# -- dynamic quantized layers -------------------------------------------------------------------

def run_layer(module, input):
    """Run a dynamic quantized LSTM or GRU module on `input` (the registry's layer op).

    Parameters
    ----------
    module : qops.nn.quantized.dynamic.LSTM or GRU
    input : float (seq, batch, input_size) (batch first if the module says so)
    """
    if not isinstance(module, (nnqd_rnn().LSTM, nnqd_rnn().GRU)):
        raise TypeError(f"module must be a dynamic quantized LSTM or GRU; got "
                        f"{type(module).__name__}")
    return module(input)


def nnqd_rnn():
    from qops.nn.quantized.dynamic import _rnn
    return _rnn


def _layer(mode, input_size, hidden, layers, bidirectional, batch_first, seed):
    """A qops dynamic quantized layer from a float one with seeded weights."""
    from qops.nn import GRU, LSTM
    from qops.nn.quantized import dynamic as nnqd
    r = u.rng(seed)
    fcls, qcls = (LSTM, nnqd.LSTM) if mode == "LSTM" else (GRU, nnqd.GRU)
    fm = fcls(input_size, hidden, layers, batch_first=batch_first,
              bidirectional=bidirectional)
    bound = 1.0 / np.sqrt(hidden)
    fm.load_state_dict({k: r.uniform(-bound, bound, v.shape).astype(F32)
                        for k, v in fm.state_dict().items()})
    return qcls.from_float(fm)


def _layer_case(mode, input_size, hidden, layers, bidirectional, batch_first, seq, batch,
                seed, mag=1.0):
    m = _layer(mode, input_size, hidden, layers, bidirectional, batch_first, seed)
    r = u.rng(seed + 1)
    shape = (batch, seq, input_size) if batch_first else (seq, batch, input_size)
    x = (r.standard_normal(shape) * mag).astype(F32)
    return Case((m, x), label=f"{mode}-i{input_size}-h{hidden}-l{layers}-bi{int(bidirectional)}"
                             f"-bf{int(batch_first)}-t{seq}-b{batch}")


def _layer_cases(mode):
    def cases():
        out = []
        seed = 70
        for hidden, layers, bi, bf, seq, batch in (
                (1, 1, False, False, 1, 1), (15, 1, False, False, 5, 3),
                (16, 2, True, False, 4, 2), (17, 2, False, True, 6, 1),
                (33, 1, True, True, 3, 4), (64, 2, True, False, 7, 5)):
            seed += 2
            out.append(_layer_case(mode, 7, hidden, layers, bi, bf, seq, batch, seed))
        out.append(_layer_case(mode, 5, 8, 1, False, False, 4, 2, 90, mag=50.0))
        return out
    return cases


def _layer_strategy(mode):
    def strategy():
        from hypothesis import strategies as st

        def build(a):
            return _layer_case(mode, *a)
        return st.tuples(st.integers(1, 20), st.integers(1, 40), st.integers(1, 2),
                         st.booleans(), st.booleans(), st.integers(1, 8), st.integers(1, 4),
                         st.integers(0, 2**20)).map(build)
    return strategy


def _torch_layer(case):
    import torch
    import torch.ao.nn.quantized.dynamic as tqd
    m, x = case.args
    cls = tqd.LSTM if m.mode == "LSTM" else tqd.GRU
    tm = cls(m.input_size, m.hidden_size, m.num_layers, True, m.batch_first, 0.0,
             m.bidirectional, dtype=torch.qint8)
    wb = {k: u.to_torch(v) for k, v in m.get_weight().items()}
    wb.update({k: torch.from_numpy(v.copy()) for k, v in m.get_bias().items()})
    tm.set_weight_bias(wb)
    tx = torch.from_numpy(np.ascontiguousarray(x))

    def run():
        with torch.no_grad():
            return tm(tx)
    return run


def _bench_layer(mode, batch):
    def build():
        return _layer_case(mode, 512, 512, 2, False, False, 64, batch, 99)
    return build


SPECS = [
    OpSpec("lstm_step", "rnn", ("lstm_cell",), F.lstm_step, _step_cases("lstm"),
           _step_strategy("lstm"),
           bench={"b1_h512": _bench_step("lstm", 1, 512),
                  "b16_h512": _bench_step("lstm", 16, 512)},
           torch=_torch_lstm_step, compare=_close(STEP_RTOL, STEP_ATOL),
           tolerance=STEP_TOLERANCE),
    OpSpec("gru_step", "rnn", ("gru_cell",), F.gru_step, _step_cases("gru"),
           _step_strategy("gru"),
           bench={"b1_h512": _bench_step("gru", 1, 512),
                  "b16_h512": _bench_step("gru", 16, 512)},
           torch=_torch_gru_step, compare=_close(STEP_RTOL, STEP_ATOL),
           tolerance=STEP_TOLERANCE),
    OpSpec("rnn_step", "rnn", ("rnn_cell",), F.rnn_step, _step_cases("rnn"),
           _step_strategy("rnn"),
           bench={"b16_h512": _bench_step("rnn", 16, 512)},
           torch=_torch_rnn_step, compare=_close(STEP_RTOL, STEP_ATOL),
           tolerance=STEP_TOLERANCE),
    OpSpec("lstm_dynamic", "rnn", ("lstm_cell", "pack_linear", "lstm_dynamic_layer"), run_layer,
           _layer_cases("LSTM"),
           _layer_strategy("LSTM"),
           bench={"h512_l2_t64_b1": _bench_layer("LSTM", 1),
                  "h512_l2_t64_b16": _bench_layer("LSTM", 16)},
           torch=_torch_layer, compare=_close(0.0, LAYER_ATOL), tolerance=LAYER_TOLERANCE),
    OpSpec("gru_dynamic", "rnn", ("gru_cell", "pack_linear", "gru_dynamic_layer"), run_layer,
           _layer_cases("GRU"),
           _layer_strategy("GRU"),
           bench={"h512_l2_t64_b1": _bench_layer("GRU", 1),
                  "h512_l2_t64_b16": _bench_layer("GRU", 16)},
           torch=_torch_layer, compare=_close(0.0, LAYER_ATOL), tolerance=LAYER_TOLERANCE),
]
