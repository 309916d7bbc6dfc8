"""`amp-console tasks new NAME`: a task file to start from, core/tasks/template.py with NAME's names, created
only where nothing is (never through a link).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError
from core.files import shown_path

TEMPLATE = Path(__file__).with_name("template.py")
NAME_RULE = "letters, digits and _, starting with a letter, at most 40 characters, e.g. my_task"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,39}$")


@dataclass(frozen=True)
class NewTaskFile:
    """What `write_task_file` wrote: the file, the task's name in it and its class."""

    path: Path
    task_name: str
    class_name: str


def task_names(name: str) -> tuple[str, str]:
    """(the task's name, its class name) for NAME: my_task -> ("my_task", "MyTask"); digits -> ("digits",
    "DigitsTask"). ConfigError("name", ...) for a NAME that is not one, or is a built-in task's."""
    from core.tasks import TASK_NAMES

    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError("name", f"{name!r} is not a task name: use {NAME_RULE}")
    task_name = name.lower()
    if task_name in TASK_NAMES:
        raise ConfigError("name", f"{name!r} is a built-in task's name: pick another")
    camel = "".join(part[:1].upper() + part[1:] for part in name.split("_"))
    class_name = camel if camel.lower().endswith("task") and camel != "Task" else camel + "Task"
    return task_name, class_name


def template_source() -> str:
    """The template module's text as a task file has it: without its leading comment lines."""
    lines = TEMPLATE.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    return "".join(lines[start:])


def task_file_text(name: str, file_name: str | None = None) -> str:
    """The task file for NAME: the template with TemplateTask, "template" and template.py renamed."""
    task_name, class_name = task_names(name)
    text = template_source().replace("template.py", file_name or f"{name}.py")
    text = text.replace("TemplateTask", class_name)
    return re.sub(r"\btemplate\b", task_name, text)


def target_path(name: str, out: str | os.PathLike | None = None) -> Path:
    """Where `tasks new NAME [--out PATH]` writes: ./NAME.py, PATH, or NAME.py inside folder PATH."""
    path = Path(os.fspath(out)) if out is not None and os.fspath(out) != "" else Path(f"{name}.py")
    if out is not None and os.path.isdir(path) and not os.path.islink(path):
        path = path / f"{name}.py"
    shown = shown_path(path)
    if path.suffix != ".py":
        raise ConfigError("out", f"{shown}: a task file's name ends in .py")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError("out", f"{shown}: its folder {shown_path(folder)} {what}")
    return path


def write_task_file(name: str, out: str | os.PathLike | None = None) -> NewTaskFile:
    """Write the task file for NAME (see target_path) and return what was written."""
    task_name, class_name = task_names(name)
    path = target_path(name, out)
    text = task_file_text(name, path.name)
    create_file(path, text.encode("utf-8"))
    return NewTaskFile(path, task_name, class_name)


def create_file(path: Path, payload: bytes) -> None:
    """`path` created holding `payload` where nothing is (O_EXCL | O_NOFOLLOW), removed if the write fails."""
    shown = shown_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:
        if os.path.islink(path):
            raise ConfigError("out", f"{shown}: is a symbolic link; a task file is never written through one") from None
        what = "a folder" if os.path.isdir(path) else "a file"
        raise ConfigError("out", f"{shown}: already exists ({what}); it is never overwritten") from None
    except OSError as exc:
        cause = exc.strerror or type(exc).__name__
        raise ConfigError("out", f"{shown}: cannot write in {shown_path(path.parent)}: {cause}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
    except BaseException:
        os.unlink(path)
        raise
