"""The GPU check: CUDA tests, then the DAG's stages with a cut budget, into gpu.json.

What it checks and what it writes: docs/checks.md, `checks.gpu_check`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch
import yaml

from pipeline.core.io import write_json, write_text
from pipeline.data.tokenizer import model_file
from pipeline.ops.dvc_index import Stage, read_stages
from pipeline.ops.overrides import merge_params, read_params

REPO = Path(__file__).resolve().parents[1]
# DVC's reading of dvc.yaml, written HERE by `checks/gpu_check.sh --prepare` (`write_stage_plan`):
# the GPU machine has no DVC. The check's overrides change no path, so the plan holds for them too.
STAGE_PLAN = REPO / ".whl" / "stages.json"
SKIP_STAGES = ("report",)  # figures for the README: not part of the check
CAN_FAIL = ("warmup_train",)  # its gate decides nothing downstream
PACKAGES = ("torch", "numpy", "pandas", "pyarrow", "datasets", "pydantic", "sentencepiece", "sacrebleu")
BLOCKED = ("mlflow", "dvc", "prefect")  # --cpu-dry-run proves the stages run without them


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-dry-run", action="store_true", help="tiny data and budgets, on any machine")
    p.add_argument("--train-minutes", type=float, default=3.0, help="train.optim.max_minutes")
    p.add_argument("--warmup-minutes", type=float, default=1.0, help="warmup_train.optim.max_minutes")
    p.add_argument("--budget-minutes", type=float, default=7.5, help="the whole check stops by then")
    p.add_argument("--out", type=Path, default=REPO / "reports/gpu.json", help="the report")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/gpucheck"), help="scratch repo copy")
    p.add_argument(
        "--mirror", type=Path, default=REPO / ".m30k", help="Multi30k *.gz (gpu_check.sh --prepare)"
    )
    p.add_argument("--reserve-minutes", type=float, default=2.0, help="kept for after training")
    p.add_argument("--skip-tests", action="store_true")
    return p.parse_args(argv)


class Deadline:
    def __init__(self, minutes: float) -> None:
        self.start, self.end = time.time(), time.time() + minutes * 60

    def left(self) -> float:
        return max(self.end - time.time(), 1.0)

    def minutes(self) -> float:
        return round((time.time() - self.start) / 60, 2)


def environment() -> dict:
    """Device, versions and the machine, read in this process."""
    cuda = torch.cuda.is_available()
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "device": torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
        "gpus": torch.cuda.device_count() if cuda else 0,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "packages": versions,
    }


def write_report(report: dict, out: Path) -> None:
    """Write the report to `out` and, when env OUT is set, to $OUT/gpu.json (atomically)."""
    targets = [out] + ([Path(os.environ["OUT"]) / "gpu.json"] if os.environ.get("OUT") else [])
    for path in targets:
        write_json(path, report)


def blocker_dir(work: Path) -> Path:
    """A folder whose sitecustomize.py makes importing mlflow, dvc or prefect fail."""
    folder = work.parent / f"{work.name}-block"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n\n\nclass Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {BLOCKED!r}:\n"
        "            raise ImportError(f'{name} is blocked by checks/gpu_check.py --cpu-dry-run')\n\n\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    return folder


def child_env(mirror: Path, block: Path | None) -> dict:
    """The environment of the tests and stages: carried packages, the mirror, offline HF."""
    path = [str(block)] if block else []
    path += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONUNBUFFERED": "1",
        "MULTI30K_MIRROR": str(mirror.resolve()),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TQDM_MININTERVAL": "10",
    }


def run_tests(env: dict, work: Path, deadline: Deadline) -> dict:
    """`pytest -m cuda tests/test_cuda.py` in the repo; counts from its JUnit XML."""
    junit = work.parent / f"{work.name}-junit.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "tests/test_cuda.py",
        "-rs",
        "-p",
        "no:cacheprovider",
    ]
    started = time.time()
    try:
        done = subprocess.run(
            [*cmd, f"--junitxml={junit}"], cwd=REPO, env=env, timeout=min(deadline.left(), 240)
        )
        rc = done.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    facts = {"command": shlex.join(cmd[2:]), "returncode": rc, "seconds": round(time.time() - started, 1)}
    if junit.is_file():
        suite = ET.parse(junit).getroot()
        suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
        counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
        facts |= counts
    return facts


def write_stage_plan(path: Path = STAGE_PLAN) -> None:
    """Write dvc.yaml's stages as DVC reads them (`read_stages`) to `path`, for `dag` to read."""
    plan = {name: dataclasses.asdict(stage) for name, stage in read_stages(REPO).items()}
    write_json(path, plan)


