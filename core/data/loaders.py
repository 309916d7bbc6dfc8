"""Batches from a torch.utils.data Dataset through a DataLoader, for data that does not fit in memory: training
draws from `LoaderBatches` (EpochBatches' interface), evaluation from a `DatasetSplit`. See docs/tasks.md.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, Subset

from core.data.batching import batches_per_epoch, split_length
from core.errors import DataError

EVAL_SEED = 20_011  # the evaluation loaders' worker seed: fixed, so an evaluation draws nothing of the run's


def is_dataset(split) -> bool:
    """Whether a TaskData split is a torch Dataset (else it is a dict of tensors)."""
    return isinstance(split, Dataset)


def shards_itself(dataset) -> bool:
    """Whether an IterableDataset says it splits its stream across workers and ranks (`shards = True`)."""
    return bool(getattr(dataset, "shards", False))


@dataclass(frozen=True)
class LoaderSettings:
    """The run's DataLoader settings, resolved for its device (see RunConfig's num_workers ... prefetch_factor)."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int = 2

    @classmethod
    def from_config(cls, cfg, device: torch.device) -> LoaderSettings:
        pin = cfg.pin_memory == "on" or (cfg.pin_memory == "auto" and device.type == "cuda")
        return cls(
            cfg.num_workers,
            pin and device.type != "cpu",
            cfg.persistent_workers and cfg.num_workers > 0,
            cfg.prefetch_factor,
        )

    def kwargs(self, persistent: bool = True) -> dict:
        """DataLoader keyword arguments; `persistent` False: workers end with each pass (evaluation)."""
        out = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            out.update(prefetch_factor=self.prefetch_factor, persistent_workers=persistent and self.persistent_workers)
        return out


def check_dataset(dataset, what: str) -> int:
    """The number of rows of a Dataset split; DataError for one without rows, length or dict items."""
    kind = "IterableDataset" if isinstance(dataset, IterableDataset) else "Dataset"
    try:
        rows = len(dataset)
    except TypeError:
        raise DataError(
            f"{what} is an {kind} ({type(dataset).__name__}) without __len__: give it one (the samples one pass "
            f"yields, over all processes and workers), so epochs can be counted"
        ) from None
    if rows <= 0:
        raise DataError(f"{what} ({type(dataset).__name__}) is empty")
    if kind == "Dataset":
        check_item(dataset[0], what)
    return rows


def check_item(item, what: str) -> None:
    """A Dataset's item (or a collated batch) must be a dict: the task's loss reads batch['name']."""
    if not isinstance(item, Mapping):
        raise DataError(
            f"{what}: an item is a {type(item).__name__}, not a dict of tensors; return {{'x': ..., 'y': ...}} "
            f"from __getitem__ (or __iter__): the task's loss reads the batch by name"
        )


def to_device(batch: Mapping, device: torch.device) -> dict:
    """A collated batch on `device` (tensors copied non-blocking; other values as they are)."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def start(loader: DataLoader) -> Iterator:
    """iter(loader) with sys.stdin set aside (a forked worker closing it hangs while a thread reads it)."""
    if loader.num_workers == 0:
        return iter(loader)
    stdin, sys.stdin = sys.stdin, None
    try:
        return iter(loader)
    finally:
        sys.stdin = stdin


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can start an epoch `skip` indices in (a resumed epoch's trained batches)."""

    skip = 0

    def __iter__(self):
        indices = super().__iter__()
        return itertools.islice(indices, self.skip, None) if self.skip else indices

    def __len__(self) -> int:
        return super().__len__() - self.skip


@dataclass(slots=True, eq=False)
class _Epoch:
    """One epoch's pass of a LoaderBatches: its DataLoader iterator, started at the first batch asked for."""

    epoch: int
    next: int = -1
    iterator: Iterator | None = None


