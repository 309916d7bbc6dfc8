"""The one interface a training run offers the window, whatever runs it (a QThread or a child process).

`RunController` holds a `RunHandle` and never asks which kind it is: each kind answers `can_pause`,
`paused`, `stopping` and `processes` for itself.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class RunHandle(QObject):
    """One training run. Signals arrive on the GUI thread:

    - `event(obj)`: each core.engine.events event (RunStarted, StepMetrics, EvalMetrics, CheckpointSaved,
      RunEnded), the same objects whichever kind of run produced them;
    - `setupFailed(message, field, details)`: bad input found before the run started (`field`: the
      RunConfig field to mark, '' if none); no RunEnded follows;
    - `finished()`: the run is over and its thread or process is gone (joined), emitted exactly once;
    - `notice(text, role)`: what the user should know that is no engine event (a run on a host: its folder there,
      a lost connection, a control request's answer); `role` a status role ('status-warn', 'status-error') or
      'log' for the log only.
    """

    event = Signal(object)
    setupFailed = Signal(str, str, str)
    finished = Signal()
    notice = Signal(str, str)

    processes = 1  # >1: a DDP run under torchrun
    detached = False  # True: the run lives on its own (on a host, or another program's); shutdown() lets go of it

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
        """Stop and block until the run's thread or process has exited (the window is closing). A detached run
        is not stopped: the window stops following it and it goes on."""
        raise NotImplementedError
