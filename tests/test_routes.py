"""Every named kernel route of the routed op families (qops._show.ROUTED_FAMILIES but pool,
which tests its own in tests/test_pool.py): a table of cases, one or more per route, each
reaching its route (qops._show.explain) and giving the reference's bits.

A route this build or CPU cannot take (AVX-512, AMX, VBMI on an AVX2 machine; the AVX2 routes
on the baseline build) is skipped with the reason, after its case has still checked fast ==
ref on the route taken instead.
"""
import numpy as np
import pytest

import qops
from qops import functional as F

RNG = np.random.default_rng(24)


def _module(family):
    from qops import _fast
    return _fast.load(family)


def _qu8(shape, zp=3, scale=0.05):
    data = RNG.integers(0, 256, size=shape).astype(np.uint8)
    return qops.make_per_tensor_quantized_tensor(data, scale, zp)


def _qu8_cl(shape, zp=3, scale=0.05):
    # an (N, C, H, W) tensor lying channels last in memory
    n, c, h, w = shape
    data = RNG.integers(0, 256, size=(n, h, w, c)).astype(np.uint8).transpose(0, 3, 1, 2)
    return qops.make_per_tensor_quantized_tensor(data, scale, zp)


def _qs8(shape, lo=-128, hi=128, zp=0, scale=0.01):
    data = RNG.integers(lo, hi, size=shape).astype(np.int8)
    return qops.make_per_tensor_quantized_tensor(data, scale, zp)


# -- linear -------------------------------------------------------------------------------

def _lin(m, k, n, wlo=-128, whi=128):
    return lambda: ((_qu8((m, k)), _qs8((n, k), wlo, whi),
                     RNG.normal(0, 1, n).astype(np.float32)),
                    dict(scale=float(0.05 * np.sqrt(k)), zero_point=100))


def _dyn(m, k, n, wlo=-128, whi=128):
    return lambda: ((RNG.normal(0, 2, (m, k)).astype(np.float32), _qs8((n, k), wlo, whi),
                     None), dict(reduce_range=False))


def _bell(n, k):
    # a trained layer's weights: mostly small, each row's largest at +-127 (per-channel
    # symmetric), so some pairs could saturate but a reordering of k avoids them
    w = RNG.normal(0, 1, (n, k))
    data = np.round(w / np.abs(w).max(1, keepdims=True) * 127).astype(np.int8)
    return qops.make_per_tensor_quantized_tensor(data, 0.01, 0)


def _lin_bell(m, k, n):
    return lambda: ((_qu8((m, k)), _bell(n, k), RNG.normal(0, 1, n).astype(np.float32)),
                    dict(scale=float(0.05 * np.sqrt(k)), zero_point=100))


def _dyn_bell(m, k, n):
    return lambda: ((RNG.normal(0, 2, (m, k)).astype(np.float32), _bell(n, k), None),
                    dict(reduce_range=False))


# (route, op, make() -> (args, kwargs)); ops whose call runs several routes list the one the
# case is about, the test asserts it is among them
LINEAR = [
    ("empty", F.linear, _lin(0, 8, 5)),
    # weights of one sign past 64 each: no pairing of k can keep pairs in int16
    ("linear.gemm", F.linear, _lin(7, 65, 33, 100, 128)),
    ("linear.gemm_pairsafe", F.linear, _lin(7, 65, 33, -60, 60)),
    ("linear.gemm_paired", F.linear, _lin_bell(13, 200, 40)),
    ("linear.amx", F.linear, _lin(40, 128, 20)),
    ("linear.chunked", F.linear, _lin(2, 33100, 3)),
    ("minmax.scan", F.linear_dynamic, _dyn(5, 40, 9)),
    ("linear_dynamic.gemm", F.linear_dynamic, _dyn(5, 40, 9, -128, -100)),
    ("linear_dynamic.gemm_pairsafe", F.linear_dynamic, _dyn(5, 40, 9, -64, 65)),
    ("linear_dynamic.gemm_paired", F.linear_dynamic, _dyn_bell(5, 300, 20)),
    ("linear_dynamic.amx", F.linear_dynamic, _dyn(33, 64, 9)),
    ("linear_dynamic.chunked", F.linear_dynamic, _dyn(2, 33100, 3)),
    ("matmul.gemm", F.matmul,
     lambda: ((_qu8((2, 5, 9)), _qu8((2, 9, 4))), dict(scale=0.5, zero_point=100))),
    ("matmul.int16", F.matmul,
     lambda: ((_qs8((3, 7, 33)), _qs8((3, 33, 18))), dict(scale=0.5, zero_point=-5))),
    ("matmul.chunked", F.matmul,
     lambda: ((_qs8((2, 33100)), _qs8((33100, 3))), dict(scale=0.5, zero_point=10))),
]

