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
#: the module and quantization namespaces whose public classes and functions carry type hints
TYPED_NAMESPACES = ("qops.nn", "qops.nn.quantized", "qops.nn.quantized.dynamic",
                    "qops.nn.intrinsic", "qops.nn.intrinsic.quantized",
                    "qops.nn.intrinsic.quantized.dynamic", "qops.nn.intrinsic.qat", "qops.nn.qat",
                    "qops.nn.utils", "qops.quantization", "qops.quantization.quantize_fx")
#: the source files behind them (mypy checks their signatures: see the [tool.mypy] override
#: of qops.nn.* and qops.quantization.*, whose bodies predate the hints)
NN_FILES = tuple(f"qops/{f}.py" for f in (
    "nn/_embedding", "nn/_graph", "nn/_layers", "nn/_rnn", "nn/_torch", "nn/_typing",
    "nn/intrinsic/__init__", "nn/intrinsic/qat/__init__", "nn/module", "nn/qat/__init__",
    "nn/quantized/_embedding", "nn/quantized/_modules", "nn/quantized/_torch",
    "nn/quantized/dynamic/__init__", "nn/quantized/dynamic/_rnn", "nn/utils/fusion",
    "quantization/_choose_qparams", "quantization/fake_quantize", "quantization/fuse_modules",
    "quantization/observer", "quantization/qconfig", "quantization/quantization_mappings",
    "quantization/quantize", "quantization/quantize_fx", "quantization/report",
    "quantization/stubs"))
#: what mypy checks, the [tool.mypy] files of pyproject.toml
MYPY_FILES = ([m.replace(".", "/") + ".py" for m in TYPED_CORE]
              + [f"qops/_ops/{f}.py" for f in TYPED_FAMILIES] + list(NN_FILES))
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


def _inherited_members(cls):
    """(qualified name, function) of each public method `cls` has from a qops class: the
    constructor and forward a user sees are often a base class's (a Conv2d's are _ConvNd's)."""
    out, seen = [], set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("qops."):
            continue
        for name, f in _class_members(klass):
            attr = name.split(".", 1)[1]
            if attr not in seen:
                seen.add(attr)
                out.append((f"{cls.__name__}.{attr}", f))
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


def _namespace_pairs(modname):
    mod = importlib.import_module(modname)
    names = [n for n in getattr(mod, "__all__", dir(mod)) if not n.startswith("_")]
    pairs = []
    for name in names:
        obj = getattr(mod, name)
        if inspect.ismodule(obj):
            continue
        if inspect.isclass(obj):
            pairs.extend(_inherited_members(obj))
        elif callable(obj) and getattr(obj, "__module__", "").startswith("qops."):
            pairs.append((name, obj))
    return pairs


@pytest.mark.parametrize("modname", TYPED_NAMESPACES)
def test_nn_and_quantization_annotated(modname):
    pairs = _namespace_pairs(modname)
    assert pairs or modname.startswith("qops.nn.intrinsic"), f"{modname} exports nothing"
    _check(pairs)


def test_nn_checks_reach_constructors_and_forward():
    # the constructor and forward of a layer are checked even where a base class defines them
    names = {n for n, _ in _namespace_pairs("qops.nn.quantized")}
    assert {"Conv2d.__init__", "Conv2d.forward", "Conv2d.from_float", "Linear.__init__",
            "Linear.forward", "Quantize.forward", "DeQuantize.forward"} <= names
    names = {n for n, _ in _namespace_pairs("qops.quantization")}
    assert {"MinMaxObserver.__init__", "MinMaxObserver.forward",
            "MinMaxObserver.calculate_qparams", "prepare", "convert", "quantize_dynamic",
            "prepare_qat", "FakeQuantize.forward"} <= names


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


#: a user's typed code: it must type-check against the hints (assert_type pins the overloads)
USAGE = '''
import numpy as np
import numpy.typing as npt
from typing_extensions import assert_type

import qops
import qops.functional as F
import qops.nn as nn
import qops.nn.quantized as nnq
import qops.nn.quantized.dynamic as nnqd
from qops.quantization import (MinMaxObserver, convert, get_default_qconfig, prepare,
                               quantize_dynamic)
from qops.quantization.quantize_fx import convert_fx, get_default_qconfig_mapping, prepare_fx

x = qops.quantize_per_tensor(np.zeros((1, 3, 8, 8), np.float32), 0.1, 0, "quint8")
w = qops.quantize_per_tensor(np.zeros((4, 3, 3, 3), np.float32), 0.05, 0, "qint8")
y = F.conv2d(x, w, padding=1, scale=0.2, zero_point=3)
assert_type(y, qops.QTensor)
assert_type(F.conv2d_relu(x, F.prepack_conv2d(w, padding=(1, 1)), scale=0.2), qops.QTensor)
assert_type(F.max_pool2d(y, 2), qops.QTensor)
assert_type(F.max_pool2d(y, 2, return_indices=True),
            tuple[qops.QTensor, npt.NDArray[np.int64]])
assert_type(F.adaptive_avg_pool2d(y, (None, 2)), qops.QTensor)
assert_type(F.embedding_bag(np.array([0, 1]), np.zeros((4, 2), np.float32), np.array([0])),
            npt.NDArray[np.float32])
h, c = F.lstm_step(np.zeros((1, 8), np.float32), np.zeros((1, 8), np.float32),
                   np.zeros((1, 2), np.float32))

conv = nnq.Conv2d(3, 4, 3, padding=1)
assert_type(conv.forward(x), qops.QTensor)
deq: np.ndarray = nnq.DeQuantize().forward(y)
lin = nnqd.Linear(4, 2)
out = lin.forward(np.zeros((1, 4), np.float32))
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
model.qconfig = get_default_qconfig("x86")
obs = MinMaxObserver(reduce_range=True)
a: npt.NDArray[np.float32] = np.zeros(3, np.float32)
assert_type(obs.forward(a), npt.NDArray[np.float32])         # an observer returns its input
scale, zero_point = obs.calculate_qparams()
prepared: nn.Module = prepare(model)
quantized: nn.Module = convert(prepared)
dynamic: nn.Module = quantize_dynamic(model, {nn.Linear}, dtype=qops.qint8)
graph = prepare_fx(model, get_default_qconfig_mapping("x86"), (np.zeros((1, 3, 8, 8)),))
final: nn.Module = convert_fx(graph)
'''

#: the same calls with wrong argument types: mypy must reject each line
MISUSE = '''
import numpy as np

import qops
import qops.functional as F
import qops.nn.quantized as nnq
from qops.quantization import MinMaxObserver, prepare

x = qops.quantize_per_tensor(np.zeros((1, 3, 8, 8), np.float32), 0.1, 0, "quint8")
F.conv2d(x, x, groups="1")
F.max_pool2d(x, 2, ceil_mode="yes")
nnq.Conv2d("3", 4, 3)
MinMaxObserver(reduce_range=1.5)
prepare("model")
'''


def _mypy_snippet(tmp_path, text):
    pytest.importorskip("mypy")
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("mypy checks the source tree (tests run outside it)")
    path = tmp_path / "snippet.py"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml",
                           str(path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


def test_typed_usage_checks(tmp_path):
    code, out = _mypy_snippet(tmp_path, USAGE)
    assert code == 0, out


def test_typed_misuse_is_reported(tmp_path):
    code, out = _mypy_snippet(tmp_path, MISUSE)
    assert code == 1, out
    bad = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    want = {i + 1 for i, line in enumerate(MISUSE.splitlines())
            if line.startswith(("F.", "nnq.", "MinMaxObserver(", "prepare("))}
    assert bad == want, out
