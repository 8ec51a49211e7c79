"""asv benchmarks generated from the qops op registry: one benchmark per op.

Each family file calls `make(family, globals())`, which adds two module-level benchmarks per
registered op:

- ``time_<op>(case, backend)``: the time of one call, with backend in {ref, fast, torch}, so the
  dashboard draws the reference, the fast kernels and PyTorch on one chart per op;
- ``track_<op>_speedup(case)``: PyTorch's time over qops fast's on the same data (unit "x",
  above 1 = qops faster), timed in alternating blocks in one process so that machine drift hits
  both alike (ops without a PyTorch oracle have none).

Cases are the registry's benchmark cases (fixed seeds, built on first use and cached), labelled
without the op's name. `make_zoo` adds ``time_zoo_<op>(case, backend)`` (fast and torch: the
reference would take hours over the zoo) and ``track_zoo_<op>_speedup`` over the layer zoo's
cases, every distinct layer of the benchmark models (qops/_registry/_zoo.py). The thread count
is ``QOPS_ASV_THREADS`` (default 1), for qops and PyTorch alike. There is no ``peakmem``
benchmark: asv measures the whole process's peak, which is the interpreter's, not the op's.
"""
import os
import sys

# The results are filed under the checkout's commit (asv run --set-commit-hash), so they measure
# this checkout's qops, whatever else is installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import qops  # noqa: E402
from qops._registry import all_specs  # noqa: E402
from qops.bench import _rotated_us, _settle_allocator, _torch  # noqa: E402

BACKENDS = ["ref", "fast", "torch"]
_CASES = {}     # (op, label) -> (spec, Case)
_CALLS = {}     # the call prepared by the current benchmark's setup


def threads():
    """The thread count of this run: QOPS_ASV_THREADS, default 1."""
    return int(os.environ.get("QOPS_ASV_THREADS", "1"))


def label(spec, name):
    """A bench case's name without the op's name in front ("conv2d_r3x3_64_56" -> "r3x3_64_56")."""
    for prefix in (spec.name + "_", spec.name.rstrip("_") + "_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix):]
    return name


def _case(spec, case_label, zoo=False):
    key = (spec.name, case_label, zoo)
    if key not in _CASES:
        builders = spec.zoo if zoo else spec.bench
        name = next(n for n in builders if label(spec, n) == case_label)
        _CASES[key] = builders[name]()
    return _CASES[key]


def _prepare(spec, case_label, backend, zoo=False):
    """The call to time: built once, warmed up (packing caches, first-touch page faults)."""
    _settle_allocator()     # as qops.bench: no backend pays fresh pages per call
    case = _case(spec, case_label, zoo)
    n = threads()
    if backend == "torch":
        torch = _torch()
        if torch is None or spec.torch is None:
            raise NotImplementedError("no PyTorch for this op")
        torch.set_num_threads(n)
        call = spec.torch(case)
    else:
        qops.set_num_threads(n)
        fn = spec.qops_call(case)

        def call(fn=fn, backend=backend):
            with qops.backend(backend):
                return fn()
    call()
    return call


def _time_benchmark(spec, zoo=False):
    labels = [label(spec, n) for n in (spec.zoo if zoo else spec.bench)]

    def setup(case_label, backend):
        _CALLS["time"] = _prepare(spec, case_label, backend, zoo)

    def bench(case_label, backend):
        _CALLS["time"]()

    bench.__name__ = f"time_zoo_{spec.name}" if zoo else f"time_{spec.name}"
    bench.setup = setup
    bench.params = [labels, [b for b in BACKENDS if not (zoo and b == "ref")]]
    bench.param_names = ["case", "backend"]
    # The reference takes seconds on the large cases: one sample is enough for it, while the
    # fast calls still get up to 10 within the 2 s budget.
    bench.repeat = (1, 10, 2.0)
    bench.timeout = 600
    return bench


def _speedup_benchmark(spec, zoo=False):
    labels = [label(spec, n) for n in (spec.zoo if zoo else spec.bench)]

    def setup(case_label):
        _CALLS["speedup"] = (_prepare(spec, case_label, "torch", zoo),
                             _prepare(spec, case_label, "fast", zoo))

    def track(case_label):
        torch_call, fast_call = _CALLS["speedup"]
        us = _rotated_us({"torch": torch_call, "fast": fast_call}, seconds=0.5)
        return us["torch"] / us["fast"]

    track.__name__ = f"track_zoo_{spec.name}_speedup" if zoo else f"track_{spec.name}_speedup"
    track.setup = setup
    track.params = [labels]
    track.param_names = ["case"]
    track.unit = "x"
    track.timeout = 600
    return track


def make(family, namespace):
    """Add the time and speed-up benchmarks of every op of `family` to `namespace`."""
    for spec in all_specs():
        if spec.family != family or not spec.bench:
            continue
        fn = _time_benchmark(spec)
        namespace[fn.__name__] = fn
        if spec.torch is not None:
            fn = _speedup_benchmark(spec)
            namespace[fn.__name__] = fn


def make_zoo(namespace):
    """Add the time and speed-up benchmarks of the layer zoo's cases of every op that has any."""
    for spec in all_specs():
        if not spec.zoo:
            continue
        for fn in (_time_benchmark(spec, zoo=True), _speedup_benchmark(spec, zoo=True)):
            namespace[fn.__name__] = fn
