"""The run history's table model: thousands of runs, sorted and filtered without a stall on the GUI thread.

Each row's texts, sort keys and filter text are made once per scan, off the GUI thread (`prepare`, in the scan
job, with the panel's `cells` function); the GUI thread only swaps them in. A run is held as its brief record
and its bulky parts (config, metrics, checkpoints...) as JSON text (core.engine.run_index.indexed_records),
parsed only when the run is asked for (`run(row)`): 10,000 full records are a million objects that every
full garbage collection walks. Sorting is one sorted() over the
keys (a proxy's per-comparison data() calls cost seconds at 10,000 rows) and filtering is one pass over the
rows' filter texts and a model reset (a QSortFilterProxyModel calls Python once per row per keystroke). The view
sees the model through RunsFilter, an identity proxy that hands sort and filter requests down.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QAbstractTableModel, QIdentityProxyModel, QItemSelection, QModelIndex, Qt

from core.engine.run_index import full_record

SORT_ROLE = Qt.ItemDataRole.UserRole
RUN_ROLE = Qt.ItemDataRole.UserRole + 1


def fingerprint(run: dict) -> tuple:
    """What a rescan compares to tell whether a run's row changed."""
    return run.get("folder"), run.get("status"), run.get("steps"), run.get("wall_seconds"), run.get("note")


@dataclass
class Prepared:
    """A scan's runs (brief records) and their bulky parts (JSON text, or None when the record is whole), with
    their rows (texts, sort keys, filter text), fingerprints, and each column's longest text (to size the
    columns by)."""

    runs: list[dict]
    bulks: list[str | None]
    rows: list[tuple]
    fingerprints: list[tuple]
    longest: list[str]


def prepare(records: list, cells: Callable, filtered: tuple[int, ...]) -> Prepared:
    """The rows of `records` (run_index.indexed_records' (brief, bulk) pairs, or whole run dicts): `cells(run)`
    gives (texts, sort keys); the filter text is the `filtered` columns' texts, lower case. Runs in the scan
    job, off the GUI thread."""
    pairs = [r if isinstance(r, tuple) else (r, None) for r in records]
    runs = [brief for brief, _bulk in pairs]
    rows = [prepared_row(run, cells, filtered) for run in runs]
    columns = len(rows[0][0]) if rows else 0
    longest = [max((r[0][c] for r in rows), key=len) for c in range(columns)]
    return Prepared(runs, [bulk for _brief, bulk in pairs], rows, [fingerprint(r) for r in runs], longest)


def prepared_row(run: dict, cells: Callable, filtered: tuple[int, ...]) -> tuple:
    texts, keys = cells(run)
    return texts, keys, " ".join(texts[c] for c in filtered).lower()


