"""Precision sweep (docs/precision-lab.md): one task, seed and data in every precision mode the device supports, each
training the Trainer's own steps timed by core.lab.timing, with peak memory (core.devices.PeakMemory), loss against
fp32 and optional torch.compile / activation checkpointing rows. On the CPU each mode runs in a fresh process by default
(core.lab.tool_child), so its peak RSS is its own. A user task's bad return stops the sweep with its one line. The rows
are compared and a mode recommended in core.lab.precision_results.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.config import RunConfig
from core.devices import DeviceInfo, PeakMemory, device_info, list_devices, torch_device
from core.engine.control import RunControl
from core.errors import AmpConsoleError, PrecisionError, TaskOutputError, UserCodeError
from core.lab.precision_results import (
    SweepResult,
    SweepRow,
    compare_to_fp32,
    explain_rows,
    recommended_row,
    reference_label,
)
from core.lab.timing import on_throwaway_trainer, time_steps
from core.precision_modes import PRECISION_MODES
from core.text import first_line

# Memory (RSS, or the allocator's on a GPU) rising after every window by more than this is flagged as growing.
GROWTH_MIB_PER_WINDOW = 4.0
# The engine's notes a row repeats: float8 layers converted, what bf16-pure and adamw8bit keep.
MODE_NOTES = ("fp8 (", "bf16-pure:", "adamw8bit:")


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
                in_use = meter.in_use()
                if in_use is not None:
                    row.memory_windows.append(in_use)
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
    """`measure_mode` in a fresh Python process (core.lab.tool_child), so its peak RSS is this mode's alone. Its
    windows are relayed to `on_window`; a stop on `control` kills it (the row is skipped). The task's refusal is
    raised here, as in this process; any other failure is the row's reason."""
    from core.lab.sweep.parallel import child_env
    from core.lab.tool_child import in_child

    try:
        return in_child(
            "measure",
            config.to_dict(),
            mode,
            steps,
            repeats,
            warmup_windows,
            named=f"measuring {mode}",
            progress=(lambda window: on_window(*window)) if on_window else None,
            control=control,
            stop_grace=0.0,
            env=child_env(1),
        )
    except (TaskOutputError, UserCodeError):
        raise
    except AmpConsoleError as exc:
        if control is not None and control.stop_requested:
            return SweepRow(mode=mode, status="skipped", reason="sweep stopped")
        return SweepRow(mode=mode, status="failed", reason=str(exc))


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
    `compile_options` / `checkpointing_options` / `optimizer_options`: the settings to measure, a row per combination
    (default: the config's own). `isolate`: each mode in a fresh subprocess (default on the CPU). `control.stop()` ends
    the sweep: at once for an isolated mode, else after the current one; the rest are reported skipped."""
    config = config.validate()
    devices = devices if devices is not None else list_devices()
    info = device_info(config.device, devices)
    config = config.replace(device=info.id)  # 'auto' resolved once: every mode runs on the same device
    isolate = info.type == "cpu" if isolate is None else isolate
    order = [
        (mode, c, a, "" if opt == config.optimizer else opt)
        for mode in requested_modes(modes)
        for opt in dict.fromkeys(optimizer_options or [config.optimizer])
        for c in sorted(set(compile_options or [config.compile]))
        for a in sorted(set(checkpointing_options or [config.activation_checkpointing]))
    ]
    rows: list[SweepRow] = []
    for index, (mode, compiled, checkpointed, optimizer) in enumerate(order):
        label = SweepRow(mode, "", compiled=compiled, checkpointed=checkpointed, optimizer=optimizer).label
        variant = config.replace(
            compile=compiled, activation_checkpointing=checkpointed, optimizer=optimizer or config.optimizer
        )
        if control is not None and control.stop_requested:
            rows.append(SweepRow(mode, "skipped", "sweep stopped", compiled=compiled, checkpointed=checkpointed))
            continue
        if mode not in info.precisions:
            row = SweepRow(mode, "skipped", info.unsupported.get(mode, f"not supported on {info.id}"))
        else:
            on_window = None
            if progress:
                progress(SweepProgress(label, index, len(order), "running"))

                def on_window(phase, window, windows, *rest, label=label, index=index):  # rest: step ... threads
                    progress(
                        SweepProgress(label, index, len(order), phase, None, window, windows, warmup_windows, *rest)
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
    return SweepResult(
        **SweepResult.setting(config, info),
        batch_size=config.batch_size,
        steps=steps,
        repeats=repeats,
        warmup_steps=warmup_windows * steps,
        memory_source=memory_source(PeakMemory(torch_device(info)), isolate),
        rows=rows,
        recommended=best.mode if best else None,
        recommendation=why,
        threads=next((r.threads for r in rows if r.status == "ok" and r.threads), None),
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
