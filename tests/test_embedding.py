"""Embedding and EmbeddingBag, float and quantized: modules against PyTorch 2.13, conversion
(from_float, quantize/convert, from_torch), save/load, and hostile inputs. The ops themselves
(fast == ref, ref == PyTorch, threads) are covered by tests/test_registry.py."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qops
import qops.nn as qnn
import qops.nn.quantized as qnnq
from qops import functional as F
from qops._registry.embedding import random_bags, random_weight

F32 = np.float32


def _bags(seed, n, n_bags=9, max_len=7):
    return random_bags(np.random.default_rng(seed), n, n_bags, max_len)


def _tq_table(torch, w, dtype):
    """torch's quantized table of float weight w (observer + quantize_per_channel)."""
    from torch.ao.quantization.observer import PerChannelMinMaxObserver
    obs = PerChannelMinMaxObserver(dtype=dtype, qscheme=torch.per_channel_affine_float_qparams,
                                   ch_axis=0)
    obs(w)
    s, z = obs.calculate_qparams()
    return torch.quantize_per_channel(w, s.float(), z.float(), 0, dtype)


# -- float modules against PyTorch -------------------------------------------------------------

@given(seed=st.integers(0, 2**31), n=st.integers(1, 30), d=st.integers(1, 40),
       mode=st.sampled_from(["sum", "mean", "max"]), flags=st.integers(0, 7))
def test_float_embedding_bag_matches_torch(seed, n, d, mode, flags):
    from conftest import torch_or_skip
    torch = torch_or_skip()
    r = np.random.default_rng(seed)
    pad = int(r.integers(-n, n)) if flags & 1 else None
    last = bool(flags & 2)
    tm = torch.nn.EmbeddingBag(n, d, mode=mode, include_last_offset=last, padding_idx=pad)
    m = qnn.from_torch(tm)
    assert isinstance(m, qnn.EmbeddingBag)
    idx, off = random_bags(r, n, int(r.integers(0, 10)), 8)
    if last:
        off = np.concatenate([off, [idx.shape[0]]]).astype(np.int64)
    psw = r.uniform(-2, 2, idx.shape[0]).astype(F32) if (flags & 4 and mode == "sum") else None
    ours = m(idx, off, psw)
    theirs = tm(torch.from_numpy(idx), torch.from_numpy(off),
                None if psw is None else torch.from_numpy(psw)).detach().numpy()
    np.testing.assert_array_equal(ours, theirs, strict=True)


def test_float_embedding_matches_torch(torch):
    tm = torch.nn.Embedding(50, 13, padding_idx=-3)
    m = qnn.from_torch(tm)
    assert m.padding_idx == 47 and list(m.state_dict()) == ["weight"]
    idx = np.random.default_rng(1).integers(0, 50, (4, 6, 2))
    np.testing.assert_array_equal(m(idx), tm(torch.from_numpy(idx)).detach().numpy(),
                                  strict=True)


def test_float_2d_input(torch):
    tm = torch.nn.EmbeddingBag(20, 9, mode="max")
    idx = np.random.default_rng(2).integers(0, 20, (5, 4))
    np.testing.assert_array_equal(qnn.from_torch(tm)(idx),
                                  tm(torch.from_numpy(idx)).detach().numpy(), strict=True)


# -- quantized modules against PyTorch ---------------------------------------------------------

@pytest.mark.parametrize("d", [1, 8, 17, 64])
@pytest.mark.parametrize("module", ["Embedding", "EmbeddingBag"])
def test_from_float_matches_torch(torch, module, d):
    """qops' from_float (float_qparams_weight_only_qconfig) == torch's, values and lookups."""
    from torch.ao.quantization import float_qparams_weight_only_qconfig as tqc
    tnnq = torch.ao.nn.quantized
    tm = getattr(torch.nn, module)(300, d, **({"mode": "sum"} if module == "EmbeddingBag"
                                              else {}))
    with torch.no_grad():
        tm.weight.mul_(torch.rand(300, 1) * 4)
    tm.qconfig = tqc
    tq = getattr(tnnq, module).from_float(tm)
    m = qnn.from_torch(tm)
    m.qconfig = qops.quantization.float_qparams_weight_only_qconfig
    q = getattr(qnnq, module).from_float(m)
    tw = tq.weight()
    np.testing.assert_array_equal(q.weight().int_repr(), tw.int_repr().numpy())
    np.testing.assert_array_equal(q.weight().scales, tw.q_per_channel_scales().float().numpy())
    np.testing.assert_array_equal(q.weight().zero_points,
                                  tw.q_per_channel_zero_points().float().numpy())
    idx, off = _bags(3, 300, 40, 12)
    if module == "Embedding":
        ours, theirs = q(idx), tq(torch.from_numpy(idx))
    else:
        psw = np.random.default_rng(4).uniform(-1, 1, idx.shape[0]).astype(F32)
        ours = q(idx, off, psw)
        theirs = tq(torch.from_numpy(idx), torch.from_numpy(off), torch.from_numpy(psw))
    np.testing.assert_array_equal(ours, theirs.numpy(), strict=True)


