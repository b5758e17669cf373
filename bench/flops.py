"""This machine's matmul peak: the denominator of MFU (the numerator's FLOP count is
`pipeline.model.flops`)."""

from __future__ import annotations

import torch
from torch.utils import benchmark

from pipeline.core.device import use_bf16


def matmul_peak_gflops(
    dtype: torch.dtype, device: torch.device, size: int = 2048, min_run_s: float = 0.5
) -> float:
    """GFLOP/s of a `[size, size] @ [size, size]` product in `dtype`.

    The fastest block of `torch.utils.benchmark`'s `blocked_autorange` (after its untimed runs that
    size a block, CUDA synchronised, at least `min_run_s` seconds of products, at torch's current
    thread count)."""
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    timer = benchmark.Timer("a @ b", globals={"a": a, "b": b}, num_threads=torch.get_num_threads())
    measurement = timer.blocked_autorange(min_run_time=min_run_s)
    return 2 * size**3 / min(measurement.times) / 1e9


def matmul_peaks(device: torch.device, bf16: bool, size: int) -> dict[str, float]:
    """The matmul peak (GFLOP/s) in the trainer's dtype, and in bf16 too when that is not it
    (at most 512² where bf16 is not native: emulated bf16 is slow). Keys: "bf16", "fp32"."""
    if bf16:
        return {"bf16": matmul_peak_gflops(torch.bfloat16, device, size)}
    bf16_size = size if use_bf16(device, "auto") else min(size, 512)
    return {
        "fp32": matmul_peak_gflops(torch.float32, device, size),
        "bf16": matmul_peak_gflops(torch.bfloat16, device, bf16_size),
    }
