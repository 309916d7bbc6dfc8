"""The window's run queue (Run → Run queue…): the form's settings added, trained by the queue off the GUI thread,
and the queue still there, with its states, results and run folders, after the window closes and opens again."""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_helpers import PROCESS_WAIT_MS, quick_run, set_field

from core.runs.queue import read_queue


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_queue_entries_outlive_the_window(qtbot, make_window, runs_root_in_tmp):
    window = make_window()
    quick_run(window, "", max_steps=6, log_interval=2)
    set_field(window, "threadsEdit", 1)
    window.queueAddAction.trigger()  # the form's settings, added; the dialog opens
    panel = window.queueDialog.panel
    panel.buttons["start"].click()
    qtbot.waitUntil(
        lambda: [e["state"] for e in panel.entries] == ["done"] and not panel.job.running, timeout=PROCESS_WAIT_MS
    )
    set_field(window, "maxStepsEdit", 4)
    panel.buttons["addForm"].click()
    assert [e["state"] for e in read_queue(runs_root_in_tmp)["entries"]] == ["done", "pending"]
    panel.grab().save("/tmp/queue.png")
    window.close()

    window = make_window()
    window.queueAction.trigger()
    panel = window.queueDialog.panel
    table = panel.table
    rows = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]
    done, pending = rows
    assert done[1] == "done" and done[3].startswith("accuracy ") and (runs_root_in_tmp / done[2] / "run.json").is_file()
    assert pending[1] == "pending" and pending[2] == pending[3] == ""
    assert Path(read_queue(runs_root_in_tmp)["entries"][0]["folder"]).parent == runs_root_in_tmp  # in the history
    panel.table.selectRow(0)
    assert panel.buttons["history"].isEnabled() and not panel.buttons["up"].isEnabled()
