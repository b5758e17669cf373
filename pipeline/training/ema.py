"""An exponential moving average of the weights along training, a final-model candidate beside
`best.pt` and the checkpoint averages (Polyak & Juditsky 1992; as in fairseq's and timm's EMA).

After every optimizer step `ema ← d · ema + (1 − d) · w` per trained parameter, in float32, with
`d = min(decay, (1 + t) / (10 + t))` at update t (so the random initial weights do not dominate the first
averages). The averages and t are saved in `last.pt`, so a continued run goes on with exactly that average.
"""

from __future__ import annotations

import torch
from torch import nn


class EMA:
    """The moving average of `model`'s parameters (tied parameters once, under their first name)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.reset(model)

    def reset(self, model: nn.Module) -> None:
        """Start the average afresh from `model`'s current weights."""
        self.updates = 0
        self.shadow = {name: p.detach().float().clone() for name, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Fold the current weights of `model` into the average (call after each optimizer step)."""
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for name, p in model.named_parameters():
            self.shadow[name].lerp_(p.detach().float(), 1.0 - d)

    def averaged(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """`model.state_dict()` with every parameter replaced by its average (in its own dtype and
        device; tied names share one tensor, buffers are the model's)."""
        by_ptr = {p.data_ptr(): name for name, p in model.named_parameters()}
        out, done = {}, {}
        for key, value in model.state_dict().items():
            ptr = value.data_ptr()
            if ptr not in by_ptr:
                out[key] = value
                continue
            if ptr not in done:
                done[ptr] = self.shadow[by_ptr[ptr]].to(value, copy=True)
            out[key] = done[ptr]
        return out

    def state_dict(self) -> dict:
        return {"decay": self.decay, "updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        """Take a saved average; its parameter names must be this model's.

        Raises:
            KeyError: the saved average names other parameters.
        """
        if set(state["shadow"]) != set(self.shadow):
            raise KeyError("the saved weight average belongs to another architecture")
        device = next(iter(self.shadow.values())).device
        self.shadow = {k: v.to(device) for k, v in state["shadow"].items()}
        self.updates = int(state["updates"])
