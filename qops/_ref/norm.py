"""Normalization layers on raw 8-bit values: batch norm (+relu), layer, group and instance norm.

Contract: uint8/int8 in, same dtype out with explicit output qparams. Statistics are exact
integer sums (int64); every float step is IEEE float32 as docs/semantics.md §13 states it,
except the two double steps it names (the reciprocal std of batch norm and the
x_scale / sqrt(var + eps) of the group statistics). Requantization is Q_vec (rint, then + zp).

Fused steps: PyTorch 2.13's x86 wheels run the AVX2 build of quantized_normalize_kernel
(QuantizedOpKernels.cpp), which GCC compiled with FMA contraction on: its variance
`SS/N - m*m` is one vfnmadd (m*m not rounded) and its affine steps `(..) * gamma + beta` are
one vfmadd each (seen in libtorch_cpu.so's disassembly, and by comparing outputs within 1e-5
of a .5 boundary). The layer and group norm steps below fuse exactly there (fma_f32).
"""
import numpy as np

from qops._ref.quant import fma_f32, q_vec

F32 = np.float32


def _limits(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def batch_norm(x, alpha, beta, zero_point, output_zero_point, relu):
    """Per-channel fused affine: out = Q_vec(fma(alpha_c, f32(q - zp), beta_c)), optional relu.

    Parameters
    ----------
    x : uint8/int8 ndarray of shape (N, C, L) (spatial dims flattened into L)
    alpha : float32 ndarray (C,), f32(f32(inv_sigma*w) * in_s/out_s)
    beta : float32 ndarray (C,), (b - mean*inv_sigma*w) / out_s
    zero_point : int, the input zero point
    output_zero_point : int
    relu : bool, clamp the result below at output_zero_point
    """
    qmin, qmax = _limits(x.dtype)
    k = (x.astype(np.int64) - zero_point).astype(F32)
    y = fma_f32(np.asarray(alpha, F32)[None, :, None], k, np.asarray(beta, F32)[None, :, None])
    out = q_vec(y, 1.0, output_zero_point, qmin, qmax)
    if relu:
        out = np.maximum(out, output_zero_point)
    return out.astype(x.dtype)


def batch_norm_cl(x, alpha, beta, zero_point, output_zero_point, relu):
    """batch_norm of channels-last data: x (P, C), every row one position's channels.

    The same per-channel affine; channels last is only another memory order.
    """
    x = np.asarray(x)
    return np.ascontiguousarray(
        batch_norm(x.T[None], alpha, beta, zero_point, output_zero_point, relu)[0].T)


def _group_stats(x2, zero_point, scale, eps):
    """Per row of `x2` (M, N): (mean, r) in units of the input scale, both float32.

    m' = f32(f32(S)/N), mean = m' - zp, var = max(fma(-m', m', f32(f32(SS)/N)), 0) in
    float32, r = f32(x_s / sqrt(f64(var*x_s*x_s) + eps)), the division and sqrt in double.
    """
    n = F32(x2.shape[1])
    v = x2.astype(np.int64)
    s = v.sum(axis=1)
    ss = (v * v).sum(axis=1)
    m1 = s.astype(F32) / n
    mean = m1 - F32(zero_point)
    # one rounding: PyTorch's AVX2 kernel computes SS/N - m'*m' as a fused multiply-subtract
    var = np.maximum(fma_f32(-m1, m1, ss.astype(F32) / n), F32(0))
    xs = F32(scale)
    var_s = (var * xs * xs).astype(np.float64)
    r = (np.float64(xs) / np.sqrt(var_s + eps)).astype(F32)
    return mean.astype(F32), r


def layer_norm(x, weight, bias, scale, zero_point, eps, inv_output_scale, output_zero_point):
    """Normalize each row of `x` over its last axis, then an elementwise affine.

    t = f32(f32((q - zp) - mean) * r) ; y = fma(t, w_i, b_i) ; out = Q_vec(y).

    Parameters
    ----------
    x : uint8/int8 ndarray (M, N), one normalized group per row
    weight : float32 ndarray (N,) or None (1)
    bias : float32 ndarray (N,) or None (0)
    scale : float, the float32 input scale
    zero_point : int, the input zero point
    eps : float, added to the variance in double
    inv_output_scale : float, f32(1.0f / f32(output_scale))
    output_zero_point : int
    """
    qmin, qmax = _limits(x.dtype)
    mean, r = _group_stats(x, zero_point, scale, eps)
    k = (x.astype(np.int64) - zero_point).astype(F32)
    t = (k - mean[:, None]) * r[:, None]
    # a missing weight/bias is 1/0: fma(t, 1, 0) is t (up to the sign of a zero, which
    # rounding erases)
    w = np.ones(x.shape[1], F32) if weight is None else np.asarray(weight, F32)
    b = np.zeros(x.shape[1], F32) if bias is None else np.asarray(bias, F32)
    y = fma_f32(t, w[None, :], b[None, :])
    return q_vec(y, inv_output_scale, output_zero_point, qmin, qmax).astype(x.dtype)


def _lane_sum(v):
    """Row sums of float64 v (M, N) in the fast kernel's order: element j into lane j % 16 in
    index order (the first block starts the lanes; a last partial block adds into the first
    lanes), then the 16 lanes combined by halves (lane l += lane l + h, h = 8, 4, 2, 1)."""
    m, n = v.shape
    n16 = n - n % 16
    if n16:
        # cumsum is a running sum: each lane adds its elements one after another
        lanes = np.cumsum(v[:, :n16].reshape(m, n16 // 16, 16), axis=1)[:, -1, :]
    else:
        lanes = np.zeros((m, 16))
    lanes[:, :n - n16] = lanes[:, :n - n16] + v[:, n16:]
    for h in (8, 4, 2, 1):
        lanes[:, :h] = lanes[:, :h] + lanes[:, h:2 * h]
    return lanes[:, 0]


def layer_norm_f32(x, weight, bias, eps):
    """Float layer norm of each row of float32 x (M, N) over its N values.

    mean = S(x) / N, var = S((x - mean)^2) / N (float64 sums in _lane_sum's order),
    r = 1 / sqrt(var + eps), y = f32(((x - mean) * r) * w + b) in float64.

    Parameters
    ----------
    x : float32 ndarray (M, N)
    weight : float32 ndarray (N,) or None (no multiply)
    bias : float32 ndarray (N,) or None (no add)
    eps : float, added to the variance in double
    """
    x = np.asarray(x, np.float32)
    if x.size == 0:
        return np.empty(x.shape, np.float32)
    v = x.astype(np.float64)
    n = x.shape[1]
    mean = _lane_sum(v) / np.float64(n)
    d = v - mean[:, None]
    var = _lane_sum(d * d) / np.float64(n)
    r = np.float64(1) / np.sqrt(var + np.float64(eps))
    y = d * r[:, None]
    if weight is not None:
        y = y * np.asarray(weight, np.float32).astype(np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float32).astype(np.float64)
    return y.astype(np.float32)


def group_norm(x, num_groups, weight, bias, scale, zero_point, eps, inv_output_scale,
               output_zero_point):
    """Normalize each (batch, group) of `x`, then a per-channel affine folded into r.

    g_c = f32(r * w_c) ; y = fma(f32((q - zp) - mean), g_c, b_c) ; out = Q_vec(y).

    Parameters
    ----------
    x : uint8/int8 ndarray (B, C, L), spatial dims flattened into L
    num_groups : int, dividing C
    weight, bias : float32 ndarrays (C,) or None (1 and 0)
    scale, zero_point : the input's float32 scale and zero point
    eps : float, added to the variance in double
    inv_output_scale : float, f32(1.0f / f32(output_scale))
    output_zero_point : int
    """
    qmin, qmax = _limits(x.dtype)
    b, c, length = x.shape
    cpg = c // num_groups
    groups = x.reshape(b * num_groups, cpg * length)
    mean, r = _group_stats(groups, zero_point, scale, eps)
    mean = mean.reshape(b, num_groups, 1, 1)
    r = r.reshape(b, num_groups, 1, 1)
    w = np.ones(c, F32) if weight is None else np.asarray(weight, F32)
    bb = np.zeros(c, F32) if bias is None else np.asarray(bias, F32)
    g = r * w.reshape(1, num_groups, cpg, 1)
    k = (x.astype(np.int64) - zero_point).astype(F32).reshape(b, num_groups, cpg, length)
    y = fma_f32(k - mean, g, bb.reshape(1, num_groups, cpg, 1))
    out = q_vec(y, inv_output_scale, output_zero_point, qmin, qmax)
    return out.reshape(x.shape).astype(x.dtype)


def group_norm_cl(x, num_groups, weight, bias, scale, zero_point, eps, inv_output_scale,
                  output_zero_point):
    """group_norm of channels-last data: x (B, P, C), every row of C one position's channels.

    PyTorch's NHWC kernel (quantized_groupnorm_nhwc_kernel, AVX2 build, fused as compiled):
    the same statistics, then per channel s_c = f32(r * w_c), t_c = fma(-s_c, mean, b_c),
    y = fma(f32(q - zp), s_c, t_c) ; out = Q_vec(y). (PyTorch sums in float32 per thread
    when P >= 512; these statistics stay exact.)

    Parameters
    ----------
    x : uint8/int8 ndarray (B, P, C), P = the spatial size
    num_groups : int, dividing C
    weight, bias : float32 ndarrays (C,) or None (1 and 0)
    scale, zero_point : the input's float32 scale and zero point
    eps : float, added to the variance in double
    inv_output_scale : float, f32(1.0f / f32(output_scale))
    output_zero_point : int
    """
    qmin, qmax = _limits(x.dtype)
    b, p, c = x.shape
    cpg = c // num_groups
    groups = x.reshape(b, p, num_groups, cpg).transpose(0, 2, 1, 3).reshape(b * num_groups, -1)
    mean, r = _group_stats(groups, zero_point, scale, eps)
    w = np.ones(c, F32) if weight is None else np.asarray(weight, F32)
    bb = np.zeros(c, F32) if bias is None else np.asarray(bias, F32)
    s = r.reshape(b, num_groups, 1) * w.reshape(1, num_groups, cpg)
    t = fma_f32(-s, mean.reshape(b, num_groups, 1), bb.reshape(1, num_groups, cpg))
    k = (x.astype(np.int64) - zero_point).astype(F32)
    y = fma_f32(k, s.reshape(b, 1, c), t.reshape(b, 1, c))
    return q_vec(y, inv_output_scale, output_zero_point, qmin, qmax).astype(x.dtype)
