"""The README and docs/*.md name only things that exist.

For each Markdown file (README.md and every docs/*.md) three checks:

- links: every `[text](target)` whose target does not start with http(s)://, mailto: or # resolves
  (from the file's folder, anchor dropped) to a file or folder of the repository;
- paths: every inline code span that looks like a repository path exists, resolved from the
  repository root. A span looks like a path when it has no whitespace and none of ``< > * $ : ( ) { } …``,
  does not start with a digit, ``..``, ``/`` or ``~`` (dates such as 12/05/2023, folders outside the
  checkout), and either contains a ``/`` or ends in a source extension (`SOURCE_EXTENSIONS`;
  bare names of generated files such as ``last.pt`` are names, not paths). A trailing ``/`` is
  dropped. Outputs that exist only after ``dvc repro`` are accepted when they are, or lie under, an
  ``outs``/``metrics`` path of dvc.yaml (with ``${...}`` filled in from params.yaml), or are in
  `GENERATED_ELSEWHERE` (written by a command outside the DAG);
- modules: every ``python -m X`` (code blocks included) names a module that exists: for this
  repository's packages (`REPO_PACKAGES`) the file ``X.py``, or the package ``X/`` with a
  ``__main__.py``; for anything else (venv, pytest, ...) ``importlib.util.find_spec``. A name
  followed by ``.<`` (``python -m stages.<name>``) is a pattern and is skipped.

Links and inline code inside fenced code blocks are not checked (commands there hold example
file names such as ``test.en``); ``python -m`` is.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from import_graph import PIPELINES

from pipeline.ops.dvc_index import read_stages

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150

SOURCE_EXTENSIONS = (".py", ".md", ".yaml", ".yml", ".toml", ".tsv", ".jsonl", ".sh", ".j2", ".lock")
REPO_PACKAGES = ("pipeline", "stages", "bench", "tests")
GENERATED_ELSEWHERE = {
    "reports/gpu.json": "bench/gpu_check.sh",
    "models/ct2": "python -m pipeline.ops.export ctranslate2",
    ".dvc/config.local": "dvc remote modify --local",
}

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
NOT_A_PATH = re.compile(r"[\s<>*$:(){}…]")
PYTHON_M = re.compile(r"\bpython3? -m ([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?![\w.<])")


def without_fences(text: str) -> str:
    return FENCE.sub("", text)


def links(text: str) -> list[str]:
    """Relative link targets outside code blocks, anchors dropped."""
    out = []
    for target in LINK.findall(without_fences(text)):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        out.append(target.split("#", 1)[0])
    return [t for t in out if t]


def code_paths(text: str) -> list[str]:
    """Inline code spans (outside code blocks) that look like repository paths."""
    out = []
    for span in CODE_SPAN.findall(without_fences(text)):
        if NOT_A_PATH.search(span) or span[0].isdigit() or span.startswith(("..", "/", "~", "-")):
            continue
        if "/" in span or span.endswith(SOURCE_EXTENSIONS):
            out.append(span.rstrip("/"))
    return out


def python_modules(text: str) -> list[str]:
    return PYTHON_M.findall(text)


def dvc_outputs(root: Path = ROOT) -> set[str]:
    """The paths every stage of the default pipeline and the recipes writes, as DVC reads them."""
    return {
        path.rstrip("/")
        for pipeline in PIPELINES
        for stage in read_stages(root, pipeline).values()
        for path in stage.writes
    }


def missing_paths(paths: list[str], outputs: set[str], root: Path = ROOT) -> list[str]:
    def ok(p: str) -> bool:
        if (root / p).exists() or p in GENERATED_ELSEWHERE:
            return True
        return any(p == o or p.startswith(o + "/") or o.startswith(p + "/") for o in outputs)

    return [p for p in paths if not ok(p)]


def missing_modules(modules: list[str], root: Path = ROOT) -> list[str]:
    def ok(name: str) -> bool:
        if name.split(".")[0] in REPO_PACKAGES:
            base = root / name.replace(".", "/")
            return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()
        try:
            return importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            return False

    return [m for m in modules if not ok(m)]


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- the checks, one per Markdown file ---------------------------------------------------------


def test_there_are_docs():
    assert (ROOT / "docs").is_dir() and len(DOCS) > 1


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_relative_links_resolve(doc: Path):
    broken = [t for t in links(doc.read_text()) if not (doc.parent / t).exists()]
    assert not broken, f"{doc_id(doc)}: links to missing files: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_backticked_paths_exist(doc: Path):
    missing = missing_paths(code_paths(doc.read_text()), dvc_outputs())
    assert not missing, f"{doc_id(doc)}: paths that neither exist nor are pipeline outputs: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_python_m_modules_exist(doc: Path):
    missing = missing_modules(python_modules(doc.read_text()))
    assert not missing, f"{doc_id(doc)}: `python -m` of missing modules: {missing}"


def test_architecture_lists_every_module_once():
    """docs/architecture.md: one line per module of `pipeline/`, none missing, none gone."""
    text = (ROOT / "docs/architecture.md").read_text()
    listed = re.findall(r"^- `(pipeline/[\w/]+\.py)`:", text, flags=re.M)
    modules = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "pipeline").rglob("*.py") if p.name != "__init__.py"
    )
    assert sorted(listed) == [m for m in modules if m != "pipeline/__main__.py"]


def test_readme_is_short_and_links_every_docs_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    linked = {(ROOT / t).resolve() for t in links(text)}
    unlinked = [doc_id(d) for d in DOCS[1:] if d.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_readme_setup_is_what_ci_runs():
    """The README's two set-up commands are the install and test commands of .ci/run."""
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci/run").read_text()
    install = re.compile(r"pip install (--quiet )?-r requirements\.txt -e \.")
    assert install.search(readme) and install.search(ci)
    assert re.search(r"^pytest$", readme, re.M) and re.search(r"^pytest$", ci, re.M)
    assert "dvc repro" in readme and "MULTI30K_MIRROR" in readme and "MULTI30K_MIRROR" in ci


