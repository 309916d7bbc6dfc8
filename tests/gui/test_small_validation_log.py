"""The window's log says as a run starts that its validation split is too small to choose the best checkpoint
by, and at the end which weights to use."""

from __future__ import annotations

import pytest
from gui_helpers import finish_run, quick_run


@pytest.mark.timeout(120)
def test_the_log_warns_of_a_tiny_validation_split_and_gives_the_advice(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", samples=256, batch_size=32)  # 52 validation rows
    finish_run(qtbot, window)
    log = window.logPanel.toPlainText()
    assert "NOTE  52 validation rows are too few to choose the best checkpoint by val accuracy" in log
    lines = [line for line in log.splitlines() if "NOTE  " in line and "the last weights" in line]
    assert lines and log.index("Run completed") < log.index(lines[-1]), log  # the advice follows the end
