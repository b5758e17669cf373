"""DVC from a subprocess: the stages in DAG order, whether one is stale, a stage's output streamed
line by line, and who holds DVC's locks. The Prefect flow's tasks are built on these; none of them
imports Prefect."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from pipeline.core.errors import PipelineError
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


REPO_LOCK = ".dvc/tmp/lock"  # DVC's repository lock (zc.lockfile: flock, the holder's pid inside)
RW_LOCK = ".dvc/tmp/rwlock"  # DVC's locks on the paths of running stages (JSON: pid and command)
BUSY = re.compile(r"'(?P<path>[^']+)' is busy, it is being blocked by:\s*\(PID (?P<pid>\d+)\): (?P<cmd>.+)")


class DvcBusy(PipelineError):
    """Another DVC process (a `dvc exp run`, say) holds a lock of this repository."""


class StatusFailed(RuntimeError):
    """`dvc status` failed: a broken dvc.yaml or params.yaml, which a retry would meet again."""


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
    and `STAGE_ENV`. Returns (exit status, the last `keep` lines). Should this process be stopped
    meanwhile (SIGTERM, Ctrl-C), `cmd` and everything it started are stopped too (`end_tree`).

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
        try:
            for line in proc.stdout:
                if line := line.rstrip():
                    log(line)
                    last.append(line)
        except BaseException:
            end_tree(proc.pid)
            raise
    return proc.returncode, "\n".join(last)


def end_tree(pid: int, timeout_s: float = 60.0) -> None:
    """SIGTERM to process `pid` and every process under it (DVC and its stage), then SIGKILL to those
    still running after `timeout_s` seconds (a training stage saves `last.pt` before it ends)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


def is_stale(stage: str, repo: str) -> bool:
    """Whether DVC would reproduce `stage` of `repo` now.

    `dvc status --json <stage>` names the stage, with what changed (deps, outs, command, "always
    changed"), only when it is stale; `{}` otherwise.

    Raises:
        DvcBusy: another DVC process holds a lock of `repo` (`check_busy`).
        StatusFailed: `dvc status` failed (e.g. an unknown stage or a broken dvc.yaml); the message
            carries the end of its output.
    """
    cmd = [sys.executable, "-m", "dvc", "status", "--json", stage]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    if done.returncode:
        output = tail(done.stdout + done.stderr)
        check_busy(output, repo)
        raise StatusFailed(f"stage {stage}: dvc status failed (exit {done.returncode}):\n{output}")
    return bool(json.loads(done.stdout.strip().splitlines()[-1]).get(stage))  # JSON is the last line


def repro_command(stage: str, *, force: bool = False) -> list[str]:
    """`dvc repro --single-item [--force] <stage>`: this stage alone, DVC judging whether it is stale."""
    return [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]


def is_dvc_hint(line: str) -> bool:
    """Whether `line` of `dvc repro` output is one of DVC's hints (`DVC_HINTS`)."""
    return line.strip().startswith(DVC_HINTS)


def check_busy(output: str, repo: str | Path) -> None:
    """Raise one line when DVC's `output` says it failed on a lock another process holds.

    Raises:
        DvcBusy: a stage's path is in use (DVC's message names the process), or the repository lock
            is held (`check_idle` names its holder).
    """
    if found := BUSY.search(output):
        path, pid, cmd = found["path"], found["pid"], found["cmd"].strip()
        raise DvcBusy(f"{repo}: DVC is busy: pid {pid} ({cmd}) holds {path} ({RW_LOCK}); {WAIT}")
    if "Unable to acquire lock" in output:
        check_idle(repo)
        raise DvcBusy(f"{repo}: DVC is busy: another DVC process held {REPO_LOCK}; {WAIT}")


WAIT = "wait for it to end, or stop it, then run the flow again"


def check_idle(repo: str | Path) -> None:
    """Raise one line when another process holds DVC's repository lock or a path lock in `repo`.

    Raises:
        DvcBusy: naming the process (pid and command line) and the lock it holds.
    """
    if (pid := repo_lock_holder(Path(repo) / REPO_LOCK)) is not None:
        who = f"pid {pid} ({command_line(pid)})" if pid else "another process"
        raise DvcBusy(f"{repo}: DVC is busy: {who} holds {REPO_LOCK}; {WAIT}")
    if holders := rw_lock_holders(Path(repo) / RW_LOCK):
        pid, cmd, path = holders[0]
        raise DvcBusy(f"{repo}: DVC is busy: pid {pid} ({cmd}) holds {path} ({RW_LOCK}); {WAIT}")


def repo_lock_holder(lock: Path) -> int | None:
    """The pid of the process holding DVC's repository lock file `lock` (0 when unknown); None when
    no process holds it. Tested by taking the lock and letting it go at once."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:  # no lock file: no DVC command ran yet
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        text = os.read(fd, 64).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else 0
    finally:
        os.close(fd)


def rw_lock_holders(lock: Path) -> list[tuple[int, str, str]]:
    """(pid, command, path) of each live process DVC's `rwlock` file lists; [] when none or unreadable."""
    try:
        entries = json.loads(lock.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = []
    try:
        for mode in ("write", "read"):
            for path, infos in (entries.get(mode) or {}).items():
                for info in infos if isinstance(infos, list) else [infos]:
                    pid = int(info["pid"])
                    if pid not in (0, os.getpid()) and psutil.pid_exists(pid):
                        found.append((pid, str(info.get("cmd", "?")), path))
    except (AttributeError, KeyError, TypeError, ValueError):  # not DVC's format: DVC will say so
        return found
    return found


def command_line(pid: int) -> str:
    """The command line of process `pid` on one line (at most 160 characters), or "unknown" when it
    cannot be read."""
    try:
        words = " ".join(psutil.Process(pid).cmdline()).split()
    except (psutil.Error, ValueError):
        return "unknown"
    line = " ".join(words) or "unknown"
    return line if len(line) <= 160 else line[:157] + "..."
