"""File → Add task… through the real action: the user's task file (tests/fixtures/user_tasks/regression_task.py)
joins the picker with its options and parameter count, trains from the window, and is remembered; a broken
file is one line and the window goes on; a remembered file is listed at the next start without running it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from gui_helpers import PROCESS_WAIT_MS, click, find, finish_run, quick_run, set_field
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget
from task_registry import restore, restored_task_registry

from app.task_actions import PENDING
from app.window_settings import USER_TASKS_KEY

pytestmark = pytest.mark.slow  # adding a task imports it in a child process

ROOT = Path(__file__).resolve().parents[2]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"
MARKER = "\nfrom pathlib import Path as _P\n_P(__file__).with_suffix('.ran').touch()\n"  # proof that the file ran


@pytest.fixture
def dialogs(monkeypatch):
    """The file dialog answers `dialogs.path`; the question about running its code is recorded and answered
    `dialogs.answer`."""

    class Answers:
        path = ""
        answer = QMessageBox.StandardButton.Yes
        asked: list = []

    answers = Answers()
    answers.asked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(answers.path), "Python task files (*.py)"))

    def question(_parent, _title, text, *args, **kwargs):
        answers.asked.append(text)
        return answers.answer

    monkeypatch.setattr(QMessageBox, "question", question)
    return answers


def add_task(qtbot, window, dialogs, path) -> None:
    dialogs.path = path
    window.task_actions.add_action.trigger()
    qtbot.waitUntil(lambda: not window.task_actions.busy, timeout=60_000)


def task_file(tmp_path: Path, name: str = "my_task.py") -> Path:
    """The regression task in tmp_path, writing <file>.ran when its code runs."""
    path = tmp_path / name
    path.write_text(TASK_FILE.read_text() + MARKER)
    return path


def combo_entries(window) -> dict:
    combo = window.setupPanel.taskCombo
    return {
        combo.itemData(i): (combo.itemText(i), combo.model().item(i).isEnabled(), combo.itemData(i, 3) or "")
        for i in range(combo.count())
    }  # 3: ToolTipRole


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_add_a_task_file_and_train_it_in_a_child_even_when_a_thread_was_chosen(qtbot, window, tmp_path, dialogs):
    path = task_file(tmp_path)
    add_task(qtbot, window, dialogs, path)
    reference = f"{path.resolve()}:RegressionTask"
    assert len(dialogs.asked) == 1 and "runs its Python code" in dialogs.asked[0] and reference in dialogs.asked[0]
    assert path.with_suffix(".ran").exists()  # imported, in a child process
    combo = window.setupPanel.taskCombo
    assert combo.currentData() == "regression" and combo.currentText() == "regression (my_task.py)"
    for option in ("features", "hidden", "samples", "noise"):
        find(window, f"{option}OptionEdit")
    assert find(window, "paramCount").text() == "321 trainable parameters"  # 8*32 + 32 + 32 + 1
    set_field(window, "hiddenOptionEdit", 4)  # counted where its code runs: when it trains
    assert not find(window, "paramCount").text()[0].isdigit()
    assert find(window, "lrEdit").value() == pytest.approx(3e-3)  # the task's defaults
    assert "is ready" in window.statusBarWidget.message.text()
    assert json.loads(window.settings.value(USER_TASKS_KEY)) == [reference]

    add_task(qtbot, window, dialogs, path)  # again: not asked again, the same task
    assert len(dialogs.asked) == 1 and list(combo_entries(window)).count("regression") == 1

    find(window, "separateProcessCheck").setChecked(False)
    set_field(window, "samplesOptionEdit", 256)
    set_field(window, "epochsEdit", 1)
    set_field(window, "maxStepsEdit", 6)
    set_field(window, "minStepsEdit", 0)
    set_field(window, "logIntervalEdit", 2)
    set_field(window, "outDirEdit", str(tmp_path / "run"))
    window.resize(1400, 860)
    path.with_suffix(".ran").unlink()
    with qtbot.waitSignal(window.controller.runningChanged, timeout=PROCESS_WAIT_MS, check_params_cb=lambda r: not r):
        assert window.start_run()
        assert window.controller.separate_process  # the task's code stays out of the window's process
        assert "task file's code runs only outside the window" in window.statusBarWidget.message.text()
    assert path.with_suffix(".ran").exists()  # the child ran it
    assert "status-ok" == window.statusBarWidget.message.property("role"), window.statusBarWidget.message.text()
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["config"]["task"] == "regression" and record["config"]["task_file"] == reference
    assert record["config"]["task_options"]["hidden"] == 4
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    window.grab().save("/tmp/addtask.png")


@pytest.mark.timeout(300)
def test_a_task_file_trains_in_a_separate_process(qtbot, window, tmp_path, dialogs):
    """The child process is given the task's file in the settings it reads, and loads it itself."""
    path = task_file(tmp_path)
    add_task(qtbot, window, dialogs, path)
    path.with_suffix(".ran").unlink()
    find(window, "separateProcessCheck").setChecked(True)
    set_field(window, "samplesOptionEdit", 256)
    set_field(window, "maxStepsEdit", 4)
    set_field(window, "minStepsEdit", 0)
    set_field(window, "outDirEdit", str(tmp_path / "run"))
    finish_run(qtbot, window, PROCESS_WAIT_MS)
    assert window.statusBarWidget.message.property("role") == "status-ok", window.statusBarWidget.message.text()
    assert path.with_suffix(".ran").exists()  # the child ran it
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["task"] == "regression"


