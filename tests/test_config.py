"""`params.yaml` validation: the repo's file loads and is the only place a default is written; each
bad file (the repo's with one change) fails with one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
import yaml
from from_params import write_changed_params
from pydantic import BaseModel

from pipeline.core.config import MAX_BEAM_SIZE, Params, Section, default_params, load_params
from pipeline.core.errors import ConfigError
from pipeline.ops.overrides import read_yaml

REPO = Path(__file__).resolve().parents[1]


def test_repo_params_validate():
    params = load_params(REPO / "params.yaml")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params.train.optim.max_tokens == raw["train"]["optim"]["max_tokens"]
    assert params.warmup_train.model.d_model == raw["warmup_train"]["model"]["d_model"]


def sections(model: type[BaseModel] = Params) -> list[type[BaseModel]]:
    """`model` and every section nested in it."""
    out = [model]
    for field in model.model_fields.values():
        if isinstance(field.annotation, type) and issubclass(field.annotation, Section):
            out += sections(field.annotation)
    return out


def test_no_field_has_a_default_in_the_code():
    """One source of truth: every value is written in params.yaml, none in pipeline/core/config.py."""
    with_defaults = [
        f"{m.__name__}.{n}" for m in sections() for n, f in m.model_fields.items() if not f.is_required()
    ]
    assert with_defaults == []
    assert len(sections()) == 20  # the walk found the nested sections


def test_the_shipped_defaults_are_the_repository_file():
    assert default_params() == load_params(REPO / "params.yaml")


def test_a_missing_key_is_named(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}: download: Field required$"):
        load_params(path)
    raw = read_yaml(REPO / "params.yaml")
    del raw["train"]["optim"]["warmup_steps"]
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}: train.optim.warmup_steps: Field required$"):
        load_params(path)


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
    ("length penalty infinite", "decode: {length_penalty: .inf}", ["decode.length_penalty", "finite number"]),
    ("learning rate NaN", "train: {optim: {peak_lr: .nan}}", ["train.optim.peak_lr", "finite number"]),
    (
        "batch below one pair",
        "train: {optim: {max_tokens: 10}}",
        ["train", "max_tokens=10", "max_len + 1 = 129"],
    ),
    ("section not a mapping", "decode: 5", ["decode", "dictionary"]),
    ("file not a mapping", "- 1\n- 2\n", ["<root>"]),
    ("invalid yaml", "train: {model: [unclosed\n", ["not valid YAML"]),
    ("init_from typo", "train: {init_from: champoin}", ["train.init_from", "'champion'"]),
    ("unknown target language", "download: {tgt_lang: es}", ["download.tgt_lang", "'de', 'fr' or 'cs'"]),
    (
        "beam above its bound",
        "decode: {beam_size: 9000}",
        ["decode.beam_size", f"less than or equal to {MAX_BEAM_SIZE}"],
    ),
    (
        "boolean as an integer",
        "decode: {beam_size: true}",
        ["decode.beam_size", "valid integer, not a boolean"],
    ),
    (
        "boolean as a float",
        "train: {optim: {peak_lr: true}}",
        ["train.optim.peak_lr", "valid number, not a boolean"],
    ),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in BAD], ids=[i for i, _, _ in BAD])
def test_bad_params_raise_one_line_config_error(tmp_path, text, expected):
    path = tmp_path / "params.yaml"
    write_changed_params(path, text)
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


def numeric_fields(model: type[BaseModel] = Params, prefix: str = "") -> list[str]:
    """The dotted names of every int or float field (optional ones too), nested sections included."""
    out = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            out += numeric_fields(field.annotation, f"{prefix}{name}.")
        elif {int, float} & set(get_args(field.annotation) or {field.annotation}):
            out.append(prefix + name)
    return out


def nested(dotted: str, value: object) -> dict:
    head, _, rest = dotted.partition(".")
    return {head: nested(rest, value) if rest else value}


@pytest.mark.parametrize("field", numeric_fields())
def test_no_numeric_field_takes_a_boolean(tmp_path, field):
    path = tmp_path / "params.yaml"
    write_changed_params(path, yaml.safe_dump(nested(field, True)))
    with pytest.raises(ConfigError, match=rf"^{path}: {field}: Input should be a valid \w+, not a boolean$"):
        load_params(path)


def test_booleans_stay_booleans_and_a_float_field_takes_an_integer(tmp_path):
    path = tmp_path / "params.yaml"
    write_changed_params(path, "train: {model: {pre_norm: true}, optim: {peak_lr: 1, max_minutes: 2}}\n")
    params = load_params(path)
    assert params.train.model.pre_norm is True
    assert params.train.optim.peak_lr == 1.0 and params.train.optim.max_minutes == 2.0
    assert len(numeric_fields()) > 40  # the walk found the nested sections' fields