class LoaderBatches:
    """One rank's training batches from a Dataset (EpochBatches' interface); every batch is full (drop_last)."""

    def __init__(
        self,
        dataset,
        batch_size: int,
        seed: int,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
        settings: LoaderSettings | None = None,
        what: str = "the train split",
    ):
        self.split = dataset
        self.batch_size, self.seed, self.device = batch_size, seed, device
        self.rank, self.world_size = rank, world_size
        self.settings = settings or LoaderSettings()
        self.what = what
        self.iterable = isinstance(dataset, IterableDataset)
        rows = check_dataset(dataset, what)
        self.sampler = None
        if not self.iterable:
            self.sampler = ResumableSampler(
                dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
            )
        self.batches_per_epoch = batches_per_epoch(rows, batch_size, world_size)
        self.generator = torch.Generator()
        self.loader = DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            drop_last=True,
            generator=self.generator,
            **self.settings.kwargs(),
        )
        self._checked = not self.iterable  # a map-style item is checked above, a stream's first batch below

    def order(self, epoch: int) -> _Epoch:
        """Epoch `epoch`'s pass (its iterator starts at the first batch asked of it)."""
        return _Epoch(epoch)

    def batch(self, order: _Epoch, index: int) -> dict[str, torch.Tensor]:
        """Batch `index` of the epoch, on the device; an index out of sequence (a resume) starts the pass there."""
        iterator = order.iterator
        if iterator is None or index != order.next:
            iterator = self._start(order, index)
        try:
            batch = next(iterator)
        except StopIteration:  # a stream that ended before the epoch's batches: its next pass goes on with it
            iterator = order.iterator = start(self.loader)
            batch = next(iterator, None)
            if batch is None:
                raise DataError(
                    f"{self.what}: its IterableDataset yielded no full batch of {self.batch_size}"
                ) from None
        order.next = index + 1
        if not self._checked:
            check_item(batch, self.what)
            self._checked = True
        return to_device(batch, self.device)

    def _start(self, order: _Epoch, index: int) -> Iterator:
        if self.sampler is not None:
            self.sampler.set_epoch(order.epoch)
            self.sampler.skip = index * self.batch_size
        # The workers' seed: a function of (seed, epoch, rank), not a draw from the run's random streams.
        self.generator.manual_seed((self.seed * 1_000_003 + order.epoch) * 1_009 + self.rank)
        order.iterator = start(self.loader)
        return order.iterator

    def resume_notes(self, step: int, steps_per_epoch: int) -> list[str]:
        """What resuming at optimizer step `step` means for this data (the run's notes)."""
        if not self.iterable:
            return []
        within = step % steps_per_epoch
        where = (
            f"the rest of epoch {step // steps_per_epoch + 1} ({steps_per_epoch - within:,} steps) is drawn "
            f"from the start of its stream"
            if within
            else "the stream starts its next pass, as each epoch does"
        )
        return [
            f"resuming at step {step:,}: {self.what} is an IterableDataset, which cannot be positioned, so it "
            f"restarts: {where}"
        ]

    def close(self) -> None:
        """End the DataLoader's persistent workers now (not when the garbage collector gets to them)."""
        iterator = getattr(self.loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        self.loader._iterator = None


class DatasetSplit:
    """An evaluation split held as a Dataset: its batches on the device, each row once, in order.
    `share(rank, world_size)` is a DDP rank's part, or None when every rank evaluates all of it."""

    def __init__(
        self,
        dataset,
        batch_size: int,
        device: torch.device,
        settings: LoaderSettings | None = None,
        what: str = "the validation split",
        rows: int | None = None,
    ):
        self.dataset, self.batch_size, self.device = dataset, batch_size, device
        self.settings = settings or LoaderSettings()
        self.what = what
        self.iterable = isinstance(dataset, IterableDataset)
        self.rows = check_dataset(dataset, what) if rows is None else rows
        if self.iterable and not shards_itself(dataset):
            self.settings = LoaderSettings(pin_memory=self.settings.pin_memory)
        self._shares: dict = {}

    def __len__(self) -> int:
        return self.rows

    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return self.batches(self.batch_size)

    def batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        generator = torch.Generator().manual_seed(EVAL_SEED)
        loader = DataLoader(
            self.dataset,
            batch_size=max(1, batch_size),
            shuffle=False,
            drop_last=False,
            generator=generator,
            **self.settings.kwargs(persistent=False),
        )
        for batch in start(loader):
            check_item(batch, self.what)
            yield to_device(batch, self.device)

    def share(self, rank: int, world_size: int) -> DatasetSplit | None:
        if self.iterable:
            return self if shards_itself(self.dataset) else None
        if (rank, world_size) not in self._shares:
            start, end = self.rows * rank // world_size, self.rows * (rank + 1) // world_size
            self._shares[(rank, world_size)] = self._like(Subset(self.dataset, range(start, end)), end - start)
        return self._shares[(rank, world_size)]

    def batched(self, batch_size: int) -> DatasetSplit:
        """The same rows, iterated in batches of `batch_size` (e.g. a batch-size finder's trial)."""
        return self._like(self.dataset, self.rows, batch_size)

    def _like(self, dataset, rows: int, batch_size: int | None = None) -> DatasetSplit:
        """`rows` rows of `dataset`, read as this split is."""
        batch_size = self.batch_size if batch_size is None else batch_size
        return DatasetSplit(dataset, batch_size, self.device, self.settings, self.what, rows=rows)

    def head(self, rows: int) -> DatasetSplit:
        """Its first `rows` rows (read in this process), e.g. to learn the metrics' names on a few rows."""
        items: list | Subset
        if self.iterable:
            items = list(itertools.islice(iter(self.dataset), rows))
        else:
            items = Subset(self.dataset, range(min(rows, self.rows)))
        return DatasetSplit(items, self.batch_size, self.device, what=self.what, rows=len(items))


def first_rows(split, rows: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The first `rows` examples of a split as one batch dict on `device`."""
    if isinstance(split, Mapping):
        rows = min(rows, split_length(split))
        return {key: value[:rows].to(device) for key, value in split.items()}
    from torch.utils.data import default_collate

    items = iter(split) if isinstance(split, IterableDataset) else (split[i] for i in range(min(rows, len(split))))
    batch = default_collate(list(itertools.islice(items, rows)))
    check_item(batch, "a Dataset split")
    return to_device(batch, device)


def batch_rows(batch: Mapping) -> int:
    """The rows of a batch dict: its first tensor's (a collated batch may also hold lists, e.g. of strings)."""
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim():
            return int(value.shape[0])
    return len(next(iter(batch.values()), ()))


def probe(split, rows: int, device: torch.device):
    """The first `rows` rows of an evaluation split as evaluation gets them, on `device`."""
    if is_dataset(split):
        return DatasetSplit(split, 1, device, what="the validation split").head(rows)
    return first_rows(split, rows, device)
