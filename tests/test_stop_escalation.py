"""core.process.StopEscalation: a stop that interrupts the process group after the grace, then kills it."""

import os
import signal
import subprocess
import sys

import pytest

from core.process import StopEscalation

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name != "posix", reason="process groups and signals")]


def escalate(ignore_sigint: bool, grace: float = 0.05) -> tuple[int, StopEscalation]:
    """Start a child that waits (ignoring SIGINT or not), stop it with `grace`; its exit code."""
    ignore = "signal.signal(signal.SIGINT, signal.SIG_IGN); " if ignore_sigint else ""
    code = f"import signal, time; {ignore}print('ready', flush=True); time.sleep(600)"
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True) as child:
        try:
            assert child.stdout.readline().strip() == b"ready"
            stopping = StopEscalation(child.pid, grace=grace)
            while child.poll() is None and not stopping.killed:
                try:
                    child.wait(stopping.due_in() + 0.01)
                except subprocess.TimeoutExpired:
                    stopping.poll()
            return child.wait(60), stopping
        finally:
            child.kill()


def test_a_child_that_ignores_sigint_is_interrupted_then_killed():
    code, stopping = escalate(ignore_sigint=True)
    assert stopping.interrupted and stopping.killed and code == -signal.SIGKILL
    assert stopping.due_in() == float("inf")


def test_a_child_that_stops_on_sigint_is_never_killed():
    code, stopping = escalate(ignore_sigint=False, grace=2.0)  # time to exit on SIGINT on a busy machine
    assert stopping.interrupted and not stopping.killed and code != -signal.SIGKILL
