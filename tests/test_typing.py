"""Type hints of the public API (issue 24): every public callable annotated, and mypy clean.

The typed modules are listed here explicitly: the op families whose wrappers are annotated
and the modules behind the top-level `qops` names.
"""
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import qops
import qops.functional as F

ROOT = Path(__file__).resolve().parents[1]

#: op families of qops.functional whose public wrappers carry type hints
TYPED_FAMILIES = ("activation", "arith", "conv", "embedding", "linear", "norm", "pool", "quant",
                  "reduce", "resize", "rnn", "sort")
#: modules behind the top-level qops names that carry type hints
TYPED_CORE = ("qops._config", "qops._dtypes", "qops._qtensor")
#: what mypy checks, the [tool.mypy] files of pyproject.toml
MYPY_FILES = ([m.replace(".", "/") + ".py" for m in TYPED_CORE]
              + [f"qops/_ops/{f}.py" for f in TYPED_FAMILIES])
#: top-level names that must be typed (the list of issue 24, and the rest of their modules)
QOPS_NAMES = ("quantize_per_tensor", "quantize_per_channel", "dequantize", "set_backend",
              "get_backend", "backend", "threads", "set_num_threads", "get_num_threads",
              "is_quantized", "make_per_tensor_quantized_tensor",
              "make_per_channel_quantized_tensor", "QTensor", "QDtype", "QScheme")
#: QTensor's dunder methods a user calls through syntax (t[i], len(t)), checked with the rest
DUNDERS = ("__getitem__", "__len__")


def _unannotated(f):
    """The parameters of function `f` without an annotation, and "return" if it has none."""
    sig = inspect.signature(f)
    missing = [p.name for p in sig.parameters.values()
               if p.annotation is p.empty and p.name not in ("self", "cls")]
    if sig.return_annotation is sig.empty:
        missing.append("return")
    return missing


def _class_members(cls):
    """(qualified name, function) of each public method and property getter `cls` defines."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in DUNDERS and name != "__init__":
            continue
        if isinstance(member, property):
            member = member.fget
        elif isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member):
            out.append((f"{cls.__name__}.{name}", member))
    return out


def _callables(namespace, names):
    """(name, function) for every function and class method to check among `names`."""
    out = []
    for name in names:
        obj = getattr(namespace, name)
        if inspect.isclass(obj):
            out.extend(_class_members(obj))
        elif callable(obj):
            out.append((name, obj))
    return out


def _check(pairs):
    bad = {name: miss for name, f in pairs if (miss := _unannotated(f))}
    assert not bad, f"annotations missing (name: parameters): {bad}"


@pytest.mark.parametrize("family", TYPED_FAMILIES)
def test_functional_family_annotated(family):
    mod = importlib.import_module(f"qops._ops.{family}")
    names = list(mod.__all__)
    assert names, f"qops._ops.{family} exports nothing"
    for name in names:
        # the public list is qops.functional: the checked objects are the ones it exports
        assert getattr(F, name) is getattr(mod, name), f"qops.functional.{name} is not {family}'s"
    _check(_callables(F, names))


def test_functional_quantize_annotated():
    # qops.functional re-exports the quantize/dequantize functions of qops._qtensor
    names = [n for n in dir(F) if not n.startswith("_")
             and getattr(getattr(F, n), "__module__", None) == "qops._qtensor"]
    assert {"quantize_per_tensor", "quantize_per_channel", "dequantize"} <= set(names)
    _check(_callables(F, names))


def test_qops_annotated():
    names = [n for n in dir(qops) if not n.startswith("_") and callable(getattr(qops, n))
             and getattr(getattr(qops, n), "__module__", None) in TYPED_CORE]
    assert set(QOPS_NAMES) <= set(names)
    pairs = _callables(qops, names)
    # the QTensor methods of the public surface are among them
    assert {"QTensor.dequantize", "QTensor.reshape", "QTensor.shape", "QTensor.__getitem__",
            "QDtype.__init__"} <= {n for n, _ in pairs}
    _check(pairs)


def test_annotation_checks_not_vacuous():
    def f(a, b: int = 0):
        return a

    def g(x: int) -> int:
        return x
    assert _unannotated(f) == ["a", "return"]
    assert _unannotated(g) == []
    # a context manager is checked through its wrapped generator function
    assert _unannotated(qops.backend) == []


def test_mypy_config_lists_the_typed_files():
    tomllib = pytest.importorskip("tomllib")       # Python 3.11+
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no pyproject.toml (tests run outside the source tree)")
    config = tomllib.loads(pyproject.read_text())["tool"]["mypy"]
    assert sorted(config["files"]) == sorted(MYPY_FILES)


def test_mypy_passes():
    pytest.importorskip("mypy")
    if not (ROOT / "pyproject.toml").exists() or not (ROOT / MYPY_FILES[0]).exists():
        pytest.skip("mypy checks the source tree (tests run outside it)")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml",
                           *MYPY_FILES], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no issues found in {len(MYPY_FILES)} source files" in done.stdout
