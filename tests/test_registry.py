"""Differential tests generated from the op registry: every op, both backends, PyTorch.

For each registered op: the entry is complete; fast == ref bit for bit on the fixed edge cases
and on hypothesis cases; ref == PyTorch (or within the entry's written tolerance); 1 thread ==
all threads; inputs are not modified; the cases are not vacuous (not nearly all saturated).
"""
import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qops
from qops import _fast
from qops._qtensor import QTensor
from qops._registry import _util as u
from qops._registry import all_specs

from conftest import torch_or_skip

SPECS = all_specs()
IDS = [s.name for s in SPECS]


def run(spec, case, backend, threads=None):
    with qops.backend(backend), qops.threads(threads or qops.get_num_threads()):
        return u.canon(spec.qops_call(case)())


def check_fast_equals_ref(spec, case):
    ref = run(spec, case, "ref")
    fast = run(spec, case, "fast")
    u.assert_same(fast, ref, f"{spec.name} {case.label}: fast vs ref")


def check_torch(spec, case):
    import warnings
    if spec.oracle_case is not None:
        case = spec.oracle_case(case)
    ours = run(spec, case, "ref")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = u.canon(spec.torch(case)())
    if spec.compare is not None:
        spec.compare(case, ours, theirs)
    else:
        u.assert_same(ours, theirs, f"{spec.name} {case.label}: ref vs PyTorch")


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_entry_complete(spec):
    import importlib

    from qops import _ref  # noqa: F401
    ref = importlib.import_module(f"qops._ref.{spec.family}")
    fast = _fast.load(spec.family)
    assert spec.kernels, f"{spec.name}: no kernels named"
    for name in spec.kernels:
        assert hasattr(ref, name), f"{spec.name}: qops._ref.{spec.family}.{name} missing"
        assert hasattr(fast, name), f"{spec.name}: qops._fast.{spec.family}.{name} missing"
        rs = list(inspect.signature(getattr(ref, name)).parameters)
        fs = list(inspect.signature(getattr(fast, name)).parameters)
        assert rs == fs, f"{spec.name}: {name} arguments differ: ref {rs} vs fast {fs}"
    assert callable(spec.op)
    assert len(spec.cases()) > 0, f"{spec.name}: no fixed cases"
    assert spec.strategy() is not None, f"{spec.name}: no hypothesis strategy"
    assert spec.bench, f"{spec.name}: no benchmark cases"
    assert spec.torch is not None or spec.torch_missing, \
        f"{spec.name}: no PyTorch oracle and no reason why"
    assert spec.tolerance, f"{spec.name}: tolerance must be described"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_fast_equals_ref_cases(spec):
    for case in spec.cases():
        check_fast_equals_ref(spec, case)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@given(data=st.data())
def test_fast_equals_ref_random(spec, data):
    check_fast_equals_ref(spec, data.draw(spec.strategy(), label="case"))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_ref_matches_torch_cases(spec):
    torch_or_skip()
    if spec.torch is None:
        pytest.skip(spec.torch_missing)
    for case in spec.cases():
        check_torch(spec, case)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@given(data=st.data())
def test_ref_matches_torch_random(spec, data):
    torch_or_skip()
    if spec.torch is None:
        pytest.skip(spec.torch_missing)
    check_torch(spec, data.draw(spec.strategy(), label="case"))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_threads_do_not_change_results(spec):
    for case in spec.cases():
        one = run(spec, case, "fast", threads=1)
        many = run(spec, case, "fast", threads=max(2, qops.get_num_threads()))
        u.assert_same(one, many, f"{spec.name} {case.label}: 1 thread vs many")


def _snapshot(obj):
    if isinstance(obj, QTensor):
        return ("q", obj._int.copy(), obj._scale, obj._zero_point)
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, (list, tuple)):
        return tuple(_snapshot(o) for o in obj)
    return None


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@pytest.mark.parametrize("backend", ["ref", "fast"])
def test_inputs_not_modified(spec, backend):
    if spec.name.endswith("_"):
        pytest.skip("in-place by name")
    for case in spec.cases()[:20]:
        before = _snapshot(case.args) + _snapshot(tuple(case.kwargs.values()))
        run(spec, case, backend)
        after = _snapshot(case.args) + _snapshot(tuple(case.kwargs.values()))
        u.assert_same(u.canon(_flat(after)), u.canon(_flat(before)),
                      f"{spec.name} {case.label}: input modified")


def _flat(snap):
    out = []
    for s in snap:
        if isinstance(s, tuple) and s and s[0] == "q":
            out.append(s[1])
        elif isinstance(s, tuple):
            out.extend(_flat(s))
        elif isinstance(s, np.ndarray):
            out.append(s)
    return tuple(out)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_cases_not_vacuous(spec):
    fractions = []
    for case in spec.cases():
        with qops.backend("fast"):
            f = u.saturated_fraction(spec.qops_call(case)())
        if f is not None:
            fractions.append(f)
    if not fractions:
        pytest.skip("op has no quantized output")
    assert np.mean(fractions) < 0.5, \
        f"{spec.name}: cases are mostly saturated ({np.mean(fractions):.2f})"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_bench_cases_build(spec):
    for name, build in spec.bench.items():
        case = build()
        assert isinstance(case.args, tuple), f"{spec.name} bench {name}"
