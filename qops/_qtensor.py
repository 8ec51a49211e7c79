"""QTensor: an integer array with its quantization parameters (torch's quantized tensor)."""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, NoReturn, Optional, Sequence, Union, overload

import numpy as np

from qops import _config, _layout
from qops import _qparams as qp
from qops._dtypes import (
    as_qdtype,
    per_channel_affine,
    per_tensor_affine,
    per_tensor_symmetric,
    qdtype_of_storage,
)
from qops._layout import elementwise

if TYPE_CHECKING:
    import numpy.typing as npt

    from qops._dtypes import QDtype, QDtypeLike, QScheme
    from qops._ops.reduce import ReductionResult

__all__ = ["QTensor", "quantize_per_tensor", "quantize_per_channel",
           "make_per_tensor_quantized_tensor", "make_per_channel_quantized_tensor",
           "dequantize", "is_quantized"]


class QTensor:
    """A quantized tensor: integer values `q` standing for `scale * (q - zero_point)`.

    Build one with `quantize_per_tensor`, `quantize_per_channel` or the `make_*` functions.
    The integer array may be a strided view; view ops return QTensors sharing it.
    """

    __slots__ = ("_int", "_dtype", "_qscheme", "_scale", "_zero_point", "_scales",
                 "_zero_points", "_axis", "__weakref__")
    # The per-tensor qparams (_scale, _zero_point) are None on a per-channel tensor and the
    # per-channel ones (_scales, _zero_points) None on a per-tensor one: _axis tells which.
    # They are typed as set, as the code reads them only after that test.
    _int: np.ndarray
    _dtype: QDtype
    _qscheme: QScheme
    _scale: float
    _zero_point: int
    _scales: npt.NDArray[np.float64]
    _zero_points: npt.NDArray[np.int64]
    _axis: Optional[int]
    is_quantized = True

    def __init__(self, *args: object, **kwargs: object) -> None:
        # an empty QTensor() would fail later on its missing fields, far from the cause
        raise TypeError("QTensor is not built directly; use qops.quantize_per_tensor, "
                        "quantize_per_channel or make_per_tensor/per_channel_quantized_tensor")

    @classmethod
    def _make(cls, data, dtype, scale=None, zero_point=None, scales=None, zero_points=None,
              axis=None, qscheme=None):
        # Trusted constructor: arguments already validated by the caller.
        t = cls.__new__(cls)
        t._int = data
        t._dtype = dtype
        t._scale = scale
        t._zero_point = zero_point
        t._scales = scales
        t._zero_points = zero_points
        t._axis = axis
        if qscheme is None:
            qscheme = per_channel_affine if axis is not None else per_tensor_affine
        t._qscheme = qscheme
        return t

    def _like(self, data, axis="same"):
        """A QTensor with this one's qparams around `data` (axis moved or dropped by a view)."""
        if self._axis is None:
            return QTensor._make(data, self._dtype, self._scale, self._zero_point,
                                 qscheme=self._qscheme)
        return QTensor._make(data, self._dtype, scales=self._scales, zero_points=self._zero_points,
                             axis=self._axis if axis == "same" else axis, qscheme=self._qscheme)

    # -- attributes ------------------------------------------------------------------------
    @property
    def dtype(self) -> QDtype:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._int.shape

    @property
    def ndim(self) -> int:
        return self._int.ndim

    def dim(self) -> int:
        return self._int.ndim

    @overload
    def size(self, dim: None = None) -> tuple[int, ...]: ...
    @overload
    def size(self, dim: int) -> int: ...

    def size(self, dim: Optional[int] = None) -> Union[tuple[int, ...], int]:
        """The shape, or the length of dimension `dim`."""
        if dim is None:
            return self._int.shape
        return self._int.shape[_axis_arg(dim, self.ndim, "dim")]

    def numel(self) -> int:
        return int(self._int.size)

    def stride(self) -> tuple[int, ...]:
        """Strides in elements, as torch reports them."""
        return tuple(s // self._int.itemsize for s in self._int.strides)

    def is_contiguous(self) -> bool:
        return bool(self._int.flags.c_contiguous)

    def qscheme(self) -> QScheme:
        return self._qscheme

    def q_scale(self) -> float:
        self._need_per_tensor("q_scale")
        return self._scale

    def q_zero_point(self) -> int:
        self._need_per_tensor("q_zero_point")
        return self._zero_point

    def q_per_channel_scales(self) -> npt.NDArray[np.float64]:
        self._need_per_channel("q_per_channel_scales")
        return self._scales.copy()

    def q_per_channel_zero_points(self) -> npt.NDArray[np.int64]:
        self._need_per_channel("q_per_channel_zero_points")
        return self._zero_points.copy()

    def q_per_channel_axis(self) -> int:
        self._need_per_channel("q_per_channel_axis")
        return self._axis  # type: ignore[return-value]  # an int: _need_per_channel checked

    @property
    def is_per_channel(self) -> bool:
        return self._axis is not None

    def _need_per_tensor(self, what):
        if self._axis is not None:
            raise TypeError(f"{what}() needs a per-tensor quantized tensor; this one is "
                            f"{self._qscheme.name}")

    def _need_per_channel(self, what):
        if self._axis is None:
            raise TypeError(f"{what}() needs a per-channel quantized tensor; this one is "
                            f"{self._qscheme.name}")

    # -- values ----------------------------------------------------------------------------
    def int_repr(self) -> np.ndarray:
        """A copy of the integer values (uint8, int8 or int32 numpy array)."""
        return self._int.copy()

    def dequantize(self) -> npt.NDArray[np.float32]:
        """The float32 values: D_sc per tensor, D_pc (double multiply) per channel."""
        kernels = _config.impl("quant")
        if self._axis is None:
            return elementwise(kernels.dequantize_per_tensor, self._int, qp.f32(self._scale),
                               self._zero_point)
        # a channels-last block is dequantized in memory order, its channel axis moved along
        raw, axis, undo = _layout.in_memory_order(self._int, self._axis)
        return undo(kernels.dequantize_per_channel(raw, self._scales,
                                                   self._zero_points.astype(np.int32), axis))

    def numpy(self) -> NoReturn:
        """Refuse: say which of int_repr() and dequantize() is wanted."""
        raise TypeError("a QTensor has no single numpy value; use int_repr() for the integers "
                        "or dequantize() for the float values")

    def __array__(self, *args, **kwargs):
        # np.asarray(qtensor) must not silently give integers or an object array.
        self.numpy()

    def equal(self, other: QTensor) -> bool:
        """True if `other` has the same dtype, scheme, qparams, shape and integer values."""
        if not isinstance(other, QTensor):
            raise TypeError(f"equal() compares two QTensors; got {type(other).__name__}")
        if self._dtype is not other._dtype or self._qscheme is not other._qscheme:
            return False
        if self.shape != other.shape:
            return False
        if self._axis is None:
            if self._scale != other._scale or self._zero_point != other._zero_point:
                return False
        elif (self._axis != other._axis or not np.array_equal(self._scales, other._scales)
              or not np.array_equal(self._zero_points, other._zero_points)):
            return False
        return bool(np.array_equal(self._int, other._int))

    def clone(self) -> QTensor:
        """A copy that owns its integer data (contiguous)."""
        t = self._like(_config.impl("quant").copy_raw(self._int))
        if t._axis is not None:
            t._scales = self._scales.copy()
            t._zero_points = self._zero_points.copy()
        return t

    def copy_(self, src: QTensor) -> QTensor:
        """Copy `src`'s values and qparams into this tensor, in place (shapes broadcast).

        `src` must have this tensor's dtype; this tensor takes its scheme (PyTorch refuses a
        copy between per-tensor and per-channel tensors; qops allows it). A per-channel `src`
        keeps its channel axis, counted in this tensor's dimensions; if that axis has size 1
        and is broadcast, its scale and zero point are repeated along it, so there is always
        one scale per channel.

        Parameters
        ----------
        src : QTensor whose shape broadcasts to this tensor's
        """
        if not isinstance(src, QTensor):
            raise TypeError(f"copy_() takes a QTensor; got {type(src).__name__}")
        if src._dtype is not self._dtype:
            raise TypeError(f"copy_(): dtype {src._dtype.name} does not match {self._dtype.name}")
        if not self._int.flags.writeable:
            raise ValueError("copy_(): this tensor is read-only (a view from expand(), or of a "
                             "read-only array); copy into a clone() instead")
        try:
            values = np.broadcast_to(src._int, self.shape)
        except ValueError:
            raise ValueError(f"copy_(): shape {src.shape} does not broadcast "
                             f"to {self.shape}") from None
        axis = scales = zps = None
        if src._axis is not None:
            # broadcasting prepends dimensions: the channel axis moves right by their number
            axis = src._axis + (self.ndim - src.ndim)
            c = self.shape[axis]
            scales, zps = src._scales.copy(), src._zero_points.copy()
            if scales.shape[0] != c:            # a channel axis of size 1, broadcast
                scales, zps = np.repeat(scales, c), np.repeat(zps, c)
        np.copyto(self._int, values)
        self._qscheme, self._scale, self._zero_point = src._qscheme, src._scale, src._zero_point
        # None qparams for the scheme not taken (see the attribute types above QTensor.__init__)
        self._scales, self._zero_points, self._axis = scales, zps, axis  # type: ignore[assignment]
        return self

    @overload
    def resize_(self, shape: Sequence[int], /) -> QTensor: ...
    @overload
    def resize_(self, *shape: int) -> QTensor: ...

    def resize_(self, *shape: Any) -> QTensor:
        """Give this tensor a new shape in place; new elements (if any) are zero raw values."""
        shape = _shape_arg(shape, "resize_", negative="none")
        if self._axis is not None:
            raise TypeError("resize_() is not supported on per-channel quantized tensors")
        n = math.prod(shape)            # Python ints: an int64 product could wrap to a small n
        if n > _MAX_BYTES // self._int.itemsize:
            raise ValueError(f"resize_(): shape {shape} has {n} elements, too many for one array")
        flat = np.ascontiguousarray(self._int).reshape(-1)
        if n <= flat.size:
            data = flat[:n].copy()
        else:
            try:
                data = np.zeros(n, dtype=flat.dtype)
            except MemoryError:
                raise MemoryError(f"resize_(): cannot allocate {n} elements for shape "
                                  f"{shape}") from None
            data[:flat.size] = flat
        self._int = data.reshape(shape)
        return self

    # -- views -----------------------------------------------------------------------------
    @overload
    def reshape(self, shape: Sequence[int], /) -> QTensor: ...
    @overload
    def reshape(self, *shape: int) -> QTensor: ...

    def reshape(self, *shape: Any) -> QTensor:
        """The same values in a new shape (a view when the layout allows it)."""
        shape = _shape_arg(shape, "reshape")
        try:
            data = self._int.reshape(shape)
        except ValueError:
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} "
                             f"into {shape}") from None
        return self._like(data, axis=self._reshaped_axis(data.shape, "reshape"))

    @overload
    def view(self, shape: Sequence[int], /) -> QTensor: ...
    @overload
    def view(self, *shape: int) -> QTensor: ...

    def view(self, *shape: Any) -> QTensor:
        """A view with a new shape; fails when the layout would need a copy, as torch's."""
        shape = _shape_arg(shape, "view")
        data = self._int.view()
        try:
            data.shape = np.empty(self.shape, dtype=[]).reshape(shape).shape
        except (AttributeError, ValueError):
            raise ValueError(f"view(): shape {shape} is not compatible with the size and strides "
                             f"of this tensor {self.shape}; use reshape()") from None
        return self._like(data, axis=self._reshaped_axis(data.shape, "view"))

    def _reshaped_axis(self, new_shape, what):
        if self._axis is None:
            return "same"
        # The channel axis survives a reshape only if it stays one whole dimension with the
        # same number of elements before it.
        before = int(np.prod(self.shape[:self._axis], dtype=np.int64))
        c = self.shape[self._axis]
        acc = 1
        for i, n in enumerate(new_shape):
            if acc == before and n == c:
                return i
            acc *= n
        raise ValueError(f"{what}(): the channel axis {self._axis} (size {c}) of a per-channel "
                         f"tensor must remain a dimension of its own; {self.shape} -> "
                         f"{tuple(new_shape)} merges or splits it")

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> QTensor:
        """Merge dimensions start_dim..end_dim into one."""
        nd = self._int.ndim or 1
        s = _axis_arg(start_dim, nd, "start_dim")
        e = _axis_arg(end_dim, nd, "end_dim")
        if self._int.ndim == 0:
            return self.reshape(1)
        if s > e:
            raise ValueError("flatten(): start_dim cannot come after end_dim")
        merged = math.prod(self.shape[s:e + 1])
        shape = self.shape[:s] + (merged,) + self.shape[e + 1:]
        if self._axis is not None and s <= self._axis <= e and s != e:
            raise ValueError(f"flatten(): cannot merge dims {s}..{e} of a per-channel tensor: "
                             f"they include its channel axis {self._axis}")
        return self.reshape(shape)

    def _no_stride_views(self, what):
        if self._axis is not None:
            raise TypeError(f"{what}() is not supported on per-channel quantized tensors "
                            f"(as in PyTorch: they cannot take new strides)")

    def transpose(self, dim0: int, dim1: int) -> QTensor:
        """Swap two dimensions (a view)."""
        self._no_stride_views("transpose")
        d0, d1 = _axis_arg(dim0, self.ndim, "dim0"), _axis_arg(dim1, self.ndim, "dim1")
        return self._like(np.swapaxes(self._int, d0, d1))

    @property
    def T(self) -> QTensor:
        self._no_stride_views("T")
        return self._like(self._int.T)

    @overload
    def permute(self, dims: Sequence[int], /) -> QTensor: ...
    @overload
    def permute(self, *dims: int) -> QTensor: ...

    def permute(self, *dims: Any) -> QTensor:
        """Reorder the dimensions (a view)."""
        self._no_stride_views("permute")
        dims = _shape_arg(dims, "permute", "dims", negative="any")
        if sorted(_axis_arg(d, self.ndim, "dims") for d in dims) != list(range(self.ndim)):
            raise ValueError(f"permute(): dims {dims} are not a permutation of {self.ndim} dims")
        return self._like(np.transpose(self._int, [_axis_arg(d, self.ndim, "dims") for d in dims]))

    @overload
    def expand(self, sizes: Sequence[int], /) -> QTensor: ...
    @overload
    def expand(self, *sizes: int) -> QTensor: ...

    def expand(self, *sizes: Any) -> QTensor:
        """Broadcast size-1 dimensions to `sizes` (-1 keeps a size), as a read-only view."""
        self._no_stride_views("expand")
        sizes = _shape_arg(sizes, "expand", "sizes", negative="-1")
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise ValueError(f"expand(): {len(sizes)} sizes for a tensor of {self.ndim} dims")
        if -1 in sizes[:lead]:
            raise ValueError(f"expand(): sizes={sizes}: -1 is not allowed in the new leading "
                             f"dimensions")
        target = tuple(self.shape[i - lead] if n == -1 else n for i, n in enumerate(sizes))
        try:
            return self._like(np.broadcast_to(self._int, target))
        except ValueError:
            raise ValueError(f"expand(): cannot expand shape {self.shape} to {target}") from None

    def squeeze(self, dim: Optional[int] = None) -> QTensor:
        """Drop dimensions of size 1 (all, or only `dim`)."""
        if dim is None:
            dims = tuple(i for i, n in enumerate(self.shape) if n == 1)
        else:
            d = _axis_arg(dim, self.ndim, "dim")
            # a 0-d tensor takes dim 0 or -1 and stays as it is, as in PyTorch
            dims = (d,) if self.ndim and self.shape[d] == 1 else ()
        if self._axis is not None:
            dims = tuple(d for d in dims if d != self._axis)
            axis = self._axis - sum(d < self._axis for d in dims)
            return self._like(np.squeeze(self._int, axis=dims), axis=axis)
        return self._like(np.squeeze(self._int, axis=dims))

    def unsqueeze(self, dim: int) -> QTensor:
        """Insert a dimension of size 1 at `dim`."""
        d = _axis_arg(dim, self.ndim + 1, "dim")
        axis = "same" if self._axis is None else self._axis + (d <= self._axis)
        return self._like(np.expand_dims(self._int, d), axis=axis)

    def split(self, split_size_or_sections: Union[int, Sequence[int]],
              dim: int = 0) -> tuple[QTensor, ...]:
        """Views of consecutive pieces along `dim`, as torch.Tensor.split.

        Parameters
        ----------
        split_size_or_sections : int (every piece that long, the last one shorter) or a list
            of piece lengths adding up to the size of `dim`
        dim : int
        """
        d = _axis_arg(dim, self.ndim, "dim")
        n = self.shape[d]
        if isinstance(split_size_or_sections, numbers.Integral) \
                and not isinstance(split_size_or_sections, bool):
            step = int(split_size_or_sections)
            if step < 1 and n:
                raise ValueError(f"split(): split_size must be >= 1; got {step}")
            sizes = [min(step, n - i) for i in range(0, n, step)] if n else [0]
        else:
            try:
                # an int took the branch above (mypy does not narrow by numbers.Integral)
                sizes = [int(v) for v in split_size_or_sections]  # type: ignore[union-attr]
            except TypeError:
                raise TypeError("split(): split_size_or_sections must be an int or a list of "
                                f"ints; got {split_size_or_sections!r}") from None
            if any(v < 0 for v in sizes) or sum(sizes) != n:
                raise ValueError(f"split(): sections {sizes} must be >= 0 and add up to the "
                                 f"size of dim {d} ({n})")
        out, start = [], 0
        for v in sizes:
            out.append(self[(slice(None),) * d + (slice(start, start + v),)])
            start += v
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[QTensor, ...]:
        """At most `chunks` views along `dim` of ceil(size / chunks) each, as torch.chunk."""
        if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral) or chunks < 1:
            raise ValueError(f"chunk(): chunks must be an int >= 1; got {chunks!r}")
        d = _axis_arg(dim, self.ndim, "dim")
        n = self.shape[d]
        return self.split(max(-(-n // int(chunks)), 1), d)

    def select(self, dim: int, index: int) -> QTensor:
        """The slice at `index` along `dim`, with that dimension removed."""
        if self.ndim == 0:
            raise ValueError("select() needs a tensor with at least one dimension")
        d = _axis_arg(dim, self.ndim, "dim")
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"select(): index must be an int; got {index!r}")
        n = self.shape[d]
        if not -n <= index < n:
            raise IndexError(f"select(): index={index} is out of range for dim {d} of size {n}")
        key = (slice(None),) * d + (int(index),)
        return self[key]

    def __getitem__(self, key: Any) -> QTensor:
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            rest = [k for k in key if k is not Ellipsis]
            n_used = sum(k is not None for k in rest)
            key = key[:i] + (slice(None),) * (self.ndim - n_used) + key[i + 1:]
        # a bool is an Integral but numpy reads it as a mask (a new axis), not an index
        basic = all(k is None or isinstance(k, slice)
                    or (isinstance(k, numbers.Integral) and not isinstance(k, bool)) for k in key)
        for k in key:
            if isinstance(k, numbers.Integral) and not isinstance(k, bool) \
                    and not -2**63 <= k < 2**63:  # type: ignore[operator]  # Integral vs int
                raise IndexError(f"index {k} is out of range")
        if self._axis is None:
            return self._like(self._int[key])
        if not basic:
            raise TypeError("per-channel quantized tensors take only basic indexing "
                            "(ints, slices, None, ...)")
        data = self._int[key]
        src = out = 0
        for k in key:
            if k is None:
                out += 1
                continue
            if src == self._axis:
                if isinstance(k, slice):
                    scales, zps = self._scales[k], self._zero_points[k]
                    return QTensor._make(data, self._dtype, scales=scales, zero_points=zps,
                                         axis=out, qscheme=self._qscheme)
                c = int(k)
                c = c + self.shape[self._axis] if c < 0 else c
                return QTensor._make(data, self._dtype, float(self._scales[c]),
                                     int(self._zero_points[c]),
                                     qscheme=per_tensor_symmetric if self._qscheme.symmetric
                                     else per_tensor_affine)
            src += 1
            out += not isinstance(k, numbers.Integral)
        return self._like(data, axis=out + (self._axis - src))

    def contiguous(self) -> QTensor:
        """This tensor if its integers are C-contiguous, else a contiguous copy."""
        if self._int.flags.c_contiguous:
            return self
        return self._like(self._cint())

    def _cint(self):
        """The integers as a C-contiguous array: themselves, or the backend's copy.

        Ops whose kernels need C order take their input through this: a channels-last block
        (NHWC memory seen as NCHW) is then transposed in tiles, not by numpy's strided copy,
        which walks the source a byte at a time.
        """
        if self._int.flags.c_contiguous:
            return self._int
        return _config.impl("quant").copy_raw(self._int)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # -- reductions and ordering (implemented in qops.functional) --------------------------
    @overload
    def max(self, dim: None = None, keepdim: bool = False) -> QTensor: ...
    @overload
    def max(self, dim: int, keepdim: bool = False) -> ReductionResult: ...

    def max(self, dim: Optional[int] = None,
            keepdim: bool = False) -> Union[QTensor, ReductionResult]:
        from qops import functional
        return functional.max(self, dim, keepdim)

    @overload
    def min(self, dim: None = None, keepdim: bool = False) -> QTensor: ...
    @overload
    def min(self, dim: int, keepdim: bool = False) -> ReductionResult: ...

    def min(self, dim: Optional[int] = None,
            keepdim: bool = False) -> Union[QTensor, ReductionResult]:
        from qops import functional
        return functional.min(self, dim, keepdim)

    def mean(self, dim: Union[int, Sequence[int], None] = None,
             keepdim: bool = False) -> QTensor:
        from qops import functional
        return functional.mean(self, dim, keepdim)

    def sort(self, dim: int = -1, descending: bool = False,
             stable: bool = False) -> tuple[QTensor, npt.NDArray[np.int64]]:
        from qops import functional
        return functional.sort(self, dim, descending, stable)

    def topk(self, k: int, dim: int = -1, largest: bool = True,
             sorted: bool = True) -> tuple[QTensor, npt.NDArray[np.int64]]:
        from qops import functional
        return functional.topk(self, k, dim, largest, sorted)

    def __repr__(self) -> str:
        values = np.array2string(self.dequantize(), precision=4, separator=", ", prefix="QTensor(")
        if self._axis is None:
            qparams = f"scale={self._scale!r}, zero_point={self._zero_point}"
        else:
            qparams = (f"scale={np.array2string(self._scales, separator=', ')}, "
                       f"zero_point={np.array2string(self._zero_points, separator=', ')}, "
                       f"axis={self._axis}")
        return (f"QTensor({values}, size={self.shape}, dtype={self._dtype!r}, "
                f"quantization_scheme={self._qscheme!r}, {qparams})")

    def __bool__(self) -> NoReturn:
        raise TypeError("the truth value of a QTensor is ambiguous; compare int_repr() or "
                        "dequantize() values")


_MAX_BYTES = 2 ** 63 - 1


def _shape_arg(shape, what, argname="shape", negative="one -1"):
    """Sizes given as ints or one sequence, as a tuple of ints.

    negative: "one -1" (reshape, view: at most one -1, inferred), "-1" (expand: -1 keeps a
    size), "none" (resize_) or "any" (permute's dims, checked by the caller).
    """
    # the usual call, plain ints in range (or one tuple of them): its checks in one pass (the
    # general ones below go through numbers.Integral, several times a small op's kernel)
    plain = shape[0] if len(shape) == 1 and type(shape[0]) is tuple else shape
    if negative == "one -1" and all(type(n) is int and -1 <= n <= _MAX_BYTES for n in plain):
        if plain.count(-1) > 1:
            raise ValueError(f"{what}(): {argname}={plain} has more than one -1")
        return plain
    if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
        try:
            shape = tuple(shape[0])
        except TypeError:
            raise TypeError(f"{what}(): {argname} must be ints or one sequence of ints; "
                            f"got {shape[0]!r}") from None
    if any(isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) for n in shape):
        raise TypeError(f"{what}(): {argname} must be ints; got {shape!r}")
    shape = tuple(int(n) for n in shape)
    if negative != "any":
        allowed = 0 if negative == "none" else -1
        bad = [n for n in shape if n < allowed]
        if bad:
            raise ValueError(f"{what}(): {argname}={shape} has the negative size {bad[0]}")
        if negative == "one -1" and shape.count(-1) > 1:
            raise ValueError(f"{what}(): {argname}={shape} has more than one -1")
        if any(n > _MAX_BYTES for n in shape):
            raise ValueError(f"{what}(): {argname}={shape} has a size above 2**63 - 1")
    return shape


def _axis_arg(axis, ndim, argname="axis"):
    """Normalize a possibly negative axis; error naming `argname` when out of range."""
    if type(axis) is int and -ndim <= axis < ndim:
        return axis % ndim
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{argname} must be an int; got {axis!r}")
    axis = int(axis)
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"{argname}={axis} is out of range for a tensor with {ndim} dims")
    return axis % max(ndim, 1)


