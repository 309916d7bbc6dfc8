"""The run history's table model: thousands of runs sorted and filtered without a stall on the GUI thread.

Each row's texts, sort keys and filter text are made once per scan, off the GUI thread (app.panels.history_scan); a
run stays JSON text until it is asked for (`run(row)`). Sorting is one sorted() over a column's keys and
filtering one pass plus a model reset.
"""

from __future__ import annotations

from itertools import groupby

from PySide6.QtCore import QAbstractTableModel, QItemSelection, QModelIndex, Qt

from app.panels.history_scan import SEP, Prepared, prepare
from app.panels.run_rows import COLUMNS, row_tooltip
from core.engine.run_index import full_record

SORT_ROLE = Qt.ItemDataRole.UserRole
RUN_ROLE = Qt.ItemDataRole.UserRole + 1
RIGHT_ALIGNED = (5, 7)  # steps, wall time


class RunsModel(QAbstractTableModel):
    """The runs as rows: all of them in sort order, and the positions of those the filter shows."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._all = prepare([])  # every run (brief records, see the module doc), in sort order
        self._shown: list[int] = []  # positions in it of the rows the filter lets through
        self._words: list[str] = []
        self._sorted: tuple | None = None  # (column, order) of the last sort, kept across scans

    @property
    def sorted_by(self) -> tuple | None:
        """(column, order) the rows are sorted by: a scan job sorts its rows so (history_scan.scan)."""
        return self._sorted

    @property
    def fingerprints(self) -> list[str]:
        return self._all.fingerprints

    def set_runs(self, runs: list[dict] | Prepared) -> None:
        prepared = runs if isinstance(runs, Prepared) else prepare(runs)
        self.beginResetModel()
        self._all = prepared
        if self._sorted is not None and prepared.sorted != self._sorted and prepared.briefs:
            prepared.order(*self._sorted)
        self._shown = self._matching()
        self.endResetModel()

    def set_filter(self, text: str) -> None:
        """Show only the rows whose filter text holds every word of `text` (a reset when that changes them)."""
        words = text.lower().split()
        if words == self._words:
            return
        # a key typed at the end narrows the filter: only the rows shown now can still match
        narrower = all(any(old in new for new in words) for old in self._words)
        self._words = words
        self._reshow(self._matching(self._shown if narrower else None))

    def _reshow(self, shown: list[int]) -> bool:
        """Show the rows at positions `shown` (a model reset); False when they are the rows shown already."""
        if shown == self._shown:
            return False
        self.beginResetModel()
        self._shown = shown
        self.endResetModel()
        return True

    def _matching(self, among: list[int] | None = None) -> list[int]:
        """The positions of the rows whose filter text holds every word (of those `among`, when given)."""
        hay = self._all.hay
        rows = range(len(hay)) if among is None else among
        for word in self._words:
            rows = [i for i in rows if word in hay[i]]
        return list(rows)

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """Sort every row by its keys (the filter keeps its rows); selections follow their rows."""
        if not 0 <= column < len(COLUMNS):
            return
        self._sorted = (column, order)
        if not self._all.briefs:
            return
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        before = [self._shown[i.row()] for i in old]
        new = self._all.order(column, order)
        where = {was: now for now, was in enumerate(new)}
        self._shown = self._matching()
        shown_at = {p: r for r, p in enumerate(self._shown)}
        self.changePersistentIndexList(old, [self.index(shown_at[where[p]], i.column()) for p, i in zip(before, old)])
        self.layoutChanged.emit()

    def set_note(self, folder: str, note: str) -> None:
        """A note saved from the panel: that row's note and filter text now, without waiting for a scan."""
        for p in self._all.set_note(folder, note):
            if not self._reshow(self._matching()) and p in self._shown:
                r = self._shown.index(p)
                self.dataChanged.emit(self.index(r, 0), self.index(r, len(COLUMNS) - 1))

    def folders_at(self, rows) -> set:
        """The folders of the runs in these shown rows."""
        return {self._all.folders[self._shown[r]] for r in rows}

    def selection_of(self, folders: set) -> QItemSelection:
        """The shown rows of the runs in these folders as one selection of whole rows, consecutive ones one range."""
        folders_, selection = self._all.folders, QItemSelection()
        rows = [r for r, p in enumerate(self._shown) if folders_[p] in folders]
        for _gap, run in groupby(enumerate(rows), lambda pair: pair[1] - pair[0]):  # consecutive rows
            block = [r for _i, r in run]
            selection.select(self.index(block[0], 0), self.index(block[-1], len(COLUMNS) - 1))
        return selection

    def run(self, row: int) -> dict:
        """The whole record of the run in this (shown) row: a new dict each time."""
        p = self._shown[row]
        brief, bulk = self._all.run(p), self._all.bulks[p]
        return full_record(brief, bulk) if bulk is not None else brief

    @property
    def runs(self) -> list[dict]:
        """Every run, filtered out or not, in the table's order: brief records (their bulky parts None)."""
        return [self._all.run(p) for p in range(len(self._all.briefs))]

    def note_of(self, folder) -> str:
        """The note the table shows for the run in `folder` ('' when none)."""
        p = next((p for p, f in enumerate(self._all.folders) if f == folder), None)
        return "" if p is None else str(self._all.run(p).get("note") or "")

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._shown)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        p = self._shown[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return self._all.texts[p].split(SEP)[index.column()]
        if role == SORT_ROLE:
            return self._all.keys[index.column()][p]
        if role == RUN_ROLE:
            return index.row()
        if role == Qt.ItemDataRole.ToolTipRole:
            return row_tooltip(self._all.run(p), index.column())
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() in RIGHT_ALIGNED:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None
