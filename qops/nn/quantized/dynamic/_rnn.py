"""Dynamic quantized recurrent layers (torch.ao.nn.quantized.dynamic LSTM, GRU and cells).

Weights are qint8 QTensors (or float16-rounded float32), biases float32. Each gate GEMM is
qops' dynamic linear, bit-exact with PyTorch's fbgemm: the layer's whole input sequence is
quantized once per layer and direction (PyTorch's CPU path computes linear_ih over the
sequence), the hidden state once per step, both with reduce_range (PyTorch's dynamic RNN
modules, version 2, and its dynamic cells). The cell nonlinearities run in float32 as the
rnn family's step kernels compute them (docs/semantics.md §21).
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

import qops.functional as F
from qops._dtypes import qint8
from qops._qtensor import QTensor
from qops.nn import _float_ops as fo
from qops.nn import _rnn as frnn
from qops.nn.module import Module, _to_numpy
from qops.nn.quantized import _modules as nnq

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import Self

__all__ = ["RNNBase", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

F32 = np.float32
_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class _DynamicCell:
    """The gate GEMMs of one layer and direction: dynamic qint8 linear or float16 weights."""

    __slots__ = ("w_ih", "w_hh", "b_ih", "b_hh", "_ih", "_hh", "hr", "qint8", "ih_packed",
                 "hh_packed")

    def __init__(self, w_ih, w_hh, b_ih, b_hh, is_qint8):
        self.w_ih, self.w_hh, self.b_ih, self.b_hh = w_ih, w_hh, b_ih, b_hh
        self.qint8 = is_qint8
        self.hr = None
        if is_qint8:
            self._ih = F.prepack_linear(w_ih, b_ih)
            self._hh = F.prepack_linear(w_hh, b_hh)
            # the layer runs its whole time loop on these (qops._ops.rnn)
            self.ih_packed = self._ih
            self.hh_packed = self._hh
        else:
            # fbgemm's fp16 path: half-precision weights, float32 arithmetic
            self._ih = np.asarray(w_ih, F32).astype(np.float16).astype(F32)
            self._hh = np.asarray(w_hh, F32).astype(np.float16).astype(F32)
            self.ih_packed = self.hh_packed = None

    def ih(self, x):
        if self.qint8:
            return F.linear_dynamic(x, self._ih, None, True)
        return fo.linear(x, self._ih, self.b_ih)

    def hh(self, h):
        if self.qint8:
            return F.linear_dynamic(h, self._hh, None, True)
        return fo.linear(h, self._hh, self.b_hh)


def _check_dtype(owner, dtype):
    name = nnq.dtype_name(dtype)
    if name not in ("qint8", "float16"):
        raise TypeError(f"{owner}: dtype must be qint8 or float16; got {dtype!r}")
    return qint8 if name == "qint8" else "float16"


def _placeholder_weight(shape, dtype):
    w = np.zeros(shape, F32)
    if dtype is qint8:
        return F.quantize_per_tensor(w, 0.1, 0, qint8)
    return w


def _weight_observer(mod, owner):
    qconfig = getattr(mod, "qconfig", None)
    if qconfig is not None and getattr(qconfig, "weight", None) is not None:
        return qconfig.weight
    from qops.quantization import default_dynamic_qconfig
    return default_dynamic_qconfig.weight


def _quantize(w, obs_factory, dtype, owner):
    if dtype is not qint8:
        return np.asarray(w, F32)
    obs = obs_factory()
    nnq._observe(obs, w)
    return nnq.quantize_weight(w, obs, owner)


class _WeightsMixin:
    """State (weight_ih{sfx}, weight_hh{sfx}, bias_ih{sfx}, bias_hh{sfx}) held in cells."""

    def _names(self):
        raise NotImplementedError

    def _shapes(self, sfx):
        raise NotImplementedError

    def set_weight_bias(self, weights: dict[str, Any]) -> None:
        """Set weights and biases from a dict {name: value} with the float module's names.

        Parameters
        ----------
        weights : dict of weight_ih*, weight_hh* (qint8 QTensors, or float arrays for
            float16) and bias_ih*, bias_hh* (float arrays or None)
        """
        cells = []
        for sfx in self._names():
            (gi, ii), (gh, hh) = self._shapes(sfx)
            w_ih = _to_numpy(weights["weight_ih" + sfx])
            w_hh = _to_numpy(weights["weight_hh" + sfx])
            b_ih, b_hh = weights.get("bias_ih" + sfx), weights.get("bias_hh" + sfx)
            for name, w, shape in (("weight_ih" + sfx, w_ih, (gi, ii)),
                                   ("weight_hh" + sfx, w_hh, (gh, hh))):
                if self.dtype is qint8:
                    if not isinstance(w, QTensor) or w.dtype is not qint8:
                        raise TypeError(f"{type(self).__name__}: {name} must be a qint8 "
                                        f"QTensor")
                if tuple(w.shape) != shape:
                    raise ValueError(f"{type(self).__name__}: {name} must have shape {shape}; "
                                     f"got {tuple(w.shape)}")
            bs = []
            for name, b in (("bias_ih" + sfx, b_ih), ("bias_hh" + sfx, b_hh)):
                if b is not None:
                    b = np.array(_to_numpy(b), dtype=F32)
                    if b.shape != (gi,):
                        raise ValueError(f"{type(self).__name__}: {name} must have shape "
                                         f"({gi},); got {b.shape}")
                bs.append(b)
            if self.dtype is not qint8:
                w_ih, w_hh = np.asarray(w_ih, F32), np.asarray(w_hh, F32)
            cells.append(_DynamicCell(w_ih, w_hh, bs[0], bs[1], self.dtype is qint8))
        self.__dict__["_cells"] = cells

    def get_weight(self) -> dict[str, Any]:
        """{name: weight} (QTensors for qint8, float16-valued float32 arrays otherwise)."""
        out = {}
        for sfx, cell in zip(self._names(), self._cells):
            out["weight_ih" + sfx] = cell.w_ih if self.dtype is qint8 else cell._ih
            out["weight_hh" + sfx] = cell.w_hh if self.dtype is qint8 else cell._hh
        return out

    def get_bias(self) -> dict[str, Any]:
        """{name: float32 bias or None}."""
        out = {}
        for sfx, cell in zip(self._names(), self._cells):
            out["bias_ih" + sfx] = cell.b_ih
            out["bias_hh" + sfx] = cell.b_hh
        return out

    def _state_keys(self):
        keys = []
        for sfx in self._names():
            keys += ["weight_ih" + sfx, "weight_hh" + sfx, "bias_ih" + sfx, "bias_hh" + sfx]
        return keys

    def _save_to_state_dict(self, destination, prefix):
        w, b = self.get_weight(), self.get_bias()
        for k in self._state_keys():
            v = w.get(k, b.get(k))
            destination[prefix + k] = v.clone() if isinstance(v, QTensor) else (
                None if v is None else np.array(v))

    def _load_from_state_dict(self, state, prefix, errors):
        keys = self._state_keys()
        missing = [prefix + k for k in keys if prefix + k not in state]
        errors["missing"].extend(missing)
        if missing:
            return
        vals = {k: state.pop(prefix + k) for k in keys}
        try:
            self.set_weight_bias(vals)
        except (TypeError, ValueError) as e:
            errors["bad"].append(f"{prefix}: {e}")

    def _get_name(self):
        return "DynamicQuantized" + type(self).__name__


class RNNBase(_WeightsMixin, Module):
    """Dynamic quantized multi-layer LSTM or GRU (float32 in and out).

    Parameters
    ----------
    mode : "LSTM" or "GRU"
    input_size, hidden_size, num_layers : int
    bias : bool
    batch_first : bool
    dropout : float (stored; inference only)
    bidirectional : bool
    dtype : qops.qint8 or "float16"
    """

    _version = 2

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, dtype: Any = qint8) -> None:
        super().__init__()
        owner = type(self).__name__
        if mode not in ("LSTM", "GRU"):
            raise ValueError(f"{owner}: mode must be 'LSTM' or 'GRU'; got {mode!r}")
        frnn._check_sizes(owner, input_size, hidden_size, num_layers)
        frnn._check_dropout(owner, dropout)
        self.mode = mode
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.dtype = _check_dtype(owner, dtype)
        w = {}
        for sfx in self._names():
            (gi, ii), (gh, hh) = self._shapes(sfx)
            w["weight_ih" + sfx] = _placeholder_weight((gi, ii), self.dtype)
            w["weight_hh" + sfx] = _placeholder_weight((gh, hh), self.dtype)
            w["bias_ih" + sfx] = np.zeros(gi, F32)
            w["bias_hh" + sfx] = np.zeros(gi, F32)
        self.set_weight_bias(w)

    def _names(self):
        return [sfx for _, sfx in frnn.layer_suffixes(self.num_layers, self.bidirectional)]

    def _shapes(self, sfx):
        dirs = 2 if self.bidirectional else 1
        g = _GATES[self.mode] * self.hidden_size
        first = sfx.startswith("_l0")
        return (g, self.input_size if first else self.hidden_size * dirs), (g, self.hidden_size)

    def forward(self, input: npt.ArrayLike, hx: Any = None) -> Any:
        return F.recurrent(self.mode, input, hx, self._cells, self.input_size,
                           self.hidden_size, self.num_layers, self.bidirectional,
                           self.batch_first)

    def extra_repr(self) -> str:
        return frnn.layer_repr(self) + f", dtype={self.dtype}"

    def _config(self):
        cfg = dict(input_size=self.input_size, hidden_size=self.hidden_size,
                   num_layers=self.num_layers, bias=self.bias, batch_first=self.batch_first,
                   dropout=self.dropout, bidirectional=self.bidirectional, dtype=self.dtype)
        if type(self) is RNNBase:
            cfg["mode"] = self.mode
        return cfg

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A dynamic quantized LSTM/GRU from a float one (weights observed per tensor).

        Without a qconfig the default dynamic qconfig is used, as in PyTorch.
        """
        owner = cls.__name__
        want = frnn.LSTM if cls is LSTM else frnn.GRU
        if not isinstance(mod, want):
            raise TypeError(f"{owner}.from_float: expected a float {want.__name__}; got "
                            f"{type(mod).__name__}")
        if getattr(mod, "proj_size", 0):
            raise ValueError(f"{owner}.from_float: proj_size is not supported (as in PyTorch)")
        if not mod.bias:
            raise ValueError(f"{owner}.from_float: the float module must have biases "
                             f"(as in PyTorch)")
        obs = _weight_observer(mod, owner)
        dtype = _check_dtype(owner, getattr(obs(), "dtype", qint8))
        q = cls(mod.input_size, mod.hidden_size, mod.num_layers, mod.bias, mod.batch_first,
                mod.dropout, mod.bidirectional, dtype=dtype)
        w = {}
        for sfx in q._names():
            for k in ("weight_ih", "weight_hh"):
                w[k + sfx] = _quantize(getattr(mod, k + sfx), obs, dtype, owner)
            for k in ("bias_ih", "bias_hh"):
                w[k + sfx] = getattr(mod, k + sfx)
        q.set_weight_bias(w)
        return q


