"""Live plots (pyqtgraph): loss raw + smoothed, validation metrics, samples/s, lr, GradScaler scale, memory.
Events append to decimating buffers (app.series); a timer redraws changed curves at most REDRAW_HZ times a second.
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QGraphicsItem, QGridLayout, QLabel, QWidget

from app.panels.plot_notes import NO_RUN, WAITING, PlotLabelling
from app.panels.plot_overlays import MARKER_BUDGET, OverlayPlotting
from app.plot_legend import FittedLegend
from app.plot_points import VAL_SPLIT, history_points
from app.plot_ranges import StableRange, x_end_for
from app.plot_title import FittedTitle
from app.series import DEFAULT_BUDGET, Series, SmoothedSeries
from core.engine.events import CheckpointSaved, EvalMetrics, RunEnded, RunStarted, StepMetrics

REDRAW_HZ = 4  # each redraw re-lays out axes in Python, competing with the trainer for the GIL
METRIC_COLOURS = ("#2e9b57", "#c98a12", "#8e44ad", "#d0453c", "#16a2b8", "#6a7a90")
LOSS_COLOUR = "#3b6fd8"
# key, objectName, title, (y label, units), y scale, (grid row, column, column span). The y scale is "linear",
# "log", "auto" (turns log once positive data spans AUTO_LOG_RATIO) or "zero" (linear, always holding 0).
PLOT_SPECS = (
    ("loss", "lossPlot", "Training loss", ("Loss", None), "auto", (0, 0, 2)),
    ("eval", "evalPlot", "Validation metrics", ("Metric", None), "linear", (0, 2, 1)),
    ("throughput", "throughputPlot", "Throughput", ("Samples/s", None), "zero", (0, 3, 1)),
    ("lr", "lrPlot", "Learning rate", ("Learning rate", None), "linear", (1, 0, 1)),
    ("grad_norm", "gradNormPlot", "Gradient norm (pre-clip)", ("L2 norm", None), "auto", (1, 1, 1)),
    ("scale", "scalePlot", "Loss scale (fp16)", ("Scale", None), "log", (1, 2, 1)),
    ("memory", "memoryPlot", "Device memory", ("Memory", "MiB"), "zero", (1, 3, 1)),
)
# The run's line curves: plot, key, legend name, colour, width.
LINES = (
    ("loss", "loss_raw", "raw", (59, 111, 216, 90), 1),
    ("loss", "loss_smooth", "smoothed", LOSS_COLOUR, 2),
    ("throughput", "throughput", "raw", (46, 155, 87, 90), 1),
    ("throughput", "throughput_smooth", "smoothed", "#2e9b57", 2),
    ("lr", "lr", None, "#c98a12", 2),
    ("grad_norm", "grad_norm", None, "#16a2b8", 2),
    ("scale", "scale", "loss scale", "#8e44ad", 2),
    ("memory", "memory", None, "#d0453c", 2),
)
# Points a line curve is drawn from (app.series decimates beyond them; curves with markers: MARKER_BUDGET).
LINE_BUDGET = DEFAULT_BUDGET
# A line curve this short or shorter gets a dot on each point when a point has no finite neighbour.
FEW_POINTS = 64
# Buffers that may hold NaN (an overflowed step's norm, a missing metric) need pyqtgraph's finite check.
MAY_HOLD_NAN = ("grad_norm", "eval:", "split:")
SPLIT_SYMBOL = "star"
MEMORY_TITLES = {
    "cuda": "GPU memory (peak allocated)",
    "xpu": "XPU memory (peak allocated)",
    "mps": "MPS memory (allocated)",
    "cpu": "Process memory (resident)",
}


STEP_COLUMNS = ("loss", "samples_per_second", "lr", "grad_norm", "grad_scale", "skipped_steps", "memory_bytes")
END_MARGIN_PX = 10  # room beyond the last step, so the best checkpoint's ring (17 px) and a test star show whole


def _end_margin(widget) -> float:
    """The room after the x range's last step, a fraction of the range: END_MARGIN_PX of `widget`'s width (2% to 8%)."""
    width = widget.getPlotItem().getViewBox().width()
    return min(0.08, max(0.02, END_MARGIN_PX / width)) if width > 0 else 0.05


class PlotsPanel(PlotLabelling, OverlayPlotting, QWidget):
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
        self._legends: dict = {}
        self._fitted: dict[str, FittedLegend] = {}  # plot: its legend kept whole (app.plot_legend)
        self._titles: dict[str, FittedTitle] = {}  # plot: its title, elided to fit (app.plot_title)
        self._notes: dict = {}
        self._dots: set[str] = set()  # line curves currently drawn with a dot on each point (few points)
        self._metric_colours: dict[str, str] = {}
        self._ceiling: dict[str, float] = {}
        self._split_samples: dict = {}  # legend-only samples, one per non-validation split
        self._ceiling_lines: list = []
        self._unmeasured: set[str] = set()  # plots the run's device does not report
        self._skipped = 0
        self._total_steps = 0
        self._x_start = 0
        self._x_end = 10
        self._run_start: int | None = None  # the start_step of the run on show
        self._waiting = NO_RUN
        self._timer = QTimer(self, interval=int(1000 / REDRAW_HZ))
        self._timer.timeout.connect(self.redraw)
        self.redraws = 0  # how many curve updates were drawn (the benchmark reads it)
        self._overlays: list = []  # (plot key, curve, label) of other runs drawn for comparison
        self._overlaid_runs = 0  # how many runs those curves are of
        self._overlay_tasks: list = []  # the task each overlaid run trained (None: unknown)
        self.run_task = ""  # the task of the run on show (its RunStarted's)
        self._overlay_y: dict[str, tuple[float, float]] = {}  # plot: the finite y extremes of its overlays
        self._overlay_x: tuple[float, float] | None = None  # the steps the overlays span

    def title(self, key: str) -> str:
        """A plot's whole title (the plot shows it elided when narrow)."""
        return self._titles[key].text

    def build(self) -> None:
        """Create the pyqtgraph widgets (imports pyqtgraph: call once the window is showing)."""
        if self.plots:
            return
        import pyqtgraph as pg

        palette = self.palette()
        pg.setConfigOptions(
            antialias=False,
            background=palette.color(QPalette.ColorRole.Base),
            foreground=palette.color(QPalette.ColorRole.Text),
        )
        self._placeholder.hide()
        from app.plot_axes import CompactAxis, CountAxis, SpacedAxis, StepAxis

        axes = {"throughput": CountAxis, "lr": CompactAxis}  # samples/s: 12k, not 12000; lr: 1e-4, not 0.0001000

        for key, name, title, (ylabel, units), scale, (row, column, span) in PLOT_SPECS:
            left = axes.get(key, SpacedAxis)("left")
            widget = pg.PlotWidget(axisItems={"bottom": StepAxis("bottom"), "left": left})
            widget.setObjectName(name)
            item = widget.getPlotItem()
            self._titles[key] = FittedTitle(widget, title)
            item.setLabel("bottom", "Optimizer step")
            item.setLabel("left", ylabel, units=units)
            for axis in ("left", "bottom"):
                axis_item = item.getAxis(axis)
                axis_item.enableAutoSIPrefix(False)
                # Axes rarely change: Qt keeps them as a pixmap and re-renders only when the range moves.
                axis_item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            item.showGrid(x=True, y=True, alpha=0.2)
            item.setLogMode(y=scale == "log")
            # No pyqtgraph downsampling (the series are decimated already; its "peak" mode loses extremes next
            # to a gap). Clip-to-view stays: it only slices the x-sorted data to the view.
            item.setDownsampling(ds=1, auto=False)
            item.setClipToView(True)
            item.disableAutoRange()  # ranges move only when data leaves them (app.plot_ranges)
            self._ranges[key] = StableRange(log=scale == "log", auto_log=scale == "auto", zero_based=scale == "zero")
            item.setXRange(0, 10, padding=0)
            item.setYRange(*self._ranges[key].default, padding=0)  # log10 units for the scale: 1 .. 1e6
            item.getViewBox().sigRangeChangedManually.connect(lambda *_a, k=key: self._user_moved(k))
            self._add_note(key, item)
            widget.setMinimumSize(170, 150)  # 4 columns + the form fit a 1280 px screen
            self.plots[key] = widget
            self._grid.addWidget(widget, row, column, 1, span)
        for column in range(4):
            self._grid.setColumnStretch(column, 1)
        for plot in ("loss", "eval", "throughput", "scale"):
            self._add_legend(plot)
        for plot, key, name, colour, width in LINES:
            self._add_curve(plot, key, name, pg.mkPen(colour, width=width))
        self._add_curve("scale", "skipped", "skipped (overflow)", None, symbol="t1", colour="#d0453c")
        self._show_scaler_state(None)
        self._show_notes()
        self._timer.start()

    def _user_moved(self, key: str) -> None:
        self._ranges[key].manual = True

    def _show_scaler_state(self, scaler_on: bool | None) -> None:
        on = f"Loss scale · {self._skipped} skipped" if self._skipped else "Loss scale"
        self._titles["scale"].set(
            {None: "Loss scale (fp16 runs)", False: "Loss scale: off (fp16 only)"}.get(scaler_on, on)
        )

    def _metric_colour(self, name: str) -> str:
        """One colour per metric name for the run: its validation curve, test marker and ceiling line."""
        if name not in self._metric_colours:
            self._metric_colours[name] = METRIC_COLOURS[len(self._metric_colours) % len(METRIC_COLOURS)]
        return self._metric_colours[name]

    def _show_ceiling(self, ceiling: dict) -> None:
        """A dashed line at each metric's ceiling, its value in the metric's validation legend entry."""
        import pyqtgraph as pg

        item = self.plots["eval"].getPlotItem()
        for line in self._ceiling_lines:
            item.removeItem(line)
        self._ceiling_lines = []
        self._ceiling = {
            name: float(value)
            for name, value in ceiling.items()
            if isinstance(value, (int, float)) and math.isfinite(value)
        }
        for name, value in self._ceiling.items():
            line = pg.InfiniteLine(
                pos=value,
                angle=0,
                movable=False,
                pen=pg.mkPen(self._metric_colour(name), width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
            )
            line.setZValue(-5)  # under the curves
            item.addItem(line)
            self._ceiling_lines.append(line)
            self._eval_curve(VAL_SPLIT, name)
        self._dirty.update(k for k, p in self._curve_plot.items() if p == "eval")

    def _eval_curve(self, split: str, name: str) -> str | None:
        """The key of the curve of metric `name` on `split`, created on first use."""
        if not self.plots:
            return None
        key = f"eval:{name}" if split == VAL_SPLIT else f"split:{split}:{name}"
        if key in self._curves:
            return key
        import pyqtgraph as pg

        colour = self._metric_colour(name)
        if split == VAL_SPLIT:
            label = name  # the plot's title says these are validation metrics; other splits say their name
            if name in self._ceiling:
                label += f" · ceiling {self._ceiling[name]:.3g}"
            self._add_curve("eval", key, label, pg.mkPen(colour, width=2), symbol="o")
        else:
            self._add_curve("eval", key, None, None, symbol=SPLIT_SYMBOL, colour=colour)
            if split not in self._split_samples:
                text = self.palette().color(QPalette.ColorRole.Text)
                sample = pg.PlotDataItem(
                    pen=None, symbol=SPLIT_SYMBOL, symbolSize=11, symbolPen=None, symbolBrush=pg.mkBrush(text)
                )
                self._legends["eval"].addItem(sample, split)
                self._split_samples[split] = sample
        self._update_legend("eval")
        return key

    def best_point(self) -> tuple[str, int, float] | None:
        """(metric, step, value) of the best checkpoint marked on the validation plot, if any."""
        return getattr(self, "_best", None)

    def _mark_best(self, metric: str, step: int, value: float) -> None:
        """A ring on the validation plot where the best checkpoint (best.pt) was taken, one legend entry."""
        if not self.plots or not math.isfinite(value):
            return
        import pyqtgraph as pg

        marker = getattr(self, "_best_marker", None)
        if marker is None:
            colour = self._metric_colour(metric)
            marker = pg.ScatterPlotItem(size=17, symbol="o", pen=pg.mkPen(colour, width=2), brush=None)
            marker.setZValue(10)
            self.plots["eval"].getPlotItem().addItem(marker)
            self._legends["eval"].addItem(marker, f"best ({metric})")  # the ring: best.pt
            self._best_marker = marker
            self._update_legend("eval")
        marker.setData([step], [value])
        self._best = (metric, step, value)

    def _clear_best(self) -> None:
        marker = getattr(self, "_best_marker", None)
        if marker is not None:
            self.plots["eval"].getPlotItem().removeItem(marker)
            self._legends["eval"].removeItem(marker)
        self._best_marker = None
        self._best = None

    def _add_curve(
        self, plot: str, key: str, name: str | None, pen, symbol: str | None = None, colour: str | None = None
    ):
        item = self.plots[plot].getPlotItem()
        brush = colour or (pen.color() if symbol and pen is not None else None)
        curve = item.plot(
            name=name,
            pen=pen,
            symbol=symbol,
            symbolSize=(11 if symbol == SPLIT_SYMBOL else 9) if pen is None else 6,
            symbolBrush=brush,
            symbolPen=None,
            skipFiniteCheck=not key.startswith(MAY_HOLD_NAN),
            connect="finite",
        )
        curve.setDownsampling(ds=1, auto=False)
        curve.setClipToView(True)
        if pen is None:
            curve.setZValue(5)  # markers over the lines
        self._curves[key] = curve
        self._curve_plot[key] = plot
        budget = LINE_BUDGET if symbol is None else MARKER_BUDGET
        self._series[key] = SmoothedSeries(0.9, budget=budget) if key.endswith("_smooth") else Series(budget=budget)
        self._update_legend(plot)
        return curve

    def clear(self) -> None:
        """Forget the run on show: every series, the per-run curves and ceiling lines, and every axis's range."""
        for series in self._series.values():
            series.clear()
        for key in [k for k in self._curves if k.startswith(("eval:", "split:"))]:
            self.plots["eval"].getPlotItem().removeItem(self._curves.pop(key))
            del self._series[key]
            del self._curve_plot[key]
        for sample in self._split_samples.values():
            self._legends["eval"].removeItem(sample)
        self._split_samples = {}
        self._clear_best()
        self._metric_colours = {}
        if self.plots:
            self._show_ceiling({})
            self._update_legend("eval")
        self._skipped = 0
        self._unmeasured = set()
        self._dirty = set(self._curves)
        self._reset_axes()

    def _reset_range(self, key: str) -> None:
        """The plot's y range back to its default (and its log mode), as before any data."""
        keeper = self._ranges[key]
        keeper.reset()
        item = self.plots[key].getPlotItem()
        if self._log_mode(key) != keeper.log:
            item.setLogMode(y=keeper.log)
        item.setYRange(*keeper.default, padding=0)

    def _reset_axes(self) -> None:
        for key in self._ranges:
            self._reset_range(key)
        self._set_x_end(self._x_end)
        for plot in self._overlay_y:  # overlays stay for the new run: its empty plots already show them whole
            self._fit_y(plot)

    def _log_mode(self, key: str) -> bool:
        return bool(self.plots[key].getPlotItem().getAxis("left").logMode)

    def handle_event(self, event) -> None:
        if isinstance(event, StepMetrics):  # the hot path: appends only (extend_steps' numpy set-up is for blocks)
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
            elif "memory" not in self._unmeasured and not len(self._series.get("memory", ())):
                self._unmeasured.add("memory")
                self._dirty.add("memory")
            if step >= self._x_end and x_end_for(step, self._total_steps) != self._x_end:
                self._set_x_end(x_end_for(step, self._total_steps))
        elif isinstance(event, RunStarted):
            self.run_task = event.task
            self._scaler_on = bool(event.scaler)
            self._total_steps = event.total_steps
            self._x_start = self._run_start = event.start_step
            self._x_end = x_end_for(event.start_step + 1, event.total_steps)
            self._waiting = WAITING
            self.clear()
            if self.plots:
                self._show_scaler_state(self._scaler_on)
                self._show_ceiling(getattr(event, "ceiling", {}) or {})
                device = str(event.device).split(":")[0]
                self._titles["memory"].set(MEMORY_TITLES.get(device, "Device memory"))
                self._show_notes()
        elif isinstance(event, CheckpointSaved):
            if event.kind == "best" and event.rank in (None, 1) and event.metric and event.value is not None:
                self._mark_best(event.metric, event.step, event.value)
        elif isinstance(event, EvalMetrics):
            for name, value in event.metrics.items():
                key = self._eval_curve(event.split, name)
                if key is not None and isinstance(value, (int, float)) and math.isfinite(value):
                    self._append(key, event.step, value)
        elif isinstance(event, RunEnded):
            self._waiting = f"No points: the run {event.status} at step {event.step:,}"
            if self.plots:
                self._show_notes()

    @property
    def skipped_steps(self) -> int:
        return self._skipped

    def _set_x_end(self, end: int) -> None:
        self._x_end = max(end, self._x_start + 1)
        end = max((_end_margin(widget) for widget in self.plots.values()), default=0.02)  # one for every plot
        for key, widget in self.plots.items():
            if not self._ranges[key].manual:
                lo, hi = self._x_range(key)
                widget.getPlotItem().setXRange(lo - 0.02 * (hi - lo), hi + end * (hi - lo), padding=0)

    def _append(self, key: str, step: int, value: float | None) -> None:
        if (series := self._series.get(key)) is not None:
            series.append(step, value)
            self._dirty.add(key)

    def extend_series(self, key: str, xs, ys) -> None:
        """Many points for one curve at once: `Series.extend`, the same as appending them one by one."""
        series = self._series.get(key)
        if series is None or not len(xs):
            return
        series.extend(xs, ys)
        self._dirty.add(key)

    def extend_steps(
        self,
        steps,
        loss,
        samples_per_second,
        lr,
        grad_norm=None,
        grad_scale=None,
        skipped_steps=None,
        memory_bytes=None,
    ) -> None:
        """Many StepMetrics at once, as columns in step order: `handle_event` on each in turn, vectorised."""
        steps = np.asarray(steps, dtype=np.float64)
        if not len(steps):
            return

        def column(values):
            """(values as floats, whether each event had a value): none had one when `values` is None."""
            if values is None:
                return np.full(len(steps), np.nan), np.zeros(len(steps), dtype=bool)
            array = np.asarray(values)
            if array.dtype == object:
                present = np.array([v is not None for v in array], dtype=bool)
                return np.array([np.nan if v is None else v for v in array], dtype=np.float64), present
            return array.astype(np.float64), np.ones(len(array), dtype=bool)

        loss = np.asarray(loss, dtype=np.float64)
        samples_per_second = np.asarray(samples_per_second, dtype=np.float64)
        self.extend_series("loss_raw", steps, loss)
        self.extend_series("loss_smooth", steps, loss)
        self.extend_series("throughput", steps, samples_per_second)
        self.extend_series("throughput_smooth", steps, samples_per_second)
        self.extend_series("lr", steps, lr)
        values, present = column(grad_norm)  # a curve no event has a value for gets no points (extend_series)
        self.extend_series("grad_norm", steps[present], np.where(np.isfinite(values), values, np.nan)[present])
        skipped = np.full(len(steps), self._skipped) if skipped_steps is None else np.asarray(skipped_steps)
        values, present = column(grad_scale)
        self.extend_series("scale", steps[present], values[present])
        before = np.concatenate([[self._skipped], skipped[:-1]])  # the count the previous event left
        marked = present & (skipped > before)
        self.extend_series("skipped", steps[marked], values[marked])
        if int(skipped[-1]) != self._skipped:
            self._skipped = int(skipped[-1])
            self._show_scaler_state(self._scaler_on)
        values, present = column(memory_bytes)
        self.extend_series("memory", steps[present], values[present] / 2**20)
        top = int(steps.max())
        if top >= self._x_end and x_end_for(top, self._total_steps) != self._x_end:
            self._set_x_end(x_end_for(top, self._total_steps))

    def show_history(self, records, until_step: int | None = None) -> None:
        """Draw a resumed run's earlier metrics as the start of its curves, right after its RunStarted."""
        if until_step is None:
            until_step = self._run_start
        steps, evals, begin = history_points(records, until_step)
        if begin is None:
            return
        if steps:
            columns = {name: [record.get(name) for record in steps] for name in STEP_COLUMNS}
            for name in ("loss", "samples_per_second", "lr"):
                columns[name] = [np.nan if v is None else v for v in columns[name]]
            columns["skipped_steps"] = [v or 0 for v in columns["skipped_steps"]]
            self.extend_steps([record["step"] for record in steps], **columns)
            if any(v is not None for v in columns["memory_bytes"]):
                self._unmeasured.discard("memory")
        for event in evals:
            self.handle_event(event)
        if begin < self._x_start:
            self._x_start = begin
            self._set_x_end(self._x_end)

    def series(self, key: str) -> Series | None:
        return self._series.get(key)

    def redraw(self) -> None:
        """Push the changed series to their curves; only plots whose y range must move are re-ranged."""
        if not self._dirty or not self.isVisible():
            return
        plots = set()
        for key in self._dirty:
            series = self._series[key]
            curve = self._curves[key]
            if len(series):
                x, y = series.x, series.y
                curve.setData(x, y)
            else:
                x = y = None
                curve.setData([], [])
            if key in self._dots or (curve.opts["symbol"] is None and curve.opts["pen"] is not None):
                self._show_dots(key, curve, y)
            plots.add(self._curve_plot[key])
            self.redraws += 1
        self._dirty.clear()
        for plot in plots:
            self._fit_y(plot)
        self._show_notes()

    def _show_dots(self, key: str, curve, y) -> None:
        """Give a short line curve (FEW_POINTS) a dot on each point that has no finite neighbour."""
        lonely = False
        if y is not None and len(y) <= FEW_POINTS:
            finite = np.isfinite(y)
            before = np.concatenate([[False], finite[:-1]])
            after = np.concatenate([finite[1:], [False]])
            lonely = bool((finite & ~before & ~after).any())
        if lonely == (key in self._dots):
            return
        if lonely:
            colour = curve.opts["pen"].color()
            colour.setAlpha(255)
            curve.setSymbol("o")
            curve.setSymbolSize(7)
            curve.setSymbolBrush(colour)
            curve.setSymbolPen(None)
            self._dots.add(key)
        else:
            curve.setSymbol(None)
            self._dots.discard(key)

    def _fit_y(self, plot: str) -> None:
        series = [self._series[k] for k, p in self._curve_plot.items() if p == plot]
        lo = min((s.ymin for s in series), default=math.inf)  # the validation plot may have no curve yet
        hi = max((s.ymax for s in series), default=-math.inf)
        if plot in self._overlay_y:  # other runs drawn here: the range holds them too
            lo, hi = min(lo, self._overlay_y[plot][0]), max(hi, self._overlay_y[plot][1])
        if plot == "eval":
            for line in self._ceiling_lines:
                lo, hi = min(lo, line.value()), max(hi, line.value())
        keeper = self._ranges[plot]
        new = keeper.update(lo, hi)
        if new is not None:
            item = self.plots[plot].getPlotItem()
            if keeper.log != self._log_mode(plot):  # the data came to span decades: log scale from now on
                item.setLogMode(y=keeper.log)
            item.setYRange(*new, padding=0)
