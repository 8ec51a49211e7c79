"""Interpolation kernels: nearest / nearest-exact gathers and bilinear (docs/semantics.md §12).

Contract: raw uint8/int8/int32 arrays (N, C, D, H, W) in (4-D inputs have D = 1), the same
dtype out, qparams unchanged. Nearest modes gather raw values; bilinear blends raw values in
float32 (left to right, no fused multiply-add) and quantizes with Q_leg, round half to even.
Source coordinates use float32 ratios prepared by the caller (`scales`).
"""
import numpy as np

F32 = np.float32


def _nearest_index(out_len, in_len, ratio, exact):
    """src = min(floor(f32(dst * r)), in-1);
    nearest-exact: min(floor(f32(f32(dst+0.5) * r)), in-1)."""
    dst = np.arange(out_len).astype(F32)
    if exact:
        dst = dst + F32(0.5)
    src = np.floor(dst * F32(ratio)).astype(np.int64)
    return np.minimum(src, in_len - 1)


def upsample_nearest(x, out_size, ratios, exact):
    """Nearest-neighbour resize: a gather of raw values.

    Parameters
    ----------
    x : integer ndarray (N, C, D, H, W)
    out_size : 3-tuple of ints (D, H, W)
    ratios : 3 float32 source-per-destination ratios (D, H, W)
    exact : bool, nearest-exact (pixel centres) instead of nearest
    """
    x = np.asarray(x)
    d, h, w = (_nearest_index(o, L, r, exact) for o, L, r in zip(out_size, x.shape[2:], ratios))
    return x[:, :, d][:, :, :, h][:, :, :, :, w]


def _linear_source(out_len, in_len, ratio, align_corners):
    """Per output: (i0, step to i1 (0 or 1), lambda1, lambda0) along one dim.

    align_corners: src = f32(r * dst); else src = max(f32(f32(r * f32(dst + 0.5)) - 0.5), 0).
    i0 = int(src); step = (i0 < in-1); l1 = f32(src - i0); l0 = f32(1 - l1).
    """
    dst = np.arange(out_len).astype(F32)
    r = F32(ratio)
    if align_corners:
        src = r * dst
    else:
        src = np.maximum(r * (dst + F32(0.5)) - F32(0.5), F32(0))
    i0 = src.astype(np.int64)
    step = (i0 < in_len - 1).astype(np.int64)
    l1 = src - i0.astype(F32)
    l0 = F32(1) - l1
    return i0, step, l1, l0


def upsample_bilinear(x, out_size, ratios, align_corners, zero_point):
    """Bilinear resize of (N, C, 1, H, W) as PyTorch's NCHW kernel, output qparams = input's.

        v   = l0*(m0*p00 + m1*p01) + l1*(m0*p10 + m1*p11) - zp    (float32, left to right)
        out = clampQ(rint(f32(v + zp)))                           (Q_leg with scale ratio 1)

    Parameters
    ----------
    x : uint8 or int8 ndarray (N, C, 1, H, W)
    out_size : 3-tuple of ints (1, OH, OW)
    ratios : 3 float32 ratios (D unused, H, W): (in-1)/(out-1) with align_corners, else 1/scale
        or in/out
    align_corners : bool
    zero_point : int
    """
    x = np.asarray(x)
    info = np.iinfo(x.dtype)
    H, W = x.shape[3:]
    h0, hs, l1, l0 = _linear_source(out_size[1], H, ratios[1], align_corners)
    w0, ws, m1, m0 = _linear_source(out_size[2], W, ratios[2], align_corners)
    p = x.astype(F32)[:, :, :1]
    p00 = p[:, :, :, h0][:, :, :, :, w0]
    p01 = p[:, :, :, h0][:, :, :, :, w0 + ws]
    p10 = p[:, :, :, h0 + hs][:, :, :, :, w0]
    p11 = p[:, :, :, h0 + hs][:, :, :, :, w0 + ws]
    l0, l1 = l0[:, None], l1[:, None]
    v = l0 * (m0 * p00 + m1 * p01) + l1 * (m0 * p10 + m1 * p11) - F32(zero_point)
    u = v + F32(zero_point)
    return np.clip(np.rint(u), info.min, info.max).astype(x.dtype)
