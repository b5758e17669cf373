"""The MLflow pyfunc's pip requirements come from the project's pin set, and agree with what is installed."""

from __future__ import annotations

from importlib import metadata

import pytest

from pipeline.core.errors import PipelineError
from pipeline.serving.pyfunc import PYFUNC_PACKAGES, installed, requirements


def test_requirements_are_the_repository_pins_and_the_installed_versions():
    pins = requirements()
    assert [p.split("==")[0] for p in pins] == list(PYFUNC_PACKAGES)
    assert pins == [f"{name}=={installed(name)}" for name in PYFUNC_PACKAGES]  # CI installs the pins
    assert installed("torch") == metadata.version("torch").split("+")[0]


def test_without_a_requirements_file_the_installed_versions_are_pinned(tmp_path):
    assert requirements(tmp_path / "absent.txt") == [f"{n}=={installed(n)}" for n in PYFUNC_PACKAGES]


def test_a_package_without_a_pin_is_a_one_line_error(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# pins\ntorch==2.13.0\nnumpy>=2\n")
    with pytest.raises(PipelineError, match=r"requirements.txt: no == pin for sentencepiece, pydantic"):
        requirements(path)
