import os

import pytest
from hypothesis import HealthCheck, settings

# "ci" keeps the suite inside CI's time budget; QOPS_HYPOTHESIS_PROFILE=thorough runs more.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.filter_too_much])
settings.register_profile("thorough", max_examples=400, deadline=None,
                          suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("QOPS_HYPOTHESIS_PROFILE", "ci"))


def torch_or_skip():
    """Import torch, or skip (fail when QOPS_REQUIRE_TORCH=1)."""
    try:
        import torch
    except ImportError:
        if os.environ.get("QOPS_REQUIRE_TORCH") == "1":
            pytest.fail("QOPS_REQUIRE_TORCH=1 but torch is not installed")
        pytest.skip("PyTorch (the test oracle) is not installed")
    import warnings
    warnings.filterwarnings("ignore", message=".*deprecated.*", category=UserWarning)
    # fbgemm: the exact formula of docs/semantics.md §8. The x86 engine is fbgemm too, except
    # on AVX512-VNNI CPUs, where it hands convs with symmetric weights to oneDNN, off by one
    # step now and then (and by up to 8 in its transposed convs): tests that need it say so.
    torch.backends.quantized.engine = "fbgemm"
    return torch


@pytest.fixture
def torch():
    return torch_or_skip()
