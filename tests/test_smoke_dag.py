"""The whole DAG end to end with tests/smoke_params.yaml, in a temporary copy of the repo."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("MULTI30K_MIRROR", REPO.parent / "shared" / "multi30k"))


def merge(base: dict, over: dict) -> dict:
    """Deep-merge `over` into a copy of `base`."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(base.get(key, {}), value) if isinstance(value, dict) else value
    return out


def repo_copy(dest: Path) -> Path:
    """Copy the tracked and untracked-but-not-ignored files (no data, models or reports outputs)."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if name.startswith("reports/") or not (REPO / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


@pytest.mark.slow
@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"Multi30k mirror {MIRROR} absent")
def test_smoke_dag_runs_end_to_end(tmp_path):
    work = repo_copy(tmp_path / "repo")
    params = merge(
        yaml.safe_load((REPO / "params.yaml").read_text()),
        yaml.safe_load((REPO / "tests/smoke_params.yaml").read_text()),
    )
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    env = {
        **os.environ,
        "MULTI30K_MIRROR": str(MIRROR),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    run = subprocess.run(["dvc", "repro"], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    metrics = json.loads((work / "reports/metrics.json").read_text())
    assert set(metrics) == {"val", "test_2016_flickr", "test_2017_flickr"}
    for split, m in metrics.items():
        assert 0.0 <= m["bleu"] <= 100.0 and 0.0 <= m["chrf"] <= 100.0
        assert m["bleu_signature"].startswith("nrefs:1")
        lines = (work / f"reports/translations/{split}.hyp.de").read_text().split("\n")
        assert len(lines) - 1 == 40  # one line per source line (max_eval_pairs), trailing newline
    assert (work / "reports/time_machine.md").read_text().count("\n|") >= 21
    assert json.loads((work / "reports/warmup.json").read_text())["threshold"] == 0.0
    assert (work / "models/transformer/model.pt").is_file()

    again = subprocess.run(["dvc", "repro"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Data and pipelines are up to date" in again.stdout
