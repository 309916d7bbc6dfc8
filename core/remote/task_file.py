"""A user's task on a host: the task file travels with the run (core.tasks.user_tasks names the references).

A run started on a host whose config names a task file (`task_file = "path/my_task.py:MyTask"`) carries that
file in its start request, over the ssh connection the start uses; the host's agent writes it into the new run's
folder (`<run>/task/my_task.py`) and the run is given that copy (`--task`-style: its config's task_file is the
path on the host, recorded in its run.json). Only the one file is sent: modules it imports must be on the host.
A `package.module:MyTask` reference is passed as it is: the module must be installed on the host.

    task_payload(reference, dest) -> (payload or None, note)   the client side: the file's text, or a note
    place_task_file(folder, payload) -> reference              the host side: the copy in the run folder
    task_for_host(reference, given, dest) -> (name, defaults)  the task's name, read from its source here
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
    """What a start request carries for the task `reference` names: ({"name", "class", "text", "sha256"}, a
    note for the user) for a task file here, (None, a note) for a module's class (passed as it is). ConfigError
    (one line) when the file cannot be read here."""
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
    """Write the task file a start request carries into `folder`/task/ and return the reference the run is
    given (its path there, with the class). ValueError (one line) for a payload that is not a task file or a
    copy that cannot be written."""
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
    """(the task's name, its default settings) for a run of the task `reference` names started on `dest`, read
    from its source here (nothing of it runs); a task file whose attributes are not literals is loaded here to
    know them. A module not installed here takes its name from `given` (the config's `task`). TaskFileError
    (one line) otherwise."""
    from core.tasks import TASK_NAMES, add_task
    from core.tasks.catalog import find_task_class, read_task_info
    from core.tasks.user_tasks import NAME_RE, TaskFileError, module_source_file, split_reference

    kind, target, class_name = split_reference(reference)
    path = Path(target).expanduser() if kind == "file" else module_source_file(target)
    if kind == "file" and not path.is_file():
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
