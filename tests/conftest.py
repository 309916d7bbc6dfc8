"""Shared fixtures for engine tests (no Qt here: GUI fixtures live in tests/gui/conftest.py)."""

from __future__ import annotations

import atexit
import faulthandler
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
from task_registry import restored_task_registry

from core.config import RunConfig
from core.engine.events import Event
from core.engine.run_record import RUNS_DIR_ENV

pytest_plugins = ["trained_runs"]  # the session's shared trained runs (tests/trained_runs.py)

# CLI tables are laid out for the terminal's COLUMNS, or 100 columns when piped: tests see the piped layout in
# every process, whatever the developer's terminal (pytest-xdist's workers get COLUMNS=80 from their launcher).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
# Nothing a test starts writes under the user's own runs root, session fixtures included: each test gets a root
# of its own (runs_root_in_tmp); this one is for what runs before that fixture.
os.environ[RUNS_DIR_ENV] = tempfile.mkdtemp(prefix="amp-console-tests-")
atexit.register(shutil.rmtree, os.environ[RUNS_DIR_ENV], ignore_errors=True)


class Recorder:
    """A sink that keeps every event, with helpers to pick them by type."""

    def __init__(self):
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        """The events of class `kind` (`recorder.of(StepMetrics)`), in order."""
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture(autouse=True)
def one_thread_by_default(request, monkeypatch):
    """One intra-op thread per test process, and for the processes a test starts (OMP_NUM_THREADS, which the
    trainer's automatic choice keeps): on 2 cores shared with other jobs, OpenMP threads that wait for each
    other at every op make small models several times slower, and no result depends on the thread count.
    Tests marked `default_threads` see the machine's own settings."""
    if request.node.get_closest_marker("default_threads"):
        yield
        return
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class LiveFailures:
    """Names a failure the moment it happens, not only in the summary after the whole suite. Registered in
    the controlling process only: under xdist it gets every worker's reports (the workers' output is hidden)."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        if not report.failed or hasattr(report, "wasxfail"):
            return
        crash = getattr(report.longrepr, "reprcrash", None)
        reason = crash.message.splitlines()[0] if crash is not None and crash.message else "see the summary"
        line = f"FAILED {report.nodeid} ({report.when}): {reason}"
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            print(line, flush=True)
            return
        if getattr(terminal._tw, "width_of_current_line", 1):  # after the progress dots of -q
            terminal.write("\n")
        terminal.write_line(line, red=True, bold=True)


@pytest.fixture(autouse=True)
def child_processes_are_slow(request, monkeypatch):
    """A test that starts a Python process (the CLI, a training child, torchrun) must be marked `slow`:
    `make test-fast` leaves those out, so this keeps the marker true as tests change."""
    started: list[str] = []
    real_init = subprocess.Popen.__init__

    def recording_init(self, args, *rest, **kwargs):
        command = [args] if isinstance(args, (str, bytes)) else list(args)
        if command and str(command[0]) == sys.executable:
            started.append(" ".join(str(part) for part in command[:4]))
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", recording_init)
    request.node.started_processes = started
    yield
    if started and not request.node.get_closest_marker("slow"):
        pytest.fail(
            f"the test started {len(started)} Python process(es) ({started[0]} ...): mark it @pytest.mark.slow",
            pytrace=False,
        )


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # not an xdist worker
        config.pluginmanager.register(LiveFailures(config), "live-failures")
    global _WATCHDOG_OUT
    _WATCHDOG_OUT = _real_stderr(config)


_WATCHDOG_OUT = None  # where the watchdog writes: set in pytest_configure


def pytest_unconfigure(config):
    global _WATCHDOG_OUT
    faulthandler.cancel_dump_traceback_later()
    if _WATCHDOG_OUT is not None and _WATCHDOG_OUT is not sys.__stderr__:
        _WATCHDOG_OUT.close()
    _WATCHDOG_OUT = None


def _real_stderr(config):
    """The process's own stderr, not the file that pytest's fd capture puts in its place while a test runs:
    what is written there during a test is lost if the process ends, and under xdist only the worker's
    own stderr reaches the controller's terminal. A copy of the descriptor pytest saved when it started
    capturing (no public API names it), or sys.__stderr__ without capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    saved = getattr(getattr(getattr(capture, "_global_capturing", None), "err", None), "targetfd_save", None)
    if isinstance(saved, int):
        try:
            return os.fdopen(os.dup(saved), "w", buffering=1)
        except OSError:
            pass
    return sys.__stderr__


@pytest.fixture(autouse=True)
def runs_root_in_tmp(tmp_path_factory, monkeypatch):
    """A run with no output folder goes under the runs root: in tests, a temporary folder, never the user's
    data folder (subprocesses inherit it through the environment)."""
    root = tmp_path_factory.mktemp("runs-root")
    monkeypatch.setenv(RUNS_DIR_ENV, str(root))
    return root


@pytest.fixture(autouse=True)
def restored_tasks():
    """Every test starts and ends with the tasks the process had: the task registry is one per process, and a
    user task one test loads is not left to the next."""
    with restored_task_registry():
        yield


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def tiny_config(tmp_path):
    """A fast tiny-task config writing into a temporary folder."""

    def make(**overrides) -> RunConfig:
        values = {"device": "cpu", "precision": "fp32", "out_dir": str(tmp_path / "run"), "log_interval": 5}
        values.update(overrides)
        return RunConfig.for_task("tiny", **values)

    return make


WATCHDOG_GRACE_S = 60  # after pytest-timeout's own limit


def item_timeout(item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        if value is not None:
            return float(value)
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The last resort behind pytest-timeout. Its signal method fails a test that overruns as an ordinary,
    named failure, but only once the main thread runs Python again (and inside a Qt slot pytest-qt catches
    it): a test stuck in C code, or a process deadlocked with the GIL held (a thread holding it waits for a
    lock that another thread holds while it waits for the GIL), would never end and CI would stall for hours.
    faulthandler's watchdog is a C thread: past the limit plus a grace it prints every thread's stack to the
    process's real stderr and ends the process (xdist names the test, starts a new worker, and the suite goes
    on, red)."""
    limit = item_timeout(item)
    if limit > 0:
        faulthandler.dump_traceback_later(limit + WATCHDOG_GRACE_S, exit=True, file=_WATCHDOG_OUT or sys.__stderr__)
    try:
        yield
    finally:
        if limit > 0:
            faulthandler.cancel_dump_traceback_later()
