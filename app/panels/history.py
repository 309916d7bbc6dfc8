"""Run history: every run under the runs folder in a sortable, filterable table, with actions on the selected runs (load
settings, resume, export, reveal, delete, overlay, compare, evaluate, edit the note). It emits requests that
main_window wires; scanning, reading and deleting run off the GUI thread, and the table refreshes on Refresh, when a
run folder appears or goes, and every few seconds while visible.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QFileSystemWatcher, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableView,
    QToolButton,
    QWidget,
)

from app.panels import history_scan
from app.panels.editors import box_layout, hbox
from app.panels.history_scan import Prepared, prepare
from app.panels.remote_history import RemoteHistory
from app.panels.run_compare import RunCompare, grow_on_screen
from app.panels.run_evaluation import EvaluationLine, measure
from app.panels.run_note import RunNoteEditing
from app.panels.run_rows import advised, checkpoint_of, describe_checkpoint, overlay_label
from app.panels.runs_model import RunsModel
from app.run.jobs import BackgroundJob, JobRunner
from core.engine.run_delete import delete_run
from core.engine.run_folder import METRICS_FILE, is_in_use
from core.engine.run_index import INDEX_FILE, REMEMBERED_FILE
from core.engine.run_record import RUNS_DIR_ENV, runs_root
from core.files import read_jsonl
from core.process import signal_group
from core.text import printable

AUTO_REFRESH_MS = 5_000  # while visible (longer when a scan takes longer, see _scanned)
NAME_WIDTH = 320  # the name column's widest when sized to its texts (a longer name elides; its tooltip has it whole)


def _entries(root: Path) -> frozenset | None:
    """The root's entries but the index's files (a listing writes them): what a run folder coming or going
    changes, with when the list of remembered folders outside it last changed."""
    try:
        names = frozenset(n for n in os.listdir(root) if not n.startswith(INDEX_FILE))
        return names | {os.stat(root / REMEMBERED_FILE).st_mtime_ns if REMEMBERED_FILE in names else None}
    except OSError:
        return None


class HistoryPanel(RunNoteEditing, QWidget):
    """The run history table and its actions. `root` gives the runs folder (called at each scan)."""

    loadSettingsRequested = Signal(dict)  # the run's config
    resumeRequested = Signal(str)  # a checkpoint path (the run's last or best)
    exportRequested = Signal(str)  # a checkpoint path to export (the run's best or last)
    evaluated = Signal(dict)  # the evaluation report (core.runs.evaluation_report) of a checkpoint measured
    previewRequested = Signal(str)  # a run folder to try in the Model preview (its best, else last, checkpoint)
    # [(label, app.plot_points.OverlayPoints parsed from metrics.jsonl, metric name or None)]
    overlayRequested = Signal(list)
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
        self.remoteRuns = RemoteHistory(self)  # the hosts' runs as rows (app.panels.remote_history)
        self._scanning = False
        self._scan_jobs: set[BackgroundJob] = set()  # the scan, and one that has sent its rows, being joined
        self._scan_pids: set[int] = set()  # the process groups of the scans' running children
        self._scan_started = 0.0
        self._rescan = 0  # a refresh asked for during a scan: 1 if the root's entries changed, 2 a whole scan
        self._entries: frozenset | None = None  # the root's entries as the last scan began
        self._scan_serial = 0  # counts scans started (a note saved is shown until a later scan reads it)
        # folder -> [note, serial of the last scan started before it was on disk (None: being written)]
        self._saved_notes: dict[str, list] = {}
        self._note_folder: str | None = None  # the run whose note is in the editor
        self._note_loaded = ""  # its note as last read or saved: the editor is 'edited' when it differs
        self._syncing = False  # a rescan is replacing the rows: the selection is not the user's
        self._evaluating: str | None = None  # the run folder being evaluated (one at a time)
        self._notice = ""  # an action's message, kept on the status line until the selection changes
        self._scan_text = ""  # the last scan's count (or why it failed), after the notice
        self.model = RunsModel(self)
        self._sized_for: Path | None = None  # the root the columns were last sized for
        self.watcher = QFileSystemWatcher(self)
        self.watcher.directoryChanged.connect(lambda _path: self._soon.start())
        self._soon = QTimer(self, singleShot=True, interval=300)  # a burst of folder changes: one scan
        self._soon.timeout.connect(lambda: self.refresh(listing=True))
        self._auto = QTimer(self, interval=AUTO_REFRESH_MS)
        self._auto.timeout.connect(lambda: self._scanning or self.refresh())  # not one more after a long scan

        self.rootLabel = QLabel(objectName="historyRootLabel")
        self.rootLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        tip = (
            "Move the runs root: where new runs without an output folder go and what this list shows "
            f"(the CLI uses --runs-dir or ${RUNS_DIR_ENV})"
        )
        self.rootButton = self._button("Change…", "Root", self.choose_root, tip)
        default = runs_root(None) if not os.environ.get(RUNS_DIR_ENV) else "your data folder"
        tip = f"Back to the default runs root: ${RUNS_DIR_ENV} when set, else {default}"
        self.rootDefaultButton = self._button("Default", "RootDefault", lambda: self.rootChosen.emit(""), tip)
        root_row = hbox((self.rootLabel, 1), self.rootButton, self.rootDefaultButton)
        self.filterEdit = QLineEdit(
            objectName="historyFilterEdit",
            placeholderText="Filter: name, task, status, precision, date, note (e.g. bf16 completed 2026-12)",
            clearButtonEnabled=True,
        )
        self.filterEdit.textChanged.connect(self._filter)
        self.refreshButton = self._button("Refresh", "Refresh", self.refresh)
        top = hbox((self.filterEdit, 1), self.refreshButton)

        self.table = QTableView(objectName="historyTable")
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(8, Qt.SortOrder.DescendingOrder)  # newest first
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a sweep trial's date and its own part both show
        self.table.verticalHeader().hide()
        # sized from each column's longest text once per root (_size_columns), not ResizeToContents at every change
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().selectionChanged.connect(lambda *_a: self._selection_changed())
        self.table.doubleClicked.connect(lambda _i: self.load_settings())

        tip = "Put the selected run's settings in the form (double-click a row)"
        self.loadButton = self._button("Load settings", "Load", self.load_settings, tip)
        # Resume and Export: a click takes the usual checkpoint (resume: the last; export and evaluate: the one the
        # run's summary advised, the best unless its validation split was too small); the arrow offers the other.
        last_best = (("last", "From the last"), ("best", "From the best"))
        best_last = (("best", "The best"), ("last", "The last"))
        self.resumeButton, self.resumeMenu = self._split_button(
            "Resume", "historyResume", self.resume, "last", last_best,
            "Continue the selected run from its last checkpoint (the arrow: from its best)",
        )  # fmt: skip
        self.exportButton, self.exportMenu = self._split_button(
            "Export…", "historyExport", self.export, None, best_last,
            "Export the selected run's model: the checkpoint its summary advised (the best, unless its validation "
            "split was too small to choose by), else the other (the arrow: choose)",
        )  # fmt: skip
        self.evaluateButton, self.evaluateMenu = self._split_button(
            "Evaluate", "historyEvaluate", self.evaluate, None, best_last,
            "Measure the selected run's advised (or chosen) checkpoint on its test split, e.g. a stopped run, which has no "
            "test metrics; the result shows under the table and in the Model preview's Evaluation tab (as "
            "`amp-console evaluate --report`)",
        )  # fmt: skip
        self.previewButton = self._button(
            "Try it…", "Preview", self.preview, "Try the selected run's model in the Model preview: type a review, "
            "pick a user or a query (a run still training: its last checkpoint)",
        )  # fmt: skip
        self.revealButton = self._button("Reveal folder", "Reveal", self.reveal)
        self.deleteButton = self._button("Delete…", "Delete", self.delete)
        self.compareButton = self._button(
            "Compare", "Compare", self.compare_selected, "The selected runs side by side, with what differs highlighted"
        )
        tip = "Draw the selected runs' loss and validation metric over the plots"
        self.overlayButton = self._button("Overlay on plots", "Overlay", self.overlay, tip)
        self.clearButton = self._button("Clear overlays", "ClearOverlays", self.clearOverlaysRequested.emit)
        actions = hbox(
            *(self.loadButton, self.resumeButton, self.exportButton, self.evaluateButton, self.previewButton),
            *(self.revealButton, self.deleteButton, None, self.compareButton, self.overlayButton, self.clearButton),
        )

        self.noteLabel = QLabel("Note:", objectName="historyNoteLabel")
        self.noteEdit = QPlainTextEdit(objectName="historyNoteEdit", tabChangesFocus=True)
        self.noteEdit.setPlaceholderText("Select one run to write a note on it (kept in note.txt in its folder)")
        line = self.noteEdit.fontMetrics().lineSpacing()
        self.noteEdit.setFixedHeight(int(line * 2.6) + 12)
        self.noteEdit.textChanged.connect(self._update_note_button)
        tip = "Save the note (Ctrl+Return); an empty note removes it"
        self.noteSaveButton = self._button("Save note", "NoteSave", self.save_note, tip)
        QShortcut(
            QKeySequence("Ctrl+Return"),
            self.noteEdit,
            activated=self.save_note,
            context=Qt.ShortcutContext.WidgetShortcut,
        )
        top_aligned = 0, Qt.AlignmentFlag.AlignTop
        note_row = hbox((self.noteLabel, *top_aligned), (self.noteEdit, 1), (self.noteSaveButton, *top_aligned))

        self.compareView = RunCompare(self)
        self.compareView.closeRequested.connect(self.close_compare)
        self.compareView.hide()
        upper = QWidget(objectName="historyUpper")
        self.evaluationLine = EvaluationLine(self)
        box_layout(upper, (self.table, 1), note_row, self.evaluationLine, actions)
        self.splitter = QSplitter(Qt.Orientation.Vertical, objectName="historySplitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(upper)
        self.splitter.addWidget(self.compareView)
        self.statusLabel = QLabel(objectName="historyStatusLabel")
        box_layout(self, root_row, top, (self.splitter, 1), self.statusLabel, margins=True)
        self._update_buttons()

    # ------------------------------------------------------------------ scanning
    @property
    def busy(self) -> bool:
        return self._scanning or self.jobs.busy or bool(self._scan_jobs)

    def refresh(self, listing: bool = False) -> None:
        """Scan the runs folder off the GUI thread (a scan asked for during one runs once it is done). `listing`: only
        if the root's entries changed since the last scan began (the watcher's: the index's own writes change none)."""
        if self._scanning:
            self._rescan = max(self._rescan, 1 if listing else 2)
            return
        root = Path(self._root_fn())
        if root != self.root:
            if self.watcher.directories():
                self.watcher.removePaths(self.watcher.directories())
            self.root = root
            self.rootLabel.setText(f"Runs in {root}")
            self.model.set_runs([])  # another root's runs: this one's listed as they are read
            self._entries = None
        if root.is_dir() and not self.watcher.directories():
            self.watcher.addPath(str(root))
        self._scanning = True
        self._scan_started = time.monotonic()
        self._scan_serial += 1
        serial = self._scan_serial
        self.refreshButton.setEnabled(False)
        # the rows' texts are made in the job too, off the GUI thread
        sort = self.model.sorted_by
        extra = self.remoteRuns.rows()
        progressive = not self.model.fingerprints  # nothing listed yet: rows shown in batches as runs are read
        known = self._entries if listing else None

        def scan(progress, control):
            entries = _entries(root)
            if known is not None and entries == known:
                return None
            children = self._scan_pids if len(entries or ()) > history_scan.CHILD_ABOVE else None
            rows = history_scan.scan(root, sort, progressive, progress, lambda: control.stop_requested, children)
            return entries, rows.merged(prepare(extra), sort=sort)

        job = BackgroundJob("historyScan", self)
        job.progress.connect(lambda batch: self._batch(batch, serial))
        job.succeeded.connect(lambda result: self._scanned(result, serial))
        job.failed.connect(lambda message, _field, _details: self._scanned(message, serial))
        job.runningChanged.connect(lambda running: running or self._scan_jobs.discard(job) or job.deleteLater())
        self._scan_jobs.add(job)
        job.start(scan)

    def _batch(self, prepared: Prepared, serial: int) -> None:
        """A first scan's runs read so far: listed at once (the scan goes on)."""
        if serial != self._scan_serial or not prepared.briefs:
            return
        if not self.model.fingerprints:  # the first rows: the columns sized for them (and for all at the end)
            self._size_columns(prepared.longest)
            self._sized_for = None
        self._keeping_selection(lambda: self.model.set_runs(prepared))
        self._scan_text = f"{len(self.model.fingerprints)} run(s) so far, reading on…"
        self._show_status()

    def _scanned(self, result: tuple | str | None, serial: int | None = None) -> None:
        """A scan's (root entries, rows); None: the entries had not changed, nothing was read; text: why it failed."""
        self._scanning = False
        self.refreshButton.setEnabled(True)
        if isinstance(result, str):
            self._scan_text = f"Could not read {self.root}: {result}"
            self._show_status()
        elif result is not None:
            self._entries, prepared = result
            self._show_rows(prepared, serial)
        self.scanned.emit(self.model.rowCount())
        if self._rescan:
            listing, self._rescan = self._rescan == 1, 0
            self.refresh(listing)

    def _show_rows(self, prepared: Prepared, serial: int | None) -> None:
        runs = prepared.briefs
        for folder, (note, written_before) in list(self._saved_notes.items()):
            if written_before is not None and serial is not None and serial > written_before:
                del self._saved_notes[folder]  # this scan started after the note was on disk: it read it
            else:  # a scan that started before the note was on disk: show the saved note
                prepared.set_note(folder, note)
        # the periodic rescan stays cheap however big the folder
        self._auto.setInterval(max(AUTO_REFRESH_MS, int(20_000 * (time.monotonic() - self._scan_started))))
        if prepared.fingerprints != self.model.fingerprints:
            self._keeping_selection(lambda: self.model.set_runs(prepared))
            if runs and self._sized_for != self.root:
                self._size_columns(prepared.longest)
        self._scan_text = f"{len(runs)} run(s)" if runs else f"No runs in {self.root} yet"
        self._show_status()
        self._update_buttons()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()
        self._auto.start()

    def hideEvent(self, event) -> None:
        self._auto.stop()
        super().hideEvent(event)

    def shutdown(self) -> None:
        self._auto.stop()
        self._soon.stop()
        self.remoteRuns.shutdown()
        for pid in list(self._scan_pids):  # a scan's child (app.panels.history_scan): its next line never comes
            signal_group(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        for job in list(self._scan_jobs):
            job.shutdown()
        self.jobs.shutdown()

    # ------------------------------------------------------------------ selection
    def _filter(self, text: str) -> None:
        """Filter the rows as the text is typed."""
        self._keeping_selection(lambda: self.model.set_filter(text))
        self._update_buttons()

    def _keeping_selection(self, change: Callable[[], None]) -> None:
        """Change the rows shown (a scan's, the filter's); the selected runs still shown stay selected."""
        selected = self.model.folders_at(i.row() for i in self.table.selectionModel().selectedRows())
        self._syncing = True  # the selection comes and goes: not a reason to reload the note editor
        try:
            change()
            if selected:
                model = self.table.selectionModel()
                model.select(self.model.selection_of(selected), model.SelectionFlag.Select | model.SelectionFlag.Rows)
        finally:
            self._syncing = False

    def _size_columns(self, longest: list[str]) -> None:
        """Each column as wide as its header or its longest text (the user may resize them after)."""
        header = self.table.horizontalHeader()
        metrics = self.table.fontMetrics()
        for column, text in enumerate(longest):
            width = max(header.sectionSizeHint(column), metrics.horizontalAdvance(text) + 14)
            header.resizeSection(column, min(width, NAME_WIDTH) if column == 0 else width)  # a long name: elided
        self._sized_for = self.root

    def visible_names(self) -> list[str]:
        return [self.model.index(r, 0).data() for r in range(self.model.rowCount())]

    def selected_runs(self) -> list[dict]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [self.model.run(r) for r in rows]

    def select_names(self, *names: str) -> None:
        """Select the rows of these run names (tests, scripts)."""
        self.table.clearSelection()
        flags = self.table.selectionModel().SelectionFlag.Select | self.table.selectionModel().SelectionFlag.Rows
        for row in range(self.model.rowCount()):
            if self.model.index(row, 0).data() in names:
                self.table.selectionModel().select(self.model.index(row, 0), flags)

    def _update_buttons(self) -> None:
        if self._syncing:
            return
        runs = self.selected_runs()
        one = len(runs) == 1
        last, refused_last = checkpoint_of(runs[0]) if one else (None, None)
        best, refused_best = checkpoint_of(runs[0], "best") if one else (None, None)
        if (refused_last or refused_best) and not self._notice:
            self._say(refused_last or refused_best)
        self.loadButton.setEnabled(one and bool(runs[0].get("config")))
        self.resumeButton.setEnabled(one and (last or best) is not None and runs[0].get("status") != "running")
        self.exportButton.setEnabled(one and (last or best) is not None)
        self.evaluateButton.setEnabled(one and (last or best) is not None and self._evaluating is None)
        self.previewButton.setEnabled(one and (last or best) is not None)
        choice = bool(last and best)  # the menu (and its arrow) only when there is a choice to make
        for button, menu in (
            (self.resumeButton, self.resumeMenu),
            (self.exportButton, self.exportMenu),
            (self.evaluateButton, self.evaluateMenu),
        ):
            for action in menu.actions():
                which, label = action.data()
                action.setEnabled({"last": last, "best": best}[which] is not None)
                if one:
                    action.setText(f"{label} checkpoint{describe_checkpoint(runs[0], which)}")
            button.setMenu(menu if choice else None)
            button.setPopupMode(
                QToolButton.ToolButtonPopupMode.MenuButtonPopup
                if choice
                else QToolButton.ToolButtonPopupMode.DelayedPopup
            )
        self.revealButton.setEnabled(one)
        self.deleteButton.setEnabled(bool(runs) and not any(self._live(r) for r in runs))
        self.compareButton.setEnabled(len(runs) >= 2)
        self.overlayButton.setEnabled(bool(runs))
        self._sync_note_editor(runs[0] if one else None)
        self.evaluationLine.show_for(runs[0].get("folder") if one else None)
        self.remoteRuns.update_buttons(runs)

    def _selection_changed(self) -> None:
        if not self._syncing:
            self._notice = ""  # the message was about what was selected before
            self._show_status()
        self._update_buttons()

    def _say(self, text: str) -> None:
        """An action's message on the status line, kept until the selection changes or another comes."""
        self._notice = printable(text)
        self._show_status()

    def _show_status(self) -> None:
        self.statusLabel.setText("  ·  ".join(t for t in (self._notice, printable(self._scan_text)) if t))

    @staticmethod
    def _live(run: dict) -> bool:
        """A live run holds the folder (checked now: the scan may be seconds old)."""
        return run.get("status") == "running" or is_in_use(run["folder"])

    # ------------------------------------------------------------------ compare
    def compare_selected(self) -> None:
        """The selected runs side by side under the table (2 or more)."""
        runs = self.selected_runs()
        if len(runs) < 2:
            return
        self.compareView.set_runs(runs)
        if self.compareView.isHidden():
            self.compareView.show()
            window = self.window()
            if window is not self and window.height() < 760:  # room for the table and the comparison
                grow_on_screen(window, 760)
            total = max(self.splitter.height(), 400)
            self.splitter.setSizes([total * 9 // 20, total * 11 // 20])

    def close_compare(self) -> None:
        self.compareView.hide()

    def _button(self, text: str, name: str, slot, tip: str = "") -> QPushButton:
        return QPushButton(text, objectName=f"history{name}Button", clicked=lambda: slot(), toolTip=tip)

    def _split_button(self, text: str, name: str, slot, default, choices: tuple, tip: str) -> tuple:
        """(button, menu): a click does slot(default); the menu, offered by an arrow when it is set (setMenu),
        slot(which) for each (which, label) of `choices`."""
        menu = QMenu(self, objectName=f"{name}Menu")
        for which, label in choices:
            menu.addAction(f"{label} checkpoint", lambda *_, which=which: slot(which)).setData((which, label))
        button = QToolButton(objectName=f"{name}Button", text=text, toolTip=tip, clicked=lambda: slot(default))
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        button.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        return button, menu

    # ------------------------------------------------------------------ actions
    def choose_root(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Runs root", str(self.root or ""))
        if folder:
            self.rootChosen.emit(folder)

    def load_settings(self) -> None:
        runs = self.selected_runs()
        if len(runs) == 1 and runs[0].get("config"):
            self.loadSettingsRequested.emit(dict(runs[0]["config"]))

    def _chosen(self, which: str | None, verb: str, again: Callable | None = None) -> tuple[dict, str] | None:
        """The one selected run and the path of its `which` checkpoint (None: the one its summary advised, else the
        other); None, saying why when it has none. `again`: a host's run is fetched first, then again()."""
        runs = self.selected_runs()
        if len(runs) != 1 or (again is not None and self.remoteRuns.fetch_first(runs, again)):
            return None
        run = runs[0]
        first = which or advised(run)
        other = None if which else {"best": "last", "last": "best"}[first]
        checkpoint = checkpoint_of(run, first)[0] or (checkpoint_of(run, other)[0] if other else None)
        if checkpoint is None:
            self._say(f"{run.get('name')}: no {which + ' ' if which else ''}checkpoint to {verb}")
        return None if checkpoint is None else (run, checkpoint)

    def resume(self, which: str = "last") -> None:
        """Ask to resume the selected run from its last (or best) checkpoint."""
        if chosen := self._chosen(which, "resume from"):
            self.resumeRequested.emit(chosen[1])

    def export(self, which: str | None = None) -> None:
        """Ask to export the selected run's best or last checkpoint; None: the one its summary advised."""
        if chosen := self._chosen(which, "export", lambda: self.export(which)):
            self.exportRequested.emit(chosen[1])

    def evaluate(self, which: str | None = None) -> None:
        """Measure the selected run's checkpoint (None: the advised one) on its test split off the GUI thread; the result
        shows under the table and goes out as `evaluated`. One evaluation at a time."""
        chosen = self._evaluating is None and self._chosen(which, "evaluate", lambda: self.evaluate(which))
        if not chosen:
            return
        (run, checkpoint), name = chosen, chosen[0].get("name")
        folder = str(run["folder"])

        def finished(result: dict | str) -> None:  # the report, or why it failed
            self._evaluating = None
            if isinstance(result, str):
                self.evaluationLine.failed(folder, result)
                self._say(f"Could not evaluate {name}: {result}")
            else:
                self.evaluationLine.finished(folder, result)
                metrics = " · ".join(f"{k} {v:.4g}" for k, v in result["metrics"].items())
                self._say(
                    f"{name}, {Path(checkpoint).name} (step {result['step']:,}), {result['split']} split: {metrics}"
                )
            self._update_buttons()
            if not isinstance(result, str):
                self.evaluated.emit(result)

        self._evaluating = folder
        self.evaluationLine.started(folder, checkpoint)
        self._say(f"Evaluating {name} ({Path(checkpoint).name})…")
        self.jobs.submit(lambda: measure(checkpoint), finished, lambda message, _details: finished(message))
        self._update_buttons()

    def preview(self) -> None:
        """Ask to try the selected run's model (the window opens the Model preview on it)."""
        if chosen := self._chosen(None, "try", self.preview):
            self.previewRequested.emit(str(chosen[0]["folder"]))

    def reveal(self) -> None:
        runs = self.selected_runs()
        if len(runs) == 1:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(runs[0]["folder"])))

    def _ask(self, text: str) -> bool:
        yes, no = QMessageBox.StandardButton.Yes, QMessageBox.StandardButton.No
        return QMessageBox.question(self, "Delete runs", text, yes | no, no) == yes

    def delete(self) -> None:
        runs = self.selected_runs()
        if not runs:
            return
        running = [r for r in runs if self._live(r)]
        if running:
            self._say(f"{running[0].get('name')} is running; stop it first")
            return
        names = ", ".join(printable(r.get("name")) for r in runs)
        if not self._confirm(f"Delete {len(runs)} run folder(s) and everything in them?\n{names}"):
            return
        folders, root = [str(r["folder"]) for r in runs], self.root

        def done(_result) -> None:
            self._say(f"Deleted {len(folders)} run folder(s)")
            self.refresh()

        self.jobs.submit(
            lambda: [delete_run(root, f) for f in folders],
            done,
            lambda message, _d: (self._say(f"Delete failed: {message}"), self.refresh()),
        )

    def overlay(self) -> None:
        """Read the selected runs' metrics.jsonl off the GUI thread, then ask for them to be overlaid."""
        runs = self.selected_runs()
        if not runs or self.remoteRuns.fetch_first(runs, self.overlay, checkpoint=False):
            return
        wanted = [(overlay_label(r), Path(r["folder"]) / METRICS_FILE, (r.get("best") or {}).get("name")) for r in runs]

        def read():  # parsed off the GUI thread too
            from app.plot_points import overlay_points

            return [(label, overlay_points(read_jsonl(path), metric), metric) for label, path, metric in wanted]

        self._say(f"Reading the metrics of {len(runs)} run(s)…")
        self.jobs.submit(read, self._overlay_read, lambda message, _d: self._say(f"Could not read metrics: {message}"))

    def _overlay_read(self, runs: list) -> None:
        self._say(f"Overlaid {len(runs)} run(s) on the plots")
        self.overlayRequested.emit(runs)
