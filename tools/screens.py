"""Screenshots of the screens users work in, after a smoke run.

    python tools/screens.py [--out screens] [--work DIR [--reuse]]

In a scratch copy of the repository with `tests/smoke_params.yaml` (the whole DAG on ~500 pairs),
tracked into its own MLflow database and Prefect home: `dvc repro`, then two flow runs
(`python -m pipeline.ops.flow run`), the second after 10 new pairs were dropped into the incoming
folder (so it retrains and decides on promotion). Then `mlflow ui` and `prefect server start` on
127.0.0.1 (free ports, started and stopped here) and headless Chromium (Debian's `chromium`)
screenshots of: MLflow's runs list, the two training runs compared, the retrained run, its metric
charts, a translation artifact and the registered model; Prefect's flow runs, the second run, its
artifact; and `dvc plots show`'s page, with the network blocked. PNGs go to `--out`, with
`screens.md` saying what each shows. Takes about five minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the smoke run's set-up
from test_smoke_dag import MIRROR, dag_env, repo_copy, write_params  # noqa: E402

CHROMIUM = shutil.which("chromium") or "chromium"
NEW_PAIRS = [
    (f"A dog number {i} runs on the beach.", f"Ein Hund Nummer {i} läuft am Strand.") for i in range(10)
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], cwd: Path, env: dict, timeout: int = 1200) -> None:
    """`cmd` in `cwd`; its output's tail and an error when it fails."""
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


def wait_for(url: str, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5)
            return
        except OSError:
            time.sleep(1)
    sys.exit(f"{url}: no answer in {seconds:.0f} s")


