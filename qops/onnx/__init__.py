"""Export qops quantized models to ONNX, and compare them with ONNX Runtime.

Needs the optional packages `onnx` (export) and `onnxruntime` (compare):
`pip install qops[onnx]`. `import qops` does not import this package, and importing it does
not import onnx: the functions do, when called.
"""
from qops.onnx._compare import compare, format_compare  # noqa: F401
from qops.onnx._export import ExportError, export  # noqa: F401

__all__ = ["export", "compare", "format_compare", "ExportError"]
