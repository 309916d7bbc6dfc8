"""One stoppable background computation at a time (precision sweep, dtype inspection) on its own QThread.

The function is plain Python that takes `progress(obj)` and a core RunControl (check `stop_requested`), so it
knows nothing of Qt, like the trainer. Results, errors and progress come back as queued signals on the GUI
thread. `shutdown()` asks the function to stop and joins the thread: no QThread outlives its owner.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.threads import start_on_thread

from app.worker import _describe_unexpected


class _Computation(QObject):
    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str, str)  # message, details
    done = Signal()

    def __init__(self, fn: Callable, control):
        super().__init__()
        self._fn = fn
        self._control = control

    @Slot()
    def run(self) -> None:
        from core.errors import AmpConsoleError

        try:
            result = self._fn(self.progress.emit, self._control)
        except AmpConsoleError as exc:
            self.failed.emit(str(exc), "")
        except Exception as exc:
            self.failed.emit(*_describe_unexpected(exc))
        else:
            self.succeeded.emit(result)
        finally:
            self.done.emit()


class BackgroundTask(QObject):
    """Runs `fn(progress, control)` on a fresh QThread; signals arrive on the GUI thread."""

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str, str)
    runningChanged = Signal(bool)

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self._name = name
        self._thread: QThread | None = None
        self._job: _Computation | None = None
        self._control = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        return self._control is not None and self._control.stop_requested

    def start(self, fn: Callable) -> None:
        if self.running:
            raise RuntimeError(f"{self._name} is already running")
        from core.engine.control import RunControl

        self._control = RunControl()
        job = _Computation(fn, self._control)
        job.progress.connect(self.progress)
        job.succeeded.connect(self.succeeded)
        job.failed.connect(self.failed)
        job_thread = start_on_thread(self, job, self._name)
        job_thread.finished.connect(self._on_finished)
        self._thread, self._job = job_thread, job
        job_thread.start()
        self.runningChanged.emit(True)

    def stop(self) -> None:
        if self._control is not None:
            self._control.stop()

    def shutdown(self) -> None:
        """Ask the computation to stop and block until its thread has exited."""
        if self._thread is None:
            return
        self.stop()
        self._thread.wait()
        self._on_finished()

    @Slot()
    def _on_finished(self) -> None:
        if self._thread is None:
            return
        job_thread, job = self._thread, self._job
        self._thread = self._job = None
        job_thread.wait()  # finished fires before the OS thread exits
        job_thread.deleteLater()
        for signal, slot in ((job.progress, self.progress), (job.succeeded, self.succeeded),
                             (job.failed, self.failed)):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        self.runningChanged.emit(False)
