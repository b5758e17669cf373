"""Threads chosen for the load: the count follows the cores other processes leave free."""

from __future__ import annotations

import pytest
import torch

from pipeline.training.threads import ThreadsForLoad


class PlayedLoad:
    """A clock and CPU-seconds readers for a machine of `cores` cores where other processes keep
    `others` cores busy and this process `own` cores."""

    def __init__(self, others: float, own: float) -> None:
        self.now, self.machine, self.own, self.others_rate, self.own_rate = 0.0, 0.0, 0.0, others, own

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.own += self.own_rate * seconds
        self.machine += (self.own_rate + self.others_rate) * seconds


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def chooser(load: PlayedLoad, max_threads: int) -> ThreadsForLoad:
    threads = ThreadsForLoad(max_threads, 10.0, lambda: load.now, lambda: load.machine, lambda: load.own)
    threads.cores = max_threads  # the played machine's size, whatever this one has
    return threads


@pytest.mark.parametrize(("others", "expected"), [(0.0, 2), (0.3, 2), (1.0, 1), (3.0, 1)])
def test_threads_are_the_cores_others_leave_free(restore_threads, others, expected):
    torch.set_num_threads(2)
    load = PlayedLoad(others, own=2.0)
    threads = chooser(load, max_threads=2)
    load.advance(10.0)
    changed = threads.update()
    assert torch.get_num_threads() == expected
    assert changed == (expected if expected != 2 else None)
    assert threads.others_busy_cores == pytest.approx(others)


def test_the_count_comes_back_when_the_load_goes(restore_threads):
    torch.set_num_threads(2)
    load = PlayedLoad(others=1.0, own=1.0)
    threads = chooser(load, max_threads=2)
    load.advance(10.0)
    assert threads.update() == 1
    load.others_rate = 0.0
    load.advance(5.0)
    assert threads.update() is None  # between samples: unchanged, nothing read
    load.advance(5.0)
    assert threads.update() == 2
    assert torch.get_num_threads() == 2


def test_never_more_than_the_threads_it_started_with(restore_threads):
    torch.set_num_threads(1)
    load = PlayedLoad(others=0.0, own=1.0)
    threads = chooser(load, max_threads=1)
    threads.cores = 4
    load.advance(10.0)
    assert threads.update() is None
    assert torch.get_num_threads() == 1
