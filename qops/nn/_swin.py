"""torchvision's Swin Transformer functions, for graphs captured from its models (float32).

torchvision marks these with `torch.fx.wrap`: a trace records one call to each, because
their bodies branch on the feature map's size (pad to whole windows, no shift where a window
covers the map). PyTorch's graph mode leaves them in float; so does qops, which computes
here what torchvision's code computes, step by step, on numpy float32 arrays. Results agree
with PyTorch's within float32 rounding (sums in another order), not bit for bit.
"""
import itertools

import numpy as np

from qops.nn import _float_ops as fo

__all__ = ["patch_merging_pad", "relative_position_bias", "shifted_window_attention",
           "window_and_shift_size", "pad_size_3d", "relative_position_bias_3d",
           "shifted_window_attention_3d"]

F32 = np.float32


def _float(x, name):
    from qops._qtensor import QTensor
    if isinstance(x, QTensor):
        raise TypeError(f"{name} takes float arrays (PyTorch's graph mode leaves it in float "
                        f"too); dequantize() its input")
    return fo.as_f32(x)


def patch_merging_pad(x):
    """torchvision's `_patch_merging_pad`: (..., H, W, C) padded to even H and W, then its
    2x2 neighbours side by side in channels: (..., H/2, W/2, 4C) in the order (0,0), (1,0),
    (0,1), (1,1).

    Parameters
    ----------
    x : float32 array (..., H, W, C)
    """
    x = _float(x, "patch_merging_pad")
    h, w = x.shape[-3], x.shape[-2]
    x = fo.pad(x, [(0, h % 2), (0, w % 2), (0, 0)])
    return np.concatenate([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :],
                           x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], axis=-1)


def relative_position_bias(table, index, window_size):
    """torchvision's `_get_relative_position_bias`: the learned bias of each (query, key)
    pair of a window, (1, heads, N, N) with N = window_size[0] * window_size[1].

    Parameters
    ----------
    table : float32 array (positions, heads), one row per relative offset
    index : integer array (N * N,), the row of each pair
    window_size : two ints
    """
    table = _float(table, "relative_position_bias")
    n = int(window_size[0]) * int(window_size[1])
    bias = table[np.asarray(index, np.int64)].reshape(n, n, -1)
    return np.ascontiguousarray(bias.transpose(2, 0, 1))[None]


def window_and_shift_size(shift_size, size, window_size):
    """torchvision's 3-D `_get_window_and_shift_size`: where the map is no larger than the
    window, the window shrinks to the map and that dim is not shifted; (window, shift)."""
    window, shift = [int(v) for v in window_size], [int(v) for v in shift_size]
    for i, n in enumerate(size):
        if n <= window[i]:
            window[i], shift[i] = int(n), 0
    return window, shift


def pad_size_3d(size, patch_size):
    """torchvision's `_compute_pad_size_3d`: what pads each of three dims to whole patches."""
    return tuple((int(p) - int(n) % int(p)) % int(p) for n, p in zip(size, patch_size))


def relative_position_bias_3d(table, index, window_size):
    """torchvision's 3-D `_get_relative_position_bias`: (1, heads, V, V) for the window's
    V = its volume, read from the (full window's) square `index`.

    Parameters
    ----------
    table : float32 array (positions, heads)
    index : integer array (V_max, V_max)
    window_size : three ints (the window in use, no larger than the full one)
    """
    table = _float(table, "relative_position_bias_3d")
    v = int(np.prod([int(w) for w in window_size]))
    bias = table[np.asarray(index, np.int64)[:v, :v].reshape(-1)].reshape(v, v, -1)
    return np.ascontiguousarray(bias.transpose(2, 0, 1))[None]


def _window_mask(padded, window, shift):
    """The additive mask of shifted windows: -100 between tokens that came from different
    regions of the map before the cyclic shift, 0 within one; (windows, N, N)."""
    n = len(padded)
    region = np.zeros(padded, F32)
    cuts = [((0, -window[i]), (-window[i], -shift[i]), (-shift[i], None)) for i in range(n)]
    for count, part in enumerate(itertools.product(*cuts)):
        region[tuple(slice(a, b) for a, b in part)] = count
    region = _partition(region[None, ..., None], window)[..., 0]
    diff = region[:, None, :] - region[:, :, None]
    return np.where(diff != 0, F32(-100.0), F32(0.0))


