"""The served model over HTTP: MLflow's scoring app behind a guard that checks each request before
MLflow reads it and makes every error one line of JSON (docs/tracking-and-serving.md).

    python -m pipeline.serving.server -m "models:/multi30k-en-de-transformer@candidate" -p 5001
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import shutil
import tempfile
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from pipeline.core.errors import run_main
from pipeline.serving.pyfunc import REQUEST_PARAMS, input_problem, json_kind
from pipeline.tracking.store import check_store

MODEL_URI_ENV = "MT_SERVE_MODEL_URI"  # the model each worker loads (`create_app`)
TIMEOUT_ENV = "MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT"  # MLflow's app reads its request timeout here
MAX_MESSAGE = 300  # characters of an error message, at most
INTERNAL = "internal error (see the server's log)"
log = logging.getLogger(__name__)


def content_type_problem(header: str | None) -> str | None:
    """What is wrong with a request's Content-Type header (None: `application/json`, optionally
    with `charset=utf-8`), as one line."""
    if not header:
        return "Content-Type: missing (expected application/json)"
    mime, *options = [part.strip().lower() for part in header.split(";")]  # media types ignore case
    if mime == "application/json" and all(o.replace('"', "") == "charset=utf-8" for o in options):
        return None
    return f"Content-Type: expected application/json (UTF-8), got {header!r}"


async def capped_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None as soon as it is known to be over `limit` bytes: from its
    Content-Length before anything is read, else while it streams in."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    request._body = b"".join(chunks)  # what Starlette's middleware replays to the app downstream
    return request._body


def body_problem(body: bytes) -> str | None:
    """What is wrong with a request body (None: `{"inputs": [string, ...]}` with an optional
    `"params"` object of known keys), as one line that never echoes the body."""
    if not body.strip():
        return 'body: empty (expected {"inputs": [string, ...]})'
    try:
        request = json.loads(body)
    except UnicodeDecodeError:
        return "body: not UTF-8 text"
    except json.JSONDecodeError as err:
        return f"body: not JSON ({err.msg} at character {err.pos})"
    except (ValueError, RecursionError):  # a number of over 4,300 digits; arrays nested too deep
        return "body: JSON that cannot be read (a number too long, or nesting too deep)"
    return request_problem(request)


def request_problem(request: object) -> str | None:
    """What is wrong with a parsed request body (see `body_problem`), as one line."""
    if not isinstance(request, dict):
        return f'body: expected an object {{"inputs": [string, ...]}}, got {json_kind(request)}'
    unknown = sorted(set(request) - {"inputs", "params"})
    if unknown:
        return f"body: unknown key {', '.join(map(repr, unknown))} (allowed: inputs, params)"
    if "inputs" not in request:
        return 'body: no "inputs" (a list of strings)'
    params = request.get("params")
    if params is not None and not isinstance(params, dict):
        return f"params: expected an object, got {json_kind(params)}"
    unknown = sorted(set(params or {}) - set(REQUEST_PARAMS))
    if unknown:
        return f"params: unknown {', '.join(map(repr, unknown))} (allowed: {', '.join(REQUEST_PARAMS)})"
    return input_problem(request["inputs"])


def error_response(status: int, message: str, error_code: str | None = None) -> JSONResponse:
    """`{"error_code", "message"}` with `status`; the code defaults to the status's name (BAD_REQUEST)."""
    code = error_code or HTTPStatus(status).name
    return JSONResponse({"error_code": code, "message": message}, status_code=status)


def one_line(status: int, body: bytes) -> tuple[str, str | None]:
    """(message, error code) of an error answer `body`, as one line.

    The message is its JSON `message` or `detail`, or its text, cut to its last part after MLflow's
    `Failed to predict data '...'. \\nError: `, to one line and to `MAX_MESSAGE` characters; a 5xx
    gets `INTERNAL` instead (for a 504 its own).
    """
    try:
        answer = json.loads(body)
    except ValueError:
        answer = body.decode("utf-8", "replace")
    fields = answer if isinstance(answer, dict) else {"message": answer}
    text = str(fields.get("message") or fields.get("detail") or HTTPStatus(status).phrase)
    code = fields.get("error_code") if isinstance(fields.get("error_code"), str) else None
    if status >= 500 and status != HTTPStatus.GATEWAY_TIMEOUT:
        return INTERNAL, code
    lines = text.rpartition("\nError: ")[2].strip().splitlines() or [HTTPStatus(status).phrase]
    return lines[0][:MAX_MESSAGE], code


