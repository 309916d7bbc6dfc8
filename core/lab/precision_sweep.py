"""Precision sweep: one task, seed and data in every precision mode the device supports, timed properly
(docs/precision-lab.md).

Each mode trains the Trainer's own steps, timed by core.lab.timing (warm-up windows, then the median timed window),
with peak memory (core.devices.PeakMemory), loss against fp32 and optional torch.compile / activation checkpointing
rows. On the CPU each mode runs in a fresh subprocess by default (`--one-mode`), so its peak RSS is its own. A user
task's bad return stops the sweep with its one line, whichever process the mode ran in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.config import RunConfig
from core.devices import DeviceInfo, PeakMemory, device_info, list_devices, torch_device
from core.engine.control import RunControl
from core.errors import AmpConsoleError, PrecisionError, TaskOutputError, UserCodeError
from core.lab.timing import on_throwaway_trainer, speed_ratio, time_steps
from core.precision_modes import PRECISION_MODES
from core.process import exit_process
from core.text import first_line

# Losses within this relative (or absolute) distance of fp32's after the same steps count as "the same".
LOSS_REL_TOLERANCE = 0.05
LOSS_ABS_TOLERANCE = 0.02
# A lower precision must beat fp32 by more than timing noise to be worth its numerical risk.
MIN_SPEEDUP = 1.05
# A mode whose slowest timed window took this many times its fastest is "noisy": something else shared the device.
NOISE_SPREAD = 1.5
# fp8 casts every converted layer's inputs each step: it is worth its rounding only this much faster than bf16.
FP8_OVER_BF16 = 1.10
# Memory (RSS, or the allocator's on a GPU) rising after every window by more than this is flagged as growing.
GROWTH_MIB_PER_WINDOW = 4.0
# The engine's notes a row repeats: float8 layers converted, what bf16-pure and adamw8bit keep.
MODE_NOTES = ("fp8 (", "bf16-pure:", "adamw8bit:")


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
class SweepResult:
    """A whole sweep: the setting it ran in, one row per mode and the recommended mode."""

    task: str
    task_options: dict
    device: str
    device_name: str
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
        return next(
            (
                r
                for r in self.rows
                if r.mode == mode and compiled in (None, r.compiled) and checkpointed in (None, r.checkpointed)
            ),
            None,
        )

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the `bench --json` schema)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SweepProgress:
    """Handed to the progress callback before each mode ('running'), once its model and data are ready
    ('setup'), after each of its windows ('window') and after it ('done', with its row)."""

    mode: str
    index: int
    total: int
    phase: str
    row: SweepRow | None = None
    window: int = 0  # windows finished (1-based once the first is done), warm-up windows included
    windows: int = 0  # warm-up + timed windows of this mode
    warmup_windows: int = 0
    step: int = 0  # optimizer steps done in this mode
    steps: int = 0  # optimizer steps this mode runs
    step_ms: float | None = None  # the finished window's milliseconds per step
    threads: int | None = None

    def describe(self) -> str:
        """'bf16: window 2/4, step 40/80, 5.21 ms/step' (and the other phases in the same words)."""
        if self.phase == "running":
            return f"{self.mode}: setting up the model and data"
        if self.phase == "setup":
            timed = self.windows - self.warmup_windows
            return (
                f"{self.mode}: model and data ready; {self.warmup_windows} warm-up + {timed} timed windows of "
                f"{self.steps // max(1, self.windows)} steps"
            )
        if self.phase == "window":
            kind = " (warm-up)" if self.window <= self.warmup_windows else ""
            speed = f", {self.step_ms:.2f} ms/step" if self.step_ms is not None else ""
            return f"{self.mode}: window {self.window}/{self.windows}{kind}, step {self.step:,}/{self.steps:,}{speed}"
        row = self.row
        if row is None or row.status != "ok":
            return f"{self.mode}: {row.status if row else 'done'}" + (f" ({row.reason})" if row and row.reason else "")
        return f"{self.mode}: done, {row.step_ms:.2f} ms/step median of {len(row.step_ms_windows)} windows"


ProgressCallback = Callable[[SweepProgress], None]
# What measure_mode reports as it goes: ('setup'|'window', window, windows, step, steps, step_ms, threads).
WindowCallback = Callable[[str, int, int, int, int, "float | None", "int | None"], None]


def measure_mode(
    config: RunConfig,
    mode: str,
    steps: int,
    repeats: int = 3,
    warmup_windows: int = 1,
    devices: list[DeviceInfo] | None = None,
    on_window: WindowCallback | None = None,
) -> SweepRow:
    """Train `config` in `mode` for warm-up + `repeats` windows of `steps` optimizer steps in this process, timed by
    core.lab.timing: median step time, throughput, peak memory from setup to the last window and the last window's
    mean loss. `on_window` hears when setup is done and after every window."""
    windows = warmup_windows + repeats
    total = windows * steps

    def measure(trainer) -> SweepRow:
        cfg, plan = trainer.cfg, trainer.plan
        threads = torch.get_num_threads()  # what the trainer's setup left in effect
        row = SweepRow(
            mode=mode,
            status="ok",
            compute_dtype=plan.compute_dtype_name,
            scaler=plan.use_scaler,
            threads=threads,
            compiled=cfg.compile,
            checkpointed=cfg.activation_checkpointing,
            compile_seconds=getattr(trainer, "compile_seconds", None),
        )
        # A compile that fell back to eager, or a task without blocks to checkpoint, is said in the row.
        row.reason = "; ".join(
            note
            for note in trainer.notes
            if (cfg.compile and "torch.compile failed" in note)
            or (cfg.activation_checkpointing and "names no blocks" in note)
            or note.startswith(MODE_NOTES)
        )
        meter = PeakMemory(trainer.device)
        meter.reset()
        if on_window:
            on_window("setup", 0, windows, 0, total, None, threads)

        def window_done(window: int, seconds: float, _readout) -> None:
            if window >= warmup_windows:
                row.memory_windows.append(memory_in_use(trainer.device))
            if on_window:
                on_window("window", window, windows, window * steps, total, 1000.0 * seconds, threads)

        try:
            timing = time_steps(trainer, steps, repeats, warmup_windows, window_done)
        except Exception as exc:  # the run would have failed here: the row says why, the sweep goes on
            row.status, row.reason = "failed", first_line(exc)
            return row
        row.peak_memory_bytes = meter.read().peak_bytes
        row.step_ms_windows = [1000.0 * s for s in timing.timed]
        row.step_ms = statistics.median(row.step_ms_windows)
        row.samples_per_second = timing.samples_per_second
        tokens = timing.tokens_per_sample  # counted from the batches the timed windows trained on
        if tokens is not None and row.samples_per_second:
            row.tokens_per_second = row.samples_per_second * tokens
        row.loss = timing.readouts[-1].loss
        row.skipped_steps = sum(r.skipped for r in timing.readouts)
        row.memory_growth = memory_growth(row.memory_windows, steps)
        return row

    # One step more than the windows: the scheduler plans the run the windows are part of.
    return on_throwaway_trainer(config, "amp-sweep-", measure, devices, precision=mode, max_steps=total + 1)


def memory_in_use(device: torch.device) -> int:
    """Bytes in use now: the allocator's on CUDA, the process's RSS elsewhere."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    import psutil

    return psutil.Process().memory_info().rss


