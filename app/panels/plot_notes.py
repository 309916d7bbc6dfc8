"""The live plots' legends under their x axes and the note in an empty plot saying why; a part of PlotsPanel."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette, QTextOption

from app.plot_legend import LEGEND_ROW, FittedLegend, row_legend

NO_RUN = "No run yet"
WAITING = "Waiting for the first logged step"
WAITING_EVAL = "Metrics appear after the first evaluation"
SCALER_OFF = "Off: GradScaler runs with fp16 only"
NOT_MEASURED = "Not measured on this device"


class PlotLabelling:
    """PlotsPanel's legends and empty-plot notes: `note(plot)`, `overlay_note()`, and their upkeep."""

    def _add_legend(self, plot: str) -> None:
        """A legend in its own row under the plot's x axis, its entries fitted to the plot's width (FittedLegend)."""
        item = self.plots[plot].getPlotItem()
        legend = row_legend(item, self.palette().color(QPalette.ColorRole.Text))
        legend.setMinimumHeight(LEGEND_ROW)  # the row is there before the first entry: the view does not jump
        item.getViewBox().sigResized.connect(lambda *_a: self._update_legend(plot))
        self._legends[plot] = legend
        self._fitted[plot] = FittedLegend(legend)

    def _update_legend(self, plot: str) -> None:
        """As many columns as fit the plot's width, overlaid runs' labels wrapped, rows for part of the height only."""
        fitted = self._fitted.get(plot)
        if fitted is None:
            return
        overlays = [(curve, label) for p, curve, label in self._overlays if p == plot]
        fitted.fit(overlays, self.plots[plot].getPlotItem().getViewBox().width(), self.plots[plot].height())

    def overlay_note(self) -> str:
        """What a new run's log says while other runs stay drawn under it ('' when none are)."""
        runs = self._overlaid_runs
        if not runs:
            return ""
        return (
            f"{runs} run{'s' if runs != 1 else ''} overlaid on the plots, kept under this run "
            "(Run history → Clear overlays removes them)"
        )

    def _add_note(self, key: str, item) -> None:
        """A line of text in the middle of the plot's view, saying why it is empty."""
        import pyqtgraph as pg

        view = item.getViewBox()
        colour = self.palette().color(QPalette.ColorRole.PlaceholderText)
        note = pg.TextItem("", color=colour, anchor=(0.5, 0.5))
        note.textItem.document().setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignHCenter))
        note.setParentItem(view)  # in the view's own (pixel) coordinates: stays put whatever the range

        def place(*_args) -> None:  # centred, and wrapped to the view so a narrow plot doesn't clip it
            note.setTextWidth(max(60.0, view.rect().width() - 16))
            note.setPos(view.rect().center())

        view.sigResized.connect(place)
        place()
        self._notes[key] = note

    def note(self, plot: str) -> str:
        """What an empty plot says ('' once it has data)."""
        note = self._notes.get(plot)
        return note.textItem.toPlainText() if note is not None and note.isVisible() else ""

    def _show_notes(self) -> None:
        """Set each plot's note from what it holds: nothing when it has a point to draw."""
        filled = {p for k, p in self._curve_plot.items() if len(self._series[k])}
        filled |= {p for p, _curve, _label in self._overlays}  # another run's curves are drawn there
        for plot, note in self._notes.items():
            if plot in filled:
                if note.isVisible():  # TextItem.setVisible costs even when nothing changes
                    note.setVisible(False)
                continue
            text = self._waiting
            if plot == "eval" and self._waiting == WAITING:
                text = WAITING_EVAL
            elif plot == "scale" and self._waiting != NO_RUN and not self._scaler_on:  # also once it has ended
                text = SCALER_OFF
            elif plot in self._unmeasured:
                text = NOT_MEASURED
            if note.textItem.toPlainText() != text:  # a redraw (4 a second) repaints nothing unchanged
                note.setText(text)
            if note.isVisible() != bool(text):
                note.setVisible(bool(text))
