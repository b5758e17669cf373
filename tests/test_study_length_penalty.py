"""Re-tuning the length penalty of a recorded candidate (study/length_penalty.py): the
step-up rule, the record and table it writes, and its errors."""

from __future__ import annotations

import json

import pytest
from from_params import from_params, write_changed_params
from markdown_tables import table_rows

from pipeline.core.config import Params
from pipeline.core.errors import PipelineError
from study import length_penalty as lp
from study import rows, tables

REFS = [f"ein hund läuft über die grüne wiese nummer {i} ." for i in range(80)]
POOR = [f"eine katze sitzt {i}" for i in range(80)]


def right(k: int) -> list[str]:
    """The first `k` translations right, the rest poor."""
    return REFS[:k] + POOR[k:]


def test_a_larger_alpha_is_taken_only_when_significantly_better_than_the_choice():
    hyps = {1.0: POOR, 1.2: right(79), 1.4: REFS, 1.6: REFS}
    fig = lp.step_up(hyps, REFS, "de", p_threshold=0.05, n_samples=200)
    assert fig["alphas"] == [1.0, 1.2, 1.4, 1.6]
    assert fig["p_vs_choice"][0] is None and fig["p_vs_choice"][1] < 0.05 and fig["p_vs_choice"][2] >= 0.05
    assert fig["chosen"] == 1.2  # 1.4 is higher, but by one sentence: not significant; 1.6 ties
    assert fig["bleu"][3] == fig["bleu"][2] == 100.0 and fig["length_ratio"][3] == 1.0
    assert lp.step_up({0.6: REFS, 1.0: POOR}, REFS, "de", 0.05, 200)["chosen"] == 0.6  # worse: stay


def test_small_steps_add_up_against_the_choice():
    hyps = {1.0: right(74), 1.2: right(75), 1.4: right(76), 1.6: right(77), 1.8: right(78)}
    assert lp.paired_bootstrap(REFS, hyps[1.0], hyps[1.2], 200).p_value >= 0.05  # no step alone is
    fig = lp.step_up(hyps, REFS, "de", p_threshold=0.05, n_samples=200)
    assert fig["chosen"] >= 1.6 and fig["bleu"] == sorted(fig["bleu"])


def test_one_alpha_is_not_a_sweep():
    with pytest.raises(PipelineError, match="at least two alphas"):
        lp.step_up({1.0: POOR}, REFS, "de", 0.05, 200)


def test_decode_config_is_the_candidates():
    row = {"params": {"decode.beam_size": 3, "train.model.dropout": 0.3}}
    cfg = lp.decode_config(row, from_params(Params))
    assert (cfg.beam_size, cfg.max_len_a) == (3, from_params(Params).decode.max_len_a)


def test_sweep_decodes_val_records_and_renders(tiny_translator_files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = tiny_translator_files
    write_changed_params(tmp_path / "params.yaml")  # every default
    src = ["A man walks in the park.", "Two children play near 5 trees.", "A dog walks in the park."]
    val = {
        "en": src,
        "de": ["Ein Mann geht im Park.", "Zwei Kinder spielen bei 5 Bäumen.", "Ein Hund geht im Park."],
    }
    monkeypatch.setattr(lp, "load_corpus", lambda _: {"val": val})
    monkeypatch.setattr(lp, "experiment_model", lambda name, params, out: (files["ckpt"], files["spm"]))
    rows.write_record([{"name": "cand", "commit": "c1", "params": {"decode.beam_size": 2}, "steps": 10}])
    fig = lp.sweep("cand", [0.0, 1.0])
    assert fig["beam_size"] == 2 and fig["alphas"] == [0.0, 1.0] and fig["chosen"] in (0.0, 1.0)
    stored = json.loads(rows.RECORD.read_text())
    assert stored["length_penalty"] == fig
    table = tables.TABLE.read_text()
    lines = [line[:3] for line in table_rows(table)]
    assert (
        "## Length penalty on val" in table
        and ("cand", "2", "0.0") in lines
        and ("cand", "2", "1.0") in lines
    )
    with pytest.raises(PipelineError, match="no candidate 'other' \\(record it first\\)"):
        lp.sweep("other", [0.0, 1.0])


def test_an_experiment_dvc_cannot_find_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not a DVC repository
    with pytest.raises(
        PipelineError, match=f"experiment 'nope': cannot read {from_params(Params).train.model_file} from DVC"
    ):
        lp.experiment_model("nope", from_params(Params), tmp_path)


@pytest.mark.parametrize(
    ("alphas", "message"), [("1.0,x", "not a comma-separated list"), ("-1,1", "must be >= 0")]
)
def test_bad_alphas_are_refused(alphas, message):
    with pytest.raises(PipelineError, match=message):
        lp.cli(["cand", f"--alphas={alphas}"])
