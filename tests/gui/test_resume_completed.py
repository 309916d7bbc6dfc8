"""File -> Resume of a run that already completed: the window says max steps is reached and, once it is
raised, Start (labelled Resume) continues from the checkpoint instead of starting a fresh run."""

from __future__ import annotations

import pytest
from gui_helpers import find, quick_run, set_field

from core.engine.checkpoints import load_checkpoint


@pytest.mark.timeout(90)
def test_resuming_a_completed_run_continues_once_max_steps_is_raised(qtbot, window, tmp_path):
    out_dir = tmp_path / "run"
    quick_run(window, out_dir, max_steps=5, log_interval=1)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        find(window, "startButton").click()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=30_000)
    checkpoint = out_dir / "checkpoint.pt"
    assert load_checkpoint(checkpoint)["step"] == 5

    window.file_actions.resume(str(checkpoint))
    qtbot.waitUntil(lambda: "already reached" in window.statusBarWidget.message.text(), timeout=30_000)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=30_000)
    start = find(window, "startButton")
    assert window.pending_resume == str(checkpoint) and start.text() == "Resume"

    set_field(window, "maxStepsEdit", 12)
    qtbot.waitUntil(start.isEnabled, timeout=10_000)
    start.click()
    qtbot.waitUntil(lambda: "resumed at step 5" in window.logPanel.toPlainText(), timeout=30_000)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=30_000)
    assert load_checkpoint(checkpoint)["step"] == 12  # continued in place, not a fresh run in run-2
    assert not (tmp_path / "run-2").exists()
    assert window.pending_resume is None and start.text() == "Start"
