"""Hostile and careless use (issue 19): crashes, arguments that must be refused by name, and a
registry-driven suite of mutated arguments run in child processes so that a crash is a failure
naming the op and the case, not a dead pytest."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qops
from qops import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BACKENDS = ["ref", "fast"]


def run_child(code, timeout=120):
    """Run `code` in a fresh interpreter (cwd: the repository); returns the CompletedProcess.
    A crash (SIGSEGV, SIGFPE) shows as a negative returncode instead of killing pytest."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_child_ok(proc, what):
    assert proc.returncode == 0, (f"{what}: child exited with {proc.returncode}\n"
                                  f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")


# -- defect 1: cat with zero output columns ------------------------------------------------

# issue 19 #1: F.cat / cat_relu on fast divided by zero (SIGFPE) when the output has no columns
@pytest.mark.parametrize("op", ["cat", "cat_relu"])
def test_issue19_cat_zero_columns(op):
    proc = run_child(f"""
        import numpy as np, qops
        from qops import functional as F
        shapes = [((2, 0), 1), ((2, 0, 3), 1), ((2, 3, 0), 2), ((2, 3, 0), 1), ((5, 0), 0)]
        for shape, dim in shapes:
            x = qops.make_per_tensor_quantized_tensor(np.zeros(shape, np.uint8), 0.1, 0)
            y = qops.make_per_tensor_quantized_tensor(np.zeros(shape, np.uint8), 0.2, 3)
            for args in ([x], [x, y]):
                for kw in ({{}}, {{"scale": 0.3, "zero_point": 1}}):
                    out = {{}}
                    for b in ("ref", "fast"):
                        with qops.backend(b):
                            out[b] = F.{op}(args, dim=dim, **kw)
                    assert out["ref"].shape == out["fast"].shape, (shape, dim, out)
        print("ok")
        """)
    assert_child_ok(proc, f"{op} with zero columns")
    assert proc.stdout.strip() == "ok"
