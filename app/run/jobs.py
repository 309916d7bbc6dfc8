"""One way to run `fn(progress, control)` on a QThread; progress, result and error come back as queued signals.

Traps handled once: `done` quits the thread by a direct connection (no deadlock with a GUI thread in `wait()`); the
QThread is joined before deletion; the worker is deleted on the GUI thread after the join (in its own exiting thread it
can hang on the GIL). A job never keeps its JobRunner alive: were a job's connection the last reference, the runner
would be dropped inside that job's destructor and delete the half-destroyed child again (a segfault).
"""

from __future__ import annotations

import contextlib
import gc
import traceback
import weakref
from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

from core.engine.control import RunControl
from core.errors import AmpConsoleError


def disconnect(signal, slot=None) -> None:
    """`signal` from `slot` (None: from everything), quietly when not connected or its sender is gone."""
    with contextlib.suppress(RuntimeError, TypeError):
        if slot is None:
            signal.disconnect()
        else:
            signal.disconnect(slot)


def _reap(runner: weakref.ref, job: BackgroundJob) -> None:
    owner = runner()
    if owner is not None:  # else the runner is gone, and its jobs with it
        owner._reap(job)


class _Worker(QObject):
    """Calls the function in the thread it was moved to. Never touches widgets."""

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str, str, str)  # message, field a ConfigError names ('' if none), details
    done = Signal()

    def __init__(self, fn: Callable, control: RunControl):
        super().__init__()
        self._fn = fn
        self._control = control

    @Slot()
    def run(self) -> None:
        try:
            result = self._fn(self.progress.emit, self._control)
        except AmpConsoleError as exc:  # bad input: the message names what is wrong
            self.failed.emit(str(exc), getattr(exc, "field", "") or "", getattr(exc, "details", ""))  # user code
        except Exception as exc:  # anything else reaches the user as a message, never kills the window
            self.failed.emit(f"{type(exc).__name__}: {exc}", "", traceback.format_exc())
        else:
            self.succeeded.emit(result)
        finally:
            self.done.emit()


class BackgroundJob(QObject):
    """Runs `fn(progress, control)` on a fresh QThread, one at a time; signals arrive on the GUI thread.
    `runningChanged(False)` comes after the join; `shutdown()` stops the function and blocks until it returned."""

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str, str, str)  # message, field, details
    runningChanged = Signal(bool)

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self.setObjectName(name)
        self._thread: QThread | None = None
        self._worker: _Worker | None = None
        self.control: RunControl | None = None  # the running job's stop/pause control

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        return self.control is not None and self.control.stop_requested

    def start(self, fn: Callable) -> None:
        if self.running:
            raise RuntimeError(f"{self.objectName()} is already running")
        self.control = RunControl()
        worker = _Worker(fn, self.control)
        thread = QThread(self)
        thread.setObjectName(self.objectName())
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        worker.done.connect(thread.quit, Qt.ConnectionType.DirectConnection)
        worker.progress.connect(self.progress)
        worker.succeeded.connect(self.succeeded)
        worker.failed.connect(self.failed)
        thread.finished.connect(self._on_finished)
        self._thread, self._worker = thread, worker
        thread.start()
        self.runningChanged.emit(True)

    def stop(self) -> None:
        if self.control is not None:
            self.control.stop()

    def shutdown(self) -> None:
        """Ask the function to stop and block until its thread has exited."""
        if self._thread is None:
            return
        self.stop()
        self._thread.wait()
        self._on_finished()

    @Slot()
    def _on_finished(self) -> None:
        if self._thread is None:
            return
        thread, worker = self._thread, self._worker
        self._thread = self._worker = None
        thread.wait()  # finished fires before the OS thread exits: join before it is deleted
        thread.deleteLater()
        for name in ("progress", "succeeded", "failed"):
            disconnect(getattr(worker, name), getattr(self, name))
        if shiboken6.isValid(worker):
            shiboken6.delete(worker)  # here, on the GUI thread, its thread joined (see the module doc)
        self.runningChanged.emit(False)


class JobRunner(QObject):
    """Several short jobs at once (loading a checkpoint, exporting one), callbacks always on the GUI thread."""

    busyChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._jobs: set[BackgroundJob] = set()

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def submit(
        self, fn: Callable[[], object], on_success: Callable[[object], None], on_failure: Callable[[str, str], None]
    ) -> None:
        job = BackgroundJob("jobThread", self)
        runner = weakref.ref(self)  # never self: see the module doc
        job.succeeded.connect(on_success)
        job.failed.connect(lambda message, _field, details: on_failure(message, details))
        job.runningChanged.connect(lambda running: running or _reap(runner, job))
        self._jobs.add(job)
        job.start(lambda _progress, _control: fn())
        self.busyChanged.emit(True)

    def _reap(self, job: BackgroundJob) -> None:
        self._jobs.discard(job)
        for signal in (job.succeeded, job.failed, job.runningChanged):
            disconnect(signal)  # the callbacks and what they hold go now, not inside the job's destructor
        job.deleteLater()
        if not self._jobs:
            self.busyChanged.emit(False)

    def shutdown(self) -> None:
        """Wait for running jobs (they are short and must not be cut off halfway through a file write)."""
        for job in list(self._jobs):
            job.shutdown()


class GuiThreadGarbageCollector(QObject):
    """Python's cyclic garbage collector run on the GUI thread only while a window is up (as pyqtgraph's does): a
    collection in a worker can finalize Qt objects whose destructors wait on the GUI thread, a hang. Automatic
    collection is off while any of these is active; a timer collects on the GUI thread."""

    _active = 0
    _was_enabled = True

    def __init__(self, parent: QObject, interval_ms: int = 1000):
        super().__init__(parent)
        if GuiThreadGarbageCollector._active == 0:
            GuiThreadGarbageCollector._was_enabled = gc.isenabled()
            gc.disable()
        GuiThreadGarbageCollector._active += 1
        self._stopped = False
        self._timer = QTimer(self, interval=interval_ms, timeout=self.collect)
        self._timer.start()

    @Slot()
    def collect(self) -> None:
        (t0, t1, t2), (c0, c1, c2) = gc.get_threshold(), gc.get_count()
        generation = 2 if c2 > t2 else 1 if c1 > t1 else 0 if c0 > t0 else None
        if generation is not None:
            gc.collect(generation)

    @staticmethod
    def freeze_loaded() -> None:
        """gc.freeze what exists now (torch, Qt): a full collection on the GUI thread then walks only what came since."""
        gc.freeze()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._timer.stop()
        GuiThreadGarbageCollector._active -= 1
        if GuiThreadGarbageCollector._active == 0 and GuiThreadGarbageCollector._was_enabled:
            gc.collect()  # here, on the GUI thread: the garbage made meanwhile must not wait for a worker's turn
            gc.enable()