def is_quantized(t: object) -> bool:
    """True if `t` is a QTensor."""
    return isinstance(t, QTensor)


def _float_input(x, argname="input"):
    """`x` as float32 (float64/float16 converted, as torch users do with .float())."""
    if isinstance(x, QTensor):
        raise TypeError(f"{argname} is already quantized; dequantize() it first")
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{argname} must be a float array to quantize; got dtype {a.dtype}")
    return a.astype(np.float32, copy=False)


def quantize_per_tensor(input: npt.ArrayLike, scale: float, zero_point: int,
                        dtype: QDtypeLike) -> QTensor:
    """Quantize a float array with one scale and zero point.

    Parameters
    ----------
    input : array_like of float (float32; float16/float64 are converted to float32)
    scale : float > 0 whose float32 rounding and its inverse are finite (<= 3.4028235e38)
    zero_point : int (Python or numpy integer; not bool or float) in the range of `dtype`
    dtype : qops.quint8, qops.qint8 or qops.qint32

    NaN becomes qmax for 8-bit types and INT32_MIN for qint32; +inf qmax; -inf qmin
    (what PyTorch 2.13 does).
    """
    dtype = as_qdtype(dtype)
    x = _float_input(input)
    scale = qp.check_scale(scale)
    zero_point = qp.check_zero_point(zero_point, dtype)
    data = elementwise(_config.impl("quant").quantize_per_tensor, x, qp.inv_scale(scale),
                       zero_point, dtype.storage)
    return QTensor._make(data, dtype, scale, zero_point)


