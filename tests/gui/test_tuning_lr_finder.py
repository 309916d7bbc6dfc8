"""Tune before you train, in the window: the LR finder beside the learning-rate field fills the form."""

from __future__ import annotations

import math

import pytest
from gui_helpers import click, find, quick_run
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QToolButton


def _finish(qtbot, dialog, timeout=90_000):
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=timeout, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "lrFinderRunButton")
    assert dialog.result is not None, dialog.statusLabel.text()


@pytest.mark.timeout(120)
def test_lr_finder_suggests_picks_on_click_and_fills_the_lr_field(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    qtbot.mouseClick(find(window, "lrFindButton", QToolButton), Qt.MouseButton.LeftButton)
    dialog = window.tools.lrFinderDialog
    assert dialog is not None and dialog.isVisible() and not dialog.isModal()
    assert "tiny" in dialog.setting.text()
    dialog.startLrEdit.setValue(1e-5)
    find(dialog, "lrStepsEdit").setValue(30)
    _finish(qtbot, dialog)
    result = dialog.result
    assert result.task == "tiny" and result.device == "cpu" and len(result.lrs) >= 5
    suggestion = result.suggestion
    assert suggestion.lr is not None and dialog.pick == suggestion.lr
    assert "Suggested" in dialog.explanation.text() and "valley" in dialog.explanation.text()
    xs, ys = dialog.suggestionMarker.getData()
    assert len(xs) == 1 and ys[0] == pytest.approx(suggestion.loss)

    # Another method: recomputed from the curve, not rerun.
    dialog.methodCombo.setCurrentIndex(dialog.methodCombo.findData("steepest"))
    assert dialog.result is result and "steepest" in dialog.explanation.text()
    dialog.methodCombo.setCurrentIndex(dialog.methodCombo.findData("valley"))

    # A click on the plot picks the nearest point of the curve: at the range's first decade.
    target = result.lrs[len(result.lrs) // 5]
    view = dialog.plot.getPlotItem().vb
    scene = view.mapViewToScene(QPointF(math.log10(target), suggestion.loss))
    qtbot.mouseClick(dialog.plot.viewport(), Qt.MouseButton.LeftButton, pos=dialog.plot.mapFromScene(scene))
    assert dialog.pick is not None and dialog.pick != suggestion.lr
    assert abs(math.log10(dialog.pick) - math.log10(target)) < 0.3, (dialog.pick, target)
    assert "your pick" in dialog.pickLabel.text()
    assert dialog.pickMarker.getData()[0][0] == pytest.approx(math.log10(dialog.pick))  # the log axis holds log10
    # ...and the pick method does the same for a plot coordinate (log10 of the lr).
    picked = dialog.pick_at(math.log10(result.lrs[-3]))
    assert picked == result.lrs[-3]

    changed = []
    window.setupPanel.changed.connect(lambda: changed.append(True))
    click(qtbot, dialog, "lrUseButton")
    lr_edit = find(window, "lrEdit")
    assert lr_edit.number() == pytest.approx(float(f"{picked:.3g}"))
    assert window.setupPanel.config().lr == pytest.approx(float(f"{picked:.3g}"))
    assert changed, "filling the field marks the form changed, as typing does"

    # Back to the suggestion, and use it.
    click(qtbot, dialog, "lrResetPickButton")
    assert dialog.pick == suggestion.lr
    click(qtbot, dialog, "lrUseButton")
    assert lr_edit.number() == pytest.approx(float(f"{suggestion.lr:.3g}"))


@pytest.mark.timeout(90)
def test_closing_the_lr_finder_mid_test_stops_and_joins_its_thread(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = window.tools.show_lr_finder()
    find(dialog, "lrStepsEdit").setValue(100_000)
    with qtbot.waitSignal(dialog.job.progress, timeout=60_000, check_params_cb=lambda p: p.phase == "step"):
        click(qtbot, dialog, "lrFinderRunButton")
    assert dialog.job.running
    assert not window.startButton.isEnabled() and "LR finder" in window.startButton.toolTip()
    dialog.close()
    assert not dialog.job.running
    assert window.startButton.isEnabled()


@pytest.mark.timeout(90)
def test_a_tool_refuses_the_device_a_run_is_training_on(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=100_000, epochs=1000, separate_process=False)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "startButton")
    assert not find(window, "lrFindButton", QToolButton).isEnabled()  # the form is locked while a run trains
    dialog = window.tools.show_lr_finder()
    assert not dialog.start()
    assert "training run is using" in dialog.statusLabel.text() and not dialog.job.running
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        window.stop_run()


@pytest.mark.timeout(90)
def test_one_tool_at_a_time(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    finder = window.tools.show_lr_finder()
    find(finder, "lrStepsEdit").setValue(100_000)
    click(qtbot, finder, "lrFinderRunButton")
    batch = window.tools.show_batch_finder()
    assert not batch.start()
    assert "LR finder is measuring" in batch.statusLabel.text()
    finder.stop()
    qtbot.waitUntil(lambda: not finder.job.running, timeout=30_000)
    assert window.startButton.isEnabled()
