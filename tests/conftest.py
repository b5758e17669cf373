"""Shared test setup, and what several test modules build identically and expensively: built once
per session, in a temporary folder, and read-only for the tests (they copy what they change)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    """A relative MULTI30K_MIRROR (the README's `../shared/multi30k`) means relative to where pytest
    started: made absolute here, before any test changes directory."""
    mirror = os.environ.get("MULTI30K_MIRROR")
    if mirror and "://" not in mirror and not os.path.isabs(mirror):
        os.environ["MULTI30K_MIRROR"] = os.path.abspath(mirror)


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny models run fastest on one thread, and several test processes on a small machine
    must not oversubscribe the cores (OpenMP spin-waits make that 10-100x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def losses(monkeypatch) -> list[float]:
    """The loss of every optimizer step taken in this test, in order."""
    from pipeline.training import loop as train_module

    seen, step = [], train_module.train_step

    def recorded(*args, **kwargs):
        loss, n = step(*args, **kwargs)
        seen.append(loss)
        return loss, n

    monkeypatch.setattr(train_module, "train_step", recorded)
    return seen


@pytest.fixture(scope="session")
def harness():
    """One temporary Prefect server (and database) for every flow test of the session: each
    start costs ~20 s on a small machine."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def tiny_translator_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, Path]]:
    """The tiny trained translator (tests/tiny_translator.py; 80 training steps, seconds), trained
    once per session: {"ckpt": its checkpoint, "spm": its SentencePiece model}.

    Read-only: a test that needs a changed checkpoint writes its own copy under its `tmp_path`.
    The files are checked unchanged at the end of the session."""
    from tiny_translator import train_tiny_translator

    files = train_tiny_translator(tmp_path_factory.mktemp("tiny_translator"))
    before = {key: hashlib.sha256(path.read_bytes()).hexdigest() for key, path in files.items()}
    yield MappingProxyType(files)
    after = {key: hashlib.sha256(path.read_bytes()).hexdigest() for key, path in files.items()}
    assert after == before, "a test changed the shared tiny translator's files (copy them instead)"
