"""Batch-size finder: the largest micro-batch that fits on the device, per precision mode, with the evaluation
pass included and a safety margin below the device's limit.

Why not just the first batch that trains: a batch found by training steps alone can fail later at evaluation
or on a busier device (Lightning's scale_batch_size, Lightning-AI#8028). So every trial at batch B runs
`steps` optimizer steps (the trainer's own step: autocast, GradScaler, clipping) AND one evaluation pass of the
validation split in batches of B, and a batch "fits" only when the trial's peak stays within
(1 - margin) x the device's limit (default margin 0.10: about 10% headroom).

Search (`search_batch`, plain Python, no torch): start at `start` (the config's batch size), double while it
fits, then bisect between the last fit and the first failure until they are within `tolerance` of the fit
(5% by default) or 1 sample apart; capped at `max_batch` (default: the training rows, at most 65,536). A start
that does not fit is halved until one does.

Memory (one `MemoryProbe` per device kind):
- CUDA / XPU: the allocator's peak *reserved* bytes of the trial (reset before it; `max_memory_allocated` is
  reported too) against the limit = free memory (mem_get_info) + what this process had reserved when the mode's
  model and data were ready. An out-of-memory trial is caught, its gradients, optimizer state and GradScaler are
  dropped, the cache emptied, and the search goes on with a smaller batch.
- CPU: an ESTIMATE. The growth of the process's resident set during the trial (VmHWM, reset per trial through
  /proc/self/clear_refs) above its size when the mode was ready, against MemAvailable (psutil) at that
  moment. To stay safe a CPU trial larger than every trial so far is first predicted from the measured ones
  (a line through the two largest; proportional with one) and not run when the prediction passes the budget.
  The first trial (the start batch) is run unpredicted: start from a batch you could train with.
- MPS: unsupported (torch has no peak-memory statistics for it); the finder says so.
- `FakeProbe` for tests and demos: a limit in bytes and a cost per sample; it raises `FakeOutOfMemoryError`
  when a trial would pass the limit.

samples/s: the trial's optimizer steps after the first (the first is warm-up: the optimizer allocates its
state there) timed between two device syncs, one before and one at the end; with steps = 1 the one step.

The GUI runs `find_batch_sizes(config, ..., progress=cb, control=RunControl())` on a BackgroundJob: `progress`
gets a `BatchFinderProgress` before each mode ('setup'), after every trial ('trial', with the `Trial`) and after
each mode ('done', with its `ModeResult`); `control.stop()` ends the search after the current trial (the modes
not searched are 'stopped'); pause waits between trials. Bad settings raise ConfigError before anything is built.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from core.config import RunConfig
from core.errors import ConfigError, DeviceError
from core.text import size

if TYPE_CHECKING:
    from core.devices import DeviceInfo
    from core.engine.control import RunControl

DEFAULT_MARGIN = 0.10
DEFAULT_STEPS = 3
DEFAULT_TOLERANCE = 0.05
MAX_BATCH_CAP = 65_536
MAX_STEPS = 1_000

# Trial outcomes.
FITS = "fits"
OOM = "oom"  # the device ran out of memory: caught and released
OVER_MARGIN = "over margin"  # ran, but its peak passed (1 - margin) x the limit
PREDICTED_OVER = "predicted over"  # CPU: not run, its predicted footprint passes the budget
FAILED_OUTCOMES = (OOM, OVER_MARGIN, PREDICTED_OVER)


@dataclass
class Trial:
    """One batch size tried: what happened, its peak (the figure compared with the budget) and speed."""

    batch: int
    status: str  # FITS, OOM, OVER_MARGIN or PREDICTED_OVER
    phase: str  # 'start', 'double', 'halve' or 'bisect'
    peak_bytes: int | None = None  # measured (predicted for PREDICTED_OVER); None after an OOM
    allocated_bytes: int | None = None  # CUDA/XPU: max_memory_allocated of the trial
    samples_per_second: float | None = None
    seconds: float = 0.0  # the whole trial: steps and evaluation
    note: str = ""

    @property
    def fits(self) -> bool:
        return self.status == FITS


@dataclass
class ModeResult:
    """One precision mode: status 'ok' (batch found, or None when not even batch 1 fits), or 'skipped' /
    'failed' / 'stopped' with a reason. Ratios are against fp32's result."""

    mode: str
    status: str
    reason: str = ""
    compute_dtype: str = ""
    batch: int | None = None  # the largest batch that fits within the budget
    peak_bytes: int | None = None  # of that batch's trial
    samples_per_second: float | None = None  # of that batch's trial
    limit_bytes: int | None = None
    budget_bytes: int | None = None  # (1 - margin) x limit
    capped: bool = False  # the batch is max_batch and it fits: the device could take more
    first_failure: int | None = None  # the smallest batch that did not fit (None when none failed)
    trials: list[Trial] = field(default_factory=list)
    batch_ratio: float | None = None  # batch / fp32's batch
    speed_ratio: float | None = None  # samples/s / fp32's samples/s
    comparison: str = ""  # 'bf16 fits 1.8x the fp32 batch (1,536 vs 832) at 2.1x the samples/s'


