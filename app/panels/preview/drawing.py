"""The preview's drawing pad: a feature row that is a grey image's pixels (PreviewSpec.image, row by row) drawn
with the mouse. The left button inks, the right button erases, Clear blanks it all.

Ink goes on a finer grid (SUPERSAMPLE cells to a pixel a side) with a soft round brush, so a stroke greys the
pixels it partly covers, as a scan would; a pixel's value is the mean ink of its cells, mapped onto the spec's
`pixel_range`. The pad shows those pixels: what the model is given. Plain numpy on the GUI thread.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QWidget

from app.panels.editors import box_layout

SUPERSAMPLE = 6  # ink cells to a pixel, a side
# The brush inks fully within BRUSH_CORE pixels of the pointer and fades to nothing over BRUSH_EDGE more: a
# stroke through a pixel's middle inks it fully and greys its neighbours (about 0.15 each), a line between two
# pixels inks both about two thirds, close to how much ink the bundled digits carry.
BRUSH_CORE = 0.4
BRUSH_EDGE = 0.5
CELL_PX = 30  # a pixel's side on screen, at the pad's preferred size
MARGIN = 4  # around the pixels
PAPER, INK = QColor("#ffffff"), QColor("#111111")
GRID, FRAME, BRUSH_OUTLINE = QColor(0, 0, 0, 28), QColor("#8a8f98"), QColor("#2e7dd1")


class DrawingPad(QWidget):
    """`rows` x `cols` pixels drawn with the mouse; `drawn` is emitted whenever the mouse changes them (and on
    clear()). values() are the pixels row by row in `pixel_range`; set_values() shows given ones."""

    drawn = Signal()

    def __init__(self, rows: int, cols: int, pixel_range: tuple[float, float] = (0.0, 1.0), parent=None):
        super().__init__(parent)
        self.rows, self.cols = int(rows), int(cols)
        self.blank, self.inked = (float(v) for v in pixel_range)
        self.ink = np.zeros((self.rows * SUPERSAMPLE, self.cols * SUPERSAMPLE), np.float32)  # 0 blank .. 1 inked
        self.mode: str | None = None  # "ink" or "erase" while a button is held
        self._last: tuple[float, float] | None = None  # the stroke's last point, in pixels
        self._hover: QPointF | None = None
        self.setMouseTracking(True)  # the brush outline follows the pointer
        self.setCursor(Qt.CursorShape.CrossCursor)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setMinimumSize(self.cols * 12, self.rows * 12)
        self.setToolTip("Left button draws, right button erases")

    def sizeHint(self):
        return QSize(self.cols * CELL_PX + 2 * MARGIN, self.rows * CELL_PX + 2 * MARGIN)

    def pixel_ink(self) -> np.ndarray:
        """(rows, cols) mean ink of each pixel, 0..1."""
        return self.ink.reshape(self.rows, SUPERSAMPLE, self.cols, SUPERSAMPLE).mean(axis=(1, 3))

    def values(self) -> list[float]:
        """The pixels row by row, in pixel_range (blank .. inked)."""
        return [float(v) for v in (self.blank + (self.inked - self.blank) * self.pixel_ink()).ravel()]

    def set_values(self, values) -> None:
        """Show these pixels (row by row, in pixel_range; outside it they are shown clipped); `drawn` is not
        emitted: they came from elsewhere."""
        pixels = np.asarray(list(values), np.float64)
        if pixels.size != self.rows * self.cols:
            return
        ink = np.clip((pixels - self.blank) / (self.inked - self.blank), 0.0, 1.0).reshape(self.rows, self.cols)
        self.ink = np.kron(ink, np.ones((SUPERSAMPLE, SUPERSAMPLE))).astype(np.float32)
        self.update()

    def clear(self) -> None:
        self.ink[:] = 0.0
        self.update()
        self.drawn.emit()

    def image_rect(self) -> QRectF:
        """Where the pixels are drawn: square pixels, as large as fit, at the top, centred across."""
        side = max(1.0, min((self.width() - 2 * MARGIN) / self.cols, (self.height() - 2 * MARGIN) / self.rows))
        w, h = side * self.cols, side * self.rows
        return QRectF((self.width() - w) / 2, MARGIN, w, h)

    def to_pixels(self, pos: QPointF) -> tuple[float, float]:
        """A widget position as (x, y) in pixels of the image (0, 0 its top left corner)."""
        rect = self.image_rect()
        side = rect.width() / self.cols
        return (pos.x() - rect.left()) / side, (pos.y() - rect.top()) / side

    def stroke(self, start: tuple[float, float], end: tuple[float, float], erase: bool = False) -> bool:
        """Ink (or erase) along the segment start..end (in pixels) with the soft round brush; whether any pixel
        changed (`drawn` is emitted when one did)."""
        reach = BRUSH_CORE + BRUSH_EDGE
        (ax, ay), (bx, by) = start, end
        x0, x1 = _cells(min(ax, bx) - reach, max(ax, bx) + reach, self.cols)
        y0, y1 = _cells(min(ay, by) - reach, max(ay, by) + reach, self.rows)
        if x0 >= x1 or y0 >= y1:
            return False
        cx = (np.arange(x0, x1) + 0.5) / SUPERSAMPLE  # the cells' centres, in pixels
        cy = ((np.arange(y0, y1) + 0.5) / SUPERSAMPLE)[:, None]
        dx, dy = bx - ax, by - ay
        length2 = dx * dx + dy * dy
        t = np.zeros((1, 1)) if length2 == 0 else np.clip(((cx - ax) * dx + (cy - ay) * dy) / length2, 0.0, 1.0)
        distance = np.hypot(cx - (ax + t * dx), cy - (ay + t * dy))
        strength = np.clip((reach - distance) / BRUSH_EDGE, 0.0, 1.0).astype(np.float32)
        window = self.ink[y0:y1, x0:x1]
        before = self.pixel_ink()
        if erase:
            np.minimum(window, 1.0 - strength, out=window)
        else:
            np.maximum(window, strength, out=window)
        if np.array_equal(before, self.pixel_ink()):
            return False
        self.update()
        self.drawn.emit()
        return True

    def _stroke_to(self, event) -> None:
        """The held button's stroke from its last point to the event's."""
        point = self.to_pixels(event.position())
        if self.mode is not None:
            self.stroke(self._last or point, point, erase=self.mode == "erase")
            self._last = point
        event.accept()

    def mousePressEvent(self, event) -> None:
        button = event.button()
        if button not in (Qt.MouseButton.LeftButton, Qt.MouseButton.RightButton):
            super().mousePressEvent(event)
            return
        self.mode, self._last = ("ink" if button == Qt.MouseButton.LeftButton else "erase"), None
        self._stroke_to(event)

    def mouseMoveEvent(self, event) -> None:
        self._hover = event.position()
        self._stroke_to(event)
        self.update()

    def mouseReleaseEvent(self, event) -> None:
        self._stroke_to(event)
        self.mode, self._last = None, None

    def leaveEvent(self, event) -> None:
        self._hover = None
        self.update()
        super().leaveEvent(event)

    def contextMenuEvent(self, event) -> None:
        event.accept()  # the right button erases here: no menu

    def paintEvent(self, event) -> None:
        rect = self.image_rect()
        side = rect.width() / self.cols
        painter = QPainter(self)
        ink = self.pixel_ink()
        for r in range(self.rows):
            for c in range(self.cols):
                level = float(ink[r, c])
                colour = QColor.fromRgbF(*(p + (i - p) * level for p, i in zip(PAPER.getRgbF()[:3], INK.getRgbF()[:3])))
                painter.fillRect(QRectF(rect.left() + c * side, rect.top() + r * side, side, side), colour)
        painter.setPen(QPen(GRID, 1))
        for c in range(1, self.cols):
            x = rect.left() + c * side
            painter.drawLine(QPointF(x, rect.top()), QPointF(x, rect.bottom()))
        for r in range(1, self.rows):
            y = rect.top() + r * side
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
        painter.setPen(QPen(FRAME, 1))
        painter.drawRect(rect)
        if self._hover is not None and rect.contains(self._hover):
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            style = Qt.PenStyle.DashLine if self.mode == "erase" else Qt.PenStyle.SolidLine
            painter.setPen(QPen(BRUSH_OUTLINE, 1, style))
            radius = (BRUSH_CORE + BRUSH_EDGE / 2) * side
            painter.drawEllipse(self._hover, radius, radius)
        painter.end()


class DrawingPanel(QWidget):
    """The pad of a PreviewSpec's `image`, a line saying how to draw, and Clear; `drawn` as the pad's."""

    def __init__(self, spec, name: str, parent=None):
        super().__init__(parent)
        rows, cols = spec.image
        self.pad = DrawingPad(rows, cols, spec.pixel_range, self)
        self.pad.setObjectName(f"{name}Pad")
        self.drawn = self.pad.drawn
        self.clearButton = QPushButton("Clear", objectName=f"{name}ClearButton", clicked=self.pad.clear)
        self.clearButton.setToolTip(f"Blank every pixel ({spec.pixel_range[0]:g})")
        hint = QLabel("Left button draws, right erases", objectName=f"{name}PadHint", wordWrap=True)
        hint.setToolTip(f"Draw a {spec.noun}: the model is asked once the drawing pauses")
        box_layout(self, self.pad, hint, (self.clearButton, 0, Qt.AlignmentFlag.AlignLeft), 1)


def _cells(low: float, high: float, pixels: int) -> tuple[int, int]:
    """The ink cells (first, past the last) of one axis that the span low..high (in pixels) touches."""
    return (max(0, int(np.floor(low * SUPERSAMPLE))), min(pixels * SUPERSAMPLE, int(np.ceil(high * SUPERSAMPLE))))
