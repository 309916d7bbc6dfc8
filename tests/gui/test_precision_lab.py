"""The precision lab in the window: Compare precisions (sweep off the GUI thread) and the dtype inspector, device
tools like the tuning ones: one at a time, never beside a run on the same device."""

from __future__ import annotations

import pytest
from gui_helpers import click, find, quick_run, set_field
from PySide6.QtWidgets import QPushButton

from core.precision_modes import PRECISION_MODES


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_compare_fills_fp32_and_bf16_rows_and_trains_with_the_winner(qtbot, window, tmp_path):
    """One sweep (each mode measured in a process of its own): progress inside a mode, the threads setting, the
    rows, charts and recommendation, then Train with this."""
    quick_run(window, tmp_path / "run", max_steps=30, log_interval=5)
    dialog = window.tools.show_compare()
    qtbot.waitExposed(dialog)
    for mode in PRECISION_MODES:  # fp32 and bf16, with the form's optimizer alone
        find(dialog, f"{mode}Check").setChecked(mode in ("fp32", "bf16"))
    own = window.setupPanel.config().optimizer
    for name, check in dialog.optimizerChecks.items():
        check.setChecked(name == own)
    find(dialog, "sweepStepsEdit").setValue(3)
    find(dialog, "sweepRepeatsEdit").setValue(2)
    threads = find(dialog, "sweepThreadsEdit")
    assert threads.value() == 0 and threads.text() == "auto"
    threads.setValue(1)
    texts, bar = [], []
    dialog.job.progress.connect(
        lambda _p: (texts.append(dialog.statusLabel.text()), bar.append(dialog.progressBar.value()))
    )
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=100_000, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "compareRunButton")
        assert find(dialog, "compareStopButton", QPushButton).isEnabled()
        assert not threads.isEnabled()
    assert dialog.result is not None, dialog.statusLabel.text()
    assert any("fp32: window 2/3, step 6/9" in text for text in texts), texts
    assert bar[-1] == dialog.progressBar.maximum() == 6  # 2 modes of 1 warm-up + 2 timed windows
    assert dialog.result.threads == 1 and dialog.table.item(0, 10).text() == "1"
    assert "1 CPU thread" in dialog.statusLabel.text()
    assert dialog.row_modes() == ["fp32", "bf16"]
    assert all(r.status == "ok" for r in dialog.result.rows), [r.reason for r in dialog.result.rows]
    assert dialog.table.item(0, 6).text() == "1.00×"  # fp32 against itself
    assert len(dialog.throughputChart.values) == 2 and all(v > 0 for v in dialog.throughputChart.values)
    assert dialog.throughputChart.labels[0] == "1.00×"
    assert "Recommended" in dialog.recommendation.text()

    winner = dialog.result.recommended
    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=30_000, check_params_cb=lambda running: not running
    ):
        click(qtbot, dialog, "trainWithButton")
        assert find(window, "precisionCombo").currentData() == winner
    assert "completed" in window.statusBarWidget.message.text().lower()


@pytest.mark.slow  # the sweep may have started its first mode's process before the window closes
@pytest.mark.timeout(60)
def test_closing_the_window_mid_sweep_joins_its_thread(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = window.tools.show_compare()
    find(dialog, "sweepStepsEdit").setValue(5)
    find(dialog, "sweepRepeatsEdit").setValue(1)
    click(qtbot, dialog, "compareRunButton")
    assert dialog.job.running
    window.close()
    assert not dialog.job.running


@pytest.mark.timeout(120)
def test_inspector_shows_bfloat16_linear_outputs_and_float32_loss_under_bf16_and_says_why(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = window.tools.show_inspector()
    qtbot.waitExposed(dialog)
    set_field(dialog, "inspectPrecisionCombo", "bf16")
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=30_000, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "inspectorRunButton")
    assert dialog.result is not None, dialog.statusLabel.text()
    linear = dialog.find_item("fc1")
    assert linear is not None and linear.text(1) == "Linear"
    assert linear.text(3) == "bfloat16"
    assert linear.text(4) == "float32"  # parameters stay float32 under autocast
    loss = dialog.find_item("task.loss")
    assert loss.text(3) == "float32"
    assert loss.background(0).color().alpha() > 0  # highlighted: autocast kept it in float32
    assert "kept in float32" in dialog.statusLabel.text()

    # why float32, and the ops in full
    from app.panels.inspector import OPS_COLUMN, WHY_COLUMN

    assert loss.text(WHY_COLUMN) == "cast to float32, fp32 list"
    assert "cross_entropy" in loss.toolTip(WHY_COLUMN) and "float32 list" in loss.toolTip(WHY_COLUMN)
    assert dialog.find_item("fc1").text(WHY_COLUMN) == ""  # ran in bfloat16: nothing to explain
    # The Ops column is as wide as its text (the tree scrolls sideways), and every op is in its tooltip.
    metrics = dialog.tree.fontMetrics()
    assert dialog.tree.columnWidth(OPS_COLUMN) >= metrics.horizontalAdvance(loss.text(OPS_COLUMN))
    assert "nll_loss_forward float32 (fp32 list)" in loss.toolTip(OPS_COLUMN)
    dialog.tree.setCurrentItem(loss)
    details = dialog.details.toPlainText()
    assert "nll_loss_forward" in details and "float32 list" in details
    assert "autocast op reference" in find(dialog, "inspectorLegend").text()


def _long_compare(window):
    """Compare precisions set to measure for minutes (its Stop ends the measuring process at once)."""
    dialog = window.tools.show_compare()
    for mode in ("tf32", "fp16", "bf16"):
        find(dialog, f"{mode}Check").setChecked(False)
    find(dialog, "sweepStepsEdit").setValue(10_000)
    find(dialog, "sweepRepeatsEdit").setValue(50)
    return dialog


@pytest.mark.timeout(90)
def test_compare_refuses_the_device_a_run_is_training_on(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=100_000, epochs=1000, separate_process=False)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "startButton")
    dialog = _long_compare(window)
    click(qtbot, dialog, "compareRunButton")
    assert not dialog.job.running
    assert "training run is using cpu" in dialog.statusLabel.text()
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        window.stop_run()


