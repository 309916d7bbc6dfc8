"""Task registry: name -> Task class. `task_infos()` describes every task without torch; `TASKS` imports the
task modules on first use. `add_task` loads a user task (running its code), `remember_task` lists one without
running it; nothing is loaded because a run folder or a checkpoint names it.
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import ConfigError
from core.tasks.options import TaskInfo

if TYPE_CHECKING:
    from core.tasks.base import Task

# name -> (module file in this package, Task class). The order is the order every list shows.
_REGISTRY: dict[str, tuple[str, str]] = {
    "tiny": ("tiny/task.py", "TinyClassifierTask"),
    "sentiment": ("sentiment/task.py", "SentimentTask"),
    "ranking": ("ranking/task.py", "RankingTask"),
    "recommender": ("recommender/task.py", "RecommenderTask"),
}
TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)  # the built-in tasks; task_names() adds the users'
# The built-in file scorers that declare options of `predict`, in modules that import no torch (`--help`).
_SCORERS = (("core.tasks.recommender.files", "RecommenderFileScorer"),)

_infos: dict[str, TaskInfo] | None = None
_references: dict[str, str] = {}  # a user task's name -> its reference (added, remembered or installed)
_loaded: dict[str, type[Task]] = {}  # the user tasks loaded in this process
_source_infos: dict[str, tuple[tuple, TaskInfo | None]] = {}  # reference -> ((file, mtime, size), its info)
_installed_read = False


def _task_classes() -> dict[str, type[Task]]:
    """name -> class of every task, in registry order (this imports torch)."""
    from core.tasks.ranking.task import RankingTask
    from core.tasks.recommender.task import RecommenderTask
    from core.tasks.sentiment.task import SentimentTask
    from core.tasks.tiny.task import TinyClassifierTask

    classes = {cls.name: cls for cls in (TinyClassifierTask, SentimentTask, RankingTask, RecommenderTask)}
    return {name: classes[name] for name in TASK_NAMES} | _loaded


def predict_options() -> list:
    """The options of `amp-console predict` the built-in tasks' file scorers declare, each flag once."""
    import importlib

    found: dict = {}
    for module, name in _SCORERS:
        for option in getattr(importlib.import_module(module), name).command_options:
            found.setdefault(option.flag, option)
    return list(found.values())


def class_info(cls: type[Task]) -> TaskInfo:
    """What the catalog says of a task class (a task file's stand-in included)."""
    return TaskInfo(
        name=cls.name,
        description=cls.description,
        options=tuple(cls.options),
        defaults=dict(cls.defaults),
        primary_metric=cls.primary_metric,
        tokens_key=cls.tokens_key,
        synthetic_file=cls.synthetic_file,
        saved_defaults=dict(cls.saved_defaults),
        own_optimizer=getattr(cls, "configure_optimizers", None) is not None
        or "configure_optimizers" in getattr(cls, "capabilities", ()),  # a task file's stand-in says so
    )


def task_infos() -> dict[str, TaskInfo]:
    """name -> TaskInfo for every task (built-in first, then the users'), read from source where it can be (no
    torch, no user code); a user task whose source cannot be read so is left out until it is loaded."""
    global _infos
    if _infos is None:
        from core.tasks.catalog import read_task_info

        here = Path(__file__).resolve().parent
        found = {name: read_task_info(here / module, class_name) for name, (module, class_name) in _REGISTRY.items()}
        _infos = {  # a task the source reader cannot follow: the class itself says
            name: info if info is not None and info.name == name else class_info(_task_classes()[name])
            for name, info in found.items()
        }
    _read_installed()
    users = {}
    for name, reference in _references.items():
        if name in _loaded:
            users[name] = replace(class_info(_loaded[name]), source=reference)
        elif (info := _source_info(reference)) is not None and info.name == name:
            users[name] = replace(info, source=reference)
    return _infos | users


def task_names() -> tuple[str, ...]:
    """Every task's name: the built-in ones, then the users' (added, remembered or installed)."""
    _read_installed()
    return TASK_NAMES + tuple(n for n in _references if n not in _REGISTRY)


def task_source(name: str) -> str:
    """User task `name`'s reference ("path/to/file.py:Class", "package.module:Class"); "" for any other."""
    return "" if name in _REGISTRY else _references.get(name, "")


def add_task(reference: str, cls: type | None = None) -> type[Task]:
    """Load (running its code), register and return the user task `reference` names."""
    from core.tasks.user_tasks import TaskFileError, canonical_reference, load_task

    reference = canonical_reference(reference)
    for name, known in _loaded.items():
        if _references.get(name) == reference and cls is None:
            return known
    cls = cls or load_task(reference)
    if cls.name in _REGISTRY:
        raise TaskFileError(reference, f"its name {cls.name!r} is a built-in task's: give the task another name")
    if cls.name in _loaded and _references.get(cls.name) != reference:
        raise TaskFileError(
            reference, f"task {cls.name!r} is already loaded from {_references[cls.name]}: give this one another name"
        )
    for name, known in list(_references.items()):
        if known == reference and name != cls.name:  # remembered under a name the file no longer has
            del _references[name]
    _references[cls.name] = reference
    _loaded[cls.name] = cls
    if "TASKS" in globals():
        globals()["TASKS"][cls.name] = cls
    return cls


def forget_task(reference: str) -> tuple[str, ...]:
    """Unlist the user task `reference` names in this process; the names it was listed under."""
    from core.tasks.user_tasks import TaskFileError, canonical_reference

    with contextlib.suppress(TaskFileError):
        reference = canonical_reference(reference)
    names = tuple(name for name, known in _references.items() if known == reference)
    for name in names:
        del _references[name]
        if _loaded.pop(name, None) is not None and "TASKS" in globals():
            globals()["TASKS"].pop(name, None)
    _source_infos.pop(reference, None)
    return names