# -- quant --------------------------------------------------------------------------------

def _f32(shape, sd=3.0):
    return RNG.normal(0, sd, shape).astype(np.float32)


def _pc(data, scales, axis=1, dtype=qops.quint8):
    zps = np.arange(len(scales)) % 5 if dtype is not qops.qint32 else np.zeros(len(scales), int)
    return qops.make_per_channel_quantized_tensor(data, np.asarray(scales), zps, axis)


def _clone(t):
    return t.clone()


_EXACT = [0.5, 0.25, 0.125]         # float32 scales: dequantize computes in float32
_INEXACT = [0.1, 0.3, 0.7]

QUANT = [
    ("empty", qops.quantize_per_tensor, lambda: ((_f32((0, 3)), 0.1, 3, qops.quint8), {})),
    ("quantize_per_tensor.fma8", qops.quantize_per_tensor,
     lambda: ((_f32((4, 50)), 0.05, 3, qops.quint8), {})),
    ("quantize_per_tensor.fma8", qops.quantize_per_tensor,
     lambda: ((_f32((3, 70)), 0.05, -3, qops.qint8), {})),
    ("quantize_per_tensor.leg32", qops.quantize_per_tensor,
     lambda: ((_f32((4, 50)), 0.001, 7, qops.qint32), {})),
    ("quantize_per_channel.tables", qops.quantize_per_channel,
     lambda: ((_f32((2, 3, 5)), [0.1, 0.2, 0.05], [1, 2, 3], 1, qops.quint8), {})),
    ("quantize_per_channel.channels", qops.quantize_per_channel,
     lambda: ((_f32((2, 3, 130)), [0.1, 0.2, 0.05], [1, -2, 3], 1, qops.qint8), {})),
    ("dequantize_per_tensor.sc8", qops.dequantize, lambda: ((_qu8((5, 40)),), {})),
    ("dequantize_per_tensor.sc32", qops.dequantize,
     lambda: ((qops.quantize_per_tensor(_f32((5, 40)), 0.01, 4, qops.qint32),), {})),
    ("dequantize_per_channel.tables_f32", qops.dequantize,
     lambda: ((_pc(_raw8((2, 3, 5)), _EXACT),), {})),
    ("dequantize_per_channel.tables", qops.dequantize,
     lambda: ((_pc(_raw8((2, 3, 5)), _INEXACT),), {})),
    ("dequantize_per_channel.channels_f32", qops.dequantize,
     lambda: ((_pc(_raw8((2, 3, 20)), _EXACT),), {})),
    ("dequantize_per_channel.channels_pc8", qops.dequantize,
     lambda: ((_pc(_raw8((2, 3, 20)), _INEXACT),), {})),
    ("dequantize_per_channel.channels", qops.dequantize,
     lambda: ((_pc(RNG.integers(-99999, 99999, (2, 3, 20)).astype(np.int32), _INEXACT,
                   dtype=qops.qint32),), {})),
    ("requantize_per_tensor.direct8", F.requantize, lambda: ((_qu8((6, 50)), 0.07, 9), {})),
    ("requantize_per_tensor.via_float", F.requantize,
     lambda: ((_qu8((6, 50)), 0.07, 9, qops.qint8), {})),
    ("copy_raw.copy", _clone, lambda: ((_qu8((6, 50)),), {})),
    ("copy_raw.transpose", _clone,
     lambda: ((qops.make_per_tensor_quantized_tensor(
         _raw8((2, 5, 6, 8)).transpose(0, 3, 1, 2), 0.1, 3),), {})),
    ("copy_raw.strided", _clone,
     lambda: ((qops.make_per_tensor_quantized_tensor(_raw8((6, 50))[:, ::3], 0.1, 3),), {})),
]


