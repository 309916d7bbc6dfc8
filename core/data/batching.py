"""Epoch batching by slicing tensors with a seeded permutation: no per-sample Python, no collation.

Each epoch's order is a pure function of (seed, epoch), so a resumed run replays exactly the same batches.
Under DDP every rank takes its own slice of each global batch, so every sample is seen once per epoch
across ranks (like DistributedSampler, without per-sample work).
"""

from __future__ import annotations

import torch

from core.errors import ConfigError


def split_length(split: dict[str, torch.Tensor]) -> int:
    """Number of rows of a split (all its tensors share the first dimension)."""
    return next(iter(split.values())).shape[0]


def place_split(split: dict[str, torch.Tensor], device: torch.device, keep_on_host: bool) -> dict[str, torch.Tensor]:
    """Move a split to the device, or pin it in host memory when it should stay there."""
    if keep_on_host:
        if device.type == "cuda":
            return {k: v.pin_memory() for k, v in split.items()}
        return split
    return {k: v.to(device) for k, v in split.items()}


class EpochBatches:
    """Batches of one rank, for any epoch, sliced from tensors held on the device (or pinned on the host)."""

    def __init__(
        self,
        split: dict[str, torch.Tensor],
        batch_size: int,
        seed: int,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.split = split
        self.batch_size = batch_size
        self.seed = seed
        self.device = device
        self.rank = rank
        self.world_size = world_size
        rows = split_length(split)
        self.batches_per_epoch = rows // (batch_size * world_size)
        if self.batches_per_epoch == 0:
            procs = f" x {world_size} processes" if world_size > 1 else ""
            raise ConfigError("batch_size", f"{batch_size}{procs} is larger than the {rows} training samples")
        self._on_host = next(iter(split.values())).device != device

    def order(self, epoch: int) -> torch.Tensor:
        """This rank's sample indices for `epoch`, shaped (batches_per_epoch, batch_size), on the data's device."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        rows = split_length(self.split)
        perm = torch.randperm(rows, generator=gen)
        used = self.batches_per_epoch * self.batch_size * self.world_size
        grid = perm[:used].view(self.batches_per_epoch, self.world_size, self.batch_size)[:, self.rank]
        return grid.contiguous().to(next(iter(self.split.values())).device)

    def batch(self, order: torch.Tensor, index: int) -> dict[str, torch.Tensor]:
        """Batch `index` of an epoch order: a gather on the device, or a pinned gather + async copy."""
        rows = order[index]
        if self._on_host:
            return {k: v[rows].to(self.device, non_blocking=True) for k, v in self.split.items()}
        return {k: v[rows] for k, v in self.split.items()}
