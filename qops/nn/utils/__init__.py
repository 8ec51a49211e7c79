"""Helpers for qops.nn models (PyTorch's torch.nn.utils names)."""
from qops.nn.utils.fusion import (fuse_conv_bn_eval, fuse_conv_bn_weights,  # noqa: F401
                                  fuse_linear_bn_eval, fuse_linear_bn_weights)