def _raw8(shape):
    return RNG.integers(0, 256, size=shape).astype(np.uint8)


# -- activation ---------------------------------------------------------------------------

ACTIVATION = [
    ("empty", F.sigmoid, lambda: ((_qu8((0, 4)),), {})),
    ("empty", F.relu, lambda: ((_qu8((2, 0)),), {})),
    ("lut.vbmi", F.sigmoid, lambda: ((_qu8((3, 300)),), {})),
    ("lut.bytes", F.hardswish, lambda: ((_qs8((3, 300), zp=-4), 0.05, 3), {})),
    ("lut.bytes", F.leaky_relu, lambda: ((_qu8((5, 33)),), dict(negative_slope=0.2))),
    ("clamp.shifted", F.relu, lambda: ((_qu8((4, 1000), zp=120),), {})),
    ("clamp.loop", F.relu, lambda: ((_qu8((3, 50), zp=120),), {})),
    ("clamp.loop", F.hardtanh, lambda: ((_qs8((3, 50)),), dict(min_val=-0.3, max_val=0.5))),
    ("lut.bytes", F.gelu, lambda: ((_qs8((3, 40)),), dict(approximate="tanh"))),
    ("gelu.f32", F.gelu, lambda: ((RNG.normal(0, 2, (3, 5000)).astype(np.float32),), {})),
    ("empty", F.gelu, lambda: ((np.zeros((2, 0), np.float32),), {})),
]


# -- arith --------------------------------------------------------------------------------

ARITH = [
    ("empty", F.add, lambda: ((_qu8((0, 5)), _qu8((0, 5)), 0.1, 5), {})),
    ("add.vector", F.add, lambda: ((_qu8((3, 100)), _qu8((3, 100), zp=9), 0.1, 5), {})),
    ("add.vector", F.add_relu, lambda: ((_qs8((3, 70)), _qs8((3, 70), zp=2), 0.02, -5), {})),
    ("mul.vector", F.mul, lambda: ((_qu8((3, 100)), _qu8((3, 100), zp=9), 0.3, 5), {})),
    ("mul.planes", F.mul, lambda: ((_qu8((2, 40, 1, 1)), _qu8((2, 40, 5, 3), zp=9), 0.3, 5),
                                   {})),
    ("mul.rows", F.mul, lambda: ((_qu8((2, 40, 1, 1)), _qu8_cl((2, 40, 5, 3), zp=9), 0.3, 5),
                                 {})),
    ("requant_int.formula", F.add_scalar, lambda: ((_qu8((3, 100)), 1.0), {})),
    ("requant_int.lut_vbmi", F.add_scalar, lambda: ((_qs8((3, 100), zp=-3), 2.0), {})),
    ("requant_int.lut", F.add_scalar,
     lambda: ((_qu8((3, 100), scale=1e-3), 3e6), {})),
    ("reflect.not", F.mul_scalar, lambda: ((_qs8((3, 100)), -2.0), {})),
    ("cat_into.short", F.cat,
     lambda: (([_qu8((4, 10)), _qu8((4, 20), zp=7)],), dict(dim=1, scale=0.07, zero_point=4))),
    ("cat_into.parts", F.cat,
     lambda: (([_qu8((4, 10)), _qu8((2, 10), zp=7)],), dict(dim=0, scale=0.07, zero_point=4))),
]


# -- norm ---------------------------------------------------------------------------------

def _bn(shape, cl=False, dtype=np.uint8):
    c = shape[1]

    def make():
        data = RNG.integers(0, 256, size=shape).astype(np.uint8)
        if dtype == np.int8:
            data = (data.astype(np.int16) - 128).astype(np.int8)
        if cl:
            data = np.ascontiguousarray(np.moveaxis(data, 1, -1))
            data = np.moveaxis(data, -1, 1)
        x = qops.make_per_tensor_quantized_tensor(data, 0.05, 3)
        return ((x, RNG.normal(0, 1, c), RNG.uniform(0.5, 2, c)),
                dict(weight=RNG.normal(1, 0.2, c), bias=RNG.normal(0, 0.3, c),
                     output_scale=0.04, output_zero_point=100))
    return make


