"""Quantized Embedding and EmbeddingBag (torch.ao.nn.quantized names): weight-only, quint8 or
quint4x2 rows with a float scale and zero point each, float32 output."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from qops import functional as F
from qops._dtypes import per_channel_affine_float_qparams
from qops._ops.embedding import EmbeddingPackedParams, _dtype_name, pack_nibbles
from qops.nn.module import Module

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import Self

    from qops.nn._typing import Array

__all__ = ["Embedding", "EmbeddingBag"]

F32 = np.float32
_KEYS = ("weight_int", "weight_scales", "weight_zero_points")


def _empty_table(n, d, dtype):
    # PyTorch's initial table: scales 1, zero points 0 (values unset; here 0)
    data = np.zeros((n, d if dtype == "quint8" else d // 2), np.uint8)
    return EmbeddingPackedParams(data, np.ones(n, F32), np.zeros(n, F32), dtype, d)


def _weight_dtype(mod):
    """The quantized dtype the float module's qconfig asks for (float_qparams weights only)."""
    qconfig = getattr(mod, "qconfig", None)
    if qconfig is None or getattr(qconfig, "weight", None) is None:
        return "quint8"
    obs = qconfig.weight()
    if obs.qscheme is not per_channel_affine_float_qparams:
        raise ValueError(f"{type(mod).__name__} quantization is only supported with "
                         "float_qparams_weight_only_qconfig (per_channel_affine_float_qparams "
                         f"weights); got {obs.qscheme.name}")
    return _dtype_name(obs.dtype)


class Embedding(Module):
    """Quantized embedding: rows dequantized as fma(scale, q, -zero_point * scale)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, _weight: Any = None,
                 dtype: Any = "quint8") -> None:
        super().__init__()
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.dtype = _dtype_name(dtype)
        if self.dtype == "quint4x2" and self.embedding_dim % 2:
            raise ValueError(f"a quint4x2 table needs an even embedding_dim; got "
                             f"{self.embedding_dim}")
        self.__dict__["_packed_params"] = _empty_table(self.num_embeddings, self.embedding_dim,
                                                       self.dtype)
        if _weight is not None:
            self.set_weight(_weight)

    def set_weight(self, w: Any) -> None:
        """Set the table: an EmbeddingPackedParams of this module's shape and dtype."""
        if not isinstance(w, EmbeddingPackedParams):
            raise TypeError("weight must be an EmbeddingPackedParams (qops.functional."
                            f"embedding_bag_prepack); got {type(w).__name__}")
        if (w.num_embeddings, w.embedding_dim) != (self.num_embeddings, self.embedding_dim):
            raise ValueError(f"weight has shape ({w.num_embeddings}, {w.embedding_dim}); the "
                             f"module needs ({self.num_embeddings}, {self.embedding_dim})")
        if w.dtype != self.dtype:
            raise TypeError(f"weight is {w.dtype}; the module is {self.dtype}")
        self.__dict__["_packed_params"] = w

    def weight(self) -> Any:
        """The table (EmbeddingPackedParams)."""
        return self._packed_params

    def forward(self, indices: npt.ArrayLike) -> Array:
        return F.quantized_embedding(self._packed_params, indices)

    @classmethod
    def from_float(cls, mod: Module, use_precomputed_fake_quant: bool = False) -> Self:
        """The quantized module of a float Embedding (float_qparams_weight_only_qconfig)."""
        from qops.nn import Embedding as FloatEmbedding
        if type(mod) is not FloatEmbedding:
            raise TypeError(f"{cls.__name__}.from_float needs a qops.nn.Embedding; got "
                            f"{type(mod).__name__}")
        dtype = _weight_dtype(mod)
        return cls(mod.num_embeddings, mod.embedding_dim,
                   _weight=F.embedding_bag_prepack(mod.weight, dtype), dtype=dtype)

    # -- state: the values (4-bit ones unpacked), the scales and the float zero points --------
    def _save_to_state_dict(self, destination, prefix):
        p = self._packed_params
        destination[prefix + "weight_int"] = np.ascontiguousarray(p.int_repr())
        destination[prefix + "weight_scales"] = p.scales
        destination[prefix + "weight_zero_points"] = p.zero_points

    def _state_keys(self):
        return list(_KEYS)

    def _load_from_state_dict(self, state, prefix, errors):
        values = {}
        for k in _KEYS:
            if prefix + k not in state:
                errors["missing"].append(prefix + k)
            else:
                values[k] = np.asarray(state.pop(prefix + k))
        if len(values) < len(_KEYS):
            return
        q = values["weight_int"]
        shape = (self.num_embeddings, self.embedding_dim)
        if q.shape != shape or q.dtype != np.uint8:
            errors["bad"].append(f"{prefix}weight_int: expected uint8 {shape}, got {q.dtype} "
                                 f"{q.shape}")
            return
        qmax = 255 if self.dtype == "quint8" else 15
        if q.max(initial=0) > qmax:
            errors["bad"].append(f"{prefix}weight_int: values above {qmax}")
            return
        data = q if self.dtype == "quint8" else pack_nibbles(q)
        try:
            self.set_weight(EmbeddingPackedParams(data, values["weight_scales"],
                                                  values["weight_zero_points"], self.dtype,
                                                  self.embedding_dim))
        except (TypeError, ValueError) as e:
            errors["bad"].append(f"{prefix}weight_scales/zero_points: {e}")

    def _config(self):
        return {k: v for k, v in super()._config().items() if k != "_weight"}

    def extra_repr(self) -> str:
        return (f"num_embeddings={self.num_embeddings}, embedding_dim={self.embedding_dim}, "
                f"dtype={self.dtype}, qscheme=per_channel_affine_float_qparams")

    def _get_name(self):
        return "QuantizedEmbedding"


