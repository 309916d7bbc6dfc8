"""Runs side by side (the history's Compare): one column per run, rows where the runs differ highlighted. The rows are
core.runs.compare's compare_rows, the same as `amp-console runs compare`; Copy as TSV for a spreadsheet.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.panels.editors import box_layout, hbox
from core.runs.compare import CompareRow, compare_rows

DIFFERS_MARK = "≠ "  # before a differing row's name: the highlight is not colour alone
DIFFERS_BRUSH = QBrush(QColor(255, 190, 0, 70))  # a translucent amber: readable on light and dark palettes
DIFFERS_ROLE = Qt.ItemDataRole.UserRole + 10  # True on the cells of a differing row


def grow_on_screen(window: QWidget, height: int) -> None:
    """`window` made `height` tall, or as tall as its screen's free area holds (frame counted), and moved up to stay
    whole on the screen."""
    screen = window.screen()
    if screen is None:
        window.resize(window.width(), height)
        return
    area = screen.availableGeometry()
    frame = window.frameGeometry().height() - window.geometry().height()
    window.resize(window.width(), max(window.minimumHeight(), min(height, area.height() - frame)))
    outer = window.frameGeometry()
    if outer.bottom() > area.bottom():
        window.move(outer.left(), max(area.top(), area.bottom() + 1 - outer.height()))


class RunCompare(QWidget):
    """The comparison of the runs given to set_runs (a snapshot: Compare again to refresh it)."""

    closeRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("runCompare")
        self.rows: list[CompareRow] = []
        self.runs: list[dict] = []
        self.titleLabel = QLabel(objectName="runCompareTitle")
        self.copyButton = QPushButton("Copy as TSV", objectName="runCompareCopyButton", clicked=self.copy)
        self.copyButton.setToolTip("Copy the comparison as tab-separated text (pastes into a spreadsheet)")
        self.closeButton = QPushButton(
            "Close", objectName="runCompareCloseButton", clicked=lambda: self.closeRequested.emit()
        )
        top = hbox((self.titleLabel, 1), self.copyButton, self.closeButton)
        top.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(objectName="runCompareTable")
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectItems)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)  # no empty grey band right of a comparison of two or three runs
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        box_layout(self, top, (self.table, 1))

    def set_runs(self, runs: list[dict]) -> None:
        self.runs = list(runs)
        self.rows = compare_rows(self.runs)
        differing = sum(row.differs for row in self.rows)
        configs = sum(row.config for row in self.rows)
        self.titleLabel.setText(
            f"Comparing {len(runs)} runs: {differing} of {len(self.rows)} rows differ "
            f"({configs} config field{'s' if configs != 1 else ''})"
        )
        table = self.table
        table.clear()
        table.setColumnCount(len(runs))
        table.setRowCount(len(self.rows))
        table.setHorizontalHeaderLabels([f"{r.get('name')}\n{str(r.get('id') or '')[:8]}" for r in runs])
        bold = QFont(table.font())
        bold.setBold(True)
        for row, item in enumerate(self.rows):
            label = QTableWidgetItem((DIFFERS_MARK if item.differs else "") + item.label)
            label.setToolTip("the runs differ here" if item.differs else "the same in every run")
            label.setData(Qt.ItemDataRole.AccessibleTextRole, f"{item.label}, {'differs' if item.differs else 'same'}")
            if item.differs:
                label.setFont(bold)
            table.setVerticalHeaderItem(row, label)
            for column, text in enumerate(item.values):
                cell = QTableWidgetItem(text)
                cell.setToolTip(text)
                cell.setData(DIFFERS_ROLE, item.differs)
                if item.differs:
                    cell.setBackground(DIFFERS_BRUSH)
                    cell.setFont(bold)
                    cell.setData(Qt.ItemDataRole.AccessibleDescriptionRole, "differs")
                table.setItem(row, column, cell)
        table.resizeColumnsToContents()
        header = table.horizontalHeader()
        for column in range(table.columnCount()):  # room to read, never a whole screen for one long note
            header.resizeSection(column, min(max(header.sectionSize(column) + 16, 140), 420))

    # ------------------------------------------------------------------ reading it (tests, Copy)
    def labels(self) -> list[str]:
        return [row.label for row in self.rows]

    def differing_labels(self) -> list[str]:
        return [row.label for row in self.rows if row.differs]

    def row_label_text(self, label: str) -> str:
        """The text shown as the row's name ('≠ ' before a differing one)."""
        return self.table.verticalHeaderItem(self.labels().index(label)).text()

    def cell(self, label: str, column: int) -> QTableWidgetItem:
        return self.table.item(self.labels().index(label), column)

    def tsv(self) -> str:
        header = [""] + [str(r.get("name")) for r in self.runs] + ["differs"]
        lines = ["\t".join(header)]
        for row in self.rows:
            cells = [row.label, *row.values, "yes" if row.differs else ""]
            lines.append("\t".join(" ".join(str(c).split()) for c in cells))  # no tab or newline inside a cell
        return "\n".join(lines) + "\n"

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.tsv())
        self.titleLabel.setText(self.titleLabel.text().split("  ·")[0] + "  · copied as TSV")
