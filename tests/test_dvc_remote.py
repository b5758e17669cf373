"""The trained model without training: a DAG run in one clone is `dvc push`ed to a remote, a
second `git clone` gets it with `dvc pull`, finds every stage up to date and translates.

The committed default remote (`.dvc/config`) is only read here: the pushes and pulls go to a
temporary remote set in each clone's Git-ignored `.dvc/config.local`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# the scratch copy of the smoke DAG
from test_smoke_dag import MIRROR, REPO, P, dag_env, repo_copy, write_params

STORE = "mt-pipeline-dvc-store"  # the default remote's folder, beside the checkout
GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]

TINY = {  # smaller still than tests/smoke_params.yaml: the plumbing is checked, not the model
    "download": {"max_train_pairs": 200, "max_eval_pairs": 10},
    "tokenizer": {"vocab_size": 300},
    "warmup_data": {"n_train": 300, "n_val": 20, "n_test": 20},
    "warmup_train": {"optim": {"max_steps": 4, "val_every": 4}},
    # enough steps, at a high enough rate, that "A dog runs." comes out as more than the empty line
    "train": {
        "optim": {"max_steps": 40, "val_every": 40, "average_last": 1, "peak_lr": 0.01, "warmup_steps": 5}
    },
    "decode": {"beam_size": 1},
    "mlflow": {"enabled": False},
}


def sh(cmd: list[str], cwd: Path, env: dict, timeout: int = 300) -> str:
    """Run `cmd`, fail the test with its output unless it succeeds; its stdout."""
    run = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"{' '.join(cmd)}:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    return run.stdout


def remotes(work: Path, env: dict) -> dict[str, str]:
    """`dvc remote list`: name -> resolved url (the default's followed by ` (default)`)."""
    out = sh(["dvc", "remote", "list"], work, {**env, "COLUMNS": "100000"})  # one remote a line
    return dict(" ".join(line.split()).split(" ", 1) for line in out.splitlines() if line.strip())


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    return dag_env(tmp_path_factory.mktemp("mlflow") / "mlflow.db") | {"DVC_NO_ANALYTICS": "1"}


def test_default_remote_is_a_folder_beside_the_checkout(tmp_path, env):
    """The committed config's relative url is resolved from `.dvc/`, so it names a sibling of the
    checkout wherever that is; and a store put inside the checkout is Git-ignored."""
    work = tmp_path / "checkout"
    (work / ".dvc").mkdir(parents=True)
    for name in (".dvc/config", ".dvc/.gitignore"):
        shutil.copy2(REPO / name, work / name)
    (work / "data").mkdir()
    sh(["git", "init", "-q"], work, env)
    assert remotes(work, env) == {"local": f"{tmp_path / STORE} (default)"}
    assert remotes(work / "data", env) == remotes(work, env)  # the same from a sub-folder
    for inside in (f"{STORE}/files/md5/ab/cdef", f"models/{STORE}/x"):
        ignored = subprocess.run(["git", "check-ignore", "-q", inside], cwd=REPO)
        assert ignored.returncode == 0, f"{inside} is not Git-ignored"


@pytest.fixture(scope="module")
def pushed(tmp_path_factory, env) -> tuple[Path, Path]:
    """(a scratch copy of the repo with the tiny DAG built and committed, the remote it pushed to)."""
    if not MIRROR.is_dir():
        pytest.skip(f"Multi30k mirror {MIRROR} absent")
    root = tmp_path_factory.mktemp("dvc_remote")
    work = repo_copy(root / "repo")
    write_params(work, **TINY)
    sh(["dvc", "repro"], work, env, timeout=900)
    sh(GIT + ["add", "-A"], work, env)
    sh(GIT + ["commit", "-q", "-m", "a finished run"], work, env)
    remote = root / "remote"
    sh(["dvc", "remote", "add", "--local", "-d", "scratch", str(remote)], work, env)
    sh(["dvc", "push"], work, env)
    assert not (root / STORE).exists()  # the committed default remote was not written to
    return work, remote


def translate(work: Path, env: dict, sentence: str) -> str:
    """`mt-translate SENTENCE` with the code, params and model of the clone at `work`."""
    return sh(
        [sys.executable, "-m", "pipeline", "translate", "--params", str(work / "params.yaml"), sentence],
        work,
        env,
    )


@pytest.mark.slow
def test_a_fresh_clone_pulls_the_model_and_translates(pushed, env, tmp_path):
    work, remote = pushed
    clone = tmp_path / "clone"
    sh(GIT + ["clone", "-q", str(work), str(clone)], tmp_path, env)
    assert not (clone / P.train.model_file).exists()  # Git holds no model
    assert remotes(clone, env) == {"local": f"{tmp_path / STORE} (default)"}  # the committed one
    sh(["dvc", "remote", "add", "--local", "-d", "scratch", str(remote)], clone, env)

    sh(["dvc", "pull", "dvc.yaml"], clone, env)  # the default pipeline's outputs (docs/data.md)
    assert json.loads(sh(["dvc", "status", "--json", "dvc.yaml"], clone, env)) == {}  # nothing to rerun
    for out in (P.train.model_file, P.tokenizer.out_dir, P.download.out_dir):
        assert (clone / out).exists(), out

    german = translate(clone, env, "A dog runs.")
    assert len(german.splitlines()) == 1 and german.strip(), repr(german)
    assert german == translate(work, env, "A dog runs.")  # the model that was pushed
    assert not (tmp_path / STORE).exists()
