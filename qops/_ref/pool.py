"""Pooling kernels: max, average and adaptive pools on raw integer values (docs/semantics.md §11).

Contract: raw uint8/int8 (int32 for max pools) arrays of shape (N, C, D, H, W) in, the same
dtype out, qparams unchanged. Max pools compare raw values. Average pools sum raw values in
exact integers and requantize in float32 with round half to even, with PyTorch's formula for
the memory layout: on C-order data its NCHW avg_pool2d formula (zero point added before
rounding) for every dimension count, and for adaptive pools rint(f32(sum * f32 reciprocal))
on raw values; on channels-last data the vector body of its NHWC kernels (avg_pool_cl,
adaptive_avg_pool_cl).
1-d and 2-d pools are 3-d pools with unit kernels on the missing leading dims.
"""
import numpy as np

from qops._ref.quant import fma_f32

F32 = np.float32


def _window_taps(out_len, stride, pad, kernel, dilation):
    """For each tap k: input positions o*stride - pad + k*dilation of every output o."""
    o = np.arange(out_len)
    return [o * stride - pad + k * dilation for k in range(kernel)]


def _gather(x, d, h, w):
    """x[..., d, h, w] over index vectors (broadcast to an output grid); invalid taps read 0."""
    n, c, D, H, W = x.shape
    valid = (((d >= 0) & (d < D))[:, None, None] & ((h >= 0) & (h < H))[None, :, None]
             & ((w >= 0) & (w < W))[None, None, :])
    vals = (x[:, :, np.clip(d, 0, D - 1)][:, :, :, np.clip(h, 0, H - 1)]
            [:, :, :, :, np.clip(w, 0, W - 1)])
    flat = (np.clip(d, 0, D - 1)[:, None, None] * H + np.clip(h, 0, H - 1)[None, :, None]) * W \
        + np.clip(w, 0, W - 1)[None, None, :]
    return vals, valid, flat


def max_pool(x, kernel_size, stride, padding, dilation, out_size, with_indices):
    """Max of raw values over the valid (non-padded) taps of each dilated window.

    A window with no valid tap gives the dtype's minimum. Indices, when asked for, are the
    flat (d*H + h)*W + w position of the first maximum in (d, h, w) scan order, as PyTorch's
    float max pool reports them.

    Parameters
    ----------
    x : integer ndarray (N, C, D, H, W)
    kernel_size, stride, padding, dilation, out_size : 3-tuples of ints (D, H, W)
    with_indices : bool, also return the int64 indices
    """
    x = np.asarray(x)
    info = np.iinfo(x.dtype)
    taps = [_window_taps(o, s, p, k, d)
            for o, s, p, k, d in zip(out_size, stride, padding, kernel_size, dilation)]
    shape = x.shape[:2] + tuple(out_size)
    best = np.full(shape, info.min, dtype=np.int64)
    found = np.zeros(shape, dtype=bool)
    index = np.zeros(shape, dtype=np.int64)
    for td in taps[0]:
        for th in taps[1]:
            for tw in taps[2]:
                vals, valid, flat = _gather(x, td, th, tw)
                vals = vals.astype(np.int64)
                # strict > keeps the first maximum; the first valid tap always replaces
                better = valid & ((vals > best) | ~found)
                best = np.where(better, vals, best)
                index = np.where(better, flat, index)
                found |= valid
    out = best.astype(x.dtype)
    return (out, index) if with_indices else out


def max_pool_cl(x, kernel_size, stride, padding, dilation, out_size):
    """max_pool (without indices) of channels-last data: x (N, D, H, W, C), result (N, OD,
    OH, OW, C). The same windows and values: channels last is only another memory order."""
    y = max_pool(np.moveaxis(np.asarray(x), -1, 1), kernel_size, stride, padding, dilation,
                 out_size, False)
    return np.ascontiguousarray(np.moveaxis(y, 1, -1))


def _avg_window(out_len, stride, pad, kernel, length):
    """Per output: (start, end) clipped to the input, and the pool length counting padding.

    start = o*stride - pad; end = min(start + kernel, length + pad); pool = end - start;
    then start is clipped to >= 0 and end to <= length.
    """
    start = np.arange(out_len) * stride - pad
    end = np.minimum(start + kernel, length + pad)
    pool = end - start
    return np.maximum(start, 0), np.minimum(end, length), pool


