"""The command line: python -m qops and python -m qops.bench behave as Unix tools."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, **kw):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m"] + args, capture_output=True, text=True,
                          env=env, timeout=300, **kw)


def test_help_exits_zero_and_lists_commands():
    out = _run(["qops", "--help"])
    assert out.returncode == 0, out.stderr
    assert "demo" in out.stdout and "bench" in out.stdout and "config" in out.stdout


def test_unknown_command_exits_two():
    out = _run(["qops", "nope"])
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_bench_list_into_a_closed_pipe_is_quiet():
    # `python -m qops.bench --list | head -1`: no BrokenPipeError traceback
    p = subprocess.Popen([sys.executable, "-m", "qops.bench", "--list"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    p.stdout.close()          # the reader is gone before the listing is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0
    assert "BrokenPipeError" not in err and "Traceback" not in err


def test_demo_leaves_no_temporary_folder_and_no_bar_in_a_pipe(tmp_path):
    env_tmp = dict(os.environ, TMPDIR=str(tmp_path))
    env_tmp["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-m", "qops", "demo", "--repeat", "1"],
                         capture_output=True, text=True, env=env_tmp, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "loaded back: outputs identical" in out.stdout
    assert "\r" not in out.stderr                      # no progress bar outside a terminal
    assert not list(tmp_path.glob("qops-demo-*"))
