"""Issue 45 item 2, the window's part: a task that chooses its optimizer (configure_optimizers) turns the form's
optimizer, lr, momentum, weight decay, schedule and warm-up off, saying so; the child's answer names the hook."""

from __future__ import annotations

from pathlib import Path

import pytest
from gui_helpers import find, run_form, set_field
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.panels.run_setup import OWN_OPTIMIZER_NOTE
from core.config import TASK_OPTIMIZER_FIELDS
from core.tasks.describe import describe
from core.tasks.tiny.task import TinyClassifierTask

TASK_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "user_tasks" / "own_optimizer_task.py"


def optimizer_fields_off(form) -> bool:
    rows = [form._rows[name] for name in TASK_OPTIMIZER_FIELDS]
    return all(not row.isEnabled() and row.toolTip() == OWN_OPTIMIZER_NOTE for row in rows)


def note(form):
    return find(form, "ownOptimizerNote")


def test_the_child_answer_names_configure_optimizers():
    assert "configure_optimizers" in describe(str(TASK_FILE))["capabilities"]


@pytest.mark.timeout(60)
def test_a_built_in_class_with_the_hook_is_checked_directly(qtbot):
    class Own(TinyClassifierTask):
        name = "own_builtin"

        def configure_optimizers(self, model, cfg):  # pragma: no cover - never trained here
            raise AssertionError

    form = run_form(qtbot)
    assert not form.chooses_optimizer() and not note(form).isVisibleTo(form)
    form.add_task(Own)
    set_field(form, "taskCombo", "own_builtin")
    qtbot.waitUntil(lambda: optimizer_fields_off(form))
    assert note(form).isVisibleTo(form) and note(form).text() == OWN_OPTIMIZER_NOTE
    assert form._rows["batch_size"].isEnabled()  # only what the hook decides
    set_field(form, "taskCombo", "tiny")
    qtbot.waitUntil(lambda: form._rows["optimizer"].isEnabled())
    assert all(form._rows[n].isEnabled() and not form._rows[n].toolTip() for n in TASK_OPTIMIZER_FIELDS)
    assert not note(form).isVisibleTo(form)


@pytest.mark.slow  # the task file is imported in a child process
@pytest.mark.timeout(180)
def test_a_task_file_added_through_the_menu_turns_the_optimizer_fields_off(qtbot, window, monkeypatch):
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(TASK_FILE), ""))
    window.task_actions.add_action.trigger()
    qtbot.waitUntil(lambda: not window.task_actions.busy, timeout=90_000)
    form = window.setupPanel
    assert form.taskCombo.currentData() == "own_optimizer", window.statusBarWidget.message.text()
    qtbot.waitUntil(lambda: optimizer_fields_off(form))
    assert note(form).isVisibleTo(form) and find(window, "startButton").isEnabled()
    set_field(window, "taskCombo", "tiny")
    qtbot.waitUntil(lambda: form._rows["lr"].isEnabled() and not note(form).isVisibleTo(form))
