"""Which CPU a figure came from, and the precision choice that follows from it."""

from __future__ import annotations

import torch

from pipeline.core.device import cpu_name, use_bf16

CPUINFO = "processor\t: {n}\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse2 avx2 {extra}\n\n"


def test_cpu_name_gives_the_model_and_the_strongest_matrix_flag(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(n=0, extra="") + CPUINFO.format(n=1, extra=""))
    assert cpu_name(path) == "AMD EPYC 9R14 (avx2)"
    path.write_text(CPUINFO.format(n=0, extra="avx512f avx512_bf16"))
    assert cpu_name(path) == "AMD EPYC 9R14 (avx512_bf16)"
    assert cpu_name(tmp_path / "absent") == "unknown"


def test_explicit_precision_wins_over_the_cpu():
    cpu = torch.device("cpu")
    assert use_bf16(cpu, "bf16") and not use_bf16(cpu, "fp32")
