"""What a run has to do besides stepping, and when: by step (`next_due`, worked out once per such step, so the
steps between pay one comparison) and by wall time (`Deadlines`, which the loop compares one clock read with)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from core.config import RunConfig


class Due(NamedTuple):
    """The next step after which the loop has more to do than step, and what."""

    step: int
    log: bool  # StepMetrics; the step itself measures the gradient norm for it (see Trainer._norm_wanted)
    evaluate: bool  # by eval_interval, or at an epoch's end when it is 0; never the last step (the end evaluates)
    checkpoint: bool  # by checkpoint_interval; never the last step (the end saves)
    epoch_end: bool
    last: bool  # total_steps


def next_due(step: int, cfg: RunConfig, steps_per_epoch: int, total_steps: int) -> Due:
    """The first step after `step` that logs, evaluates, checkpoints, ends an epoch or is the last."""
    due = min(total_steps, (step // steps_per_epoch + 1) * steps_per_epoch)
    for every in (cfg.log_interval, cfg.eval_interval, cfg.checkpoint_interval):
        if every:
            due = min(due, (step // every + 1) * every)
    last, epoch_end = due >= total_steps, due % steps_per_epoch == 0
    evaluate = not last and (due % cfg.eval_interval == 0 if cfg.eval_interval else epoch_end)
    checkpoint = not last and cfg.checkpoint_interval > 0 and due % cfg.checkpoint_interval == 0
    return Due(due, last or due % cfg.log_interval == 0, evaluate, checkpoint, epoch_end, last)


def planned_steps(cfg: RunConfig, steps_per_epoch: int) -> tuple[int, str | None]:
    """The run's length in optimizer steps, and a note when `min_steps` stretched it: `max_steps` when set, else
    `epochs` epochs, or the fewest whole epochs that reach `min_steps` (a file of 600 rows is 7 steps an epoch)."""
    if cfg.max_steps:
        return cfg.max_steps, None
    steps = cfg.epochs * steps_per_epoch
    if steps >= cfg.min_steps:
        return steps, None
    epochs = -(-cfg.min_steps // steps_per_epoch)
    return epochs * steps_per_epoch, (
        f"{steps_per_epoch:,} optimizer steps an epoch: {epochs:,} epochs instead of "
        f"{cfg.epochs:,}, to train at least min_steps {cfg.min_steps:,} steps "
        f"(min_steps 0 runs exactly {cfg.epochs:,})"
    )


class Deadlines:
    """The wall-clock deadlines of a run as `clock` times, inf when off: the next timed checkpoint
    (`checkpoint_minutes` after the last checkpoint.pt, or the start) and the end (`time_limit_minutes` after the
    start, pauses included)."""

    def __init__(self, checkpoint_minutes: float, time_limit_minutes: float, clock: Callable[[], float]):
        self.clock = clock
        self.every = checkpoint_minutes * 60 if checkpoint_minutes > 0 else math.inf
        self.end_at = clock() + time_limit_minutes * 60 if time_limit_minutes > 0 else math.inf
        self.saved()

    def saved(self) -> None:
        """checkpoint.pt was written just now."""
        self.save_at = self.clock() + self.every
        self.next_at = min(self.save_at, self.end_at)
