"""Epoch batching by slicing tensors with a permutation of (seed, epoch), so a resume replays the same batches;
`HostStaging` keeps data too big for the device on the host and copies each batch ahead on a side stream.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.errors import ConfigError


def split_length(split: Mapping[str, torch.Tensor]) -> int:
    """Number of rows of a split (all its tensors share the first dimension; a Dataset split: its length)."""
    if not isinstance(split, dict):
        return len(split)
    return next(iter(split.values())).shape[0]


def place_split(split: dict[str, torch.Tensor], device: torch.device, keep_on_host: bool) -> dict[str, torch.Tensor]:
    """Move a split to the device, or pin it in host memory when it should stay there."""
    if keep_on_host:
        return {k: v.pin_memory() for k, v in split.items()} if device.type == "cuda" else split
    return {k: v.to(device) for k, v in split.items()}


def batches_per_epoch(rows: int, batch_size: int, world_size: int) -> int:
    """Full batches of one rank per epoch; ConfigError when there is none."""
    if rows // world_size < batch_size:
        procs = f" x {world_size} processes" if world_size > 1 else ""
        raise ConfigError("batch_size", f"{batch_size}{procs} is larger than the {rows:,} training samples")
    return rows // world_size // batch_size


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
        staged: bool | None = None,
    ):
        self.split = split
        self.batch_size = batch_size
        self.seed = seed
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.batches_per_epoch = batches_per_epoch(split_length(split), batch_size, world_size)
        self._on_host = next(iter(split.values())).device != device
        staged = self._on_host if staged is None else staged  # forced on: its logic tested where data is local
        self.staging = HostStaging(split, batch_size, device) if staged else None

    def order(self, epoch: int) -> torch.Tensor:
        """This rank's sample indices for `epoch`, shaped (batches_per_epoch, batch_size), on the data's device."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        rows = split_length(self.split)
        perm = torch.randperm(rows, generator=gen)
        used = self.batches_per_epoch * self.batch_size * self.world_size
        grid = perm[:used].view(self.batches_per_epoch, self.world_size, self.batch_size)[:, self.rank]
        return grid.contiguous().to(next(iter(self.split.values())).device)

    def resume_notes(self, step: int, steps_per_epoch: int) -> list[str]:
        """Nothing to say: a resumed run replays its epoch's order from the step it stopped at."""
        return []

    def batch(self, order: torch.Tensor, index: int) -> dict[str, torch.Tensor]:
        """Batch `index` of an epoch order: a gather on the device, or from the host through HostStaging."""
        if self.staging is not None:
            return self.staging.fetch(self.split, order, index)
        rows = order[index]
        if self._on_host:  # staging turned off: a plain gather and copy (pageable, so the copy blocks)
            return {k: v[rows].to(self.device, non_blocking=True) for k, v in self.split.items()}
        return {k: v[rows] for k, v in self.split.items()}


def _copy_engine(device: torch.device):
    """The device module whose streams overlap copies with compute (torch.cuda, torch.xpu), else None."""
    if device.type not in ("cuda", "xpu"):
        return None
    module = torch.get_device_module(device)
    return module if hasattr(module, "Stream") and hasattr(module, "Event") else None


class HostStaging:
    """Pinned, double-buffered host-to-device batches, one ahead; a slot is reused only once copied out."""

    def __init__(self, split: dict[str, torch.Tensor], batch_size: int, device: torch.device):
        self.device = device
        self.engine = _copy_engine(device)
        pin = self.engine is not None
        self.buffers = [
            {k: torch.empty((batch_size, *v.shape[1:]), dtype=v.dtype, pin_memory=pin) for k, v in split.items()}
            for _ in range(2)
        ]
        self.copy_stream = self.engine.Stream(device) if pin else None
        self.events: list = [None, None]
        self.slot = 0
        self.ahead: tuple | None = None  # (order, index, batch, event) started before it was asked for

    def fetch(self, split: dict[str, torch.Tensor], order: torch.Tensor, index: int) -> dict[str, torch.Tensor]:
        """Batch `index` of `order` on the device; starts the copy of batch index + 1."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead[0] is order and ahead[1] == index:
            batch, event = ahead[2], ahead[3]
        else:  # the first batch, a resumed position or a new epoch's order: nothing was started for it
            batch, event = self._start(split, order, index)
        if event is not None:
            current = self.engine.current_stream(self.device)
            current.wait_event(event)
            for tensor in batch.values():
                tensor.record_stream(current)
        if index + 1 < len(order):
            self.ahead = (order, index + 1, *self._start(split, order, index + 1))
        return batch

    def _start(self, split: dict[str, torch.Tensor], order: torch.Tensor, index: int) -> tuple[dict, object]:
        slot, self.slot = self.slot, self.slot ^ 1
        if self.events[slot] is not None:
            self.events[slot].synchronize()  # the copy out of this buffer (two fetches ago) is done
        rows = order[index]
        staging = self.buffers[slot]
        for key, values in split.items():
            torch.index_select(values, 0, rows, out=staging[key])
        if self.copy_stream is None:
            return {k: v.to(self.device, copy=True) for k, v in staging.items()}, None
        with self.engine.stream(self.copy_stream):
            batch = {k: v.to(self.device, non_blocking=True) for k, v in staging.items()}
            event = self.engine.Event()
            event.record(self.copy_stream)
        self.events[slot] = event
        return batch, event
