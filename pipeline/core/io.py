"""Atomic file writes: write to a temp file beside the target, then rename.

The temp file is `.<name>.<8 random characters>.tmp` (`TEMP_NAME`); a process killed mid-write
leaves it behind, and `remove_stale_temps` clears such leftovers from a folder. The file written
gets the mode any new file gets (0666 less the umask), not `mkstemp`'s private 0600. A write that
runs out of space is a one-line `PipelineError` saying so, and the old file stays.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.core.errors import PipelineError

TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")  # what `atomic_path` names its temp files
_UMASK_LOCK = threading.Lock()
FULL_BYTES = 1 << 20  # a file system with less free space than this after a failed write is full


def current_umask() -> int:
    """The process's umask.

    Read without changing it where Linux reports it (/proc/self/status), else set and restored at once
    (to 0o077 meanwhile, so a file another thread creates then is private rather than open)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path in the target's folder; rename it onto `path` only on success. The file
    has the usual mode of a new file (0666 less the umask).

    Raises:
        PipelineError: the write ran out of space (`disk_full`); `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    finally:
        os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:  # torch's writer reports a full disk as a RuntimeError
        if disk_full(err, path.parent):
            raise PipelineError(
                f"{path}: no space left on device in {path.parent}; nothing was replaced"
            ) from None
        raise
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def disk_full(err: BaseException, folder: Path) -> bool:
    """Whether a failed write into `folder` ran out of space: the error says so (ENOSPC, EDQUOT),
    or the file system has under `FULL_BYTES` left (read before the partial file is removed)."""
    if getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
        return True
    try:
        return shutil.disk_usage(folder).free < FULL_BYTES
    except OSError:
        return False


def write_text(path: str | Path, text: str) -> None:
    """Atomically write UTF-8 text."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, obj: object) -> None:
    """Atomically write indented JSON."""
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the temp files `atomic_path` left in `folder` when a process died mid-write (only
    names matching `TEMP_NAME`; nothing else is touched). Returns the paths removed.

    Call it only where no other process writes into `folder` at the same time.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.iterdir() if TEMP_NAME.fullmatch(p.name) and p.is_file())
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
