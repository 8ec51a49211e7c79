"""Float32 numpy versions of the layers of qops.nn (what torch.nn.functional computes in float).

These serve the float modules (a model before quantization, calibration, QAT simulation).
Float32 throughout; summation order differs from PyTorch's, so results agree within float32
rounding, not bit for bit.
"""
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from qops import _blas
from qops._ops._check import F32_DTYPE

F32 = np.float32


def _tuple(v, n):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return tuple(int(x) for x in v) * n
        if len(v) != n:
            raise ValueError(f"expected an int or {n} ints; got {v!r}")
        return tuple(int(x) for x in v)
    return (int(v),) * n


def as_f32(x, argname="input"):
    if type(x) is np.ndarray and x.dtype is F32_DTYPE:
        return x                        # the usual call: a float layer's float32 input
    from qops._qtensor import QTensor
    if isinstance(x, QTensor):
        raise TypeError(f"{argname} is a QTensor; this float layer needs a float array "
                        f"(dequantize() it, or use the qops.nn.quantized layer)")
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{argname} must be a float array; got dtype {a.dtype}")
    return a.astype(F32, copy=False)


def _check_ndim(x, n, what, batched_optional=True):
    if x.ndim == n + 2:
        return x, False
    if batched_optional and x.ndim == n + 1:
        return x[None], True
    raise ValueError(f"{what} expects a {n + 2}-D input (or {n + 1}-D unbatched); got shape "
                     f"{x.shape}")


def pad(x, pads, mode="constant", value=0.0):
    """Pad the trailing len(pads) dims of `x`: pads[i] = (before, after) for dim -len(pads)+i."""
    width = [(0, 0)] * (x.ndim - len(pads)) + [tuple(p) for p in pads]
    if mode in ("zeros", "constant"):
        return np.pad(x, width, mode="constant", constant_values=value)
    np_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}.get(mode)
    if np_mode is None:
        raise ValueError(f"padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular'; "
                         f"got {mode!r}")
    return np.pad(x, width, mode=np_mode)


