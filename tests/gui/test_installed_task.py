"""An installed package's task (tests/fixtures/user_tasks/pkg: the entry point `wave` in amp_console.tasks) in the
window: listed in the task picker at start-up from its metadata and source (nothing imported, nothing asked),
loaded off the GUI thread when picked, with its options, and trained on a thread of the window."""

from __future__ import annotations

import json
import sys

import pytest
from gui_helpers import find, finish_run, set_field
from PySide6.QtWidgets import QMessageBox
from task_registry import restore, snapshot

import core.tasks as registry
from app.task_actions import PENDING
from app.window_settings import USER_TASKS_KEY
from tests.installed_tasks import install_task_package

pytestmark = pytest.mark.slow  # picking the task imports it in a child process

REFERENCE = "amp_example_tasks.wave:WaveTask"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The fixture package installed onto a folder on sys.path; the registry as a fresh process has it."""
    saved = snapshot()
    package = install_task_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(registry, "_installed_read", False)
    asked: list = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a) or QMessageBox.StandardButton.Yes)
    yield package, asked
    restore(saved)
    for name in [m for m in sys.modules if m == "amp_example_tasks" or m.startswith("amp_example_tasks.")]:
        del sys.modules[name]


@pytest.mark.timeout(120)
def test_an_installed_task_is_listed_picked_and_trained_on_a_thread(qtbot, make_window, tmp_path, installed):
    package, asked = installed
    window = make_window()
    combo = window.setupPanel.taskCombo
    index = combo.findData(PENDING + REFERENCE)
    assert index >= 0 and combo.itemText(index) == "wave (amp_example_tasks.wave)"
    assert combo.model().item(index).isEnabled() and "installed package" in combo.itemData(index, 3)  # tooltip
    assert not list(package.glob("*.ran"))  # listed from its metadata and source: nothing imported

    combo.setCurrentIndex(index)  # picked: loaded on a job's thread
    qtbot.waitUntil(lambda: combo.currentData() == "wave", timeout=60_000)
    assert (package / "wave.ran").exists() and not asked  # installed code: not asked about as a file is
    assert combo.currentText() == "wave (amp_example_tasks.wave)" and combo.findData(PENDING + REFERENCE) < 0
    assert find(window, "paramCount").text() == "49 trainable parameters"  # 16 + 16 + 16 + 1
    assert find(window, "lrEdit").value() == pytest.approx(1e-2)  # its defaults
    assert window.settings.value(USER_TASKS_KEY) in (None, "[]")  # listed from its package at every start

    find(window, "separateProcessCheck").setChecked(False)
    set_field(window, "hiddenOptionEdit", 8)
    set_field(window, "maxStepsEdit", 6)
    set_field(window, "minStepsEdit", 0)
    set_field(window, "logIntervalEdit", 2)
    set_field(window, "outDirEdit", str(tmp_path / "run"))
    finish_run(qtbot, window)
    assert window.statusBarWidget.message.property("role") == "status-ok", window.statusBarWidget.message.text()
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["config"]["task"] == "wave" and record["config"]["task_file"] == REFERENCE
    assert record["config"]["task_options"]["hidden"] == 8 and record["steps"] == 6
