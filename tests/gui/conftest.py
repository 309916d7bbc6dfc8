"""GUI test setup: offscreen Qt, throwaway QSettings, and no QThread may outlive a test."""

from __future__ import annotations

import os

# Before anything imports Qt. CI's xvfb smoke run sets QT_QPA_PLATFORM=xcb itself.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import weakref

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QProcess, QSettings, QThread


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path_factory):
    """Point every QSettings() at a temporary folder: tests never read or write the user's settings."""
    folder = tmp_path_factory.mktemp("qsettings")
    QCoreApplication.setOrganizationName("AMP Console Tests")
    QCoreApplication.setApplicationName("amp-console-tests")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.SystemScope, str(folder))
    yield folder


@pytest.fixture(scope="session", autouse=True)
def imports_frozen_for_the_collector():
    """The modules every GUI test imports (torch, the window, pyqtgraph) moved out of the collector's reach
    (gc.freeze) once: a full collection at each test's end then walks only what the tests made, not torch's
    millions of objects (about 0.4 s a test otherwise). Frozen objects are live modules and their data."""
    import gc

    import pyqtgraph  # noqa: F401
    import torch  # noqa: F401

    import app.main_window  # noqa: F401

    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def garbage_collected_on_the_gui_thread(request, qapp):
    """Every GUI test runs under the window's garbage policy (app.run.jobs.GuiThreadGarbageCollector), not
    only those that open a MainWindow: a dialog or panel tested alone runs its jobs on worker threads too, and
    an automatic collection there that finalizes an earlier test's Qt objects deadlocks the process (the
    worker holds a Qt mutex and waits for the GIL the GUI thread holds while it waits for that mutex). After
    it, no window of the test may still be open: one keeps task files out of the process (the next test's)."""
    from core.tasks import user_tasks

    if request.node.get_closest_marker("own_gc_policy"):
        yield
    else:
        from app.run.jobs import GuiThreadGarbageCollector

        collector = GuiThreadGarbageCollector(qapp, interval_ms=250)
        yield
        collector.stop()  # collects on this thread, then automatic collection is back for the engine tests
    # qtbot has closed the test's windows: none may still keep task files out of this process (the next test's)
    open_windows = len(user_tasks._WINDOWS)
    user_tasks._WINDOWS.clear()
    assert not open_windows, "a window of this test was never closed"


# The least time any qtbot wait allows, whatever the test asks. The waits are conditions (a signal, a widget's
# state): they return as soon as it holds, so a long limit costs nothing on an idle machine, and a busy one (load
# 12 on 2 cores makes a 5 s wait for a job or a repaint fail by chance) gets the time it needs. pytest-timeout and
# the watchdog (tests/conftest.py) still end a test that really hangs.
QTBOT_WAIT_FLOOR_MS = 60_000


@pytest.fixture(autouse=True)
def qtbot_waits_tolerate_a_busy_machine(monkeypatch):
    from pytestqt.qtbot import QtBot

    for name in ("waitUntil", "waitSignal", "waitSignals", "waitExposed", "waitActive", "waitCallback"):
        original = getattr(QtBot, name)

        def patient(self, *args, _original=original, **kwargs):
            timeout = kwargs.get("timeout", 5000)
            if timeout is not None and timeout > 0:  # None or -1: no limit, kept
                kwargs["timeout"] = max(timeout, QTBOT_WAIT_FLOOR_MS)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(QtBot, name, patient)


@pytest.fixture(autouse=True)
def no_leaked_qthreads(monkeypatch):
    """Fail any test that leaves a QThread running (after pytest-qt has closed its widgets)."""
    started: list[weakref.ref] = []
    original_start = QThread.start

    def recording_start(self, *args, **kwargs):
        started.append(weakref.ref(self))
        return original_start(self, *args, **kwargs)

    monkeypatch.setattr(QThread, "start", recording_start)
    yield
    leaked = []
    for ref in started:
        thread = ref()
        if thread is not None and shiboken6.isValid(thread) and thread.isRunning():
            leaked.append(thread.objectName() or repr(thread))
            thread.quit()
            # A job blocked on what the failed test never released usually ends on its own timeout: wait for
            # it, since Qt aborts the whole process when its parent's deletion destroys a running QThread.
            if not thread.wait(60_000):
                thread.setParent(None)
                _STILL_RUNNING.append(thread)
    assert not leaked, f"QThread(s) still running after the test: {leaked}"


# QThreads a failed test left running past that wait: kept here, without a parent, so that no later test's
# clean-up destroys them (and the process with them); only the test that left them fails.
_STILL_RUNNING: list = []


@pytest.fixture(autouse=True)
def qprocesses_are_slow(request, monkeypatch):
    """The window's training processes (QProcess) count as child processes: tests/conftest.py's
    child_processes_are_slow fails a test that starts one without the `slow` marker."""
    started = getattr(request.node, "started_processes", None)
    if started is None:
        yield
        return
    original_start = QProcess.start

    def recording_start(self, *args, **kwargs):
        started.append(" ".join(str(a) for a in args[:1]) or self.program())
        return original_start(self, *args, **kwargs)

    monkeypatch.setattr(QProcess, "start", recording_start)
    yield


@pytest.fixture
def settings(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def cpu_devices():
    from core.devices import cpu_info

    return [cpu_info()]


@pytest.fixture
def make_window(qtbot, settings, cpu_devices):
    """Build a MainWindow with the engine loaded (synchronously) and injected devices."""
    from app.main_window import MainWindow

    def make(devices=None, settings_store=None, prestart_runs=False):
        # No spare training process unless a test asks: each would import torch alongside the test's own run.
        window = MainWindow(
            settings=settings_store or settings, devices=devices or cpu_devices, prestart_runs=prestart_runs
        )
        qtbot.addWidget(window)
        window.load_engine()
        window.show()
        qtbot.waitExposed(window)
        qtbot.waitUntil(lambda: window.engine_preloaded)  # and frozen: garbage made before then is pinned
        return window

    return make


@pytest.fixture
def window(make_window):
    return make_window()