@pytest.mark.parametrize("dtype", ["quint8", "quint4x2"])
@pytest.mark.parametrize("last", [False, True])
def test_from_torch_quantized_bag(torch, dtype, last):
    tdt = getattr(torch, dtype)
    w = torch.randn(500, 32) * torch.rand(500, 1) * 3
    tm = torch.ao.nn.quantized.EmbeddingBag(500, 32, mode="sum", include_last_offset=last,
                                            dtype=tdt)
    tm.set_weight(_tq_table(torch, w, tdt))
    m = qnnq.from_torch(tm)
    assert isinstance(m, qnnq.EmbeddingBag) and m.dtype == dtype
    idx, off = _bags(5, 500, 60, 20)
    if last:
        off = np.concatenate([off, [idx.shape[0]]]).astype(np.int64)
    for psw in (None, np.random.default_rng(6).uniform(0, 2, idx.shape[0]).astype(F32)):
        theirs = tm(torch.from_numpy(idx), torch.from_numpy(off),
                    None if psw is None else torch.from_numpy(psw)).numpy()
        np.testing.assert_array_equal(m(idx, off, psw), theirs, strict=True)


@pytest.mark.parametrize("dtype", ["quint8", "quint4x2"])
def test_from_torch_quantized_embedding(torch, dtype):
    w = torch.randn(40, 10)
    tm = torch.ao.nn.quantized.Embedding(40, 10, dtype=getattr(torch, dtype))
    tm.set_weight(_tq_table(torch, w, getattr(torch, dtype)))
    m = qnnq.from_torch(tm)
    assert m.dtype == dtype
    idx = np.random.default_rng(7).integers(0, 40, (3, 5))
    np.testing.assert_array_equal(m(idx), tm(torch.from_numpy(idx)).numpy(), strict=True)


def test_quantized_mean_is_mean_not_torch_sum(torch):
    """PyTorch's quantized EmbeddingBag sums whatever its mode; qops honours mode='mean'."""
    w = torch.randn(30, 8)
    tm = torch.ao.nn.quantized.EmbeddingBag(30, 8, mode="mean")
    tm.set_weight(_tq_table(torch, w, torch.quint8))
    m = qnnq.from_torch(tm)
    idx, off = _bags(8, 30, 10, 6)
    counts = np.maximum(np.diff(np.append(off, idx.shape[0])), 1).astype(F32)[:, None]
    summed = tm(torch.from_numpy(idx), torch.from_numpy(off)).numpy()
    np.testing.assert_array_equal(m(idx, off), summed / counts, strict=True)


def test_quantize_convert_workflow(torch):
    """qops.quantization.prepare/convert with float_qparams_weight_only_qconfig == torch's."""
    from torch.ao.quantization import float_qparams_weight_only_qconfig as tqc
    tm = torch.nn.Sequential(torch.nn.EmbeddingBag(100, 16, mode="sum"))
    tm[0].qconfig = tqc
    tq = torch.ao.quantization.convert(torch.ao.quantization.prepare(tm))
    m = qnn.from_torch(tm)
    m[0].qconfig = qops.quantization.float_qparams_weight_only_qconfig
    q = qops.quantization.convert(qops.quantization.prepare(m))
    assert isinstance(q[0], qnnq.EmbeddingBag)
    idx, off = _bags(9, 100, 20, 9)
    np.testing.assert_array_equal(q[0](idx, off), tq[0](torch.from_numpy(idx),
                                                        torch.from_numpy(off)).numpy(),
                                  strict=True)