def conv(x, weight, bias, stride, padding, dilation, groups, padding_mode="zeros"):
    """N-d float convolution (N = weight.ndim - 2) by windows + one einsum per group."""
    n = weight.ndim - 2
    x, unbatched = _check_ndim(as_f32(x), n, f"conv{n}d")
    stride, dilation = _tuple(stride, n), _tuple(dilation, n)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * n
        elif padding == "same":
            total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
            pads = [(t // 2, t - t // 2) for t in total]
            padding = None
        else:
            raise ValueError(f"padding must be 'valid', 'same' or ints; got {padding!r}")
    if padding is not None:
        pads = [(p, p) for p in _tuple(padding, n)]
    N, C = x.shape[:2]
    O, Cg = weight.shape[:2]
    if C != Cg * groups:
        raise ValueError(f"conv{n}d: input has {C} channels, weight expects {Cg * groups} "
                         f"({Cg} per group x {groups} groups)")
    if any(p for pr in pads for p in pr):
        x = pad(x, pads, padding_mode)
    ks = weight.shape[2:]
    span = tuple(d * (k - 1) + 1 for d, k in zip(dilation, ks))
    if any(s > L for s, L in zip(span, x.shape[2:])):
        raise ValueError(f"conv{n}d: kernel (dilated size {span}) is larger than the padded "
                         f"input {x.shape[2:]}")
    win = sliding_window_view(x, span, axis=tuple(range(2, 2 + n)))
    # win: N, C, *out_full, *span -> take strides and dilation
    sl = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride) \
        + tuple(slice(None, None, d) for d in dilation)
    win = win[sl]
    out_sp = win.shape[2:2 + n]
    Og = O // groups
    out = np.empty((N, O) + out_sp, dtype=F32)
    for g in range(groups):
        wg = weight[g * Og:(g + 1) * Og].astype(F32, copy=False)
        xg = win[:, g * Cg:(g + 1) * Cg]
        # Contract channel and kernel taps in one GEMM, on qops' threads (qops/_blas.py:
        # numpy's own thread pool would contend with them)
        cols = np.ascontiguousarray(np.moveaxis(xg, 1, 1 + n).reshape(
            (N,) + out_sp + (Cg * int(np.prod(ks)),)))
        res = _blas.linear(cols.reshape(-1, cols.shape[-1]), wg.reshape(Og, -1))
        out[:, g * Og:(g + 1) * Og] = np.moveaxis(res.reshape((N,) + out_sp + (Og,)), -1, 1)
    if bias is not None:
        out += np.asarray(bias, dtype=F32).reshape((1, O) + (1,) * n)
    return out[0] if unbatched else out


def conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation):
    """N-d float transposed convolution (N = weight.ndim - 2; weight (C_in, C_out / groups,
    *k)) as the convolution it is the adjoint of: the input spread `stride` apart, padded by
    dilation * (k - 1) - padding (+ output_padding on the right; cropped where negative), and
    convolved at stride 1 with the kernel flipped and its channel axes swapped per group."""
    n = weight.ndim - 2
    x, unbatched = _check_ndim(as_f32(x), n, f"conv_transpose{n}d")
    st, pd = _tuple(stride, n), _tuple(padding, n)
    op, dl = _tuple(output_padding, n), _tuple(dilation, n)
    N, C = x.shape[:2]
    if C != weight.shape[0]:
        raise ValueError(f"conv_transpose{n}d: input has {C} channels, weight expects "
                         f"{weight.shape[0]}")
    ks = weight.shape[2:]
    sizes = [(L - 1) * s + 1 for L, s in zip(x.shape[2:], st)]
    spread = np.zeros((N, C) + tuple(sizes), F32)
    spread[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in st)] = x
    pads, crop = [], [slice(None), slice(None)]
    for k, p, o, d in zip(ks, pd, op, dl):
        lo, hi = d * (k - 1) - p, d * (k - 1) - p + o
        pads.append((max(lo, 0), max(hi, 0)))
        crop.append(slice(max(-lo, 0), None if hi >= 0 else hi))
    spread = pad(spread[tuple(crop)], pads)
    Ci = C // groups
    w = np.asarray(weight, F32)
    flipped = np.flip(w, axis=tuple(range(2, 2 + n)))
    wc = np.concatenate([np.swapaxes(flipped[g * Ci:(g + 1) * Ci], 0, 1) for g in range(groups)])
    out = conv(spread, wc, bias, 1, 0, dl, groups)
    return out[0] if unbatched else out


def linear(x, weight, bias):
    x = as_f32(x)
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input has {x.shape[-1]} features, weight expects "
                         f"{weight.shape[1]}")
    w = np.asarray(weight, F32)
    # one GEMM over all rows: numpy's matmul of a stack runs one product per leading index
    # (a matrix-vector product each for (L, 1, E) sequences, the weight read L times); the
    # product at qops' thread count (qops/_blas.py)
    lead = x.shape[:-1]
    out = _blas.linear(np.ascontiguousarray(x.reshape(-1, x.shape[-1])), w)
    out = out.reshape(lead + (w.shape[0],))
    if bias is not None:
        out += np.asarray(bias, F32)
    return out


def matmul(a, b):
    """torch.matmul of float arrays: leading (batch) dims broadcast, each product a float32
    GEMM on qops' threads (1-D operands as numpy's matmul)."""
    a, b = as_f32(a, "input"), as_f32(b, "other")
    if a.ndim < 2 or b.ndim < 2:
        return np.asarray(np.matmul(a, b), F32)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                         f"({a.shape[-1]} != {b.shape[-2]})")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if b.ndim == 2:
        # one product over every row of a (the weight read once)
        out = _blas.bmm(a.reshape(1, -1, k), b[None])
        return out.reshape(batch + (m, n))
    a = np.broadcast_to(a, batch + (m, k)).reshape(-1, m, k)
    b = np.broadcast_to(b, batch + (k, n)).reshape(-1, k, n)
    return _blas.bmm(a, b).reshape(batch + (m, n))


