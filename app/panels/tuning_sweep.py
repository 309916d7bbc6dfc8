"""The sweep dialog: a grid or random hyperparameter sweep over the form's settings (core.lab.sweep), one trial at a
time on a BackgroundJob or ("Run on") N at a time in training processes. Axes are typed one per line as the CLI takes
them (`lr = 1e-3, 3e-3`, `lr = 1e-4 : 1e-2 : log`). The live table sorts numbers as numbers; "Train this one longer"
resumes a trial through the window's own start path.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import NamedTuple

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableView,
)

from app.assets import restyle
from app.panels.editors import hbox
from app.panels.tool_dialog import ToolDialog
from app.panels.tuning import dash, numbers_first, size, style_table
from core.engine.events import RunStarted, StepMetrics
from core.errors import AmpConsoleError
from core.text import duration

SORT_ROLE = Qt.ItemDataRole.UserRole
FIXED_COLUMNS = ("status", "best", "samples_per_second", "peak_memory_bytes", "wall_seconds", "steps")
HEADERS = {
    "status": "Status",
    "device": "Device",
    "samples_per_second": "Samples/s",
    "peak_memory_bytes": "Peak memory",
    "wall_seconds": "Wall time",
    "steps": "Steps",
}
# Placeholders (setPlaceholderText: greyed, gone at the first key) that read as instructions, not as a spec:
# Run stays disabled until the axes typed are one.
GRID_HINT = "Type one axis per line, for example:\n    lr = 1e-3, 3e-3\n    batch_size = 32, 64"
RANDOM_HINT = (
    "Type one axis per line, a range or choices, for example:\n    lr = 1e-4 : 1e-2 : log\n    batch_size = 32, 64, 128"
)


def _value_text(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


SHOWN = {
    "peak_memory_bytes": size,
    "wall_seconds": lambda seconds: dash(duration(seconds)),
    "samples_per_second": "{:,.0f}".format,
    "best": "{:.4g}".format,
}


class SweepModel(QAbstractTableModel):
    """The sweep's rows (core.lab.sweep.sweep_table dicts): Trial, each parameter, then FIXED_COLUMNS."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict] = []
        self.params: list[str] = []
        self.metric = "best"
        self.by_device = False  # a Device column: trials ran on several devices at once

    def set_rows(self, rows: list[dict], metric: str | None = None) -> None:
        self.beginResetModel()
        self.rows = sorted(rows, key=lambda r: r["index"])
        self.params = list(dict.fromkeys(k for r in rows for k in r["params"]))
        self.metric = metric or next((r.get("metric") for r in rows if r.get("metric")), None) or "best"
        self.endResetModel()

    def columns(self) -> list[str]:
        fixed = [*FIXED_COLUMNS[:1], "device", *FIXED_COLUMNS[1:]] if self.by_device else list(FIXED_COLUMNS)
        return ["trial", *self.params, *fixed]

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.columns())

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal or role != Qt.ItemDataRole.DisplayRole:
            return None
        key = self.columns()[section]
        if key == "trial":
            return "#"
        if key == "best":
            return "Best metric" if self.metric == "best" else f"Best {self.metric}"  # before a trial names it
        return HEADERS.get(key, key.removeprefix("option."))

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        key = self.columns()[index.column()]
        value = row["index"] if key == "trial" else row["params"].get(key) if key in self.params else row.get(key)
        if role == SORT_ROLE:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                return str(value) if isinstance(value, str) else float("inf")  # blanks sort last (ascending)
            return float(value)
        if role == Qt.ItemDataRole.DisplayRole:
            return "–" if value is None else SHOWN.get(key, _value_text)(value)
        if role == Qt.ItemDataRole.TextAlignmentRole and key not in ("status", "device") and not isinstance(value, str):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.get("message") or row.get("run")
        return None


class SweepProxy(QSortFilterProxyModel):
    """Sorts by SORT_ROLE: numbers as numbers, blanks last."""

    def lessThan(self, left, right) -> bool:
        return numbers_first(left.data(SORT_ROLE), right.data(SORT_ROLE))


class RowsUpdate(NamedTuple):
    """From the job: the table as it stands (read from the sweep's files off the GUI thread)."""

    rows: list[dict]
    metric: str | None