@dataclass
class BatchFinderResult:
    """The whole search: its settings, the device and memory source, and one ModeResult per requested mode."""

    task: str
    task_options: dict
    device: str
    device_name: str
    device_type: str
    memory_source: str
    estimate: bool  # True on the CPU: RSS against available RAM is an estimate
    margin: float
    steps: int
    tolerance: float
    start: int
    max_batch: int
    eval_rows: int  # rows of the evaluation pass of every trial
    modes: list[ModeResult]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def mode(self, name: str) -> ModeResult | None:
        return next((m for m in self.modes if m.mode == name), None)

    @property
    def comparisons(self) -> list[str]:
        """The summary sentences, one per mode compared with fp32."""
        return [m.comparison for m in self.modes if m.comparison]

    def best(self) -> ModeResult | None:
        """The mode with the highest samples/s at its largest fitting batch (what to train with)."""
        found = [m for m in self.modes if m.status == "ok" and m.batch and m.samples_per_second]
        return max(found, key=lambda m: m.samples_per_second) if found else None

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the `fit-batch --json` schema)."""
        data = dataclasses.asdict(self)
        data["comparisons"] = self.comparisons
        best = self.best()
        data["best_mode"] = best.mode if best else None
        return data


@dataclass(frozen=True)
class BatchFinderProgress:
    """Handed to the progress callback before each mode ('setup'), after each trial ('trial') and after each
    mode ('done', with its result)."""

    mode: str
    index: int
    total: int
    phase: str
    trial: Trial | None = None
    trials: int = 0  # trials of this mode so far
    budget_bytes: int | None = None
    result: ModeResult | None = None

    def describe(self) -> str:
        if self.phase == "setup":
            return f"{self.mode}: setting up the model and data"
        if self.phase == "trial" and self.trial is not None:
            t = self.trial
            peak = size(t.peak_bytes)
            budget = f" of {size(self.budget_bytes)}" if self.budget_bytes else ""
            what = {PREDICTED_OVER: f"predicted {peak}{budget}, not run", OOM: "out of memory (recovered)"}.get(
                t.status, f"peak {peak}{budget}")
            speed = f", {t.samples_per_second:,.0f} samples/s" if t.samples_per_second else ""
            return f"{self.mode}: trial {self.trials} ({t.phase}) batch {t.batch:,}: {t.status}, {what}{speed}"
        r = self.result
        if r is None:
            return f"{self.mode}: done"
        if r.status != "ok":
            return f"{self.mode}: {r.status}" + (f" ({r.reason})" if r.reason else "")
        if r.batch is None:
            return f"{self.mode}: not even batch 1 fits"
        more = " (the cap; more would fit)" if r.capped else ""
        return f"{self.mode}: largest batch {r.batch:,}{more} after {len(r.trials)} trials"


ProgressCallback = Callable[[BatchFinderProgress], None]


# ----------------------------------------------------------------------------- settings and the search (no torch)
def check_settings(margin: float = DEFAULT_MARGIN, steps: int = DEFAULT_STEPS, tolerance: float = DEFAULT_TOLERANCE,
                   start: int | None = None, max_batch: int | None = None) -> None:
    """Raise ConfigError (field = the parameter's name) for settings the finder cannot run with."""
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and 0 <= margin < 0.9):
        raise ConfigError("margin", f"{margin} is out of range: a fraction of the limit from 0 to below 0.9 "
                                    f"(0.10 leaves 10% headroom)")
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


