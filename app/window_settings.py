"""What the window remembers between launches (QSettings): the form, how runs execute, the layout. A saved value
that does not fit stays at its default with a note in the log.
"""

from __future__ import annotations

import dataclasses
import json

from PySide6.QtCore import QByteArray, QDataStream, QPoint, QRect, QSettings, Qt
from PySide6.QtGui import QGuiApplication

from core.config import RunConfig
from core.errors import ConfigError

CONFIG_KEY = "run/config"
PROCESSES_KEY = "run/processes"
SEPARATE_PROCESS_KEY = "run/separateProcess"
GEOMETRY_KEY = "window/geometry"
RUNS_ROOT_KEY = "history/runsRoot"  # the runs root chosen in the run history (empty: the default)
SPLITTER_KEYS = ("window/mainSplitter", "window/rightSplitter")
HOSTS_KEY = "remote/hosts"  # JSON: [{"dest", "command"}], the hosts of the devices panel; never a password or key
RECENT_RUNS_KEY = "remote/recentRuns"  # JSON: the runs last started on a host or attached, newest first
RECENT_RUNS = 10
USER_TASKS_KEY = "tasks/files"  # JSON: the references of the task files added with File → Add task…
DEFAULT_SIZE = (1400, 860)
GEOMETRY_MAGIC = 0x1D9D0CB  # what QWidget.saveGeometry() writes first
GEOMETRY_VERSION = 3  # the newest layout of that record Qt 6 reads


def saved_geometry(data: QByteArray) -> tuple[QRect, bool] | None:
    """(the normal geometry, maximised) stored in a QWidget.saveGeometry() record; None when it is not one."""
    stream = QDataStream(data)
    stream.setVersion(QDataStream.Version.Qt_4_0)
    if data.size() < 8 or stream.readUInt32() != GEOMETRY_MAGIC or stream.readUInt16() > GEOMETRY_VERSION:
        return None
    stream.readUInt16()  # minor version
    frame, normal = QRect(), QRect()
    stream >> frame
    stream >> normal
    stream.readInt32()  # screen number
    maximised = bool(stream.readUInt8())
    return None if stream.status() != QDataStream.Status.Ok or normal.isEmpty() else (normal, maximised)


