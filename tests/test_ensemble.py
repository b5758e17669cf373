"""Ensemble decoding: the mean of the members' log-probs, and one model decodes as it always did."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from from_params import from_params
from tiny_translator import model_flags

from pipeline.core.config import DecodeConfig, ModelConfig
from pipeline.core.errors import ConfigError
from pipeline.model.beam import decode_batch
from pipeline.model.ensemble import Ensemble
from pipeline.model.transformer import Transformer
from pipeline.ops.cli import main as translate_main
from pipeline.serving.translator import load_translator, translate_lines
from pipeline.training import checkpoint

CFG = from_params(ModelConfig, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0)
PAD, BOS, EOS, VOCAB = 0, 1, 2, 40


def model(seed: int, vocab: int = VOCAB) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(CFG, vocab, PAD).eval()


def source() -> torch.Tensor:
    src = torch.randint(3, VOCAB, (3, 6), generator=torch.Generator().manual_seed(0))
    src[:, -1] = EOS
    return src


def first_step(decoder, src: torch.Tensor) -> torch.Tensor:
    cache = decoder.init_cache(decoder.encode(src), src)
    return decoder.decode_step(torch.full((src.size(0),), BOS), cache)


def test_a_step_is_the_mean_of_the_members_log_probs() -> None:
    a, b, src = model(0), model(1), source()
    with torch.inference_mode():
        mean = (F.log_softmax(first_step(a, src), -1) + F.log_softmax(first_step(b, src), -1)) / 2
        assert torch.allclose(first_step(Ensemble([a, b]), src), mean, atol=1e-6)


def test_an_ensemble_follows_beam_reordering_and_finished_sentences() -> None:
    """Two copies of one model search exactly as that model does (their mean is its log-probs)."""
    m, src = model(2), source()
    cfg = from_params(DecodeConfig, beam_size=3, length_penalty=1.0, max_len_a=1.0, max_len_b=3)
    assert decode_batch(Ensemble([m, m]), src, BOS, EOS, cfg) == decode_batch(m, src, BOS, EOS, cfg)


def test_members_must_share_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="vocabulary size"):
        Ensemble([model(0), model(1, vocab=VOCAB + 1)])
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])


def test_one_checkpoint_is_todays_engine_and_an_ensemble_of_it_translates_alike(
    tiny_translator_files: Mapping[str, Path], tmp_path: Path
) -> None:
    ckpt, spm = tiny_translator_files["ckpt"], tiny_translator_files["spm"]
    single = load_translator(ckpt, spm)
    assert isinstance(single.model, Transformer)  # N = 1: no ensemble in the way
    other = tmp_path / "other.pt"
    state = checkpoint.load(ckpt)
    checkpoint.save(other, state)
    both = load_translator(ckpt, spm, ensemble=[other])
    assert isinstance(both.model, Ensemble) and len(both.model.members) == 2
    lines = ["A man walks in the park.", "Two children play near 5 trees."]
    cfg = from_params(DecodeConfig, beam_size=2, max_len_a=1.2, max_len_b=4)
    assert translate_lines(both, lines, cfg) == translate_lines(single, lines, cfg)


def test_the_cli_refuses_what_an_ensemble_cannot_do(tiny_translator_files, tmp_path) -> None:
    argv = [
        *model_flags(tiny_translator_files),
        "--ensemble",
        str(tiny_translator_files["ckpt"]),
    ]
    with pytest.raises(ConfigError, match="--attention"):
        translate_main([*argv, "--attention", str(tmp_path / "a.png"), "x"])
    with pytest.raises(ConfigError, match="--engine torch"):
        translate_main([*argv, "--engine", "ctranslate2", "x"])
