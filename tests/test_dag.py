"""`pipeline.ops.dag`: the params merge, `${...}` interpolation and the DAG order, on a small
dvc.yaml and params.yaml written for each test."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.core.errors import ConfigError
from pipeline.ops.dag import Stage, dag_order, interpolate, merge_params, read_dag, read_params

PARAMS = {
    "data": {"out_dir": "data/raw", "lang": "de"},
    "model": {"file": "models/m.pt", "optim": {"lr": 0.001, "steps": 10}, "tied": True},
    "score": {"dir": "reports/scores"},
}
STAGES = {  # file order is not DAG order: `score` comes first
    "score": {
        "cmd": "python -m stages.score",
        "deps": ["${model.file}", "stages/score.py"],
        "params": ["score", {"other.yaml": ["x", "y"]}],
        "metrics": [{"${score.dir}/val.json": {"cache": False}}],
    },
    "download": {
        "cmd": "python -m stages.download --lang ${data.lang}",
        "outs": ["${data.out_dir}"],
    },
    "train": {
        "cmd": "python -m stages.train\n   ${model.optim.lr} ${model.tied}",
        "deps": ["${data.out_dir}/train.gz"],  # inside download's out
        "outs": [{"${model.file}": {"persist": True}}],
        "plots": ["reports/log.csv"],
    },
}


def write_repo(root: Path, stages: dict = STAGES, params: dict | None = PARAMS) -> Path:
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    if params is not None:
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def test_merge_nested_mappings_key_by_key_and_replace_other_values() -> None:
    base = {"a": {"b": 1, "c": {"d": 2, "e": 3}}, "f": [1, 2], "g": None, "h": 5, "i": {"j": 1}}
    over = {"a": {"c": {"d": 20}, "k": 4}, "f": [3], "g": {"x": 1}, "h": {"y": 2}, "i": None}
    merged = merge_params(base, over)
    assert merged == {
        "a": {"b": 1, "c": {"d": 20, "e": 3}, "k": 4},
        "f": [3],  # lists replace, not extend
        "g": {"x": 1},  # a mapping over None or a scalar replaces it
        "h": {"y": 2},
        "i": None,  # None replaces a mapping
    }
    merged["a"]["c"]["e"] = 99
    over["a"]["c"]["d"] = 99
    assert base["a"]["c"] == {"d": 2, "e": 3}  # no aliasing either way
    assert merge_params(base, over)["a"]["c"] == {"d": 99, "e": 3}


def test_read_params_merges_overrides_in_turn(tmp_path: Path) -> None:
    write_repo(tmp_path)
    params = read_params(tmp_path, {"model": {"optim": {"lr": 0.5}}}, {"model": {"optim": {"steps": 1}}})
    assert params["model"]["optim"] == {"lr": 0.5, "steps": 1} and params["data"] == PARAMS["data"]
    assert read_params(tmp_path / "nowhere", {"a": 1}) == {"a": 1}  # no params.yaml: {} as for DVC
    (tmp_path / "params.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="params.yaml: expected a mapping"):
        read_params(tmp_path)


def test_interpolation_fills_cmd_and_every_path_list(tmp_path: Path) -> None:
    stages = read_dag(write_repo(tmp_path))
    assert stages["download"].cmd == "python -m stages.download --lang de"
    assert stages["train"].cmd == "python -m stages.train 0.001 true"  # whitespace collapsed
    assert stages["train"].deps == ("data/raw/train.gz",)
    assert stages["train"].outs == ("models/m.pt",) and stages["train"].plots == ("reports/log.csv",)
    assert stages["score"].metrics == ("reports/scores/val.json",)
    assert stages["score"].params == ("score", "other.yaml:x", "other.yaml:y")
    assert stages["train"].writes == ("models/m.pt", "reports/log.csv")


def test_overrides_reach_the_interpolated_paths(tmp_path: Path) -> None:
    write_repo(tmp_path)
    params = read_params(tmp_path, {"model": {"file": "elsewhere/m.pt"}})
    stages = read_dag(tmp_path, params)
    assert stages["train"].outs == ("elsewhere/m.pt",) and stages["score"].deps[0] == "elsewhere/m.pt"


def test_stages_come_in_dag_order_file_order_among_the_free(tmp_path: Path) -> None:
    extra = {"report": {"cmd": "python -m stages.report"}}  # free from the start, last in the file
    stages = read_dag(write_repo(tmp_path, {**STAGES, **extra}))
    assert list(stages) == ["download", "train", "score", "report"]
    assert dag_order([Stage("a", "x"), Stage("b", "y")]) == [Stage("a", "x"), Stage("b", "y")]


def test_a_cycle_is_an_error(tmp_path: Path) -> None:
    cyclic = {
        "a": {"cmd": "x", "deps": ["b.txt"], "outs": ["a.txt"]},
        "b": {"cmd": "y", "deps": ["a.txt"], "outs": ["b.txt"]},
    }
    with pytest.raises(ConfigError, match=r"cycle: \['a', 'b'\]"):
        read_dag(write_repo(tmp_path, cyclic))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${model.size}", r"\$\{model.size\}: no 'size' in model \(it has \['file', 'optim', 'tied'\]\)"),
        ("${nope.x}", r"\$\{nope.x\}: no 'nope' in the params"),
        ("${model.file.x}", r"\$\{model.file.x\}: no 'x' in model.file"),
        ("${model.optim}", r"\$\{model.optim\}: a dict, not a string or number"),
    ],
)
def test_an_unknown_key_or_a_section_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        interpolate(f"python -m x {text}", PARAMS)


def test_an_unknown_key_in_a_path_names_it(tmp_path: Path) -> None:
    broken = {"s": {"cmd": "python -m stages.s", "outs": ["${score.scores_dir}/val.json"]}}
    with pytest.raises(ConfigError, match=r"\$\{score.scores_dir\}: no 'scores_dir' in score"):
        read_dag(write_repo(tmp_path, broken))


def test_a_malformed_dvc_yaml_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dvc.yaml"):
        read_dag(tmp_path)  # none
    with pytest.raises(ConfigError, match="no `stages` mapping"):
        read_dag(write_repo(tmp_path, {}))
    with pytest.raises(ConfigError, match="stage 'a' needs a `cmd` string"):
        read_dag(write_repo(tmp_path, {"a": {"deps": ["x"]}}))
    with pytest.raises(ConfigError, match="an entry of outs must be a path"):
        read_dag(write_repo(tmp_path, {"a": {"cmd": "x", "outs": [["x"]]}}))
