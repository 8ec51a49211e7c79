"""Folding batch norm into the preceding conv or linear (torch.nn.utils.fusion, float32)."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from qops.nn._typing import Array
    from qops.nn.module import Module

F32 = np.float32

__all__ = ["fuse_conv_bn_weights", "fuse_conv_bn_eval", "fuse_linear_bn_weights",
           "fuse_linear_bn_eval"]


def _rsqrt(v):
    # torch.rsqrt on float32: 1 / sqrt, each correctly rounded to float32.
    return (F32(1) / np.sqrt(np.asarray(v, F32))).astype(F32)


def fuse_conv_bn_weights(conv_w: npt.ArrayLike, conv_b: npt.ArrayLike, bn_rm: npt.ArrayLike,
                         bn_rv: npt.ArrayLike, bn_eps: float, bn_w: npt.ArrayLike,
                         bn_b: npt.ArrayLike, transpose: bool = False) -> tuple[Array, Array]:
    """Folded (weight, bias) of conv followed by eval-mode batch norm, in float32.

    Parameters
    ----------
    conv_w : float32 array (O, C/groups, *k)
    conv_b : float32 array (O,) or None (zeros)
    bn_rm, bn_rv : running mean and variance (O,)
    bn_eps : float
    bn_w, bn_b : batch norm affine weight and bias (O,), or None (ones / zeros)
    transpose : the conv is transposed (channels on dim 1)
    """
    conv_w = np.asarray(conv_w, F32)
    o = conv_w.shape[1] if transpose else conv_w.shape[0]
    rm, rv = np.asarray(bn_rm, F32), np.asarray(bn_rv, F32)
    conv_b = np.zeros(o, F32) if conv_b is None else np.asarray(conv_b, F32)
    bn_w = np.ones(o, F32) if bn_w is None else np.asarray(bn_w, F32)
    bn_b = np.zeros(o, F32) if bn_b is None else np.asarray(bn_b, F32)
    r = _rsqrt(rv + F32(bn_eps))
    shape = [1] * conv_w.ndim
    shape[1 if transpose else 0] = -1
    w = (conv_w * (bn_w * r).reshape(shape)).astype(F32)
    b = ((conv_b - rm) * r * bn_w + bn_b).astype(F32)
    return w, b


def fuse_linear_bn_weights(linear_w: npt.ArrayLike, linear_b: npt.ArrayLike, bn_rm: npt.ArrayLike,
                           bn_rv: npt.ArrayLike, bn_eps: float, bn_w: npt.ArrayLike,
                           bn_b: npt.ArrayLike) -> tuple[Array, Array]:
    """Folded (weight, bias) of linear followed by eval-mode BatchNorm1d, in float32."""
    linear_w = np.asarray(linear_w, F32)
    o = linear_w.shape[0]
    linear_b = np.zeros(o, F32) if linear_b is None else np.asarray(linear_b, F32)
    bn_w = np.ones(o, F32) if bn_w is None else np.asarray(bn_w, F32)
    bn_b = np.zeros(o, F32) if bn_b is None else np.asarray(bn_b, F32)
    s = (bn_w * _rsqrt(np.asarray(bn_rv, F32) + F32(bn_eps))).astype(F32)
    w = (linear_w * s[:, None]).astype(F32)
    b = ((linear_b - np.asarray(bn_rm, F32)) * s + bn_b).astype(F32)
    return w, b


def _check_eval(*mods):
    for m in mods:
        if m.training:
            raise ValueError(f"fusing needs eval mode: {type(m).__name__} is in training mode; "
                             f"call .eval() first")


def fuse_conv_bn_eval(conv: Module, bn: Module, transpose: bool = False) -> Module:
    """A copy of `conv` with eval-mode `bn` folded into its weight and bias."""
    _check_eval(conv, bn)
    if bn.running_mean is None:
        raise ValueError("fuse_conv_bn_eval: the BatchNorm has no running statistics")
    fused = copy.deepcopy(conv)
    w, b = fuse_conv_bn_weights(conv.weight, conv.bias, bn.running_mean, bn.running_var,
                                bn.eps, bn.weight, bn.bias, transpose)
    fused.weight = w
    if fused.bias is None:
        fused.register_parameter("bias", None)
        fused._parameters["bias"] = b
    else:
        fused.bias = b
    return fused


def fuse_linear_bn_eval(linear: Module, bn: Module) -> Module:
    """A copy of `linear` with eval-mode BatchNorm1d `bn` folded into it."""
    _check_eval(linear, bn)
    if linear.out_features != bn.num_features:
        raise ValueError(f"fuse_linear_bn_eval: linear out_features ({linear.out_features}) "
                         f"must equal the BatchNorm's num_features ({bn.num_features})")
    fused = copy.deepcopy(linear)
    w, b = fuse_linear_bn_weights(linear.weight, linear.bias, bn.running_mean, bn.running_var,
                                  bn.eps, bn.weight, bn.bias)
    fused.weight = w
    fused._parameters["bias"] = b
    return fused
