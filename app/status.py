"""Status bar: run state, device, autocast and parameter dtypes, scaler, step/total, ETA, progress."""

from __future__ import annotations

import time

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QSizePolicy, QStatusBar, QStyle, QStyleOption

from app.assets import restyle
from core.engine.events import RunEnded, RunPaused, RunResumed, RunStarted, StepMetrics
from core.text import elapsed


class ElidedLabel(QLabel):
    """A one-line label that never widens the window: cut with "…" to its width, the full text in its tooltip
    (`text()`). At least `min_chars` wide, preferring the text's width up to `max_chars`."""

    def __init__(self, text: str = "", parent=None, *, min_chars: int = 8, max_chars: int = 0, **properties):
        super().__init__(parent, **properties)
        self._full = ""
        self._min_chars = min_chars
        self._max_chars = max_chars
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:
        text = " ".join(str(text).split())  # one line: an engine message may hold newlines
        if text == self._full:
            return
        self._full = text
        super().setToolTip(text)
        self.updateGeometry()
        self.update()

    def text(self) -> str:
        return self._full

    def displayed_text(self) -> str:
        """What fits: the text as painted."""
        return self.fontMetrics().elidedText(
            self._full, Qt.TextElideMode.ElideRight, max(self.contentsRect().width(), 0)
        )

    def _char_width(self, chars: int) -> int:
        return self.fontMetrics().horizontalAdvance("x" * chars)

    def _size(self, width: int) -> QSize:
        margins = self.contentsMargins()
        return QSize(width + margins.left() + margins.right(), super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        width = self.fontMetrics().horizontalAdvance(self._full)
        if self._max_chars:
            width = min(width, self._char_width(self._max_chars))
        return self._size(max(width, self._char_width(self._min_chars)) + 2)

    def minimumSizeHint(self) -> QSize:
        return self._size(self._char_width(self._min_chars))

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_Widget, option, painter, self)
        self.style().drawItemText(
            painter,
            self.contentsRect(),
            int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft),
            self.palette(),
            self.isEnabled(),
            self.displayed_text(),
            self.foregroundRole(),
        )


class RunStatusBar(QStatusBar):
    """Shows the latest state of the run; `detailsRequested` when the user wants an error's details."""

    detailsRequested = Signal()

    def __init__(self, parent=None, clock=time.monotonic):
        super().__init__(parent)
        self._clock = clock  # seconds, for the ETA's rate and a pause that a stop ends
        self.setSizeGripEnabled(False)
        self.message = ElidedLabel("Starting…", objectName="statusMessage", min_chars=12)
        self.detailsButton = QPushButton("Details…", objectName="detailsButton", flat=True)
        self.detailsButton.hide()
        self.detailsButton.clicked.connect(self.detailsRequested)
        # The engine names devices and sources: their labels are cut to fit too, whatever the names' length.
        self.device = ElidedLabel(objectName="statusDevice", max_chars=40)
        self.dtypes = ElidedLabel(objectName="statusDtypes", max_chars=40)
        self.scaler = ElidedLabel(objectName="statusScaler")
        self.health = ElidedLabel(objectName="statusHealth", max_chars=60)  # fp16: skipped steps, inf/NaN source
        self.steps = ElidedLabel(objectName="statusSteps", max_chars=30)
        self.eta = ElidedLabel(objectName="statusEta", max_chars=20)
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
        self._first_step_time: float | None = None
        self._first_step = 0
        self._nonfinite_source: str | None = None
        self._paused_seconds = 0.0  # this run's pauses so far: not training time
        self._paused_since: float | None = None

    def show_message(self, text: str, role: str = "", details: bool = False) -> None:
        self.message.setText(text)  # cut to fit; the full text in its tooltip
        restyle(self.message, role=role)
        self.detailsButton.setVisible(details)

    host = ""  # the host the run trains on, named before its device ("" for this machine)

    def set_device(self, info, host: str | None = None) -> None:
        """Before a run: what Start will train on (on `host`, over ssh)."""
        self.host = host or ""
        if info is not None:
            self.device.setText(f"{self._on_host()}{info.id} · {info.name}")
            self.device.show()

    def _on_host(self) -> str:
        return f"{self.host} · " if self.host else ""

    def handle_event(self, event) -> None:
        if isinstance(event, RunStarted):
            self._total = max(event.total_steps, 1)
            self._first_step_time = None
            self._paused_seconds = 0.0
            self._paused_since = None
            self.device.setText(f"{self._on_host()}{event.device} · {event.device_name}")
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
            self._show_steps(event.step, self._eta(event.step, event.elapsed_seconds))
        elif isinstance(event, RunPaused):
            self._paused_since = self._clock()
            self.eta.setText("ETA – (paused)")
        elif isinstance(event, RunResumed):
            self._paused_since = None
            self._paused_seconds += event.paused_seconds
            if self._first_step_time is not None:
                self._first_step_time += event.paused_seconds  # the ETA's rate counts training time only
        elif isinstance(event, RunEnded):
            self.progress.setValue(min(event.step, self._total))
            self._show_steps(event.step, None)
            took = self.training_seconds(event)
            self.eta.setText(f"took {elapsed(took)}")
            self.eta.setToolTip(f"{elapsed(took)} of training; pauses are not counted")

    def training_seconds(self, ended: RunEnded) -> float:
        """The run's time without its pauses (a run stopped while paused: its last pause lasted until the end)."""
        paused = self._paused_seconds
        if self._paused_since is not None:
            paused += max(self._clock() - self._paused_since, 0.0)
            self._paused_since = None
        return max(ended.elapsed_seconds - paused, 0.0)

    def _show_health(self, skipped: int, source: str | None) -> None:
        if source:
            self._nonfinite_source = source
        if not skipped:
            return
        where = f" · inf/NaN first from {self._nonfinite_source}" if self._nonfinite_source else ""
        text = f"{skipped:,} skipped step{'s' if skipped != 1 else ''}{where}"
        if self.health.text() != text:
            self.health.setText(text)
            self.health.setToolTip(
                f"{text}\n\nGradScaler skipped these optimizer steps because their gradients "
                "overflowed (inf/NaN) and lowered the loss scale; a few early on are normal."
            )
            restyle(self.health, role="status-warn")
            self.health.show()

    def _eta(self, step: int, now: float) -> float | None:
        # From the first report on: setup and the warm-up interval don't count. `now`: the step's own time (a
        # replayed run's events come all at once: the run's pace, not the replay's)
        if self._first_step_time is None:
            self._first_step_time, self._first_step = now, step
            return None
        done = step - self._first_step
        if done <= 0:
            return None
        return (self._total - step) * (now - self._first_step_time) / done

    def _show_steps(self, step: int, eta: float | None) -> None:
        self.steps.setText(f"step {step:,}/{self._total:,}")
        self.eta.setText(f"ETA {elapsed(eta)}" if eta is not None else "ETA –")
