"""Status bar: run state, device, autocast and parameter dtypes, scaler, step/total, ETA, progress."""

from __future__ import annotations

import time

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QStatusBar

from core.engine.events import RunEnded, RunResumed, RunStarted, StepMetrics


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _set_role(label: QLabel, role: str) -> None:
    if label.property("role") != role:
        label.setProperty("role", role)
        label.style().unpolish(label)
        label.style().polish(label)


class RunStatusBar(QStatusBar):
    """Shows the latest state of the run; `detailsRequested` when the user wants an error's details."""

    detailsRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.message = QLabel("Starting…", objectName="statusMessage")
        self.detailsButton = QPushButton("Details…", objectName="detailsButton", flat=True)
        self.detailsButton.hide()
        self.detailsButton.clicked.connect(self.detailsRequested)
        self.device = QLabel(objectName="statusDevice")
        self.dtypes = QLabel(objectName="statusDtypes")
        self.scaler = QLabel(objectName="statusScaler")
        self.health = QLabel(objectName="statusHealth")  # fp16: skipped steps and where inf/NaN came from
        self.steps = QLabel(objectName="statusSteps")
        self.eta = QLabel(objectName="statusEta")
        self.progress = QProgressBar(objectName="progressBar")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("%p%")
        self.addWidget(self.message, 1)
        self.addWidget(self.detailsButton)
        for widget in (self.device, self.dtypes, self.scaler, self.health, self.steps, self.eta):
            self.addPermanentWidget(widget)
            widget.hide()
        self.addPermanentWidget(self.progress)
        self._total = 0
        self._start_step = 0
        self._first_step_time: float | None = None
        self._first_step = 0
        self._nonfinite_source: str | None = None

    def show_message(self, text: str, role: str = "", details: bool = False) -> None:
        self.message.setText(text)
        self.message.setToolTip(text)
        _set_role(self.message, role)
        self.detailsButton.setVisible(details)

    def set_device(self, info) -> None:
        """Before a run: what Start will train on."""
        if info is not None:
            self.device.setText(f"{info.id} · {info.name}")
            self.device.show()

    def handle_event(self, event) -> None:
        if isinstance(event, RunStarted):
            self._total = max(event.total_steps, 1)
            self._start_step = event.start_step
            self._first_step_time = None
            self.device.setText(f"{event.device} · {event.device_name}")
            self.dtypes.setText(f"autocast {event.autocast_dtype} · params {event.param_dtype}")
            self.scaler.setText(f"GradScaler {'on' if event.scaler else 'off'}")
            self.progress.setRange(0, self._total)
            self.progress.setValue(event.start_step)
            self._show_steps(event.start_step, None)
            self._nonfinite_source = None
            self.health.setText("")
            self.health.hide()
            for widget in (self.device, self.dtypes, self.scaler, self.steps, self.eta):
                widget.show()
        elif isinstance(event, StepMetrics):
            self._show_health(event.skipped_steps, event.nonfinite_source)
            self.progress.setValue(min(event.step, self._total))
            self._show_steps(event.step, self._eta(event.step))
        elif isinstance(event, RunResumed) and self._first_step_time is not None:
            self._first_step_time += event.paused_seconds  # the ETA's rate counts training time only
        elif isinstance(event, RunEnded):
            self.progress.setValue(min(event.step, self._total))
            self._show_steps(event.step, None)
            self.eta.setText(f"took {format_duration(event.elapsed_seconds)}")

    def _show_health(self, skipped: int, source: str | None) -> None:
        if source:
            self._nonfinite_source = source
        if not skipped:
            return
        where = f" · inf/NaN first from {self._nonfinite_source}" if self._nonfinite_source else ""
        text = f"{skipped:,} skipped step{'s' if skipped != 1 else ''}{where}"
        if self.health.text() != text:
            self.health.setText(text)
            self.health.setToolTip("GradScaler skipped these optimizer steps because their gradients overflowed "
                                   "(inf/NaN) and lowered the loss scale; a few early on are normal.")
            _set_role(self.health, "status-warn")
            self.health.show()

    def _eta(self, step: int) -> float | None:
        # Measured from the first report on, so setup and the first (slow, warming up) interval don't count.
        now = time.monotonic()
        if self._first_step_time is None:
            self._first_step_time, self._first_step = now, step
            return None
        done = step - self._first_step
        if done <= 0:
            return None
        return (self._total - step) * (now - self._first_step_time) / done

    def _show_steps(self, step: int, eta: float | None) -> None:
        self.steps.setText(f"step {step:,}/{self._total:,}")
        self.eta.setText(f"ETA {format_duration(eta)}" if eta is not None else "ETA –")
