"""The batch-size finder's figures: the settings' defaults, each trial's outcome, a mode's result, the whole search's
result and the progress the GUI hears; the comparison with fp32 and the `train` command that uses a found batch.
Plain Python, no torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.lab import ToolResult
from core.lab.timing import speed_ratio
from core.text import size

DEFAULT_MARGIN = 0.10
DEFAULT_STEPS = 4  # a warm-up step, then 3 timed windows of one step (core.lab.timing)
TIMED_WINDOWS = 3
DEFAULT_TOLERANCE = 0.05
MAX_BATCH_CAP = 65_536
MAX_STEPS = 1_000

# Trial outcomes.
FITS = "fits"
OOM = "oom"  # the device ran out of memory: caught and released
OVER_MARGIN = "over margin"  # ran, but its peak passed (1 - margin) x the limit
PREDICTED_OVER = "predicted over"  # CPU: not run, its predicted footprint passes the budget


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
class BatchFinderResult(ToolResult):
    """The whole search: its settings, the device and memory source, and one ModeResult per requested mode."""

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
        found = [m for m in self.modes if m.status == "ok" and m.batch and m.samples_per_second and not emulated(m)]
        return max(found, key=lambda m: m.samples_per_second or 0.0) if found else None

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the `fit-batch --json` schema)."""
        data = super().to_dict()
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
                t.status, f"peak {peak}{budget}"
            )
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


def emulated(mode: ModeResult) -> bool:
    """fp8 without float8 tensor cores (AMP_FP8_EMULATE=1): its fit holds, its speed means nothing."""
    return "emulated" in mode.compute_dtype


def compare_to_fp32(results: list[ModeResult]) -> None:
    """Fill each found mode's ratios against fp32 and its sentence ('bf16 fits 1.8x the fp32 batch ...')."""
    base = next((m for m in results if m.mode == "fp32" and m.status == "ok" and m.batch), None)
    if base is None or not base.batch:
        return
    base_batch = base.batch
    for m in results:
        if m is base or m.status != "ok" or not m.batch:
            continue
        m.batch_ratio = m.batch / base_batch
        m.speed_ratio = speed_ratio(m.samples_per_second, base.samples_per_second)
        speed = f" at {m.speed_ratio:.1f}× the samples/s" if m.speed_ratio else ""
        speed = " (emulated: speed not meaningful)" if emulated(m) else speed
        if m.capped and base.capped:
            m.comparison = f"{m.mode} and fp32 both fit the cap of {m.batch:,}; {m.mode} runs it{speed}"
        else:
            least = "at least " if m.capped else ""
            m.comparison = (
                f"{m.mode} fits {least}{m.batch_ratio:.1f}× the fp32 batch ({m.batch:,} vs "
                f"{base.batch:,}{'+' if base.capped else ''}){speed}"
            )


def train_command(
    result: BatchFinderResult, mode: ModeResult, task_options: Sequence[str] = (), device: str | None = None
) -> str | None:
    """The `amp-console train` command that uses `mode`'s batch (None when it has none)."""
    import shlex

    from core.config import train_command as command

    if mode.batch is None:
        return None
    settings = {"task": result.task, **({"device": device} if device else {}), "precision": mode.mode}
    options = [a for option in task_options for a in ("-o", option)]
    return shlex.join(command({**settings, "batch_size": mode.batch}, *options, python=False))
