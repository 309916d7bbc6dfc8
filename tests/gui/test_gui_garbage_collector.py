"""Cyclic garbage is collected on the GUI thread while a window is up (automatic collection, which runs in
whichever thread allocates, could finalize Qt objects from a worker thread and hang), and automatic collection
comes back when the last window closes."""

from __future__ import annotations

import gc

import pytest


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

    for _ in range(gc.get_threshold()[0] + 1):  # enough allocations to pass generation 0's threshold
        Cycle()
    qtbot.waitUntil(lambda: bool(collected), timeout=10_000)  # the window's timer collected them
    window.close()
    assert gc.isenabled()
