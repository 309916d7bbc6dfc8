"""Small hyperparameter sweeps: a grid or a seeded random sample of settings, each trial a normal run.

A sweep is a folder under the runs root, `<date>-<time>-sweep-<task>/`, holding `sweep.json` (the plan and
each trial's state) and one subfolder per trial (`trial-01-lr=0.001-batch_size=64`), each an ordinary run
folder with its run.json, so `amp-console runs` and the window's history list the trials as
"<sweep>/<trial>" (core.engine.run_record.find_runs). Trials run one after another in this process (the
trainer's own `train`), or N at a time on N device slots, each in its own training process
(`run_sweep(..., devices=[...])`, core.lab.sweep_parallel); early stopping, best checkpoints and everything else
a run does apply per trial.

The API (plain functions, no Qt; torch is imported only when a trial runs):

- `plan_trials(base, grid=..., ranges=..., samples=..., seed=...)` -> [Trial]: every combination of a grid, or
  `samples` seeded random draws over ranges, each checked with RunConfig.validate() before anything runs
  (a bad value is a ConfigError whose field is "--grid KEY" or "--range KEY").
- `create_sweep(base, trials, root=...)` -> the new sweep folder, with sweep.json saying every trial is pending.
- `run_sweep(folder, progress=None, control=None, devices=None)` -> SweepResult: runs what is not done
  (completed and failed trials are skipped, a stopped or interrupted trial resumes from its checkpoint, pending
  ones run; `devices`: one trial per listed device at a time, each in a child process). A stop (control.stop(),
  which the CLI's signal handlers call) stops the running trial(s) with a checkpoint and leaves the rest pending.
  A trial that fails (setup included) is recorded as failed with its message; the sweep goes on.
  `progress(obj)` gets SweepStarted, TrialStarted, TrialEvent (each trainer event of the trial), TrialEnded and
  SweepEnded; a GUI runs it on a BackgroundJob.
- `sweep_table(folder, sort=None)` -> rows (dicts, see `_row`): one per trial, sorted by the best value of the
  monitored metric (respecting min/max), or by `sort` (a column or parameter name). `best_row(rows)`.
- `continue_settings(row, factor=2.0)` -> (checkpoint, changes): how to "train this one longer" (resume the
  trial's checkpoint.pt with `changes` applied, e.g. {"max_steps": 200}); `continue_config(row)` -> (RunConfig,
  checkpoint) ready for the trainer; `train_longer_command(row)` as text.
- `load_sweep(folder)`, `find_sweeps(root)`.

sweep.json (version 1) is rewritten atomically (core.files) when a trial starts and ends:
  {"version": 1, "kind": "amp-console-sweep", "name", "created", "updated", "status", "task", "metric",
   "mode" ("min" | "max"), "method" ("grid" | "random"), "devices" (the device slots it last ran on, [] for one
   trial at a time in-process), "axes": [{"key", "target" ("field" | "option"),
   "values": [...]} for a grid, or {"key", "target", "low", "high", "log", "integer"} / {"key", "target",
   "choices"} for random], "samples", "seed", "base_config" (RunConfig.to_dict(), out_dir empty),
   "trials": [{"index", "name", "folder" (relative to the sweep folder), "params" {key: value}, "status"
   ("pending" | "running" | "completed" | "stopped" | "failed"), "message", "run_id", "started", "ended",
   "attempts", "device" (where it last ran)}]}
`load_sweep` reads a "running" trial (or sweep) that no live process holds as "interrupted".
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import math
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.config import FIELD_SPECS, RunConfig
from core.engine.run_record import (
    load_record, lower_is_better, now_iso, primary_metric, read_run, runs_root,
)
from core.errors import ConfigError
from core.files import atomic_write_bytes, lock_is_held, try_lock
from core.lab.sweep_file import KIND, SWEEP_FILE, finished_run, read_sweep

if TYPE_CHECKING:
    from core.engine.control import RunControl

LOCK_FILE = ".sweep.lock"
SWEEP_VERSION = 1
MAX_TRIALS = 1000
NOT_SWEPT = ("task", "out_dir", "task_options")  # the task decides the options; out_dir is the trial's folder
DONE = ("completed", "failed")  # states a resume skips
OPTION_PREFIX = "option."


# ----------------------------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class Axis:
    """One swept setting: `key` as shown (a RunConfig field, a task option's name, or option.NAME), where it
    goes (`target`: "field" or "option"), and its grid values, or (random) a range or choices."""

    key: str
    target: str
    values: tuple = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple = ()

    @property
    def name(self) -> str:
        """The setting's own name (option.hidden -> hidden)."""
        return self.key.removeprefix(OPTION_PREFIX)

    def to_dict(self) -> dict:
        if self.values:
            return {"key": self.key, "target": self.target, "values": list(self.values)}
        if self.choices:
            return {"key": self.key, "target": self.target, "choices": list(self.choices)}
        return {"key": self.key, "target": self.target, "low": self.low, "high": self.high, "log": self.log,
                "integer": self.integer}


@dataclass(frozen=True)
class Trial:
    index: int  # 1-based
    params: dict
    config: RunConfig  # the base config with params applied (out_dir still empty)

    @property
    def name(self) -> str:
        return trial_name(self.index, self.params)


def _fields() -> dict[str, Any]:
    return {f.name: f.type for f in dataclasses.fields(RunConfig)}


def _field_kind(key: str) -> type:
    kind = _fields()[key]
    return {"int": int, "float": float, "str": str, "bool": bool}.get(kind if isinstance(kind, str) else kind.__name__,
                                                                       str)


def _task_options(task: str) -> dict:
    from core.tasks import get_task_info

    try:
        return {o.name: o for o in get_task_info(task).options}
    except ConfigError:
        return {}


def resolve_key(key: str, task: str, flag: str = "--grid") -> tuple[str, str]:
    """(key as stored, "field" | "option"): a RunConfig field, else a task option of `task` (or option.NAME
    for an option whose name is also a field). Unknown names: a ConfigError with a did-you-mean."""
    key = key.strip()
    options = _task_options(task)
    if key.startswith(OPTION_PREFIX):
        name = key[len(OPTION_PREFIX):]
        if name in options:
            return key, "option"
        return _unknown(key, name, task, options, flag)
    if key in _fields():
        if key in NOT_SWEPT:
            raise ConfigError(f"{flag} {key}", f"{key} cannot be swept"
                              + (" (a sweep trains one task; start another sweep for another task)"
                                 if key == "task" else
                                 "; sweep a task option by its name, e.g. hidden=16,32" if key == "task_options"
                                 else ": each trial gets its own folder in the sweep"))
        return key, "field"
    if key in options:
        return key, "option"
    return _unknown(key, key, task, options, flag)


def _unknown(key: str, name: str, task: str, options: dict, flag: str):
    known = [f for f in _fields() if f not in NOT_SWEPT] + list(options)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        raise ConfigError(f"{flag} {key}", f"{name!r} is neither a setting nor an option of task {task} "
                                           f"(did you mean {close[0]!r}?)")
    raise ConfigError(f"{flag} {key}", f"{name!r} is neither a setting nor an option of task {task}; "
                                       f"settings: {', '.join(f for f in FIELD_SPECS if f not in NOT_SWEPT)}; "
                                       f"{task} options: {', '.join(options) or 'none'}")


def _value_kind(key: str, target: str, task: str) -> type:
    if target == "field":
        return _field_kind(key)
    option = _task_options(task).get(key.removeprefix(OPTION_PREFIX))
    return type(option.default) if option is not None else str


def parse_value(text: str, kind: type, flag: str) -> Any:
    """A value typed as `kind` (int, float, bool, str) from the command line; ConfigError naming `flag`."""
    raw = text.strip()
    if not raw:
        raise ConfigError(flag, "an empty value in the list; give values separated by commas")
    try:
        if kind is bool:
            if raw.lower() not in ("true", "false"):
                raise ValueError
            return raw.lower() == "true"
        if kind is int:
            number = float(raw)
            if not number.is_integer():
                raise ValueError
            return int(number)
        if kind is float:
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError
            return number
    except ValueError:
        what = {bool: "true or false", int: "a whole number", float: "a finite number"}[kind]
        raise ConfigError(flag, f"{raw!r} is not {what}") from None
    return raw


def grid_axis(spec: str, task: str) -> Axis:
    """'lr=1e-3,3e-3' -> an Axis with typed values (duplicates dropped, order kept)."""
    key, values = _split_spec(spec, "--grid", "KEY=V1,V2,...")
    key, target = resolve_key(key, task, "--grid")
    kind = _value_kind(key, target, task)
    typed = []
    for raw in values.split(","):
        value = parse_value(raw, kind, f"--grid {key}")
        if value not in typed:
            typed.append(value)
    return Axis(key, target, values=tuple(typed))


def range_axis(spec: str, task: str) -> Axis:
    """'lr=1e-4:1e-2:log', 'batch_size=32:256' (int fields are drawn as whole numbers), 'hidden=8:64:log:int',
    or choices 'optimizer=adam,adamw'."""
    key, body = _split_spec(spec, "--range", "KEY=LOW:HIGH[:log][:int] or KEY=V1,V2,...")
    key, target = resolve_key(key, task, "--range")
    flag = f"--range {key}"
    kind = _value_kind(key, target, task)
    if ":" not in body:
        choices = tuple(dict.fromkeys(parse_value(raw, kind, flag) for raw in body.split(",")))
        return Axis(key, target, choices=choices)
    parts = body.split(":")
    flags = {p.strip().lower() for p in parts[2:]}
    if flags - {"log", "int"}:
        raise ConfigError(flag, f"unknown range flag {sorted(flags - {'log', 'int'})[0]!r}: use LOW:HIGH, "
                                f"LOW:HIGH:log, LOW:HIGH:int or LOW:HIGH:log:int")
    if kind not in (int, float):
        raise ConfigError(flag, f"{key} is not a number: give its choices as {key}=V1,V2,...")
    low, high = (parse_value(p, float, flag) for p in parts[:2])
    if not low < high:
        raise ConfigError(flag, f"the range {parts[0]}:{parts[1]} is empty: LOW must be below HIGH")
    log = "log" in flags
    if log and low <= 0:
        raise ConfigError(flag, f"a log range needs LOW above 0, got {parts[0]}")
    return Axis(key, target, low=low, high=high, log=log, integer=kind is int or "int" in flags)


def _split_spec(spec: str, flag: str, form: str) -> tuple[str, str]:
    if "=" not in spec or not spec.split("=", 1)[0].strip() or not spec.split("=", 1)[1].strip():
        raise ConfigError(flag, f"{spec!r} is not {form}")
    key, body = spec.split("=", 1)
    return key.strip(), body.strip()


def _draw(axis: Axis, rng: random.Random) -> Any:
    if axis.choices:
        return rng.choice(axis.choices)
    if axis.log:
        value = math.exp(rng.uniform(math.log(axis.low), math.log(axis.high)))
    else:
        value = rng.uniform(axis.low, axis.high)
    if axis.integer:
        return int(min(max(round(value), math.ceil(axis.low)), math.floor(axis.high)))
    return float(f"{value:.3g}")  # 3 significant digits: readable names and tables, plenty for a sweep


def apply_params(base: RunConfig, params: dict, targets: dict[str, str]) -> RunConfig:
    """`base` with the trial's params: fields replaced, task options merged over the base's."""
    fields = {k: v for k, v in params.items() if targets[k] == "field"}
    options = {k.removeprefix(OPTION_PREFIX): v for k, v in params.items() if targets[k] == "option"}
    changes = dict(fields)
    if options:
        changes["task_options"] = {**base.task_options, **options}
    return base.replace(**changes)


def plan_trials(base: RunConfig, grid: list[Axis] | None = None, ranges: list[Axis] | None = None,
                samples: int = 0, seed: int = 0) -> list[Trial]:
    """The trials of a grid (every combination, the first axis varying slowest) or of `samples` random draws
    over `ranges` with `seed` (the same seed gives the same trials). Every trial's config is validated here:
    a bad value raises a ConfigError whose field is "--grid KEY" / "--range KEY" and names the value."""
    grid, ranges = list(grid or []), list(ranges or [])
    if grid and ranges:
        raise ConfigError("--grid", "give either --grid axes or --random N with --range axes, not both")
    if ranges:
        if samples < 1:
            raise ConfigError("--random", f"{samples} trials: give --random N with N of at least 1")
        rng = random.Random(seed)
        combos = [tuple(_draw(axis, rng) for axis in ranges) for _ in range(samples)]
        axes = ranges
    elif grid:
        combos = list(itertools.product(*(axis.values for axis in grid)))
        axes = grid
    else:
        raise ConfigError("--grid", "nothing to sweep: give --grid KEY=V1,V2 (repeatable) or --random N with "
                                    "--range KEY=LOW:HIGH")
    keys = [axis.key for axis in axes]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ConfigError(f"--{'range' if ranges else 'grid'} {dup}", f"{dup} is given twice")
    if len(combos) > MAX_TRIALS:
        raise ConfigError("--grid", f"{len(combos):,} trials: a sweep runs at most {MAX_TRIALS:,}")
    targets = {axis.key: axis.target for axis in axes}
    flag = "--range" if ranges else "--grid"
    base = base.replace(out_dir="")
    base.validate()
    trials = []
    for index, combo in enumerate(combos, start=1):
        params = dict(zip(keys, combo))
        try:
            config = apply_params(base, params, targets).validate()
        except ConfigError as exc:
            key = _param_of(exc.field, params)
            if key is None:
                raise
            message = str(exc).split(": ", 1)[1]
            raise ConfigError(f"{flag} {key}", f"trial {index} ({_describe(params)}): {message}") from None
        trials.append(Trial(index, params, config))
    return trials


def _param_of(field_name: str, params: dict) -> str | None:
    """The swept key a validation error is about (None when the base config itself is wrong)."""
    name = field_name.removeprefix("task_options.")
    for key in params:
        if key.removeprefix(OPTION_PREFIX) == name:
            return key
    return None


def _describe(params: dict) -> str:
    return ", ".join(f"{k}={short_value(v)}" for k, v in params.items())


def short_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")
NAME_LIMIT = 80


def trial_name(index: int, params: dict, width: int = 2) -> str:
    """trial-01-lr=0.001-batch_size=64: the folder name of a trial (odd characters become _, at most 80)."""
    text = "-".join(f"{k.removeprefix(OPTION_PREFIX)}={short_value(v)}" for k, v in params.items())
    name = f"trial-{index:0{width}d}" + (f"-{_UNSAFE.sub('_', text)}" if text else "")
    return name[:NAME_LIMIT].rstrip("-_.")


# ------------------------------------------------------------------------------------------ sweep.json
def new_sweep_folder(root: str | os.PathLike | None, task: str, when: datetime | None = None) -> Path:
    """Create <runs root>/<date>-<time>-sweep-<task> (or a -2, -3 sibling) and return it."""
    when = when or datetime.now()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in task)
    base = runs_root(root) / f"{when:%Y%m%d-%H%M%S}-sweep-{safe}"
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


