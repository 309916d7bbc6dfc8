"""A user's task described by a child process, so the window never runs a task file's code itself.

`python -m core.tasks.describe REFERENCE` (run by core.process.run_child) imports the task (running its code) and
prints one JSON line on its stdout (the task's own prints go to stderr): the task's attributes, its parameter count
at its defaults and which optional parts it has, or {"error": one line}. The window kills the group at
`import_limit()` seconds (IMPORT_LIMIT_ENV) and when it closes; `outcome` makes of how the child ended the answer
or one line, `stand_in` of the answer a class the window lists, checks settings and counts with.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import asdict

IMPORT_LIMIT_ENV = "AMP_CONSOLE_TASK_IMPORT_SECONDS"
# Optional parts a task may define; the answer names those it does (serving: serving_class() is not None).
CAPABILITIES = ("evaluate_parts", "report", "synthetic_table", "settled_options", "configure_optimizers")


def import_limit() -> float:
    """Seconds a task's import may take in its child process (60 unless IMPORT_LIMIT_ENV says)."""
    try:
        return max(float(os.environ.get(IMPORT_LIMIT_ENV, "")), 0.1)
    except ValueError:
        return 60.0


def command(reference: str) -> list[str]:
    return [sys.executable, "-m", "core.tasks.describe", reference]


def describe(reference: str) -> dict:
    """Load the task `reference` names (its code runs) and say what the window needs of it."""
    from core.tasks import class_info
    from core.tasks.base import Task
    from core.tasks.user_tasks import load_task

    cls = load_task(reference)
    try:
        count = cls().parameter_count()
    except Exception:  # the form says so; training reports why
        count = None
    parts = [n for n in CAPABILITIES if any(n in vars(k) for k in cls.__mro__[: cls.__mro__.index(Task)])]
    return asdict(class_info(cls)) | {
        "class_name": cls.__name__,
        "parameter_count": count,
        "capabilities": parts + (["serving"] if cls.serving_class() is not None else []),
    }


def outcome(reference: str, child) -> dict | str:
    """The answer of the child (a core.process.Child), or one line naming `reference` and what happened."""
    if child.timed_out:
        return f"{reference}: its import did not finish in {import_limit():g} s: stopped ({IMPORT_LIMIT_ENV} sets it)"
    try:
        answer = json.loads(child.out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("name"), str):
        return answer
    if isinstance(answer, dict) and "error" in answer:
        return str(answer["error"])
    how = "it was killed by a signal" if child.code is None else f"it ended the process with exit code {child.code}"
    return f"{reference}: importing it did not answer: {how}"


def stand_in(answer: dict, reference: str) -> type:
    """A class with the task's attributes and option checks, for the window: no code of the task's runs. Building
    one for work (core.tasks.create_task) or serving it loads the real class (`real`)."""
    from core.errors import ConfigError
    from core.tasks.options import TASK_ATTRIBUTES, TaskOption, checked_options, option_errors

    options = tuple(TaskOption(**o | {"choices": o["choices"] and tuple(o["choices"])}) for o in answer["options"])
    defaults = {o.name: o.default for o in options}

    class Described:
        name: str
        options: tuple[TaskOption, ...]
        capabilities: frozenset[str]

        def __init__(self, options: dict | None = None):
            self.opts = checked_options(self, options)

        @classmethod
        def option_errors(cls, values: dict) -> dict[str, str]:
            return option_errors(cls.name, cls.options, values)

        @classmethod
        def real(cls) -> type:
            from core.tasks.user_tasks import load_task

            return load_task(reference)

        @classmethod
        def serving_class(cls):
            return cls.real().serving_class() if "serving" in cls.capabilities else None

        def parameter_count(self, info: dict | None = None) -> int:
            if self.opts != defaults or answer.get("parameter_count") is None:
                raise ConfigError("task_options", "counted when it trains (its code runs in a child process only)")
            return answer["parameter_count"]

    for name in TASK_ATTRIBUTES:
        setattr(Described, name, answer[name])
    Described.options, Described.capabilities = options, frozenset(answer["capabilities"])
    Described.__name__ = answer["class_name"]
    return Described


def main(argv: list[str]) -> None:
    if hasattr(signal, "alarm"):  # run_child leads it in a group the window kills; it ends itself should the window go
        signal.alarm(int(import_limit()) + 5)
        import resource  # a task file that reads without end (/dev/zero) stops at 4 GiB, not the machine's memory

        resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # the task's prints go to stderr: stdout carries the answer only
    from core.errors import AmpConsoleError
    from core.text import first_line

    try:
        answer = describe(argv[0])
    except AmpConsoleError as exc:
        answer = {"error": str(exc)}
    except BaseException as exc:  # SystemExit at import included
        answer = {"error": f"{argv[0]}: importing it raised {type(exc).__name__}: {first_line(exc)}"}
    os.write(answer_fd, (json.dumps(answer) + "\n").encode())
    os._exit(0)  # not waiting for threads the task's code may have started


if __name__ == "__main__":
    main(sys.argv[1:])
