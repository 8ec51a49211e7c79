"""The TFLite/XNNPACK benchmark peer (qops/_bench_tflite.py) computes qops' op on qops' data.

Each case is built into a one-operator int8 model, run by LiteRT with XNNPACK (prepare checks
the delegate took the whole model), and its output compared with qops' `fast` backend. TFLite
requantizes with a 31-bit fixed-point multiplier and its own rounding, qops (as PyTorch) in
float32, and TFLite's bias is quantized to int32: outputs may differ by one step, no more.
"""
import numpy as np
import pytest

import qops
from qops._registry import _util as u
from qops._registry import conv as rconv
from qops._registry import get_spec
from qops._registry import linear as rlinear

pytest.importorskip("ai_edge_litert")

from qops import _bench_tflite as bt  # noqa: E402

#: issue 23's cases: (op, benchmark case)
BENCH = [("conv2d", "conv2d_1x1_256to64_56_b1"), ("conv2d", "conv2d_r3x3_64_56_b1"),
         ("conv2d", "conv2d_dw3x3_144_56_b1"), ("conv1d", "conv1d_64x1024_k3"),
         ("linear", "linear_b1_768to3072")]


def _small():
    """Small random cases of every form the builder emits: (op, case)."""
    r = u.rng(2301)
    c2 = lambda *a, **k: ("conv2d", rconv._case(r, 2, *a, **k))  # noqa: E731
    return [
        c2(1, 8, 12, 9, 3, padding=1, per_channel=True, label="3x3-same"),
        c2(2, 5, 7, 6, 1, bias=False, label="1x1-valid-per-tensor-nobias"),
        c2(1, 16, 16, 9, 3, padding=1, groups=16, per_channel=True, label="depthwise-same"),
        c2(1, 8, 16, 9, 3, padding=1, groups=8, per_channel=True, label="depthwise-mult2"),
        # PyTorch pads 1 on both sides; TFLite's SAME would pad 0 before, 1 after: a PAD op
        c2(1, 6, 10, 10, 3, stride=2, padding=1, per_channel=True, label="s2-even-pad"),
        c2(1, 12, 12, 10, 3, stride=2, padding=1, groups=12, per_channel=True,
           label="depthwise-s2-even-pad"),
        c2(1, 4, 6, 11, 3, padding=2, dilation=2, layout="cl", label="dilated-cl"),
        c2(1, 4, 6, 9, 3, padding=0, stride=2, x_zp=0, out_zp=255, spread=10,
           label="valid-s2-zp-limits"),
        ("conv2d_relu", rconv._case(r, 2, 1, 8, 8, 7, 3, padding=1, per_channel=True,
                                    label="relu")),
        ("conv1d", rconv._case(r, 1, 1, 8, 12, 33, 3, padding=1, per_channel=True,
                               label="conv1d-same")),
        ("conv1d", rconv._case(r, 1, 1, 8, 8, 33, 5, padding=2, groups=8, per_channel=True,
                               label="conv1d-depthwise")),
        ("conv1d_relu", rconv._case(r, 1, 1, 4, 6, 20, 3, stride=2, padding=1,
                                    label="conv1d-s2-pad-relu")),
        ("linear", rlinear._static_case(r, (3,), 40, 17, per_channel=True)),
        ("linear", rlinear._static_case(r, (2, 3), 33, 9, bias=False)),
        ("linear", rlinear._static_case(r, (1,), 257, 129, x_zp=255)),
        ("linear_relu", rlinear._static_case(r, (5,), 64, 24, per_channel=True)),
    ]


def _compare(op, case, name=None):
    """Assert the TFLite peer's output within one step of qops fast's; return the peer."""
    peer = bt.prepare(op, case, num_threads=1)
    assert peer.delegated
    peer.invoke()
    theirs = peer.output()
    with qops.backend("fast"):
        ours = get_spec(op).qops_call(case)()
    raw = ours.int_repr()
    assert theirs.shape == raw.shape
    diff = np.abs(theirs.astype(np.int32) - raw.astype(np.int32))
    saturated = np.mean((raw == 0) | (raw == 255))
    print(f"{op} {name or case.label}: {int((diff > 0).sum())} of {diff.size} outputs differ "
          f"by 1 step, max {diff.max()}")
    # not vacuous: equal saturated outputs would prove little (an output zero point at a
    # limit clips one sign, about half)
    assert saturated < 0.6, f"{saturated:.0%} of the outputs saturated"
    assert diff.max() <= 1, f"{op} {case.label}: off by up to {diff.max()} steps"
    return peer


@pytest.mark.parametrize("op,name", BENCH, ids=[n for _, n in BENCH])
def test_bench_cases_match_qops(op, name):
    peer = _compare(op, get_spec(op).bench[name](), name)
    # their padding is TFLite's VALID or SAME: the conv alone, no PAD op in front
    assert [n[0] for n in peer.nodes if n[0] != "DELEGATE"] == [
        {"conv2d": "CONV_2D", "conv1d": "CONV_2D", "linear": "FULLY_CONNECTED"}[op]
        if "dw" not in name else "DEPTHWISE_CONV_2D"]


@pytest.mark.parametrize("op,case", _small(), ids=lambda v: v if isinstance(v, str) else v.label)
def test_small_cases_match_qops(op, case):
    _compare(op, case)


@pytest.mark.parametrize("op,case,why", [
    ("conv2d", rconv._case(u.rng(1), 2, 1, 4, 4, 7, 3, padding=1, groups=4, w_zp=-7),
     "asymmetric"),
    ("conv2d", rconv._case(u.rng(2), 2, 1, 8, 16, 7, 3, padding=1, groups=4), "grouped"),
    ("conv2d", rconv._case(u.rng(3), 2, 1, 4, 6, 7, 3, padding=2, padding_mode="reflect"),
     "padding_mode"),
    ("linear", rlinear._static_case(u.rng(4), (3,), 40, 18, False, "small"), "asymmetric"),
    ("conv3d", rconv._case(u.rng(5), 3, 1, 4, 4, 5, 3), "no TFLite int8 builder"),
], ids=lambda v: v if isinstance(v, str) and " " not in v else None)
def test_unsupported_cases_say_why(op, case, why):
    with pytest.raises(bt.Unsupported, match=why):
        bt.build(op, case)


def test_builtin_kernels_list_no_delegate():
    """The delegation check discriminates: without the default delegate it reports False."""
    op, case = _small()[0]
    peer = bt.prepare(op, case, xnnpack=False)
    assert not peer.delegated
    assert [n[0] for n in peer.nodes] == ["CONV_2D"]


def test_padding_tflite_cannot_name_gets_a_pad_op():
    op, case = next((op, c) for op, c in _small() if c.label == "s2-even-pad")
    assert [n[0] for n in bt.prepare(op, case).nodes] == ["PAD", "CONV_2D", "DELEGATE"]
