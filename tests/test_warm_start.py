"""`train.init_from: champion`: a tiny model registered as champion in a temporary MLflow starts the
next training (its first step's loss is the champion's loss on that batch, far below a fresh
model's), and another architecture, another tokenizer or no champion is a one-line error, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from from_params import from_params
from toy_train import TOY_OPTIM, ToyValidation

from pipeline.core.config import DecodeConfig, ModelConfig, OptimConfig, TokenizerConfig
from pipeline.core.errors import CheckpointError, run_main
from pipeline.data.batching import EpochOrder, longest_sides, to_tensors
from pipeline.data.tokenizer import Tokenizer, train_tokenizer
from pipeline.training import checkpoint
from pipeline.training import loop as train_module
from pipeline.training.loop import RunContext, new_model, run_identity, start
from pipeline.training.warm_start import warm_start

NAME = "warm-start-test"
MODEL = from_params(
    ModelConfig, d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.0
)  # no dropout: exact losses
SENTENCES = [f"A man with {n} red dogs walks in the park." for n in ("two", "three", "four")] + [
    f"Ein Mann mit {n} roten Hunden geht im Park." for n in ("zwei", "drei", "vier")
]


def pairs(tok: Tokenizer) -> list:
    en, de = SENTENCES[:3] * 8, SENTENCES[3:] * 8
    return list(zip(tok.encode_batch(en), tok.encode_batch(de), strict=True))


def first_batch_loss(model, data: list, pad_id: int) -> float:
    """Loss per target token of `model` (eval mode) on the first batch `train` takes."""
    src, tgt_in, tgt_out = to_tensors(
        data, EpochOrder(longest_sides(data), TOY_OPTIM["max_tokens"], 3)(0)[0], pad_id, "cpu"
    )
    keep = tgt_out != pad_id
    with torch.no_grad():
        loss = model.eval()(src, tgt_in, keep, target=tgt_out[keep], label_smoothing=0.1)
    return loss.item() / int(keep.sum())


@pytest.fixture(scope="module")
def champion(tmp_path_factory):
    """(tmp dir, tokenizer path, the trained champion model, its training pairs): a toy model trained
    80 steps, logged and registered as v1 of NAME with the alias `champion` in a temporary MLflow."""
    root = tmp_path_factory.mktemp("warm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        from pipeline.serving.pyfunc import log_translator
        from pipeline.tracking import store

        spm_model = train_tokenizer(
            SENTENCES * 5, root / "spm", from_params(TokenizerConfig, vocab_size=60, out_dir="x")
        )
        tok = Tokenizer.load(spm_model)
        data = pairs(tok)
        model = new_model(MODEL, tok.vocab_size, tok.pad_id, seed=5)
        optim = from_params(OptimConfig, **(TOY_OPTIM | {"max_steps": 80, "val_every": 40}))
        run = RunContext(root / "c", root / "c.csv", "x")
        train_module.train(model, data, ToyValidation(data[:4]), start(model, optim, run))
        ckpt = checkpoint.save(root / "model.pt", checkpoint.weights(model))
        run_id = store.client().create_run(store.experiment_id("warm")).info.run_id
        version = log_translator(run_id, ckpt, spm_model, from_params(DecodeConfig).settings(), NAME)
        store.client().set_registered_model_alias(NAME, "champion", version)
        yield root, spm_model, model, data


@pytest.fixture
def mlflow_uri(champion, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{champion[0] / 'mlflow.db'}")


def test_training_starts_from_the_champions_weights(champion, mlflow_uri, tmp_path, losses):
    _, spm_model, trained, data = champion
    tok = Tokenizer.load(spm_model)
    fresh = new_model(MODEL, tok.vocab_size, tok.pad_id, seed=9)
    fresh_loss = first_batch_loss(fresh, data, tok.pad_id)
    model = new_model(MODEL, tok.vocab_size, tok.pad_id, seed=9)
    source = warm_start(model, NAME, spm_model)
    assert source["alias"] == "champion" and source["version"] == "1"
    theirs = trained.state_dict()
    assert all(torch.equal(value, theirs[key]) for key, value in model.state_dict().items())

    run = RunContext(tmp_path, tmp_path / "log.csv", "x", init_from=source)
    optim = from_params(OptimConfig, **(TOY_OPTIM | {"max_steps": 1}))
    train_module.train(model, data, ToyValidation(data[:4]), start(model, optim, run))
    champion_loss = first_batch_loss(trained, data, tok.pad_id)
    assert losses[0] == pytest.approx(champion_loss, rel=1e-4)
    assert losses[0] < 0.5 * fresh_loss  # a fresh initialisation is far worse on the same batch


def test_warm_start_is_part_of_the_run_identity(champion):
    model = champion[2]
    scratch = run_identity(model, from_params(OptimConfig), RunContext(Path("."), Path("x"), "d"))
    warm = run_identity(
        model, from_params(OptimConfig), RunContext(Path("."), Path("x"), "d", init_from={"version": "1"})
    )
    assert "init_from" not in scratch  # from-scratch identities are unchanged: old last.pt continue
    assert checkpoint.fingerprint(scratch) != checkpoint.fingerprint(warm)


def one_line_error(action, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        run_main(action)
    assert info.value.code == 1
    *before, last = capsys.readouterr().err.strip().splitlines()
    assert last.startswith("error: ") and all(" INFO " in line for line in before)  # MLflow's db set-up
    return last


def test_another_architecture_is_a_one_line_error(champion, mlflow_uri, capsys):
    tok = Tokenizer.load(champion[1])
    wider = new_model(MODEL.model_copy(update={"d_model": 64}), tok.vocab_size, tok.pad_id, seed=1)
    message = one_line_error(lambda: warm_start(wider, NAME, champion[1]), capsys)
    assert message == (
        f"error: train.init_from: champion v1 of {NAME!r} was trained with d_model 32, "
        "this run has 64 (train.model.d_model)"
    )


def test_another_tokenizer_is_a_one_line_error(champion, mlflow_uri, tmp_path, capsys):
    more = ["A cat sleeps on the sofa.", "Eine Katze schläft auf dem Sofa."]
    other = train_tokenizer(
        (SENTENCES + more) * 5, tmp_path, from_params(TokenizerConfig, vocab_size=60, out_dir="x")
    )
    tok = Tokenizer.load(other)
    model = new_model(MODEL, tok.vocab_size, tok.pad_id, seed=1)
    message = one_line_error(lambda: warm_start(model, NAME, other), capsys)
    assert f"champion v1 of {NAME!r} was trained with another tokenizer" in message


def test_no_champion_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'empty.db'}")
    model = new_model(MODEL, 60, 0, seed=1)
    message = one_line_error(lambda: warm_start(model, NAME, tmp_path / "spm.model"), capsys)
    assert message.startswith(f"error: train.init_from: MLflow model {NAME!r} has no 'champion' version")
    with pytest.raises(CheckpointError):
        warm_start(model, NAME, tmp_path / "spm.model")