@contextmanager
def server(cmd: list[str], cwd: Path, env: dict, ready_url: str):
    """A server process for the block; stopped (its whole session) afterwards."""
    log = open(cwd / f"{Path(cmd[0]).name}-server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_for(ready_url)
        yield
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()


def get_json(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def shoot(url: str, png: Path, height: int = 1000, offline: bool = False) -> None:
    """A 1600-pixel-wide screenshot of `url` after its scripts ran (15 s of virtual time)."""
    cmd = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size=1600,{height}",
        "--virtual-time-budget=15000",
        f"--screenshot={png}",
        url,
    ]
    if offline:
        cmd.insert(1, "--proxy-server=127.0.0.1:9")  # every network request fails
    subprocess.run(cmd, capture_output=True, timeout=180, check=True)


def smoke_runs(work: Path, env: dict) -> None:
    """`dvc repro`, a flow run, 10 new pairs, a second flow run."""
    run(["dvc", "repro"], work, env)
    run([sys.executable, "-m", "pipeline.ops.flow", "run"], work, env)
    incoming = work / "data" / "incoming" / "new_pairs.tsv"
    incoming.write_text("".join(f"{en}\t{de}\n" for en, de in NEW_PAIRS), encoding="utf-8")
    run([sys.executable, "-m", "pipeline.ops.flow", "run"], work, env)


def mlflow_screens(work: Path, env: dict, out: Path) -> list[tuple[str, str]]:
    """Screenshots of the MLflow UI; (file, what it shows) for each."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        "mlflow",
        "ui",
        "--backend-store-uri",
        env["MLFLOW_TRACKING_URI"],
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with server(cmd, work, env, f"{base}/health"):
        exp = get_json(f"{base}/api/2.0/mlflow/experiments/search", {"max_results": 10})["experiments"]
        exp_id = next(e["experiment_id"] for e in exp if e["name"] != "Default")
        found = get_json(
            f"{base}/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id], "max_results": 50}
        )
        train = [r["info"]["run_id"] for r in found["runs"] if r["data"].get("params")]
        first, last = train[-1], train[0]  # newest first
        model = get_json(f"{base}/api/2.0/mlflow/registered-models/search")["registered_models"][0]["name"]
        artifacts = get_json(f"{base}/api/2.0/mlflow/artifacts/list?run_id={last}&path=reports/translations")
        preview = next((f["path"] for f in artifacts.get("files", []) if not f["is_dir"]), "")
        pages = [
            ("mlflow-experiment.png", f"#/experiments/{exp_id}", "the experiment as it opens by default"),
            (
                "mlflow-runs.png",
                f"#/experiments/{exp_id}/runs?workflowType=machine_learning",
                "the runs list, by the link the train stage prints",
            ),
            (
                "mlflow-compare.png",
                f'#/compare-runs?runs=["{first}","{last}"]&experiments=["{exp_id}"]',
                "the dvc-repro run and the flow's retrain compared",
            ),
            ("mlflow-run.png", f"#/experiments/{exp_id}/runs/{last}", "the retrained run's overview"),
            ("mlflow-metrics.png", f"#/experiments/{exp_id}/runs/{last}/model-metrics", "its metric charts"),
            (
                "mlflow-artifact.png",
                f"#/experiments/{exp_id}/runs/{last}/artifacts/{preview}",
                f"a translation artifact previewed ({preview or 'none found'})",
            ),
            ("mlflow-model.png", f"#/models/{model}", "the registered model's versions and aliases"),
        ]
        for png, route, _ in pages:
            shoot(f"{base}/{route}", out / png)
    return [(png, what) for png, _, what in pages]


def prefect_screens(work: Path, env: dict, out: Path) -> list[tuple[str, str]]:
    """Screenshots of the Prefect UI; (file, what it shows) for each."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = ["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    ui_env = env | {"PREFECT_UI_API_URL": f"{base}/api"}  # the UI's default is port 4200
    with server(cmd, work, ui_env, f"{base}/api/health"):
        runs = get_json(f"{base}/api/flow_runs/filter", {"sort": "START_TIME_DESC", "limit": 5})
        newest = runs[0]["id"]
        artifacts = get_json(f"{base}/api/artifacts/filter", {"sort": "CREATED_DESC", "limit": 5})
        pages = [("prefect-runs.png", "runs", "the flow runs list: names and tags")]
        pages.append(("prefect-run.png", f"runs/flow-run/{newest}", "the retraining run: its tasks' states"))
        if artifacts:
            pages.append(
                ("prefect-artifact.png", f"artifacts/artifact/{artifacts[0]['id']}", "its decision artifact")
            )
        for png, route, _ in pages:
            shoot(f"{base}/{route}", out / png, height=1200)
    return [(png, what) for png, _, what in pages]


def plots_screen(work: Path, env: dict, out: Path) -> list[tuple[str, str]]:
    run(["dvc", "plots", "show", "-o", "dvc_plots"], work, env)
    shoot((work / "dvc_plots" / "index.html").as_uri(), out / "dvc-plots.png", height=1400, offline=True)
    return [("dvc-plots.png", "`dvc plots show`'s page with every network request refused")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("screens"), help="where the PNGs go")
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temp folder)")
    p.add_argument("--reuse", action="store_true", help="--work already holds the smoke runs: only shoot")
    args = p.parse_args()
    if not MIRROR.is_dir():
        sys.exit(f"Multi30k mirror {MIRROR} absent: set MULTI30K_MIRROR")
    root = args.work or Path(tempfile.mkdtemp(prefix="screens-"))
    work, env = root / "repo", dag_env(root / "mlflow.db") | {"PREFECT_HOME": str(root / "prefect")}
    if not args.reuse:
        write_params(repo_copy(work))
        smoke_runs(work, env)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    shown = mlflow_screens(work, env, out) + prefect_screens(work, env, out) + plots_screen(work, env, out)
    lines = ["# Screens", "", f"From `python tools/screens.py` on {time.strftime('%Y-%m-%d %H:%M')}.", ""]
    (out / "screens.md").write_text("\n".join(lines + [f"- `{png}`: {what}" for png, what in shown]) + "\n")
    print(f"{len(shown)} screenshots in {out} (scratch run in {root})")


if __name__ == "__main__":
    main()
