"""The repository this package lives in and its git facts (commit, branch)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def repo_root() -> Path:
    """The repository holding this package; for a `dvc exp run --temp` copy, the original."""
    here = Path(__file__).resolve().parents[2]
    parts = here.parts
    return Path(*parts[: parts.index(".dvc")]) if ".dvc" in parts else here


def git_commit(cwd: str | Path = ".") -> str:
    """`git rev-parse HEAD` in `cwd`, or "unknown" outside a git checkout (or without git)."""
    return _git(["rev-parse", "HEAD"], cwd) or "unknown"


def git_branch(cwd: str | Path = ".") -> str | None:
    """The branch checked out in `cwd`; None on a detached HEAD, before the first commit, outside a
    git checkout or without git."""
    name = _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    return name if name and name != "HEAD" else None


def _git(args: list[str], cwd: str | Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
