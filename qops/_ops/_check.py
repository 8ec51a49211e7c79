"""Argument checks shared by the op wrappers: each error names the argument."""
import numbers

import numpy as np

from qops._dtypes import as_qdtype
from qops._qtensor import QTensor


def qtensor(x, argname="input", dtypes=None, per_tensor=True, min_ndim=None, ndims=None):
    """Check `x` is a QTensor (per-tensor unless allowed, of `dtypes`, of `ndims` dims)."""
    if not isinstance(x, QTensor):
        raise TypeError(f"{argname} must be a quantized tensor (QTensor); got {type(x).__name__}")
    if per_tensor and x._axis is not None:
        raise TypeError(f"{argname} must be per-tensor quantized; got {x.qscheme().name}")
    if dtypes is not None and x._dtype not in dtypes:
        names = [as_qdtype(d).name for d in dtypes]
        if x.dtype.name not in names:
            raise TypeError(f"{argname} must have dtype {' or '.join(names)}; got {x.dtype.name}")
    if ndims is not None and x.ndim not in ndims:
        raise ValueError(f"{argname} must have {' or '.join(map(str, ndims))} dims; got shape {x.shape}")
    if min_ndim is not None and x.ndim < min_ndim:
        raise ValueError(f"{argname} must have at least {min_ndim} dims; got shape {x.shape}")
    return x


def integer(v, argname, minimum=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{argname} must be an int; got {v!r}")
    v = int(v)
    if minimum is not None and v < minimum:
        raise ValueError(f"{argname} must be >= {minimum}; got {v}")
    return v


def int_tuple(v, n, argname, minimum=None):
    """`v` as a tuple of `n` ints (a single int is repeated), each >= minimum."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise ValueError(f"{argname} must be an int or {n} ints; got {v!r}")
        return tuple(integer(x, argname, minimum) for x in v)
    if isinstance(v, np.ndarray):
        return int_tuple(v.tolist(), n, argname, minimum)
    return (integer(v, argname, minimum),) * n


def real(v, argname):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{argname} must be a real number; got {v!r}")
    return float(v)


def float_array(x, argname="input"):
    if isinstance(x, QTensor):
        raise TypeError(f"{argname} must be a float array, not a QTensor")
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{argname} must be a float array; got dtype {a.dtype}")
    return a.astype(np.float32, copy=False)