@pytest.mark.timeout(120)
def test_a_broken_task_file_is_one_line_and_the_window_goes_on(qtbot, window, tmp_path, dialogs):
    path = tmp_path / "broken_task.py"
    path.write_text("from core.tasks.base import Task\n\nclass BrokenTask(Task)\n    name = 'broken'\n")
    add_task(qtbot, window, dialogs, path)
    message = window.statusBarWidget.message.text()
    assert window.statusBarWidget.message.property("role") == "status-error"
    assert "syntax error at line 3" in message and str(path) in message and "\n" not in message
    assert "syntax error at line 3" in window.logPanel.toPlainText()
    assert window.settings.value(USER_TASKS_KEY) in (None, "[]")  # not remembered
    assert all(not str(key).startswith(PENDING) for key in combo_entries(window))
    dialogs.answer = QMessageBox.StandardButton.Cancel  # declined: nothing runs
    other = task_file(tmp_path, "declined.py")
    add_task(qtbot, window, dialogs, other)
    assert not other.with_suffix(".ran").exists() and "regression" not in combo_entries(window)
    set_field(window, "taskCombo", "tiny")
    assert find(window, "startButton").isEnabled()


@pytest.mark.timeout(120)
def test_a_task_file_is_remembered_and_listed_without_running_it(qtbot, make_window, settings, tmp_path, dialogs):
    path = task_file(tmp_path)
    first = make_window()
    add_task(qtbot, first, dialogs, path)
    set_field(first, "hiddenOptionEdit", 12)
    first.close()
    reference = f"{path.resolve()}:RegressionTask"
    gone = f"{tmp_path / 'gone.py'}:GoneTask"
    settings.setValue(USER_TASKS_KEY, json.dumps([reference, gone]))
    restore(((), (), ()))  # as a new process: no user task loaded or remembered
    path.with_suffix(".ran").unlink()

    second = make_window()
    entries = combo_entries(second)
    text, enabled, tooltip = entries[PENDING + reference]
    assert text == "regression (my_task.py)" and enabled and "when you pick it" in tooltip
    text, enabled, tooltip = entries[PENDING + gone]
    assert text == "gone.py: no such file" and not enabled and "no such file" in tooltip
    assert not path.with_suffix(".ran").exists()  # listed from its source: nothing ran at start-up
    assert second.setupPanel.taskCombo.currentData() == "tiny"
    assert "pick it in the task list" in second.logPanel.toPlainText()

    combo = second.setupPanel.taskCombo
    combo.setCurrentIndex(combo.findData(PENDING + reference))  # picked: loaded off the GUI thread
    qtbot.waitUntil(lambda: combo.currentData() == "regression", timeout=60_000)
    assert path.with_suffix(".ran").exists() and not dialogs.asked[1:]  # asked once, in the first window
    assert find(second, "hiddenOptionEdit").value() == 12  # the form it was saved with
    assert combo.findData(PENDING + reference) < 0 and not combo_entries(second)[PENDING + gone][1]


