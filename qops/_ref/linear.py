"""Quantized linear and dynamic linear: the definition (docs/semantics.md §9 and §10).

Contract: uint8 activations (M x K) times int8 weights (N x K); the accumulator
acc = sum_k (x - x_zp) * (w - w_zp_n) is exact (int64 here, so it never wraps); the output stage is
float32 arithmetic, rounding half to even:
    linear          y = f32(f32(acc) + bterm_n)
                    out = clamp(rint(f32(y * M_n)) + out_zp, relu ? out_zp : 0, 255)
    linear_dynamic  out = fma(f32(acc), mult_n, bias_n), relu: max(out, 0)   (float32 result)
bterm_n, M_n and mult_n are prepared by qops._ops.linear (the same values reach both backends).

Quantized matmul (docs/semantics.md §9.1) of two 8-bit tensors of one type:
    acc = sum_k (a - a_zp) * (b - b_zp)                     exact
    r   = f32(f64(acc) * P),  P = f64(f32(a_s)) * f64(f32(b_s))   (the real product, rounded)
    out = Q_fma(r) with the output's qparams                (as torch.quantize_per_tensor)
"""
import numpy as np

from qops._ref.quant import fma_f32, q_fma, quantize_per_tensor

F32 = np.float32


def pack_linear(weight, weight_zero_points):
    """Prepare an int8 weight for repeated products: w - w_zp_n, as int64 (N, K).

    Parameters
    ----------
    weight : int8 ndarray (N, K), raw weight values
    weight_zero_points : int32 ndarray (N,), the zero point of each output row
    """
    w = np.asarray(weight, dtype=np.int64)
    return w - np.asarray(weight_zero_points, dtype=np.int64)[:, None]


def minmax(x):
    """The min and max of float32 `x` (NaN if it holds one), as Python floats.

    Parameters
    ----------
    x : float32 ndarray, not empty
    """
    x = np.asarray(x, dtype=F32)
    return float(x.min()), float(x.max())


def _accumulate(xq, x_zero_point, packed):
    """acc[m, n] = sum_k (x[m, k] - x_zp) * (w[n, k] - w_zp[n]), exactly (int64)."""
    xc = np.asarray(xq, dtype=np.int64) - int(x_zero_point)
    return xc @ packed.T


def linear(x, x_zero_point, packed, bias_term, multiplier, out_zero_point, relu):
    """Quantized linear: int32 accumulation, float bias term, requantization to quint8.

    Parameters
    ----------
    x : uint8 ndarray (M, K), raw input values
    x_zero_point : int, the input zero point
    packed : the result of `pack_linear`
    bias_term : float32 ndarray (N,) or None, bterm_n: the bias divided by x_s * w_s_n
        (docs/semantics.md §8)
    multiplier : float32 ndarray (N,), M_n = f32(f32(x_s * w_s_n) / out_s)
    out_zero_point : int, the output zero point
    relu : bool, clamp below at the output zero point
    """
    acc = _accumulate(x, x_zero_point, packed)
    y = acc.astype(F32)                       # int -> float32, rounded once
    if bias_term is not None:
        y = y + np.asarray(bias_term, dtype=F32)
    z = y * np.asarray(multiplier, dtype=F32)
    lo = out_zero_point if relu else 0
    with np.errstate(invalid="ignore"):
        out = np.clip(np.rint(z).astype(np.float64) + out_zero_point, lo, 255)
    out = np.where(np.isnan(out), lo, out)    # only from a NaN bias term: the low bound
    return out.astype(np.uint8)


def linear_dynamic(x, x_inv_scale, x_zero_point, packed, multiplier, bias, relu):
    """Dynamic linear: quantize float32 `x` (Q_fma), int32 accumulation, float32 output.

    Parameters
    ----------
    x : float32 ndarray (M, K)
    x_inv_scale : float, f32(1 / f32(x_s)) for the per-call activation scale x_s
    x_zero_point : int, the per-call activation zero point
    packed : the result of `pack_linear`
    multiplier : float32 ndarray (N,), f32(f32(x_s) * f32(w_s_n))
    bias : float32 ndarray (N,) or None
    relu : bool, max(out, 0)
    """
    xq = quantize_per_tensor(np.asarray(x, dtype=F32), x_inv_scale, x_zero_point, np.uint8)
    acc = _accumulate(xq, x_zero_point, packed)
    b = np.zeros(acc.shape[1], F32) if bias is None else np.asarray(bias, dtype=F32)
    out = fma_f32(acc.astype(F32), np.asarray(multiplier, dtype=F32)[None, :], b[None, :])
    if relu:
        out = np.maximum(out, F32(0))
    return out.astype(F32)


def matmul(a, b, a_zero_point, b_zero_point, scale_product, inv_scale, zero_point):
    """Quantized batched matmul of raw 8-bit values, requantized to a's type.

    Parameters
    ----------
    a : uint8 or int8 ndarray (B, M, K), raw values
    b : ndarray (B, K, N) of a's dtype, raw values
    a_zero_point, b_zero_point : int
    scale_product : float, P = f64(f32(a_s)) * f64(f32(b_s)) (exact in float64)
    inv_scale : float32, inv(out_s) = f32(1 / f32(out_s))
    zero_point : int, the output zero point
    """
    acc = (np.asarray(a, np.int64) - int(a_zero_point)) @ \
        (np.asarray(b, np.int64) - int(b_zero_point))
    r = (acc.astype(np.float64) * float(scale_product)).astype(F32)
    info = np.iinfo(np.asarray(a).dtype)
    return q_fma(r, F32(inv_scale), zero_point, info.min, info.max).astype(np.asarray(a).dtype)
