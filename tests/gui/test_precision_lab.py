"""The precision lab in the window: Compare precisions (sweep off the GUI thread) and the dtype inspector."""

from __future__ import annotations

import pytest
from gui_helpers import click, find, quick_run, set_field
from PySide6.QtWidgets import QPushButton


@pytest.mark.timeout(120)
def test_compare_fills_fp32_and_bf16_rows_and_trains_with_the_winner(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=30, log_interval=5)
    dialog = window.show_compare()
    qtbot.waitExposed(dialog)
    for mode in ("tf32", "fp16"):
        find(dialog, f"{mode}Check").setChecked(False)
    find(dialog, "sweepStepsEdit").setValue(5)
    find(dialog, "sweepRepeatsEdit").setValue(2)
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=100_000,
                          check_params_cb=lambda running: not running):
        click(qtbot, dialog, "compareRunButton")
        assert find(dialog, "compareStopButton", QPushButton).isEnabled()
    assert dialog.result is not None, dialog.statusLabel.text()
    assert dialog.row_modes() == ["fp32", "bf16"]
    assert all(r.status == "ok" for r in dialog.result.rows), [r.reason for r in dialog.result.rows]
    assert dialog.table.item(0, 6).text() == "1.00×"  # fp32 against itself
    assert len(dialog.throughputChart.values) == 2 and all(v > 0 for v in dialog.throughputChart.values)
    assert dialog.throughputChart.labels[0] == "1.00×"
    assert "Recommended" in dialog.recommendation.text()

    winner = dialog.result.recommended
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000,
                          check_params_cb=lambda running: not running):
        click(qtbot, dialog, "trainWithButton")
        assert find(window, "precisionCombo").currentData() == winner
    assert "completed" in window.statusBarWidget.message.text().lower()


@pytest.mark.timeout(60)
def test_closing_the_window_mid_sweep_joins_its_thread(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = window.show_compare()
    find(dialog, "sweepStepsEdit").setValue(5)
    find(dialog, "sweepRepeatsEdit").setValue(1)
    click(qtbot, dialog, "compareRunButton")
    assert dialog.job.running
    window.close()
    assert not dialog.job.running


@pytest.mark.timeout(60)
def test_inspector_shows_bfloat16_linear_outputs_and_float32_loss_under_bf16(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = window.show_inspector()
    qtbot.waitExposed(dialog)
    set_field(dialog, "inspectPrecisionCombo", "bf16")
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=30_000,
                          check_params_cb=lambda running: not running):
        click(qtbot, dialog, "inspectButton")
    assert dialog.result is not None, dialog.summary.text()
    linear = dialog.find_item("fc1")
    assert linear is not None and linear.text(1) == "Linear"
    assert linear.text(3) == "bfloat16"
    assert linear.text(4) == "float32"  # parameters stay float32 under autocast
    loss = dialog.find_item("task.loss")
    assert loss.text(3) == "float32"
    assert loss.background(0).color().alpha() > 0  # highlighted: autocast kept it in float32
    assert "kept in float32" in dialog.summary.text()
