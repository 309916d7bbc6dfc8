"""The window's run queue (Run → Run queue…): the form's settings added, trained by the queue off the GUI thread,
a failed entry that does not stop the others, and the queue still there, with its states, results and run
folders, after the window closes and opens again."""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_helpers import PROCESS_WAIT_MS, quick_run, set_field

from core.runs.queue import read_queue


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_three_entries_one_failing_outlive_the_window(qtbot, make_window, runs_root_in_tmp, tmp_path):
    window = make_window()
    quick_run(window, "", max_steps=6, log_interval=2)
    set_field(window, "threadsEdit", 1)
    window.queueAddAction.trigger()  # the form's settings, added; the dialog opens
    panel = window.queueDialog.panel
    gone = tmp_path / "missing.csv"
    gone.write_text("x,label\n1,0\n")
    set_field(window, "dataEdit", gone)
    panel.buttons["addForm"].click()
    set_field(window, "dataEdit", "")
    set_field(window, "maxStepsEdit", 4)
    panel.buttons["addForm"].click()
    gone.unlink()  # the data went away before its turn: that entry fails, the queue goes on
    panel.buttons["start"].click()
    qtbot.waitUntil(
        lambda: [e["state"] for e in panel.entries] == ["done", "failed", "done"] and not panel.job.running,
        timeout=3 * PROCESS_WAIT_MS,
    )
    panel.buttons["addForm"].click()
    assert [e["state"] for e in read_queue(runs_root_in_tmp)["entries"]] == ["done", "failed", "done", "pending"]
    panel.grab().save("/tmp/queue.png")
    window.close()

    window = make_window()
    window.queueAction.trigger()
    panel = window.queueDialog.panel
    table = panel.table
    rows = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]
    first, failed, second, pending = rows
    for done in (first, second):
        assert done[1] == "done" and done[3].startswith("accuracy ")
        assert (runs_root_in_tmp / done[2] / "run.json").is_file()
    assert failed[1] == "failed" and "missing.csv" in failed[3], failed
    assert pending[1] == "pending" and pending[2] == pending[3] == ""
    assert Path(read_queue(runs_root_in_tmp)["entries"][0]["folder"]).parent == runs_root_in_tmp  # in the history
    panel.table.selectRow(0)
    assert panel.buttons["history"].isEnabled() and not panel.buttons["up"].isEnabled()
