"""Reading a sweep's sweep.json, a record file anyone may have edited: `read_sweep(folder)` applies core.files' record
rules and checks the fields the sweep acts on (every trial's folder one plain name inside the sweep), so a bad file
is one ConfigError line. `finished_run` tells a resume that a trial's run completed before sweep.json said so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeGuard

from core.errors import ConfigError
from core.files import UnreadableFile, is_inside, read_json_record, shown_path
from core.text import printable

SWEEP_FILE = "sweep.json"
KIND = "amp-console-sweep"
STATES = ("pending", "running", "interrupted", "completed", "stopped", "failed")
TARGETS = ("field", "option")


def _bad(path: Path, what: str) -> ConfigError:
    return ConfigError(
        "sweep", f"{shown_path(path)}: {what}; the file was edited or damaged: restore it or start a new sweep"
    )


def _is_int(value) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value, keep: int = 60) -> str:
    text = printable(value if isinstance(value, str) else repr(value))
    return text if len(text) <= keep else text[:keep] + "..."


def read_sweep(folder: Path) -> dict:
    """sweep.json of `folder`, its fields checked (see the module doc); ConfigError (field "sweep") else."""
    path = folder / SWEEP_FILE
    try:
        data = read_json_record(path)
    except FileNotFoundError:
        raise ConfigError("sweep", f"{shown_path(folder)}: not a sweep folder (no {SWEEP_FILE})") from None
    except UnreadableFile as exc:
        raise ConfigError("sweep", f"{shown_path(path)}: cannot be read: {exc}") from None
    if data.get("kind") != KIND or not isinstance(data.get("trials"), list):
        raise ConfigError("sweep", f"{shown_path(path)}: not an amp-console sweep file")
    if not isinstance(data.get("base_config"), dict):
        raise _bad(path, "base_config is not a settings object")
    axes = data.get("axes")
    if not isinstance(axes, list) or not all(
        isinstance(a, dict) and isinstance(a.get("key"), str) and a.get("target") in TARGETS for a in axes
    ):
        raise _bad(path, "axes is not a list of {key, target} objects")
    if "devices" in data and not (
        isinstance(data["devices"], list) and all(isinstance(d, str) for d in data["devices"])
    ):
        raise _bad(path, "devices is not a list of device names")
    keys = {a["key"] for a in axes}
    for number, trial in enumerate(data["trials"], start=1):
        _check_trial(path, folder, number, trial, keys)
    return data


def _check_trial(path: Path, folder: Path, number: int, trial, keys: set) -> None:
    if not isinstance(trial, dict):
        raise _bad(path, f"trial {number} is not an object")
    where = f"trial {number}"
    if not _is_int(trial.get("index")) or not isinstance(trial.get("name"), str):
        raise _bad(path, f"{where} has no whole-number index and name")
    if not isinstance(trial.get("params"), dict) or not set(trial["params"]) <= keys:
        raise _bad(path, f"{where}: params is not an object of the sweep's axes")
    if trial.get("status", "pending") not in STATES:
        raise _bad(path, f"{where}: status {_text(trial.get('status'))} is not one of {', '.join(STATES)}")
    if trial.get("attempts") is not None and not _is_int(trial["attempts"]):
        raise _bad(path, f"{where}: attempts is not a whole number")
    for name in ("message", "run_id", "started", "ended", "device"):
        if trial.get(name) is not None and not isinstance(trial[name], str):
            raise _bad(path, f"{where}: {name} is not text")
    folder_name = trial.get("folder")
    if not isinstance(folder_name, str) or not _plain_name(folder_name):
        raise _bad(path, f"{where}: folder {_text(folder_name)} is not a folder name inside the sweep folder")
    inside = folder / folder_name
    if not is_inside(folder, inside) or os.path.realpath(inside) == os.path.realpath(folder):
        raise _bad(path, f"{where}: folder {_text(folder_name)} leads outside the sweep folder (a link?)")


def _plain_name(name: str) -> bool:
    """One path part: not empty, not `.` or `..`, no separator, no drive, nothing a path would read as more."""
    if not name or name in (".", "..") or "\x00" in name:
        return False
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return not any(s in name for s in separators) and not os.path.isabs(name) and not Path(name).drive


def finished_run(record: dict | None, has_checkpoint: bool) -> bool:
    """Whether the run whose run.json is `record` had completed: run.json says so, or its last checkpoint was written at
    its last step and only the end was not recorded."""
    if not isinstance(record, dict):
        return False
    if record.get("status") == "completed":
        return True
    last = (record.get("checkpoints") or {}).get("last") if isinstance(record.get("checkpoints"), dict) else None
    step = last.get("step") if isinstance(last, dict) else None
    total = record.get("total_steps")
    return (
        has_checkpoint
        and record.get("status") in ("running", "interrupted")
        and _is_int(step)
        and _is_int(total)
        and 0 < total <= step
    )
