"""`params.yaml` read and validated (`pipeline.core.config` declares its sections): the file, a
stage's `-S section.key=value` overrides, the check that every output lies inside the checkout, and
the defaults shipped with the package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipeline.core.config import Params, S, Section
from pipeline.core.errors import ConfigError

# The one place defaults are written is params.yaml; this link to it travels with the package.
SHIPPED_PARAMS = Path(__file__).with_name("params.yaml")


def _one_line(err: ValidationError, path: Path) -> str:
    field, msg = first_error(err)
    return f"{path}: {field}: {msg}"


def load_params(path: str | Path = "params.yaml", overrides: Sequence[str] = ()) -> Params:
    """Read and validate `params.yaml`, each of `overrides` ("train.optim.seed=3", a YAML value, as
    `dvc exp run -S` writes them) set over it first.

    Raises:
        ConfigError: the file is missing, not YAML, an override is malformed, or a field is invalid
            (one line).
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    for override in overrides:
        _set_dotted(raw, *_parse_override(override))
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, path)) from None
    check_outputs(params, path)
    return params


def output_paths(section: Section, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted field, path) of every output (`Section.OUTPUTS`) of `section` and its subsections."""
    for name in type(section).OUTPUTS:
        yield f"{prefix}{name}", getattr(section, name)
    for name in type(section).model_fields:
        if isinstance(value := getattr(section, name), Section):
            yield from output_paths(value, f"{prefix}{name}.")


def check_outputs(params: Params, path: Path) -> None:
    """Every output path lies inside the checkout (the folder of the params file `path`), after
    resolving `..` and symbolic links: stages delete and rewrite their outputs, so this runs before any does.

    Raises:
        ConfigError: the first output outside the checkout, or the checkout itself, named by its field.
    """
    root = path.resolve().parent
    for field, value in output_paths(params):
        try:
            target = (root / value).resolve()
        except (OSError, RuntimeError) as exc:  # a symbolic link loop
            raise ConfigError(f"{path}: {field}: {value} cannot be resolved ({exc})") from None
        if target == root:
            raise ConfigError(f"{path}: {field}: {value} is the checkout {root} itself, not a path inside it")
        if not target.is_relative_to(root):
            raise ConfigError(
                f"{path}: {field}: {value} lies outside the checkout {root} (stages delete and "
                "rewrite their outputs: only paths inside it are allowed)"
            )


def _parse_override(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"-S {text!r}: write section.key=value (e.g. train.optim.seed=3)")
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ConfigError(f"-S {key}: not a YAML value ({str(exc).splitlines()[0]})") from None


def _set_dotted(tree: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        child = tree.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"-S {key}: {part} is not a section")
        tree = child
    tree[last] = value


def stage_params(argv: Sequence[str]) -> Params:
    """The params a stage runs with: `params.yaml` with the command line's `-S section.key=value`
    overrides (repeatable) set over it.

    A recipe's `dvc.yaml` runs a stage this way with other paths or seeds. `argv`: the command line's
    arguments (`sys.argv[1:]`).

    Raises:
        ConfigError: as `load_params`.
        SystemExit: an unknown command-line argument (usage on stderr, exit 2).
    """
    spec = getattr(sys.modules["__main__"], "__spec__", None)  # `python -m stages.train`: stages.train
    parser = argparse.ArgumentParser(
        prog=f"python -m {spec.name}" if spec else None,
        description="Run the stage with params.yaml's values.",
    )
    parser.add_argument(
        "-S",
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a params.yaml value set for this run (repeatable), e.g. -S train.optim.seed=3",
    )
    return load_params(overrides=parser.parse_args(argv).overrides)


@cache
def default_params() -> Params:
    """The defaults: the `params.yaml` shipped inside the package (a link to the repository's file,
    copied into a built wheel and into the served model's code), for code run with no params file.

    Raises:
        ConfigError: the shipped file is missing or invalid (one line).
    """
    return load_params(SHIPPED_PARAMS)


class FieldError(ConfigError):
    """One field of a section is invalid: `field` (its name) and `reason` (pydantic's message)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def with_updates(section: S, updates: dict) -> S:
    """`section` with `updates` replaced, validated like params.yaml (an unknown field is an error).

    Raises:
        FieldError: the first invalid field and why.
    """
    try:
        return type(section).model_validate({**section.model_dump(), **updates})
    except ValidationError as exc:
        raise FieldError(*first_error(exc)) from None


def first_error(exc: ValidationError) -> tuple[str, str]:
    """(dotted field, message) of pydantic's first error: what a one-line error names."""
    first = exc.errors()[0]
    return ".".join(str(p) for p in first["loc"]) or "<root>", first["msg"].replace("Value error, ", "")


def flatten(tree: Mapping, prefix: str = "") -> dict[str, object]:
    """{"train": {"model": {"d_model": 256}}} -> {"train.model.d_model": 256}."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, f"{name}.")
        else:
            out[name] = value
    return out
