"""torchvision's MViT (video) functions, for graphs captured from its models (float32).

torchvision marks these with `torch.fx.wrap` (their bodies branch on sizes); PyTorch's graph
mode leaves them in float, and qops computes here what torchvision's code computes, on numpy
float32 arrays. Where torchvision adds in place (`attn[..] += rel_pos`, `x.add_(shortcut)`),
these do too: MViT's attention calls `_add_shortcut` for its effect on x alone (its result
unused), so the graph's later reads of x must see the sum.
"""
import numpy as np

from qops.nn import _float_ops as fo

__all__ = ["unsqueeze_to", "squeeze_from", "add_rel_pos", "add_shortcut"]

F32 = np.float32


def unsqueeze_to(x, target_dim, expand_dim):
    """torchvision's `_unsqueeze`: x with a unit dim inserted at `expand_dim` if it has one dim
    fewer than `target_dim`; returns (x, x's original number of dims)."""
    nd = len(x.shape)
    if nd == target_dim - 1:
        x = x.unsqueeze(expand_dim) if hasattr(x, "q_scale") else np.expand_dims(x, expand_dim)
    elif nd != target_dim:
        raise ValueError(f"Unsupported input dimension {tuple(x.shape)}")
    return x, nd


def squeeze_from(x, target_dim, expand_dim, tensor_dim):
    """torchvision's `_squeeze`: undoes `unsqueeze_to` (the dim is dropped if it was added)."""
    if tensor_dim == target_dim - 1:
        return x.squeeze(expand_dim) if hasattr(x, "q_scale") else np.squeeze(x, expand_dim)
    return x


def _resized(table, d):
    """The relative-position table resized to d rows by linear interpolation (torchvision's
    `_interpolate`), or itself when it has d rows."""
    if table.shape[0] == d:
        return table
    return fo.interpolate(table.T[None], size=d, mode="linear")[0].T


def _distances(q, k):
    """Relative distance indices of q query and k key positions (int64 (q, k)), scaled as
    torchvision's where the two lengths differ."""
    q_ratio, k_ratio = max(k / q, 1.0), max(q / k, 1.0)
    rows = np.arange(q, dtype=F32)[:, None] * F32(q_ratio)
    cols = (np.arange(k, dtype=F32)[None, :] + F32(1.0 - k)) * F32(k_ratio)
    return (rows - cols).astype(F32).astype(np.int64)


def add_rel_pos(attn, q, q_thw, k_thw, rel_pos_h, rel_pos_w, rel_pos_t):
    """torchvision's `_add_rel_pos`: MViT-V2's decomposed relative position terms (height,
    width, time) added in place to the scores of every non-class-token (query, key) pair;
    returns attn.

    Parameters
    ----------
    attn : float32 array (B, heads, 1 + Tq*Hq*Wq, 1 + Tk*Hk*Wk), the scores
    q : float32 array (B, heads, 1 + Tq*Hq*Wq, dim), the queries
    q_thw, k_thw : the query and key grids (T, H, W)
    rel_pos_h, rel_pos_w, rel_pos_t : float32 tables (2 max(q, k) - 1 rows, dim) per axis
    """
    attn = _writable(attn, "attn")
    q = fo.as_f32(q, "q")
    q_t, q_h, q_w = (int(v) for v in q_thw)
    k_t, k_h, k_w = (int(v) for v in k_thw)
    rh = _resized(fo.as_f32(rel_pos_h), 2 * max(q_h, k_h) - 1)[_distances(q_h, k_h)]
    rw = _resized(fo.as_f32(rel_pos_w), 2 * max(q_w, k_w) - 1)[_distances(q_w, k_w)]
    rt = _resized(fo.as_f32(rel_pos_t), 2 * max(q_t, k_t) - 1)[_distances(q_t, k_t)]
    b, heads, _, dim = q.shape
    r_q = q[:, :, 1:].reshape(b, heads, q_t, q_h, q_w, dim)
    rel_h = fo.einsum("bythwc,hkc->bythwk", r_q, rh)
    rel_w = fo.einsum("bythwc,wkc->bythwk", r_q, rw)
    # time as one product per query time: (Tq, B*heads*Hq*Wq, dim) @ (Tq, dim, Tk)
    r_t = r_q.transpose(2, 0, 1, 3, 4, 5).reshape(q_t, b * heads * q_h * q_w, dim)
    rel_t = fo.matmul(r_t, rt.transpose(0, 2, 1)).transpose(1, 0, 2)
    rel_t = rel_t.reshape(b, heads, q_h, q_w, q_t, k_t).transpose(0, 1, 4, 2, 3, 5)
    rel = (rel_h[:, :, :, :, :, None, :, None] + rel_w[:, :, :, :, :, None, None, :]
           + rel_t[:, :, :, :, :, :, None, None]).reshape(b, heads, q_t * q_h * q_w,
                                                         k_t * k_h * k_w)
    attn[:, :, 1:, 1:] += rel
    return attn


def add_shortcut(x, shortcut, residual_with_cls_embed):
    """torchvision's `_add_shortcut`: x += shortcut in place, on every token or (without
    `residual_with_cls_embed`) on all but the class token; returns x."""
    x = _writable(x, "x")
    shortcut = fo.as_f32(shortcut, "shortcut")
    if residual_with_cls_embed:
        x += shortcut
    else:
        x[:, :, 1:, :] += shortcut[:, :, 1:, :]
    return x


def _writable(x, name):
    """x itself, to be added to in place (a float32 array the graph computed)."""
    if not (isinstance(x, np.ndarray) and x.dtype == F32 and x.flags.writeable):
        raise TypeError(f"{name} must be a writable float32 array (torchvision adds to it in "
                        f"place); got {type(x).__name__}")
    return x