def einsum(equation, *operands):
    """torch.einsum of float arrays. Two operands whose letters each appear once per operand
    (no diagonals, no ellipsis) run as one batched product on qops' threads (shared output
    letters the batch, shared others summed, the rest rows and columns); anything else is
    numpy's einsum."""
    ops = [as_f32(o) for o in operands]
    eq = equation.replace(" ", "")
    if len(ops) != 2 or "." in eq or "->" not in eq:
        return np.asarray(np.einsum(eq, *ops, optimize=len(ops) > 2), F32)
    ins, out = eq.split("->")
    terms = ins.split(",")
    a, b = ops
    ta, tb = terms
    if len(ta) != a.ndim or len(tb) != b.ndim or any(
            len(set(t)) != len(t) for t in (ta, tb, out)):
        return np.asarray(np.einsum(eq, a, b), F32)
    # letters only one operand has and the output lacks: summed there first
    for side in (0, 1):
        t, x, other = (ta, a, tb) if side == 0 else (tb, b, ta)
        alone = [i for i, c in enumerate(t) if c not in other and c not in out]
        if alone:
            x = x.sum(axis=tuple(alone), dtype=F32)
            t = "".join(c for c in t if c in other or c in out)
        if side == 0:
            ta, a = t, x
        else:
            tb, b = t, x
    batch = [c for c in out if c in ta and c in tb]
    rows = [c for c in out if c in ta and c not in tb]
    cols = [c for c in out if c in tb and c not in ta]
    summed = [c for c in ta if c in tb and c not in out]
    if set(out) != set(batch + rows + cols):
        return np.asarray(np.einsum(eq, *ops), F32)
    size = {}
    for t, x in ((ta, a), (tb, b)):
        for c, n in zip(t, x.shape):
            if size.setdefault(c, n) != n:
                if 1 in (size[c], n):        # (numpy's einsum broadcasts size-1 dims)
                    return np.asarray(np.einsum(eq, *ops), F32)
                raise ValueError(f"einsum: letter {c!r} has sizes {size[c]} and {n}")

    def prod(cs):
        return int(np.prod([size[c] for c in cs], dtype=np.int64))
    am = np.transpose(a, [ta.index(c) for c in batch + rows + summed]).reshape(
        prod(batch), prod(rows), prod(summed))
    bm = np.transpose(b, [tb.index(c) for c in batch + summed + cols]).reshape(
        prod(batch), prod(summed), prod(cols))
    r = _blas.bmm(am, bm).reshape([size[c] for c in batch + rows + cols])
    order = batch + rows + cols
    return np.ascontiguousarray(np.transpose(r, [order.index(c) for c in out]))


def normalize(x, p=2.0, dim=1, eps=1e-12):
    """F.normalize: x / max(||x||_p over dim, eps) in float32."""
    x = as_f32(x)
    if p == 2.0:
        norm = np.sqrt(np.sum(x * x, axis=dim, keepdims=True, dtype=F32))
    else:
        norm = np.sum(np.abs(x) ** F32(p), axis=dim, keepdims=True, dtype=F32) ** F32(1 / p)
    return (x / np.maximum(norm, F32(eps))).astype(F32, copy=False)


def batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps):
    """Batch norm over dim 1; in training mode updates the running stats in place."""
    x = as_f32(x)
    if x.ndim < 2:
        raise ValueError(f"batch_norm expects at least 2-D input; got shape {x.shape}")
    C = x.shape[1]
    bshape = (1, C) + (1,) * (x.ndim - 2)
    axes = (0,) + tuple(range(2, x.ndim))
    if training or running_mean is None:
        mean = x.mean(axis=axes, dtype=np.float64).astype(F32)
        var = x.var(axis=axes, dtype=np.float64).astype(F32)
        n = x.size // C
        if training and running_mean is not None:
            m = F32(momentum)
            unbiased = var * F32(n / max(n - 1, 1))
            running_mean *= (1 - m)
            running_mean += m * mean
            running_var *= (1 - m)
            running_var += m * unbiased
    else:
        mean, var = running_mean, running_var
    inv = (F32(1.0) / np.sqrt(var.astype(F32) + F32(eps))).astype(F32)
    w = inv if weight is None else inv * weight
    b = -mean * w if bias is None else bias - mean * w
    return (x * w.reshape(bshape) + b.reshape(bshape)).astype(F32)


