"""`pipeline.ops.dvc_index` (dvc.yaml's stages as DVC reads them) and `pipeline.ops.overrides`
(params.yaml with overrides merged over it), on a small dvc.yaml and params.yaml per test."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.core.errors import ConfigError
from pipeline.ops.dvc_index import Stage, read_stages
from pipeline.ops.overrides import merge_params, read_params

ROOT = Path(__file__).resolve().parents[1]
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
    "report": {"cmd": "python -m stages.report"},  # free from the start, last in the file
}


def producers(stage: Stage, stages: list[Stage]) -> set[str]:
    """The names of the other stages that write one of `stage`'s deps (or a folder holding it, or a
    file inside it): the paths' own account of the order, to check DVC's against."""
    return {
        o.name for o in stages if o is not stage and any(overlaps(d, w) for d in stage.deps for w in o.writes)
    }


def overlaps(a: str, b: str) -> bool:
    x, y = Path(a), Path(b)
    return x == y or x in y.parents or y in x.parents


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


def test_dvc_fills_in_cmd_and_every_path_list(tmp_path: Path) -> None:
    stages = read_stages(write_repo(tmp_path))
    assert stages["download"].cmd == "python -m stages.download --lang de"
    assert stages["train"].cmd == "python -m stages.train 0.001 true"  # whitespace collapsed
    assert stages["train"].deps == ("data/raw/train.gz",)
    assert stages["train"].outs == ("models/m.pt",) and stages["train"].plots == ("reports/log.csv",)
    assert stages["score"].metrics == ("reports/scores/val.json",) and stages["score"].outs == ()
    assert stages["score"].params == ("score", "other.yaml:x", "other.yaml:y")
    assert stages["train"].writes == ("models/m.pt", "reports/log.csv")


def test_stages_come_in_dag_order_file_order_among_the_free(tmp_path: Path) -> None:
    stages = read_stages(write_repo(tmp_path))
    assert list(stages) == ["download", "train", "score", "report"]
    assert producers(stages["train"], list(stages.values())) == {"download"}  # a file inside its out
    assert producers(stages["score"], list(stages.values())) == {"train"}


def test_the_repository_dag() -> None:
    stages = read_stages(ROOT)
    assert list(stages)[:3] == ["download", "incoming", "tokenizer"] and list(stages)[-1] == "plots_template"
    assert {"distill", "tokenizer"} <= producers(stages["prepare"], list(stages.values()))
    assert stages["train"].outs[0] == yaml.safe_load((ROOT / "params.yaml").read_text())["train"]["out_dir"]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        (  # a cycle
            {
                "a": {"cmd": "x", "deps": ["b.txt"], "outs": ["a.txt"]},
                "b": {"cmd": "y", "deps": ["a.txt"], "outs": ["b.txt"]},
            },
            r"dvc.yaml: .*both a dependency and an output",
        ),
        (
            {"s": {"cmd": "python -m stages.s", "outs": ["${score.scores_dir}/val.json"]}},
            r"dvc.yaml: failed to parse 'stages.s.outs' .* Could not find 'score.scores_dir'",
        ),
        ({"a": {"deps": ["x"]}}, r"dvc.yaml: .*validation failed"),
        ({"a": {"cmd": "x", "outs": [["x"]]}}, r"dvc.yaml: .*validation failed"),
        ({}, r"dvc.yaml: no stages"),
    ],
)
def test_what_dvc_refuses_is_a_one_line_error(tmp_path: Path, stages: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        read_stages(write_repo(tmp_path, stages))
    assert "\n" not in str(err.value)


def test_no_dvc_yaml_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"dvc.yaml: no stages"):
        read_stages(tmp_path)


def test_flow_stage_order_is_a_topological_order_of_the_dag():
    from pipeline.ops.flow.dvc_calls import stage_names

    stages = read_stages(ROOT)
    order = stage_names(ROOT)
    assert sorted(order) == sorted(stages)
    for position, name in enumerate(order):
        for producer in producers(stages[name], list(stages.values())):
            assert order.index(producer) < position, f"{name} needs {producer}'s output"
    assert {"distill", "tokenizer"} <= producers(stages["prepare"], list(stages.values()))
