"""Promotion of the `candidate` model to `champion` by sacreBLEU's paired bootstrap on val (Koehn
2004), and rollback to the version a promotion replaced (docs/retraining.md, "Promotion by paired
bootstrap").
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from pipeline.core.config import PromotionConfig
from pipeline.core.errors import PipelineError
from pipeline.core.params_file import default_params
from pipeline.tracking import mlflow_tracker, store

REPLACED_TAG = "promotion.replaced"
ROLLED_BACK_TAG = "rollback.replaced_by"


@dataclass(frozen=True)
class Comparison:
    """Corpus BLEU (0-100) of both systems and the paired bootstrap p-value of their difference."""

    champion_bleu: float
    candidate_bleu: float
    p_value: float

    def equal(self) -> bool:
        """Both scores are the same as shown (two decimals): p says nothing then."""
        return round(self.candidate_bleu, 2) == round(self.champion_bleu, 2)

    def candidate_wins(self, p_threshold: float) -> bool:
        """Higher BLEU, and a difference that chance explains with probability below `p_threshold`."""
        return not self.equal() and self.candidate_bleu > self.champion_bleu and self.p_value < p_threshold


def paired_bootstrap(
    refs: list[str], champion_hyps: list[str], candidate_hyps: list[str], n_samples: int = 1000
) -> Comparison:
    """sacreBLEU's paired bootstrap resampling of BLEU, the champion as the baseline.

    Raises:
        PipelineError: the three lists differ in length, or are empty.
    """
    if not (len(refs) == len(champion_hyps) == len(candidate_hyps)) or not refs:
        raise PipelineError(
            f"cannot compare: {len(refs)} references, {len(champion_hyps)} champion and "
            f"{len(candidate_hyps)} candidate translations"
        )
    systems = [("champion", champion_hyps), ("candidate", candidate_hyps)]
    _, scores = PairedTest(systems, {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=n_samples)()
    champion, candidate = scores["BLEU"]
    return Comparison(champion.score, candidate.score, float(candidate.p_value))


def run_translations(run_id: str, split: str = "val", lang: str = "de") -> list[str]:
    """The translations `decode` logged to MLflow run `run_id` (one line per source sentence).

    Raises:
        PipelineError: the run has no such artifact.
    """
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        try:
            artifact = mlflow_tracker.logged_translation(run_id, split, lang)  # `.txt`, or the older name
            path = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path=artifact, dst_path=tmp, tracking_uri=store.tracking_uri()
            )
        except Exception as exc:  # noqa: BLE001 - MlflowException or OSError: one line either way
            missing = mlflow_tracker.translation_artifact(split, lang)
            raise PipelineError(f"MLflow run {run_id}: no {missing} ({type(exc).__name__})") from None
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


@dataclass(frozen=True)
class Decision:
    promoted: bool
    message: str  # starts with "promoted:" or "kept champion"
    comparison: Comparison | None = None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _tag(model_name: str, version: str, tags: dict[str, str]) -> None:
    client = store.client()
    for key, value in tags.items():
        client.set_model_version_tag(model_name, version, key, value)


def decide(cmp: Comparison, candidate: str, champion: str, p_threshold: float) -> Decision:
    """The decision on candidate version `candidate` against champion version `champion`, with both
    scores in its message and p unless the scores are equal (`Comparison.equal`)."""
    if cmp.equal():
        return Decision(
            False,
            f"kept champion v{champion} (equal scores: v{candidate} BLEU "
            f"{cmp.candidate_bleu:.2f}, champion v{champion} {cmp.champion_bleu:.2f})",
            cmp,
        )
    scores = (
        f"v{candidate} BLEU {cmp.candidate_bleu:.2f} vs champion v{champion} "
        f"{cmp.champion_bleu:.2f}, paired bootstrap p = {cmp.p_value:.4f}"
    )
    if cmp.candidate_wins(p_threshold):
        return Decision(True, f"promoted: {scores} < {p_threshold}", cmp)
    why = "lower" if cmp.candidate_bleu < cmp.champion_bleu else f"p >= {p_threshold}"
    return Decision(False, f"kept champion v{champion} ({scores}: {why})", cmp)


def _compare_versions(champion, candidate, refs: list[str], cfg: PromotionConfig, lang: str) -> Decision:
    hyps = [run_translations(version.run_id, "val", lang) for version in (champion, candidate)]
    cmp = paired_bootstrap(refs, *hyps, cfg.n_samples)
    return decide(cmp, str(candidate.version), str(champion.version), cfg.p_threshold)


def promote(
    model_name: str, refs: list[str], cfg: PromotionConfig | None = None, lang: str = "de"
) -> Decision:
    """Move `champion` to the `candidate` version when it is significantly better on val, or when
    there is no champion yet; tag the candidate with the outcome.

    `refs`: the val references, in `lang`; `cfg`: params.yaml's `promotion` section unless given.

    Raises:
        PipelineError: no candidate, or its or the champion's run lacks the val translations.
    """
    from pipeline.tracking.registry import version_by_alias

    cfg = cfg or default_params().promotion
    candidate = version_by_alias(model_name, "candidate")
    if candidate is None:
        raise PipelineError(f"MLflow model {model_name!r}: no 'candidate' version (run decode first)")
    champion = version_by_alias(model_name, "champion")
    if champion is not None and champion.version == candidate.version:
        return Decision(False, f"kept champion v{champion.version} (it is also the candidate)")
    if ROLLED_BACK_TAG in candidate.tags:
        kept = f"v{champion.version}" if champion is not None else "none"
        return Decision(False, f"kept champion {kept} (candidate v{candidate.version} was rolled back)")
    if champion is not None and champion.run_id == candidate.run_id:
        return Decision(
            False,
            f"kept champion v{champion.version} (candidate v{candidate.version} is the same "
            "training run: its logged translations are the candidate's, no paired test)",
        )
    if champion is None:
        decision = Decision(True, f"promoted: v{candidate.version} is the first champion")
    else:
        decision = _compare_versions(champion, candidate, refs, cfg, lang)
    tags = {"promotion.decision": "promoted" if decision.promoted else "kept", "promotion.time": _now()}
    if decision.comparison is not None:
        cmp = decision.comparison
        tags |= {
            "promotion.champion_version": str(champion.version),
            "promotion.bleu_candidate": f"{cmp.candidate_bleu:.4f}",
            "promotion.bleu_champion": f"{cmp.champion_bleu:.4f}",
            "promotion.p_value": f"{cmp.p_value:.4f}",
            "promotion.p_threshold": str(cfg.p_threshold),
        }
    if decision.promoted and champion is not None:
        tags[REPLACED_TAG] = str(champion.version)
    _tag(model_name, candidate.version, tags)
    if decision.promoted:
        store.client().set_registered_model_alias(model_name, "champion", candidate.version)
    return decision


def rollback(model_name: str) -> str:
    """Move `champion` back to the version the current champion replaced; tag both versions.

    The rolled-back version is tagged `rollback.replaced_by` and is never promoted again; the
    restored one `rollback.restored_from`. Returns the message.

    Raises:
        PipelineError: no champion, or it replaced no version (it was the first).
    """
    from pipeline.tracking.registry import version_by_alias

    champion = version_by_alias(model_name, "champion")
    if champion is None:
        raise PipelineError(f"MLflow model {model_name!r}: no 'champion' version to roll back")
    previous = champion.tags.get(REPLACED_TAG)
    if previous is None:
        raise PipelineError(
            f"MLflow model {model_name!r}: champion v{champion.version} replaced no version (nothing to roll back to)"
        )
    when = _now()
    _tag(model_name, champion.version, {ROLLED_BACK_TAG: previous, "rollback.time": when})
    _tag(model_name, previous, {"rollback.restored_from": str(champion.version), "rollback.time": when})
    store.client().set_registered_model_alias(model_name, "champion", previous)
    return f"rolled back: champion v{champion.version} -> v{previous}"
