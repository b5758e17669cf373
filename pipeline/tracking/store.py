"""Where MLflow records go: the tracking URI (env `MLFLOW_TRACKING_URI`, else `mlflow.db` at the
repository root), `mlartifacts/` beside the database, the client, the experiment, and the source
tags of a run. Details: docs/tracking-and-serving.md."""

from __future__ import annotations

import contextlib
import getpass
import os
import sqlite3
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from pipeline.core.errors import PipelineError
from pipeline.core.git import git_branch, git_commit, repo_root


def tracking_uri() -> str:
    """env MLFLOW_TRACKING_URI, else an absolute `sqlite:///<repo root>/mlflow.db`."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def artifact_location(uri: str) -> str | None:
    """`mlartifacts/` beside a sqlite database; None (the server's choice) otherwise."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()


def local_path(file_uri: str) -> Path:
    """The path of a `file:` URI."""
    return Path(urllib.request.url2pathname(urllib.parse.urlparse(file_uri).path))


def foreign_artifacts(location: str, uri: str) -> bool:
    """Whether artifact location `location` is in an `mlartifacts/` folder not beside the sqlite `uri`.

    `location` is an experiment's or a run's. True means the database was copied or moved from another
    checkout. False for any other tracking URI or location."""
    own = artifact_location(uri)
    if own is None or not location.startswith("file:"):
        return False
    path = local_path(location)
    return "mlartifacts" in path.parts and not path.is_relative_to(local_path(own))


def git_tags(cwd: str | Path = ".") -> dict[str, str]:
    """MLflow's source tags of `cwd`'s checkout: `mlflow.source.git.commit` (the commit, "unknown"
    outside a checkout) and, when a branch is checked out, `mlflow.source.git.branch`."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_BRANCH, MLFLOW_GIT_COMMIT

    branch = git_branch(cwd)
    return {MLFLOW_GIT_COMMIT: git_commit(cwd)} | ({MLFLOW_GIT_BRANCH: branch} if branch else {})


def source_tags(source: str) -> dict[str, str]:
    """MLflow's tags naming the code and the user behind a run: `mlflow.source.name` = `source`
    (e.g. `stages/train.py`), `mlflow.source.type` LOCAL, `mlflow.user`."""
    from mlflow.utils.mlflow_tags import MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE, MLFLOW_USER

    return {MLFLOW_SOURCE_NAME: source, MLFLOW_SOURCE_TYPE: "LOCAL", MLFLOW_USER: _user()}


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        return "unknown"


def client():
    """An `MlflowClient` on `tracking_uri()` (mlflow is imported only when tracking is used)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    check_store(uri)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(uri)


_checked: set[str] = set()  # the URIs `check_store` found usable in this process


def check_store(uri: str | None = None) -> None:
    """Fail in one line when the tracking store at `uri` (default `tracking_uri()`) cannot be used.

    Checked once per process and URI: a server behind an http(s) URI (`check_server`), a readable
    database behind a sqlite one (`check_database`). Stages call it before their work starts.

    Raises:
        PipelineError: no server answers, or the database file is corrupt.
    """
    uri = uri or tracking_uri()
    if uri in _checked:
        return
    check_server(uri)
    check_database(uri)
    _checked.add(uri)


MOVE_ASIDE = "move it aside (the runs in it are lost, the models in models/ and the DVC cache are not)"


def check_database(uri: str) -> None:
    """Fail in one line when a `sqlite:///` URI names a file SQLite cannot read (a truncated file, a
    garbage header: `PRAGMA quick_check`, read-only).

    A file not there yet is fine (MLflow creates it); a busy or locked database is MLflow's to wait for.

    Raises:
        PipelineError: the file is not a readable SQLite database; the message says what to do.
    """
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///"))
    if not path.is_file():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            problem = db.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as e:
        if getattr(e, "sqlite_errorname", "") not in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
            return
        problem = str(e)
    if problem != "ok":
        raise PipelineError(f"{path}: not a readable SQLite database ({problem}); {MOVE_ASIDE}")


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds when an http(s) tracking `uri` has no server behind it (MLflow itself
    retries for minutes). Any HTTP answer counts as a server, an error status included.

    Raises:
        PipelineError: nothing answers at `uri` within `timeout_s` seconds.
    """
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise PipelineError(
            f"MLFLOW_TRACKING_URI={uri}: no tracking server answers ({reason}); start it, "
            "or unset MLFLOW_TRACKING_URI to track into mlflow.db"
        ) from None


EXPERIMENT_KIND = "mlflow.experimentKind"  # the tag MLflow's UI writes when one picks an experiment's type

MODEL_TRAINING = "custom_model_development"  # its value for "Machine learning" (not GenAI)

EXPERIMENT_NOTE = (
    "Training runs of the English→German Transformer: one run per `train` stage run (`dvc repro`, "
    "`dvc exp run` or the Prefect flow), to which `decode` adds the translations and the model and "
    "`score` the BLEU and chrF scores. See docs/tracking-and-serving.md."
)


def experiment_id(name: str) -> str:
    """The id of experiment `name`, which is created when missing.

    Created with `artifact_location`, a description and `EXPERIMENT_KIND` = `MODEL_TRAINING` (also set
    on an older experiment without it). An experiment whose artifacts are in another checkout
    (`foreign_artifacts`) is renamed `<name> (artifacts in <folder>)`, with a message, and a new `name`
    is created.

    Raises:
        MlflowException: the tracking server or database cannot be reached or written.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    c, uri = client(), tracking_uri()
    found = c.get_experiment_by_name(name)
    if found is not None and foreign_artifacts(found.artifact_location, uri):
        set_aside(found.experiment_id, name, found.artifact_location)
        found = None
    if found is None:
        tags = {EXPERIMENT_KIND: MODEL_TRAINING, MLFLOW_RUN_NOTE: EXPERIMENT_NOTE}
        return c.create_experiment(name, artifact_location=artifact_location(uri), tags=tags)
    if EXPERIMENT_KIND not in found.tags:
        c.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)
    return found.experiment_id


def set_aside(exp_id: str, name: str, location: str) -> None:
    """Rename experiment `name`, whose artifacts are at `location` in another checkout, so that this
    checkout's runs get an experiment `name` of their own; says so."""
    folder, uri = local_path(location), tracking_uri()
    new_name = f"{name} (artifacts in {folder})"
    client().rename_experiment(exp_id, new_name)
    print(
        f"mlflow: experiment {name!r} of {uri} keeps its artifacts in {folder}, outside this checkout "
        f"(the database was copied or moved from there): renamed it {new_name!r}; new runs go to a new "
        f"{name!r} with artifacts in {local_path(artifact_location(uri))}"
    )


def ui_page(exp_id: str) -> str:
    """The path of the experiment's runs in MLflow 3's UI (`mlflow ui`), in its model-training view:
    the UI opens on GenAI traces unless told `workflowType=machine_learning`."""
    return f"#/experiments/{exp_id}/runs?workflowType=machine_learning"
