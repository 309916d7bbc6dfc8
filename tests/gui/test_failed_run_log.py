"""A run that diverges on a thread: the log pane says it failed once (not once per listener), the status bar
says it in red, and the NaN box offers its fixes."""

from __future__ import annotations

import pytest
from gui_helpers import finish_run, quick_run, set_field


@pytest.mark.timeout(300)
def test_a_diverged_run_is_logged_once_and_offers_its_fixes(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "div", max_steps=300, samples=4096, log_interval=5)
    for name, value in (("optimizerEdit", "sgd"), ("lrEdit", 10.0), ("momentumEdit", 0.99), ("hiddenOptionEdit", 256)):
        set_field(window, name, value)
    set_field(window, "checkpointIntervalEdit", 10)
    finish_run(qtbot, window)

    lines = window.logPanel.toPlainText().splitlines()
    failed = [line for line in lines if "Run failed: loss became" in line]
    assert len(failed) == 1, failed
    assert window.statusBarWidget.message.text().startswith("Run failed: loss became")
    assert window.fixesPanel.isVisible() and "diverged" in window.fixesPanel.title.text()
    assert any("lower LR" in button.text() for button in window.fixesPanel.buttons)
