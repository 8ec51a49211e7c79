"""Float Embedding and EmbeddingBag (torch.nn names, arguments and state_dict key `weight`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from qops import functional as F
from qops.nn.module import Module

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import Self

    from qops.nn._typing import Array

__all__ = ["Embedding", "EmbeddingBag"]

F32 = np.float32


def _padding_idx(padding_idx, n):
    if padding_idx is None:
        return None
    p = int(padding_idx)
    if not -n <= p < n:
        raise ValueError(f"padding_idx must be within num_embeddings ([-{n}, {n})); got {p}")
    return p + n if p < 0 else p


def _line_aligned(w):
    """w (2-D float32) in memory that starts at a 64-byte cache line, copied if it does not.

    Rows of 64 or 32 floats then each take 4 or 2 lines instead of 5 or 3: a lookup in a
    table beyond the caches costs a memory access per line (numpy starts arrays 16 bytes into
    a line; PyTorch's own module weights start on one).
    """
    w = np.ascontiguousarray(w, dtype=F32)
    if w.ctypes.data % 64 == 0 or w.size == 0:
        return w
    buf = np.empty(w.nbytes + 64, np.uint8)
    start = (-buf.ctypes.data) % 64
    out = buf[start:start + w.nbytes].view(F32).reshape(w.shape)
    out[...] = w
    return out


def _table(num_embeddings, embedding_dim, _weight, padding_idx):
    n, d = int(num_embeddings), int(embedding_dim)
    if n < 0 or d < 0:
        raise ValueError(f"num_embeddings and embedding_dim must be >= 0; got {n}, {d}")
    if _weight is None:
        # PyTorch's init: N(0, 1), the padding row zero
        w = np.random.default_rng().standard_normal((n, d)).astype(F32)
        if padding_idx is not None:
            w[padding_idx] = 0
        return _line_aligned(w)
    w = np.array(_weight, dtype=F32)
    if w.shape != (n, d):
        raise ValueError(f"_weight must have shape ({n}, {d}); got {w.shape}")
    return _line_aligned(w)


def _no_max_norm(max_norm):
    if max_norm is not None:
        raise ValueError("max_norm is not supported (PyTorch renormalizes weight rows in place "
                         "during the lookup)")


class Embedding(Module):
    """Rows of a float table: weight[input], shape input.shape + (embedding_dim,)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, _weight: Any = None,
                 _freeze: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _no_max_norm(max_norm)
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.padding_idx = _padding_idx(padding_idx, self.num_embeddings)
        self.max_norm = max_norm
        self.norm_type = float(norm_type)
        self.scale_grad_by_freq = bool(scale_grad_by_freq)
        self.sparse = bool(sparse)
        self.register_parameter("weight", _table(num_embeddings, embedding_dim, _weight,
                                                 self.padding_idx))

    def forward(self, input: npt.ArrayLike) -> Array:
        return F.embedding(input, self.weight, self.padding_idx)

    def _after_load(self):
        if isinstance(self.weight, np.ndarray) and self.weight.ndim == 2:
            self.weight = _line_aligned(self.weight)

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True,
                        padding_idx: Optional[int] = None, max_norm: Optional[float] = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Self:
        """An Embedding holding the 2-D float array `embeddings` (torch's from_pretrained)."""
        w = np.asarray(embeddings, dtype=F32)
        if w.ndim != 2:
            raise ValueError(f"embeddings must be 2-D; got shape {w.shape}")
        return cls(w.shape[0], w.shape[1], padding_idx, max_norm, norm_type, scale_grad_by_freq,
                   sparse, _weight=w, _freeze=freeze)

    def _config(self):
        # the table is saved as the `weight` parameter, not as a constructor argument
        return {k: v for k, v in super()._config().items() if k not in ("_weight", "_freeze")}

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of rows of a float table (torch.nn.EmbeddingBag)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: Optional[float] = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: Any = None, include_last_offset: bool = False,
                 padding_idx: Optional[int] = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _no_max_norm(max_norm)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode must be 'sum', 'mean' or 'max'; got {mode!r}")
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.max_norm = max_norm
        self.norm_type = float(norm_type)
        self.scale_grad_by_freq = bool(scale_grad_by_freq)
        self.mode = mode
        self.sparse = bool(sparse)
        self.include_last_offset = bool(include_last_offset)
        self.padding_idx = _padding_idx(padding_idx, self.num_embeddings)
        self.register_parameter("weight", _table(num_embeddings, embedding_dim, _weight,
                                                 self.padding_idx))

    def forward(self, input: npt.ArrayLike, offsets: Optional[npt.ArrayLike] = None,
                per_sample_weights: Optional[npt.ArrayLike] = None) -> Array:
        return F.embedding_bag(input, self.weight, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset,
                               padding_idx=self.padding_idx)

    def _after_load(self):
        if isinstance(self.weight, np.ndarray) and self.weight.ndim == 2:
            self.weight = _line_aligned(self.weight)

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, max_norm: Optional[float] = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        mode: str = "mean", sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: Optional[int] = None) -> Self:
        """An EmbeddingBag holding the 2-D float array `embeddings`."""
        w = np.asarray(embeddings, dtype=F32)
        if w.ndim != 2:
            raise ValueError(f"embeddings must be 2-D; got shape {w.shape}")
        return cls(w.shape[0], w.shape[1], max_norm, norm_type, scale_grad_by_freq, mode,
                   sparse, _weight=w, include_last_offset=include_last_offset,
                   padding_idx=padding_idx)

    def _config(self):
        return {k: v for k, v in super()._config().items() if k != "_weight"}

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


def torch_converters(torch: Any) -> Any:
    """{torch.nn embedding class: build(tm, convert)} for qops.nn.from_torch."""
    def embedding(tm, convert):
        return Embedding(tm.num_embeddings, tm.embedding_dim, tm.padding_idx, tm.max_norm,
                         tm.norm_type, tm.scale_grad_by_freq, tm.sparse,
                         _weight=tm.weight.detach().float().cpu().numpy())

    def embedding_bag(tm, convert):
        return EmbeddingBag(tm.num_embeddings, tm.embedding_dim, tm.max_norm, tm.norm_type,
                            tm.scale_grad_by_freq, tm.mode, tm.sparse,
                            _weight=tm.weight.detach().float().cpu().numpy(),
                            include_last_offset=tm.include_last_offset,
                            padding_idx=tm.padding_idx)
    return {torch.nn.Embedding: embedding, torch.nn.EmbeddingBag: embedding_bag}
