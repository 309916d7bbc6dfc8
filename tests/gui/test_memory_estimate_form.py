"""The run form shows the memory estimate (core.lab.memory_estimate) beside the precision mode, computed on a worker
thread once the settings settle, and again when the batch size, the precision or its fp32 modules change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gui_helpers import find, run_form, set_field
from PySide6.QtWidgets import QFileDialog, QLabel, QMessageBox


def test_the_form_shows_the_estimate_and_follows_the_batch_size(qtbot, tmp_path):
    from core.devices import cpu_info, with_low_precision

    form = run_form(qtbot)
    form.set_device(with_low_precision(cpu_info()))  # as the window lists it: bf16-pure too
    label = find(form, "memoryEstimate", QLabel)

    def settled() -> str:
        """The estimate once no other is due or running."""
        done = lambda: label.text().startswith("≈") and not form._estimate_timer.isActive() and not form._estimates.busy  # noqa: E731
        qtbot.waitUntil(done, timeout=60_000)
        return label.text()

    first = settled()
    assert "free on cpu" in first and "optimizer state" in label.toolTip() and "activations" in label.toolTip()
    set_field(form, "batchSizeEdit", 512)
    qtbot.waitUntil(lambda: label.text() != first, timeout=60_000)
    set_field(form, "hiddenOptionEdit", 4096)  # parameters enough that their bytes show
    fp32 = settled()
    form.set_precision("bf16-pure")  # bf16 weights, gradients and Adam state: less
    qtbot.waitUntil(lambda: label.text() != fp32, timeout=60_000)
    pure = settled()
    set_field(form, "fp32ModulesEdit", "fc1")  # fc1 back in float32: more again
    qtbot.waitUntil(lambda: label.text() != pure, timeout=60_000)


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
