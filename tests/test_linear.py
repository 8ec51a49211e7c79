"""Linear family: what the registry's generic tests cannot see (errors, prepacking, overflow,
activation qparams of dynamic linear)."""
import numpy as np
import pytest

import qops
from qops import functional as F
from qops._ops.linear import choose_dynamic_qparams
from qops._registry import _util as u

BACKENDS = ["ref", "fast"]


def _x(r, shape, zp=128, scale=0.05):
    data = r.integers(0, 256, shape).astype(np.uint8)
    return qops.make_per_tensor_quantized_tensor(data, scale, zp)


def _w(r, n, k, zp=0, scale=0.01):
    data = r.integers(-128, 128, (n, k)).astype(np.int8)
    return qops.make_per_tensor_quantized_tensor(data, scale, zp)


@pytest.fixture
def xwb():
    r = u.rng(40)
    return _x(r, (3, 8)), _w(r, 5, 8), r.normal(0, 1, 5).astype(np.float32)


# -- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_static_errors(xwb, backend):
    x, w, b = xwb
    r = u.rng(41)
    with qops.backend(backend):
        with pytest.raises(TypeError, match="input"):
            F.linear(x._int, w, b)
        with pytest.raises(TypeError, match="input must have dtype quint8"):
            F.linear(qops.make_per_tensor_quantized_tensor(x._int.astype(np.int8), 0.1, 0), w, b)
        with pytest.raises(TypeError, match="weight must have dtype qint8"):
            F.linear(x, qops.make_per_tensor_quantized_tensor(w._int.view(np.uint8), 0.1, 0), b)
        with pytest.raises(TypeError, match="weight"):
            F.linear(x, w._int, b)
        with pytest.raises(ValueError, match="weight must have 2 dims"):
            F.linear(x, qops.make_per_tensor_quantized_tensor(w._int[None], 0.1, 0), b)
        w_ax1 = qops.make_per_channel_quantized_tensor(w._int, np.full(8, 0.1), np.zeros(8, int), 1)
        with pytest.raises(ValueError, match="axis 0"):
            F.linear(x, w_ax1, b)
        with pytest.raises(ValueError, match="in_features=8"):
            F.linear(_x(r, (3, 7)), w, b)
        with pytest.raises(ValueError, match="at least 2 dimensions"):
            F.linear(_x(r, (8,)), w, b)
        with pytest.raises(ValueError, match=r"bias must have shape \(5,\)"):
            F.linear(x, w, b[:4])
        with pytest.raises(TypeError, match="bias must be a float array"):
            F.linear(x, w, np.arange(5))
        with pytest.raises(TypeError, match="bias must be a float array"):
            F.linear(x, w, qops.quantize_per_tensor(b, 0.1, 0, qops.qint8))
        with pytest.raises(ValueError, match="bias must be finite"):
            F.linear(x, w, np.array([1, 2, np.nan, 0, 0], np.float32))
        with pytest.raises(ValueError, match="scale"):
            F.linear(x, w, b, scale=0.0, zero_point=3)
        with pytest.raises(ValueError, match="zero_point=256"):
            F.linear(x, w, b, scale=0.1, zero_point=256)
        with pytest.raises(ValueError, match="bias must be None"):
            F.linear(x, F.prepack_linear(w, b), b)
        with pytest.raises(TypeError, match="input must be per-tensor"):
            F.linear(qops.make_per_channel_quantized_tensor(x._int, np.full(3, 0.1),
                                                            np.zeros(3, int), 0), w, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_errors(xwb, backend):
    x, w, b = xwb
    xf = np.ones((3, 8), np.float32)
    with qops.backend(backend):
        with pytest.raises(TypeError, match="input must be a float array"):
            F.linear_dynamic(x, w, b)
        with pytest.raises(TypeError, match="input must be a float array"):
            F.linear_dynamic(np.ones((3, 8), np.int32), w, b)
        with pytest.raises(ValueError, match="input must be finite"):
            F.linear_dynamic(np.full((3, 8), np.nan, np.float32), w, b)
        with pytest.raises(ValueError, match="in_features=8"):
            F.linear_dynamic(np.ones((3, 9), np.float32), w, b)
        with pytest.raises(ValueError, match="at least 2 dimensions"):
            F.linear_dynamic(np.ones(8, np.float32), w, b)
        with pytest.raises(TypeError, match="reduce_range"):
            F.linear_dynamic(xf, w, b, reduce_range="yes")
        with pytest.raises(ValueError, match="bias must be None"):
            F.linear_relu_dynamic(xf, F.prepack_linear(w), b)


# -- prepacking ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_prepacked_equals_unpacked_and_packs_once(backend):
    r = u.rng(42)
    x = _x(r, (2, 3, 40), zp=77)
    wq = qops.make_per_channel_quantized_tensor(r.integers(-128, 128, (24, 40)).astype(np.int8),
                                                r.uniform(0.001, 0.01, 24),
                                                r.integers(-3, 4, 24), 0)
    b = r.normal(0, 1, 24).astype(np.float32)
    xf = r.normal(0, 1, (5, 40)).astype(np.float32)
    packed = F.prepack_linear(wq, b)
    assert packed.weight().equal(wq) and packed.weight() is not wq   # a copy (issue 19 #8)
    np.testing.assert_array_equal(packed.bias(), b)
    with qops.backend(backend):
        for fn, kw in ((F.linear, dict(scale=0.3, zero_point=100)), (F.linear_relu, {})):
            want = fn(x, wq, b, **kw)
            for _ in range(3):
                got = fn(x, packed, None, **kw)
                np.testing.assert_array_equal(got._int, want._int)
                assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
                assert got.shape == (2, 3, 24)
        for fn in (F.linear_dynamic, F.linear_relu_dynamic):
            want = fn(xf, wq, b)
            for _ in range(3):
                np.testing.assert_array_equal(fn(xf, packed), want)
    assert len(packed._packs) == 1, "repeated calls must reuse one packing per backend"


def test_leading_dims_flatten():
    r = u.rng(43)
    x = _x(r, (2, 3, 4, 16), zp=3)
    w = _w(r, 7, 16, zp=-2)
    out = F.linear(x, w, None, 0.5, 10)
    flat = F.linear(qops.make_per_tensor_quantized_tensor(x._int.reshape(-1, 16), 0.05, 3), w,
                    None, 0.5, 10)
    np.testing.assert_array_equal(out._int.reshape(-1, 7), flat._int)
    assert out.shape == (2, 3, 4, 7)


def test_empty_batch():
    r = u.rng(44)
    w = _w(r, 6, 8)
    for backend in BACKENDS:
        with qops.backend(backend):
            assert F.linear(_x(r, (0, 8)), w).shape == (0, 6)
            assert F.linear_dynamic(np.zeros((2, 0, 8), np.float32), w).shape == (2, 0, 6)


# -- accumulator overflow -------------------------------------------------------------------

def _exact_linear(xq, xzp, wq, wzp, bterm, mult, ozp):
    # float64 is exact here: every partial sum is an integer below 2**53
    acc = (xq.astype(np.float64) - xzp) @ (wq.astype(np.float64) - wzp).T
    y = acc.astype(np.float32) + bterm
    return np.clip(np.rint(y * mult) + ozp, 0, 255).astype(np.uint8), acc


@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulator_beyond_int32_is_exact(backend):
    # K * 255 * 255 > 2**31 - 1: the exact sums leave int32 (fbgemm would wrap); qops sums
    # chunks of K in int64 and never wraps.
    k = 40000
    xq = np.full((2, k), 255, np.uint8)
    xq[1, ::3] = 0
    wq = np.full((3, k), -128, np.int8)
    wq[1] = 127
    wq[2, ::2] = 127
    x = qops.make_per_tensor_quantized_tensor(xq, 1.0, 0)
    w = qops.make_per_tensor_quantized_tensor(wq, 1.0, 127)
    out_scale = 2.0 ** 25
    with qops.backend(backend):
        out = F.linear(x, w, None, out_scale, 128)
        dyn = F.linear_dynamic(xq.astype(np.float32), w, None, reduce_range=False)
    want, acc = _exact_linear(xq, 0, wq, 127, np.float32(0), np.float32(1.0 / out_scale), 128)
    assert np.abs(acc).max() > 2**31, "the test must leave int32"
    np.testing.assert_array_equal(out._int, want)
    assert len(set(out._int.ravel().tolist())) > 2, "not vacuous"
    # dynamic: x in [0, 255] quantizes with scale 1, zero point 0: exact integers again
    np.testing.assert_array_equal(dyn, acc.astype(np.float32))


def test_long_rows_fast_equals_ref():
    r = u.rng(45)
    k = 33025 * 2 + 7                      # three chunks, the last one short
    x = _x(r, (3, k), zp=200, scale=0.01)
    w = qops.make_per_channel_quantized_tensor(r.integers(-128, 128, (5, k)).astype(np.int8),
                                               r.uniform(0.001, 0.002, 5), r.integers(-9, 9, 5), 0)
    b = r.normal(0, 1, 5).astype(np.float32)
    xf = r.normal(0, 1, (3, k)).astype(np.float32)
    res = {}
    for backend in BACKENDS:
        with qops.backend(backend):
            res[backend] = (F.linear_relu(x, w, b, 0.5, 100)._int, F.linear_dynamic(xf, w, b))
    np.testing.assert_array_equal(res["fast"][0], res["ref"][0])
    np.testing.assert_array_equal(res["fast"][1], res["ref"][1])


# -- GEMM kernel paths (AVX2: pairsafe vpmaddubsw, nibble split; see qops_gemm.h) -----------

def _isa_kernels():
    import importlib

    from qops import _fast
    return [importlib.import_module(f"qops._fast._{isa}.linear")
            for isa in _fast.CPU_ISAS if isa in _fast.ISAS]


def _check_acc(xq, wq, wzp=None):
    """Every ISA build's int32 accumulators, read through dynamic linear with x_s = w_s = 1."""
    n = wq.shape[0]
    wzp = np.zeros(n, np.int32) if wzp is None else np.asarray(wzp, np.int32)
    want = (xq.astype(np.int64) @ (wq.astype(np.int64) - wzp[:, None]).T).astype(np.float32)
    assert np.abs(want).max(initial=0) < 2**24
    for kern in _isa_kernels():
        packed = kern.pack_linear(wq, wzp)
        got = kern.linear_dynamic(xq.astype(np.float32), 1.0, 0, packed, np.ones(n, np.float32),
                                  None, False)
        np.testing.assert_array_equal(got, want, err_msg=kern.__name__)


def _pair_rows(pairs, k, r):
    # rows of weights whose (even k, k + 1) pairs are the given pairs, in random order
    rows = []
    for pair in pairs:
        idx = r.integers(0, len(pair) // 2, k // 2 + 1)
        rows.append(np.asarray(pair, np.int8).reshape(-1, 2)[idx].reshape(-1)[:k])
    return np.stack(rows)


@pytest.mark.parametrize("xmax", [127, 254, 255])
def test_gemm_pair_bound(xmax):
    # A pair's per-sign sum of at most 128 never saturates vpmaddubsw for x <= 255; 129 does
    # unless x <= 254 (254 * 129 = 32766); the kernels must stay exact on both sides.
    r = u.rng(50)
    at = [(64, 64), (127, 1), (1, 127), (-64, -64), (-128, 0), (0, -128), (127, -128),
          (100, 28), (-100, -28)]
    past = [(65, 64), (64, 65), (-65, -64), (-128, -1), (-1, -128), (127, 2), (127, 127),
            (-128, -128)]
    for k in (8, 35, 64, 97):
        for pairs in ([p for p in at], [p for p in at] + [past[k % len(past)]],
                      [p for p in past]):
            wq = _pair_rows([pairs] * 19, k, r)
            xq = r.integers(0, xmax + 1, (7, k)).astype(np.uint8)
            xq[0] = xmax                     # the worst row: every pair at its largest
            xq[1, ::2] = xmax
            _check_acc(xq, wq)
            _check_acc(xq, wq, r.integers(-3, 4, wq.shape[0]))


def _quad_rows(quads, k, r):
    # rows whose k values (8h, 8h + 1, 8h + 4, 8h + 5) and (8h + 2, 8h + 3, 8h + 6, 8h + 7),
    # the four products one int16 lane of AVX2's double kernel adds, are the given quads
    rows = []
    for quad in quads:
        row = np.zeros(k + 8, np.int8)
        for h in range(0, k, 8):
            for lane in (0, 2):
                q = np.asarray(quad[r.integers(len(quad))], np.int8)
                row[[h + lane, h + lane + 1, h + lane + 4, h + lane + 5]] = r.permutation(q)
        rows.append(row[:k])
    return np.stack(rows)


@pytest.mark.parametrize("xmax", [127, 255])
def test_gemm_double_kernel_bound(xmax):
    # AVX2 adds two groups' vpmaddubsw pair sums in int16 before widening where the tile's
    # largest value times S4 (the panel's largest per-sign sum over such quads) is at most
    # 32767: S4 = 128 does for x <= 255, 258 for x <= 127; one more must take another kernel.
    # Quads at the bound, past it (each pair still pair-safe at 127, 255 needs reordering or
    # the split), K with an odd last group and tails.
    r = u.rng(57)
    if xmax == 255:
        at = [(32, 32, 32, 32), (-32, -32, -32, -32), (125, 1, 1, 1), (0, 0, 0, 0)]
        past = [(33, 32, 32, 32), (126, 1, 1, 1)]
    else:
        at = [(65, 65, 64, 64), (-65, -65, -64, -64), (127, 127, 3, 1), (0, 0, 0, 0)]
        past = [(65, 65, 65, 64), (127, 127, 4, 1)]
    for k in (8, 12, 40, 64, 100, 256):
        for quads in (at, at + past[:1], at + past[1:], past):
            wq = _quad_rows([quads] * 37, k, r)
            assert np.abs(wq).max() <= 127
            for m in (1, 6, 7, 20):
                xq = r.integers(0, xmax + 1, (m, k)).astype(np.uint8)
                xq[0] = xmax                 # the worst row: every quad at its largest
                _check_acc(xq, wq)
            _check_acc(xq, wq, r.integers(-3, 4, wq.shape[0]))


def test_gemm_full_range_tails():
    # K not a multiple of a group (4) or of a nibble chunk (32), M and N tails of every size
    r = u.rng(51)
    for m, k, n in [(1, 1, 1), (2, 3, 5), (3, 4, 16), (4, 5, 17), (5, 31, 15), (6, 32, 33),
                    (7, 33, 31), (8, 63, 47), (9, 65, 1), (13, 100, 20), (1, 129, 40),
                    (12, 256, 16), (19, 70, 64)]:
        wq = r.integers(-128, 128, (n, k)).astype(np.int8)
        wq[:, :2] = -128 if n % 2 else 127           # a saturating pair in every row
        for hi in (127, 255):
            xq = r.integers(0, hi + 1, (m, k)).astype(np.uint8)
            xq[0] = hi
            _check_acc(xq, wq)
            _check_acc(xq, wq, r.integers(-128, 128, n))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("stray", [1, 5, 40])
def test_gemm_tiles_choose_their_kernel(threads, stray):
    # AVX2 decides per micro-tile: tiles whose rows stay within 127 take the pairsafe kernel
    # even where other rows reach 255 (an input calibrated to 0..127 straying past it); the
    # others take the two halves of qg_split, or the nibble kernel where more than a quarter
    # of the block's rows stray. Weights with saturating pairs in every row, rows straying
    # anywhere (tile edges, the last row, whole runs), weight zero points, both thread counts.
    r = u.rng(54)
    for m, k, n in [(7, 64, 16), (50, 77, 40), (97, 128, 33), (13, 300, 17)]:
        wq = r.integers(-128, 128, (n, k)).astype(np.int8)
        wq[:, :2] = [127, 127]
        wq[1::2, 2:4] = [-128, -128]
        xq = r.integers(0, 128, (m, k)).astype(np.uint8)
        rows = r.choice(m, min(m, stray * m // 100 + 1), replace=False)
        xq[rows, r.integers(0, k, len(rows))] = r.integers(128, 256, len(rows))
        xq[-1, :2] = 255
        with qops.threads(threads):
            _check_acc(xq, wq)
            _check_acc(xq, wq, r.integers(-3, 4, n))


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_paths_fast_equals_ref(threads):
    # public ops, both AVX2 kernels (pairsafe: |w| <= 64; nibble: full range, x up to 255)
    r = u.rng(52)
    for lim in (64, 128):
        wq = r.integers(-lim, lim, (70, 77)).astype(np.int8)
        w = qops.make_per_channel_quantized_tensor(wq, r.uniform(0.001, 0.01, 70),
                                                   r.integers(-3, 4, 70), 0)
        x = _x(r, (45, 77), zp=100)
        b = r.normal(0, 5, 70).astype(np.float32)
        xf = r.normal(0, 1, (45, 77)).astype(np.float32)
        res = {}
        for backend in BACKENDS:
            with qops.backend(backend), qops.threads(threads):
                res[backend] = (F.linear(x, w, b, 1.0, 128)._int,
                                F.linear_relu_dynamic(xf, w, b, reduce_range=False),
                                F.linear_dynamic(xf, w, b, reduce_range=True))
        for got, want in zip(res["fast"], res["ref"]):
            np.testing.assert_array_equal(got, want)
        assert len(np.unique(res["ref"][0])) > 20


@pytest.mark.parametrize("n", [8, 13, 24, 31, 40, 72])
def test_gemm_partial_panels_store_in_vectors(n):
    # a last panel of 8-15 columns stores its first 8 in a vector and the rest one by one:
    # u8 (with and without relu and bias) and float outputs, against the reference
    r = u.rng(53 + n)
    wq = r.integers(-100, 100, (n, 40)).astype(np.int8)
    w = qops.make_per_channel_quantized_tensor(wq, r.uniform(0.001, 0.01, n),
                                               np.zeros(n, np.int64), 0)
    x = _x(r, (29, 40), zp=7)
    b = r.normal(0, 5, n).astype(np.float32)
    xf = r.normal(0, 1, (29, 40)).astype(np.float32)
    res = {}
    for backend in BACKENDS:
        with qops.backend(backend):
            res[backend] = (F.linear(x, w, b, 0.5, 120)._int, F.linear(x, w, None, 0.5, 3)._int,
                            F.linear_relu(x, w, b, 0.5, 120)._int,
                            F.linear_dynamic(xf, w, b, reduce_range=True),
                            F.linear_relu_dynamic(xf, w, None, reduce_range=False))
    for got, want in zip(res["fast"], res["ref"]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("amx", [True, False])
def test_gemm_amx_blocks_equal_ref(amx):
    # The AVX-512 build multiplies 32-row blocks with AMX tiles where the CPU has them (K a
    # multiple of 64), the rest with VNNI; both must give ref's bits, over partial panels (N
    # not a multiple of 64), row tails, weight zero points, output kinds and threads.
    from qops import _fast
    if "avx512" not in _fast.ISAS or _fast.ISA != "avx512":
        pytest.skip("the AMX path is in the avx512 build")
    kern = _fast.load("linear")
    if amx and not kern._AMX:
        pytest.skip("this CPU has no AMX-INT8")
    was = kern._amx(amx)
    try:
        r = u.rng(53)
        for m, k, n, wzp in [(32, 64, 16, False), (64, 128, 64, True), (70, 192, 100, False),
                             (96, 64, 48, True), (33, 256, 130, False), (128, 768, 200, True),
                             (16, 64, 64, False), (20, 128, 33, True), (48, 64, 80, False)]:
            wq = r.integers(-128, 128, (n, k)).astype(np.int8)
            zps = r.integers(-3, 4, n) if wzp else np.zeros(n, np.int64)
            w = qops.make_per_channel_quantized_tensor(wq, r.uniform(0.001, 0.01, n), zps, 0)
            x = _x(r, (m, k), zp=int(r.integers(0, 256)))
            b = r.normal(0, 5, n).astype(np.float32)
            xf = r.normal(0, 1, (m, k)).astype(np.float32)
            for threads in (1, 2):
                res = {}
                for backend in BACKENDS:
                    with qops.backend(backend), qops.threads(threads):
                        res[backend] = (F.linear(x, w, b, 4.0, 100)._int,
                                        F.linear_relu(x, w, None, 4.0, 100)._int,
                                        F.linear_dynamic(xf, w, b, reduce_range=False))
                for got, want in zip(res["fast"], res["ref"]):
                    np.testing.assert_array_equal(got, want, err_msg=f"{m}x{k}x{n} amx={amx}")
                assert len(np.unique(res["ref"][0])) > 20
    finally:
        kern._amx(was)


# -- dynamic activation qparams -------------------------------------------------------------

def test_dynamic_qparams_match_torch(torch):
    r = u.rng(46)
    for mag in (1e-8, 1e-5, 3e-4, 1.0, 1e3, 1e30):
        for _ in range(40):
            a = (r.normal(0, mag, int(r.integers(1, 5))) * r.choice([1, -1, 0])).astype(np.float32)
            if r.random() < 0.3:
                a = np.abs(a)
            for rr in (False, True):
                ts, tz = torch._choose_qparams_per_tensor(torch.from_numpy(a), rr)
                s, z = choose_dynamic_qparams(a.min(), a.max(), rr)
                assert (np.float32(ts), tz) == (np.float32(s), z), (a, rr)


def test_dynamic_qparams_examples():
    # docs/semantics.md §3: [-1, 2, 3] -> (4/255, 64); reduce_range -> (4/127, 32)
    assert choose_dynamic_qparams(-1.0, 3.0, False) == (float(np.float32(4 / 255)), 64)
    assert choose_dynamic_qparams(-1.0, 3.0, True) == (float(np.float32(4 / 127)), 32)
    assert choose_dynamic_qparams(0.0, 0.0, True) == (float(np.float32(0.1)), 0)


# -- threads on shapes big enough to split (the registry cases are too small to) -------------

def test_threaded_tiles_equal_ref():
    r = u.rng(47)
    x = _x(r, (200, 130), zp=31)                      # 3 row blocks x 3 column panels
    w = qops.make_per_channel_quantized_tensor(r.integers(-128, 128, (150, 130)).astype(np.int8),
                                               r.uniform(0.001, 0.01, 150),
                                               r.integers(-4, 5, 150), 0)
    b = r.normal(0, 5, 150).astype(np.float32)
    xf = r.normal(0, 1, (200, 700)).astype(np.float32)   # minmax over several blocks
    wd = _w(r, 50, 700, zp=3)
    with qops.backend("ref"):
        want = F.linear(x, w, b, 2.0, 128)._int, F.linear_relu_dynamic(xf, wd, b[:50])
    # (150 columns: a last panel of 22 on AVX-512 builds, whose tiles weigh less in the
    # threads' split of the work; 3 threads leave runs that start and end inside a panel)
    for threads in (1, 2, 3):
        with qops.backend("fast"), qops.threads(threads):
            got = F.linear(x, w, b, 2.0, 128)._int, F.linear_relu_dynamic(xf, wd, b[:50])
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert 0.05 < np.mean(want[0] == 128) < 0.95 or len(np.unique(want[0])) > 20


def test_packed_linear_pickles_without_its_cache():
    import copy
    import pickle
    r = u.rng(48)
    x, w = _x(r, (2, 8)), _w(r, 3, 8, zp=1)
    packed = F.prepack_linear(w, np.ones(3, np.float32))
    want = F.linear(x, packed)._int
    for clone in (pickle.loads(pickle.dumps(packed)), copy.deepcopy(packed)):
        assert clone._packs == {}
        np.testing.assert_array_equal(F.linear(x, clone)._int, want)
        np.testing.assert_array_equal(clone.bias(), packed.bias())


def _bell_rows(r, n, k):
    # per-channel symmetric weights of a trained layer: mostly small, each row's largest +-127
    w = r.normal(0, 1, (n, k))
    return np.round(w / np.abs(w).max(1, keepdims=True) * 127).astype(np.int8)


def test_gemm_paired_panels_exact():
    # AVX2 packs each 16-column panel with k reordered (blocks of 16) so that no vpmaddubsw
    # pair can saturate where such an order exists; A's rows follow the same order. Mixed
    # calls: reordered panels next to panels that keep k in order (a row of one-sign large
    # weights has no such order), K and N tails, weight zero points, x up to 255.
    r = u.rng(53)
    reordered = []
    for m, k, n in [(1, 16, 16), (3, 17, 5), (7, 64, 33), (13, 100, 40), (6, 147, 64),
                    (2, 300, 70), (9, 513, 17), (25, 96, 48)]:
        wq = _bell_rows(r, n, k)
        if n > 16:
            wq[16] = 120                                  # panel 1 keeps k in order
        xq = r.integers(0, 256, (m, k)).astype(np.uint8)
        xq[0] = 255
        _check_acc(xq, wq)
        _check_acc(xq, wq, r.integers(-3, 4, n))
        for kern in _isa_kernels():
            if kern.__name__.split(".")[2] == "_avx2" and n > 16:
                packed = kern.pack_linear(wq, np.zeros(n, np.int32))
                assert packed.paired < -(-n // 16), (m, k, n, packed.paired)
                reordered.append(packed.paired)
    assert not reordered or sum(reordered) >= 5, reordered


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_paired_panels_both_copies(threads):
    # AVX2 keeps each reordered panel twice: in k order for tiles whose rows stay within 127
    # (pair-safe on any weights), reordered for the tiles that need it; the split and nibble
    # kernels read the copy in k order. Rows within 127 next to rows reaching 255, per tile
    # and per block, over reordered panels and panels without a pairing.
    r = u.rng(55)
    reordered = []
    for m, k, n in [(6, 64, 16), (13, 100, 40), (50, 147, 64), (97, 300, 33), (8, 513, 70)]:
        wq = _bell_rows(r, n, k)
        if n > 32:
            wq[32] = 120                                  # panel 2 has no pairing
        for stray in (0, 1, m // 3, m):
            xq = r.integers(0, 128, (m, k)).astype(np.uint8)
            rows = r.choice(m, stray, replace=False)
            xq[rows] = r.integers(0, 256, (stray, k))
            with qops.threads(threads):
                _check_acc(xq, wq)
                _check_acc(xq, wq, r.integers(-3, 4, n))
        for kern in _isa_kernels():
            if kern.__name__.split(".")[2] == "_avx2":
                reordered.append(kern.pack_linear(wq, np.zeros(n, np.int32)).paired)
    assert not reordered or sum(reordered) >= 3, reordered


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_fused_u8_store_equals_ref(threads):
    # AVX2 requantizes the pairsafe kernel's accumulators in registers (qg_os) where the
    # output is uint8 and the weights have no zero points, for panels of 16 and of 8 columns;
    # depth is packed in groups of 4 (the last pairing block 4, 8 or 12 values long). Next to
    # it the reordered, split and nibble kernels on the same shapes; relu, bias or none, and
    # outputs clamped at both ends.
    from qops._ref import linear as ref
    r = u.rng(56)
    for m, k, n in [(1, 4, 8), (7, 8, 16), (13, 12, 24), (6, 20, 40), (25, 24, 144),
                    (9, 27, 72), (50, 36, 17), (97, 40, 240), (31, 72, 40), (12, 100, 33)]:
        for lim, hi in ((30, 255), (128, 127), (128, 255)):
            wq = r.integers(-lim, lim, (n, k)).astype(np.int8)
            xq = r.integers(0, hi + 1, (m, k)).astype(np.uint8)
            xq[0] = hi
            zero = np.zeros(n, np.int32)
            bias = r.normal(0, 50, n).astype(np.float32)
            mult = r.uniform(0.0005, 0.02, n).astype(np.float32)
            for relu, bt, ozp in ((False, bias, 128), (True, None, 3), (False, None, 0),
                                  (True, bias, 250)):
                want = ref.linear(xq, 7, ref.pack_linear(wq, zero), bt, mult, ozp, relu)
                if ozp == 128:
                    assert len(np.unique(want)) > 10 or m * n < 40
                for kern in _isa_kernels():
                    with qops.threads(threads):
                        got = kern.linear(xq, 7, kern.pack_linear(wq, zero), bt, mult, ozp, relu)
                    np.testing.assert_array_equal(got, want, err_msg=f"{kern.__name__} {m, k, n}")


def test_gemm_pairing_search_reorders_a_short_last_block():
    # K = 24: the second pairing block holds 8 values; k values 16 and 17 both 100 in a
    # column would saturate at x = 255 as given, and the search pairs them with small ones
    # within those 8 (no value past K may take part).
    wq = np.full((3, 24), 10, np.int8)
    wq[:, 16] = wq[:, 17] = 100
    xq = np.full((4, 24), 255, np.uint8)
    _check_acc(xq, wq)
    for kern in _isa_kernels():
        if kern.__name__.split(".")[2] == "_avx2":
            assert kern.pack_linear(wq, np.zeros(3, np.int32)).paired == 1


def test_gemm_pairing_search_reorders():
    # k values 0 and 1 both 100 in a column: their given pair would saturate at x = 255, but
    # pairing each with a small weight does not; the search must find such an order.
    wq = np.full((3, 16), 10, np.int8)
    wq[:, 0] = wq[:, 1] = 100
    wq[1, 2] = wq[1, 3] = -100
    xq = np.full((4, 16), 255, np.uint8)
    _check_acc(xq, wq)
    for kern in _isa_kernels():
        if kern.__name__.split(".")[2] == "_avx2":
            assert kern.pack_linear(wq, np.zeros(3, np.int32)).paired == 1
