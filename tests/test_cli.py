"""The shared translate path on a tiny model trained here (seconds): the robustness table,
`mt-translate` on files (batched) and from any directory, `--n-best`, and the one model loader."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pipeline.core.config import DecodeConfig, ModelConfig, Params, TokenizerConfig
from pipeline.core.errors import CheckpointError, ConfigError
from pipeline.data.batching import pad
from pipeline.data.placeholders import protect_pair
from pipeline.data.tokenizer import Tokenizer, train_tokenizer
from pipeline.model.transformer import Transformer
from pipeline.ops.cli import DEFAULT_PARAMS, checkpoint_path, parser, spm_path
from pipeline.ops.cli import main as translate_main
from pipeline.ops.robustness import longest_run, pass_rate, read_table, uppercase_bleu
from pipeline.serving.ours import OursEngine
from pipeline.serving.translator import load_translator, translate_lines, translate_lines_n_best
from pipeline.tracking.runs import repo_root
from pipeline.training import checkpoint

TABLE = Path(__file__).parent / "robustness.tsv"
TINY = ModelConfig(d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0)
CFG = DecodeConfig(beam_size=2, max_len_a=1.2, max_len_b=4, batch_size=16)
EN = "a man | two children | a woman | a dog | three people | the crowd".split(" | ")
DE = "ein Mann | zwei Kinder | eine Frau | ein Hund | drei Leute | die Menge".split(" | ")
VERB = [("walks in the park", "geht im Park"), ("plays near 5 trees", "spielt bei 5 Bäumen")]


def pairs() -> list[tuple[str, str]]:
    out = [
        (f"{e.capitalize()} {ve}.", f"{d.capitalize()} {vd}.")
        for e, d in zip(EN, DE, strict=True)
        for ve, vd in VERB
    ]
    return [protect_pair(e, d) for e, d in out * 5]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A SentencePiece model (with the table's inputs, so most characters are known) and a tiny
    Transformer trained 80 steps on the toy pairs, saved as a checkpoint."""
    out = tmp_path_factory.mktemp("tiny")
    rows = [c.text for c in read_table(TABLE)]
    text = [s for pair in pairs() for s in pair] + rows[:20]
    tok = Tokenizer.load(train_tokenizer(text, out, TokenizerConfig(vocab_size=200, out_dir="unused")))
    torch.manual_seed(0)
    model = Transformer(TINY, tok.vocab_size, tok.pad_id)
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
    state = {"model": model.state_dict(), "model_cfg": TINY.model_dump(), "vocab_size": tok.vocab_size, **ids}
    checkpoint.save(out / "model.pt", state)
    return {"ckpt": out / "model.pt", "spm": out / "spm.model", "dir": out}


@pytest.fixture(scope="module")
def loaded(files: dict[str, Path]) -> OursEngine:
    return load_translator(files["ckpt"], files["spm"])


def test_robustness_table_passes(loaded: OursEngine) -> None:
    result = pass_rate(loaded, read_table(TABLE), CFG, max_pieces=24)
    assert result.total >= 40
    assert result.passed == result.total, result.failed


def test_real_input_kinds(loaded: OursEngine, capsys) -> None:
    lines = [
        "A man holds 3 balloons and 12 flowers at 5:30 pm.",
        "Visit www.example.com for photos of the 2024 parade.",
        "🙂🙂",
        "A MAN IS WALKING HIS DOG IN THE PARK.",
        " ".join(["A man walks in the park."] * 12),
    ]
    out = translate_lines(loaded, lines, CFG)
    for span in ("3", "12", "5:30", "www.example.com", "2024"):
        assert span in out[0] + out[1]
    assert out[2] == "🙂🙂"
    assert out[3] == out[3].upper() and any(c.isalpha() for c in out[3])
    assert len(out) == 5 and longest_run(out[4]) <= 3 and len(out[4].split()) >= 12


