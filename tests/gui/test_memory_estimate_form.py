"""The run form shows the memory estimate (core.lab.memory_estimate) beside the precision mode, computed on a worker
thread once the settings settle, and again when the batch size or the optimizer changes."""

from __future__ import annotations

from gui_helpers import find, run_form, set_field
from PySide6.QtWidgets import QLabel


def test_the_form_shows_the_estimate_and_follows_the_batch_size(qtbot, tmp_path):
    form = run_form(qtbot)
    label = find(form, "memoryEstimate", QLabel)
    qtbot.waitUntil(lambda: label.text().startswith("≈") and "free on cpu" in label.text(), timeout=60_000)
    first = label.text()
    assert "optimizer state" in label.toolTip() and "activations" in label.toolTip()
    set_field(form, "batchSizeEdit", 512)
    qtbot.waitUntil(lambda: label.text().startswith("≈") and label.text() != first, timeout=60_000)
    form.grab().save("/tmp/form.png")
