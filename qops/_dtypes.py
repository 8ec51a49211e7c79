"""Quantized dtypes and quantization schemes (the names mirror torch's)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["QDtype", "quint8", "qint8", "qint32", "QScheme", "per_tensor_affine",
           "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
           "as_qdtype"]


class QDtype:
    """A quantized integer type: its storage dtype and representable range."""

    __slots__ = ("name", "storage", "qmin", "qmax")
    name: str
    storage: np.dtype
    qmin: int
    qmax: int

    def __init__(self, name: str, storage: npt.DTypeLike, qmin: int, qmax: int) -> None:
        self.name = name
        self.storage = np.dtype(storage)
        self.qmin = qmin
        self.qmax = qmax

    def __repr__(self) -> str:
        return f"qops.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (as_qdtype, (self.name,))


quint8 = QDtype("quint8", np.uint8, 0, 255)
qint8 = QDtype("qint8", np.int8, -128, 127)
qint32 = QDtype("qint32", np.int32, -(2 ** 31), 2 ** 31 - 1)
_QDTYPES = {d.name: d for d in (quint8, qint8, qint32)}
_BY_STORAGE = {d.storage: d for d in (quint8, qint8, qint32)}

#: What a `dtype` argument takes: a QDtype, its name ("qint8") or a torch dtype (torch.qint8,
#: typed Any: torch is not a dependency).
QDtypeLike = Union[QDtype, str, Any]


def as_qdtype(dtype: QDtypeLike, argname: str = "dtype") -> QDtype:
    """Return the QDtype named by `dtype` (a QDtype, its name, or a torch dtype)."""
    if isinstance(dtype, QDtype):
        return dtype
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if name in _QDTYPES:
        return _QDTYPES[name]
    raise TypeError(f"{argname} must be one of qops.quint8, qops.qint8, qops.qint32; got {dtype!r}")


def qdtype_of_storage(storage: npt.DTypeLike) -> QDtype:
    """The QDtype whose integer storage is numpy dtype `storage`."""
    try:
        return _BY_STORAGE[np.dtype(storage)]
    except KeyError:
        raise TypeError(f"integer data must be uint8, int8 or int32; "
                        f"got {np.dtype(storage)}") from None


class QScheme:
    """A quantization scheme: per tensor or per channel, affine or symmetric."""

    __slots__ = ("name", "per_channel", "symmetric")
    name: str
    per_channel: bool
    symmetric: bool

    def __init__(self, name: str, per_channel: bool, symmetric: bool) -> None:
        self.name = name
        self.per_channel = per_channel
        self.symmetric = symmetric

    def __repr__(self) -> str:
        return f"qops.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_scheme, (self.name,))


per_tensor_affine = QScheme("per_tensor_affine", False, False)
per_channel_affine = QScheme("per_channel_affine", True, False)
per_tensor_symmetric = QScheme("per_tensor_symmetric", False, True)
per_channel_symmetric = QScheme("per_channel_symmetric", True, True)
per_channel_affine_float_qparams = QScheme("per_channel_affine_float_qparams", True, False)
_SCHEMES = {s.name: s for s in (per_tensor_affine, per_channel_affine, per_tensor_symmetric,
                                per_channel_symmetric, per_channel_affine_float_qparams)}


def _scheme(name: str) -> QScheme:
    return _SCHEMES[name]


#: What a `qscheme` argument takes: a QScheme, its name or a torch qscheme (typed Any).
QSchemeLike = Union[QScheme, str, Any]


def as_qscheme(qscheme: QSchemeLike, argname: str = "qscheme") -> QScheme:
    """Return the QScheme named by `qscheme` (a QScheme, its name, or a torch qscheme)."""
    if isinstance(qscheme, QScheme):
        return qscheme
    name = qscheme if isinstance(qscheme, str) else str(qscheme).replace("torch.", "")
    if name in _SCHEMES:
        return _SCHEMES[name]
    raise TypeError(f"{argname} must be a qops quantization scheme; got {qscheme!r}")
