"""What a new user runs into in the main window: double starts, a run that cannot start, the log, menus, title."""

from __future__ import annotations

import pytest
from gui_helpers import click, find, finish_run, loss_points, quick_run
from PySide6.QtCore import Qt

import app.run.process_run


@pytest.mark.timeout(60)
def test_double_clicking_start_starts_one_run(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=1_000_000, samples=8192, separate_process=False)
    start = find(window, "startButton")
    qtbot.mouseClick(start, Qt.MouseButton.LeftButton)  # a double click: two clicks in a row
    qtbot.mouseClick(start, Qt.MouseButton.LeftButton)
    run = window.controller.run
    assert run is not None
    assert window.start_run() is False  # F5 again, or the menu's Start: nothing new
    window.startAction.trigger()
    assert window.controller.run is run
    assert window.windowTitle() == "run (training) — AMP Console"  # the run's folder name, not its path
    assert not window.refreshAction.isEnabled()  # a new device list would change the running run's device
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=30_000)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "stopButton")
        assert window.windowTitle() == "run (stopping) — AMP Console"
        assert window.start_run() is False  # starting while the stop is in progress
    assert window.windowTitle() == "AMP Console"
    assert window.refreshAction.isEnabled()
    assert (tmp_path / "run-2").exists() is False  # only the one run wrote anything


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_training_program_that_cannot_start_keeps_its_error_on_screen(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setattr(app.run.process_run, "spare_command", lambda: [str(tmp_path / "no-such-python")])
    quick_run(window, tmp_path / "run", max_steps=10, separate_process=True)
    finish_run(qtbot, window)
    message = window.statusBarWidget.message.text()
    assert message.startswith("Could not start: could not start"), message
    assert "no-such-python" in message
    assert find(window, "startButton").isEnabled()
    assert window.windowTitle() == "AMP Console"


@pytest.mark.timeout(60)
def test_the_title_names_the_settings_or_the_run_briefly_and_the_app_once(qtbot, window, tmp_path):
    """'<name> — AMP Console': Qt appends the application display name to a title that does not end with it, so
    a title ending otherwise read 'AMP Console — … — AMP Console' in the task bar; a full path never fits."""
    assert window.windowTitle() == "AMP Console"
    deep = tmp_path / "some" / "deep" / "folder"
    deep.mkdir(parents=True)
    window.file_actions.save_toml(str(deep / "my-settings.toml"))
    assert window.windowTitle() == "my-settings — AMP Console"
    assert window.file_actions.load_toml(str(deep / "my-settings.toml"))
    assert window.windowTitle() == "my-settings — AMP Console"
    quick_run(window, deep / "a-run", max_steps=1_000_000, samples=8192)
    click(qtbot, window, "startButton")
    title = window.windowTitle()
    assert title == "a-run (training) — AMP Console"
    assert title.count("AMP Console") == 1 and str(tmp_path) not in title
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=30_000)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "stopButton")
    assert window.windowTitle() == "my-settings — AMP Console"


@pytest.mark.timeout(60)
def test_the_log_stays_where_the_user_scrolled(qtbot, window):
    log = window.logPanel
    log.resize(400, 120)
    for n in range(200):
        log.log(f"line {n}")
    bar = log.verticalScrollBar()
    assert bar.value() == bar.maximum()  # following the end
    bar.setValue(10)  # the user scrolls up to read
    log.log("a new line")
    assert bar.value() == 10
    bar.setValue(bar.maximum())
    log.log("another")
    assert bar.value() == bar.maximum()  # back at the end: following again


@pytest.mark.timeout(60)
def test_error_details_open_one_box(qtbot, window):
    from PySide6.QtWidgets import QMessageBox

    window.show_error("Run failed: loss became nan", "Traceback: boom")
    window.show_error_details()
    window.show_error_details()
    boxes = [b for b in window.findChildren(QMessageBox) if b.isVisible()]
    assert len(boxes) == 1 and boxes[0].detailedText() == "Traceback: boom"
    assert boxes[0].text() == "Run failed: loss became nan"
    boxes[0].close()


@pytest.mark.timeout(60)
def test_precision_tools_wait_for_the_engine(qtbot, settings, cpu_devices):
    from app.main_window import MainWindow

    window = MainWindow(settings=settings, devices=cpu_devices, prestart_runs=False)
    qtbot.addWidget(window)
    assert not window.tools.compareAction.isEnabled() and not window.tools.inspectAction.isEnabled()
    assert not window.refreshAction.isEnabled()
    window.load_engine()
    assert window.tools.compareAction.isEnabled() and window.tools.inspectAction.isEnabled()
    assert window.refreshAction.isEnabled()
