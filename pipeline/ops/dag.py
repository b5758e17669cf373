"""`dvc.yaml`'s stages in DAG order, each `${a.b.c}` filled in from the params (`params.yaml` with
overrides merged over it), as DVC interpolates them. PyYAML only: the GPU check runs the stages on
a machine where DVC is not carried.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from pipeline.core.errors import ConfigError

REFERENCE = re.compile(r"\$\{\s*([\w-]+(?:\.[\w-]+)*)\s*\}")
OUTPUT_KINDS = ("outs", "metrics", "plots")


@dataclass(frozen=True)
class Stage:
    """One stage of `dvc.yaml`, interpolated: its command (whitespace collapsed) and its paths."""

    name: str
    cmd: str
    deps: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    plots: tuple[str, ...] = ()
    params: tuple[str, ...] = ()  # params keys; those of another file as `file:key`

    @property
    def writes(self) -> tuple[str, ...]:
        """Every path the stage writes: its outs, metrics and plots."""
        return self.outs + self.metrics + self.plots


def merge_params(base: Mapping, over: Mapping) -> dict:
    """A deep copy of `base` with `over` merged in; neither argument is changed.

    Where both values are mappings they merge key by key; any other value of `over` (a scalar, a
    list, None, a mapping over a non-mapping) replaces `base`'s.
    """
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = merge_params(out[key], value) if both else copy.deepcopy(value)
    return out


def read_yaml(path: Path) -> dict:
    """A YAML file holding a mapping (an empty file: {}).

    Raises:
        ConfigError: the file cannot be read, is not YAML, or holds something other than a mapping.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
    return data


def read_params(repo: str | Path, *overrides: Mapping) -> dict:
    """`repo/params.yaml` as a dict ({} where there is none, as for DVC), each of `overrides`
    merged over it in turn (`merge_params`).

    Raises:
        ConfigError: params.yaml is not a YAML mapping.
    """
    path = Path(repo) / "params.yaml"
    params = read_yaml(path) if path.is_file() else {}
    for over in overrides:
        params = merge_params(params, over)
    return params


def lookup(key: str, params: Mapping) -> object:
    """The value at dotted `key` in `params`.

    Raises:
        ConfigError: a part of `key` is not in the params.
    """
    node: object = params
    for depth, part in enumerate(key.split(".")):
        if not isinstance(node, Mapping) or part not in node:
            known = sorted(node) if isinstance(node, Mapping) else []
            where = ".".join(key.split(".")[:depth]) or "the params"
            raise ConfigError(f"${{{key}}}: no {part!r} in {where} (it has {known})")
        node = node[part]
    return node


def interpolate(text: str, params: Mapping) -> str:
    """`text` with every `${a.b.c}` replaced by that params value.

    Raises:
        ConfigError: a key is not in the params, or its value is not a string, number or boolean.
    """

    def value(match: re.Match) -> str:
        found = lookup(match.group(1), params)
        if isinstance(found, bool):
            return "true" if found else "false"
        if not isinstance(found, str | int | float):
            raise ConfigError(f"${{{match.group(1)}}}: a {type(found).__name__}, not a string or number")
        return str(found)

    return REFERENCE.sub(value, text)


def entries(items: list | None, params: Mapping, field: str) -> tuple[str, ...]:
    """A stage's `deps`/`outs`/`metrics`/`plots`/`params` list as interpolated strings.

    An entry is a string, or a one-key mapping of a path to its options; under `params`, a mapping
    of another params file to its keys gives `file:key` each.

    Raises:
        ConfigError: an entry is neither, or its interpolation fails.
    """
    out: list[str] = []
    for item in items or []:
        if isinstance(item, str):
            out.append(interpolate(item, params))
        elif isinstance(item, dict) and field == "params":
            out += [f"{interpolate(f, params)}:{k}" for f, keys in item.items() for k in keys or []]
        elif isinstance(item, dict) and len(item) == 1:
            out.append(interpolate(str(next(iter(item))), params))
        else:
            raise ConfigError(
                f"dvc.yaml: an entry of {field} must be a path or {{path: options}}, got {item!r}"
            )
    return tuple(out)


def make_stage(name: str, raw: Mapping, params: Mapping) -> Stage:
    """One `dvc.yaml` stage interpolated with `params`.

    Raises:
        ConfigError: its `cmd` is missing or not a string, or an interpolation fails.
    """
    cmd = raw.get("cmd") if isinstance(raw, Mapping) else None
    if not isinstance(cmd, str):
        raise ConfigError(f"dvc.yaml: stage {name!r} needs a `cmd` string, got {cmd!r}")
    fields = ("deps", *OUTPUT_KINDS, "params")
    lists = {f: entries(raw.get(f), params, f) for f in fields}
    return Stage(name, " ".join(interpolate(cmd, params).split()), **lists)


def overlaps(a: str, b: str) -> bool:
    """Whether two paths are the same, or one lies inside the other."""
    x, y = PurePosixPath(a), PurePosixPath(b)
    return x == y or x in y.parents or y in x.parents


def producers(stage: Stage, stages: list[Stage]) -> set[str]:
    """The names of the other stages that write one of `stage`'s deps (or a folder holding it, or a
    file inside it)."""
    return {
        o.name for o in stages if o is not stage and any(overlaps(d, w) for d in stage.deps for w in o.writes)
    }


def dag_order(stages: list[Stage]) -> list[Stage]:
    """`stages` in an order where each comes after its `producers`; among the stages free to run,
    file order.

    Raises:
        ConfigError: the stages depend on each other in a cycle.
    """
    needs = {s.name: producers(s, stages) for s in stages}
    done: list[Stage] = []
    while len(done) < len(stages):
        names = {s.name for s in done}
        ready = next((s for s in stages if s.name not in names and needs[s.name] <= names), None)
        if ready is None:
            raise ConfigError(
                f"dvc.yaml: stages depend on each other in a cycle: {sorted(set(needs) - names)}"
            )
        done.append(ready)
    return done


def read_dag(repo: str | Path, params: Mapping | None = None) -> dict[str, Stage]:
    """The stages of `repo/dvc.yaml` by name, in DAG order (`dag_order`), interpolated with `params`
    (default: `read_params(repo)`).

    Raises:
        ConfigError: dvc.yaml is missing or malformed, a `${...}` key is not in the params, or the
            stages form a cycle.
    """
    raw = read_yaml(Path(repo) / "dvc.yaml").get("stages")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{Path(repo) / 'dvc.yaml'}: no `stages` mapping")
    params = read_params(repo) if params is None else params
    stages = [make_stage(name, stage, params) for name, stage in raw.items()]
    return {s.name: s for s in dag_order(stages)}
