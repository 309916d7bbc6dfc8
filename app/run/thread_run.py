"""A run on a QThread of the window's process: core's Trainer driven through a BackgroundJob. Starts faster than a child
process and trains on the window's device list (what tests inject), but shares the GIL with painting.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Slot

from app.run.handle import RunHandle
from app.run.jobs import BackgroundJob

# A short GIL switch interval keeps the window responsive while the training thread runs Python.
UI_SWITCH_INTERVAL_S = 0.002


class ThreadRun(RunHandle):
    """One Trainer on its own QThread. `devices`: the window's device list, to resolve the config's device."""

    def __init__(self, parent: QObject | None = None, devices: list | None = None):
        super().__init__(parent)
        self._devices = devices
        self._job = BackgroundJob("trainingThread", self)
        self._job.progress.connect(self.event)
        self._job.failed.connect(self.setupFailed)
        self._job.runningChanged.connect(self._on_running_changed)
        self._switch_interval: float | None = None

    def start(self, config, resume_from: str | None = None) -> None:
        devices = self._devices

        def run(progress, control):
            from core.engine.trainer import train

            train(config, sink=progress, control=control, resume_from=resume_from, devices=devices)

        # What a run imports on the way (torch's optimizers import torch._dynamo lazily): here, not on the worker;
        # usually done already by the window's preload, which this waits for.
        from core.lab.memory_estimate import preload

        preload()

        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, UI_SWITCH_INTERVAL_S))
        self._job.start(run)

    @property
    def running(self) -> bool:
        return self._job.running

    can_pause = running  # a thread run pauses whenever it runs

    @property
    def paused(self) -> bool:
        return self._job.control is not None and self._job.control.paused

    @property
    def stopping(self) -> bool:
        return self._job.running and self._job.stopping

    def pause(self) -> None:
        if self._job.running:
            self._job.control.pause()

    def resume(self) -> None:
        if self._job.running:
            self._job.control.resume()

    def stop(self) -> None:
        self._job.stop()

    def shutdown(self) -> None:
        self._job.shutdown()

    @Slot(bool)
    def _on_running_changed(self, running: bool) -> None:
        if running:
            return
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
        self.finished.emit()
