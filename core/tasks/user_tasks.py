"""Tasks defined outside this package: `path/to/my_task.py:MyTask`, `package.module:MyTask`, or an entry point
in `amp_console.tasks`. Loading runs its code, so only a reference the user gave is loaded; one that fails is a
TaskFileError naming it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import pickle
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import ConfigError
from core.text import first_line

if TYPE_CHECKING:
    from core.tasks.base import Task

ENTRY_POINT_GROUP = "amp_console.tasks"
MODULE_PREFIX = "amp_console_user_task"  # sys.modules name of a task file: <prefix>_<stem>_<hash of its path>
NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")  # a task's name: what configs, run folders and lists show
_MODULE_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_CLASS_RE = re.compile(r"^[A-Za-z_]\w*$")
# Where tasks imported by module name live: frames there are the user's (core.tasks.task_checks.is_user_file).
USER_CODE_ROOTS: set[str] = set()
_WINDOWS: set[int] = set()  # windows open in this process (keep_files_out): no task file runs here meanwhile


def keep_files_out(window: object, open_: bool) -> None:
    """`window` opened (or closed): while any is open, loading a task file here raises; its code runs in the
    window's child processes, and the window registers their stand-ins (add_task with a class)."""
    (_WINDOWS.add if open_ else _WINDOWS.discard)(id(window))


class TaskFileError(ConfigError):
    """A task reference that cannot be loaded or is not a usable task."""

    def __init__(self, reference: str, message: str):
        self.reference = reference
        super().__init__("task", f"{reference}: {message}")


def is_reference(text: str) -> bool:
    """Whether `text` (a --task value) names a task file or a module's class rather than a task's name."""
    return isinstance(text, str) and (":" in text or text.endswith(".py") or "/" in text or "\\" in text)


def split_reference(reference: str) -> tuple[str, str, str | None]:
    """(kind, target, class name or None): kind "file" (target: the path) or "module" (target: its dotted name)."""
    text = reference.strip()
    target, _, class_name = text.rpartition(":") if ":" in text else (text, "", "")
    if len(target) == 1 and target.isalpha() and class_name.startswith(("\\", "/")):  # C:\tasks\x.py
        target, class_name = text, ""
    if class_name and not _CLASS_RE.match(class_name):
        raise TaskFileError(
            reference, f"{class_name!r} is not a class name (write FILE.py:ClassName or package.module:ClassName)"
        )
    if not target:
        raise TaskFileError(reference, "name a file (path/to/task.py:ClassName) or a module (package.module:ClassName)")
    if target.endswith(".py") or "/" in target or "\\" in target:
        return "file", target, class_name or None
    if not _MODULE_RE.match(target):
        raise TaskFileError(reference, "neither a .py file nor a module name (package.module:ClassName)")
    if not class_name:
        raise TaskFileError(reference, f"name the class too: {target}:ClassName")
    return "module", target, class_name


def canonical_reference(reference: str) -> str:
    """The reference as it is remembered: a file's absolute path (so a run started elsewhere finds it)."""
    kind, target, class_name = split_reference(reference)
    if kind == "file":
        try:
            target = str(Path(target).expanduser().resolve())
        except (OSError, RuntimeError) as exc:  # a loop of symbolic links
            raise TaskFileError(reference, f"cannot be resolved: {first_line(exc)}") from None
    return f"{target}:{class_name}" if class_name else target


def load_task(reference: str) -> type[Task]:
    """Import (running its code), check and return the task class `reference` names, not registered."""
    kind, target, class_name = split_reference(reference)
    if kind == "file" and _WINDOWS:
        raise TaskFileError(reference, "not loaded in the window yet: pick it in the task list")
    module = _import_file(reference, target) if kind == "file" else _import_module(reference, target)
    cls = _find_class(reference, module, class_name)
    check_task_class(cls, reference)
    return cls


