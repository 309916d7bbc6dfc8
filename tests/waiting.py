"""One way for a test to wait on another process: poll a condition until it holds; fail at once, with the
process's stderr, when a watched process ends first; fail naming what was awaited after a generous limit.
No test asserts how long anything took."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
LIMIT_SECONDS = 600.0  # far above a healthy wait on a busy machine: a hang ends here or at pytest-timeout


def wait_until(condition: Callable[[], T], what: str, *processes, seconds: float = LIMIT_SECONDS) -> T:
    """condition()'s first true value; AssertionError when one of `processes` (Popen or psutil) ends first."""
    end = time.monotonic() + seconds
    while not (value := condition()):
        for process in processes:
            if not running(process):
                raise AssertionError(f"a process ended before {what}: {stderr_of(process)}")
        assert time.monotonic() < end, f"no {what} within {seconds:g} s"
        time.sleep(0.05)
    return value


def logged(out: Path, event: str, count: int = 1) -> bool:
    """Whether the run in `out` has written at least `count` records of `event` to its metrics.jsonl."""
    path = out / "metrics.jsonl"
    return path.exists() and path.read_text(errors="replace").count(f'"{event}"') >= count


def running(process) -> bool:
    return process.poll() is None if isinstance(process, subprocess.Popen) else process.is_running()


def stderr_of(process) -> str:
    if not isinstance(process, subprocess.Popen) or process.stderr is None:
        return f"exit code {getattr(process, 'returncode', '?')}"
    err = process.stderr.read()
    return f"exit code {process.returncode}: {err.decode(errors='replace') if isinstance(err, bytes) else err}"