def layer_norm(x, normalized_shape, weight, bias, eps):
    """Layer norm over the trailing normalized_shape dims: qops.functional.layer_norm on a
    float array, a registry op (float64 statistics, one rounding, on the active backend)."""
    x = as_f32(x)
    from qops import functional as F
    return F.layer_norm(x, tuple(normalized_shape), weight, bias, eps)


def group_norm(x, num_groups, weight, bias, eps):
    x = as_f32(x)
    N, C = x.shape[:2]
    if C % num_groups:
        raise ValueError(f"group_norm: {C} channels are not divisible by num_groups={num_groups}")
    g = x.reshape(N, num_groups, -1)
    mean = g.mean(axis=2, keepdims=True, dtype=np.float64)
    var = g.var(axis=2, keepdims=True, dtype=np.float64)
    y = ((g - mean) / np.sqrt(var + eps)).astype(F32).reshape(x.shape)
    bshape = (1, C) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(bshape)
    if bias is not None:
        y = y + bias.reshape(bshape)
    return y.astype(F32)


def relu(x):
    x = as_f32(x)
    return np.maximum(x, F32(0))


def hardtanh(x, lo, hi):
    x = as_f32(x)
    return np.clip(x, F32(lo), F32(hi)).astype(F32)


def elu(x, alpha):
    x = as_f32(x)
    return np.where(x > 0, x, F32(alpha) * np.expm1(x)).astype(F32)


def leaky_relu(x, slope):
    x = as_f32(x)
    return np.where(x > 0, x, x * F32(slope)).astype(F32)


def prelu(x, weight):
    """x if x > 0 else weight * x, one weight or one per channel (dim 1), in float32."""
    x = as_f32(x)
    w = np.asarray(weight, F32)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"prelu: weight must be 1-D with one value or one per channel; got "
                         f"shape {w.shape}")
    if w.size > 1:
        if x.ndim < 2 or x.shape[1] != w.size:
            raise ValueError(f"prelu: {w.size} weights, but the input (shape {x.shape}) has "
                             f"{x.shape[1] if x.ndim >= 2 else 1} channels (dim 1)")
        w = w.reshape((1, w.size) + (1,) * (x.ndim - 2))
    else:
        w = w.reshape(())
    return np.where(x > 0, x, x * w).astype(F32)


def hardsigmoid(x):
    x = as_f32(x)
    return (np.clip(x + F32(3), F32(0), F32(6)) / F32(6)).astype(F32)


def hardswish(x):
    x = as_f32(x)
    return (x * np.clip(x + F32(3), F32(0), F32(6)) / F32(6)).astype(F32)


def sigmoid(x):
    x = as_f32(x)
    with np.errstate(over="ignore"):
        return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


def tanh(x):
    return np.tanh(as_f32(x))


def silu(x):
    """x * sigmoid(x), computed as PyTorch's kernel does: x / (1 + exp(-x))."""
    x = as_f32(x)
    with np.errstate(over="ignore"):
        return (x / (F32(1) + np.exp(-x))).astype(F32)


def softmax_dim(ndim):
    """PyTorch's dim for a softmax given dim=None (its legacy rule, with a warning there)."""
    return 0 if ndim in (0, 1, 3) else 1


def softmax(x, dim):
    """exp(x - max) * (1 / sum) over `dim` in float32, as PyTorch's vectorized kernel
    multiplies by the sum's reciprocal (numpy's exp: within an ulp or so of PyTorch's)."""
    x = as_f32(x)
    if dim is None:
        dim = softmax_dim(x.ndim)
    if not -max(x.ndim, 1) <= dim < max(x.ndim, 1):
        raise ValueError(f"softmax: dim {dim} is out of range for a {x.ndim}-d input")
    if x.ndim == 0:
        return np.ones((), F32) if np.isfinite(x) else np.full((), np.nan, F32)
    # (reductions along a strided axis of small rows cost numpy several times a C-order pass)
    x = np.ascontiguousarray(x)
    return softmax_(x - x.max(axis=dim, keepdims=True), dim, shifted=True)


