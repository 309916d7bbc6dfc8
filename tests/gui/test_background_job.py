"""app.run.jobs: a job's worker object is deleted on the GUI thread once its thread has been joined, never in
its own thread as it exits (there the wrapper's clean-up takes the GIL inside ~QObject, which holds Qt's
signal locks: with the GUI thread holding the GIL and wanting one of those locks, both wait for ever)."""

from __future__ import annotations

import threading
import weakref

import pytest
from PySide6.QtCore import Qt

from app.run.jobs import BackgroundJob, GuiThreadGarbageCollector, JobRunner


@pytest.fixture(autouse=True)
def collector_on_the_gui_thread(qtbot):
    """As a window does while it is up: Python's cyclic collector runs on the GUI thread only. Without it, a
    collection that starts in a job's thread can finalize Qt objects there (app.run.jobs says why that must
    not happen): these tests create jobs with no window around them."""
    from PySide6.QtCore import QObject

    owner = QObject()
    collector = GuiThreadGarbageCollector(owner)
    yield
    collector.stop()


@pytest.mark.timeout(60)
def test_a_jobs_worker_is_deleted_on_the_gui_thread_after_its_thread_is_joined(qtbot):
    gui = threading.get_ident()
    deleted_on: list[int] = []
    job = BackgroundJob("testJob")
    job.start(lambda _progress, _control: threading.get_ident())
    job._worker.destroyed.connect(
        lambda *_a: deleted_on.append(threading.get_ident()), Qt.ConnectionType.DirectConnection
    )
    with qtbot.waitSignal(job.runningChanged, timeout=30_000, check_params_cb=lambda running: not running):
        pass
    qtbot.waitUntil(lambda: bool(deleted_on), timeout=10_000)
    assert deleted_on == [gui]
    assert not job.running


@pytest.mark.timeout(60)
def test_many_short_jobs_each_answer_once_and_leave_nothing_running(qtbot):
    runner = JobRunner()
    answers: list[int] = []
    for n in range(20):
        runner.submit(lambda n=n: n * n, answers.append, lambda message, details: answers.append(-1))
    qtbot.waitUntil(lambda: not runner.busy, timeout=30_000)
    assert sorted(answers) == [n * n for n in range(20)]


@pytest.mark.timeout(60)
def test_a_runner_whose_last_reference_goes_while_its_jobs_await_deletion_is_deleted_once(qtbot):
    """The jobs' connections must not hold the runner: else the last one, released inside a job's deferred
    deletion, deleted the runner there, and the runner's destructor deleted that half-destroyed job again."""
    from PySide6.QtCore import QCoreApplication, QEvent

    runner = JobRunner()
    answers: list[int] = []
    destroyed: list[str] = []
    runner.destroyed.connect(lambda *_a: destroyed.append("runner"), Qt.ConnectionType.DirectConnection)
    for n in range(5):
        runner.submit(lambda n=n: n, answers.append, lambda message, details: answers.append(-1))
    held = weakref.ref(runner)
    qtbot.waitUntil(lambda: not held().busy, timeout=30_000)
    del runner  # the jobs' deferred deletions are still pending
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert destroyed == ["runner"]
    assert sorted(answers) == list(range(5))
