"""Data-parallel training across processes (torch.distributed, launched by `torchrun`).

`torchrun` starts one process per GPU (or CPU slot) and sets RANK, LOCAL_RANK, WORLD_SIZE and
the rendezvous address in each one's environment; `init` joins the process group (NCCL on
GPU, gloo on CPU). Outside torchrun everything here is a one-process no-op.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from pipeline.core.config import DistConfig


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0  # 0 .. size-1 over all nodes; rank 0 writes every file
    size: int = 1
    local_rank: int = 0  # index on this node (selects the GPU)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum(self, value: float) -> float:
        """Sum of `value` over all processes (every process gets it)."""
        if self.size == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=_collective_device())
        dist.all_reduce(t)
        return float(t.item())

    def broadcast(self, tensors: list[torch.Tensor]) -> None:
        """Overwrite each tensor, in place, with rank 0's values (a no-op alone)."""
        if self.size == 1:
            return
        device = _collective_device()
        for t in tensors:
            on_device = t.detach().to(device)
            dist.broadcast(on_device, src=0)
            t.detach().copy_(on_device)

    def rank0_says(self, flag: bool) -> bool:
        """Rank 0's `flag`, on every process (decisions that depend on its clock or validation)."""
        if self.size == 1:
            return flag
        t = torch.tensor([int(flag)], device=_collective_device())
        dist.broadcast(t, src=0)
        return bool(t.item())


def _collective_device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )


def under_torchrun() -> bool:
    """True in a process started by torchrun (it sets LOCAL_RANK and WORLD_SIZE)."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def wants_torchrun(cfg: DistConfig) -> bool:
    """True when `cfg` asks for more than one process and this one was not started by torchrun."""
    return (cfg.nproc_per_node > 1 or cfg.nnodes > 1) and not under_torchrun()


def init(device: torch.device, threads: int | None = None) -> tuple[World, torch.device]:
    """Join the process group when under torchrun; returns the world and this rank's device.

    The device is `cuda:<local rank>` on GPU. CPU ranks use `threads` threads each, by default an equal
    share of the node's cores."""
    if not under_torchrun():
        return World(), device
    world = World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))
    if device.type == "cuda":
        torch.cuda.set_device(world.local_rank)
        device = torch.device("cuda", world.local_rank)
        dist.init_process_group("nccl")
    else:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world.size))
        torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // per_node))
        dist.init_process_group("gloo")
    return world, device


def close() -> None:
    """Leave the process group (a no-op outside torchrun)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def torchrun_command(cfg: DistConfig, module: str, args: list[str]) -> list[str]:
    """The `torchrun` command line that runs `python -m module args` in `cfg`'s processes.

    One node: `--standalone` (a local rendezvous). Several: a static rendezvous at
    `cfg.master_addr:cfg.master_port` with `--node-rank` from env NODE_RANK (0 when unset), so the
    node started with NODE_RANK=0 holds global rank 0, the one that writes every file.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={cfg.nproc_per_node}"]
    if cfg.nnodes == 1:
        cmd.append("--standalone")
    else:
        cmd += [
            f"--nnodes={cfg.nnodes}",
            f"--node-rank={os.environ.get('NODE_RANK', '0')}",
            f"--master-addr={cfg.master_addr}",
            f"--master-port={cfg.master_port}",
        ]
    return cmd + ["-m", module, *args]


def relaunch(cfg: DistConfig, module: str, args: list[str]) -> int:
    """Run `module` under torchrun as `cfg` asks; returns torchrun's exit status."""
    return subprocess.call(torchrun_command(cfg, module, args))
