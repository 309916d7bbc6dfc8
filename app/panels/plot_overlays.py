"""Other runs' loss and validation metric drawn over the live plots, each in its own colour and dash pattern;
a part of PlotsPanel."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt

from app.plot_points import OverlayPoints, overlay_points
from app.series import Series

# Overlaid runs' colours: distinct from each other and the live curves', readable on both palettes.
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
# An overlaid curve's points, decimated like a live one's; its validation points get dots up to MARKER_BUDGET.
OVERLAY_BUDGET = 1024
# Points a curve with markers is drawn from, live or overlaid (pyqtgraph builds each marker in Python).
MARKER_BUDGET = 512


class OverlayPlotting:
    """PlotsPanel's overlays: `overlay_runs`, `clear_overlays`, `overlay_labels`, and the ranges that take them in."""

    def overlay_runs(self, runs) -> list[str]:
        """Draw other runs' loss and validation metric over the plots; the loss legend labels drawn."""
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
            x, y, metric, ex, ey, task = points
            self._overlay_tasks.append(task)
            colour = OVERLAY_COLOURS[index % len(OVERLAY_COLOURS)]
            # a dash pattern per run as well as a colour; one pixel wide (Qt strokes wider dashed lines far slower)
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
        """Fit the plots that hold (or held) overlays to those and the run's curves; a user's zoom is left alone."""
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
        """Remove every overlaid run and refit the loss and validation plots to the run on show."""
        overlays, self._overlays = self._overlays, []
        self._overlaid_runs, self._overlay_tasks = 0, []
        plots = {p for p, _c, _l in overlays}
        for plot, curve, _label in overlays:
            self.plots[plot].getPlotItem().removeItem(curve)
        self._overlay_y = {}
        self._overlay_x = None
        for plot in plots:
            self._update_legend(plot)
        if overlays and refit:
            for plot in plots:
                if not self._ranges[plot].manual:
                    self._reset_range(plot)
            self._fit_overlay_plots()
            self._show_notes()

    def other_task_note(self, task: str) -> str:
        """One line when overlaid runs trained another task than `task`, whose losses and metrics are not its; ''."""
        other = sorted({t for t in self._overlay_tasks if t and t != task})
        if not other or not task:
            return ""
        return f"Overlaid runs of another task ({', '.join(other)}) under {task}: their loss and metric do not compare"

    def overlay_labels(self, plot: str = "loss") -> list[str]:
        """The labels of the runs overlaid on `plot` ('loss' or 'eval'), in drawing order."""
        return [label for p, _curve, label in self._overlays if p == plot]
