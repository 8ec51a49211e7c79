"""Public embedding ops: float embedding / embedding_bag, the row-wise quantized tables
(quint8 and quint4x2 rows with a float scale and zero point each) and their lookups
(docs/semantics.md §20).

Float ops follow torch.nn.functional.embedding(_bag); the quantized ones follow
torch.ops.quantized.embedding_bag_byte / _4bit on a table packed by embedding_bag_prepack,
with mean, max and padding_idx added (PyTorch's quantized ops always sum and have no
padding_idx; these follow the float EmbeddingBag's definitions of them).
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from qops import _config
from qops._ops import _check
from qops._qtensor import QTensor

if TYPE_CHECKING:
    import numpy.typing as npt

#: a table's dtype: "quint8" or "quint4x2", or a dtype object of that name (qops' or torch's)
TableDtype = Union[str, Any]

__all__ = ["EmbeddingPackedParams", "embedding_bag_prepack", "embedding_bag_byte",
           "embedding_bag_4bit", "quantized_embedding", "quantized_embedding_bag",
           "embedding", "embedding_bag"]

F32 = np.float32
_MODES = {"sum": 0, "mean": 1, "max": 2}
_QMAX = {"quint8": 255, "quint4x2": 15}


def _kernels():
    return _config.impl("embedding")


def _dtype_name(dtype, argname="dtype"):
    name = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
    if name is None:
        name = str(dtype)
    name = name.replace("torch.", "").replace("qops.", "")
    if name not in _QMAX:
        raise TypeError(f"{argname} must be quint8 or quint4x2; got {dtype!r}")
    return name


def pack_nibbles(q):
    """(N, D) values in [0, 15] as (N, ceil(D / 2)) bytes, element j in byte j // 2, low
    nibble first (PyTorch's quint4x2 layout)."""
    n, d = q.shape
    even = np.zeros((n, d + (d & 1)), np.uint8)
    even[:, :d] = q
    return (even[:, 0::2] | (even[:, 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed, dim):
    """The (N, dim) values of a quint4x2 table."""
    rows = np.stack([packed & 15, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    return np.ascontiguousarray(rows[:, :dim])


class EmbeddingPackedParams:
    """A row-wise quantized embedding table: uint8 rows with a float32 scale and zero point
    per row (torch.per_channel_affine_float_qparams along axis 0).

    Attributes
    ----------
    dtype : "quint8" or "quint4x2"
    num_embeddings, embedding_dim : int
    data : uint8 ndarray (N, D) for quint8, (N, D / 2) packed nibbles for quint4x2 (D even)
    scales, zero_points : float32 ndarrays (N,)
    """

    def __init__(self, data: npt.ArrayLike, scales: npt.ArrayLike, zero_points: npt.ArrayLike,
                 dtype: TableDtype = "quint8", embedding_dim: Optional[int] = None) -> None:
        self.dtype = _dtype_name(dtype)
        data = np.asarray(data)
        if data.dtype != np.uint8 or data.ndim != 2:
            raise TypeError(f"data must be a 2-D uint8 array; got {data.dtype} {data.shape}")
        n = data.shape[0]
        if self.dtype == "quint8":
            d = data.shape[1]
        else:
            d = 2 * data.shape[1] if embedding_dim is None else int(embedding_dim)
            if d % 2 or d // 2 != data.shape[1]:
                raise ValueError(f"a quint4x2 table of {data.shape[1]} bytes a row has "
                                 f"embedding_dim {2 * data.shape[1]}; got {d} (it must be even)")
        scales = np.asarray(scales, dtype=F32).reshape(-1)
        zero_points = np.asarray(zero_points, dtype=F32).reshape(-1)
        if scales.shape != (n,) or zero_points.shape != (n,):
            raise ValueError(f"scales and zero_points need {n} entries (one per row); got "
                             f"{scales.shape[0]} and {zero_points.shape[0]}")
        if not (np.isfinite(scales).all() and np.isfinite(zero_points).all()):
            raise ValueError("scales and zero_points must be finite")
        self.num_embeddings = n
        self.embedding_dim = d
        self.scales = scales
        self.zero_points = zero_points
        # The rows the lookup kernels read, fbgemm's fused layout: the values, then the
        # float32 scale and bias = -zero_point * scale, so that one looked-up entry is one or
        # two cache lines. 4-bit rows keep scale and bias rounded to float16, as PyTorch's.
        bias = ((zero_points * scales).astype(F32) * F32(-1.0)).astype(F32)
        k_scales, k_biases = scales, bias
        if self.dtype == "quint4x2":
            # float16 overflows to inf beyond 65504, as at::Half does
            with np.errstate(over="ignore"):
                k_scales = scales.astype(np.float16).astype(F32)
                k_biases = bias.astype(np.float16).astype(F32)
        tail = np.stack([k_scales, k_biases], axis=1).astype("<f4").view(np.uint8)
        self.fused = np.ascontiguousarray(np.concatenate([data, tail.reshape(n, 8)], axis=1))

    @property
    def data(self) -> npt.NDArray[np.uint8]:
        """The uint8 values (N, D), or the packed nibbles (N, D / 2) of a quint4x2 table."""
        return self.fused[:, :-8]

    def int_repr(self) -> npt.NDArray[np.uint8]:
        """The (N, D) quantized values (4-bit tables unpacked)."""
        if self.dtype == "quint8":
            return self.data
        return unpack_nibbles(self.data, self.embedding_dim)

    def dequantize(self) -> npt.NDArray[np.float32]:
        """The float32 table a lookup sees: fma(scale, q, 0 + bias) per value."""
        n = self.num_embeddings
        return quantized_embedding_bag(self, np.arange(n, dtype=np.int64),
                                       np.arange(n, dtype=np.int64))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EmbeddingPackedParams):
            return NotImplemented
        return (self.dtype == other.dtype and self.embedding_dim == other.embedding_dim
                and self.fused.shape == other.fused.shape
                and bool((self.fused == other.fused).all())
                and bool((self.zero_points == other.zero_points).all()))

    __hash__ = None  # type: ignore[assignment]  # compared by value: unhashable

    def __repr__(self) -> str:
        return (f"EmbeddingPackedParams(num_embeddings={self.num_embeddings}, "
                f"embedding_dim={self.embedding_dim}, dtype={self.dtype})")


def embedding_bag_prepack(weight: npt.ArrayLike,
                          dtype: TableDtype = "quint8") -> EmbeddingPackedParams:
    """Quantize a float table row by row, as float_qparams_weight_only_qconfig does.

    Per row: scale = f32(max - min) / qmax (1 if not above float32 eps), zero_point =
    -min / scale (a float), q = clamp(rint(f32(x * f32(1 / scale)) + zero_point), 0, qmax).

    Parameters
    ----------
    weight : float array (N, D), finite, D >= 1
    dtype : "quint8" (8-bit rows) or "quint4x2" (4-bit rows)

    Returns
    -------
    EmbeddingPackedParams
    """
    name = _dtype_name(dtype)
    w = _check.float_array(weight, "weight")
    if w.ndim != 2 or w.shape[1] < 1:
        raise ValueError(f"weight must be 2-D (num_embeddings, embedding_dim >= 1); got shape "
                         f"{w.shape}")
    if name == "quint4x2" and w.shape[1] % 2:
        raise ValueError(f"a quint4x2 table needs an even embedding_dim; got {w.shape[1]} "
                         "(PyTorch packs quint4x2 values two a byte across row ends and looks "
                         "up wrong values for odd dims)")
    if not np.isfinite(w).all():
        raise ValueError("weight must be finite (a NaN or inf row has no quantization range)")
    q, scales, zps = _kernels().quantize_rows(np.ascontiguousarray(w), _QMAX[name])
    data = q if name == "quint8" else pack_nibbles(q)
    return EmbeddingPackedParams(data, scales, zps, name, embedding_dim=w.shape[1])


# -- argument checks --------------------------------------------------------------------------

def _int_array(x, argname):
    if isinstance(x, QTensor):
        raise TypeError(f"{argname} must be an integer array, not a QTensor")
    a = np.asarray(x)
    if a.dtype.kind not in "iu":            # not bool (kind "b") nor float
        raise TypeError(f"{argname} must be an integer array (int32 or int64); got dtype "
                        f"{a.dtype}")
    return a.astype(np.int64, copy=False)


def _mode(mode):
    if not isinstance(mode, str) or mode not in _MODES:
        raise ValueError(f"mode must be 'sum', 'mean' or 'max'; got {mode!r}")
    return _MODES[mode]


def _padding(padding_idx, n):
    if padding_idx is None:
        return -1
    p = _check.integer(padding_idx, "padding_idx")
    if not -n <= p < n:
        raise ValueError(f"padding_idx must be within [-{n}, {n}); got {p}")
    return p + n if p < 0 else p


def _check_range(idx, n):
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)][0]
        raise ValueError(f"input holds index {int(bad)}, outside the table's [0, {n})")


def _lookup(fn, table, idx, off, psw, m, pad, n):
    # The kernel checks each bag's indices before it reads a row, and reports the first bad
    # position: the error is the one _check_range gives.
    out, bad = fn(table, idx, off, psw, m, pad)
    if bad >= 0:
        raise ValueError(f"input holds index {int(idx[bad])}, outside the table's [0, {n})")
    return out


def _bag_args(input, offsets, include_last_offset, per_sample_weights, mode, padding_idx, n):
    """Flat int64 indices, offsets with the end appended (B + 1), weights, mode, padding."""
    idx = _int_array(input, "input")
    m = _mode(mode)
    if not isinstance(include_last_offset, (bool, np.bool_)):
        raise TypeError(f"include_last_offset must be a bool; got {include_last_offset!r}")
    if idx.ndim == 2:
        if offsets is not None:
            raise ValueError("offsets must be None when input is 2-D (each row is a bag)")
        b, length = idx.shape
        full = np.arange(b + 1, dtype=np.int64) * length
    elif idx.ndim == 1:
        if offsets is None:
            raise ValueError("offsets is needed when input is 1-D")
        off = _int_array(offsets, "offsets")
        if off.ndim != 1:
            raise ValueError(f"offsets must be 1-D; got shape {off.shape}")
        if include_last_offset:
            if off.shape[0] == 0:
                raise ValueError("offsets must hold at least one value with "
                                 "include_last_offset=True")
            full = off
        else:
            full = np.empty(off.shape[0] + 1, np.int64)
            full[:-1] = off
            full[-1] = idx.shape[0]
        if full.shape[0] > 1 and full[0] != 0:
            raise ValueError(f"offsets must start at 0; got {int(full[0])}")
        # a compare of shifted views, without np.diff's int64 temporary: on small cached
        # tables this check is a visible part of the call
        if (full[1:] < full[:-1]).any():
            raise ValueError("offsets must be non-decreasing")
        if full[-1] > idx.shape[0]:
            raise ValueError(f"offsets go past the end of input ({int(full[-1])} > "
                             f"{idx.shape[0]})")
    else:
        raise ValueError(f"input must be 1-D (with offsets) or 2-D; got shape {idx.shape}")
    flat = np.ascontiguousarray(idx.reshape(-1))
    # The kernels check the entries of the bags; entries after the last bag are checked here.
    _check_range(flat[int(full[-1]):], n)
    psw = None
    if per_sample_weights is not None:
        if m != 0:
            raise ValueError("per_sample_weights is only supported with mode='sum' (PyTorch "
                             f"refuses it for mode={mode!r})")
        psw = _check.float_array(per_sample_weights, "per_sample_weights")
        if psw.shape != idx.shape:
            raise ValueError(f"per_sample_weights must have input's shape {idx.shape}; got "
                             f"{psw.shape}")
        psw = np.ascontiguousarray(psw.reshape(-1))
    return flat, np.ascontiguousarray(full, dtype=np.int64), psw, m, _padding(padding_idx, n)


def _packed(weight, dtype=None):
    if not isinstance(weight, EmbeddingPackedParams):
        raise TypeError("weight must be an EmbeddingPackedParams (from embedding_bag_prepack); "
                        f"got {type(weight).__name__}")
    if dtype is not None and weight.dtype != dtype:
        raise TypeError(f"weight must be a {dtype} table; got {weight.dtype}")
    return weight


# -- quantized lookups ------------------------------------------------------------------------

def quantized_embedding_bag(weight: EmbeddingPackedParams, input: npt.ArrayLike,
                            offsets: Optional[npt.ArrayLike] = None, mode: str = "sum",
                            per_sample_weights: Optional[npt.ArrayLike] = None,
                            include_last_offset: bool = False,
                            padding_idx: Optional[int] = None) -> npt.NDArray[np.float32]:
    """Bags of rows of a row-wise quantized table, summed, averaged or maxed (float32).

    Each entry adds fma(scale * w, q, acc + bias * w) (bias = -zero_point * scale, w the
    per-sample weight), in index order, as PyTorch's quantized embedding_bag (fbgemm).

    Parameters
    ----------
    weight : EmbeddingPackedParams (quint8 or quint4x2)
    input : int array, 1-D with `offsets` or 2-D (each row a bag)
    offsets : int array, start of each bag (non-decreasing, from 0), or None for 2-D input
    mode : "sum" (PyTorch's only quantized mode), "mean" (sum / entries) or "max"
    per_sample_weights : float array of input's shape (mode "sum" only), or None
    include_last_offset : bool, offsets' last value ends the last bag
    padding_idx : int or None, an index whose entries are skipped (and not counted)

    Returns
    -------
    float32 ndarray (bags, embedding_dim)
    """
    weight = _packed(weight)
    idx, off, psw, m, pad = _bag_args(input, offsets, include_last_offset, per_sample_weights,
                                      mode, padding_idx, weight.num_embeddings)
    k = _kernels()
    fn = k.embedding_bag_8bit if weight.dtype == "quint8" else k.embedding_bag_4bit
    return _lookup(fn, weight.fused, idx, off, psw, m, pad, weight.num_embeddings)


def embedding_bag_byte(weight: EmbeddingPackedParams, input: npt.ArrayLike,
                       offsets: Optional[npt.ArrayLike] = None, mode: str = "sum",
                       per_sample_weights: Optional[npt.ArrayLike] = None,
                       include_last_offset: bool = False,
                       padding_idx: Optional[int] = None) -> npt.NDArray[np.float32]:
    """quantized_embedding_bag on a quint8 table (torch.ops.quantized.embedding_bag_byte).

    Parameters: as quantized_embedding_bag, `weight` a quint8 EmbeddingPackedParams.
    """
    return quantized_embedding_bag(_packed(weight, "quint8"), input, offsets, mode,
                                   per_sample_weights, include_last_offset, padding_idx)


def embedding_bag_4bit(weight: EmbeddingPackedParams, input: npt.ArrayLike,
                       offsets: Optional[npt.ArrayLike] = None, mode: str = "sum",
                       per_sample_weights: Optional[npt.ArrayLike] = None,
                       include_last_offset: bool = False,
                       padding_idx: Optional[int] = None) -> npt.NDArray[np.float32]:
    """quantized_embedding_bag on a quint4x2 table (torch.ops.quantized.embedding_bag_4bit).

    Parameters: as quantized_embedding_bag, `weight` a quint4x2 EmbeddingPackedParams.
    """
    return quantized_embedding_bag(_packed(weight, "quint4x2"), input, offsets, mode,
                                   per_sample_weights, include_last_offset, padding_idx)


def quantized_embedding(weight: EmbeddingPackedParams,
                        input: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Rows of a row-wise quantized table, fma(scale, q, 0 + bias) (float32, input.shape + (D,)).

    Parameters
    ----------
    weight : EmbeddingPackedParams
    input : int array of any shape
    """
    weight = _packed(weight)
    idx = _int_array(input, "input")
    n = idx.size
    out = quantized_embedding_bag(weight, idx.reshape(-1), np.arange(n, dtype=np.int64))
    return out.reshape(idx.shape + (weight.embedding_dim,))


# -- float ----------------------------------------------------------------------------------

def _float_table(weight):
    w = _check.float_array(weight, "weight")
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D (num_embeddings, embedding_dim); got {w.shape}")
    return np.ascontiguousarray(w)


def embedding(input: npt.ArrayLike, weight: npt.ArrayLike, padding_idx: Optional[int] = None,
              max_norm: Optional[float] = None) -> npt.NDArray[np.float32]:
    """Rows of a float table (torch.nn.functional.embedding): weight[input].

    Parameters
    ----------
    input : int array of any shape, each in [0, num_embeddings)
    weight : float array (num_embeddings, embedding_dim)
    padding_idx : int or None (only checked: it matters for training, not for lookups)
    max_norm : must be None (renormalizing rows in place is not supported)
    """
    w = _float_table(weight)
    if max_norm is not None:
        raise ValueError("max_norm is not supported (it rewrites weight rows in place)")
    _padding(padding_idx, w.shape[0])
    idx = _int_array(input, "input")
    _check_range(idx.reshape(-1), w.shape[0])
    return w[idx]


def embedding_bag(input: npt.ArrayLike, weight: npt.ArrayLike,
                  offsets: Optional[npt.ArrayLike] = None, max_norm: Optional[float] = None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights: Optional[npt.ArrayLike] = None,
                  include_last_offset: bool = False,
                  padding_idx: Optional[int] = None) -> npt.NDArray[np.float32]:
    """Bags of rows of a float table (torch.nn.functional.embedding_bag), float32.

    Sum adds rows in index order (with per-sample weights fma(w, row, acc), or
    acc + f32(w * row) when padding_idx is given, PyTorch's two paths), mean divides by the
    bag's entries, max keeps the largest; padding_idx entries are skipped and not counted;
    empty bags are zeros.

    Parameters
    ----------
    input, offsets, mode, per_sample_weights, include_last_offset, padding_idx : as
        quantized_embedding_bag (mode defaults to "mean", as PyTorch's)
    weight : float array (num_embeddings, embedding_dim)
    max_norm : must be None; norm_type, scale_grad_by_freq, sparse : training-only, ignored
    """
    w = _float_table(weight)
    if max_norm is not None:
        raise ValueError("max_norm is not supported (it rewrites weight rows in place)")
    if isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real):
        raise TypeError(f"norm_type must be a number; got {norm_type!r}")
    idx, off, psw, m, pad = _bag_args(input, offsets, include_last_offset, per_sample_weights,
                                      mode, padding_idx, w.shape[0])
    return _lookup(_kernels().embedding_bag_f32, w, idx, off, psw, m, pad, w.shape[0])
