"""Public recurrent ops: one LSTM/GRU/RNN cell step, and the layer driver of the rnn modules.

The step ops take the two gate pre-activations (input and hidden GEMM results with their
biases added, as PyTorch's linear_ih and linear_hh return them) and apply the cell in float32
in PyTorch's order (docs/semantics.md §21). `recurrent` runs a stack of
layers and directions as PyTorch's CPU path does: per layer and direction, the input GEMM over
the whole sequence at once, then per step the hidden GEMM and the cell.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np

from qops import _config
from qops._ops import _check

if TYPE_CHECKING:
    import numpy.typing as npt

    _F32Array = npt.NDArray[np.float32]
    #: recurrent's result: (output, h_n), or (output, (h_n, c_n)) for an LSTM
    RecurrentResult = Union[tuple[_F32Array, _F32Array],
                            tuple[_F32Array, tuple[_F32Array, _F32Array]]]

__all__ = ["lstm_step", "gru_step", "rnn_step", "recurrent"]

F32 = np.float32
_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _f32_2d(x, argname):
    a = _check.float_array(x, argname)
    if a.ndim != 2:
        raise ValueError(f"{argname} must be 2-D (batch, features); got shape {a.shape}")
    return np.ascontiguousarray(a)


def _check_gates(gi, gh, b, width):
    gi = _f32_2d(gi, "gi")
    gh = _f32_2d(gh, "gh")
    if gi.shape != (b, width):
        raise ValueError(f"gi must have shape {(b, width)}; got {gi.shape}")
    if gh.shape != (b, width):
        raise ValueError(f"gh must have shape {(b, width)}; got {gh.shape}")
    return gi, gh


def lstm_step(gi: npt.ArrayLike, gh: npt.ArrayLike,
              c: npt.ArrayLike) -> tuple[_F32Array, _F32Array]:
    """One LSTM cell step from gate pre-activations: returns (h', c').

    gates = gh + gi, chunks (i, f, g, o); c' = f*c + i*g; h' = o * tanh(c') (float32).

    Parameters
    ----------
    gi, gh : float32 (batch, 4 * hidden), input and hidden GEMM results (biases added)
    c : float32 (batch, hidden), the cell state
    """
    c = _f32_2d(c, "c")
    gi, gh = _check_gates(gi, gh, c.shape[0], 4 * c.shape[1])
    return _config.impl("rnn").lstm_cell(gi, gh, c)


def gru_step(gi: npt.ArrayLike, gh: npt.ArrayLike, h: npt.ArrayLike) -> _F32Array:
    """One GRU cell step from gate pre-activations: returns h'.

    r = sigmoid(gh_r + gi_r), z = sigmoid(gh_z + gi_z), n = tanh(gi_n + gh_n * r),
    h' = (h - n) * z + n (float32, PyTorch's order).

    Parameters
    ----------
    gi, gh : float32 (batch, 3 * hidden), input and hidden GEMM results (biases added)
    h : float32 (batch, hidden), the hidden state
    """
    h = _f32_2d(h, "h")
    gi, gh = _check_gates(gi, gh, h.shape[0], 3 * h.shape[1])
    return _config.impl("rnn").gru_cell(gi, gh, h)


def rnn_step(gi: npt.ArrayLike, gh: npt.ArrayLike, nonlinearity: str = "tanh") -> _F32Array:
    """One Elman RNN cell step: tanh(gh + gi) or relu(gh + gi).

    Parameters
    ----------
    gi, gh : float32 (batch, hidden), input and hidden GEMM results (biases added)
    nonlinearity : "tanh" or "relu"
    """
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"nonlinearity must be 'tanh' or 'relu'; got {nonlinearity!r}")
    gi = _f32_2d(gi, "gi")
    gi, gh = _check_gates(gi, gh, gi.shape[0], gi.shape[1])
    return _config.impl("rnn").rnn_cell(gi, gh, nonlinearity == "relu")


def _state(v, argname, shape, unbatched):
    a = _check.float_array(v, argname)
    want = shape[::2] if unbatched else shape
    if a.shape != want:
        raise ValueError(f"{argname} must have shape {want}; got {a.shape}")
    a = a.reshape(shape) if unbatched else a
    return np.ascontiguousarray(a)


def recurrent(mode: str, input: npt.ArrayLike, hx: Any, cells: Sequence[Any], input_size: int,
              hidden_size: int, num_layers: int = 1, bidirectional: bool = False,
              batch_first: bool = False, proj_size: int = 0) -> RecurrentResult:
    """Run a stack of recurrent layers over a sequence (PyTorch's RNN/LSTM/GRU forward).

    Returns (output, h_n) or, for LSTM, (output, (h_n, c_n)).

    Parameters
    ----------
    mode : "LSTM", "GRU", "RNN_TANH" or "RNN_RELU"
    input : float (seq, batch, input_size), (batch, seq, input_size) with batch_first, or
        (seq, input_size) unbatched
    hx : None (zeros), the initial hidden state (layers * directions, batch, out), or for LSTM
        a pair (h_0, c_0); 2-D without the batch dimension for an unbatched input
    cells : per layer and direction (layer-major), an object with ``ih(x)`` and ``hh(h)``
        returning the gate pre-activations of 2-D float32 x and h, and ``hr(h)`` (projection)
        or None
    input_size, hidden_size, num_layers : int
    bidirectional, batch_first : bool
    proj_size : int, LSTM projection size (0: none)
    """
    x = _check.float_array(input, "input")
    if x.ndim not in (2, 3):
        raise ValueError(f"input must be 3-D (seq, batch, features) or 2-D unbatched; got "
                         f"shape {x.shape}")
    if x.shape[-1] != input_size:
        raise ValueError(f"input has {x.shape[-1]} features (last dimension); expected "
                         f"input_size={input_size}")
    unbatched = x.ndim == 2
    if unbatched:
        x = x[:, None, :]
    elif batch_first:
        x = x.transpose(1, 0, 2)
    steps, batch = x.shape[0], x.shape[1]
    if steps == 0:
        raise ValueError("input must have a sequence length larger than 0")
    if not np.all(np.isfinite(x)):
        raise ValueError("input must be finite")
    dirs = 2 if bidirectional else 1
    out_size = proj_size or hidden_size
    lstm = mode == "LSTM"
    h_shape = (num_layers * dirs, batch, out_size)
    c_shape = (num_layers * dirs, batch, hidden_size)
    if hx is None:
        h0 = np.zeros(h_shape, F32)
        c0 = np.zeros(c_shape, F32) if lstm else None
    elif lstm:
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise TypeError("hx must be a pair (h_0, c_0) for LSTM")
        h0 = _state(hx[0], "h_0", h_shape, unbatched)
        c0 = _state(hx[1], "c_0", c_shape, unbatched)
    else:
        h0 = _state(hx, "hx", h_shape, unbatched)
    kern = _config.impl("rnn")
    gates = _GATES[mode] * hidden_size
    layer_in = np.ascontiguousarray(x)
    hn, cn = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            cell = cells[k]
            h = h0[k]
            c = c0[k] if lstm else None
            fused = _fused_hh(mode, cell, hidden_size)
            if fused is not None:
                ys, h, c = _fused_layer(kern, lstm, layer_in, h, c, fused, d == 1)
                hn.append(h)
                if lstm:
                    cn.append(c)
                outs.append(ys)
                continue
            gi_all = cell.ih(layer_in.reshape(steps * batch, -1)).reshape(steps, batch, gates)
            ys = np.empty((steps, batch, out_size), F32)
            for t in (range(steps) if d == 0 else range(steps - 1, -1, -1)):
                gh = cell.hh(h)
                if lstm:
                    h, c = kern.lstm_cell(gi_all[t], gh, c)
                    if cell.hr is not None:
                        h = np.ascontiguousarray(cell.hr(h))
                elif mode == "GRU":
                    h = kern.gru_cell(gi_all[t], gh, h)
                else:
                    h = kern.rnn_cell(gi_all[t], gh, mode == "RNN_RELU")
                ys[t] = h
            hn.append(h)
            if lstm:
                cn.append(c)
            outs.append(ys)
        layer_in = outs[0] if dirs == 1 else np.concatenate(outs, axis=2)
    out = layer_in
    h_n = np.stack(hn)
    c_n = np.stack(cn) if lstm else None
    if unbatched:
        out = out[:, 0]
        h_n = h_n[:, 0]
        c_n = c_n[:, 0] if lstm else None
    elif batch_first:
        out = np.ascontiguousarray(out.transpose(1, 0, 2))
    return (out, (h_n, c_n)) if lstm else (out, h_n)


# Largest hidden and input size of the fused layer: one exact int32 GEMM chunk (linear's
# K_CHUNK)
_FUSED_MAX_K = 33025


def _fused_hh(mode, cell, hidden_size):
    """The PackedLinears (W_ih, W_hh) when the layer's whole time loop, input GEMM included,
    runs in one kernel call (dynamic qint8 LSTM/GRU without projection), else None."""
    ih = getattr(cell, "ih_packed", None)
    hh = getattr(cell, "hh_packed", None)
    if ih is None or hh is None or mode not in ("LSTM", "GRU") or cell.hr is not None \
            or hidden_size > _FUSED_MAX_K or not 0 < ih.in_features <= _FUSED_MAX_K:
        return None
    return ih, hh


def _fused_layer(kern, lstm, x, h, c, packed, reverse):
    # The states are quantized from their min and max at the first step, as each step's
    # input to the hidden GEMM: they must be finite, as dynamic linear's input.
    for v, name in ((h, "h_0"), (c, "c_0")):
        if v is not None and not np.isfinite(v).all():
            raise ValueError(f"{name} must be finite (the dynamic layer quantizes the states "
                             "from their min and max)")
    # W_ih and W_hh packed by the rnn kernels themselves (cached on the PackedLinears per
    # kernel module)
    ih, hh = ((p._packed(kern), p._w_scales, p._bias) for p in packed)
    if lstm:
        return kern.lstm_dynamic_layer(x, h, c, ih, hh, reverse)
    ys, h_n = kern.gru_dynamic_layer(x, h, ih, hh, reverse)
    return ys, h_n, None


def check_cell_input(input, hx, input_size, hidden_size, nstates):
    """Validate a cell's input and states; returns (x 2-D, [states 2-D], unbatched).

    Parameters
    ----------
    input : float (batch, input_size) or (input_size,)
    hx : None, an array (batch, hidden) or, when nstates == 2, a pair of them
    input_size, hidden_size : int
    nstates : 1 (GRU/RNN) or 2 (LSTM)
    """
    x = _check.float_array(input, "input")
    if x.ndim not in (1, 2):
        raise ValueError(f"input must be 2-D (batch, input_size) or 1-D; got shape {x.shape}")
    if x.shape[-1] != input_size:
        raise ValueError(f"input has {x.shape[-1]} features; expected input_size={input_size}")
    unbatched = x.ndim == 1
    x = np.ascontiguousarray(x.reshape(1, -1) if unbatched else x)
    if not np.all(np.isfinite(x)):
        raise ValueError("input must be finite")
    b = x.shape[0]
    names = ("hx", "cx") if nstates == 2 else ("hx",)
    if hx is None:
        states = [np.zeros((b, hidden_size), F32) for _ in names]
    else:
        parts = hx if nstates == 2 else (hx,)
        if nstates == 2 and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError("hx must be a pair (h, c) for LSTMCell")
        states = []
        for v, name in zip(parts, names):
            a = _check.float_array(v, name)
            want = (hidden_size,) if unbatched else (b, hidden_size)
            if a.shape != want:
                raise ValueError(f"{name} must have shape {want}; got {a.shape}")
            states.append(np.ascontiguousarray(a.reshape(b, hidden_size)))
    return x, states, unbatched

