"""Channels-last and other permuted dense inputs: same values as C order, PyTorch's layouts.

Elementwise ops and max pools run over such memory in its own order and return the same
layout (PyTorch's preserve_format); the others take a C-order copy, which fast transposes in
16x16 tiles.
"""
import numpy as np
import pytest

import qops
import qops.functional as F
from qops._layout import memory_order
from qops._registry.quant import channels_last


def _raw(t):
    return t.int_repr() if isinstance(t, qops.QTensor) else np.asarray(t)


W = qops.quantize_per_channel(np.random.default_rng(1).normal(size=(8, 6, 3, 3)).astype(np.float32),
                              np.full(8, 0.01), np.zeros(8, np.int64), 0, qops.qint8)
ONES, ZEROS = np.ones(6, np.float32), np.zeros(6, np.float32)

# (name, op, keeps the channels-last layout: True, False (C order) or None (either))
OPS = [
    ("relu", lambda a, b: F.relu(a), True),
    ("hardswish", lambda a, b: F.hardswish(a, 0.05, 120), True),
    ("leaky_relu", lambda a, b: F.leaky_relu(a, 0.1), True),
    ("sigmoid", lambda a, b: F.sigmoid(a), True),
    ("add", lambda a, b: F.add(a, b, 0.1, 100), True),
    ("mul_relu", lambda a, b: F.mul_relu(a, b, 0.1, 100), True),
    # a squeeze-excite scale (N, C, 1, 1) broadcast over the channels-last block, either side
    ("mul_broadcast", lambda a, b: F.mul(a, F.adaptive_avg_pool2d(b, 1), 0.1, 100), True),
    ("add_broadcast", lambda a, b: F.add(F.adaptive_avg_pool2d(b, 1), a, 0.1, 100), True),
    ("add_scalar", lambda a, b: F.add_scalar(a, 0.7), True),
    ("dequantize", lambda a, b: a.dequantize(), True),
    ("requantize", lambda a, b: F.requantize(a, 0.03, 7), True),
    ("max_pool2d", lambda a, b: F.max_pool2d(a, 3, 2, 1), True),
    ("max_pool2d_dilated",
     lambda a, b: F.max_pool2d(a, (2, 3), (1, 2), (1, 0), (2, 1), True), True),
    # (avg_pool2d: channels-last inputs round .5 ties by PyTorch's NHWC rule, so they may
    # differ from C order there; see tests/test_pool.py test_issue19_avg_pool_channels_last_ties)
    ("adaptive_avg_pool2d", lambda a, b: F.adaptive_avg_pool2d(a, 2), True),
    ("adaptive_avg_pool2d_1", lambda a, b: F.adaptive_avg_pool2d(a, 1), False),   # 1x1: both
    ("interpolate", lambda a, b: F.interpolate(a, scale_factor=2, mode="bilinear"), False),
    ("batch_norm", lambda a, b: F.batch_norm(a, ZEROS, ONES, ONES, ZEROS, 1e-5, 0.1, 100), True),
    # (group_norm: channels-last inputs take PyTorch's NHWC formula; see tests/test_norm.py)
    ("cat", lambda a, b: F.cat([a, b], 1, 0.1, 3), True),
    ("cat_same_qparams", lambda a, b: F.cat([a, b], 1), True),
    ("cat_dim3", lambda a, b: F.cat([a, b], 3), True),
    ("mean", lambda a, b: F.mean(a, (2, 3)), False),
    ("max_dim", lambda a, b: F.max(a, 1)[0], False),
    ("conv2d", lambda a, b: F.conv2d(a, W, padding=1, scale=0.2, zero_point=60), True),
    ("contiguous", lambda a, b: a.contiguous(), False),
    ("clone", lambda a, b: a.clone(), False),
]


@pytest.mark.parametrize("backend", ["ref", "fast"])
@pytest.mark.parametrize("name,op,keeps", OPS, ids=[o[0] for o in OPS])
def test_channels_last_equals_c_order(backend, name, op, keeps):
    r = np.random.default_rng(0)
    a, b = channels_last(r, (2, 6, 9, 7)), channels_last(r, (2, 6, 9, 7))
    assert memory_order(a._int) == [0, 2, 3, 1]
    before = a.int_repr()
    with qops.backend(backend):
        got = op(a, b)
        want = op(a.contiguous(), b.contiguous())
    np.testing.assert_array_equal(_raw(got), _raw(want))
    np.testing.assert_array_equal(a.int_repr(), before)          # the input is untouched
    arr = got._int if isinstance(got, qops.QTensor) else got
    if keeps is None:   # the kernel's choice: channels last or C order, dense either way
        assert memory_order(arr) == [0, 2, 3, 1] or arr.flags.c_contiguous
    elif keeps:         # as PyTorch: the result lies in memory as the input does
        assert memory_order(arr) == [0, 2, 3, 1]
    elif backend == "fast":
        assert arr.flags.c_contiguous


@pytest.mark.parametrize("backend", ["ref", "fast"])
def test_relu_inplace_on_channels_last(backend):
    a = channels_last(np.random.default_rng(2), (2, 5, 4, 3))
    want = F.relu(a.contiguous()).int_repr()
    base = a._int.base
    with qops.backend(backend):
        out = F.relu_(a)
    assert out is a and a._int.base is base
    np.testing.assert_array_equal(a.int_repr(), want)


