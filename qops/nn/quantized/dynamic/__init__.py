"""Dynamically quantized layers (torch.ao.nn.quantized.dynamic): float in, float out.

The weight is quantized once (qint8, or rounded to float16); activations are quantized on
every call from their own min and max.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

import qops.functional as F
from qops._dtypes import qint8
from qops._qtensor import QTensor, quantize_per_tensor
from qops.nn import _layers as fl
from qops.nn.module import Module, _to_numpy
from qops.nn.quantized import _modules as nnq

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import Self

    from qops.nn._typing import Array

__all__ = ["Linear", "LSTM", "GRU", "LSTMCell", "GRUCell", "RNNCell"]

F32 = np.float32


class Linear(Module):
    """Dynamic quantized linear: qint8 (or float16) weight, float32 input and output.

    Parameters
    ----------
    in_features, out_features : int
    bias_ : bool
    dtype : qops.qint8 (int8 weights, activations quantized per call with reduce_range, as
        PyTorch's x86 engine) or "float16" (weights rounded to float16, float32 arithmetic)
    """

    _RELU = False
    _version = 4

    def __init__(self, in_features: int, out_features: int, bias_: bool = True,
                 dtype: Any = qint8) -> None:
        super().__init__()
        name = nnq.dtype_name(dtype)
        if name not in ("qint8", "float16"):
            raise TypeError(f"{type(self).__name__}: dtype must be qint8 or float16; got "
                            f"{dtype!r}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.dtype = qint8 if name == "qint8" else "float16"
        b = np.zeros(out_features, F32) if bias_ else None
        if name == "qint8":
            w = quantize_per_tensor(np.zeros((out_features, in_features), F32), 1.0, 0, qint8)
        else:
            w = np.zeros((out_features, in_features), F32)
        self.set_weight_bias(w, b)
        self.__dict__["_op"] = getattr(F, "linear_relu_dynamic" if self._RELU
                                       else "linear_dynamic", None)

    def _get_name(self):
        return "DynamicQuantized" + type(self).__name__

    def set_weight_bias(self, w: Any, b: Optional[npt.ArrayLike]) -> None:
        """Set the weight (qint8 QTensor, or float array for float16) and float bias."""
        w = _to_numpy(w)
        b = None if b is None else np.asarray(_to_numpy(b), dtype=F32)
        if b is not None and b.shape != (self.out_features,):
            raise ValueError(f"bias must have shape ({self.out_features},); got {b.shape}")
        if self.dtype is qint8:
            if not isinstance(w, QTensor) or w.dtype is not qint8:
                raise TypeError(f"{type(self).__name__}: weight must be a qint8 QTensor")
            self.__dict__["_packed_params"] = F.prepack_linear(w, b)
        else:
            w = np.asarray(w, dtype=F32)
            if w.shape != (self.out_features, self.in_features):
                raise ValueError(f"weight must have shape {(self.out_features, self.in_features)};"
                                 f" got {w.shape}")
            # fbgemm's fp16 path stores the weight in half precision and computes in float32.
            self.__dict__["_packed_params"] = nnq._UnpackedLinear(
                w.astype(np.float16).astype(F32), b)

    def weight(self) -> QTensor:
        return self._packed_params.weight()

    def bias(self) -> Optional[Array]:
        return self._packed_params.bias()

    def _weight_bias(self):
        return self.weight(), self.bias()

    def forward(self, x: npt.ArrayLike) -> Array:
        if self.dtype is qint8:
            op = self._op
            if op is None:
                op = self.__dict__["_op"] = getattr(F, "linear_relu_dynamic" if self._RELU
                                                    else "linear_dynamic")
            return op(x, self._packed_params, None, True)
        out = fl.fo.linear(x, self._packed_params.weight(), self._packed_params.bias())
        return fl.fo.relu(out) if self._RELU else out

    def _save_to_state_dict(self, destination, prefix):
        destination[prefix + "weight"] = self.weight()
        destination[prefix + "bias"] = self.bias()

    def _state_keys(self):
        return ["weight", "bias"]

    def _load_from_state_dict(self, state, prefix, errors):
        w_key, b_key = prefix + "weight", prefix + "bias"
        wb = nnq.pop_linear_weight_bias(state, prefix, errors)
        if wb is not None:
            w, b = wb
            shape = (self.out_features, self.in_features)
            if self.dtype is qint8 and (not isinstance(w, QTensor) or w.dtype is not qint8):
                errors["bad"].append(f"{w_key}: expected a qint8 QTensor")
            elif np.shape(w) != shape and getattr(w, "shape", None) != shape:
                errors["bad"].append(f"{w_key}: shape {w.shape} in the state_dict, {shape} in "
                                     f"{type(self).__name__}")
            elif b is not None and np.shape(b) != (self.out_features,):
                errors["bad"].append(f"{b_key}: shape {np.shape(b)} in the state_dict, "
                                     f"({self.out_features},) in {type(self).__name__}")
            else:
                self.set_weight_bias(w, b)

    def extra_repr(self) -> str:
        s = f"in_features={self.in_features}, out_features={self.out_features}, dtype={self.dtype}"
        if self.dtype is qint8:
            s += f", qscheme={self.weight().qscheme()!r}"
        return s

    def _config(self):
        return dict(in_features=self.in_features, out_features=self.out_features,
                    bias_=self.bias() is not None, dtype=self.dtype)

    @classmethod
    def from_float(cls, mod: Module) -> Self:
        """A dynamic quantized linear from a float Linear (or LinearReLU) with a qconfig.

        Without a qconfig the default dynamic qconfig of qops.quantization is used, as in
        PyTorch.
        """
        from qops.nn import intrinsic as nni
        owner = cls.__name__
        nnq._check_relu(cls, mod)
        lin = mod[0] if isinstance(mod, nni._FusedModule) else mod
        if not isinstance(lin, fl.Linear):
            raise TypeError(f"{owner}.from_float: expected a float Linear (or LinearReLU); got "
                            f"{type(mod).__name__}")
        qconfig = getattr(mod, "qconfig", None)
        if qconfig is not None and getattr(qconfig, "weight", None) is not None:
            wobs = qconfig.weight()
        else:
            try:
                from qops.quantization import default_dynamic_qconfig
            except ImportError:
                raise ValueError(f"{owner}.from_float: {type(mod).__name__} has no qconfig") \
                    from None
            wobs = default_dynamic_qconfig.weight()
        name = nnq.dtype_name(getattr(wobs, "dtype", qint8))
        if name not in ("qint8", "float16"):
            raise ValueError(f"{owner}.from_float: weight observer dtype must be qint8 or "
                             f"float16; got {name}")
        if name == "qint8":
            nnq._observe(wobs, lin.weight)
            w = nnq.quantize_weight(lin.weight, wobs, owner)
        else:
            w = lin.weight
        q = cls(lin.in_features, lin.out_features, dtype=qint8 if name == "qint8" else "float16")
        q.set_weight_bias(w, lin.bias)
        return q


def __getattr__(name):
    # PyTorch keeps the fused dynamic linear in torch.ao.nn.intrinsic.quantized.dynamic.
    if name == "LinearReLU":
        from qops.nn.intrinsic.quantized.dynamic import LinearReLU
        return LinearReLU
    raise AttributeError(f"module 'qops.nn.quantized.dynamic' has no attribute {name!r}")


from qops.nn.quantized.dynamic._rnn import GRU, LSTM, GRUCell, LSTMCell, RNNCell  # noqa: E402,F401