def test_quantize_dynamic_with_float_qparams(torch):
    """quantize_dynamic({EmbeddingBag: float_qparams_weight_only_qconfig}) as PyTorch's."""
    from torch.ao.quantization import float_qparams_weight_only_qconfig as tqc
    tm = torch.nn.Sequential(torch.nn.EmbeddingBag(80, 32, mode="sum"), torch.nn.Linear(32, 4))
    tq = torch.ao.quantization.quantize_dynamic(tm, {torch.nn.EmbeddingBag: tqc})
    m = qnn.from_torch(tm)
    q = qops.quantization.quantize_dynamic(
        m, {qnn.EmbeddingBag: qops.quantization.float_qparams_weight_only_qconfig})
    assert isinstance(q[0], qnnq.EmbeddingBag) and isinstance(q[1], qnn.Linear)
    idx, off = _bags(13, 80, 15, 7)
    np.testing.assert_array_equal(q[0](idx, off), tq[0](torch.from_numpy(idx),
                                                        torch.from_numpy(off)).numpy(),
                                  strict=True)


# -- save / load ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["quint8", "quint4x2"])
def test_save_load_round_trip(tmp_path, dtype):
    r = np.random.default_rng(10)
    w = random_weight(r, 60, 24)
    model = qnn.Sequential(qnn.EmbeddingBag(60, 24, mode="max", padding_idx=3, _weight=w))
    qmodel = qnn.Sequential(qnnq.EmbeddingBag(60, 24, mode="mean", dtype=dtype,
                                              _weight=F.embedding_bag_prepack(w, dtype)),
                            qnnq.Embedding(60, 24, dtype=dtype,
                                           _weight=F.embedding_bag_prepack(w, dtype)))
    idx, off = _bags(11, 60, 12, 6)
    for m, run in ((model, lambda m: (m[0](idx, off),)),
                   (qmodel, lambda m: (m[0](idx, off), m[1](idx)))):
        path = tmp_path / "m.npz"
        qops.save(m, path)
        back = qops.load(path)
        for a, b in zip(run(m), run(back)):
            np.testing.assert_array_equal(a, b, strict=True)
    sd = qmodel[0].state_dict()
    assert list(sd) == ["weight_int", "weight_scales", "weight_zero_points"]
    fresh = qnnq.EmbeddingBag(60, 24, mode="mean", dtype=dtype)
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(fresh(idx, off), qmodel[0](idx, off), strict=True)


@pytest.mark.parametrize("cls", [qnn.Embedding, qnn.EmbeddingBag])
def test_float_module_tables_start_a_cache_line(tmp_path, cls):
    # a row of 64 floats is 4 lines from a line's start, 5 from numpy's usual 16 bytes past
    r = np.random.default_rng(13)
    w = r.standard_normal((50, 64)).astype(np.float32)
    for made in (cls(50, 64), cls(50, 64, _weight=w), cls.from_pretrained(w)):
        assert made.weight.ctypes.data % 64 == 0
    m = cls(50, 64)
    m.load_state_dict({"weight": w})
    assert m.weight.ctypes.data % 64 == 0
    np.testing.assert_array_equal(m.weight, w, strict=True)
    qops.save(m, tmp_path / "e.npz")
    assert qops.load(tmp_path / "e.npz").weight.ctypes.data % 64 == 0


# -- hostile inputs ------------------------------------------------------------------------------

@pytest.fixture
def table():
    return F.embedding_bag_prepack(random_weight(np.random.default_rng(12), 10, 8))


def test_out_of_range_indices(table):
    for bad in ([0, 10], [-1, 2]):
        with pytest.raises(ValueError, match="input"):
            F.quantized_embedding_bag(table, np.array(bad), np.array([0]))
        with pytest.raises(ValueError, match="input"):
            F.embedding_bag(np.array(bad), np.zeros((10, 3), F32), np.array([0]))
        with pytest.raises(ValueError, match="input"):
            F.quantized_embedding(table, np.array(bad))


