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
