"""A precision sweep's results (docs/precision-lab.md): a row per measured mode (SweepRow), each against the
reference row (fp32), why each is or is not recommended, and the mode to recommend: the fastest whose loss tracks
the reference's and whose speedup holds up beyond timing noise. core.lab.precision_sweep measures the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.lab import ToolResult
from core.lab.timing import speed_ratio

# Losses within this relative (or absolute) distance of fp32's after the same steps count as "the same".
LOSS_REL_TOLERANCE = 0.05
LOSS_ABS_TOLERANCE = 0.02
# A lower precision must beat fp32 by more than timing noise to be worth its numerical risk.
MIN_SPEEDUP = 1.05
# A mode whose slowest timed window took this many times its fastest is "noisy": something else shared the device.
NOISE_SPREAD = 1.5
# fp8 casts every converted layer's inputs each step: it is worth its rounding only this much faster than bf16.
FP8_OVER_BF16 = 1.10


@dataclass
class SweepRow:
    """What one precision mode measured (status 'ok'), or why it was not ('skipped' / 'failed')."""

    mode: str
    status: str
    reason: str = ""
    compute_dtype: str = ""
    scaler: bool = False
    step_ms: float | None = None
    step_ms_windows: list[float] = field(default_factory=list)
    samples_per_second: float | None = None
    tokens_per_second: float | None = None
    peak_memory_bytes: int | None = None
    loss: float | None = None
    skipped_steps: int = 0
    speedup: float | None = None
    memory_ratio: float | None = None
    loss_delta: float | None = None
    threads: int | None = None  # CPU threads torch used inside an op while this mode was measured
    compiled: bool = False  # torch.compile asked for (RunConfig.compile); a fallback to eager is in `reason`
    checkpointed: bool = False  # activation checkpointing asked for; a task without blocks says so in `reason`
    compile_seconds: float | None = None  # the compile (the trainer's timed warm-up), apart from the windows
    optimizer: str = ""  # an optimizer variant (e.g. adamw8bit); "" = the config's own
    memory_windows: list[int] = field(default_factory=list)  # bytes in use after the last warm-up and each window
    memory_growth: float | None = None  # MiB per step, when memory rose after every window (memory_growth())
    why: str = ""  # the verdict: speed, memory, loss drift against the reference, and why (not) recommended

    @property
    def label(self) -> str:
        """'bf16', 'bf16 + compile', 'fp32 + compile + act. ckpt', 'bf16-pure + adamw8bit': the mode and what
        else was on."""
        extras = ((" + compile", self.compiled), (" + act. ckpt", self.checkpointed), (f" + {self.optimizer}", 1))
        return self.mode + "".join(text for text, on in extras if on and text != " + ")


@dataclass
class SweepResult(ToolResult):
    """A whole sweep: the setting it ran in, one row per mode and the recommended mode."""

    batch_size: int
    steps: int
    repeats: int
    warmup_steps: int
    memory_source: str
    rows: list[SweepRow]
    recommended: str | None = None
    recommendation: str = ""
    threads: int | None = None  # CPU threads torch used (the measured rows'); see SweepRow.threads
    reference: str = "fp32"  # the row every ratio is against: 'fp32', or 'fp32 eager' when compile rows exist
    recommended_label: str | None = None  # the recommended row's label (`recommended` is its precision mode)

    def row(self, mode: str, compiled: bool | None = None, checkpointed: bool | None = None) -> SweepRow | None:
        """The (first) row of `mode`, with compile / activation checkpointing as given; None when the sweep lacks it."""
        rows = (r for r in self.rows if r.mode == mode and compiled in (None, r.compiled))
        return next((r for r in rows if checkpointed in (None, r.checkpointed)), None)


def reference_row(rows: list[SweepRow]) -> SweepRow | None:
    """The row ratios are against: fp32 eager without activation checkpointing when measured, else the first fp32
    row."""
    fp32 = [r for r in rows if r.mode == "fp32" and r.status == "ok" and not r.optimizer]
    return next((r for r in fp32 if not r.compiled and not r.checkpointed), fp32[0] if fp32 else None)


def reference_label(rows: list[SweepRow]) -> str:
    """'fp32', or 'fp32 eager' when compiled rows are compared with it."""
    base = reference_row(rows)
    if base is None:
        return "fp32"
    eager = not base.compiled and any(r.compiled for r in rows)
    return base.label + (" eager" if eager else "")


def compare_to_fp32(rows: list[SweepRow]) -> None:
    """Fill speedup, memory ratio and loss delta of every measured row against the reference row (fp32)."""
    base = reference_row(rows)
    if base is None:
        return
    for row in rows:
        if row.status != "ok":
            continue
        row.speedup = speed_ratio(row.samples_per_second, base.samples_per_second)
        if base.peak_memory_bytes and row.peak_memory_bytes:
            row.memory_ratio = row.peak_memory_bytes / base.peak_memory_bytes
        if base.loss is not None and row.loss is not None:
            row.loss_delta = row.loss - base.loss


def loss_matches(row: SweepRow, fp32_loss: float | None) -> bool:
    """Whether `row`'s loss after the same steps is close enough to fp32's to call the mode healthy."""
    if row.loss is None or fp32_loss is None or row.loss != row.loss:  # NaN != NaN
        return False
    return abs(row.loss - fp32_loss) <= max(LOSS_ABS_TOLERANCE, LOSS_REL_TOLERANCE * abs(fp32_loss))


def noise_note(row: SweepRow) -> str:
    """'noisy, windows took 1.20-3.40 ms/step (...)' when the timed windows spread more than NOISE_SPREAD, else ''."""
    windows = row.step_ms_windows
    if len(windows) < 2 or max(windows) <= NOISE_SPREAD * min(windows):
        return ""
    return f"noisy, windows took {min(windows):.2f}-{max(windows):.2f} ms/step (something else shared the device?)"


def holds_up(row: SweepRow, base: SweepRow) -> bool:
    """Whether `row` beats `base` beyond timing noise: its slowest timed window faster than the reference's fastest."""
    if not row.step_ms_windows or not base.step_ms_windows:
        return (row.speedup or 0.0) >= MIN_SPEEDUP
    return max(row.step_ms_windows) * MIN_SPEEDUP <= min(base.step_ms_windows)


