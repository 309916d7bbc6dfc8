"""Tune before you train, in the window: the model summary (per layer, and totals per precision mode)."""

from __future__ import annotations

import pytest
from gui_helpers import quick_run


@pytest.mark.timeout(90)
def test_summary_lists_every_layer_and_totals_match_the_parameter_count(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    dialog = window.tools.show_summary()  # measures at once the first time
    assert dialog.job.running
    qtbot.waitUntil(lambda: not dialog.job.running, timeout=60_000)
    result = dialog.result
    assert result is not None, dialog.statusLabel.text()
    from core.tasks import create_task

    config = window.setupPanel.config()
    task = create_task(config.task, config.task_options)
    assert result.parameters == task.parameter_count()
    names = dialog.layer_names()
    assert names == [row.name for row in result.rows]  # every module, and the loss row
    assert dialog.total("Parameters", "fp32") == f"{result.parameters:,}"
    assert f"{result.parameters:,}" in dialog.header.text()
    assert dialog.total("Activations vs fp32", "fp32") == "1.00×"
    measured = result.measured_modes()
    assert measured[0] == "fp32" and "bf16" in measured
    header = [dialog.totalsTable.horizontalHeaderItem(c).text() for c in range(dialog.totalsTable.columnCount())]
    assert header[1:] == measured  # the modes side by side
    # A shallower depth folds the children into their parents.
    dialog.depthEdit.setValue(0)
    assert all(r.depth == 0 for r in result.rows_to_depth(0)) and len(dialog.layer_names()) < len(names)


@pytest.mark.timeout(60)
def test_the_summary_menu_action_opens_one_dialog_and_stop_leaves_no_thread(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    window.tools.summaryAction.trigger()
    dialog = window.tools.summaryDialog
    assert dialog is not None and dialog.isVisible()
    dialog.stop()
    qtbot.waitUntil(lambda: not dialog.job.running, timeout=30_000)
    window.tools.summaryAction.trigger()
    assert window.tools.summaryDialog is dialog  # one dialog, shown again
