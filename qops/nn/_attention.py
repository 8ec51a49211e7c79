"""Attention and transformer layers (torch.nn's names, arguments and state_dict keys).

`MultiheadAttention` is float only, as in PyTorch's quantization flows: its x86 backend config
has no quantized attention, so graph mode runs it in float between a dequantize and a quantize,
and `quantize_dynamic` leaves its output projection float (a `NonDynamicallyQuantizableLinear`,
as PyTorch's). The feed-forward Linear layers of `TransformerEncoderLayer` quantize like any
Linear (dynamically, typically). Eval-mode semantics: dropout is not applied.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from qops import _blas
from qops._qtensor import QTensor
from qops.nn import _float_ops as fo
from qops.nn._layers import LayerNorm, Linear, _uniform
from qops.nn.module import Dropout, Module, ModuleList

__all__ = ["MultiheadAttention", "NonDynamicallyQuantizableLinear", "TransformerEncoderLayer",
           "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]

F32 = np.float32


class NonDynamicallyQuantizableLinear(Linear):
    """The output projection of MultiheadAttention: a Linear that quantize_dynamic (which
    matches exact types) leaves float, because attention reads its weight directly."""


class MultiheadAttention(Module):
    """Attention of `num_heads` heads: softmax(q k^T / sqrt(head_dim) + mask) v, projected.

    Parameters
    ----------
    embed_dim : int, the query's features (divisible by num_heads)
    num_heads : int
    dropout : float, attention-weight dropout (training only; refused there)
    bias : bool, biases of the input and output projections
    add_bias_kv : bool, a learned key and value appended to the sequence
    add_zero_attn : bool, a zero key and value appended to the sequence
    kdim, vdim : features of key and value (default embed_dim: one packed projection)
    batch_first : bool, inputs and output are (N, L, E) rather than (L, N, E)
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: Optional[int] = None, vdim: Optional[int] = None,
                 batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        embed_dim, num_heads = int(embed_dim), int(num_heads)
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be a positive "
                             f"multiple of num_heads ({num_heads})")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim = int(kdim) if kdim is not None else embed_dim
        self.vdim = int(vdim) if vdim is not None else embed_dim
        self.dropout = float(dropout)
        self.add_zero_attn = bool(add_zero_attn)
        self.batch_first = bool(batch_first)
        self.head_dim = embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        bound = math.sqrt(6.0 / (4 * embed_dim))      # (initial values only; imports overwrite)
        if self._qkv_same_embed_dim:
            self.register_parameter("in_proj_weight", _uniform((3 * embed_dim, embed_dim), bound))
        else:
            self.register_parameter("q_proj_weight", _uniform((embed_dim, embed_dim), bound))
            self.register_parameter("k_proj_weight", _uniform((embed_dim, self.kdim), bound))
            self.register_parameter("v_proj_weight", _uniform((embed_dim, self.vdim), bound))
        self.register_parameter("in_proj_bias", np.zeros(3 * embed_dim, F32) if bias else None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias)
        if bias:
            self.out_proj.bias = np.zeros(embed_dim, F32)
        if add_bias_kv:
            self.register_parameter("bias_k", _uniform((1, 1, embed_dim), 0.1))
            self.register_parameter("bias_v", _uniform((1, 1, embed_dim), 0.1))
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)

    def _config(self):
        return dict(embed_dim=self.embed_dim, num_heads=self.num_heads, dropout=self.dropout,
                    bias=self.in_proj_bias is not None, add_bias_kv=self.bias_k is not None,
                    add_zero_attn=self.add_zero_attn, kdim=self.kdim, vdim=self.vdim,
                    batch_first=self.batch_first)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"batch_first={self.batch_first}")

    def _projections(self):
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            return (w[:e], bq), (w[e:2 * e], bk), (w[2 * e:], bv)
        return (self.q_proj_weight, bq), (self.k_proj_weight, bk), (self.v_proj_weight, bv)

    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True, is_causal: bool = False) -> Any:
        """(attention output, attention weights or None), as torch.nn.MultiheadAttention.

        Parameters
        ----------
        query, key, value : float arrays (L, N, E) / (S, N, kdim) / (S, N, vdim), batch first
            if `batch_first`, or unbatched (L, E) / (S, kdim) / (S, vdim)
        key_padding_mask : (N, S) bool (True: ignore that key) or float (added), or None
        need_weights : bool, also return the weights (averaged over heads if
            `average_attn_weights`)
        attn_mask : (L, S) or (N * num_heads, L, S), bool (True: not allowed) or float (added)
        is_causal : bool, a hint that attn_mask is the causal mask (it must be given)
        """
        for name, t in (("query", query), ("key", key), ("value", value)):
            if isinstance(t, QTensor):
                raise TypeError(f"MultiheadAttention: {name} must be a float array (PyTorch "
                                f"has no quantized attention: dequantize first)")
        if self.training and self.dropout > 0:
            raise ValueError("MultiheadAttention: attention dropout in training mode is not "
                             "supported; call eval()")
        q, k, v = (fo.as_f32(t) for t in (query, key, value))
        if not (q.ndim == k.ndim == v.ndim and q.ndim in (2, 3)):
            raise ValueError(f"MultiheadAttention: query, key and value must all be 2-d or all "
                             f"3-d; got {q.ndim}, {k.ndim} and {v.ndim} dims")
        unbatched = q.ndim == 2
        if unbatched:
            q, k, v = q[:, None], k[:, None], v[:, None]
        elif self.batch_first:
            q, k, v = (np.swapaxes(t, 0, 1) for t in (q, k, v))
        L, N, E = q.shape
        for name, t, want in (("query", q, self.embed_dim), ("key", k, self.kdim),
                              ("value", v, self.vdim)):
            if t.shape[2] != want:
                raise ValueError(f"MultiheadAttention: {name} has {t.shape[2]} features, "
                                 f"expected {want}")
            if t.shape[1] != N:
                raise ValueError(f"MultiheadAttention: {name} has batch {t.shape[1]}, query "
                                 f"has {N}")
        if k.shape[0] != v.shape[0]:
            raise ValueError(f"MultiheadAttention: key has {k.shape[0]} positions, value "
                             f"{v.shape[0]}")
        (wq, bq), (wk, bk), (wv, bv) = self._projections()
        q, k, v = fo.linear(q, wq, bq), fo.linear(k, wk, bk), fo.linear(v, wv, bv)
        if self.bias_k is not None:
            k = np.concatenate([k, np.broadcast_to(self.bias_k, (1, N, E))], 0)
            v = np.concatenate([v, np.broadcast_to(self.bias_v, (1, N, E))], 0)
        mask = self._mask(attn_mask, key_padding_mask, is_causal, L, N, k.shape[0],
                          self.bias_k is not None)
        H, D = self.num_heads, self.head_dim

        def heads(t):                  # (S, N, E) -> (N * H, S, D)
            return np.ascontiguousarray(t.reshape(t.shape[0], N * H, D).transpose(1, 0, 2))
        q, k, v = heads(q), heads(k), heads(v)
        if self.add_zero_attn:
            k = np.concatenate([k, np.zeros((N * H, 1, D), F32)], 1)
            v = np.concatenate([v, np.zeros((N * H, 1, D), F32)], 1)
            if mask is not None:
                mask = np.concatenate([mask, np.zeros(mask.shape[:-1] + (1,), F32)], -1)
        scores = _blas.bmm(q * F32(1.0 / math.sqrt(D)), k, trans_b=True)
        if mask is not None:
            scores = scores + mask
        attn = fo.softmax_(scores, -1)
        out = _blas.bmm(attn, v).transpose(1, 0, 2).reshape(L, N, E)
        out = fo.linear(out, self.out_proj.weight, self.out_proj.bias)
        if unbatched:
            out = out[:, 0]
        elif self.batch_first:
            out = np.ascontiguousarray(np.swapaxes(out, 0, 1))
        if not need_weights:
            return out, None
        w = attn.reshape(N, H, L, -1)
        if average_attn_weights:
            w = w.mean(axis=1, dtype=F32)
        return out, (w[0] if unbatched else w)

    def _mask(self, attn_mask, key_padding_mask, is_causal, L, N, S, with_bias_kv):
        """The additive mask (N * H, L, S) or (L, S), or None."""
        H = self.num_heads

        def additive(m, what):
            m = np.asarray(m)
            if m.dtype == np.bool_:
                return np.where(m, F32(-np.inf), F32(0))
            if not np.issubdtype(m.dtype, np.floating):
                raise TypeError(f"MultiheadAttention: {what} must be bool or float; got "
                                f"{m.dtype}")
            return m.astype(F32)
        if is_causal and attn_mask is None:
            # (PyTorch refuses it too: the hint says what attn_mask is, it does not replace it)
            raise ValueError("MultiheadAttention: is_causal=True needs the causal attn_mask")
        mask = None
        if attn_mask is not None:
            mask = additive(attn_mask, "attn_mask")
            if with_bias_kv:
                mask = np.concatenate([mask, np.zeros(mask.shape[:-1] + (1,), F32)], -1)
            if mask.shape not in ((L, S), (N * H, L, S)):
                raise ValueError(f"MultiheadAttention: attn_mask has shape {mask.shape}; "
                                 f"expected {(L, S)} or {(N * H, L, S)}")
        if key_padding_mask is not None:
            kp = additive(key_padding_mask, "key_padding_mask")
            if kp.ndim == 1:
                kp = kp[None]
            if with_bias_kv:
                kp = np.concatenate([kp, np.zeros((kp.shape[0], 1), F32)], -1)
            if kp.shape != (N, S):
                raise ValueError(f"MultiheadAttention: key_padding_mask has shape {kp.shape}; "
                                 f"expected {(N, S)}")
            kp = np.repeat(kp, H, axis=0)[:, None, :]
            mask = kp if mask is None else mask + kp
        return mask


