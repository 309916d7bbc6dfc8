"""One run's settings resolved once, the same way for the CLI, the window, a remote host and the sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import RunConfig
from core.engine.run_record import resolve_out_dir
from core.errors import ConfigError, DeviceError
from core.files import check_regular_file, shown_path
from core.tasks import option_values

if TYPE_CHECKING:
    from core.devices import DeviceInfo

# torch is imported only where a checkpoint is read or a device asked: `train --nproc`'s launcher stays without it.


@dataclass(frozen=True)
class PreparedRun:
    """A run ready to start: its validated settings with an output folder, the precision that runs (what
    `auto` resolves to; None when the folder was given and no device, or the device is not on this machine:
    the run resolves it as it starts), the checkpoint it resumes from, loaded once, and notes for its log."""

    config: RunConfig
    mode: str | None
    resume: str | None = None
    state: dict | None = None
    notes: list[str] = field(default_factory=list)


def prepare_run(
    *layers: dict,
    resume: str | None = None,
    runs_dir: str | None = None,
    device: DeviceInfo | None = None,
    state: dict | None = None,
) -> PreparedRun:
    """Task defaults < the checkpoint's settings (resuming) < each of `layers` in order (e.g. a config file,
    then flags). A resumed run keeps its task and task options (they decide the model's shape) and writes
    beside its checkpoint unless a layer names out_dir. A new run without out_dir gets a folder under the
    runs root named by the precision that runs on `device` (asked of this machine when not given). `state`:
    the checkpoint already loaded by the caller."""
    user: dict = {}
    for layer in layers:
        columns = {**user.get("columns", {}), **layer["columns"]} if isinstance(layer.get("columns"), dict) else None
        options = {**user.get("task_options", {}), **layer.get("task_options", {})}
        user |= layer
        if columns is not None:
            user["columns"] = columns
        if options:
            user["task_options"] = options
    notes: list[str] = []
    if resume:
        if state is None:
            from core.engine import checkpoints

            check_regular_file(resume, "resume", "checkpoint file")
            state = checkpoints.load_checkpoint(resume)
        values, notes = _resumed(user, state, resume)
    else:
        task = user.get("task", "tiny")
        values = RunConfig.for_task(task).to_dict() | user if isinstance(task, str) else user
    config = RunConfig.from_dict(values).validate()
    mode = _mode_that_runs(config, device)
    config = with_folder(config, runs_dir, device)
    if state is not None:
        from core.engine.run_state import check_resume_target

        check_resume_target(config, state, shown_path(resume or ""))
    return PreparedRun(config, mode, resume, state, notes)


def with_folder(config: RunConfig, runs_dir: str | None = None, device: DeviceInfo | None = None) -> RunConfig:
    """`config` with its output folder: its own, else a new one under the runs root named by the task and the
    precision that runs (bf16, not auto)."""
    return resolve_out_dir(config, runs_dir, precision=_mode_that_runs(config, device))


def _mode_that_runs(config: RunConfig, device: DeviceInfo | None) -> str | None:
    if config.precision != "auto":
        return config.precision
    if str(config.out_dir).strip() and device is None:  # no folder to name: the run resolves it on its device
        return None
    from core.devices import device_info
    from core.engine.precision import auto_mode

    try:
        return auto_mode(device or device_info(config.device))
    except DeviceError:  # not a device of this machine: the run itself reports it
        return None


def _resumed(user: dict, state: dict, resume: str) -> tuple[dict, list[str]]:
    """The checkpoint's saved settings with the user's over them, and a note naming what changed."""
    name = shown_path(resume)
    saved = RunConfig.from_dict(dict(state["config"]), source=f"{name} (its saved settings)").to_dict()
    if "task" in user and user["task"] != saved["task"]:
        raise ConfigError(
            "task",
            f"{name} is a checkpoint of task {saved['task']!r}, not {user['task']!r}: a resumed run keeps "
            f"its task (start a new run to train another)",
        )
    options = saved["task_options"]
    if "task_options" in user:
        options = {**options, **user["task_options"]}  # an `auto` keeps what the run trained with (Trainer)
        have = option_values(saved["task"], saved["task_options"])
        asked = {k: v for k, v in user["task_options"].items() if v != "auto" or have.get(k) == "auto"}
        wanted = option_values(saved["task"], {**saved["task_options"], **asked})
        if wanted != have:
            diff = ", ".join(f"{k}={have.get(k)!r}->{v!r}" for k, v in wanted.items() if have.get(k) != v)
            raise ConfigError(
                "task_options",
                f"{name}: a resumed run keeps the task options it was saved with (they decide the model's "
                f"shape); asked to change {diff}",
            )
    values = saved | {k: v for k, v in user.items() if k not in ("task", "task_options")} | {"task_options": options}
    if isinstance(user.get("columns"), dict):  # the user's column pairs add to the saved mapping
        values["columns"] = {**saved["columns"], **user["columns"]}
    values["out_dir"] = user.get("out_dir") or str(Path(resume).parent)  # never the folder saved in the file
    changed = [f"{k} {saved[k]!r} -> {values[k]!r}" for k in values if k != "out_dir" and values[k] != saved[k]]
    return values, [f"resuming {name} with changed settings: {', '.join(changed)}"] if changed else []
