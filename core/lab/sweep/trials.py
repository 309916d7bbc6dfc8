"""What a sweep says as it runs (SweepStarted, TrialStarted, TrialEvent, TrialEnded, SweepEnded) and each trial's
bookkeeping in sweep.json, shared by the serial and the parallel runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config import RunConfig
from core.engine.run_record import load_record, now_iso
from core.lab.sweep.folder import write_sweep
from core.lab.sweep.plan import apply_params
from core.lab.sweep.record import SWEEP_FILE, finished_run


@dataclass(frozen=True)
class SweepStarted:
    folder: str
    total: int
    to_run: list  # trial names this call will run (resumed ones included), in order
    resumed: bool  # some trials had run before
    devices: tuple = ()  # the device slots of a parallel sweep (one trial at a time in this process: empty)


@dataclass(frozen=True)
class TrialStarted:
    index: int
    total: int
    name: str
    folder: str
    params: dict
    resume_from: str | None  # the checkpoint a stopped or interrupted trial continues from
    device: str | None = None  # the device it trains on (its slot's, in a parallel sweep)


@dataclass(frozen=True)
class TrialEvent:
    """One of the trainer's events (RunStarted, StepMetrics, EvalMetrics, ..., RunEnded) of trial `index`."""

    index: int
    name: str
    event: Any


@dataclass(frozen=True)
class TrialEnded:
    index: int
    total: int
    name: str
    status: str  # completed | stopped | failed
    message: str
    best: dict | None  # run.json's best: {"name", "value", "step"}
    wall_seconds: float | None


@dataclass(frozen=True)
class SweepEnded:
    folder: str
    status: str  # completed (every trial ran; some may have failed) | stopped
    counts: dict  # status -> number of trials


SweepEvent = SweepStarted | TrialStarted | TrialEvent | TrialEnded | SweepEnded


@dataclass
class SweepResult:
    folder: Path
    status: str  # completed | stopped
    counts: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)  # sweep_table(folder)


def _checkpoint_of(folder: Path) -> Path | None:
    from core.engine.run_folder import CHECKPOINT_FILE

    path = folder / CHECKPOINT_FILE
    return path if path.is_file() else None


def trial_config(data: dict, trial: dict, sweep_folder: Path) -> RunConfig:
    """The RunConfig a trial runs with: the sweep's base config, the trial's params, its folder."""
    targets = {axis["key"]: axis["target"] for axis in data["axes"]}
    base = RunConfig.from_dict(data["base_config"], source=f"{sweep_folder / SWEEP_FILE} (base_config)")
    return apply_params(base, trial["params"], targets).replace(out_dir=str(sweep_folder / trial["folder"]))


def _note_finished(folder: Path, trial: dict) -> None:
    """A trial whose run had completed before the sweep could record it counts as completed with its run's figures,
    instead of being resumed past its end."""
    trial_folder = folder / trial["folder"]
    record = load_record(trial_folder)
    if record is None or not finished_run(record, _checkpoint_of(trial_folder) is not None):
        return
    said = record.get("status") == "completed"
    trial.update(
        status="completed",
        run_id=record.get("id") or trial.get("run_id"),
        ended=record.get("end_time") if said and isinstance(record.get("end_time"), str) else now_iso(),
        message="" if said else "its run reached its last step and saved its checkpoint; the end was not recorded",
    )


def begin_trial(folder: Path, data: dict, trial: dict, total: int, emit, device: str | None = None):
    """Mark `trial` running in sweep.json and announce it: (its RunConfig, the checkpoint it resumes from or None).
    `device`: the slot's device (parallel trials), else the sweep's own setting."""
    trial_folder = folder / trial["folder"]
    resume_from = _checkpoint_of(trial_folder) if trial.get("status") in ("stopped", "interrupted") else None
    config = trial_config(data, trial, folder)
    if device is not None:
        config = config.replace(device=device)
    trial.update(
        status="running",
        message="",
        started=trial.get("started") or now_iso(),
        ended=None,
        attempts=int(trial.get("attempts") or 0) + 1,
        device=device or config.device,
    )
    write_sweep(folder, data)
    emit(
        TrialStarted(
            trial["index"],
            total,
            trial["name"],
            str(trial_folder),
            dict(trial["params"]),
            str(resume_from) if resume_from else None,
            device or config.device,
        )
    )
    return config, resume_from


def note_trial_folder(folder: Path, data: dict, trial: dict, event) -> None:
    """The trainer chose a free sibling of the trial's folder (RunStarted's out_dir): sweep.json follows it."""
    used = Path(str(event.config.get("out_dir") or folder / trial["folder"]))
    if used.parent == folder and used.name != trial["folder"]:
        trial["folder"] = used.name
        write_sweep(folder, data)


def end_trial(folder: Path, data: dict, trial: dict, total: int, emit, status: str, message: str) -> None:
    """Record how `trial` ended (completed | stopped | failed, anything else is failed) and announce it."""
    record = load_record(folder / trial["folder"]) or {}
    trial.update(
        status=status if status in ("completed", "stopped", "failed") else "failed",
        message=message,
        ended=now_iso(),
        run_id=record.get("id") or trial.get("run_id"),
    )
    write_sweep(folder, data)
    emit(
        TrialEnded(
            trial["index"],
            total,
            trial["name"],
            trial["status"],
            message,
            record.get("best"),
            record.get("wall_seconds"),
        )
    )
