"""Cyclic garbage is collected on the GUI thread while a window is up (automatic collection, which runs in
whichever thread allocates, could finalize Qt objects from a worker thread and hang), and automatic collection
comes back when the last window closes."""

from __future__ import annotations

import gc
import threading

import pytest


@pytest.mark.own_gc_policy
@pytest.mark.timeout(60)
def test_collection_moves_to_the_gui_thread_while_a_window_is_up(qtbot, make_window):
    assert gc.isenabled()
    window = make_window()
    assert not gc.isenabled()  # no collection in worker threads
    collected = []

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            collected.append(True)

    # Allocations pass generation 0's threshold however many older objects are freed meanwhile (the count is
    # allocations less deallocations, and it starts at 0 once the window has frozen what was loaded).
    for _ in range(3 * gc.get_threshold()[0]):
        Cycle()
    qtbot.waitUntil(lambda: bool(collected), timeout=10_000)  # the window's timer collected them
    window.close()
    assert gc.isenabled()


@pytest.mark.own_gc_policy
@pytest.mark.timeout(60)
def test_garbage_is_collected_on_the_gui_thread_while_a_worker_allocates(qtbot, make_window):
    """The hang this policy prevents: a worker thread that allocates (a job parsing a big JSON file) would run
    the automatic collection itself and finalize Qt objects there. Under the policy the worker's allocations
    collect nothing, and the GUI thread's timer collects the cycle."""
    from PySide6.QtCore import QObject

    window = make_window()
    finalized_on: list[str] = []

    class Holder:
        def __init__(self):
            self.me, self.qobject = self, QObject()  # a Qt wrapper caught in a reference cycle

        def __del__(self):
            finalized_on.append(threading.current_thread().name)

    Holder()

    kept: list = []

    def allocate() -> None:  # passes generation 0's threshold many times, and stays above it until the test ends
        kept.append([[i] for i in range(20 * gc.get_threshold()[0])])

    worker = threading.Thread(target=allocate, name="worker-allocating")
    worker.start()
    worker.join(30)
    assert not finalized_on  # the worker's allocations ran no collection
    qtbot.waitUntil(lambda: bool(finalized_on), timeout=10_000)
    assert finalized_on == [threading.main_thread().name]
    window.close()