@pytest.mark.parametrize("kind", ["quint8", "quint4x2", "float"])
@pytest.mark.parametrize("backend,threads", [("ref", 1), ("fast", 1), ("fast", 2)])
def test_out_of_range_index_found_by_the_kernel(kind, backend, threads):
    """The lookup kernels check every bag's indices before reading a row and report the
    first bad one in index order, whichever thread meets it (huge values do not crash)."""
    r = np.random.default_rng(5)
    n, d, bags = 50, 16, 600 if backend == "fast" else 12   # 600: two threads
    w = random_weight(r, n, d)
    table = w if kind == "float" else F.embedding_bag_prepack(w, kind)
    run = (F.embedding_bag if kind == "float" else
           lambda i, t, o, **kw: F.quantized_embedding_bag(t, i, o, **kw))
    idx = r.integers(0, n, bags * 5)
    off = np.arange(bags) * 5
    for first, later in ((7, bags * 5 - 1), (bags * 5 - 3, bags * 5 - 1), (bags * 2, 3)):
        bad = idx.copy()
        bad[later] = -2**62
        bad[first] = n + 1 + first
        if later < first:
            bad[later] = 0
        for mode in ("sum", "mean", "max"):
            with qops.backend(backend), qops.threads(threads):
                with pytest.raises(ValueError, match=rf"input holds index {n + 1 + first},"):
                    run(bad, table, off, mode=mode)
    # an entry after the last bag (include_last_offset) is still an index of input
    bad = idx.copy()
    bad[-1] = n
    with qops.backend(backend), qops.threads(threads):
        with pytest.raises(ValueError, match=f"input holds index {n},"):
            run(bad, table, np.array([0, 4]), include_last_offset=True)
        ok = run(idx, table, off, mode="sum")
    assert ok.shape == (bags, d)


def test_bad_offsets(table):
    idx = np.arange(6)
    with pytest.raises(ValueError, match="offsets"):
        F.quantized_embedding_bag(table, idx, np.array([0, 4, 2]))
    with pytest.raises(ValueError, match="offsets"):
        F.quantized_embedding_bag(table, idx, np.array([1, 4]))
    with pytest.raises(ValueError, match="offsets"):
        F.quantized_embedding_bag(table, idx, np.array([0, 7]), include_last_offset=True)
    with pytest.raises(ValueError, match="offsets"):
        F.quantized_embedding_bag(table, idx)
    with pytest.raises(ValueError, match="offsets"):
        F.quantized_embedding_bag(table, idx.reshape(2, 3), np.array([0]))
    with pytest.raises(TypeError, match="offsets"):
        F.quantized_embedding_bag(table, idx, np.array([0.0, 2.0]))


def test_wrong_types_and_arguments(table):
    with pytest.raises(TypeError, match="input"):
        F.quantized_embedding_bag(table, np.array([0.0, 1.0]), np.array([0]))
    with pytest.raises(TypeError, match="weight"):
        F.quantized_embedding_bag(np.zeros((3, 3), np.uint8), np.array([0]), np.array([0]))
    with pytest.raises(TypeError, match="quint4x2"):
        F.embedding_bag_4bit(table, np.array([0]), np.array([0]))
    with pytest.raises(ValueError, match="per_sample_weights"):
        F.quantized_embedding_bag(table, np.array([0]), np.array([0]), mode="mean",
                                  per_sample_weights=np.ones(1, F32))
    with pytest.raises(ValueError, match="per_sample_weights"):
        F.quantized_embedding_bag(table, np.array([0, 1]), np.array([0]),
                                  per_sample_weights=np.ones(3, F32))
    with pytest.raises(ValueError, match="mode"):
        F.quantized_embedding_bag(table, np.array([0]), np.array([0]), mode="median")
    with pytest.raises(ValueError, match="padding_idx"):
        F.quantized_embedding_bag(table, np.array([0]), np.array([0]), padding_idx=10)
    with pytest.raises(ValueError, match="embedding_dim"):
        F.embedding_bag_prepack(np.zeros((4, 7), F32), "quint4x2")
    with pytest.raises(ValueError, match="finite"):
        F.embedding_bag_prepack(np.array([[0.0, np.nan]], F32))
    with pytest.raises(TypeError, match="dtype"):
        F.embedding_bag_prepack(np.zeros((4, 8), F32), "qint8")
    with pytest.raises(ValueError, match="max_norm"):
        qnn.Embedding(4, 4, max_norm=1.0)


def test_inputs_not_modified_and_int32(table):
    idx = np.array([3, 1, 3, 0], np.int32)
    off = np.array([0, 2], np.int32)
    before = (idx.copy(), off.copy(), table.fused.copy())
    a = F.quantized_embedding_bag(table, idx, off)
    b = F.quantized_embedding_bag(table, idx.astype(np.int64), off.astype(np.int64))
    np.testing.assert_array_equal(a, b, strict=True)
    for x, y in zip(before, (idx, off, table.fused)):
        np.testing.assert_array_equal(x, y, strict=True)


