"""The README's feature table and CHANGELOG say what is true now."""
from pathlib import Path

from qops._registry import all_specs

ROOT = Path(__file__).resolve().parent.parent


def test_readme_feature_table_lists_every_registered_op():
    readme = (ROOT / "README.md").read_text()
    begin = readme.index("<!-- feature-table:begin -->")
    end = readme.index("<!-- feature-table:end -->")
    table = readme[begin:end]
    missing = [s.name for s in all_specs() if f"| `{s.name}` |" not in table]
    assert not missing, f"README feature table lacks {missing}: run python tools/feature_table.py --write"
    listed = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    extra = listed - {s.name for s in all_specs()}
    assert not extra, f"README feature table lists ops that are not registered: {sorted(extra)}"


def test_changelog_exists():
    assert "## " in (ROOT / "CHANGELOG.md").read_text()


def test_readme_bring_a_pytorch_model_example_runs(tmp_path, monkeypatch):
    from conftest import torch_or_skip
    torch_or_skip()
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Bring a PyTorch model"):]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md (Bring a PyTorch model)", "exec"), {"print": lambda *a: None})
    assert (tmp_path / "net.qops").exists()
