"""Observers: modules that watch float32 arrays and turn the statistics into (scale, zero_point).

Names, arguments, defaults and results follow `torch.ao.quantization.observer`
(docs/semantics.md §14).
`forward(x)` records statistics of a float32 numpy array and returns `x` unchanged;
`calculate_qparams()` returns (float32 scale array, int64 zero-point array), one element per
tensor or one per channel. Every uniform observer hands its final (min, max) to
`qops.quantization._choose_qparams.calculate_qparams`, the one shared formula.
Beyond PyTorch: `PercentileObserver` and `EntropyObserver` (ONNX Runtime's calibrators).
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from qops._dtypes import (
    QDtype,
    as_qscheme,
    per_channel_affine,
    per_channel_affine_float_qparams,
    per_channel_symmetric,
    per_tensor_affine,
    per_tensor_symmetric,
    qint8,
    qint32,
    quint8,
)
from qops.nn.module import Module
from qops.quantization import _choose_qparams as cq
from qops.quantization._torch_sum import torch_sum

if TYPE_CHECKING:
    import numpy.typing as npt

    from qops.nn._typing import ArrayT

F32 = np.float32
_EPS = cq.EPS

__all__ = [
    "ObserverBase", "UniformQuantizationObserverBase", "MinMaxObserver",
    "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
    "MovingAveragePerChannelMinMaxObserver", "HistogramObserver", "PercentileObserver",
    "EntropyObserver", "FixedQParamsObserver", "PlaceholderObserver", "RecordingObserver",
    "NoopObserver", "ReuseInputObserver",
    "default_observer", "default_placeholder_observer", "default_debug_observer",
    "default_weight_observer", "weight_observer_range_neg_127_to_127",
    "default_histogram_observer", "default_per_channel_weight_observer",
    "per_channel_weight_observer_range_neg_127_to_127", "default_dynamic_quant_observer",
    "default_float_qparams_observer", "default_fixed_qparams_range_neg1to1_observer",
    "default_fixed_qparams_range_0to1_observer", "default_reuse_input_observer",
    "get_observer_state_dict", "load_observer_state_dict",
]


# -- factories (PyTorch's with_args / with_callable_args) ---------------------------------
class _PartialWrapper:
    """A constructor with bound keyword arguments; each call builds a new instance."""

    def __init__(self, p: Callable[..., Any]) -> None:
        self.p = p
        self.callable_args = {}

    def __call__(self, *args: Any, **keywords: Any) -> Any:
        for name, fn in self.callable_args.items():
            if name not in keywords:
                keywords = {**keywords, name: fn()}
        return self.p(*args, **keywords)

    def __repr__(self) -> str:
        return repr(self.p) + repr(self.callable_args)

    def with_args(self, **kwargs: Any) -> _PartialWrapper:
        return _with_args(self, **kwargs)

    def with_callable_args(self, **kwargs: Any) -> _PartialWrapper:
        r = _PartialWrapper(self.p)
        r.callable_args = {**self.callable_args, **kwargs}
        return r


def _with_args(cls_or_self: Any, **kwargs: Any) -> Any:
    return _PartialWrapper(functools.partial(cls_or_self, **kwargs))


def _with_callable_args(cls_or_self: Any, **kwargs: Any) -> Any:
    return _PartialWrapper(functools.partial(cls_or_self)).with_callable_args(**kwargs)


# -- dtype handling -----------------------------------------------------------------------
_FLOAT_DTYPES = {"float16": np.dtype(np.float16), "float32": np.dtype(np.float32),
                 "float": np.dtype(np.float32), "half": np.dtype(np.float16)}
_INT_DTYPES = {"int8": qint8, "uint8": quint8, "int32": qint32}


def _as_obs_dtype(dtype):
    """A QDtype for quantized dtypes, a numpy float dtype for float16/float32 placeholders."""
    if isinstance(dtype, QDtype):
        return dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        return dtype
    if dtype in (np.float16, np.float32):
        return np.dtype(dtype)
    name = str(dtype).replace("torch.", "").replace("qops.", "")
    if name in ("quint8", "qint8", "qint32"):
        return {"quint8": quint8, "qint8": qint8, "qint32": qint32}[name]
    if name in _INT_DTYPES:
        return _INT_DTYPES[name]
    if name in _FLOAT_DTYPES:
        return _FLOAT_DTYPES[name]
    raise TypeError(f"dtype must be qops.quint8, qops.qint8, qops.qint32, float16 or float32; "
                    f"got {dtype!r}")


def _as_f32(x, who):
    a = np.asarray(x)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating)
                                 or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{who}.forward() takes a float array; got {type(x).__name__} of "
                        f"dtype {a.dtype}")
    return a.astype(F32, copy=False)


# -- bases --------------------------------------------------------------------------------
class ObserverBase(Module):
    """Base observer: `forward` records statistics, `calculate_qparams` turns them into qparams.

    Parameters
    ----------
    dtype : the quantized dtype the statistics are for
    is_dynamic : bool, a placeholder for dynamic quantization
    """

    def __init__(self, dtype: Any, is_dynamic: bool = False) -> None:
        super().__init__()
        self.dtype = _as_obs_dtype(dtype)
        self.is_dynamic = is_dynamic

    def forward(self, x: ArrayT) -> ArrayT:
        raise NotImplementedError

    def calculate_qparams(self, **kwargs: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    with_args = classmethod(_with_args)
    with_callable_args = classmethod(_with_callable_args)


class UniformQuantizationObserverBase(ObserverBase):
    """Common base of the observers that produce affine/symmetric (scale, zero_point).

    Parameters
    ----------
    dtype : quint8 (default), qint8 or qint32
    qscheme : per_tensor_affine (default), per_tensor_symmetric, per_channel_affine,
        per_channel_symmetric or per_channel_affine_float_qparams
    reduce_range : bool, use half the range (x86 activations)
    quant_min, quant_max : int, a custom range (both or neither)
    eps : float, the smallest scale (float32 eps)
    is_dynamic : bool
    """

    _version = 3

    def __init__(self, dtype: Any = quint8, qscheme: Any = per_tensor_affine,
                 reduce_range: bool = False, quant_min: Optional[int] = None,
                 quant_max: Optional[int] = None, factory_kwargs: Optional[dict[Any, Any]] = None,
                 eps: float = _EPS, is_dynamic: bool = False, **kwargs: Any) -> None:
        super().__init__(dtype=dtype, is_dynamic=is_dynamic)
        self.qscheme = as_qscheme(qscheme)
        self.reduce_range = bool(reduce_range)
        self.register_buffer("eps", np.array([eps], dtype=F32))
        if not isinstance(self.dtype, QDtype):
            raise TypeError(f"{type(self).__name__} needs a quantized dtype (quint8, qint8, "
                            f"qint32); got {dtype!r}")
        self.has_customized_qrange = quant_min is not None and quant_max is not None
        if self.has_customized_qrange:
            cq.validate_qmin_qmax(quant_min, quant_max)
        self.quant_min, self.quant_max = cq.calculate_qmin_qmax(
            quant_min, quant_max, self.has_customized_qrange, self.dtype, self.reduce_range)

    def _calculate_qparams(self, min_val, max_val):
        """(scale, zero_point) for the given min/max with this observer's range and scheme."""
        return cq.calculate_qparams(min_val, max_val, self.quant_min, self.quant_max,
                                    self.qscheme, self.dtype, float(self.eps[0]),
                                    self.has_customized_qrange)

    def reset_min_max_vals(self) -> None:
        raise NotImplementedError("Cannot reset min/max values in the given observer.")

    def _check_no_symmetric_reduce_quint8(self):
        if self.qscheme.symmetric and self.reduce_range and self.dtype is quint8:
            raise NotImplementedError("Cannot reduce range for symmetric quantization for quint8")