def test_dequantize_is_one_entry_bags(table):
    rows = table.dequantize()
    np.testing.assert_array_equal(F.quantized_embedding(table, np.arange(10)), rows,
                                  strict=True)
    assert rows.shape == (10, 8) and rows.dtype == F32


# -- tables past the prefetch threshold --------------------------------------------------------

@pytest.mark.parametrize("kind", ["quint8", "quint4x2", "float"])
def test_large_tables_prefetch_path(kind):
    """Tables past the prefetch thresholds (64 KB, 256 KB at D <= 32, 512 KB float; 1.5 MB
    here) take the kernels' prefetching loops (rows a few entries ahead, sizes
    constant per D up to 64 and for 8-bit D = 128 in one pass, a loop beyond): fast equals
    ref bit for bit at 1 and 2 threads, for D around the vector widths, every mode, weights
    and padding, bags of 0 to 40 entries."""
    from qops._registry.embedding import random_packed
    r = np.random.default_rng(23)
    for d in (6, 16, 40, 64, 72, 128, 160):
        if kind == "quint4x2" and d % 2:
            continue
        row = 4 * d if kind == "float" else (d if kind == "quint8" else d // 2) + 8
        n = (3 << 19) // row                      # 1.5 MB: past every threshold
        table = (r.standard_normal((n, d)).astype(F32) if kind == "float"
                 else random_packed(r, n, d, kind))
        run = (F.embedding_bag if kind == "float" else
               lambda i, t, o, **kw: F.quantized_embedding_bag(t, i, o, **kw))
        idx, off = random_bags(r, n, 70, 40)
        pad = int(idx[3]) if idx.size > 3 else None
        psw = r.uniform(-2, 2, idx.shape[0]).astype(F32)
        for kw in ({"mode": "sum"}, {"mode": "max"}, {"mode": "mean", "padding_idx": pad},
                   {"mode": "sum", "per_sample_weights": psw, "padding_idx": pad}):
            with qops.backend("ref"):
                want = run(idx, table, off, **kw)
            for threads in (1, 2):
                with qops.backend("fast"), qops.threads(threads):
                    got = run(idx, table, off, **kw)
                np.testing.assert_array_equal(got, want, strict=True,
                                              err_msg=f"{kind} d={d} {kw.get('mode')}")


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("kind", ["quint8", "quint4x2", "float"])
def test_large_outputs_streamed(kind, big):
    """Outputs above 1 MB are written with non-temporal stores (D a multiple of 8; the bag
    pairs of D <= 32 too; with prefetched rows only on CPUs other than Intel's): fast equals
    ref bit for bit at 1 and 2 threads, an odd bag count leaving one bag to the calling
    thread, sum, mean with padding, weights; tables in cache and past the prefetch
    thresholds."""
    from qops._registry.embedding import random_packed
    r = np.random.default_rng(29)
    for d in (32, 128) if big else (16, 32, 64, 128):
        n_bags = (1 << 20) // (4 * d) + 1        # odd: a bag pair short
        row = 4 * d if kind == "float" else (d if kind == "quint8" else d // 2) + 8
        n = (3 << 19) // row if big else 300
        table = (r.standard_normal((n, d)).astype(F32) if kind == "float"
                 else random_packed(r, n, d, kind))
        run = (F.embedding_bag if kind == "float" else
               lambda i, t, o, **kw: F.quantized_embedding_bag(t, i, o, **kw))
        idx, off = random_bags(r, n, n_bags, 4)
        psw = r.uniform(-2, 2, idx.shape[0]).astype(F32)
        for kw in ({"mode": "sum"}, {"mode": "mean", "padding_idx": 7},
                   {"mode": "sum", "per_sample_weights": psw}):
            with qops.backend("ref"):
                want = run(idx, table, off, **kw)
            assert want.nbytes > 1 << 20
            for threads in (1, 2):
                with qops.backend("fast"), qops.threads(threads):
                    got = run(idx, table, off, **kw)
                np.testing.assert_array_equal(got, want, strict=True,
                                              err_msg=f"{kind} d={d} {kw.get('mode')}")
