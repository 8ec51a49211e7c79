"""Public conv ops: conv1d/2d/3d and their fused relu variants, with prepacked weights.

Names and arguments follow torch.ao.nn.quantized.functional. Every call runs as a 3-D
convolution (conv1d and conv2d get unit leading spatial dimensions).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from qops import _config
from qops import _qparams as qp
from qops._dtypes import QDtypeLike, as_qdtype, qint8, quint8
from qops._layout import channels_last_order, inverse, is_channels_last
from qops._ops import _check
from qops._qtensor import QTensor

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["conv1d", "conv2d", "conv3d", "conv1d_relu", "conv2d_relu", "conv3d_relu",
           "prepack_conv1d", "prepack_conv2d", "prepack_conv3d", "PackedConv"]

F32 = np.float32
PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_NP_PAD = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
INT32_MAX = 2**31 - 1

#: an int for every spatial dimension, or one int for all of them
IntOrTuple = Union[int, Sequence[int]]


class PackedConv:
    """A conv weight with its bias and parameters, packed once per backend for repeated calls.

    Attributes: `stride`, `padding`, `dilation` (tuples), `groups`, `padding_mode`, `ndim`
    (1, 2 or 3 spatial dims); `weight()` and `bias()` return what was packed.
    """

    def __init__(self, ndim: int, weight: QTensor, bias: Optional[npt.ArrayLike],
                 stride: IntOrTuple, padding: IntOrTuple, dilation: IntOrTuple, groups: int,
                 padding_mode: str) -> None:
        name = f"prepack_conv{ndim}d"
        _check.qtensor(weight, "weight", dtypes=[qint8], per_tensor=False, ndims=(ndim + 2,))
        if weight._axis is not None and weight._axis != 0:
            raise ValueError(f"weight must be per-channel along axis 0 (output channels); "
                             f"got axis {weight._axis}")
        self.ndim = ndim
        self.stride = _check.int_tuple(stride, ndim, "stride", minimum=1)
        self.padding = _check.int_tuple(padding, ndim, "padding", minimum=0)
        self.dilation = _check.int_tuple(dilation, ndim, "dilation", minimum=1)
        self.groups = _check.integer(groups, "groups", minimum=1)
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {PADDING_MODES}; got {padding_mode!r}")
        self.padding_mode = padding_mode
        o, cg = weight.shape[:2]
        if o == 0 or cg == 0 or min(weight.shape[2:]) == 0:
            raise ValueError(f"{name}: weight must have no zero-sized dims; "
                             f"got shape {weight.shape}")
        if o % self.groups:
            raise ValueError(f"groups={self.groups} must divide the weight's output channels ({o})")
        b: Optional[npt.NDArray[np.float32]] = None
        if bias is not None:
            b = _check.float_array(bias, "bias")
            if b.shape != (o,):
                raise ValueError(f"bias must have shape ({o},) (the weight's output channels); "
                                 f"got {b.shape}")
            b = b.copy()
        self._weight = weight
        self._bias = b
        w5 = np.ascontiguousarray(weight._int).reshape((o, cg) + (1,) * (3 - ndim)
                                                       + weight.shape[2:])
        self._w5 = w5
        if weight._axis is None:
            self._w_zps = np.full(o, weight._zero_point, dtype=np.int32)
        else:
            self._w_zps = weight._zero_points.astype(np.int32)
        self._packs: dict[int, tuple[Any, Any]] = {}
        self._requant_cache: Optional[tuple[Any, Any]] = None
        # _conv's checked geometry per input shape/strides/zero point
        self._geometry: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        # accumulator bound: K * max|x - x_zp| * max|w - w_zp|, the x part known per call
        wz = self._w_zps.astype(np.int64)
        self._k = int(np.prod(w5.shape[1:], dtype=np.int64))
        self._wmax = int(max(np.max(wz + 128), np.max(127 - wz)))

    def __getstate__(self):
        # The packings and the per-call caches are per process (their layout depends on the
        # ISA build, and they name the kernel module, which cannot be pickled).
        return (self.ndim, self._weight, self._bias, self.stride, self.padding, self.dilation,
                self.groups, self.padding_mode)

    def __setstate__(self, state):
        self.__init__(*state)

    @property
    def in_channels(self) -> int:
        return self._weight.shape[1] * self.groups

    @property
    def out_channels(self) -> int:
        return self._weight.shape[0]

    @property
    def depthwise(self) -> bool:
        """One input and one output channel per group."""
        return self._weight.shape[1] == 1 and self.groups == self._weight.shape[0]

    def weight(self) -> QTensor:
        """A copy of the quantized weight this pack was made from."""
        return self._weight.clone()

    def bias(self) -> Optional[npt.NDArray[np.float32]]:
        """The float32 bias (or None)."""
        return None if self._bias is None else self._bias.copy()

    def _kernel_pack(self, kernels):
        # One pack per backend module: the fast pack is its own blocked layout.
        key = id(kernels)
        pack = self._packs.get(key)
        if pack is None:
            pack = kernels.pack_weight(self._w5, self._w_zps, self.groups)
            self._packs[key] = (kernels, pack)
        else:
            pack = pack[1]
        return pack

    def _requant(self, x_scale, out_scale):
        """(bias_term, multiplier) float32 per output channel, as docs/semantics.md §8."""
        key = (x_scale, out_scale)
        cached = self._requant_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        value = self._requant_compute(x_scale, out_scale)
        self._requant_cache = (key, value)
        return value

    def _requant_compute(self, x_scale, out_scale):
        w = self._weight
        xs = F32(x_scale)
        if w._axis is None:
            atws = xs * F32(w._scale)
            if self._bias is None:
                bterm = np.zeros(self.out_channels, F32)
            else:
                # per-tensor: the reciprocal is computed in double, then one float multiply
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    inv = F32(1.0 / float(atws)) if float(atws) != 0.0 else F32(np.inf)
                    bterm = (self._bias * inv).astype(F32)
            atws = np.full(self.out_channels, atws, F32)
        else:
            atws = (xs * w._scales.astype(F32)).astype(F32)
            if self._bias is None:
                bterm = np.zeros(self.out_channels, F32)
            else:
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    bterm = (self._bias / atws).astype(F32)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            mult = (atws / F32(out_scale)).astype(F32)
        return bterm, mult

    def __repr__(self) -> str:
        return (f"PackedConv(conv{self.ndim}d, weight={tuple(self._weight.shape)}, "
                f"bias={self._bias is not None}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, groups={self.groups}, "
                f"padding_mode={self.padding_mode!r})")


def _prepack(ndim, weight, bias, stride, padding, dilation, groups, padding_mode):
    if isinstance(weight, QTensor):
        # A private copy, as PyTorch's prepack: later edits of the caller's array must not
        # reach the packs (each backend packs on first use, so they would differ).
        weight = weight.clone()
    return PackedConv(ndim, weight, bias, stride, padding, dilation, groups, padding_mode)


def prepack_conv1d(weight: QTensor, bias: Optional[npt.ArrayLike] = None,
                   stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                   groups: int = 1, padding_mode: str = "zeros") -> PackedConv:
    """Pack a conv1d weight (and bias and parameters) once for repeated `conv1d` calls.

    Parameters
    ----------
    weight : qint8 QTensor (O, C/groups, K), per-tensor or per-channel along axis 0
    bias : float32 array (O,) or None
    stride, padding, dilation : int or 1 int
    groups : int
    padding_mode : 'zeros', 'reflect', 'replicate' or 'circular'
    """
    return _prepack(1, weight, bias, stride, padding, dilation, groups, padding_mode)


def prepack_conv2d(weight: QTensor, bias: Optional[npt.ArrayLike] = None,
                   stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                   groups: int = 1, padding_mode: str = "zeros") -> PackedConv:
    """Pack a conv2d weight (and bias and parameters) once for repeated `conv2d` calls.

    Parameters
    ----------
    weight : qint8 QTensor (O, C/groups, KH, KW), per-tensor or per-channel along axis 0
    bias : float32 array (O,) or None
    stride, padding, dilation : int or 2 ints
    groups : int
    padding_mode : 'zeros', 'reflect', 'replicate' or 'circular'
    """
    return _prepack(2, weight, bias, stride, padding, dilation, groups, padding_mode)


def prepack_conv3d(weight: QTensor, bias: Optional[npt.ArrayLike] = None,
                   stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                   groups: int = 1, padding_mode: str = "zeros") -> PackedConv:
    """Pack a conv3d weight (and bias and parameters) once for repeated `conv3d` calls.

    Parameters
    ----------
    weight : qint8 QTensor (O, C/groups, KD, KH, KW), per-tensor or per-channel along axis 0
    bias : float32 array (O,) or None
    stride, padding, dilation : int or 3 ints
    groups : int
    padding_mode : 'zeros', 'reflect', 'replicate' or 'circular'
    """
    return _prepack(3, weight, bias, stride, padding, dilation, groups, padding_mode)


def _check_packed_args(name, pack, bias, stride, padding, dilation, groups, padding_mode):
    """Refuse conv arguments that a PackedConv overrides when they differ from the pack's.

    The pack holds the bias and the conv parameters; an argument left at its default (bias
    None, stride 1, padding 0, dilation 1, groups 1, padding_mode 'zeros') takes the pack's.
    """
    check_same_as_pack(name, pack.ndim, bias, pack._bias, groups, pack.groups,
                       (("stride", stride, 1, pack.stride, 1),
                        ("padding", padding, 0, pack.padding, 0),
                        ("dilation", dilation, 1, pack.dilation, 1)))
    if not isinstance(padding_mode, str):
        raise TypeError(f"{name}: padding_mode must be a str; got {type(padding_mode).__name__}")
    if padding_mode != "zeros" and padding_mode != pack.padding_mode:
        raise ValueError(f"{name}: padding_mode={padding_mode!r} differs from the packed "
                         f"weight's padding_mode {pack.padding_mode!r} (the weight is packed, "
                         f"which holds its own padding_mode; pack a new weight)")


def check_same_as_pack(name, n, bias, packed_bias, groups, packed_groups, params):
    """Refuse a bias, groups or an (argname, value, default, packed value, minimum) parameter
    given beside a packed weight when it differs from the pack's (a default takes the pack's;
    also used by the transposed convs' packs)."""
    def given(v, default):
        return not (type(v) is type(default) and v == default)

    why = "the weight is packed, which holds its own"
    if bias is not None:
        b = _check.float_array(bias, "bias")
        if packed_bias is None or b.shape != packed_bias.shape \
                or not np.array_equal(b.astype(F32), packed_bias):
            raise ValueError(f"{name}: bias differs from the packed weight's bias ({why} bias; "
                             f"pass bias=None or pack a new weight)")
    for argname, v, default, have, minimum in params:
        if given(v, default):
            t = _check.int_tuple(v, n, argname, minimum=minimum)
            if t != have:
                raise ValueError(f"{name}: {argname}={v!r} differs from the packed weight's "
                                 f"{argname} {have} ({why} {argname}; pack a new weight)")
    if given(groups, 1) and _check.integer(groups, "groups", minimum=1) != packed_groups:
        raise ValueError(f"{name}: groups={groups!r} differs from the packed weight's groups "
                         f"{packed_groups} ({why} groups; pack a new weight)")