def quantize_per_channel(input: npt.ArrayLike, scales: npt.ArrayLike, zero_points: npt.ArrayLike,
                         axis: int, dtype: QDtypeLike) -> QTensor:
    """Quantize a float array with one scale and zero point per index of `axis`.

    Parameters
    ----------
    input : array_like of float
    scales : 1-D array of float > 0, one per channel (each a finite float32, as `scale`)
    zero_points : 1-D array of int in the range of `dtype`, one per channel
    axis : int, the channel dimension
    dtype : qops.quint8, qops.qint8 or qops.qint32

    NaN becomes raw 0 for 8-bit types and INT32_MIN for qint32 (PyTorch 2.13's scalar path).
    """
    dtype = as_qdtype(dtype)
    x = _float_input(input)
    if x.ndim == 0:
        raise ValueError("quantize_per_channel needs an input with at least one dimension")
    axis = _axis_arg(axis, x.ndim, "axis")
    scales, zps = qp.check_channel_qparams(scales, zero_points, dtype, x.shape[axis])
    xm, axis_m, undo = _layout.in_memory_order(x, axis)
    data = undo(_config.impl("quant").quantize_per_channel(xm, qp.inv_scales(scales),
                                                           zps.astype(np.int32), axis_m,
                                                           dtype.storage))
    return QTensor._make(data, dtype, scales=scales, zero_points=zps, axis=axis)