@pytest.mark.timeout(120)
def test_a_file_with_several_tasks_asks_which(qtbot, window, tmp_path, dialogs, monkeypatch):
    from PySide6.QtWidgets import QInputDialog

    path = task_file(tmp_path, "two_tasks.py")
    path.write_text(
        path.read_text() + "\n\nclass WideTask(RegressionTask):\n    name = 'wide'\n"
        "    description = 'the regression task, wider'\n"
    )
    offered = []
    monkeypatch.setattr(
        QInputDialog,
        "getItem",
        lambda _parent, _title, _label, items, *a, **k: offered.append(items) or ("WideTask", True),
    )
    add_task(qtbot, window, dialogs, path)
    assert offered == [["RegressionTask", "WideTask"]]
    combo = window.setupPanel.taskCombo
    assert combo.currentData() == "wide" and "regression" not in combo_entries(window)
    assert json.loads(window.settings.value(USER_TASKS_KEY)) == [f"{path.resolve()}:WideTask"]


@pytest.mark.timeout(120)
def test_a_task_from_a_module(qtbot, window, tmp_path, dialogs, monkeypatch):
    from PySide6.QtWidgets import QInputDialog

    package = tmp_path / "my_window_tasks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "regression.py").write_text(TASK_FILE.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    typed = iter(["no_such_package.tasks:MyTask", "my_window_tasks.regression:RegressionTask"])
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: (next(typed), True))
    window.task_actions.add_module_action.trigger()
    qtbot.waitUntil(lambda: not window.task_actions.busy, timeout=60_000)
    assert "no module named 'no_such_package'" in window.statusBarWidget.message.text()
    window.task_actions.add_module_action.trigger()
    qtbot.waitUntil(lambda: window.setupPanel.taskCombo.currentData() == "regression", timeout=60_000)
    assert window.setupPanel.taskCombo.currentText() == "regression (my_window_tasks.regression)"
    assert len(dialogs.asked) == 2
    sys.modules.pop("my_window_tasks.regression", None)
    sys.modules.pop("my_window_tasks", None)


@pytest.fixture
def removal(monkeypatch):
    """File → Remove task…'s list: what it offered is recorded, and it answers the entry that contains
    `removal.pick` (Cancel when that is '')."""
    from PySide6.QtWidgets import QInputDialog

    class Removal:
        pick = ""
        offered: list = []

    answers = Removal()
    answers.offered = []

    def get_item(_parent, _title, _label, items, *args, **kwargs):
        answers.offered.append(list(items))
        chosen = [item for item in items if answers.pick and answers.pick in item]
        return (chosen[0], True) if len(chosen) == 1 else ("", False)

    monkeypatch.setattr(QInputDialog, "getItem", get_item)
    return answers


@pytest.mark.timeout(120)
def test_a_remembered_broken_task_is_removed_for_good(qtbot, make_window, settings, tmp_path, dialogs, removal):
    path = task_file(tmp_path)
    reference = f"{path.resolve()}:RegressionTask"
    gone = f"{tmp_path / 'gone.py'}:GoneTask"
    settings.setValue(USER_TASKS_KEY, json.dumps([gone, reference]))
    first = make_window()
    combo = first.setupPanel.taskCombo
    combo.setCurrentIndex(combo.findData(PENDING + reference))  # loaded: after the broken entry in the picker
    qtbot.waitUntil(lambda: combo.currentData() == "regression", timeout=60_000)
    set_field(first, "hiddenOptionEdit", 12)
    set_field(first, "epochsEdit", 3)

    removal.pick = gone
    first.task_actions.remove_action.trigger()
    assert removal.offered == [[f"gone.py: no such file — {gone}", f"regression (my_task.py) — {reference}"]]
    assert PENDING + gone not in combo_entries(first)
    assert json.loads(settings.value(USER_TASKS_KEY)) == [reference]
    assert combo.currentData() == "regression"  # the entries after it moved up: the task and its form stay
    assert find(first, "hiddenOptionEdit").value() == 12 and find(first, "epochsEdit").value() == 3
    assert "Removed gone.py from the task list" in first.statusBarWidget.message.text()
    first.close()
    restore(((), (), ()))  # as a new process: no user task loaded or remembered

    second = make_window()
    entries = combo_entries(second)
    assert PENDING + gone not in entries and entries[PENDING + reference][1]
    assert "gone.py" not in second.logPanel.toPlainText()
    removal.pick = ""  # cancelled: nothing changes
    second.task_actions.remove_action.trigger()
    assert removal.offered[1] == [f"regression (my_task.py) — {reference}"]
    assert json.loads(settings.value(USER_TASKS_KEY)) == [reference] and PENDING + reference in combo_entries(second)


