"""Shared test setup."""

from __future__ import annotations

import pytest
import torch


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

    def recorded(*args):
        loss, n = step(*args)
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
