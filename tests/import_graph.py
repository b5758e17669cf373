"""The project's import graph, read from the source with `ast` (nothing is imported).

Used by `test_layers.py`: module names are dotted (`pipeline.model.beam`), files are paths
relative to the repository root. Every import counts, function-local ones included, so a
deferred import is a dependency like any other. `python tests/import_graph.py` rewrites the `.py`
deps of every stage in `dvc.yaml` and the recipes' to what its module imports (the stage file first, then sorted).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import yaml

from pipeline.ops.dvc_index import read_stages

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "stages")
STAGE_CMD = re.compile(r"python -m (stages\.\w+)")


def module_file(module: str) -> Path | None:
    """`pipeline.model.beam` -> `pipeline/model/beam.py` (or a package's `__init__.py`); None if absent."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_name(path: Path) -> str:
    """`pipeline/model/beam.py` -> `pipeline.model.beam`; a package's `__init__.py` -> the package."""
    parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def imports(module: str) -> frozenset[str]:
    """The project modules `module` imports (`from pkg import mod` resolves to `pkg.mod` when that
    is a module, else to `pkg`)."""
    path = module_file(module)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if module_file(child) else node.module)
    return frozenset(m for m in found if m.split(".")[0] in PACKAGES and module_file(m))


def closure(module: str) -> set[str]:
    """`module` and every project module it imports, directly or not."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(imports(current))
    return seen


def cycle(modules: list[str]) -> list[str] | None:
    """One import cycle among `modules` (as a path that returns to its start), or None."""
    state: dict[str, str] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = "open"
        for n in sorted(imports(m)):
            if state.get(n) == "open":
                return path + [m, n]
            if n not in state and (found := visit(n, path + [m])):
                return found
        state[m] = "done"
        return None

    for m in sorted(modules):
        if m not in state and (found := visit(m, [])):
            return found[found.index(found[-1]) :]
    return None


def all_modules(package: str) -> list[str]:
    """Every module under `package` (its `__init__` files included)."""
    return sorted(module_name(p) for p in (ROOT / package).rglob("*.py"))


def code_deps(module: str) -> set[str]:
    """The `.py` files a stage runs: its module's import closure, `__init__.py` files left out
    (they hold docstrings and constants only: `test_layers.py` checks that)."""
    files = (module_file(m).relative_to(ROOT) for m in closure(module))
    return {str(f) for f in files if f.name != "__init__.py"}


PIPELINES = ("dvc.yaml", "recipes/distill/dvc.yaml")  # the default pipeline and the recipe's


def stage_modules(dvc_yaml: str = "dvc.yaml") -> dict[str, str]:
    """Stage name -> the module its command runs (`python -m stages.X`), as DVC reads `dvc_yaml`
    (relative to the repository root) with its params (`pipeline.ops.dvc_index`)."""
    stages = read_stages(ROOT, dvc_yaml)
    return {name: STAGE_CMD.search(stage.cmd).group(1) for name, stage in stages.items()}


# A stage's deps: a flow list or a block list, at a stage's indent (4) or inside a `foreach`'s `do:` (6).
DEPS_BLOCK = re.compile(r"^( {4}| {6})deps:(?: \[[^\]]*\]|(?:\n\1  - .*)*)$", re.MULTILINE)


def flow_list(items: list[str], indent: str = "      ", width: int = 110) -> str:
    """`items` as a YAML flow sequence wrapped at `width` (`${...}` quoted: braces are flow syntax)."""
    words = [f'"{item}"' if "{" in item else item for item in items]
    lines, line = [], ""
    for word in words:
        if line and len(indent) + len(line) + len(word) + 2 > width:
            lines.append(line + ",")
            line = ""
        line = f"{line}, {word}" if line else word
    return "[\n" + "\n".join(indent + text for text in [*lines, line]) + "]"


def write_stage_deps(dvc_yaml: str = "dvc.yaml") -> None:
    """Replace each stage's `.py` deps in `dvc_yaml` by `code_deps` of its module (the stage file
    first, then sorted), before its other deps, as one wrapped flow list; the rest is kept. A
    `foreach` stage's deps are those of its first expansion (`teacher@3` for `teacher`)."""
    path = ROOT / dvc_yaml
    modules = stage_modules(dvc_yaml)
    text = path.read_text(encoding="utf-8")
    stages = yaml.safe_load(text)["stages"]
    blocks = iter(DEPS_BLOCK.finditer(text))
    out, pos = [], 0
    for name, stage in stages.items():
        match = next(blocks)
        module = next(m for n, m in modules.items() if n.split("@")[0] == name)
        code = sorted(code_deps(module), key=lambda f: (not f.startswith("stages/"), f))
        data = [d for d in stage.get("do", stage).get("deps") or [] if not d.endswith(".py")]
        indent = match.group(1)
        out += [text[pos : match.start()], f"{indent}deps: " + flow_list(code + data, indent + "  ")]
        pos = match.end()
    path.write_text("".join(out) + text[pos:], encoding="utf-8")


if __name__ == "__main__":
    for pipeline in PIPELINES:
        write_stage_deps(pipeline)
        print(f"{pipeline}: stage deps rewritten from the import graph")
