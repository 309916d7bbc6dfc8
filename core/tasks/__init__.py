"""Task registry: name -> Task class. The CLI and the GUI list tasks from here.

`task_infos()` describes every task (name, one line, options with help and ranges, default settings) without
importing torch: it reads the task modules' class attributes (core.tasks.catalog). `TASKS`, `get_task_class`
and `create_task` import the task modules (and torch) on first use.

To add a task, see docs/ARCHITECTURE.md ("Where to add things"): add it to `_REGISTRY` and `_task_classes`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import ConfigError
from core.tasks.options import TaskInfo, TaskOption

if TYPE_CHECKING:
    from core.tasks.base import Task, TaskData

# name -> (module file in this package, Task class). The order is the order every list shows.
_REGISTRY: dict[str, tuple[str, str]] = {
    "tiny": ("tiny.py", "TinyClassifierTask"),
    "sentiment": ("sentiment.py", "SentimentTask"),
    "ranking": ("ranking.py", "RankingTask"),
    "recommender": ("recommender.py", "RecommenderTask"),
}
TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)

_infos: dict[str, TaskInfo] | None = None


def _task_classes() -> dict[str, type[Task]]:
    """Import every task module (this imports torch) and return name -> class, in registry order."""
    from core.tasks.ranking import RankingTask
    from core.tasks.recommender import RecommenderTask
    from core.tasks.sentiment import SentimentTask
    from core.tasks.tiny import TinyClassifierTask

    classes = {cls.name: cls for cls in (TinyClassifierTask, SentimentTask, RankingTask, RecommenderTask)}
    return {name: classes[name] for name in TASK_NAMES}


def _info_from_class(cls: type[Task]) -> TaskInfo:
    options = tuple(TaskOption(o.name, o.default, o.help, o.minimum, o.maximum, o.choices, o.synthetic)
                    for o in cls.options)
    return TaskInfo(name=cls.name, description=cls.description, options=options,
                    defaults=dict(cls.defaults), primary_metric=cls.primary_metric, tokens_key=cls.tokens_key,
                    synthetic_file=cls.synthetic_file, saved_defaults=dict(cls.saved_defaults))


def task_infos() -> dict[str, TaskInfo]:
    """name -> TaskInfo for every registered task, read without importing torch where the source allows."""
    global _infos
    if _infos is None:
        from core.tasks.catalog import read_task_info

        here = Path(__file__).resolve().parent
        infos = {name: read_task_info(here / module, class_name) for name, (module, class_name) in _REGISTRY.items()}
        if any(info is None or info.name != name for name, info in infos.items()):
            classes = _task_classes()  # a task the source reader cannot follow: ask the class itself
            infos = {name: info if info is not None and info.name == name else _info_from_class(classes[name])
                     for name, info in infos.items()}
        _infos = infos
    return _infos


def unknown_task_message(name: str) -> str:
    """"unknown task 'recomender' (did you mean 'recommender'?); choose one of tiny, ..."."""
    close = difflib.get_close_matches(name, TASK_NAMES, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown task {name!r}{hint}; choose one of {', '.join(TASK_NAMES)}"


def get_task_info(name: str) -> TaskInfo:
    """The TaskInfo of task `name` (no torch); ConfigError naming the known tasks otherwise."""
    if name not in _REGISTRY:
        raise ConfigError("task", unknown_task_message(name))
    return task_infos()[name]


def option_values(name: str, options: dict) -> dict:
    """Task `name`'s options with its defaults filled in (no torch): what two option sets build, to compare
    them; `options` as they are for an unknown task."""
    if name not in _REGISTRY:
        return dict(options)
    return {opt.name: opt.default for opt in task_infos()[name].options} | dict(options)


def saved_options(name: str, options: dict) -> dict:
    """A run's saved task `options` as the run trained with them (no torch): an option the saved config lacks
    that the task names in `saved_defaults` (one added, or whose default changed, since such configs were
    saved) takes the default it had then, not today's; the others are left to today's defaults. `options`
    as they are for an unknown task."""
    if name not in _REGISTRY:
        return dict(options)
    return {**task_infos()[name].saved_defaults, **options}


def saved_config(config):
    """A saved run's config (a dict: a checkpoint's, run.json's) with its task options as the run trained with
    them (saved_options): what every reader of a saved run builds its task from, so that resuming, evaluating
    or exporting an earlier run does what it did. Anything that is not such a dict is returned as it is
    (its readers say what is wrong with it)."""
    if not isinstance(config, dict) or not isinstance(config.get("task"), str):
        return config
    options = config.get("task_options", {})
    if not isinstance(options, dict):
        return config
    upgraded = saved_options(config["task"], options)
    return config if upgraded == options else {**config, "task_options": upgraded}


def get_task_class(name: str) -> type[Task]:
    """The Task class called `name` (from `TASKS`, so a task added there at run time is found too);
    ConfigError naming the known tasks otherwise."""
    classes = __getattr__("TASKS") if "TASKS" not in globals() else globals()["TASKS"]
    if name not in classes:
        raise ConfigError("task", unknown_task_message(name))
    return classes[name]


def create_task(name: str, options: dict | None = None) -> Task:
    """An instance of task `name` with validated options."""
    return get_task_class(name)(options)


def __getattr__(name: str):
    """`TASKS` (name -> class) and the Task API types, imported on first use: they import torch."""
    if name == "TASKS":
        classes = _task_classes()
        globals()["TASKS"] = classes
        return classes
    if name in ("Task", "TaskData"):
        from core.tasks import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TASKS", "TASK_NAMES", "Task", "TaskData", "TaskInfo", "TaskOption", "create_task", "get_task_class",
           "get_task_info", "option_values", "saved_config", "saved_options", "task_infos", "unknown_task_message"]
