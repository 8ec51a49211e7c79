"""Print the README feature table from the op registry (paste between the table markers).

    python tools/feature_table.py          # print
    python tools/feature_table.py --write  # rewrite README.md between the markers
    python tools/feature_table.py --write --families quant,conv   # only these families
"""
import sys
from pathlib import Path

from qops._registry import all_specs

BEGIN, END = "<!-- feature-table:begin -->", "<!-- feature-table:end -->"


def table(families=None):
    rows = ["| op | family | ref | fast | vs PyTorch 2.13 |", "|---|---|---|---|---|"]
    for s in all_specs():
        if families and s.family not in families:
            continue
        if s.torch is None:
            torch = f"no oracle: {s.torch_missing}"
        else:
            torch = "bit-exact" if s.tolerance == "exact" else s.tolerance
        rows.append(f"| `{s.name}` | {s.family} | yes | yes | {torch} |")
    return "\n".join(rows)


def main(argv):
    families = argv[argv.index("--families") + 1].split(",") if "--families" in argv else None
    text = table(families)
    if "--write" in argv:
        readme = Path(__file__).resolve().parent.parent / "README.md"
        s = readme.read_text()
        a, b = s.index(BEGIN) + len(BEGIN), s.index(END)
        readme.write_text(s[:a] + "\n" + text + "\n" + s[b:])
    else:
        print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