def create_sweep(base: RunConfig, trials: list[Trial], axes: list[Axis], method: str = "grid",
                 samples: int = 0, seed: int = 0, root: str | os.PathLike | None = None,
                 folder: str | os.PathLike | None = None) -> Path:
    """Write a new sweep (every trial pending) into `folder`, or a new folder under the runs root."""
    folder = Path(folder) if folder is not None else new_sweep_folder(root, base.task)
    folder.mkdir(parents=True, exist_ok=True)
    metric = base.monitor or primary_metric(base.task) or "loss"
    width = max(2, len(str(len(trials))))
    data = {
        "version": SWEEP_VERSION, "kind": KIND, "name": folder.name, "created": now_iso(), "updated": now_iso(),
        "status": "pending", "task": base.task, "metric": metric,
        "mode": "min" if lower_is_better(metric, base.monitor_mode) else "max",
        "method": method, "axes": [axis.to_dict() for axis in axes], "samples": samples, "seed": seed,
        "base_config": base.replace(out_dir="").to_dict(),
        "trials": [{"index": t.index, "name": trial_name(t.index, t.params, width),
                    "folder": trial_name(t.index, t.params, width), "params": t.params, "status": "pending",
                    "message": "", "run_id": None, "started": None, "ended": None, "attempts": 0}
                   for t in trials],
    }
    write_sweep(folder, data)
    return folder


