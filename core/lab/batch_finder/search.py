"""The search (plain Python, no torch): settings checked, doubling then bisection over a trial function, the CPU's
footprint predictor, and one mode's search over a `TrialWork` on a `MemoryProbe` (see core.lab.batch_finder)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from core.errors import ConfigError
from core.lab.batch_finder.results import (
    DEFAULT_MARGIN,
    DEFAULT_STEPS,
    DEFAULT_TOLERANCE,
    FITS,
    MAX_STEPS,
    OOM,
    OVER_MARGIN,
    PREDICTED_OVER,
    ModeResult,
    Trial,
)

if TYPE_CHECKING:
    from core.engine.control import RunControl
    from core.lab.batch_finder.probes import MemoryProbe


def check_settings(
    margin: float = DEFAULT_MARGIN,
    steps: int = DEFAULT_STEPS,
    tolerance: float = DEFAULT_TOLERANCE,
    start: int | None = None,
    max_batch: int | None = None,
) -> None:
    """Raise ConfigError (field = the parameter's name) for settings the finder cannot run with."""
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and 0 <= margin < 0.9):
        raise ConfigError(
            "margin",
            f"{margin} is out of range: a fraction of the limit from 0 to below 0.9 (0.10 leaves 10% headroom)",
        )
    if not (isinstance(steps, int) and 1 <= steps <= MAX_STEPS):
        raise ConfigError("steps", f"{steps} is out of range: must be between 1 and {MAX_STEPS:,}")
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and 0 <= tolerance <= 0.5):
        raise ConfigError("tolerance", f"{tolerance} is out of range: a fraction from 0 (exact) to 0.5")
    for name, value in (("start", start), ("max_batch", max_batch)):
        if value is not None and not (isinstance(value, int) and 1 <= value <= 2**31):
            raise ConfigError(name, f"{value} must be a whole number of samples, at least 1")
    if start is not None and max_batch is not None and start > max_batch:
        raise ConfigError("start", f"{start:,} is above max_batch ({max_batch:,})")


def close_enough(fit: int, failure: int, tolerance: float) -> bool:
    """Whether bisection can stop: the largest fit and the smallest failure are within `tolerance` of the fit, or
    1 sample apart (so the answer is within tolerance of the true largest batch)."""
    return failure - fit <= max(1, int(tolerance * fit))


