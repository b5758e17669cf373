"""A tiny trained translator for tests (seconds on a CPU): a SentencePiece model and a one-layer
Transformer that has learned a few toy captions, saved as a checkpoint.

Tests take it from the session fixture `tiny_translator_files` (tests/conftest.py), which trains
it once per session; `train_tiny_translator` itself is for that fixture alone."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from from_params import from_params

from pipeline.core.config import DecodeConfig, ModelConfig, TokenizerConfig
from pipeline.data.batching import pad
from pipeline.data.placeholders import protect_pair
from pipeline.data.tokenizer import Tokenizer, train_tokenizer
from pipeline.model.transformer import Transformer
from pipeline.ops.robustness import read_table
from pipeline.training import checkpoint

ROBUSTNESS_TABLE = (
    Path(__file__).parents[1] / from_params(DecodeConfig).robustness_tsv
)  # the decode stage's table
MODEL_CFG = from_params(ModelConfig, d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0)
EN = "a man | two children | a woman | a dog | three people | the crowd".split(" | ")
DE = "ein Mann | zwei Kinder | eine Frau | ein Hund | drei Leute | die Menge".split(" | ")
VERB = [("walks in the park", "geht im Park"), ("plays near 5 trees", "spielt bei 5 Bäumen")]


def model_flags(files) -> list[str]:
    """`mt-translate`'s flags for the model and tokenizer in `files` (keys "ckpt" and "spm")."""
    return ["--checkpoint", str(files["ckpt"]), "--spm", str(files["spm"])]


def pairs() -> list[tuple[str, str]]:
    out = [
        (f"{e.capitalize()} {ve}.", f"{d.capitalize()} {vd}.")
        for e, d in zip(EN, DE, strict=True)
        for ve, vd in VERB
    ]
    return [protect_pair(e, d) for e, d in out * 5]


def train_tiny_translator(out: Path) -> dict[str, Path]:
    """A SentencePiece model (with the robustness table's inputs, so most characters are known) and
    a tiny Transformer trained 80 steps on the toy pairs, saved as a checkpoint, in `out`.

    Returns {"ckpt": the checkpoint, "spm": the SentencePiece model}."""
    rows = [c.text for c in read_table(ROBUSTNESS_TABLE)]
    text = [s for pair in pairs() for s in pair] + rows[:20]
    tok = Tokenizer.load(
        train_tokenizer(text, out, from_params(TokenizerConfig, vocab_size=200, out_dir="unused"))
    )
    torch.manual_seed(0)
    model = Transformer(MODEL_CFG, tok.vocab_size, tok.pad_id)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    data = pairs()
    for step in range(80):
        batch = data[(step * 8) % len(data) :][:8]
        src = pad([tok.encode(e) + [tok.eos_id] for e, _ in batch], tok.pad_id)
        tgt = pad([[tok.bos_id, *tok.encode(d), tok.eos_id] for _, d in batch], tok.pad_id)
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=tok.pad_id)
        opt.zero_grad()
        loss.backward()
        opt.step()
    ids = {"pad_id": tok.pad_id, "bos_id": tok.bos_id, "eos_id": tok.eos_id}
    cfg = MODEL_CFG.model_dump()
    state = {"model": model.state_dict(), "model_cfg": cfg, "vocab_size": tok.vocab_size, **ids}
    checkpoint.save(out / "model.pt", state)
    return {"ckpt": out / "model.pt", "spm": out / "spm.model"}
