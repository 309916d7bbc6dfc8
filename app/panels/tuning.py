"""The LR finder and the model summary (ToolDialogs), and the table helpers the other tools share."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.assets import restyle
from app.panels.editors import ScientificSpinBox, format_number, hbox
from app.panels.tool_dialog import ToolDialog, split, titled
from core.text import count
from core.text import size as _size

RAW_COLOUR = "#9aa5b5"
SMOOTH_COLOUR = "#3b6fd8"
SUGGESTION_COLOUR = "#2e9b57"
PICK_COLOUR = "#d0453c"


def dash(text: str) -> str:
    """core.text's '-' for unknown as the window marks it: '–'."""
    return "–" if text == "-" else text


def size(value) -> str:
    """Bytes as '12.3 MiB'; '–' when unknown or zero."""
    return dash(_size(value))


def fmt_lr(lr: float | None) -> str:
    return "–" if lr is None else f"{lr:.2e}"


def numbers_first(a, b) -> bool:
    """a < b as the tools' tables sort: numbers as numbers, before blanks and texts, texts as texts."""
    number_a, number_b = (isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    if number_a and number_b:
        return a < b
    return number_a if number_a != number_b else str(a) < str(b)


class NumericItem(QTableWidgetItem):
    """A table cell that sorts by its number (Qt.UserRole), not by its text ('1.2 MiB' < '512 B')."""

    def __init__(self, text: str, value: float | None = None, right: bool = True):
        super().__init__(text)
        self.setData(Qt.ItemDataRole.UserRole, value)
        if right:
            self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other) -> bool:
        a, b = self.data(Qt.ItemDataRole.UserRole), other.data(Qt.ItemDataRole.UserRole)
        if isinstance(a, (int, float)) or isinstance(b, (int, float)):
            return numbers_first(a, b)
        return super().__lt__(other)


def add_row(table: QTableWidget, *cells) -> list[QTableWidgetItem]:
    """A row at the end of `table` (a text is a plain item); its items."""
    items = [QTableWidgetItem(cell) if isinstance(cell, str) else cell for cell in cells]
    row = table.rowCount()
    table.insertRow(row)
    for column, item in enumerate(items):
        table.setItem(row, column, item)
    return items


def make_table(columns, name: str) -> QTableWidget:
    table = style_table(QTableWidget(0, len(columns), objectName=name))
    table.setHorizontalHeaderLabels(list(columns))
    table.setWordWrap(False)
    return table


def style_table(table: QTableView) -> QTableView:
    """The tools' tables: whole rows selected, nothing edited, columns sized to their contents, the last stretched."""
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setAlternatingRowColors(True)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(True)
    return table


