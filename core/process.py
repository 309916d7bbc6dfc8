"""How a console process ends (exit_process), how one stops a child's process group (StopEscalation), and the one
way to run a child with a time limit (run_child)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

# After a stop request: this long to finish the step and write the checkpoint, then SIGINT to the process
# group (every rank stops on it with a checkpoint); after as long again, SIGKILL.
STOP_GRACE_SECONDS = 30.0
POSIX = os.name == "posix"


def exit_process(code: int | None) -> NoReturn:
    """`sys.exit(code)` without the interpreter's last full collections over every object alive (torch's
    included): what exists is frozen first. atexit handlers, flushing and finalizers run as usual."""
    gc.freeze()
    sys.exit(code)


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group `pid` leads (started with start_new_session). Where there are no
    groups: SIGINT terminates the process, SIGKILL kills its children and then it. A gone process is fine."""
    if pid <= 0:
        return
    if POSIX:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        return
    import psutil

    try:
        process = psutil.Process(pid)
        if sig == signal.SIGINT:
            process.terminate()
            return
        for child in process.children(recursive=True):
            child.kill()
        process.kill()
    except psutil.Error:
        pass


class StopEscalation:
    """A stop that escalates: `poll()` sends SIGINT to the group once `grace` seconds have passed since the
    stop was asked, and SIGKILL after as long again. `due_in()` says when to poll next (for a timer)."""

    def __init__(self, pid: int, grace: float = STOP_GRACE_SECONDS):
        self.pid, self.grace = pid, grace
        self.asked_at = time.monotonic()
        self.interrupted = self.killed = False

    def poll(self) -> None:
        elapsed = time.monotonic() - self.asked_at
        if not self.interrupted and elapsed >= self.grace:
            self.interrupted = True
            signal_group(self.pid, signal.SIGINT)
        if not self.killed and elapsed >= 2 * self.grace:
            self.killed = True
            signal_group(self.pid, getattr(signal, "SIGKILL", signal.SIGTERM))

    def due_in(self) -> float:
        """Seconds until the next escalation (0 when it is due; inf when nothing is left to send)."""
        if self.killed:
            return float("inf")
        target = self.grace * (2 if self.interrupted else 1)
        return max(0.0, target - (time.monotonic() - self.asked_at))


@dataclass(frozen=True)
class Child:
    """How a child run by run_child ended: its exit code (None: killed by a signal), its outputs, whether the time
    limit stopped it."""

    code: int | None
    out: str
    err: str
    timed_out: bool = False

    def problem(self, what: str, limit: float = 0.0) -> str:
        """'' when it exited 0; else one line: `what` and how it ended (its stderr's last line where it said one)."""
        if self.timed_out:
            return f"{what} did not finish in {limit:g} s: stopped"
        if self.code == 0:
            return ""
        lines = [line for line in self.err.splitlines() if line.strip() and not line.startswith("USDT")]
        how = "it was killed by a signal" if self.code is None else f"it ended with exit code {self.code}"
        return f"{what}: {lines[-1].strip()}" if lines else f"{what}: {how}"


def child_environment() -> dict[str, str]:
    """This process's environment, with its import path: a child imports what this process can."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(entry for entry in sys.path if entry)}


def run_child(
    argv: list[str], stdin: str = "", seconds: float = 60.0, started: Callable[[int], None] | None = None
) -> Child:
    """Run `argv` as the leader of a process group of its own, `stdin` its input; its outputs go to files (a process
    it forked holds no pipe open past its exit). At `seconds`, and whenever it ends, its whole group is killed.
    `started(pid)` is called once it runs (another thread may signal_group it). A failed start is exit code 127."""
    import subprocess
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                text=True,
                start_new_session=True,
                env=child_environment(),
            )
        except OSError as exc:
            return Child(127, "", f"{argv[0]}: {exc.strerror or exc}")
        if started is not None:
            started(child.pid)
        timed_out = False
        try:
            child.communicate(stdin, timeout=seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
        except OSError:  # its stdin closed early (it exited before reading): how it ended says why
            pass
        finally:
            signal_group(child.pid, getattr(signal, "SIGKILL", signal.SIGTERM))  # what it started included
            child.wait()
        out.seek(0)
        err.seek(0)
        code = child.returncode
        return Child(None if code < 0 else code, out.read(), err.read(), timed_out)