# --- the extractors can fail ---------------------------------------------------------------------

SAMPLE = """
See [the guide](docs/no-such-page.md#top), [a site](https://example.org), [here](#results).
Read `pipeline/model/no_such_module.py`, `params.yaml`, `reports/val.json` and `models/spm/spm.model`.
Not paths: `12/05/2023`, `en<TAB>de`, `sqlite:///<repo>/mlflow.db`, `train.optim.max_steps`,
`last.pt`, `../mt-pipeline-dvc-store`, `*.tsv`.

```bash
python -m pipeline.ops.no_such_command run     # checked, in a code block
python -m stages.<name>                        # a pattern: skipped
cat [not a link](nowhere.md) `not/checked.py`
```
python -m pytest and python -m venv exist.
"""


def test_extractors_find_known_bad_entries():
    assert links(SAMPLE) == ["docs/no-such-page.md"]
    paths = code_paths(SAMPLE)
    assert paths == [
        "pipeline/model/no_such_module.py",
        "params.yaml",
        "reports/val.json",
        "models/spm/spm.model",
    ]
    outputs = {"reports/val.json", "models/spm"}
    assert missing_paths(paths, outputs, root=ROOT) == ["pipeline/model/no_such_module.py"]
    modules = python_modules(SAMPLE)
    assert modules == ["pipeline.ops.no_such_command", "pytest", "venv"]
    assert missing_modules(modules) == ["pipeline.ops.no_such_command"]


def test_a_package_without_main_is_not_runnable():
    assert missing_modules(["pipeline", "pipeline.ops", "pipeline.ops.flow"]) == ["pipeline.ops"]


def test_dvc_outputs_are_filled_in_from_params():
    outputs = dvc_outputs()
    assert "reports/val.json" in outputs and "models/transformer" in outputs
    assert "models/teachers/seed3" in outputs and "reports/distill/val.json" in outputs
    assert not any("${" in o for o in outputs)