def avg_pool(x, kernel_size, stride, padding, out_size, count_include_pad, divisor_override,
             zero_point):
    """Average pool: exact integer window sums, requantized as PyTorch's NCHW avg_pool2d.

        acc = sum(q over the clipped window) - size * zp         (size = valid taps)
        div = divisor_override or (count_include_pad ? pool : size)
        m   = f32(1.0 / div)
        out = clampQ(rint(f32(f32(f32(acc) * m) + f32(zp))))    # zp added before rounding

    Parameters
    ----------
    x : uint8 or int8 ndarray (N, C, D, H, W)
    kernel_size, stride, padding, out_size : 3-tuples of ints (D, H, W)
    count_include_pad : bool
    divisor_override : int, 0 for none
    zero_point : int, the input's (and output's) zero point
    """
    x = np.asarray(x)
    info = np.iinfo(x.dtype)
    n, c = x.shape[:2]
    out = np.empty((n, c) + tuple(out_size), dtype=x.dtype)
    wins = [_avg_window(o, s, p, k, L) for o, s, p, k, L in
            zip(out_size, stride, padding, kernel_size, x.shape[2:])]
    xi = x.astype(np.int64)
    for od in range(out_size[0]):
        d0, d1, dpool = (int(a[od]) for a in wins[0])
        for oh in range(out_size[1]):
            h0, h1, hpool = (int(a[oh]) for a in wins[1])
            for ow in range(out_size[2]):
                w0, w1, wpool = (int(a[ow]) for a in wins[2])
                size = (d1 - d0) * (h1 - h0) * (w1 - w0)
                acc = xi[:, :, d0:d1, h0:h1, w0:w1].sum(axis=(2, 3, 4)) - size * zero_point
                if divisor_override:
                    div = divisor_override
                else:
                    div = dpool * hpool * wpool if count_include_pad else size
                m = F32(1.0 / div)
                t = acc.astype(F32) * m
                u = t + F32(zero_point)
                out[:, :, od, oh, ow] = np.clip(np.rint(u), info.min, info.max)
    return out


def _adaptive_bounds(out_len, in_len):
    """start = floor(f32(o*I) / f32(O)), end = ceil(f32((o+1)*I) / f32(O)): float division."""
    o = np.arange(out_len)
    start = np.floor((o * in_len).astype(F32) / F32(out_len)).astype(np.int64)
    end = np.ceil(((o + 1) * in_len).astype(F32) / F32(out_len)).astype(np.int64)
    return start, end


def adaptive_avg_pool(x, out_size):
    """Adaptive average pool on raw values: out = rint(f32(f32(sum q) * r)), no zero point.

    r = f32(f32(f32(1.0 / kD) / kH) / kW) with the window lengths kD, kH, kW; the result
    of an average of raw values is always in range, so there is no clamp.

    Parameters
    ----------
    x : uint8 or int8 ndarray (N, C, D, H, W)
    out_size : 3-tuple of ints (D, H, W)
    """
    x = np.asarray(x)
    n, c = x.shape[:2]
    out = np.empty((n, c) + tuple(out_size), dtype=x.dtype)
    bounds = [_adaptive_bounds(o, L) for o, L in zip(out_size, x.shape[2:])]
    xi = x.astype(np.int64)
    for od in range(out_size[0]):
        d0, d1 = int(bounds[0][0][od]), int(bounds[0][1][od])
        for oh in range(out_size[1]):
            h0, h1 = int(bounds[1][0][oh]), int(bounds[1][1][oh])
            for ow in range(out_size[2]):
                w0, w1 = int(bounds[2][0][ow]), int(bounds[2][1][ow])
                r = F32(F32(F32(F32(1.0) / F32(d1 - d0)) / F32(h1 - h0)) / F32(w1 - w0))
                total = xi[:, :, d0:d1, h0:h1, w0:w1].sum(axis=(2, 3, 4))
                out[:, :, od, oh, ow] = np.rint(total.astype(F32) * r)
    return out


def avg_pool_cl(x, kernel_size, stride, padding, out_size, count_include_pad, divisor_override,
                zero_point):
    """avg_pool of channels-last data: x (N, D, H, W, C), result (N, OD, OH, OW, C).

    The windows, acc and div of avg_pool, requantized as the vector body of PyTorch's NHWC
    kernel (zero point added after rounding):

        m   = f32(1 / div)
        out = clampQ(rint(f32(f32(acc) * m)) + zp)

    PyTorch's scalar tail (the last C % 8 channels with AVX2, C % 16 with AVX-512) adds the
    zero point before rounding; qops uses the vector formula for every channel, so the
    result never depends on the channel count (they differ by 1 at exact .5 ties when zp is
    odd). Parameters as avg_pool, with x channels last.
    """
    x = np.asarray(x)
    info = np.iinfo(x.dtype)
    n, c = x.shape[0], x.shape[-1]
    out = np.empty((n,) + tuple(out_size) + (c,), dtype=x.dtype)
    wins = [_avg_window(o, s, p, k, L) for o, s, p, k, L in
            zip(out_size, stride, padding, kernel_size, x.shape[1:4])]
    xi = x.astype(np.int64)
    for od in range(out_size[0]):
        d0, d1, dpool = (int(a[od]) for a in wins[0])
        for oh in range(out_size[1]):
            h0, h1, hpool = (int(a[oh]) for a in wins[1])
            for ow in range(out_size[2]):
                w0, w1, wpool = (int(a[ow]) for a in wins[2])
                size = (d1 - d0) * (h1 - h0) * (w1 - w0)
                acc = xi[:, d0:d1, h0:h1, w0:w1].sum(axis=(1, 2, 3)) - size * zero_point
                if divisor_override:
                    div = divisor_override
                else:
                    div = dpool * hpool * wpool if count_include_pad else size
                m = F32(F32(1) / F32(div))
                t = np.rint(acc.astype(F32) * m) + zero_point
                out[:, od, oh, ow] = np.clip(t, info.min, info.max)
    return out