class RunsModel(QAbstractTableModel):
    """The runs as rows: all of them in sort order, and the positions of those the filter shows."""

    def __init__(self, columns: tuple[str, ...], cells: Callable, filtered: tuple[int, ...],
                 tooltip: Callable[[dict, int], str | None], right_aligned: tuple[int, ...] = (), parent=None):
        super().__init__(parent)
        self.columns, self.cells, self.filtered = columns, cells, filtered
        self._tooltip, self._right = tooltip, right_aligned
        self._runs: list[dict] = []  # brief records (see the module doc)
        self._bulks: list[str | None] = []
        self._rows: list[tuple] = []  # (texts, sort keys, filter text) of each run
        self._hay: list[str] = []  # the filter texts alone
        self._shown: list[int] = []  # positions in _runs of the rows the filter lets through
        self._words: list[str] = []
        self._sorted: tuple | None = None  # (column, order) of the last sort, kept across scans
        self.fingerprints: list[tuple] = []  # of the runs as the last scan gave them (see _scanned)

    def set_runs(self, runs: list[dict] | Prepared) -> None:
        prepared = runs if isinstance(runs, Prepared) else prepare(runs, self.cells, self.filtered)
        self.beginResetModel()
        self._runs, self._bulks, self._rows = list(prepared.runs), list(prepared.bulks), list(prepared.rows)
        self._hay = [r[2] for r in self._rows]
        self.fingerprints = list(prepared.fingerprints)
        if self._sorted is not None:
            self._order(*self._sorted)
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
        shown = self._matching(self._shown if narrower else None)
        if shown != self._shown:
            self.beginResetModel()
            self._shown = shown
            self.endResetModel()

    def _matching(self, among: list[int] | None = None) -> list[int]:
        """The positions of the rows whose filter text holds every word (of those `among`, when given)."""
        hay = self._hay
        rows = range(len(hay)) if among is None else among
        for word in self._words:
            rows = [i for i in rows if word in hay[i]]
        return list(rows)

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """Sort every row by its keys (the filter keeps its rows); selections follow their rows."""
        if not 0 <= column < len(self.columns):
            return
        self._sorted = (column, order)
        if not self._rows:
            return
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        before = [self._shown[i.row()] for i in old]
        where = self._order(column, order)
        self._shown = self._matching()
        shown_at = {p: r for r, p in enumerate(self._shown)}
        self.changePersistentIndexList(old, [self.index(shown_at[where[p]], i.column()) for p, i in zip(before, old)])
        self.layoutChanged.emit()

    def _order(self, column: int, order) -> dict[int, int]:
        """Put the rows in order; returns old position -> new position."""
        rows = self._rows
        order_ = sorted(range(len(rows)), key=lambda i: rows[i][1][column],
                        reverse=order == Qt.SortOrder.DescendingOrder)
        self._runs = [self._runs[i] for i in order_]
        self._bulks = [self._bulks[i] for i in order_]
        self._rows = [rows[i] for i in order_]
        self._hay = [self._hay[i] for i in order_]
        return {was: now for now, was in enumerate(order_)}

    def haystack(self, row: int) -> str:
        """What the filter box searches in this row (lower case)."""
        return self._rows[self._shown[row]][2]

    def set_note(self, folder: str, note: str) -> None:
        """A note saved from the panel: that row's note and filter text now, without waiting for a scan."""
        for p, run in enumerate(self._runs):
            if run.get("folder") != folder:
                continue
            run["note"] = note
            self._rows[p] = prepared_row(run, self.cells, self.filtered)
            self._hay[p] = self._rows[p][2]
            self.fingerprints = [fingerprint(run) if f[0] == folder else f for f in self.fingerprints]
            shown = self._matching()
            if shown != self._shown:
                self.beginResetModel()
                self._shown = shown
                self.endResetModel()
            elif p in self._shown:
                r = self._shown.index(p)
                self.dataChanged.emit(self.index(r, 0), self.index(r, len(self.columns) - 1))

    def rows_of(self, folders: set) -> list[int]:
        """The shown rows of the runs in these folders."""
        return [r for r, p in enumerate(self._shown) if self._runs[p].get("folder") in folders]

    def run(self, row: int) -> dict:
        """The whole record of the run in this (shown) row: a new dict each time."""
        p = self._shown[row]
        bulk = self._bulks[p]
        return full_record(self._runs[p], bulk) if bulk is not None else dict(self._runs[p])

    @property
    def runs(self) -> list[dict]:
        """Every run, filtered out or not, in the table's order: brief records (their bulky parts None)."""
        return list(self._runs)

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self._shown)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.columns[section]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        texts, keys, _haystack = self._rows[self._shown[index.row()]]
        if role == Qt.ItemDataRole.DisplayRole:
            return texts[index.column()]
        if role == SORT_ROLE:
            return keys[index.column()]
        if role == RUN_ROLE:
            return index.row()
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(self._runs[self._shown[index.row()]], index.column())
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() in self._right:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class RunsFilter(QIdentityProxyModel):
    """What the table view shows: RunsModel as it is; sorting and the filter text are handed to it."""

    def set_text(self, text: str) -> None:
        self.sourceModel().set_filter(text)

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        self.sourceModel().sort(column, order)

    def selection_of(self, rows: list[int]) -> QItemSelection:
        """These rows (the source model's) as one selection of whole rows, consecutive ones as one range."""
        selection = QItemSelection()
        last = self.columnCount() - 1
        start = previous = None
        for r in [*sorted(rows), None]:
            if start is not None and (r is None or r != previous + 1):
                selection.select(self.index(start, 0), self.index(previous, last))
                start = None
            if r is not None and start is None:
                start = r
            previous = r
        return selection
