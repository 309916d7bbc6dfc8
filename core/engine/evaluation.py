"""Evaluating a split, shared out across the ranks of a DDP run; the Trainer's evaluations (Evaluating).

Each rank evaluates a contiguous 1/N slice; the task's sums are all-reduced and its per-row values all-gathered
in rank order, so every rank ends with the metrics of the whole split (a task that only implements `evaluate`,
or a Dataset split that cannot be shared out, runs whole on every rank). A task's Metric objects are reset
here, updated by the task per batch and computed after, synced by torchmetrics where the ranks shared the split.
"""

from __future__ import annotations

import contextlib
import struct
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from core.data import loaders
from core.data.batching import split_length
from core.engine import small_validation
from core.engine.distributed import DistContext, all_gather_rows, all_reduce_sums, broadcast_ints
from core.engine.early_stopping import BestTracker, tracker_for
from core.engine.events import EvalMetrics, Samples
from core.engine.precision import plain_linears
from core.engine.run_state import Checkpointing
from core.errors import TaskOutputError
from core.tasks import task_checks
from core.tasks.base import EvalParts, Task
from core.tasks.serving import cut
from core.text import first_line

SAMPLES_MAX = 8  # rows of one Samples event


def rank_slice(split: dict[str, torch.Tensor], rank: int, world_size: int) -> dict[str, torch.Tensor] | None:
    """Rank `rank`'s contiguous share of a split's rows (views); a Dataset split's share, None where it has none."""
    if not isinstance(split, dict):
        return split.share(rank, world_size)
    rows = split_length(split)
    start, end = rows * rank // world_size, rows * (rank + 1) // world_size
    return {key: value[start:end] for key, value in split.items()}


def evaluate_split(
    task: Task, model: torch.nn.Module, split: dict[str, torch.Tensor], batch_size: int, dist: DistContext, autocast
) -> dict[str, float]:
    """The task's metrics on `split` for the (unwrapped) model under `evaluating`; under DDP every rank calls it."""
    with evaluating(model, autocast):
        share = rank_slice(split, dist.rank, dist.world_size) if dist.enabled and task.shares_evaluation() else None
        objects = metric_objects(task, model)
        if share is None:
            return {**task.evaluate(model, split, batch_size), **computed(objects, synced=False)}
        parts = task.evaluate_parts(model, share, batch_size)
        whole = EvalParts(
            sums=all_reduce_sums(parts.sums, dist),
            values={name: all_gather_rows(values, dist) for name, values in sorted(parts.values.items())},
        )
        return {**task.metrics(whole), **computed(objects, synced=True)}


def metric_objects(task: Task, model: torch.nn.Module) -> dict:
    """The task's Metric objects, made once (Task.metric_objects), on the model's device and reset."""
    objects = task.__dict__.get("_metric_objects")
    if objects is None:
        objects = task.__dict__["_metric_objects"] = dict(task.metric_objects())
    device = next(model.parameters(), torch.zeros(())).device
    for name, metric in objects.items():
        objects[name] = metric.to(device)
        objects[name].reset()
    return objects


def computed(objects: dict, synced: bool) -> dict[str, float]:
    """Each Metric object's value as a float; `synced`: torchmetrics gathers every rank's states first."""
    values = {}
    for name, metric in objects.items():
        metric.sync_on_compute = metric._to_sync = synced
        value = metric.compute()
        if not isinstance(value, (int, float)) and getattr(value, "numel", lambda: 0)() != 1:
            raise TaskOutputError(f"metric object {name!r} computed {type(value).__name__}: expected one number")
        values[name] = float(value)
    return values


@contextlib.contextmanager
def evaluating(model: torch.nn.Module, autocast):
    """no_grad, eval mode and `autocast()` for the block, all put back; bf16 weights as float32, cast back after
    (exact both ways): a task may score outside autocast in float32, as the recommender's ranking does."""
    was_training, bf16 = model.training, {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model.eval()
    if bf16:
        model.float()
    try:
        with torch.no_grad(), autocast():
            yield
    finally:
        model.train(was_training)
        if bf16:
            model.to(torch.bfloat16)


def task_samples(task: Task, model: torch.nn.Module, data, autocast) -> list[dict[str, str]]:
    """Task.samples under `evaluating` (fp8's layers as plain_linears), capped; [] for None."""
    with evaluating(model, autocast), plain_linears(model):
        rows = task.samples(model, data) or []
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"samples returned {type(rows).__name__}: expected a list of {{input, answer}} dicts")
    return [{key: cut(str(row.get(key, ""))) for key in ("input", "answer")} for row in rows[:SAMPLES_MAX]]


