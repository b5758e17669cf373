"""Promotion by sacreBLEU's paired bootstrap test, and rollback, on fixed translation files."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from from_params import from_params, write_changed_params

from pipeline.core.config import PromotionConfig
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.core.params_file import load_params
from pipeline.ops.promotion import (
    ROLLED_BACK_TAG,
    Comparison,
    decide,
    paired_bootstrap,
    promote,
    rollback,
)
from pipeline.tracking.mlflow_tracker import TRANSLATIONS_ARTIFACTS

WORDS = (
    "Mann Frau Hund Katze Kind Ball Straße Park Wasser Haus rot blau groß klein läuft spielt sitzt".split()
)
N = 300


def references() -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))) + "." for _ in range(N)]


def degrade(refs: list[str], fraction: float, seed: int) -> list[str]:
    """`refs` with about `fraction` of the sentences garbled (most words replaced)."""
    rng = random.Random(seed)
    out = []
    for ref in refs:
        words = ref.split()
        if rng.random() < fraction:
            words = [w if rng.random() < 0.3 else rng.choice(WORDS) for w in words]
        out.append(" ".join(words))
    return out


REFS = references()
CHAMPION = degrade(REFS, 0.5, seed=1)
CLEARLY_BETTER = degrade(REFS, 0.2, seed=2)
CLEARLY_WORSE = degrade(REFS, 0.8, seed=3)


def better_by_noise() -> list[str]:
    """The champion's output with one garbled sentence fixed: a hair higher BLEU."""
    hyps = list(CHAMPION)
    i = next(i for i, (h, r) in enumerate(zip(hyps, REFS, strict=True)) if h != r)
    hyps[i] = REFS[i]
    return hyps


def test_clearly_better_candidate_wins_the_paired_test() -> None:
    cmp = paired_bootstrap(REFS, CHAMPION, CLEARLY_BETTER)
    assert cmp.candidate_bleu > cmp.champion_bleu + 5
    assert cmp.p_value < 0.05 and cmp.candidate_wins(0.05)


def test_candidate_better_by_noise_does_not_win() -> None:
    cmp = paired_bootstrap(REFS, CHAMPION, better_by_noise())
    assert 0 < cmp.candidate_bleu - cmp.champion_bleu < 0.5
    assert cmp.p_value >= 0.05 and not cmp.candidate_wins(0.05)


def test_worse_candidate_never_wins_however_small_p() -> None:
    cmp = paired_bootstrap(REFS, CHAMPION, CLEARLY_WORSE)
    assert cmp.candidate_bleu < cmp.champion_bleu and cmp.p_value < 0.05
    assert not cmp.candidate_wins(0.99)


def test_scores_are_sacrebleu_corpus_bleu() -> None:
    from pipeline.core.metrics import score

    cmp = paired_bootstrap(REFS, CHAMPION, CLEARLY_BETTER, n_samples=50)
    assert cmp.champion_bleu == pytest.approx(score(CHAMPION, REFS)["bleu"])
    assert cmp.candidate_bleu == pytest.approx(score(CLEARLY_BETTER, REFS)["bleu"])


@pytest.mark.parametrize(
    ("cmp", "message"),
    [
        (
            Comparison(40.0, 42.0, 0.01),
            "promoted: v2 BLEU 42.00 vs champion v1 40.00, paired bootstrap p = 0.0100 < 0.05",
        ),
        (
            Comparison(40.0, 40.3, 0.2),
            "kept champion v1 (v2 BLEU 40.30 vs champion v1 40.00, paired bootstrap p = 0.2000: p >= 0.05)",
        ),
        (
            Comparison(40.0, 38.0, 0.001),
            "kept champion v1 (v2 BLEU 38.00 vs champion v1 40.00, paired bootstrap p = 0.0010: lower)",
        ),
        (Comparison(0.0, 0.0, 0.001), "kept champion v1 (equal scores: v2 BLEU 0.00, champion v1 0.00)"),
        (
            Comparison(40.001, 40.004, 0.001),
            "kept champion v1 (equal scores: v2 BLEU 40.00, champion v1 40.00)",
        ),
    ],
)
def test_decision_line_states_the_scores_and_why(cmp: Comparison, message: str) -> None:
    decision = decide(cmp, "2", "1", 0.05)
    assert decision.message == message and decision.promoted == message.startswith("promoted")


def test_lengths_must_match() -> None:
    with pytest.raises(PipelineError, match="300 references, 299 champion and 300 candidate"):
        paired_bootstrap(REFS, CHAMPION[:-1], CLEARLY_BETTER)