def memory_growth(samples: list[int], steps: int) -> float | None:
    """MiB per step when memory rose after every window (at least two) by more than GROWTH_MIB_PER_WINDOW on
    average, else None: a cache that grows with each new shape (docs/precision-lab.md), or a leak."""
    rises = [b - a for a, b in zip(samples, samples[1:])]
    if len(rises) < 2 or min(rises) <= 0 or sum(rises) / len(rises) <= GROWTH_MIB_PER_WINDOW * 2**20:
        return None
    return sum(rises) / len(rises) / max(1, steps) / 2**20


def measure_mode_isolated(
    config: RunConfig,
    mode: str,
    steps: int,
    repeats: int,
    warmup_windows: int,
    control: RunControl | None = None,
    on_window: WindowCallback | None = None,
) -> SweepRow:
    """`measure_mode` in a fresh Python process, so its peak RSS is this mode's alone. Its windows arrive as JSON lines
    on stdout, relayed to `on_window`; a stop on `control` kills the process (the row is stopped)."""
    import threading

    package_root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    command = [
        sys.executable,
        "-m",
        "core.lab.precision_sweep",
        "--one-mode",
        mode,
        "--config-json",
        json.dumps(config.to_dict()),
        "--steps",
        str(steps),
        "--repeats",
        str(repeats),
        "--warmup-windows",
        str(warmup_windows),
    ]
    lines: list[str] = []
    errors: list[str] = []
    refused: list[dict] = []  # the task's returns or code refused before the mode started (its one line)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        stdout, err_pipe = proc.stdout, proc.stderr
        assert stdout is not None and err_pipe is not None  # opened with PIPE

        def read_stdout() -> None:
            for line in stdout:
                if line.startswith('{"window": '):
                    if on_window:
                        on_window(*json.loads(line)["window"])
                elif line.startswith('{"task_error": '):
                    refused.append(json.loads(line)["task_error"])
                elif line.strip():
                    lines.append(line.strip())

        readers = [
            threading.Thread(target=read_stdout, daemon=True),
            threading.Thread(target=lambda: errors.extend(err_pipe), daemon=True),
        ]
        for reader in readers:
            reader.start()
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if control is not None and control.stop_requested:
                    proc.kill()
                    proc.wait()
                    for reader in readers:
                        reader.join()
                    return SweepRow(mode=mode, status="skipped", reason="sweep stopped")
        for reader in readers:
            reader.join()
    if refused:
        raise_task_error(refused[-1])
    stderr = "".join(errors)
    if proc.returncode != 0 or not lines:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return SweepRow(mode=mode, status="failed", reason=f"measuring process exited {proc.returncode}: {last}")
    return SweepRow(**json.loads(lines[-1]))


