"""The suite's own rules (tests/conftest.py), tried on a throwaway test folder: a test that starts a Python
process without the `slow` marker fails, a marked one passes, and a failure is named the moment it happens,
before the next test runs (not only in the summary after the whole suite)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

CASES = """
import subprocess, sys
import pytest

def test_1_starts_python_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.slow
def test_2_starts_python_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_3_fails():
    assert 1 == 2, "one is not two"

def test_4_prints_after_the_failure():
    print("FOURTH TEST RAN")
"""


@pytest.mark.slow
def test_child_processes_need_the_slow_marker_and_failures_are_named_at_once(tmp_path):
    folder = tmp_path / "suite"
    folder.mkdir()
    shutil.copy(TESTS / "conftest.py", folder / "conftest.py")
    (folder / "test_cases.py").write_text(CASES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}  # conftest loads trained_runs
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-o",
            "addopts=--strict-markers",
            "-o",
            "markers=slow",
            str(folder),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "test_1_starts_python_unmarked" in out and "mark it @pytest.mark.slow" in out
    assert "FAILED suite/test_cases.py::test_1_starts_python_unmarked (teardown)" in out
    assert "test_2_starts_python_marked" not in out  # marked: it passes
    live = out.index("FAILED suite/test_cases.py::test_3_fails (call): AssertionError: one is not two")
    assert live < out.index("FOURTH TEST RAN")  # named before the next test ran
    assert "1 failed, 3 passed, 1 error" in out  # test 1 passes its call, then errs at teardown