def fit_geometry(window, data: QByteArray) -> bool:
    """A geometry saved on another screen (which restoreGeometry refuses), fitted to this one."""
    saved = saved_geometry(data)
    if saved is None:
        return False
    rect, maximised = saved
    screen = window.screen() or QGuiApplication.primaryScreen()
    area = screen.availableGeometry() if screen is not None else rect
    size = rect.size().boundedTo(area.size())
    window.resize(size)
    place = rect.topLeft()
    if not area.contains(QRect(place, size)):
        place = area.center() - QPoint(size.width() // 2, size.height() // 2)
    window.move(place)
    if maximised:
        window.setWindowState(window.windowState() | Qt.WindowState.WindowMaximized)
    return True


def _shown(value, limit: int = 60) -> str:
    """A saved value as one short line (repr escapes newlines; long garbage is cut)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def config_from_saved(data: dict, notes: list[str]):
    """A RunConfig from a saved dict: each saved value core accepts, else the default and a note."""
    from core.tasks import TASKS

    def ignore(key: str, value, reason: str, default) -> None:
        notes.append(f"ignored the saved {key} = {_shown(value)}: {reason}; using {_shown(default)}")

    default_task = RunConfig().task
    task = data.get("task", default_task)
    if not isinstance(task, str) or task not in TASKS:
        ignore("task", task, f"not a task of this version (tasks: {', '.join(TASKS)})", default_task)
        task = default_task
    base = RunConfig.for_task(task)
    config = base
    known = {f.name for f in dataclasses.fields(RunConfig)}
    for key, value in data.items():
        if key in ("task", "task_options"):
            continue
        if key not in known:
            notes.append(f"ignored the saved setting {_shown(key)}: not a setting of this version")
            continue
        try:
            config = config.replace(**{key: value})
        except ConfigError as exc:
            ignore(key, value, str(exc).split(": ", 1)[-1], getattr(base, key))

    options = data.get("task_options", {})
    if task != data.get("task", default_task):
        options = {}  # they were another task's
    elif not isinstance(options, dict):
        ignore("task_options", options, "not a table of options", {})
        options = {}
    kept = {}
    task_cls = TASKS[task]
    for name, value in options.items():
        problem = task_cls.option_errors({name: value}).get(f"task_options.{name}")
        defaults = {opt.name: opt.default for opt in task_cls.options}
        if problem is None:
            kept[name] = value
        elif name in defaults:
            ignore(f"task_options.{name}", value, problem, defaults[name])
        else:
            notes.append(f"ignored the saved task_options.{name}: {problem}")
    config = dataclasses.replace(config, task_options=kept)

    # Range and cross-field checks (core's messages): a saved value core rejects goes back to the default.
    for _ in range(len(known)):
        problems = {
            key: message
            for key, message in config.errors().items()
            if key in known and getattr(config, key) != getattr(base, key)
        }
        if not problems:
            break
        key, message = next(iter(problems.items()))
        ignore(key, getattr(config, key), message, getattr(base, key))
        config = dataclasses.replace(config, **{key: getattr(base, key)})
    return config


def _processes(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError("not a whole number of 1 or more")
    return int(text)


def _flag(text: str) -> bool:
    if text not in ("true", "1", "false", "0"):
        raise ValueError("not true or false")
    return text in ("true", "1")


class WindowSettings:
    """Saves and restores a MainWindow's form, execution choice, geometry and splitters in `store`."""

    def __init__(self, store: QSettings):
        self.store = store
        self.deferred: dict | None = None  # the saved form of a task file not loaded yet (see restore_run_setup)
        self._form_then: dict | None = None  # the form shown meanwhile: saving it again keeps the deferred one

    def _value(self, key: str, notes: list[str]):
        try:
            return self.store.value(key)
        except Exception as exc:
            notes.append(f"could not read the saved {key}: {exc}")
            return None

    def _bytes(self, key: str, notes: list[str]) -> QByteArray | None:
        value = self._value(key, notes)
        if value is None or isinstance(value, QByteArray):
            return value
        if isinstance(value, (bytes, bytearray)):
            return QByteArray(bytes(value))
        notes.append(f"ignored the saved {key}: not window layout data ({_shown(value, 40)})")
        return None

    def _parsed(self, key: str, default, parse, notes: list[str]):
        """The saved `key` as `parse(text)` gives it; `default` when nothing is saved or parse raises ValueError."""
        value = self._value(key, notes)
        if value is None:
            return default
        try:
            return parse(str(value).strip().lower())
        except ValueError as exc:
            notes.append(f"ignored the saved {key} = {_shown(value)}: {exc}; using {str(default).lower()}")
            return default

    def _saved_config_dict(self, notes: list[str]) -> dict | None:
        saved = self._value(CONFIG_KEY, notes)
        if saved is None or saved == "":
            return None
        if isinstance(saved, (bytearray, QByteArray)):
            saved = bytes(saved)
        try:
            data = json.loads(saved)
        except (TypeError, ValueError) as exc:  # not text, not UTF-8, not JSON
            notes.append(f"ignored the saved run settings: not JSON text ({exc}); using the defaults")
            return None
        if not isinstance(data, dict):
            notes.append(
                f"ignored the saved run settings: not a table of settings ({_shown(data, 40)}); using the defaults"
            )
            return None
        return data

    @staticmethod
    def _log(window, notes: list[str]) -> None:
        for note in notes:
            window.logPanel.log(f"Settings: {note}", "warning")

    def restore_run_setup(self, window) -> None:
        """The last form (each saved value that still validates) and the processes / isolation choice."""
        notes: list[str] = []
        try:
            from core.tasks import TASKS, task_source

            data = self._saved_config_dict(notes)
            task = (data or {}).get("task")
            if isinstance(task, str) and task not in TASKS and task_source(task):  # a task file not loaded yet
                # Its code runs only when the user picks it: the saved form comes back then (restore_deferred).
                self.deferred, data = data, None
                window.logPanel.log(
                    f"The last settings were for the task {self.deferred['task']!r} (a task "
                    "file): pick it in the task list to load it and get them back."
                )
            if data is not None:
                window.apply_config(config_from_saved(data, notes))
        except Exception as exc:
            notes.append(f"ignored the saved run settings ({type(exc).__name__}: {exc}); using the defaults")
        window.setupPanel.set_execution(
            self._parsed(PROCESSES_KEY, 1, _processes, notes), self._parsed(SEPARATE_PROCESS_KEY, True, _flag, notes)
        )
        if self.deferred is not None:
            self._form_then = self._config_to_save(window)
        self._log(window, notes)

    def restore_deferred(self, window, task: str) -> None:
        """The form saved with task file `task`, kept aside at start-up, now that the task is loaded."""
        if self.deferred is None or self.deferred.get("task") != task:
            return
        data, self.deferred, notes = self.deferred, None, []
        try:
            window.apply_config(config_from_saved(data, notes))
        except Exception as exc:
            notes.append(f"ignored the saved run settings ({type(exc).__name__}: {exc})")
        self._log(window, notes)

    def restore_geometry(self, window) -> None:
        """Size, position and splitters; a geometry from another screen is fitted, a state Qt cannot read ignored."""
        notes: list[str] = []
        geometry = self._bytes(GEOMETRY_KEY, notes)
        restored = False
        if geometry is not None:
            restored = bool(window.restoreGeometry(geometry)) or fit_geometry(window, geometry)
            if not restored:
                notes.append(f"ignored the saved {GEOMETRY_KEY}: not a window geometry this version can read")
        if not restored:
            window.resize(*DEFAULT_SIZE)
        for key, splitter in zip(SPLITTER_KEYS, (window.mainSplitter, window.rightSplitter)):
            state = self._bytes(key, notes)
            if state is None:
                continue
            sizes = splitter.sizes()
            if not splitter.restoreState(state):
                splitter.setSizes(sizes)
                notes.append(f"ignored the saved {key}: not a splitter layout this version can read")
        self._log(window, notes)

    def _json_list(self, key: str) -> list:
        """A saved JSON list; [] for nothing saved or anything else."""
        value = self._value(key, [])
        try:
            data = json.loads(value) if isinstance(value, str) and value else []
        except ValueError:
            return []
        return data if isinstance(data, list) else []

    def hosts(self) -> list[dict]:
        """The saved hosts: dest and command of each (text only; other entries are skipped)."""
        return [
            {"dest": item["dest"], "command": str(item.get("command") or "")}
            for item in self._json_list(HOSTS_KEY)
            if isinstance(item, dict)
            and isinstance(item.get("dest"), str)
            and item["dest"].strip()
            and isinstance(item.get("command", ""), (str, type(None)))
        ]

    def set_hosts(self, hosts: list[dict]) -> None:
        kept = [{"dest": str(h["dest"]), "command": str(h.get("command") or "")} for h in hosts]
        self.store.setValue(HOSTS_KEY, json.dumps(kept))
        self.store.sync()

    def recent_runs(self) -> list[str]:
        """HOST:FOLDER (or a folder) of the runs last started on a host or attached, newest first."""
        return [item for item in self._json_list(RECENT_RUNS_KEY) if isinstance(item, str) and item.strip()]

    def add_recent_run(self, target: str) -> None:
        runs = [target, *(item for item in self.recent_runs() if item != target)][:RECENT_RUNS]
        self.store.setValue(RECENT_RUNS_KEY, json.dumps(runs))
        self.store.sync()

    def user_tasks(self) -> list[str]:
        """The references of the task files added in the window (text only), in the order they were added."""
        return list(
            dict.fromkeys(item for item in self._json_list(USER_TASKS_KEY) if isinstance(item, str) and item.strip())
        )

    def set_user_tasks(self, references: list[str]) -> None:
        self.store.setValue(USER_TASKS_KEY, json.dumps(list(dict.fromkeys(references))))
        self.store.sync()

    def runs_root(self) -> str:
        """The runs root chosen in the window ('' for the default); a value that is not text is ignored."""
        value = self._value(RUNS_ROOT_KEY, [])
        return value.strip() if isinstance(value, str) else ""

    def set_runs_root(self, folder: str) -> None:
        if folder.strip():
            self.store.setValue(RUNS_ROOT_KEY, folder.strip())
        else:
            self.store.remove(RUNS_ROOT_KEY)
        self.store.sync()

    def _config_to_save(self, window) -> dict | None:
        """The form as a RunConfig dict. A value core rejects is not saved: that setting's last saved value stays."""
        try:
            config = window.setupPanel.config()
        except ConfigError:
            return None  # a value of the wrong type (a fraction where a whole number goes): keep the last save
        data = config.to_dict()
        problems = config.errors()
        if not problems:
            return data
        previous = self._saved_config_dict([]) or {}
        if previous.get("task") != data["task"]:
            previous = {}
        for key in problems:
            head, _, option = key.partition(".")
            if option and head == "task_options":
                old = previous.get("task_options")
                if isinstance(old, dict) and option in old:
                    data["task_options"][option] = old[option]
                else:
                    data["task_options"].pop(option, None)
            elif key in data and key != "task":
                if key in previous:
                    data[key] = previous[key]
                else:
                    del data[key]
        return data

    def save(self, window) -> None:
        if window.engine_ready:
            try:
                data = self._config_to_save(window)
            except Exception:
                data = None
            if self.deferred is not None and data == self._form_then:
                data = None  # the form untouched since start-up: the saved task file's form stays saved
            elif self.deferred is not None:
                self.deferred = None  # the user moved on: picking that task later starts from its defaults
            if data is not None:
                self.store.setValue(CONFIG_KEY, json.dumps(data))
            self.store.setValue(PROCESSES_KEY, window.setupPanel.processes())
            self.store.setValue(SEPARATE_PROCESS_KEY, window.setupPanel.separateProcessCheck.isChecked())
        self.store.setValue(GEOMETRY_KEY, window.saveGeometry())
        for key, splitter in zip(SPLITTER_KEYS, (window.mainSplitter, window.rightSplitter)):
            self.store.setValue(key, splitter.saveState())
        self.store.sync()
