"""Quantize, dequantize and requantize: the numeric primitives every op is built from.

Contract: float32 in, uint8/int8/int32 out (and back). All arithmetic is IEEE float32 unless
a step says float64; rounding is half to even (np.rint). The primitives follow PyTorch 2.13's
x86 kernels (docs/semantics.md §0.1):

    Q_fma  clampQ(rint(fma(x, 1/s, zp)))        quantize_per_tensor, 8-bit
    Q_leg  clampQ(rint(f32(f32(x/s) + zp)))      quantize_per_channel, qint32, kernel tails
    Q_vec  clampQ(rint(f32(x/s)) + zp)           vector bodies of float-domain kernels
    D_sc   f32(s * (q - zp))                     dequantize per tensor (q - zp wraps in int32)
    D_vec  fma(s, q, f32(s * -zp))               vector bodies of float-domain kernels
    D_pc   f32(f64(q - zp) * scale_f64)          dequantize per channel
"""
import numpy as np

F32 = np.float32


# -- primitives ---------------------------------------------------------------------------

def fma_f32(a, b, c):
    """float32 a*b + c with one rounding (IEEE fma), computed exactly through float64.

    The float64 product of two float32 values is exact; the sum is not always, so the error
    of the float64 sum (TwoSum) decides the one case where rounding twice would differ: a sum
    lying exactly halfway between two float32 values.
    """
    a, b, c = (np.asarray(v, dtype=F32) for v in (a, b, c))
    p = a.astype(np.float64) * b.astype(np.float64)
    cd = c.astype(np.float64)
    s = p + cd
    with np.errstate(invalid="ignore", over="ignore"):
        bv = s - p
        err = (p - (s - bv)) + (cd - bv)              # exact: p + c = s + err
        r = s.astype(F32)
        toward = np.where(s > r.astype(np.float64), np.inf, -np.inf).astype(F32)
        other = np.nextafter(r, toward)
        midpoint = (r.astype(np.float64) + other.astype(np.float64)) / 2 == s
        wrong_side = np.where(s > r.astype(np.float64), err > 0, err < 0)
        fix = midpoint & (err != 0) & np.isfinite(s) & wrong_side
    return np.where(fix, other, r)


def _clamp_nan_high(v, qmin, qmax):
    """Clamp to [qmin, qmax]; NaN goes to qmax (the AVX min/max order of PyTorch's quantize)."""
    return np.where(np.isnan(v), qmax, np.clip(v, qmin, qmax))


def q_fma(x, inv, zp, qmin, qmax):
    """Q_fma: clampQ(rint(fma(x, inv, zp))), as float32 values in [qmin, qmax]."""
    return _clamp_nan_high(np.rint(fma_f32(x, inv, F32(zp))), qmin, qmax)


def q_leg(x, inv, zp, qmin, qmax):
    """Q_leg: t = f32(x*inv); u = f32(t + zp); clampQ(rint(u)), as float64 values.

    NaN gives raw 0 for 8-bit types and qmin for qint32 (PyTorch casts NaN to int64 first).
    """
    x = np.asarray(x, dtype=F32)
    with np.errstate(invalid="ignore", over="ignore"):
        t = x * F32(inv) if np.ndim(inv) == 0 else x * np.asarray(inv, dtype=F32)
        u = t + (F32(zp) if np.ndim(zp) == 0 else np.asarray(zp).astype(F32))
    r = np.rint(u).astype(np.float64)
    nan_value = qmin if qmax > 255 else 0
    return np.where(np.isnan(r), nan_value, np.clip(r, qmin, qmax))


def q_vec(x, inv, zp, qmin, qmax):
    """Q_vec: clampQ(rint(f32(x*inv)) + zp), zero point added after rounding."""
    with np.errstate(invalid="ignore", over="ignore"):
        r = np.rint(np.asarray(x, dtype=F32) * F32(inv)).astype(np.float64) + zp
    return _clamp_nan_high(r, qmin, qmax)


def d_sc(q, scale, zp):
    """D_sc: f32(scale * f32(q - zp)), q - zp wrapping in int32.

    PyTorch subtracts in int32, so a qint32 difference beyond int32's range wraps around
    (q = 2**31 - 1, zp = -1000 gives -2**31 + 999); only qint32 can get there.
    """
    k = np.asarray(q).astype(np.int64) - zp
    k = (k + 2 ** 31) % 2 ** 32 - 2 ** 31
    return F32(scale) * k.astype(F32)


def d_vec(q, scale, zp):
    """D_vec: fma(scale, f32(q), f32(scale * f32(-zp)))."""
    return fma_f32(F32(scale), np.asarray(q).astype(F32), F32(scale) * F32(-zp))


def d_pc(q, scale_f64, zp):
    """D_pc: f32(f64(f32(q) - zp) * scale), the multiply in double with the double scale."""
    k = np.asarray(q).astype(F32) - np.asarray(zp).astype(F32)
    return (k.astype(np.float64) * scale_f64).astype(F32)


def _limits(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _channel_shape(ndim, axis):
    shape = [1] * ndim
    shape[axis] = -1
    return shape


# -- ops ----------------------------------------------------------------------------------

def quantize_per_tensor(x, inv_scale, zero_point, dtype):
    """Quantize float32 `x` with one scale: Q_fma for 8-bit types, Q_leg for int32.

    Parameters
    ----------
    x : float32 ndarray
    inv_scale : float, the float32 value 1/f32(scale)
    zero_point : int
    dtype : numpy dtype of the result (uint8, int8, int32)
    """
    qmin, qmax = _limits(dtype)
    if np.dtype(dtype) == np.int32:
        return q_leg(x, inv_scale, zero_point, qmin, qmax).astype(np.int32)
    return q_fma(x, inv_scale, zero_point, qmin, qmax).astype(dtype)


def quantize_per_channel(x, inv_scales, zero_points, axis, dtype):
    """Quantize float32 `x` with one scale per index of `axis` (Q_leg).

    Parameters
    ----------
    x : float32 ndarray
    inv_scales : float32 ndarray, 1/f32(scale_c) per channel
    zero_points : int32 ndarray, one per channel
    axis : int, the channel axis (non-negative)
    dtype : numpy dtype of the result
    """
    qmin, qmax = _limits(dtype)
    shape = _channel_shape(np.ndim(x), axis)
    inv = np.asarray(inv_scales, dtype=F32).reshape(shape)
    zp = np.asarray(zero_points).reshape(shape)
    return q_leg(x, inv, zp, qmin, qmax).astype(dtype)


def dequantize_per_tensor(q, scale, zero_point):
    """Dequantize integer `q` with one float32 scale (D_sc); float32 result."""
    return d_sc(q, scale, zero_point).astype(F32)


def dequantize_per_channel(q, scales, zero_points, axis):
    """Dequantize integer `q` per channel of `axis` with float64 scales (D_pc)."""
    shape = _channel_shape(np.ndim(q), axis)
    return d_pc(q, np.asarray(scales, np.float64).reshape(shape),
                np.asarray(zero_points).reshape(shape))


def requantize_per_tensor(q, scale, zero_point, inv_out_scale, out_zero_point, dtype):
    """Re-express `q` with new qparams: D_sc, then quantize as quantize_per_tensor does."""
    return quantize_per_tensor(dequantize_per_tensor(q, scale, zero_point),
                               inv_out_scale, out_zero_point, dtype)


def copy_raw(q):
    """A C-contiguous copy of integer array `q` (QTensor.clone's data)."""
    return np.array(q, order="C", copy=True)