def test_config_section_defaults_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    write_changed_params(path)
    assert load_params(path).promotion == from_params(PromotionConfig)
    write_changed_params(path, {"promotion": {"p_threshold": 0.01}})
    assert load_params(path).promotion.p_threshold == 0.01
    write_changed_params(path, {"promotion": {"p_treshold": 0.01}})
    with pytest.raises(ConfigError, match=r"params\.yaml: promotion\.p_treshold: Extra inputs"):
        load_params(path)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch):
    """A temporary MLflow database; returns add(hyps) -> version registered as `candidate`."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from pipeline.tracking import store

    client, name = store.client(), "test-translator"
    exp = store.experiment_id("promotion-test")
    client.create_registered_model(name)

    def add(hyps: list[str]) -> str:
        run_id = client.create_run(exp).info.run_id
        path = tmp_path / run_id / "val.hyp.de"
        path.parent.mkdir()
        path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        client.log_artifact(run_id, str(path), TRANSLATIONS_ARTIFACTS)
        version = client.create_model_version(name, f"runs:/{run_id}/translator", run_id=run_id).version
        client.set_registered_model_alias(name, "candidate", version)
        return str(version)

    return client, name, add


def champion_of(client, name: str) -> str:
    return str(client.get_model_version_by_alias(name, "champion").version)


def test_promote_keep_and_rollback_are_recorded_on_versions(registry) -> None:
    client, name, add = registry
    first = add(CHAMPION)
    assert promote(name, REFS).message == f"promoted: v{first} is the first champion"
    assert promote(name, REFS).message.startswith(f"kept champion v{first} (it is also the candidate")

    noise = add(better_by_noise())
    decision = promote(name, REFS)
    assert not decision.promoted and decision.message.startswith(f"kept champion v{first}")
    assert champion_of(client, name) == first
    tags = client.get_model_version(name, noise).tags
    assert tags["promotion.decision"] == "kept" and float(tags["promotion.p_value"]) >= 0.05
    assert float(tags["promotion.bleu_candidate"]) > float(tags["promotion.bleu_champion"])

    better = add(CLEARLY_BETTER)
    decision = promote(name, REFS)
    assert decision.promoted and decision.message.startswith(f"promoted: v{better} BLEU")
    assert champion_of(client, name) == better
    tags = client.get_model_version(name, better).tags
    assert tags["promotion.replaced"] == first and float(tags["promotion.p_value"]) < 0.05

    assert rollback(name) == f"rolled back: champion v{better} -> v{first}"
    assert champion_of(client, name) == first
    assert client.get_model_version(name, better).tags[ROLLED_BACK_TAG] == first
    assert client.get_model_version(name, first).tags["rollback.restored_from"] == better
    assert "was rolled back" in promote(name, REFS).message  # the candidate is still `better`
    assert champion_of(client, name) == first
    with pytest.raises(PipelineError, match=f"champion v{first} replaced no version"):
        rollback(name)


def test_worse_candidate_is_kept_out_of_service(registry) -> None:
    client, name, add = registry
    first = add(CHAMPION)
    promote(name, REFS)
    worse = add(CLEARLY_WORSE)
    decision = promote(name, REFS)
    assert not decision.promoted and decision.message.endswith(": lower)")
    assert champion_of(client, name) == first
    assert client.get_model_version(name, worse).tags["promotion.decision"] == "kept"


def test_equal_scores_keep_the_champion_without_a_p(registry) -> None:
    client, name, add = registry
    first = add(CHAMPION)
    promote(name, REFS)
    again = add(CHAMPION)  # another training run, the same translations
    decision = promote(name, REFS)
    assert decision.message.startswith(f"kept champion v{first} (equal scores: v{again} BLEU")
    assert "p =" not in decision.message and champion_of(client, name) == first
    assert client.get_model_version(name, again).tags["promotion.decision"] == "kept"


def test_missing_translations_is_a_one_line_error(registry) -> None:
    client, name, add = registry
    add(CHAMPION)
    promote(name, REFS)
    run_id = client.create_run(client.get_experiment_by_name("promotion-test").experiment_id).info.run_id
    version = client.create_model_version(name, f"runs:/{run_id}/translator", run_id=run_id).version
    client.set_registered_model_alias(name, "candidate", version)
    with pytest.raises(
        PipelineError, match=rf"MLflow run {run_id}: no {TRANSLATIONS_ARTIFACTS}/val\.hyp\.de"
    ):
        promote(name, REFS)
