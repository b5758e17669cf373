"""Learning-rate schedules: the paper's inverse square root, and the linear / cosine decays that
reach zero at the step budget; what raising the budget of a finished decaying run does."""

import pytest
from toy_train import pairs, toy_run

from pipeline.training.schedule import decaying_lr, inverse_sqrt_lr, learning_rate


def test_inverse_sqrt_schedule():
    assert inverse_sqrt_lr(1, 1e-3, 100) == pytest.approx(1e-5)
    assert inverse_sqrt_lr(50, 1e-3, 100) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(100, 1e-3, 100) == pytest.approx(1e-3)
    assert inverse_sqrt_lr(400, 1e-3, 100) == pytest.approx(5e-4)
    # proportional to the paper's d^-0.5 * min(step^-0.5, step * warmup^-1.5)
    paper = [min(s**-0.5, s * 100**-1.5) for s in (10, 100, 1000)]
    ours = [inverse_sqrt_lr(s, 1.0, 100) for s in (10, 100, 1000)]
    assert [o / p for o, p in zip(ours, paper, strict=True)] == pytest.approx([10.0] * 3)


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_decay_warms_up_to_the_peak_then_falls_to_zero_after_the_budget(shape):
    lrs = [decaying_lr(s, 1.0, 10, 100, shape) for s in range(1, 102)]
    assert lrs[:10] == pytest.approx([s / 10 for s in range(1, 11)])  # linear warm-up to the peak
    after = lrs[10:100]
    assert all(a > b for a, b in zip(after, after[1:], strict=False))  # strictly falling
    assert 0 < lrs[99] < 0.05  # the last step of the budget still learns a little
    assert lrs[100] == 0.0  # one past the budget: zero


def test_linear_and_cosine_meet_at_half_the_peak_halfway():
    halfway = 10 + (100 + 1 - 10) / 2  # a step count, fractional on purpose
    assert decaying_lr(halfway, 2.0, 10, 100, "linear") == pytest.approx(1.0)
    assert decaying_lr(halfway, 2.0, 10, 100, "cosine") == pytest.approx(1.0)
    assert decaying_lr(30, 1.0, 10, 100, "cosine") > decaying_lr(30, 1.0, 10, 100, "linear")


def test_unknown_shape_is_an_error():
    with pytest.raises(ValueError, match="unknown schedule"):
        learning_rate(20, "step", 1.0, 10, 100)


def test_raising_max_steps_of_a_finished_decay_stretches_it(tmp_path, losses):
    """A linear run of 8 steps raised to 16 continues at step 9 with the 16-step schedule's lr:
    the trajectory differs from a run planned for 16 steps from the start (documented)."""
    data = pairs(64)
    toy_run(tmp_path / "planned", data, max_steps=16, schedule="linear")
    planned_losses = list(losses)
    losses.clear()
    toy_run(tmp_path / "run", data, max_steps=8, schedule="linear")
    _, progress = toy_run(tmp_path / "run", data, max_steps=16, schedule="linear")
    assert progress.step == 16
    assert losses[8] != planned_losses[8]  # steps 1..8 annealed towards 8, not 16
    assert learning_rate(9, "linear", 3e-3, 5, 16) > 2 * learning_rate(8, "linear", 3e-3, 5, 8)  # back up
    assert progress.log[-1]["lr"] == pytest.approx(learning_rate(16, "linear", 3e-3, 5, 16))