def write_sweep(folder: str | os.PathLike, data: dict) -> None:
    data["updated"] = now_iso()
    payload = json.dumps(data, indent=2, default=str) + "\n"
    atomic_write_bytes(Path(folder) / SWEEP_FILE, payload.encode("utf-8"))


def _raw_sweep(folder: Path) -> dict:
    return read_sweep(folder)  # a checked record: every trial's folder lies inside the sweep's


def sweep_in_use(folder: str | os.PathLike) -> bool:
    """Whether a live process is running this sweep (its lock cannot be taken)."""
    return lock_is_held(Path(folder) / LOCK_FILE)


def load_sweep(folder: str | os.PathLike) -> dict:
    """sweep.json, with "running" read as "interrupted" when no live process holds the sweep; "folder" added.
    ConfigError (field "sweep") when the folder holds no readable sweep."""
    folder = Path(folder)
    data = _raw_sweep(folder)
    live = sweep_in_use(folder)
    if not live:
        for trial in data["trials"]:
            if trial.get("status") == "running":
                trial["status"] = "interrupted"
        if data.get("status") == "running":
            data["status"] = "interrupted"
    data["folder"] = str(folder)
    return data


def find_sweeps(root: str | os.PathLike | None = None) -> list[dict]:
    """Every sweep directly under the runs root (load_sweep's dicts), newest first."""
    root = runs_root(root)
    sweeps = []
    try:
        children = sorted((p for p in root.iterdir() if (p / SWEEP_FILE).is_file()), reverse=True)
    except OSError:
        return []
    for child in children:
        try:
            sweeps.append(load_sweep(child))
        except ConfigError:
            continue
    return sweeps


