"""File → Add task… / Remove task…: a user's task (a task file or a module's class) joins the task picker.

Loading a task runs its code, so the window asks first (once per file), then a child process imports it and answers
what the form needs (core.tasks.describe): an import that exits, hangs, forks or reads forever leaves the window as it
was, with one line in the status bar and the log; the child's process group is killed at the time limit and when the
window closes. Added references are listed at the next start from their source (nothing runs), loaded when picked."""

from __future__ import annotations

import signal
from pathlib import Path

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from app.run.jobs import JobRunner
from core.errors import ConfigError
from core.files import check_regular_file
from core.process import run_child, signal_group
from core.tasks import TASK_NAMES, add_task, forget_task, remember_task, task_infos, task_names, task_source

LABEL_CHARACTERS = 48  # a broken file's entry in the picker, cut to this (its tooltip has all of it)
PENDING = "file:"  # the picker's key of a task listed but not loaded: PENDING + its reference
RUNS_CODE = (
    "Loading a task runs its Python code (in a child process, and in every run that trains it), "
    "with your permissions. Load only files you trust."
)


def short_name(reference: str) -> str:
    """What the picker shows of where a task comes from: its file's name, or its module."""
    from core.tasks.user_tasks import TaskFileError, split_reference

    try:
        kind, target, _class_name = split_reference(reference)
    except TaskFileError:
        return reference
    return Path(target).name if kind == "file" else target


