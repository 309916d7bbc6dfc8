"""Running a sweep (`run_sweep`): the trials not done yet, one after another in this process, or N at a time on N
device slots (core.lab.sweep.parallel), with the sweep's folder locked."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import RunConfig
from core.errors import ConfigError
from core.files import try_lock
from core.lab.sweep.folder import LOCK_FILE, write_sweep
from core.lab.sweep.record import read_sweep
from core.lab.sweep.table import sweep_table
from core.lab.sweep.trials import (
    SweepEnded,
    SweepEvent,
    SweepResult,
    SweepStarted,
    TrialEvent,
    _note_finished,
    begin_trial,
    end_trial,
    note_trial_folder,
)

if TYPE_CHECKING:
    from core.engine.control import RunControl

DONE = ("completed", "failed")  # states a resume skips


def _run_trial(config: RunConfig, sink, control, resume_from):
    """One trial through the trainer (a seam for tests)."""
    from core.engine.trainer import train

    return train(config, sink=sink, control=control, resume_from=resume_from)


class _SweepLock:
    def __init__(self, folder: Path):
        self.folder = folder
        self.fd: int | None = None

    def __enter__(self) -> _SweepLock:
        try:
            self.fd = try_lock(self.folder / LOCK_FILE)
        except OSError as exc:
            raise ConfigError("sweep", f"could not lock {self.folder / LOCK_FILE}: {exc.strerror or exc}") from None
        if self.fd is None:
            raise ConfigError(
                "sweep",
                f"{self.folder}: another process is running this sweep; wait for it "
                f"to end (or stop it) before resuming it",
            )
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def run_sweep(
    folder: str | os.PathLike,
    progress: Callable[[SweepEvent], None] | None = None,
    control: RunControl | None = None,
    retry_failed: bool = False,
    devices: list[str] | None = None,
) -> SweepResult:
    """Run the trials of the sweep in `folder` that are not done yet, one after another, or with `devices` (device
    slots, e.g. ["cuda:0", "cuda:1"]) one per slot at a time in training processes; `retry_failed` runs failed trials
    again from scratch. control.stop() stops the running trial(s) with a checkpoint and returns with status
    "stopped". ConfigError (before any trial) when the folder holds no sweep or another process runs it."""
    from core.engine.control import RunControl

    folder = Path(folder)
    control = control or RunControl()
    emit = progress or (lambda event: None)
    read_sweep(folder)  # a clear error before the lock file is created in a folder that is not a sweep
    with _SweepLock(folder):
        data = read_sweep(folder)  # we hold the lock: a trial still "running" was interrupted
        for trial in data["trials"]:
            if trial.get("status") == "running":
                trial["status"] = "interrupted"
            if trial.get("status") not in DONE:
                _note_finished(folder, trial)
        trials = data["trials"]
        total = len(trials)
        to_run = [t for t in trials if t.get("status") not in DONE or retry_failed and t.get("status") == "failed"]
        emit(
            SweepStarted(
                str(folder),
                total,
                [t["name"] for t in to_run],
                resumed=any(t.get("status") != "pending" for t in trials),
                devices=tuple(devices or ()),
            )
        )
        data["status"] = "running"
        data["devices"] = list(devices or [])  # how it runs now: a plain --resume runs it the same way
        write_sweep(folder, data)
        if devices:
            from core.lab.sweep.parallel import run_parallel

            run_parallel(folder, data, to_run, total, emit, control, list(devices))
        else:
            for trial in to_run:
                if control.stop_requested:
                    break
                _run_one(folder, data, trial, total, emit, control)
        stopped = control.stop_requested and any(t.get("status") not in DONE for t in trials)
        data["status"] = "stopped" if stopped else "completed"
        write_sweep(folder, data)
    counts = dict(Counter(trial["status"] for trial in trials))
    emit(SweepEnded(str(folder), data["status"], counts))
    return SweepResult(folder, data["status"], counts, sweep_table(folder))


def _run_one(folder: Path, data: dict, trial: dict, total: int, emit, control) -> None:
    config, resume_from = begin_trial(folder, data, trial, total, emit)

    def sink(event) -> None:
        from core.engine.events import RunStarted

        if isinstance(event, RunStarted):
            note_trial_folder(folder, data, trial, event)
        emit(TrialEvent(trial["index"], trial["name"], event))

    status, message = "failed", ""
    try:
        ended = _run_trial(config, sink, control, resume_from)
        status, message = ended.status, ended.message
    except Exception as exc:
        message = str(exc) or type(exc).__name__
    end_trial(folder, data, trial, total, emit, status, message)
