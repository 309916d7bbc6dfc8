"""The window's cyclic garbage collections stay small: once the engine is loaded, what exists (torch's, the
engine's and Qt's modules) is frozen out of the collector's reach (app.run.jobs.GuiThreadGarbageCollector
.freeze_loaded), so a full collection on the GUI thread walks only what was made since."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture
def unfrozen():
    """No objects frozen by the test session: what the window freezes is its own doing."""
    gc.unfreeze()
    yield
    gc.freeze()  # the session's freeze (tests/gui/conftest.py), as it was


def test_a_window_with_its_engine_loaded_freezes_the_imported_modules(unfrozen, make_window):
    import torch

    assert gc.get_freeze_count() == 0
    assert any(obj is torch.nn.Module for obj in gc.get_objects())  # walked by every full collection
    window = make_window()
    assert window.engine_ready
    assert gc.get_freeze_count() > 100_000  # torch alone holds hundreds of thousands of tracked objects
    assert not any(obj is torch.nn.Module for obj in gc.get_objects())  # no longer walked


def test_what_the_first_estimate_imports_is_loaded_ahead_and_frozen(qtbot, settings, cpu_devices):
    """The first estimate (or run) imports torch's dynamo and profiler (about 900 modules): a job imports them
    right after the engine, and the window freezes them when it is done, so no full collection walks them."""
    import sys

    from app.main_window import MainWindow

    class Made:  # tracked by the collector, made after the engine's freeze
        pass

    window = MainWindow(settings=settings, devices=cpu_devices, prestart_runs=False)
    qtbot.addWidget(window)
    window.load_engine()
    made = Made()
    assert any(obj is made for obj in gc.get_objects())
    qtbot.waitUntil(lambda: window.engine_preloaded)
    assert {"torch._dynamo", "torch.profiler", "core.engine.trainer"} <= set(sys.modules)
    assert not any(obj is made for obj in gc.get_objects())  # frozen with them
