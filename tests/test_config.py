"""Backend and thread settings: per-thread context managers, global setters, fork safety."""
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import qops
import qops.functional as F


def test_context_managers_are_per_thread():
    # issue 19 #17: one Python thread's `with qops.backend("ref")` switched every other thread.
    entered, checked = threading.Event(), threading.Event()
    seen = {}

    def other():
        with qops.backend("ref"), qops.threads(1):
            seen["inside"] = (qops.get_backend(), qops.get_num_threads())
            entered.set()
            checked.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert entered.wait(10)
    try:
        assert qops.get_backend() == "fast"
        assert qops.get_num_threads() == qops._config._state["threads"]
    finally:
        checked.set()
        t.join()
    assert seen["inside"] == ("ref", 1)


def test_interleaved_context_managers_restore_the_global():
    # issue 19 #17: two threads' interleaved `with` blocks left the global at "ref".
    barrier = threading.Barrier(2)

    def worker(name):
        for _ in range(50):
            with qops.backend(name):
                barrier.wait(10)
                assert qops.get_backend() == name
                barrier.wait(10)

    ts = [threading.Thread(target=worker, args=(n,)) for n in ("ref", "fast")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert qops.get_backend() == "fast"


def test_setters_are_global_and_win_inside_a_block():
    before = qops.get_backend()
    try:
        with qops.backend("ref"):
            qops.set_backend("fast")
            assert qops.get_backend() == "fast"
            seen = []
            t = threading.Thread(target=lambda: seen.append(qops.get_backend()))
            t.start()
            t.join()
            assert seen == ["fast"]
        assert qops.get_backend() == "fast"
    finally:
        qops.set_backend(before)


@pytest.mark.parametrize("n", [0, -1, 2**31, 1025, True, 2.0, "2"])
def test_thread_counts_out_of_range_are_refused(n):
    # issue 19 #15: set_num_threads(2**31) was accepted and every op failed afterwards.
    with pytest.raises(ValueError, match="threads"):
        qops.set_num_threads(n)
    with pytest.raises(ValueError, match="threads"):
        with qops.threads(n):
            pass


@pytest.mark.parametrize("name", ["gpu", None, 1])
def test_unknown_backend_is_refused_by_the_context_manager(name):
    with pytest.raises(ValueError, match="backend"):
        with qops.backend(name):
            pass
    assert qops.get_backend() == "fast"


_FORK_CHILD = textwrap.dedent("""
    import multiprocessing as mp, os, sys
    import numpy as np
    import qops, qops.functional as F

    x = qops.quantize_per_tensor(np.linspace(-3, 3, 8 * 64 * 56 * 56, dtype=np.float32)
                                 .reshape(8, 64, 56, 56), 0.05, 128, qops.quint8)
    qops.set_num_threads(2)
    want = F.requantize(x, 0.1, 3).int_repr()   # starts OpenMP's pool in the parent

    def child(_):
        y = F.requantize(x, 0.1, 3).int_repr()
        return bool(np.array_equal(y, want)), qops.get_num_threads()

    if __name__ == "__main__":
        with mp.get_context("fork").Pool(2) as pool:
            print(pool.map(child, range(4)))
        pid = os.fork()
        if pid == 0:
            os._exit(0 if child(0)[0] else 3)
        print(os.waitpid(pid, 0)[1])
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork on this platform")
def test_forked_children_run_ops_after_parent_used_threads(tmp_path):
    # issue 19 #16: GNU OpenMP is not fork-safe; the child's next op hung forever.
    from qops import _fast
    if not _fast._cpu.have_openmp():
        pytest.skip("serial build")
    script = tmp_path / "fork_child.py"
    script.write_text(_FORK_CHILD)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == str([(True, 1)] * 4)
    assert lines[1] == "0"


def test_results_do_not_depend_on_the_calling_thread():
    x = qops.quantize_per_tensor(np.random.default_rng(0).standard_normal((4, 8, 9, 9))
                                 .astype(np.float32), 0.05, 128, qops.quint8)
    want = F.relu6(x).int_repr()
    got = []
    ts = [threading.Thread(target=lambda: got.append(F.relu6(x).int_repr())) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(np.array_equal(g, want) for g in got)


def test_qops_amx_0_runs_the_vnni_tier_with_the_same_results():
    # QOPS_AMX=0: conv and linear run the AVX-512 VNNI kernels on an AMX CPU (the tier of a
    # CPU without AMX); any other build or CPU runs as it would anyway
    import os
    code = textwrap.dedent("""
        import numpy as np, qops, qops.functional as F
        rng = np.random.default_rng(0)
        x = qops.quantize_per_tensor(rng.random((1, 64, 9, 9), np.float32), 0.01, 3, qops.quint8)
        w = qops.quantize_per_channel(rng.normal(0, 0.1, (32, 64, 3, 3)).astype(np.float32),
                                      np.full(32, 0.002), np.zeros(32, int), 0, qops.qint8)
        y = F.conv2d(x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), w, None,
                     padding=1, scale=0.2, zero_point=4)
        print(np.asarray(y.int_repr()).tobytes().hex())
        qops.show_config()
    """)
    outs = []
    for amx in ("0", "1"):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=dict(os.environ, QOPS_AMX=amx), timeout=120)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout.split("\n", 1))
    assert outs[0][0] == outs[1][0]
    assert "AMX" not in outs[0][1]