def search_batch(try_batch: Callable[[int, str], Trial], start: int, max_batch: int,
                 tolerance: float = DEFAULT_TOLERANCE,
                 should_stop: Callable[[], bool] = lambda: False) -> tuple[int | None, int | None, list[Trial], bool]:
    """Doubling then bisection over `try_batch(batch, phase) -> Trial`.

    Returns (largest fitting batch or None, smallest failing batch or None, the trials in order, stopped).
    """
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
        smaller = [b for b in self.points if b < b2]
        if not smaller:
            return math.ceil(p2 * batch / b2)
        b1 = max(smaller)
        slope = (p2 - self.points[b1]) / (b2 - b1)
        if slope <= 0:  # noise (allocator caching): fall back to the conservative proportional figure
            return math.ceil(p2 * batch / b2)
        return math.ceil(p2 + slope * (batch - b2))


# ----------------------------------------------------------------------------- memory probes
class MemoryProbe(Protocol):
    """How a device's memory is read for the finder (see the module's docstring)."""

    kind: str
    source: str  # one line: what is measured against what
    estimate: bool  # True where the figures are an estimate (the CPU)
    predicts: bool  # True: trials beyond the measured ones are predicted first, and not run when over budget
    oom_errors: tuple[type[BaseException], ...]

    def limit(self) -> int: ...  # the device's limit for this mode, read once when its model and data are ready
    def begin_trial(self, batch: int) -> None: ...
    def end_trial(self) -> tuple[int, int | None]: ...  # (peak compared with the budget, allocated peak or None)
    def synchronize(self) -> None: ...
    def release(self) -> None: ...  # after every trial, an OOM included: free what it left


class FakeOutOfMemoryError(RuntimeError):
    """What FakeProbe raises when a trial would pass its limit (as torch.OutOfMemoryError would)."""


class FakeProbe:
    """A pretend device for tests and demos: a trial at batch B takes fixed_bytes + per_sample_bytes * B; past
    limit_bytes `begin_trial` raises FakeOutOfMemoryError (the allocation that fails)."""

    kind = "fake"
    estimate = False
    predicts = False
    oom_errors = (FakeOutOfMemoryError,)

    def __init__(self, limit_bytes: int, per_sample_bytes: int, fixed_bytes: int = 0):
        self.limit_bytes, self.per_sample_bytes, self.fixed_bytes = limit_bytes, per_sample_bytes, fixed_bytes
        self.source = f"a fake device of {size(limit_bytes)} ({per_sample_bytes:,} bytes per sample)"
        self.batch = 0
        self.begun: list[int] = []
        self.released = 0

    def footprint(self, batch: int) -> int:
        return self.fixed_bytes + self.per_sample_bytes * batch

    def limit(self) -> int:
        return self.limit_bytes

    def begin_trial(self, batch: int) -> None:
        self.batch = batch
        self.begun.append(batch)
        if self.footprint(batch) > self.limit_bytes:
            raise FakeOutOfMemoryError(f"fake device: tried to allocate {self.footprint(batch):,} bytes of "
                                       f"{self.limit_bytes:,}")

    def end_trial(self) -> tuple[int, int | None]:
        return self.footprint(self.batch), None

    def synchronize(self) -> None:
        pass

    def release(self) -> None:
        self.released += 1


