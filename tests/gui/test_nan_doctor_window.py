"""Issue 44 item 4 in the window: a run that goes non-finite shows its fixes (RunEnded.fixes) as buttons, and one
click re-runs it from the last good checkpoint with that fix, its note recorded in the new run (note.txt and its
start notes in run.json, as `train --note`). The run trains in a child process (a task file's always does), so
the divergence comes from the task file itself: its first layer's output turns inf after 12 steps in each
process."""

from __future__ import annotations

import os

import pytest
from gui_helpers import PROCESS_WAIT_MS, find, finish_run, set_field
from PySide6.QtCore import Qt
from test_add_task import TASK_FILE, add_task, dialogs  # noqa: F401  (dialogs: the fixture)
from test_nan_doctor import DIVERGING_TASK

from core.engine.events import RunEnded, RunStarted
from core.engine.run_record import read_note, read_run

pytestmark = pytest.mark.slow  # the task file's import, the run and its re-run are child processes


@pytest.mark.timeout(600)
def test_a_diverged_run_offers_fixes_and_one_click_reruns_from_its_checkpoint(
    qtbot, window, tmp_path, dialogs, monkeypatch
):
    path = tmp_path / "diverging_task.py"
    path.write_text(TASK_FILE.read_text() + DIVERGING_TASK)
    monkeypatch.setenv("AMP_TEST_DIVERGE", "1")  # the run's process (and the re-run's: 10 steps, under 12) see it
    add_task(qtbot, window, dialogs, path)
    assert window.setupPanel.taskCombo.currentData() == "regression"
    folder = tmp_path / "run"
    for name, value in (("precisionCombo", "bf16"), ("samplesOptionEdit", 512), ("hiddenOptionEdit", 8)):
        set_field(window, name, value)
    for name, value in (("maxStepsEdit", 20), ("logIntervalEdit", 5), ("checkpointIntervalEdit", 5)):
        set_field(window, name, value)
    set_field(window, "evalIntervalEdit", 1000)
    set_field(window, "outDirEdit", str(folder))
    lr = find(window, "lrEdit").value()
    events: list = []
    window.controller.event.connect(events.append)
    finish_run(qtbot, window)

    ended = next(e for e in events if isinstance(e, RunEnded))
    assert ended.status == "failed" and ended.fixes, ended.message
    panel = window.fixesPanel
    assert panel.isVisible() and "diverged" in panel.title.text() and "last good checkpoint" in panel.hint.text()
    texts = [button.text() for button in panel.buttons]
    assert texts == [f"Re-run with {fix['label']}" for fix in ended.fixes]
    assert any("lower LR" in text for text in texts) and "Re-run with fp32 for module 0" in texts, ended.message
    if shot := os.environ.get("AMP_NAN_BOX_SHOT"):
        panel.grab().save(shot)

    fix = next(f for f in ended.fixes if f["label"].startswith("lower LR"))
    button = panel.buttons[ended.fixes.index(fix)]
    batch = find(window, "batchSizeEdit").value()
    set_field(window, "batchSizeEdit", batch + 16)  # edited since: the fix re-runs the diverged run's settings
    events.clear()
    with qtbot.waitSignal(window.controller.runningChanged, timeout=PROCESS_WAIT_MS, check_params_cb=lambda r: not r):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert not panel.isVisible()
    started = next(e for e in events if isinstance(e, RunStarted))
    rerun = next(e for e in events if isinstance(e, RunEnded))
    assert rerun.status == "completed", rerun.message
    assert fix["resume"] and started.start_step == 10  # the checkpoint before the loss turned inf
    assert started.config["lr"] == pytest.approx(lr / 10) and started.config["out_dir"] == f"{folder}-lr-div10"
    assert started.config["batch_size"] == batch and find(window, "batchSizeEdit").value() == batch
    assert find(window, "lrEdit").value() == pytest.approx(lr / 10)  # the fix is in the form too
    assert fix["note"] == f"rerun_of: {folder}, fix: {fix['label']}" == read_note(f"{folder}-lr-div10")[0]
    assert started.notes[-1] == fix["note"] and read_run(f"{folder}-lr-div10")["notes"][-1] == fix["note"]  # as --note
