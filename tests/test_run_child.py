"""core.process.run_child, the one way the console runs a child with a time limit: how it ended as one line, and
its whole process group killed at the limit (what it forked included)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core.process import run_child
from tests.waiting import wait_until

pytestmark = pytest.mark.slow  # each starts a Python process


def test_an_exit_code_and_the_last_line_of_stderr_are_one_line():
    child = run_child([sys.executable, "-c", "import os; os._exit(3)"], seconds=60)
    assert child.code == 3 and child.problem("the job") == "the job: it ended with exit code 3"
    said = run_child([sys.executable, "-c", "import sys; print('a', file=sys.stderr); sys.exit('bad input')"])
    assert said.code == 1 and said.problem("the job") == "the job: bad input"
    fine = run_child([sys.executable, "-c", "print(input())"], "hello\n")
    assert fine.code == 0 and fine.out == "hello\n" and fine.problem("the job") == ""


def test_a_child_that_never_ends_is_killed_with_what_it_forked(tmp_path):
    marker = tmp_path / "forked.pid"
    code = (
        f"import os, time\nif os.fork() == 0:\n    open({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)"
    )
    pids: list[int] = []
    child = run_child([sys.executable, "-c", code], seconds=10, started=pids.append)
    assert child.timed_out and child.problem("the job", 10) == "the job did not finish in 10 s: stopped"
    assert len(pids) == 1
    status = Path(f"/proc/{int(marker.read_text())}/status")
    # SIGKILL is sent to the group; the copy's own exit may come a moment later on a busy machine
    wait_until(lambda: not status.exists() or "zombie" in status.read_text(), "the forked copy's end")


def test_a_program_that_cannot_start_is_one_line():
    child = run_child(["/nonexistent/python"], seconds=5)
    assert child.code == 127 and child.problem("the job").startswith("the job: /nonexistent/python: ")
