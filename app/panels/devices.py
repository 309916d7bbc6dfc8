"""Devices panel: every device core.devices reports, what it is and which precision modes it can run."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QToolButton, QVBoxLayout

from app.assets import icon
from core.text import size


def _memory(value: int | None) -> str:
    return size(value) if value else "memory unknown"


def describe_device(info) -> tuple[str, str]:
    """(two-line label, tooltip) for a core.devices.DeviceInfo."""
    facts = [_memory(info.memory_total)]
    if info.capability:
        facts.append(f"sm {info.capability}")
    if info.type == "cpu":
        threads = info.details.get("threads")
        if threads:
            facts.append(f"{threads} threads")
    label = f"{info.id}  ·  {info.name}\n{' · '.join(facts)}  ·  {', '.join(info.precisions)}"
    lines = [f"<b>{info.name}</b> ({info.id})", f"Memory: {_memory(info.memory_total)}"]
    if info.memory_free:
        lines.append(f"Free: {_memory(info.memory_free)}")
    if info.capability:
        lines.append(f"Compute capability: {info.capability}")
    lines.append(f"Tensor cores: {'yes' if info.tensor_cores else 'no'}")
    lines.append(f"Precision modes: {', '.join(info.precisions)}")
    for mode, reason in info.unsupported.items():
        lines.append(f"<i>{mode}</i>: {reason}")
    for key, value in info.details.items():
        lines.append(f"{key}: {value}")
    return label, "<br>".join(lines)


class DevicesPanel(QGroupBox):
    """List of devices; selecting one emits `deviceSelected(DeviceInfo)`."""

    deviceSelected = Signal(object)

    def __init__(self, parent=None):
        super().__init__("Devices", parent)
        self._devices: list = []
        self._provider: Callable[[], list] | None = None
        self.list = QListWidget(objectName="deviceList")
        self.list.setIconSize(QSize(22, 22))
        self.list.setAlternatingRowColors(False)
        self.list.setMinimumHeight(50)
        self.list.currentRowChanged.connect(self._on_row_changed)
        self.refreshButton = QToolButton(objectName="refreshDevicesButton")
        self.refreshButton.setIcon(icon("refresh"))
        self.refreshButton.setToolTip("Detect devices again")
        self.refreshButton.clicked.connect(self.refresh)
        self.summary = QLabel("Detecting devices…", objectName="deviceSummary")
        self.summary.setProperty("role", "hint")
        header = QHBoxLayout()
        header.addWidget(self.summary, 1)
        header.addWidget(self.refreshButton)
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.list)

    @property
    def devices(self) -> list:
        return list(self._devices)

    def set_provider(self, provider: Callable[[], list]) -> None:
        """Where `refresh` gets the device list from (core.devices.list_devices, or a fake in tests)."""
        self._provider = provider

    def refresh(self) -> None:
        """Detect devices again. A detection that fails keeps the list as it was and says why in one line."""
        if self._provider is None:
            return
        try:
            devices = list(self._provider())
        except Exception as exc:  # noqa: BLE001 - a driver or runtime error must not take the window down
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.summary.setText(f"Could not detect devices: {reason}")
            self.summary.setToolTip(f"{type(exc).__name__}: {exc}")
            return
        self.summary.setToolTip("")
        self.set_devices(devices, keep=self.current_id())

    def set_devices(self, devices: list, keep: str | None = None) -> None:
        self._devices = list(devices)
        self.list.blockSignals(True)
        self.list.clear()
        for info in self._devices:
            label, tooltip = describe_device(info)
            item = QListWidgetItem(icon("cpu" if info.type == "cpu" else "gpu"), label)
            item.setToolTip(tooltip)
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            self.list.addItem(item)
        self.list.blockSignals(False)
        # As tall as its rows (up to four), so one CPU doesn't leave a tall empty box.
        rows = max(1, min(len(self._devices), 4))
        row_height = self.list.sizeHintForRow(0) if self._devices else 40
        self.list.setFixedHeight(rows * row_height + 2 * self.list.frameWidth() + 4)
        accelerators = sum(1 for d in self._devices if d.type != "cpu")
        self.summary.setText(f"{len(self._devices)} device(s), {accelerators} accelerator(s)")
        ids = [d.id for d in self._devices]
        if keep not in ids:
            keep = next((d.id for d in self._devices if d.type != "cpu"), ids[0] if ids else None)
        if keep is not None:
            self.select(keep)

    def select(self, device_id: str) -> None:
        for row, info in enumerate(self._devices):
            if info.id == device_id:
                if self.list.currentRow() == row:
                    self.deviceSelected.emit(info)
                self.list.setCurrentRow(row)
                return

    def current(self):
        row = self.list.currentRow()
        return self._devices[row] if 0 <= row < len(self._devices) else None

    def current_id(self) -> str | None:
        info = self.current()
        return info.id if info is not None else None

    def _on_row_changed(self, row: int) -> None:
        if 0 <= row < len(self._devices):
            self.deviceSelected.emit(self._devices[row])