class Evaluating(Checkpointing):
    """The Trainer's evaluations (core.engine.trainer mixes it in): metrics by every rank, samples on rank 0, the
    tracker's best checkpoints and early stop."""

    task: Task
    val: Any
    test: Any
    test_metrics: dict
    best_and_last: small_validation.BestAndLast | None = None
    _last_eval_step = -1
    _samples_on = True  # until the task's samples hook fails once
    _early_stop: str | None = None  # the reason, once the tracker has run out of patience or diverged
    display_epoch: Callable[[], int]

    def evaluate(self, split: str = "val") -> dict:
        """Metrics on the validation (or test) split, computed by every rank together; rank 0 reports them."""
        metrics = self._metrics(self.val if split == "val" else self.test)
        if split == "val":
            self._last_eval_step, self.state.last_metrics = self.state.step, metrics
        self._emit(EvalMetrics(step=self.state.step, epoch=self.display_epoch(), split=split, metrics=metrics))
        if split == "val" and self.dist.is_main and self._samples_on:
            self._samples()
        if split == "val" and self.tracker is not None:
            self._track(self.tracker, metrics)
        return metrics

    def _samples(self) -> None:
        """The task's samples of this evaluation, rank 0 alone; a failing hook is one warning, then no more."""
        try:
            rows = task_samples(self.task, self.raw_model, self.data, self.plan.autocast)
        except Exception as exc:
            self._samples_on = False
            note = f"samples of task {self.task.name} failed, none more this run: {type(exc).__name__}: {exc}"
            note = first_line(note) + task_checks.raised_at(exc)
            with warnings.catch_warnings():  # shown, never raised (not even under -W error): samples don't end a run
                warnings.simplefilter("always")
                warnings.warn(note, RuntimeWarning, stacklevel=2)
            self._emit(Samples(step=self.state.step, note=note))
            return
        if rows:
            self._emit(Samples(step=self.state.step, rows=rows))

    def _metrics(self, split, dist: DistContext | None = None) -> dict:
        return evaluate_split(
            self.task, self.raw_model, split, self.cfg.batch_size, dist or self.dist, self.plan.autocast
        )

    def _test_metrics_of(self, path: Path) -> dict:
        return small_validation.test_weights(
            path, self.raw_model, self.dist, self.device, lambda: self._metrics(self.test)
        )

    def _make_tracker(self) -> BestTracker | None:
        """The tracker of the monitored metric (early_stopping.tracker_for), noting a validation split too small."""
        tracker = tracker_for(self.cfg, self.task.primary_metric, self._metric_names)
        self.notes.extend(small_validation.start_notes(self.task, self.data, tracker) if self.dist.is_main else [])
        return tracker

    def _metric_names(self) -> list[str]:
        return list(self._metrics(loaders.probe(self.data.val, 8, self.device), DistContext()))

    def _track(self, tracker: BestTracker, metrics: dict) -> None:
        """Count a validation evaluation: save the best checkpoints it earns, and decide on early stopping. Every
        rank takes rank 0's value (a task may evaluate on each rank alone), so the ranks save and stop alike."""
        value = metrics.get(tracker.metric)
        value = float("nan") if not isinstance(value, (int, float)) else float(value)
        if self.dist.enabled:  # the float's 64 bits as one int: exact
            bits = broadcast_ints([struct.unpack("<q", struct.pack("<d", value))[0]], self.dist, self.device)[0]
            value = struct.unpack("<d", struct.pack("<q", bits))[0]
        update = tracker.update(value, self.state.step)
        if update.file is not None and update.rank is not None:
            best = {"rank": update.rank + 1, "value": value, "metric": tracker.metric}
            self.save_checkpoint(self.out_dir / update.file, kind="best", **best)
            if self.dist.is_main:
                for name in update.dropped:
                    with contextlib.suppress(FileNotFoundError):
                        (self.out_dir / name).unlink()
        if tracker.should_stop:
            self._early_stop = tracker.stop_message()

    def _best_and_last(self, tracker: BestTracker) -> small_validation.BestAndLast | None:
        return small_validation.best_and_last(
            tracker,
            small_validation.validation_size(self.task, self.data.val),
            self.state.step,
            self.test_metrics,
            self.out_dir,
            None if self.test is None else self._test_metrics_of,
            tracker.last,
        )