def fp8_blocker(row: SweepRow, rows: list[SweepRow], base: SweepRow) -> str:
    """Why an fp8 row is not worth recommending ('' when it is, or is not fp8): emulated, not FP8_OVER_BF16 x the
    bf16 row of the same variant, or its loss drifting from bf16's or the reference's."""
    if row.mode != "fp8":
        return ""
    if "emulated" in row.compute_dtype:
        return "emulated: speed not meaningful"
    same = [r for r in rows if r.mode == "bf16" and r.status == "ok"]
    key = (row.compiled, row.checkpointed, row.optimizer)
    bf16 = next((r for r in same if (r.compiled, r.checkpointed, r.optimizer) == key), same[0] if same else None)
    ratio = speed_ratio(row.samples_per_second, bf16.samples_per_second) if bf16 else None
    if bf16 is None or ratio is None:
        return "no bf16 row to compare with: fp8 is recommended only when measurably faster than bf16"
    if ratio < FP8_OVER_BF16:
        return f"{ratio:.2f}x bf16's samples/s, under the {FP8_OVER_BF16:.2f}x fp8 needs to be worth its rounding"
    if not (loss_matches(row, bf16.loss) and loss_matches(row, base.loss)):
        return f"loss drifts: {row.loss:.4f} vs bf16 {bf16.loss:.4f}"
    return ""


def explain_rows(rows: list[SweepRow], best: SweepRow | None) -> None:
    """Fill each measured row's `why`: speed, memory and loss against the reference, memory that keeps growing,
    and why the row is or is not recommended."""
    base = reference_row(rows)
    if base is None:
        return
    reference = reference_label(rows)
    for r in rows:
        if r.status != "ok":
            continue
        parts = [] if r is base else [f"{r.speedup or 0:.2f}x {reference}'s speed"]
        parts += [f"{r.memory_ratio:.2f}x memory"] if r.memory_ratio and r is not base else []
        if r is not base and r.loss_delta is not None:
            drift = "same loss" if loss_matches(r, base.loss) else "loss drifts"
            parts.append(f"{drift} ({r.loss_delta:+.4f})")
        if r.memory_growth:
            parts.append(f"memory grows {r.memory_growth:.1f} MiB/step: a per-shape kernel cache? (see docs)")
        blocker = fp8_blocker(r, rows, base)
        verdict = "recommended" if r is best else blocker or ("the reference" if r is base else "not recommended")
        r.why = "; ".join([*parts, verdict])


def recommended_row(rows: list[SweepRow], expected_slower: dict[str, str] | None = None) -> tuple[SweepRow | None, str]:
    """The fastest row whose loss tracks the reference's and whose speedup holds up beyond noise, with a one-line
    reason. A mode in `expected_slower` (the device's note expects it slower) is recommended only from a measurement
    that is not noisy."""
    base = reference_row(rows)
    if base is None:
        return None, "fp32 could not be measured, so there is nothing to compare against"
    expected_slower = expected_slower or {}
    healthy = [r for r in rows if r is not base and r.status == "ok" and loss_matches(r, base.loss)]
    faster = [r for r in healthy if (r.speedup or 0.0) >= MIN_SPEEDUP and not fp8_blocker(r, rows, base)]
    held = [
        r
        for r in faster
        if holds_up(r, base) and not (r.mode in expected_slower and (noise_note(r) or noise_note(base)))
    ]
    best = max(held, key=lambda r: r.samples_per_second or 0.0) if held else base
    reference = reference_label(rows)
    if best is base:
        doubtful = max(faster, key=lambda r: r.samples_per_second or 0.0) if faster else None
        if doubtful is not None:
            noisy = " (noisy windows)" if noise_note(doubtful) or noise_note(base) else ""
            note = f"; the device says: {expected_slower[doubtful.mode]}" if (doubtful.mode in expected_slower) else ""
            return base, (
                f"{doubtful.label} measured {doubtful.speedup:.2f}x {reference}'s samples/s, but its timed "
                f"windows overlap {reference}'s{noisy}{note}: measure again on an idle device"
            )
        if len({(r.compiled, r.checkpointed) for r in rows}) > 1:
            return base, f"nothing was faster than {reference} with the same loss on this device"
        return base, "no lower-precision mode was faster than fp32 with the same loss on this device"
    memory = f", {best.memory_ratio:.2f}x the memory" if best.memory_ratio else ""
    return best, (
        f"{best.label}: {best.speedup:.2f}x {reference}'s samples/s{memory}, "
        f"loss {best.loss:.4f} vs {reference} {base.loss:.4f}"
    )
