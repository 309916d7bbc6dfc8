"""Evaluating a split, shared out across the ranks of a DDP run. See docs/ARCHITECTURE.md.

Each rank evaluates a contiguous 1/N slice of the split; the task's sums are all-reduced and its per-row values
all-gathered in rank order, so every rank ends with the metrics one process computes on the whole split. A task
that only implements `evaluate`, or a Dataset split that cannot be shared out, is run on the whole split by
every rank: the same figures, without the speed-up. A task's Metric objects (Task.metric_objects: torchmetrics
or alike) are reset here, updated by the task per batch (Task.update_metrics) and computed after, synced across
the ranks by torchmetrics itself where the ranks shared the split out, else not synced.
"""

from __future__ import annotations

import contextlib

import torch

from core.data.batching import split_length
from core.engine.distributed import DistContext, all_gather_rows, all_reduce_sums
from core.engine.precision import plain_linears
from core.errors import TaskOutputError
from core.tasks.base import EvalParts, Task
from core.tasks.serving import cut

SAMPLES_MAX = 8  # rows of one Samples event


def rank_slice(split: dict[str, torch.Tensor], rank: int, world_size: int) -> dict[str, torch.Tensor] | None:
    """Rank `rank`'s contiguous share of a split's rows (sizes differ by at most one; views, no copies). A
    Dataset split gives its share (core.data.loaders.DatasetSplit.share), None where it cannot be shared."""
    if not isinstance(split, dict):
        return split.share(rank, world_size)
    rows = split_length(split)
    start, end = rows * rank // world_size, rows * (rank + 1) // world_size
    return {key: value[start:end] for key, value in split.items()}


def evaluate_split(
    task: Task, model: torch.nn.Module, split: dict[str, torch.Tensor], batch_size: int, dist: DistContext, autocast
) -> dict[str, float]:
    """The task's metrics on `split` for the (unwrapped) model, under no_grad, eval mode and `autocast()`.
    Under DDP every rank must call it, at the same point. bf16 weights (bf16-pure) evaluate as float32, cast back
    after (exact both ways): a task may score outside autocast in float32, as the recommender's ranking does."""
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
    """The task's Metric objects, made once (Task.metric_objects), on the model's device and reset: what
    Task.update_metrics updates during this evaluation."""
    objects = task.__dict__.get("_metric_objects")
    if objects is None:
        objects = task.__dict__["_metric_objects"] = dict(task.metric_objects())
    device = next(model.parameters(), torch.zeros(())).device
    for name, metric in objects.items():
        objects[name] = metric.to(device)
        objects[name].reset()
    return objects


def computed(objects: dict, synced: bool) -> dict[str, float]:
    """Each Metric object's value as a float; `synced`: torchmetrics gathers every rank's states first (where a
    process group is up), else each rank computes its own (every rank saw the whole split)."""
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
    """no_grad, eval mode and `autocast()` for the block; bf16 weights as float32 (see evaluate_split), all put back."""
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
    """Task.samples under `evaluating` (fp8's layers as plain_linears), capped (SAMPLES_MAX rows, each text cut to
    SAMPLE_CHARS); [] for None."""
    with evaluating(model, autocast), plain_linears(model):
        rows = task.samples(model, data) or []
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"samples returned {type(rows).__name__}: expected a list of {{input, answer}} dicts")
    return [{key: cut(str(row.get(key, ""))) for key in ("input", "answer")} for row in rows[:SAMPLES_MAX]]
