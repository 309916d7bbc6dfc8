"""Other machines the window trains on over ssh (docs/remote.md): the hosts added, each asked for its devices on
a background job, and the Add host dialog.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QLayout, QLineEdit, QVBoxLayout

from app.assets import restyle
from app.run.jobs import JobRunner

SSH_OPTIONS: tuple[str, ...] = ()  # passed to ssh for every host (tests point this at their own ssh config)
ASK_SECONDS = 30.0  # a host that has not answered by then is shown as unreachable


@dataclass
class HostEntry:
    dest: str
    command: str = ""  # '' = the default (amp-console, or $AMP_CONSOLE_REMOTE_COMMAND)
    state: str = "asking"  # asking | ready | unreachable
    info: object = None  # core.remote.client.HostInfo once ready
    error: str = ""  # the RemoteError's line when unreachable

    def host(self):
        """The core.remote Host to reach it."""
        from core.remote.ssh import Host

        command = {"command": self.command} if self.command else {}  # else Host's default
        return Host(self.dest, ssh_options=SSH_OPTIONS, **command)

    def saved(self) -> dict:
        return {"dest": self.dest, "command": self.command}


def check_dest(dest: str) -> str:
    """'' when `dest` is something ssh can take, else the one line saying why not (core.remote's check)."""
    from core.remote.ssh import Host, RemoteError

    try:
        Host(dest, command="amp-console")
    except RemoteError as exc:
        return str(exc)
    return ""


class HostList(QObject):
    """The hosts, in the order added; `savedChanged(list)` with what to save when the user edits them."""

    changed = Signal()
    savedChanged = Signal(list)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._entries: dict[str, HostEntry] = {}
        self._asks: dict[str, int] = {}  # the latest question to each host: older answers are dropped
        self.jobs = JobRunner(self)

    def entries(self) -> list[HostEntry]:
        return list(self._entries.values())

    def entry(self, dest: str) -> HostEntry | None:
        return self._entries.get(dest)

    def host(self, dest: str):
        """The Host to reach `dest` with: a known host's command, else the default one."""
        entry = self._entries.get(dest) or HostEntry(dest)
        return entry.host()

    def add(self, dest: str, command: str = "") -> HostEntry:
        """Add (or update) a host and ask for its devices. ValueError (one line) for a destination ssh can't take."""
        dest, command = dest.strip(), command.strip()
        problem = check_dest(dest)
        if problem:
            raise ValueError(problem)
        self._entries[dest] = HostEntry(dest, command)
        self.savedChanged.emit(self.saved())
        self.ask(dest)
        return self._entries[dest]

    def remove(self, dest: str) -> None:
        if self._entries.pop(dest, None) is not None:
            self._asks.pop(dest, None)
            self.savedChanged.emit(self.saved())
            self.changed.emit()

    def load(self, saved: list[dict]) -> None:
        """The hosts saved at the last launch, each asked again (an unreachable one is shown as such)."""
        for item in saved:
            dest, command = str(item.get("dest", "")).strip(), str(item.get("command", "") or "").strip()
            if dest and not check_dest(dest) and dest not in self._entries:
                self._entries[dest] = HostEntry(dest, command)
                self.ask(dest)
        self.changed.emit()

    def saved(self) -> list[dict]:
        return [entry.saved() for entry in self._entries.values()]

    def ask_all(self) -> None:
        for dest in list(self._entries):
            self.ask(dest)

    def ask(self, dest: str) -> None:
        """Ask the host for its devices on a background job."""
        entry = self._entries.get(dest)
        if entry is None:
            return
        entry.state, entry.error = "asking", ""
        number = self._asks[dest] = self._asks.get(dest, 0) + 1
        host = entry.host()

        def ask():
            from core.remote.client import host_devices

            return host_devices(host, timeout=ASK_SECONDS)

        self.jobs.submit(
            ask,
            lambda info: self._answer(dest, number, info, ""),
            lambda message, _details: self._answer(dest, number, None, message),
        )
        self.changed.emit()

    def _answer(self, dest: str, number: int, info, error: str) -> None:
        entry = self._entries.get(dest)
        if entry is None or self._asks.get(dest) != number:  # removed, or asked again since
            return
        entry.info, entry.error = info, error
        entry.state = "ready" if info is not None else "unreachable"
        self.changed.emit()

    def shutdown(self) -> None:
        self.jobs.shutdown()


def dialog_layout(dialog: QDialog, title: str, ok_name: str, width: int, *parts) -> None:
    """`dialog` titled `title`: `parts` (widgets, layouts, a str: a hint) one under another, then OK and Cancel."""
    dialog.setWindowTitle(title)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
    buttons.button(QDialogButtonBox.StandardButton.Ok).setObjectName(ok_name)
    buttons.accepted.connect(dialog.accept)
    buttons.rejected.connect(dialog.reject)
    layout = QVBoxLayout(dialog)
    for part in (*parts, buttons):
        if isinstance(part, str):
            part = QLabel(part, wordWrap=True)
            part.setProperty("role", "hint")
        (layout.addLayout if isinstance(part, QLayout) else layout.addWidget)(part)
    dialog.resize(width, dialog.sizeHint().height())


class AddHostDialog(QDialog):
    """Add host…: an ssh destination and, optionally, the command that runs amp-console there."""

    hostChosen = Signal(str, str)

    def __init__(self, parent=None):
        super().__init__(parent, objectName="addHostDialog")
        self.destEdit = QLineEdit(objectName="hostDestEdit", placeholderText="user@host, or a Host of ~/.ssh/config")
        self.commandEdit = QLineEdit(
            objectName="hostCommandEdit", placeholderText="amp-console (e.g. ~/venv/bin/amp-console)"
        )
        self.problem = restyle(QLabel(objectName="hostProblem", wordWrap=True), role="error")
        self.problem.hide()
        form = QFormLayout()
        form.addRow("Destination:", self.destEdit)
        form.addRow("Remote command:", self.commandEdit)
        hint = (
            "`ssh HOST` must work from a terminal without a password prompt (a key in your agent or "
            "~/.ssh/config, the host's key accepted once). Nothing but these two fields is saved."
        )
        dialog_layout(self, "Add host", "addHostOkButton", 520, form, hint, self.problem)

    def accept(self) -> None:
        dest = self.destEdit.text().strip()
        problem = check_dest(dest) if dest else "give the host's ssh destination (user@host, or an ssh config alias)"
        if problem:
            self.problem.setText(problem)
            self.problem.show()
            return
        self.hostChosen.emit(dest, self.commandEdit.text().strip())
        super().accept()
