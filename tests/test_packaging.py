"""The package declares what it imports: pyproject's dependency ranges cover every third-party
import of `pipeline/`, requirements.txt pins each within its range, and the MLflow model's
requirements are a subset of them. The fresh-venv install (`MT_TEST_FRESH_VENV=1`, minutes) checks
that `pip install -c requirements.txt .` alone gives a working `mt-translate`."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from pipeline.serving.pyfunc import PYFUNC_PACKAGES

ROOT = Path(__file__).resolve().parents[1]


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {(r := Requirement(line)).name.lower(): r for line in project["dependencies"]}


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            out[name.strip().lower()] = version.strip()
    return out


def third_party_imports(folder: Path) -> set[str]:
    """Top-level names of the modules `folder`'s source imports that are neither ours nor stdlib."""
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("pipeline", "stages")}


def test_every_third_party_import_is_a_declared_dependency() -> None:
    distributions = metadata.packages_distributions()  # e.g. yaml -> [PyYAML]
    undeclared = {
        name
        for name in third_party_imports(ROOT / "pipeline")
        if not {d.lower() for d in distributions[name]} & set(declared())
    }
    assert not undeclared, f"imported but not in pyproject's dependencies: {sorted(undeclared)}"


def test_every_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    for name, req in declared().items():
        assert name in pinned, f"{name}: no == pin in requirements.txt"
        assert req.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is outside {req.specifier}"


def test_the_served_model_needs_only_declared_dependencies() -> None:
    assert set(PYFUNC_PACKAGES) <= set(declared())


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("MT_TEST_FRESH_VENV"), reason="set MT_TEST_FRESH_VENV=1 (minutes)")
def test_a_fresh_venv_install_translates(tiny_translator_files, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin/pip"), "install", "-q", "-c", str(ROOT / "requirements.txt"), str(ROOT)]
    subprocess.run(pip, check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cli = str(venv / "bin/mt-translate")
    run = subprocess.run([cli, "--help"], cwd=elsewhere, capture_output=True, text=True, check=True)
    assert "--checkpoint" in run.stdout
    files = tiny_translator_files
    args = [cli, "--checkpoint", str(files["ckpt"]), "--spm", str(files["spm"]), "A man walks in the park."]
    run = subprocess.run(args, cwd=elsewhere, capture_output=True, text=True, check=True)
    assert run.stdout.strip() and run.stdout.count("\n") == 1
