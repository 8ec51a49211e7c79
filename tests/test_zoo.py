"""The layer zoo: every distinct layer of the benchmark models as registry benchmark cases."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import qops
from qops._registry import _zoo, all_specs, get_spec
from qops._registry._zoo_layers import LAYERS

from conftest import torch_or_skip

ROOT = Path(__file__).resolve().parents[1]


def test_zoo_layers_are_registry_ops_of_every_model():
    from qops._bench_models import ZOO_MODELS
    ops = {op for op, _, _ in LAYERS}
    assert ops <= set(_zoo.ZOO_OPS)
    assert {m for _, _, ms in LAYERS for m in ms} == set(ZOO_MODELS)
    for op in _zoo.ZOO_OPS:
        spec = get_spec(op)
        assert spec.zoo and spec.torch is not None, op
        # batch 1 and 8, both layouts for 4-D inputs
        per_layer = 2 if op == "linear" else 4
        assert len(spec.zoo) == per_layer * sum(1 for o, _, _ in LAYERS if o == op)
    assert not any(s.zoo for s in all_specs() if s.name not in _zoo.ZOO_OPS)


def test_zoo_cases_run_as_pytorch_does():
    """Each batch-1 case builds, runs in qops and agrees with PyTorch's peer call (the bench's
    x86 engine; +-1 on at most 1% of outputs, as the conv oracle allows on AVX2 machines)."""
    torch_or_skip()
    for op in _zoo.ZOO_OPS:
        spec = get_spec(op)
        for name, build in spec.zoo.items():
            if "_b8" in name:
                continue
            case = build()
            ours = spec.qops_call(case)()
            theirs = spec.torch(case)()
            assert isinstance(ours, qops.QTensor), (op, name)
            a = ours.int_repr().astype(np.int32)
            b = theirs.int_repr().numpy().astype(np.int32)
            assert a.shape == b.shape, (op, name)
            d = np.abs(a - b)
            assert d.max() <= 1 and (d > 0).mean() <= 0.01, (op, name, d.max())


def test_zoo_inputs_are_layouts_of_the_same_values():
    spec = get_spec("conv2d")
    c = spec.zoo["3s1p1_64to64_56x56_b1"]()
    cl = spec.zoo["3s1p1_64to64_56x56_b1_cl"]()
    x, y = c.args[0], cl.args[0]
    np.testing.assert_array_equal(x.int_repr(), y.int_repr())
    assert y._int.strides[1] == 1 and int(x.int_repr().max()) <= 127


def test_bench_runs_the_zoo_of_one_model():
    import io

    from qops.bench import run
    out = io.StringIO()
    rows = run(ops=["linear", "adaptive_avg_pool2d"], backends=("fast",), seconds=0.01,
               out=out, zoo=["resnet18"], batches=[1])
    assert sorted(case for _, case, _, _ in rows) == ["1_512_7x7_b1", "1_512_7x7_b1_cl",
                                                      "512to1000_b1"]


def test_zoo_file_is_current():
    """The checked-in layer list is what tools/gen_layer_zoo.py finds in the models today."""
    torch_or_skip()
    from qops.nn._torchvision import quantization_models
    if quantization_models() is None:
        pytest.skip("torchvision is not installed (QOPS_TORCHVISION_PATH)")
    spec = importlib.util.spec_from_file_location("gen_layer_zoo",
                                                  ROOT / "tools" / "gen_layer_zoo.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules["gen_layer_zoo"] = gen
    spec.loader.exec_module(gen)
    text = gen.render(gen.layers())
    assert text == (ROOT / "qops" / "_registry" / "_zoo_layers.py").read_text(), \
        "run tools/gen_layer_zoo.py"


def test_asv_has_the_zoo():
    sys.path.insert(0, str(ROOT / "asv_benchmarks"))
    try:
        zoo = importlib.import_module("benchmarks.zoo")
    finally:
        sys.path.remove(str(ROOT / "asv_benchmarks"))
    for op in _zoo.ZOO_OPS:
        labels, backends = getattr(zoo, f"time_zoo_{op}").params
        assert backends == ["fast", "torch"] and len(labels) == len(get_spec(op).zoo)
        assert getattr(zoo, f"track_zoo_{op}_speedup").unit == "x"
    bench = zoo.time_zoo_linear
    bench.setup(bench.params[0][0], "fast")
    bench(bench.params[0][0], "fast")


def test_zoo_summary_counts_slow_cases_and_peak_shares():
    import io

    from qops.bench import _macs, _peak, _zoo_summary
    spec = get_spec("conv2d")
    case = spec.zoo["3s1p1_64to64_56x56_b1"]()
    assert _macs("conv2d", case, spec.qops_call(case)()) == 64 * 56 * 56 * 64 * 9
    rows = [("conv2d", "a", 1, {"fast": 1e3, "torch": 800.0, "macs": 100e6}),
            ("linear", "b", 1, {"fast": 10.0, "torch": 20.0, "macs": 1e6})]
    out = io.StringIO()
    _zoo_summary(rows, out)
    text = out.getvalue()
    assert "zoo: 2 cases, 1 below 0.9x PyTorch" in text and "0.80x  conv2d a t1" in text
    # the share of the peak where the tier has one (not the portable build)
    assert ("1 conv/linear cases over 50 M multiply-adds" in text) == (_peak()[0] > 0)
