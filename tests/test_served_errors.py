"""The served model's error answers (`pipeline.serving.server`: MLflow's scoring app, guarded),
through the app's test client on the tiny model: whatever the request, a 4xx with one line of
JSON, never a stack trace or a server path, and the model still answers afterwards."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from from_params import from_params
from starlette.requests import Request
from starlette.testclient import TestClient

from pipeline.core.config import DecodeConfig, ServeConfig
from pipeline.serving.server import capped_body, guard

JSON = {"Content-Type": "application/json"}
GOOD = b'{"inputs": ["A man walks in the park."]}'
MAX_INPUTS = from_params(ServeConfig).max_inputs  # the limits the saved model gets from params.yaml
PATH_RE = re.compile(r"(?<![\w.])/[\w.-]+/[\w.-]+|[A-Za-z]:\\\\")  # /work/main/..., C:\\...


@pytest.fixture(scope="module")
def model(tiny_translator_files: Mapping[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """The tiny translator saved as the pyfunc `log_translator` logs, and loaded (default limits)."""
    import mlflow

    from pipeline.serving.pyfunc import TranslatorPyfunc, requirements, signature_example

    path = tmp_path_factory.mktemp("served_errors") / "model"
    config = from_params(DecodeConfig, beam_size=2, max_len_a=1.2, max_len_b=4).settings()
    artifacts = {"checkpoint": str(tiny_translator_files["ckpt"]), "spm": str(tiny_translator_files["spm"])}
    mlflow.pyfunc.save_model(
        path,
        python_model=TranslatorPyfunc(),
        artifacts=artifacts,
        model_config=config,
        pip_requirements=requirements(),
        input_example=signature_example(config),
    )
    return mlflow.pyfunc.load_model(str(path))


@pytest.fixture(scope="module")
def client(model) -> TestClient:
    from mlflow.pyfunc import scoring_server

    return TestClient(
        guard(scoring_server.init(model), model.unwrap_python_model().limits.max_body_bytes)
    )  # an exception that escapes fails the test


BAD_BODIES = {
    "lone surrogate": b'{"inputs": ["A \\ud800 dog."]}',
    "null": b"null",
    "number": b"7",
    "boolean": b"true",
    "string": b'"A dog."',
    "array": b'["A dog."]',
    "object without inputs": b"{}",
    "other key": b'{"inputs": ["A dog."], "instances": ["A dog."]}',
    "dataframe_split": b'{"dataframe_split": {"columns": ["a"], "data": [["A dog."]]}}',
    "inputs null": b'{"inputs": null}',
    "inputs number": b'{"inputs": 7}',
    "inputs boolean": b'{"inputs": false}',
    "inputs string": b'{"inputs": "A dog."}',
    "inputs object": b'{"inputs": {"en": "A dog."}}',
    "input null": b'{"inputs": ["A dog.", null]}',
    "input number": b'{"inputs": [7]}',
    "input number after a string": b'{"inputs": ["A dog.", 7]}',
    "input boolean": b'{"inputs": [true]}',
    "input object": b'{"inputs": [{"en": "A dog."}]}',
    "nested list": b'{"inputs": [["A dog."]]}',
    "huge integer": b'{"inputs": [' + b"9" * 5000 + b"]}",
    "huge float": b'{"inputs": [1e999999]}',
    "NaN": b'{"inputs": [NaN]}',
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "too long": json.dumps({"inputs": ["A dog. " * 1000]}).encode(),
    "too many": json.dumps({"inputs": ["A dog."] * (MAX_INPUTS + 1)}).encode(),
    "params null inputs bad": b'{"inputs": [1], "params": null}',
    "params array": b'{"inputs": ["A dog."], "params": [1]}',
    "params unknown": b'{"inputs": ["A dog."], "params": {"beam": 2}}',
    "param huge integer": b'{"inputs": ["A dog."], "params": {"beam_size": ' + b"9" * 5000 + b"}}",
    "param float": b'{"inputs": ["A dog."], "params": {"beam_size": 2.5}}',
    "param string": b'{"inputs": ["A dog."], "params": {"n_best": "two"}}',
    "beam size string": b'{"inputs": ["A dog."], "params": {"beam_size": "five"}}',
    "param out of range": b'{"inputs": ["A dog."], "params": {"beam_size": 0}}',
    "n_best above the beam size": b'{"inputs": ["A dog."], "params": {"n_best": 9}}',
    "length penalty that overflows": b'{"inputs": ["A dog."], "params": {"length_penalty": 1e308}}',
    "length penalty far out of range": b'{"inputs": ["A dog."], "params": {"length_penalty": 5000}}',
    "invalid JSON": b'{"inputs": [',
    "not UTF-8": b'{"inputs": ["A \xff dog."]}',
    "empty body": b"",
}
BAD_TYPES = {
    "text/plain": "text/plain",
    "octet-stream": "application/octet-stream",
    "multipart": "multipart/form-data; boundary=x",
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
    "latin-1": "application/json; charset=latin-1",
    "none": None,
}


def assert_clean_error(status: int, body: str, expected: range = range(400, 500)) -> None:
    """`body` is `{"error_code", "message"}` only, with a one-line message, no trace and no path."""
    assert status in expected, (status, body)
    answer = json.loads(body)
    assert set(answer) == {"error_code", "message"}, answer
    assert answer["message"] and "\n" not in answer["message"], answer
    assert "Traceback" not in body and "site-packages" not in body and not PATH_RE.search(body), body


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_bad_body_gets_one_line_400(client: TestClient, body: bytes) -> None:
    response = client.post("/invocations", content=body, headers=JSON)
    assert_clean_error(response.status_code, response.text, range(400, 401))


@pytest.mark.parametrize("content_type", BAD_TYPES.values(), ids=BAD_TYPES.keys())
def test_a_body_that_is_not_json_gets_415(client: TestClient, content_type: str | None) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = client.post("/invocations", content=b"a\nA dog.\n", headers=headers)
    assert_clean_error(response.status_code, response.text, range(415, 416))


@pytest.mark.parametrize(
    "content_type",
    ["Application/JSON", 'application/json; charset="utf-8"', "application/json;charset=UTF-8"],
)
def test_json_media_types_in_any_case_and_quoting_are_answered(client: TestClient, content_type: str) -> None:
    response = client.post("/invocations", content=GOOD, headers={"Content-Type": content_type})
    assert response.status_code == 200 and len(response.json()["predictions"]) == 1


def test_a_body_over_the_byte_cap_gets_413_before_it_is_read(model) -> None:
    from mlflow.pyfunc import scoring_server

    capped = TestClient(guard(scoring_server.init(model), max_body_bytes=1000))
    big = json.dumps({"inputs": ["A dog runs. " * 100]}).encode()
    for content in (big, iter([big] * 3)):  # with a Content-Length, and streamed without one
        response = capped.post("/invocations", headers=JSON, content=content)
        assert_clean_error(response.status_code, response.text, range(413, 414))
        assert response.json()["message"] == "body: over 1,000 bytes (serve.max_body_bytes)"
    assert capped.post("/invocations", content=GOOD, headers=JSON).status_code == 200


def test_the_byte_cap_reads_nothing_past_a_declared_length_and_stops_a_stream_at_the_cap() -> None:
    received: list[int] = []

    async def receive() -> dict:
        received.append(600)
        return {"type": "http.request", "body": b"x" * 600, "more_body": True}  # an endless body

    def request(headers: list) -> Request:
        return Request(
            {"type": "http", "method": "POST", "path": "/invocations", "headers": headers}, receive
        )

    assert asyncio.run(capped_body(request([(b"content-length", b"50000000")]), 1000)) is None
    assert received == []
    assert asyncio.run(capped_body(request([]), 1000)) is None
    assert received == [600, 600]


def test_messages_name_the_problem(client: TestClient) -> None:
    for body, message in [
        (BAD_BODIES["lone surrogate"], "inputs[0]: a lone surrogate at character 2 (not Unicode text)"),
        (BAD_BODIES["input null"], "inputs[1]: expected a string, got null"),
        (BAD_BODIES["inputs object"], "inputs: expected a list of strings, got object"),
        (BAD_BODIES["params unknown"], "params: unknown 'beam' (allowed: beam_size, length_penalty, n_best)"),
        (BAD_BODIES["invalid JSON"], "body: not JSON (Expecting value at character 12)"),
        (BAD_BODIES["too long"], "inputs[0]: 7000 characters, at most 5000"),
        (BAD_BODIES["too many"], f"inputs: {MAX_INPUTS + 1} strings, at most {MAX_INPUTS} per request"),
        (
            BAD_BODIES["n_best above the beam size"],
            "params.n_best: must be an integer from 0 to the beam size 2",
        ),
        (
            BAD_BODIES["length penalty that overflows"],
            "params.length_penalty: Input should be less than or equal to 10",
        ),
    ]:
        assert client.post("/invocations", content=body, headers=JSON).json()["message"] == message


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/invocations"),
        ("PUT", "/invocations"),
        ("DELETE", "/invocations"),
        ("POST", "/ping"),
        ("GET", "/nope"),
    ],
)
def test_a_wrong_method_or_path_gets_one_line_json(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, path)
    assert_clean_error(response.status_code, response.text, range(404, 406))


def test_an_unexpected_failure_is_a_500_without_its_traceback(client: TestClient, model, monkeypatch) -> None:
    from mlflow.pyfunc import scoring_server

    def broken(*args):
        raise OSError("/work/main/models/secret: disk gone")

    monkeypatch.setattr(model.unwrap_python_model(), "translate_in_time", broken)  # inside predict
    response = client.post("/invocations", content=GOOD, headers=JSON)
    assert_clean_error(response.status_code, response.text, range(500, 501))
    monkeypatch.setattr(scoring_server, "invocations", broken)  # in MLflow's code, which lets it escape
    response = client.post("/invocations", content=GOOD, headers=JSON)
    assert_clean_error(response.status_code, response.text, range(500, 501))


def test_mlflow_alone_answers_a_lone_surrogate_without_a_stack_trace(model) -> None:
    """The pyfunc's own check: a plain `mlflow models serve` gives the same 400, MLflow's prefix aside."""
    from mlflow.pyfunc import scoring_server

    response = TestClient(scoring_server.init(model)).post(
        "/invocations", content=BAD_BODIES["lone surrogate"], headers=JSON
    )
    assert response.status_code == 400 and "stack_trace" not in response.json()
    assert response.json()["message"].endswith(
        "inputs[0]: a lone surrogate at character 2 (not Unicode text)"
    )


def test_the_model_still_answers_and_a_5000_character_word_is_quick(
    client: TestClient, model, monkeypatch
) -> None:
    """A good request after all the bad ones; a one-word string at `serve.max_chars` is over the
    `train.max_len` pieces a source may have, so it comes back as it is without reaching the model
    (CPU seconds: the test machine may be busy)."""
    response = client.post("/invocations", content=GOOD, headers=JSON)
    assert response.status_code == 200 and len(response.json()["predictions"]) == 1
    engine = model.unwrap_python_model().engine
    seen: list[str] = []
    translate = engine.translate
    monkeypatch.setattr(
        engine, "translate", lambda texts, *args: seen.extend(texts) or translate(texts, *args)
    )
    start = time.process_time()
    response = client.post("/invocations", content=json.dumps({"inputs": ["x" * 5000]}), headers=JSON)
    assert time.process_time() - start < 5
    assert response.status_code == 200 and response.json()["predictions"] == ["x" * 5000]
    assert seen == []
