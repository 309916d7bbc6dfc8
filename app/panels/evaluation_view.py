"""A run's evaluation report drawn, whichever sections it has, without knowing the task: one section per turn
of the event loop (`done`, then `drawn`), from a BoundedReport; a malformed section is left out or said in one
line, and texts are shown escaped, never as markup.
"""

from __future__ import annotations

import html
import math
from collections import deque
from collections.abc import Callable
from functools import partial

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.panels.editors import box_layout
from app.panels.evaluation_limits import BoundedReport, as_dict, as_list, bounded_report, finite, short_text
from app.plot_legend import row_legend
from core.text import printable

SERIES_COLOURS = ("#3b6fd8", "#c98a12", "#8e44ad", "#2e9b57", "#d0453c", "#16a2b8", "#6a7a90", "#fb5607")
CLASS_COLOURS = ("#d0453c", "#2e9b57", "#3b6fd8", "#c98a12")  # negative / positive (class 0 / class 1), ...
CHANCE_COLOUR = "#8a8f98"
RIGHT_COLOUR = QColor(46, 155, 87)  # confusion cells on the diagonal, tinted by their share of the row
WRONG_COLOUR = QColor(208, 69, 60)
PLOT_HEIGHT = 240
LEGEND_ROW = 18  # pixels: one row of legend entries under a plot
UNIT_PADDING = 0.05  # a 0..1 axis is padded so that its 0 and 1 labels have room to show
UNIT_TICKS = [(v / 5, f"{v / 5:.1f}") for v in range(6)]
FEW_UNIT_TICKS = [(v / 2, f"{v / 2:.1f}") for v in range(3)]  # on a short axis, where six labels do not fit
SHORT_AXIS = 170  # pixels
END_LABEL_ROOM = 9  # pixels between 0 (or 1) and the plot's edge: half a label's height and a little
CELL_HEIGHT = 64  # pixels: a confusion-matrix row (two lines of text and room around them)
# Between two sections: a timer of 1 ms, not 0 (a chain of zero timers holds back the window's other timers)
TURN_MS = 1


def _numbers(values) -> list[float]:
    """A list of floats from a report's list, NaN where an entry is missing (pyqtgraph leaves a gap)."""
    return [math.nan if (v := finite(x)) is None else v for x in as_list(values)]


def _shown(value) -> str:
    """A text from the report as rich text shows it: printable, short, escaped."""
    return html.escape(printable(short_text(value if isinstance(value, str) else str(value))), quote=False)


def _figure(value) -> str:
    number = finite(value)
    return "–" if number is None else f"{number:.4f}"


def headline(report: dict, more_metrics: int = 0) -> str:
    """The line above the plots: what was measured and the metrics, the primary one first and bold."""
    metrics = as_dict(report.get("metrics"))
    primary = report.get("primary_metric")
    figures = [f"{_shown(name)} {_figure(metrics[name])}" for name in sorted(metrics, key=lambda n: n != primary)]
    if primary in metrics:
        figures[0] = f"<b>{figures[0]}</b>"
    if more_metrics:
        figures.append(f"… and {more_metrics:,} more")
    auc = finite(as_dict(report.get("roc")).get("auc"))
    if auc is not None and not any("auc" in name for name in metrics):
        figures.append(f"ROC AUC {auc:.4f}")
    what = [_shown(report.get("task") or "?")]
    if report.get("split"):
        what.append(f"{_shown(report['split'])} split")
    if isinstance(report.get("step"), int):
        what.append(f"step {report['step']:,}")
    if isinstance(report.get("rows"), int):
        what.append(f"{report['rows']:,} rows")
    if report.get("precision"):
        where = f" on {_shown(report['device'])}" if report.get("device") else ""
        what.append(f"{_shown(report['precision'])}{where}")
    return " · ".join(what) + ("<br>" + " · ".join(figures) if figures else "")


