"""`params.yaml` as a dict with overrides merged over it, key by key (as `dvc exp run -S` sets
them): what the GPU check and the smoke tests run the stages with."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

import yaml

from pipeline.core.errors import ConfigError


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
    """`repo/params.yaml` as a dict ({} where there is none), each of `overrides` merged over it in turn.

    Raises:
        ConfigError: params.yaml is not a YAML mapping.
    """
    path = Path(repo) / "params.yaml"
    params = read_yaml(path) if path.is_file() else {}
    for over in overrides:
        params = merge_params(params, over)
    return params
