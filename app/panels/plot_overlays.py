"""Other runs drawn over the live plots for comparison (the run history's Overlay): each run's training loss
and validation metric in its own colour and dash pattern, decimated, under the run on show, with the loss and
validation plots' ranges holding both. A part of PlotsPanel (app.panels.plots), whose state it shares."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt

from app.plot_points import OverlayPoints, overlay_points
from app.series import Series

# other runs overlaid for comparison (overlay_runs): dashed, in 10 colours at least ~28 CIELAB units (Delta E 76)
# from each other and from every live curve's colour (LOSS_COLOUR, METRIC_COLOURS), of middle lightness (seen on
# the light and the dark palette); the first ones are the most distinct, for the usual two or three runs
OVERLAY_COLOURS = (
    "#fb5607",
    "#8338ec",
    "#f72585",
    "#8ac926",
    "#606c38",
    "#ff99c8",
    "#d4a373",
    "#5e548e",
    "#a3c4bc",
    "#b5838d",
)
# An overlaid run's curve is decimated the same way (app.series, min/max buckets), to fewer points than a live
# curve: ten of them under the run on show must repaint (zoom, resize) within the 200 ms goal of
# benchmarks/overlay_redraw.py, and a plot a few hundred pixels wide shows no more. Its validation points get a
# dot each only when there are at most MARKER_BUDGET of them (sparse evaluations); denser ones are a line.
OVERLAY_BUDGET = 1024
# Points a curve with markers is drawn from, live or overlaid: pyqtgraph builds each marker's key in Python
# (~1.5 us a point, 4 ms for 2,500), and a plot a few hundred pixels wide cannot show more separate markers.
MARKER_BUDGET = 512


class OverlayPlotting:
    """PlotsPanel's overlays: `overlay_runs`, `clear_overlays`, `overlay_labels`, and the x range and fit that
    take them into account. Uses the panel's plots, ranges, series and legends."""

    def overlay_runs(self, runs) -> list[str]:
        """Draw other runs' training loss and primary validation metric over the plots, each run in its own
        colour and dash pattern with a legend entry: `runs` is a list of (label, metrics.jsonl records) or (label,
        records, metric name); without a name the first metric of the run's first validation is drawn. The
        label is the run's "name · precision" (the run history's); the validation curve's entry adds the metric.
        The records may also be what `overlay_points(records, metric)` returned, computed off the GUI thread by
        whoever read the file (reading 10 runs of 10,000 steps here is about half of overlaying them).

        Replaces the overlays shown before. The run on show (and its curves) is left as it is, and a new run
        keeps the overlays until `clear_overlays`: the loss and validation plots' ranges then hold both the
        overlays and the new run's curves. Each overlaid curve is decimated like a live one (OVERLAY_BUDGET
        points). Returns the loss legend labels drawn."""
        import pyqtgraph as pg

        self.clear_overlays(refit=False)
        if not self.plots:
            return []
        labels = []
        for index, run in enumerate(runs):
            label, records = run[0], run[1]
            points = (
                records
                if isinstance(records, OverlayPoints)
                else overlay_points(records, run[2] if len(run) > 2 else None)
            )
            x, y, metric, ex, ey = points
            colour = OVERLAY_COLOURS[index % len(OVERLAY_COLOURS)]
            # a dash pattern per run as well as a colour: runs that track each other stay told apart. One pixel
            # wide: Qt strokes a wider dashed line ~7x slower (34 ms against 4.5 ms to paint ten overlays)
            style = (Qt.PenStyle.DashLine, Qt.PenStyle.DashDotLine, Qt.PenStyle.DotLine)[index % 3]
            pen = pg.mkPen(colour, width=1, style=style)
            if len(x):
                self._add_overlay("loss", x, y, label, pen)
                labels.append(label)
            if len(ex):
                self._add_overlay(
                    "eval", ex, ey, f"{label} · {metric}", pen, symbol="o" if len(ex) <= MARKER_BUDGET else None
                )
            self._overlaid_runs += bool(len(x) or len(ex))
        for plot in {p for p, _c, _l in self._overlays}:
            self._update_legend(plot)
        self._fit_overlay_plots()
        self._show_notes()
        return labels

    def _add_overlay(self, plot: str, x, y, label: str, pen, symbol: str | None = None) -> None:
        series = Series(budget=OVERLAY_BUDGET)
        order = np.argsort(x, kind="stable") if len(x) > 1 and (np.diff(x) < 0).any() else None
        series.extend(x if order is None else x[order], y if order is None else y[order])
        item = self.plots[plot].getPlotItem()
        # no name: its legend entry is FittedLegend's (wrapped, or one of the '… and N more')
        curve = item.plot(
            series.x,
            series.y,
            pen=pen,
            symbol=symbol,
            symbolSize=5,
            symbolPen=None,
            symbolBrush=pen.color() if symbol else None,
            connect="finite",
        )
        curve.setDownsampling(ds=1, auto=False)  # decimated above, as the live curves are
        curve.setClipToView(True)  # a zoom draws only what is in view
        curve.setZValue(-2)  # under the run on show
        self._overlays.append((plot, curve, label))
        if math.isfinite(series.ymin):
            lo, hi = self._overlay_y.get(plot, (math.inf, -math.inf))
            self._overlay_y[plot] = (min(lo, series.ymin), max(hi, series.ymax))
        lo, hi = self._overlay_x or (math.inf, -math.inf)
        self._overlay_x = (min(lo, float(x.min())), max(hi, float(x.max())))

    def _fit_overlay_plots(self) -> None:
        """Fit the plots that hold overlays (or held them: their ranges refit afresh) to those and the run's
        curves: y through each plot's StableRange (a zoom by the user is left alone), x over both spans."""
        self._set_x_end(self._x_end)
        for plot in ("loss", "eval"):
            if plot in self._overlay_y or any(len(self._series[k]) for k, p in self._curve_plot.items() if p == plot):
                self._fit_y(plot)

    def _x_range(self, plot: str) -> tuple[float, float]:
        """The x range of `plot`: the run's span, widened to the overlays' steps on the plots that show them."""
        lo, hi = self._x_start, self._x_end
        if self._overlay_x is not None and plot in self._overlay_y:
            lo, hi = min(lo, self._overlay_x[0]), max(hi, self._overlay_x[1])
        return lo, hi

    def clear_overlays(self, refit: bool = True) -> None:
        """Remove every overlaid run (curves and legend entries), and fit the loss and validation plots to the run
        on show again (their default range when there is none)."""
        overlays, self._overlays = self._overlays, []
        self._overlaid_runs = 0
        plots = {p for p, _c, _l in overlays}
        for plot, curve, _label in overlays:
            self.plots[plot].getPlotItem().removeItem(curve)
        self._overlay_y = {}
        self._overlay_x = None
        for plot in plots:
            self._update_legend(plot)
        if overlays and refit:
            for plot in plots:
                keeper = self._ranges[plot]
                if keeper.manual:
                    continue
                keeper.reset()
                item = self.plots[plot].getPlotItem()
                if self._log_mode(plot) != keeper.log:
                    item.setLogMode(y=keeper.log)
                item.setYRange(*keeper.default, padding=0)
            self._fit_overlay_plots()
            self._show_notes()

    def overlay_labels(self, plot: str = "loss") -> list[str]:
        """The labels of the runs overlaid on `plot` ('loss' or 'eval'), in drawing order."""
        return [label for p, _curve, label in self._overlays if p == plot]