class MinMaxObserver(UniformQuantizationObserverBase):
    """Running minimum and maximum of everything seen; qparams by the shared formula.

    Parameters
    ----------
    dtype, qscheme (per-tensor only), reduce_range, quant_min, quant_max, eps, is_dynamic :
        as `UniformQuantizationObserverBase`
    """

    def __init__(self, dtype: Any = quint8, qscheme: Any = per_tensor_affine,
                 reduce_range: bool = False, quant_min: Optional[int] = None,
                 quant_max: Optional[int] = None, factory_kwargs: Optional[dict[Any, Any]] = None,
                 eps: float = _EPS, is_dynamic: bool = False, **kwargs: Any) -> None:
        if as_qscheme(qscheme).per_channel:
            raise NotImplementedError("MinMaxObserver's qscheme only supports "
                                      "per_tensor_symmetric and per_tensor_affine")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range,
                         quant_min=quant_min, quant_max=quant_max, eps=eps,
                         is_dynamic=is_dynamic, **kwargs)
        self.register_buffer("min_val", np.array(np.inf, dtype=F32))
        self.register_buffer("max_val", np.array(-np.inf, dtype=F32))
        self._check_no_symmetric_reduce_quint8()

    def forward(self, x_orig: ArrayT) -> ArrayT:
        """Record the running min/max of `x_orig`; return it unchanged."""
        x = _as_f32(x_orig, type(self).__name__)
        if x.size == 0:
            return x_orig
        self.min_val = np.asarray(np.minimum(np.min(x), self.min_val), dtype=F32)
        self.max_val = np.asarray(np.maximum(np.max(x), self.max_val), dtype=F32)
        return x_orig

    def calculate_qparams(self) -> tuple[Any, Any]:
        """(scale, zero_point) from the running min/max."""
        return self._calculate_qparams(self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={float(self.min_val)}, max_val={float(self.max_val)}"

    def reset_min_max_vals(self) -> None:
        """Forget the statistics."""
        self.min_val = np.array(np.inf, dtype=F32)
        self.max_val = np.array(-np.inf, dtype=F32)


class MovingAverageMinMaxObserver(MinMaxObserver):
    """Moving averages of the batch min and max: `m += c * (batch_m - m)` in float32.

    Parameters
    ----------
    averaging_constant : float, c (0.01)
    dtype, qscheme, reduce_range, quant_min, quant_max, eps, is_dynamic : as MinMaxObserver
    """

    def __init__(self, averaging_constant: float = 0.01, dtype: Any = quint8,
                 qscheme: Any = per_tensor_affine, reduce_range: bool = False,
                 quant_min: Optional[int] = None, quant_max: Optional[int] = None,
                 eps: float = _EPS, is_dynamic: bool = False, **kwargs: Any) -> None:
        if as_qscheme(qscheme).per_channel:
            raise NotImplementedError("MovingAverageMinMaxObserver's qscheme only supports "
                                      f"per_tensor_symmetric and per_tensor_affine; got {qscheme}")
        if is_dynamic and averaging_constant != 1:
            raise NotImplementedError("MovingAverageMinMaxObserver doesn't support dynamic "
                                      f"quantization for averaging constant {averaging_constant}")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range,
                         quant_min=quant_min, quant_max=quant_max, eps=eps,
                         is_dynamic=is_dynamic, **kwargs)
        self.averaging_constant = averaging_constant

    def forward(self, x_orig: ArrayT) -> ArrayT:
        """Update the moving-average min/max with `x_orig`; return it unchanged."""
        x = _as_f32(x_orig, type(self).__name__)
        if x.size == 0:
            return x_orig
        cur_min, cur_max = np.min(x), np.max(x)
        if self.min_val == np.inf and self.max_val == -np.inf:
            self.min_val = np.array(cur_min, dtype=F32)
            self.max_val = np.array(cur_max, dtype=F32)
        else:
            c = F32(self.averaging_constant)
            self.min_val = np.array(self.min_val + c * F32(cur_min - self.min_val), dtype=F32)
            self.max_val = np.array(self.max_val + c * F32(cur_max - self.max_val), dtype=F32)
        return x_orig