def remember_task(reference: str) -> TaskInfo | None:
    """List the user task `reference` names from its source, without running it."""
    from core.tasks.user_tasks import TaskFileError, canonical_reference

    try:
        reference = canonical_reference(reference)
    except TaskFileError:
        return None
    info = _source_info(reference)
    if info is not None and info.name not in _REGISTRY and info.name not in _loaded:
        _references[info.name] = reference
    return info


def _source_info(reference: str) -> TaskInfo | None:
    """A user task's TaskInfo read from its source (None when it cannot be), cached by the file's mtime and size."""
    from core.tasks.catalog import find_task_class, read_task_info
    from core.tasks.user_tasks import TaskFileError, module_source_file, split_reference

    try:
        kind, target, class_name = split_reference(reference)
    except TaskFileError:
        return None
    path = Path(target).expanduser() if kind == "file" else module_source_file(target)
    try:
        stat = path.stat() if path is not None else None
    except OSError:
        stat = None
    if stat is None or not path.is_file():
        return None
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    cached = _source_infos.get(reference)
    if cached is not None and cached[0] == key:
        return cached[1]
    class_name = class_name or find_task_class(path)
    info = read_task_info(path, class_name) if class_name else None
    _source_infos[reference] = (key, info)
    return info


def _read_installed() -> None:
    """Note the tasks installed packages declare (entry points: metadata only, nothing imported), once."""
    global _installed_read
    if _installed_read:
        return
    _installed_read = True
    from core.tasks.user_tasks import installed_tasks

    for name, reference in installed_tasks().items():
        if name not in _REGISTRY:
            _references.setdefault(name, reference)


def unknown_task_message(name: str, task_file: str = "") -> str:
    """ "unknown task 'recomender' (did you mean 'recommender'?); ..."; with `task_file`, how to load it."""
    if task_file:
        return (
            f"task {name!r} is defined in {task_file}, which is not loaded here (a task file runs code, so it "
            f"is never loaded because a run or a checkpoint names it): give it with --task {task_file}, or add "
            f"it in the window (File > Add task...)"
        )
    names = task_names()
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown task {name!r}{hint}; choose one of {', '.join(names)} (or a task file: --task FILE.py:Class)"


def get_task_info(name: str) -> TaskInfo:
    """The TaskInfo of task `name`; ConfigError naming the known tasks otherwise."""
    infos = task_infos()
    if name in infos:
        return infos[name]
    if name in _references:
        return class_info(get_task_class(name))
    raise ConfigError("task", unknown_task_message(name))


def option_values(name: str, options: dict, task_file: str = "") -> dict:
    """Task `name`'s options with its defaults filled in (no torch, no user code)."""
    info = task_infos().get(name)
    if info is None and task_file and isinstance(task_file, str):
        info = _source_info(task_file)
        info = info if info is not None and info.name == name else None
    return dict(options) if info is None else {opt.name: opt.default for opt in info.options} | dict(options)


def saved_options(name: str, options: dict) -> dict:
    """A run's saved task `options` as it trained with them (`saved_defaults` for missing ones)."""
    info = task_infos().get(name)
    return dict(options) if info is None else {**info.saved_defaults, **options}


def saved_config(config):
    """A saved run's config dict with saved_options applied, so an earlier run does what it did."""
    if not isinstance(config, dict) or not isinstance(config.get("task"), str):
        return config
    options = config.get("task_options", {})
    if not isinstance(options, dict):
        return config
    upgraded = saved_options(config["task"], options)
    return config if upgraded == options else {**config, "task_options": upgraded}


_catalog_lookups = 0  # > 0 inside catalog_classes()


@contextlib.contextmanager
def catalog_classes():
    """Within: get_task_class answers a built-in task not imported yet with its catalogue entry (name, options,
    defaults, option checks: no torch), for code that only checks settings (the --nproc launcher)."""
    global _catalog_lookups
    _catalog_lookups += 1
    try:
        yield
    finally:
        _catalog_lookups -= 1


def _catalog_class(name: str) -> type:
    info = task_infos()[name]
    return type(
        name,
        (),
        {
            "name": name,
            "options": info.options,
            "defaults": dict(info.defaults),
            "option_errors": staticmethod(info.option_errors),
        },
    )


def get_task_class(name: str, task_file: str = "") -> type[Task]:
    """The Task class called `name` (a listed user task loaded now); ConfigError when there is none."""
    if _catalog_lookups and name in _REGISTRY and "TASKS" not in globals():
        return _catalog_class(name)
    classes = __getattr__("TASKS") if "TASKS" not in globals() else globals()["TASKS"]
    if name not in classes:
        _read_installed()
        if name in _references and name not in _REGISTRY:
            return add_task(_references[name])
        raise ConfigError("task", unknown_task_message(name, task_file))
    return classes[name]


def load_config_task(values: dict) -> None:
    """Load the user task (`task_file`) of settings handed to `train` (a config file, the settings line), never
    of a run folder's or a checkpoint's; ConfigError when the file's task is not the config's `task`."""
    name, reference = values.get("task"), values.get("task_file")
    if not reference or not isinstance(reference, str) or not isinstance(name, str):
        return
    if name in _loaded and task_source(name):
        return
    cls = add_task(reference)
    if cls.name != name:
        raise ConfigError("task_file", f"{reference} defines task {cls.name!r}, not the config's {name!r}")


def create_task(name: str, options: dict | None = None) -> Task:
    """An instance of task `name` with validated options (of the real class, for a core.tasks.describe stand-in)."""
    cls = get_task_class(name)
    return getattr(cls, "real", lambda: cls)()(options)


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