def search_batch(
    try_batch: Callable[[int, str], Trial],
    start: int,
    max_batch: int,
    tolerance: float = DEFAULT_TOLERANCE,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[int | None, int | None, list[Trial], bool]:
    """Doubling then bisection over `try_batch(batch, phase) -> Trial`: (largest fitting batch or None, smallest
    failing batch or None, the trials in order, stopped)."""
    trials: list[Trial] = []
    fit: int | None = None
    failure: int | None = None
    batch, phase = min(start, max_batch), "start"
    while True:  # double from the start (or halve down to a batch that fits)
        if should_stop():
            return fit, failure, trials, True
        trial = try_batch(batch, phase)
        trials.append(trial)
        if trial.fits:
            fit = batch
            if batch >= max_batch or failure is not None:
                break
            batch, phase = min(2 * batch, max_batch), "double"
        else:
            failure = batch
            if fit is not None or batch == 1:
                break
            batch, phase = max(1, batch // 2), "halve"
    while fit is not None and failure is not None and not close_enough(fit, failure, tolerance):
        if should_stop():
            return fit, failure, trials, True
        middle = (fit + failure) // 2
        trial = try_batch(middle, "bisect")
        trials.append(trial)
        if trial.fits:
            fit = middle
        else:
            failure = middle
    return fit, failure, trials, False


class FootprintPredictor:
    """Predicts a trial's peak from the trials measured so far (CPU safety): a line through the two largest
    measured batches (its slope at least the per-sample cost between them), proportional with one point; no
    prediction for a batch at or below a measured one."""

    def __init__(self) -> None:
        self.points: dict[int, int] = {}

    def add(self, batch: int, peak: int | None) -> None:
        if peak is not None:
            self.points[batch] = max(peak, self.points.get(batch, 0))

    def predict(self, batch: int) -> int | None:
        if not self.points or batch <= max(self.points):
            return None
        b2 = max(self.points)
        p2 = self.points[b2]
        b1 = max((b for b in self.points if b < b2), default=None)
        slope = (p2 - self.points[b1]) / (b2 - b1) if b1 is not None else 0.0
        if slope <= 0:  # one point, or noise (allocator caching): the conservative proportional figure
            return math.ceil(p2 * batch / b2)
        return math.ceil(p2 + slope * (batch - b2))


class TrialWork(Protocol):
    """What a trial runs: `run(batch)` trains and evaluates at that batch and returns its samples/s (None when not
    timed); `recover()` drops what an out-of-memory error left half-built (gradients, optimizer state)."""

    def run(self, batch: int) -> float | None: ...
    def recover(self) -> None: ...


def search_mode(
    work: TrialWork,
    probe: MemoryProbe,
    mode: str,
    start: int,
    max_batch: int,
    margin: float = DEFAULT_MARGIN,
    tolerance: float = DEFAULT_TOLERANCE,
    control: RunControl | None = None,
    on_trial: Callable[[Trial, int, int], None] | None = None,
    limit_bytes: int | None = None,
) -> ModeResult:
    """Search one mode's largest batch with `work` on `probe` (see the module's docstring). `on_trial(trial,
    count, budget)` hears each trial; `limit_bytes` replaces the probe's limit (plan for a smaller device)."""
    limit = int(limit_bytes) if limit_bytes else probe.limit()
    budget = int((1.0 - margin) * limit)
    predictor = FootprintPredictor() if probe.predicts else None
    done: list[Trial] = []

    def try_batch(batch: int, phase: str) -> Trial:
        if control is not None and control.paused:
            control.wait_while_paused()
        trial = _run_trial(work, probe, batch, phase, budget, predictor)
        done.append(trial)
        if on_trial:
            on_trial(trial, len(done), budget)
        return trial

    should_stop = (lambda: control.stop_requested) if control is not None else (lambda: False)
    fit, failure, trials, stopped = search_batch(try_batch, start, max_batch, tolerance, should_stop)
    result = ModeResult(
        mode=mode,
        status="stopped" if stopped else "ok",
        reason="stopped by request" if stopped else "",
        limit_bytes=limit,
        budget_bytes=budget,
        trials=trials,
        first_failure=failure,
    )
    if fit is not None:
        best = next(t for t in reversed(trials) if t.batch == fit and t.fits)
        result.batch, result.peak_bytes, result.samples_per_second = fit, best.peak_bytes, best.samples_per_second
        result.capped = fit >= max_batch
    return result


def _run_trial(
    work: TrialWork, probe: MemoryProbe, batch: int, phase: str, budget: int, predictor: FootprintPredictor | None
) -> Trial:
    """One trial; an out-of-memory error is caught, what it left is dropped, and the memory released."""
    if predictor is not None:
        predicted = predictor.predict(batch)
        if predicted is not None and predicted > budget:
            return Trial(
                batch,
                PREDICTED_OVER,
                phase,
                peak_bytes=predicted,
                note="predicted from the smaller trials; not run, to keep the machine safe",
            )
    began = time.perf_counter()
    oom = ""
    try:
        probe.begin_trial(batch)
        speed = work.run(batch)
    except probe.oom_errors as exc:
        oom = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    # Outside the except block: the exception and its traceback (which hold the trial's tensors) are gone.
    if oom:
        work.recover()
        probe.release()
        return Trial(batch, OOM, phase, seconds=time.perf_counter() - began, note=oom)
    peak, allocated = probe.end_trial()
    probe.release()
    if predictor is not None:
        predictor.add(batch, peak)
    return Trial(
        batch,
        FITS if peak <= budget else OVER_MARGIN,
        phase,
        peak_bytes=peak,
        allocated_bytes=allocated,
        samples_per_second=speed,
        seconds=time.perf_counter() - began,
    )
