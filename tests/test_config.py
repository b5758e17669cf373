"""`params.yaml` validation: the repo's file loads and is the only place a default is written; each
bad file (the repo's with one change) fails with one line naming the file and the field."""

from __future__ import annotations

import time
from pathlib import Path
from typing import get_args

import pytest
import yaml
from from_params import BILLION_LAUGHS, write_changed_params
from pydantic import BaseModel

from pipeline.core.config import MAX_BEAM_SIZE, Params, Section
from pipeline.core.errors import ConfigError
from pipeline.core.params_file import default_params, load_params, output_paths, stage_params
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


def upper_bound(model: type[BaseModel], name: str) -> float | None:
    """The field's `le` or `lt` bound, None when it has neither."""
    for rule in model.model_fields[name].metadata:
        bound = getattr(rule, "le", None) or getattr(rule, "lt", None)
        if bound is not None:
            return bound
    return None


def field_owner(dotted: str) -> tuple[type[BaseModel], str]:
    model: type[BaseModel] = Params
    *parents, name = dotted.split(".")
    for part in parents:
        model = model.model_fields[part].annotation
    return model, name


@pytest.mark.parametrize("field", numeric_fields())
def test_every_numeric_field_has_a_range_and_refuses_a_huge_value(tmp_path, field):
    """A value that overflows arithmetic (1e308) or is absurd is refused when params load, not at use."""
    assert upper_bound(*field_owner(field)) is not None, f"{field} has no upper bound"
    model, name = field_owner(field)
    annotation = model.model_fields[name].annotation
    huge = 1e308 if float in (set(get_args(annotation)) or {annotation}) else 2**62
    path = write_changed_params(tmp_path / "params.yaml", yaml.safe_dump(nested(field, huge)))
    with pytest.raises(ConfigError, match=rf"^{path}: {field}: Input should be less than"):
        load_params(path)


CHECKOUT_INPUTS = {
    "incoming.in_dir",
    "distill.teacher_dir",
    "decode.time_machine_tsv",
    "decode.robustness_tsv",
}
PATH_SUFFIXES = ("_dir", "_json", "_jsonl", "_csv", "_md", "_file", "_tsv", "_template")


def test_every_path_field_is_a_declared_output_or_a_known_input():
    """A new path a stage writes is checked to lie in the checkout only when its section's `OUTPUTS`
    names it: any path-like field must be there or be one of the inputs."""
    outputs = {field for field, _ in output_paths(default_params())}
    path_fields = {
        f"{section}.{name}"
        for section, cfg in default_params()
        for name in type(cfg).model_fields
        if name.endswith(PATH_SUFFIXES)
    }
    assert path_fields - CHECKOUT_INPUTS <= outputs
    assert {"train.out_dir", "train.model_file", "report.plots_template"} <= outputs


def outside_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """(a checkout folder, a folder beside it holding someone's file)."""
    checkout, outside = tmp_path / "checkout", tmp_path / "outside"
    checkout.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("not ours\n")
    return checkout, outside


@pytest.mark.parametrize(
    ("field", "where"),
    [
        ("download.out_dir", "absolute"),
        ("prepare.out_dir", "dotdot"),
        ("train.out_dir", "link"),
        ("train.out_dir", "root"),
        ("report.figures_dir", "checkout"),
        ("train.metrics_json", "absolute"),
    ],
)
def test_an_output_outside_the_checkout_is_refused_naming_its_key(tmp_path, field, where):
    checkout, outside = outside_checkout(tmp_path)
    (checkout / "data").mkdir()
    (checkout / "data/elsewhere").symlink_to(outside)
    value = {
        "absolute": str(outside),
        "dotdot": "data/../../outside",
        "link": "data/elsewhere/run",
        "root": "/",
        "checkout": "data/..",
    }[where]
    change = nested(field, value)
    if field == "train.out_dir":  # the final model lives in out_dir
        change["train"]["model_file"] = f"{value.rstrip('/')}/model.pt"
    path = write_changed_params(checkout / "params.yaml", yaml.safe_dump(change))
    with pytest.raises(ConfigError) as info:
        load_params(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: {field}: {value} ")
    assert (f"outside the checkout {checkout}" if where != "checkout" else "is the checkout") in message
    assert (outside / "keep.txt").read_text() == "not ours\n"


def test_outputs_inside_the_checkout_pass_after_resolving_links_and_dotdot(tmp_path):
    checkout, outside = outside_checkout(tmp_path)
    (checkout / "big_disk").mkdir()
    (checkout / "data").symlink_to(checkout / "big_disk")  # a link that stays inside
    path = write_changed_params(
        checkout / "params.yaml",
        {"download": {"out_dir": "data/multi30k"}, "prepare": {"out_dir": "x/../ids"}},
    )
    params = load_params(path)
    assert params.download.out_dir == "data/multi30k" and params.prepare.out_dir == "x/../ids"


@pytest.mark.parametrize("where", ["top level", "decode.ensemble"])
def test_an_alias_bomb_is_refused_in_a_second(tmp_path, where):
    """PyYAML shares an alias's object instead of copying it, and validation stops at the first wrong
    type: the 9**9 strings are never built (DVC's reader would build them)."""
    path = tmp_path / "params.yaml"
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    if where == "decode.ensemble":
        text = text.replace("  ensemble: []", "  ensemble: *l8")
    path.write_text(BILLION_LAUGHS + text, encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^{path}: (lol|decode\.ensemble\.0): "):
        load_params(path)
    assert time.monotonic() - started < 2.0


def test_a_stage_runs_with_command_line_overrides_validated_like_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_changed_params(tmp_path / "params.yaml", {})
    params = stage_params(["-S", "train.optim.seed=3", "-S", "distill.teacher=[a.pt, b.pt]"])
    assert params.train.optim.seed == 3 and params.distill.teacher == ("a.pt", "b.pt")
    moved = stage_params(["-S", "train.out_dir=models/t3", "-S", "train.model_file=models/t3/model.pt"])
    assert moved.train.model_file == "models/t3/model.pt"
    for argv, message in (
        (["-S", "train.optim.sed=3"], "params.yaml: train.optim.sed: Extra inputs are not permitted"),
        (["-S", "train.optim.seed"], "-S 'train.optim.seed': write section.key=value"),
        (["-S", "train.optim.seed=[1"], "-S train.optim.seed: not a YAML value"),
        (["-S", "train.optim.seed=-1"], "params.yaml: train.optim.seed: Input should be greater than"),
        (
            ["-S", "download.out_dir=/tmp/elsewhere"],
            "params.yaml: download.out_dir: /tmp/elsewhere lies outside",
        ),
    ):
        with pytest.raises(ConfigError) as err:
            stage_params(argv)
        assert str(err.value).startswith(message), str(err.value)
    with pytest.raises(SystemExit):
        stage_params(["--seed", "3"])
