"""Atomic writes: the file's mode follows the umask, and stale temp files are recognised."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from from_params import from_params

from pipeline.core import io
from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_path, current_umask, remove_stale_temps, write_json, write_text


@pytest.fixture
def umask():
    """Set the process umask for one test; the previous one comes back afterwards."""
    before = os.umask(0o022)
    yield os.umask
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_follow_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    assert current_umask() == mask and current_umask() == mask  # reading it leaves it unchanged
    write_text(tmp_path / "a.txt", "text\n")
    write_json(tmp_path / "b.json", {"n": 1})
    with atomic_path(tmp_path / "c.bin") as tmp:
        tmp.write_bytes(b"\0")
    assert [mode(tmp_path / n) for n in ("a.txt", "b.json", "c.bin")] == [expected] * 3


def test_checkpoints_and_tokenizer_files_follow_the_umask(tmp_path, umask):
    from pipeline.core.config import TokenizerConfig
    from pipeline.data.tokenizer import train_tokenizer
    from pipeline.training import checkpoint

    umask(0o022)
    checkpoint.save(tmp_path / "model.pt", {"x": 1})
    spm = train_tokenizer(
        ["a dog runs", "a cat sleeps"] * 20, tmp_path / "spm", from_params(TokenizerConfig, vocab_size=30)
    )
    assert [mode(p) for p in (tmp_path / "model.pt", spm, spm.with_suffix(".vocab"))] == [0o644] * 3


def test_only_our_temp_files_count_as_stale(tmp_path):
    with atomic_path(tmp_path / "last.pt") as tmp:
        ours = tmp.name  # the name a killed writer leaves behind
    keep = ["last.pt", "last.pt.tmp", ".last.pt.tmp", "notes.tmp", ".last.pt.abc.tmp", ".l.pt.ABCDEFGH.tmp"]
    for name in [ours, ".model.pt.k2_9zq0x.tmp", *keep]:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / ".dir.abcdefgh.tmp").mkdir()
    removed = remove_stale_temps(tmp_path)
    assert sorted(p.name for p in removed) == sorted([ours, ".model.pt.k2_9zq0x.tmp"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*keep, ".dir.abcdefgh.tmp"])
    assert remove_stale_temps(tmp_path / "absent") == []


def test_a_write_that_runs_out_of_space_says_so_and_keeps_the_old_file(tmp_path, monkeypatch) -> None:
    """torch's writer reports a full disk as `RuntimeError: basic_ios::clear`, Python as ENOSPC:
    either way one line naming the file and 'no space left on device', and the old file stays."""
    target = tmp_path / "last.pt"
    target.write_text("old")
    monkeypatch.setattr(io.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9, 0))
    for err in (
        RuntimeError("basic_ios::clear: iostream error"),
        OSError(errno.ENOSPC, "No space left on device"),
    ):
        with pytest.raises(PipelineError, match=rf"^{re.escape(str(target))}: no space left on device in "):
            with io.atomic_path(target) as tmp:
                tmp.write_text("half")
                raise err
        assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_other_write_errors_pass_through(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="something else"):
        with io.atomic_path(tmp_path / "a.pt"):
            raise RuntimeError("something else")  # the disk has room: not a full disk
