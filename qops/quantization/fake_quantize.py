"""Fake quantization: quantize-dequantize in float32 during training (docs/semantics.md §15).

`fake_quantize_per_tensor_affine` / `fake_quantize_per_channel_affine` compute
`q = zp + rint(f32(x * f32(1/s)))` (zero point added after rounding, unlike the real quantize)
and return `f32((clamp(q, qmin, qmax) - zp) * s)`; the `_with_mask` variants also return the
straight-through-estimator mask `qmin <= q <= qmax` (the gradient passes where it is True).
Modules follow `torch.ao.quantization.fake_quantize`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from qops._dtypes import (
    per_channel_affine_float_qparams,
    per_channel_symmetric,
    per_tensor_affine,
    per_tensor_symmetric,
    qint8,
    quint8,
)
from qops.nn.module import Module
from qops.quantization import _choose_qparams as cq
from qops.quantization.observer import (
    FixedQParamsObserver,
    HistogramObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    _with_args,
    default_fixed_qparams_range_0to1_observer,
    default_fixed_qparams_range_neg1to1_observer,
)

if TYPE_CHECKING:
    import numpy.typing as npt

    from qops.nn._typing import Array

F32 = np.float32

__all__ = ["fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine",
           "fake_quantize_per_tensor_affine_with_mask",
           "fake_quantize_per_channel_affine_with_mask",
           "FakeQuantizeBase", "FakeQuantize", "FixedQParamsFakeQuantize",
           "FusedMovingAvgObsFakeQuantize", "disable_fake_quant", "enable_fake_quant",
           "disable_observer", "enable_observer",
           "default_fake_quant", "default_weight_fake_quant", "default_dynamic_fake_quant",
           "default_per_channel_weight_fake_quant", "default_histogram_fake_quant",
           "default_fused_act_fake_quant", "default_fused_wt_fake_quant",
           "default_fused_per_channel_wt_fake_quant",
           "default_fixed_qparams_range_neg1to1_fake_quant",
           "default_fixed_qparams_range_0to1_fake_quant"]


def _check_range(quant_min, quant_max):
    if int(quant_min) > int(quant_max):
        raise ValueError(f"quant_min={quant_min} must be <= quant_max={quant_max}")


def fake_quantize_per_tensor_affine_with_mask(input: Any, scale: Union[float, Array],
                                              zero_point: Union[int, Array], quant_min: int,
                                              quant_max: int) -> tuple[Array, Array]:
    """Fake-quantize `input` with one (scale, zero_point); also return the STE mask.

    Parameters
    ----------
    input : float array
    scale : float > 0 (used as float32)
    zero_point : int
    quant_min, quant_max : int, the clamp range

    Returns
    -------
    (output float32 array, mask bool array)
    """
    _check_range(quant_min, quant_max)
    x = np.asarray(input, dtype=F32)
    s = F32(np.asarray(scale, dtype=np.float64).reshape(-1)[0])
    zp = int(np.asarray(zero_point).reshape(-1)[0])
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"scale must be finite and > 0; got {float(s)!r}")
    inv = F32(F32(1.0) / s)
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.multiply(x, inv, dtype=F32)
        np.rint(q, out=q)
        # Integer-valued float32: adding zp is exact wherever the clamp does not decide.
        q += F32(zp)
    mask = (q >= quant_min) & (q <= quant_max)
    np.clip(q, F32(quant_min), F32(quant_max), out=q)
    q -= F32(zp)
    q *= s
    return q, mask


def fake_quantize_per_tensor_affine(input: Any, scale: Union[float, Array],
                                    zero_point: Union[int, Array], quant_min: int,
                                    quant_max: int) -> Array:
    """Fake-quantize `input` with one (scale, zero_point): torch.fake_quantize_per_tensor_affine.

    Parameters
    ----------
    input : float array
    scale : float > 0
    zero_point : int
    quant_min, quant_max : int, the clamp range
    """
    return fake_quantize_per_tensor_affine_with_mask(input, scale, zero_point, quant_min,
                                                     quant_max)[0]


def fake_quantize_per_channel_affine_with_mask(input: Any, scale: npt.ArrayLike,
                                               zero_point: npt.ArrayLike, axis: int, quant_min: int,
                                               quant_max: int) -> tuple[Array, Array]:
    """Fake-quantize `input` with per-channel qparams along `axis`; also return the STE mask.

    Parameters
    ----------
    input : float array
    scale : 1-D float array, one scale per channel
    zero_point : 1-D int array (float zero points: embedding style, `rint(zp + x*inv)`)
    axis : int, the channel axis
    quant_min, quant_max : int
    """
    _check_range(quant_min, quant_max)
    x = np.asarray(input, dtype=F32)
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(f"axis={axis} is out of range for an input with {x.ndim} dims")
    axis %= x.ndim
    s = np.asarray(scale, dtype=np.float64).reshape(-1).astype(F32)
    zp = np.asarray(zero_point).reshape(-1)
    if s.shape[0] != x.shape[axis] or zp.shape[0] != x.shape[axis]:
        raise ValueError(f"scale and zero_point need {x.shape[axis]} entries (the size of axis "
                         f"{axis}); got {s.shape[0]} and {zp.shape[0]}")
    if not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError("scale must be finite and > 0 in every channel")
    shape = [1] * x.ndim
    shape[axis] = -1
    inv = (F32(1.0) / s).astype(F32).reshape(shape)
    s_b = s.reshape(shape)
    if np.issubdtype(zp.dtype, np.floating):
        zpf = zp.astype(F32).reshape(shape)
        with np.errstate(over="ignore", invalid="ignore"):
            q = np.rint((zpf + (x * inv).astype(F32)).astype(F32)).astype(np.float64)
        mask = (q >= quant_min) & (q <= quant_max)
        out = ((np.clip(q, quant_min, quant_max).astype(F32) - zpf).astype(F32) * s_b)
        return out.astype(F32), mask
    zpi = zp.astype(np.int64).reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.rint((x * inv).astype(F32)).astype(np.float64) + zpi
    mask = (q >= quant_min) & (q <= quant_max)
    out = ((np.clip(q, quant_min, quant_max) - zpi).astype(F32) * s_b).astype(F32)
    return out, mask


def fake_quantize_per_channel_affine(input: Any, scale: npt.ArrayLike, zero_point: npt.ArrayLike,
                                     axis: int, quant_min: int, quant_max: int) -> Array:
    """Fake-quantize `input` per channel: torch.fake_quantize_per_channel_affine.

    Parameters
    ----------
    input : float array
    scale : 1-D float array
    zero_point : 1-D int array
    axis : int
    quant_min, quant_max : int
    """
    return fake_quantize_per_channel_affine_with_mask(input, scale, zero_point, axis, quant_min,
                                                      quant_max)[0]


class FakeQuantizeBase(Module):
    """Base of fake-quant modules: observer and fake-quant enable switches."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("fake_quant_enabled", np.array([1], dtype=np.uint8))
        self.register_buffer("observer_enabled", np.array([1], dtype=np.uint8))

    def forward(self, x: npt.ArrayLike) -> Array:
        raise NotImplementedError

    def calculate_qparams(self, **kwargs: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def enable_fake_quant(self, enabled: bool = True) -> None:
        """Turn fake quantization on (or off with enabled=False)."""
        self.fake_quant_enabled[0] = 1 if enabled else 0

    def disable_fake_quant(self) -> None:
        self.enable_fake_quant(False)

    def enable_observer(self, enabled: bool = True) -> None:
        """Turn statistics collection on (or off with enabled=False)."""
        self.observer_enabled[0] = 1 if enabled else 0

    def disable_observer(self) -> None:
        self.enable_observer(False)

    with_args = classmethod(_with_args)


class FakeQuantize(FakeQuantizeBase):
    """Observe, compute qparams, fake-quantize: torch.ao.quantization.FakeQuantize.

    Parameters
    ----------
    observer : observer class or factory (MovingAverageMinMaxObserver)
    quant_min, quant_max : int, the range (passed to the observer)
    is_dynamic : bool
    **observer_kwargs : passed to the observer (dtype, qscheme, reduce_range, ...)

    `last_mask` holds the straight-through mask of the last forward (None when disabled).
    """

    def __init__(self, observer: Any = MovingAverageMinMaxObserver, quant_min: Optional[int] = None,
                 quant_max: Optional[int] = None, is_dynamic: bool = False,
                 **observer_kwargs: Any) -> None:
        super().__init__()
        if quant_min is not None and quant_max is not None:
            _check_range(quant_min, quant_max)
            observer_kwargs.update({"quant_min": quant_min, "quant_max": quant_max})
        observer_kwargs["is_dynamic"] = is_dynamic
        self.activation_post_process = observer(**observer_kwargs)
        app = self.activation_post_process
        dt = app.dtype
        if quant_min is not None and quant_max is not None and hasattr(dt, "qmin"):
            if quant_min < dt.qmin:
                raise ValueError(f"quant_min={quant_min} is below the range of {dt.name}")
            if quant_max > dt.qmax:
                raise ValueError(f"quant_max={quant_max} is above the range of {dt.name}")
        self.quant_min = app.quant_min
        self.quant_max = app.quant_max
        self.is_dynamic = app.is_dynamic
        float_zp = app.qscheme is per_channel_affine_float_qparams
        self.register_buffer("scale", np.array([1.0], dtype=F32))
        self.register_buffer("zero_point", np.array([0], dtype=F32 if float_zp else np.int64))
        self.dtype = app.dtype
        self.qscheme = app.qscheme
        self.ch_axis = getattr(app, "ch_axis", -1)
        self.is_per_channel = self.qscheme.per_channel
        self.last_mask = None

    def calculate_qparams(self) -> tuple[Any, Any]:
        """The observer's (scale, zero_point)."""
        return self.activation_post_process.calculate_qparams()

    def forward(self, X: npt.ArrayLike) -> Array:
        """Observe `X` (if enabled), update qparams, return its fake-quantized copy (if enabled)."""
        if self.observer_enabled[0] == 1:
            self.activation_post_process(X)
            s, zp = self.calculate_qparams()
            self.scale = np.asarray(s, dtype=F32).copy()
            self.zero_point = np.asarray(zp).astype(self.zero_point.dtype)
        if self.fake_quant_enabled[0] == 1:
            app = self.activation_post_process
            if self.is_per_channel:
                X, self.last_mask = fake_quantize_per_channel_affine_with_mask(
                    X, self.scale, self.zero_point, self.ch_axis, app.quant_min, app.quant_max)
            else:
                X, self.last_mask = fake_quantize_per_tensor_affine_with_mask(
                    X, self.scale, self.zero_point, app.quant_min, app.quant_max)
        else:
            self.last_mask = None
        return X

    def extra_repr(self) -> str:
        return (f"fake_quant_enabled={self.fake_quant_enabled}, "
                f"observer_enabled={self.observer_enabled}, quant_min={self.quant_min}, "
                f"quant_max={self.quant_max}, dtype={self.dtype}, qscheme={self.qscheme}, "
                f"ch_axis={self.ch_axis}, scale={self.scale}, zero_point={self.zero_point}")

    def _load_entry(self, name, value, key, errors):
        # scale / zero_point change length (per channel) once observed.
        if name in ("scale", "zero_point"):
            self._buffers[name] = np.asarray(value).astype(self._buffers[name].dtype).copy()
            return
        super()._load_entry(name, value, key, errors)


class FixedQParamsFakeQuantize(FakeQuantize):
    """Fake quantization with fixed qparams (from a FixedQParamsObserver)."""

    def __init__(self, observer: Any) -> None:
        super().__init__(observer=observer)
        if type(self.activation_post_process) is not FixedQParamsObserver:
            raise TypeError(f"{type(self).__name__}'s observer must be a FixedQParamsObserver")
        self.scale = self.activation_post_process.scale
        self.zero_point = self.activation_post_process.zero_point

    def calculate_qparams(self) -> tuple[Any, Any]:
        return self.scale, self.zero_point


class FusedMovingAvgObsFakeQuantize(FakeQuantize):
    """The default QAT fake quant: moving-average observer fused with fake quantization.

    As PyTorch's `fused_moving_avg_obs_fake_quant` op: the running min/max are updated in
    double from float32 (first batch taken as is) and the forward qparams come from fbgemm's
    ChooseQuantizationParams (symmetric schemes preserve sparsity), while
    `calculate_qparams()` (used by convert) applies the observer formula. The two differ for
    symmetric per-channel weights (docs/semantics.md §15, §17.10), as in PyTorch.
    """

    def __init__(self, observer: Any = MovingAverageMinMaxObserver, quant_min: int = 0,
                 quant_max: int = 255, **observer_kwargs: Any) -> None:
        super().__init__(observer, quant_min, quant_max, **observer_kwargs)
        if not isinstance(self.activation_post_process,
                          (MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver)):
            raise TypeError("Fused observer+fake_quant module only works with "
                            "MovingAverageMinMaxObserver")
        self.is_symmetric_quant = self.qscheme.symmetric

    def _update_running(self, x):
        app = self.activation_post_process
        c = float(app.averaging_constant)
        if self.is_per_channel:
            from qops.quantization.observer import _rows
            rows = _rows(x, self.ch_axis)
            cur_min, cur_max = rows.min(axis=1), rows.max(axis=1)
            if app.min_val.size == 0:
                app.min_val, app.max_val = cur_min.astype(F32), cur_max.astype(F32)
                return
            rmin, rmax = app.min_val.astype(F32), app.max_val.astype(F32)
        else:
            cur_min, cur_max = np.array([x.min()], F32), np.array([x.max()], F32)
            rmin = np.atleast_1d(app.min_val).astype(F32)
            rmax = np.atleast_1d(app.max_val).astype(F32)

        def avg(r, cur):
            with np.errstate(invalid="ignore"):
                diff = (cur - r).astype(F32)
                if self.is_per_channel:
                    # Per channel the op uses float32 tensor arithmetic ...
                    moved = (r + (F32(c) * diff).astype(F32)).astype(F32)
                else:
                    # ... per tensor, scalar C++ in double (measured against torch 2.13).
                    moved = (r.astype(np.float64) + c * diff.astype(np.float64)).astype(F32)
            return np.where(np.isinf(r), cur, moved).astype(F32)

        new_min, new_max = avg(rmin, cur_min), avg(rmax, cur_max)
        if self.is_per_channel:
            app.min_val, app.max_val = new_min, new_max
        else:
            app.min_val = np.array(new_min[0], dtype=F32)
            app.max_val = np.array(new_max[0], dtype=F32)

    def forward(self, X: npt.ArrayLike) -> Array:
        """Update the running min/max, set qparams (fbgemm formula), fake-quantize."""
        x = np.asarray(X, dtype=F32)
        app = self.activation_post_process
        if self.observer_enabled[0] == 1 and x.size:
            self._update_running(x)
            mins = np.atleast_1d(app.min_val)
            maxs = np.atleast_1d(app.max_val)
            pairs = [cq.choose_quantization_params(float(lo), float(hi), app.quant_min,
                                                   app.quant_max, self.is_symmetric_quant)
                     for lo, hi in zip(mins, maxs)]
            self.scale = np.array([p[0] for p in pairs], dtype=F32)
            self.zero_point = np.array([p[1] for p in pairs], dtype=np.int64)
        if self.fake_quant_enabled[0] == 1:
            if self.is_per_channel:
                x, self.last_mask = fake_quantize_per_channel_affine_with_mask(
                    x, self.scale, self.zero_point, self.ch_axis, app.quant_min, app.quant_max)
            else:
                x, self.last_mask = fake_quantize_per_tensor_affine_with_mask(
                    x, self.scale, self.zero_point, app.quant_min, app.quant_max)
        return x


def _apply_to_fake_quant(method):
    def fn(mod: Module) -> None:
        if isinstance(mod, FakeQuantizeBase):
            getattr(mod, method)()
    fn.__name__ = method
    fn.__doc__ = f"Call `{method}()` on `mod` if it is a fake-quant module (use with model.apply)."
    return fn


disable_fake_quant = _apply_to_fake_quant("disable_fake_quant")
enable_fake_quant = _apply_to_fake_quant("enable_fake_quant")
disable_observer = _apply_to_fake_quant("disable_observer")
enable_observer = _apply_to_fake_quant("enable_observer")

default_fake_quant = FakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, dtype=quint8,
    qscheme=per_tensor_affine, reduce_range=True)