def run_on_choices(devices, cores: int | None = None) -> list[tuple[str, list[str] | None]]:
    """The "Run on" entries for the detected `devices`: one trial at a time on the form's device (None), then k at a
    time on the first k GPUs (or XPUs) of a kind, then k at a time on the CPU for k = 2, 4, ... up to the cores."""
    import os

    choices: list[tuple[str, list[str] | None]] = [("One trial at a time (the form's device)", None)]
    for kind, label in (("cuda", "GPUs"), ("xpu", "XPUs")):
        ids = [d.id for d in devices if d.type == kind]
        for k in range(2, len(ids) + 1):
            choices.append((f"{k} {label} at once: {', '.join(ids[:k])}", ids[:k]))
    if any(d.type == "cpu" for d in devices):
        cores = cores or os.cpu_count() or 2
        k = 2
        while k <= max(2, cores):
            choices.append((f"{k} trials at once on the CPU", ["cpu"] * k))
            k *= 2
    return choices


def sweep_job(base, planned, method, samples, seed, root, devices=None):
    """Create the sweep folder of `planned` (plan's answer) under `root` and run it (on `devices` when given);
    progress gets core's sweep events and a RowsUpdate whenever a trial starts or ends."""

    def run(progress, control):
        from core.lab.sweep import (
            SweepStarted,
            TrialEnded,
            TrialStarted,
            create_sweep,
            load_sweep,
            run_sweep,
            sweep_table,
        )

        grid, ranges, trials = planned
        folder = create_sweep(base, trials, grid or ranges, method=method, samples=samples, seed=seed, root=root)
        metric = load_sweep(folder).get("metric")

        def emit(event) -> None:
            progress(event)
            if isinstance(event, (SweepStarted, TrialStarted, TrialEnded)):
                progress(RowsUpdate(sweep_table(folder), metric))

        return run_sweep(folder, progress=emit, control=control, devices=devices)

    return run


def plan(base, axes_lines: list[str], method: str, samples: int, seed: int):
    """(grid axes, range axes, trials) from the axis lines; ConfigError naming the line's key when one is wrong."""
    from core.errors import ConfigError
    from core.lab.sweep import grid_axis, plan_trials, range_axis

    lines = [line.strip() for line in axes_lines if line.strip() and not line.strip().startswith("#")]
    if not lines:
        raise ConfigError("axes", "nothing to sweep: type an axis per line, e.g. lr = 1e-3, 3e-3")
    make = grid_axis if method == "grid" else range_axis
    axes = [make("".join(line.split()), base.task) for line in lines]
    if method == "grid":
        return axes, [], plan_trials(base, grid=axes)
    return [], axes, plan_trials(base, ranges=axes, samples=samples, seed=seed)


