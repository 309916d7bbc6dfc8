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


def test_modules_imported_later_are_frozen_at_the_next_full_collection(make_window, monkeypatch, tmp_path):
    """torch imports hundreds of modules lazily (dynamo, sympy, distributed: the first estimate or run): the
    next full collection on the GUI thread freezes them instead of walking them (30-140 ms each time)."""
    import importlib

    window = make_window()
    collector = window._garbage_collector
    name = f"amp_gc_probe_{tmp_path.name.replace('-', '_')}"  # a module new to this process
    (tmp_path / f"{name}.py").write_text("def probe():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module(name).probe  # tracked, not frozen
    assert any(obj is probe for obj in gc.get_objects())
    frozen = gc.get_freeze_count()
    threshold = gc.get_threshold()
    monkeypatch.setattr(gc, "get_count", lambda: (0, 0, threshold[2] + 1))  # a full collection is due
    collector.collect()
    assert gc.get_freeze_count() > frozen and not any(obj is probe for obj in gc.get_objects())
