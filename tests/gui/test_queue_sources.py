"""Issue 46 item 1: the window queues more than the form's settings: a sweep's trials (the sweep dialog's "Add
trials to queue"), a task file's tasks (read from its source: nothing of it runs in the window) and settings
files. Adding trains nothing."""

from __future__ import annotations

import pytest
from gui_helpers import click, find, quick_run, set_field
from PySide6.QtWidgets import QFileDialog
from test_add_task import MARKER, TASK_FILE

from core.config import RunConfig
from core.runs.queue import read_queue


def entries(root) -> list[tuple[str, RunConfig]]:
    return [(e["name"], RunConfig.from_dict(e["config"])) for e in read_queue(root)["entries"]]


def test_a_sweeps_trials_go_to_the_queue(qtbot, window, runs_root_in_tmp):
    quick_run(window, "", max_steps=6)
    set_field(window, "batchSizeEdit", 16)
    dialog = window.tools.show_sweep()
    assert not find(dialog, "sweepQueueButton").isEnabled()  # no axes, no plan
    dialog.set_axes("lr = 0.1, 0.01")
    qtbot.waitUntil(lambda: find(dialog, "sweepQueueButton").isEnabled(), timeout=60_000)
    click(qtbot, dialog, "sweepQueueButton")
    queued = entries(runs_root_in_tmp)
    assert [config.lr for _name, config in queued] == [0.1, 0.01]
    assert all(config.batch_size == 16 and config.max_steps == 6 for _name, config in queued)  # the form's settings
    assert [name.split()[0] for name, _config in queued] == ["tiny", "tiny"]
    panel = window.queueDialog.panel
    assert window.queueDialog.isVisible() and [e["state"] for e in panel.entries] == ["pending", "pending"]
    assert not dialog.job.running  # queued, not run


def test_a_task_files_tasks_and_settings_files_go_to_the_queue(qtbot, window, runs_root_in_tmp, tmp_path, monkeypatch):
    source = TASK_FILE.read_text()
    second = source[source.index("class RegressionTask(Task):") :].replace("RegressionTask", "WideTask")
    second = second.replace('name = "regression"', 'name = "wide_regression"')
    path = tmp_path / "two_tasks.py"
    path.write_text(source + "\n\n" + second + MARKER)
    set_field(window, "precisionCombo", "bf16")
    panel = window.show_queue().panel
    panel.add_task_file(str(path))
    queued = entries(runs_root_in_tmp)
    assert [config.task for _name, config in queued] == ["regression", "wide_regression"]
    assert [config.task_file for _name, config in queued] == [f"{path}:RegressionTask", f"{path}:WideTask"]
    assert all(config.lr == 3e-3 and config.precision == "bf16" for _name, config in queued)  # its defaults; the form's
    assert queued[0][0] == "regression (two_tasks.py)"
    assert not path.with_suffix(".ran").exists()  # read from its source only

    toml = tmp_path / "long.toml"
    RunConfig.for_task("tiny", max_steps=7).save_toml(toml)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(toml)], ""))
    panel.buttons["addFiles"].click()
    name, config = entries(runs_root_in_tmp)[-1]
    assert name == "long" and config.task == "tiny" and config.max_steps == 7
    assert [e["state"] for e in panel.entries] == ["pending"] * 3


@pytest.mark.parametrize("text", ["x = 1\n", "class Plain:\n    pass\n"])
def test_a_file_without_tasks_is_one_line(window, runs_root_in_tmp, tmp_path, text):
    path = tmp_path / "none.py"
    path.write_text(text)
    panel = window.show_queue().panel
    panel.add_task_file(str(path))
    assert panel.statusLabel.text() == f"{path} defines no Task class" and not read_queue(runs_root_in_tmp)["entries"]
