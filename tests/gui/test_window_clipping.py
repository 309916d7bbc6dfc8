"""Nothing in the window is cut without saying so: at a narrow width, during a run with a long task name on a
device with a long name, each status-bar text is cut with "…" and whole in its tooltip, and legends fit their plots."""

from __future__ import annotations

import dataclasses
import os

import pytest
from gui_helpers import finish_run, quick_run, set_field
from task_registry import task_files_run_here

from core.devices import cpu_info

LONG_TASK = "tiny_classifier_with_a_long_task_name"  # 40 characters at most
TASK_FILE = f"""
from core.tasks.tiny.task import TinyClassifierTask


class LongNamedTask(TinyClassifierTask):
    name = {LONG_TASK!r}
"""


@pytest.fixture
def long_window(make_window, tmp_path, restored_tasks):
    from core.tasks import add_task

    device = dataclasses.replace(cpu_info(), name="Intel(R) Xeon(R) Platinum 8480+ with a long marketing name " * 2)
    window = make_window(devices=[device])
    (tmp_path / "long_task.py").write_text(TASK_FILE)
    with task_files_run_here():  # loaded here, as File → Add task… does in a child
        window.setupPanel.add_task(add_task(str(tmp_path / "long_task.py")))
    return window


def shoot(window, name: str) -> None:
    if folder := os.environ.get("AMP_CONSOLE_SCREENSHOTS"):
        window.grab().save(os.path.join(folder, name))


def assert_nothing_cut(window) -> None:
    from app.status import ElidedLabel

    for label in window.statusBarWidget.findChildren(ElidedLabel):
        if label.isVisible() and label.text():
            shown = label.displayed_text()
            assert shown == label.text() or (shown.endswith("…") and label.text() in label.toolTip()), (
                label.objectName()
            )
    panel = window.plotsPanel
    for key, plot in panel.plots.items():
        title = panel._titles[key]
        assert title.shown() == title.text or (title.shown().endswith("…") and plot.toolTip() == title.text)
        if (legend := panel._legends.get(key)) is not None:
            for _sample, label in legend.items:
                assert label.item.sceneBoundingRect().right() <= plot.width() + 1, (key, label.text)
                assert not label.text.endswith("…") or label.toolTip(), (key, label.text)


@pytest.mark.slow  # a user task trains in a child process
@pytest.mark.timeout(300)
def test_a_narrow_window_cuts_status_texts_with_tooltips_and_legends_fit(qtbot, long_window, tmp_path):
    window = long_window
    quick_run(window, tmp_path / ("run-" + "long-folder-name-" * 4))
    set_field(window, "taskCombo", LONG_TASK)
    finish_run(qtbot, window)
    qtbot.waitUntil(lambda: window.plotsPanel.note("loss") == "")
    shoot(window, "window_default.png")
    assert_nothing_cut(window)
    window.resize(1000, 760)  # narrower than the window's minimum: as narrow as it goes
    narrowest = window.minimumSizeHint().width()
    qtbot.waitUntil(lambda: window.width() <= max(1000, narrowest))
    legend = window.plotsPanel._legends["eval"]
    qtbot.waitUntil(lambda: any(label.text.endswith("…") for _s, label in legend.items))
    shoot(window, "window_narrow.png")
    assert_nothing_cut(window)


@pytest.mark.timeout(30)
def test_a_long_choice_is_cut_with_an_ellipsis_and_whole_in_the_tooltip(qtbot):
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    from app.panels.devices import describe_device
    from app.panels.editors import NoWheelComboBox

    combo = NoWheelComboBox(toolTip="The task to train")
    qtbot.addWidget(combo)
    combo.addItem(LONG_TASK)
    combo.setFixedWidth(120)
    combo.show()
    qtbot.waitUntil(lambda: combo.elided)
    QApplication.sendEvent(combo, QHelpEvent(QEvent.Type.ToolTip, QPoint(5, 5), combo.mapToGlobal(QPoint(5, 5))))
    qtbot.waitUntil(lambda: QToolTip.text() == f"{LONG_TASK}\n\nThe task to train")
    combo.setFixedWidth(600)
    qtbot.waitUntil(lambda: not combo.elided)
    device = dataclasses.replace(cpu_info(), name="A device with a very long marketing name " * 3)
    label, tooltip = describe_device(device)
    assert label.splitlines()[0].endswith("…") and device.name in tooltip


@pytest.mark.timeout(30)
def test_the_queue_table_fits_its_width_and_keeps_long_texts_in_tooltips(qtbot, tmp_path):
    from app.panels.queue import QueuePanel
    from core.config import RunConfig
    from core.runs import queue

    failure = "PrecisionError: fp8 is not available on cpu: fp8 needs float8 tensor cores " * 2
    name = f"{LONG_TASK}-{LONG_TASK}-bf16-pure"
    queue.add_entries(tmp_path, [(name, RunConfig()), ("short", RunConfig())])
    with queue.editing(tmp_path) as data:
        data["entries"][0].update(state="failed", folder=str(tmp_path / f"20261207-{name}"), result=failure)
    panel = QueuePanel(lambda: tmp_path, lambda: None)
    qtbot.addWidget(panel)
    panel.resize(700, 300)
    panel.show()
    table = panel.table
    qtbot.waitUntil(lambda: table.rowCount() == 2 and table.viewport().width() > 0)
    qtbot.waitUntil(lambda: table.columnWidth(0) > 0 and table.isVisible())
    assert table.horizontalHeader().length() <= table.viewport().width() and table.columnWidth(3) >= 120
    assert table.item(0, 3).toolTip() == failure and table.item(0, 0).toolTip() == name
    panel.shutdown()


@pytest.mark.timeout(30)
def test_a_failed_memory_estimate_is_cut_with_an_ellipsis_and_whole_in_the_tooltip(qtbot):
    from gui_helpers import run_form

    form = run_form(qtbot)
    message = "ConfigError: data: /home/user/" + "a-long-folder/" * 12 + "train.parquet: the file does not exist"
    form._estimate_failed(message, "")
    assert form.memoryEstimate.text().endswith("…)") and form.memoryEstimate.toolTip() == message
