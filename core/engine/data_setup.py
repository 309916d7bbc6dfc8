"""The trainer's data, placed: tensor splits on the device (or pinned on the host), Dataset splits behind a
DataLoader (core.data.loaders), and the notes a run starts with about them. Nothing here runs per step.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.utils.data import IterableDataset

from core.data.batching import EpochBatches, place_split
from core.data.loaders import DatasetSplit, LoaderBatches, LoaderSettings, is_dataset, shards_itself


def place_data(data, cfg, task: str, device: torch.device, dist, memory_free: int | None) -> tuple:
    """(val, test, batches, notes) of task `task`'s `data` for a run of `cfg` on `device` (`memory_free`: its
    free bytes): test is None when the task has no test split; notes about unsharded streams (rank 0)."""
    settings = LoaderSettings.from_config(cfg, device)

    def evaluation(split, name: str):
        if is_dataset(split):
            return DatasetSplit(split, cfg.batch_size, device, settings, f"task {task}'s {name} split")
        return place_split(split, device, keep_on_host=False)

    batches: LoaderBatches | EpochBatches
    if is_dataset(data.train):
        where = f"task {task}'s train split"
        batches = LoaderBatches(
            data.train, cfg.batch_size, cfg.seed, device, dist.rank, dist.world_size, settings, where
        )
    else:
        train = place_split(data.train, device, keep_on_host=keep_on_host(data.train, device, memory_free))
        batches = EpochBatches(train, cfg.batch_size, cfg.seed, device, dist.rank, dist.world_size)
    val = evaluation(data.val, "validation")
    test = None if data.test is None or (not is_dataset(data.test) and not data.test) else evaluation(data.test, "test")
    notes = stream_warnings(data, task, settings.num_workers, dist.world_size) if dist.is_main else []
    return val, test, batches, notes


def stream_warnings(data, task: str, workers: int, world_size: int) -> list[str]:
    """A warning for each IterableDataset split that does not say it shards itself (`shards = True`) where more
    than one reader would read it: every DataLoader worker and every rank then yields the whole stream."""
    readers = max(workers, 1) * world_size
    warnings = []
    for name, split in (("train", data.train), ("validation", data.val), ("test", data.test)):
        if not isinstance(split, IterableDataset) or shards_itself(split):
            continue
        if name == "train" and readers > 1:
            who = " and ".join(
                ([f"{workers} DataLoader worker{'s' if workers > 1 else ''}"] if workers else [])
                + ([f"{world_size} processes"] if world_size > 1 else [])
            )
            warnings.append(
                f"warning: task {task}'s train split, an IterableDataset ({type(split).__name__}), does not say it "
                f"shards itself (shards = True): with {who} each of them reads the whole stream, so every sample "
                f"is trained on {readers} times an epoch; split it by torch.utils.data.get_worker_info() and the "
                f"rank, and set shards = True (docs/tasks.md)"
            )
        elif name != "train" and world_size > 1:
            warnings.append(
                f"task {task}'s {name} split, an IterableDataset ({type(split).__name__}) that does not shard "
                f"itself (shards = True), is evaluated whole by each of the {world_size} processes, without "
                f"DataLoader workers"
            )
    return warnings


def keep_on_host(train: dict[str, torch.Tensor], device: torch.device, memory_free: int | None) -> bool:
    """Training tensors that would take over half the free GPU memory stay pinned on the host."""
    if device.type != "cuda":
        return False
    return sum(t.numel() * t.element_size() for t in train.values()) > (memory_free or 0) // 2


def values_per_sample(train) -> int:
    """The numbers in one training sample's largest tensor (a Dataset's first item; 1 for a stream)."""
    if isinstance(train, IterableDataset):
        return 1
    if is_dataset(train):
        item = train[0]  # not a dict: place_data says so
        values = item.values() if isinstance(item, Mapping) else ()
        return max((v.numel() for v in values if isinstance(v, torch.Tensor)), default=1)
    return max((t[0].numel() for t in train.values() if t.dim() and len(t)), default=1)


def release(batches) -> None:
    """End a DataLoader's persistent workers with the run."""
    close = getattr(batches, "close", None)
    if close is not None:
        close()
