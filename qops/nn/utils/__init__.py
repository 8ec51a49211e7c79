"""Helpers for qops.nn models (PyTorch's torch.nn.utils names)."""
from qops.nn.utils.fusion import (  # noqa: F401
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)
