"""How the lab tools train and time a throwaway model: `on_throwaway_trainer` sets a Trainer up in a temporary folder
(nothing persistent is written) for a tool that drives its steps itself (LR finder, batch-size finder, Compare
precisions), and `time_steps` is the one way they time training speed: warm-up windows, then timed windows of
optimizer steps with one host sync at each window's end, the median window the speed. Both tools' samples/s and
their ratios against fp32 (`speed_ratio`) come from here, so they agree.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from core.config import RunConfig
    from core.engine.step_metrics import IntervalReadout

T = TypeVar("T")
# A throwaway run: no evaluation, checkpoint, best tracking, early stop or TensorBoard; its steps are the tool's.
THROWAWAY = dict(
    log_interval=1_000_000,
    eval_interval=1_000_000_000,
    checkpoint_interval=0,
    checkpoint_minutes=0.0,
    keep_best=0,
    early_stop_patience=0,
    early_stop_divergence=0.0,
    tensorboard=False,
)


def on_throwaway_trainer(
    config: RunConfig, prefix: str, work: Callable[[Any], T], devices=None, control=None, **changes
) -> T:
    """`work(trainer)` on a set-up Trainer of `config` with `changes` (a user task's returns checked, as a run does),
    under its matmul precision, in a temporary folder; the trainer is cleaned up and its device memory released."""
    from core.devices import PeakMemory, torch_device
    from core.engine.precision import matmul_precision
    from core.engine.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix=prefix) as out_dir:
        trainer = Trainer(config.replace(out_dir=out_dir, **(THROWAWAY | changes)), control=control, devices=devices)
        try:
            trainer.setup()
            with matmul_precision(trainer.plan):
                return work(trainer)
        finally:
            trainer.cleanup()
            info = getattr(trainer, "device_info", None)  # None when setup failed before choosing the device
            del trainer
            if info is not None:
                PeakMemory(torch_device(info)).release()  # the next mode starts from the same allocator state


@dataclass
class Timing:
    """What `time_steps` measured: each window's seconds per step (warm-up windows first) and what its end read."""

    warmup: int
    samples_per_step: int
    steps: int  # per window
    step_seconds: list[float] = field(default_factory=list)
    readouts: list[IntervalReadout] = field(default_factory=list)

    @property
    def timed(self) -> list[float]:
        return self.step_seconds[self.warmup :]

    @property
    def samples_per_second(self) -> float | None:
        """Samples per second of the median timed window (None without one)."""
        median = statistics.median(self.timed) if self.timed else 0.0
        return self.samples_per_step / median if median > 0 else None

    @property
    def tokens_per_sample(self) -> float | None:
        """Non-padding tokens per sample of the timed windows' batches (None for a task without tokens)."""
        tokens = sum(r.tokens for r in self.readouts[self.warmup :])
        samples = self.samples_per_step * self.steps * len(self.timed)
        return tokens / samples if tokens and samples else None


def step_sums(trainer):
    """A StepAccumulator for a set-up trainer's steps (fp16 overflows counted apart where its GradScaler runs)."""
    from core.engine.step_metrics import StepAccumulator

    return StepAccumulator(trainer.device, count_only_finite=trainer.plan.use_scaler)


def step_positions(trainer) -> Iterator[tuple[Any, int]]:
    """(order, index) of a set-up trainer's optimizer steps over its current batches, epoch after epoch."""
    batches = trainer.batches
    per_epoch = batches.batches_per_epoch // trainer.cfg.grad_accum
    if per_epoch < 1:
        raise ValueError(f"{batches.batches_per_epoch} batches per epoch make no step of {trainer.cfg.grad_accum}")
    for epoch in itertools.count():
        order = batches.order(epoch)
        for index in range(per_epoch):
            yield order, index


def time_steps(
    trainer,
    steps: int,
    windows: int,
    warmup: int = 1,
    on_window: Callable[[int, float, IntervalReadout], None] | None = None,
) -> Timing:
    """`warmup + windows` windows of `steps` optimizer steps of a set-up `trainer` (its own step, epoch after epoch);
    the only host sync is the losses' read at each window's end. `on_window(window, seconds per step, readout)` hears
    every window (1-based, warm-up ones included)."""
    sums, positions = step_sums(trainer), step_positions(trainer)  # the batch finder swaps in the batch it tries
    timing = Timing(warmup, trainer.batches.batch_size * trainer.cfg.grad_accum, steps)
    for window in range(1, warmup + windows + 1):
        began = time.perf_counter()
        for order, index in itertools.islice(positions, steps):
            trainer.train_step(order, index, sums)
        readout = sums.read(trainer.dist)  # the window's one host sync
        timing.step_seconds.append((time.perf_counter() - began) / steps)
        timing.readouts.append(readout)
        if on_window:
            on_window(window, timing.step_seconds[-1], readout)
    return timing


def speed_ratio(samples_per_second: float | None, reference: float | None) -> float | None:
    """A mode's speed against the reference's (fp32), from `Timing.samples_per_second` in both tools."""
    return samples_per_second / reference if samples_per_second and reference else None
