"""RunController: one training run at a time (a RunHandle of any kind, never asked which), its signals forwarded, a
clean join when it ends or the window closes, and a spare training process started ahead of time."""

from __future__ import annotations

import os

from PySide6.QtCore import QObject, Signal, Slot

from app.run.handle import RunHandle
from app.run.jobs import disconnect
from app.run.process_run import ProcessRun
from app.run.remote_run import RemoteRun
from app.run.thread_run import ThreadRun


class RunController(QObject):
    """`event`, `setupFailed` come from the current run only; `runningChanged(False)` once it has ended."""

    event = Signal(object)
    setupFailed = Signal(str, str, str)
    notice = Signal(str, str)
    runningChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._run: RunHandle | None = None
        self._spare: ProcessRun | None = None
        self._closing = False  # shutdown() started: no new spare

    @property
    def run(self) -> RunHandle | None:
        return self._run

    @property
    def running(self) -> bool:
        return self._run is not None

    @property
    def separate_process(self) -> bool:
        return isinstance(self._run, ProcessRun)

    @property
    def detached(self) -> bool:
        """The run goes on without the window (a host's run, an attached one): closing just lets go of it."""
        return self._run is not None and self._run.detached

    @property
    def stop_pid(self) -> int:
        """The process a SIGTERM stops gracefully: the training process (or torchrun's launcher), else this one."""
        if isinstance(self._run, ProcessRun):
            return int(self._run.process.processId())
        return os.getpid()

    @property
    def can_pause(self) -> bool:
        return self._run is not None and self._run.can_pause

    @property
    def paused(self) -> bool:
        return self._run is not None and self._run.paused

    @property
    def stopping(self) -> bool:
        return self._run is not None and self._run.stopping

    def start(
        self,
        config,
        resume_from: str | None = None,
        devices: list | None = None,
        processes: int = 1,
        separate_process: bool = False,
        host=None,
    ) -> None:
        """On `host`: a detached run there (RemoteRun); `separate_process` or several processes: a child process;
        else the trainer on a QThread, with `devices` to resolve the device."""
        if self.running:
            raise RuntimeError("a run is already in progress")
        if host is not None:
            run = RemoteRun(self, host=host, processes=processes)
        elif processes > 1 or separate_process:
            run = self._take_spare() if processes == 1 else None
            run = run or ProcessRun(self, processes=processes)
        else:
            run = ThreadRun(self, devices=devices)
        self._adopt(run, lambda: run.start(config, resume_from))

    def attach(self, target: str, host=None) -> None:
        """Follow the run `target` names (a run folder here, or HOST:PATH reached with `host`) from its start."""
        if self.running:
            raise RuntimeError("a run is already in progress")
        run = RemoteRun(self, host=host)
        self._adopt(run, lambda: run.attach(target))

    def _adopt(self, run: RunHandle, begin) -> None:
        for name in ("event", "setupFailed", "notice"):
            getattr(run, name).connect(getattr(self, name))
        run.finished.connect(self._on_run_finished)
        self._run = run
        begin()
        if self._run is run:  # not already over (a program that failed to start ends it at once)
            self.runningChanged.emit(True)

    def pause(self) -> None:
        if self._run is not None:
            self._run.pause()

    def resume(self) -> None:
        if self._run is not None:
            self._run.resume()

    def stop(self) -> None:
        """Ask the engine to stop after its current step; it writes a checkpoint and sends RunEnded."""
        if self._run is not None:
            self._run.stop()

    def prepare_to_close(self) -> None:
        """The window will close once the run has ended: no spare process from now on."""
        self._closing = True
        self.discard_spare()

    def shutdown(self) -> None:
        """Stop the run and block until its thread or child process has exited (the window closes)."""
        self._closing = True
        self.discard_spare()
        if self._run is not None:
            self._run.shutdown()  # emits finished: _on_run_finished forgets it

    @Slot()
    def _on_run_finished(self) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        for name in ("event", "setupFailed", "notice"):  # a finished run must never reach the next run's listeners
            disconnect(getattr(run, name), getattr(self, name))
        run.deleteLater()
        self.runningChanged.emit(False)

    @property
    def spare(self) -> ProcessRun | None:
        """The prestarted training process waiting for settings (None if there is none)."""
        return self._spare

    def prepare_spare(self) -> None:
        """Start a training process now, so the next separate-process run skips the engine's start-up."""
        if self._spare is not None or self._closing:
            return
        spare = ProcessRun(self)
        spare.setObjectName("spareProcess")
        spare.finished.connect(self._on_spare_finished)
        self._spare = spare
        spare.prestart()

    def _release_spare(self) -> ProcessRun | None:
        spare, self._spare = self._spare, None
        if spare is not None:
            disconnect(spare.finished, self._on_spare_finished)
        return spare

    def discard_spare(self) -> None:
        spare = self._release_spare()
        if spare is not None:
            spare.discard()
            spare.deleteLater()

    def _take_spare(self) -> ProcessRun | None:
        if self._spare is None or not self._spare.running:
            return None
        spare = self._release_spare()
        spare.setObjectName("trainingProcess")
        return spare

    @Slot()
    def _on_spare_finished(self) -> None:
        """The spare exited before it was used (killed, or it could not start): the next run starts afresh."""
        spare = self._release_spare()
        if spare is not None:
            spare.deleteLater()
