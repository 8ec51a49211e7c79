"""Quantized convolution (conv1d/2d/3d, fused relu): the definition, as readable numpy.

Contract: uint8 input (N, C, D, H, W), int8 weight (O, C/groups, KD, KH, KW) with one zero
point per output channel; exact integer accumulation of (x - x_zp) * (w - w_zp); the float32
bias term and requantization of docs/semantics.md §8; uint8 output (N, O, OD, OH, OW).
conv1d and conv2d are this 3-D convolution with unit leading spatial dimensions.
"""
import numpy as np

from qops._ref.quant import q_vec

F32 = np.float32


def pack_weight(w, w_zero_points, groups):
    """Return the weight in the form `conv` consumes (the reference keeps it as it is).

    Parameters
    ----------
    w : int8 ndarray (O, C/groups, KD, KH, KW)
    w_zero_points : int32 ndarray (O,)
    groups : int
    """
    return (np.array(w, dtype=np.int8), np.array(w_zero_points, dtype=np.int32))


def conv(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
         stride, padding, dilation, groups):
    """Quantized 3-D convolution with requantized uint8 output.

    For output channel o (in group g) and each output position::

        acc = sum over the group's input channels and kernel taps of (x - x_zp) * (w - w_zp[o])
        y   = f32(f32(acc) + bias_term[o])
        out = clamp(rint(f32(y * multiplier[o])) + out_zp, relu ? out_zp : 0, 255)

    Zero padding stands for real 0, so padded taps hold the input zero point and add nothing.

    Parameters
    ----------
    x : uint8 ndarray (N, C, D, H, W)
    packed : the result of `pack_weight`
    x_zero_point : int
    bias_term : float32 ndarray (O,), the bias divided by x_scale * w_scale[o] (0 without bias)
    multiplier : float32 ndarray (O,), f32(x_scale * w_scale[o]) / out_scale
    out_zero_point : int
    relu : bool, clamp below at the output zero point
    stride, padding, dilation : 3-tuples of ints (depth, height, width)
    groups : int
    """
    w, w_zp = packed
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    kernel = w.shape[2:]
    pad = [(0, 0), (0, 0)] + [(p, p) for p in padding]
    xp = np.pad(x.astype(np.int64) - x_zero_point, pad)       # real 0 in the padding
    out_sizes = [(xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
                 for i in range(3)]
    span = [stride[i] * (out_sizes[i] - 1) + 1 for i in range(3)]   # input extent of one tap
    wk = w.astype(np.int64) - w_zp.astype(np.int64)[:, None, None, None, None]
    og = o // groups
    acc = np.zeros((n, o) + tuple(out_sizes), dtype=np.int64)
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = wk[g * og:(g + 1) * og]
        for kd in range(kernel[0]):
            for kh in range(kernel[1]):
                for kw in range(kernel[2]):
                    # the input values this tap sees, for every output position
                    taps = xg[:, :,
                              kd * dilation[0]: kd * dilation[0] + span[0]: stride[0],
                              kh * dilation[1]: kh * dilation[1] + span[1]: stride[1],
                              kw * dilation[2]: kw * dilation[2] + span[2]: stride[2]]
                    acc[:, g * og:(g + 1) * og] += np.einsum("ncdhw,oc->nodhw", taps,
                                                             wg[:, :, kd, kh, kw])
    assert np.all(np.abs(acc) <= 2**31 - 1), "accumulator beyond int32 (the wrapper checks this)"
    shape = (1, o, 1, 1, 1)
    y = acc.astype(F32) + np.asarray(bias_term, F32).reshape(shape)
    lo = out_zero_point if relu else 0
    out = q_vec(y, np.asarray(multiplier, F32).reshape(shape), out_zero_point, lo, 255)
    return out.astype(np.uint8)


def conv_cl(x, packed, x_zero_point, bias_term, multiplier, out_zero_point, relu,
            stride, padding, dilation, groups):
    """conv of channels-last data: x (N, D, H, W, C), result (N, OD, OH, OW, O). The same
    convolution; channels last is only another memory order."""
    y = conv(np.moveaxis(np.asarray(x), -1, 1), packed, x_zero_point, bias_term, multiplier,
             out_zero_point, relu, stride, padding, dilation, groups)
    return np.ascontiguousarray(np.moveaxis(y, 1, -1))