class TaskActions:
    """File → Add task…, Add task from a module… and Remove task…, and the task files the window remembers."""

    def __init__(self, window):
        self.window = window
        self.add_action = QAction("Add &task…", window, triggered=self.ask_add)
        self.add_action.setToolTip("Add a task of your own from its Python file (docs/tasks.md)")
        self.add_module_action = QAction("Add task from a &module…", window, triggered=self.ask_add_module)
        self.remove_action = QAction("Remo&ve task…", window, triggered=self.ask_remove)
        self.remove_action.setToolTip("Take a task you added out of the task list, for this and later sessions")
        self._accepted: set[str] = set()  # references whose code the user agreed to run
        self._loading: dict[str, int] = {}  # reference -> the process group of the child importing it (0: starting)
        self.jobs = JobRunner(window)
        window.setupPanel.unloadedTaskChosen.connect(self._load_listed)
        window.closed.connect(self.shutdown)

    @property
    def busy(self) -> bool:
        return bool(self._loading)

    def add_to_menu(self, menu) -> None:
        menu.addAction(self.add_action)
        menu.addAction(self.add_module_action)
        menu.addAction(self.remove_action)

    def update_enabled(self, running: bool) -> None:
        for action in (self.add_action, self.add_module_action, self.remove_action):
            action.setEnabled(self.window.engine_ready and not running)

    def list_remembered(self) -> None:
        """The task files remembered from earlier sessions, in the picker: read from their source (nothing runs)."""
        from core.tasks.user_tasks import source_problem

        for reference in self.window.window_settings.user_tasks():
            self._accepted.add(reference)
            info = remember_task(reference)
            if info is not None and info.name in TASK_NAMES:
                problem = f"its name {info.name!r} is a built-in task's"
            else:
                problem = source_problem(reference) if info is None else ""
            if problem:
                self._list_broken(reference, problem)
                self.window.logPanel.log(f"Task file {reference}: {problem}", "warning")
                continue
            self._list_pending(reference, info.name if info else "a task", f"{info.description}\n" if info else "")
        self.list_installed()

    def _list_pending(self, reference: str, name: str, about: str) -> None:
        self._accepted.add(reference)
        self.window.setupPanel.list_task(
            PENDING + reference,
            f"{name} ({short_name(reference)})",
            f"{about}{reference}\nLoaded (its code runs) when you pick it.",
        )

    def list_installed(self) -> None:
        """The tasks installed packages declare (entry points in amp_console.tasks), listed from their metadata and
        source (nothing is imported); one is loaded, off the GUI thread, when picked."""
        from core.tasks.user_tasks import installed_tasks

        infos = task_infos()
        for name, reference in installed_tasks().items():
            info = infos.get(name)
            if name in TASK_NAMES or info is None or info.source != reference:  # a file of that name is listed
                continue
            panel = self.window.setupPanel
            if panel.taskCombo.findData(PENDING + reference) >= 0 or panel.taskCombo.findData(name) >= 0:
                continue
            self._list_pending(reference, name, f"{info.description}\nan installed package's task: ")

    def _list_broken(self, reference: str, problem: str) -> None:
        label = f"{short_name(reference)}: {problem}"  # disabled items show no tooltip on every platform
        label = label if len(label) <= LABEL_CHARACTERS else label[: LABEL_CHARACTERS - 1] + "…"
        self.window.setupPanel.list_task(PENDING + reference, label, f"{reference}: {problem}", enabled=False)

    def _start_folder(self) -> str:
        """Where the file dialog opens: the folder of the task file added last ('' before any)."""
        from core.tasks.user_tasks import TaskFileError, split_reference

        for reference in reversed(self.window.window_settings.user_tasks()):
            try:
                kind, target, _class_name = split_reference(reference)
            except TaskFileError:
                continue
            if kind == "file" and Path(target).parent.is_dir():
                return str(Path(target).parent)
        return ""

    def ask_add(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window, "Add task", self._start_folder(), "Python task files (*.py);;All files (*)"
        )
        if path:
            self.add_file(path)

    def ask_add_module(self) -> None:
        question = "The task's module and class, importable here (package.module:ClassName):"
        text, ok = QInputDialog.getText(self.window, "Add task from a module", question)
        if ok and text.strip():
            self.add(text.strip())

    def add_file(self, path: str) -> bool:
        """Add the task in the file `path`; of a file with several Task classes, the one the user picks."""
        from core.tasks.catalog import task_class_names

        try:  # before any read: a FIFO would block, a device never ends
            check_regular_file(path, "task", "task file")
        except ConfigError as exc:
            self.window.show_error(f"Could not add the task: {str(exc).split(': ', 1)[-1]}")
            return False
        classes = task_class_names(path)  # read from its source: nothing runs yet
        reference = f"{path}:{classes[0]}" if len(classes) == 1 else path
        if len(classes) > 1:
            name, ok = QInputDialog.getItem(
                self.window,
                "Add task",
                f"{Path(path).name} defines {len(classes)} tasks. Which one to add? (Add the file again for another.)",
                classes,
                0,
                False,
            )
            if not ok:
                return False
            reference = f"{path}:{name}"
        return self.add(reference)

    def add(self, reference: str) -> bool:
        """Load the task `reference` names, once the user agrees to run its code; False when it is not tried."""
        from core.tasks.user_tasks import TaskFileError, canonical_reference

        try:
            reference = canonical_reference(reference)
        except TaskFileError as exc:
            self.window.show_error(f"Could not add the task: {exc}")
            return False
        if reference not in self._accepted and not self.confirm(reference):
            self.window.show_message("The task was not added: its code did not run.")
            return False
        self._accepted.add(reference)
        self._load(reference)
        return True

    def confirm(self, reference: str) -> bool:
        """Whether the user agrees to run the code of `reference` (asked once per file)."""
        answer = QMessageBox.question(
            self.window,
            "Add task",
            f"{RUNS_CODE}\n\n{reference}\n\nLoad it?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Yes

    def ask_remove(self) -> None:
        """The user picks one of the remembered tasks to forget."""
        remembered = self.window.window_settings.user_tasks()
        if not remembered:
            self.window.show_message(
                "No task of yours is listed: File → Add task… adds one. An installed "
                "package's tasks are listed while the package is installed."
            )
            return
        entries = {self._removal_text(reference): reference for reference in remembered}
        choice, ok = QInputDialog.getItem(
            self.window,
            "Remove task",
            "Which task to take out of the task list? It is not listed at the next "
            "start either; its file stays as it is (File → Add task… adds it again).\nAn installed package's "
            "tasks are not offered here: they are listed while the package is installed.",
            list(entries),
            0,
            False,
        )
        if ok and choice in entries:
            self.forget(entries[choice])

    def _removal_text(self, reference: str) -> str:
        """A remembered task in the Remove task list: its entry in the picker, then its reference."""
        from core.tasks.user_tasks import TaskFileError, canonical_reference

        combo = self.window.setupPanel.taskCombo
        try:
            canonical = canonical_reference(reference)
        except TaskFileError:
            canonical = reference
        keys = [PENDING + reference] + [name for name in task_names() if task_source(name) == canonical]
        index = next((i for key in keys if (i := combo.findData(key)) >= 0), -1)
        return f"{combo.itemText(index)} — {reference}" if index >= 0 else reference

    def forget(self, reference: str) -> None:
        """Take the remembered task `reference` out of the picker (to a built-in one if picked), registry and settings."""
        window, panel, settings = self.window, self.window.setupPanel, self.window.window_settings
        if window.controller.running:
            return
        names = forget_task(reference)
        fallback = next((name for name in TASK_NAMES if panel.taskCombo.findData(name) >= 0), "")
        panel.remove_task([PENDING + reference, *names], fallback)
        settings.set_user_tasks([known for known in settings.user_tasks() if known != reference])
        deferred = settings.deferred  # the saved form of a task not loaded yet: no longer to come back
        if deferred is not None and (deferred.get("task") in names or deferred.get("task_file") == reference):
            settings.deferred = None
        self._accepted.discard(reference)  # added again: asked again
        self._loading.pop(reference, None)  # a load under way is dropped when it ends
        what = f"the task {names[0]!r}" if names else short_name(reference)
        window.show_message(f"Removed {what} from the task list.")
        window.logPanel.log(f"Removed the task {reference} from the task list (not listed at the next start)")

    def _load_listed(self, key: str) -> None:
        """The user picked a remembered task: load it now."""
        if key.startswith(PENDING):
            self._load(key.removeprefix(PENDING))

    def _load(self, reference: str) -> None:
        """Import `reference` in a child (core.tasks.describe under core.process.run_child) on a worker thread."""
        from core.tasks.describe import command, import_limit, outcome

        if reference in self._loading:
            return
        self._loading[reference] = 0
        self.window.show_message(f"Loading the task in {reference} (running its code in a child process)…")
        self.jobs.submit(
            lambda: outcome(
                reference, run_child(command(reference), "", import_limit(), lambda pid: self._started(reference, pid))
            ),
            lambda answer: self._answered(reference, answer),
            lambda message, details: self._answered(reference, f"{reference}: {message}"),
        )

    def _started(self, reference: str, pid: int) -> None:
        """(On the worker thread.) The child runs: its group is killed now when its load was dropped meanwhile."""
        if reference in self._loading:
            self._loading[reference] = pid
        else:
            signal_group(pid, getattr(signal, "SIGKILL", 9))

    def shutdown(self) -> None:
        """The window closes: every import under way is killed (its process group), then its thread joined."""
        for pid in self._loading.values():
            signal_group(pid, getattr(signal, "SIGKILL", 9))
        self._loading.clear()
        self.jobs.shutdown()

    def _answered(self, reference: str, answer: dict | str) -> None:
        from core.tasks.describe import stand_in
        from core.tasks.user_tasks import TaskFileError

        if self._loading.pop(reference, None) is None:  # removed while it loaded
            return
        try:
            if isinstance(answer, str):
                raise TaskFileError(reference, answer.removeprefix(f"{reference}: "))
            cls = add_task(reference, stand_in(answer, reference))  # checked and registered; its code does not run here
        except TaskFileError as exc:  # e.g. its name is another loaded file's task's
            self._failed(reference, str(exc).removeprefix("task: "), "")
            return
        window, panel = self.window, self.window.setupPanel
        panel.add_task(cls, f"{cls.name} ({short_name(reference)})", key=PENDING + reference)
        remembered = window.window_settings.user_tasks()
        from core.tasks.user_tasks import installed_tasks

        if reference not in remembered and reference not in installed_tasks().values():  # installed: listed anyway
            window.window_settings.set_user_tasks([*remembered, reference])
        if not window.controller.running:
            panel.taskCombo.setCurrentIndex(panel.taskCombo.findData(cls.name))
            window.window_settings.restore_deferred(window, cls.name)
        window.show_message(f"Task {cls.name!r} is ready: {cls.description}", "status-ok")
        window.logPanel.log(f"Loaded the task {cls.name!r} from {reference}")

    def _failed(self, reference: str, message: str, details: str) -> None:
        self.window.show_error(f"Could not load the task: {message}", details)
        if reference in self.window.window_settings.user_tasks():  # a remembered one: listed as broken
            self._list_broken(reference, message.removeprefix(f"{reference}: "))
