"""This machine's matmul peak: the denominator of MFU (the numerator's FLOP count is
`pipeline.model.flops`)."""

from __future__ import annotations

import torch

from bench.common import timed


def matmul_peak_gflops(dtype: torch.dtype, device: torch.device, size: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the fastest of `repeats` `[size, size] @ [size, size]` products in `dtype`."""
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    a @ b  # warm-up: kernel selection, page faults
    best = min(timed(lambda: a @ b, device) for _ in range(repeats))
    return 2 * size**3 / best / 1e9
