"""The MLflow pyfunc on a tiny model: its signature and input example, params per request, and a
real server process (`python -m pipeline.serving.server`) on 127.0.0.1 answering good and bad
requests (every kind of bad request: tests/test_served_errors.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from from_params import from_params, write_changed_params

from pipeline.core.config import DecodeConfig
from pipeline.serving.mlflow_server import post, served

NAME = "tiny-translator"
LIMITS = {"max_inputs": 4, "max_chars": 200}  # the `serve` section, small for the test
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory, tiny_translator_files):
    """(model URI, tracking URI): the tiny model logged and registered as version 1 of NAME."""
    root = tmp_path_factory.mktemp("serving")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        from pipeline.core.config import DecodeConfig
        from pipeline.serving.pyfunc import log_translator
        from pipeline.tracking import store

        run_id = store.client().create_run(store.experiment_id("serving")).info.run_id
        decode = from_params(DecodeConfig, beam_size=3, length_penalty=1.2, max_len_a=1.2, max_len_b=4)
        config = decode.settings() | LIMITS
        version = log_translator(
            run_id, tiny_translator_files["ckpt"], tiny_translator_files["spm"], config, NAME
        )
    return f"models:/{NAME}/{version}", uri


def test_signature_and_input_example_are_logged(logged, monkeypatch) -> None:
    import mlflow

    model_uri, uri = logged
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    info = mlflow.models.get_model_info(model_uri)
    assert info.signature.inputs.to_dict() == [{"type": "string", "required": True}]  # list[str]
    params = {p.name: p.default for p in info.signature.params}
    assert params == {"beam_size": 3, "length_penalty": 1.2, "n_best": 0}  # the logged decode config
    assert info.saved_input_example_info is not None


def test_params_per_request(logged, monkeypatch) -> None:
    import mlflow
    from mlflow.exceptions import MlflowException

    model_uri, uri = logged
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model(model_uri)
    one = model.predict(["A man walks in the park.", ""], params={"beam_size": 2})
    assert len(one) == 2 and one[0] and one[1] == ""
    word = "QUJD" * 40  # 160 characters: over the 127 pieces a source may have, copied as it is
    assert word in model.predict([f"A dog sees {word} here."])[0]
    ranked = model.predict(["A man walks in the park."], params={"beam_size": 3, "n_best": 3})
    assert [h["rank"] for h in ranked[0]] == [1, 2, 3]
    assert ranked[0][0]["score"] >= ranked[0][2]["score"]
    for params, message in [
        ({"beam_size": 0}, "params.beam_size: Input should be greater than 0"),
        ({"n_best": 4, "beam_size": 3}, "params.n_best: must be an integer from 0 to the beam size 3"),
        ({"length_penalty": -1.0}, "params.length_penalty"),
    ]:
        with pytest.raises(MlflowException, match=message):
            model.predict(["A dog."], params=params)


def test_a_registered_model_is_served_from_a_copy_of_its_own(logged, monkeypatch) -> None:
    from pipeline.serving.server import local_copy

    model_uri, uri = logged
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    artifacts = Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts"
    for meta in artifacts.rglob("registered_model_meta"):  # written by load_model in the other tests
        meta.unlink()
    folder = Path(local_copy(model_uri))
    assert (folder / "MLmodel").is_file() and (folder / "registered_model_meta").is_file()
    assert not folder.is_relative_to(artifacts) and not list(artifacts.rglob("registered_model_meta"))
    assert local_copy(str(folder)) == str(folder)


def test_an_ensemble_is_logged_and_served_as_the_models_that_decoded(
    logged, tiny_translator_files, tmp_path, monkeypatch
) -> None:
    """The registered model is what the decode stage scored: with `decode.ensemble`, every member."""
    import mlflow
    import torch

    from pipeline.core.errors import ConfigError
    from pipeline.model.ensemble import Ensemble
    from pipeline.serving.pyfunc import log_translator
    from pipeline.serving.translator import load_translator, translate_lines
    from pipeline.tracking import store
    from pipeline.training import checkpoint

    _, uri = logged
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    ckpt, spm = tiny_translator_files["ckpt"], tiny_translator_files["spm"]
    other = tmp_path / "other" / ckpt.name  # a recipe's members are all model.pt: the same name
    other.parent.mkdir()
    state = checkpoint.load(ckpt)
    state["model"] = {  # another model (scaled: tied weights stay tied)
        k: v * 1.05 if v.is_floating_point() else v for k, v in state["model"].items()
    }
    checkpoint.save(other, state)
    decode = from_params(DecodeConfig, beam_size=2, max_len_a=1.2, max_len_b=4)
    run_id = store.client().create_run(store.experiment_id("serving")).info.run_id
    version = log_translator(run_id, ckpt, spm, decode.settings(), "ensemble-translator", ensemble=[other])
    model = mlflow.pyfunc.load_model(f"models:/ensemble-translator/{version}")
    engine = model.unwrap_python_model().engine
    assert isinstance(engine.model, Ensemble) and len(engine.model.members) == 2
    for member, path in zip(engine.model.members, [ckpt, other], strict=True):  # each, in its place
        weights = checkpoint.load(path)["model"]
        assert weights.keys() <= member.state_dict().keys()
        assert all(torch.equal(v, weights[k]) for k, v in member.state_dict().items() if k in weights)
    lines = ["A man walks in the park.", "Two children play near 5 trees."]
    assert model.predict(lines) == translate_lines(
        load_translator(ckpt, spm, ensemble=[other]), lines, decode
    )
    with pytest.raises(ConfigError, match="decode.ensemble: a CTranslate2 export decodes one model"):
        log_translator(run_id, ckpt, spm, decode.settings(), "x", ct2_dir=tmp_path, ensemble=[other])


@pytest.fixture(scope="module")
def server(logged):
    """A real server process of the logged model on 127.0.0.1 (one worker); its port."""
    model_uri, uri = logged
    with served(model_uri, os.environ | {"MLFLOW_TRACKING_URI": uri}) as port:
        yield port


@pytest.mark.slow
def test_served_model_answers_within_its_logged_limits(server) -> None:
    """The real server process: translations, ranked hypotheses, and the `serve` limits logged with
    the model; a bad body is answered by the server's guard (every kind: test_served_errors.py)."""
    status, body = post(server, json.dumps({"inputs": ["A man walks in the park.", "A dog."]}).encode())
    assert status == 200 and len(body["predictions"]) == 2 and all(body["predictions"])
    request = {"inputs": ["A man walks in the park."], "params": {"beam_size": 3, "n_best": 2}}
    status, body = post(server, json.dumps(request).encode())
    assert status == 200 and [h["rank"] for h in body["predictions"][0]] == [1, 2]
    assert all(isinstance(h["score"], float) and h["translation"] for h in body["predictions"][0])
    assert post(server, b'{"inputs": []}') == (200, {"predictions": []})
    for body_bytes, message in [
        (json.dumps({"inputs": ["A dog."] * 5}).encode(), "inputs: 5 strings, at most 4 per request"),
        (json.dumps({"inputs": ["A dog runs. " * 20]}).encode(), "inputs[0]: 240 characters, at most 200"),
        (b'{"inputs": [', "body: not JSON (Expecting value at character 12)"),
    ]:
        status, answer = post(server, body_bytes)
        assert (status, set(answer), answer["message"]) == (400, {"error_code", "message"}, message)
    status, body = post(server, b'{"inputs": ["A dog."]}')
    assert status == 200 and len(body["predictions"]) == 1  # still up