def test_uppercase_bleu_is_computed(loaded: OursEngine) -> None:
    en = ["A man walks in the park.", "Two children play near 5 trees."]
    refs = ["Ein Mann geht im Park.", "Zwei Kinder spielen bei 5 Bäumen."]
    hyps = translate_lines(loaded, en, CFG)
    normal, upper = uppercase_bleu(loaded, en, refs, hyps, CFG)
    assert 0.0 <= normal <= 100.0 and 0.0 <= upper <= 100.0


def cli(files: dict[str, Path], *args: str) -> list[str]:
    argv = ["--checkpoint", str(files["ckpt"]), "--spm", str(files["spm"]), "--beam-size", "2", *args]
    translate_main(argv)
    return []


def test_file_input_is_batched_and_equals_line_by_line(files, loaded, capsys, monkeypatch) -> None:
    lines = ["A man walks in the park.", "", "Two children play near 5 trees. A dog walks.", "🙂"] * 80
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    cli(files)
    out = capsys.readouterr().out.split("\n")[:-1]
    assert len(out) == len(lines) and all(o == "" for o in out[1::4])
    cfg = CFG.model_copy(update={"beam_size": 2})
    assert out[:4] == [translate_lines(loaded, [line], cfg)[0] for line in lines[:4]]


def test_n_best_prints_k_scored_lines(files, capsys) -> None:
    cli(files, "--n-best", "2", "A man walks in the park.", "")
    out = capsys.readouterr().out.split("\n")[:-1]
    assert len(out) == 3 and out[2] == ""
    scores = [float(line.split("\t")[1]) for line in out[:2]]
    assert scores[0] >= scores[1] and all(s <= 0 for s in scores)


def test_defaults_resolve_from_the_repository(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args, params = parser().parse_args([]), Params()
    assert checkpoint_path(args, params) == repo_root() / params.train.out_dir / "model.pt"
    assert spm_path(args, params) == repo_root() / params.tokenizer.out_dir / "spm.model"
    assert DEFAULT_PARAMS == repo_root() / "params.yaml"
    assert os.getcwd() == str(tmp_path)


def test_one_loader_checks_special_ids(files, tmp_path) -> None:
    state = checkpoint.load(files["ckpt"])
    checkpoint.save(tmp_path / "bad.pt", state | {"eos_id": 7})
    with pytest.raises(CheckpointError, match="special ids"):
        load_translator(tmp_path / "bad.pt", files["spm"])


def test_ctranslate2_engine_gives_our_greedy_output(files, loaded, capsys, tmp_path) -> None:
    """`--engine ctranslate2` goes through the same processing; greedy decoding is identical."""
    from pipeline.serving.ct2 import export_ctranslate2

    export_ctranslate2(loaded.model, loaded.tokenizer, tmp_path / "ct2")
    lines = ["A man walks in the park.", "Two children play near 5 trees. A dog walks.", "🙂"]
    argv = ["--checkpoint", str(files["ckpt"]), "--spm", str(files["spm"]), "--beam-size", "1"]
    translate_main([*argv, "--engine", "ctranslate2", "--ct2-dir", str(tmp_path / "ct2"), "--compute-type",
                    "float32", *lines])  # fmt: skip
    out = capsys.readouterr().out.split("\n")[:-1]
    greedy_cfg = CFG.model_copy(update={"beam_size": 1})
    assert out == translate_lines(loaded, lines, greedy_cfg)
    translate_main([*argv, "--engine", "ctranslate2", "--ct2-dir", str(tmp_path / "ct2"), "--compute-type",
                    "float32", "--n-best", "1", lines[0]])  # fmt: skip
    text, score = capsys.readouterr().out.rstrip("\n").split("\t")
    ours_text, ours_score = translate_lines_n_best(loaded, [lines[0]], greedy_cfg, 1)[0][0]
    assert text == ours_text and float(score) == pytest.approx(ours_score, abs=0.01)  # close, not bit-equal
    with pytest.raises(ConfigError, match="--attention needs --engine ours"):
        translate_main([*argv, "--engine", "ctranslate2", "--attention", str(tmp_path / "a.png"), "x"])