class AcceleratorProbe:
    """CUDA (and ROCm) or XPU: the caching allocator's statistics."""

    estimate = False
    predicts = False

    def __init__(self, device) -> None:
        import torch

        self.device = device
        self.kind = device.type
        self.api = torch.cuda if device.type == "cuda" else torch.xpu
        self.oom_errors = (torch.OutOfMemoryError,)
        self.source = (f"{device.type.upper()} allocator peak reserved bytes per trial against free memory + this "
                       f"process's reserved memory")

    def limit(self) -> int:
        self.release()
        free, _total = self.api.mem_get_info(self.device)
        return int(free + self.api.memory_reserved(self.device))

    def begin_trial(self, batch: int) -> None:
        self.synchronize()
        self.api.reset_peak_memory_stats(self.device)

    def end_trial(self) -> tuple[int, int | None]:
        self.synchronize()
        return int(self.api.max_memory_reserved(self.device)), int(self.api.max_memory_allocated(self.device))

    def synchronize(self) -> None:
        self.api.synchronize(self.device)

    def release(self) -> None:
        from core.devices import collect_garbage

        collect_garbage()
        self.api.synchronize(self.device)
        self.api.empty_cache()


class CpuProbe:
    """The CPU: growth of the process's RSS during a trial against MemAvailable (an estimate; see the doc)."""

    kind = "cpu"
    estimate = True
    predicts = True

    def __init__(self) -> None:
        import torch

        self.oom_errors = (torch.OutOfMemoryError, MemoryError)
        self.resettable = _can_reset_peak_rss()
        how = "VmHWM reset per trial" if self.resettable else "ru_maxrss, never reset: conservative"
        self.source = f"process RSS growth per trial ({how}) against MemAvailable"
        self.base = 0

    def limit(self) -> int:
        from core.devices import available_ram

        self.release()
        self.base = _current_rss()
        available = available_ram()
        if available is None:
            raise DeviceError("fit-batch on the CPU needs the available RAM, which psutil cannot read here")
        return available

    def begin_trial(self, batch: int) -> None:
        if self.resettable:
            _reset_peak_rss()

    def end_trial(self) -> tuple[int, int | None]:
        return max(0, _peak_rss() - self.base), None

    def synchronize(self) -> None:
        pass

    def release(self) -> None:
        from core.devices import collect_garbage

        collect_garbage()
        _malloc_trim()


def _can_reset_peak_rss() -> bool:
    try:
        _reset_peak_rss()
        return _read_status_kib("VmHWM") is not None
    except OSError:
        return False


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:  # "5": reset the peak RSS (Linux >= 4.0)
        f.write("5")


def _read_status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _current_rss() -> int:
    from core.devices import resident_set

    value = resident_set()
    return value if value is not None else _peak_rss()


def _peak_rss() -> int:
    value = _read_status_kib("VmHWM")
    if value is not None:
        return value
    from core.devices import peak_resident_set

    return peak_resident_set() or 0


