"""Multi-process runs under torchrun: the process group, rank facts and the few collectives the trainer needs.

We use PyTorch's own launcher and DistributedDataParallel; nothing here re-implements communication.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a run: rank 0 of 1 for a plain single-process run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> DistContext:
        """Read torchrun's RANK / WORLD_SIZE / LOCAL_RANK; a single process when they are absent."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        return cls(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


RUN_NOTE_ENV = "AMP_CONSOLE_RUN_NOTE"  # a note from the torchrun launcher that rank 0 reports with RunStarted


def init_process_group(ctx: DistContext, device: torch.device, timeout_seconds: float = 120.0) -> None:
    """NCCL for CUDA ranks, gloo otherwise. A dead peer surfaces as an error within `timeout_seconds`."""
    if not ctx.enabled or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_seconds))


def destroy_process_group(agree: bool = False, timeout_seconds: float = 30.0) -> None:
    """Leave the process group. `agree` (a run that ended normally on every rank): wait for the other ranks
    first, so no rank tears down its connections while a peer still has collectives in flight (gloo then
    aborts the peer at exit: "terminate called without an active exception"). Not after a failure: a dead
    peer would hold the survivors for the whole timeout."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if agree:
        try:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_seconds))
            else:
                dist.barrier()
        except Exception:  # noqa: BLE001 (a peer gone at the very end: leave anyway)
            pass
    dist.destroy_process_group()


def all_reduce_mean(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Average a tensor over ranks (used for reported metrics only: DDP averages gradients itself)."""
    if ctx.enabled:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        values /= ctx.world_size
    return values


def broadcast_ints(values: list[int], ctx: DistContext, device: torch.device) -> list[int]:
    """Rank 0's `values` on every rank (how a stop request and the next agreement point reach all ranks).
    One small collective and one host read."""
    if not ctx.enabled:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return [int(v) for v in tensor.tolist()]
