"""The one interface a training run offers the window, whatever runs it (ThreadRun, ProcessRun, RemoteRun)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from core.engine.events import CheckpointSaved, RunEnded, RunStarted, StepMetrics


class RunHandle(QObject):
    """One training run; its signals arrive on the GUI thread. `event(obj)`: each core.engine.events event.
    `setupFailed(message, field, details)`: bad input before the start (`field`: the RunConfig field to mark, or
    ''); no RunEnded follows. `finished()`: over, its thread or process joined, emitted once. `notice(text, role)`:
    news that is no engine event; `role` a status role or 'log'.

    A kind implements start(config, resume_from), running, can_pause (DDP ranks can't pause together), pause(),
    resume(), stop() (after the current step, which writes a checkpoint, then RunEnded) and shutdown() (stop and
    join; a detached run is only let go of). `paused` and `stopping` read `_paused` and `_stop_requested`."""

    event = Signal(object)
    setupFailed = Signal(str, str, str)
    finished = Signal()
    notice = Signal(str, str)

    processes = 1  # >1: a DDP run under torchrun
    detached = False  # True: the run lives on its own (on a host, or another program's); shutdown() lets go of it
    _paused = _stop_requested = False
    _last_step = _last_epoch = 0  # what a run that ends without its RunEnded reached (see _failed_end)
    _last_checkpoint: str | None = None

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def stopping(self) -> bool:
        return self._stop_requested

    def _track(self, event) -> None:
        """Note the step, epoch and latest checkpoint a run read from elsewhere has reached."""
        match event:
            case RunStarted():
                self._last_step = event.start_step
            case StepMetrics():
                self._last_step, self._last_epoch = event.step, event.epoch
            case CheckpointSaved(kind="last"):  # the run's latest state, not a best-metric copy
                self._last_checkpoint = event.path

    def _failed_end(self, message: str, details: str = "") -> RunEnded:
        """The RunEnded a run that died could not send: failed where it had got to, its checkpoint kept."""
        return RunEnded(
            status="failed",
            message=message,
            step=self._last_step,
            epoch=self._last_epoch,
            final_loss=None,
            metrics={},
            checkpoint=self._last_checkpoint,
            samples_per_second=None,
            details=details,
        )