def _rows(x, ch_axis):
    """`x` with `ch_axis` swapped to the front and the rest flattened (PyTorch's permute)."""
    if x.ndim == 0:
        raise ValueError("a per-channel observer needs an input with at least one dimension")
    axis = ch_axis % x.ndim if -x.ndim <= ch_axis < x.ndim else None
    if axis is None:
        raise ValueError(f"ch_axis={ch_axis} is out of range for an input with {x.ndim} dims")
    return np.swapaxes(x, 0, axis).reshape(x.shape[axis], -1)


class PerChannelMinMaxObserver(UniformQuantizationObserverBase):
    """Running min/max per channel along `ch_axis`; per-channel qparams.

    Parameters
    ----------
    ch_axis : int, the channel axis (0)
    dtype, qscheme (per-channel only), reduce_range, quant_min, quant_max, eps :
        as `UniformQuantizationObserverBase`
    """

    def __init__(self, ch_axis: int = 0, dtype: Any = quint8, qscheme: Any = per_channel_affine,
                 reduce_range: bool = False, quant_min: Optional[int] = None,
                 quant_max: Optional[int] = None, factory_kwargs: Optional[dict[Any, Any]] = None,
                 eps: float = _EPS, is_dynamic: bool = False, **kwargs: Any) -> None:
        if not as_qscheme(qscheme).per_channel:
            raise NotImplementedError("PerChannelMinMaxObserver's qscheme only supports "
                                      "per_channel_symmetric, per_channel_affine and "
                                      "per_channel_affine_float_qparams")
        if is_dynamic:
            raise NotImplementedError("PerChannelMinMaxObserver doesn't support dynamic "
                                      "quantization")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range,
                         quant_min=quant_min, quant_max=quant_max, eps=eps,
                         is_dynamic=is_dynamic, **kwargs)
        self.ch_axis = ch_axis
        self.register_buffer("min_val", np.zeros(0, dtype=F32))
        self.register_buffer("max_val", np.zeros(0, dtype=F32))
        self._check_no_symmetric_reduce_quint8()

    def _batch_min_max(self, x_orig):
        y = _rows(_as_f32(x_orig, type(self).__name__), self.ch_axis)
        return y.min(axis=1), y.max(axis=1)

    def forward(self, x_orig: ArrayT) -> ArrayT:
        """Record running per-channel min/max of `x_orig`; return it unchanged."""
        if np.asarray(x_orig).size == 0:
            return x_orig
        cur_min, cur_max = self._batch_min_max(x_orig)
        if self.min_val.size == 0 or self.max_val.size == 0:
            self.min_val, self.max_val = cur_min.astype(F32), cur_max.astype(F32)
        else:
            self._check_channels(cur_min)
            self.min_val = np.minimum(cur_min, self.min_val).astype(F32)
            self.max_val = np.maximum(cur_max, self.max_val).astype(F32)
        return x_orig

    def _check_channels(self, cur):
        if cur.shape != self.min_val.shape:
            raise ValueError(f"{type(self).__name__}: input has {cur.shape[0]} channels on axis "
                             f"{self.ch_axis}, earlier inputs had {self.min_val.shape[0]}")

    def calculate_qparams(self) -> tuple[Any, Any]:
        """Per-channel (scale, zero_point) from the running min/max."""
        return self._calculate_qparams(self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"

    def reset_min_max_vals(self) -> None:
        """Forget the statistics."""
        self.min_val = np.zeros(0, dtype=F32)
        self.max_val = np.zeros(0, dtype=F32)

    def _load_entry(self, name, value, key, errors):
        # The running min/max are empty until the first batch: accept any length when loading.
        if name in ("min_val", "max_val"):
            self._buffers[name] = np.asarray(value, dtype=F32).copy()
            return
        super()._load_entry(name, value, key, errors)


class MovingAveragePerChannelMinMaxObserver(PerChannelMinMaxObserver):
    """Per-channel moving-average min/max (the QAT per-channel weight observer).

    Parameters
    ----------
    averaging_constant : float (0.01)
    ch_axis, dtype, qscheme, reduce_range, quant_min, quant_max, eps : as
        PerChannelMinMaxObserver
    """

    def __init__(self, averaging_constant: float = 0.01, ch_axis: int = 0, dtype: Any = quint8,
                 qscheme: Any = per_channel_affine, reduce_range: bool = False,
                 quant_min: Optional[int] = None, quant_max: Optional[int] = None,
                 eps: float = _EPS, is_dynamic: bool = False, **kwargs: Any) -> None:
        super().__init__(ch_axis=ch_axis, dtype=dtype, qscheme=qscheme,
                         reduce_range=reduce_range, quant_min=quant_min, quant_max=quant_max,
                         eps=eps, is_dynamic=is_dynamic, **kwargs)
        self.averaging_constant = averaging_constant

    def forward(self, x_orig: ArrayT) -> ArrayT:
        """Update the per-channel moving averages with `x_orig`; return it unchanged."""
        if np.asarray(x_orig).size == 0:
            return x_orig
        cur_min, cur_max = self._batch_min_max(x_orig)
        if self.min_val.size == 0 or self.max_val.size == 0:
            self.min_val, self.max_val = cur_min.astype(F32), cur_max.astype(F32)
        else:
            self._check_channels(cur_min)
            c = F32(self.averaging_constant)
            self.min_val = (self.min_val + c * (cur_min - self.min_val).astype(F32)).astype(F32)
            self.max_val = (self.max_val + c * (cur_max - self.max_val).astype(F32)).astype(F32)
        return x_orig


# -- histogram ----------------------------------------------------------------------------
def _histc(x, bins, lo, hi):
    """torch.histc on float32 data: bin = trunc((x - lo) * bins / (hi - lo)), edges inclusive."""
    lo, hi = float(lo), float(hi)
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    left, right = F32(lo), F32(hi)
    if left == right:
        # A constant so large that +-1 does not move it in float32: the bin formula is 0/0.
        # PyTorch puts it in the middle bin, where the +-1 range would have put it.
        hist = np.zeros(bins, dtype=F32)
        hist[bins // 2] = np.count_nonzero(x == left)
        return hist
    if x.size and not (x.min() >= left and x.max() <= right):
        x = x[(x >= left) & (x <= right)]  # the observer's own range needs no filtering
    width = F32(right - left)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.subtract(x, left, dtype=F32)
        if np.isfinite(F32(width * F32(bins))):
            t *= F32(bins)
            t /= width
        else:
            # (x - min) * bins overflows float32 (PyTorch then bins every value at 0): the same
            # formula on the range scaled by 2**-k, exact as powers of two are, but for
            # differences that turn subnormal, which lie in bin 0 either way.
            k = math.frexp(float(width))[1]
            t = np.ldexp(t, -k).astype(F32)
            t *= F32(bins)
            t /= F32(np.ldexp(width, -k))
    pos = t.astype(np.intp)
    pos[pos == bins] = bins - 1
    return np.bincount(pos, minlength=bins).astype(F32)


def _linspace_f32(start, end, steps):
    """torch.linspace in float32: fma(step, i, start) for the first half, end - step*(n-1-i) after.

    PyTorch's vectorised kernel contracts both into one rounding (measured: 0 mismatches in
    3.5M values with the fused form, ~11% with separate multiply and add).
    """
    start, end = F32(start), F32(end)
    step = F32((end - start) / F32(steps - 1)) if steps > 1 else F32(0.0)
    i = np.arange(steps)
    half = steps // 2
    s64 = np.float64(step)
    lower = (s64 * i + np.float64(start)).astype(F32)
    upper = (np.float64(end) - s64 * (steps - i - 1)).astype(F32)
    return np.where(i < half, lower, upper).astype(F32)


def _floor_div_f32(a, b):
    """torch.div(a, b, rounding_mode='floor') for float32 a and scalar float32 b."""
    b = F32(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        mod = np.fmod(a, b).astype(F32)
        div = ((a - mod).astype(F32) / b).astype(F32)
        div = np.where((mod != 0) & ((b < 0) != (mod < 0)), (div - F32(1)).astype(F32), div)
        floordiv = np.floor(div).astype(F32)
        floordiv = np.where(div - floordiv > F32(0.5), floordiv + F32(1), floordiv)
        floordiv = np.where(div != 0, floordiv, np.copysign(F32(0), a / b)).astype(F32)
    return floordiv.astype(F32)


def _l2_norm(delta_begin, delta_end, density):
    """density * (end^3 - begin^3) / 3, in float32 steps as PyTorch evaluates it."""
    e3 = ((delta_end * delta_end).astype(F32) * delta_end).astype(F32)
    b3 = ((delta_begin * delta_begin).astype(F32) * delta_begin).astype(F32)
    return (density * ((e3 - b3).astype(F32) / F32(3)).astype(F32)).astype(F32)


class HistogramObserver(UniformQuantizationObserverBase):
    """Running histogram of the values; min/max chosen by PyTorch's L2 search over it.

    Bit for bit PyTorch's qparams on the same data: its float32 sums follow ATen's order
    (`_torch_sum`, for the vector width PyTorch picks on this CPU).

    Parameters
    ----------
    bins : int, histogram bins (2048)
    dtype, qscheme (per-tensor only), reduce_range, quant_min, quant_max, eps :
        as `UniformQuantizationObserverBase`
    """

    def __init__(self, bins: int = 2048, dtype: Any = quint8, qscheme: Any = per_tensor_affine,
                 reduce_range: bool = False, quant_min: Optional[int] = None,
                 quant_max: Optional[int] = None, factory_kwargs: Optional[dict[Any, Any]] = None,
                 eps: float = _EPS, is_dynamic: bool = False, **kwargs: Any) -> None:
        if as_qscheme(qscheme).per_channel:
            raise NotImplementedError(f"{type(self).__name__}'s qscheme only supports "
                                      "per_tensor_symmetric and per_tensor_affine")
        if is_dynamic:
            raise NotImplementedError(f"{type(self).__name__} doesn't support dynamic "
                                      "quantization")
        if not isinstance(bins, int) or bins < 1:
            raise ValueError(f"bins must be a positive int; got {bins!r}")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range,
                         quant_min=quant_min, quant_max=quant_max, eps=eps,
                         is_dynamic=is_dynamic, **kwargs)
        self.bins = bins
        self.register_buffer("histogram", np.zeros(bins, dtype=F32))
        self.register_buffer("min_val", np.array(np.inf, dtype=F32))
        self.register_buffer("max_val", np.array(-np.inf, dtype=F32))
        # 2**bits of the dtype, independent of reduce_range (as PyTorch).
        self.dst_nbins = 2 ** (8 * self.dtype.storage.itemsize)
        self.upsample_rate = 16

    # statistics
    def _upscale_histogram(self, histogram, orig_min, orig_max, update_min, update_max):
        # Each old bin is split into upsample_rate parts placed by their midpoints.
        n = self.bins * self.upsample_rate
        hist = (np.repeat(histogram, self.upsample_rate) / F32(self.upsample_rate)).astype(F32)
        bin_size = F32(F32(orig_max - orig_min) / F32(n))
        mids = (_linspace_f32(orig_min, orig_max, n + 1)[:-1] + F32(F32(0.5) * bin_size))
        bounds = _linspace_f32(update_min, update_max, self.bins + 1)
        idx = np.searchsorted(bounds, mids.astype(F32), side="right") - 1
        idx = np.clip(idx, 0, self.bins - 1)
        out = np.zeros(self.bins, dtype=F32)
        np.add.at(out, idx, hist)  # float32, in index order, like torch.bincount with weights
        return out

    def _combine_histograms(self, orig_hist, orig_min, orig_max, update_hist, update_min,
                            update_max):
        if update_min == orig_min and update_max == orig_max:
            return (orig_hist + update_hist).astype(F32)
        if orig_min == orig_max:
            bin_value = torch_sum(orig_hist)
            moved = (_histc(np.array([orig_min], dtype=F32), self.bins, update_min, update_max)
                     * bin_value).astype(F32)
            return (moved + update_hist).astype(F32)
        moved = self._upscale_histogram(orig_hist, orig_min, orig_max, update_min, update_max)
        return (update_hist + moved).astype(F32)

    def reset_histogram(self, x: npt.ArrayLike, min_val: float, max_val: float) -> None:
        """Start the histogram over [min_val, max_val] with the values of `x`."""
        self.min_val = np.array(min_val, dtype=F32)
        self.max_val = np.array(max_val, dtype=F32)
        self.histogram = _histc(x, self.bins, min_val, max_val)

    def forward(self, x_orig: ArrayT) -> ArrayT:
        """Add `x_orig` to the histogram (infinite values dropped); return it unchanged."""
        x = _as_f32(x_orig, type(self).__name__).reshape(-1)
        if x.size == 0:
            return x_orig
        x_min, x_max = np.min(x), np.max(x)
        if x_min == -np.inf or x_max == np.inf:
            warnings.warn("inf detected in input tensor, ignoring input", stacklevel=2)
            x = x[np.abs(x) != np.inf]
            if x.size == 0:
                return x_orig
            x_min, x_max = np.min(x), np.max(x)
        if np.isnan(x_min) or np.isnan(x_max):
            # PyTorch fails in histc ("range of [nan, nan] is not finite").
            raise ValueError(f"{type(self).__name__}.forward(): the input contains NaN; its "
                             "values span no finite float32 range")
        cur_min, cur_max = F32(self.min_val), F32(self.max_val)
        if cur_min == np.inf or cur_max == -np.inf:
            self._check_span(x_min, x_max)
            self.reset_histogram(x, x_min, x_max)
            return x_orig
        new_min, new_max = min(cur_min, x_min), max(cur_max, x_max)
        self._check_span(new_min, new_max)
        update = _histc(x, self.bins, new_min, new_max)
        if new_min == cur_min and new_max == cur_max:
            self.histogram = (self.histogram + update).astype(F32)
        else:
            self.histogram = self._combine_histograms(self.histogram, cur_min, cur_max, update,
                                                      new_min, new_max)
            self.min_val = np.array(new_min, dtype=F32)
            self.max_val = np.array(new_max, dtype=F32)
        return x_orig

    def _check_span(self, lo, hi):
        # Bins are (max - min) / bins wide in float32: past float32's range that is inf and
        # PyTorch returns a NaN scale. Refuse before the statistics change.
        with np.errstate(over="ignore", invalid="ignore"):
            span = F32(F32(hi) - F32(lo))
        if not np.isfinite(span):
            raise ValueError(
                f"{type(self).__name__}.forward(): the values seen span [{float(lo):.7g}, "
                f"{float(hi):.7g}]; max - min must be a finite float32 (at most "
                f"{float(np.finfo(F32).max):.7g}) to build the histogram. Clip or drop such "
                f"values first")

    # search
    def _compute_quantization_error(self, next_start_bin, next_end_bin, scale_exp=0):
        """L2 error of quantizing the histogram with bins start..end as the range.

        `scale_exp` k evaluates it on the range scaled by 2**-k (see `_non_linear_param_search`).
        """
        lo, hi = float(self.min_val), float(self.max_val)
        if scale_exp:
            lo, hi = math.ldexp(lo, -scale_exp), math.ldexp(hi, -scale_exp)
        bin_width = (hi - lo) / self.bins
        dst_bin_width = bin_width * (next_end_bin - next_start_bin + 1) / self.dst_nbins
        if dst_bin_width == 0.0:
            return 0.0
        bw, dbw = F32(bin_width), F32(dst_bin_width)
        half = F32(dst_bin_width / 2)
        src = np.arange(self.bins, dtype=np.int64)
        src_begin = ((src - next_start_bin).astype(F32) * bw).astype(F32)
        src_end = (src_begin + bw).astype(F32)
        last = F32(self.dst_nbins - 1)
        dst_of_begin = np.clip(_floor_div_f32(src_begin, dbw), F32(0), last)
        dst_of_begin_center = ((dst_of_begin + F32(0.5)).astype(F32) * dbw).astype(F32)
        dst_of_end = np.clip(_floor_div_f32(src_end, dbw), F32(0), last)
        density = (self.histogram / bw).astype(F32)
        norm = np.zeros(self.bins, dtype=F32)
        delta_begin = (src_begin - dst_of_begin_center).astype(F32)
        norm = (norm + _l2_norm(delta_begin, np.full(self.bins, half, dtype=F32), density))
        inner = _l2_norm(F32(-dst_bin_width / 2), half, density)
        norm = (norm + ((dst_of_end - dst_of_begin).astype(F32) - F32(1)).astype(F32)
                * inner).astype(F32)
        dst_of_end_center = ((dst_of_end * dbw).astype(F32) + half).astype(F32)
        delta_end = (src_end - dst_of_end_center).astype(F32)
        norm = (norm + _l2_norm(F32(-dst_bin_width / 2), delta_end, density)).astype(F32)
        return float(torch_sum(norm))

    def _search_bins(self, total, csum, scale_exp=0, nan_stops=True):
        """(start_bin, end_bin) of the L2 search; None at a NaN error if `nan_stops`.

        Without `nan_stops` it is PyTorch's loop as written: `norm > NaN` is False, so a NaN
        error never stops it.
        """
        stepsize = 1e-5
        alpha, beta = 0.0, 1.0
        start_bin, end_bin = 0, self.bins - 1
        norm_min = float("inf")
        while alpha < beta:
            next_alpha = alpha + stepsize
            next_beta = beta - stepsize
            # The comparisons happen in float32 (a tensor against a Python scalar).
            lo_thr = float(F32(next_alpha * total))
            hi_thr = float(F32(next_beta * total))
            left, right = start_bin, end_bin
            while left < end_bin and csum[left] < lo_thr:
                left += 1
            while right > start_bin and csum[right] > hi_thr:
                right -= 1
            next_start_bin, next_end_bin = start_bin, end_bin
            if (left - start_bin) > (end_bin - right):
                next_start_bin = left
                alpha = next_alpha
            else:
                next_end_bin = right
                beta = next_beta
            if next_start_bin == start_bin and next_end_bin == end_bin:
                continue
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                norm = self._compute_quantization_error(next_start_bin, next_end_bin, scale_exp)
            if norm != norm and nan_stops:
                return None
            if norm > norm_min:
                break
            norm_min = norm
            start_bin, end_bin = next_start_bin, next_end_bin
        return start_bin, end_bin

    def _non_linear_param_search(self):
        """PyTorch's L2 min/max search: move the end that gains more while the error falls.

        When an error comes out NaN on a range of 1 or more (its cubes overflow float32, from
        ranges of ~1e13 on) PyTorch goes on comparing NaN and returns an arbitrary range; the
        search is then rerun on the range scaled by a power of two near 1/(max - min), where
        every step is PyTorch's own arithmetic scaled exactly (the errors by a power of two),
        so it picks the bins PyTorch would pick without the overflow.
        """
        if self.histogram.shape[0] != self.bins:
            raise ValueError("bins mismatch between the histogram and the observer")
        bin_width = F32(F32(self.max_val - self.min_val) / F32(self.bins))
        # Sums in ATen's order: the thresholds below compare against this total, and numpy's
        # pairwise order moves it by an ulp often enough to flip a bin (issue 19 #18).
        total = float(torch_sum(self.histogram))
        # torch.cumsum accumulates float32 in double on CPU, then stores float32.
        csum = np.cumsum(self.histogram.astype(np.float64)).astype(F32).tolist()
        found = self._search_bins(total, csum)
        width = float(self.max_val) - float(self.min_val)
        if found is None:
            # Below a range of 1 a NaN comes from an infinite density (a tiny range, whose
            # scale clamps to eps anyway): PyTorch's result is kept.
            if not (1.0 <= width < np.inf):
                found = self._search_bins(total, csum, nan_stops=False)
            else:
                found = self._search_bins(total, csum, math.frexp(width)[1])
                if found is None:
                    raise ValueError(
                        f"{type(self).__name__}.calculate_qparams(): the L2 error of the "
                        f"range search is NaN for the observed range "
                        f"[{float(self.min_val):.7g}, {float(self.max_val):.7g}]")
        start_bin, end_bin = found
        new_min = F32(self.min_val + F32(bin_width * F32(start_bin)))
        new_max = F32(self.min_val + F32(bin_width * F32(end_bin + 1)))
        return new_min, new_max

    def _search_range(self):
        return self._non_linear_param_search()

    def calculate_qparams(self) -> tuple[Any, Any]:
        """(scale, zero_point) of the range the search picks; (1.0, 0) with a warning if empty."""
        if self.min_val == np.inf and self.max_val == -np.inf:
            warnings.warn("must run observer before calling calculate_qparams. Returning "
                          "default scale and zero point", stacklevel=2)
            return np.array([1.0], dtype=F32), np.array([0], dtype=np.int64)
        if self.bins != len(self.histogram):
            raise ValueError("The number of bins in histogram should be equal to the number of "
                             "bins supplied while making this observer")
        new_min, new_max = self._search_range()
        return self._calculate_qparams(new_min, new_max)

    def extra_repr(self) -> str:
        return f"min_val={float(self.min_val)}, max_val={float(self.max_val)}"

    def reset_min_max_vals(self) -> None:
        """Forget the statistics."""
        self.min_val = np.array(np.inf, dtype=F32)
        self.max_val = np.array(-np.inf, dtype=F32)
        self.histogram = np.zeros(self.bins, dtype=F32)


class PercentileObserver(HistogramObserver):
    """Clip the range at percentiles of the running histogram (ONNX Runtime's percentile method).

    Affine schemes cut (100 - percentile)/2 percent of the mass on each side; symmetric
    schemes keep `percentile` percent of ``|x|`` (as ONNX Runtime's symmetric calibration).

    Parameters
    ----------
    percentile : float in (0, 100], the share of values kept (99.999, ONNX Runtime's default);
        the histogram bin where the cut falls is kept whole
    bins, dtype, qscheme, reduce_range, quant_min, quant_max, eps : as HistogramObserver
    """

    def __init__(self, percentile: float = 99.999, bins: int = 2048, dtype: Any = quint8,
                 qscheme: Any = per_tensor_affine, reduce_range: bool = False,
                 quant_min: Optional[int] = None, quant_max: Optional[int] = None,
                 eps: float = _EPS, **kwargs: Any) -> None:
        if not 0.0 < float(percentile) <= 100.0:
            raise ValueError(f"percentile must be in (0, 100]; got {percentile!r}")
        super().__init__(bins=bins, dtype=dtype, qscheme=qscheme, reduce_range=reduce_range,
                         quant_min=quant_min, quant_max=quant_max, eps=eps, **kwargs)
        self.percentile = float(percentile)

    def _search_range(self):
        hist = self.histogram.astype(np.float64)
        lo, hi = float(self.min_val), float(self.max_val)
        edges = np.linspace(lo, hi, self.bins + 1)
        total = hist.sum()
        if total == 0 or lo == hi:
            return F32(lo), F32(hi)
        p = self.percentile / 100.0
        if self.qscheme.symmetric:
            # Histogram of |x|: fold the signed histogram at zero by bin centres.
            centres = np.abs((edges[:-1] + edges[1:]) / 2)
            amax = max(abs(lo), abs(hi))
            order = np.argsort(centres, kind="stable")
            cdf = np.cumsum(hist[order]) / total
            k = min(int(np.searchsorted(cdf, p)), len(order) - 1)
            t = min(centres[order][k] + (hi - lo) / self.bins / 2, amax)
            return F32(-t), F32(t)
        cut = (1.0 - p) / 2.0
        cdf = np.cumsum(hist) / total
        i_lo = int(np.searchsorted(cdf, cut))
        i_hi = min(int(np.searchsorted(cdf, 1.0 - cut)), self.bins - 1)
        return F32(edges[i_lo]), F32(edges[i_hi + 1])


class EntropyObserver(HistogramObserver):
    """Pick the clipping threshold that minimises the KL divergence (ONNX Runtime's entropy method).

    The histogram covers [-amax, amax]; thresholds are tried outward from the centre in steps
    of one bin on each side, each candidate distribution is merged into
    `num_quantized_bins` and expanded back, and the threshold with the smallest
    KL(P || Q) wins (TensorRT's calibration, as ONNX Runtime implements it). The chosen range
    is then intersected with the observed [min, max], so non-negative tensors keep their
    whole quantized range.

    Parameters
    ----------
    bins : int, histogram bins (2048)
    num_quantized_bins : int, bins of the quantized distribution (128)
    dtype, qscheme, reduce_range, quant_min, quant_max, eps : as HistogramObserver
    """

    def __init__(self, bins: int = 2048, num_quantized_bins: int = 128, dtype: Any = quint8,
                 qscheme: Any = per_tensor_affine, reduce_range: bool = False,
                 quant_min: Optional[int] = None, quant_max: Optional[int] = None,
                 eps: float = _EPS, **kwargs: Any) -> None:
        if not 1 < num_quantized_bins <= bins:
            raise ValueError(f"num_quantized_bins must be in (1, bins={bins}]; got "
                             f"{num_quantized_bins!r}")
        super().__init__(bins=bins, dtype=dtype, qscheme=qscheme, reduce_range=reduce_range,
                         quant_min=quant_min, quant_max=quant_max, eps=eps, **kwargs)
        self.num_quantized_bins = num_quantized_bins

    def _symmetric_histogram(self):
        lo, hi = float(self.min_val), float(self.max_val)
        amax = max(abs(lo), abs(hi))
        edges = np.linspace(lo, hi, self.bins + 1)
        centres = (edges[:-1] + edges[1:]) / 2
        sym_edges = np.linspace(-amax, amax, self.bins + 1)
        idx = np.clip(np.searchsorted(sym_edges, centres, side="right") - 1, 0, self.bins - 1)
        return np.bincount(idx, weights=self.histogram.astype(np.float64),
                           minlength=self.bins), sym_edges

    @staticmethod
    def _smooth(p, eps=1e-4):
        is_zero = p == 0
        n_zero = int(is_zero.sum())
        n_nonzero = p.size - n_zero
        if n_nonzero == 0:
            return None
        eps1 = eps * n_zero / n_nonzero
        if eps1 >= 1.0:
            return None
        return p + eps * is_zero - eps1 * (~is_zero)

    def _search_range(self):
        lo, hi = float(self.min_val), float(self.max_val)
        if lo == hi:
            return F32(lo), F32(hi)
        hist, edges = self._symmetric_histogram()
        nb, nq = self.bins, self.num_quantized_bins
        zero = nb // 2
        half_q = nq // 2
        best, best_t = np.inf, max(abs(lo), abs(hi))
        for i in range(half_q, zero + 1):
            start, end = zero - i, min(zero + i + 1, nb)
            sliced = hist[start:end]
            p = sliced.copy()
            p[0] += hist[:start].sum()
            p[-1] += hist[end:].sum()
            nonzero = p != 0
            merged = max(sliced.size // nq, 1)
            # Groups of `merged` bins; the last group also takes the remainder.
            starts = np.arange(nq) * merged
            qb = np.add.reduceat(sliced, starts)
            cnt = np.add.reduceat(nonzero.astype(np.int64), starts)
            per_bin = np.where(cnt > 0, qb / np.maximum(cnt, 1), 0.0)
            q = np.repeat(per_bin, np.diff(np.append(starts, p.size))) * nonzero
            # Smooth the raw counts (as ONNX Runtime), then normalise: scipy.stats.entropy.
            ps, qs = self._smooth(p), self._smooth(q)
            if ps is None or qs is None or np.any(ps <= 0) or np.any(qs <= 0):
                continue
            ps, qs = ps / ps.sum(), qs / qs.sum()
            kl = float(np.sum(ps * np.log(ps / qs)))
            if kl < best:
                best, best_t = kl, max(abs(edges[start]), abs(edges[end]))
        return F32(max(-best_t, lo)), F32(min(best_t, hi))


# -- fixed, placeholder, debugging --------------------------------------------------------
class FixedQParamsObserver(ObserverBase):
    """Always the given (scale, zero_point): for ops with a known output range (sigmoid, tanh).

    Parameters
    ----------
    scale : float
    zero_point : int
    dtype, qscheme, quant_min, quant_max : the quantization they are for
    """

    def __init__(self, scale: float, zero_point: int, dtype: Any = quint8,
                 qscheme: Any = per_tensor_affine, quant_min: int = 0, quant_max: int = 255,
                 is_dynamic: bool = False, **kwargs: Any) -> None:
        if is_dynamic:
            raise NotImplementedError("FixedQParamsObserver doesn't support dynamic quantization")
        super().__init__(dtype=dtype, is_dynamic=is_dynamic)
        self.quant_min = quant_min
        self.quant_max = quant_max
        self.register_buffer("scale", np.array([scale], dtype=F32))
        self.register_buffer("zero_point", np.array([zero_point], dtype=np.int64))
        self.qscheme = as_qscheme(qscheme)

    def forward(self, X: ArrayT) -> ArrayT:
        return X

    def calculate_qparams(self) -> tuple[Any, Any]:
        """The fixed (scale, zero_point)."""
        return self.scale.copy(), self.zero_point.copy()


class PlaceholderObserver(ObserverBase):
    """Observes nothing; carries dtype (and is_dynamic) to the quantized module's from_float.

    Parameters
    ----------
    dtype : float32 (default), float16 (fp16 dynamic weights) or a quantized dtype
    custom_op_name : str
    compute_dtype : deprecated; any value marks the observer dynamic
    quant_min, quant_max, qscheme, eps : carried along
    is_dynamic : bool
    """

    def __init__(self, dtype: Any = np.float32, custom_op_name: str = "", compute_dtype: Any = None,
                 quant_min: Optional[int] = None, quant_max: Optional[int] = None,
                 qscheme: Any = None, eps: Optional[float] = None,
                 is_dynamic: bool = False) -> None:
        super().__init__(dtype=dtype, is_dynamic=is_dynamic or compute_dtype is not None)
        self.qscheme = per_tensor_affine if qscheme is None else as_qscheme(qscheme)
        self.eps = _EPS if eps is None else eps
        self.quant_min = quant_min
        self.quant_max = quant_max
        self.custom_op = custom_op_name

    def forward(self, x: ArrayT) -> ArrayT:
        return x

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, is_dynamic={self.is_dynamic}"

    def calculate_qparams(self) -> tuple[Any, Any]:
        raise RuntimeError("calculate_qparams should not be called for PlaceholderObserver")


class RecordingObserver(ObserverBase):
    """Keeps a copy of every array it sees (debugging).

    Parameters
    ----------
    dtype : the quantized dtype it stands for
    """

    def __init__(self, dtype: Any = quint8) -> None:
        super().__init__(dtype=dtype, is_dynamic=False)
        self.tensor_val = []

    def forward(self, x: ArrayT) -> ArrayT:
        self.tensor_val.append(np.array(x, copy=True))
        return x

    def calculate_qparams(self) -> tuple[Any, Any]:
        raise RuntimeError("calculate_qparams should not be called for RecordingObserver")

    def get_tensor_value(self) -> Any:
        """The recorded arrays, in call order."""
        return self.tensor_val


class NoopObserver(ObserverBase):
    """Observes nothing; carries its dtype (float16 by default) to from_float.

    Parameters
    ----------
    dtype : float16 (default)
    custom_op_name : str
    """

    def __init__(self, dtype: Any = np.float16, custom_op_name: str = "") -> None:
        super().__init__(dtype=dtype, is_dynamic=False)
        self.custom_op = custom_op_name

    def forward(self, x: ArrayT) -> ArrayT:
        return x

    def calculate_qparams(self) -> tuple[Any, Any]:
        raise RuntimeError("calculate_qparams should not be called for NoopObserver")


class ReuseInputObserver(ObserverBase):
    """Reuse the input's observer (kept for PyTorch API parity; eager mode treats it as a no-op)."""

    def __init__(self) -> None:
        super().__init__(quint8, is_dynamic=False)

    def forward(self, x: ArrayT) -> ArrayT:
        return x

    def calculate_qparams(self) -> tuple[Any, Any]:
        raise RuntimeError("calculate_qparams should not be called for ReuseInputObserver")


def _is_activation_post_process(module):
    from qops.quantization.fake_quantize import FakeQuantizeBase
    return isinstance(module, (ObserverBase, FakeQuantizeBase))


def get_observer_state_dict(mod: Module) -> dict[str, Any]:
    """The state_dict entries of every observer / fake-quant inside `mod`."""
    out = {}
    for k, v in mod.state_dict().items():
        if "activation_post_process" in k:
            out[k] = v
    return out


def load_observer_state_dict(mod: Module, obs_dict: dict[Any, Any]) -> None:
    """Load observer statistics saved by `get_observer_state_dict` into `mod`'s observers."""
    missing = []
    for name, m in mod.named_modules():
        if _is_activation_post_process(m):
            prefix = name + "."
            sub = {k[len(prefix):]: v for k, v in obs_dict.items() if k.startswith(prefix)}
            if not sub:
                missing.append(name)
                continue
            m.load_state_dict(sub, strict=False)
    if missing:
        raise KeyError("no saved statistics for observers: " + ", ".join(missing))


# -- defaults (PyTorch's) -----------------------------------------------------------------
default_observer = MinMaxObserver.with_args(quant_min=0, quant_max=127)
default_placeholder_observer = PlaceholderObserver
default_debug_observer = RecordingObserver
default_weight_observer = MinMaxObserver.with_args(dtype=qint8, qscheme=per_tensor_symmetric)
weight_observer_range_neg_127_to_127 = MinMaxObserver.with_args(
    dtype=qint8, qscheme=per_tensor_symmetric, quant_min=-127, quant_max=127, eps=2 ** -12)
default_histogram_observer = HistogramObserver.with_args(quant_min=0, quant_max=127)
default_per_channel_weight_observer = PerChannelMinMaxObserver.with_args(
    dtype=qint8, qscheme=per_channel_symmetric)
per_channel_weight_observer_range_neg_127_to_127 = PerChannelMinMaxObserver.with_args(
    dtype=qint8, qscheme=per_channel_symmetric, quant_min=-127, quant_max=127, eps=2 ** -12)
default_dynamic_quant_observer = PlaceholderObserver.with_args(
    dtype=quint8, quant_min=0, quant_max=255, is_dynamic=True)
default_float_qparams_observer = PerChannelMinMaxObserver.with_args(
    dtype=quint8, qscheme=per_channel_affine_float_qparams, ch_axis=0)
default_fixed_qparams_range_neg1to1_observer = FixedQParamsObserver.with_args(
    scale=2.0 / 256.0, zero_point=128, dtype=quint8, quant_min=0, quant_max=255)
default_fixed_qparams_range_0to1_observer = FixedQParamsObserver.with_args(
    scale=1.0 / 256.0, zero_point=0, dtype=quint8, quant_min=0, quant_max=255)
default_symmetric_fixed_qparams_observer = default_fixed_qparams_range_neg1to1_observer
default_affine_fixed_qparams_observer = default_fixed_qparams_range_0to1_observer
default_reuse_input_observer = ReuseInputObserver
