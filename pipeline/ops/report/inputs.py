"""What the results page shows, read from the run's files as plain data (`ReportInputs`).

Every path comes from params: the decode stage's translations and time-machine outputs, the score
stage's scores and signatures, the train stage's summary, facts and MLflow run id. With tracking on,
the run's registered versions and the champion come from the MLflow registry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.config import Params
from pipeline.core.errors import DataError
from pipeline.core.git import git_commit
from pipeline.core.run_id import read_run_id
from pipeline.data import time_machine as tm
from pipeline.data import translations as tr
from pipeline.data.multi30k import load_corpus
from pipeline.ops import robustness
from pipeline.ops.robustness import RobustnessResult
from pipeline.tracking import registry
from pipeline.tracking.registry import VersionInfo

BUCKET_SPLIT = "test_2016_flickr"  # BLEU by length, and the upper-case BLEU of the robustness section


def read_json(path: Path) -> dict:
    """A JSON object from `path`.

    Raises:
        DataError: missing or not JSON (run the stage that writes it).
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: not found (run the stage that writes it)") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def read_json_optional(path: Path) -> dict:
    """`read_json(path)`, or {} when `path` is absent (an older run without the file)."""
    return read_json(path) if Path(path).is_file() else {}


@dataclass(frozen=True)
class ReportInputs:
    """What the page shows, as plain data.

    `metrics`: `{split: {bleu, chrf, bleu_lc_tok}}`; `signatures`: the same keys holding sacreBLEU
    signatures; `summary`: the train stage's summary and facts merged over the params' `model` /
    `optim` config; `robustness`: the robustness table's result and the upper-case BLEU pair
    (normal source, upper-cased source); `time_machine_*`: the tutorial's sentences (as translated),
    our translations and the tutorial's German; `bucket_*`: one split's English, our output and the
    references; `links`: name -> file listed at the end of the page (only existing ones are linked);
    `versions`: the registered versions of the MLflow run (None: tracking off), `champion`: the
    version `champion` names.
    """

    metrics: dict
    summary: dict
    time_machine_en: list[str]
    time_machine_ours: list[str]
    time_machine_tutorial: list[str]
    bucket_split: str
    bucket_en: list[str]
    bucket_hyps: list[str]
    bucket_refs: list[str]
    signatures: dict = field(default_factory=dict)
    robustness: tuple[RobustnessResult, tuple[float, float]] | None = None
    git_commit: str = "unknown"
    mlflow_run_id: str | None = None
    links: dict[str, Path] = field(default_factory=dict)
    tgt_lang: str = "de"
    versions: list[VersionInfo] | None = None
    champion: VersionInfo | None = None


def load_inputs(params: Params) -> ReportInputs:
    """The page's inputs from the run's files (every path from `params`) and the corpus.

    Raises:
        DataError: a file a finished run always has is missing or malformed (names the file).
        MlflowException: tracking is on and the registry cannot be read.
    """
    tgt, corpus = params.download.tgt_lang, load_corpus(params.download.out_dir)
    dec, train = params.decode, params.train
    translations, scores = Path(dec.translations_dir), Path(params.score.scores_dir)
    test, splits = corpus[BUCKET_SPLIT], [s for s in tr.EVAL_SPLITS if s in corpus]
    config = {"model": train.model.model_dump(), "optim": train.optim.model_dump()}
    en, tutorial_de = tm.read(Path(dec.time_machine_tsv))
    run_id = read_run_id(Path(train.run_id_file))
    versions, champion = registry_entries(params, run_id)
    run_files = {
        "train log": train.log_csv,
        "train summary": train.metrics_json,
        "train facts": train.facts_json,
    }
    return ReportInputs(
        metrics=tr.read_scores(scores),
        signatures=read_json_optional(Path(params.score.facts_json)),
        summary={
            **config,
            **read_json(Path(train.metrics_json)),
            **read_json_optional(Path(train.facts_json)),
        },
        robustness=robustness.read_figures(Path(dec.robustness_json), Path(dec.robustness_failures_json)),
        time_machine_en=en,
        time_machine_ours=tr.read_lines(tr.translation_path(translations, tm.TIME_MACHINE, tgt)),
        time_machine_tutorial=tutorial_de,
        bucket_split=BUCKET_SPLIT,
        bucket_en=test["en"],
        bucket_hyps=tr.read_lines(tr.translation_path(translations, BUCKET_SPLIT, tgt)),
        bucket_refs=test[tgt],
        git_commit=git_commit(),
        mlflow_run_id=run_id,
        links={f"{s} scores": tr.scores_path(scores, s) for s in splits}
        | {"score signatures": Path(params.score.facts_json), "time machine": Path(dec.time_machine_md)}
        | {name: Path(path) for name, path in run_files.items()}
        | {f"{s} translations": tr.translation_path(translations, s, tgt) for s in splits},
        tgt_lang=tgt,
        versions=versions,
        champion=champion,
    )


def registry_entries(
    params: Params, run_id: str | None
) -> tuple[list[VersionInfo] | None, VersionInfo | None]:
    """The versions of `mlflow.model_name` registered from run `run_id` (None when tracking is
    off), and the champion."""
    if not params.mlflow.enabled:
        return None, None
    if not run_id:
        return [], None
    name = params.mlflow.model_name
    return registry.run_versions(name, run_id), registry.champion(name)