def adaptive_avg_pool_cl(x, out_size, zero_point):
    """adaptive_avg_pool of channels-last data: x (N, D, H, W, C), result (N, OD, OH, OW, C).

    The windows of adaptive_avg_pool, requantized as PyTorch's NHWC kernel (vector body and
    scalar tail alike: Q_fma, the zero point added before rounding in one fused step, with
    the inverse of the inverse of the multiplier):

        m   = f32(1 / size);  inv = f32(1 / f32(1 / m))
        out = clampQ(rint(fma(f32(sum - size * zp), inv, f32(zp))))

    Parameters
    ----------
    x : uint8 or int8 ndarray (N, D, H, W, C)
    out_size : 3-tuple of ints (D, H, W)
    zero_point : int, the input's (and output's) zero point
    """
    x = np.asarray(x)
    info = np.iinfo(x.dtype)
    n, c = x.shape[0], x.shape[-1]
    out = np.empty((n,) + tuple(out_size) + (c,), dtype=x.dtype)
    bounds = [_adaptive_bounds(o, L) for o, L in zip(out_size, x.shape[1:4])]
    xi = x.astype(np.int64)
    for od in range(out_size[0]):
        d0, d1 = int(bounds[0][0][od]), int(bounds[0][1][od])
        for oh in range(out_size[1]):
            h0, h1 = int(bounds[1][0][oh]), int(bounds[1][1][oh])
            for ow in range(out_size[2]):
                w0, w1 = int(bounds[2][0][ow]), int(bounds[2][1][ow])
                size = (d1 - d0) * (h1 - h0) * (w1 - w0)
                m = F32(F32(1) / F32(size))
                inv = F32(F32(1) / F32(F32(1) / m))
                acc = xi[:, d0:d1, h0:h1, w0:w1].sum(axis=(1, 2, 3)) - size * zero_point
                t = fma_f32(acc.astype(F32), inv, F32(zero_point))
                out[:, od, oh, ow] = np.clip(np.rint(t), info.min, info.max)
    return out


def adaptive_max_pool(x, out_size, with_indices):
    """Adaptive max pool on raw values; windows as PyTorch's float adaptive max pool.

    start = floor(o*I/O), end = ceil((o+1)*I/O) in exact integer arithmetic. Indices are the
    flat (d*H + h)*W + w position of the first maximum in scan order.

    Parameters
    ----------
    x : integer ndarray (N, C, D, H, W)
    out_size : 3-tuple of ints (D, H, W)
    with_indices : bool, also return the int64 indices
    """
    x = np.asarray(x)
    n, c, D, H, W = x.shape
    shape = (n, c) + tuple(out_size)
    out = np.empty(shape, dtype=x.dtype)
    index = np.empty(shape, dtype=np.int64)
    if out.size == 0:
        return (out, index) if with_indices else out
    lims = [((np.arange(O) * L) // O, -((-(np.arange(O) + 1) * L) // O))
            for O, L in zip(out_size, (D, H, W))]
    for od in range(out_size[0]):
        d0, d1 = int(lims[0][0][od]), int(lims[0][1][od])
        for oh in range(out_size[1]):
            h0, h1 = int(lims[1][0][oh]), int(lims[1][1][oh])
            for ow in range(out_size[2]):
                w0, w1 = int(lims[2][0][ow]), int(lims[2][1][ow])
                win = x[:, :, d0:d1, h0:h1, w0:w1].reshape(n, c, -1)
                k = np.argmax(win, axis=2)          # argmax returns the first maximum
                out[:, :, od, oh, ow] = np.take_along_axis(win, k[..., None], 2)[..., 0]
                kd, rest = np.divmod(k, (h1 - h0) * (w1 - w0))
                kh, kw = np.divmod(rest, w1 - w0)
                index[:, :, od, oh, ow] = ((d0 + kd) * H + h0 + kh) * W + w0 + kw
    return (out, index) if with_indices else out
