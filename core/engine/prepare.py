"""One run's settings resolved once, the same way for the CLI, the window, a remote host and the sweep."""

from __future__ import annotations

import os
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
    """A run ready to start: its validated settings with an output folder, the precision that runs (None when the
    run resolves it as it starts), the checkpoint it resumes from, loaded once, and notes for its log."""

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
    processes: int | None = None,
) -> PreparedRun:
    """Task defaults < the checkpoint's settings (resuming) < each of `layers` in order (e.g. a config file, then
    flags). A resumed run keeps its task and task options and writes beside its checkpoint unless a layer names
    out_dir; a new run without one gets a folder under the runs root named by the precision that runs on
    `device`. `state`: the checkpoint already loaded. A resume is checked against the run it continues."""
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
    config = resolve_out_dir(config, runs_dir, precision=mode)
    if state is not None:
        from core.engine.run_state import check_resume_target

        name = shown_path(resume or "")
        check_resume_target(config, state, name)
        info = _device_here(config, "device" in user, device, name)
        processes = processes or int(os.environ.get("WORLD_SIZE", "1"))
        notes += resume_notes(state, name, config, info, _mode_that_runs(config, info) or "", processes)
    return PreparedRun(config, mode, resume, state, notes)


def _device_here(config: RunConfig, asked: bool, device: DeviceInfo | None, name: str) -> DeviceInfo:
    """The device the resumed run will take: refused with the reason when the checkpoint's is not here."""
    from core.devices import device_info

    try:
        return device or device_info(config.device)
    except DeviceError as exc:
        if asked:
            raise
        raise ConfigError(
            "device",
            f"{name} trained on {config.device}, which this machine does not have ({exc}): give --device to resume "
            f"here (the weights and optimizer state move to it)",
        ) from None


def resume_notes(state: dict, name: str, config: RunConfig, info: DeviceInfo, mode: str, processes: int) -> list[str]:
    """What differs between the run that saved checkpoint `state` and this one (on `info`, in `mode`, on
    `processes` processes, this version) and whether the resume stays exact; ConfigError for what cannot run."""
    from core.engine.checkpoints import library_versions

    if mode not in info.precisions:
        raise ConfigError(
            "precision",
            f"{name} resumes in {mode}, which {info.id} ({info.name}) cannot run: "
            f"{info.unsupported.get(mode, 'not supported')}; give --precision {' or '.join(info.precisions)} "
            f"(the weights and optimizer state resume in any mode)",
        )
    saved, notes = state["config"], []
    was = str(state.get("device") or saved.get("device") or "auto").split(":")[0]
    if was not in ("auto", info.type):
        notes.append(
            f"trained on {was}, resumes on {info.type}: the state moves over, but other kernels round differently"
        )
    saved_mode = (state.get("precision") or {}).get("mode") or ("fp16" if state["scaler"] else "")
    if saved_mode and saved_mode != mode:
        scaler = (
            ": its GradScaler state is not used" if state["scaler"] and mode != "fp16"
            else ": the GradScaler starts fresh (loss scale 65536)" if mode == "fp16" else ""
        )  # fmt: skip
        kept = (
            "cast to bfloat16" if mode == "bf16-pure" else "float32" if saved_mode != "bf16-pure" else "from bfloat16"
        )
        notes.append(
            f"resumed {_a(saved_mode)} checkpoint in {mode}{scaler}; the weights and optimizer state are kept "
            f"({kept}) but the steps compute in {mode}"
        )
    ranks = state.get("rng_per_rank")
    before = len(ranks) if isinstance(ranks, list) and ranks else 1
    if before != processes:
        old = int(saved.get("batch_size", 0)) * int(saved.get("grad_accum", 1)) * before
        new = config.batch_size * config.grad_accum * processes
        notes.append(
            f"resumed a checkpoint of {before} process{'es' if before > 1 else ''} on {processes}: "
            + (
                f"the random streams (dropout, sampling) of {_ranks(processes, before - 1)} are not used"
                if before > processes
                else f"fresh random streams (dropout, sampling) are seeded for {_ranks(before, processes - 1)} from "
                f"seed + rank"
            )
            + (
                f"; the global batch stays {new:,} rows a step, so the steps take the same rows: exact but for "
                f"the random streams"
                if old == new
                else f"; the global batch is {new:,} rows a step (was {old:,}; --batch-size is per process), so "
                f"the steps take other rows"
            )
        )
    versions, here = state.get("versions") or {}, library_versions()
    changed = [
        f"{k} {versions[k]} -> {here[k]}" for k in ("amp_console", "torch") if versions.get(k, here[k]) != here[k]
    ]
    if changed:
        notes.append(
            f"{name} was saved by {', '.join(changed)}: its state loads as saved, but a step may compute differently"
        )
    return [note if note.endswith("streams") else f"{note}: not an exact resume" for note in notes]


def _a(mode: str) -> str:
    return f"an {mode}" if mode.startswith("f") else f"a {mode}"  # 'an fp16', 'a bf16'


def _ranks(first: int, last: int) -> str:
    return f"rank {first}" if first == last else f"ranks {first} to {last}"


def with_folder(config: RunConfig, runs_dir: str | None = None, device: DeviceInfo | None = None) -> RunConfig:
    """`config` with its output folder: its own, else a new one named by the precision that runs (bf16, not auto)."""
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
    values["note"] = user.get("note", "")  # a start's own
    changed = [
        f"{k} {saved[k]!r} -> {values[k]!r}" for k in values if k not in ("out_dir", "note") and values[k] != saved[k]
    ]
    return values, [f"resuming {name} with changed settings: {', '.join(changed)}"] if changed else []