def _partition(x, window):
    """(B, *S, C) -> (B * windows, tokens, C): each window's tokens in row-major order."""
    n = len(window)
    b, c = x.shape[0], x.shape[-1]
    grid = [x.shape[1 + i] // window[i] for i in range(n)]
    x = x.reshape([b] + [v for i in range(n) for v in (grid[i], window[i])] + [c])
    x = x.transpose([0] + [1 + 2 * i for i in range(n)] + [2 + 2 * i for i in range(n)]
                    + [1 + 2 * n])
    return x.reshape(-1, int(np.prod(window)), c)


def _unpartition(x, window, padded, b):
    """The inverse of `_partition`: (B * windows, tokens, C) -> (B, *padded, C)."""
    n = len(window)
    grid = [padded[i] // window[i] for i in range(n)]
    x = x.reshape([b] + grid + list(window) + [x.shape[-1]])
    x = x.transpose([0] + [v for i in range(n) for v in (1 + i, 1 + n + i)] + [1 + 2 * n])
    return x.reshape([b] + list(padded) + [x.shape[-1]])


def _window_attention(x, qkv_weight, proj_weight, relative_position_bias, window, heads,
                      shift, qkv_bias, proj_bias, logit_scale):
    """Windowed multi-head self-attention of (B, *S, C) with `window` and `shift` per dim
    (torchvision's 2-D and 3-D functions, from the padding on)."""
    n = len(window)
    b, size, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    pads = [(window[i] - size[i] % window[i]) % window[i] for i in range(n)]
    x = fo.pad(x, [(0, p) for p in pads] + [(0, 0)])
    padded = x.shape[1:-1]
    shifted = sum(shift) > 0
    axes = tuple(range(1, n + 1))
    if shifted:
        x = np.roll(x, tuple(-v for v in shift), axis=axes)
    x = _partition(x, window)
    bw, tokens = x.shape[0], x.shape[1]
    if logit_scale is not None and qkv_bias is not None:
        # V2 has no key bias
        qkv_bias = np.array(qkv_bias, F32)
        third = qkv_bias.size // 3
        qkv_bias[third:2 * third] = 0
    qkv = fo.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.reshape(bw, tokens, 3, heads, c // heads).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if logit_scale is not None:
        # V2's cosine attention, its temperature capped at 100
        attn = fo.matmul(fo.normalize(q, dim=-1), fo.normalize(k, dim=-1).swapaxes(-2, -1))
        attn = attn * np.exp(np.minimum(fo.as_f32(logit_scale), F32(np.log(100.0))))
    else:
        attn = fo.matmul(q * F32((c // heads) ** -0.5), k.swapaxes(-2, -1))
    attn = attn + fo.as_f32(relative_position_bias)
    if shifted:
        mask = _window_mask(padded, window, shift)
        windows = mask.shape[0]
        attn = attn.reshape(b, windows, heads, tokens, tokens) + mask[None, :, None]
        attn = attn.reshape(-1, heads, tokens, tokens)
    attn = fo.softmax(attn, -1)
    x = fo.matmul(attn, v).swapaxes(1, 2).reshape(bw, tokens, c)
    x = fo.linear(x, proj_weight, proj_bias)
    x = _unpartition(x, window, padded, b)
    if shifted:
        x = np.roll(x, tuple(shift), axis=axes)
    return np.ascontiguousarray(x[(slice(None),) + tuple(slice(0, v) for v in size)])


def _no_training_dropout(name, training, attention_dropout, dropout):
    if training and (attention_dropout > 0 or dropout > 0):
        raise ValueError(f"{name} with dropout in training mode is not supported by a captured "
                         f"graph; call model.eval() first")


def shifted_window_attention(input, qkv_weight, proj_weight, relative_position_bias,
                             window_size, num_heads, shift_size, attention_dropout=0.0,
                             dropout=0.0, qkv_bias=None, proj_bias=None, logit_scale=None,
                             training=True):
    """torchvision's `shifted_window_attention` (Swin V1; V2 with `logit_scale`): multi-head
    self-attention within windows of the (cyclically shifted) map, with relative position
    bias; (B, H, W, C) in and out.

    Parameters
    ----------
    input : float32 array (B, H, W, C)
    qkv_weight, proj_weight : float32 (3C, C) and (C, C); qkv_bias, proj_bias : or None
    relative_position_bias : float32 (1, heads, N, N), added to the scores
    window_size, shift_size : two ints each
    num_heads : int dividing C
    attention_dropout, dropout : dropout ratios (eval mode only: training must be False
        where they are not 0)
    logit_scale : float32 (heads, 1, 1) for V2's cosine attention, or None
    """
    x = _float(input, "shifted_window_attention")
    _no_training_dropout("shifted_window_attention", training, attention_dropout, dropout)
    window = [int(v) for v in window_size]
    shift = [int(v) for v in shift_size]
    for i in range(2):
        # a window as large as the (padded) map: nothing to shift
        if window[i] >= -(-x.shape[1 + i] // window[i]) * window[i]:
            shift[i] = 0
    return _window_attention(x, qkv_weight, proj_weight, relative_position_bias, window,
                             int(num_heads), shift, qkv_bias, proj_bias, logit_scale)


def shifted_window_attention_3d(input, qkv_weight, proj_weight, relative_position_bias,
                                window_size, num_heads, shift_size, attention_dropout=0.0,
                                dropout=0.0, qkv_bias=None, proj_bias=None, training=True):
    """torchvision's `shifted_window_attention_3d` (Video Swin): as the 2-D function on
    (B, T, H, W, C); window and shift come adapted to the map (`window_and_shift_size`)."""
    x = _float(input, "shifted_window_attention_3d")
    _no_training_dropout("shifted_window_attention_3d", training, attention_dropout, dropout)
    return _window_attention(x, qkv_weight, proj_weight, relative_position_bias,
                             [int(v) for v in window_size], int(num_heads),
                             [int(v) for v in shift_size], qkv_bias, proj_bias, None)
