"""The checkpoint folder's shadow copy: mirrored by hard links, restored only to continue the same
run further than the folder holds."""

from pathlib import Path

import torch

from pipeline.training import checkpoint, shadow


def _last(folder: Path, fingerprint: str, step: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: 0 for k in checkpoint.MODEL_KEYS} | {"model": {"w": torch.zeros(1)}}
    checkpoint.save(folder / "last.pt", state | {"fingerprint": fingerprint, "progress": {"step": step}})


def test_mirror_links_the_files_and_drops_the_ones_gone(tmp_path):
    out = tmp_path / "transformer"
    _last(out, "a", 4)
    (out / "step0000004.pt").write_text("4")
    (out / ".trainer.lock").write_text("1")
    shadow.mirror(out)
    copy = tmp_path / ".transformer.resume"
    assert shadow.shadow_dir(out) == copy
    assert sorted(p.name for p in copy.iterdir()) == ["last.pt", "step0000004.pt"]
    assert (copy / "last.pt").stat().st_ino == (out / "last.pt").stat().st_ino  # a link, not a copy
    (out / "step0000004.pt").unlink()
    shadow.mirror(out)
    assert sorted(p.name for p in copy.iterdir()) == ["last.pt"]


def test_restore_brings_back_a_deleted_folder(tmp_path):
    out = tmp_path / "transformer"
    _last(out, "a", 8)
    (out / "mlflow_run.json").write_text("{}")
    shadow.mirror(out)
    for path in out.iterdir():
        path.unlink()
    assert shadow.restore(out, "a") == 8
    assert sorted(p.name for p in out.iterdir()) == ["last.pt", "mlflow_run.json"]
    assert checkpoint.load(out / "last.pt")["progress"]["step"] == 8


def test_restore_replaces_another_runs_folder_but_not_a_newer_one(tmp_path):
    out = tmp_path / "transformer"
    _last(out, "b", 5)
    shadow.mirror(out)
    _last(out, "a", 100)  # DVC put back the recorded (finished) run of other settings
    (out / "model.pt").write_text("a's final model")
    assert shadow.restore(out, "b") == 5
    assert not (out / "model.pt").exists()
    shadow.mirror(out)
    _last(out, "b", 9)  # the folder is ahead of its copy: left alone
    assert shadow.restore(out, "b") is None
    assert checkpoint.load(out / "last.pt")["progress"]["step"] == 9


def test_restore_ignores_a_copy_of_another_run_or_none(tmp_path):
    out = tmp_path / "transformer"
    assert shadow.restore(out, "a") is None and not out.exists()
    _last(out, "a", 3)
    shadow.mirror(out)
    (out / "last.pt").unlink()
    assert shadow.restore(out, "other") is None and not (out / "last.pt").exists()