@pytest.mark.parametrize("backend", ["ref", "fast"])
def test_per_channel_on_channels_last(backend):
    r = np.random.default_rng(3)
    x = np.ascontiguousarray(r.normal(size=(2, 5, 6, 4)).astype(np.float32)).transpose(0, 3, 1, 2)
    scales, zps = r.uniform(0.01, 0.1, 4).astype(np.float32), r.integers(100, 150, 4)
    with qops.backend(backend):
        q = qops.quantize_per_channel(x, scales, zps, 1, qops.quint8)
        qc = qops.quantize_per_channel(np.ascontiguousarray(x), scales, zps, 1, qops.quint8)
        np.testing.assert_array_equal(q.int_repr(), qc.int_repr())
        assert memory_order(q._int) == [0, 2, 3, 1]
        np.testing.assert_array_equal(q.dequantize(), qc.dequantize())
        assert memory_order(q.dequantize()) == [0, 2, 3, 1]
        qt = qops.quantize_per_tensor(x, 0.05, 3, qops.qint8)
        np.testing.assert_array_equal(
            qt.int_repr(),
            qops.quantize_per_tensor(np.ascontiguousarray(x), 0.05, 3, qops.qint8).int_repr())


def test_memory_order():
    a = np.zeros((2, 3, 4, 5), np.uint8)
    assert memory_order(a) is None                                  # already C order
    assert memory_order(a.transpose(0, 2, 3, 1)) == [0, 3, 1, 2]
    assert memory_order(a[:, :, ::2]) is None                       # not dense
    assert memory_order(a[..., ::-1]) is None                       # negative strides


@pytest.mark.parametrize("backend", ["ref", "fast"])
def test_mean_over_any_dims_of_any_permuted_block(backend):
    # reduced in memory order where the dims are one block there (H, W of NHWC), else by copy
    import itertools
    a = np.random.default_rng(4).integers(0, 256, (2, 5, 4, 3)).astype(np.uint8)
    for perm in itertools.permutations(range(4)):
        q = qops.make_per_tensor_quantized_tensor(a.transpose(perm), 0.1, 3)
        qc = q.contiguous()
        for dims in (None, 1, 3, (2, 3), (1, 2), (0, 3), (1, 3), (0, 2, 3)):
            for keepdim in (False, True):
                with qops.backend(backend):
                    got, want = F.mean(q, dims, keepdim), F.mean(qc, dims, keepdim)
                assert got.shape == want.shape
                np.testing.assert_array_equal(got.int_repr(), want.int_repr())


@pytest.mark.parametrize("backend", ["ref", "fast"])
@pytest.mark.parametrize("nd,c,kw", [
    (1, 8, dict(padding=1)),
    (2, 5, dict(padding=2, stride=2)),                   # a partial channel quad, stride 2
    (2, 16, dict(padding=1, dilation=2)),
    (2, 12, dict(padding=1, groups=3)),                  # grouped: transposed first
    (2, 6, dict(padding=1, groups=6)),                   # depthwise: transposed first
    (2, 8, dict(padding=1, padding_mode="reflect")),
    (3, 8, dict(padding=1)),
])
def test_conv_on_channels_last(backend, nd, c, kw):
    # ungrouped convs build their planes straight from NHWC memory, 4 channels at a time
    r = np.random.default_rng(5)
    shape = (2, c) + (9, 7, 6)[3 - nd:]
    x = channels_last(r, shape)
    g = kw.get("groups", 1)
    w = qops.quantize_per_tensor(r.normal(size=(2 * g, c // g) + (3,) * nd).astype(np.float32),
                                 0.02, 0, qops.qint8)
    conv = getattr(F, f"conv{nd}d")
    with qops.backend(backend):
        bias = np.linspace(-1, 1, 2 * g).astype(np.float32)
        got = conv(x, w, bias, scale=0.3, zero_point=70, **kw)
        want = conv(x.contiguous(), w, bias, scale=0.3, zero_point=70, **kw)
    np.testing.assert_array_equal(got.int_repr(), want.int_repr())


def test_memory_order_ignores_strides_of_size_one_axes():
    # numpy gives a size-1 axis any stride (here a batch of one after a reshape of a
    # transposed view): the block is still channels last
    from qops._layout import channels_last_order, is_channels_last, memory_order
    a = np.zeros((1, 112, 112, 64), np.uint8).transpose(0, 3, 1, 2)
    odd = np.lib.stride_tricks.as_strided(a, a.shape, (64, 1, 7168, 64))
    assert memory_order(odd) == channels_last_order(4) and is_channels_last(odd)
    b = np.zeros((2, 5, 1, 7), np.uint8).transpose(0, 3, 1, 2)
    assert b.transpose(memory_order(b)).flags.c_contiguous


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5, 17, 24, 31, 70, 100])
def test_few_channel_images_turn_channels_last_exactly(channels):
    # the byte transpose takes 1-4 rows (an RGB image's planes) by widening and compressing
    # 16 columns at a time, the rest of a row one byte at a time; more rows take the tiles,
    # the last 16 rows of a block over rows the tile before did (24, 31, and 100 split into
    # 64-row strips where there are fewer columns: 36 rows after the first strip), a block
    # of under 16 rows (70: 6 after the first strip) a byte at a time
    from qops import _fast
    kernels = _fast.load("conv")
    rng = np.random.default_rng(channels)
    for n, cols in [(1, 1), (1, 15), (2, 16), (3, 17), (1, 100), (2, 50176)]:
        x = rng.integers(0, 256, (n, channels, cols), dtype=np.uint8)
        got = kernels._transposed(x, (n, cols, channels))
        np.testing.assert_array_equal(got, x.transpose(0, 2, 1), err_msg=str((n, cols)))
