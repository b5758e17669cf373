"""Checkpoints: safe loading (no code runs), RNG state round trip, averaging, the final-model choice."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from from_params import from_params

from pipeline.core.config import ModelConfig
from pipeline.core.errors import CheckpointError
from pipeline.model.transformer import Transformer
from pipeline.training import checkpoint, final_model

TINY = from_params(ModelConfig, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0)


def tiny_weights(seed: int, tie: bool = True) -> dict:
    torch.manual_seed(seed)
    return checkpoint.weights(Transformer(TINY.model_copy(update={"tie_embeddings": tie}), 12, 0))


class Touch:
    """Unpickling this creates `path`: what a malicious checkpoint could do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    evil, marker = tmp_path / "evil.pt", tmp_path / "pwned"
    torch.save({**tiny_weights(0), "extra": Touch(str(marker))}, evil)
    code = f"from pipeline.training.checkpoint import load_model; from pipeline.core.errors import run_main; run_main(lambda: load_model({str(evil)!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {evil}: refused: ") and done.stderr.count("\n") == 1, done.stderr
    assert not marker.exists()


def test_corrupt_and_foreign_files_are_one_line_errors(tmp_path):
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04 half a zip")
    with pytest.raises(CheckpointError, match=r"cut\.pt: corrupt or truncated"):
        checkpoint.load(tmp_path / "cut.pt")
    torch.save({"model": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match=r"other\.pt: not a model checkpoint"):
        checkpoint.load(tmp_path / "other.pt")


def test_a_checkpoint_older_than_a_model_key_still_loads(tmp_path):
    state = tiny_weights(0)
    state["model_cfg"] = {k: v for k, v in state["model_cfg"].items() if k != "act_dropout"}
    checkpoint.save(tmp_path / "old.pt", state)
    model, _ = checkpoint.load_model(tmp_path / "old.pt")
    assert model.cfg == TINY and model.cfg.act_dropout is None
    del state["model_cfg"]["d_model"]  # a key that was always written: its absence is an error
    checkpoint.save(tmp_path / "broken.pt", state)
    with pytest.raises(CheckpointError, match=r"broken.pt: invalid model_cfg \(Field required\)"):
        checkpoint.load_model(tmp_path / "broken.pt")


def test_rng_state_survives_a_weights_only_round_trip(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    checkpoint.save(tmp_path / "s.pt", {**tiny_weights(0), "rng": checkpoint.rng_state()})
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    checkpoint.set_rng_state(checkpoint.load(tmp_path / "s.pt")["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def save_all(tmp_path: Path, states: list[dict]) -> list[Path]:
    return [checkpoint.save(tmp_path / f"step{i:07d}.pt", s) for i, s in enumerate(states)]


def test_averaging_copies_of_one_checkpoint_returns_it_exactly(tmp_path):
    one = tiny_weights(0)
    avg = final_model.average(save_all(tmp_path, [one, one, one]))
    assert avg.keys() == set(checkpoint.MODEL_KEYS)
    for name, weight in one["model"].items():
        assert torch.equal(avg["model"][name], weight), name


def test_averaging_two_checkpoints_gives_their_mean_and_keeps_ties(tmp_path):
    a, b = tiny_weights(1), tiny_weights(2)
    avg = final_model.average(save_all(tmp_path, [a, b]))["model"]
    for name in a["model"]:
        want = ((a["model"][name].double() + b["model"][name].double()) / 2).float()
        assert torch.equal(avg[name], want), name
    assert not torch.equal(avg["src_embed.weight"], a["model"]["src_embed.weight"])
    assert avg["src_embed.weight"] is avg["tgt_embed.weight"]  # tied: one tensor, as in the model
    untied = final_model.average(save_all(tmp_path, [tiny_weights(1, tie=False), tiny_weights(2, tie=False)]))
    assert untied["model"]["src_embed.weight"] is not untied["model"]["tgt_embed.weight"]


def marked(value: float) -> dict:
    """Weights whose first embedding entry is `value` (the scorer below reads it)."""
    state = tiny_weights(0)
    state["model"]["src_embed.weight"][5, 0] = value
    return state


def marker_score(target: float):
    return lambda model: -abs(model.src_embed.weight[5, 0].item() - target)


@pytest.mark.parametrize(
    "target, source",
    [(9.0, "best"), (3.5, "average_last_4"), (2.5, "average_last_6")],  # last 4: 2..5; all 6: 0..5
)
def test_final_model_is_the_best_scoring_candidate(tmp_path, target, source):
    checkpoint.save(tmp_path / "best.pt", {**marked(9.0), "step": 3})
    kept = [p.name for p in save_all(tmp_path, [marked(float(i)) for i in range(6)])]
    state, choice = final_model.choose(tmp_path, kept, 6, marker_score(target))
    assert set(choice["candidates"]) == {"best", "average_last_4", "average_last_6"}
    assert choice["source"] == source
    assert choice["candidates"][source] == max(choice["candidates"].values())
    assert set(state) == set(checkpoint.MODEL_KEYS)
    assert marker_score(target)(checkpoint.build_model(state)) == pytest.approx(0.0, abs=1e-6)


def test_final_model_candidates_follow_average_last_and_ties_go_to_an_average(tmp_path):
    checkpoint.save(tmp_path / "best.pt", marked(1.0))
    kept = [p.name for p in save_all(tmp_path, [marked(1.0)] * 3)]
    _, choice = final_model.choose(tmp_path, kept, 4, marker_score(1.0))
    assert choice == {"source": "average_last_3", "candidates": {"best": 0.0, "average_last_3": 0.0}}
    _, alone = final_model.choose(tmp_path, kept[-1:], 4, marker_score(1.0))
    assert alone["source"] == "best" and list(alone["candidates"]) == ["best"]
