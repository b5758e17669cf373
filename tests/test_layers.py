"""The package's architecture, checked from the source: layers import only downwards, there is no
import cycle, and every DVC stage depends on exactly the code it imports."""

from __future__ import annotations

import ast

import pytest
from import_graph import (
    PIPELINES,
    ROOT,
    all_modules,
    closure,
    code_deps,
    cycle,
    imports,
    module_file,
    stage_modules,
)

from pipeline import LAYERS
from pipeline.ops.dvc_index import read_stages


def layer_of(module: str) -> str | None:
    """`pipeline.model.beam` -> `model`; None outside the layers (`pipeline`, `pipeline.__main__`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_pipeline_top_level_holds_only_the_layers() -> None:
    top = {p.name for p in (ROOT / "pipeline").iterdir() if p.name != "__pycache__"}
    assert top == {"__init__.py", "__main__.py", *LAYERS}


def test_layers_import_only_from_layers_below() -> None:
    wrong = []
    for module in all_modules("pipeline"):
        here = layer_of(module)
        if here is None:
            continue
        for imported in imports(module):
            there = layer_of(imported)
            if there is not None and LAYERS.index(there) > LAYERS.index(here):
                wrong.append(f"{module} ({here}) imports {imported} ({there})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle() -> None:
    found = cycle(all_modules("pipeline") + all_modules("stages"))
    assert found is None, " -> ".join(found)


def test_package_inits_hold_no_code() -> None:
    """`__init__.py` files are docstrings and constants only, so the stages need not depend on them."""
    for module in all_modules("pipeline") + all_modules("stages"):
        path = module_file(module)
        if path.name == "__init__.py":
            tree = ast.parse(path.read_text(encoding="utf-8"))
            assert all(isinstance(n, ast.Expr | ast.Assign) for n in tree.body), path
            assert not imports(module), path


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_every_stage_depends_on_exactly_the_code_it_imports(pipeline: str) -> None:
    stages = read_stages(ROOT, pipeline)
    problems = []
    for name, module in stage_modules(pipeline).items():
        listed = {d for d in stages[name].deps if d.endswith(".py")}
        expected = code_deps(module)
        if listed != expected:
            problems.append(
                f"{name}: missing {sorted(expected - listed)}, not imported {sorted(listed - expected)}"
            )
    assert not problems, "\n".join(problems) + "\n(`python tests/import_graph.py` rewrites them)"


def test_training_does_not_depend_on_serving_or_ops() -> None:
    for module in ("stages.train", "stages.warmup_train"):
        layers = {layer_of(m) for m in closure(module)}
        assert not layers & {"serving", "ops"}, module
        assert "pipeline.model.beam" not in closure(module), module


OUTSIDE_THE_LIBRARY = ("study", "bench", "checks", "tests")  # beside pipeline/, never below it


def imported_names(path) -> set[str]:
    """Every module name `path` imports, whatever its package (`import_graph.imports` keeps ours only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_library_imports_nothing_beside_it() -> None:
    """study/, bench/ and checks/ may import pipeline/; pipeline/ never imports them."""
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "pipeline").rglob("*.py"))
        for name in sorted(imported_names(path))
        if name.split(".")[0] in OUTSIDE_THE_LIBRARY
    ]
    assert not wrong, "\n".join(wrong)
    assert imported_names(ROOT / "study" / "record.py") >= {"pipeline.ops.promotion", "study.rows"}