def _gn(shape, groups, cl=False):
    c = shape[1]

    def make():
        data = RNG.integers(0, 256, size=shape).astype(np.uint8)
        if cl:
            data = np.moveaxis(np.ascontiguousarray(np.moveaxis(data, 1, -1)), -1, 1)
        x = qops.make_per_tensor_quantized_tensor(data, 0.05, 3)
        return ((x, groups), dict(weight=RNG.normal(1, 0.2, c), bias=RNG.normal(0, 0.3, c),
                                 output_scale=0.03, output_zero_point=120))
    return make


NORM = [
    ("empty", F.batch_norm, _bn((0, 3, 4, 4))),
    ("batch_norm.lut", F.batch_norm, _bn((2, 3, 24, 24))),
    ("batch_norm.rows", F.batch_norm, _bn((2, 3, 5, 7), dtype=np.int8)),
    ("batch_norm_cl.cl", F.batch_norm, _bn((2, 16, 5, 7), cl=True)),
    ("layer_norm.rows", F.layer_norm,
     lambda: ((_qu8((3, 4, 40)), 40), dict(weight=RNG.normal(1, 0.2, 40),
                                          bias=RNG.normal(0, 0.2, 40), output_scale=0.03,
                                          output_zero_point=128))),
    ("layer_norm_f32.f64rows", F.layer_norm,
     lambda: ((RNG.normal(0, 2, (3, 5, 40)).astype(np.float32), 40),
              dict(weight=RNG.normal(1, 0.2, 40), bias=RNG.normal(0, 0.2, 40)))),
    # rows past LNF_F64_MAX (16384), or builds without AVX2
    ("layer_norm_f32.rows", F.layer_norm,
     lambda: ((RNG.normal(0, 2, (2, 16400)).astype(np.float32), 16400),
              dict(weight=RNG.normal(1, 0.2, 16400), bias=RNG.normal(0, 0.2, 16400)))),
    ("group_norm.lut", F.group_norm, _gn((2, 4, 24, 24), 2)),
    ("group_norm.rows", F.group_norm, _gn((2, 4, 5, 6), 2)),
    ("group_norm_cl.cl", F.group_norm, _gn((2, 8, 5, 6), 4, cl=True)),
]


# -- reduce -------------------------------------------------------------------------------

REDUCE = [
    ("empty", F.max, lambda: ((_qu8((0, 4)),), dict(dim=1))),
    ("extreme_all.chunks", F.max, lambda: ((_qu8((5, 300)),), {})),
    ("extreme_all.chunks", F.min, lambda: ((_qs8((70000,)),), {})),
    ("extreme_dim.rows", F.max, lambda: ((_qu8((5, 300)),), dict(dim=1))),
    ("extreme_dim.cols", F.min, lambda: ((_qs8((5, 30, 7)),), dict(dim=1))),
    ("mean_dims.row_means", F.mean, lambda: ((_qu8((9, 300)),), dict(dim=1))),
    ("mean_dims.row_sums", F.mean, lambda: ((_qs8((2, 70000)),), dict(dim=1))),
    ("mean_dims.col_means", F.mean, lambda: ((_qu8((3, 40, 9)),), dict(dim=1))),
    ("mean_dims.col_blocks", F.mean, lambda: ((_qu8((1, (1 << 23) + 1, 2)),), dict(dim=1))),
]


# -- resize -------------------------------------------------------------------------------

RESIZE = [
    ("empty", F.interpolate, lambda: ((_qu8((0, 3, 4, 4)),), dict(size=(8, 8)))),
    ("upsample_nearest.gather", F.interpolate, lambda: ((_qu8((2, 3, 5, 7)),), dict(size=(9, 11)))),
    ("upsample_nearest.gather", F.interpolate,
     lambda: ((qops.quantize_per_tensor(_f32((1, 2, 4, 5)), 0.01, 0, qops.qint32),),
              dict(scale_factor=2))),
    ("upsample_nearest.twice", F.interpolate,
     lambda: ((_qs8((2, 3, 5, 7)),), dict(scale_factor=2))),
    ("upsample_nearest.twice_prefetch", F.interpolate,
     lambda: ((_qu8((1, 8, 512, 600)),), dict(scale_factor=2))),
    ("upsample_bilinear.x2", F.interpolate,
     lambda: ((_qu8((2, 3, 5, 7)),), dict(scale_factor=2, mode="bilinear"))),
    ("upsample_bilinear.planes", F.interpolate,
     lambda: ((_qs8((2, 3, 5, 7)),), dict(size=(9, 11), mode="bilinear", align_corners=True))),
]


