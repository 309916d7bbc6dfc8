"""A sweep's results: one row per trial (its params and state from sweep.json, its run's figures from
run.json), sorted by the monitored metric or any column, the best row, and how to train a trial longer."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from core.config import RunConfig, train_command
from core.engine.run_record import load_record, read_run
from core.errors import ConfigError
from core.lab.sweep.folder import load_sweep
from core.lab.sweep.trials import _checkpoint_of

COLUMNS = ("best", "samples_per_second", "peak_memory_bytes", "wall_seconds", "steps", "index", "status")
_RUN_FIGURES = ("samples_per_second", "peak_memory_bytes", "wall_seconds", "steps", "total_steps")  # from run.json
_DESCENDING = {"samples_per_second"}  # higher first; the others lower first (best follows the metric's mode)


def _row(data: dict, trial: dict, folder: Path) -> dict:
    """One result row: the trial's params and state from sweep.json, its run's figures from run.json."""
    run = read_run(folder / trial["folder"]) or {}
    best = run.get("best") if isinstance(run.get("best"), dict) else None
    checkpoint = _checkpoint_of(folder / trial["folder"])
    config = run.get("config") or {}
    return {
        "index": trial["index"],
        "trial": trial["name"],
        "params": dict(trial["params"]),
        "status": trial.get("status") or "pending",
        "message": trial.get("message") or run.get("message") or "",
        "run": f"{folder.name}/{trial['folder']}",
        "run_id": run.get("id") or trial.get("run_id"),
        "folder": str(folder / trial["folder"]),
        "metric": data.get("metric"),
        "best": best.get("value") if best else None,
        "best_step": best.get("step") if best else None,
        **{key: run.get(key) for key in _RUN_FIGURES},
        "device": run.get("device") or trial.get("device"),
        "start_time": run.get("start_time"),
        "end_time": run.get("end_time"),
        "max_steps": config.get("max_steps"),
        "epochs": config.get("epochs"),
        "checkpoint": str(checkpoint) if checkpoint else None,
    }


def _number_or_none(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else None


def sort_rows(rows: list[dict], sort: str | None = None, mode: str = "max") -> list[dict]:
    """Rows sorted by `sort` (a COLUMNS name or a parameter key; default best, in the metric's mode; samples/s higher
    first, the other figures lower first). Rows without a value go last, in trial order."""
    key = sort or "best"
    params = list(dict.fromkeys(k for r in rows for k in r["params"]))
    if key not in COLUMNS and key not in params:
        known = list(COLUMNS) + params
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError("--sort", f"no column {key!r}{hint}; choose one of {', '.join(known)}")
    descending = (mode == "max") if key == "best" else key in _DESCENDING

    def value(row):
        raw = row.get(key) if key in COLUMNS else row["params"].get(key)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            return None if raw is None or key in COLUMNS and key != "status" else str(raw)
        return raw if raw == raw else None  # NaN: no value

    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]
    if all(isinstance(value(r), (int, float)) for r in present):
        present.sort(key=lambda r: (-value(r) if descending else value(r), r["index"]))
    else:  # text (a choice like the optimizer, or the status)
        present.sort(key=lambda r: (str(value(r)), r["index"]), reverse=descending)
    return present + sorted(missing, key=lambda r: r["index"])


def sweep_table(folder: str | os.PathLike, sort: str | None = None) -> list[dict]:
    """The result table of a sweep: one row per trial (see _row), sorted (see sort_rows)."""
    folder = Path(folder)
    data = load_sweep(folder)
    rows = [_row(data, trial, folder) for trial in data["trials"]]
    return sort_rows(rows, sort, data.get("mode") or "max")


def best_row(rows: list[dict], mode: str = "max") -> dict | None:
    """The trial with the best value of the metric (None when no trial has one)."""
    scored = [r for r in rows if _number_or_none(r.get("best")) is not None]
    if not scored:
        return None
    pick = min if mode == "min" else max
    return pick(scored, key=lambda r: (_number_or_none(r["best"]), -r["index"] if mode == "max" else r["index"]))


def continue_settings(row: dict, factor: float = 2.0) -> tuple[str | None, dict]:
    """'Train this one longer': the trial's checkpoint to resume and the settings to change (max_steps, else epochs) to
    train `factor` times as long. (None, {}) without a checkpoint."""
    if not row.get("checkpoint"):
        return None, {}
    if row.get("max_steps"):
        return row["checkpoint"], {"max_steps": max(int(row["max_steps"] * factor), int(row["max_steps"]) + 1)}
    epochs = int(row.get("epochs") or 1)
    return row["checkpoint"], {"epochs": max(int(epochs * factor), epochs + 1)}


def continue_config(row: dict, factor: float = 2.0) -> tuple[RunConfig, str] | None:
    """'Train this one longer' for the window: the trial's settings from its run.json with max_steps (or epochs) raised
    `factor` times, in its own folder, and the checkpoint to resume from. None without a checkpoint."""
    checkpoint, changes = continue_settings(row, factor)
    record = load_record(row["folder"]) if checkpoint else None
    if not checkpoint or not record or not isinstance(record.get("config"), dict):
        return None
    config = RunConfig.from_dict(record["config"], source=f"{row['folder']}/run.json")
    return config.replace(**changes, out_dir=row["folder"]), checkpoint


def train_longer_command(row: dict, factor: float = 2.0) -> str | None:
    """`amp-console train --max-steps N --resume <trial>/checkpoint.pt`: continues in the trial's folder."""
    import shlex

    checkpoint, changes = continue_settings(row, factor)
    if checkpoint is None:
        return None
    return shlex.join(train_command(changes, "--resume", checkpoint, python=False))