def _import_file(reference: str, target: str):
    from core.files import check_regular_file, shown_path

    path = Path(target).expanduser()
    if not path.exists():
        raise TaskFileError(reference, "no such file")
    try:
        check_regular_file(path, "task", "task file")
    except ConfigError as exc:
        said = str(exc).split(": ", 1)[-1]  # "<path>: is a named pipe (FIFO), not a task file"
        raise TaskFileError(reference, said.removeprefix(f"{shown_path(path)}: ")) from None
    if path.suffix != ".py":
        raise TaskFileError(reference, "a task file is Python source: its name ends in .py")
    path = path.resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    name = f"{MODULE_PREFIX}_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest}"
    if name in sys.modules:  # loaded before in this process: the same classes (a reload would make new ones)
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskFileError(reference, "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling of its classes look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TaskFileError(reference, _import_failure(exc, path)) from exc
    _shareable_with_processes(module, path)
    return module


def _shareable_with_processes(module, path: Path) -> None:
    """Let the task file's objects travel to a spawned process (a DataLoader worker)."""
    from multiprocessing.reduction import ForkingPickler

    def reduce(obj):
        return _rebuilt_in_process, (str(path), pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__:
            ForkingPickler.register(value, reduce)


def _rebuilt_in_process(path: str, payload: bytes):
    """A task file's object in a process started for it: the file imported first, then the object unpickled."""
    _import_file(path, path)
    return pickle.loads(payload)


def _import_module(reference: str, target: str):
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
            raise TaskFileError(
                reference, f"no module named {exc.name!r} here (is its package installed, or its folder on PYTHONPATH?)"
            ) from None
        raise TaskFileError(reference, _import_failure(exc, None)) from exc
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TaskFileError(reference, _import_failure(exc, None)) from exc
    top = sys.modules.get(target.split(".", 1)[0])
    where = getattr(top, "__file__", None)
    if where:  # a package's frames are its folder's, a lone module's its file's
        root = Path(where).resolve()
        USER_CODE_ROOTS.add(str(root.parent) + "/" if root.name == "__init__.py" else str(root))
    return module


def _import_failure(exc: BaseException, path: Path | None) -> str:
    """What went wrong while importing user code, with the file and line that raised it."""
    if isinstance(exc, SyntaxError):
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        return f"syntax error at {where}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if path is not None and Path(f.filename) == path] or frames[-1:]
    where = f" (line {own[-1].lineno}: {own[-1].line})" if own and own[-1].line else ""
    if own and path is None:
        where = f" ({own[-1].filename}, line {own[-1].lineno})"
    return f"importing it raised {type(exc).__name__}: {first_line(exc)}{where}"


def _find_class(reference: str, module, class_name: str | None):
    from core.tasks.base import Task

    if class_name is not None:
        cls = getattr(module, class_name, None)
        if cls is None:
            found = _task_classes(module, Task)
            also = f"; it defines {', '.join(c.__name__ for c in found)}" if found else ""
            raise TaskFileError(reference, f"defines no {class_name!r}{also}")
        return cls
    found = _task_classes(module, Task)
    if len(found) != 1:
        listed = ", ".join(c.__name__ for c in found) or "none"
        raise TaskFileError(
            reference, f"name the class (FILE.py:ClassName): the file defines {len(found)} Task classes ({listed})"
        )
    return found[0]


def _task_classes(module, base) -> list:
    return [
        v
        for v in vars(module).values()
        if inspect.isclass(v)
        and issubclass(v, base)
        and v is not base
        and v.__module__ == module.__name__
        and not inspect.isabstract(v)
    ]


def check_task_class(cls, reference: str) -> None:
    """Refuse a class that is not a complete Task, naming what is expected and what was found."""
    from core.tasks.base import Task
    from core.tasks.options import TaskOption

    def bad(message: str):
        return TaskFileError(reference, message)

    if not inspect.isclass(cls) or not issubclass(cls, Task):
        raise bad(f"is {_kind(cls)}, not a subclass of core.tasks.Task")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise bad(f"{cls.__name__} does not define {', '.join(missing)} (a task needs load_data, build_model and loss)")
    if cls.evaluate is Task.evaluate and cls.evaluate_parts is Task.evaluate_parts:
        raise bad(f"{cls.__name__} defines neither evaluate (metrics of a split) nor evaluate_parts + metrics")
    if cls.evaluate_parts is not Task.evaluate_parts and cls.metrics is Task.metrics:
        raise bad(f"{cls.__name__} defines evaluate_parts but not metrics (which combines the parts)")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise bad(
            f"{cls.__name__}.name must be a short lower-case name (letters, digits, - and _; e.g. "
            f"'my-task'), got {name!r}"
        )
    if not isinstance(getattr(cls, "description", None), str) or not cls.description.strip():
        raise bad(f"{cls.__name__}.description must be a line of text, got {getattr(cls, 'description', None)!r}")
    options = cls.options
    if not isinstance(options, (tuple, list)) or not all(isinstance(o, TaskOption) for o in options):
        raise bad(
            f"{cls.__name__}.options must be a tuple of TaskOption(name, default, help, ...), got {_kind(options)}"
        )
    names = [o.name for o in options]
    if len(set(names)) != len(names):
        raise bad(f"{cls.__name__}.options names {sorted({n for n in names if names.count(n) > 1})[0]!r} twice")
    if not isinstance(cls.defaults, dict):
        raise bad(
            f"{cls.__name__}.defaults must be a dict of training settings (e.g. {{'lr': 1e-3}}), got "
            f"{_kind(cls.defaults)}"
        )
    # Whether each default is a training setting is checked where settings are known (RunConfig.for_task).
    if not isinstance(cls.primary_metric, str) or not cls.primary_metric:
        raise bad(f"{cls.__name__}.primary_metric must name one of its metrics, got {cls.primary_metric!r}")


def _kind(value) -> str:
    if inspect.isclass(value):
        return f"the class {value.__name__}"
    return f"a {type(value).__name__} ({first_line(repr(value))[:60]})"


def installed_tasks() -> dict[str, str]:
    """name -> "package.module:Class" of every entry point in ENTRY_POINT_GROUP (metadata only)."""
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    try:
        points = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # a broken distribution's metadata must not stop the listing
        return found
    for point in points:
        if NAME_RE.match(point.name) and point.name not in found and ":" in point.value:
            found[point.name] = point.value.replace(" ", "")
    return found


def source_kind(reference: str) -> str:
    """What `reference` is, for a listing: "a task file", "an installed package's entry point", "a module"."""
    try:
        kind = split_reference(reference)[0]
    except TaskFileError:
        return "a task reference"
    if kind == "file":
        return "a task file"
    return "an installed package's entry point" if reference in installed_tasks().values() else "a module"


def source_problem(reference: str) -> str:
    """Why the source of the task `reference` names cannot be read, without running it; "" if it can."""
    try:
        kind, target, _class_name = split_reference(reference)
    except TaskFileError as exc:
        return str(exc).split(": ", 1)[-1]
    path = Path(target).expanduser() if kind == "file" else module_source_file(target)
    if path is None:
        return f"no module named {target!r} on the import path"
    from core.tasks.catalog import read_source

    try:
        source = read_source(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    except ValueError as exc:  # not a regular file, or too long to read here
        return "" if "longer than" in str(exc) else first_line(exc)
    try:
        compile(source, str(path), "exec", dont_inherit=True, flags=ast.PyCF_ONLY_AST)
    except SyntaxError as exc:
        return _import_failure(exc, path)
    except ValueError as exc:  # null bytes
        return f"not Python source: {exc}"
    return ""


def module_source_file(module: str) -> Path | None:
    """The file of dotted `module` on sys.path, without importing it; None when it is elsewhere."""
    parts = module.split(".")
    for entry in sys.path:
        base = Path(entry or ".")
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            try:
                if candidate.is_file():
                    return candidate
            except OSError:
                continue
    return None
