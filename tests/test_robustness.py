"""The robustness figures travel from the decode stage to the report as files."""

from __future__ import annotations

import json

import pytest

from pipeline.core.errors import DataError
from pipeline.ops.robustness import RobustnessResult, read_figures, write_figures


def test_figures_round_trip_with_numbers_only_in_the_metrics_file(tmp_path):
    result = RobustnessResult(40, 44, [("A <b>big</b> dog.", ["lost <b>", "2 sentences, want 1"])])
    write_figures(tmp_path / "r.json", tmp_path / "f.json", result, (38.4, 36.9))
    numbers = json.loads((tmp_path / "r.json").read_text())
    assert all(isinstance(v, int | float) for v in numbers.values())  # `dvc metrics show` material
    assert read_figures(tmp_path / "r.json", tmp_path / "f.json") == (result, (38.4, 36.9))


def test_missing_or_foreign_figures_are_a_one_line_error(tmp_path):
    with pytest.raises(DataError, match="not the decode stage's robustness figures"):
        read_figures(tmp_path / "r.json", tmp_path / "f.json")
    (tmp_path / "r.json").write_text('{"passed": 1}')
    (tmp_path / "f.json").write_text("[]")
    with pytest.raises(DataError, match=r"r.json / .*f.json: not the decode stage's"):
        read_figures(tmp_path / "r.json", tmp_path / "f.json")
