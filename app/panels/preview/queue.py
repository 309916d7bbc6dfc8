"""The preview's worker plumbing: PredictionQueue, one request at a time on a BackgroundJob, the newest of each
kind of request winning."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.run.jobs import BackgroundJob


class PredictionQueue(QObject):
    """Runs `fn()` requests one at a time on a BackgroundJob; results come back on the GUI thread. A request of a
    kind ('load', 'answer', 'explain'...) replaces that kind's waiting one, and only the newest of a kind has its result
    delivered: `finished(kind, result)` or `failed(kind, message, details)`. `submit(..., supersede=True)` (a load)
    drops every waiting request and every result still to come."""

    finished = Signal(str, object)
    failed = Signal(str, str, str)
    busyChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.job = BackgroundJob("previewThread", self)
        self.job.succeeded.connect(lambda result: self._deliver(self.finished, result))
        self.job.failed.connect(lambda message, _field, details: self._deliver(self.failed, message, details))
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

    def _deliver(self, signal, *result) -> None:
        """`signal(kind, *result)` for the request that ran, unless a newer one of its kind was asked since."""
        if self._current is not None and self._latest.get(self._current[0]) == self._current[1]:
            signal.emit(self._current[0], *result)

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
