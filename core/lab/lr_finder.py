"""LR range test ("LR finder"): train a fresh copy of the model (the Trainer's own setup and optimizer step, in a
temporary run folder; nothing persistent is touched) while the learning rate grows exponentially, stop when the
loss diverges (NaN/inf, or the smoothed loss above `diverge_factor` x its best), and suggest a learning rate:
`valley` (default), the middle in log(lr) of the descent that ends at the minimum, or `steepest`, the fastest
fall against log(lr). The suggestion functions are plain Python: `find_lr` imports torch only when it runs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.config import RunConfig
from core.errors import ConfigError
from core.lab import ToolResult

if TYPE_CHECKING:
    from core.devices import DeviceInfo
    from core.engine.control import RunControl

DEFAULT_START_LR = 1e-7
DEFAULT_END_LR = 1.0
DEFAULT_STEPS = 100
DEFAULT_DIVERGE_FACTOR = 4.0
DEFAULT_SMOOTHING = 0.05
METHODS = ("valley", "steepest")
MAX_STEPS = 100_000

# A point whose raw loss is this many scaled MADs away from the median of its +-SPIKE_WINDOW neighbours is a spike.
SPIKE_WINDOW = 4
SPIKE_MADS = 3.0
SPIKE_MIN_RELATIVE = 0.05  # ...and at least this far relative to that median (a flat curve has MAD 0)
SKIP_FRACTION = 0.1  # the first 10% of the points: no divergence check on them; steepest never suggests them
MIN_POINTS = 5  # fewer points than this: no suggestion
VALLEY_TOP = 0.05  # valley: the descent starts where the smoothed loss is 5% of its total drop below the start
MIN_DROP = 0.01  # ...and a drop under 1% of the starting level is no descent


@dataclass(frozen=True)
class LRSuggestion:
    """One method's pick: `lr` (None when the curve gives none), the smoothed loss there, its index in the
    result's `lrs`, and one sentence saying why (or why there is no suggestion)."""

    method: str
    lr: float | None
    loss: float | None
    index: int | None
    explanation: str

    @classmethod
    def none(cls, method: str, explanation: str) -> LRSuggestion:
        """No suggestion from `method`, and why."""
        return cls(method, None, None, None, explanation)


@dataclass
class LRFinderResult(ToolResult):
    """A range test: the settings it ran with, the curve and the suggestions. `lrs`, `losses` and `smoothed`
    have one entry per recorded point (steps the GradScaler skipped are only in `skipped_lrs`)."""

    precision: str  # the mode that ran (auto resolved)
    autocast_dtype: str | None  # 'bfloat16', 'float16', or None without autocast
    scaler: bool
    optimizer: str  # the engine's choice, or the class of the task's own (own_optimizer)
    batch_size: int
    start_lr: float
    end_lr: float
    steps: int  # steps planned over [start_lr, end_lr]
    steps_run: int
    diverge_factor: float
    smoothing: float
    method: str  # the method of `suggestion`
    lrs: list[float]
    losses: list[float]
    smoothed: list[float]
    skipped_lrs: list[float]
    suggestion: LRSuggestion
    suggestions: dict[str, LRSuggestion]  # every method's pick, `method`'s included
    stopped_early: str  # why the test ended before end_lr ('' when it ran the whole range)
    best_loss: float | None  # the lowest smoothed loss and its lr
    best_lr: float | None
    seconds: float  # the whole call: setup and steps
    setup_seconds: float
    notes: list[str] = field(default_factory=list)
    own_optimizer: bool = False  # the task's configure_optimizers chose it: no `train --lr` applies


@dataclass(frozen=True)
class LRFinderProgress:
    """Handed to the progress callback once before setup ('setup'), after every step ('step': `loss` is None
    for a step the GradScaler skipped) and at the end ('done', with the result)."""

    phase: str
    step: int = 0
    steps: int = 0
    lr: float | None = None
    loss: float | None = None
    smoothed: float | None = None
    result: LRFinderResult | None = None

    def describe(self) -> str:
        if self.phase == "setup":
            return "setting up a fresh model and the data"
        if self.phase == "step":
            if self.loss is None:
                return f"step {self.step:,}/{self.steps:,}, lr {self.lr:.2e}: skipped (fp16 gradient overflow)"
            smoothed = f" (smoothed {self.smoothed:.4g})" if self.smoothed is not None else ""
            return f"step {self.step:,}/{self.steps:,}, lr {self.lr:.2e}, loss {self.loss:.4g}{smoothed}"
        result = self.result
        if result is None:
            return "done"
        end = f"stopped early: {result.stopped_early}" if result.stopped_early else "ran the whole range"
        return f"done: {result.steps_run:,} steps in {result.seconds:.1f} s, {end}"