def dag() -> dict[str, Stage]:
    """dvc.yaml's stages in DAG order, minus SKIP_STAGES: the plan `write_stage_plan` wrote, else
    DVC's own reading (where DVC is installed)."""
    if STAGE_PLAN.is_file():
        plan = json.loads(STAGE_PLAN.read_text(encoding="utf-8"))
        stages = {
            name: Stage(**{k: v if isinstance(v, str) else tuple(v) for k, v in s.items()})
            for name, s in plan.items()
        }
    else:
        stages = read_stages(REPO)
    return {n: s for n, s in stages.items() if n not in SKIP_STAGES}


def scratch_copy(work: Path, stages: dict[str, Stage]) -> None:
    """The packages, and every stage dependency that no stage writes, copied to `work`."""
    if work.exists():
        shutil.rmtree(work)
    written = {p for s in stages.values() for p in s.writes}
    names = {"pipeline", "stages"} | {p for s in stages.values() for p in s.deps} - written
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in sorted(names):
        src, dest = REPO / name, work / name
        if src.is_dir():
            shutil.copytree(src, dest, ignore=ignore, dirs_exist_ok=True)
        elif src.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)


def check_params(args: argparse.Namespace) -> tuple[dict, dict]:
    """(params for the run, the overrides applied over the repo's params.yaml)."""
    over = {
        "mlflow": {"enabled": False},
        "train": {"optim": {"max_minutes": args.train_minutes}},
        "warmup_train": {"optim": {"max_minutes": args.warmup_minutes}},
    }
    if args.cpu_dry_run:
        over = merge_params(yaml.safe_load((REPO / "tests/smoke_params.yaml").read_text()), over)
    return read_params(REPO, over), over


def run_stage(name: str, cmd: str, work: Path, env: dict, deadline: Deadline) -> dict:
    """Run one stage's cmd in `work` (its `python` is this interpreter); minutes and exit status."""
    argv = shlex.split(cmd)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    print(f"\n=== gpu_check: stage {name}: {cmd}", flush=True)
    started = time.time()
    try:
        rc = subprocess.run(argv, cwd=work, env=env, timeout=deadline.left()).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    return {"minutes": round((time.time() - started) / 60, 2), "returncode": rc}


def train_budget(args: argparse.Namespace, deadline: Deadline) -> float:
    """`--train-minutes`, cut so that the stages after training still fit in the budget."""
    return round(max(0.5, min(args.train_minutes, deadline.left() / 60 - args.reserve_minutes)), 2)


def flops_per_target_token(work: Path, params: dict) -> float:
    """Matmul FLOPs of a training step per target token, over the training pairs (Multi30k train
    as the tokenizer encodes it, pairs over `train.max_len` dropped as the train stage does)."""
    from pipeline.core.config import ModelConfig
    from pipeline.data.multi30k import load_corpus
    from pipeline.data.tokenizer import Tokenizer
    from pipeline.model.flops import train_step_flops

    corpus = load_corpus(work / params["download"]["out_dir"])["train"]
    tok = Tokenizer.load(model_file(work / params["tokenizer"]["out_dir"]))
    pairs = zip(tok.encode_batch(list(corpus["en"])), tok.encode_batch(list(corpus["de"])), strict=True)
    lens = [(len(s) + 1, len(t) + 1) for s, t in pairs if max(len(s), len(t)) <= params["train"]["max_len"]]
    src_lens, tgt_lens = [s for s, _ in lens], [t for _, t in lens]
    cfg = ModelConfig(**params["train"]["model"])
    return train_step_flops(cfg, tok.vocab_size, src_lens, tgt_lens) / sum(tgt_lens)


def peak_gflops(device: torch.device, bf16: bool) -> float:
    """This machine's matmul peak in the training's dtype (bench.flops, large squares on CUDA)."""
    from bench.flops import matmul_peak_gflops

    size, min_run_s = (8192, 1.0) if device.type == "cuda" else (512, 0.2)
    return matmul_peak_gflops(torch.bfloat16 if bf16 else torch.float32, device, size, min_run_s=min_run_s)


