"""The run queue (core.runs.queue) in a panel: its entries with their states, run folders and results; add the
form's settings, settings files, a task file's tasks or a sweep's trials (the sweep dialog's), move and remove
pending entries, start, pause and stop the queue. The runner (core.runs.queue.QueueRunner) works on a
BackgroundJob; the table follows <runs root>/.queue.json, so a queue that `amp-console queue start` runs shows
here too."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.panels.editors import box_layout, hbox
from app.run.jobs import BackgroundJob
from core.config import RunConfig
from core.errors import AmpConsoleError
from core.files import lock_is_held
from core.runs import queue

COLUMNS = ("Name", "State", "Run folder", "Result")


class QueuePanel(QWidget):
    """`root()`: the runs root; `form_config()`: the form's RunConfig (falsy when the form is invalid); `form_host()`:
    the core.remote Host of the form's device (None: this machine), where its entries train."""

    historyRequested = Signal(str)  # a run folder's name, to select in the run history

    def __init__(
        self, root: Callable[[], Path], form_config: Callable, parent=None, form_host: Callable = lambda: None
    ):
        super().__init__(parent)
        self.setObjectName("queuePanel")
        self.root, self.form_config, self.form_host = root, form_config, form_host
        self.entries: list[dict] = []
        self.paused = False
        self.job = BackgroundJob("queueRunner", self)
        self.job.progress.connect(self.show_queue)
        self.job.failed.connect(lambda message, _field, _details: self.note(message))
        self.job.runningChanged.connect(lambda _running: self.refresh())
        self.table = QTableWidget(0, len(COLUMNS), objectName="queueTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)  # a failure's reason starts with what went wrong
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS)):  # state and folder as wide as they are, name and result share the rest
            mode = QHeaderView.ResizeMode.ResizeToContents if column in (1, 2) else QHeaderView.ResizeMode.Stretch
            header.setSectionResizeMode(column, mode)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.statusLabel = QLabel(objectName="queueStatus", wordWrap=True)
        self.buttons = {}
        for name, text, slot in (
            ("addForm", "Add the form's settings", self.add_form),
            ("addFiles", "Add settings files…", self.add_files),
            ("addTasks", "Add a task file…", self.add_task_file),
            ("up", "Up", lambda: self.move(-1)),
            ("down", "Down", lambda: self.move(1)),
            ("remove", "Remove", self.remove),
            ("retry", "Retry", lambda: self._edit(queue.retry_entry, (self.selected() or {}).get("id", ""))),
            ("history", "Show in history", self.show_in_history),
            ("start", "Start queue", self.start_or_pause),
            ("stop", "Stop", self.stop),
        ):
            self.buttons[name] = QPushButton(text, objectName=f"queue{name[0].upper()}{name[1:]}Button", clicked=slot)
        self.buttons["addTasks"].setToolTip("One entry per Task class of a task file, at the task's defaults")
        *edits, start, stop = self.buttons.values()  # Start and Stop at the right
        box_layout(self, (self.table, 1), self.statusLabel, hbox(*edits, None, start, stop), margins=True)
        self._timer = QTimer(self, interval=1000)  # another console's runner (`queue start`) changes it too
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self.refresh()

    @property
    def running(self) -> bool:
        return self.job.running or lock_is_held(self.root() / queue.RUNNER_LOCK)

    def note(self, text: str) -> None:
        self.statusLabel.setText(text)

    def refresh(self) -> None:
        try:
            self.show_queue(queue.read_queue(self.root()))
        except AmpConsoleError as exc:
            self.note(str(exc))

    def show_queue(self, data: dict) -> None:
        self.entries, self.paused = data["entries"], bool(data.get("paused"))
        selected = self.selected()
        self.table.setRowCount(len(self.entries))
        for row, entry in enumerate(self.entries):
            cells = (
                entry["name"],
                entry["state"],
                Path(entry["folder"]).name if entry["folder"] else "",
                entry["result"],
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(entry["folder"] if column == 2 else text)
                self.table.setItem(row, column, item)
        if selected is not None:
            ids = [e["id"] for e in self.entries]
            if selected["id"] in ids:
                self.table.selectRow(ids.index(selected["id"]))
        counts = {s: sum(e["state"] == s for e in self.entries) for s in queue.STATES}
        state = "running" if self.running else "paused" if self.paused else "idle"
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "empty"
        self.note(f"Queue {state}: {summary}. Runs go under {self.root()}.")
        self._update_buttons()

    def selected(self) -> dict | None:
        rows = self.table.selectionModel().selectedRows()
        return self.entries[rows[0].row()] if rows and rows[0].row() < len(self.entries) else None

    def _update_buttons(self) -> None:
        entry, running = self.selected(), self.running
        pending = entry is not None and entry["state"] == "pending"
        for name, enabled in (
            ("up", pending),
            ("down", pending),
            ("remove", entry is not None and entry["state"] != "running"),
        ):
            self.buttons[name].setEnabled(enabled)
        self.buttons["retry"].setEnabled(entry is not None and entry["state"] in ("failed", "stopped"))
        self.buttons["history"].setEnabled(bool(entry and entry["folder"]))
        self.buttons["start"].setText("Pause queue" if running and not self.paused else "Start queue")
        self.buttons["stop"].setEnabled(self.job.running and not self.job.stopping)

    def _edit(self, change: Callable, *args) -> None:
        try:
            change(self.root(), *args)
        except AmpConsoleError as exc:
            self.note(str(exc))
            return
        self.refresh()

    def add(self, configs: list) -> None:
        self._edit(queue.add_entries, configs)

    def add_form(self) -> None:
        config = self.form_config()
        if not config:
            self.note("The form has an invalid setting: fix it, then add it to the queue.")
            return
        host = self.form_host()
        self._edit(queue.add_entries, [(Path(config.out_dir).name or config.task, config)], host)

    def add_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add settings files to the queue", "", "Settings (*.toml)")
        try:
            self.add([(Path(f).stem, RunConfig.load_toml(f)) for f in files])
        except AmpConsoleError as exc:
            self.note(str(exc))

    def add_task_file(self, path: str = "") -> None:
        """One entry per Task class of a task file, at the task's defaults on the form's device and precision. Read
        from its source and listed with a stand-in class, as File → Add task… does: its code runs only in its runs."""
        from core.tasks import add_task, remember_task, task_source
        from core.tasks.catalog import task_class_names
        from core.tasks.describe import stand_in

        path = path or QFileDialog.getOpenFileName(self, "Add a task file's tasks", "", "Python task files (*.py)")[0]
        form, entries = self.form_config(), []
        where = {"device": form.device, "precision": form.precision} if form else {}
        for name in task_class_names(path) if path else ():
            reference = f"{path}:{name}"
            if (info := remember_task(reference)) is None:
                self.note(f"{reference}: its settings are not plain literals; add it with File → Add task… first")
                return
            try:
                add_task(
                    reference, stand_in(dataclasses.asdict(info) | {"capabilities": (), "class_name": name}, reference)
                )
            except AmpConsoleError as exc:
                self.note(str(exc))
                return
            values = {**info.defaults, "task": info.name, "task_file": task_source(info.name), **where}
            entries.append((f"{info.name} ({Path(path).name})", RunConfig.from_dict(values)))
        if path and not entries:
            self.note(f"{path} defines no Task class")
        elif entries:
            self.add(entries)

    def move(self, step: int) -> None:
        entry = self.selected()
        if entry is not None:
            self._edit(queue.move_entry, entry["id"], self.entries.index(entry) + 1 + step)

    def remove(self) -> None:
        entry = self.selected()
        if entry is not None:
            self._edit(queue.remove_entry, entry["id"])

    def show_in_history(self) -> None:
        entry = self.selected()
        if entry and entry["folder"]:
            self.historyRequested.emit(Path(entry["folder"]).name)

    def start_or_pause(self) -> None:
        """Start the queue here (unpaused), or pause it: no new entry starts, the running one goes on."""
        pausing = self.running and not self.paused
        self._edit(queue.set_paused, pausing)
        if not pausing and not self.running:
            from core.cli.queue import train_on_host  # the layer that reaches hosts

            root = self.root()
            self.job.start(
                lambda progress, control: queue.QueueRunner(
                    root, emit=progress, control=control, on_host=train_on_host
                ).run()
            )
        self.refresh()

    def stop(self) -> None:
        """Stop the queue and its running entry (after its step, with a checkpoint): that entry ends 'stopped'."""
        if self.job.control is not None:
            self.job.control.stop()
        self._update_buttons()

    def shutdown(self) -> None:
        self._timer.stop()
        self.job.shutdown()
