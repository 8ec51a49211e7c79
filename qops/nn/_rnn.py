"""Float recurrent layers under PyTorch's names: RNN, LSTM, GRU and their cells.

Arguments, parameter names (weight_ih_l0, weight_hh_l0_reverse, weight_hr_l0, ...) and shapes
are PyTorch's; the forward is `qops.functional.recurrent` with float32 GEMMs (numpy) and the
rnn family's cell steps. Dropout between layers applies in training only, which qops does not
do: it is stored and ignored.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

import qops.functional as F
from qops.nn import _float_ops as fo
from qops.nn._layers import _uniform
from qops.nn.module import Module

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

F32 = np.float32
_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class _FloatCell:
    """The gate GEMMs of one layer and direction: x W^T + b in float32."""

    __slots__ = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")

    def __init__(self, w_ih, w_hh, b_ih, b_hh, w_hr=None):
        self.w_ih, self.w_hh, self.b_ih, self.b_hh, self.w_hr = w_ih, w_hh, b_ih, b_hh, w_hr

    def ih(self, x):
        return fo.linear(x, self.w_ih, self.b_ih)

    def hh(self, h):
        return fo.linear(h, self.w_hh, self.b_hh)

    @property
    def hr(self):
        if self.w_hr is None:
            return None
        return lambda h: fo.linear(h, self.w_hr, None)


def _check_sizes(owner, input_size, hidden_size, num_layers=1):
    for name, v, lo in (("input_size", input_size, 0), ("hidden_size", hidden_size, 1),
                        ("num_layers", num_layers, 1)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
            raise ValueError(f"{owner}: {name} must be an integer >= {lo}; got {v!r}")


def layer_suffixes(num_layers, bidirectional):
    """[(layer, suffix)] per layer and direction, layer-major, with PyTorch's parameter
    suffixes ("_l0", "_l0_reverse", "_l1", ...): the order the cells run in."""
    dirs = ("", "_reverse") if bidirectional else ("",)
    return [(layer, f"_l{layer}{d}") for layer in range(num_layers) for d in dirs]


def layer_repr(m, extra=""):
    """PyTorch's extra_repr of a recurrent layer: sizes, then `extra` (e.g. proj_size),
    then the arguments that differ from their defaults."""
    s = f"{m.input_size}, {m.hidden_size}" + extra
    if m.num_layers != 1:
        s += f", num_layers={m.num_layers}"
    if not m.bias:
        s += ", bias=False"
    if m.batch_first:
        s += ", batch_first=True"
    if m.dropout:
        s += f", dropout={m.dropout}"
    if m.bidirectional:
        s += ", bidirectional=True"
    return s


def _check_dropout(owner, dropout):
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) \
            or not 0 <= dropout <= 1:
        raise ValueError(f"{owner}: dropout must be a number in [0, 1]; got {dropout!r}")


class RNNBase(Module):
    """Multi-layer recurrent layer (the base of RNN, LSTM and GRU).

    Parameters
    ----------
    mode : "LSTM", "GRU", "RNN_TANH" or "RNN_RELU"
    input_size, hidden_size : int
    num_layers : int
    bias : bool, with bias_ih / bias_hh parameters
    batch_first : bool, input and output (batch, seq, feature)
    dropout : float, between layers in training (stored; qops runs inference only)
    bidirectional : bool
    proj_size : int, LSTM output projection (weight_hr_l*), 0 for none
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        owner = type(self).__name__
        if mode not in _GATES:
            raise ValueError(f"{owner}: unknown mode {mode!r}")
        _check_sizes(owner, input_size, hidden_size, num_layers)
        _check_dropout(owner, dropout)
        if isinstance(proj_size, bool) or not isinstance(proj_size, numbers.Integral) \
                or proj_size < 0:
            raise ValueError(f"{owner}: proj_size must be an integer >= 0; got {proj_size!r}")
        if proj_size and mode != "LSTM":
            raise ValueError(f"{owner}: proj_size is only supported by LSTM")
        if proj_size >= hidden_size and proj_size:
            raise ValueError(f"{owner}: proj_size must be smaller than hidden_size")
        self.mode = mode
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.proj_size = int(proj_size)
        dirs = 2 if bidirectional else 1
        gate = _GATES[mode] * hidden_size
        real_h = proj_size or hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        for layer, sfx in layer_suffixes(num_layers, bidirectional):
            in_size = input_size if layer == 0 else real_h * dirs
            self.register_parameter("weight_ih" + sfx, _uniform((gate, in_size), bound))
            self.register_parameter("weight_hh" + sfx, _uniform((gate, real_h), bound))
            if bias:
                self.register_parameter("bias_ih" + sfx, _uniform((gate,), bound))
                self.register_parameter("bias_hh" + sfx, _uniform((gate,), bound))
            if proj_size:
                self.register_parameter("weight_hr" + sfx,
                                        _uniform((proj_size, hidden_size), bound))

    def _cells(self):
        p = self._parameters
        return [_FloatCell(p["weight_ih" + sfx], p["weight_hh" + sfx], p.get("bias_ih" + sfx),
                           p.get("bias_hh" + sfx), p.get("weight_hr" + sfx))
                for _, sfx in layer_suffixes(self.num_layers, self.bidirectional)]

    def forward(self, input: npt.ArrayLike, hx: Any = None) -> Any:
        return F.recurrent(self.mode, input, hx, self._cells(), self.input_size,
                           self.hidden_size, self.num_layers, self.bidirectional,
                           self.batch_first, self.proj_size)

    def extra_repr(self) -> str:
        return layer_repr(self, f", proj_size={self.proj_size}" if self.proj_size else "")

    def _config(self):
        cfg = dict(input_size=self.input_size, hidden_size=self.hidden_size,
                   num_layers=self.num_layers, bias=self.bias, batch_first=self.batch_first,
                   dropout=self.dropout, bidirectional=self.bidirectional)
        if type(self) is RNNBase:
            cfg.update(mode=self.mode, proj_size=self.proj_size)
        return cfg


