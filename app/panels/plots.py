"""Live plots (pyqtgraph): loss raw + smoothed, validation metrics, samples/s, lr, GradScaler scale, memory.

Events only append to numpy buffers (app.series), which decimate on ingest (recent points raw, older ones as
min/max buckets, at most `app.series.DEFAULT_BUDGET` points a curve), so memory and redraw time stay flat however
long the run; a timer redraws the curves that changed, at most `REDRAW_HZ` times a second.
pyqtgraph is imported when the plots are built, after the window is on screen.
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QGraphicsItem, QGridLayout, QLabel, QWidget

from app.plot_ranges import StableRange, nice_x_end
from app.series import DEFAULT_BUDGET, Series, SmoothedSeries
from core.engine.events import EvalMetrics, RunStarted, StepMetrics

REDRAW_HZ = 4  # each redraw re-lays out axes in Python, competing with the trainer for the GIL
METRIC_COLOURS = ("#2e9b57", "#c98a12", "#8e44ad", "#d0453c", "#16a2b8", "#6a7a90")
# key, objectName, title, (y label, units), log y, (grid row, column, column span)
PLOT_SPECS = (
    ("loss", "lossPlot", "Training loss", ("Loss", None), False, (0, 0, 2)),
    ("eval", "evalPlot", "Validation metrics", ("Metric", None), False, (0, 2, 1)),
    ("throughput", "throughputPlot", "Throughput", ("Samples/s", None), False, (0, 3, 1)),
    ("lr", "lrPlot", "Learning rate", ("Learning rate", None), False, (1, 0, 1)),
    ("grad_norm", "gradNormPlot", "Gradient norm (pre-clip)", ("L2 norm", None), False, (1, 1, 1)),
    ("scale", "scalePlot", "Loss scale (fp16)", ("Scale", None), True, (1, 2, 1)),
    ("memory", "memoryPlot", "Device memory", ("Memory", "MiB"), False, (1, 3, 1)),
)
# Points a curve is drawn from (app.series decimates beyond them). Curves with markers get fewer: pyqtgraph
# builds each marker's key in Python (~1.5 us a point, 4 ms for 2,500), and a plot a few hundred pixels wide
# cannot show more separate markers anyway.
LINE_BUDGET = DEFAULT_BUDGET
MARKER_BUDGET = 512
# Buffers that may hold NaN (an overflowed step's norm, a missing metric) need pyqtgraph's finite check.
MAY_HOLD_NAN = ("grad_norm", "eval:")


class PlotsPanel(QWidget):
    """A grid of seven plots; `handle_event` takes core events, the timer draws."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(6)
        self._placeholder = QLabel("Loading plots…", objectName="plotsPlaceholder")
        self._grid.addWidget(self._placeholder, 0, 0)
        self.plots: dict = {}
        self._curves: dict = {}
        self._series: dict[str, Series] = {}
        self._dirty: set[str] = set()
        self._scaler_on = False
        self._curve_plot: dict[str, str] = {}
        self._ranges: dict[str, StableRange] = {}
        self._skipped = 0
        self._total_steps = 0
        self._x_start = 0
        self._x_end = 10
        self._timer = QTimer(self, interval=int(1000 / REDRAW_HZ))
        self._timer.timeout.connect(self.redraw)
        self.redraws = 0  # how many curve updates were drawn (the benchmark reads it)

    @property
    def ready(self) -> bool:
        return bool(self.plots)

    def build(self) -> None:
        """Create the pyqtgraph widgets (imports pyqtgraph: call once the window is showing)."""
        if self.plots:
            return
        import pyqtgraph as pg

        palette = self.palette()
        pg.setConfigOptions(antialias=False, background=palette.color(QPalette.ColorRole.Base),
                            foreground=palette.color(QPalette.ColorRole.Text))
        self._placeholder.hide()
        for key, name, title, (ylabel, units), log_y, (row, column, span) in PLOT_SPECS:
            widget = pg.PlotWidget()
            widget.setObjectName(name)
            item = widget.getPlotItem()
            item.setTitle(title, size="10pt")
            item.setLabel("bottom", "Optimizer step")
            item.setLabel("left", ylabel, units=units)
            for axis in ("left", "bottom"):
                axis_item = item.getAxis(axis)
                axis_item.enableAutoSIPrefix(key in ("throughput",))
                # Axes (with their grid lines and tick labels) are the costliest part of a redraw and rarely
                # change: Qt keeps them as a pixmap and re-renders only when the range moves, so live
                # curve updates stop replaying text and grid under the GIL the trainer needs.
                axis_item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            item.showGrid(x=True, y=True, alpha=0.2)
            item.setLogMode(y=log_y)
            # No pyqtgraph downsampling: the series are already decimated, and its "peak" mode would turn a
            # whole block to NaN when the block holds a gap (losing the extremes next to it) and drop the
            # newest len % ds points. Clip-to-view stays: it only slices the (x-sorted) data to the view.
            item.setDownsampling(ds=1, auto=False)
            item.setClipToView(True)
            item.disableAutoRange()  # ranges move only when data leaves them (app.plot_ranges)
            item.setXRange(0, 10, padding=0)
            item.setYRange(0, 6 if log_y else 1, padding=0)  # log10 units for the scale: 1 .. 1e6
            self._ranges[key] = StableRange(log=log_y)
            item.getViewBox().sigRangeChangedManually.connect(lambda *_a, k=key: self._user_moved(k))
            widget.setMinimumSize(220, 150)
            self.plots[key] = widget
            self._grid.addWidget(widget, row, column, 1, span)
        for column in range(4):
            self._grid.setColumnStretch(column, 1)
        loss = self.plots["loss"].getPlotItem()
        self._add_legend(loss)
        self._add_curve("loss", "loss_raw", "raw", pg.mkPen((59, 111, 216, 90), width=1))
        self._add_curve("loss", "loss_smooth", "smoothed", pg.mkPen("#3b6fd8", width=2))
        self._add_legend(self.plots["eval"].getPlotItem())
        self._add_legend(self.plots["throughput"].getPlotItem())
        self._add_curve("throughput", "throughput", "raw", pg.mkPen((46, 155, 87, 90), width=1))
        self._add_curve("throughput", "throughput_smooth", "smoothed", pg.mkPen("#2e9b57", width=2))
        self._add_curve("lr", "lr", None, pg.mkPen("#c98a12", width=2))
        self._add_curve("grad_norm", "grad_norm", None, pg.mkPen("#16a2b8", width=2))
        self._add_legend(self.plots["scale"].getPlotItem())
        self._add_curve("scale", "scale", "loss scale", pg.mkPen("#8e44ad", width=2))
        self._add_curve("scale", "skipped", "skipped (overflow)", None, symbol="t1", colour="#d0453c")
        self._add_curve("memory", "memory", None, pg.mkPen("#d0453c", width=2))
        self._ceiling_lines: list = []
        self._show_scaler_state(None)
        self._timer.start()

    def _add_legend(self, item) -> None:
        """Top-right, on a translucent panel of the plot's background: the labels stay readable over a
        curve, and the curve still shows through."""
        import pyqtgraph as pg

        base = self.palette().color(QPalette.ColorRole.Base)
        text = self.palette().color(QPalette.ColorRole.Text)
        item.addLegend(offset=(-10, 10), brush=pg.mkBrush(base.red(), base.green(), base.blue(), 150),
                       pen=pg.mkPen(text.red(), text.green(), text.blue(), 60))

    def _user_moved(self, key: str) -> None:
        self._ranges[key].manual = True

    def _show_scaler_state(self, scaler_on: bool | None) -> None:
        item = self.plots["scale"].getPlotItem()
        if scaler_on is None:
            item.setTitle("Loss scale (fp16 runs)", size="10pt")
        elif scaler_on:
            skipped = f" · {self._skipped} skipped" if self._skipped else ""
            item.setTitle(f"Loss scale{skipped}", size="10pt")
        else:
            item.setTitle("Loss scale: off (fp16 only)", size="10pt")

    def _show_ceiling(self, ceiling: dict) -> None:
        import pyqtgraph as pg

        item = self.plots["eval"].getPlotItem()
        for line in self._ceiling_lines:
            item.removeItem(line)
        self._ceiling_lines = []
        for name, value in ceiling.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                line = pg.InfiniteLine(pos=value, angle=0, movable=False,
                                       pen=pg.mkPen("#6a7a90", width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
                                       label=f"{name} ceiling {value:.3g}",
                                       labelOpts={"position": 0.15, "color": "#6a7a90", "anchors": [(0, 1), (0, 1)]})
                item.addItem(line)
                self._ceiling_lines.append(line)

    def _add_curve(self, plot: str, key: str, name: str | None, pen, symbol: str | None = None,
                   colour: str | None = None):
        item = self.plots[plot].getPlotItem()
        brush = colour or (pen.color() if symbol and pen is not None else None)
        curve = item.plot(name=name, pen=pen, symbol=symbol, symbolSize=9 if pen is None else 6,
                          symbolBrush=brush, symbolPen=None,
                          skipFiniteCheck=not key.startswith(MAY_HOLD_NAN), connect="finite")
        curve.setDownsampling(ds=1, auto=False)
        curve.setClipToView(True)
        self._curves[key] = curve
        self._curve_plot[key] = plot
        budget = LINE_BUDGET if symbol is None else MARKER_BUDGET
        self._series[key] = SmoothedSeries(0.9, budget=budget) if key.endswith("_smooth") else Series(budget=budget)
        return curve

    # ------------------------------------------------------------------ events
    def clear(self) -> None:
        for series in self._series.values():
            series.clear()
        for key in [k for k in self._curves if k.startswith("eval:")]:
            self.plots["eval"].getPlotItem().removeItem(self._curves.pop(key))
            del self._series[key]
            del self._curve_plot[key]
        for keeper in self._ranges.values():
            keeper.reset()
        self._skipped = 0
        self._dirty = set(self._curves)

    def handle_event(self, event) -> None:
        if isinstance(event, StepMetrics):  # the hot path: ~100 a second on tiny models; appends only
            step = event.step
            self._append("loss_raw", step, event.loss)
            self._append("loss_smooth", step, event.loss)
            self._append("throughput", step, event.samples_per_second)
            self._append("throughput_smooth", step, event.samples_per_second)
            self._append("lr", step, event.lr)
            if event.grad_norm is not None:
                self._append("grad_norm", step, event.grad_norm if math.isfinite(event.grad_norm) else None)
            if event.grad_scale is not None:
                self._append("scale", step, event.grad_scale)
                if event.skipped_steps > self._skipped:  # cumulative count: an overflow in this interval
                    self._append("skipped", step, event.grad_scale)
            if event.skipped_steps != self._skipped:
                self._skipped = event.skipped_steps
                self._show_scaler_state(self._scaler_on)
            if event.memory_bytes is not None:
                self._append("memory", step, event.memory_bytes / 2**20)
            if step > self._x_end and not self._total_steps:
                self._set_x_end(nice_x_end(step))
        elif isinstance(event, RunStarted):
            self.clear()
            self._scaler_on = bool(event.scaler)
            self._total_steps = event.total_steps
            if self.plots:
                self._show_scaler_state(self._scaler_on)
                self._show_ceiling(getattr(event, "ceiling", {}) or {})
            self._x_start = event.start_step
            self._set_x_end(event.total_steps or nice_x_end(event.start_step + 1))
        elif isinstance(event, EvalMetrics):
            for name, value in event.metrics.items():
                key = f"eval:{name}"
                if key not in self._curves and self.plots:
                    import pyqtgraph as pg

                    colour = METRIC_COLOURS[(len([k for k in self._curves if k.startswith("eval:")]))
                                            % len(METRIC_COLOURS)]
                    self._add_curve("eval", key, f"{event.split} {name}", pg.mkPen(colour, width=2), symbol="o")
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._append(key, event.step, value)

    @property
    def skipped_steps(self) -> int:
        return self._skipped

    def _set_x_end(self, end: int) -> None:
        self._x_end = max(end, self._x_start + 1)
        for key, widget in self.plots.items():
            if not self._ranges[key].manual:
                widget.getPlotItem().setXRange(self._x_start, self._x_end, padding=0.02)

    def _append(self, key: str, step: int, value: float | None) -> None:
        series = self._series.get(key)
        if series is None:
            return
        series.append(step, value)
        self._dirty.add(key)

    def extend_series(self, key: str, xs, ys) -> None:
        """Many points for one curve at once (e.g. a resumed run's history): `Series.extend`, the same
        decimation as appending them one by one."""
        series = self._series.get(key)
        if series is None or not len(xs):
            return
        series.extend(xs, ys)
        self._dirty.add(key)

    def extend_steps(self, steps, loss, samples_per_second, lr, grad_norm=None, grad_scale=None,
                     skipped_steps=None, memory_bytes=None) -> None:
        """Many StepMetrics at once, as columns (one entry per event, in step order): the same series, skipped
        markers, title and x range as `handle_event` on each event in turn, vectorised.

        A column left out, or a None in an object column, is the event's None (nothing appended); NaN/inf in
        a float column is a value (a gap where handle_event would append a gap). Without `skipped_steps` the
        skipped count stays as it is.
        """
        steps = np.asarray(steps, dtype=np.float64)
        if not len(steps):
            return

        def column(values):
            """(values as floats, whether each event had a value), or None when no event had one."""
            if values is None:
                return None
            array = np.asarray(values)
            if array.dtype == object:
                present = np.array([v is not None for v in array], dtype=bool)
                array = np.array([np.nan if v is None else v for v in array], dtype=np.float64)
                return (array, present) if present.any() else None
            return array.astype(np.float64), np.ones(len(array), dtype=bool)

        loss = np.asarray(loss, dtype=np.float64)
        samples_per_second = np.asarray(samples_per_second, dtype=np.float64)
        self.extend_series("loss_raw", steps, loss)
        self.extend_series("loss_smooth", steps, loss)
        self.extend_series("throughput", steps, samples_per_second)
        self.extend_series("throughput_smooth", steps, samples_per_second)
        self.extend_series("lr", steps, lr)
        norms = column(grad_norm)
        if norms is not None:
            values, present = norms
            self.extend_series("grad_norm", steps[present], np.where(np.isfinite(values), values, np.nan)[present])
        skipped = np.full(len(steps), self._skipped) if skipped_steps is None else np.asarray(skipped_steps)
        scales = column(grad_scale)
        if scales is not None:
            values, present = scales
            self.extend_series("scale", steps[present], values[present])
            before = np.concatenate([[self._skipped], skipped[:-1]])  # the count the previous event left
            marked = present & (skipped > before)
            self.extend_series("skipped", steps[marked], values[marked])
        if int(skipped[-1]) != self._skipped:
            self._skipped = int(skipped[-1])
            self._show_scaler_state(self._scaler_on)
        memory = column(memory_bytes)
        if memory is not None:
            values, present = memory
            self.extend_series("memory", steps[present], values[present] / 2**20)
        top = int(steps.max())
        if top > self._x_end and not self._total_steps:
            self._set_x_end(nice_x_end(top))

    def series(self, key: str) -> Series | None:
        return self._series.get(key)

    def redraw(self) -> None:
        """Push the changed series to their curves: each hands out at most its budget of points (raw views
        until it first decimates, then arrays rebuilt only when it changed), never rewritten afterwards.

        Only plots whose y range must move are re-ranged (see app.plot_ranges), so most frames repaint the
        curves and leave the axes alone.
        """
        if not self._dirty or not self.isVisible():
            return
        plots = set()
        for key in self._dirty:
            series = self._series[key]
            if len(series):
                self._curves[key].setData(series.x, series.y)
            else:
                self._curves[key].setData([], [])
            plots.add(self._curve_plot[key])
            self.redraws += 1
        self._dirty.clear()
        for plot in plots:
            self._fit_y(plot)

    def _fit_y(self, plot: str) -> None:
        series = [self._series[k] for k, p in self._curve_plot.items() if p == plot]
        lo = min(s.ymin for s in series)
        hi = max(s.ymax for s in series)
        if plot == "eval":
            for line in self._ceiling_lines:
                lo, hi = min(lo, line.value()), max(hi, line.value())
        new = self._ranges[plot].update(lo, hi)
        if new is not None:
            self.plots[plot].getPlotItem().setYRange(*new, padding=0)