def training_facts(work: Path, params: dict) -> dict:
    """Steps, epochs and target tokens/s from the training log (rows with a training window)."""
    import pandas as pd

    log = pd.read_csv(work / params["train"].get("log_csv", "reports/train_log.csv"))
    speeds = [s for s in log["tokens_per_s"] if s > 0]
    return {
        "steps": int(log["step"].iloc[-1]),
        "epochs": int(log["epoch"].iloc[-1]),
        "validations": len(log),
        "tokens_per_s": round(statistics.median(speeds), 1),
        "tokens_per_s_windows": [round(s, 1) for s in speeds],
        "final_val_bleu_greedy": float(log["val_bleu"].max()),
    }


def throughput(work: Path, params: dict) -> dict:
    """Training tokens/s, its matmul GFLOP/s and MFU against the peak measured now."""
    from pipeline.core.device import pick_device, use_bf16

    facts = training_facts(work, params)
    optim = params["train"]["optim"]
    device = pick_device(optim.get("device", "auto"))
    bf16 = use_bf16(device, optim.get("precision", "auto"))
    per_token = flops_per_target_token(work, params)
    peak = peak_gflops(device, bf16)
    achieved = facts["tokens_per_s"] * per_token / 1e9
    return facts | {
        "flops_per_target_token": round(per_token),
        "achieved_gflops": round(achieved, 1),
        "peak_gflops": round(peak, 1),
        "peak_dtype": "bf16" if bf16 else "fp32",
        "mfu": round(achieved / peak, 4),
    }


def bleu(work: Path, stages: dict[str, Stage]) -> dict:
    """BLEU (beam search, sacreBLEU) of each evaluation split, from the score stage's metrics files
    (`<split>.json` each)."""
    files = [work / path for path in stages["score"].metrics]
    return {path.stem: json.loads(path.read_text())["bleu"] for path in files if path.is_file()}


def safely(fn, *args) -> dict:
    """fn(*args), or {"error": ...} when a file it reads is missing or broken."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the report records what could not be read
        return {"error": f"{type(exc).__name__}: {exc}"}


def copy_back(work: Path, stages: dict[str, Stage], params: dict) -> None:
    """The stages' metrics and the training log into $OUT (6 files at most: the tool takes 8)."""
    if not os.environ.get("OUT"):
        return
    names = [p for s in stages.values() for p in s.metrics]
    names += [params["train"].get(k, "") for k in ("log_csv", "facts_json")]
    files = [work / n for n in names if n and (work / n).is_file()]
    for path in files[:6]:
        shutil.copy2(path, Path(os.environ["OUT"]) / path.name)


def run_dag(
    stages: dict[str, Stage],
    args: argparse.Namespace,
    *,
    params: dict,
    env: dict,
    deadline: Deadline,
    report: dict,
) -> bool:
    """Every stage in order into report["stages"]; the training budget is set just before `train`.
    Returns whether every stage that matters succeeded."""
    work = args.workdir
    report["stages"] = {}
    for name, stage in stages.items():
        if name == "train":
            params["train"]["optim"]["max_minutes"] = report["train_minutes"] = train_budget(args, deadline)
            write_text(work / "params.yaml", yaml.safe_dump(params, sort_keys=False))
        report["stages"][name] = run_stage(name, stage.cmd, work, env, deadline)
        write_report(report, args.out)
        if report["stages"][name]["returncode"] != 0 and name not in CAN_FAIL:
            report["stopped_at"] = name
            return False
    return True


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    deadline = Deadline(args.budget_minutes)
    params, over = check_params(args)
    report = {
        "check": shlex.join(["checks/gpu_check.sh", *argv]),
        "mode": "cpu-dry-run" if args.cpu_dry_run else "gpu",
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **environment(),
        "params_overrides": over,
        "blocked_imports": list(BLOCKED) if args.cpu_dry_run else [],
    }
    write_report(report, args.out)
    env = child_env(args.mirror, blocker_dir(args.workdir) if args.cpu_dry_run else None)
    if not args.skip_tests:
        report["tests"] = run_tests(env, args.workdir, deadline)
        write_report(report, args.out)
    stages = dag()
    scratch_copy(args.workdir, stages)
    write_text(args.workdir / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    ok = run_dag(stages, args, params=params, env=env, deadline=deadline, report=report)
    report["train"] = safely(throughput, args.workdir, params)
    report["bleu"] = safely(bleu, args.workdir, stages)
    report["total_minutes"] = deadline.minutes()
    write_report(report, args.out)
    copy_back(args.workdir, stages, params)
    tests_ok = args.skip_tests or report["tests"].get("returncode") == 0
    print(
        f"\ngpu_check: {'OK' if ok and tests_ok else 'FAILED'} in {report['total_minutes']} min -> {args.out}"
    )
    return 0 if ok and tests_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
