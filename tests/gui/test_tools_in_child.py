"""Issue 42, "Nothing hangs": the window's device tools (LR finder, batch-size finder, model summary, compare
precisions, dtype inspector) run a task file's code in a child process (core.lab.tool_child). The tool's result
comes back as the in-window one would; a task whose code exits or never returns leaves the window alive, with
one line naming the file; Stop ends a tool stuck in the task's code."""

from __future__ import annotations

import sys

import pytest
from gui_helpers import click, find, set_field
from test_add_task import add_task
from test_user_task_journey import dialogs  # noqa: F401 (a fixture)

from core.lab import tool_child

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # the tools start a child process
TASK_FILE = tool_child.__file__.replace("core/lab/tool_child.py", "tests/fixtures/user_tasks/regression_task.py")
HOSTILE_ENV = "AMP_TEST_HOSTILE"  # exit: its loss calls os._exit(3); loop: its loss never returns
HOSTILE = f'''

import os as _os

_plain_loss = RegressionTask.loss


def _hostile_loss(self, *args, **kwargs):
    if _os.environ.get("{HOSTILE_ENV}") == "exit":
        _os._exit(3)
    while _os.environ.get("{HOSTILE_ENV}") == "loop":
        pass
    return _plain_loss(self, *args, **kwargs)


RegressionTask.loss = _hostile_loss
'''


@pytest.fixture
def added(qtbot, window, tmp_path, dialogs):
    """The hostile regression task file, added in the window (its code harmless while HOSTILE_ENV is unset)."""
    path = tmp_path / "hostile_tools.py"
    with open(TASK_FILE) as source:
        path.write_text(source.read() + HOSTILE)
    add_task(qtbot, window, dialogs, path)
    assert window.setupPanel.taskCombo.currentData() == "regression", window.statusBarWidget.message.text()
    return path


def imported_here(path) -> list[str]:
    return [name for name in sys.modules if path.stem in name]


def lr_finder(qtbot, window, steps: int = 20):
    dialog = window.tools.show_lr_finder()
    find(dialog, "lrStepsEdit").setValue(steps)
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=60_000, check_params_cb=lambda running: running):
        click(qtbot, dialog, "lrFinderRunButton")
    return dialog


def test_the_tools_run_a_task_files_code_in_a_child_and_answer_as_here(qtbot, window, added):
    dialog = lr_finder(qtbot, window)
    qtbot.waitUntil(lambda: not dialog.job.running, timeout=180_000)
    result = dialog.result
    assert result is not None, dialog.statusLabel.text()
    assert type(result).__name__ == "LRFinderResult" and result.task == "regression" and len(result.lrs) >= 5
    assert result.suggestion.lr is not None and "Suggested" in dialog.explanation.text()  # a real result's methods
    assert len(dialog._live_lrs) >= 5  # its progress came back step by step, drawn live

    inspector = window.tools.show_inspector()
    with qtbot.waitSignal(inspector.job.runningChanged, timeout=180_000, check_params_cb=lambda running: not running):
        click(qtbot, inspector, "inspectorRunButton")
    assert inspector.tree.topLevelItemCount() >= 1, inspector.statusLabel.text()

    # A sweep "one trial at a time" trains each trial in a training process of its own.
    window.set_runs_root(str(added.parent / "runs"))
    set_field(window, "maxStepsEdit", 6)
    sweep = window.tools.show_sweep()
    sweep.set_axes("lr = 1e-3, 3e-3")
    assert sweep.run_on() is None
    with qtbot.waitSignal(sweep.job.runningChanged, timeout=240_000, check_params_cb=lambda running: not running):
        click(qtbot, sweep, "sweepRunButton")
    assert sweep.result is not None and sweep.result.counts == {"completed": 2}, sweep.statusLabel.text()
    assert imported_here(added) == []  # the task file's code never ran in the window's process


@pytest.mark.parametrize("hostile", ["exit", "loop"])
def test_a_task_whose_code_exits_or_hangs_leaves_the_window_alive(qtbot, window, added, monkeypatch, hostile):
    monkeypatch.setenv(HOSTILE_ENV, hostile)
    monkeypatch.setattr(tool_child, "TOOL_STOP_GRACE", 1.0)
    dialog = lr_finder(qtbot, window, steps=50)
    if hostile == "loop":  # stuck in the task's loss: Stop ends it once the grace has passed
        qtbot.waitUntil(lambda: dialog.job.running and dialog.stopButton.isEnabled(), timeout=60_000)
        click(qtbot, dialog, "lrFinderStopButton")
    qtbot.waitUntil(lambda: not dialog.job.running, timeout=180_000)
    line = dialog.statusLabel.text()
    assert str(added) in line and "\n" not in line, line
    assert ("exit code 3" in line) if hostile == "exit" else ("stopped" in line), line
    assert window.isVisible() and window.startButton.isEnabled()  # the window lives, and can train again
    assert imported_here(added) == []


def test_closing_the_window_kills_a_memory_estimate_stuck_in_the_tasks_code(qtbot, window, tmp_path, dialogs):
    import psutil

    def estimates() -> list:
        return [p for p in psutil.Process().children(recursive=True) if "core.lab.memory_estimate" in p.cmdline()]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(HOSTILE_ENV, "loop")  # its probe step never returns
        patch.setenv("AMP_CONSOLE_TASK_IMPORT_SECONDS", "3000")  # the estimate's own limit: far past the test's
        path = tmp_path / "hostile_estimate.py"
        with open(TASK_FILE) as source:
            path.write_text(source.read() + HOSTILE)
        add_task(qtbot, window, dialogs, path)
        qtbot.waitUntil(lambda: bool(estimates()), timeout=120_000)
        window.close()  # returns at once: the estimate's child is killed, not waited for
    assert estimates() == [] and not window.isVisible()
