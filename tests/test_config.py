"""`params.yaml` validation: the repo's file loads; each bad file fails with one line naming
the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.core.config import Params, load_params
from pipeline.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_repo_params_validate():
    params = load_params(REPO / "params.yaml")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params.train.optim.max_tokens == raw["train"]["optim"]["max_tokens"]
    assert params.warmup_train.model.d_model == raw["warmup_train"]["model"]["d_model"]


def leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in tree.items():
        out |= leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


@pytest.mark.parametrize("section", list(Params.model_fields))
def test_defaults_agree_with_params_yaml(section):
    """One source of truth: a default in pipeline/core/config.py never contradicts params.yaml."""
    in_file = leaves(yaml.safe_load((REPO / "params.yaml").read_text())[section])
    defaults = leaves(Params().model_dump()[section])
    assert in_file and in_file.keys() <= defaults.keys()
    assert {k: defaults[k] for k in sorted(in_file)} == in_file


def test_empty_file_gives_defaults(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("", encoding="utf-8")
    assert load_params(path) == Params()


# (case id, file text, substrings the one-line message must contain besides the path)
BAD = [
    ("wrong type", "train: {model: {d_model: big}}", ["train.model.d_model", "integer"]),
    (
        "negative dropout",
        "train: {model: {dropout: -0.1}}",
        ["train.model.dropout", "greater than or equal to 0"],
    ),
    ("dropout = 1", "train: {model: {dropout: 1.0}}", ["train.model.dropout", "less than 1"]),
    ("dropout > 1", "warmup_train: {model: {dropout: 1.5}}", ["warmup_train.model.dropout", "less than 1"]),
    ("beam size 0", "decode: {beam_size: 0}", ["decode.beam_size", "greater than 0"]),
    ("heads do not divide", "train: {model: {d_model: 250, n_heads: 4}}", ["train.model", "divisible"]),
    ("vocab below specials", "tokenizer: {vocab_size: 3}", ["tokenizer.vocab_size", "greater than 4"]),
    ("nested key typo", "train: {optim: {peak_lrr: 0.1}}", ["train.optim.peak_lrr", "not permitted"]),
    ("section typo", "trian: {max_len: 10}", ["trian", "not permitted"]),
    ("section not a mapping", "decode: 5", ["decode", "dictionary"]),
    ("file not a mapping", "- 1\n- 2\n", ["<root>"]),
    ("invalid yaml", "train: {model: [unclosed\n", ["not valid YAML"]),
    ("init_from typo", "train: {init_from: champoin}", ["train.init_from", "'champion'"]),
    ("unknown target language", "download: {tgt_lang: es}", ["download.tgt_lang", "'de', 'fr' or 'cs'"]),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in BAD], ids=[i for i, _, _ in BAD])
def test_bad_params_raise_one_line_config_error(tmp_path, text, expected):
    path = tmp_path / "params.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_params(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    for part in expected:
        assert part in message


def test_missing_file_raises_config_error(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_params(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unreadable_params_raise_one_line_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"^.*: cannot read \(Is a directory\)$"):
        load_params(tmp_path)
    latin1 = tmp_path / "params.yaml"
    latin1.write_bytes("train:\n  max_len: 128  # Größe\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"params.yaml: not UTF-8 text \(byte \d+\)$"):
        load_params(latin1)
