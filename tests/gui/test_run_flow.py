"""The full training flow through the real widgets: Start, live loss, Pause, Resume, Stop, checkpoint.

The flow runs twice: in a separate process (the app's default) and on a QThread of the window's process. Closing
mid-run runs on a thread; closing a paused run in a separate process is the prestarted process test's end.
"""

from __future__ import annotations

import os

import pytest
from gui_helpers import MODES, PROCESS_WAIT_MS, click, find, finish_run, loss_points, quick_run
from PySide6.QtCore import QThread

from core.engine.checkpoints import load_checkpoint
from core.engine.events import RunPaused, RunResumed


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(300)
@MODES
def test_start_pause_resume_stop_writes_a_loadable_checkpoint(qtbot, window, tmp_path, separate):
    out_dir = tmp_path / "run"
    quick_run(window, out_dir, max_steps=1_000_000, samples=8192, separate_process=separate)
    assert find(window, "pauseButton").isEnabled() is False
    click(qtbot, window, "startButton")
    assert not find(window, "startButton").isEnabled()
    assert window.controller.separate_process is separate
    assert find(window, "pauseButton").isEnabled()

    qtbot.waitUntil(lambda: loss_points(window) >= 3, timeout=PROCESS_WAIT_MS)
    qtbot.waitUntil(lambda: find(window, "progressBar").value() > 0, timeout=PROCESS_WAIT_MS)  # refreshed at 4 Hz
    assert "step" in window.statusBarWidget.steps.text()
    assert window.statusBarWidget.dtypes.text() == "autocast float32 · params float32"
    assert window.statusBarWidget.scaler.text() == "GradScaler off"

    events = []
    window.controller.event.connect(events.append)
    click(qtbot, window, "pauseButton")
    assert find(window, "pauseButton").text() == "Resume"
    qtbot.waitUntil(
        lambda: any(isinstance(e, RunPaused) for e in events), timeout=PROCESS_WAIT_MS
    )  # the pause took effect
    paused = next(e for e in events if isinstance(e, RunPaused))
    assert f"paused at step {paused.step:,}" in window.statusBarWidget.message.text().lower()
    paused_points = loss_points(window)

    click(qtbot, window, "pauseButton")
    assert find(window, "pauseButton").text() == "Pause"
    qtbot.waitUntil(lambda: any(isinstance(e, RunResumed) for e in events), timeout=PROCESS_WAIT_MS)
    resumed = next(e for e in events if isinstance(e, RunResumed))
    assert resumed.step == paused.step  # no step was taken while paused
    assert resumed.paused_seconds > 0
    qtbot.waitUntil(lambda: loss_points(window) > paused_points + 2, timeout=PROCESS_WAIT_MS)

    with qtbot.waitSignal(window.controller.runningChanged, timeout=PROCESS_WAIT_MS) as stopped:
        click(qtbot, window, "stopButton")
        assert "stopping" in window.statusBarWidget.message.text().lower()
        assert not find(window, "stopButton").isEnabled()
        assert not find(window, "startButton").isEnabled()
    assert stopped.args == [False]
    assert "stopped" in window.statusBarWidget.message.text().lower()
    assert find(window, "startButton").isEnabled()

    checkpoint = out_dir / "checkpoint.pt"
    assert checkpoint.is_file()
    assert window.last_checkpoint == str(checkpoint)
    state = load_checkpoint(checkpoint)
    assert state["task"] == "tiny"
    assert state["step"] >= window.plotsPanel.series("loss_raw").x[-1]


@pytest.mark.timeout(60)
def test_completed_run_then_a_second_run_reuses_the_window(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "a", epochs=1, samples=1024)
    finish_run(qtbot, window)
    assert "completed" in window.statusBarWidget.message.text().lower()
    assert find(window, "progressBar").value() == find(window, "progressBar").maximum()
    assert len(window.plotsPanel.series("eval:accuracy")) >= 1
    first = loss_points(window)

    quick_run(window, tmp_path / "b", epochs=1, samples=1024, log_interval=2)
    finish_run(qtbot, window)
    assert loss_points(window) > first  # the second run's points replaced the first's
    assert (tmp_path / "b" / "checkpoint.pt").is_file()


@pytest.mark.timeout(300)
def test_closing_the_window_mid_run_stops_and_joins_the_thread(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=1_000_000, samples=8192)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=PROCESS_WAIT_MS)
    running_threads = [t for t in window.findChildren(QThread)]
    window.close()
    assert not window.controller.running
    assert all(not t.isRunning() for t in running_threads)
    assert (tmp_path / "run" / "checkpoint.pt").is_file()  # stopping writes a checkpoint


@pytest.mark.timeout(300)
def test_closing_while_paused_still_stops(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=1_000_000, samples=8192)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=PROCESS_WAIT_MS)
    click(qtbot, window, "pauseButton")
    window.close()
    assert not window.controller.running
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_prestarted_process_takes_the_next_run_and_a_new_one_is_prepared(qtbot, make_window, tmp_path):
    """A spare process takes the next run and another is prepared; closing the window while the run of a spare
    is paused stops it (checkpoint written), ends the process and starts no other."""
    window = make_window(prestart_runs=True)
    spare = window.controller.spare
    assert spare is not None, "no training process was started ahead of time"
    qtbot.waitUntil(lambda: spare.warm, timeout=PROCESS_WAIT_MS)  # engine loaded, waiting for settings

    quick_run(window, tmp_path / "run", max_steps=20, separate_process=True)
    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=30_000, check_params_cb=lambda running: not running
    ):
        click(qtbot, window, "startButton")
        assert window.controller.run is spare  # the run went to the waiting process
        assert window.controller.spare is None
    assert "completed" in window.statusBarWidget.message.text().lower()
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    assert loss_points(window) >= 4

    following = window.controller.spare  # the next run's process is prepared when this one ends
    assert following is not None and following is not spare
    pid = following.process.processId()
    find(window, "separateProcessCheck").setChecked(False)  # thread runs: no spare held
    assert window.controller.spare is None
    assert process_gone(pid)

    find(window, "separateProcessCheck").setChecked(True)
    again = window.controller.spare
    assert again is not None
    pid = again.process.processId()
    quick_run(window, tmp_path / "long", max_steps=1_000_000, samples=8192, separate_process=True)
    click(qtbot, window, "startButton")  # takes the new spare; closing mid-run must not start another
    assert window.controller.run is again
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=PROCESS_WAIT_MS)
    events = []
    window.controller.event.connect(events.append)
    click(qtbot, window, "pauseButton")
    qtbot.waitUntil(lambda: any(isinstance(e, RunPaused) for e in events), timeout=PROCESS_WAIT_MS)
    running_threads = [t for t in window.findChildren(QThread)]
    window.close()
    assert window.controller.spare is None and not window.controller.running
    assert all(not t.isRunning() for t in running_threads)
    assert process_gone(pid), "the training process outlived the window"
    assert (tmp_path / "long" / "checkpoint.pt").is_file()  # stopping a paused run writes a checkpoint
