"""Configs for tests from the repository's params.yaml, where every default is written: a section
with a test's changes, or a params file with them."""

from pathlib import Path

import yaml

from pipeline.core.config import Params, S, Section
from pipeline.core.params_file import SHIPPED_PARAMS, default_params, with_updates
from pipeline.ops.overrides import merge_params, read_yaml

# YAML whose aliases stand for 9**9 strings if each were copied: a params file that must fail at once
BILLION_LAUGHS = "lol: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 9)
)


def _sections(params: Params) -> dict[type[Section], Section]:
    found: dict[type[Section], Section] = {Params: params}
    for name in Params.model_fields:
        found[type(getattr(params, name))] = getattr(params, name)
    for section in (params.train.model, params.train.optim, params.train.dist):  # not warmup_train's
        found[type(section)] = section
    return found


def from_params(section_type: type[S], **updates) -> S:
    """params.yaml's section of type `section_type` with `updates` (`ModelConfig`, `OptimConfig` and
    `DistConfig`: the `train` section's)."""
    return with_updates(_sections(default_params())[section_type], updates)


def write_changed_params(path: Path, changes: dict | str | None = None) -> Path:
    """Write params.yaml with `changes` merged over it (a mapping, or YAML text of one) to `path`;
    text that is not a YAML mapping is written as it is (a bad file on purpose). Returns `path`."""
    if isinstance(changes, str):
        try:
            parsed = yaml.safe_load(changes)
        except yaml.YAMLError:
            parsed = None
        if not isinstance(parsed, dict):
            path.write_text(changes, encoding="utf-8")
            return path
        changes = parsed
    path.write_text(yaml.safe_dump(merge_params(read_yaml(SHIPPED_PARAMS), changes or {})), encoding="utf-8")
    return path
