"""Embedding-bag lookups over row-wise quantized tables, and the row-wise quantization itself
(docs/semantics.md §20).

Contract: tables are fused uint8 rows (8-bit values, or two 4-bit values a byte, low nibble
first, then the row's float32 scale and bias); results are float32. Each looked-up entry adds
fma(scale * w, q, acc + bias * w) to its bag (w the per-sample weight, 1 without), in index
order, as fbgemm's EmbeddingSpMDM; mean divides the sum by the bag's entry count; max keeps
the largest fma(scale, q, 0 + bias), the first on ties. Entries equal to padding_idx are
skipped and not counted; empty bags are zeros. Each bag's indices are checked against the
table before any row is read: the lookups return (out, the position of the first index
outside [0, N) in index order, or -1); out is not defined when there is one.
"""
import numpy as np

from qops._ref.quant import fma_f32

F32 = np.float32

SUM, MEAN, MAX = 0, 1, 2


def quantize_rows(weight, qmax):
    """Row-wise quantization with float scale and zero point (float_qparams observer + quantize).

    scale = f32(f32(max - min) / qmax), 1 where not above float32 eps; zero_point =
    f32(-min / scale); q = clamp(rint(f32(f32(x * f32(1 / scale)) + zero_point)), 0, qmax).

    Parameters
    ----------
    weight : float32 ndarray (N, D), D >= 1
    qmax : int, 255 (quint8) or 15 (quint4x2)

    Returns
    -------
    q : uint8 ndarray (N, D) of values in [0, qmax]
    scales, zero_points : float32 ndarrays (N,)
    """
    w = np.asarray(weight, dtype=F32)
    lo = w.min(axis=1)
    hi = w.max(axis=1)
    scale = ((hi - lo) / F32(qmax)).astype(F32)
    scale = np.where(scale > np.finfo(F32).eps, scale, F32(1.0)).astype(F32)
    zero_point = ((F32(-1.0) * lo) / scale).astype(F32)
    inv = (F32(1.0) / scale).astype(F32)
    t = (w * inv[:, None]).astype(F32) + zero_point[:, None]
    q = np.clip(np.rint(t), 0, qmax).astype(np.uint8)
    return q, scale, zero_point


def _scale_bias(weight):
    """The float32 scale and bias stored at the end of each fused row."""
    tail = np.ascontiguousarray(weight[:, -8:]).view(F32)
    return tail[:, 0], tail[:, 1]


def _bags(rows, scales, biases, indices, offsets, per_sample_weights, mode, padding_idx):
    """The bag loop shared by the 8- and 4-bit lookups; `rows` are the unpacked values."""
    n_bags = offsets.shape[0] - 1
    dim = rows.shape[1]
    out = np.zeros((n_bags, dim), dtype=F32)
    for b in range(n_bags):
        bad = _first_bad(indices, offsets[b], offsets[b + 1], rows.shape[0])
        if bad >= 0:
            return out, bad
        acc = np.zeros(dim, dtype=F32)
        count = 0
        for i in range(offsets[b], offsets[b + 1]):
            r = indices[i]
            if r == padding_idx:
                continue
            q = rows[r].astype(F32)
            if mode == MAX:
                v = fma_f32(scales[r], q, F32(0.0) + biases[r])
                acc = v if count == 0 else np.where(v > acc, v, acc)
            else:
                w = F32(1.0) if per_sample_weights is None else per_sample_weights[i]
                s = F32(scales[r] * w)
                c = F32(biases[r] * w)
                acc = fma_f32(s, q, (acc + c).astype(F32))
            count += 1
        if mode == MEAN and count > 0:
            acc = (acc / F32(count)).astype(F32)
        out[b] = acc
    return out, -1


def _first_bad(indices, lo, hi, n):
    """The first position in [lo, hi) whose index is outside [0, n), or -1."""
    for i in range(lo, hi):
        if not 0 <= indices[i] < n:
            return i
    return -1


def embedding_bag_8bit(weight, indices, offsets, per_sample_weights, mode, padding_idx):
    """Sum, mean or max of bags of 8-bit rows, dequantized as fma(scale, q, bias).

    Parameters
    ----------
    weight : uint8 ndarray (N, D + 8), fused rows: D values, then the float32 scale and
        bias = -zero_point * scale (little endian), as fbgemm's 8-bit rows
    indices : int64 ndarray (n,); an index outside [0, N) is reported, not read
    offsets : int64 ndarray (B + 1,), non-decreasing, offsets[0] = 0, offsets[B] <= n
    per_sample_weights : float32 ndarray (n,) or None (sum only)
    mode : 0 sum, 1 mean, 2 max
    padding_idx : int, the index to skip, or -1

    Returns (float32 (B, D), the first bad index position or -1).
    """
    scales, biases = _scale_bias(weight)
    return _bags(weight[:, :-8], scales, biases, indices, offsets, per_sample_weights, mode,
                 padding_idx)


def embedding_bag_4bit(weight, indices, offsets, per_sample_weights, mode, padding_idx):
    """Sum, mean or max of bags of 4-bit rows (element j in byte j // 2, low nibble first).

    Parameters
    ----------
    weight : uint8 ndarray (N, D / 2 + 8), fused rows: D / 2 bytes of values, then the
        float32 scale and bias (values already rounded to float16, as fbgemm's 4-bit rows)
    indices, offsets, per_sample_weights, mode, padding_idx : as embedding_bag_8bit
    """
    scales, biases = _scale_bias(weight)
    packed = weight[:, :-8]
    rows = np.stack([packed & 15, packed >> 4], axis=-1).reshape(weight.shape[0], -1)
    return _bags(rows, scales, biases, indices, offsets, per_sample_weights, mode, padding_idx)


def embedding_bag_f32(weight, indices, offsets, per_sample_weights, mode, padding_idx):
    """Sum, mean or max of bags of float32 rows (PyTorch's float EmbeddingBag).

    Sum adds rows in index order (with per-sample weights fma(w, row, acc), or
    acc + f32(w * row) when a padding_idx is given, as PyTorch's two paths); mean divides by
    the count; max keeps the largest, the first on ties.

    Parameters
    ----------
    weight : float32 ndarray (N, D)
    indices, offsets, per_sample_weights, mode, padding_idx : as embedding_bag_8bit
    """
    n_bags = offsets.shape[0] - 1
    out = np.zeros((n_bags, weight.shape[1]), dtype=F32)
    for b in range(n_bags):
        bad = _first_bad(indices, offsets[b], offsets[b + 1], weight.shape[0])
        if bad >= 0:
            return out, bad
        acc = np.zeros(weight.shape[1], dtype=F32)
        count = 0
        for i in range(offsets[b], offsets[b + 1]):
            r = indices[i]
            if r == padding_idx:
                continue
            row = weight[r]
            if mode == MAX:
                acc = row.copy() if count == 0 else np.where(row > acc, row, acc)
            elif per_sample_weights is not None and padding_idx < 0:
                acc = fma_f32(per_sample_weights[i], row, acc)
            elif per_sample_weights is not None:
                # PyTorch's path with a padding_idx multiplies and adds in two roundings
                acc = (acc + (per_sample_weights[i] * row).astype(F32)).astype(F32)
            else:
                acc = (acc + row).astype(F32)
            count += 1
        if mode == MEAN and count > 0:
            acc = (acc / F32(count)).astype(F32)
        out[b] = acc
    return out, -1
