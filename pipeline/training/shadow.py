"""A hard-linked copy of a checkpoint folder outside DVC's outputs, so a stopped run survives DVC.

`dvc exp run` resets a stage's outputs to the version `dvc.lock` records before it runs, even
`persist: true` ones, which deletes the `last.pt` of a run that was stopped before it finished.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipeline.core.errors import CheckpointError
from pipeline.training import checkpoint


def shadow_dir(out_dir: Path) -> Path:
    """Where the copy of `out_dir` lives: `.<name>.resume` beside it (`models/.transformer.resume`)."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.resume"


def _files(folder: Path) -> dict[str, Path]:
    """The regular files of `folder` by name, dot files (the trainer lock, temp files) left out."""
    if not folder.is_dir():
        return {}
    return {p.name: p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}


def _link(src: Path, dst: Path) -> None:
    """Make `dst` the same file as `src`: a hard link (no extra disk), a copy across file systems."""
    if dst.exists() and os.path.samefile(src, dst):
        return  # already linked (renaming one link over another of the same file does nothing)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _sync(src: Path, dst: Path) -> None:
    """Make the files of `dst` those of `src`: link each one, delete the others."""
    dst.mkdir(parents=True, exist_ok=True)
    wanted = _files(src)
    for name, path in _files(dst).items():
        if name not in wanted:
            path.unlink()
    for name, path in wanted.items():
        _link(path, dst / name)


def mirror(out_dir: Path) -> None:
    """Make the shadow of `out_dir` hold the same files (hard links), called after each `last.pt`."""
    _sync(Path(out_dir), shadow_dir(out_dir))


def _saved(path: Path) -> tuple[str, int] | None:
    """(fingerprint, step) of the `last.pt` at `path`; None when it is missing or unreadable."""
    try:
        state = checkpoint.load(path)
    except CheckpointError:
        return None
    return state.get("fingerprint", ""), int(state.get("progress", {}).get("step", 0))


def restore(out_dir: Path, fingerprint: str) -> int | None:
    """Put the shadow's files back into `out_dir` when they continue the run of `fingerprint` further.

    Further than what `out_dir` holds: its `last.pt` missing, of another run, or at an earlier step.
    Returns the step restored, or None when `out_dir` was left as it was."""
    out_dir = Path(out_dir)
    copy = _saved(shadow_dir(out_dir) / "last.pt")
    if copy is None or copy[0] != fingerprint:
        return None
    here = _saved(out_dir / "last.pt")
    if here is not None and here[0] == fingerprint and here[1] >= copy[1]:
        return None
    _sync(shadow_dir(out_dir), out_dir)
    return copy[1]