# ------------------------------------------------------------------------------------------ running
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

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)


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
            raise ConfigError("sweep", f"{self.folder}: another process is running this sweep; wait for it "
                                       f"to end (or stop it) before resuming it")
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _checkpoint_of(folder: Path) -> Path | None:
    from core.engine.run_folder import CHECKPOINT_FILE

    path = folder / CHECKPOINT_FILE
    return path if path.is_file() else None


def trial_config(data: dict, trial: dict, sweep_folder: Path) -> RunConfig:
    """The RunConfig a trial runs with: the sweep's base config, the trial's params, its folder."""
    targets = {axis["key"]: axis["target"] for axis in data["axes"]}
    base = RunConfig.from_dict(data["base_config"], source=f"{sweep_folder / SWEEP_FILE} (base_config)")
    return apply_params(base, trial["params"], targets).replace(out_dir=str(sweep_folder / trial["folder"]))


def run_sweep(folder: str | os.PathLike, progress: Callable[[SweepEvent], None] | None = None,
              control: RunControl | None = None, retry_failed: bool = False,
              devices: list[str] | None = None) -> SweepResult:
    """Run the trials of the sweep in `folder` that are not done yet, one after another (see the module doc);
    with `retry_failed`, failed trials run again too (from scratch, in a fresh folder beside the failed run).
    With `devices` (device slots, e.g. ["cuda:0", "cuda:1"] or ["cpu", "cpu"]): len(devices) trials at a time,
    each in its own training process on its slot's device (core.lab.sweep_parallel); the same states, events
    and stop/resume, and a resume may use other devices than the first run.

    Stop with control.stop(): the running trial stops after its step and writes its checkpoint; the sweep
    then returns with status "stopped" and sweep.json says which trials are done, stopped and pending.
    Raises ConfigError (before any trial) when the folder holds no sweep or another process runs it."""
    from core.engine.control import RunControl

    folder = Path(folder)
    control = control or RunControl()
    emit = progress or (lambda event: None)
    _raw_sweep(folder)  # a clear error before the lock file is created in a folder that is not a sweep
    with _SweepLock(folder):
        data = _raw_sweep(folder)  # we hold the lock: a trial still "running" was interrupted
        for trial in data["trials"]:
            if trial.get("status") == "running":
                trial["status"] = "interrupted"
            if trial.get("status") not in DONE:
                _note_finished(folder, trial)
        trials = data["trials"]
        total = len(trials)
        to_run = [t for t in trials if t.get("status") not in DONE or retry_failed and t.get("status") == "failed"]
        emit(SweepStarted(str(folder), total, [t["name"] for t in to_run],
                          resumed=any(t.get("status") != "pending" for t in trials), devices=tuple(devices or ())))
        data["status"] = "running"
        data["devices"] = list(devices or [])  # how it runs now: a plain --resume runs it the same way
        write_sweep(folder, data)
        if devices:
            from core.lab.sweep_parallel import run_parallel

            run_parallel(folder, data, to_run, total, emit, control, list(devices))
        else:
            for trial in to_run:
                if control.stop_requested:
                    break
                _run_one(folder, data, trial, total, emit, control)
        stopped = control.stop_requested and any(t.get("status") not in DONE for t in trials)
        data["status"] = "stopped" if stopped else "completed"
        write_sweep(folder, data)
    counts: dict = {}
    for trial in trials:
        counts[trial["status"]] = counts.get(trial["status"], 0) + 1
    emit(SweepEnded(str(folder), data["status"], counts))
    return SweepResult(folder, data["status"], counts, sweep_table(folder))


