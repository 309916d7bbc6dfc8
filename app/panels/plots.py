"""Live plots (pyqtgraph): loss raw + smoothed, validation metrics, samples/s, lr, GradScaler scale, memory.

Events only append to numpy buffers (app.series); a timer redraws the curves that changed, at most
`REDRAW_HZ` times a second, with peak downsampling and clip-to-view so a 1,000,000-step run stays smooth.
pyqtgraph is imported when the plots are built, after the window is on screen.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from app.series import Series, SmoothedSeries

REDRAW_HZ = 4  # each redraw re-lays out axes in Python, competing with the trainer for the GIL
METRIC_COLOURS = ("#2e9b57", "#c98a12", "#8e44ad", "#d0453c", "#16a2b8", "#6a7a90")


class PlotsPanel(QWidget):
    """A grid of six plots; `handle_event` takes core events, the timer draws."""

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
        specs = (
            ("loss", "lossPlot", "Training loss", ("Loss", None), False),
            ("eval", "evalPlot", "Validation metrics", ("Metric", None), False),
            ("throughput", "throughputPlot", "Throughput", ("Samples/s", None), False),
            ("lr", "lrPlot", "Learning rate", ("Learning rate", None), False),
            ("scale", "scalePlot", "GradScaler loss scale (fp16)", ("Scale", None), True),
            ("memory", "memoryPlot", "Device memory", ("Memory", "MiB"), False),
        )
        for index, (key, name, title, (ylabel, units), log_y) in enumerate(specs):
            widget = pg.PlotWidget()
            widget.setObjectName(name)
            item = widget.getPlotItem()
            item.setTitle(title, size="10pt")
            item.setLabel("bottom", "Optimizer step")
            item.setLabel("left", ylabel, units=units)
            for axis in ("left", "bottom"):
                item.getAxis(axis).enableAutoSIPrefix(key in ("throughput",))
            item.showGrid(x=True, y=True, alpha=0.2)
            item.setLogMode(y=log_y)
            item.setDownsampling(auto=True, mode="peak")
            item.setClipToView(True)
            widget.setMinimumSize(220, 150)
            self.plots[key] = widget
            self._grid.addWidget(widget, index // 3, index % 3)
        loss = self.plots["loss"].getPlotItem()
        loss.addLegend(offset=(-10, 10))
        self._add_curve("loss", "loss_raw", "raw", pg.mkPen((59, 111, 216, 90), width=1))
        self._add_curve("loss", "loss_smooth", "smoothed", pg.mkPen("#3b6fd8", width=2))
        self.plots["eval"].getPlotItem().addLegend(offset=(-10, 10))
        self.plots["throughput"].getPlotItem().addLegend(offset=(-10, 10))
        self._add_curve("throughput", "throughput", "raw", pg.mkPen((46, 155, 87, 90), width=1))
        self._add_curve("throughput", "throughput_smooth", "smoothed", pg.mkPen("#2e9b57", width=2))
        self._add_curve("lr", "lr", None, pg.mkPen("#c98a12", width=2))
        self._add_curve("scale", "scale", None, pg.mkPen("#8e44ad", width=2))
        self._add_curve("memory", "memory", None, pg.mkPen("#d0453c", width=2))
        self.plots["scale"].getPlotItem().setYRange(0, 6)  # log10 units: 1 .. 1e6 until fp16 data arrives
        self._ceiling_lines: list = []
        self._show_scaler_state(None)
        self._timer.start()

    def _show_scaler_state(self, scaler_on: bool | None) -> None:
        item = self.plots["scale"].getPlotItem()
        if scaler_on is None:
            item.setTitle("GradScaler loss scale (fp16 runs)", size="10pt")
        elif scaler_on:
            item.setTitle("GradScaler loss scale", size="10pt")
        else:
            item.setTitle("GradScaler loss scale: off (fp16 runs only)", size="10pt")

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

    def _add_curve(self, plot: str, key: str, name: str | None, pen, symbol: str | None = None):
        item = self.plots[plot].getPlotItem()
        curve = item.plot(name=name, pen=pen, symbol=symbol, symbolSize=6,
                          symbolBrush=pen.color() if symbol else None, symbolPen=None)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        self._curves[key] = curve
        self._series[key] = SmoothedSeries(0.9) if key.endswith("_smooth") else Series()
        return curve

    # ------------------------------------------------------------------ events
    def clear(self) -> None:
        for series in self._series.values():
            series.clear()
        for key in [k for k in self._curves if k.startswith("eval:")]:
            self.plots["eval"].getPlotItem().removeItem(self._curves.pop(key))
            del self._series[key]
        self._dirty = set(self._curves)

    def handle_event(self, event) -> None:
        kind = type(event).__name__
        if kind == "RunStarted":
            self.clear()
            self._scaler_on = bool(event.scaler)
            if self.plots:
                self._show_scaler_state(self._scaler_on)
                self._show_ceiling(getattr(event, "ceiling", {}) or {})
        elif kind == "StepMetrics":
            step = event.step
            self._append("loss_raw", step, event.loss)
            self._append("loss_smooth", step, event.loss)
            self._append("throughput", step, event.samples_per_second)
            self._append("throughput_smooth", step, event.samples_per_second)
            self._append("lr", step, event.lr)
            if event.grad_scale is not None:
                self._append("scale", step, event.grad_scale)
            if event.memory_bytes is not None:
                self._append("memory", step, event.memory_bytes / 2**20)
        elif kind == "EvalMetrics":
            for name, value in event.metrics.items():
                key = f"eval:{name}"
                if key not in self._curves and self.plots:
                    import pyqtgraph as pg

                    colour = METRIC_COLOURS[(len([k for k in self._curves if k.startswith("eval:")]))
                                            % len(METRIC_COLOURS)]
                    self._add_curve("eval", key, f"{event.split} {name}", pg.mkPen(colour, width=2), symbol="o")
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._append(key, event.step, value)

    def _append(self, key: str, step: int, value: float | None) -> None:
        series = self._series.get(key)
        if series is None:
            return
        series.append(step, value)
        self._dirty.add(key)

    def series(self, key: str) -> Series | None:
        return self._series.get(key)

    def redraw(self) -> None:
        """Push the changed buffers to their curves (views of the numpy arrays, no copies)."""
        if not self._dirty or not self.isVisible():
            return
        for key in self._dirty:
            series = self._series[key]
            if len(series):
                self._curves[key].setData(series.x, series.y)
            else:
                self._curves[key].setData([], [])
            self.redraws += 1
        self._dirty.clear()
