"""Run history: every run under the runs folder (core.engine.run_record.find_runs) in a sortable, filterable
table, with actions on the selected runs: load their settings, resume, reveal the folder, delete, overlay their
curves on the plots.

The panel knows nothing of the window: it emits requests (loadSettingsRequested, resumeRequested,
overlayRequested, clearOverlaysRequested) that main_window wires. Scanning the folder, reading metrics.jsonl and
deleting run folders happen off the GUI thread (app.run.jobs.JobRunner). The table refreshes on Refresh, when
it is shown, when a run folder appears or goes (a file-system watcher on the runs folder) and, while it is
visible, every few seconds (a cheap scan of run.json files: a CLI run that finished meanwhile shows up).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import (
    QAbstractTableModel, QFileSystemWatcher, QModelIndex, QSortFilterProxyModel, Qt, QTimer, QUrl, Signal,
)
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QLineEdit, QMessageBox, QPushButton, QTableView,
    QVBoxLayout, QWidget,
)

from app.run.jobs import JobRunner
from core.engine.run_folder import METRICS_FILE, is_in_use
from core.cli.format import duration as _wall
from core.engine.run_record import RUNS_DIR_ENV, find_runs, runs_root
from core.files import read_jsonl

AUTO_REFRESH_MS = 5_000  # while visible (longer when a scan takes longer, see _scanned)
COLUMNS = ("name", "task", "status", "precision", "device", "steps", "best", "wall time", "started")
FILTERED = (0, 1, 2, 3)  # the filter box matches name, task, status, precision
SORT_ROLE = Qt.ItemDataRole.UserRole
RUN_ROLE = Qt.ItemDataRole.UserRole + 1


def _number(value) -> str:
    if not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}"


def row_cells(run: dict) -> tuple[tuple[str, ...], tuple]:
    """(the texts shown, the sort keys) of one run's row."""
    best = run.get("best") or {}
    best_value = best.get("value")
    best_text = f"{best.get('name')} {_number(best_value)}" if best_value is not None else "-"
    steps, total = run.get("steps"), run.get("total_steps")
    steps_text = "-" if steps is None else (f"{steps:,}/{total:,}" if isinstance(total, int) and total
                                            and isinstance(steps, int) else f"{steps}")
    start = run.get("start_time") or ""
    texts = (str(run.get("name") or "-"), str(run.get("task") or "-"), str(run.get("status") or "-"),
             str(run.get("precision") or "-"), str(run.get("device") or "-"), steps_text, best_text,
             _wall(run.get("wall_seconds")), start.replace("T", " ")[:16] or "-")
    # one type per column, so Qt compares them natively (a Python lessThan costs seconds at 10,000 rows)
    numeric_best = float(best_value) if isinstance(best_value, (int, float)) else float("inf")
    wall = run.get("wall_seconds")
    keys = (texts[0].lower(), texts[1], texts[2], texts[3], texts[4],
            int(steps) if isinstance(steps, (int, float)) else -1, numeric_best,
            float(wall) if isinstance(wall, (int, float)) else -1.0, start)
    return texts, keys


class RunsModel(QAbstractTableModel):
    """The runs as rows (texts and sort keys computed once per scan)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._runs: list[dict] = []
        self._rows: list[tuple[tuple[str, ...], tuple]] = []
        self._haystacks: list[str] = []
        self._sorted: tuple | None = None  # (column, order) of the last sort, kept across scans

    def set_runs(self, runs: list[dict]) -> None:
        self.beginResetModel()
        self._runs = list(runs)
        self._rows = [row_cells(r) for r in self._runs]
        self._haystacks = [" ".join(texts[c] for c in FILTERED).lower() for texts, _keys in self._rows]
        self.endResetModel()
        if self._sorted is not None:
            self.sort(*self._sorted)

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """Sort the rows by their keys in Python (one sorted() call: a proxy's per-comparison data() calls
        cost seconds at 10,000 rows)."""
        if not 0 <= column < len(COLUMNS):
            return
        self._sorted = (column, order)
        if not self._rows:
            return
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        order_ = sorted(range(len(self._rows)), key=lambda i: self._rows[i][1][column],
                        reverse=order == Qt.SortOrder.DescendingOrder)
        where = {was: now for now, was in enumerate(order_)}
        self._runs = [self._runs[i] for i in order_]
        self._rows = [self._rows[i] for i in order_]
        self._haystacks = [self._haystacks[i] for i in order_]
        self.changePersistentIndexList(old, [self.index(where[i.row()], i.column()) for i in old])
        self.layoutChanged.emit()

    def haystack(self, row: int) -> str:
        """What the filter box searches in this row: name, task, status, precision, lower case."""
        return self._haystacks[row]

    def run(self, row: int) -> dict:
        return self._runs[row]

    @property
    def runs(self) -> list[dict]:
        return list(self._runs)

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        texts, keys = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return texts[index.column()]
        if role == SORT_ROLE:
            return keys[index.column()]
        if role == RUN_ROLE:
            return index.row()
        if role == Qt.ItemDataRole.ToolTipRole:
            run = self._runs[index.row()]
            message = run.get("message") or ""
            return f"{run.get('folder')}\nid {run.get('id')}" + (f"\n{message}" if message else "")
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() in (5, 7):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class RunsFilter(QSortFilterProxyModel):
    """Sorting is the model's (RunsModel.sort); every word of the filter text must appear in name, task, status or precision."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self._words: list[str] = []

    def set_text(self, text: str) -> None:
        self.beginFilterChange()
        self._words = text.lower().split()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """The model sorts itself (fast); the proxy keeps its order and only filters."""
        self.sourceModel().sort(column, order)

    def filterAcceptsRow(self, row, parent) -> bool:  # noqa: N802 (Qt override)
        if not self._words:
            return True
        haystack = self.sourceModel().haystack(row)
        return all(word in haystack for word in self._words)


