"""Compare precisions (a ToolDialog): core.lab.precision_sweep.run_sweep for the form's task and device, with progress,
the per-mode table (each row's verdict, `why`, in its column and tooltip), bar charts of samples/s and peak memory,
core's recommendation, and a button that trains with the recommended mode. Optimizer checks add a row per mode and
optimizer (bf16-pure + adamw8bit); one the device's `unsupported` names (adamw8bit without bitsandbytes) is disabled.
"""

from __future__ import annotations

import math
import os

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.assets import restyle
from app.panels.bars import BarChart
from app.panels.editors import hbox
from app.panels.tool_dialog import ToolDialog, split
from app.panels.tuning import add_row, make_table
from core.config import OPTIMIZERS

COLUMNS = (
    "Mode",
    "Status",
    "Step (ms)",
    "Samples/s",
    "Tokens/s",
    "Peak memory (MiB)",
    "Speedup",
    "Memory ×",
    "Loss",
    "Δ loss vs fp32",
    "Threads",
    "Why",
    "Note",
)
WARMUP_WINDOWS = 1  # run_sweep's default: one warm-up window before the timed ones


def _fmt(value, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:{spec}}{suffix}"


class CompareDialog(ToolDialog):
    """Non-modal; `config_provider()` returns the form's RunConfig, `trainRequested(mode)` starts a run."""

    trainRequested = Signal(str)

    TITLE = "Compare precisions"
    NAME = "compare"
    RUN_TEXT = "Measure"
    IDLE_TEXT = "Press Measure to time every selected mode on this task and device."
    STOPPING_TEXT = "Stopping after the current mode…"
    SHOWN = ("batch", "optimizer", "device", "seed")  # it measures every precision mode itself

    def __init__(self, *args, **kwargs):
        self._windows_done, self._windows_per_mode = 0, 0
        self._optimizer = ""  # the measured rows' own optimizer (those without "+ optimizer")
        super().__init__(*args, **kwargs)
        self.resize(1100, 680)

    def _build_controls(self, controls: QHBoxLayout) -> None:
        self._add_mode_checks(controls, "", tf32=True, fp32_fixed=True)
        controls.addSpacing(16)
        tip = "Optimizer steps per timed window; the median of the windows is reported"
        self.stepsEdit = self._spin(controls, "Steps:", "sweepStepsEdit", 2, 10_000, 20, tip)  # fits 1366 pixels
        tip = "Timed windows per mode, after one warm-up window"
        self.repeatsEdit = self._spin(controls, "Windows:", "sweepRepeatsEdit", 1, 50, 3, tip)
        tip = (
            "CPU threads torch uses inside an op while measuring; auto = the engine's choice. Fix it when something "
            "else shares the CPU, so the advice does not rest on thread contention. The count used is shown per mode."
        )
        self.threadsEdit = self._spin(controls, "Threads:", "sweepThreadsEdit", 0, max(1, os.cpu_count() or 1), 0, tip)
        self.threadsEdit.setSpecialValueText("auto")
        controls.addSpacing(16)  # the optimizers' checks, named as they are
        self.optimizerChecks = {name: QCheckBox(name, objectName=f"{name}OptimizerCheck") for name in OPTIMIZERS}
        self._optimizer_reasons: dict[str, str] = {}  # optimizer -> why a detected device cannot run it
        for check in self.optimizerChecks.values():
            controls.addWidget(check)

    def refresh_setting(self) -> None:
        """The setting line; the form's optimizer checked when none is; one a detected device cannot run disabled."""
        super().refresh_setting()
        for name, check in self.optimizerChecks.items():
            reason = next((r for d in self._detected_devices() if (r := getattr(d, "unsupported", {}).get(name))), "")
            self._optimizer_reasons[name] = reason
            check.setChecked(check.isChecked() and not reason)
            check.setToolTip(reason or f"Measure every mode with {name} too: a row each ({name} beside the others)")
        if not any(c.isChecked() for c in self.optimizerChecks.values()):
            own = self._form_setting("optimizer", "adamw")
            if own in self.optimizerChecks and not self._optimizer_reasons[own]:
                self.optimizerChecks[own].setChecked(True)
        self._update_use()

    def selected_optimizers(self, own: str) -> list[str]:
        """The checked optimizers, the form's own first when checked (the rows without "+ optimizer")."""
        checked = [name for name, check in self.optimizerChecks.items() if check.isChecked()]
        return sorted(checked, key=lambda name: name != own) or [own]

    def _build(self, layout: QVBoxLayout) -> None:
        self.table = make_table(COLUMNS, "compareTable")
        self.throughputChart = BarChart("Throughput", "Samples/s", objectName="throughputBars")
        self.memoryChart = BarChart("Peak memory", "MiB", objectName="memoryBars")
        charts = QWidget()
        charts.setLayout(hbox(self.throughputChart, self.memoryChart))
        charts.layout().setContentsMargins(0, 0, 0, 0)
        splitter = split(Qt.Orientation.Vertical, [220, 360], self.table, charts)

        self.recommendation = restyle(QLabel(objectName="recommendation", wordWrap=True), role="heading")
        self.trainButton = QPushButton("Train with this", objectName="trainWithButton", clicked=self._train)
        self.trainButton.setToolTip(
            "Set the precision (and optimizer) to the recommended row's and start a full training run"
        )
        layout.addWidget(splitter, 1)
        layout.addLayout(hbox((self.recommendation, 1), self.trainButton))

    # ------------------------------------------------------------------ running
    def _job(self, config):
        self.table.setRowCount(0)
        self.throughputChart.clear()
        self.memoryChart.clear()
        self.recommendation.setText("")
        modes = self.selected_modes()
        steps, repeats = self.stepsEdit.value(), self.repeatsEdit.value()
        optimizers = self.selected_optimizers(config.optimizer)
        config = config.replace(threads=self.threadsEdit.value(), optimizer=optimizers[0])
        self._optimizer = config.optimizer
        self._windows_done, self._windows_per_mode = 0, WARMUP_WINDOWS + repeats
        # skipped modes jump ahead when they end
        self._reset_progress(max(1, len(modes) * len(optimizers) * self._windows_per_mode), "%v of %m windows")
        return self._tool("compare", config, modes=modes, steps=steps, repeats=repeats, optimizer_options=optimizers)

    def _on_progress(self, progress) -> None:
        which = f"mode {progress.index + 1} of {progress.total}"
        if progress.phase in ("running", "setup", "window"):
            self.statusLabel.setText(f"Measuring {progress.describe()} ({which})…")
            if progress.phase == "window":
                self.progressBar.setValue(self._windows_done + progress.window)
        elif progress.row is not None:
            self._windows_done += self._windows_per_mode
            self.progressBar.setValue(min(self._windows_done, self.progressBar.maximum()))
            self._add_row(progress.row)

    def _on_result(self, result) -> None:
        self.table.setRowCount(0)
        for row in result.rows:
            self._add_row(row)
        ok = [r for r in result.rows if r.status == "ok"]
        labels = [f"{r.speedup:.2f}×" if r.speedup else "" for r in ok]
        self.throughputChart.set_bars([r.label for r in ok], [r.samples_per_second or 0 for r in ok], labels)
        memory_labels = [f"{r.memory_ratio:.2f}×" if r.memory_ratio else "" for r in ok]
        self.memoryChart.set_bars(
            [r.label for r in ok], [(r.peak_memory_bytes or 0) / 2**20 for r in ok], memory_labels
        )
        self.memoryChart.set_title(f"Peak memory ({result.memory_source})")
        best, why = result.recommended_label or result.recommended, result.recommendation
        why = why.split(": ", 1)[1] if why.startswith(f"{best}: ") else why
        self.recommendation.setText(f"Recommended: {best or '–'} ({why})")
        threads = f", {result.threads} CPU thread{'s' if result.threads != 1 else ''}" if result.threads else ""
        self.statusLabel.setText(
            f"Measured {len(ok)} mode(s) on {result.device} ({result.device_name}): "
            f"{result.repeats} windows of {result.steps:,} steps after "
            f"{result.warmup_steps:,} warm-up steps, batch {result.batch_size:,}{threads}, {self._optimizer} "
            f"where a row names no optimizer."
        )

    def _add_row(self, row) -> None:
        from core.lab.precision_results import noise_note

        memory = row.peak_memory_bytes / 2**20 if row.peak_memory_bytes else None
        cells = (
            row.label,
            row.status,
            _fmt(row.step_ms, ".2f"),
            _fmt(row.samples_per_second, ",.0f"),
            _fmt(row.tokens_per_second, ",.0f"),
            _fmt(memory, ",.0f"),
            _fmt(row.speedup, ".2f", "×"),
            _fmt(row.memory_ratio, ".2f", "×"),
            _fmt(row.loss, ".4f"),
            _fmt(row.loss_delta, "+.4f"),
            _fmt(row.threads, "d"),
            row.why,
            "; ".join(
                note
                for note in (
                    row.reason,
                    noise_note(row),
                    f"{row.skipped_steps:,} skipped steps" if row.skipped_steps else "",
                )
                if note
            ),
        )
        items = add_row(self.table, *cells)
        for item in items[2:11]:
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        for item in items[-2:]:  # a verdict, a reason: sentences, readable in full when the column is narrow
            item.setToolTip(item.text())

    def row_modes(self) -> list[str]:
        return [self.table.item(i, 0).text() for i in range(self.table.rowCount())]

    def recommended_optimizer(self) -> str:
        """The optimizer of the recommended row: its own ('bf16-pure + adamw8bit'), else the sweep's."""
        best = next((r for r in self.result.rows if r.label == self.result.recommended_label), None)
        return (best.optimizer if best else "") or self._optimizer

    def _train(self) -> None:
        if self.result is not None and self.result.recommended:
            self.trainRequested.emit(self.result.recommended)

    def _inputs(self):
        return [self.stepsEdit, self.repeatsEdit, self.threadsEdit]

    def _update_use(self) -> None:
        for name, check in self.optimizerChecks.items():
            check.setEnabled(not self.job.running and not self._optimizer_reasons.get(name))
        self.trainButton.setEnabled(not self.job.running and self.result is not None and bool(self.result.recommended))
