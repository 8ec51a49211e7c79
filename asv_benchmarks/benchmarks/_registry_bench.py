"""asv benchmark classes generated from the qops op registry.

Each family file calls `make(family)`, which returns two classes: `Time` (fast and PyTorch,
repeated samples) and `TimeRef` (the numpy reference, one sample: it is there to show the
speed-up, not to be tuned). Params: case (op:benchmark case) x backend x threads; the data
come from the registry's fixed-seed builders, made lazily on first use and cached.
"""
import os

import qops
from qops._registry import all_specs
from qops.bench import _settle_allocator, _torch

THREADS = sorted({1, os.cpu_count() or 1})
_CASES = {}


def _family_cases(family):
    return [f"{s.name}:{name}" for s in all_specs() if s.family == family for name in s.bench]


def _lookup(key):
    if key == "none:none":
        raise NotImplementedError("this family has no registered ops yet")
    if key not in _CASES:
        op, name = key.split(":", 1)
        spec = next(s for s in all_specs() if s.name == op)
        _CASES[key] = (spec, spec.bench[name]())
    return _CASES[key]


class _Base:
    param_names = ["case", "backend", "threads"]
    timeout = 600

    def setup(self, key, backend, threads):
        _settle_allocator()     # as qops.bench: no backend pays fresh pages per call
        spec, case = _lookup(key)
        if backend == "torch":
            torch = _torch()
            if torch is None or spec.torch is None:
                raise NotImplementedError("no PyTorch for this op")
            torch.set_num_threads(threads)
            self.call = spec.torch(case)
        else:
            qops.set_backend(backend)
            qops.set_num_threads(threads)
            self.call = spec.qops_call(case)
        self.call()  # warm-up: packing caches, page faults

    def teardown(self, key, backend, threads):
        qops.set_backend("fast")

    def time_op(self, key, backend, threads):
        self.call()

    def peakmem_op(self, key, backend, threads):
        self.call()


def make(family):
    """The asv classes (fast/torch, and ref) for op family `family`."""
    cases = _family_cases(family) or ["none:none"]
    time_cls = type("Time", (_Base,), {"params": [cases, ["fast", "torch"], THREADS]})
    ref_cls = type("TimeRef", (_Base,), {"params": [cases, ["ref"], [1]], "number": 1,
                                         "repeat": 1, "rounds": 1, "warmup_time": 0})
    return time_cls, ref_cls
