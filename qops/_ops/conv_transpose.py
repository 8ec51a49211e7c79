"""Quantized transposed convolutions: conv_transpose1d/2d/3d, with prepacked weights.

A transposed convolution is the convolution it is the adjoint of (docs/semantics.md §16.2):
the input spread `stride` apart and padded by dilation * (k - 1) - padding (+ output_padding
on the far side; cropped where negative), the gaps filled with the input's zero point (so they
add nothing to the integer sums), then convolved at stride 1 with the kernel flipped and its
channel axes swapped per group. Every output sums exactly the products PyTorch's fbgemm kernel
sums, in int32, and is requantized as a conv's output (§8), so the registry's conv (on the
active backend) does the arithmetic. Not a registry op of its own: the spread is a copy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from qops._dtypes import QDtypeLike, as_qdtype, qint8, quint8
from qops._layout import is_channels_last
from qops._ops import _check
from qops._ops.conv import IntOrTuple, PackedConv, _conv, check_same_as_pack
from qops._qtensor import QTensor

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "prepack_conv_transpose1d", "prepack_conv_transpose2d", "prepack_conv_transpose3d",
           "PackedConvTranspose"]


class PackedConvTranspose:
    """A transposed-conv weight with its bias and parameters, packed once for repeated calls.

    Attributes: `stride`, `padding`, `output_padding`, `dilation` (tuples), `groups`, `ndim`;
    `weight()` and `bias()` return what was packed.
    """

    def __init__(self, ndim: int, weight: QTensor, bias: Optional[npt.ArrayLike],
                 stride: IntOrTuple, padding: IntOrTuple, output_padding: IntOrTuple,
                 groups: int, dilation: IntOrTuple) -> None:
        name = f"prepack_conv_transpose{ndim}d"
        if isinstance(weight, QTensor) and weight._axis is not None:
            # PyTorch's prepack refuses them too ("currently disabled for transposed conv")
            raise ValueError(f"{name}: weight must be per-tensor quantized (PyTorch has no "
                             f"per-channel transposed conv); got {weight.qscheme().name}")
        _check.qtensor(weight, "weight", dtypes=[qint8], ndims=(ndim + 2,))
        self.ndim = ndim
        self.stride = _check.int_tuple(stride, ndim, "stride", minimum=1)
        self.padding = _check.int_tuple(padding, ndim, "padding", minimum=0)
        self.output_padding = _check.int_tuple(output_padding, ndim, "output_padding", minimum=0)
        self.dilation = _check.int_tuple(dilation, ndim, "dilation", minimum=1)
        self.groups = _check.integer(groups, "groups", minimum=1)
        for o, s, d in zip(self.output_padding, self.stride, self.dilation):
            if o >= max(s, d):
                raise ValueError(f"{name}: output_padding {self.output_padding} must be "
                                 f"smaller than stride or dilation")
        c, og = weight.shape[:2]
        if c == 0 or og == 0 or min(weight.shape[2:]) == 0:
            raise ValueError(f"{name}: weight must have no zero-sized dims; "
                             f"got shape {weight.shape}")
        if c % self.groups:
            raise ValueError(f"groups={self.groups} must divide the weight's input channels "
                             f"({c})")
        self._weight = weight.clone()
        ci = c // self.groups
        # the conv's weight: per group, (C/g, O/g, k) -> (O/g, C/g, k) with the taps flipped
        flipped = np.flip(weight._int, axis=tuple(range(2, 2 + ndim)))
        wc = np.ascontiguousarray(np.concatenate(
            [np.swapaxes(flipped[g * ci:(g + 1) * ci], 0, 1) for g in range(self.groups)]))
        conv_w = QTensor._make(wc, qint8, weight._scale, weight._zero_point)
        self._conv = PackedConv(ndim, conv_w, bias, 1, 0, self.dilation, self.groups, "zeros")
        self._shuffle: Optional[PackedConv] = None     # the "shuffle" route's 1x1 conv
        self.route = _plan(self)

    def _shuffle_conv(self) -> PackedConv:
        """The 1x1 conv of the "shuffle" route: output channel t * C_out + o holds tap t of
        output channel o (w[:, o, t]), the bias repeated per tap."""
        if self._shuffle is None:
            w = self._weight
            taps = int(np.prod(w.shape[2:]))
            w1 = np.ascontiguousarray(w._int.reshape(w.shape[:2] + (taps,)).transpose(2, 1, 0))
            w1 = w1.reshape((taps * w.shape[1], w.shape[0]) + (1,) * self.ndim)
            b = self._conv._bias
            self._shuffle = PackedConv(self.ndim, QTensor._make(w1, qint8, w._scale,
                                                                w._zero_point),
                                       None if b is None else np.tile(b, taps), 1, 0, 1, 1,
                                       "zeros")
        return self._shuffle

    @property
    def in_channels(self) -> int:
        return self._weight.shape[0]

    @property
    def out_channels(self) -> int:
        return self._weight.shape[1] * self.groups

    def weight(self) -> QTensor:
        """A copy of the packed quantized weight (C_in, C_out / groups, kernel...)."""
        return self._weight.clone()

    def bias(self) -> Optional[npt.NDArray[np.float32]]:
        """The float32 bias (or None)."""
        return self._conv.bias()

    def __repr__(self) -> str:
        return (f"PackedConvTranspose(conv_transpose{self.ndim}d, "
                f"weight={tuple(self._weight.shape)}, bias={self._conv._bias is not None}, "
                f"stride={self.stride}, padding={self.padding}, "
                f"output_padding={self.output_padding}, dilation={self.dilation}, "
                f"groups={self.groups})")


ROUTES = {
    "conv_transpose.shuffle": "kernel == stride, no dilation, groups or output_padding: each "
                              "output takes one tap, so a 1x1 conv to C_out x taps channels "
                              "and a depth-to-space copy (padding crops)",
    "conv_transpose.spread": "any other: the input spread by the stride (gaps at its zero "
                             "point), then the stride-1 conv of the flipped kernel",
}


def _plan(pack: PackedConvTranspose) -> str:
    """The route of a packed transposed conv (ROUTES): chosen once, at pack time."""
    k = pack._weight.shape[2:]
    if (pack.groups == 1 and tuple(k) == pack.stride and set(pack.dilation) == {1}
            and not any(pack.output_padding)
            and all(p < kk for p, kk in zip(pack.padding, k))):
        return "conv_transpose.shuffle"
    return "conv_transpose.spread"


def _shuffle(input: QTensor, pack: PackedConvTranspose, scale, zero_point) -> QTensor:
    """The "shuffle" route: out[n, o, i * k + t] = (1x1 conv)[n, t * C_out + o, i], as
    channels-last memory (PyTorch's layout for quantized conv results), padding cropped."""
    n = pack.ndim
    r = _conv(n, False, input, pack._shuffle_conv(), None, 1, 0, 1, 1, "zeros", scale,
              zero_point, quint8)
    k, o = pack._weight.shape[2:], pack.out_channels
    lead = r._int.shape[0]
    sp = r._int.shape[2:]
    nhwc = np.moveaxis(r._int, 1, -1).reshape((lead,) + sp + tuple(k) + (o,))
    order = [0]
    for i in range(n):
        order += [1 + i, 1 + n + i]
    nhwc = nhwc.transpose(order + [1 + 2 * n])
    full = tuple(L * kk for L, kk in zip(sp, k))
    out = nhwc.reshape((lead,) + full + (o,))
    if any(pack.padding):
        out = out[(slice(None),) + tuple(slice(p, f - p) for p, f in zip(pack.padding, full))]
    out = np.ascontiguousarray(out)
    return QTensor._make(np.moveaxis(out, -1, 1), quint8, r._scale, r._zero_point)


def _prepack(ndim, weight, bias, stride, padding, output_padding, groups, dilation):
    return PackedConvTranspose(ndim, weight, bias, stride, padding, output_padding, groups,
                               dilation)


_PREPACK_DOC = """Pack a conv_transpose{n}d weight, bias and parameters once for repeated calls.

    Parameters
    ----------
    weight : qint8 QTensor (C_in, C_out/groups{k}), per-tensor (as PyTorch's)
    bias : float32 array (C_out,) or None
    stride, dilation : int or {n} ints, >= 1
    padding, output_padding : int or {n} ints, >= 0 (output_padding below stride or dilation)
    groups : int dividing C_in and C_out
    """


def prepack_conv_transpose1d(weight: QTensor, bias: Optional[npt.ArrayLike] = None,
                             stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                             output_padding: IntOrTuple = 0, groups: int = 1,
                             dilation: IntOrTuple = 1) -> PackedConvTranspose:
    return _prepack(1, weight, bias, stride, padding, output_padding, groups, dilation)


def prepack_conv_transpose2d(weight: QTensor, bias: Optional[npt.ArrayLike] = None,
                             stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                             output_padding: IntOrTuple = 0, groups: int = 1,
                             dilation: IntOrTuple = 1) -> PackedConvTranspose:
    return _prepack(2, weight, bias, stride, padding, output_padding, groups, dilation)


def prepack_conv_transpose3d(weight: QTensor, bias: Optional[npt.ArrayLike] = None,
                             stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                             output_padding: IntOrTuple = 0, groups: int = 1,
                             dilation: IntOrTuple = 1) -> PackedConvTranspose:
    return _prepack(3, weight, bias, stride, padding, output_padding, groups, dilation)


for _n, _f in ((1, prepack_conv_transpose1d), (2, prepack_conv_transpose2d),
               (3, prepack_conv_transpose3d)):
    _f.__doc__ = _PREPACK_DOC.format(n=_n, k=", " + ", ".join(
        "K" + d for d in "DHW"[3 - _n:]))


def _spread(input: QTensor, pack: PackedConvTranspose) -> QTensor:
    """The conv's input: `input` spread by the stride and padded (cropped) as the module
    docstring says, the gaps at the input's zero point; channels-last where the input is."""
    x = input._int
    n = pack.ndim
    kernel = pack._weight.shape[2:]
    starts, stops, firsts, sizes = [], [], [], []
    for i in range(n):
        L, s, d, k = x.shape[2 + i], pack.stride[i], pack.dilation[i], kernel[i]
        lo = d * (k - 1) - pack.padding[i]
        hi = lo + pack.output_padding[i]
        total = (L - 1) * s + 1 + lo + hi             # the padded (or cropped) length
        first = -(-max(-lo, 0) // s)                  # the first input index not cropped
        start = first * s + lo
        count = max(0, min(L - first, -(-(total - start) // s)))
        starts.append(start)
        stops.append(start + (count - 1) * s + 1 if count else start)
        firsts.append((first, first + count))
        sizes.append(total)
    _check.out_shape(x.shape[:2] + tuple(sizes), "input", 1)
    zp = input._zero_point
    if is_channels_last(x):
        buf = np.full((x.shape[0],) + tuple(sizes) + (x.shape[1],), zp, np.uint8)
        buf = np.moveaxis(buf, -1, 1)
    else:
        buf = np.full(x.shape[:2] + tuple(sizes), zp, np.uint8)
    dst = (slice(None), slice(None)) + tuple(
        slice(a, b, s) for a, b, s in zip(starts, stops, pack.stride))
    src = (slice(None), slice(None)) + tuple(slice(a, b) for a, b in firsts)
    buf[dst] = x[src]
    return QTensor._make(buf, quint8, input._scale, zp)


def _conv_transpose(ndim, input, weight, bias, stride, padding, output_padding, groups,
                    dilation, scale, zero_point, dtype):
    name = f"conv_transpose{ndim}d"
    _check.qtensor(input, "input", dtypes=[quint8], ndims=(ndim + 2,))
    if as_qdtype(dtype) is not quint8:
        raise TypeError(f"{name}: dtype must be quint8; got {as_qdtype(dtype).name}")
    if isinstance(weight, PackedConvTranspose):
        pack = weight
        if pack.ndim != ndim:
            raise ValueError(f"{name}: weight was packed by prepack_conv_transpose{pack.ndim}d")
        check_same_as_pack(name, ndim, bias, pack._conv._bias, groups, pack.groups,
                           (("stride", stride, 1, pack.stride, 1),
                            ("padding", padding, 0, pack.padding, 0),
                            ("output_padding", output_padding, 0, pack.output_padding, 0),
                            ("dilation", dilation, 1, pack.dilation, 1)))
    else:
        pack = PackedConvTranspose(ndim, weight, bias, stride, padding, output_padding, groups,
                                   dilation)
    if input.shape[1] != pack.in_channels:
        raise ValueError(f"{name}: input has {input.shape[1]} channels but weight expects "
                         f"{pack.in_channels}")
    for i, (L, s, p, d, k, op) in enumerate(zip(input.shape[2:], pack.stride, pack.padding,
                                                pack.dilation, pack._weight.shape[2:],
                                                pack.output_padding)):
        out = (L - 1) * s - 2 * p + d * (k - 1) + op + 1
        if out <= 0:
            raise ValueError(f"{name}: the output would have size {out} along spatial dim {i} "
                             f"(input {L}, stride {s}, padding {p}, kernel {k}, dilation {d}, "
                             f"output_padding {op})")
    if pack.route == "conv_transpose.shuffle":
        return _shuffle(input, pack, scale, zero_point)
    spread = _spread(input, pack)
    return _conv(ndim, False, spread, pack._conv, None, 1, 0, 1, 1, "zeros", scale,
                 zero_point, quint8)


_DOC = """Quantized {n}-D transposed convolution of a quint8 input with a qint8 weight.

    Parameters
    ----------
    input : quint8 QTensor (N, C_in{dims}), per-tensor
    weight : qint8 QTensor (C_in, C_out/groups{kdims}), per-tensor, or a PackedConvTranspose
        from prepack_conv_transpose{n}d (then bias and the parameters come from it)
    bias : float32 array (C_out,) or None
    stride, dilation : int or {n} ints, >= 1
    padding, output_padding : int or {n} ints, >= 0
    groups : int dividing C_in and C_out
    scale, zero_point : output quantization parameters
    dtype : quint8
    """


def conv_transpose1d(input: QTensor, weight: Union[QTensor, PackedConvTranspose],
                     bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1, scale: float = 1.0, zero_point: int = 0,
                     dtype: QDtypeLike = quint8) -> QTensor:
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation, scale, zero_point, dtype)


def conv_transpose2d(input: QTensor, weight: Union[QTensor, PackedConvTranspose],
                     bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1, scale: float = 1.0, zero_point: int = 0,
                     dtype: QDtypeLike = quint8) -> QTensor:
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation, scale, zero_point, dtype)


def conv_transpose3d(input: QTensor, weight: Union[QTensor, PackedConvTranspose],
                     bias: Optional[npt.ArrayLike] = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1, scale: float = 1.0, zero_point: int = 0,
                     dtype: QDtypeLike = quint8) -> QTensor:
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation, scale, zero_point, dtype)


for _n, _f in ((1, conv_transpose1d), (2, conv_transpose2d), (3, conv_transpose3d)):
    _dims = "DHW"[3 - _n:]
    _f.__doc__ = _DOC.format(n=_n, dims=", " + ", ".join(_dims),
                             kdims=", " + ", ".join("K" + d for d in _dims))