class RNN(RNNBase):
    """Elman RNN with tanh or relu (PyTorch's nn.RNN).

    Parameters
    ----------
    input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional : as RNNBase
    nonlinearity : "tanh" or "relu"
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu'; got "
                             f"{nonlinearity!r}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional)
        self.nonlinearity = nonlinearity

    def _config(self):
        return dict(super()._config(), nonlinearity=self.nonlinearity)


class LSTM(RNNBase):
    """Long short-term memory layer (PyTorch's nn.LSTM), with optional projection.

    Parameters
    ----------
    input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional : as RNNBase
    proj_size : int, 0 for none
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size)

    def _config(self):
        return dict(super()._config(), proj_size=self.proj_size)


class GRU(RNNBase):
    """Gated recurrent unit layer (PyTorch's nn.GRU).

    Parameters
    ----------
    input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional : as RNNBase
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional)


def _cell_step(mode, cell, input, hx, input_size, hidden_size):
    """One cell step on a batch (or an unbatched vector) as PyTorch's nn.*Cell.forward."""
    from qops import _config
    from qops._ops.rnn import check_cell_input
    x, states, unbatched = check_cell_input(input, hx, input_size, hidden_size,
                                            2 if mode == "LSTM" else 1)
    k = _config.impl("rnn")
    gi = np.ascontiguousarray(cell.ih(x))
    gh = np.ascontiguousarray(cell.hh(states[0]))
    if mode == "LSTM":
        h, c = k.lstm_cell(gi, gh, states[1])
        return (h[0], c[0]) if unbatched else (h, c)
    if mode == "GRU":
        h = k.gru_cell(gi, gh, states[0])
    else:
        h = k.rnn_cell(gi, gh, mode == "RNN_RELU")
    return h[0] if unbatched else h


class RNNCellBase(Module):
    """One recurrent cell: weight_ih (gates, input), weight_hh (gates, hidden), biases.

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    num_chunks : gates per hidden unit (4 LSTM, 3 GRU, 1 RNN)
    """

    _MODE = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _check_sizes(type(self).__name__, input_size, hidden_size)
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.bias = bool(bias)
        bound = 1.0 / math.sqrt(hidden_size)
        g = num_chunks * hidden_size
        self.register_parameter("weight_ih", _uniform((g, input_size), bound))
        self.register_parameter("weight_hh", _uniform((g, hidden_size), bound))
        self.register_parameter("bias_ih", _uniform((g,), bound) if bias else None)
        self.register_parameter("bias_hh", _uniform((g,), bound) if bias else None)

    def _mode(self):
        return self._MODE

    def forward(self, input: npt.ArrayLike, hx: Any = None) -> Any:
        cell = _FloatCell(self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return _cell_step(self._mode(), cell, input, hx, self.input_size, self.hidden_size)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        return s

    def _config(self):
        cfg = dict(input_size=self.input_size, hidden_size=self.hidden_size, bias=self.bias)
        if type(self) is RNNCellBase:
            cfg["num_chunks"] = self.weight_ih.shape[0] // self.hidden_size
        return cfg


class RNNCell(RNNCellBase):
    """Elman RNN cell, h' = tanh or relu(x W_ih^T + b_ih + h W_hh^T + b_hh).

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    nonlinearity : "tanh" or "relu"
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu'; got "
                             f"{nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias, 1)
        self.nonlinearity = nonlinearity

    def _mode(self):
        return "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"

    def _config(self):
        return dict(super()._config(), nonlinearity=self.nonlinearity)


class LSTMCell(RNNCellBase):
    """LSTM cell; forward(input, (h, c)) returns (h', c').

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    """

    _MODE = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 4)


class GRUCell(RNNCellBase):
    """GRU cell; forward(input, h) returns h'.

    Parameters
    ----------
    input_size, hidden_size : int
    bias : bool
    """

    _MODE = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 3)


def torch_converters(torch: Any) -> Any:
    """{torch.nn recurrent class: build(tm, convert)} for qops.nn.from_torch."""
    import inspect
    table = {}

    def make(qcls):
        def build(tm, convert):
            names = [n for n in inspect.signature(qcls.__init__).parameters
                     if n not in ("self", "device", "dtype")]
            q = qcls(**{n: getattr(tm, n) for n in names if hasattr(tm, n)})
            q.load_state_dict({k: v.detach().float().cpu().numpy().copy()
                               for k, v in tm.state_dict().items()}, strict=True)
            return q
        return build

    for name in ("RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"):
        table[getattr(torch.nn, name)] = make(globals()[name])
    return table