ProgressCallback = Callable[[LRFinderProgress], None]


# ----------------------------------------------------------------------------- settings and the curve (no torch)
def check_settings(
    start_lr: float, end_lr: float, steps: int, diverge_factor: float, smoothing: float, method: str = "valley"
) -> None:
    """Raise ConfigError (field = the parameter's name) for settings a range test cannot run with."""
    for name, value in (("start_lr", start_lr), ("end_lr", end_lr)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError(name, f"{value} must be a positive number")
    if start_lr >= end_lr:
        raise ConfigError("start_lr", f"{start_lr:g} must be below end_lr ({end_lr:g})")
    if not (isinstance(steps, int) and 2 <= steps <= MAX_STEPS):
        raise ConfigError("steps", f"{steps} is out of range: must be between 2 and {MAX_STEPS:,}")
    if not (math.isfinite(diverge_factor) and diverge_factor > 1):
        raise ConfigError("diverge_factor", f"{diverge_factor} must be above 1 (the loss over its best value)")
    if not (0 < smoothing <= 1):
        raise ConfigError("smoothing", f"{smoothing} is out of range: must be above 0 and at most 1 (1 = no smoothing)")
    if method not in METHODS:
        raise ConfigError("method", f"unknown method {method!r}; choose {' or '.join(METHODS)}")


def lr_schedule(start_lr: float, end_lr: float, steps: int) -> list[float]:
    """`steps` learning rates spaced evenly in log scale from start_lr to end_lr (both included)."""
    ratio = end_lr / start_lr
    return [start_lr * ratio ** (i / (steps - 1)) for i in range(steps)]


def despike(values: list[float]) -> list[float]:
    """`values` with isolated spikes replaced by the median of the 2 * SPIKE_WINDOW + 1 points around them (a Hampel
    filter; at the ends the window stays whole, so up to SPIKE_WINDOW spiking points at the very start are caught)."""
    out, n, width = list(values), len(values), 2 * SPIKE_WINDOW + 1
    for i, value in enumerate(values):
        first = max(0, min(i - SPIKE_WINDOW, n - width))
        near = values[first : first + width]
        median = statistics.median(near)
        mad = statistics.median(abs(v - median) for v in near)
        limit = max(SPIKE_MADS * 1.4826 * mad, SPIKE_MIN_RELATIVE * abs(median))
        if abs(value - median) > limit:
            out[i] = median
    return out


def ema(values: list[float], smoothing: float) -> list[float]:
    """Bias-corrected exponential moving average: weight `smoothing` on the newest value (beta = 1 - smoothing)."""
    beta, average, out = 1.0 - smoothing, 0.0, []
    for n, value in enumerate(values, start=1):
        average = beta * average + (1.0 - beta) * value
        out.append(average / (1.0 - beta**n) if beta < 1 else average)
    return out


def smooth_losses(losses: list[float], smoothing: float = DEFAULT_SMOOTHING) -> list[float]:
    """The curve the suggestions read: the bias-corrected EMA of the losses after `despike`."""
    return ema(despike(losses), smoothing)


def suggest(
    lrs: list[float], smoothed: list[float], method: str = "valley", losses: list[float] | None = None
) -> LRSuggestion:
    """`method`'s suggestion from a smoothed curve (`losses`, the raw curve, sets valley's starting level)."""
    if method not in METHODS:
        raise ConfigError("method", f"unknown method {method!r}; choose {' or '.join(METHODS)}")
    n = len(smoothed)
    if n < MIN_POINTS:
        return LRSuggestion.none(
            method,
            f"{method}: only {n} point{'s' if n != 1 else ''} before the test ended, too few to read a curve; "
            "lower the start lr",
        )
    return (_valley if method == "valley" else _steepest)(lrs, smoothed, losses if losses is not None else smoothed)


def _skip(n: int) -> int:
    return max(1, int(n * SKIP_FRACTION))


def _valley(lrs: list[float], s: list[float], raw: list[float]) -> LRSuggestion:
    n = len(s)
    lowest = min(range(n), key=lambda i: (s[i], i))
    # The valley: the smoothed loss's fall from the starting level to its minimum, from the last point before the
    # minimum still within VALLEY_TOP of the drop below the level.
    level = _starting_level(raw)
    drop = level - s[lowest]
    if drop <= MIN_DROP * abs(level) or lowest < 2:
        return LRSuggestion.none(
            "valley",
            "valley: the smoothed loss never falls below its starting level in this range; try a larger end lr or "
            "check the task",
        )
    top = level - VALLEY_TOP * drop
    start = next((i for i in range(lowest, -1, -1) if s[i] >= top), 0)
    if lowest - start < 2:
        start = max(0, lowest - 2)
    index = (start + lowest) // 2
    return LRSuggestion(
        "valley",
        lrs[index],
        s[index],
        index,
        f"valley: the middle of the smoothed loss's descent to its minimum ({lrs[start]:.1e} to "
        f"{lrs[lowest]:.1e}), at {lrs[index]:.1e}",
    )


def _starting_level(raw: list[float]) -> float:
    """The loss the test starts from: the median of the first 10% (at least 3) of the despiked raw losses, so a
    spike or noise there does not move it."""
    return statistics.median(despike(raw)[: max(3, _skip(len(raw)))])


def _steepest(lrs: list[float], s: list[float], raw: list[float]) -> LRSuggestion:
    n = len(s)
    # Skip the first 10%, and the decay of an early bump the filter left: start where the curve is back at its
    # starting level.
    level = _starting_level(raw)
    skip = next((i for i in range(_skip(n), n) if s[i] <= level), _skip(n))
    lowest = min(range(n), key=lambda i: (s[i], i))
    if lowest - skip < 2:
        return LRSuggestion.none(
            "steepest",
            f"steepest: the smoothed loss is lowest at {lrs[lowest]:.1e}, within the first 10% of the range, so there "
            "is no descent to read; lower the start lr",
        )
    x = [math.log10(lr) for lr in lrs]
    k = max(1, n // 50)  # a slope over a few points on each side: steadier than neighbour differences

    def slope(i: int) -> float:
        a, b = max(0, i - k), min(n - 1, i + k)
        return (s[b] - s[a]) / (x[b] - x[a])

    index = min(range(skip, lowest + 1), key=slope)
    if slope(index) >= 0:
        return LRSuggestion.none("steepest", "steepest: the smoothed loss never falls in this range")
    return LRSuggestion(
        "steepest",
        lrs[index],
        s[index],
        index,
        f"steepest: the smoothed loss falls fastest ({slope(index):.3g} per decade of lr) at "
        f"{lrs[index]:.1e}, before its minimum at {lrs[lowest]:.1e}",
    )


def suggestions(lrs: list[float], losses: list[float], smoothed: list[float]) -> dict[str, LRSuggestion]:
    """Every method's suggestion."""
    return {method: suggest(lrs, smoothed, method, losses) for method in METHODS}


# ----------------------------------------------------------------------------- the range test (torch)
def find_lr(
    config: RunConfig,
    *,
    start_lr: float = DEFAULT_START_LR,
    end_lr: float = DEFAULT_END_LR,
    steps: int = DEFAULT_STEPS,
    diverge_factor: float = DEFAULT_DIVERGE_FACTOR,
    smoothing: float = DEFAULT_SMOOTHING,
    method: str = "valley",
    progress: ProgressCallback | None = None,
    control: RunControl | None = None,
    devices: list[DeviceInfo] | None = None,
) -> LRFinderResult:
    """Run the LR range test for `config` (task, options, data, device, precision, optimizer, batch size, seed)
    on a fresh model; see the module doc. `control.stop()` ends it after the current step (the result keeps the
    points so far); pause waits between steps. Bad settings raise ConfigError before anything is built."""
    check_settings(start_lr, end_lr, steps, diverge_factor, smoothing, method)
    config = config.validate()
    from core.engine.control import RunControl
    from core.lab.timing import on_throwaway_trainer

    control, progress = control or RunControl(), progress or (lambda _progress: None)
    began = time.perf_counter()
    progress(LRFinderProgress("setup", 0, steps))

    def test(trainer):
        setup_seconds = time.perf_counter() - began
        curve = _run_range(trainer, lr_schedule(start_lr, end_lr, steps), diverge_factor, smoothing, control, progress)
        own = type(trainer.optimizer).__name__ if trainer.own_optimizer else None
        return trainer.cfg, trainer.device_info, trainer.plan, setup_seconds, own, curve

    # Constant schedule (the lr is set per step). Eager even when config.compile is on: compiling takes longer than
    # the test, and the curve is the same.
    cfg, info, plan, setup_seconds, own, curve = on_throwaway_trainer(
        config, "amp-lr-find-", test, devices, control, schedule="constant", max_steps=steps, compile=False
    )
    lrs, losses, skipped_lrs, stopped, steps_run = curve
    smoothed = smooth_losses(losses, smoothing)
    picks = suggestions(lrs, losses, smoothed)
    best = min(range(len(smoothed)), key=smoothed.__getitem__) if smoothed else None
    notes = []
    if skipped_lrs:
        notes.append(
            f"{len(skipped_lrs)} step{'s' if len(skipped_lrs) != 1 else ''} skipped by the GradScaler (fp16 "
            "gradient overflow), not on the curve"
        )
    if own:
        notes.append(
            f"the task chooses its optimizer ({own}, configure_optimizers): the curve is {own}'s, and its lr is set "
            "in the task's configure_optimizers, not by the lr setting"
        )
    if config.compile:
        notes.append(
            "ran eager (compile is off here: compiling would take longer than the test; the curve is the same)"
        )
    result = LRFinderResult(
        **LRFinderResult.setting(cfg, info),
        precision=plan.mode,
        autocast_dtype=str(plan.autocast_dtype).removeprefix("torch.") if plan.autocast_dtype else None,
        scaler=plan.use_scaler,
        optimizer=own or cfg.optimizer,
        own_optimizer=own is not None,
        batch_size=cfg.batch_size,
        start_lr=start_lr,
        end_lr=end_lr,
        steps=steps,
        steps_run=steps_run,
        diverge_factor=diverge_factor,
        smoothing=smoothing,
        method=method,
        lrs=lrs,
        losses=losses,
        smoothed=smoothed,
        skipped_lrs=skipped_lrs,
        suggestion=picks[method],
        suggestions=picks,
        stopped_early=stopped,
        best_loss=smoothed[best] if best is not None else None,
        best_lr=lrs[best] if best is not None else None,
        seconds=time.perf_counter() - began,
        setup_seconds=setup_seconds,
        notes=notes,
    )
    progress(LRFinderProgress("done", steps_run, steps, result=result))
    return result


def _run_range(
    trainer,
    schedule: list[float],
    diverge_factor: float,
    smoothing: float,
    control: RunControl,
    progress: ProgressCallback,
):
    """The steps of the range test on a set-up Trainer. Returns (lrs, losses, skipped_lrs, stopped, steps_run)."""
    from core.lab.timing import step_positions, step_sums

    sums, positions = step_sums(trainer), step_positions(trainer)
    grace = max(3, int(len(schedule) * SKIP_FRACTION))  # the ratio test waits for a few points
    skip_limit = max(5, grace)  # this many skipped steps in a row after the curve started: the gradients overflow
    lrs: list[float] = []
    losses: list[float] = []
    skipped_lrs: list[float] = []
    average = best = None
    beta, in_a_row, stopped, steps_run = 1.0 - smoothing, 0, "", 0

    def report(step: int, lr: float, loss: float | None, smoothed: float | None) -> None:
        progress(LRFinderProgress("step", step + 1, len(schedule), lr, loss, smoothed))

    for step, lr in enumerate(schedule):
        if control.paused:
            control.wait_while_paused()
        if control.stop_requested:
            stopped = f"stopped by request at lr {lr:.2e}"
            break
        order, index = next(positions)
        for group in trainer.optimizer.param_groups:
            group["lr"] = lr
        trainer.train_step(order, index, sums)
        steps_run += 1
        readout = sums.read(trainer.dist)  # the one host sync of the step: its loss (and fp16 overflow)
        loss = readout.loss
        if not math.isfinite(loss):
            stopped = f"the loss was {loss} at lr {lr:.2e}"
            report(step, lr, loss, None)
            break
        if readout.skipped:
            skipped_lrs.append(lr)
            in_a_row += 1 if losses else 0
            report(step, lr, None, None)
            if in_a_row >= skip_limit:
                stopped = f"the GradScaler skipped {in_a_row} steps in a row (gradient overflow) up to lr {lr:.2e}"
                break
            continue
        in_a_row = 0
        lrs.append(lr)
        losses.append(loss)
        # Online: the plain bias-corrected EMA, as fastai and Lightning stop on (the final curve is despiked too).
        average = beta * (average or 0.0) + smoothing * loss
        smoothed = average / (1.0 - beta ** len(losses)) if beta < 1 else average
        best = smoothed if best is None else min(best, smoothed)
        report(step, lr, loss, smoothed)
        if len(losses) > grace and smoothed > diverge_factor * best:
            stopped = (
                f"the smoothed loss {smoothed:.4g} rose above {diverge_factor:g}x the best ({best:.4g}) at lr {lr:.2e}"
            )
            break
    return lrs, losses, skipped_lrs, stopped, steps_run