default_weight_fake_quant = FakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=qint8,
    qscheme=per_tensor_symmetric, reduce_range=False)
default_dynamic_fake_quant = FakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, is_dynamic=True,
    dtype=quint8, averaging_constant=1)
default_fixed_qparams_range_neg1to1_fake_quant = FixedQParamsFakeQuantize.with_args(
    observer=default_fixed_qparams_range_neg1to1_observer)
default_fixed_qparams_range_0to1_fake_quant = FixedQParamsFakeQuantize.with_args(
    observer=default_fixed_qparams_range_0to1_observer)
default_per_channel_weight_fake_quant = FakeQuantize.with_args(
    observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127, dtype=qint8,
    qscheme=per_channel_symmetric, reduce_range=False, ch_axis=0)
default_histogram_fake_quant = FakeQuantize.with_args(
    observer=HistogramObserver, quant_min=0, quant_max=255, dtype=quint8,
    qscheme=per_tensor_affine, reduce_range=True)
default_fused_act_fake_quant = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, dtype=quint8)
default_fused_wt_fake_quant = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=qint8,
    qscheme=per_tensor_symmetric)
default_fused_per_channel_wt_fake_quant = FusedMovingAvgObsFakeQuantize.with_args(
    observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
    dtype=qint8, qscheme=per_channel_symmetric)
