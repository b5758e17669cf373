"""What the training data cost as they grow: synthetic incoming corpora of increasing size through
the stages that read the whole training set, each stage in a fresh process.

How it measures and what it writes: docs/benchmarks.md, `bench.scale`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import yaml

from bench.common import CPU, base_parser, command_line, parse_override, record, sig, table
from pipeline.core.errors import run_main
from pipeline.data.multi30k import TRAIN_SPLIT, load_corpus

SIZES = (30_000, 300_000, 3_000_000)
CHUNK = 100_000  # synthetic pairs generated and written at a time
MIB = 2**20

# Runs one stage module in this interpreter and reports its own CPU time and peak RSS.
PROBE = """
import json, resource, runpy, sys
out, module = sys.argv[1], sys.argv[2]
sys.argv = [module, *sys.argv[3:]]
code = 0
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
use = resource.getrusage(resource.RUSAGE_SELF)
with open("/proc/self/status") as status:
    hwm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
with open(out, "w") as f:
    json.dump({"cpu_s": use.ru_utime + use.ru_stime, "peak_rss_kib": hwm_kib, "exit": code}, f)
sys.exit(code)
"""


def synthetic_pairs(en: Sequence[str], de: Sequence[str], n: int, seed: int) -> Iterator[str]:
    """`n` seeded `en<TAB>de` lines, each two random pairs of (`en`, `de`) joined by a space (a
    tab inside a sentence becomes a space)."""
    rng = np.random.default_rng(seed)
    for start in range(0, n, CHUNK):
        for a, b in rng.integers(0, len(en), size=(min(CHUNK, n - start), 2)):
            line = f"{en[a]} {en[b]}".replace("\t", " ") + "\t" + f"{de[a]} {de[b]}".replace("\t", " ")
            yield line + "\n"


def write_synthetic(path: Path, en: Sequence[str], de: Sequence[str], n: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        f.writelines(synthetic_pairs(en, de, n, seed))


def scratch_params(base: dict, work: Path, data_dir: Path, spm_dir: Path, model: dict) -> dict:
    """`base` (the code under test's params) pointed at the scratch folder, `model` over
    `train.model`; only sections it has."""
    p = yaml.safe_load(yaml.safe_dump(base))
    p["download"]["out_dir"] = str(data_dir)
    p["tokenizer"]["out_dir"] = str(spm_dir)
    p["incoming"] |= {
        "in_dir": str(work / "incoming"),
        "out_jsonl": str(work / "train_merged.jsonl"),
        "metrics_json": str(work / "incoming.json"),
    }
    if "distill" in p:  # a checkout where `prepare` reads the (distilled or passed-through) set
        p["distill"] |= {
            "out_jsonl": str(work / "train_distilled.jsonl"),
            "facts_json": str(work / "distill.json"),
        }
    if "prepare" in p:
        p["prepare"]["out_dir"] = str(work / "train_ids")
    t = p["train"]
    for name in ("log_csv", "metrics_json", "facts_json", "run_id_file"):
        t[name] = str(work / Path(t[name]).name)
    t |= {"out_dir": str(work / "model"), "val_max_sentences": 8, "init_from": None}
    if "model_file" in t:  # a checkout that declares the final model's path
        t["model_file"] = str(work / "model" / Path(t["model_file"]).name)
    t["optim"] |= {"max_steps": 1, "val_every": 1}
    t["model"] |= model
    p["mlflow"]["enabled"] = False
    return p


def stage_commands(repo: Path, params: dict) -> dict[str, list[str]]:
    """The stages to time, in DAG order, as module + arguments."""
    inc = params["incoming"]  # a checkout whose incoming stage took its paths as arguments ignores none
    commands = {"incoming": ["stages.incoming", inc["in_dir"], inc["out_jsonl"], inc["metrics_json"]]}
    if (repo / "stages/distill.py").is_file():
        commands["distill"] = ["stages.distill"]
    if (repo / "stages/prepare.py").is_file():
        commands["prepare"] = ["stages.prepare"]
    commands["train"] = ["stages.train"]
    return commands


def measure(repo: Path, work: Path, command: list[str]) -> dict:
    """Run one stage in a fresh interpreter (cwd `work`, the code of `repo`); its wall and CPU
    seconds and peak RSS (MiB). Raises SystemExit with the stage's output when it fails."""
    result = work / "probe.json"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(result), *command],
        cwd=work,
        env={"PYTHONPATH": str(repo), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"bench.scale: {command[0]} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    probe = json.loads(result.read_text())
    return {
        "wall_s": sig(wall),
        "cpu_s": sig(probe["cpu_s"]),
        "peak_rss_mib": sig(probe["peak_rss_kib"] / 1024),
    }


def run_size(n: int, *, seed: int, repo: Path, base: dict, work: Path, inputs: tuple) -> list[dict]:
    data_dir, spm_dir, en, de, model = inputs
    work.mkdir(parents=True, exist_ok=True)
    write_synthetic(work / "incoming" / "synthetic.tsv", en, de, n, seed)
    params = scratch_params(base, work, data_dir, spm_dir, model)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    rows = []
    for stage, command in stage_commands(repo, params).items():
        row = {"pairs": n, "stage": stage, **measure(repo, work, command)}
        row["rss_mib_per_m_pairs"] = sig(row["peak_rss_mib"] / (n / 1e6))
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        rows.append(row)
    shutil.rmtree(work)  # the largest size's files run to gigabytes
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    """Per stage, between consecutive sizes: the size ratio and the CPU-time and RSS ratios."""
    out = []
    for stage in dict.fromkeys(r["stage"] for r in rows):
        mine = sorted((r for r in rows if r["stage"] == stage), key=lambda r: r["pairs"])
        for small, big in zip(mine, mine[1:], strict=False):
            out.append(
                {
                    "stage": stage,
                    "sizes": f"{big['pairs']}/{small['pairs']}",
                    "pairs_ratio": sig(big["pairs"] / small["pairs"]),
                    "cpu_ratio": sig(big["cpu_s"] / small["cpu_s"]),
                    "rss_ratio": sig(big["peak_rss_mib"] / small["peak_rss_mib"]),
                }
            )
    return out


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = base_parser("Wall, CPU and peak RSS of the data stages on synthetic corpora of growing size.")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="pair counts, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repo", default=".", help="the checkout whose stages run (default: this one)")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed)")
    p.add_argument("--label", default="", help="names the figures: scale_<label>_detail")
    args = p.parse_args(argv)
    repo = Path(args.repo).resolve()
    ours = yaml.safe_load(Path(args.params).read_text(encoding="utf-8"))
    data_dir = Path(ours["download"]["out_dir"]).resolve()
    spm_dir = Path(ours["tokenizer"]["out_dir"]).resolve()
    train = load_corpus(data_dir)[TRAIN_SPLIT]
    tgt = ours["download"]["tgt_lang"]
    inputs = (data_dir, spm_dir, list(train["en"]), list(train[tgt]), parse_override(args.model_override))
    base = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        rows = [
            row
            for n in map(int, args.sizes.split(","))
            for row in run_size(
                n, seed=args.seed, repo=repo, base=base, work=Path(tmp) / str(n), inputs=inputs
            )
        ]
    prefix = f"scale_{args.label}_" if args.label else "scale_"
    figures = {f"{prefix}detail": rows, f"{prefix}ratio_detail": ratios(rows)}
    for detail in figures.values():
        print("\n".join(table(detail)) if detail else "", end="\n\n")
    record(args.out_dir, prefix.rstrip("_"), command_line("bench.scale", argv), figures, CPU)
    return figures


if __name__ == "__main__":
    run_main(main)
