"""CTranslate2 export: a tiny random model, exported, computes our log-probs and our greedy
translations (fp32); `ct2_translate` keeps the input order and blank lines; the command works."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from from_params import from_params

from pipeline.core.config import DecodeConfig, ModelConfig, TokenizerConfig
from pipeline.core.errors import ConfigError
from pipeline.data.batching import pad
from pipeline.data.tokenizer import Tokenizer, train_tokenizer
from pipeline.model.greedy import greedy
from pipeline.model.transformer import Transformer
from pipeline.ops import export as export_command
from pipeline.serving import ct2 as export
from pipeline.serving.torch_engine import translate
from pipeline.training.checkpoint import save, weights

ctranslate2 = pytest.importorskip("ctranslate2")

TIME_MACHINE = Path(__file__).resolve().parents[1] / "data" / "time_machine.tsv"
SENTENCES = [
    "A man in a blue shirt is standing on a ladder.",
    "Two dogs run through the snow.",
    "",
    "A little girl climbs into a wooden playhouse.",
    "People are sitting at tables in a restaurant while a waiter walks by.",
    "A boy.",
]


@pytest.fixture(scope="module")
def spm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = TIME_MACHINE.read_text(encoding="utf-8").replace("\t", "\n").splitlines()
    out = tmp_path_factory.mktemp("spm")
    return train_tokenizer(lines + SENTENCES, out, from_params(TokenizerConfig, vocab_size=200, out_dir="x"))


@pytest.fixture(scope="module")
def tok(spm_path: Path) -> Tokenizer:
    return Tokenizer.load(spm_path)


def tiny_model(vocab: int, **kw) -> Transformer:
    torch.manual_seed(0)
    cfg = from_params(ModelConfig, d_model=32, n_heads=2, n_layers=2, d_ff=64, dropout=0.0, **kw)
    model = Transformer(cfg, vocab, pad_id=0).eval()
    with torch.no_grad():
        model.tgt_embed.weight[3] *= 3.0  # eos likely enough that some outputs end early
    return model


@pytest.fixture(scope="module")
def exported(tok: Tokenizer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Transformer, Path]:
    model = tiny_model(tok.vocab_size)
    return model, export.export_ctranslate2(model, tok, tmp_path_factory.mktemp("ct2") / "model")


@pytest.mark.parametrize(
    "kw", [{}, {"pre_norm": True, "tie_embeddings": False}], ids=["post-tied", "pre-untied"]
)
def test_exported_model_scores_like_ours(tok: Tokenizer, tmp_path: Path, kw: dict) -> None:
    model = tiny_model(tok.vocab_size, **kw)
    translator = export.load_ct2(export.export_ctranslate2(model, tok, tmp_path / "m"), "float32")
    src_ids = [tok.encode(s) for s in SENTENCES if s]
    tgt_ids = [tok.encode(s)[: 3 + i] for i, s in enumerate(reversed(SENTENCES)) if s]
    results = translator.score_batch(
        [tok.id_to_piece(s) for s in src_ids], [tok.id_to_piece(t) for t in tgt_ids]
    )
    with torch.no_grad():
        src = pad([s + [tok.eos_id] for s in src_ids], 0)
        tgt_in = pad([[tok.bos_id] + t for t in tgt_ids], 0)
        logp = F.log_softmax(model(src, tgt_in), dim=-1)
    for row, (target, result) in enumerate(zip(tgt_ids, results, strict=True)):
        ours = [float(logp[row, i, token]) for i, token in enumerate(target + [tok.eos_id])]
        assert result.log_probs == pytest.approx(ours, abs=1e-4)


def test_ct2_greedy_equals_ours(tok: Tokenizer, exported: tuple[Transformer, Path]) -> None:
    model, path = exported
    cfg = from_params(DecodeConfig, beam_size=1, max_len_a=1.0, max_len_b=4, batch_size=2)
    got = export.ct2_translate(export.load_ct2(path, "float32"), tok, SENTENCES, cfg)
    want = translate(model, tok, SENTENCES, cfg)
    assert got == want and got[2] == ""
    ids = greedy(
        model, pad([tok.encode(s) + [3] for s in SENTENCES if s], 0), 2, 3, max_len_a=1.0, max_len_b=4
    )
    assert len({len(i) for i in ids}) > 1  # outputs of different lengths: eos and the limit both tested


def test_ct2_beam_runs_and_int8_loads(tok: Tokenizer, exported: tuple[Transformer, Path]) -> None:
    _, path = exported
    cfg = from_params(DecodeConfig, beam_size=4, length_penalty=0.6, max_len_a=1.0, max_len_b=4, batch_size=8)
    for compute_type in ("float32", "int8"):
        out = export.ct2_translate(export.load_ct2(path, compute_type), tok, SENTENCES, cfg)
        assert len(out) == len(SENTENCES) and out[2] == "" and all(o for i, o in enumerate(out) if i != 2)


def test_export_refuses_to_replace_what_is_not_an_export(tok: Tokenizer, tmp_path: Path) -> None:
    model = tiny_model(tok.vocab_size)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a CTranslate2 export"):
        export.export_ctranslate2(model, tok, tmp_path / "notes")
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    first = export.export_ctranslate2(model, tok, tmp_path / "ct2")
    assert export.export_ctranslate2(model, tok, first) == first  # an earlier export is replaced


def test_gnmt_ranking_is_our_length_penalty() -> None:
    short, long = ["a"], ["a", "b", "c", "d", "e", "f"]
    scores = [-2.0, -2.6]  # log-probs; CTranslate2's len ** RAW_SCORES barely moves them
    best = lambda alpha: export.gnmt_ranked([short, long], scores, alpha)[0][0]  # noqa: E731
    assert best(0.0) == short  # raw log-prob: short wins
    assert best(1.0) == long  # -2.0/1.17 < -2.6/2.0


def test_export_command_writes_a_model(tok: Tokenizer, spm_path: Path, tmp_path: Path) -> None:
    model = tiny_model(tok.vocab_size)
    checkpoint = tmp_path / "model.pt"
    save(checkpoint, weights(model))
    out = tmp_path / "ct2"
    export_command.main(
        ["ctranslate2", "--checkpoint", str(checkpoint), "--spm", str(spm_path), "--out", str(out)]
    )
    cfg = from_params(DecodeConfig, beam_size=1, max_len_a=1.0, max_len_b=4)
    assert export.ct2_translate(out, tok, SENTENCES, cfg) == translate(model, tok, SENTENCES, cfg)


def test_register_refuses_an_ensemble_before_exporting(
    spm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
    params["decode"]["ensemble"] = ["models/teachers/seed3/model.pt"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "ct2"
    argv = [
        "ctranslate2",
        "--checkpoint",
        "model.pt",
        "--spm",
        str(spm_path),
        "--out",
        str(out),
        "--register",
    ]
    with pytest.raises(ConfigError, match="^decode.ensemble: --register logs one model"):
        export_command.main(argv)
    assert not out.exists()
