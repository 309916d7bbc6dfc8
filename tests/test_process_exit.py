"""core.process.exit_process: the quick exit every console process ends with keeps what an exit must do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # each test starts a Python


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_exit_runs_atexit_handlers_finalizers_and_flushes_output(tmp_path):
    marker = tmp_path / "finalized"
    done = run_python(f"""
import atexit, sys, weakref
class Held: pass
held = Held()
weakref.finalize(held, lambda: open({str(marker)!r}, "w").write("yes"))
atexit.register(lambda: print("atexit ran", flush=True))
sys.stdout.write("buffered, ")
from core.process import exit_process
exit_process(3)
""")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered, atexit ran\n"
    assert marker.read_text() == "yes"


def test_the_command_line_ends_through_it():
    """`python -m core.cli` returns its command's code with the collector's objects frozen at the exit."""
    done = run_python("""
import atexit, gc, runpy, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
sys.argv = ["core.cli", "tasks"]
runpy.run_module("core.cli", run_name="__main__")
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("frozen at exit: True")
