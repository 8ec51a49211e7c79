"""Reductions on raw 8-bit values: max, min (with first-occurrence indices) and mean
(docs/semantics.md §4).

Contract: uint8/int8 in, same dtype out (indices int64). Inputs arrive as (outer, n, inner)
arrays reduced over the middle axis. max/min compare raw values (the real order, since
scale > 0); mean is rint(f32(f32(sum of raw values) / f32(n))) on raw values, half to even,
no zero-point correction needed (the mean of q is zp + the mean of q - zp).
"""
import numpy as np

F32 = np.float32


def max_all(q):
    """The largest raw value of a non-empty array, as a 0-d array of q's dtype.

    Parameters
    ----------
    q : uint8 or int8 ndarray, at least one element
    """
    return np.asarray(q.max(), dtype=q.dtype)


def min_all(q):
    """The smallest raw value of a non-empty array, as a 0-d array of q's dtype.

    Parameters
    ----------
    q : uint8 or int8 ndarray, at least one element
    """
    return np.asarray(q.min(), dtype=q.dtype)


def max_dim(q):
    """Largest raw value over axis 1 of (outer, n, inner) and the index of its first occurrence.

    Parameters
    ----------
    q : uint8 or int8 ndarray of shape (outer, n, inner), n >= 1

    Returns
    -------
    values : (outer, inner) array of q's dtype
    indices : (outer, inner) int64 array
    """
    return q.max(axis=1), q.argmax(axis=1).astype(np.int64)


def min_dim(q):
    """Smallest raw value over axis 1 of (outer, n, inner) and the index of its first occurrence.

    Parameters
    ----------
    q : uint8 or int8 ndarray of shape (outer, n, inner), n >= 1

    Returns
    -------
    values : (outer, inner) array of q's dtype
    indices : (outer, inner) int64 array
    """
    return q.min(axis=1), q.argmin(axis=1).astype(np.int64)


def mean_dims(q):
    """Mean over axis 1 of (outer, n, inner) on raw values: rint(f32(f32(sum) / f32(n))).

    Parameters
    ----------
    q : uint8 or int8 ndarray of shape (outer, n, inner), n >= 1 unless the result is empty
    """
    n = q.shape[1]
    total = q.astype(np.int64).sum(axis=1)
    return np.rint(total.astype(F32) / F32(n)).astype(q.dtype)
