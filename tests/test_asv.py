"""The asv suite: one benchmark per registered op, and the README's recipe produces results."""
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qops._registry import all_specs

ROOT = Path(__file__).resolve().parents[1]
ASV = ROOT / "asv_benchmarks"


def _family_module(family):
    sys.path.insert(0, str(ASV))
    try:
        return importlib.import_module(f"benchmarks.{family}")
    finally:
        sys.path.remove(str(ASV))


FAMILIES = sorted({s.family for s in all_specs()})


@pytest.mark.parametrize("family", FAMILIES)
def test_every_op_has_one_asv_benchmark(family):
    """A family without its asv file, or an op missing from it, fails here."""
    assert (ASV / "benchmarks" / f"{family}.py").exists(), f"asv_benchmarks/benchmarks/{family}.py"
    module = _family_module(family)
    for spec in all_specs():
        if spec.family != family:
            continue
        bench = getattr(module, f"time_{spec.name}")
        labels, backends = bench.params
        assert backends == ["ref", "fast", "torch"]
        assert len(set(labels)) == len(labels) == len(spec.bench)
        assert all(not label.startswith(spec.name + "_") for label in labels)
        assert not any(name.startswith("peakmem") for name in dir(module))
        if spec.torch is not None:
            assert getattr(module, f"track_{spec.name}_speedup").unit == "x"


def test_asv_benchmark_runs_each_backend():
    module = _family_module("activation")
    bench = module.time_relu
    label = bench.params[0][0]
    for backend in ("ref", "fast"):
        bench.setup(label, backend)
        bench(label, backend)


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout: asv files results under a commit")
def test_readme_asv_recipe_produces_results(tmp_path):
    """`asv run --python=same --set-commit-hash ...` then `asv publish`, as the README says,
    saves results and a dashboard page (here for one op, into a temporary folder)."""
    readme = (ROOT / "README.md").read_text()
    assert "asv run --python=same" in readme and "--set-commit-hash" in readme
    conf = json.loads((ASV / "asv.conf.json").read_text())
    conf.update(repo=str(ROOT), benchmark_dir=str(ASV / "benchmarks"),
                results_dir=str(tmp_path / "results"), html_dir=str(tmp_path / "html"),
                env_dir=str(tmp_path / "env"))
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    env = dict(os.environ, HOME=str(tmp_path))     # asv machine writes ~/.asv-machine.json
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    asv = [sys.executable, "-m", "asv"]

    def run(*args):
        done = subprocess.run(asv + list(args), cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run("machine", "--yes", "--machine", "ci")
    run("run", "--python=same", "--quick", f"--set-commit-hash={commit}", "--machine", "ci",
        "-b", r"activation\.time_relu\b")
    results = [p for p in (tmp_path / "results" / "ci").glob("*.json") if p.name != "machine.json"]
    assert results, "asv run saved no results"
    saved = json.loads(results[0].read_text())["results"]
    assert "activation.time_relu" in saved
    assert any(v is not None for v in saved["activation.time_relu"][0][:2])
    run("publish")
    assert (tmp_path / "html" / "index.html").exists()
    assert list((tmp_path / "html" / "graphs").rglob("activation.time_relu.json"))
