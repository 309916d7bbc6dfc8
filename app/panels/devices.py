"""Devices panel: every device core.devices reports and the precision modes it can run, then each added host's."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QGroupBox, QLabel, QListWidget, QListWidgetItem, QToolButton

from app.assets import icon, restyle
from app.panels.editors import box_layout, hbox
from app.panels.hosts import AddHostDialog, HostList
from core.text import size

NAME_CHARS = 36  # a device's name in its row, cut with "…" beyond: one line in the panel's narrowest width


def _memory(value: int | None) -> str:
    return size(value) if value else "memory unknown"


def describe_device(info) -> tuple[str, str]:
    """(two-line label, tooltip) for a core.devices.DeviceInfo."""
    threads = info.details.get("threads") if info.type == "cpu" else None
    facts = [_memory(info.memory_total), info.capability and f"sm {info.capability}", threads and f"{threads} threads"]
    name = info.name if len(info.name) <= NAME_CHARS else info.name[: NAME_CHARS - 1].rstrip() + "…"  # whole: tooltip
    label = f"{info.id}  ·  {name}\n{' · '.join(filter(None, facts))}  ·  {', '.join(info.precisions)}"
    lines = [
        f"<b>{info.name}</b> ({info.id})",
        f"Memory: {_memory(info.memory_total)}",
        info.memory_free and f"Free: {_memory(info.memory_free)}",
        info.capability and f"Compute capability: {info.capability}",
        f"Tensor cores: {'yes' if info.tensor_cores else 'no'}",
        f"Precision modes: {', '.join(info.precisions)}",
        *(f"<i>{mode}</i>: {reason}" for mode, reason in info.unsupported.items()),
        *(f"{key}: {value}" for key, value in info.details.items()),
    ]
    return label, "<br>".join(filter(None, lines))


def describe_host(entry) -> tuple[str, str]:
    """(one-line label, tooltip) for a host's heading row: what it is, that it is being asked, or why not."""
    if entry.info is not None and entry.state != "unreachable":
        info = entry.info
        return (
            f"{entry.dest}  ·  {info.hostname}  ·  amp-console {info.version}",
            (
                f"<b>{entry.dest}</b> over ssh<br>Runs root there: {info.runs_root}<br>"
                f"Command: {entry.command or 'amp-console'}"
            ),
        )
    if entry.state == "asking":
        return f"{entry.dest}  ·  asking for its devices…", f"<b>{entry.dest}</b>: ssh {entry.dest} …"
    return f"{entry.dest}  ·  unreachable", f"<b>{entry.dest}</b> unreachable<br>{entry.error}"


MAX_ROWS = 7  # the list grows with its rows up to this many, then scrolls


