"""Registry entries of the conv family: conv1d/2d/3d and the fused relu variants."""
import numpy as np

import qops
from qops import functional as F
from qops._registry import Case, OpSpec
from qops._registry import _util as u

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _weight(r, shape, per_channel, w_zp=0):
    """A qint8 weight of random raw values, per-tensor (zero point w_zp) or per-channel."""
    raw = r.integers(-128, 128, size=shape).astype(np.int8)
    if per_channel:
        o = shape[0]
        zps = np.zeros(o, np.int64) if w_zp == 0 else r.integers(-128, 128, size=o)
        return qops.make_per_channel_quantized_tensor(raw, r.uniform(0.002, 0.02, o), zps, 0)
    return qops.make_per_tensor_quantized_tensor(raw, float(r.uniform(0.002, 0.02)), int(w_zp))


def _out_scale(x, w, spread=40.0):
    """An output scale that spreads the result over about +-spread steps (few saturate)."""
    k = int(np.prod(w.shape[1:]))
    ws = w._scale if w._axis is None else float(np.mean(w._scales))
    return float(np.sqrt(k) * 74.0 * 74.0 * x._scale * ws / spread)


def _case(r, nd, n, c, o, size, kernel, stride=1, padding=0, dilation=1, groups=1,
          per_channel=False, w_zp=0, x_zp=None, out_zp=None, bias=True, padding_mode="zeros",
          layout="c", x_scale=None, label="", spread=40.0):
    sizes = (size,) * nd if isinstance(size, int) else tuple(size)
    ks = (kernel,) * nd if isinstance(kernel, int) else tuple(kernel)
    x = u.random_qtensor(r, (n, c) + sizes, qops.quint8,
                         scale=x_scale if x_scale is not None else float(r.uniform(0.01, 0.05)),
                         zero_point=x_zp, layout=layout)
    w = _weight(r, (o, c // groups) + ks, per_channel, w_zp)
    b = r.normal(0, 2.0, o).astype(np.float32) if bias else None
    if out_zp is None:
        out_zp = int(r.integers(60, 200))
    kw = dict(bias=b, stride=stride, padding=padding, dilation=dilation, groups=groups,
              padding_mode=padding_mode, scale=_out_scale(x, w, spread), zero_point=out_zp)
    return Case((x, w), kw, label=label or f"{nd}d-n{n}c{c}o{o}-{sizes}-k{ks}-g{groups}")


def _cases(nd):
    def build():
        r = u.rng(100 + nd)
        s, k = (7, 3) if nd == 3 else ((9, 3) if nd == 2 else (17, 3))
        cs = [
            _case(r, nd, 1, 4, 8, s, k, padding=1, label="basic"),
            _case(r, nd, 1, 4, 8, s, k, padding=1, per_channel=True, bias=False,
                  label="per-channel-nobias"),
            _case(r, nd, 2, 6, 9, s, k, stride=2, padding=2, dilation=2, groups=3,
                  label="s2-d2-g3"),
            _case(r, nd, 1, 5, 5, s, k, padding=1, groups=5, per_channel=True, label="depthwise"),
            _case(r, nd, 1, 17, 17, s, k, padding=1, groups=17, label="depthwise-17"),
            _case(r, nd, 1, 4, 4, s, k, padding=1, groups=4, w_zp=-7, label="depthwise-wzp"),
            _case(r, nd, 1, 8, 16, s, k, padding=1, groups=4, per_channel=True,
                  label="grouped-cg2"),
            _case(r, nd, 1, 17, 33, s - 2, 1, label="1x1-17to33"),
            _case(r, nd, 1, 3, 5, s, s, label="kernel-equals-input"),
            _case(r, nd, 1, 3, 5, s, s, padding=1, stride=3, label="kernel-equals-input-pad"),
            _case(r, nd, 1, 5, 7, s, k, padding=1, w_zp=127, x_zp=0, label="wzp127-xzp0"),
            _case(r, nd, 1, 5, 7, s, k, padding=1, w_zp=-128, x_zp=255, label="wzp-128-xzp255"),
            _case(r, nd, 1, 5, 7, s, k, padding=1, per_channel=True, w_zp=1,
                  label="per-channel-wzp"),
            _case(r, nd, 1, 5, 7, s, k, padding=1, out_zp=0, spread=10, label="outzp0"),
            _case(r, nd, 1, 5, 7, s, k, padding=1, out_zp=255, spread=10, label="outzp255"),
            _case(r, nd, 1, 5, 7, s, k, padding=1, x_scale=1e-4, label="tiny-scale"),
            _case(r, nd, 1, 5, 7, s, k, padding=1, x_scale=30.0, label="large-scale"),
            _case(r, nd, 1, 6, 6, s, k, padding=1, layout="t", label="transposed-input"),
            _case(r, nd, 1, 6, 6, s, k, padding=1, layout="neg", label="negative-strides"),
            _case(r, nd, 0, 4, 8, s, k, padding=1, label="batch0"),
            _case(r, nd, 3, 3, 4, s, 2, stride=2, label="batch3-k2-s2"),
            _case(r, nd, 1, 64, 20, s - 2, k, padding=1, label="c64-o20"),
            # channels-last inputs: the channels-last tiles (ungrouped, symmetric weights; 32+
            # channels: padded to 64, partial oc blocks, strides, dilation, a row of more than
            # 32 pixels; fewer: im2col rows, one run per kernel row or tap by tap), and the
            # paths they leave to the planes
            _case(r, nd, 1, 16, 20, s, k, padding=1, layout="cl", label="cl-c16-o20"),
            _case(r, nd, 2, 3, 33, s, k, stride=2, padding=1, per_channel=True, layout="cl",
                  label="cl-c3-o33-s2"),
            _case(r, nd, 1, 5, 17, s, 2, padding=2, dilation=2, layout="cl", label="cl-c5-d2"),
            _case(r, nd, 1, 31, 16, (s - 4,) * (nd - 1) + (37,), 1, bias=False, layout="cl",
                  label="cl-c31-1x1"),
            _case(r, nd, 2, 64, 40, s, k, stride=2, padding=2, dilation=2, per_channel=True,
                  layout="cl", label="cl-c64-o40-s2-d2"),
            _case(r, nd, 1, 70, 33, (s - 4,) * (nd - 1) + (40,), k, padding=1, bias=False,
                  layout="cl", label="cl-c70-o33-w40"),
            _case(r, nd, 1, 32, 16, s, 1, stride=(1,) * (nd - 1) + (3,), layout="cl",
                  label="cl-1x1-s3"),
            _case(r, nd, 1, 16, 8, s, k, padding=1, w_zp=3, layout="cl", label="cl-wzp"),
            # AVX2's GEMM routes: a 1x1 conv as it lies, the others on im2col rows
            _case(r, nd, 2, 40, 24, s, 1, per_channel=True, w_zp=1, layout="cl",
                  label="cl-1x1-gemm"),
            _case(r, nd, 1, 48, 20, s, k, stride=2, padding=1, layout="cl",
                  label="cl-im2col-gemm-s2"),
            _case(r, nd, 1, 16, 8, s, k, padding=1, groups=2, layout="cl", label="cl-groups2"),
            _case(r, nd, 1, 16, 8, s, k, padding=1, padding_mode="reflect", layout="cl",
                  label="cl-reflect"),
            # channels-last depthwise: the VNNI kernel with symmetric weights (a partial
            # 64-channel block; 16 channels, four pixels a vector, a row not a multiple of
            # four; two blocks, stride and dilation), the planes with asymmetric ones
            _case(r, nd, 2, 40, 40, s, k, padding=1, groups=40, per_channel=True, layout="cl",
                  label="cl-depthwise-c40"),
            _case(r, nd, 1, 16, 16, s, k, padding=2, groups=16, per_channel=True, layout="cl",
                  label="cl-depthwise-c16"),
            _case(r, nd, 1, 70, 70, (s - 2,) * (nd - 1) + (13,), k, stride=2, padding=2,
                  dilation=2, groups=70, per_channel=True, bias=False, layout="cl",
                  label="cl-depthwise-c70-s2-d2"),
            _case(r, nd, 1, 8, 8, s, 5, padding=3, groups=8, layout="cl",
                  label="cl-depthwise-k5"),
            # (AVX2: 32-channel blocks, the last overlapping the one before)
            _case(r, nd, 2, 37, 37, s, k, stride=2, padding=1, groups=37, per_channel=True,
                  layout="cl", label="cl-depthwise-c37-s2"),
            # (spread 10: fbgemm, the oracle for asymmetric depthwise, saturates pair sums,
            # 38-43 steps off at the usual spread of 40 for eight channels)
            _case(r, nd, 1, 8, 8, s, k, padding=1, groups=8, w_zp=2, layout="cl", spread=10,
                  label="cl-depthwise-wzp"),
        ]
        for mode in PADDING_MODES[1:]:
            cs.append(_case(r, nd, 1, 4, 6, s, k, padding=2, padding_mode=mode, label=mode))
            cs.append(_case(r, nd, 1, 4, 4, s, k, padding=1, groups=4, padding_mode=mode,
                            per_channel=True, label=f"{mode}-depthwise"))
        return cs
    return build


def _strategy(nd):
    def build_strategy():
        from hypothesis import strategies as st

        def build(args):
            (seed, n, cg, og, groups, dw, size, kernel, stride, dilation, pad, per_channel,
             w_zp, x_zp, out_zp, bias, mode, layout, x_scale) = args
            if dw:
                # half the depthwise draws with 32+ channels (AVX2's channels-last blocks)
                groups = groups if cg <= 3 else 29 + groups * cg
                cg, og = 1, 1
            c, o = cg * groups, og * groups
            if mode == "reflect":
                pad = min(pad, size - 1)
            elif mode == "circular":
                pad = min(pad, size)
            span = dilation * (kernel - 1) + 1
            if span > size + 2 * pad:
                kernel, dilation = 1, 1
            r = u.rng(seed)
            return _case(r, nd, n, c, o, size, kernel, stride, pad, dilation, groups,
                         per_channel, w_zp, x_zp, out_zp, bias, mode, layout, x_scale)
        max_size = {1: 12, 2: 7, 3: 4}[nd]
        return st.tuples(
            st.integers(0, 2**32 - 1), st.integers(0, 2), st.integers(1, 6), st.integers(1, 6),
            st.integers(1, 3), st.booleans(), st.integers(1, max_size), st.integers(1, 3),
            st.integers(1, 3), st.integers(1, 2), st.integers(0, 2), st.booleans(),
            st.sampled_from([0, 0, -128, 127, 5]), st.sampled_from([None, 0, 255, 128]),
            st.sampled_from([None, 0, 255, 128]), st.booleans(), st.sampled_from(PADDING_MODES),
            st.sampled_from(["c", "t", "neg", "cl"]),
            st.sampled_from([None, 1e-3, 0.3, 5.0])).map(build)
    return build_strategy


# -- PyTorch oracle -------------------------------------------------------------------------

def _is_depthwise(w, groups):
    return w.shape[1] == 1 and w.shape[0] == groups


def _symmetric(w):
    return (w._zero_point == 0) if w._axis is None else not np.any(w._zero_points)


def _engine(case):
    # fbgemm is bit-exact against docs/semantics.md §8 except its depthwise kernel, which
    # saturates 16-bit pair sums; onednn is exact for depthwise but needs symmetric weights.
    x, w = case.args
    groups = case.kwargs.get("groups", 1)
    if u.torch_int8_saturates():
        # AVX2 kernels: the weights compared are clipped (saturation_free), so no fbgemm
        # kernel saturates; onednn's AVX2 depthwise kernel rounds differently (seen: one
        # output in ~1400 off by one), so fbgemm serves every case there
        return "fbgemm"
    return "onednn" if _is_depthwise(w, groups) and _symmetric(w) else "fbgemm"


def _torch_pad(t, nd, padding, mode):
    """Pad quantized tensor `t` (PyTorch's module way for reflect; on raw values otherwise)."""
    import torch
    pads = []
    for p in reversed(padding):
        pads += [p, p]
    if mode == "reflect":
        try:
            return torch.nn.functional.pad(t, pads, mode="reflect")
        except NotImplementedError:      # no quantized 3-D reflect pad: pad the raw values
            pass
    raw = t.int_repr().to(torch.float32)
    raw = torch.nn.functional.pad(raw, pads, mode=mode).to(torch.uint8)
    return torch._make_per_tensor_quantized_tensor(raw, t.q_scale(), t.q_zero_point())


def _torch(nd, relu):
    def oracle(case):
        import torch
        x, w = case.args
        kw = case.kwargs
        tup = lambda v: list(v) if isinstance(v, (tuple, list)) else [v] * nd  # noqa: E731
        stride, padding, dilation = tup(kw["stride"]), tup(kw["padding"]), tup(kw["dilation"])
        tx, tw = u.to_torch(x), u.to_torch(w)
        if u.cl_bench(case):
            tx = tx.contiguous(memory_format=torch.channels_last)
        if kw["padding_mode"] != "zeros":
            tx = _torch_pad(tx, nd, padding, kw["padding_mode"])
            padding = [0] * nd
        bias = None if kw["bias"] is None else torch.from_numpy(kw["bias"])
        # the bench peer is what PyTorch users get, its default x86 engine (oneDNN with AMX
        # on such CPUs, much faster than fbgemm there); the oracle picks the exact engine
        engine = "x86" if case.label.startswith("bench-") else _engine(case)
        before = torch.backends.quantized.engine
        torch.backends.quantized.engine = engine
        try:
            packed = getattr(torch.ops.quantized, f"conv{nd}d_prepack")(
                tw, bias, stride, padding, dilation, kw["groups"])
        finally:
            torch.backends.quantized.engine = before
        op = getattr(torch.ops.quantized, f"conv{nd}d" + ("_relu" if relu else ""))

        def call():
            prev = torch.backends.quantized.engine
            torch.backends.quantized.engine = engine
            try:
                return op(tx, packed, kw["scale"], kw["zero_point"])
            finally:
                torch.backends.quantized.engine = prev
        return call
    return oracle


#: fbgemm's depthwise kernel (the only engine taking asymmetric depthwise weights) sums
#: pairs of u8*s8 products in saturating int16 (vpmaddubsw); qops stays exact. Seen: up to
#: ~8 steps on ~10% of outputs with full-range random data, and 38-43 steps for 8 channels
#: with weight zero point 2 at the cases' usual output scale (that case now uses a coarser
#: one); allowed here: 32 steps.
DW_FBGEMM_MAX = 32


def _within_one(case, ours, theirs, share):
    """Equal qparams; raw values within 1, on at most `share` of them."""
    assert ours[0] == theirs[0] and ours[3:] == theirs[3:], "qparams differ"
    a, b = ours[2].astype(np.int32), theirs[2].astype(np.int32)
    assert a.shape == b.shape, f"shape {a.shape} vs {b.shape}"
    diff = np.abs(a - b)
    assert diff.size == 0 or (diff.max() <= 1 and (diff > 0).mean() <= share), \
        f"{case.label}: {int((diff > 0).sum())} of {diff.size} differ, max {diff.max()}"


def _compare(case, ours, theirs):
    x, w = case.args
    if (_engine(case) == "fbgemm" and _is_depthwise(w, case.kwargs.get("groups", 1))
            and not u.torch_int8_saturates()):
        assert ours[0] == theirs[0] and ours[3:] == theirs[3:], "qparams differ"
        a, b = ours[2].astype(np.int32), theirs[2].astype(np.int32)
        assert a.shape == b.shape, f"shape {a.shape} vs {b.shape}"
        diff = np.abs(a - b)
        assert diff.size == 0 or diff.max() <= DW_FBGEMM_MAX, f"depthwise diff {diff.max()}"
        return
    if u.torch_int8_saturates():
        # fbgemm's AVX2 requantization orders its float32 steps differently from the AVX-512
        # path of docs/semantics.md §8: a value within rounding of a .5 tie can land on the
        # other side (seen: 1 output of 1377, 105.49999 before the zero point). Allowed: +-1
        # on at most 1% of the outputs; everything else exact.
        return _within_one(case, ours, theirs, 0.01)
    if _engine(case) == "onednn":
        # oneDNN requantizes in float32 steps of its own order: now and then a value within
        # rounding of a .5 tie lands on the other side (docs/semantics.md §8; measured on an
        # Intel AVX-512 CPU: 1 output of 11,664 in a channels-last 3-D depthwise case).
        # Allowed: +-1 on at most 0.1% of the outputs.
        return _within_one(case, ours, theirs, 0.001)
    u.assert_same(ours, theirs, f"{case.label}: ref vs PyTorch")


TOLERANCE = ("exact (fbgemm engine; onednn for symmetric depthwise weights: +-1 on at most "
             "0.1% of outputs, oneDNN's float32 requantization order), except depthwise "
             "convs with non-zero weight zero points, where only fbgemm's depthwise kernel runs "
             "and it saturates 16-bit pair sums: there up to 32 steps are allowed (qops exact). "
             "On CPUs without AVX512-VNNI every fbgemm int8 kernel saturates pair sums, so there "
             "the weights compared are clipped to [-64, 64] (_util.saturation_free), and +-1 is "
             "allowed on <= 1% of outputs: fbgemm's AVX2 requantization rounds near-ties "
             "differently")


# -- benchmarks -----------------------------------------------------------------------------

def _bench(nd, n, c, o, size, kernel, layout="c", **kw):
    def build():
        r = u.rng(7)
        x = u.random_qtensor(r, (n, c) + tuple(size), qops.quint8, scale=0.02, zero_point=100,
                             layout=layout)
        w = _weight(r, (o, c // kw.get("groups", 1)) + (kernel,) * nd, per_channel=True)
        b = r.normal(0, 2.0, o).astype(np.float32)
        args = dict(bias=b, stride=kw.get("stride", 1), padding=kw.get("padding", 0), dilation=1,
                    groups=kw.get("groups", 1), padding_mode="zeros", scale=_out_scale(x, w),
                    zero_point=110)
        return Case((x, w), args, label=f"bench-{nd}d" + (u.CL_BENCH if layout == "cl" else ""))
    return build


def _benches(nd):
    if nd == 1:
        return {"conv1d_64x1024_k3": _bench(1, 1, 64, 64, (1024,), 3, padding=1)}
    if nd == 3:
        return {"conv3d_16x8x56x56_k3": _bench(3, 1, 16, 16, (8, 56, 56), 3, padding=1)}
    return {
        "conv2d_r3x3_64_56_b1": _bench(2, 1, 64, 64, (56, 56), 3, padding=1),
        "conv2d_r3x3_64_56_b1_channels_last": _bench(2, 1, 64, 64, (56, 56), 3, layout="cl",
                                                     padding=1),
        "conv2d_1x1_256to64_56_b1": _bench(2, 1, 256, 64, (56, 56), 1),
        "conv2d_dw3x3_32_112_b1": _bench(2, 1, 32, 32, (112, 112), 3, padding=1, groups=32),
        "conv2d_dw3x3_144_56_b1": _bench(2, 1, 144, 144, (56, 56), 3, padding=1, groups=144),
        "conv2d_dw3x3_96_112_s2_b1": _bench(2, 1, 96, 96, (112, 112), 3, padding=1, stride=2,
                                            groups=96),
        "conv2d_dw3x3_32_112_b1_channels_last": _bench(2, 1, 32, 32, (112, 112), 3, layout="cl",
                                                       padding=1, groups=32),
        "conv2d_dw3x3_144_56_b1_channels_last": _bench(2, 1, 144, 144, (56, 56), 3, layout="cl",
                                                       padding=1, groups=144),
        "conv2d_dw3x3_96_112_s2_b1_channels_last": _bench(2, 1, 96, 96, (112, 112), 3, layout="cl",
                                                          padding=1, stride=2, groups=96),
        "conv2d_stem3to32_s2_224_b1": _bench(2, 1, 3, 32, (224, 224), 3, padding=1, stride=2),
        "conv2d_stem3to32_s2_224_b1_channels_last": _bench(2, 1, 3, 32, (224, 224), 3, layout="cl",
                                                           padding=1, stride=2),
        # a layer's fixed cost: a squeeze-excite block's 1x1 conv on one pixel, a 3x3 conv on
        # a 4x4 grid (the work is a few microseconds; the rest is the call)
        "conv2d_1x1_64to64_1px_b1": _bench(2, 1, 64, 64, (1, 1), 1),
        "conv2d_r3x3_16_4x4_b1_channels_last": _bench(2, 1, 16, 16, (4, 4), 3, layout="cl",
                                                      padding=1),
    }


def _runner(nd, relu):
    """Call with a weight prepacked once, outside the timed call (as a model would)."""
    def runner(case):
        x, w = case.args
        kw = dict(case.kwargs)
        packed = getattr(F, f"prepack_conv{nd}d")(
            w, kw.pop("bias"), kw.pop("stride"), kw.pop("padding"), kw.pop("dilation"),
            kw.pop("groups"), kw.pop("padding_mode"))
        op = getattr(F, f"conv{nd}d" + ("_relu" if relu else ""))
        return lambda: op(x, packed, **kw)
    return runner


def _spec(nd, relu):
    name = f"conv{nd}d" + ("_relu" if relu else "")
    benches = _benches(nd)
    if relu:
        benches = {k + "_relu": v for k, v in list(benches.items())[:1]}
    return OpSpec(name, "conv", ("pack_weight", "conv", "conv_cl"), getattr(F, name), _cases(nd),
                  _strategy(nd),
                  bench=benches, torch=_torch(nd, relu), compare=_compare, tolerance=TOLERANCE,
                  runner=_runner(nd, relu), oracle_case=u.saturation_free)


SPECS = [_spec(nd, relu) for relu in (False, True) for nd in (1, 2, 3)]
