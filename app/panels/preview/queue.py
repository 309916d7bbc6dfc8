"""The preview's worker plumbing: PredictionQueue, one request at a time on a BackgroundJob, the newest of each
kind of request winning."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.run.jobs import BackgroundJob


class PredictionQueue(QObject):
    """Runs `fn()` requests one at a time on a BackgroundJob; results come back on the GUI thread.

    Each request has a kind ('load', 'answer', 'explain'...). A newer request of a kind replaces the one of
    that kind still waiting, and only the newest request of a kind has its result delivered: `finished(kind,
    result)` or `failed(kind, message, details)`. `submit(..., supersede=True)` (a load) drops every waiting
    request and every result still to come.
    """

    finished = Signal(str, object)
    failed = Signal(str, str, str)
    busyChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.job = BackgroundJob("previewThread", self)
        self.job.succeeded.connect(self._succeeded)
        self.job.failed.connect(self._failed)
        self.job.runningChanged.connect(self._running_changed)
        self._serial = 0
        self._latest: dict[str, int] = {}  # kind -> serial of its newest request
        self._waiting: dict[str, tuple[int, Callable]] = {}  # kind -> (serial, fn), in the order asked
        self._current: tuple[str, int] | None = None
        self.started = 0  # functions actually run (a test can see that typing did not run one per key)
        self._closed = False

    @property
    def idle(self) -> bool:
        return not self.job.running and not self._waiting

    def submit(self, kind: str, fn: Callable[[], object], supersede: bool = False) -> None:
        if self._closed:
            return
        self._serial += 1
        if supersede:
            self._waiting.clear()
            self._latest.clear()
        self._latest[kind] = self._serial
        self._waiting.pop(kind, None)  # the newer request goes to the back of the line
        self._waiting[kind] = (self._serial, fn)
        self._start_next()

    def cancel(self) -> None:
        """Forget everything waiting and every result still to come (the running function finishes)."""
        self._waiting.clear()
        self._latest.clear()

    def _start_next(self) -> None:
        if self.job.running or not self._waiting or self._closed:
            return
        kind = next(iter(self._waiting))
        serial, fn = self._waiting.pop(kind)
        self._current = (kind, serial)
        self.started += 1
        self.job.start(lambda _progress, _control: fn())
        self.busyChanged.emit(True)

    def _fresh(self) -> str | None:
        if self._current is None:
            return None
        kind, serial = self._current
        return kind if self._latest.get(kind) == serial else None

    def _succeeded(self, result) -> None:
        kind = self._fresh()
        if kind is not None:
            self.finished.emit(kind, result)

    def _failed(self, message: str, _field: str, details: str) -> None:
        kind = self._fresh()
        if kind is not None:
            self.failed.emit(kind, message, details)

    def _running_changed(self, running: bool) -> None:
        if running:
            return
        self._current = None
        self._start_next()
        if not self.job.running:
            self.busyChanged.emit(False)

    def shutdown(self) -> None:
        """Drop what waits and join the running function's thread."""
        self._closed = True
        self._waiting.clear()
        self.job.shutdown()