def _note_finished(folder: Path, trial: dict) -> None:
    """A trial whose run had completed before the sweep could record it (the sweep process was killed): it
    counts as completed with its run's figures, instead of being resumed past its end (which fails)."""
    trial_folder = folder / trial["folder"]
    record = load_record(trial_folder)
    if not finished_run(record, _checkpoint_of(trial_folder) is not None):
        return
    said = record.get("status") == "completed"
    trial.update(status="completed", run_id=record.get("id") or trial.get("run_id"),
                 ended=record.get("end_time") if said and isinstance(record.get("end_time"), str) else now_iso(),
                 message="" if said else "its run reached its last step and saved its checkpoint; the end was "
                                         "not recorded")


def begin_trial(folder: Path, data: dict, trial: dict, total: int, emit, device: str | None = None):
    """Mark `trial` running in sweep.json and announce it: (its RunConfig, the checkpoint it resumes from or
    None). `device`: the slot's device (parallel trials), else the sweep's own setting."""
    trial_folder = folder / trial["folder"]
    resume_from = _checkpoint_of(trial_folder) if trial.get("status") in ("stopped", "interrupted") else None
    config = trial_config(data, trial, folder)
    if device is not None:
        config = config.replace(device=device)
    trial.update(status="running", message="", started=trial.get("started") or now_iso(), ended=None,
                 attempts=int(trial.get("attempts") or 0) + 1, device=device or config.device)
    write_sweep(folder, data)
    emit(TrialStarted(trial["index"], total, trial["name"], str(trial_folder), dict(trial["params"]),
                      str(resume_from) if resume_from else None, device or config.device))
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
    trial.update(status=status if status in ("completed", "stopped", "failed") else "failed", message=message,
                 ended=now_iso(), run_id=record.get("id") or trial.get("run_id"))
    write_sweep(folder, data)
    emit(TrialEnded(trial["index"], total, trial["name"], trial["status"], message, record.get("best"),
                    record.get("wall_seconds")))


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
    except Exception as exc:  # noqa: BLE001 - bad input at setup or an engine error: the trial fails, the sweep goes on
        message = str(exc) or type(exc).__name__
    end_trial(folder, data, trial, total, emit, status, message)


