"""Load test of the served model: a real `pipeline.serving.server` on 127.0.0.1, concurrent clients
for a fixed time.

How it measures and what it writes: docs/benchmarks.md, `bench.serve_load`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from itertools import cycle

import torch

from bench.common import report
from pipeline.core.errors import run_main
from pipeline.core.params_file import load_params
from pipeline.data.multi30k import load_corpus
from pipeline.serving.mlflow_server import post, served


def client(port: int, batches: list[list[str]], until: float) -> list[tuple[float, int, bool]]:
    """Post `batches` in turn until `until` (monotonic time): (seconds, sentences, ok) per request."""
    results = []
    for batch in cycle(batches):
        if time.monotonic() >= until:
            return results
        start = time.perf_counter()
        try:
            status, body = post(port, json.dumps({"inputs": batch}).encode())
            ok = status == 200 and len(body.get("predictions", [])) == len(batch)
        except OSError:
            ok = False
        results.append((time.perf_counter() - start, len(batch), ok))
    return results


def load(port: int, sentences: list[str], clients: int, seconds: float, batch: int) -> dict:
    """`clients` concurrent clients for `seconds`, each on its own slice of `sentences`."""
    batches = [sentences[i : i + batch] for i in range(0, len(sentences), batch)]
    shares = [batches[i::clients] or batches for i in range(clients)]
    start = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        done = list(pool.map(lambda share: client(port, share, start + seconds), shares))
    wall = time.monotonic() - start
    results = [r for per_client in done for r in per_client]
    latencies = sorted(secs for secs, _, _ in results)
    return {
        "clients": clients,
        "seconds": round(wall, 1),
        "batch": batch,
        "requests": len(results),
        "errors": sum(not ok for _, _, ok in results),
        "sent_s": round(sum(n for _, n, ok in results if ok) / wall, 2),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-uri", help="e.g. models:/multi30k-en-de-transformer@candidate")
    p.add_argument("--port", type=int, help="load-test the server already on 127.0.0.1:PORT instead")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=45)
    p.add_argument("--batch", type=int, default=1, help="sentences per request")
    p.add_argument("--split", default="val", help="the Multi30k split whose English is sent")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--out-dir", default="reports")
    args = p.parse_args(argv)
    if (args.model_uri is None) == (args.port is None):
        p.error("give one of --model-uri (a server is started) and --port (one is running)")
    params = load_params(args.params)
    sentences = list(load_corpus(params.download.out_dir)[args.split]["en"])
    with served(args.model_uri) if args.port is None else nullcontext(args.port) as port:
        figures = load(port, sentences, args.clients, args.seconds, args.batch)
    argv = sys.argv[1:] if argv is None else argv
    report("bench.serve_load", argv, args.out_dir, {"serve_load": figures}, torch.device("cpu"))


if __name__ == "__main__":
    run_main(main)
