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
import json
import re
from functools import cache
from itertools import takewhile
from pathlib import Path

import pytest
from import_graph import PIPELINES
from markdown_tables import table_rows

from pipeline.core.params_file import load_params
from pipeline.data.multi30k import SPLITS, TRAIN_SPLIT
from pipeline.data.translations import scores_path
from pipeline.ops.dvc_index import read_stages

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150

SOURCE_EXTENSIONS = (".py", ".md", ".yaml", ".yml", ".toml", ".tsv", ".jsonl", ".sh", ".j2", ".lock")
REPO_PACKAGES = ("pipeline", "stages", "bench", "checks", "study", "tests")
GENERATED_ELSEWHERE = {
    "reports/gpu.json": "checks/gpu_check.sh",
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


@cache
def dvc_outputs(root: Path = ROOT) -> frozenset[str]:
    """The paths every stage of the default pipeline and the recipes writes, as DVC reads them (read
    once: DVC's index takes a second)."""
    return frozenset(
        path.rstrip("/")
        for pipeline in PIPELINES
        for stage in read_stages(root, pipeline).values()
        for path in stage.writes
    )


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


# --- figures and names the docs copy from the pipeline and reports/ --------------------------------


def section_table(text: str, heading: str) -> list[tuple[str, ...]]:
    """The body rows (cells) of the first Markdown table under `## heading` in `text`."""
    lines = without_fences(text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = takewhile(lambda line: line.startswith("|"), lines[start:])
    return table_rows("\n".join(table))[2:]


def test_readme_stage_table_lists_every_stage_of_dvc_yaml():
    listed = [row[0].strip("`") for row in section_table((ROOT / "README.md").read_text(), "The pipeline")]
    assert listed == list(read_stages(ROOT)), "README's stage table against dvc.yaml, in DAG order"


def readme_default_figures(root: Path = ROOT) -> dict[str, str]:
    """The README results table's default column as the committed run's reports give it (0.1)."""
    params = load_params(root / "params.yaml")
    summary = json.loads((root / params.train.metrics_json).read_text())
    tokens = summary["target_tokens"] / 1e6
    out = {
        "what trains": f"one model: {summary['steps']:,} updates, {tokens:.1f} M target tokens",
        "training minutes": f"{summary['minutes']:.1f}",
    }
    for split in (s for s in SPLITS if s != TRAIN_SPLIT):
        score = json.loads((root / scores_path(params.score.scores_dir, split)).read_text())
        out[f"{split} BLEU / lc-tok (chrF)"] = (
            f"{score['bleu']:.1f} / {score['bleu_lc_tok']:.1f} ({score['chrf']:.1f})"
        )
    return out


def readme_default_prose(root: Path = ROOT) -> str:
    """The README's sentence on the committed run's training, as `train.metrics_json` gives it."""
    summary = json.loads((root / load_params(root / "params.yaml").train.metrics_json).read_text())
    return (
        f"{summary['epochs']} epochs, {summary['mean_tokens_per_s']:,.0f} target tokens/s with "
        f"validations, {summary['parameters'] / 1e6:.1f} M parameters"
    )


def default_column_mismatches(readme: str, expected: dict[str, str], prose: str) -> list[str]:
    """Where the README's results (default column, training sentence) differ from `expected`."""
    column = {row[0]: row[1] for row in section_table(readme, "Results")}
    wrong = [
        f"{label}: README {column.get(label)!r}, reports {want!r}"
        for label, want in expected.items()
        if column.get(label) != want
    ]
    if prose not in " ".join(readme.split()):
        wrong.append(f"training sentence: reports say {prose!r}")
    return wrong


def test_readme_results_are_the_committed_reports():
    """A new committed run fails this until the README's default column follows its reports."""
    readme = (ROOT / "README.md").read_text()
    wrong = default_column_mismatches(readme, readme_default_figures(), readme_default_prose())
    assert not wrong, "\n".join(wrong)


def test_a_readme_figure_that_differs_from_the_reports_is_caught():
    readme = (ROOT / "README.md").read_text()
    changed = readme_default_figures() | {"val BLEU / lc-tok (chrF)": "99.9 / 99.9 (99.9)"}
    wrong = default_column_mismatches(readme, changed, "1 epochs")
    assert [w.split(":")[0] for w in wrong] == ["val BLEU / lc-tok (chrF)", "training sentence"]
    assert wrong[0].endswith("reports '99.9 / 99.9 (99.9)'")


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def study_mismatches(rows: list[tuple[str, ...]], record: dict[str, dict]) -> list[str]:
    """Where docs/results.md's "Quality per CPU hour" rows differ from the study's record: val BLEU
    and lc-tok (0.1), p at the decimals shown, and the minutes when the cell is a bare number."""
    wrong = []
    for row in rows:
        name = row[0].split("`")[1]
        rec = record.get(name)
        if rec is None:
            wrong.append(f"{name}: not in reports/experiments.jsonl")
            continue
        p = NUMBER.match(row[6])
        shown = {
            "minutes": row[2] if NUMBER.fullmatch(row[2]) else None,
            "val BLEU": row[4],
            "val lc-tok": row[5],
            "p": p and p.group(),
        }
        digits = len(p.group().partition(".")[2]) if p else 0
        want = {
            "minutes": f"{rec['minutes']:.1f}" if shown["minutes"] else None,
            "val BLEU": f"{rec['val_bleu']:.1f}",
            "val lc-tok": f"{rec['val_bleu_lc_tok']:.1f}",
            "p": f"{rec['p_vs_baseline']:.{digits}f}" if rec.get("p_vs_baseline") is not None else None,
        }
        wrong += [f"{name} {k}: docs {shown[k]}, record {want[k]}" for k in shown if shown[k] != want[k]]
    return wrong


def test_the_study_rows_in_results_md_are_the_record():
    lines = (ROOT / "reports/experiments.jsonl").read_text().splitlines()
    record = {row["name"]: row for row in map(json.loads, lines)}
    rows = section_table((ROOT / "docs/results.md").read_text(), "Quality per CPU hour")
    assert len(rows) > 10 and not study_mismatches(rows, record), study_mismatches(rows, record)
    name = rows[1][0].split("`")[1]
    changed = record | {name: record[name] | {"val_bleu": record[name]["val_bleu"] + 1}}
    assert [w.split(":")[0] for w in study_mismatches(rows, changed)] == [f"{name} val BLEU"]


BENCH_MD = "reports/bench.md"
BENCH_TABLE = re.compile(r"`(\w+_detail)`")


def bench_quotes(text: str) -> list[tuple[list[str], list[tuple[str, ...]]]]:
    """Each Markdown table whose introduction (the paragraph before it) names `reports/bench.md`:
    the `reports/bench.json` tables that introduction names, and the table's body rows."""
    paragraphs = without_fences(text).split("\n\n")
    return [
        (BENCH_TABLE.findall(intro), table_rows(table)[2:])
        for intro, table in zip(paragraphs, paragraphs[1:], strict=False)
        if BENCH_MD in intro and table.lstrip().startswith("|")
    ]


def unbacked_figures(tables: list[str], rows: list[tuple[str, ...]], bench: dict) -> list[str]:
    """The figures of `rows` (every number of a cell that starts with one) found in none of the
    named `bench` tables at 0 to 3 decimals; a quote that names no table is unbacked as a whole."""
    if not tables:
        return [f"a table quoting {BENCH_MD} names none of its tables"]
    wrong = [f"{name}: not in reports/bench.json" for name in tables if name not in bench]
    values = {
        round(v, digits)
        for name in tables
        for row in bench.get(name, [])
        for v in row.values()
        if isinstance(v, int | float) and not isinstance(v, bool)
        for digits in range(4)
    }
    figures = [n for row in rows for cell in row if cell[:1].isdigit() for n in NUMBER.findall(cell)]
    return wrong + [f"{n} (tables {tables})" for n in figures if float(n.replace(",", "")) not in values]


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_figures_quoted_from_bench_md_are_in_bench_json(doc: Path):
    bench = json.loads((ROOT / "reports/bench.json").read_text())
    wrong = [
        w for tables, rows in bench_quotes(doc.read_text()) for w in unbacked_figures(tables, rows, bench)
    ]
    assert not wrong, f"{doc_id(doc)}: figures not in reports/bench.json: {wrong}"


def test_a_bench_quote_with_a_changed_or_unnamed_figure_is_caught():
    bench = {"speed_detail": [{"lane": "ours", "tok_s": 4972.0, "vs_first": 0.9849}]}
    quote = "From `reports/bench.md`, table `speed_detail`:\n\n| lane | tok/s |\n|---|---:|\n"
    [(tables, rows)] = bench_quotes(quote + "| ours | 4,972 (0.98×) |\n")
    assert tables == ["speed_detail"] and unbacked_figures(tables, rows, bench) == []
    [(tables, rows)] = bench_quotes(quote + "| ours | 4,972 (0.99×) |\n")
    assert unbacked_figures(tables, rows, bench) == ["0.99 (tables ['speed_detail'])"]
    [(tables, rows)] = bench_quotes(
        "Figures from `reports/bench.md`:\n\n| what | figure |\n|---|---|\n| x | 1 |"
    )
    assert unbacked_figures(tables, rows, bench) == [f"a table quoting {BENCH_MD} names none of its tables"]


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
