"""sacreBLEU wrappers: perfect output, agreement with sacrebleu's own functions, errors, and the
paper-comparable BLEU whose processing reproduces Multi30k's official tokenised references."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
import sacrebleu
from from_params import write_changed_params

from pipeline.core.errors import DataError
from pipeline.core.metrics import bleu_lc_tok, paper_tokenize, score, sentence_chrf, split_scores

REFS = [
    "Ein Mann führt seinen Hund im Park spazieren.",
    "Zwei Kinder spielen in der Nähe eines Brunnens.",
    "Eine Frau in einem roten Mantel liest ein Buch.",
]
HYPS = [
    "Ein Mann geht mit seinem Hund im Park spazieren.",
    "Zwei Kinder spielen nahe einem Brunnen.",
    "Eine Frau im roten Mantel liest ein Buch.",
]


def test_perfect_hypotheses_score_100() -> None:
    result = score(REFS, REFS)
    assert result["bleu"] == pytest.approx(100.0) and result["chrf"] == pytest.approx(100.0)


def test_matches_sacrebleu_directly() -> None:
    result = score(HYPS, REFS)
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0.0 < result["bleu"] < 100.0
    assert result["bleu_signature"].startswith("nrefs:1|") and "tok:13a" in result["bleu_signature"]
    assert result["chrf_signature"].startswith("nrefs:1|")


def test_sentence_chrf() -> None:
    assert sentence_chrf(REFS[0], REFS[0]) == pytest.approx(100.0)
    assert sentence_chrf(HYPS[1], REFS[1]) == pytest.approx(sacrebleu.sentence_chrf(HYPS[1], [REFS[1]]).score)
    assert sentence_chrf(HYPS[1], REFS[1]) < 100.0


def test_length_mismatch_raises() -> None:
    with pytest.raises(DataError, match="2 hypotheses but 3 references"):
        score(HYPS[:2], REFS)
    with pytest.raises(DataError, match="nothing to score"):
        score([], [])


# ---- paper-comparable BLEU ------------------------------------------------------------------
MIRROR = Path(os.environ.get("MULTI30K_MIRROR", Path(__file__).resolve().parents[2] / "shared" / "multi30k"))


def gz_lines(path: Path) -> list[str]:
    lines = gzip.open(path, "rt", encoding="utf-8").read().split("\n")
    return lines[:-1] if lines[-1] == "" else lines


@pytest.mark.parametrize("split", ["val", "test_2016_flickr", "test_2017_flickr"])
def test_paper_tokenize_reproduces_official_references(split: str) -> None:
    raw, tok = MIRROR / f"{split}.de.gz", MIRROR / "tok" / f"{split}.lc.norm.tok.de.gz"
    if not (raw.is_file() and tok.is_file()):
        pytest.skip(f"no Multi30k mirror with tok/ at {MIRROR} (set MULTI30K_MIRROR)")
    ours, official = [paper_tokenize(line) for line in gz_lines(raw)], gz_lines(tok)
    assert len(ours) == len(official) >= 1000
    mismatches = [i for i, (a, b) in enumerate(zip(ours, official, strict=True)) if a != b]
    assert mismatches == []


def test_paper_tokenize_rules() -> None:
    assert paper_tokenize("Ein T-Shirt, „Hallo“.") == "ein t-shirt , &quot; hallo &quot; ."
    assert paper_tokenize("Er sagt: „Tee.“") == "er sagt : &quot; tee &quot; ."  # period moved (Perl rule)


def test_paper_tokenize_follows_the_target_language() -> None:
    """Moses' French rules keep the elided article with its apostrophe; German's split it off."""
    # the apostrophe is HTML-escaped, as tokenizer.perl does
    assert paper_tokenize("L'homme court.", "fr") == "l&apos; homme court ."
    assert paper_tokenize("L'homme court.") == "l &apos; homme court ."
    assert bleu_lc_tok(["L'homme court."], ["L'homme court."], "fr")[1].endswith("moses-lc-norm-tok:fr")


def test_bleu_lc_tok_and_split_scores() -> None:
    lc, signature = bleu_lc_tok([h.upper() for h in REFS], REFS)
    assert lc == pytest.approx(100.0) and "tok:none" in signature and "moses" in signature
    numbers, signatures = split_scores(HYPS, REFS)
    assert set(numbers) == set(signatures) == {"bleu", "chrf", "bleu_lc_tok"}
    assert all(isinstance(v, float) for v in numbers.values())
    lower, _ = split_scores([h.lower() for h in HYPS], REFS)  # case costs cased BLEU only
    assert lower["bleu"] < numbers["bleu"] and lower["bleu_lc_tok"] == pytest.approx(numbers["bleu_lc_tok"])
    with pytest.raises(DataError, match="2 hypotheses but 3 references"):
        bleu_lc_tok(HYPS[:2], REFS)


def test_score_stage_writes_an_empty_file_for_a_split_the_language_lacks(tmp_path, monkeypatch, capsys):
    """Czech has no test_2017_flickr: `score` writes `{}` for it (dvc.yaml declares the file), says so,
    and scores the other splits against the Czech references with Moses' Czech rules."""
    import json

    from datasets import Dataset, DatasetDict

    from pipeline.data.multi30k import save_dataset_dict
    from pipeline.data.translations import read_scores, translation_path
    from stages import score as stage

    cs = ["Muž jde se psem.", "Dvě děti si hrají."]
    split = {"en": ["A man walks a dog.", "Two children play."], "cs": cs}
    save_dataset_dict(
        DatasetDict({s: Dataset.from_dict(split) for s in ("train", "val", "test_2016_flickr")}),
        tmp_path / "data/multi30k",
    )
    params = {
        "download": {"tgt_lang": "cs"},
        "mlflow": {"enabled": False},
        "decode": {"translations_dir": "tr"},
        "score": {"scores_dir": "reports", "facts_json": "facts.json"},
        "train": {"run_id_file": "run_id.txt"},
    }
    write_changed_params(tmp_path / "params.yaml", params)
    for s in ("val", "test_2016_flickr"):
        translation_path(tmp_path / "tr", s, "cs").parent.mkdir(exist_ok=True)
        translation_path(tmp_path / "tr", s, "cs").write_text("".join(line + "\n" for line in cs))
    monkeypatch.chdir(tmp_path)
    stage.main()
    assert "score: test_2017_flickr: skipped, Multi30k has no Czech references" in capsys.readouterr().out
    assert json.loads((tmp_path / "reports/test_2017_flickr.json").read_text()) == {}
    assert read_scores(tmp_path / "reports") == {
        s: {"bleu": 100.0, "chrf": 100.0, "bleu_lc_tok": 100.0} for s in ("val", "test_2016_flickr")
    }
    assert json.loads((tmp_path / "facts.json").read_text())["val"]["bleu_lc_tok"].endswith(":cs")
