"""A 2-process (torchrun, gloo) run from the window: rank 0's events stream into the same plots; Stop works."""

from __future__ import annotations

import os

import pytest
from gui_helpers import click, find, finish_run, loss_points, quick_run, set_field

from core.engine.checkpoints import load_checkpoint

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_two_process_run_streams_loss_and_completes(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=30, log_interval=5)
    set_field(window, "processesEdit", 2)
    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=90_000, check_params_cb=lambda running: not running
    ):
        click(qtbot, window, "startButton")
        assert window.controller.run.processes > 1  # a DDP run: it can be stopped, not paused
        assert not find(window, "pauseButton").isEnabled()  # ranks can't pause together
        qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=60_000)
    assert loss_points(window) >= 5
    assert "completed" in window.statusBarWidget.message.text().lower(), window.statusBarWidget.message.text()
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    assert window.last_checkpoint == str(tmp_path / "run" / "checkpoint.pt")


@pytest.mark.timeout(120)
def test_stop_during_a_two_process_run_ends_stopped_with_a_checkpoint(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=1_000_000, log_interval=5, samples=8192)
    set_field(window, "processesEdit", 2)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 2, timeout=60_000)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=60_000) as stopped:
        click(qtbot, window, "stopButton")
        assert find(window, "stopButton").text() == "Stopping…"
    assert stopped.args == [False]
    assert "stopped" in window.statusBarWidget.message.text().lower(), window.statusBarWidget.message.text()
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["step"] >= window.plotsPanel.series("loss_raw").x[-1]


@pytest.mark.timeout(60)
def test_launcher_failure_shows_its_last_stderr_line(qtbot, window, tmp_path, monkeypatch):
    import sys

    import app.run.process_run

    script = "import sys; sys.stderr.write('rank 1 died\\nrun failed: gloo connection refused\\n'); sys.exit(1)"
    monkeypatch.setattr(app.run.process_run, "launcher_command", lambda *args: [sys.executable, "-c", script])
    quick_run(window, tmp_path / "run", max_steps=10)
    set_field(window, "processesEdit", 2)
    finish_run(qtbot, window)
    message = window.statusBarWidget.message.text()
    assert "run failed: gloo connection refused" in message, message
    assert "rank 1 died" in window._error_details
    assert find(window, "startButton").isEnabled()


@pytest.mark.timeout(120)
def test_closing_the_window_stops_and_waits_for_the_launcher(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=1_000_000, log_interval=5, samples=8192)
    set_field(window, "processesEdit", 2)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=60_000)
    process = window.controller.run.process
    window.close()
    assert not window.controller.running
    assert process.state() == process.ProcessState.NotRunning
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


@pytest.mark.timeout(120)
def test_stop_and_close_during_a_two_process_run_waits_without_blocking(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setattr(window, "ask_close_mid_run", lambda: "stop")
    quick_run(window, tmp_path / "run", max_steps=1_000_000, log_interval=5, samples=8192)
    set_field(window, "processesEdit", 2)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=60_000)
    pid = window.controller.run.process.processId()
    with qtbot.waitSignal(window.closed, timeout=60_000):
        assert window.request_close() is False  # the launcher stops while the window keeps painting
        assert window.isVisible() and window.controller.stopping
    assert not window.controller.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the launcher is gone
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
