"""This machine's matmul peak: the denominator of MFU (the numerator's FLOP count is
`pipeline.model.flops`)."""

from __future__ import annotations

import torch
from torch.utils import benchmark


def matmul_peak_gflops(
    dtype: torch.dtype, device: torch.device, size: int = 2048, min_run_s: float = 0.5
) -> float:
    """GFLOP/s of a `[size, size] @ [size, size]` product in `dtype`.

    The fastest block of `torch.utils.benchmark`'s `blocked_autorange` (warmed up, CUDA synchronised, at
    least `min_run_s` seconds of products, at torch's current thread count)."""
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    timer = benchmark.Timer("a @ b", globals={"a": a, "b": b}, num_threads=torch.get_num_threads())
    measurement = timer.blocked_autorange(min_run_time=min_run_s)
    return 2 * size**3 / min(measurement.times) / 1e9