def task_error(exc: AmpConsoleError) -> dict | None:
    """What a measuring process reports of a task refused before its mode started, for `raise_task_error` in the sweep's
    process; None for other errors."""
    if not isinstance(exc, (TaskOutputError, UserCodeError)):
        return None
    return {"kind": type(exc).__name__, "message": str(exc), "details": getattr(exc, "details", "")}


def raise_task_error(error: dict) -> None:
    """The error `task_error` described, raised again: the sweep stops with the task's one line, as a run would."""
    if error.get("kind") == "UserCodeError":
        raise UserCodeError(str(error.get("message", "")), str(error.get("details", "")))
    raise TaskOutputError(str(error.get("message", "")))


def requested_modes(modes: list[str] | tuple[str, ...] | None) -> list[str]:
    """fp32 first (every ratio is against it), then the others in the order asked; unknown names are errors."""
    modes = list(modes) if modes else list(PRECISION_MODES)
    unknown = [m for m in modes if m not in PRECISION_MODES]
    if unknown:
        raise PrecisionError(f"unknown mode {unknown[0]!r} in the sweep; choose from {', '.join(PRECISION_MODES)}")
    return ["fp32"] + [m for m in dict.fromkeys(modes) if m != "fp32"]


def run_sweep(
    config: RunConfig,
    modes: list[str] | None = None,
    steps: int = 20,
    repeats: int = 3,
    warmup_windows: int = 1,
    isolate: bool | None = None,
    devices: list[DeviceInfo] | None = None,
    progress: ProgressCallback | None = None,
    control: RunControl | None = None,
    compile_options: list[bool] | None = None,
    checkpointing_options: list[bool] | None = None,
    optimizer_options: list[str] | None = None,
) -> SweepResult:
    """Measure every requested mode (unsupported ones skipped with the device's reason) and compare to fp32.

    `compile_options` / `checkpointing_options`: the settings of RunConfig.compile / activation_checkpointing to
    measure, a row per combination (default: the config's own), and so are `optimizer_options` (e.g. adamw8bit
    beside the config's adamw). `isolate`: each mode in a fresh subprocess (default
    on the CPU). `control.stop()` ends the sweep: at once for an isolated mode, else after the current one; the rest
    are reported skipped."""
    config = config.validate()
    devices = devices if devices is not None else list_devices()
    info = device_info(config.device, devices)
    config = config.replace(device=info.id)  # 'auto' resolved once: every mode runs on the same device
    isolate = info.type == "cpu" if isolate is None else isolate
    compiles = list(dict.fromkeys(compile_options)) if compile_options else [config.compile]
    checkpoints = (
        list(dict.fromkeys(checkpointing_options)) if checkpointing_options else [config.activation_checkpointing]
    )
    optimizers = list(dict.fromkeys(optimizer_options or [config.optimizer]))
    order = [
        (mode, c, a, "" if opt == config.optimizer else opt)
        for mode in requested_modes(modes)
        for opt in optimizers
        for c in sorted(compiles)
        for a in sorted(checkpoints)
    ]
    rows: list[SweepRow] = []
    for index, (mode, compiled, checkpointed, optimizer) in enumerate(order):
        label = SweepRow(mode, "", compiled=compiled, checkpointed=checkpointed, optimizer=optimizer).label
        variant = config.replace(
            compile=compiled, activation_checkpointing=checkpointed, optimizer=optimizer or config.optimizer
        )
        if control is not None and control.stop_requested:
            rows.append(
                SweepRow(
                    mode=mode, status="skipped", reason="sweep stopped", compiled=compiled, checkpointed=checkpointed
                )
            )
            continue
        if mode not in info.precisions:
            reason = info.unsupported.get(mode, f"not supported on {info.id}")
            row = SweepRow(mode=mode, status="skipped", reason=reason, compiled=compiled, checkpointed=checkpointed)
        else:
            on_window = None
            if progress:
                progress(SweepProgress(label, index, len(order), "running"))

                def on_window(phase, window, windows, step, total_steps, step_ms, threads, label=label, index=index):
                    progress(
                        SweepProgress(
                            label,
                            index,
                            len(order),
                            phase,
                            window=window,
                            windows=windows,
                            warmup_windows=warmup_windows,
                            step=step,
                            steps=total_steps,
                            step_ms=step_ms,
                            threads=threads,
                        )
                    )

            if isolate:
                row = measure_mode_isolated(variant, mode, steps, repeats, warmup_windows, control, on_window)
            else:
                row = measure_mode(variant, mode, steps, repeats, warmup_windows, devices, on_window)
        row.compiled, row.checkpointed, row.optimizer = compiled, checkpointed, optimizer  # failed ones included
        rows.append(row)
        if progress:
            progress(SweepProgress(label, index, len(order), "done", row))
    compare_to_fp32(rows)
    speed_note = str(info.details.get("bf16_speed", "")) if info.type == "cpu" else ""
    slower = {"bf16": speed_note} if speed_note.startswith("bf16 emulated") else {}  # devices' own expectation
    best, why = recommended_row(rows, slower)
    explain_rows(rows, best)
    recommended = best.mode if best else None
    memory = memory_source(PeakMemory(torch_device(info)), isolate)
    threads = next((r.threads for r in rows if r.status == "ok" and r.threads), None)
    return SweepResult(
        task=config.task,
        task_options=dict(config.task_options),
        device=info.id,
        device_name=info.name,
        batch_size=config.batch_size,
        steps=steps,
        repeats=repeats,
        warmup_steps=warmup_windows * steps,
        memory_source=memory,
        rows=rows,
        recommended=recommended,
        recommendation=why,
        threads=threads,
        reference=reference_label(rows),
        recommended_label=best.label if best else None,
    )