def softmax_(x, dim, shifted=False):
    """softmax(x) over `dim` computed in float32 x's own memory (attention's scores: a
    fresh array, at batch 8 each temporary would be 6 MB); `shifted`: x's maximum over
    `dim` is already subtracted."""
    if not shifted:
        x -= x.max(axis=dim, keepdims=True)
    np.exp(x, out=x)
    x *= F32(1) / x.sum(axis=dim, keepdims=True)
    return x


def gelu(x, approximate="none"):
    """x * Phi(x), or PyTorch's tanh form with approximate="tanh": qops.functional.gelu, a
    registry op (float64 rounded once, on the active backend)."""
    x = as_f32(x)
    from qops import functional as F
    return F.gelu(x, approximate)


def _pool_out(L, k, s, p, d, ceil_mode):
    num = L + 2 * p - d * (k - 1) - 1
    o = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (o - 1) * s >= L + p:
        o -= 1
    return o


def max_pool(x, n, kernel_size, stride, padding, dilation, ceil_mode):
    x, unbatched = _check_ndim(as_f32(x), n, f"max_pool{n}d")
    ks = _tuple(kernel_size, n)
    st = ks if stride is None or stride == [] else _tuple(stride, n)
    pd, dl = _tuple(padding, n), _tuple(dilation, n)
    for k, p in zip(ks, pd):
        if p > k // 2:
            raise ValueError(f"max_pool{n}d: padding {pd} must be at most half the kernel {ks}")
    outs = [_pool_out(L, k, s, p, d, ceil_mode)
            for L, k, s, p, d in zip(x.shape[2:], ks, st, pd, dl)]
    if any(o <= 0 for o in outs):
        raise ValueError(f"max_pool{n}d: output size {outs} is too small for input {x.shape}")
    # Pad with -inf so padded taps never win; extra right padding covers ceil_mode windows.
    pads = []
    for L, k, s, p, d, o in zip(x.shape[2:], ks, st, pd, dl, outs):
        need = (o - 1) * s + d * (k - 1) + 1
        pads.append((p, max(need - L - p, 0)))
    xp = pad(x, pads, "constant", -np.inf)
    out = None
    for taps in np.ndindex(*ks):
        sl = (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, s, o in zip(taps, dl, st, outs))
        v = xp[sl]
        out = v.copy() if out is None else np.maximum(out, v, out=out)
    return out[0] if unbatched else out