@pytest.mark.timeout(120)
def test_a_loaded_task_removed_while_picked_leaves_the_picker_on_a_built_in_and_can_be_added_again(
    qtbot, window, tmp_path, dialogs, removal
):
    from core.tasks import task_names, task_source

    window.task_actions.remove_action.trigger()  # nothing remembered yet: nothing to offer
    assert removal.offered == [] and "No task of yours is listed" in window.statusBarWidget.message.text()
    path = task_file(tmp_path)
    reference = f"{path.resolve()}:RegressionTask"
    add_task(qtbot, window, dialogs, path)
    combo = window.setupPanel.taskCombo
    assert combo.currentData() == "regression"

    removal.pick = reference
    window.task_actions.remove_action.trigger()
    assert removal.offered == [[f"regression (my_task.py) — {reference}"]]
    assert combo.currentData() == "tiny" and "regression" not in combo_entries(window)
    assert window.findChild(QWidget, "featuresOptionEdit") is None  # the form is the built-in task's
    assert find(window, "taskDescription").text() == window.setupPanel._tasks["tiny"].description
    assert find(window, "startButton").isEnabled()
    assert json.loads(window.settings.value(USER_TASKS_KEY)) == []
    assert "regression" not in task_names() and task_source("regression") == ""
    assert "Removed the task 'regression'" in window.statusBarWidget.message.text()

    path.with_suffix(".ran").unlink()
    add_task(qtbot, window, dialogs, path)  # added again: asked again, and imported again in a child process
    assert len(dialogs.asked) == 2 and combo.currentData() == "regression"
    assert path.with_suffix(".ran").exists()
    assert find(window, "paramCount").text() == "321 trainable parameters"
    assert json.loads(window.settings.value(USER_TASKS_KEY)) == [reference]
    assert task_source("regression") == reference


@pytest.mark.timeout(120)
def test_removing_a_task_waits_for_the_run(qtbot, window, tmp_path, dialogs, removal):
    add_task(qtbot, window, dialogs, task_file(tmp_path))
    actions = (window.task_actions.add_action, window.task_actions.add_module_action, window.task_actions.remove_action)
    assert all(action.isEnabled() for action in actions)
    quick_run(window, tmp_path / "run", max_steps=1_000_000, samples=8192, separate_process=False)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "startButton")
    assert not any(action.isEnabled() for action in actions)
    removal.pick = "my_task.py"
    window.task_actions.remove_action.trigger()  # disabled: nothing is asked
    assert removal.offered == [] and "regression" in combo_entries(window)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "stopButton")
    assert all(action.isEnabled() for action in actions)


@pytest.mark.timeout(120)
def test_removing_the_task_the_last_settings_were_for_starts_the_next_session_on_a_built_in(
    qtbot, make_window, settings, tmp_path, dialogs, removal
):
    path = task_file(tmp_path)
    first = make_window()
    add_task(qtbot, first, dialogs, path)
    set_field(first, "hiddenOptionEdit", 12)
    first.close()  # its settings are the task file's
    restore(((), (), ()))

    second = make_window()
    assert "pick it in the task list" in second.logPanel.toPlainText()
    removal.pick = "my_task.py"
    second.task_actions.remove_action.trigger()
    assert second.setupPanel.taskCombo.currentData() == "tiny"
    second.close()  # the form untouched: the built-in task's is saved, not the removed task's kept
    restore(((), (), ()))

    third = make_window()
    assert third.setupPanel.taskCombo.currentData() == "tiny" and "regression" not in combo_entries(third)
    log = third.logPanel.toPlainText()
    assert "regression" not in log and "ignored" not in log, log


@pytest.mark.timeout(120)
def test_no_task_file_runs_in_the_window_process_while_a_window_is_open(make_window, tmp_path):
    """Anything in the window that asks for a listed task file's class (a settings save, a check) gets a
    ConfigError, not the file's code run here; out of any window (the CLI) the same call loads it."""
    from core.errors import ConfigError
    from core.tasks import get_task_class, remember_task

    path = task_file(tmp_path)
    with restored_task_registry():
        window = make_window()
        info = remember_task(f"{path.resolve()}:RegressionTask")
        with pytest.raises(ConfigError, match="pick it in the task list"):
            get_task_class(info.name)
        assert not path.with_suffix(".ran").exists()
        window.close()
        assert get_task_class(info.name).name == info.name and path.with_suffix(".ran").exists()
