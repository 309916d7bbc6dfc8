"""What a task offers, without torch: its options (`TaskOption`) and a `TaskInfo` per registered task."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any

from core.errors import ConfigError


@dataclass(frozen=True)
class TaskOption:
    """One model-size or data option of a task, with its default and range (the GUI builds its form from it)."""

    name: str
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    synthetic: bool = False  # shapes only the task's generated data: no effect when a data file is given

    def error(self, value: Any) -> str | None:
        """Why `value` is not allowed for this option, or None."""
        kind = type(self.default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not kind:
            return f"expected {kind.__name__}, got {type(value).__name__} {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of {', '.join(self.choices)}"
        if self.minimum is not None and not (self.minimum <= value <= self.maximum):
            return f"{value!r} is out of range: must be between {_number(self.minimum)} and {_number(self.maximum)}"
        return None

    def allowed(self) -> str:
        """'1 to 4,096', 'full | sampled' or '' when anything of the option's type goes."""
        if self.choices:
            return " | ".join(self.choices)
        if self.minimum is not None and self.maximum is not None:
            return f"{_number(self.minimum)} to {_number(self.maximum)}"
        return ""


def option_errors(task: str, options: tuple[TaskOption, ...], values: dict) -> dict[str, str]:
    """task_options.<name> -> message for every unknown or invalid value among `values`."""
    known = {opt.name: opt for opt in options}
    problems = {}
    for key, value in values.items():
        if key not in known:
            allowed = ", ".join(known) or "none"
            close = [n for n in known if n.lower() == str(key).lower()]
            close = close or difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems[f"task_options.{key}"] = f"{task} has no option {key!r}{hint}; its options: {allowed}"
        elif (message := known[key].error(value)) is not None:
            problems[f"task_options.{key}"] = message
    return problems


def checked_options(task, values: dict | None) -> dict:
    """A task's defaults updated with `values`, else ConfigError for the first of its option_errors."""
    problems = task.option_errors(values or {})
    if problems:
        raise ConfigError(*next(iter(problems.items())))
    return {opt.name: opt.default for opt in task.options} | (values or {})


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class TaskInfo:
    """A registered task as the CLI and the form describe it: name, one line, options, default settings."""

    name: str
    description: str
    options: tuple[TaskOption, ...] = ()
    defaults: dict = field(default_factory=dict)
    primary_metric: str = "loss"
    tokens_key: str | None = None
    synthetic_file: bool = False  # `data generate` writes its synthetic data as a file (Task.synthetic_table)
    source: str = ""  # a user task's reference (core.tasks.user_tasks); "" for a built-in one
    saved_defaults: dict = field(default_factory=dict)  # Task.saved_defaults: what a saved config without the key ran
    own_optimizer: bool = False  # it defines configure_optimizers: TASK_OPTIMIZER_FIELDS do not reach it

    def option(self, name: str) -> TaskOption | None:
        return next((o for o in self.options if o.name == name), None)

    def option_errors(self, values: dict) -> dict[str, str]:
        """What Task.option_errors says of `values`, without the Task class."""
        return option_errors(self.name, self.options, values)


# The class attributes a TaskInfo is made of (core.tasks.catalog reads them from source, class_info from a class).
TASK_ATTRIBUTES = tuple(f.name for f in fields(TaskInfo) if f.name not in ("source", "own_optimizer"))
