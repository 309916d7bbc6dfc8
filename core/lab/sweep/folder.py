"""A sweep's folder: creating it with its sweep.json (every trial pending), rewriting sweep.json atomically, its
lock, and loading and finding sweeps (a "running" one that no live process holds reads as "interrupted")."""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.config import RunConfig
from core.engine.run_record import lower_is_better, new_run_folder, now_iso, primary_metric, runs_root
from core.errors import ConfigError
from core.files import atomic_write_bytes, lock_is_held
from core.lab.sweep.plan import Axis, Trial, trial_name
from core.lab.sweep.record import KIND, SWEEP_FILE, read_sweep

LOCK_FILE = ".sweep.lock"
SWEEP_VERSION = 1


def new_sweep_folder(root: str | os.PathLike | None, task: str) -> Path:
    """Create <runs root>/<date>-<time>-sweep-<task> (or a -2, -3 sibling) and return it."""
    base = new_run_folder(runs_root(root), "sweep", task)
    for number in range(1, 1000):
        folder = base if number == 1 else base.with_name(f"{base.name}-{number}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError("--runs-dir", f"could not create {folder}: {exc.strerror or exc}") from None
    raise ConfigError("--runs-dir", f"{base}: 1,000 sweep folders of this second exist")


def create_sweep(
    base: RunConfig,
    trials: list[Trial],
    axes: list[Axis],
    method: str = "grid",
    samples: int = 0,
    seed: int = 0,
    root: str | os.PathLike | None = None,
    folder: str | os.PathLike | None = None,
) -> Path:
    """Write a new sweep (every trial pending) into `folder`, or a new folder under the runs root."""
    folder = Path(folder) if folder is not None else new_sweep_folder(root, base.task)
    folder.mkdir(parents=True, exist_ok=True)
    metric = base.monitor or primary_metric(base.task) or "loss"
    width = max(2, len(str(len(trials))))
    names = [trial_name(t.index, t.params, width) for t in trials]
    data = {
        "version": SWEEP_VERSION,
        "kind": KIND,
        "name": folder.name,
        "created": now_iso(),
        "updated": now_iso(),
        "status": "pending",
        "task": base.task,
        "metric": metric,
        "mode": "min" if lower_is_better(metric, base.monitor_mode) else "max",
        "method": method,
        "axes": [axis.to_dict() for axis in axes],
        "samples": samples,
        "seed": seed,
        "base_config": base.replace(out_dir="").to_dict(),
        "trials": [
            {
                "index": t.index,
                "name": name,
                "folder": name,
                "params": t.params,
                "status": "pending",
                "message": "",
                "run_id": None,
                "started": None,
                "ended": None,
                "attempts": 0,
            }
            for t, name in zip(trials, names)
        ],
    }
    write_sweep(folder, data)
    return folder


def write_sweep(folder: str | os.PathLike, data: dict) -> None:
    data["updated"] = now_iso()
    payload = json.dumps(data, indent=2, default=str) + "\n"
    atomic_write_bytes(Path(folder) / SWEEP_FILE, payload.encode("utf-8"))


def sweep_in_use(folder: str | os.PathLike) -> bool:
    """Whether a live process is running this sweep (its lock cannot be taken)."""
    return lock_is_held(Path(folder) / LOCK_FILE)


def load_sweep(folder: str | os.PathLike) -> dict:
    """sweep.json, with "running" read as "interrupted" when no live process holds the sweep; "folder" added.
    ConfigError (field "sweep") when the folder holds no readable sweep."""
    folder = Path(folder)
    data = read_sweep(folder)
    live = sweep_in_use(folder)
    if not live:
        for trial in data["trials"]:
            if trial.get("status") == "running":
                trial["status"] = "interrupted"
        if data.get("status") == "running":
            data["status"] = "interrupted"
    data["folder"] = str(folder)
    return data
