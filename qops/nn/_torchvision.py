"""torchvision's model classes for tests and benchmarks, even where its extension won't load.

torchvision's models are plain Python, but `import torchvision` loads its compiled operators,
which fail beside a CPU build of torch from another channel ("operator torchvision::nms does
not exist"). `quantization_models()` imports `torchvision.models.quantization` from the
installed (or unpacked) package without running the package's `__init__`: the model code
needs none of the compiled operators. Nothing here downloads weights.
"""
import importlib
import importlib.util
import os
import sys
import types

__all__ = ["quantization_models", "torchvision_root"]


def torchvision_root():
    """The folder of the torchvision package (QOPS_TORCHVISION_PATH, then sys.path), or None."""
    for base in filter(None, os.environ.get("QOPS_TORCHVISION_PATH", "").split(os.pathsep)):
        root = os.path.join(base, "torchvision")
        if os.path.isfile(os.path.join(root, "models", "quantization", "__init__.py")):
            return root
    spec = importlib.util.find_spec("torchvision")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return None


def quantization_models():
    """The module torchvision.models.quantization, or None when torchvision is not there."""
    try:
        import torchvision.models.quantization as q
        return q
    except Exception:   # noqa: BLE001 - its extension failed to load: use the model code alone
        for name in [n for n in sys.modules if n == "torchvision" or
                     n.startswith("torchvision.")]:
            del sys.modules[name]
    root = torchvision_root()
    if root is None:
        return None
    pkg = types.ModuleType("torchvision")
    pkg.__path__ = [root]
    pkg.__file__ = os.path.join(root, "__init__.py")
    ext = types.ModuleType("torchvision.extension")
    ext._has_ops = lambda: False
    ext._assert_has_ops = lambda: None
    sys.modules["torchvision"] = pkg
    sys.modules["torchvision.extension"] = ext
    return importlib.import_module("torchvision.models.quantization")