def guard(app: FastAPI, max_body_bytes: int) -> FastAPI:
    """`app` (MLflow's scoring app) with its requests checked and its error answers one line of JSON.

    Returns `app`. A body over `max_body_bytes` gets a 413 without being read to its end.
    """

    @app.middleware("http")
    async def one_line_errors(request: Request, call_next) -> Response:
        if request.method == "POST" and request.url.path == "/invocations":
            problem = content_type_problem(request.headers.get("content-type"))
            if problem:
                return error_response(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, problem)
            body = await capped_body(request, max_body_bytes)
            if body is None:
                return error_response(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"body: over {max_body_bytes:,} bytes (serve.max_body_bytes)",
                )
            problem = body_problem(body)
            if problem:
                return error_response(HTTPStatus.BAD_REQUEST, problem)
            set_header(request, b"content-type", b"application/json")  # MLflow compares it as written
        try:
            response = await call_next(request)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, INTERNAL)
        if response.status_code < 400:
            return response
        body = b"".join([chunk async for chunk in response.body_iterator])
        return error_response(response.status_code, *one_line(response.status_code, body))

    return app


def set_header(request: Request, name: bytes, value: bytes) -> None:
    """Replace header `name` (lower case) of `request` for the app downstream."""
    request.scope["headers"] = [(k, value if k == name else v) for k, v in request.scope["headers"]]


def local_copy(model_uri: str) -> str:
    """The folder to load `model_uri` from: a registry URI (`models:/...`) is downloaded into a
    folder of this process's own, removed at exit; anything else is returned as it is.

    Why: for a model in a local artifact store MLflow loads from the store's folder itself and
    writes its `registered_model_meta` there, into another checkout's `mlartifacts/` when the
    database was copied from one.
    """
    if not model_uri.startswith("models:/"):
        return model_uri
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # else a bar in the server's log
    folder = tempfile.mkdtemp(prefix="mt-serve-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=folder)


def create_app() -> FastAPI:
    """The guarded scoring app of the model named by `$MT_SERVE_MODEL_URI`.

    A uvicorn factory: each worker loads the model once, from `local_copy`. MLflow's
    `SERVING_MODEL_CONFIG` overrides its model config."""
    from mlflow.pyfunc import scoring_server

    model = scoring_server.load_model_with_mlflow_config(local_copy(os.environ[MODEL_URI_ENV]))
    return guard(scoring_server.init(model), model.unwrap_python_model().limits.max_body_bytes)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.serving.server",
        description="Serve a logged translator (mlflow models serve's /invocations, /ping, /version) "
        "with one-line JSON errors.",
        add_help=False,
    )
    p.add_argument("--help", action="help", help="show this help and exit")
    p.add_argument("-m", "--model-uri", required=True, help='e.g. "models:/NAME@candidate" or a folder')
    p.add_argument("-h", "--host", default="127.0.0.1", help="address to listen on (0.0.0.0: all)")
    p.add_argument("-p", "--port", type=int, default=5000, help="port to listen on")
    p.add_argument("-w", "--workers", type=int, default=1, help="worker processes, each with the model")
    p.add_argument("-t", "--timeout", type=int, default=60, help="seconds a request may take (then 504)")
    return p


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    args = parser().parse_args(argv)
    if args.model_uri.startswith(("models:/", "runs:/")):
        import mlflow

        check_store(mlflow.get_tracking_uri())  # one line, not a traceback from each worker
    os.environ[MODEL_URI_ENV] = args.model_uri
    os.environ[TIMEOUT_ENV] = str(args.timeout)
    uvicorn.run(
        "pipeline.serving.server:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
    )


if __name__ == "__main__":
    run_main(main)