def avg_pool(x, n, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    x, unbatched = _check_ndim(as_f32(x), n, f"avg_pool{n}d")
    ks = _tuple(kernel_size, n)
    st = ks if stride is None or stride == [] else _tuple(stride, n)
    pd = _tuple(padding, n)
    for k, p in zip(ks, pd):
        if p > k // 2:
            raise ValueError(f"avg_pool{n}d: padding {pd} must be at most half the kernel {ks}")
    outs = [_pool_out(L, k, s, p, 1, ceil_mode) for L, k, s, p in zip(x.shape[2:], ks, st, pd)]
    # Sum over kernel taps on a zero-padded copy (extra right padding covers ceil_mode windows).
    pads, divs = [], []
    for L, k, s, p, o in zip(x.shape[2:], ks, st, pd, outs):
        pads.append((p, max((o - 1) * s + k - L - p, 0)))
        start = np.arange(o) * s - p
        end = np.minimum(start + k, L + p)
        # PyTorch's divisor: the window clipped to the padded input (count_include_pad) or
        # to the input itself.
        if count_include_pad:
            divs.append((end - start).astype(np.int64))
        else:
            divs.append((np.minimum(end, L) - np.maximum(start, 0)).astype(np.int64))
    xp = pad(x, pads, "constant", 0.0)
    acc = np.zeros(x.shape[:2] + tuple(outs), dtype=F32)
    for taps in np.ndindex(*ks):
        sl = (slice(None), slice(None)) + tuple(
            slice(t, t + (o - 1) * s + 1, s) for t, s, o in zip(taps, st, outs))
        acc += xp[sl]
    if divisor_override:
        div = np.full(tuple(outs), divisor_override, dtype=np.int64)
    else:
        div = divs[0]
        for d in divs[1:]:
            div = np.multiply.outer(div, d)
    out = (acc / div.astype(F32)).astype(F32)
    return out[0] if unbatched else out


def adaptive_avg_pool(x, n, output_size):
    x, unbatched = _check_ndim(as_f32(x), n, f"adaptive_avg_pool{n}d")
    if isinstance(output_size, (tuple, list)):
        osz = tuple(L if o is None else int(o) for o, L in zip(output_size, x.shape[2:]))
        if len(osz) != n:
            raise ValueError(f"adaptive_avg_pool{n}d: output_size must have {n} entries")
    else:
        osz = (int(output_size),) * n
    out = np.empty(x.shape[:2] + osz, dtype=F32)
    bounds = [[(o * L // O, -(-((o + 1) * L) // O)) for o in range(O)]
              for L, O in zip(x.shape[2:], osz)]
    for idx in np.ndindex(*osz):
        b = [bounds[d][i] for d, i in enumerate(idx)]
        sl = (slice(None), slice(None)) + tuple(slice(a, e) for a, e in b)
        out[(slice(None), slice(None)) + idx] = x[sl].mean(axis=tuple(range(2, 2 + n)),
                                                            dtype=F32)
    return out[0] if unbatched else out


def _out_sizes(in_sizes, size, scale_factor):
    n = len(in_sizes)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        return _tuple(size, n), None
    sf = tuple(float(s) for s in scale_factor) if isinstance(scale_factor, (tuple, list)) \
        else (float(scale_factor),) * n
    if len(sf) != n:
        raise ValueError(f"interpolate: scale_factor must have {n} entries")
    return tuple(int(math.floor(L * s)) for L, s in zip(in_sizes, sf)), sf


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None):
    """Float nearest / nearest-exact / (bi/tri)linear resize, PyTorch's index formulas."""
    x = as_f32(x)
    n = x.ndim - 2
    if n < 1:
        raise ValueError(f"interpolate expects a 3-D, 4-D or 5-D input; got shape {x.shape}")
    outs, sf = _out_sizes(x.shape[2:], size, scale_factor)
    if recompute_scale_factor:
        sf = None
    if mode in ("nearest", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
        out = x
        for d, (L, O) in enumerate(zip(x.shape[2:], outs)):
            scale = F32(1.0 / sf[d]) if sf is not None else F32(F32(L) / F32(O))
            dst = np.arange(O, dtype=F32)
            if mode == "nearest":
                if O == L:
                    idx = np.arange(O)
                elif O == 2 * L:
                    idx = np.arange(O) >> 1
                else:
                    idx = np.minimum(np.floor((dst * scale).astype(F32)).astype(np.int64), L - 1)
            else:
                idx = np.minimum(np.floor(((dst + F32(0.5)) * scale).astype(F32)).astype(np.int64),
                                 L - 1)
            out = np.take(out, idx, axis=2 + d)
        return np.ascontiguousarray(out)
    if mode in ("linear", "bilinear", "trilinear"):
        if mode != {1: "linear", 2: "bilinear", 3: "trilinear"}[n]:
            raise ValueError(f"interpolate: mode {mode!r} needs a {mode_dims(mode) + 2}-D input")
        ac = bool(align_corners)
        out = x
        for d, (L, O) in enumerate(zip(x.shape[2:], outs)):
            dst = np.arange(O, dtype=F32)
            if ac:
                r = F32((L - 1) / (O - 1)) if O > 1 else F32(0)
                src = (r * dst).astype(F32)
            else:
                r = F32(1.0 / sf[d]) if sf is not None else F32(F32(L) / F32(O))
                src = np.maximum((r * (dst + F32(0.5))).astype(F32) - F32(0.5), F32(0)).astype(F32)
            i0 = np.minimum(src.astype(np.int64), L - 1)
            i1 = np.minimum(i0 + 1, L - 1)
            l1 = (src - i0.astype(F32)).astype(F32)
            l0 = F32(1) - l1
            shape = [1] * out.ndim
            shape[2 + d] = O
            a = np.take(out, i0, axis=2 + d)
            b = np.take(out, i1, axis=2 + d)
            out = (l0.reshape(shape) * a + l1.reshape(shape) * b).astype(F32)
        return out
    raise ValueError(f"interpolate: unsupported mode {mode!r}")


def mode_dims(mode):
    return {"linear": 1, "bilinear": 2, "trilinear": 3}[mode]
