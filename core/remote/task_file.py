"""A user's task file travels with a remote run: sent in the start request, written into the run's folder on the host
(`<run>/task/my_task.py`) and given to the run. Only that one file is sent; a `package.module:MyTask` reference is
passed as it is and must be installed on the host.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from core.errors import ConfigError
from core.text import first_line, printable

TASK_FOLDER = "task"  # <run folder>/task/<file name>: the copy of the run's task file on the host
MAX_TASK_BYTES = 4 * 1024 * 1024  # a task file's source: more is not a task file


def task_payload(reference: str, dest: str) -> tuple[dict | None, str]:
    """The start request's task part for `reference`: ({"name", "class", "text", "sha256"}, a note) for a task file,
    (None, a note) for a module's class. ConfigError when the file cannot be read."""
    from core.tasks.user_tasks import TaskFileError, split_reference

    try:
        kind, target, class_name = split_reference(reference)
    except TaskFileError as exc:
        raise ConfigError("task_file", str(exc).split(": ", 1)[-1]) from None
    if kind == "module":
        return None, (
            f"the task {reference} is a module's class: it must be installed on {dest} (passed as it is, not copied)"
        )
    path = Path(target).expanduser()
    where = f"{reference}: "
    if not path.exists():
        raise ConfigError("task_file", f"{where}no such local file to copy to {dest}")
    if not path.is_file():
        raise ConfigError("task_file", f"{where}not a file: a task file is one Python file, copied to {dest}")
    if path.suffix != ".py":
        raise ConfigError("task_file", f"{where}a task file is Python source: its name ends in .py")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("task_file", f"{where}cannot be read to copy it to {dest}: {exc.strerror or exc}") from None
    if len(data) > MAX_TASK_BYTES:
        raise ConfigError(
            "task_file",
            f"{where}{len(data):,} bytes: too large for a task file (at most "
            f"{MAX_TASK_BYTES:,}; copy large parts to {dest} yourself)",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("task_file", f"{where}not UTF-8 text") from None
    payload = {"name": path.name, "class": class_name, "text": text, "sha256": hashlib.sha256(data).hexdigest()}
    return payload, f"copying the task file {path.name} to {dest} (into the run's folder)"


def place_task_file(folder: Path, payload) -> str:
    """Write the task file a start request carries into `folder`/task/ and return the run's reference to it. ValueError
    (one line) for a bad payload or a failed write."""
    if not isinstance(payload, dict):
        raise ValueError("the start request's task_file is not an object")
    name, class_name, text, sha = (payload.get(k) for k in ("name", "class", "text", "sha256"))
    if (
        not isinstance(name, str)
        or os.path.basename(name.replace("\\", "/")) != name
        or name.startswith(".")
        or not name.endswith(".py")
        or len(name) > 200
    ):
        raise ValueError(f"{printable(str(name))!r} is not a task file's name (NAME.py)")
    if class_name is not None and (not isinstance(class_name, str) or not class_name.isidentifier()):
        raise ValueError(f"{printable(str(class_name))!r} is not a class name")
    if not isinstance(text, str):
        raise ValueError(f"the task file {name} came without its text")
    data = text.encode("utf-8")
    if len(data) > MAX_TASK_BYTES or hashlib.sha256(data).hexdigest() != sha:
        raise ValueError(f"the task file {name} arrived damaged (another size or sha256): start the run again")
    from core.files import atomic_write_bytes

    path = folder / TASK_FOLDER / name
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise ValueError(
            f"cannot write the task file {name} into {path.parent}: {first_line(exc.strerror or exc)}"
        ) from None
    return f"{path}:{class_name}" if class_name else str(path)


def task_for_host(reference: str, given: str, dest: str) -> tuple[str, dict]:
    """(the task's name, its default settings) for `reference`, read from its source here; a module not installed here
    takes its name from `given`. TaskFileError otherwise."""
    from core.tasks import TASK_NAMES, add_task
    from core.tasks.catalog import find_task_class, read_task_info
    from core.tasks.user_tasks import NAME_RE, TaskFileError, module_source_file, split_reference

    kind, target, class_name = split_reference(reference)
    path = Path(target).expanduser() if kind == "file" else module_source_file(target)
    if kind == "file" and not (path is not None and path.is_file()):
        raise TaskFileError(reference, f"no such local file to copy to {dest}")
    if path is not None:
        class_name = class_name or find_task_class(path)
        info = read_task_info(path, class_name) if class_name else None
        if info is not None:
            return info.name, dict(info.defaults)
        if kind == "file":
            cls = add_task(reference)
            return cls.name, dict(cls.defaults)
    if isinstance(given, str) and NAME_RE.match(given) and given not in TASK_NAMES:
        return given, {}
    raise TaskFileError(
        reference,
        f"is not installed here, so its task's name is not known: to start it on {dest}, "
        f'name the task too (task = "NAME" in the config)',
    )
