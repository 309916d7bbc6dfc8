"""Planning a sweep: its axes (`grid_axis`, `range_axis`), the trials of a grid or a seeded random sample
(`plan_trials`, each checked with RunConfig.validate() before anything runs) and the trials' names."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from core.config import FIELD_SPECS, TASK_OPTIMIZER_FIELDS, RunConfig
from core.errors import ConfigError

MAX_TRIALS = 1000
# Fields a sweep cannot vary -> why (the end of the error).
NOT_SWEPT = {
    "task": " (a sweep trains one task; start another sweep for another task)",
    "out_dir": ": each trial gets its own folder in the sweep",
    "task_options": "; sweep a task option by its name, e.g. hidden=16,32",
}
OPTION_PREFIX = "option."


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
        head = {"key": self.key, "target": self.target}
        if self.values:
            return head | {"values": list(self.values)}
        if self.choices:
            return head | {"choices": list(self.choices)}
        return head | {"low": self.low, "high": self.high, "log": self.log, "integer": self.integer}


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


def _task_info(task: str):
    """The task's TaskInfo; None for a task that is not known (its own error comes when it is validated)."""
    from core.tasks import get_task_info

    try:
        return get_task_info(task)
    except ConfigError:
        return None


def _task_options(task: str) -> dict:
    info = _task_info(task)
    return {o.name: o for o in info.options} if info else {}


def resolve_key(key: str, task: str, flag: str = "--grid") -> tuple[str, str]:
    """(key as stored, "field" | "option"): a RunConfig field, else a task option of `task` (or option.NAME
    for an option whose name is also a field). Unknown names: a ConfigError with a did-you-mean."""
    key = key.strip()
    options = _task_options(task)
    if key.startswith(OPTION_PREFIX):
        name = key[len(OPTION_PREFIX) :]
        if name in options:
            return key, "option"
        return _unknown(key, name, task, options, flag)
    if key in _fields():
        if key in NOT_SWEPT:
            raise ConfigError(f"{flag} {key}", f"{key} cannot be swept{NOT_SWEPT[key]}")
        if key in TASK_OPTIMIZER_FIELDS and getattr(_task_info(task), "own_optimizer", False):
            raise ConfigError(
                f"{flag} {key}",
                f"task {task} chooses its optimizer (configure_optimizers): {key} does not reach it, so every trial "
                "would train alike; sweep a task option, or the field itself in a task that leaves the optimizer to "
                "the engine",
            )
        return key, "field"
    if key in options:
        return key, "option"
    return _unknown(key, key, task, options, flag)


def _unknown(key: str, name: str, task: str, options: dict, flag: str):
    known = [f for f in _fields() if f not in NOT_SWEPT] + list(options)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = (
        f" (did you mean {close[0]!r}?)"
        if close
        else f"; settings: {', '.join(f for f in FIELD_SPECS if f not in NOT_SWEPT)}; "
        f"{task} options: {', '.join(options) or 'none'}"
    )
    raise ConfigError(f"{flag} {key}", f"{name!r} is neither a setting nor an option of task {task}{hint}")


def _value_kind(key: str, target: str, task: str) -> type:
    if target == "field":
        kind = _fields()[key]  # a type's name (postponed annotations) or the type
        return {"int": int, "float": float, "bool": bool}.get(kind if isinstance(kind, str) else kind.__name__, str)
    option = _task_options(task).get(key.removeprefix(OPTION_PREFIX))
    return type(option.default) if option is not None else str


def parse_value(text: str, kind: type, flag: str) -> Any:
    """A value typed as `kind` (int, float, bool, str) from the command line; ConfigError naming `flag`."""
    raw = text.strip()
    if not raw:
        raise ConfigError(flag, "an empty value in the list; give values separated by commas")
    what = {bool: "true or false", int: "a whole number", float: "a finite number"}.get(kind)
    if what is None:
        return raw
    if kind is bool and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        number = float(raw)
    except ValueError:
        number = math.nan  # not a number: no branch below takes it
    if kind is int and number.is_integer():
        return int(number)
    if kind is float and math.isfinite(number):
        return number
    raise ConfigError(flag, f"{raw!r} is not {what}")


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
    """'lr=1e-4:1e-2:log', 'batch_size=32:256' (int fields drawn as whole numbers), 'hidden=8:64:log:int', or choices
    'optimizer=adam,adamw'."""
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
        raise ConfigError(
            flag,
            f"unknown range flag {sorted(flags - {'log', 'int'})[0]!r}: use LOW:HIGH, "
            f"LOW:HIGH:log, LOW:HIGH:int or LOW:HIGH:log:int",
        )
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
    assert axis.low is not None and axis.high is not None  # a range axis without choices has both
    if axis.log:
        value = math.exp(rng.uniform(math.log(axis.low), math.log(axis.high)))
    else:
        value = rng.uniform(axis.low, axis.high)
    if axis.integer:
        return int(min(max(round(value), math.ceil(axis.low)), math.floor(axis.high)))
    return float(f"{value:.3g}")  # 3 significant digits: readable names and tables, plenty for a sweep


def apply_params(base: RunConfig, params: dict, targets: dict[str, str]) -> RunConfig:
    """`base` with the trial's params: fields replaced, task options merged over the base's."""
    changes = {k: v for k, v in params.items() if targets[k] == "field"}
    options = {k.removeprefix(OPTION_PREFIX): v for k, v in params.items() if targets[k] == "option"}
    if options:
        changes["task_options"] = {**base.task_options, **options}
    return base.replace(**changes)


def plan_trials(
    base: RunConfig, grid: list[Axis] | None = None, ranges: list[Axis] | None = None, samples: int = 0, seed: int = 0
) -> list[Trial]:
    """The trials of a grid (every combination, the first axis slowest) or of `samples` seeded random draws over
    `ranges`. Every trial's config is validated here: a bad value is a ConfigError whose field is "--grid KEY" /
    "--range KEY"."""
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
        raise ConfigError(
            "--grid", "nothing to sweep: give --grid KEY=V1,V2 (repeatable) or --random N with --range KEY=LOW:HIGH"
        )
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
            described = ", ".join(f"{k}={short_value(v)}" for k, v in params.items())
            raise ConfigError(f"{flag} {key}", f"trial {index} ({described}): {message}") from None
        trials.append(Trial(index, params, config))
    return trials


def _param_of(field_name: str, params: dict) -> str | None:
    """The swept key a validation error is about (None when the base config itself is wrong)."""
    name = field_name.removeprefix("task_options.")
    for key in params:
        if key.removeprefix(OPTION_PREFIX) == name:
            return key
    return None


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