class LSTM(RNNBase):
    """Dynamic quantized LSTM; forward(input, (h_0, c_0)) -> (output, (h_n, c_n)).

    Parameters
    ----------
    input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, dtype :
        as RNNBase
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype: Any = qint8) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, dtype)


class GRU(RNNBase):
    """Dynamic quantized GRU; forward(input, h_0) -> (output, h_n).

    Parameters
    ----------
    input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, dtype :
        as RNNBase
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype: Any = qint8) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, dtype)


class RNNCellBase(_WeightsMixin, Module):
    """Dynamic quantized recurrent cell (float32 in and out).

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    num_chunks : 4 (LSTM), 3 (GRU) or 1 (RNN)
    dtype : qops.qint8 or "float16"
    """

    _MODE = "RNN_TANH"
    _FLOAT = None

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, num_chunks: int = 4,
                 dtype: Any = qint8) -> None:
        super().__init__()
        owner = type(self).__name__
        frnn._check_sizes(owner, input_size, hidden_size)
        if isinstance(num_chunks, bool) or not isinstance(num_chunks, numbers.Integral) \
                or num_chunks not in (1, 3, 4):
            raise ValueError(f"{owner}: num_chunks must be 1, 3 or 4; got {num_chunks!r}")
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.bias = bool(bias)
        self.num_chunks = int(num_chunks)
        self.dtype = _check_dtype(owner, dtype)
        g = self.num_chunks * self.hidden_size
        self.set_weight_bias({
            "weight_ih": _placeholder_weight((g, self.input_size), self.dtype),
            "weight_hh": _placeholder_weight((g, self.hidden_size), self.dtype),
            "bias_ih": np.zeros(g, F32) if bias else None,
            "bias_hh": np.zeros(g, F32) if bias else None})

    def _names(self):
        return [""]

    def _shapes(self, sfx):
        g = self.num_chunks * self.hidden_size
        return (g, self.input_size), (g, self.hidden_size)

    def _mode(self):
        return self._MODE

    def forward(self, input: npt.ArrayLike, hx: Any = None) -> Any:
        return frnn._cell_step(self._mode(), self._cells[0], input, hx, self.input_size,
                               self.hidden_size)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, dtype={self.dtype}"

    def _config(self):
        cfg = dict(input_size=self.input_size, hidden_size=self.hidden_size, bias=self.bias,
                   dtype=self.dtype)
        if type(self) is RNNCellBase:
            cfg["num_chunks"] = self.num_chunks
        return cfg

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A dynamic quantized cell from the float cell of the same kind."""
        owner = cls.__name__
        if not isinstance(mod, cls._FLOAT):
            raise TypeError(f"{owner}.from_float: expected a float {cls._FLOAT.__name__}; got "
                            f"{type(mod).__name__}")
        obs = _weight_observer(mod, owner)
        dtype = _check_dtype(owner, getattr(obs(), "dtype", qint8))
        kw = dict(nonlinearity=mod.nonlinearity) if cls is RNNCell else {}
        q = cls(mod.input_size, mod.hidden_size, mod.bias, dtype=dtype, **kw)
        q.set_weight_bias({
            "weight_ih": _quantize(mod.weight_ih, obs, dtype, owner),
            "weight_hh": _quantize(mod.weight_hh, obs, dtype, owner),
            "bias_ih": mod.bias_ih, "bias_hh": mod.bias_hh})
        return q


class LSTMCell(RNNCellBase):
    """Dynamic quantized LSTM cell; forward(input, (h, c)) -> (h', c').

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    dtype : qops.qint8 or "float16"
    """

    _MODE = "LSTM"
    _FLOAT = frnn.LSTMCell

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 dtype: Any = qint8) -> None:
        super().__init__(input_size, hidden_size, bias, 4, dtype)


class GRUCell(RNNCellBase):
    """Dynamic quantized GRU cell; forward(input, h) -> h'.

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    dtype : qops.qint8 or "float16"
    """

    _MODE = "GRU"
    _FLOAT = frnn.GRUCell

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 dtype: Any = qint8) -> None:
        super().__init__(input_size, hidden_size, bias, 3, dtype)


class RNNCell(RNNCellBase):
    """Dynamic quantized Elman RNN cell (tanh or relu); forward(input, h) -> h'.

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    nonlinearity : "tanh" or "relu"
    dtype : qops.qint8 or "float16"
    """

    _FLOAT = frnn.RNNCell

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", dtype: Any = qint8) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu'; got "
                             f"{nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias, 1, dtype)
        self.nonlinearity = nonlinearity

    def _mode(self):
        return "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"

    def _config(self):
        return dict(super()._config(), nonlinearity=self.nonlinearity)


def _np_weight(t, dtype):
    from qops.nn._torch import qtensor_from_torch
    t = t.detach()
    if dtype is qint8:
        return qtensor_from_torch(t)
    return t.float().cpu().numpy().copy()


def _np_bias(t):
    return None if t is None else t.detach().float().cpu().numpy().copy()


def torch_converters(torch: Any) -> Any:
    """{torch dynamic quantized rnn class: build(tm, convert)} for qops.nn.from_torch_quantized."""
    tqd = torch.ao.nn.quantized.dynamic
    table = {}

    def layers(qcls):
        def build(tm, convert):
            dtype = _check_dtype(qcls.__name__, tm.dtype)
            q = qcls(tm.input_size, tm.hidden_size, tm.num_layers, tm.bias, tm.batch_first,
                     tm.dropout, tm.bidirectional, dtype=dtype)
            w, b = tm.get_weight(), tm.get_bias()
            state = {k: _np_weight(v, dtype) for k, v in w.items()}
            state.update({k: _np_bias(v) for k, v in b.items()})
            q.set_weight_bias(state)
            return q
        return build

    def cell(qcls):
        def build(tm, convert):
            dtype = _check_dtype(qcls.__name__, tm.weight_dtype)
            unpack = (torch.ops.quantized.linear_unpack if dtype is qint8
                      else torch.ops.quantized.linear_unpack_fp16)
            kw = dict(nonlinearity=tm.nonlinearity) if qcls is RNNCell else {}
            q = qcls(tm.input_size, tm.hidden_size, tm.bias, dtype=dtype, **kw)
            w_ih, b_ih = unpack(tm._packed_weight_ih)
            w_hh, b_hh = unpack(tm._packed_weight_hh)
            q.set_weight_bias({"weight_ih": _np_weight(w_ih, dtype),
                               "weight_hh": _np_weight(w_hh, dtype),
                               "bias_ih": _np_bias(b_ih), "bias_hh": _np_bias(b_hh)})
            return q
        return build

    table[tqd.LSTM] = layers(LSTM)
    table[tqd.GRU] = layers(GRU)
    for name, qcls in (("LSTMCell", LSTMCell), ("GRUCell", GRUCell), ("RNNCell", RNNCell)):
        table[getattr(tqd, name)] = cell(qcls)
    return table
