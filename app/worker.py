"""Training off the GUI thread, in a child process (the default) or on a QThread in this process.

`RunController` owns the one run at a time and joins it before anything is destroyed.

- Separate process (`app.process_run.ProcessRun`): `python -m core.cli train --events --control-stdin`, whose
  JSON event lines become the same event objects. The trainer gets its own interpreter, so its Python never
  queues for the GIL behind the window's painting, a crash or an out-of-memory kill ends the run and not
  the window, and device memory goes back to the system when the run ends. Several processes use torchrun.
- In this process: a QObject worker moved to a QThread drives core's Trainer and re-emits each engine event
  as one `event` signal (queued to the GUI thread); pause, resume and stop go through core's Qt-free
  RunControl. Starts faster (torch is already imported) and trains on the window's device list, which is
  what tests inject. QThread.finished fires before the OS thread exits, so the thread is joined before it
  is deleted.

`JobRunner` runs short jobs (loading a checkpoint to resume, exporting one) on a QThread.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.threads import start_on_thread
from core.engine.control import RunControl


UI_SWITCH_INTERVAL_S = 0.002


def _describe_unexpected(exc: BaseException) -> tuple[str, str]:
    return f"{type(exc).__name__}: {exc}", traceback.format_exc()


class TrainingWorker(QObject):
    """Runs one Trainer in the thread it is moved to. Never touches widgets."""

    event = Signal(object)  # RunStarted | StepMetrics | EvalMetrics | CheckpointSaved | RunEnded
    setupFailed = Signal(str, str, str)  # message, field ('' if none), details
    done = Signal()

    def __init__(self, config, resume_from: str | None = None, devices: list | None = None):
        super().__init__()
        self._config = config
        self._resume_from = resume_from
        self._devices = devices
        self.control = RunControl()

    @Slot()
    def run(self) -> None:
        from core.errors import AmpConsoleError
        from core.engine.trainer import Trainer

        try:
            trainer = Trainer(self._config, sink=self.event.emit, control=self.control,
                              resume_from=self._resume_from, devices=self._devices)
            trainer.run()
        except AmpConsoleError as exc:  # bad input, raised before the run starts
            self.setupFailed.emit(str(exc), getattr(exc, "field", ""), "")
        except Exception as exc:  # the engine should have turned this into RunEnded(failed); be safe anyway
            message, details = _describe_unexpected(exc)
            self.setupFailed.emit(message, "", details)
        finally:
            self.done.emit()


class RunController(QObject):
    """One training run at a time, and a clean join when it ends or the window closes."""

    event = Signal(object)
    setupFailed = Signal(str, str, str)
    runningChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._run_thread: QThread | None = None
        self._worker: TrainingWorker | None = None
        self._process = None  # app.process_run.ProcessRun: a run in a separate process (or torchrun)
        self._spare = None  # a ProcessRun started ahead of time, waiting for the next run's settings
        self._closing = False  # shutdown() started: no new spare

    @property
    def running(self) -> bool:
        return self._run_thread is not None or self._process is not None

    @property
    def multiprocess(self) -> bool:
        """A DDP run (torchrun): its ranks can be stopped but not paused."""
        return self._process is not None and self._process.processes > 1

    @property
    def separate_process(self) -> bool:
        return self._process is not None

    @property
    def can_pause(self) -> bool:
        return self._worker is not None or (self._process is not None and self._process.can_pause)

    @property
    def paused(self) -> bool:
        if self._process is not None:
            return self._process.paused
        return self._worker is not None and self._worker.control.paused

    @property
    def stopping(self) -> bool:
        if self._process is not None:
            return self._process.stop_requested
        return self._worker is not None and self._worker.control.stop_requested

    def start(self, config, resume_from: str | None = None, devices: list | None = None,
              processes: int = 1, separate_process: bool = False) -> None:
        """`separate_process` or several processes: a child process (torchrun for several; rank 0's events).
        Otherwise the trainer on a QThread, with `devices` (the window's list) to resolve the device."""
        if self.running:
            raise RuntimeError("a run is already in progress")
        if processes > 1 or separate_process:
            self._start_processes(config, processes, resume_from)
            return
        worker = TrainingWorker(config, resume_from=resume_from, devices=devices)
        worker.event.connect(self.event)
        worker.setupFailed.connect(self.setupFailed)
        run_thread = start_on_thread(self, worker, "trainingThread")  # owned here; deleted after it is joined
        run_thread.finished.connect(self._on_finished)  # joins, then deletes the QThread itself
        self._worker, self._run_thread = worker, run_thread
        # The UI thread needs the GIL for every Qt call while it paints; with the default 5 ms switch interval
        # each such call can wait 5 ms behind the training thread's Python. A short interval costs the trainer
        # nothing while the UI idles (it waits outside the GIL) and keeps the window responsive while it draws.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, UI_SWITCH_INTERVAL_S))
        run_thread.start()
        self.runningChanged.emit(True)

    # ------------------------------------------------------------------ a process started ahead of time
    @property
    def spare(self):
        """The prestarted training process waiting for settings (None if there is none)."""
        return self._spare

    def prepare_spare(self) -> None:
        """Start a training process now, so the next separate-process run skips the engine's start-up."""
        if self._spare is not None or self._closing:
            return
        from app.process_run import ProcessRun

        spare = ProcessRun(self)
        spare.setObjectName("spareProcess")
        spare.finished.connect(self._on_spare_finished)
        self._spare = spare
        spare.prestart()

    def discard_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.finished.disconnect(self._on_spare_finished)
            spare.discard()
            spare.deleteLater()

    @Slot()
    def _on_spare_finished(self) -> None:
        """The spare exited before it was used (killed, or it could not start): the next run starts afresh."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.deleteLater()

    def _start_processes(self, config, processes: int, resume_from: str | None) -> None:
        from app.process_run import ProcessRun

        if processes == 1 and self._spare is not None and self._spare.running:
            run, self._spare = self._spare, None
            run.finished.disconnect(self._on_spare_finished)
            run.setObjectName("trainingProcess")
        else:
            run = ProcessRun(self)
        run.event.connect(self.event)
        run.failed.connect(self.setupFailed)
        run.finished.connect(self._on_process_finished)
        self._process = run
        run.start(config, processes, resume_from)
        if self._process is run:  # not already over (a program that failed to start ends it at once)
            self.runningChanged.emit(True)

    @Slot()
    def _on_process_finished(self) -> None:
        run, self._process = self._process, None
        if run is None:
            return
        try:
            run.event.disconnect(self.event)
        except (RuntimeError, TypeError):
            pass
        run.deleteLater()
        self.runningChanged.emit(False)

    def pause(self) -> None:
        if self._process is not None:
            self._process.pause()
        if self._worker is not None:
            self._worker.control.pause()

    def resume(self) -> None:
        if self._process is not None:
            self._process.resume()
        if self._worker is not None:
            self._worker.control.resume()

    def stop(self) -> None:
        """Ask the engine to stop after its current step; it writes a checkpoint and sends RunEnded."""
        if self._process is not None:
            self._process.stop()
        if self._worker is not None:
            self._worker.control.stop()

    def shutdown(self) -> None:
        """Stop the run and block until its thread or child process has exited (the window closes)."""
        self._closing = True
        self.discard_spare()
        if self._process is not None:
            self._process.shutdown()
        if self._run_thread is None:
            return
        self.stop()
        self._run_thread.wait()
        self._on_finished()

    @Slot()
    def _on_finished(self) -> None:
        if self._run_thread is None:
            return
        run_thread, worker = self._run_thread, self._worker
        self._run_thread = self._worker = None
        run_thread.wait()  # finished fires before the OS thread exits: join before it is deleted
        run_thread.deleteLater()
        sys.setswitchinterval(self._switch_interval)
        # A finished run must never reach the next run's listeners.
        for signal, slot in ((worker.event, self.event), (worker.setupFailed, self.setupFailed)):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        self.runningChanged.emit(False)


class _Job(QObject):
    succeeded = Signal(int, object)  # job id, result
    failed = Signal(int, str, str)  # job id, message, details
    done = Signal(int)

    def __init__(self, job_id: int, fn: Callable[[], object]):
        super().__init__()
        self._id = job_id
        self._fn = fn

    @Slot()
    def run(self) -> None:
        from core.errors import AmpConsoleError

        try:
            result = self._fn()
        except AmpConsoleError as exc:
            self.failed.emit(self._id, str(exc), "")
        except Exception as exc:
            self.failed.emit(self._id, *_describe_unexpected(exc))
        else:
            self.succeeded.emit(self._id, result)
        finally:
            self.done.emit(self._id)


class JobRunner(QObject):
    """Short-lived background jobs (checkpoint loading, export): result or error back on the GUI thread.

    Callbacks always run on the GUI thread: the job's signals reach this object's slots (queued), which
    call them.
    """

    busyChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._jobs: dict[int, tuple[QThread, _Job, Callable, Callable]] = {}
        self._next_id = 0

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def submit(self, fn: Callable[[], object], on_success: Callable[[object], None],
               on_failure: Callable[[str, str], None]) -> None:
        self._next_id += 1
        job = _Job(self._next_id, fn)
        job.succeeded.connect(self._on_success)
        job.failed.connect(self._on_failure)
        job.done.connect(self._reap)
        job_thread = start_on_thread(self, job, "jobThread")
        self._jobs[self._next_id] = (job_thread, job, on_success, on_failure)
        job_thread.start()
        self.busyChanged.emit(True)

    @Slot(int, object)
    def _on_success(self, job_id: int, result: object) -> None:
        if job_id in self._jobs:
            self._jobs[job_id][2](result)

    @Slot(int, str, str)
    def _on_failure(self, job_id: int, message: str, details: str) -> None:
        if job_id in self._jobs:
            self._jobs[job_id][3](message, details)

    @Slot(int)
    def _reap(self, job_id: int) -> None:
        entry = self._jobs.pop(job_id, None)
        if entry is not None:
            entry[0].wait()  # the job has returned; join its thread before it is deleted
            entry[0].deleteLater()
        if not self._jobs:
            self.busyChanged.emit(False)

    def shutdown(self) -> None:
        """Wait for running jobs (they are short and must not be cut off halfway through a file write)."""
        for job_thread, *_rest in self._jobs.values():
            job_thread.wait()
            job_thread.deleteLater()
        self._jobs.clear()