class LRFinderDialog(ToolDialog):
    """The LR range test: loss against a growing learning rate, the suggestion marked and explained."""

    lrChosen = Signal(float)

    TITLE = "LR finder"
    NAME = "lrFinder"
    RUN_TEXT = "Find"
    IDLE_TEXT = (
        "Trains a fresh copy of the model for a few steps while the learning rate grows, in the form's "
        "precision on the form's device; nothing is saved. Press Find."
    )

    def __init__(self, *args, **kwargs):
        self.pick: float | None = None
        self._pick_index: int | None = None
        self._live_lrs: list[float] = []
        self._live_losses: list[float] = []
        self._live_smoothed: list[float] = []
        super().__init__(*args, **kwargs)
        self.resize(900, 640)

    def _build_controls(self, controls: QHBoxLayout) -> None:
        from core.lab.lr_finder import DEFAULT_END_LR, DEFAULT_START_LR, DEFAULT_STEPS, METHODS

        tip = "The learning rate of the first step"
        self.startLrEdit = self._labelled(controls, "From", ScientificSpinBox(1e-12, 1e3), tip)
        self.startLrEdit.setObjectName("lrStartEdit")
        self.startLrEdit.setValue(DEFAULT_START_LR)
        tip = "The learning rate of the last step; the test stops earlier if the loss diverges"
        self.endLrEdit = self._labelled(controls, "to", ScientificSpinBox(1e-12, 1e6), tip)
        self.endLrEdit.setObjectName("lrEndEdit")
        self.endLrEdit.setValue(DEFAULT_END_LR)
        controls.addSpacing(12)
        tip = "Optimizer steps over the range (one batch each)"
        self.stepsEdit = self._spin(controls, "Steps", "lrStepsEdit", 5, 100_000, DEFAULT_STEPS, tip)
        controls.addSpacing(12)
        self.methodCombo = self._labelled(controls, "Suggest by", QComboBox(objectName="lrMethodCombo"))
        for method in METHODS:
            self.methodCombo.addItem(method, method)
        self.methodCombo.setToolTip(
            "valley: the middle of the descent to the minimum (robust; the default). "
            "steepest: where the smoothed loss falls fastest."
        )
        self.methodCombo.currentIndexChanged.connect(self._method_changed)

    def _build(self, layout: QVBoxLayout) -> None:
        import pyqtgraph as pg

        self.plot = pg.PlotWidget(background=self.palette().color(QPalette.ColorRole.Base))
        self.plot.setObjectName("lrPlot")
        self.plot.setMinimumHeight(240)
        item = self.plot.getPlotItem()
        item.showGrid(x=True, y=True, alpha=0.2)
        item.hideButtons()
        item.setLogMode(x=True, y=False)
        item.setLabel("bottom", "Learning rate (log scale)")
        item.setLabel("left", "Loss")
        item.getAxis("left").enableAutoSIPrefix(False)
        item.addLegend(offset=(-10, 10))
        self.rawCurve = item.plot([], [], pen=pg.mkPen(RAW_COLOUR, width=1), name="loss (raw)")
        self.smoothCurve = item.plot([], [], pen=pg.mkPen(SMOOTH_COLOUR, width=2), name="loss (smoothed)")
        self.suggestionMarker = item.plot(
            [],
            [],
            pen=None,
            symbol="o",
            symbolSize=12,
            symbolBrush=pg.mkBrush(SUGGESTION_COLOUR),
            symbolPen=pg.mkPen("w"),
            name="suggestion",
        )
        self.pickMarker = item.plot(
            [],
            [],
            pen=None,
            symbol="x",
            symbolSize=14,
            symbolBrush=pg.mkBrush(PICK_COLOUR),
            symbolPen=pg.mkPen(PICK_COLOUR, width=2),
            name="your pick",
        )
        self.pickLine = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen(PICK_COLOUR, width=1, style=Qt.PenStyle.DashLine)
        )
        self.pickLine.setVisible(False)
        item.addItem(self.pickLine, ignoreBounds=True)
        self.plot.scene().sigMouseClicked.connect(self._plot_clicked)
        self.plot.setToolTip("Click the curve to pick a learning rate")
        layout.addWidget(self.plot, 1)

        self.explanation = restyle(QLabel(objectName="lrExplanation", wordWrap=True), role="heading")
        self.pickLabel = QLabel(objectName="lrPickLabel", wordWrap=True)
        layout.addWidget(self.explanation)
        layout.addWidget(self.pickLabel)
        self.resetPickButton = QPushButton("Back to the suggestion", objectName="lrResetPickButton")
        self.resetPickButton.clicked.connect(self._show_suggestion)
        self.useButton = QPushButton("Use this LR", objectName="lrUseButton", clicked=self.use_pick)
        self.useButton.setToolTip("Put the picked learning rate into the run form")
        layout.addLayout(hbox(None, self.resetPickButton, self.useButton))

    def _inputs(self):
        return [self.startLrEdit, self.endLrEdit, self.stepsEdit]

    def _job(self, config):
        start, end = self.startLrEdit.number(), self.endLrEdit.number()
        if not (0 < start < end):
            self._on_failed("The start learning rate must be positive and below the end one.", "", "")
            return None
        self._live_lrs, self._live_losses, self._live_smoothed = [], [], []
        self.pick, self._pick_index = None, None
        self._draw([], [], [])
        self.suggestionMarker.setData([], [])
        self._show_pick()
        self.explanation.setText("")
        steps = self.stepsEdit.value()
        self._reset_progress(steps, "step %v of %m")
        return self._tool("lr_finder", config, start_lr=start, end_lr=end, steps=steps, method=self.method())

    def method(self) -> str:
        return self.methodCombo.currentData()

    def _on_progress(self, progress) -> None:
        self.statusLabel.setText(progress.describe()[:1].upper() + progress.describe()[1:])
        if progress.phase == "step":
            self.progressBar.setValue(progress.step)
            if progress.loss is not None:
                self._live_lrs.append(progress.lr)
                self._live_losses.append(progress.loss)
                self._live_smoothed.append(progress.smoothed if progress.smoothed is not None else progress.loss)
                self._draw(self._live_lrs, self._live_losses, self._live_smoothed)

    def _draw(self, lrs, losses, smoothed) -> None:
        self.rawCurve.setData(lrs, losses)
        self.smoothCurve.setData(lrs, smoothed)

    def _on_result(self, result) -> None:
        self._draw(result.lrs, result.losses, result.smoothed)
        if result.smoothed:  # the y range: the start and the descent, not the divergence's last points
            lowest = min(range(len(result.smoothed)), key=result.smoothed.__getitem__)
            descent = result.losses[: lowest + 1] + result.smoothed
            low = min(descent)
            start = result.losses[: max(3, len(result.losses) // 10)]
            high = max(start + [result.smoothed[0]])
            pad = (high - low) * 0.08 or abs(low) * 0.1 or 1.0
            self.plot.getPlotItem().setYRange(low - pad, high + pad, padding=0)
            self.plot.getPlotItem().setXRange(math.log10(result.lrs[0]), math.log10(result.lrs[-1]), padding=0.02)
        end = f"stopped early: {result.stopped_early}" if result.stopped_early else "ran the whole range"
        notes = "; ".join(result.notes)
        self.statusLabel.setText(
            f"{result.steps_run:,} steps in {result.seconds:.1f} s on {result.device} "
            f"({result.device_name}) in {result.precision}, batch {result.batch_size}, "
            f"{result.optimizer}; {end}." + (f" {notes}." if notes else "")
        )
        self._show_suggestion()

    def suggestion(self):
        """The current method's suggestion (recomputed by core.lab.lr_finder.suggest, without rerunning)."""
        if self.result is None:
            return None
        method = self.method()
        if (pick := self.result.suggestions.get(method)) is not None:
            return pick
        from core.lab.lr_finder import suggest

        return suggest(self.result.lrs, self.result.smoothed, method, self.result.losses)

    def _method_changed(self) -> None:
        if self.result is not None:
            self._show_suggestion()

    def _show_suggestion(self) -> None:
        suggestion = self.suggestion()
        if suggestion is None:
            return
        why = suggestion.explanation.removeprefix(f"{suggestion.method}: ")
        if suggestion.lr is not None:
            self.suggestionMarker.setData([suggestion.lr], [suggestion.loss])
            self.explanation.setText(f"Suggested ({suggestion.method}): <b>{fmt_lr(suggestion.lr)}</b>, {why}.")
        else:
            self.suggestionMarker.setData([], [])
            self.explanation.setText(f"No suggestion ({suggestion.method}): {why}. Click the curve to pick one.")
        self.pick, self._pick_index = suggestion.lr, suggestion.index if suggestion.lr is not None else None
        self._show_pick()

    def pick_lr(self, lr: float) -> float | None:
        """Pick the curve's point nearest `lr` (in log scale); returns the picked learning rate."""
        if self.result is None or not self.result.lrs or lr <= 0:
            return None
        target = math.log10(lr)
        index = min(range(len(self.result.lrs)), key=lambda i: abs(math.log10(self.result.lrs[i]) - target))
        self.pick, self._pick_index = self.result.lrs[index], index
        self._show_pick()
        return self.pick

    def pick_at(self, view_x: float) -> float | None:
        """Pick at a plot x coordinate (log10 of the learning rate, as the log axis holds it)."""
        return self.pick_lr(10**view_x)

    def _plot_clicked(self, event) -> None:
        if self.result is None or event.button() != Qt.MouseButton.LeftButton:
            return
        view = self.plot.getPlotItem().vb
        if not view.sceneBoundingRect().contains(event.scenePos()):
            return
        self.pick_at(view.mapSceneToView(event.scenePos()).x())

    def _show_pick(self) -> None:
        result = self.result
        if self.pick is None or result is None or self._pick_index is None:
            self.pickMarker.setData([], [])
            self.pickLine.setVisible(False)
            self.pickLabel.setText("")
        else:
            loss = result.smoothed[self._pick_index]
            suggestion = self.suggestion()
            own = suggestion is None or suggestion.index != self._pick_index
            self.pickMarker.setData([self.pick] if own else [], [loss] if own else [])  # never over the suggestion
            self.pickLine.setPos(math.log10(self.pick))
            self.pickLine.setVisible(True)
            where = "your pick" if own else "the suggestion"
            self.pickLabel.setText(
                f"Picked ({where}): <b>{fmt_lr(self.pick)}</b>, smoothed loss {loss:.4g} there. "
                "Click the curve to pick another learning rate."
            )
        self._update_use()

    def _update_use(self) -> None:
        usable = self.pick is not None and not self.job.running
        own = self.result is not None and self.result.own_optimizer  # the task sets its lr: nothing to put in the form
        self.useButton.setEnabled(usable and not own)
        self.useButton.setToolTip(
            "The task chooses its optimizer: set this lr in its configure_optimizers"
            if own
            else "Put the picked learning rate into the run form"
        )
        self.useButton.setText(f"Use lr {fmt_lr(self.pick)}" if self.pick is not None else "Use this LR")
        suggestion = self.suggestion()
        self.resetPickButton.setEnabled(
            usable and suggestion is not None and suggestion.lr is not None and suggestion.index != self._pick_index
        )

    def use_pick(self) -> None:
        if self.pick is not None:
            value = float(f"{self.pick:.3g}")  # three digits: 3.16e-03, not 0.0031622776601683794
            self.lrChosen.emit(value)
            self.statusLabel.setText(f"Learning rate {format_number(value)} put into the run form.")


LAYER_COLUMNS = ("Layer", "Type", "Parameters", "Trainable", "Weights", "Gradients", "Optimizer state")


def _ratio(value) -> tuple[str, None]:
    return (f"{value:.2f}×" if value else "–", None)


# The totals table's rows: label, then (text, sort value) from the summary `r` and a mode's totals `m`.
TOTALS = (
    ("Parameters", lambda r, m: (f"{r.parameters:,}", r.parameters)),
    ("Trainable", lambda r, m: (f"{r.trainable_parameters:,}", r.trainable_parameters)),
    ("Weights (fp32)", lambda r, m: (size(m.param_bytes), m.param_bytes)),
    ("Gradients (fp32)", lambda r, m: (size(m.grad_bytes), m.grad_bytes)),
    ("Optimizer state", lambda r, m: (size(m.optimizer_bytes), m.optimizer_bytes)),
    ("Activations", lambda r, m: (size(m.activation_bytes), m.activation_bytes)),
    ("Activations vs fp32", lambda r, m: _ratio(m.activation_ratio)),
    ("Total (training step)", lambda r, m: (size(m.total_bytes), m.total_bytes)),
    ("Total vs fp32", lambda r, m: _ratio(m.total_ratio)),
    ("Allocator peak", lambda r, m: (size(m.allocator_peak_bytes), None)),
    ("Compute dtype", lambda r, m: (m.compute_dtype or "–", None)),
)
TOTAL_ROWS = tuple(label for label, _cell in TOTALS)


class SummaryDialog(ToolDialog):
    """Per layer: parameters, weights, gradients, optimizer state and activations; totals per mode."""

    TITLE = "Model summary"
    NAME = "summary"
    RUN_TEXT = "Measure"
    IDLE_TEXT = "Builds the form's model and measures one training step's memory in each mode."

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.resize(1200, 620)

    def _build_controls(self, controls: QHBoxLayout) -> None:
        self._add_mode_checks(controls, "summary", tf32=False, fp32_fixed=True)
        controls.addSpacing(12)
        tip = "Rows of the measured batch (activations scale with it); the form's batch size by default"
        self.batchEdit = self._spin(controls, "Batch", "summaryBatchEdit", 0, 1_048_576, 0, tip)
        self.batchEdit.setSpecialValueText("form's")
        controls.addSpacing(12)
        tip = "Show modules down to this depth (the model is 0); a row's figures include the modules below it"
        self.depthEdit = self._spin(controls, "Depth", "summaryDepthEdit", 0, 20, 20, tip)
        self.depthEdit.valueChanged.connect(self._fill_layers)

    def _build(self, layout: QVBoxLayout) -> None:
        self.header = restyle(QLabel(objectName="summaryHeader", wordWrap=True), role="heading")
        layout.addWidget(self.header)
        self.layerTable = make_table(LAYER_COLUMNS, "summaryLayerTable")
        self.layerTable.setSortingEnabled(False)  # the tree order is the meaning
        self.totalsTable = make_table(("",), "summaryTotalsTable")
        self.totalsTable.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.totalsTable.horizontalHeader().setStretchLastSection(False)
        per_layer, totals = titled("Per layer", self.layerTable), titled("Totals per precision mode", self.totalsTable)
        splitter = split(
            Qt.Orientation.Horizontal, [820, 360], per_layer, totals, stretch=(3, 1), name="summarySplitter"
        )
        layout.addWidget(splitter, 1)
        self.sourceLabel = restyle(QLabel(objectName="summarySource", wordWrap=True), role="hint")
        layout.addWidget(self.sourceLabel)

    def _inputs(self):
        return [self.batchEdit]

    def _job(self, config):
        modes = self.selected_modes()
        self._reset_progress(len(modes), "%v of %m modes")
        return self._tool("summary", config, modes=modes, batch_size=self.batchEdit.value() or None)

    def _on_progress(self, progress) -> None:
        if progress.phase == "running":
            self.statusLabel.setText(f"Measuring {progress.mode} ({progress.index + 1} of {progress.total})…")
        else:
            self.progressBar.setValue(progress.index + 1)

    def _on_result(self, result) -> None:
        frozen = f", {count(result.frozen_parameters)} frozen" if result.frozen_parameters else ""
        self.header.setText(
            f"{result.task}: <b>{result.parameters:,}</b> parameters "
            f"({count(result.trainable_parameters)} trainable{frozen}); {result.optimizer}, "
            f"batch {result.batch_size} on {result.device} ({result.device_name})"
        )
        skipped = [f"{m.mode}: {m.reason}" for m in result.modes if m.status != "ok"]
        self.statusLabel.setText(
            f"Measured {len(result.measured_modes())} mode(s)."
            + (f" Not measured: {'; '.join(skipped)}." if skipped else "")
        )
        self.sourceLabel.setText(
            f"Activations: {result.activation_source}, for one batch of {result.batch_size}. "
            "Weights, gradients and optimizer state are float32 in every mode."
        )
        self.depthEdit.setMaximum(max(r.depth for r in result.rows))
        self._fill_layers()
        self._fill_totals()

    def _fill_layers(self) -> None:
        result = self.result
        if result is None:
            return
        modes = result.measured_modes()
        columns = list(LAYER_COLUMNS) + [f"Activations {m}" for m in modes]
        table = self.layerTable
        table.setColumnCount(len(columns))
        table.setHorizontalHeaderLabels(columns)
        rows = result.rows_to_depth(self.depthEdit.value())
        table.setRowCount(0)
        for row in rows:
            t = row.total
            cells = [
                ("  " * row.depth) + row.name,
                row.type,
                NumericItem(f"{t.parameters:,}" if t.parameters else "–", t.parameters),
                row.trainable,
                NumericItem(size(t.param_bytes), t.param_bytes),
                NumericItem(size(t.grad_bytes), t.grad_bytes),
                NumericItem(size(t.optimizer_bytes), t.optimizer_bytes),
            ]
            cells += [NumericItem(size(t.activation_bytes.get(m)), t.activation_bytes.get(m)) for m in modes]
            items = add_row(table, *cells)
            if row.shared:
                items[0].setToolTip(f"Shares {', '.join(row.shared)} (counted once, at its first owner)")
        table.resizeColumnsToContents()

    def _fill_totals(self) -> None:
        result = self.result
        modes = [m for m in result.modes if m.status == "ok"]
        table = self.totalsTable
        table.setColumnCount(1 + len(modes))
        table.setHorizontalHeaderLabels([""] + [m.mode for m in modes])
        table.setRowCount(len(TOTAL_ROWS))
        for index, (label, cell) in enumerate(TOTALS):
            head = QTableWidgetItem(label)
            font = head.font()
            font.setBold(True)
            head.setFont(font)
            table.setItem(index, 0, head)
            for column, m in enumerate(modes, start=1):
                table.setItem(index, column, NumericItem(*cell(result, m)))
        table.resizeColumnsToContents()

    def layer_names(self) -> list[str]:
        return [self.layerTable.item(i, 0).text().strip() for i in range(self.layerTable.rowCount())]

    def total(self, label: str, mode: str) -> str:
        """The totals table's text for `label` (a TOTAL_ROWS entry) in `mode`'s column."""
        columns = [self.totalsTable.horizontalHeaderItem(c).text() for c in range(self.totalsTable.columnCount())]
        return self.totalsTable.item(TOTAL_ROWS.index(label), columns.index(mode)).text()
