"""Start on a host with a user's task (File → Add task…), over a real sshd on 127.0.0.1: the task's file goes
along into the run's folder there (core.remote.start_remote_run, as `remote start`), the run trains from that copy
and the window follows it to its end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from app.panels import hosts
from tests.gui.gui_helpers import PROCESS_WAIT_MS, click, find, set_field
from tests.gui.test_remote_window import (  # noqa: F401 (fixtures: the module's sshd, ssh never on the GUI thread)
    ssh_never_on_the_gui_thread,
    sshd,
)

ROOT = Path(__file__).resolve().parents[2]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"
WAIT = PROCESS_WAIT_MS


@pytest.fixture(autouse=True)
def yes_to_every_question(monkeypatch):
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_start_a_task_file_on_a_host_from_the_window(qtbot, make_window, sshd, tmp_path, monkeypatch):
    monkeypatch.setattr(hosts, "SSH_OPTIONS", ("-F", str(sshd.config)))
    path = tmp_path / "my_task.py"
    path.write_text(TASK_FILE.read_text())
    window = make_window()
    window.task_actions.add(f"{path}:RegressionTask")
    qtbot.waitUntil(lambda: window.setupPanel.taskCombo.currentData() == "regression", timeout=WAIT)

    panel = window.devicesPanel
    dialog = panel.ask_add_host()
    find(dialog, "hostDestEdit").setText(sshd.dest)
    find(dialog, "hostCommandEdit").setText(sshd.prefix)
    click(qtbot, dialog, "addHostOkButton")
    qtbot.waitUntil(lambda: bool(panel.host_devices(sshd.dest)), timeout=WAIT)
    panel.select(next(d for d in panel.host_devices(sshd.dest) if d.type == "cpu").id, host=sshd.dest)

    set_field(window, "samplesOptionEdit", 256)
    set_field(window, "maxStepsEdit", 10)
    set_field(window, "minStepsEdit", 0)
    set_field(window, "logIntervalEdit", 5)
    set_field(window, "outDirEdit", "")
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: window.controller.running, timeout=WAIT)
    run = window.controller.run
    qtbot.waitUntil(lambda: bool(run.folder), timeout=WAIT)
    folder = Path(run.folder)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=WAIT)
    copy = folder / "task" / "my_task.py"
    assert copy.read_bytes() == path.read_bytes()
    record = json.loads((folder / "run.json").read_text())
    assert record["task"] == "regression" and record["config"]["task_file"] == f"{copy}:RegressionTask"
    assert record["steps"] == 10
