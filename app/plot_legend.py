"""A live plot's legend that is always whole: as many columns as the width holds, at most LEGEND_SHARE of the
height (the rest one '… and N more' entry)."""

from __future__ import annotations

import html
import math
import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetricsF
from PySide6.QtWidgets import QSizePolicy

LEGEND_ROW = 18  # pixels: one line of legend entries
LEGEND_SHARE = 0.4  # of the plot's height, at most, for its legend
LABEL_POINTS = 8.0  # the legends' label size (labelTextSize="8pt")
LABEL_PAD = 8.0  # pixels a label adds to its text (pyqtgraph's LabelItem: a 4 px document margin each side)
_BREAKS = re.compile(r"(?<=[ \-/])")  # a label may wrap after a space, a dash or a slash


def row_legend(item, text_colour, columns: int = 1, spacing: int = 10):
    """A legend in its own row under the PlotItem's x axis: it never covers a curve."""
    import pyqtgraph as pg

    legend = pg.LegendItem(
        colCount=max(1, columns), frame=False, labelTextSize="8pt", horSpacing=spacing, labelTextColor=text_colour
    )
    legend.updateSize = legend.updateGeometry
    legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    legend.setMinimumWidth(0)
    legend.setPreferredWidth(0)
    item.layout.addItem(legend, 4, 1)
    item.legend = legend  # PlotItem.plot(name=...) adds its entry, removeItem takes it out
    return legend


def wrap(text: str, width: float, metrics: QFontMetricsF) -> list[str]:
    """`text` in lines no wider than `width` where its breaks allow (a longer word keeps its own line)."""
    lines: list[str] = []
    line = ""
    for word in _BREAKS.split(text):
        if line and metrics.horizontalAdvance((line + word).rstrip()) > width:
            lines.append(line.rstrip())
            line = word
        else:
            line += word
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return lines


def rows_height(lines: list[int], columns: int) -> int:
    """Pixels for entries of these line counts laid out `columns` to a row."""
    return sum(max(lines[i : i + columns]) for i in range(0, len(lines), columns)) * LEGEND_ROW


class FittedLegend:
    """Keeps one plot's legend whole: `fit(overlays, width, height)` after either changes."""

    def __init__(self, legend):
        self.legend = legend
        self._added: list = []  # the sample items of the entries this added (overlays, the '… more' line)
        self._shown = None  # what was laid out last: nothing to do when a resize changes none of it
        self._more = None  # the invisible sample of the '… and N more' entry
        self._own: dict = {}  # the plot's own entries' labels: (whole text, text shown), cut with "…" to fit
        font = QFont()
        font.setPointSizeF(LABEL_POINTS)
        self._metrics = QFontMetricsF(font)

    @property
    def hidden(self) -> int:
        """Overlaid runs left out of the legend for want of room."""
        return self._shown[2] if self._shown else 0

    def fit(self, overlays: list, width: float, height: float) -> None:
        import pyqtgraph as pg

        legend = self.legend
        own = [(s, label) for s, label in legend.items if s.item not in self._added]
        if not own and not overlays and not self._added:
            return
        left, _top, right, _bottom = legend.layout.getContentsMargins()
        spacing = legend.layout.horizontalSpacing()
        sample = max((s.boundingRect().width() for s, _l in legend.items), default=20.0)
        room = width - left - right  # a row: sample, spacing, label for each entry, spacing between entries
        text_width = max(40.0, room - sample - spacing - LABEL_PAD)
        elide = Qt.TextElideMode.ElideRight
        own_texts = [[self._metrics.elidedText(self._whole(label), elide, text_width)] for _s, label in own]
        texts = [wrap(label, text_width, self._metrics) for _c, label in overlays]
        more = [
            wrap(f"… and {n} more overlaid run{'s' if n != 1 else ''} (Run history)", text_width, self._metrics)
            for n in range(len(overlays) + 1)
        ]
        widths = [self._label_width(t) for t in own_texts + texts]
        columns = max(1, len(widths))
        while (
            columns > 1
            and sum(sample + spacing + max(widths[j::columns]) for j in range(columns)) + (columns - 1) * spacing > room
        ):  # a grid: each column as wide as its widest label
            columns -= 1
        budget = max(LEGEND_ROW * 2, height * LEGEND_SHARE)
        lines = [len(t) for t in own_texts + texts]
        shown = len(overlays)
        while (
            shown > 0
            and rows_height(
                lines[: len(own) + shown] + ([len(more[len(overlays) - shown])] if shown < len(overlays) else []),
                columns,
            )
            > budget
        ):
            shown -= 1
        hidden = len(overlays) - shown
        html_texts = tuple("<br>".join(map(html.escape, t)) for t in texts[:shown])
        own_html = tuple(html.escape(t[0]) for t in own_texts)
        state = (columns, html_texts, hidden, tuple(id(c) for c, _l in overlays[:shown]), own_html)
        if state == self._shown:
            return
        self._own = {label: self._own[label] for _s, label in own}  # removed entries' labels go
        for (_s, label), text in zip(own, own_html):
            if label.text != text:
                label.setText(text)
                label.setToolTip(self._own[label][0] if text.endswith("…") else "")
            self._own[label] = (self._own[label][0], text)
        for item in self._added:
            legend.removeItem(item)
        self._added = []
        for (curve, _label), text in zip(overlays, html_texts):
            legend.addItem(curve, text)
            self._added.append(curve)
        if hidden:
            if self._more is None:
                self._more = pg.PlotDataItem(pen=None)
            legend.addItem(self._more, "<br>".join(map(html.escape, more[hidden])))
            self._added.append(self._more)
        self._relayout(columns)
        self._shown = state

    def _whole(self, label) -> str:
        """An own entry's whole text (what the plot set, not the lines this wrapped it into)."""
        whole, shown = self._own.get(label, (None, None))
        if label.text != shown:  # new, or set again by the plot
            whole = html.unescape(label.text)
            self._own[label] = (whole, label.text)
        return whole

    def _label_width(self, lines: list[str]) -> float:
        return max(map(self._metrics.horizontalAdvance, lines)) + LABEL_PAD

    def _relayout(self, columns: int) -> None:
        legend = self.legend
        legend.columnCount = columns
        legend.rowCount = math.ceil(len(legend.items) / columns)
        for index in range(legend.layout.count() - 1, -1, -1):
            legend.layout.removeAt(index)
        for sample, label in legend.items:
            legend._addItemToLayout(sample, label)
        legend.updateSize()
