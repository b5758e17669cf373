"""A `dvc.yaml`'s stages as DVC itself reads them (its Python API): `${...}` filled in from the
params, in an order where each stage comes after the stages that write its deps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import ConfigError

PARAMS_FILE = "params.yaml"  # DVC's default params file: its keys are listed without a file name


@dataclass(frozen=True)
class Stage:
    """One stage of `dvc.yaml`: its command (whitespace collapsed) and its repo-relative paths."""

    name: str
    cmd: str
    deps: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    plots: tuple[str, ...] = ()
    params: tuple[str, ...] = ()  # params keys; those of another file as `file:key`

    @property
    def writes(self) -> tuple[str, ...]:
        """Every path the stage writes: its outs, metrics and plots."""
        return self.outs + self.metrics + self.plots


def read_stages(repo: str | Path, dvc_yaml: str = "dvc.yaml") -> dict[str, Stage]:
    """The stages of `repo/dvc_yaml` (the default pipeline's, or a recipe's such as
    `recipes/distill/dvc.yaml`) by name, in DAG order.

    Each stage comes after the stages it depends on (DVC's graph, which spans every dvc.yaml of the
    repository), in file order among the stages free to come next.

    Raises:
        ConfigError: there is no stage, or DVC cannot read the repository's dvc.yaml files or the
            params they name (its message, one line).
    """
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    path = Path(repo) / dvc_yaml
    try:
        with Repo(str(repo), uninitialized=True) as dvc:
            index = dvc.index
            ours = [s for s in index.stages if Path(s.path).resolve() == path.resolve()]
            stages = {stage.name: _stage(stage) for stage in _dag_order(ours, index.graph)}
    except DvcException as err:
        message = " ".join(str(err).split()) or type(err).__name__
        raise ConfigError(f"{path}: {message}") from None
    if not stages:
        raise ConfigError(f"{path}: no stages (missing, or no `stages` mapping)")
    return stages


def _dag_order(stages: list, graph) -> list:
    """`stages` (file order) each after the stages among them it depends on: DVC's graph has an edge
    from a stage to each stage it depends on, and refuses a cycle before this runs."""
    needs = {stage: set(graph.successors(stage)) & set(stages) for stage in stages}
    done: list = []
    while len(done) < len(stages):
        done.append(next(s for s in stages if s not in done and needs[s] <= set(done)))
    return done


def _stage(stage) -> Stage:
    from dvc.dependency.param import ParamsDependency

    params = [d for d in stage.deps if isinstance(d, ParamsDependency)]
    outs = stage.outs
    return Stage(
        name=stage.name,
        cmd=" ".join(str(stage.cmd).split()),
        deps=tuple(d.def_path for d in stage.deps if not isinstance(d, ParamsDependency)),
        outs=tuple(o.def_path for o in outs if not (o.metric or o.plot)),
        metrics=tuple(o.def_path for o in outs if o.metric),
        plots=tuple(o.def_path for o in outs if o.plot and not o.metric),
        params=tuple(
            key if d.def_path == PARAMS_FILE else f"{d.def_path}:{key}" for d in params for key in d.params
        ),
    )