# -- sort ---------------------------------------------------------------------------------

SORT = [
    ("empty", F.sort, lambda: ((_qu8((0, 5)),), {})),
    ("sort.stable32", F.sort,
     lambda: ((qops.quantize_per_tensor(_f32((3, 20)), 0.01, 0, qops.qint32),), {})),
    ("sort.rows", F.sort, lambda: ((_qs8((4, 300)),), dict(descending=True))),
    ("sort.long_row", F.sort, lambda: ((_qu8((2, 70000)),), {})),
    ("topk.stable32", F.topk,
     lambda: ((qops.quantize_per_tensor(_f32((3, 20)), 0.01, 0, qops.qint32), 4), {})),
    ("topk.small", F.topk, lambda: ((_qu8((11, 300)), 5), {})),
    ("topk.small_vbmi2", F.topk, lambda: ((_qs8((11, 300)), 5), dict(largest=False))),
    ("topk.general", F.topk, lambda: ((_qu8((3, 500)), 100), {})),
]


# -- conv ---------------------------------------------------------------------------------

def _conv(n, c, o, hw, k, cl, groups=1, stride=1, padding=0, wzp=0):
    """conv2d arguments: a quint8 input (C order, or channels last: NHWC memory seen as NCHW),
    a qint8 weight (symmetric unless wzp), a float bias."""
    def make():
        if cl:
            data = RNG.integers(0, 256, size=(n, hw, hw, c)).astype(np.uint8)
            x = qops.make_per_tensor_quantized_tensor(data, 0.05, 3).permute(0, 3, 1, 2)
        else:
            x = _qu8((n, c, hw, hw))
        w = _qs8((o, c // groups, k, k), -60, 60, zp=wzp)
        b = RNG.normal(0, 1, o).astype(np.float32)
        return ((x, w, b), dict(stride=stride, padding=padding, groups=groups,
                                scale=float(0.02 * np.sqrt(c // groups * k * k)), zero_point=90))
    return make


CONV = [
    ("conv_cl.dw_vnni", F.conv2d, _conv(1, 64, 64, 14, 3, True, groups=64, padding=1)),
    ("conv_cl.dw_avx2", F.conv2d, _conv(1, 37, 37, 9, 3, True, groups=37, stride=2, padding=1)),
    ("conv_cl.dw_avx2", F.conv2d, _conv(2, 24, 24, 12, 3, True, groups=24, stride=2,
                                        padding=1)),
    ("conv_cl.dw_planes", F.conv2d, _conv(1, 12, 12, 9, 3, True, groups=12, padding=1)),
    # 17 channels on a plane past _DW16_MAX_PIXELS at stride 1: the planes' row kernel
    ("conv_cl.dw_planes", F.conv2d, _conv(1, 17, 17, 81, 3, True, groups=17, padding=1)),
    # 16 channels, one 16-block, on the same plane: the AVX2 kernel
    ("conv_cl.dw_avx2", F.conv2d, _conv(1, 16, 16, 81, 3, True, groups=16, padding=1)),
    ("conv_cl.amx_im2col", F.conv2d, _conv(1, 16, 32, 8, 3, True, padding=1)),
    ("conv_cl.amx_padded", F.conv2d, _conv(1, 64, 32, 56, 3, True, stride=2, padding=1)),
    ("conv_cl.amx_flat", F.conv2d, _conv(2, 64, 48, 14, 3, True, stride=2, padding=1)),
    ("conv_cl.amx_flat", F.conv2d, _conv(2, 64, 48, 7, 3, True, padding=1)),
    ("conv_cl.amx_pixels", F.conv2d, _conv(1, 40, 17, 5, 1, True)),
    ("conv_cl.amx_pixels", F.conv2d, _conv(3, 72, 40, 19, 1, True)),
    ("conv_cl.amx_pixels", F.conv2d, _conv(2, 128, 16, 16, 1, True)),
    # strided: 25 pixels in one row; 49 pixels of 1024 -> 512 (at 2 threads they split the
    # channels: all gathered first); 2 x 400 pixels in rows (each thread gathers its own),
    # channels off 64 bytes; strides (1, 3)
    ("conv_cl.amx_pixels_strided", F.conv2d, _conv(1, 64, 40, 9, 1, True, stride=2)),
    ("conv_cl.amx_pixels_strided", F.conv2d, _conv(1, 1024, 512, 13, 1, True, stride=2)),
    ("conv_cl.amx_pixels_strided", F.conv2d, _conv(2, 136, 96, 40, 1, True, stride=2)),
    ("conv_cl.amx_pixels_strided", F.conv2d, _conv(1, 72, 48, 17, 1, True, stride=(1, 3))),
    ("conv_cl.gemm_1x1", F.conv2d, _conv(1, 64, 48, 7, 1, True)),
    ("conv_cl.gemm_im2col", F.conv2d, _conv(1, 32, 40, 9, 3, True, stride=2, padding=1)),
    # 49 rows, 160 output channels: at 2 threads each thread takes a share of the weight
    # panels (a partial one last) for all rows
    ("conv_cl.gemm_im2col", F.conv2d, _conv(1, 48, 160, 7, 3, True, padding=1, wzp=1)),
    ("conv_cl.gemm_taps", F.conv2d, _conv(1, 64, 40, 14, 3, True, padding=1)),
    ("conv_cl.gemm_taps", F.conv2d, _conv(2, 36, 20, 11, 5, True, stride=2)),
    # an RGB stem: kernel rows as taps
    ("conv_cl.gemm_taps", F.conv2d, _conv(1, 3, 32, 20, 3, True, stride=2, padding=1)),
    ("conv_cl.planes", F.conv2d, _conv(1, 8, 8, 9, 3, True, padding=1)),
    ("conv.dw_through_nhwc", F.conv2d, _conv(1, 64, 64, 14, 3, False, groups=64, stride=2)),
    # under 32 channels (24: not a divisor of the 64 lanes)
    ("conv.dw_through_nhwc", F.conv2d, _conv(2, 24, 24, 17, 3, False, groups=24, stride=2,
                                             padding=1)),
    ("conv.dw_rows", F.conv2d, _conv(1, 8, 8, 12, 3, False, groups=8, padding=1)),
    ("conv.gemm_1x1", F.conv2d, _conv(3, 72, 40, 1, 1, False, wzp=1)),
    ("conv.gemm_im2col", F.conv2d, _conv(3, 3, 20, 23, 7, False, stride=2, padding=3,
                                         wzp=1)),
    ("conv.taps_through_cl", F.conv2d, _conv(2, 3, 20, 23, 7, False, stride=2, padding=3)),
    ("conv.gemm_im2col", F.conv2d, _conv(2, 24, 40, 9, 1, False, stride=2, wzp=1)),
    # 16 channels, 3x3: on AVX-512 through channels last on small planes only
    ("conv.gemm_im2col", F.conv2d, _conv(1, 16, 24, 13, 3, False, padding=1)),
    ("conv.gemm_1x1_cl", F.conv2d, _conv(2, 40, 24, 7, 1, False, wzp=1)),
    # AVX-512: rows across the two images; 196 rows whose 2 threads split the weight panels
    ("conv.gemm_1x1_corder", F.conv2d, _conv(2, 40, 24, 7, 1, False, wzp=1)),
    ("conv.gemm_1x1_corder", F.conv2d, _conv(1, 480, 96, 14, 1, False)),
    ("conv.dw_through_cl", F.conv2d, _conv(2, 37, 37, 9, 5, False, groups=37, stride=2,
                                           padding=2, wzp=1)),
    ("conv.dw_through_cl", F.conv2d, _conv(1, 40, 40, 12, 3, False, groups=40, padding=1)),
    ("conv.dw_through_cl", F.conv2d, _conv(1, 24, 24, 12, 3, False, groups=24, stride=2,
                                           padding=1)),
    ("conv.planes.amx", F.conv2d, _conv(1, 32, 16, 9, 3, False, padding=1)),
    # C order, 1x1: a row of 512 pixels across the two images, 72 channels; 9 rows of 256
    # C order, padded: 40 channels (a 64-byte pixel with 24 zero bytes), at stride 2
    ("conv.amx_padded_corder", F.conv2d, _conv(1, 40, 48, 14, 3, False, padding=1)),
    ("conv.amx_padded_corder", F.conv2d, _conv(1, 64, 32, 56, 3, False, stride=2, padding=1)),
    ("conv.amx_pixels_corder", F.conv2d, _conv(2, 72, 32, 19, 1, False)),
    ("conv.amx_pixels_corder", F.conv2d, _conv(1, 256, 64, 48, 1, False)),
    ("conv.amx_through_cl", F.conv2d, _conv(2, 3, 40, 23, 7, False, stride=2, padding=3)),
    ("conv.amx_through_cl", F.conv2d, _conv(1, 31, 33, 6, 3, False, padding=1)),
    ("conv.planes.simd", F.conv2d, _conv(2, 5, 7, 9, 3, False, padding=1, wzp=2)),
    ("conv.planes.portable", F.conv2d, _conv(2, 5, 7, 9, 3, False, padding=1)),
]


# routes built for a tier that a wider CPU replaces with routes of its own (CI runs this
# file on the AVX2 build and with AMX off too, where they are taken)
_AMX_ROUTES = ("conv_cl.amx_im2col", "conv_cl.amx_flat", "conv_cl.amx_padded",
               "conv_cl.amx_pixels", "conv.amx_through_cl", "conv.amx_pixels_corder",
               "conv.amx_padded_corder",
               "conv.planes.amx")
SUPERSEDED = {"lut.bytes": ("lut.vbmi",), "requant_int.lut": ("requant_int.lut_vbmi",),
              "topk.small": ("topk.small_vbmi2",), "conv_cl.dw_planes": ("conv_cl.dw_vnni",),
              "conv_cl.planes": _AMX_ROUTES,
              # AVX-512 VNNI: windows read in place where the pixels outnumber the channels
              # or one thread runs
              "conv_cl.gemm_im2col": ("conv_cl.gemm_taps",),
              # AVX-512 builds: C-order 1x1 convs transpose per GEMM thread
              "conv.gemm_1x1_cl": ("conv.gemm_1x1_corder",)}

# family -> its route table
TABLES = {"conv": CONV, "linear": LINEAR, "quant": QUANT, "activation": ACTIVATION, "arith": ARITH,
          "norm": NORM, "reduce": REDUCE, "resize": RESIZE, "sort": SORT}


def _cases():
    for family, table in TABLES.items():
        for i, (route, fn, make) in enumerate(table):
            yield pytest.param(family, route, fn, make, id=f"{family}:{route}-{i}")


def _same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, qops.QTensor):
            assert g.equal(w)
        else:
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(g.view(np.uint8), w.view(np.uint8))


def test_every_route_of_every_routed_family_is_in_a_table():
    from qops._show import ROUTED_FAMILIES
    for family in ROUTED_FAMILIES:
        if family == "pool":              # tests/test_pool.py holds its table
            continue
        assert family in TABLES, family
        assert {r for r, *_ in TABLES[family]} == set(_module(family).ROUTES), family


def test_every_routed_family_shares_the_route_protocol():
    """Route, the trace and the ISA name come from qops/_fast/_routes.py, not per family."""
    from qops._fast import _routes
    from qops._show import ROUTED_FAMILIES
    for family in ROUTED_FAMILIES:
        mod = _module(family)
        if family == "conv" and mod._trace_routes is not _routes.trace_routes:
            continue                      # until conv.pyx takes the shared protocol too
        assert mod._trace_routes is _routes.trace_routes, family
        assert all(type(r) is _routes.Route for r in mod.ROUTES.values()), family
        assert not hasattr(mod, "namedtuple"), family


def test_module_isa_names_the_package_a_module_was_built_into():
    from qops._fast._routes import module_isa
    assert module_isa("qops._fast._avx2.reduce") == "avx2"
    assert module_isa("qops._fast._avx512.sort") == "avx512"
    assert module_isa("reduce") == "baseline"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("family,route,fn,make", list(_cases()))
def test_route(family, route, fn, make, threads):
    from qops._show import explain
    mod = _module(family)
    args, kwargs = make()
    with qops.threads(threads):
        taken = [r.name for r in explain(fn, *args, **kwargs)]
        with qops.backend("fast"):
            got = fn(*args, **kwargs)
    with qops.backend("ref"):
        want = fn(*args, **kwargs)
    _same(got, want)
    if route not in mod.BUILT:
        pytest.skip(f"{route}: not in this build or CPU ({qops._fast.ISA}); took {taken}")
    if set(SUPERSEDED.get(route, ())) & set(taken):
        pytest.skip(f"{route}: this CPU takes {taken} instead")
    if route.startswith(("conv.gemm", "conv_cl.gemm", "conv.taps")) and mod._MODE[0] == 2:
        pytest.skip(f"{route}: the AMX tier takes other routes ({taken})")
    assert route in taken, taken


def test_plan_names_the_route_of_a_direct_call():
    lin = _module("linear")
    packed = lin.pack_linear(np.ones((4, 8), np.int8), np.zeros(4, np.int32))
    r = lin.plan("linear", np.zeros((3, 8), np.uint8), packed)
    assert r.name in ("linear.gemm_pairsafe", "linear.gemm") and r.where == "qops_gemm.h"
    assert lin.plan("linear", np.zeros((0, 8), np.uint8), packed).name == "empty"


def test_plan_of_each_family_names_its_route():
    u8 = np.zeros
    assert _module("quant").plan("dequantize_per_tensor", u8(5, np.uint8), 0.1, 0).name == \
        "dequantize_per_tensor.sc8"
    assert _module("quant").plan("copy_raw", u8((4, 6), np.uint8)[:, ::2]).name == \
        "copy_raw.strided"
    assert _module("activation").plan("sigmoid", u8(5, np.uint8)).name in ("lut.bytes",
                                                                           "lut.vbmi")
    assert _module("arith").plan("reflect", u8(3, np.int8)).name == "reflect.not"
    assert _module("norm").plan("layer_norm", u8((2, 3), np.uint8)).name == "layer_norm.rows"
    assert _module("reduce").plan("mean_dims", u8((9, 4, 1), np.uint8)).name == \
        "mean_dims.row_means"
    assert _module("resize").plan("upsample_nearest", u8((1, 1, 1, 2, 3), np.uint8),
                                  (1, 4, 6), (1.0, 0.5, 0.5), False).name == \
        "upsample_nearest.twice"
    assert _module("sort").plan("topk", u8((2, 100), np.uint8), 70).name == "topk.general"


def test_conv_portable_planes_equal_ref():
    """The portable planes kernel, which builds with SIMD only take through _set_mode."""
    from qops._show import explain
    conv = _module("conv")
    args, kwargs = _conv(2, 5, 7, 9, 3, False, padding=1)()
    prev = conv._set_mode("portable")
    try:
        taken = [r.name for r in explain(F.conv2d, *args, **kwargs)]
        with qops.backend("fast"):
            got = F.conv2d(*args, **kwargs)
    finally:
        conv._set_mode(prev)
    with qops.backend("ref"):
        want = F.conv2d(*args, **kwargs)
    _same(got, want)
    assert "conv.planes.portable" in taken


def test_show_config_names_a_linear_route(capsys):
    args, kwargs = _lin(3, 16, 8, -60, 60)()
    qops.show_config(F.linear, *args, **kwargs)
    out = capsys.readouterr().out
    assert "route linear.gemm" in out and "in qops_gemm.h" in out


def test_cython_sources_use_no_negative_indexes():
    # the compiled modules run with wraparound off (setup.py's DIRECTIVES): there x.shape[-1]
    # reads before a tuple's first item, not its last (it crashed conv_cl twice while it was
    # being written), and the bounds-checked CI build turns wraparound back on, so only the
    # source shows it
    import re
    from pathlib import Path
    negative = re.compile(r"\[\s*-\s*\d")
    fast = Path(__file__).resolve().parent.parent / "qops" / "_fast"
    found = [f"{p.name}:{i}: {line.strip()}"
             for p in sorted(fast.rglob("*.px[di]")) + sorted(fast.rglob("*.pyx"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if negative.search(line.split("#", 1)[0])]
    assert not found, found