_ACTIVATIONS = {"relu": fo.relu, "gelu": fo.gelu}


class _TransformerLayer(Module):
    """What encoder and decoder layers share: attention over the input (and, for a decoder,
    over the encoder's memory), a feed-forward block, a norm and a dropout per block."""

    _weights_in_children = True     # (qops.load checks the sizes against the subtree's)
    _CROSS = False                  # a decoder's attention over the memory

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"{type(self).__name__}: activation must be 'relu' or 'gelu'; got "
                             f"{activation!r}")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)
        if self._CROSS:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                     batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = bool(norm_first)
        blocks = 3 if self._CROSS else 2
        for i in range(1, blocks + 1):
            self.add_module(f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for i in range(1, blocks + 1):
            self.add_module(f"dropout{i}", Dropout(dropout))
        self.activation = activation

    def _config(self):
        # read back from the layers (quantize_dynamic may have swapped the linear ones)
        return dict(d_model=self.self_attn.embed_dim, nhead=self.self_attn.num_heads,
                    dim_feedforward=int(self.linear1.out_features),
                    dropout=float(self.dropout.p), activation=self.activation,
                    layer_norm_eps=float(self.norm1.eps), batch_first=self.self_attn.batch_first,
                    norm_first=self.norm_first, bias=self.norm1.bias is not None)

    def _attend(self, attn, x, memory, mask, key_padding_mask, is_causal, dropout):
        x = attn(x, memory, memory, attn_mask=mask, key_padding_mask=key_padding_mask,
                 need_weights=False, is_causal=is_causal)[0]
        return dropout(x)

    def _ff_block(self, x, dropout):
        h = _ACTIVATIONS[self.activation](self.linear1(x))
        return dropout(self.linear2(self.dropout(h)))


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention and a feed-forward block, each with a residual and a layer norm.

    Parameters
    ----------
    d_model : int, the features
    nhead : int, attention heads
    dim_feedforward : int, the hidden size of the feed-forward block
    dropout : float (training only)
    activation : "relu" or "gelu", of the feed-forward block
    layer_norm_eps : float
    batch_first : bool, (N, S, E) rather than (S, N, E)
    norm_first : bool, the norms before attention and feed-forward rather than after
    bias : bool, biases of the linear layers and norms
    """

    def forward(self, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Any:
        """The layer's output for src (S, N, E) or batch first (N, S, E), as PyTorch's."""
        def sa(y):
            return self._attend(self.self_attn, y, y, src_mask, src_key_padding_mask,
                                is_causal, self.dropout1)
        x = src
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + self._ff_block(self.norm2(x), self.dropout2)
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + self._ff_block(x, self.dropout2))
        return x


def _stack(m, layer, num_layers, norm):
    """m.layers: num_layers copies of `layer` (none when it is None: from_torch and qops.load
    add them); m.norm."""
    import copy
    m.num_layers = int(num_layers)
    m.layers = ModuleList([copy.deepcopy(layer) for _ in range(m.num_layers)]
                          if layer is not None else [])
    m.norm = norm


class TransformerEncoder(Module):
    """A stack of encoder layers, then an optional norm.

    Parameters
    ----------
    encoder_layer : TransformerEncoderLayer, copied num_layers times (None: the layers are
        added afterwards, as qops.load and from_torch do)
    num_layers : int
    norm : optional Module applied to the output
    """

    def __init__(self, encoder_layer: Optional[TransformerEncoderLayer] = None,
                 num_layers: int = 1, norm: Optional[Module] = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        _stack(self, encoder_layer, num_layers, norm)

    def _config(self):
        return dict(num_layers=self.num_layers)

    def forward(self, src: Any, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: Optional[bool] = None) -> Any:
        """Every layer in turn, then the norm. (PyTorch's eval fast path with a key padding
        mask returns zeros at the padded positions; qops returns the values computed there.)"""
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        return self.norm(out) if self.norm is not None else out


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, attention over the encoder's memory and a feed-forward block, each with
    a residual and a layer norm (arguments as TransformerEncoderLayer)."""

    _CROSS = True

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Any:
        """The layer's output for tgt given the encoder's memory, as PyTorch's."""
        def sa(y):
            return self._attend(self.self_attn, y, y, tgt_mask, tgt_key_padding_mask,
                                tgt_is_causal, self.dropout1)

        def mha(y):
            return self._attend(self.multihead_attn, y, memory, memory_mask,
                                memory_key_padding_mask, memory_is_causal, self.dropout2)
        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + mha(self.norm2(x))
            x = x + self._ff_block(self.norm3(x), self.dropout3)
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + mha(x))
            x = self.norm3(x + self._ff_block(x, self.dropout3))
        return x


