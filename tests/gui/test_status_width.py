"""Long messages never widen the window: status texts are cut with "…" to fit, the full text in a tooltip."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from gui_helpers import UI_WAIT_MS
from PySide6.QtWidgets import QApplication

from core.engine.events import RunStarted

LONG = "Could not start: " + "the engine had a great deal to say about this run " * 40  # about 2,000 characters


@pytest.mark.timeout(60)
def test_a_long_message_neither_widens_the_window_nor_loses_its_text(qtbot, window):
    window.resize(1400, 800)
    qtbot.waitUntil(lambda: window.width() == 1400, timeout=UI_WAIT_MS)
    minimum = window.minimumSizeHint().width()
    assert minimum <= 1240  # the window fits a 1280 px wide screen with its frame
    assert len(LONG) >= 2000

    window.show_error(LONG, details="Traceback: details")
    QApplication.processEvents()
    label = window.statusBarWidget.message
    assert window.minimumSizeHint().width() == minimum
    assert window.minimumWidth() <= minimum
    assert window.width() == 1400
    assert label.text() == " ".join(LONG.split())
    assert label.toolTip() == label.text()
    shown = label.displayed_text()
    assert shown.endswith("…") and len(shown) < len(LONG)
    assert label.width() < window.width()
    if os.environ.get("AMP_CONSOLE_SCREENSHOTS"):
        window.grab().save(os.path.join(os.environ["AMP_CONSOLE_SCREENSHOTS"], "elided-status.png"))

    window.show_message("Ready.")  # short again: the window is as it was
    QApplication.processEvents()
    assert window.minimumSizeHint().width() == minimum
    assert label.displayed_text() == "Ready." and label.toolTip() == "Ready."


@pytest.mark.timeout(60)
def test_long_device_names_from_the_engine_are_cut_to_fit(qtbot, window):
    window.resize(1400, 800)
    qtbot.waitUntil(lambda: window.width() == 1400, timeout=UI_WAIT_MS)
    minimum = window.minimumSizeHint().width()
    name = "Accelerator with a very long marketing name " * 10
    window.statusBarWidget.set_device(SimpleNamespace(id="cuda:0", name=name))
    window.statusBarWidget.handle_event(
        RunStarted(
            task="tiny",
            device="cuda:0",
            device_name=name,
            precision="bf16",
            autocast_dtype="bfloat16 " * 20,
            param_dtype="float32",
            scaler=False,
            param_count=210,
            total_steps=10**9,
            steps_per_epoch=1,
            start_step=0,
            config={},
        )
    )
    QApplication.processEvents()
    assert window.minimumSizeHint().width() == minimum
    assert window.width() == 1400
    device = window.statusBarWidget.device
    assert device.toolTip() == device.text() and name.split()[0] in device.text()
    assert device.displayed_text().endswith("…")
