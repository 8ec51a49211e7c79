"""Quantize-family public ops beyond those on qops itself: requantize."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from qops import _config
from qops import _qparams as qp
from qops._dtypes import as_qdtype
from qops._layout import elementwise
from qops._ops import _check
from qops._qtensor import QTensor

if TYPE_CHECKING:
    from qops._dtypes import QDtypeLike

__all__ = ["requantize"]


def requantize(input: QTensor, scale: float, zero_point: int,
               dtype: Optional[QDtypeLike] = None) -> QTensor:
    """Re-express a per-tensor QTensor with new qparams (and dtype): quantize(dequantize(x)).

    Parameters
    ----------
    input : per-tensor QTensor
    scale : float > 0, the new scale (a finite float32, its inverse too)
    zero_point : int, the new zero point (not bool or float)
    dtype : the new dtype (default: the input's)
    """
    _check.qtensor(input, "input")
    dtype = input.dtype if dtype is None else as_qdtype(dtype)
    scale = qp.check_scale(scale)
    zero_point = qp.check_zero_point(zero_point, dtype)
    data = elementwise(_config.impl("quant").requantize_per_tensor, input._int,
                       qp.f32(input._scale), input._zero_point, qp.inv_scale(scale), zero_point,
                       dtype.storage)
    return QTensor._make(data, dtype, scale, zero_point)
