"""The one interface a training run offers the window, whatever runs it; each kind answers `can_pause`, `paused`,
`stopping` and `processes` for itself.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from core.engine.events import CheckpointSaved, RunEnded, RunStarted, StepMetrics


class RunHandle(QObject):
    """One training run. Signals arrive on the GUI thread:

    - `event(obj)`: each core.engine.events event, the same objects whichever kind of run produced them; -
    `setupFailed(message, field, details)`: bad input before the run started (`field`: the RunConfig field to
      mark, or ''); no RunEnded follows;
    - `finished()`: the run is over and its thread or process joined, emitted exactly once; - `notice(text, role)`:
    what the user should know that is no engine event; `role` a status role or 'log'."""

    event = Signal(object)
    setupFailed = Signal(str, str, str)
    finished = Signal()
    notice = Signal(str, str)

    processes = 1  # >1: a DDP run under torchrun
    detached = False  # True: the run lives on its own (on a host, or another program's); shutdown() lets go of it
    _last_step = _last_epoch = 0  # what a run that ends without its RunEnded reached (see _failed_end)
    _last_checkpoint: str | None = None

    def start(self, config, resume_from: str | None = None) -> None:
        """Train `config` (a core RunConfig), continuing from the checkpoint `resume_from` if given."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        raise NotImplementedError

    @property
    def can_pause(self) -> bool:
        """Whether pause() can take effect (DDP ranks can't pause together: their all-reduce would time out)."""
        raise NotImplementedError

    @property
    def paused(self) -> bool:
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        """Stop was asked for and the run has not ended yet."""
        raise NotImplementedError

    def pause(self) -> None:
        """Pause between steps (paused time is not counted as training time)."""
        raise NotImplementedError

    def resume(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Ask the run to stop after its current step; it writes a checkpoint, then sends RunEnded."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stop and block until the run's thread or process has exited; a detached run is only let go of."""
        raise NotImplementedError

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
