"""Tune before you train, in the window: a 2×2 sweep, its sortable results, "Open in history" and "Train this
one longer"."""

from __future__ import annotations

import json
import os

import pytest
from gui_helpers import UI_WAIT_MS, click, find, quick_run
from PySide6.QtCore import Qt


@pytest.mark.timeout(240)
def test_a_2x2_sweep_fills_the_table_opens_a_trial_in_history_and_trains_it_longer(qtbot, window, tmp_path):
    window.set_runs_root(str(tmp_path / "runs"))
    quick_run(window, tmp_path / "run", max_steps=8, log_interval=4, samples=512, separate_process=False)
    dialog = window.tools.show_sweep()
    assert dialog is not None and not dialog.isModal()
    dialog.set_axes("lr = 1e-3, 3e-3", "batch_size = 16, 32")
    assert "4 trials" in dialog.planLabel.text()
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=200_000, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "sweepRunButton")
        assert not window.startButton.isEnabled()  # the sweep trains on the device: no run beside it
    result = dialog.result
    assert result is not None, dialog.statusLabel.text()
    assert result.counts == {"completed": 4}, result.counts
    assert dialog.proxy.rowCount() == 4
    assert dialog.trial_column("lr") == ["0.001", "0.001", "0.003", "0.003"]
    assert dialog.trial_column("batch_size") == ["16", "32", "16", "32"]
    assert all(text != "–" for text in dialog.trial_column("best") + dialog.trial_column("samples_per_second"))
    assert "Best so far" in dialog.bestLabel.text()

    # Numeric sort: samples/s descending is by value, not by text.
    column = dialog.model.columns().index("samples_per_second")
    dialog.table.sortByColumn(column, Qt.SortOrder.DescendingOrder)
    speeds = [float(t.replace(",", "")) for t in dialog.trial_column("samples_per_second")]
    assert speeds == sorted(speeds, reverse=True)

    dialog.select_trial(3)
    row = dialog.selected_row()
    assert row["index"] == 3 and row["params"] == {"lr": 0.003, "batch_size": 16}
    click(qtbot, dialog, "sweepHistoryButton")
    history = window.historyDialog
    assert history is not None and history.isVisible()
    qtbot.waitUntil(lambda: [r.get("name") for r in history.panel.selected_runs()] == [row["run"]], timeout=UI_WAIT_MS)

    # Train this one longer: the trial's settings in the form, resumed from its checkpoint to twice the steps.
    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=60_000, check_params_cb=lambda running: not running
    ):
        click(qtbot, dialog, "sweepLongerButton")
        assert window.setupPanel.config().max_steps == 16
        assert window.setupPanel.config().lr == pytest.approx(0.003)
        assert window.setupPanel.config().batch_size == 16
    record = json.loads((tmp_path / "runs" / row["run"] / "run.json").read_text())
    assert record["status"] == "completed" and record["steps"] == 16, record


@pytest.mark.timeout(120)
def test_closing_the_sweep_mid_trial_stops_it_and_joins_its_thread(qtbot, window, tmp_path):
    window.set_runs_root(str(tmp_path / "runs"))
    quick_run(window, tmp_path / "run", max_steps=100_000, log_interval=5, separate_process=False)
    dialog = window.tools.show_sweep()
    dialog.set_axes("lr = 1e-3, 3e-3")
    from core.lab.sweep import TrialEvent

    with qtbot.waitSignal(dialog.job.progress, timeout=60_000, check_params_cb=lambda e: isinstance(e, TrialEvent)):
        click(qtbot, dialog, "sweepRunButton")
    dialog.close()
    assert not dialog.job.running
    sweep = json.loads(next((tmp_path / "runs").glob("*/sweep.json")).read_text())
    assert [t["status"] for t in sweep["trials"]] == ["stopped", "pending"]
    assert window.startButton.isEnabled()
    find(window, "startButton")


def test_the_best_column_is_named_before_any_trial_says_its_metric():
    from PySide6.QtCore import Qt

    from app.panels.tuning_sweep import SweepModel

    model = SweepModel()
    best = model.columns().index("best")
    assert model.headerData(best, Qt.Orientation.Horizontal) == "Best metric"
    model.set_rows([{"index": 1, "params": {"lr": 0.01}, "status": "completed", "best": 0.9}], "accuracy")
    assert model.headerData(model.columns().index("best"), Qt.Orientation.Horizontal) == "Best accuracy"


@pytest.mark.timeout(60)
def test_the_axes_start_empty_under_a_placeholder_and_run_waits_for_a_valid_spec(qtbot, window, tmp_path):
    """The example in the editor is a placeholder (greyed, not text a Run would take), and Run is disabled, with
    the reason as its tooltip, until the axes plan a sweep."""
    from app.panels.tuning_sweep import plan
    from core.errors import ConfigError

    quick_run(window, tmp_path / "run", max_steps=8, samples=512)
    dialog = window.tools.show_sweep()
    editor, run = find(dialog, "sweepAxesEdit"), find(dialog, "sweepRunButton")
    assert editor.toPlainText() == "" and "for example" in editor.placeholderText()
    with pytest.raises(ConfigError):  # the placeholder is no spec: typed as it is, Run would refuse it
        plan(window.setupPanel.config(), editor.placeholderText().splitlines(), "grid", 1, 0)
    assert not run.isEnabled() and run.toolTip() == "Type the axes to sweep."
    dialog.set_axes("lr = ")
    assert not run.isEnabled() and "lr" in run.toolTip()
    dialog.set_axes("lr = 1e-3, 3e-3")
    assert run.isEnabled() and "2 trials" in dialog.planLabel.text()
    find(dialog, "sweepMethodCombo").setCurrentIndex(1)  # random: the same spec draws from the choices
    assert run.isEnabled() and "for example" in editor.placeholderText()
    dialog.set_axes("")
    assert not run.isEnabled()
    if os.environ.get("AMP_SWEEP_SCREENSHOT"):
        dialog.grab().save(os.environ["AMP_SWEEP_SCREENSHOT"])