# ------------------------------------------------------------------------------------------ results
COLUMNS = ("best", "samples_per_second", "peak_memory_bytes", "wall_seconds", "steps", "index", "status")
_DESCENDING = {"samples_per_second"}  # higher first; the others lower first (best follows the metric's mode)


def _row(data: dict, trial: dict, folder: Path) -> dict:
    """One result row: the trial's params and state from sweep.json, its run's figures from run.json."""
    run = read_run(folder / trial["folder"]) or {}
    best = run.get("best") if isinstance(run.get("best"), dict) else None
    checkpoint = _checkpoint_of(folder / trial["folder"])
    config = run.get("config") or {}
    return {
        "index": trial["index"], "trial": trial["name"], "params": dict(trial["params"]),
        "status": trial.get("status") or "pending", "message": trial.get("message") or run.get("message") or "",
        "run": f"{folder.name}/{trial['folder']}", "run_id": run.get("id") or trial.get("run_id"),
        "folder": str(folder / trial["folder"]),
        "metric": data.get("metric"), "best": best.get("value") if best else None,
        "best_step": best.get("step") if best else None,
        "samples_per_second": run.get("samples_per_second"), "peak_memory_bytes": run.get("peak_memory_bytes"),
        "wall_seconds": run.get("wall_seconds"), "steps": run.get("steps"), "total_steps": run.get("total_steps"),
        "device": run.get("device") or trial.get("device"), "start_time": run.get("start_time"),
        "end_time": run.get("end_time"),
        "max_steps": config.get("max_steps"), "epochs": config.get("epochs"),
        "checkpoint": str(checkpoint) if checkpoint else None,
    }


