"""Tune before you train, in the window: the batch-size finder beside the batch-size field fills the form."""

from __future__ import annotations

import pytest
from gui_helpers import click, find, quick_run
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolButton


@pytest.mark.timeout(120)
def test_batch_finder_with_a_small_max_batch_fills_the_batch_size_field(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", batch_size=16)
    qtbot.mouseClick(find(window, "batchFindButton", QToolButton), Qt.MouseButton.LeftButton)
    dialog = window.tools.batchFinderDialog
    assert dialog is not None and dialog.isVisible() and not dialog.isModal()
    assert not find(dialog, "batchFp16Check").isChecked()  # not ticked on the CPU, where it is slow or absent
    find(dialog, "batchMaxEdit").setValue(64)
    find(dialog, "batchStepsEdit").setValue(2)
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=100_000, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "batchFinderRunButton")
    result = dialog.result
    assert result is not None, dialog.statusLabel.text()
    fp32 = result.mode("fp32")
    assert fp32.status == "ok" and fp32.batch == 64 and fp32.capped, fp32
    assert dialog.modeTable.rowCount() == len(result.modes)
    assert dialog.statusLabel.text().startswith("Searched 2 mode(s)")  # fp32 and bf16: the modes that ran
    assert dialog.trialTable.rowCount() == sum(len(m.trials) for m in result.modes) >= 3  # 16, 32, 64 in fp32
    assert dialog.chart.values[0] == 64
    assert "bf16" in dialog.comparison.text() and "fp32" in dialog.comparison.text()
    use = find(dialog, "batchUseButton")
    assert use.isEnabled() and "64" in use.text()
    click(qtbot, dialog, "batchUseButton")
    assert find(window, "batchSizeEdit").number() == 64
    assert window.setupPanel.config().batch_size == 64


@pytest.mark.timeout(90)
def test_closing_the_window_mid_search_stops_it_and_joins_its_thread(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", batch_size=16)
    dialog = window.tools.show_batch_finder()
    find(dialog, "batchStepsEdit").setValue(50)
    with qtbot.waitSignal(dialog.job.progress, timeout=60_000, check_params_cb=lambda p: p.phase == "trial"):
        click(qtbot, dialog, "batchFinderRunButton")
    assert dialog.job.running and not find(dialog, "batchFinderRunButton").isEnabled()
    window.close()
    assert not dialog.job.running