def _drop(widget: QWidget) -> None:
    widget.hide()
    widget.deleteLater()


class EvaluationView(QWidget):
    """The report's plots: `show_report(report)` draws it, `clear(message)` empties the view."""

    drawn = Signal()  # the report given to show_report is drawn whole

    def __init__(self, parent=None):
        super().__init__(parent, objectName="evaluationView")
        self.done = True
        self._chain = 0  # which show_report the pending section belongs to: an older one's is dropped
        self._pending: deque = deque()  # (section, build, span, the placeholder of its cell) still to draw
        self._report: dict = {}
        self._gaps: list[QWidget] = []  # the placeholders of sections that drew nothing
        self._drawn: list[tuple[QWidget, int]] = []  # each widget drawn, in order, and its span
        self.headline = QLabel(objectName="evaluationHeadline", wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.headline.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message = QLabel(objectName="evaluationMessage", wordWrap=True, alignment=Qt.AlignmentFlag.AlignCenter)
        # "… and M more" of what a large report holds beyond what is drawn
        self.leftOut = QLabel(objectName="evaluationLeftOut", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        for label in (self.message, self.leftOut):
            label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.body = QWidget()
        self.grid = QGridLayout(self.body)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setColumnStretch(0, 1)
        self.grid.setColumnStretch(1, 1)
        box_layout(self, self.headline, self.message, self.leftOut, (self.body, 1), margins=True)
        self.sections: list[str] = []
        self.problems: list[str] = []
        self.plots: dict = {}
        self.confusion_table: QTableWidget | None = None
        self.clear("No evaluation yet.")

    def clear(self, message: str) -> None:
        """Nothing drawn; `message` (one line) in the middle."""
        self._empty_body()
        self.headline.clear()
        self.headline.hide()
        self.leftOut.clear()
        self.leftOut.hide()
        self.message.setText(message)
        self.message.show()

    def show_report(self, report: dict | BoundedReport) -> None:
        """Draw `report`'s sections, a turn of the event loop each (the headline at once), until `done`."""
        self._empty_body()
        bounded = bounded_report(report) if isinstance(report, (dict, BoundedReport)) else None
        if bounded is None or not isinstance(bounded.report, dict):
            self.clear("This evaluation report cannot be read.")
            return
        report = bounded.report
        self.headline.setText(headline(report, bounded.more.get("metrics", 0)))
        self.headline.show()
        left_out = bounded.left_out()
        self.leftOut.setText("Drawn in part: " + "; ".join(left_out) + "." if left_out else "")
        self.leftOut.setVisible(bool(left_out))
        self.message.hide()
        planned: list[tuple[str, Callable[[dict], QWidget | None], int]] = []
        for name, build, span in (
            ("roc", self._roc, 1),
            ("confusion", self._confusion, 1),
            ("curves", None, 1),
            ("buckets", self._buckets, 1),
            ("histogram", self._histogram, 2),
        ):
            if report.get(name) in (None, {}, []):
                continue
            if build is None:  # the curves: a plot per curve, each a turn of its own
                planned += [
                    (name, partial(self._curve, i, curve), span) for i, curve in enumerate(as_list(report[name]))
                ]
            else:
                planned.append((name, build, span))
        # A placeholder holds each planned cell, so a widget put in its place later does not move the others.
        for name, build, span in planned:
            holder = QWidget(minimumHeight=PLOT_HEIGHT)
            holder.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
            self._pending.append((name, build, span, holder))
        self._place([(holder, span) for _name, _build, span, holder in self._pending])
        self._report, self.done = report, False
        chain = self._chain
        QTimer.singleShot(TURN_MS, self, lambda: self._draw_next(chain))  # dropped with the view

    def _draw_next(self, chain: int) -> None:
        """One section of the report show_report was given, then the next on the next turn of the event loop."""
        if chain != self._chain:  # a newer show_report or clear came first
            return
        if not self._pending:
            self._finish()
            return
        name, build, span, holder = self._pending.popleft()
        try:
            widget = build(self._report)
        except Exception as exc:
            self.problems.append(short_text(printable(f"{name}: {type(exc).__name__}: {exc}".splitlines()[0]), 200))
            widget = None
        if widget is None:
            self._gaps.append(holder)
        else:
            if name not in self.sections:
                self.sections.append(name)
            self.grid.replaceWidget(holder, widget)
            self._drawn.append((widget, span))
            _drop(holder)
        QTimer.singleShot(TURN_MS, self, lambda: self._draw_next(chain))  # dropped with the view

    def _finish(self) -> None:
        if self._gaps:  # a section had nothing to draw: the others close ranks
            for holder in self._gaps:
                self.grid.removeWidget(holder)
                _drop(holder)
            self._place(self._drawn)
        self._gaps = []
        if self.problems:
            self.message.setText("Some of this report could not be drawn (" + "; ".join(self.problems) + ").")
            self.message.show()
        elif not self.sections:
            self.message.setText(
                "This evaluation report has no plots (written by an older version?): evaluate the run again for them."
            )
            self.message.show()
        self._report, self.done = {}, True
        self.drawn.emit()

    def _empty_body(self) -> None:
        self._chain += 1  # what an earlier show_report had left to draw is dropped
        self._pending.clear()
        self._report, self.done = {}, True
        self._gaps, self._drawn = [], []
        while self.grid.count():
            widget = self.grid.takeAt(0).widget()
            if widget is not None:
                widget.setParent(None)
                _drop(widget)
        self.sections, self.problems, self.plots = [], [], {}
        self.confusion_table = None

    def _place(self, widgets: list[tuple[QWidget, int]]) -> None:
        """`widgets` (each with its span) in order in a two-column grid."""
        for widget, _span in widgets:
            self.grid.removeWidget(widget)
        for row in range(self.grid.rowCount()):
            self.grid.setRowStretch(row, 0)
        row, column = 0, 0
        for index, (widget, span) in enumerate(widgets):
            if span == 2 or (index == len(widgets) - 1 and column == 0 and index > 0):
                row += column  # a half-filled row is left as it is
                self.grid.addWidget(widget, row, 0, 1, 2)
                self.grid.setRowStretch(row, 1)
                row, column = row + 1, 0
                continue
            self.grid.addWidget(widget, row, column, 1, 1)
            self.grid.setRowStretch(row, 1)
            row, column = (row + 1, 0) if column else (row, 1)

    def _plot(self, key: str, title: str, x_label: str, y_label: str):
        import pyqtgraph as pg

        palette = self.palette()
        # no context menu (built eagerly otherwise: a quarter of the widget's cost)
        widget = pg.PlotWidget(background=palette.color(QPalette.ColorRole.Base), enableMenu=False)
        widget.setObjectName(f"evaluation_{key}")
        widget.setMinimumHeight(PLOT_HEIGHT)
        widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        item = widget.getPlotItem()
        item.setTitle(_shown(title), size="10pt")  # pyqtgraph shows these as rich text
        item.setLabel("bottom", _shown(x_label))
        item.setLabel("left", _shown(y_label))
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        self.plots[key] = widget
        return widget

    def _legend(self, widget, columns: int):
        return row_legend(widget.getPlotItem(), self.palette().color(QPalette.ColorRole.Text), columns, spacing=12)

    @staticmethod
    def _fit_legend(legend, rows_hint: int) -> None:
        """Room for `rows_hint` rows now; then as many columns as the plot's width holds, as it resizes."""
        legend.setMinimumHeight(LEGEND_ROW * max(1, rows_hint))
        view = legend.parentItem().getViewBox() if hasattr(legend.parentItem(), "getViewBox") else None
        if view is None or not legend.items:
            return

        def fit(*_args) -> None:
            widest = max(sample.boundingRect().width() + label.itemRect().width() for sample, label in legend.items)
            columns = max(1, min(len(legend.items), int(view.width() // (widest + 12))))
            if columns != legend.columnCount:
                legend.setColumnCount(columns)
            legend.setMinimumHeight(LEGEND_ROW * -(-len(legend.items) // columns))

        view.sigResized.connect(fit)

    def _roc(self, report: dict):
        import pyqtgraph as pg

        roc = as_dict(report.get("roc"))
        fpr, tpr = _numbers(roc.get("fpr")), _numbers(roc.get("tpr"))
        if not fpr or len(fpr) != len(tpr):
            return None
        widget = self._plot("roc", "ROC curve", "False positive rate", "True positive rate")
        item = widget.getPlotItem()
        legend = self._legend(widget, 2)
        auc = finite(roc.get("auc"))
        item.plot(
            [0.0, 1.0],
            [0.0, 1.0],
            pen=pg.mkPen(CHANCE_COLOUR, width=1, style=Qt.PenStyle.DashLine),
            name="chance (AUC 0.5)",
        )
        item.plot(
            fpr,
            tpr,
            pen=pg.mkPen(SERIES_COLOURS[0], width=2.5),
            connect="finite",
            name="model" + (f" (AUC {auc:.4f})" if auc is not None else ""),
        )
        self._fit_legend(legend, 1)
        self._unit_axis(item, "left")
        self._unit_axis(item, "bottom")
        return widget

    @staticmethod
    def _unit_axis(item, side: str) -> None:
        """A 0..1 axis with its ends labelled (six labels, three on a short axis), padded so the end labels show."""
        axis, view = item.getAxis(side), item.getViewBox()

        def fit(*_args) -> None:
            length = view.height() if side == "left" else view.width()
            axis.setTicks([FEW_UNIT_TICKS if 0 < length < SHORT_AXIS else UNIT_TICKS, []])
            padding = max(UNIT_PADDING, END_LABEL_ROOM / length) if length > 0 else UNIT_PADDING
            if side == "left":
                item.setYRange(0, 1, padding=padding)
            else:
                item.setXRange(0, 1, padding=padding)

        fit()
        view.sigResized.connect(fit)

    def _confusion(self, report: dict):
        confusion = as_dict(report.get("confusion"))
        labels = [str(label) for label in as_list(confusion.get("labels"))]
        matrix = as_list(confusion.get("matrix"))
        if not labels or len(matrix) != len(labels) or any(len(as_list(row)) != len(labels) for row in matrix):
            raise ValueError("the confusion matrix is not square with one row per label")
        counts = [[int(finite(c) or 0) for c in row] for row in matrix]
        # a confusion matrix cut down to its first classes still gives each cell's share of the whole row
        row_totals = [int(finite(t) or 0) for t in as_list(confusion.get("row_totals"))]
        if len(row_totals) != len(counts):
            row_totals = [sum(row) for row in counts]
        total = int(finite(confusion.get("total")) or 0) or sum(map(sum, counts))
        box = QWidget(objectName="evaluation_confusion")
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        title = QLabel("<b>Confusion matrix</b> — rows: actual class, columns: predicted; % of the actual class")
        title.setWordWrap(True)
        layout.addWidget(title)
        table = QTableWidget(len(labels), len(labels), objectName="confusionTable")
        table.setHorizontalHeaderLabels([f"predicted {label}" for label in labels])
        table.setVerticalHeaderLabels([f"actual {label}" for label in labels])
        table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        base = self.palette().color(QPalette.ColorRole.Base)
        for r, row in enumerate(counts):
            row_total = row_totals[r]
            for c, count in enumerate(row):
                share = count / row_total if row_total else 0.0
                cell = QTableWidgetItem(f"{count:,}\n{100 * share:.1f}%")
                cell.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                tint = RIGHT_COLOUR if r == c else WRONG_COLOUR
                mix = 0.15 + 0.6 * share if count else 0.0
                blend = (round(b + (t - b) * mix) for b, t in zip(base.getRgb()[:3], tint.getRgb()[:3], strict=True))
                cell.setBackground(QBrush(QColor(*blend)))
                cell.setToolTip(
                    f"actual {labels[r]}, predicted {labels[c]}: {count:,} of {row_total:,} "
                    f"({100 * share:.1f}% of the actual class, {100 * count / max(total, 1):.1f}% of all)"
                )
                table.setItem(r, c, cell)
        height = 30 + CELL_HEIGHT * len(labels)
        table.setMinimumHeight(min(height, 30 + 48 * len(labels)))
        table.setMaximumSize(160 + 170 * len(labels), height)  # a grid of numbers, not a wall of colour
        table.setMinimumWidth(130 + 110 * len(labels))  # "predicted negative" and "128 / 50.6%" stay whole
        layout.addWidget(table)
        classification = as_dict(report.get("classification"))
        figures = [f"{name} {_figure(value)}" for name, value in classification.items() if finite(value) is not None]
        threshold = finite(report.get("threshold"))
        if figures:
            note = QLabel(
                ("at P(positive) > 0.5: " if threshold == 0.5 else "") + ", ".join(figures) + f" · {total:,} rows"
            )
            note.setObjectName("confusionFigures")
            note.setWordWrap(True)
            layout.addWidget(note)
        layout.addStretch(1)  # the title, grid and figures together at the top
        self.confusion_table = table
        return box

    def _curve(self, index: int, curve, _report: dict):
        """The plot of the report's `index`-th curve by k (one labelled line per series), or None."""
        import pyqtgraph as pg

        curve = as_dict(curve)
        ks = _numbers(curve.get("ks"))
        series = [as_dict(s) for s in as_list(curve.get("series"))]
        if not ks or not series:
            return None
        y_label = str(curve.get("y_label") or "value")
        widget = self._plot(f"curve{index}", str(curve.get("title") or y_label), "k (top of the ranking)", y_label)
        item = widget.getPlotItem()
        legend = self._legend(widget, 1)
        drawn, shown = 0, []
        for number, s in enumerate(series):
            values = _numbers(s.get("values"))[: len(ks)]
            if not values:
                continue
            shown += values
            emphasis = s.get("emphasis") or ("main" if number == 0 else "normal")
            colour = SERIES_COLOURS[number % len(SERIES_COLOURS)]
            pen = {
                "main": pg.mkPen(colour, width=3),
                "faint": pg.mkPen(colour, width=1.5, style=Qt.PenStyle.DashLine),
            }.get(emphasis, pg.mkPen(colour, width=2))
            item.plot(
                ks[: len(values)],
                values,
                pen=pen,
                connect="finite",
                name=_shown(s.get("label") or s.get("name") or f"series {number + 1}"),
            )
            drawn += 1
        if not drawn:
            del self.plots[f"curve{index}"]
            widget.deleteLater()
            return None
        self._fit_legend(legend, drawn)
        item.setXRange(min(ks), max(ks), padding=0.02)
        if self._within_unit(shown):
            self._unit_axis(item, "left")
        return widget

    @staticmethod
    def _within_unit(values: list[float]) -> bool:
        """Whether the finite `values` (NaN for a gap) all lie in 0..1."""
        values = [v for v in values if not math.isnan(v)]
        return bool(values) and min(values) >= 0 and max(values) <= 1

    def _buckets(self, report: dict):
        import pyqtgraph as pg

        buckets = as_dict(report.get("buckets"))
        rows = [as_dict(r) for r in as_list(buckets.get("rows"))]
        if not rows:
            return None
        chart = [as_dict(s) for s in as_list(buckets.get("series")) if as_dict(s).get("name")]
        if not chart:
            return None
        unit = str(buckets.get("unit") or "rows")
        y_label = " / ".join(dict.fromkeys(str(s.get("label") or s["name"]).split(" ")[0] for s in chart))
        widget = self._plot(
            "buckets", str(buckets.get("title") or "By bucket"), str(buckets.get("by") or "bucket"), y_label
        )
        item = widget.getPlotItem()
        legend = self._legend(widget, min(len(chart), 4))
        width = 0.8 / len(chart)
        # a bar takes the colour of the curve it belongs to (the same protocol in both plots), lighter for a
        # second figure of that curve; else a colour of its own
        curve_colours = {}
        for curve in as_list(report.get("curves"))[:1]:
            for number, s in enumerate(as_list(as_dict(curve).get("series"))):
                curve_colours[as_dict(s).get("name")] = SERIES_COLOURS[number % len(SERIES_COLOURS)]
        free = [c for c in SERIES_COLOURS if c not in curve_colours.values()] or list(SERIES_COLOURS)
        used: set[str] = set()
        spare = 0
        for number, s in enumerate(chart):
            heights = [finite(as_dict(r.get("values")).get(s["name"])) for r in rows]
            xs = [i + (number - (len(chart) - 1) / 2) * width for i in range(len(rows))]
            shown = [(x, h) for x, h in zip(xs, heights, strict=True) if h is not None]
            if s.get("curve") in curve_colours:
                colour = QColor(curve_colours[s["curve"]])
            else:
                colour, spare = QColor(free[spare % len(free)]), spare + 1
            if colour.name() in used:
                colour.setAlpha(110)
            used.add(colour.name())
            bars = pg.BarGraphItem(
                x=[x for x, _ in shown],
                height=[h for _, h in shown],
                width=width * 0.9,
                brush=pg.mkBrush(colour),
                pen=pg.mkPen(colour.name(), width=1),
            )
            item.addItem(bars)
            legend.addItem(bars, _shown(s.get("label") or s["name"]))
        self._fit_legend(legend, -(-len(chart) // 4))
        counts = [finite(r.get("count")) for r in rows]
        labels = [short_text(printable(r.get("label", "?")), 24) for r in rows]
        ticks = [(i, t + ("" if c is None else f"\n{int(c):,} {unit}")) for i, (t, c) in enumerate(zip(labels, counts))]
        axis = item.getAxis("bottom")
        axis.setTicks([ticks, []])
        axis.setHeight(52)
        item.setXRange(-0.5, len(rows) - 0.5, padding=0.02)
        self._unit_axis(item, "left")
        return widget

    def _histogram(self, report: dict):
        import pyqtgraph as pg

        histogram = as_dict(report.get("histogram"))
        edges = _numbers(histogram.get("edges"))
        series = [as_dict(s) for s in as_list(histogram.get("series"))]
        if len(edges) < 2 or not series:
            return None
        widget = self._plot("histogram", str(histogram.get("title") or "Histogram"), "P(positive)", "rows")
        item = widget.getPlotItem()
        legend = self._legend(widget, len(series))
        bins = len(edges) - 1
        width = (edges[-1] - edges[0]) / bins * 0.8 / len(series)
        for number, s in enumerate(series):
            counts = _numbers(s.get("counts"))[:bins]
            xs = [(edges[i] + edges[i + 1]) / 2 + (number - (len(series) - 1) / 2) * width for i in range(len(counts))]
            colour = CLASS_COLOURS[number % len(CLASS_COLOURS)]
            bars = pg.BarGraphItem(
                x=xs,
                height=[0.0 if math.isnan(c) else c for c in counts],
                width=width * 0.9,
                brush=pg.mkBrush(colour),
                pen=None,
            )
            item.addItem(bars)
            legend.addItem(bars, f"actual {_shown(s.get('name', number))}")
        self._fit_legend(legend, 1)
        item.setXRange(edges[0], edges[-1], padding=0.02)
        return widget
