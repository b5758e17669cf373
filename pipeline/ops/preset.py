"""The named presets: recipes that take more than one training, run as one command.

Usage: `python -m pipeline.ops.preset distill [--dry-run]`. `distill` (docs/results.md, "Distillation"):
the committed default model (seed 2) and a second seed of it become the teacher ensemble; their beam
translations of the training sources, added to the original pairs, train a student of the default shape
at the default budget.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.config import load_params
from pipeline.core.errors import PipelineError, run_main


@dataclass(frozen=True)
class Step:
    """One step of a preset: a command, or a copy of the workspace's model into the teacher folder."""

    command: tuple[str, ...] = ()
    keep_model_as: str = ""  # a file name in `distill.teacher_dir`

    def describe(self, model_file: Path, teacher_dir: Path) -> str:
        if self.command:
            return shlex.join(self.command)
        return f"cp {model_file} {teacher_dir / self.keep_model_as}"


PRESETS: dict[str, tuple[Step, ...]] = {
    "distill": (
        Step(("dvc", "repro")),  # the default model, seed 2 (up to date: nothing runs)
        Step(keep_model_as="seed2.pt"),
        Step(("dvc", "exp", "run", "-n", "default-seed3", "-S", "train.optim.seed=3")),
        Step(keep_model_as="seed3.pt"),
        Step(
            ("dvc", "exp", "run", "-n", "distill-ens2", "-S", "train.optim.seed=2")
            + ("-S", "distill.teacher=[seed2.pt,seed3.pt]")
        ),
    ),
}


def run_preset(name: str, *, dry_run: bool = False, params_file: str = "params.yaml") -> list[str]:
    """Run preset `name`'s steps in order (print them only with `dry_run`); returns what it ran.

    Raises:
        PipelineError: an unknown preset, a command that failed, or no model to keep.
    """
    if name not in PRESETS:
        raise PipelineError(f"preset {name!r}: choose from {', '.join(PRESETS)}")
    params = load_params(params_file)
    model_file, teacher_dir = Path(params.train.model_file), Path(params.distill.teacher_dir)
    done = []
    for step in PRESETS[name]:
        line = step.describe(model_file, teacher_dir)
        print(f"preset {name}: {line}", flush=True)
        done.append(line)
        if dry_run:
            continue
        if step.command:
            if subprocess.call(step.command) != 0:
                raise PipelineError(f"preset {name}: `{line}` failed; fix it and run the preset again")
        elif not model_file.is_file():
            raise PipelineError(f"preset {name}: {model_file}: no model to keep as a teacher")
        else:
            teacher_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model_file, teacher_dir / step.keep_model_as)
    return done


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m pipeline.ops.preset", description="Run a named preset.")
    p.add_argument("name", choices=sorted(PRESETS), help="the preset (docs/results.md)")
    p.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    run_preset(args.name, dry_run=args.dry_run)


if __name__ == "__main__":
    run_main(main)
