"""The op registry: one entry per op, iterated by the differential tests and the benchmarks.

Each family file ``qops/_registry/<family>.py`` defines ``SPECS``, a list of `OpSpec`. An
entry names its kernels (functions of the same name in ``qops._ref.<family>`` and
``qops._fast.<family>``), the public op, fixed edge cases, a hypothesis strategy of random
cases, benchmark cases, and the PyTorch oracle (or the reason there is none). The test suite
fails on an entry that lacks any of these, so a new op cannot land untested or unbenchmarked.
"""
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

__all__ = ["Case", "OpSpec", "all_specs", "get_spec"]


@dataclass
class Case:
    """Arguments for one call of an op, with a short label for test ids and tables."""
    args: tuple
    kwargs: Dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def call(self, fn):
        return fn(*self.args, **self.kwargs)


@dataclass
class OpSpec:
    """Everything the tests and benchmarks need to know about one op.

    Attributes
    ----------
    name : unique op id ("conv2d", "quantize_per_tensor", ...)
    family : module name in qops/_ref and qops/_fast ("conv", "quant", ...)
    kernels : names of the kernel functions this op runs; each must exist with the same
        signature in both backends
    op : the public callable (a qops.functional function or a QTensor method wrapper)
    cases : () -> list of Case, deterministic edge cases (lengths around vector widths,
        strides, extreme qparams, empty tensors)
    strategy : () -> hypothesis strategy of Case (hypothesis imported lazily)
    bench : {name: () -> Case}, benchmark inputs built from fixed seeds
    torch : Case -> (() -> result), builds PyTorch inputs once and returns the call, or None
    torch_missing : why there is no oracle, when torch is None
    compare : (case, ours, theirs) -> None, raises AssertionError; None means bit-exact
    tolerance : the agreement expected with PyTorch and why ("exact" if bit-exact)
    runner : Case -> (() -> result), how a benchmark calls qops (e.g. with prepacked
        weights); None means ``lambda: case.call(op)``
    oracle_case : Case -> Case, the case as compared with PyTorch on this machine (e.g.
        weights PyTorch's kernels here cannot get wrong); None means the case itself
    """
    name: str
    family: str
    kernels: Tuple[str, ...]
    op: Callable
    cases: Callable[[], list]
    strategy: Callable[[], Any]
    bench: Dict[str, Callable[[], Case]]
    torch: Optional[Callable[[Case], Callable[[], Any]]]
    torch_missing: str = ""
    compare: Optional[Callable[[Case, Any, Any], None]] = None
    tolerance: str = "exact"
    runner: Optional[Callable[[Case], Callable[[], Any]]] = None
    oracle_case: Optional[Callable[[Case], Case]] = None

    @property
    def zoo(self):
        """{name: () -> Case}: the layer zoo's cases of this op (`_zoo.py`), often none."""
        from qops._registry import _zoo
        return _zoo.cases(self.name)

    def qops_call(self, case):
        """A zero-argument callable running this op on `case` with the active backend."""
        if self.runner is not None:
            return self.runner(case)
        return lambda: case.call(self.op)


_SPECS = None


def all_specs():
    """Every registered OpSpec, in family then registration order."""
    global _SPECS
    if _SPECS is None:
        specs = []
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if info.name.startswith("_"):
                continue
            mod = importlib.import_module(f"{__name__}.{info.name}")
            specs.extend(mod.SPECS)
        names = [s.name for s in specs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise RuntimeError(f"op registered twice: {sorted(dup)}")
        _SPECS = specs
    return _SPECS


def get_spec(name):
    """The OpSpec called `name`."""
    for spec in all_specs():
        if spec.name == name:
            return spec
    raise KeyError(name)