def _acc_bound(pack, x_zp):
    """The largest |accumulator| the zero points allow (exact in Python ints)."""
    return pack._k * max(x_zp, 255 - x_zp) * pack._wmax


def _conv(ndim, relu, input, weight, bias, stride, padding, dilation, groups, padding_mode,
          scale, zero_point, dtype):
    # The usual call (a packed weight, a per-tensor quint8 input of a geometry seen before,
    # plain float scale and int zero point) skips the checks and geometry its first call did:
    # they cost more than the kernel for small convs.
    if (type(weight) is PackedConv and bias is None and type(stride) is int and stride == 1
            and type(padding) is int and padding == 0 and type(dilation) is int and dilation == 1
            and type(groups) is int and groups == 1 and type(padding_mode) is str
            and padding_mode == "zeros" and type(input) is QTensor and input._dtype is quint8
            and input._axis is None and dtype is quint8 and type(zero_point) is int
            and 0 <= zero_point <= 255 and type(scale) is float and 1e-38 <= scale <= 3e38):
        x = input._int
        geo = weight._geometry.get((ndim, x.shape, x.strides, input._zero_point))
        if geo is not None:
            return _conv_run(weight, input, geo, relu, scale, zero_point)
    name = f"conv{ndim}d" + ("_relu" if relu else "")
    _check.qtensor(input, "input", dtypes=[quint8], ndims=(ndim + 2,))
    if as_qdtype(dtype) is not quint8:
        raise TypeError(f"{name}: dtype must be quint8; got {as_qdtype(dtype).name}")
    if isinstance(weight, PackedConv):
        pack = weight
        if pack.ndim != ndim:
            raise ValueError(f"{name}: weight was packed by prepack_conv{pack.ndim}d")
        _check_packed_args(name, pack, bias, stride, padding, dilation, groups, padding_mode)
    else:
        pack = PackedConv(ndim, weight, bias, stride, padding, dilation, groups, padding_mode)
    scale = qp.check_scale(scale)
    zero_point = qp.check_zero_point(zero_point, quint8)
    x = input._int
    # channels-last memory (channels innermost, the rest in order) of an ungrouped or
    # depthwise conv with zero padding: the channels-last kernels, whose result lies channels
    # last too (as PyTorch's); otherwise the planes are built from any strides (a
    # channels-last block of a grouped conv as it lies), other non-C layouts transposed first
    channels_last = ((pack.groups == 1 or pack.depthwise) and x.shape[0] > 0
                     and is_channels_last(x)
                     and (pack.padding_mode == "zeros" or not any(pack.padding)))
    needs_copy = not channels_last and not x.flags.c_contiguous and not (
        x.strides[1] == 1 and pack.groups == 1)
    if needs_copy:
        x = input._cint()
    c = x.shape[1]
    if c % pack.groups:
        raise ValueError(f"{name}: groups={pack.groups} must divide the input channels ({c})")
    if c != pack.in_channels:
        raise ValueError(f"{name}: input has {c} channels but weight expects "
                         f"{pack.in_channels} (in_channels/groups={pack._weight.shape[1]} x "
                         f"groups={pack.groups})")
    x_zp = int(input._zero_point)
    pad = pack.padding
    # Both backends work on a padded copy of the input (ref's in int64): refuse one that
    # cannot exist before numpy fails without naming the argument (the output is no larger).
    _check.out_shape(x.shape[:2] + tuple(s + 2 * p for s, p in zip(x.shape[2:], pad)),
                     "padding", 8)
    padded_copy = pack.padding_mode != "zeros" and any(pad)
    if padded_copy:
        # as PyTorch's modules: pad the raw quantized input, then convolve without padding
        spatial = x.shape[2:]
        if pack.padding_mode == "reflect":
            for p, s, d in zip(pad, spatial, "DHW"[3 - ndim:]):
                if p >= s:
                    raise ValueError(f"{name}: reflect padding {p} must be smaller than the "
                                     f"input size {s}")
        if pack.padding_mode == "circular":
            for p, s in zip(pad, spatial):
                if p > s:
                    raise ValueError(f"{name}: circular padding {p} must not exceed the input "
                                     f"size {s}")
        x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad], mode=_NP_PAD[pack.padding_mode])
        pad = (0,) * ndim
    lead = (1,) * (3 - ndim)
    x5 = x.reshape(x.shape[:2] + lead + x.shape[2:])
    stride3, pad3, dil3 = lead + pack.stride, (0,) * (3 - ndim) + tuple(pad), lead + pack.dilation
    kernel = pack._w5.shape[2:]
    out_sizes = []
    for i in range(3):
        padded = x5.shape[2 + i] + 2 * pad3[i]
        span = dil3[i] * (kernel[i] - 1) + 1
        if span > padded:
            raise ValueError(f"{name}: kernel size (with dilation) {span} is larger than the "
                             f"padded input size {padded}")
        out_sizes.append((padded - span) // stride3[i] + 1)
    if _acc_bound(pack, x_zp) > INT32_MAX:
        raise ValueError(f"{name}: in_channels/groups x kernel size = "
                         f"{int(np.prod(pack._w5.shape[1:]))} is too large: the int32 "
                         f"accumulator could overflow with these zero points")
    o = pack.out_channels
    out_shape = (x.shape[0], o) + tuple(out_sizes[3 - ndim:])
    order = channels_last_order(ndim + 2)
    # the kernel's view of x and of its result, worked out once per geometry: channels last,
    # x's memory as (N, D, H, W, C) and the result's (N, OD, OH, OW, O); C order, x as
    # (N, C, D, H, W)
    if channels_last:
        cl = x.shape[:1] + x.shape[2:] + x.shape[1:2]
        views = (cl[:1] + lead + cl[1:], (out_shape[0],) + out_shape[2:] + (out_shape[1],),
                 inverse(order))
    else:
        views = (x.shape[:2] + lead + x.shape[2:], out_shape, None)
    geo = (channels_last, needs_copy, stride3, pad3, dil3, out_shape, order, views)
    if not padded_copy:
        # (inputs padded here by copy take this path every call)
        if len(pack._geometry) >= 16:
            pack._geometry.clear()
        pack._geometry[(ndim, input._int.shape, input._int.strides, input._zero_point)] = geo
    return _conv_run(pack, input, geo, relu, scale, zero_point, x)


def _conv_run(pack, input, geo, relu, scale, zero_point, x=None):
    """The kernel call of _conv once its checks and geometry are known (x: the raw input as
    the kernel takes it, else derived from `input` as geo says)."""
    channels_last, needs_copy, stride3, pad3, dil3, out_shape, order, views = geo
    if out_shape[0] == 0:
        return QTensor._make(np.zeros(out_shape, np.uint8), quint8, scale, zero_point)
    if x is None:
        x = input._cint() if needs_copy else input._int
    x_zp = int(input._zero_point)
    bterm, mult = pack._requant(input._scale, scale)
    kernels = _config.impl("conv")
    x_view, out_view, inv = views
    if channels_last:
        xm = x.transpose(order).reshape(x_view)
        out = kernels.conv_cl(xm, pack._kernel_pack(kernels), x_zp, bterm, mult, zero_point,
                              bool(relu), stride3, pad3, dil3, pack.groups)
        # (routes through the planes kernel hand back a view of a C-order result:
        # _channels_last makes it channels last, as every other route's result lies)
        return _channels_last(out.reshape(out_view).transpose(inv), order, scale, zero_point)
    out = kernels.conv(x.reshape(x_view), pack._kernel_pack(kernels), x_zp, bterm, mult,
                       zero_point, bool(relu), stride3, pad3, dil3, pack.groups)
    return _channels_last(out.reshape(out_view), order, scale, zero_point)


def _channels_last(out, order, scale, zero_point):
    """The result as a QTensor in channels-last memory.

    PyTorch's quantized convs (1-3 D, every engine and route) return channels-last memory,
    and the ops after them round by that layout (average pools, group norm): a result the
    kernel wrote in another order takes it too, by the tiled byte transpose.
    """
    nhwc = out.transpose(order)
    if not nhwc.flags.c_contiguous:
        out = _config.impl("quant").copy_raw(nhwc).transpose(inverse(order))
    return QTensor._make(out, quint8, scale, zero_point)


_DOC = """Quantized {n}-D convolution{relu} of a quint8 input with a qint8 weight.

    Parameters
    ----------
    input : quint8 QTensor (N, C{dims}), per-tensor
    weight : qint8 QTensor (O, C/groups{kdims}), per-tensor or per-channel along axis 0, or a
        PackedConv from prepack_conv{n}d (then bias and the conv parameters come from it)
    bias : float32 array (O,) or None
    stride, dilation : int or {n} ints, >= 1
    padding : int or {n} ints, >= 0
    groups : int dividing C and O
    padding_mode : 'zeros', 'reflect', 'replicate' or 'circular' (the last three pad the raw
        input, then convolve with padding 0)
    scale, zero_point : output quantization parameters
    dtype : quint8
    """


def _doc(ndim, relu):
    dims = ", ".join("DHW"[3 - ndim:])
    return _DOC.format(n=ndim, relu=" fused with relu" if relu else "", dims=", " + dims,
                       kdims=", " + ", ".join("K" + d for d in dims.split(", ")))


def conv1d(input: QTensor, weight: Union[QTensor, PackedConv],
           bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
           padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
           padding_mode: str = "zeros", scale: float = 1.0, zero_point: int = 0,
           dtype: QDtypeLike = quint8) -> QTensor:
    return _conv(1, False, input, weight, bias, stride, padding, dilation, groups,
                 padding_mode, scale, zero_point, dtype)


def conv1d_relu(input: QTensor, weight: Union[QTensor, PackedConv],
                bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
                padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
                padding_mode: str = "zeros", scale: float = 1.0, zero_point: int = 0,
                dtype: QDtypeLike = quint8) -> QTensor:
    return _conv(1, True, input, weight, bias, stride, padding, dilation, groups,
                 padding_mode, scale, zero_point, dtype)


def conv2d(input: QTensor, weight: Union[QTensor, PackedConv],
           bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
           padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
           padding_mode: str = "zeros", scale: float = 1.0, zero_point: int = 0,
           dtype: QDtypeLike = quint8) -> QTensor:
    return _conv(2, False, input, weight, bias, stride, padding, dilation, groups,
                 padding_mode, scale, zero_point, dtype)


def conv2d_relu(input: QTensor, weight: Union[QTensor, PackedConv],
                bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
                padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
                padding_mode: str = "zeros", scale: float = 1.0, zero_point: int = 0,
                dtype: QDtypeLike = quint8) -> QTensor:
    return _conv(2, True, input, weight, bias, stride, padding, dilation, groups,
                 padding_mode, scale, zero_point, dtype)


def conv3d(input: QTensor, weight: Union[QTensor, PackedConv],
           bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
           padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
           padding_mode: str = "zeros", scale: float = 1.0, zero_point: int = 0,
           dtype: QDtypeLike = quint8) -> QTensor:
    return _conv(3, False, input, weight, bias, stride, padding, dilation, groups,
                 padding_mode, scale, zero_point, dtype)


def conv3d_relu(input: QTensor, weight: Union[QTensor, PackedConv],
                bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
                padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
                padding_mode: str = "zeros", scale: float = 1.0, zero_point: int = 0,
                dtype: QDtypeLike = quint8) -> QTensor:
    return _conv(3, True, input, weight, bias, stride, padding, dilation, groups,
                 padding_mode, scale, zero_point, dtype)


for _op, _n, _relu in ((conv1d, 1, False), (conv2d, 2, False), (conv3d, 3, False),
                       (conv1d_relu, 1, True), (conv2d_relu, 2, True), (conv3d_relu, 3, True)):
    _op.__doc__ = _doc(_n, _relu)
del _op, _n, _relu
