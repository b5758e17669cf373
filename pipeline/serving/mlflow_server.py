"""A logged model served on 127.0.0.1 by a real server process (`pipeline.serving.server`: MLflow's
scoring app, guarded), and a client for its `/invocations`: what the load test
(`bench.serve_load`) and the serving tests talk to."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from pipeline.core.errors import PipelineError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(model_uri: str, env: dict | None = None, startup_s: float = 180) -> Iterator[int]:
    """`python -m pipeline.serving.server` of `model_uri` on 127.0.0.1 (one worker, this Python)
    while the body runs; yields its port once `/ping` answers.

    Raises:
        PipelineError: the server exited or did not answer within `startup_s` (with its log's end).
    """
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "pipeline.serving.server",
        "-m",
        model_uri,
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-w",
        "1",
    ]
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env or os.environ, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_up(proc, port, log, startup_s)
            yield port
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def wait_until_up(proc: subprocess.Popen, port: int, log: IO[str], startup_s: float) -> None:
    """Return once the server on `port` answers `/ping`.

    Raises:
        PipelineError: `proc` exited, or `startup_s` passed, first (with the end of `log`).
    """
    deadline = time.monotonic() + startup_s
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise PipelineError(f"the model server did not come up:\n{log.read()[-3000:]}") from None
            time.sleep(1)


def post(port: int, body: bytes, timeout: float = 120) -> tuple[int, dict]:
    """POST `body` to the server's /invocations: (HTTP status, the JSON answer; {} when none).

    Raises:
        OSError: no answer (refused, reset, timed out).
    """
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")