def _number_or_none(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else None


def sort_rows(rows: list[dict], sort: str | None = None, mode: str = "max") -> list[dict]:
    """Rows sorted by `sort` (a COLUMNS name or a parameter key; default best, in the metric's mode: higher
    first for max; samples/s higher first; memory, wall time, steps and parameters lower first). Rows without
    a value go last, in trial order."""
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
    """'Train this one longer': the trial's checkpoint to resume and the settings to change (max_steps, or
    epochs when the trial ran by epochs) to train `factor` times as long. (None, {}) without a checkpoint."""
    if not row.get("checkpoint"):
        return None, {}
    if row.get("max_steps"):
        return row["checkpoint"], {"max_steps": max(int(row["max_steps"] * factor), int(row["max_steps"]) + 1)}
    epochs = int(row.get("epochs") or 1)
    return row["checkpoint"], {"epochs": max(int(epochs * factor), epochs + 1)}


def continue_config(row: dict, factor: float = 2.0) -> tuple[RunConfig, str] | None:
    """'Train this one longer' for a program (the window): the trial's settings from its run.json with
    max_steps (or epochs) raised `factor` times, in the trial's own folder, and the checkpoint to resume from;
    start it as any resumed run (Trainer(config, resume_from=checkpoint)). None without a checkpoint."""
    checkpoint, changes = continue_settings(row, factor)
    record = load_record(row["folder"]) if checkpoint else None
    if not record or not isinstance(record.get("config"), dict):
        return None
    config = RunConfig.from_dict(record["config"], source=f"{row['folder']}/run.json")
    return config.replace(**changes, out_dir=row["folder"]), checkpoint


def train_longer_command(row: dict, factor: float = 2.0) -> str | None:
    """`amp-console train --resume <trial>/checkpoint.pt --max-steps N`: continues in the trial's folder."""
    import shlex

    checkpoint, changes = continue_settings(row, factor)
    if checkpoint is None:
        return None
    parts = ["amp-console", "train", "--resume", checkpoint]
    for key, value in changes.items():
        parts += ["--" + key.replace("_", "-"), str(value)]
    return shlex.join(parts)
