"""A small labelled bar chart (pyqtgraph BarGraphItem): one bar per precision mode, a label over each."""

from __future__ import annotations

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QWidget

from app.panels.editors import box_layout
from app.plot_title import FittedTitle

BAR_COLOURS = {
    "fp32": "#6a7a90",
    "tf32": "#c98a12",
    "fp16": "#8e44ad",
    "bf16": "#3b6fd8",
    "bf16-pure": "#16a2b8",
    "fp8": "#d0453c",
}


class BarChart(QWidget):
    """`set_bars(names, values, labels)` draws the bars; the y axis starts at zero and has units."""

    def __init__(self, title: str, units_label: str, objectName: str = "", parent=None):
        super().__init__(parent)
        import pyqtgraph as pg

        self.setObjectName(objectName)
        palette = self.palette()
        self.plot = pg.PlotWidget(background=palette.color(QPalette.ColorRole.Base))
        item = self.plot.getPlotItem()
        item.setLabel("left", units_label)
        item.setLabel("bottom", "Precision mode")
        item.showGrid(y=True, alpha=0.2)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        self.plot.setMinimumHeight(200)
        box_layout(self, self.plot)
        self.title = FittedTitle(self.plot, title)  # elided to the chart's width, whole in its tooltip
        self._items: list = []
        self.values: list[float] = []
        self.labels: list[str] = []

    def set_title(self, title: str) -> None:
        self.title.set(title)

    def clear(self) -> None:
        item = self.plot.getPlotItem()
        for graphic in self._items:
            item.removeItem(graphic)
        self._items = []
        self.values, self.labels = [], []

    def set_bars(self, names: list[str], values: list[float], labels: list[str]) -> None:
        import pyqtgraph as pg

        self.clear()
        item = self.plot.getPlotItem()
        self.values, self.labels = list(values), list(labels)
        brushes = [pg.mkBrush(BAR_COLOURS.get(name, "#2e9b57")) for name in names]
        bars = pg.BarGraphItem(x=list(range(len(names))), height=values, width=0.6, brushes=brushes, pen=None)
        item.addItem(bars)
        self._items.append(bars)
        top = max(values, default=1.0) or 1.0
        for index, (value, label) in enumerate(zip(values, labels)):
            if label:
                text = pg.TextItem(label, anchor=(0.5, 1.0), color=self.palette().color(QPalette.ColorRole.Text))
                text.setPos(index, value)
                item.addItem(text)
                self._items.append(text)
        item.getAxis("bottom").setTicks([[(i, name) for i, name in enumerate(names)]])
        item.setXRange(-0.6, len(names) - 0.4, padding=0)
        item.setYRange(0, top * 1.18, padding=0)  # room for the labels over the tallest bar
