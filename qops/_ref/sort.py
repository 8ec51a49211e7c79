"""Sort and top-k along the last axis of raw integer rows.

Contract: uint8/int8/int32 rows in; values of the same dtype and int64 indices out. Raw order
equals real-value order (scale > 0). Tie rule, in every direction: equal values keep
increasing index order (a stable sort of the keys, or of their negation when descending).
"""
import numpy as np


def _order(x, descending):
    # Negating in int64 keeps stability: equal values stay in increasing index order.
    key = -x.astype(np.int64) if descending else x
    return np.argsort(key, axis=-1, kind="stable")


def sort(x, descending):
    """Sort each row of `x`: (values, int64 indices), ties by increasing index.

    Parameters
    ----------
    x : uint8/int8/int32 ndarray (M, n)
    descending : bool
    """
    idx = _order(x, descending).astype(np.int64)
    return np.take_along_axis(x, idx, axis=-1), idx


def topk(x, k, largest):
    """The k largest (or smallest) of each row of `x`, sorted, ties by increasing index.

    Parameters
    ----------
    x : uint8/int8/int32 ndarray (M, n)
    k : int, 0 <= k <= n
    largest : bool
    """
    idx = _order(x, largest)[:, :k].astype(np.int64)
    return np.take_along_axis(x, idx, axis=-1), idx
