"""The compiled kernels: one module per op family, built once per instruction set.

At import the widest instruction set the CPU supports is chosen (avx512 > avx2 > baseline);
the environment variable ``QOPS_ISA`` forces one (tests run the suite on each).
"""
import importlib
import os

_ORDER = ("avx512", "avx2", "baseline")


def _built():
    # An ISA counts as built when its package holds the compiled _cpu module.
    found = []
    for isa in _ORDER:
        try:
            importlib.import_module(f"qops._fast._{isa}._cpu")
            found.append(isa)
        except ImportError:
            pass
    if not found:
        raise ImportError("qops' compiled kernels are not built; run `pip install -e .` "
                          "in the source tree")
    return tuple(found)


ISAS = _built()


def _cpu_supports():
    cpu = importlib.import_module("qops._fast._baseline._cpu")
    return {isa for isa in _ORDER if cpu.supports(isa)}


def _choose():
    supported = _cpu_supports()
    forced = os.environ.get("QOPS_ISA")
    if forced:
        if forced not in ISAS:
            raise ImportError(f"QOPS_ISA={forced!r}: this build has {', '.join(ISAS)}")
        if forced not in supported:
            raise ImportError(f"QOPS_ISA={forced!r}: this CPU does not support it")
        return forced
    for isa in _ORDER:
        if isa in ISAS and isa in supported:
            return isa
    return "baseline"


ISA = _choose()
CPU_ISAS = tuple(i for i in _ORDER if i in _cpu_supports())
_cpu = importlib.import_module(f"qops._fast._{ISA}._cpu")
OPENMP = _cpu.have_openmp()
DEBUG = _cpu.debug_build()
_loaded = {}


def load(family):
    """The compiled module of op family `family` for the chosen instruction set."""
    mod = _loaded.get(family)
    if mod is None:
        try:
            mod = importlib.import_module(f"qops._fast._{ISA}.{family}")
        except ImportError as exc:
            raise NotImplementedError(f"qops has no compiled kernels for {family!r}") from exc
        _loaded[family] = mod
    return mod