class EmbeddingBag(Embedding):
    """Quantized embedding bag: sum (PyTorch's only quantized mode), mean or max of bags.

    PyTorch's quantized EmbeddingBag sums whatever its `mode`; qops honours `mode` as the float
    EmbeddingBag does (so a converted mean bag stays a mean). `padding_idx` is a qops
    extension (PyTorch's quantized module has none).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: Optional[float] = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "sum",
                 sparse: bool = False, _weight: Any = None, include_last_offset: bool = False,
                 dtype: Any = "quint8", padding_idx: Optional[int] = None) -> None:
        super().__init__(num_embeddings, embedding_dim, _weight=_weight, dtype=dtype)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode must be 'sum', 'mean' or 'max'; got {mode!r}")
        self.mode = mode
        self.include_last_offset = bool(include_last_offset)
        self.padding_idx = padding_idx

    def forward(self, indices: npt.ArrayLike, offsets: Optional[npt.ArrayLike] = None,
                per_sample_weights: Optional[npt.ArrayLike] = None,
                compressed_indices_mapping: Optional[dict[Any, Any]] = None) -> Array:
        if compressed_indices_mapping is not None:
            raise ValueError("compressed_indices_mapping (pruned tables) is not supported")
        return F.quantized_embedding_bag(self._packed_params, indices, offsets, self.mode,
                                         per_sample_weights, self.include_last_offset,
                                         self.padding_idx)

    @classmethod
    def from_float(cls, mod: Module, use_precomputed_fake_quant: bool = False) -> Self:
        """The quantized module of a float EmbeddingBag (float_qparams_weight_only_qconfig)."""
        from qops.nn import EmbeddingBag as FloatEmbeddingBag
        if type(mod) is not FloatEmbeddingBag:
            raise TypeError(f"{cls.__name__}.from_float needs a qops.nn.EmbeddingBag; got "
                            f"{type(mod).__name__}")
        dtype = _weight_dtype(mod)
        return cls(mod.num_embeddings, mod.embedding_dim, mode=mod.mode,
                   _weight=F.embedding_bag_prepack(mod.weight, dtype),
                   include_last_offset=mod.include_last_offset, dtype=dtype,
                   padding_idx=mod.padding_idx)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", mode={self.mode!r}"

    def _get_name(self):
        return "QuantizedEmbeddingBag"


def torch_converters(torch: Any) -> Any:
    """{torch.ao.nn.quantized embedding class: build(tm, convert)} for from_torch."""
    def table(tm):
        w = tm.weight()
        dtype = str(w.dtype).replace("torch.", "")
        n, d = tm.num_embeddings, tm.embedding_dim
        raw = w.int_repr().contiguous().numpy()
        # quint4x2 values are packed two a byte over the whole tensor: rows of d / 2 bytes
        data = raw.reshape(n, -1).copy()
        scales = w.q_per_channel_scales().float().numpy().copy()
        zps = w.q_per_channel_zero_points().float().numpy().copy()
        return dtype, EmbeddingPackedParams(data, scales, zps, dtype, d)

    def embedding(tm, convert):
        dtype, t = table(tm)
        return Embedding(tm.num_embeddings, tm.embedding_dim, _weight=t, dtype=dtype)

    def embedding_bag(tm, convert):
        dtype, t = table(tm)
        return EmbeddingBag(tm.num_embeddings, tm.embedding_dim, mode=tm.mode, _weight=t,
                            include_last_offset=tm.include_last_offset, dtype=dtype)
    tq = torch.ao.nn.quantized
    return {tq.Embedding: embedding, tq.EmbeddingBag: embedding_bag}