@pytest.mark.slow
def test_load_test_reports_latency_and_throughput_without_errors(server, tmp_path) -> None:
    """`python -m bench.serve_load --port` against the served model, sending a 2-sentence split."""
    from datasets import Dataset, DatasetDict

    from pipeline.data.multi30k import save_dataset_dict

    en = ["A man walks in the park.", "Two children play near 5 trees."]
    save_dataset_dict(DatasetDict(val=Dataset.from_dict({"en": en, "de": ["", ""]})), tmp_path / "corpus")
    write_changed_params(tmp_path / "params.yaml", {"download": {"out_dir": str(tmp_path / "corpus")}})
    argv = [
        "--port",
        str(server),
        "--clients",
        "2",
        "--seconds",
        "4",
        "--batch",
        "1",
        "--split",
        "val",
        "--params",
        str(tmp_path / "params.yaml"),
        "--out-dir",
        str(tmp_path / "reports"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "bench.serve_load", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    figures = json.loads((tmp_path / "reports" / "bench.json").read_text())["serve_load"]
    assert figures["errors"] == 0 and figures["requests"] >= 2
    assert figures["sent_s"] > 0 and 0 < figures["p50_ms"] <= figures["p99_ms"]


@pytest.fixture
def past_its_time(logged, monkeypatch):
    """(the logged model's python model allowed 1 µs a request, the lines it is asked to translate)."""
    import mlflow

    from pipeline.core.config import ServeConfig

    model_uri, uri = logged
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    python_model = mlflow.pyfunc.load_model(model_uri).unwrap_python_model()
    python_model.limits = from_params(ServeConfig, max_inputs=100, max_seconds=1e-6)
    translated = []
    monkeypatch.setattr(python_model, "translate", lambda lines, *a: translated.extend(lines) or lines)
    return python_model, translated


def test_a_request_past_its_time_limit_stops(past_its_time) -> None:
    from mlflow.exceptions import MlflowException

    from pipeline.serving.pyfunc import CHUNK_INPUTS

    python_model, translated = past_its_time
    with pytest.raises(MlflowException, match="stopped after 16 of 40 inputs: it ran past serve.max_seconds"):
        python_model.predict(["A dog."] * 40)
    assert len(translated) == CHUNK_INPUTS  # the rest was never translated


def test_chunks_bound_inputs_and_characters() -> None:
    from pipeline.serving.pyfunc import CHUNK_CHARS, CHUNK_INPUTS, chunks

    short = [f"A dog {i}." for i in range(40)]
    assert [len(c) for c in chunks(short)] == [CHUNK_INPUTS, CHUNK_INPUTS, 40 - 2 * CHUNK_INPUTS]
    long = ["x" * (CHUNK_CHARS // 2 + 1)] * 3 + ["y" * (3 * CHUNK_CHARS)] + ["z"]
    assert [len(c) for c in chunks(long)] == [1, 1, 1, 1, 1]  # two halves and a bit do not fit together
    assert sum(chunks(long), []) == long and chunks([]) == []


def test_long_inputs_are_checked_against_the_time_limit_one_by_one(past_its_time) -> None:
    from mlflow.exceptions import MlflowException

    python_model, translated = past_its_time
    with pytest.raises(MlflowException, match="stopped after 1 of 20 inputs"):
        python_model.predict(["A dog runs. " * 400] * 20)
    assert len(translated) == 1