@pytest.mark.slow  # Compare measures each mode in a process of its own
@pytest.mark.timeout(90)
def test_while_compare_measures_the_start_button_and_the_other_tools_wait(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = _long_compare(window)
    click(qtbot, dialog, "compareRunButton")
    assert dialog.job.running
    assert not window.startButton.isEnabled() and "Compare precisions" in window.startButton.toolTip()
    finder = window.tools.show_lr_finder()
    assert not finder.start() and "Compare precisions is measuring" in finder.statusLabel.text()
    inspector = window.tools.show_inspector()
    click(qtbot, inspector, "inspectorRunButton")
    assert not inspector.job.running and "Compare precisions is measuring" in inspector.statusLabel.text()
    click(qtbot, dialog, "compareStopButton")
    qtbot.waitUntil(lambda: not dialog.job.running, timeout=30_000)
    assert window.startButton.isEnabled()


@pytest.mark.timeout(90)
def test_compare_waits_for_another_tool_on_the_device(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    finder = window.tools.show_lr_finder()
    find(finder, "lrStepsEdit").setValue(100_000)
    click(qtbot, finder, "lrFinderRunButton")
    dialog = _long_compare(window)
    click(qtbot, dialog, "compareRunButton")
    assert not dialog.job.running and "LR finder is measuring" in dialog.statusLabel.text()
    finder.stop()
    qtbot.waitUntil(lambda: not finder.job.running, timeout=30_000)


@pytest.mark.timeout(60)
def test_the_window_waits_for_the_inspector_while_it_inspects(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = window.tools.show_inspector()
    assert not find(dialog, "inspectorStopButton").isVisible()  # one pass: nothing to interrupt
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=30_000, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "inspectorRunButton")
        assert not window.startButton.isEnabled() and "Dtype inspector" in window.startButton.toolTip()
        finder = window.tools.show_lr_finder()
        assert not finder.start() and "Dtype inspector is measuring" in finder.statusLabel.text()
    assert dialog.result is not None, dialog.statusLabel.text()
    assert window.startButton.isEnabled()


@pytest.mark.parametrize(
    ("precision", "device", "expected"),
    [
        ("auto", "ampere", "bf16"),  # bf16 where the device has it
        ("fp32", "ampere", "bf16"),  # fp32 and tf32 have no autocast to inspect
        ("tf32", "ampere", "bf16"),
        ("fp16", "ampere", "fp16"),  # the form's own mixed mode
        ("auto", "t4", "fp16"),  # CUDA without bf16
        ("bf16", "cpu-bf16", "bf16"),
        ("auto", "cpu-bf16", "bf16"),
        ("auto", "cpu-fp32", "fp32"),  # nothing mixed to look at
    ],
)
def test_the_inspector_opens_at_a_mixed_mode(qtbot, precision, device, expected):
    import dataclasses

    from app.panels.inspector import InspectorDialog
    from core.config import RunConfig
    from core.devices import cpu_info
    from tests.test_devices_precision import FAKE_AMPERE, FAKE_GPU

    cpu = cpu_info()
    devices = {
        "ampere": [cpu, FAKE_AMPERE],
        "t4": [cpu, FAKE_GPU],
        "cpu-bf16": [dataclasses.replace(cpu, precisions=("fp32", "bf16"))],
        "cpu-fp32": [dataclasses.replace(cpu, precisions=("fp32",))],
    }[device]
    config = RunConfig.for_task("tiny", device=devices[-1].id, precision=precision)
    dialog = InspectorDialog(lambda: config, lambda: devices)
    qtbot.addWidget(dialog)
    dialog.show()
    assert find(dialog, "inspectPrecisionCombo").currentData() == expected


@pytest.mark.timeout(60)
def test_the_inspector_from_the_window_opens_at_the_devices_mixed_mode(qtbot, window, tmp_path):
    from core.devices import cpu_info
    from core.precision_modes import best_mixed_mode

    quick_run(window, tmp_path / "run")  # the form's precision: auto
    dialog = window.tools.show_inspector()
    assert find(dialog, "inspectPrecisionCombo").currentData() == best_mixed_mode(cpu_info().precisions)