class TransformerDecoder(Module):
    """A stack of decoder layers, then an optional norm (arguments as TransformerEncoder)."""

    def __init__(self, decoder_layer: Optional[TransformerDecoderLayer] = None,
                 num_layers: int = 1, norm: Optional[Module] = None) -> None:
        super().__init__()
        _stack(self, decoder_layer, num_layers, norm)

    def _config(self):
        return dict(num_layers=self.num_layers)

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: Optional[bool] = None, memory_is_causal: bool = False) -> Any:
        """Every layer in turn on tgt with the encoder's memory, then the norm."""
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self.norm(out) if self.norm is not None else out


class Transformer(Module):
    """An encoder and a decoder (torch.nn.Transformer; built empty here and filled by
    from_torch or qops.load, or given `encoder` and `decoder` modules).

    Parameters
    ----------
    encoder, decoder : TransformerEncoder / TransformerDecoder (or compatible modules)
    d_model, nhead : int, recorded as PyTorch's attributes
    batch_first : bool
    """

    def __init__(self, encoder: Optional[Module] = None, decoder: Optional[Module] = None,
                 d_model: int = 512, nhead: int = 8, batch_first: bool = False) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.d_model, self.nhead, self.batch_first = int(d_model), int(nhead), bool(batch_first)

    def _config(self):
        return dict(d_model=self.d_model, nhead=self.nhead, batch_first=self.batch_first)

    def forward(self, src: Any, tgt: Any, src_mask: Any = None, tgt_mask: Any = None,
                memory_mask: Any = None, src_key_padding_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                src_is_causal: Optional[bool] = None, tgt_is_causal: Optional[bool] = None,
                memory_is_causal: bool = False) -> Any:
        """decoder(tgt, encoder(src)), masks passed on as PyTorch's."""
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
