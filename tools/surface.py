"""The code's surface in numbers: `python tools/surface.py` prints the module docstrings over six
lines, public docstrings whose first paragraph runs past two lines, functions taking more than
five positional arguments and the `# fmt: skip` markers, over the code folders (pipeline/, stages/,
bench/, checks/, study/), and the config fields whose default is written in the code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pipeline", "stages", "bench", "checks", "study")


def sources() -> list[Path]:
    """The Python files of the code folders (a folder not in this checkout is skipped)."""
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def long_module_docstrings(tree: ast.Module, limit: int = 6) -> int:
    doc = ast.get_docstring(tree, clean=False)
    return int(doc is not None and len(doc.strip().splitlines()) > limit)


def dense_docstrings(tree: ast.Module) -> list[str]:
    """Public functions whose docstring's first paragraph is longer than two lines."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc and len(doc.split("\n\n")[0].splitlines()) > 2:
                out.append(node.name)
    return out


def positional_trains(tree: ast.Module, limit: int = 5) -> list[str]:
    """Functions with more than `limit` parameters that may be passed by position (self excluded)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
            if len(names) > limit:
                out.append(f"{node.name} ({len(names)})")
    return out


def config_defaults() -> list[str]:
    """Fields of the `params.yaml` sections that have a default in `pipeline/core/config.py`."""
    from pipeline.core import config

    sections = [c for c in vars(config).values() if isinstance(c, type) and issubclass(c, config.Section)]
    return [f"{c.__name__}.{n}" for c in sections for n, f in c.model_fields.items() if not f.is_required()]


def main() -> None:
    totals = {"module docstrings > 6 lines": 0, "dense public docstrings": 0, "positional trains": 0,
              "fmt: skip": 0}  # fmt: skip
    for path in sources():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        found = {
            "module docstrings > 6 lines": long_module_docstrings(tree),
            "dense public docstrings": len(dense_docstrings(tree)),
            "positional trains": len(trains := positional_trains(tree)),
            "fmt: skip": text.count("# fmt: skip"),
        }
        for key, value in found.items():
            totals[key] += value
        if trains:
            print(f"{path.relative_to(ROOT)}: positional: {', '.join(trains)}")
    for key, value in totals.items():
        print(f"{key}: {value}")
    print(f"config fields with a default in the code: {len(config_defaults())}")


if __name__ == "__main__":
    main()