def _malloc_trim() -> None:
    """Hand freed heap pages back to the OS (glibc), so the next trial's RSS starts from the same place."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def make_probe(device) -> MemoryProbe:
    """The probe for a torch.device; DeviceError where the device has no memory statistics (MPS)."""
    if device.type in ("cuda", "xpu"):
        return AcceleratorProbe(device)
    if device.type == "cpu":
        return CpuProbe()
    raise DeviceError(f"fit-batch cannot measure memory on {device.type}: torch has no peak-memory statistics "
                      f"for it; run it on a CUDA/XPU GPU or the CPU")


# ----------------------------------------------------------------------------- one mode's search
class TrialWork(Protocol):
    """What a trial runs: `run(batch)` trains and evaluates at that batch and returns (timed seconds, timed
    samples); `recover()` drops what an out-of-memory error left half-built (gradients, optimizer state)."""

    def run(self, batch: int) -> tuple[float, int]: ...
    def recover(self) -> None: ...


def search_mode(work: TrialWork, probe: MemoryProbe, mode: str, start: int, max_batch: int,
                margin: float = DEFAULT_MARGIN, tolerance: float = DEFAULT_TOLERANCE,
                control: RunControl | None = None, on_trial: Callable[[Trial, int, int], None] | None = None,
                limit_bytes: int | None = None) -> ModeResult:
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
    result = ModeResult(mode=mode, status="stopped" if stopped else "ok", reason="stopped by request" if stopped
                        else "", limit_bytes=limit, budget_bytes=budget, trials=trials, first_failure=failure)
    if fit is not None:
        best = next(t for t in reversed(trials) if t.batch == fit and t.fits)
        result.batch, result.peak_bytes, result.samples_per_second = fit, best.peak_bytes, best.samples_per_second
        result.capped = fit >= max_batch
    return result


def _run_trial(work: TrialWork, probe: MemoryProbe, batch: int, phase: str, budget: int,
               predictor: FootprintPredictor | None) -> Trial:
    """One trial; an out-of-memory error is caught, what it left is dropped, and the memory released."""
    if predictor is not None:
        predicted = predictor.predict(batch)
        if predicted is not None and predicted > budget:
            return Trial(batch, PREDICTED_OVER, phase, peak_bytes=predicted,
                         note="predicted from the smaller trials; not run, to keep the machine safe")
    began = time.perf_counter()
    oom = ""
    try:
        probe.begin_trial(batch)
        seconds, samples = work.run(batch)
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
    speed = samples / seconds if seconds > 0 else None
    return Trial(batch, FITS if peak <= budget else OVER_MARGIN, phase, peak_bytes=peak, allocated_bytes=allocated,
                 samples_per_second=speed, seconds=time.perf_counter() - began)


# ----------------------------------------------------------------------------- the real trials (torch)
class TrainerWork:
    """Trials on a set-up Trainer: `steps` of the trainer's own optimizer step at the batch, then one evaluation
    pass of the validation split (the first `eval_rows` rows) in batches of that size."""

    def __init__(self, trainer, steps: int, probe: MemoryProbe, eval_rows: int | None = None):
        from core.data.batching import split_length

        self.trainer, self.steps, self.probe = trainer, steps, probe
        self.train_split = trainer.batches.split
        rows = split_length(trainer.val)
        self.eval_rows = rows if eval_rows is None else min(rows, eval_rows)
        self.val = {key: value[:self.eval_rows] for key, value in trainer.val.items()}

    def run(self, batch: int) -> tuple[float, int]:
        from core.data.batching import EpochBatches
        from core.engine.distributed import DistContext
        from core.engine.evaluation import evaluate_split
        from core.engine.precision import matmul_precision
        from core.engine.step_metrics import StepAccumulator

        t = self.trainer
        t.batches = EpochBatches(self.train_split, batch, t.cfg.seed, t.device)
        sums = StepAccumulator(t.device, count_only_finite=t.plan.use_scaler)  # the steps add their losses here
        order, per_epoch = t.batches.order(0), t.batches.batches_per_epoch  # one micro-batch per step
        with matmul_precision(t.plan):
            began = time.perf_counter()
            t.train_step(order, 0, sums)
            timed = self.steps - 1
            if timed:  # the first step is warm-up: the optimizer allocates its state there
                self.probe.synchronize()
                began = time.perf_counter()
                for step in range(1, self.steps):
                    t.train_step(order, step % per_epoch, sums)
            self.probe.synchronize()
            seconds = time.perf_counter() - began
            if self.eval_rows:
                evaluate_split(t.task, t.raw_model, self.val, batch, DistContext(), t.plan.autocast)
        return seconds, batch * max(1, timed)

    def recover(self) -> None:
        """Drop gradients, the optimizer's state (possibly half-built) and the GradScaler's per-step state."""
        t = self.trainer
        t.optimizer.zero_grad(set_to_none=True)
        t.optimizer.state.clear()
        t.scaler = t.plan.make_scaler()
        t.raw_model.train()


def find_batch_sizes(config: RunConfig, modes: Sequence[str] | None = None, *, margin: float = DEFAULT_MARGIN,
                     steps: int = DEFAULT_STEPS, tolerance: float = DEFAULT_TOLERANCE, start: int | None = None,
                     max_batch: int | None = None, eval_rows: int | None = None, limit_bytes: int | None = None,
                     probe: MemoryProbe | None = None, devices: list[DeviceInfo] | None = None,
                     progress: ProgressCallback | None = None, control: RunControl | None = None) -> BatchFinderResult:
    """The largest batch of `config`'s task in each requested precision mode (None = every mode; fp32 first,
    modes the device cannot run are 'skipped' with its reason).

    `start`: the first batch (default the config's batch size); `max_batch`: the cap (default the training rows,
    at most 65,536); `eval_rows`: rows of each trial's evaluation pass (default the whole validation split, as
    the trainer evaluates); `limit_bytes`: use this limit instead of the device's (plan for a smaller device);
    `probe`: the memory probe (default the device's; FakeProbe in tests). Each mode gets a fresh model from the
    config's seed in a temporary run folder; nothing persistent is written.
    """
    check_settings(margin, steps, tolerance, start, max_batch)
    config = config.validate()
    from core.devices import device_info, list_devices
    from core.engine.control import RunControl
    from core.engine.trainer import Trainer
    from core.lab.precision_sweep import requested_modes

    control = control or RunControl()
    began = time.perf_counter()
    devices = devices if devices is not None else list_devices()
    info = device_info(config.device, devices)
    compiled = config.compile  # tried eager: a compiled model would recompile for every batch size tried
    config = config.replace(device=info.id, compile=False)
    order = requested_modes(list(modes) if modes else None)
    first = start or config.batch_size
    from core.devices import torch_device

    probe = probe if probe is not None else make_probe(torch_device(info))
    results: list[ModeResult] = []
    facts: dict = {}
    for index, mode in enumerate(order):
        if control.stop_requested:
            results.append(ModeResult(mode=mode, status="stopped", reason="stopped by request"))
        elif mode not in info.precisions:
            results.append(ModeResult(mode=mode, status="skipped",
                                      reason=info.unsupported.get(mode, f"not supported on {info.id}")))
        else:
            if progress:
                progress(BatchFinderProgress(mode, index, len(order), "setup"))
            results.append(_search_one_mode(Trainer, config, info, mode, index, len(order), first, max_batch,
                                            margin, steps, tolerance, eval_rows, limit_bytes, probe, devices,
                                            progress, control, facts))
        if progress:
            progress(BatchFinderProgress(mode, index, len(order), "done", result=results[-1]))
    compare_to_fp32(results)
    notes = []
    if probe.estimate:
        notes.append("CPU figures are an estimate: the process's RSS growth against the RAM available when each "
                     "mode started; other programs can take that RAM later")
    if limit_bytes:
        notes.append(f"limit set to {size(limit_bytes)} instead of the device's")
    if compiled:
        notes.append("batch sizes were tried eager (compile is off here: each size tried would be a recompile); "
                     "compiled training usually keeps fewer activations, so these sizes err on the safe side")
    return BatchFinderResult(
        task=config.task, task_options=dict(config.task_options), device=info.id, device_name=info.name,
        device_type=info.type, memory_source=probe.source, estimate=probe.estimate,
        margin=margin, steps=steps, tolerance=tolerance, start=first, max_batch=facts.get("max_batch", max_batch or 0),
        eval_rows=facts.get("eval_rows", 0), modes=results, seconds=time.perf_counter() - began, notes=notes)


def _search_one_mode(trainer_class, config: RunConfig, info: DeviceInfo, mode: str, index: int, total: int,
                     start: int, max_batch: int | None, margin: float, steps: int, tolerance: float,
                     eval_rows: int | None, limit_bytes: int | None, probe: MemoryProbe, devices, progress, control,
                     facts: dict) -> ModeResult:
    from core.data.batching import split_length

    failed = ""
    with tempfile.TemporaryDirectory(prefix="amp-fit-batch-") as out_dir:
        # A throwaway run: constant lr, one micro-batch per step, no evaluation, checkpoint or best tracking.
        cfg = config.replace(precision=mode, batch_size=start, grad_accum=1, out_dir=out_dir, schedule="constant",
                             warmup_steps=0, max_steps=steps, log_interval=1_000_000,
                             eval_interval=1_000_000_000, checkpoint_interval=0, checkpoint_minutes=0.0, keep_best=0,
                             early_stop_patience=0, early_stop_divergence=0.0, tensorboard=False)
        trainer = trainer_class(cfg, devices=devices)
        work = None
        try:
            try:
                trainer.setup()
            except ConfigError as exc:
                if exc.field == "batch_size":  # the start batch exceeds the training rows
                    raise ConfigError("start", str(exc).split(": ", 1)[1]) from None
                raise
            rows = split_length(trainer.batches.split)
            cap = min(max_batch or MAX_BATCH_CAP, rows)
            facts["max_batch"] = cap
            work = TrainerWork(trainer, steps, probe, eval_rows)
            facts["eval_rows"] = work.eval_rows

            def on_trial(trial: Trial, count: int, budget: int) -> None:
                if progress:
                    progress(BatchFinderProgress(mode, index, total, "trial", trial=trial, trials=count,
                                                 budget_bytes=budget))

            result = search_mode(work, probe, mode, min(start, cap), cap, margin, tolerance, control, on_trial,
                                 limit_bytes)
            result.compute_dtype = trainer.plan.compute_dtype_name
            if cap < (max_batch or MAX_BATCH_CAP) and result.capped:
                result.reason = f"all {rows:,} training rows fit in one batch: the data, not memory, is the limit"
        except probe.oom_errors as exc:  # the model and data themselves do not fit
            failed = (str(exc).strip().splitlines() or ["out of memory"])[0][:200]
        finally:
            trainer.cleanup()
            work = trainer = None  # noqa: F841  (drop the model, data and optimizer before releasing)
            probe.release()
    if failed:
        return ModeResult(mode=mode, status="failed", reason=f"setting up the model ran out of memory: {failed}")
    return result


def compare_to_fp32(results: list[ModeResult]) -> None:
    """Fill each found mode's ratios against fp32 and its sentence ('bf16 fits 1.8x the fp32 batch ...')."""
    base = next((m for m in results if m.mode == "fp32" and m.status == "ok" and m.batch), None)
    if base is None:
        return
    for m in results:
        if m is base or m.status != "ok" or not m.batch:
            continue
        m.batch_ratio = m.batch / base.batch
        if m.samples_per_second and base.samples_per_second:
            m.speed_ratio = m.samples_per_second / base.samples_per_second
        speed = f" at {m.speed_ratio:.1f}× the samples/s" if m.speed_ratio else ""
        if m.capped and base.capped:
            m.comparison = f"{m.mode} and fp32 both fit the cap of {m.batch:,}; {m.mode} runs it{speed}"
        else:
            least = "at least " if m.capped else ""
            m.comparison = (f"{m.mode} fits {least}{m.batch_ratio:.1f}× the fp32 batch ({m.batch:,} vs "
                            f"{base.batch:,}{'+' if base.capped else ''}){speed}")


def train_command(result: BatchFinderResult, mode: ModeResult, task_options: Sequence[str] = (),
                  device: str | None = None) -> str | None:
    """The `amp-console train` command that uses `mode`'s batch (None when it has none)."""
    import shlex

    if mode.batch is None:
        return None
    parts = ["amp-console", "train", "--task", result.task]
    if device:
        parts += ["--device", device]
    parts += ["--precision", mode.mode, "--batch-size", str(mode.batch)]
    for option in task_options:
        parts += ["-o", option]
    return shlex.join(parts)

