"""The final model as an MLflow pyfunc that translates raw English strings (artifacts: the checkpoint,
the SentencePiece model with its source words, optionally an ensemble's other checkpoints or a
CTranslate2 export; the `pipeline` package as code), and its registration
(docs/tracking-and-serving.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import DEADLINE_EXCEEDED, INVALID_PARAMETER_VALUE

from pipeline.core.config import SearchConfig, ServeConfig
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.core.git import repo_root
from pipeline.core.params_file import FieldError, default_params, with_updates
from pipeline.data.tokenizer import SOURCE_WORDS
from pipeline.serving.translator import (
    load_ct2_translator,
    load_translator,
    translate_lines,
    translate_lines_n_best,
)
from pipeline.tracking import store

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the `pipeline` package, logged as code
PYFUNC_PACKAGES = (
    "torch",
    "sentencepiece",
    "pydantic",
    "pyyaml",
    "numpy",
    "tqdm",
    "pandas",
    "sentencex",
    "sacremoses",
    "py3langid",
    "ctranslate2",
)  # what loading and translating import


def installed(name: str) -> str:
    """The installed version of `name` without a local label (torch's `2.13.0+cpu` -> `2.13.0`)."""
    return metadata.version(name).split("+")[0]


def requirements(requirements_txt: Path | None = None) -> list[str]:
    """The pip requirements of the logged model: the `PYFUNC_PACKAGES`, pinned.

    Pinned as in the repository's `requirements.txt` (the project's reproducible pin set), or, without
    that file (an installed package), at the versions installed here.

    Raises:
        PipelineError: a package of `PYFUNC_PACKAGES` has no `==` pin in the file.
    """
    path = requirements_txt or repo_root() / "requirements.txt"
    if not path.is_file():
        return [f"{name}=={installed(name)}" for name in PYFUNC_PACKAGES]
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    missing = [name for name in PYFUNC_PACKAGES if name not in pins]
    if missing:
        raise PipelineError(f"{path}: no == pin for {', '.join(missing)} (the pyfunc's requirements)")
    return [f"{name}=={pins[name]}" for name in PYFUNC_PACKAGES]


REQUEST_PARAMS = ("beam_size", "length_penalty", "n_best")  # what a request may set (`params`)
CHUNK_INPUTS = 16  # inputs translated between two checks of the request's time limit ...
CHUNK_CHARS = 2000  # ... or fewer, so that a chunk holds at most this many characters (one input at least)
INPUT_EXAMPLE = ["A man is walking his dog in the park."]
log = logging.getLogger(__name__)


class TranslatorPyfunc(mlflow.pyfunc.PythonModel):
    """English → the trained target language, as an MLflow pyfunc with a typed `predict`.

    Input: a list of strings (one sentence or line each); MLflow checks it against the signature
    the type hints give. Params per request (`REQUEST_PARAMS`, defaults from the model config):
    `beam_size`, `length_penalty` and `n_best`. Output, one entry per input, in order: the
    translation (`n_best` 0, the default), or with `n_best` = K ≥ 1 the K best as
    `{"rank", "score", "translation"}` (score: the length-normalised log-probability). Loads and
    translates through `pipeline.serving.translator` (the decode stage's and `mt-translate`'s code).
    The model config is the `SearchConfig` fields plus `max_len` (the trained source maximum) and
    the request limits (`ServeConfig` fields: strings per request, characters per string). With
    `ensemble_0`, `ensemble_1`, ... artifacts (`log_translator(..., ensemble=...)`) those checkpoints
    decode together with `checkpoint` (`pipeline.model.ensemble`). With a `ct2` artifact
    (`log_translator(..., ct2_dir=...)`) it decodes with CTranslate2 at the config's `compute_type`
    (default int8) instead of our search."""

    def load_context(self, context) -> None:
        config = dict(context.model_config or {})
        defaults = default_params()  # for keys a model logged before they existed
        self.max_len = int(config.pop("max_len", defaults.train.max_len))
        self.limits = with_updates(
            defaults.serve, {k: config.pop(k) for k in ServeConfig.model_fields if k in config}
        )
        compute_type = config.pop("compute_type", "int8")
        artifacts = context.artifacts
        if "ct2" in artifacts:  # a CTranslate2 export logged beside the checkpoint
            self.engine = load_ct2_translator(artifacts["ct2"], artifacts["spm"], compute_type)
        else:
            members = ensemble_members(artifacts)
            self.engine = load_translator(artifacts["checkpoint"], artifacts["spm"], ensemble=members)
        self.cfg = with_updates(defaults.decode.search(), config)

    def predict(self, model_input: list[str], params: dict[str, Any] | None = None) -> list[Any]:
        """Translate `model_input`; see the class docstring for `params` and the output.

        The inputs are translated a chunk at a time (`chunks`); past `serve.max_seconds` the request stops
        before the next chunk, so an abandoned request does not go on using the CPU.

        Raises:
            MlflowException: (INVALID_PARAMETER_VALUE, a 400 when served) an unknown or out-of-range
                param, an input that is not a list of strings, or one beyond the `serve` limits;
                (DEADLINE_EXCEEDED, a 504) the request ran past `serve.max_seconds`; (INTERNAL_ERROR,
                a 500) any other failure, with a one-line message (the traceback is logged).
        """
        cfg, n_best = request_config(self.cfg, params or {})
        lines = checked_lines(model_input, self.limits)
        try:
            return self.translate_in_time(lines, cfg, n_best)
        except MlflowException:
            raise
        except Exception as err:  # a bug: its traceback goes to the log, never into the answer
            log.exception("translating a request failed")
            raise MlflowException("internal error while translating (see the server's log)") from err

    def translate_in_time(self, lines: list[str], cfg: SearchConfig, n_best: int) -> list[Any]:
        """`lines` translated a chunk at a time (`chunks`), as `predict` returns them.

        Raises:
            MlflowException: DEADLINE_EXCEEDED, past `serve.max_seconds` before a chunk.
        """
        deadline = time.monotonic() + self.limits.max_seconds
        out: list[Any] = []
        for chunk in chunks(lines):
            if out and time.monotonic() > deadline:
                raise MlflowException(
                    f"request stopped after {len(out)} of {len(lines)} inputs: it ran past "
                    f"serve.max_seconds ({self.limits.max_seconds:g} s)",
                    error_code=DEADLINE_EXCEEDED,
                )
            out += self.translate(chunk, cfg, n_best)
        return out

    def translate(self, lines: list[str], cfg: SearchConfig, n_best: int) -> list[Any]:
        """`lines` translated (`n_best` 0) or ranked (`n_best` K), as `predict` returns them."""
        if not n_best:
            return translate_lines(self.engine, lines, cfg, max_pieces=self.max_len)
        ranked = translate_lines_n_best(self.engine, lines, cfg, n_best, max_pieces=self.max_len)
        return [
            [
                {"rank": k, "score": round(score, 4), "translation": text}
                for k, (text, score) in enumerate(entries, 1)
            ]
            for entries in ranked
        ]


def chunks(lines: list[str]) -> list[list[str]]:
    """`lines` in order, in runs of at most `CHUNK_INPUTS` inputs and `CHUNK_CHARS` characters (a
    longer input alone): the time limit is checked between runs, so long inputs are checked often."""
    out: list[list[str]] = []
    size = 0
    for line in lines:
        if not out or len(out[-1]) == CHUNK_INPUTS or size + len(line) > CHUNK_CHARS:
            out.append([])
            size = 0
        out[-1].append(line)
        size += len(line)
    return out


def request_config(base: SearchConfig, params: dict[str, Any]) -> tuple[SearchConfig, int]:
    """The decoding settings of one request: `base` with the request's `beam_size` and
    `length_penalty`, validated like params.yaml, and its `n_best` (0 = translations only).

    Raises:
        MlflowException: INVALID_PARAMETER_VALUE naming the param.
    """
    unknown = sorted(set(params) - set(REQUEST_PARAMS))
    if unknown:
        raise bad_request(f"params: unknown {', '.join(unknown)} (allowed: {', '.join(REQUEST_PARAMS)})")
    updates = {k: params[k] for k in ("beam_size", "length_penalty") if params.get(k) is not None}
    try:
        cfg = with_updates(base, updates)
    except FieldError as err:
        raise bad_request(f"params.{err}") from None
    n_best = params.get("n_best") or 0
    if not isinstance(n_best, int) or isinstance(n_best, bool) or not 0 <= n_best <= cfg.beam_size:
        raise bad_request(f"params.n_best: must be an integer from 0 to the beam size {cfg.beam_size}")
    return cfg, n_best


def checked_lines(model_input: object, limits: ServeConfig) -> list[str]:
    """`model_input`, once checked to be a list of size-limited Unicode strings.

    It must be a list of at most `limits.max_inputs` strings of at most `limits.max_chars` characters
    each, all Unicode text (no lone surrogate, which valid JSON such as `"\\ud800"` can carry).

    Raises:
        MlflowException: INVALID_PARAMETER_VALUE naming what is wrong (the input's index).
    """
    problem = input_problem(model_input)
    if problem:
        raise bad_request(problem)
    if len(model_input) > limits.max_inputs:
        raise bad_request(f"inputs: {len(model_input)} strings, at most {limits.max_inputs} per request")
    for index, line in enumerate(model_input):
        if len(line) > limits.max_chars:
            raise bad_request(f"inputs[{index}]: {len(line)} characters, at most {limits.max_chars}")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as err:
            raise bad_request(
                f"inputs[{index}]: a lone surrogate at character {err.start} (not Unicode text)"
            ) from None
    return model_input


def input_problem(model_input: object) -> str | None:
    """What makes `model_input` not a list of strings, naming the input (`inputs[3]: expected a
    string, got number`); None when it is one."""
    if not isinstance(model_input, list):
        return f"inputs: expected a list of strings, got {json_kind(model_input)}"
    for index, line in enumerate(model_input):
        if not isinstance(line, str):
            return f"inputs[{index}]: expected a string, got {json_kind(line)}"
    return None


def json_kind(value: object) -> str:
    """The JSON name of `value`'s type (`null`, `boolean`, `number`, `string`, `array`, `object`),
    else its Python type's name."""
    kinds = {
        type(None): "null",
        bool: "boolean",
        int: "number",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }
    return kinds.get(type(value), type(value).__name__)


def bad_request(message: str) -> MlflowException:
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


def signature_example(decode_cfg: dict) -> tuple[list[str], dict[str, Any]]:
    """The input example logged with the model: a sentence, and every request param at the logged
    config's value (MLflow fills a param a request leaves out from this example)."""
    return INPUT_EXAMPLE, {
        "beam_size": int(decode_cfg["beam_size"]),
        "length_penalty": float(decode_cfg["length_penalty"]),
        "n_best": 0,
    }


def ensemble_key(index: int) -> str:
    """The artifact name of the ensemble's `index`-th extra checkpoint (0-based)."""
    return f"ensemble_{index}"


def ensemble_members(artifacts: dict[str, str]) -> list[str]:
    """The ensemble's extra checkpoints among a logged model's `artifacts`, in logged order."""
    members = []
    while ensemble_key(len(members)) in artifacts:
        members.append(artifacts[ensemble_key(len(members))])
    return members


def log_translator(
    run_id: str,
    checkpoint: Path,
    spm_model: Path,
    decode_cfg: dict,
    model_name: str,
    *,
    ct2_dir: Path | None = None,
    ensemble: Sequence[Path] = (),
) -> str:
    """Log the translator pyfunc to run `run_id` and register it as a new version of `model_name`.

    The `candidate` alias (with `ct2_dir`: the `ctranslate2` alias) is pointed at the new version.
    `decode_cfg`: `SearchConfig` fields, optionally plus `max_len`, `compute_type` and the `ServeConfig`
    fields (request limits; the shipped params.yaml's without them); `ct2_dir`: a CTranslate2 export to decode with;
    `ensemble`: more checkpoints that decode together with `checkpoint` (`pipeline.model.ensemble`).

    Returns:
        The version.

    Raises:
        ConfigError: both `ct2_dir` and `ensemble` (CTranslate2 decodes one model).
    """
    if ct2_dir is not None and ensemble:
        raise ConfigError("decode.ensemble: a CTranslate2 export decodes one model, not an ensemble")
    artifacts = {"checkpoint": str(checkpoint), "spm": str(spm_model)}
    artifacts |= {ensemble_key(i): str(path) for i, path in enumerate(ensemble)}
    words = Path(spm_model).with_name(SOURCE_WORDS)
    if words.is_file():  # logged beside spm.model, where Tokenizer.load finds it
        artifacts["source_words"] = str(words)
    if ct2_dir is not None:
        artifacts["ct2"] = str(ct2_dir)
    client = store.client()  # also sets the tracking URI for mlflow.start_run
    with mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(
            name="translator",
            python_model=TranslatorPyfunc(),
            artifacts=artifacts,
            model_config=decode_cfg,
            code_paths=[str(PACKAGE_DIR)],
            pip_requirements=requirements(),
            input_example=signature_example(decode_cfg),
            registered_model_name=model_name,
        )
    version = str(info.registered_model_version)
    client.set_registered_model_alias(model_name, "candidate" if ct2_dir is None else "ctranslate2", version)
    return version
