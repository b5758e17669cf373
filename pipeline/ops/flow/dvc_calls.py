"""DVC from a subprocess: the stages in DAG order, whether one is stale, and a stage's output
streamed line by line. The Prefect flow's tasks are built on these; none of them imports Prefect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from pipeline.ops.dvc_index import read_stages

# Stage processes write plain, unbuffered lines: no tqdm frames, nothing held back in a pipe buffer.
STAGE_ENV = {"PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}

# The hints DVC prints after every stage that wrote dvc.lock in a Git checkout; `dvc repro` has no
# switch for them short of `--quiet` (which hides its errors too) or `core.autostage` (which runs
# `git add`).
DVC_HINTS = (
    "To track the changes with git, run:",
    "git add ",
    "To enable auto staging, run:",
    "dvc config core.autostage true",
    "Use `dvc push` to send your updates to remote storage.",
)


def stage_names(repo: Path) -> list[str]:
    """The stages of `repo/dvc.yaml` in DAG order, as DVC reads them (`pipeline.ops.dvc_index`).

    Raises:
        ConfigError: dvc.yaml is missing or malformed, or names a param that params.yaml lacks.
    """
    return list(read_stages(repo))


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of `text`, stripped."""
    return "\n".join(text.strip().splitlines()[-lines:])


def stream_lines(
    cmd: list[str],
    cwd: str,
    log: Callable[[str], object],
    *,
    keep: int = 15,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Run `cmd` in `cwd` and hand each non-empty output line to `log` as soon as it is written.

    stdout and stderr are merged; a carriage return ends a line too (text mode's universal
    newlines), so progress-bar frames come as lines. `env` is added to this process's environment
    and `STAGE_ENV`. Returns (exit status, the last `keep` lines).

    Raises:
        OSError: `cmd` could not be started.
    """
    last: deque[str] = deque(maxlen=keep)
    with subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**os.environ, **STAGE_ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
    ) as proc:
        for line in proc.stdout:
            if line := line.rstrip():
                log(line)
                last.append(line)
    return proc.returncode, "\n".join(last)


def is_stale(stage: str, repo: str) -> bool:
    """Whether DVC would reproduce `stage` of `repo` now.

    `dvc status --json <stage>` names the stage, with what changed (deps, outs, command, "always
    changed"), only when it is stale; `{}` otherwise.

    Raises:
        RuntimeError: `dvc status` failed (e.g. an unknown stage or a broken dvc.yaml); the message
            carries the end of its output.
    """
    cmd = [sys.executable, "-m", "dvc", "status", "--json", stage]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    if done.returncode:
        output = tail(done.stdout + done.stderr)
        raise RuntimeError(f"stage {stage}: dvc status failed (exit {done.returncode}):\n{output}")
    return bool(json.loads(done.stdout.strip().splitlines()[-1]).get(stage))  # JSON is the last line


def repro_command(stage: str, *, force: bool = False) -> list[str]:
    """`dvc repro --single-item [--force] <stage>`: this stage alone, DVC judging whether it is stale."""
    return [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]


def is_dvc_hint(line: str) -> bool:
    """Whether `line` of `dvc repro` output is one of DVC's hints (`DVC_HINTS`)."""
    return line.strip().startswith(DVC_HINTS)
