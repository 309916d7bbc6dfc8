"""How a console process ends (exit_process), and how one stops a child's process group (StopEscalation)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
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