def delete_run(folder: str) -> str:
    """Delete a run folder as `amp-console runs delete` does: never one a live run holds."""
    if is_in_use(folder):
        raise RuntimeError(f"{folder} is in use by a running run; stop it first")
    shutil.rmtree(folder)
    return folder


class HistoryPanel(QWidget):
    """The run history table and its actions. `root` gives the runs folder (called at each scan)."""

    loadSettingsRequested = Signal(dict)  # the run's config
    resumeRequested = Signal(str)  # a checkpoint path
    overlayRequested = Signal(list)  # [(label, metrics.jsonl records, metric name or None)]
    clearOverlaysRequested = Signal()
    scanned = Signal(int)  # rows after a scan
    rootChosen = Signal(str)  # the user moved the runs root ('' = back to the default)

    def __init__(self, root: Callable[[], Path], parent=None, confirm: Callable[[str], bool] | None = None):
        super().__init__(parent)
        self.setObjectName("historyPanel")
        self._root_fn = root
        self._confirm = confirm or self._ask
        self.root: Path | None = None
        self.jobs = JobRunner(self)
        self._scanning = False
        self._scan_started = 0.0
        self._rescan = False
        self.model = RunsModel(self)
        self.proxy = RunsFilter(self)
        self.proxy.setSourceModel(self.model)
        self.watcher = QFileSystemWatcher(self)
        self.watcher.directoryChanged.connect(lambda _path: self._soon.start())
        self._soon = QTimer(self, singleShot=True, interval=300)  # a burst of folder changes: one scan
        self._soon.timeout.connect(self.refresh)
        self._auto = QTimer(self, interval=AUTO_REFRESH_MS)
        self._auto.timeout.connect(self.refresh)

        self.rootLabel = QLabel(objectName="historyRootLabel")
        self.rootLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.rootButton = QPushButton("Change…", objectName="historyRootButton", clicked=self.choose_root)
        self.rootButton.setToolTip("Move the runs root: where new runs without an output folder go and what "
                                   "this list shows (the CLI uses --runs-dir or $" + RUNS_DIR_ENV + ")")
        self.rootDefaultButton = QPushButton("Default", objectName="historyRootDefaultButton",
                                             clicked=lambda: self.rootChosen.emit(""))
        self.rootDefaultButton.setToolTip(f"Back to the default runs root: ${RUNS_DIR_ENV} when set, else "
                                          f"{runs_root(None) if not os.environ.get(RUNS_DIR_ENV) else 'your data folder'}")
        root_row = QHBoxLayout()
        root_row.addWidget(self.rootLabel, 1)
        root_row.addWidget(self.rootButton)
        root_row.addWidget(self.rootDefaultButton)
        self.filterEdit = QLineEdit(objectName="historyFilterEdit", placeholderText="Filter: name, task, status, "
                                                                                    "precision (e.g. bf16 completed)")
        self.filterEdit.setClearButtonEnabled(True)
        self.filterEdit.textChanged.connect(self._filter)
        self.refreshButton = QPushButton("Refresh", objectName="historyRefreshButton", clicked=self.refresh)
        top = QHBoxLayout()
        top.addWidget(self.filterEdit, 1)
        top.addWidget(self.refreshButton)

        self.table = QTableView(objectName="historyTable")
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(8, Qt.SortOrder.DescendingOrder)  # newest first
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().selectionChanged.connect(lambda *_a: self._update_buttons())
        self.table.doubleClicked.connect(lambda _i: self.load_settings())

        self.loadButton = QPushButton("Load settings", objectName="historyLoadButton", clicked=self.load_settings)
        self.resumeButton = QPushButton("Resume", objectName="historyResumeButton", clicked=self.resume)
        self.revealButton = QPushButton("Reveal folder", objectName="historyRevealButton", clicked=self.reveal)
        self.deleteButton = QPushButton("Delete…", objectName="historyDeleteButton", clicked=self.delete)
        self.overlayButton = QPushButton("Overlay on plots", objectName="historyOverlayButton", clicked=self.overlay)
        self.clearButton = QPushButton("Clear overlays", objectName="historyClearOverlaysButton",
                                       clicked=lambda: self.clearOverlaysRequested.emit())
        self.loadButton.setToolTip("Put the selected run's settings in the form (double-click a row)")
        self.resumeButton.setToolTip("Continue the selected run from its last checkpoint")
        self.overlayButton.setToolTip("Draw the selected runs' loss and validation metric over the plots")
        actions = QHBoxLayout()
        for button in (self.loadButton, self.resumeButton, self.revealButton, self.deleteButton):
            actions.addWidget(button)
        actions.addStretch(1)
        actions.addWidget(self.overlayButton)
        actions.addWidget(self.clearButton)
        self.statusLabel = QLabel(objectName="historyStatusLabel")

        layout = QVBoxLayout(self)
        layout.addLayout(root_row)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addLayout(actions)
        layout.addWidget(self.statusLabel)
        self._update_buttons()

    # ------------------------------------------------------------------ scanning
    @property
    def busy(self) -> bool:
        return self._scanning or self.jobs.busy

    def refresh(self) -> None:
        """Scan the runs folder off the GUI thread (a scan asked for during one runs once it is done)."""
        if self._scanning:
            self._rescan = True
            return
        root = Path(self._root_fn())
        if root != self.root:
            if self.watcher.directories():
                self.watcher.removePaths(self.watcher.directories())
            self.root = root
            self.rootLabel.setText(f"Runs in {root}")
        if root.is_dir() and not self.watcher.directories():
            self.watcher.addPath(str(root))
        self._scanning = True
        self._scan_started = time.monotonic()
        self.refreshButton.setEnabled(False)
        self.jobs.submit(lambda: find_runs(root), self._scanned, self._scan_failed)

    def _scanned(self, runs: list[dict]) -> None:
        self._scanning = False
        # the periodic rescan stays cheap: at most ~5% of one core, however big the folder
        self._auto.setInterval(max(AUTO_REFRESH_MS, int(20_000 * (time.monotonic() - self._scan_started))))
        self.refreshButton.setEnabled(True)
        selected = {r.get("folder") for r in self.selected_runs()}
        if [(r.get("folder"), r.get("status"), r.get("steps"), r.get("wall_seconds")) for r in runs] != \
                [(r.get("folder"), r.get("status"), r.get("steps"), r.get("wall_seconds")) for r in self.model.runs]:
            self.model.set_runs(runs)
            self._select_folders(selected)
        self.statusLabel.setText(f"{len(runs)} run(s)" if runs else f"No runs in {self.root} yet")
        self._update_buttons()
        self.scanned.emit(len(runs))
        if self._rescan:
            self._rescan = False
            self.refresh()

    def _scan_failed(self, message: str, _details: str) -> None:
        self._scanning = False
        self.refreshButton.setEnabled(True)
        self.statusLabel.setText(f"Could not read {self.root}: {message}")
        self.scanned.emit(self.model.rowCount())

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        self.refresh()
        self._auto.start()

    def hideEvent(self, event) -> None:  # noqa: N802
        self._auto.stop()
        super().hideEvent(event)

    def shutdown(self) -> None:
        self._auto.stop()
        self._soon.stop()
        self.jobs.shutdown()

    # ------------------------------------------------------------------ selection
    def _filter(self, text: str) -> None:
        self.proxy.set_text(text)
        self._update_buttons()

    def visible_names(self) -> list[str]:
        return [self.proxy.index(r, 0).data() for r in range(self.proxy.rowCount())]

    def selected_runs(self) -> list[dict]:
        rows = sorted({self.proxy.mapToSource(i).row() for i in self.table.selectionModel().selectedRows()})
        return [self.model.run(r) for r in rows]

    def select_names(self, *names: str) -> None:
        """Select the rows of these run names (tests, scripts)."""
        self.table.clearSelection()
        flags = (self.table.selectionModel().SelectionFlag.Select | self.table.selectionModel().SelectionFlag.Rows)
        for row in range(self.proxy.rowCount()):
            if self.proxy.index(row, 0).data() in names:
                self.table.selectionModel().select(self.proxy.index(row, 0), flags)

    def _select_folders(self, folders: set) -> None:
        flags = (self.table.selectionModel().SelectionFlag.Select | self.table.selectionModel().SelectionFlag.Rows)
        for row in range(self.proxy.rowCount()):
            if self.model.run(self.proxy.mapToSource(self.proxy.index(row, 0)).row()).get("folder") in folders:
                self.table.selectionModel().select(self.proxy.index(row, 0), flags)

    def _update_buttons(self) -> None:
        runs = self.selected_runs()
        one = len(runs) == 1
        self.loadButton.setEnabled(one and bool(runs[0].get("config")))
        self.resumeButton.setEnabled(one and self._checkpoint(runs[0]) is not None
                                     and runs[0].get("status") != "running")
        self.revealButton.setEnabled(one)
        self.deleteButton.setEnabled(bool(runs) and not any(self._live(r) for r in runs))
        self.overlayButton.setEnabled(bool(runs))

    @staticmethod
    def _live(run: dict) -> bool:
        """A live run holds the folder (checked now: the scan may be seconds old)."""
        return run.get("status") == "running" or is_in_use(run["folder"])

    @staticmethod
    def _checkpoint(run: dict) -> str | None:
        path = ((run.get("checkpoints") or {}).get("last") or {}).get("path")
        if not path:
            return None
        path = Path(path)
        if not path.is_absolute():
            path = Path(run["folder"]) / path.name
        return str(path) if path.is_file() else None

    # ------------------------------------------------------------------ actions
    def choose_root(self) -> None:
        from PySide6.QtWidgets import QFileDialog

        folder = QFileDialog.getExistingDirectory(self, "Runs root", str(self.root or ""))
        if folder:
            self.rootChosen.emit(folder)

    def load_settings(self) -> None:
        runs = self.selected_runs()
        if len(runs) == 1 and runs[0].get("config"):
            self.loadSettingsRequested.emit(dict(runs[0]["config"]))

    def resume(self) -> None:
        runs = self.selected_runs()
        if len(runs) != 1:
            return
        checkpoint = self._checkpoint(runs[0])
        if checkpoint is None:
            self.statusLabel.setText(f"{runs[0].get('name')}: no checkpoint to resume from")
            return
        self.resumeRequested.emit(checkpoint)

    def reveal(self) -> None:
        runs = self.selected_runs()
        if len(runs) == 1:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(runs[0]["folder"])))

    def _ask(self, text: str) -> bool:
        answer = QMessageBox.question(self, "Delete runs", text,
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def delete(self) -> None:
        runs = self.selected_runs()
        if not runs:
            return
        running = [r for r in runs if self._live(r)]
        if running:
            self.statusLabel.setText(f"{running[0].get('name')} is running; stop it first")
            return
        names = ", ".join(str(r.get("name")) for r in runs)
        if not self._confirm(f"Delete {len(runs)} run folder(s) and everything in them?\n{names}"):
            return
        folders = [str(r["folder"]) for r in runs]

        def done(deleted) -> None:
            self.statusLabel.setText(f"Deleted {len(deleted)} run folder(s)")
            self.refresh()

        self.jobs.submit(lambda: [delete_run(f) for f in folders], done,
                         lambda message, _d: (self.statusLabel.setText(f"Delete failed: {message}"), self.refresh()))

    def overlay(self) -> None:
        """Read the selected runs' metrics.jsonl off the GUI thread, then ask for them to be overlaid."""
        runs = self.selected_runs()
        if not runs:
            return
        wanted = [(f"{r.get('name')} · {r.get('precision') or '?'}", Path(r["folder"]) / METRICS_FILE,
                   (r.get("best") or {}).get("name")) for r in runs]

        def read():
            return [(label, read_jsonl(path), metric) for label, path, metric in wanted]

        self.statusLabel.setText(f"Reading the metrics of {len(runs)} run(s)…")
        self.jobs.submit(read, self._overlay_read,
                         lambda message, _d: self.statusLabel.setText(f"Could not read metrics: {message}"))

    def _overlay_read(self, runs: list) -> None:
        self.statusLabel.setText(f"Overlaid {len(runs)} run(s) on the plots")
        self.overlayRequested.emit(runs)
