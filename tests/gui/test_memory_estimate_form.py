"""The run form shows the memory estimate (core.lab.memory_estimate) beside the precision mode, computed on a worker
thread once the settings settle, and again when the batch size or the optimizer changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gui_helpers import find, run_form, set_field
from PySide6.QtWidgets import QFileDialog, QLabel, QMessageBox


def test_the_form_shows_the_estimate_and_follows_the_batch_size(qtbot, tmp_path):
    form = run_form(qtbot)
    label = find(form, "memoryEstimate", QLabel)
    qtbot.waitUntil(lambda: label.text().startswith("≈") and "free on cpu" in label.text(), timeout=60_000)
    first = label.text()
    assert "optimizer state" in label.toolTip() and "activations" in label.toolTip()
    set_field(form, "batchSizeEdit", 512)
    qtbot.waitUntil(lambda: label.text().startswith("≈") and label.text() != first, timeout=60_000)
    form.grab().save("/tmp/form.png")


@pytest.mark.slow  # the estimate of a task file runs in a child process
@pytest.mark.timeout(300)
def test_a_task_files_estimate_runs_its_code_in_a_child_not_here(qtbot, window, tmp_path, monkeypatch):
    """The file's import records its pid: the estimate shows, and the file never ran in this (the window's) process."""
    source = Path(__file__).resolve().parents[1] / "fixtures" / "user_tasks" / "regression_task.py"
    pids = tmp_path / "pids.txt"
    future, rest = source.read_text().split("from __future__ import annotations\n")
    head = f"import os\nopen({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
    path = tmp_path / "counted_task.py"
    path.write_text(f"{future}from __future__ import annotations\n{head}{rest}")
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    window.task_actions.add_action.trigger()
    qtbot.waitUntil(lambda: window.setupPanel.taskCombo.currentData() == "regression", timeout=120_000)
    label = find(window, "memoryEstimate", QLabel)
    ran_in = lambda: {int(line) for line in pids.read_text().split()}  # noqa: E731
    qtbot.waitUntil(lambda: len(ran_in()) >= 2, timeout=180_000)  # the describe child, then the estimate's
    qtbot.waitUntil(lambda: label.text().startswith("≈") and "free on cpu" in label.text(), timeout=180_000)
    assert os.getpid() not in ran_in()