def memory_source(meter: PeakMemory, isolate: bool) -> str:
    """One line: what a sweep's peak memory is."""
    if not meter.measurable:
        return meter.source
    where = "; a fresh process per mode" if isolate else ""
    if meter.kind == "cpu" and not meter.resettable:
        return meter.source + (where or "; the modes share this process's peak")
    return f"{meter.source} since each mode's setup{where}"


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
    faster = [
        r
        for r in rows
        if r is not base
        and r.status == "ok"
        and loss_matches(r, base.loss)
        and (r.speedup or 0.0) >= MIN_SPEEDUP
        and not fp8_blocker(r, rows, base)
    ]
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
            note = (
                f"; the device expects it slower ({expected_slower[doubtful.mode]})"
                if (doubtful.mode in expected_slower)
                else ""
            )
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


def _one_mode_main(argv: list[str]) -> int:
    """Subprocess entry: measure one mode and print its SweepRow as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m core.lab.precision_sweep")
    parser.add_argument("--one-mode", required=True)
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--warmup-windows", type=int, default=1)
    args = parser.parse_args(argv)
    values = json.loads(args.config_json)
    from core.tasks import load_config_task

    load_config_task(values)  # a user task: the file the sweep's process was given
    config = RunConfig.from_dict(values)

    def report(*window) -> None:  # relayed by measure_mode_isolated as it comes
        print(json.dumps({"window": list(window)}), flush=True)

    try:
        row = measure_mode(config, args.one_mode, args.steps, args.repeats, args.warmup_windows, on_window=report)
    except AmpConsoleError as exc:
        error = task_error(exc)
        if error is None:
            raise
        print(json.dumps({"task_error": error}), flush=True)
        return 2
    print(json.dumps(dataclasses.asdict(row)))
    return 0


if __name__ == "__main__":
    exit_process(_one_mode_main(sys.argv[1:]))
