"""Argument checks shared by the op wrappers: each error names the argument."""
import numbers
import os

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
        raise ValueError(f"{argname} must have {' or '.join(map(str, ndims))} dims; "
                         f"got shape {x.shape}")
    if min_ndim is not None and x.ndim < min_ndim:
        raise ValueError(f"{argname} must have at least {min_ndim} dims; got shape {x.shape}")
    return x


#: The largest size, kernel size, padding or dilation of one dim: some kernels take them as
#: C ints (the channels-last pools), and a product of two such values, plus a third, stays
#: far inside the int64 of Py_ssize_t whatever the caller passes.
MAX_DIM = (1 << 31) - 1
#: The largest int a kernel argument can hold (Py_ssize_t): a stride wider than the input
#: is legal (one output) and may be this large.
MAX_INDEX = (1 << 63) - 1


def integer(v, argname, minimum=None, maximum=None):
    """`v` as a Python int in [minimum, maximum] (None: unbounded); bools are refused."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{argname} must be an int; got {v!r}")
    v = int(v)
    if minimum is not None and v < minimum:
        raise ValueError(f"{argname} must be >= {minimum}; got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{argname} must be <= {maximum}; got {v}")
    return v


def int_tuple(v, n, argname, minimum=None, maximum=MAX_INDEX):
    """`v` as a tuple of `n` ints (a single int is repeated), each in [minimum, maximum]."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise ValueError(f"{argname} must be an int or {n} ints; got {v!r}")
        return tuple(integer(x, argname, minimum, maximum) for x in v)
    if isinstance(v, np.ndarray):
        return int_tuple(v.tolist(), n, argname, minimum, maximum)
    return (integer(v, argname, minimum, maximum),) * n


_SMALL_BYTES = 1 << 28        # below this an allocation is not worth asking the OS about


def memory_bytes():
    """The bytes an allocation can get now: the least of physical memory, the memory the
    kernel reports available (MemAvailable plus free swap) and the address-space limit."""
    limits = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        pass
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f if ":" in line)
        limits.append((int(info["MemAvailable"].split()[0])
                       + int(info.get("SwapFree", "0 kB").split()[0])) * 1024)
    except (OSError, KeyError, ValueError):
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    except (ImportError, OSError, ValueError):
        pass
    limits = [v for v in limits if v > 0]
    return min(limits) if limits else 1 << 62


def out_shape(shape, argname, itemsize=1):
    """Check an array shape an op is about to allocate (its output, or a padded copy).

    Each dim must be at most MAX_DIM and the whole must fit the memory available now: a
    larger request either fails in numpy with a message naming no argument, or is
    overcommitted and gets the process killed when it is written. `argname` names the
    argument(s) that sized it.
    """
    for d in shape:
        if d > MAX_DIM:
            raise ValueError(f"{argname} gives a dim of {d} (shape {tuple(shape)}); the largest "
                             f"is {MAX_DIM}")
    nbytes = itemsize
    for d in shape:
        nbytes *= d
    if nbytes > _SMALL_BYTES:
        avail = memory_bytes()
        if nbytes > avail:
            raise ValueError(f"{argname} gives shape {tuple(shape)}: {nbytes} bytes, more than "
                             f"the memory available ({avail} bytes)")
    return shape


def real(v, argname):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{argname} must be a real number; got {v!r}")
    try:
        return float(v)
    except OverflowError:
        raise ValueError(f"{argname} must be finite; got a number too large for a "
                         f"float") from None


#: float32's dtype object: `a.dtype is F32_DTYPE` is the cheap test for a native float32 array
F32_DTYPE = np.dtype(np.float32)


def float_array(x, argname="input"):
    if type(x) is np.ndarray and x.dtype is F32_DTYPE:
        return x
    if isinstance(x, QTensor):
        raise TypeError(f"{argname} must be a float array, not a QTensor")
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{argname} must be a float array; got dtype {a.dtype}")
    return a.astype(np.float32, copy=False)
