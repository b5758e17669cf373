"""Data-parallel training on CPU (gloo): 2 processes under torchrun against 1 process with the
same global batch; rank 0 alone writes; a resumed 2-process run continues from its step with
every rank holding rank 0's weights; a rank that cannot read `last.pt` stops the run with an error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from from_params import from_params

from pipeline.core.config import DistConfig
from pipeline.training.distributed import torchrun_command

SCRIPT = Path(__file__).with_name("toy_ddp.py")
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def run(
    out: Path, steps: int, accum: int, nproc: int = 1, ok: bool = True, **env
) -> subprocess.CompletedProcess:
    args = [str(SCRIPT), str(out), str(steps), str(accum)]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        cmd += args
    else:
        cmd = [sys.executable, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ | env | ONE_THREAD)
    assert (done.returncode == 0) is ok, done.stderr[-3000:]
    return done


def losses(out: Path, rank: int = 0) -> list[float]:
    return json.loads((out / f"rank{rank}.json").read_text())["losses"]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """One process, 2 micro-batches per step: the same global batch as 2 ranks × 1."""
    out = tmp_path_factory.mktemp("single")
    run(out, steps=8, accum=2)
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """2 processes × 1 micro-batch, 8 steps."""
    out = tmp_path_factory.mktemp("two_ranks")
    run(out, steps=8, accum=1, nproc=2)
    return out


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory) -> Path:
    """2 processes, stopped after 4 steps (each test resumes from a copy)."""
    out = tmp_path_factory.mktemp("four_steps")
    run(out, steps=4, accum=1, nproc=2)
    return out


@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(single, two_ranks):
    want = losses(single)
    assert len(want) == 8
    for rank in (0, 1):
        assert losses(two_ranks, rank) == pytest.approx(want, abs=1e-4)


@pytest.mark.slow
def test_only_rank_zero_writes(single, two_ranks):
    written = {r: json.loads((two_ranks / f"rank{r}.json").read_text())["written"] for r in (0, 1)}
    assert written[1] == []
    one_process = json.loads((single / "rank0.json").read_text())["written"]
    assert written[0] == one_process  # same checkpoints and logs, once each, in the same order
    assert written[0].count("log.csv") >= 1 and "last.pt" in written[0]


@pytest.mark.slow
def test_resumed_two_process_run_continues_from_the_saved_step(single, four_steps, tmp_path):
    shutil.copytree(four_steps, tmp_path, dirs_exist_ok=True)
    resumed = run(tmp_path, steps=8, accum=1, nproc=2)
    assert "resuming from" in resumed.stdout and "at step 4" in resumed.stdout
    assert losses(tmp_path) == pytest.approx(losses(single)[4:], abs=1e-4)
    checksums = [json.loads((tmp_path / f"rank{r}.json").read_text())["checksum"] for r in (0, 1)]
    assert checksums[0] == checksums[1]  # every rank holds rank 0's weights


@pytest.mark.slow
def test_a_rank_that_cannot_read_last_pt_fails_clearly(four_steps, tmp_path):
    shutil.copytree(four_steps, tmp_path, dirs_exist_ok=True)
    first = (tmp_path / "rank0.json").read_text()
    failed = run(tmp_path, steps=8, accum=1, nproc=2, ok=False, TOY_UNREADABLE_RANK="1")
    assert "error: " + str(tmp_path / "last.pt") + ": permission denied (rank 1; every node" in failed.stderr
    assert (tmp_path / "rank0.json").read_text() == first  # no rank trained on


def test_torchrun_command_single_and_multi_node(monkeypatch):
    one = torchrun_command(from_params(DistConfig, nproc_per_node=4), "stages.train", ["a"])
    assert one[1:] == [
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=4",
        "--standalone",
        "-m",
        "stages.train",
        "a",
    ]
    monkeypatch.setenv("NODE_RANK", "1")
    multi = torchrun_command(
        from_params(DistConfig, nproc_per_node=8, nnodes=2, master_addr="node0", master_port=29501),
        "stages.train",
        [],
    )
    for flag in ("--nnodes=2", "--node-rank=1", "--master-addr=node0", "--master-port=29501"):
        assert flag in multi
    assert "--standalone" not in multi