def _int_input(int_array, argname="input"):
    a = np.asarray(int_array)
    if isinstance(int_array, QTensor) or not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{argname} must be an integer array (uint8, int8 or int32); "
                        f"got {getattr(a, 'dtype', type(int_array))}")
    return a, qdtype_of_storage(a.dtype)


def make_per_tensor_quantized_tensor(input: npt.ArrayLike, scale: float,
                                     zero_point: int) -> QTensor:
    """Wrap an integer array (uint8 -> quint8, int8 -> qint8, int32 -> qint32) with qparams.

    Parameters
    ----------
    input : integer ndarray (not copied)
    scale : float > 0 whose float32 rounding and its inverse are finite
    zero_point : int (not bool or float) in the dtype's range
    """
    data, dtype = _int_input(input)
    return QTensor._make(data, dtype, qp.check_scale(scale),
                         qp.check_zero_point(zero_point, dtype))


def make_per_channel_quantized_tensor(input: npt.ArrayLike, scales: npt.ArrayLike,
                                      zero_points: npt.ArrayLike, axis: int) -> QTensor:
    """Wrap an integer array with per-channel qparams along `axis`.

    Parameters
    ----------
    input : integer ndarray (not copied)
    scales, zero_points : 1-D arrays, one entry per index of `axis`
    axis : int
    """
    data, dtype = _int_input(input)
    if data.ndim == 0:
        raise ValueError("make_per_channel_quantized_tensor needs an input with at least one "
                         "dimension (the channel axis)")
    axis = _axis_arg(axis, data.ndim, "axis")
    scales, zps = qp.check_channel_qparams(scales, zero_points, dtype, data.shape[axis])
    return QTensor._make(data, dtype, scales=scales, zero_points=zps, axis=axis)


@overload
def dequantize(t: QTensor) -> npt.NDArray[np.float32]: ...
@overload
def dequantize(t: Union[list[QTensor], tuple[QTensor, ...]]) -> list[npt.NDArray[np.float32]]: ...


def dequantize(t: Union[QTensor, list[QTensor], tuple[QTensor, ...]]
               ) -> Union[npt.NDArray[np.float32], list[npt.NDArray[np.float32]]]:
    """The float32 values of QTensor `t` (or of each QTensor in a list)."""
    if isinstance(t, (list, tuple)):
        return [dequantize(x) for x in t]
    if not isinstance(t, QTensor):
        raise TypeError(f"dequantize() takes a QTensor; got {type(t).__name__}")
    return t.dequantize()
