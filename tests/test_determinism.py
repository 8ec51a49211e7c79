"""Determinism stress test: every registered op, on inputs in several memory layouts, gives
the same bits on 2 threads, call after call, as on 1 thread (issue 19 #3).

The inputs are the registry's benchmark cases (sizes large enough that the kernels split the
work between threads: each op's smallest, and its smallest channels-last one), each laid out
C-order, channels last, with every axis reversed in memory (a permuted dense block), with
negative strides and as a strided slice. A kernel that
shares a temporary between threads (a struct filled inside a prange body, say) gives results
that vary from call to call; 12 calls on 2 threads catch the data races issue 19 found
(channels-last average pools: hundreds of wrong values per call).
"""
import numpy as np
import pytest

import qops
from qops._qtensor import QTensor
from qops._registry import _util as u
from qops._registry import all_specs

CALLS = 12                    # 2-thread calls compared with the 1-thread result
LAYOUTS = ("c", "cl", "reversed", "neg", "slice")


def _relayout(a, layout):
    """ndarray `a`'s values in another memory layout (same logical array)."""
    if layout == "c" or a.ndim < 2:
        return a
    if layout == "cl":
        return u._layout(a, "cl") if a.ndim >= 3 else None
    if layout == "reversed":
        # every axis reversed in memory: a permuted dense block (Fortran order)
        return np.asfortranarray(a)
    if layout == "neg":
        flip = (slice(None, None, -1),) * a.ndim
        return np.ascontiguousarray(a[flip])[flip]
    if layout == "slice":
        # every other element along the last axis of a buffer one element off its start
        buf = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
        view = buf[..., 1::2]
        view[...] = a
        return view
    raise ValueError(layout)


def _relayout_arg(obj, layout):
    """An argument with every QTensor's raw values and float array relaid; None if the layout
    does not apply to any of them."""
    if isinstance(obj, QTensor):
        raw = _relayout(obj._int, layout)
        return None if raw is None else obj._like(raw)
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "f":
        return _relayout(obj, layout)
    if isinstance(obj, (list, tuple)) and any(isinstance(o, (QTensor, np.ndarray)) for o in obj):
        out = [_relayout_arg(o, layout) for o in obj]
        return None if any(o is None for o in out) else type(obj)(out)
    return obj


def _arg_size(obj):
    if isinstance(obj, QTensor):
        return obj._int.size
    if isinstance(obj, np.ndarray):
        return obj.size
    if isinstance(obj, (list, tuple)):
        return sum(_arg_size(o) for o in obj)
    return 0


def _changed(layout, args):
    """Whether `layout` gives at least one argument a memory order other than C order."""
    if layout == "c":
        return True
    return any(isinstance(a, (QTensor, np.ndarray)) and np.ndim(a) >= (3 if layout == "cl" else 2)
               for a in _flat(args))


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


_BUILT = {}


def _bench_case(spec, name):
    key = (spec.name, name)
    if key not in _BUILT:
        _BUILT[key] = spec.bench[name]()
    return _BUILT[key]


def _params():
    """(spec, bench name, layout) for every op: its smallest bench case, and its smallest
    channels-last one if it has one, in each layout that changes an argument's memory order.
    Sizes come from building the cases, so the two kept stay built for the tests."""
    params = []
    for spec in all_specs():
        sizes = {n: _arg_size(_bench_case(spec, n).args) for n in spec.bench}
        cl = [n for n in spec.bench if u.CL_BENCH[1:] in n]
        other = [n for n in spec.bench if n not in cl]
        names = [min(group, key=sizes.get) for group in (other, cl) if group]
        for n in spec.bench:
            if n not in names:
                del _BUILT[spec.name, n]
        for n in names:
            for layout in LAYOUTS:
                if _changed(layout, _bench_case(spec, n).args):
                    params.append(pytest.param(spec, n, layout,
                                               id=f"{spec.name}-{n}-{layout}"))
    return params


def _run(spec, case, threads):
    with qops.backend("fast"), qops.threads(threads):
        return u.canon(spec.qops_call(case)())


@pytest.mark.parametrize("spec,bench,layout", _params())
def test_two_threads_equal_one(spec, bench, layout):
    base = _bench_case(spec, bench)

    def case():
        # in-place ops get fresh inputs for every call
        from qops._registry import Case
        args = tuple(_relayout_arg(a, layout) for a in base.args)
        kwargs = {k: _relayout_arg(v, layout) for k, v in base.kwargs.items()}
        return Case(args, kwargs, label=f"{base.label}-{layout}")

    c = case()
    if any(a is None for a in c.args):
        pytest.skip(f"layout {layout} does not apply")
    one = _run(spec, c, 1)
    for i in range(CALLS):
        if spec.name.endswith("_"):
            c = case()
        u.assert_same(_run(spec, c, 2), one,
                      f"{spec.name} {bench} {layout}: call {i} on 2 threads vs 1 thread")


# issue 19 #3: per-channel quantize/dequantize over short rows shared their unit offsets
# (written through pointers in the prange body) between threads
@pytest.mark.parametrize("what", ["quantize", "dequantize"])
def test_issue19_per_channel_rows_two_threads(what):
    r = u.rng(3)
    x = r.normal(0, 1, size=(400, 3000)).astype(np.float32)
    scales = r.uniform(0.01, 0.1, 3000)
    zps = r.integers(-10, 10, 3000)
    q = qops.quantize_per_channel(x, scales, zps, 1, qops.qint8)

    def call():
        if what == "quantize":
            return qops.quantize_per_channel(x, scales, zps, 1, qops.qint8).int_repr()
        return q.dequantize()
    with qops.backend("fast"):
        with qops.threads(1):
            one = call().copy()
        with qops.threads(2):
            for i in range(CALLS):
                np.testing.assert_array_equal(call(), one, err_msg=f"call {i}")
