"""Type aliases of the qops.nn and qops.quantization signatures (issue 24).

Imported by those modules under TYPE_CHECKING only: nothing here runs when qops is used.
"""
from __future__ import annotations

from typing import Any, Sequence, TypeVar, Union

import numpy as np
import numpy.typing as npt

from qops._qtensor import QTensor

#: a numpy array of any dtype (float layers compute in float32)
Array = npt.NDArray[Any]
#: what a float layer takes and returns: a float array, or a QTensor for the layers PyTorch
#: also runs on quantized tensors (relu, pools, upsampling, ...)
Tensor = Union[npt.NDArray[Any], QTensor]
#: an int for every spatial dimension, or one int for all of them
IntOrTuple = Union[int, Sequence[int]]
#: an adaptive pool's output size: one int, or one per spatial dim (None keeps the input's)
OutputSize = Union[int, Sequence[Union[int, None]]]
#: what an observer's forward returns: its input, unchanged
ArrayT = TypeVar("ArrayT")

__all__ = ["Array", "Tensor", "IntOrTuple", "OutputSize", "ArrayT", "np"]
