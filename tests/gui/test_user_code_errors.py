"""The user's code raising, as the window shows it: a task whose loss raises mid-run (after step 5) fails the run
with one line naming the user's file and line in the log and the status bar, its traceback one click away
(Details…), and Start trains again; one whose load_data raises cannot start, with the same line and details. On
a thread of the window's process and in a separate training process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from gui_helpers import MODES, PROCESS_WAIT_MS, UI_WAIT_MS, click, find, finish_run, set_field
from PySide6.QtWidgets import QMessageBox

pytestmark = pytest.mark.slow  # adding the task imports it in a child process

ROOT = Path(__file__).resolve().parents[2]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"

RAISES_MID_RUN = """
steps = 0

def loss(self, model, batch):
    if torch.is_grad_enabled() and model.training:
        type(self).steps += 1
    if type(self).steps == 7:  # the check's forward and steps 1 to 5 pass: the one after step 5 raises
        raise ValueError("a row of the batch is bad")
    return super().loss(model, batch)
"""
RAISES_IN_SETUP = """
def load_data(self, data_path, seed):
    columns = {"x": 1}
    return columns["y"]
"""


def add_broken_task(qtbot, window, monkeypatch, tmp_path: Path, body: str) -> tuple[Path, int]:
    """File → Add task… for the regression task's file with `class Broken(RegressionTask)` and `body`; returns
    the file and the line of its `raise`/failing statement."""
    path = tmp_path / "broken_task.py"
    subclass = "\n\nclass Broken(RegressionTask):\n    name = 'broken'\n" + textwrap.indent(body, "    ")
    path.write_text(TASK_FILE.read_text() + subclass)
    line = next(
        i
        for i, text in enumerate(path.read_text().splitlines(), 1)
        if "raise ValueError" in text or 'columns["y"]' in text
    )
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)  # runs its code
    window.task_actions.add(f"{path}:Broken")  # what File → Add task… does once the class is picked
    qtbot.waitUntil(lambda: not window.task_actions.busy, timeout=60_000)
    assert window.setupPanel.taskCombo.currentData() == "broken", window.statusBarWidget.message.text()
    return path, line


def small_run(window, tmp_path: Path, separate: bool, max_steps: int = 12) -> None:
    find(window, "separateProcessCheck").setChecked(separate)
    set_field(window, "samplesOptionEdit", 256)
    set_field(window, "batchSizeEdit", 32)
    set_field(window, "epochsEdit", 1)
    set_field(window, "maxStepsEdit", max_steps)
    set_field(window, "minStepsEdit", 0)
    set_field(window, "logIntervalEdit", 1)
    set_field(window, "outDirEdit", str(tmp_path / "run"))


def details_shown(qtbot, window) -> str:
    """Click Details… in the status bar; the detailed text of the error box it opens (closed again)."""
    assert window.statusBarWidget.detailsButton.isVisible()
    click(qtbot, window, "detailsButton")
    box = window.findChild(QMessageBox, "errorDetails")
    qtbot.waitUntil(box.isVisible, timeout=UI_WAIT_MS)
    text = box.detailedText()
    box.close()
    return text


@MODES
@pytest.mark.timeout(400)
def test_an_exception_of_the_users_loss_mid_run(qtbot, window, tmp_path, monkeypatch, separate):
    path, line = add_broken_task(qtbot, window, monkeypatch, tmp_path, RAISES_MID_RUN)
    small_run(window, tmp_path, separate)
    finish_run(qtbot, window, PROCESS_WAIT_MS)
    message = f"ValueError at step 5: a row of the batch is bad (raised at broken_task.py:{line} in loss)"
    status = window.statusBarWidget.message
    assert status.property("role") == "status-error" and status.text() == f"Run failed: {message}", status.text()
    assert f"ERROR Run failed: {message}" in window.logPanel.toPlainText()
    details = details_shown(qtbot, window)
    assert details.startswith("Traceback") and f'File "{path}", line {line}, in loss' in details
    assert "ValueError: a row of the batch is bad" in details

    # the window goes on: Start trains again (an added task file trains in a child process even when the form
    # chose a thread: a new process starts its count afresh and fails alike)
    set_field(window, "outDirEdit", str(tmp_path / "again"))
    finish_run(qtbot, window, PROCESS_WAIT_MS)
    assert status.text() == f"Run failed: {message}"


@MODES
@pytest.mark.timeout(400)
def test_an_exception_of_the_users_load_data(qtbot, window, tmp_path, monkeypatch, separate):
    path, line = add_broken_task(qtbot, window, monkeypatch, tmp_path, RAISES_IN_SETUP)
    small_run(window, tmp_path, separate)
    finish_run(qtbot, window, PROCESS_WAIT_MS)
    message = f"KeyError while the run was set up: 'y' (raised at broken_task.py:{line} in load_data)"
    status = window.statusBarWidget.message
    assert status.text() == f"Could not start: {message}", status.text()
    assert f"ERROR Could not start: {message}" in window.logPanel.toPlainText()
    details = details_shown(qtbot, window)
    assert f'File "{path}", line {line}, in load_data' in details and "KeyError: 'y'" in details
    set_field(window, "taskCombo", "tiny")
    assert find(window, "startButton").isEnabled()
