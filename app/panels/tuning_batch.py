"""The batch-size finder dialog: every trial, the largest batch per mode as bars, and "Use batch N"."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QPushButton

from app.assets import restyle
from app.panels.bars import BarChart
from app.panels.editors import hbox
from app.panels.tool_dialog import ToolDialog, split, titled
from app.panels.tuning import NumericItem, add_row, make_table, size

MODE_COLUMNS = (
    "Mode",
    "Largest batch",
    "Peak memory",
    "Budget",
    "Samples/s",
    "Batch ×fp32",
    "Speed ×fp32",
    "Trials",
    "Note",
)
TRIAL_COLUMNS = ("Mode", "#", "Step", "Batch", "Result", "Peak memory", "Samples/s", "Seconds", "Note")


class BatchFinderDialog(ToolDialog):
    """The largest batch per precision mode; "Use batch N" emits batchChosen(N) for the form."""

    batchChosen = Signal(int)

    TITLE = "Batch-size finder"
    NAME = "batchFinder"
    RUN_TEXT = "Find"
    IDLE_TEXT = (
        "Tries growing batches (training steps and an evaluation pass each) in every selected mode, "
        "starting from the form's batch size, until one no longer fits within the margin. Press Find."
    )

    def __init__(self, *args, **kwargs):
        self.probe = None  # a core.lab.batch_finder probe to use instead of the device's (tests, demos)
        super().__init__(*args, **kwargs)
        self.resize(1100, 680)

    def _build_controls(self, controls: QHBoxLayout) -> None:
        from core.lab.batch_finder import DEFAULT_MARGIN, DEFAULT_STEPS, MAX_BATCH_CAP, MAX_STEPS

        self._add_mode_checks(controls, "batch", tf32=False, fp32_fixed=False)
        controls.addSpacing(10)
        controls.addWidget(QLabel("Margin"))
        self.marginEdit = QDoubleSpinBox(
            objectName="batchMarginEdit", minimum=0.0, maximum=89.0, decimals=0, value=DEFAULT_MARGIN * 100, suffix=" %"
        )
        self.marginEdit.setToolTip(
            "Headroom left below the device's memory limit: a batch fits only when its peak "
            "stays under (100% − margin) of the limit"
        )
        controls.addWidget(self.marginEdit)
        tip = f"The largest batch tried; auto = the training rows, at most {MAX_BATCH_CAP:,}"
        self.maxBatchEdit = self._spin(controls, "Max batch", "batchMaxEdit", 0, MAX_BATCH_CAP * 16, 0, tip)
        self.maxBatchEdit.setSpecialValueText("auto")
        tip = "Optimizer steps per trial (the first is warm-up; the rest are timed)"
        self.stepsEdit = self._spin(controls, "Steps", "batchStepsEdit", 1, MAX_STEPS, DEFAULT_STEPS, tip)
        tip = "Plan for a smaller device: use this memory limit instead of the device's"
        self.limitEdit = self._spin(controls, "Limit", "batchLimitEdit", 0, 2**31 - 1, 0, tip)
        self.limitEdit.setSuffix(" MiB")
        self.limitEdit.setSpecialValueText("device's")
        for edit in (self.marginEdit, self.maxBatchEdit, self.stepsEdit, self.limitEdit):
            edit.setMaximumWidth(110 if edit is not self.stepsEdit else 70)

    def _build(self, layout) -> None:
        self.modeTable = make_table(MODE_COLUMNS, "batchModeTable")
        self.modeTable.setSortingEnabled(True)
        self.modeTable.itemSelectionChanged.connect(self._update_use)
        self.trialTable = make_table(TRIAL_COLUMNS, "batchTrialTable")
        self.chart = BarChart("Largest batch per mode", "Batch (samples)", objectName="batchBars")
        self.chart.setMinimumWidth(260)
        per_mode, trials = titled("Per mode", self.modeTable), titled("Every trial", self.trialTable)
        tables = split(Qt.Orientation.Vertical, [150, 350], per_mode, trials)  # a row per mode above, every trial below
        splitter = split(
            Qt.Orientation.Horizontal, [780, 300], tables, self.chart, stretch=(3, 1), name="batchSplitter"
        )
        layout.addWidget(splitter, 1)
        self.comparison = restyle(QLabel(objectName="batchComparison", wordWrap=True), role="heading")
        self.sourceLabel = restyle(QLabel(objectName="batchSource", wordWrap=True), role="hint")
        layout.addWidget(self.comparison)
        layout.addWidget(self.sourceLabel)
        self.useButton = QPushButton("Use batch", objectName="batchUseButton", clicked=self.use_batch)
        self.useButton.setToolTip("Put this batch size into the run form")
        hint = QLabel("Select a mode's row to use its batch.", objectName="batchUseHint")
        layout.addLayout(hbox((hint, 1), self.useButton))

    def _inputs(self):
        return [self.marginEdit, self.maxBatchEdit, self.stepsEdit, self.limitEdit]

    def _job(self, config):
        modes = self.selected_modes()
        if not modes:
            self._on_failed("Choose at least one precision mode.", "", "")
            return None
        max_batch = self.maxBatchEdit.value()
        if max_batch and config.batch_size > max_batch:
            config = config.replace(batch_size=max_batch)  # the search starts at the form's batch, capped
        self.modeTable.setRowCount(0)
        self.trialTable.setRowCount(0)
        self.chart.clear()
        self.chart.setVisible(True)
        self.comparison.setText("")
        self.sourceLabel.setText("")
        self._reset_progress(len(modes), "%v of %m modes")
        return self._tool(
            "batch_finder",
            config,
            modes=modes,
            margin=self.marginEdit.value() / 100,
            steps=self.stepsEdit.value(),
            max_batch=max_batch or None,
            limit_bytes=self.limitEdit.value() * 2**20 or None,
            probe=self.probe,
        )

    def _on_progress(self, progress) -> None:
        text = progress.describe()
        self.statusLabel.setText(f"{text} (mode {progress.index + 1} of {progress.total})…")
        if progress.phase == "trial" and progress.trial is not None:
            self._add_trial(progress.mode, progress.trials, progress.trial)
        elif progress.phase == "done":
            self.progressBar.setValue(progress.index + 1)

    def _add_trial(self, mode: str, number: int, trial) -> None:
        speed = trial.samples_per_second
        cells = add_row(
            self.trialTable,
            mode,
            NumericItem(str(number), number),
            trial.phase,
            NumericItem(f"{trial.batch:,}", trial.batch),
            trial.status,
            NumericItem(size(trial.peak_bytes), trial.peak_bytes),
            NumericItem(f"{speed:,.0f}" if speed else "–", speed),
            NumericItem(f"{trial.seconds:.2f}", trial.seconds),
            trial.note,
        )
        if not trial.fits:
            cells[4].setForeground(Qt.GlobalColor.red)
        self.trialTable.scrollToBottom()

    def _on_result(self, result) -> None:
        table = self.modeTable
        table.setSortingEnabled(False)
        table.setRowCount(0)
        for m in result.modes:
            batch = f"{m.batch:,}" + (" (cap)" if m.capped else "") if m.batch else "–"
            speed = m.samples_per_second
            note = m.reason if m.status != "ok" else ("not even batch 1 fits" if m.batch is None else "")

            def ratio(value, m=m) -> NumericItem:
                return NumericItem(
                    f"{value:.2f}×" if value else ("1.00×" if m.mode == "fp32" and m.batch else "–"), value
                )

            cells = add_row(
                table,
                m.mode,
                NumericItem(batch, m.batch),
                NumericItem(size(m.peak_bytes), m.peak_bytes),
                NumericItem(size(m.budget_bytes), m.budget_bytes),
                NumericItem(f"{speed:,.0f}" if speed else "–", speed),
                ratio(m.batch_ratio),
                ratio(m.speed_ratio),
                NumericItem(str(len(m.trials)), len(m.trials)),
                note,
            )
            cells[0].setData(Qt.ItemDataRole.UserRole, m.mode)
            if note:
                cells[-1].setToolTip(note)
        table.setSortingEnabled(True)
        found = [m for m in result.modes if m.status == "ok" and m.batch]
        labels = [f"{m.batch:,}" + (f" ({m.batch_ratio:.2f}×)" if m.batch_ratio else "") for m in found]
        self.chart.set_bars([m.mode for m in found], [m.batch for m in found], labels)
        self.chart.setVisible(bool(found))  # no empty axes when nothing fitted
        sentences = result.comparisons
        best = result.best()
        if best is not None:
            sentences = sentences + [
                f"fastest: {best.mode} at batch {best.batch:,} ({best.samples_per_second:,.0f} samples/s)"
            ]
        unfit = [
            f"{m.mode}: {m.reason or 'not even batch 1 fits'}" for m in result.modes if m.status != "ok" or not m.batch
        ]
        self.comparison.setText(
            "; ".join(sentences + unfit) + "."
            if sentences or unfit
            else "No comparison with fp32 (fp32 was not searched)."
        )
        notes = "; ".join(result.notes)
        self.sourceLabel.setText(
            f"Memory: {result.memory_source}. Margin {result.margin:.0%}, {result.steps:,} steps "
            f"and an evaluation pass of {result.eval_rows:,} rows per trial."
            + (f" {notes[:1].upper() + notes[1:]}." if notes else "")
        )
        searched = [m for m in result.modes if m.trials]  # skipped, stopped or failed in setup: not searched
        self.statusLabel.setText(
            f"Searched {len(searched)} mode(s) on {result.device} ({result.device_name}) "
            f"in {result.seconds:.1f} s, from batch {result.start:,} up to at most "
            f"{result.max_batch:,}."
        )
        self._select_default()

    def _select_default(self) -> None:
        """Select the form's precision mode when it was searched, else the fastest."""
        result = self.result
        if result is None:
            return
        wanted = self._form_setting("precision", "")
        best = result.best()
        names = [m.mode for m in result.modes if m.status == "ok" and m.batch]
        choice = wanted if wanted in names else (best.mode if best else None)
        for row in range(self.modeTable.rowCount()):
            if self.modeTable.item(row, 0).text() == choice:
                self.modeTable.selectRow(row)
                return
        self._update_use()

    def chosen(self):
        """The ModeResult of the selected row (None when it has no batch)."""
        if self.result is None:
            return None
        rows = self.modeTable.selectionModel().selectedRows()
        if not rows:
            return None
        mode = self.result.mode(self.modeTable.item(rows[0].row(), 0).text())
        return mode if mode is not None and mode.batch else None

    def _update_use(self) -> None:
        mode = self.chosen()
        self.useButton.setEnabled(mode is not None and not self.job.running)
        self.useButton.setText(f"Use batch {mode.batch:,} ({mode.mode})" if mode is not None else "Use batch")

    def use_batch(self) -> None:
        mode = self.chosen()
        if mode is not None:
            self.batchChosen.emit(int(mode.batch))
            self.statusLabel.setText(f"Batch size {mode.batch:,} (found for {mode.mode}) put into the run form.")
