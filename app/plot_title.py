"""A plot's title kept on one line: elided to the plot's width (the whole title in its tooltip), refitted on resize."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QFont, QFontMetrics

TITLE_SIZE_PT = 10
SIDE_ROOM = 8  # the label's document margins, 4 px a side


class FittedTitle(QObject):
    """The title of a pyqtgraph PlotWidget; `text` is the whole title, whatever is shown."""

    def __init__(self, widget, text: str):
        super().__init__(widget)
        self.widget = widget
        self.text = ""
        widget.installEventFilter(self)
        widget.getPlotItem().vb.sigResized.connect(self.fit)  # the left axis grew or shrank
        self.set(text)

    def set(self, text: str) -> None:
        self.text = text
        self.fit()

    def shown(self) -> str:
        return self.widget.getPlotItem().titleLabel.text

    def fit(self) -> None:
        font = QFont(self.widget.font())
        font.setPointSizeF(TITLE_SIZE_PT)
        # the plot's width less its left axis (a title too long has already stretched the view box itself)
        axis = self.widget.getPlotItem().getAxis("left")
        available = max(24, self.widget.width() - int(axis.width() if axis.isVisible() else 0) - SIDE_ROOM)
        shown = QFontMetrics(font).elidedText(self.text, Qt.TextElideMode.ElideRight, available)
        if shown != self.shown():
            self.widget.getPlotItem().setTitle(shown, size=f"{TITLE_SIZE_PT}pt")
        self.widget.setToolTip(self.text if shown != self.text else "")

    def eventFilter(self, watched, event) -> bool:
        if watched is self.widget and event.type() == QEvent.Type.Resize:
            self.fit()
        return False