class DevicesPanel(QGroupBox):
    """This machine's devices then each host's; selecting one emits `deviceSelected(DeviceInfo)`."""

    deviceSelected = Signal(object)

    def __init__(self, parent=None):
        super().__init__("Devices", parent)
        self._devices: list = []  # this machine's
        self._rows: list[tuple[str | None, object]] = []  # per list row: (host dest or None, DeviceInfo or None)
        self._chosen: tuple[str | None, str] | None = None  # (host, device id) of the selected device
        self._remote: tuple[str, str] | None = None  # (host, device id) a remote run trains on, highlighted
        self.hosts = HostList(self)
        self.hosts.changed.connect(self._show_rows)
        self._provider: Callable[[], list] | None = None
        self.list = QListWidget(objectName="deviceList")
        self.list.setIconSize(QSize(22, 22))
        self.list.setAlternatingRowColors(False)
        self.list.setWordWrap(True)  # a host's one-line error wraps rather than scrolling sideways
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setMinimumHeight(50)
        self.list.currentRowChanged.connect(self._on_row_changed)
        self.refreshButton = QToolButton(objectName="refreshDevicesButton", icon=icon("refresh"), clicked=self.refresh)
        self.refreshButton.setToolTip("Detect devices again")
        self.summary = restyle(QLabel("Detecting devices…", objectName="deviceSummary"), role="hint")
        self.addHostButton = QToolButton(objectName="addHostButton", text="Add host…", clicked=self.ask_add_host)
        self.addHostButton.setToolTip("Train on another machine over ssh: list its devices here")
        self.removeHostButton = QToolButton(
            objectName="removeHostButton", text="Remove host", enabled=False, clicked=self.remove_selected_host
        )
        self.removeHostButton.setToolTip("Forget the selected host (its runs go on there)")
        self.hostProblem = restyle(QLabel(objectName="hostProblem", wordWrap=True), role="error")
        self.hostProblem.hide()
        buttons = hbox((self.summary, 1), self.addHostButton, self.removeHostButton, self.refreshButton)
        box_layout(self, buttons, self.list, self.hostProblem, margins=True)

    @property
    def devices(self) -> list:
        return list(self._devices)

    def set_provider(self, provider: Callable[[], list]) -> None:
        """Where `refresh` gets the device list from (core.devices.list_devices, or a fake in tests)."""
        self._provider = provider

    def refresh(self) -> None:
        """Detect devices again (and ask the hosts again); a failed detection keeps the list and says why."""
        self.hosts.ask_all()
        if self._provider is None:
            return
        try:
            devices = list(self._provider())
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.summary.setText(f"Could not detect devices: {reason}")
            self.summary.setToolTip(f"{type(exc).__name__}: {exc}")
            return
        self.summary.setToolTip("")
        self.set_devices(devices, keep=self.current_id())

    def set_devices(self, devices: list, keep: str | None = None) -> None:
        self._devices = list(devices)
        accelerators = sum(1 for d in self._devices if d.type != "cpu")
        self.summary.setText(f"{len(self._devices)} device(s), {accelerators} accelerator(s)")
        if self._chosen is not None and self._chosen[0] is not None and keep is None:
            self._show_rows()  # a host's device stays chosen
            return
        ids = [d.id for d in self._devices]
        if keep not in ids:
            keep = next((d.id for d in self._devices if d.type != "cpu"), ids[0] if ids else None)
        self._chosen = (None, keep) if keep is not None else None
        self._show_rows()
        if keep is not None:
            self.select(keep)

    def _show_rows(self) -> None:
        """This machine's devices, then each host's heading and devices; the chosen device stays selected."""
        rows: list[tuple[str | None, object]] = [(None, info) for info in self._devices]
        for entry in self.hosts.entries():
            rows.append((entry.dest, None))
            if entry.info is not None and entry.state != "unreachable":  # asked again: the last answer stays
                rows.extend((entry.dest, info) for info in entry.info.devices)
        self._rows = rows
        self.list.blockSignals(True)
        self.list.clear()
        heights = []
        for dest, info in rows:
            if info is None:
                entry = self.hosts.entry(dest)
                label, tooltip = describe_host(entry)
                item = QListWidgetItem(label)
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            else:
                label, tooltip = describe_device(info)
                item = QListWidgetItem(icon("cpu" if info.type == "cpu" else "gpu"), label)
            if self._remote and dest == self._remote[0] and (info is None or info.id == self._remote[1]):
                item.setText(f"{label}  ·  training here")  # the run is on this host, not this machine
                item.setBackground(self.palette().highlight().color().lighter(160))
                tooltip += "<br><b>A run is training here</b>"
            item.setToolTip(tooltip)
            item.setData(Qt.ItemDataRole.UserRole, info.id if info is not None else dest)
            self.list.addItem(item)
            heights.append(self.list.sizeHintForRow(self.list.count() - 1))
        row = self._row_of(*self._chosen) if self._chosen else -1
        if row >= 0:
            self.list.setCurrentRow(row)
        self.list.blockSignals(False)
        # As tall as its rows (up to MAX_ROWS), so one CPU doesn't leave a tall empty box.
        height = sum(heights[:MAX_ROWS]) if heights else 40
        self.list.setFixedHeight(height + 2 * self.list.frameWidth() + 4)
        self._update_host_buttons()
        problems = [entry.error for entry in self.hosts.entries() if entry.state == "unreachable"]
        self.hostProblem.setText("\n".join(problems))  # each the RemoteError's one line
        self.hostProblem.setVisible(bool(problems))
        if self._chosen and self._chosen[0] is not None and row < 0:  # the chosen host's device went away
            local = next((d.id for d in self._devices), None)
            if local is not None:
                self.select(local)

    def show_remote_run(self, dest: str | None, device_id: str = "") -> None:
        """Highlight host `dest`'s heading and its device `device_id` while a run trains there; None: none."""
        remote = (dest, device_id) if dest else None
        if remote != self._remote:
            self._remote = remote
            self._show_rows()

    def _row_of(self, dest: str | None, device_id: str | None) -> int:
        for row, (host, info) in enumerate(self._rows):
            if host == dest and info is not None and info.id == device_id:
                return row
        return -1

    def select(self, device_id: str, host: str | None = None) -> None:
        """Select a device of this machine, or of `host`."""
        row = self._row_of(host, device_id)
        if row < 0:
            return
        if self.list.currentRow() == row:
            self._on_row_changed(row)
        self.list.setCurrentRow(row)

    def current(self):
        """The selected device (this machine's or a host's)."""
        if self._chosen is None:
            return None
        row = self._row_of(*self._chosen)
        return self._rows[row][1] if row >= 0 else None

    def current_id(self) -> str | None:
        info = self.current()
        return info.id if info is not None and self._chosen[0] is None else None

    def current_host(self) -> str | None:
        """The host of the selected device (None: this machine)."""
        return self._chosen[0] if self._chosen is not None and self.current() is not None else None

    def host_devices(self, dest: str | None) -> list:
        """The devices of `dest` (None: this machine's)."""
        if dest is None:
            return list(self._devices)
        entry = self.hosts.entry(dest)
        return list(entry.info.devices) if entry is not None and entry.state == "ready" else []

    def _on_row_changed(self, row: int) -> None:
        self._update_host_buttons()
        if 0 <= row < len(self._rows):
            dest, info = self._rows[row]
            if info is not None:
                self._chosen = (dest, info.id)
                self.deviceSelected.emit(info)

    def _update_host_buttons(self) -> None:
        row = self.list.currentRow()
        self.removeHostButton.setEnabled(0 <= row < len(self._rows) and self._rows[row][0] is not None)

    def ask_add_host(self) -> AddHostDialog:
        """The Add host dialog (window-modal, not blocking); its host is added when accepted."""
        dialog = AddHostDialog(self.window())
        dialog.hostChosen.connect(self.add_host)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()
        return dialog

    def add_host(self, dest: str, command: str = "") -> None:
        try:
            self.hosts.add(dest, command)
        except ValueError as exc:  # the dialog checks first: this is for callers that don't
            self.hostProblem.setText(str(exc))
            self.hostProblem.show()

    def remove_selected_host(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self._rows) and self._rows[row][0] is not None:
            self.hosts.remove(self._rows[row][0])