class SweepDialog(ToolDialog):
    """A sweep over the form's settings; `openInHistory(run name)` and `trainLongerRequested(config, checkpoint)`
    go to the window."""

    openInHistory = Signal(str)
    trainLongerRequested = Signal(object, str)
    queueRequested = Signal(list)  # the plan's trials as (name, RunConfig), for the run queue

    TITLE = "Sweep"
    NAME = "sweep"
    RUN_TEXT = "Run sweep"
    IDLE_TEXT = (
        "Each trial is a normal run of the form's settings with the axes' values, in a sweep folder under "
        "the runs root, one after another (or several at once: Run on)."
    )

    def __init__(self, config_provider, devices_provider, busy_provider=None, root_provider=None, parent=None):
        self._root_provider = root_provider or (lambda: None)
        self.folder: str | None = None
        self._lines: dict[int, str] = {}  # the status line of each trial running (or just ended)
        self._totals: dict[int, int] = {}
        self._ended = 0
        self._finished: set[int] = set()  # trials whose line says how they ended
        self._why_not = "Type the axes to sweep."  # why Run is disabled ('' when the axes plan a sweep)
        super().__init__(config_provider, devices_provider, busy_provider, parent)
        self.resize(1100, 640)

    def _build_controls(self, controls) -> None:
        self.methodCombo = self._labelled(controls, "Method", QComboBox(objectName="sweepMethodCombo"))
        self.methodCombo.addItem("grid: every combination", "grid")
        self.methodCombo.addItem("random: N draws", "random")
        self.methodCombo.currentIndexChanged.connect(self._method_changed)
        self.samplesLabel = QLabel("Trials")
        controls.addWidget(self.samplesLabel)
        self.samplesEdit = QSpinBox(objectName="sweepSamplesEdit", minimum=1, maximum=1000, value=8)
        self.samplesEdit.valueChanged.connect(self.preview)
        controls.addWidget(self.samplesEdit)
        self.seedLabel = QLabel("Seed")
        controls.addWidget(self.seedLabel)
        tip = "The same seed draws the same trials"
        self.seedEdit = QSpinBox(objectName="sweepSeedEdit", minimum=0, maximum=2**31 - 1, value=0, toolTip=tip)
        self.seedEdit.valueChanged.connect(self.preview)
        controls.addWidget(self.seedEdit)
        tip = (
            "One trial at a time on the form's device, or several at once: one per GPU, or "
            "several on the CPU (each trial in its own process, the CPU threads shared out)"
        )
        self.runOnCombo = self._labelled(controls, "Run on", QComboBox(objectName="sweepRunOnCombo"), tip)
        self.refresh_devices()

    def _build(self, layout) -> None:
        self.axesEdit = QPlainTextEdit(objectName="sweepAxesEdit")
        self.axesEdit.setPlaceholderText(GRID_HINT)
        self.axesEdit.setToolTip(
            "One axis per line: a setting of the form (lr, batch_size, optimizer, …) or a task "
            "option (hidden, …), '=', then values separated by commas; for a random sweep a "
            "range LOW : HIGH, with ': log' for log-uniform and ': int' for whole numbers"
        )
        self.axesEdit.setFixedHeight(self.fontMetrics().lineSpacing() * 4 + 14)
        self.axesEdit.textChanged.connect(self.preview)
        self.planLabel = QLabel(objectName="sweepPlan", wordWrap=True)
        self.planLabel.setMinimumWidth(360)
        self.planLabel.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        layout.insertLayout(2, hbox((self.axesEdit, 1), (self.planLabel, 1)))  # under the method row

        self.model = SweepModel(self)
        self.proxy = SweepProxy(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.table = style_table(QTableView(objectName="sweepTable"))
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_use())
        self.table.doubleClicked.connect(lambda _index: self.open_in_history())
        layout.addWidget(self.table, 1)
        self.bestLabel = restyle(QLabel(objectName="sweepBest", wordWrap=True), role="heading")
        layout.addWidget(self.bestLabel)
        self.folderLabel = restyle(QLabel(objectName="sweepFolder", wordWrap=True), role="hint")
        self.folderLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.historyButton = QPushButton(
            "Open in history", objectName="sweepHistoryButton", clicked=self.open_in_history
        )
        self.historyButton.setToolTip("Show the selected trial in the run history (double-click a row does too)")
        self.longerButton = QPushButton(
            "Train this one longer", objectName="sweepLongerButton", clicked=self.train_longer
        )
        self.longerButton.setToolTip(
            "Resume the selected trial from its checkpoint with twice the steps, in its "
            "own folder (its settings go into the form)"
        )
        self.queueButton = QPushButton("Add trials to queue", objectName="sweepQueueButton", clicked=self.queue_trials)
        layout.addLayout(hbox((self.folderLabel, 1), self.historyButton, self.longerButton, self.queueButton))
        self._method_changed()

    def _inputs(self):
        return [self.methodCombo, self.samplesEdit, self.seedEdit, self.axesEdit, self.runOnCombo]

    def refresh_devices(self) -> None:
        """Fill "Run on" from the detected devices, keeping the choice when it is still there."""
        current = self.runOnCombo.currentData()
        self.runOnCombo.clear()
        for text, devices in run_on_choices(self._detected_devices()):
            self.runOnCombo.addItem(text, devices)
        index = self.runOnCombo.findData(current) if current is not None else 0
        self.runOnCombo.setCurrentIndex(max(index, 0))

    def run_on(self) -> list[str] | None:
        """The device slots chosen (None: one trial at a time in the job's thread)."""
        data = self.runOnCombo.currentData()
        return list(data) if data else None

    def set_run_on(self, devices: list[str] | None) -> None:
        index = self.runOnCombo.findData(devices) if devices else 0
        if index < 0:
            raise ValueError(f"{devices} is not a Run on choice here")
        self.runOnCombo.setCurrentIndex(index)

    def showEvent(self, event) -> None:
        if not self.job.running:
            self.refresh_devices()
        super().showEvent(event)

    def method(self) -> str:
        return self.methodCombo.currentData()

    def _method_changed(self) -> None:
        random = self.method() == "random"
        for widget in (self.samplesLabel, self.samplesEdit, self.seedLabel, self.seedEdit):
            widget.setVisible(random)
        self.axesEdit.setPlaceholderText(RANDOM_HINT if random else GRID_HINT)
        self.preview()

    def set_axes(self, *lines: str) -> None:
        self.axesEdit.setPlainText("\n".join(lines))

    def refresh_setting(self) -> None:
        super().refresh_setting()
        self.preview()  # the form may have changed what the axes plan

    def preview(self) -> None:
        """Say what Run would do (or what is wrong with the axes) without running anything; Run is enabled only when the
        axes plan a sweep."""
        try:
            base = self._config_provider().validate()
            _grid, _ranges, trials = self._plan(base)
        except Exception as exc:
            typed = self.axesEdit.toPlainText().strip() or not isinstance(exc, AmpConsoleError)
            self._why_not = str(exc) if typed else "Type the axes to sweep."
            self.planLabel.setText(f"<span style='color:#d0453c'>{exc}</span>" if typed else self._why_not)
            self._update_buttons()
            return
        self._why_not = ""
        self._update_buttons()
        shown = "; ".join(
            " ".join(f"{k.removeprefix('option.')}={_value_text(v)}" for k, v in t.params.items()) for t in trials[:4]
        ) + ("; …" if len(trials) > 4 else "")
        self.planLabel.setText(
            f"<b>{len(trials)} trial{'s' if len(trials) != 1 else ''}</b>, each {self._length(base)}: {shown}"
        )

    def _plan(self, base):
        """plan() of the axes typed, over `base` (the form's settings)."""
        lines = self.axesEdit.toPlainText().splitlines()
        return plan(base, lines, self.method(), self.samplesEdit.value(), self.seedEdit.value())

    @staticmethod
    def _length(base) -> str:
        if base.max_steps:
            return f"{base.max_steps:,} steps"
        return f"{base.epochs} epoch{'s' if base.epochs != 1 else ''}"

    # ------------------------------------------------------------------ running
    def _job(self, config):
        try:
            planned = self._plan(config)
        except AmpConsoleError as exc:
            self._on_failed(f"Fix the axes first: {exc}", "", "")
            return None
        devices = self.run_on()
        if devices is None and config.task_file:  # a task file's code runs in a training process, not here
            devices = [config.device]
        for device in dict.fromkeys(devices or []):  # the form's device was checked by start()
            busy = self._busy_provider(device)
            if busy:
                self._on_failed(busy, "", "")
                return None
        self._lines, self._totals, self._ended, self._finished = {}, {}, 0, set()
        self.folder = None
        self.model.by_device = bool(devices)
        self.model.set_rows([])
        self.bestLabel.setText("")
        self.folderLabel.setText("")
        self._reset_progress(len(planned[2]), "%v of %m trials")
        root = self._root_provider()
        return sweep_job(
            config, planned, self.method(), self.samplesEdit.value(), self.seedEdit.value(), root, devices=devices
        )

    def _on_progress(self, event) -> None:
        from core.lab.sweep import SweepStarted, TrialEnded, TrialEvent, TrialStarted

        match event:
            case RowsUpdate():
                self._set_rows(event.rows, event.metric)
            case SweepStarted():
                self.folder = event.folder
                self.folderLabel.setText(f"Sweep folder: {event.folder}")
            case TrialStarted():
                self._lines = {i: text for i, text in self._lines.items() if i not in self._finished}
                on = f" on {event.device}" if self.run_on() and event.device else ""
                self._lines[event.index] = f"Trial {event.index} of {event.total} ({event.name}){on}: setting up…"
                self._show_lines()
            case TrialEvent(event=RunStarted() as started):
                self._totals[event.index] = started.total_steps
            case TrialEvent(event=StepMetrics() as step):
                total = self._totals.get(event.index)
                self._lines[event.index] = (
                    f"Trial {event.index} ({event.name}): step {step.step:,}"
                    + (f"/{total:,}" if total else "")
                    + f", loss {step.loss:.4g}"
                )
                self._show_lines()
            case TrialEnded():
                self._ended += 1
                self.progressBar.setValue(self._ended)
                self._lines[event.index] = f"Trial {event.index} of {event.total} ({event.name}): {event.status}" + (
                    f" ({event.message})" if event.message else ""
                )
                self._finished.add(event.index)
                self._show_lines()

    def _show_lines(self) -> None:
        self.statusLabel.setText("<br>".join(html.escape(text) for _, text in sorted(self._lines.items())))

    def _set_rows(self, rows: list[dict], metric: str | None) -> None:
        selected = self.selected_row()
        self.model.set_rows(rows, metric)
        if selected is not None:
            self.select_trial(selected["index"])
        self._show_best(rows)
        self._update_use()

    def _show_best(self, rows: list[dict]) -> None:
        from core.lab.sweep import best_row, load_sweep

        if not rows or not self.folder:
            return
        try:
            mode = load_sweep(self.folder).get("mode") or "max"
        except Exception:
            mode = "max"
        best = best_row(rows, mode)
        if best is not None:
            params = ", ".join(f"{k}={_value_text(v)}" for k, v in best["params"].items())
            self.bestLabel.setText(
                f"Best so far: trial {best['index']} ({params}), {best['metric']} "
                f"{best['best']:.4g} ({'lower' if mode == 'min' else 'higher'} is better)"
            )

    def _on_result(self, result) -> None:
        self.folder = str(result.folder)
        self._set_rows(result.rows, None)
        counts = ", ".join(f"{n} {status}" for status, n in result.counts.items())
        self.statusLabel.setText(
            f"Sweep {result.status}: {counts}. Sort by any column; select a trial to open "
            "it in the history or train it longer."
        )
        if self.table.selectionModel().selectedRows() == [] and self.proxy.rowCount():
            self.table.selectRow(0)

    # ------------------------------------------------------------------ rows
    def selected_row(self) -> dict | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        return self.model.rows[self.proxy.mapToSource(rows[0]).row()]

    def select_trial(self, index: int) -> None:
        for row in range(self.proxy.rowCount()):
            source = self.proxy.mapToSource(self.proxy.index(row, 0)).row()
            if self.model.rows[source]["index"] == index:
                self.table.selectRow(row)
                return

    def trial_column(self, key: str) -> list[str]:
        """The texts of column `key` ('trial', a parameter, or a FIXED_COLUMNS name) in the shown order."""
        column = self.model.columns().index(key)
        return [self.proxy.index(row, column).data() for row in range(self.proxy.rowCount())]

    def _update_buttons(self, *args) -> None:
        super()._update_buttons(*args)
        self.runButton.setEnabled(self.runButton.isEnabled() and not self._why_not)
        self.runButton.setToolTip(self._why_not or "Run every trial of the plan")
        if hasattr(self, "queueButton"):  # built after the controls
            self.queueButton.setEnabled(not self._why_not)
            self.queueButton.setToolTip(
                self._why_not or "Add each trial of the plan to the run queue (Run → Run queue…)"
            )

    def _update_use(self) -> None:
        row = self.selected_row()
        self.historyButton.setEnabled(row is not None and row.get("status") != "pending")
        self.longerButton.setEnabled(row is not None and bool(row.get("checkpoint")) and not self.job.running)

    def open_in_history(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.openInHistory.emit(row["run"])

    def queue_trials(self) -> None:
        """The plan's trials (the form's settings with the axes' values) as run queue entries."""
        base = self._config_provider().validate()
        trials = self._plan(base)[2]
        self.queueRequested.emit([(f"{base.task} {trial.name}", trial.config) for trial in trials])
        self.statusLabel.setText(f"Added {len(trials)} trials to the run queue.")

    def train_longer(self) -> None:
        from core.lab.sweep import continue_config

        row = self.selected_row()
        if row is None or self.job.running:
            return
        planned = continue_config(row)
        if planned is None:
            self._on_failed(f"Trial {row['index']} has no checkpoint to continue from.", "", "")
            return
        config, checkpoint = planned
        self.statusLabel.setText(
            f"Training trial {row['index']} longer: "
            + (f"to {config.max_steps:,} steps" if config.max_steps else f"to {config.epochs} epochs")
            + f", from {Path(checkpoint).name}."
        )
        self.trainLongerRequested.emit(config, checkpoint)
