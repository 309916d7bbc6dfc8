"""Engine errors show in the window and the app stays usable; export and resume through the File menu."""

from __future__ import annotations

import json
import os
import signal

import pytest
from gui_helpers import MODES, PROCESS_WAIT_MS, UI_WAIT_MS, click, find, finish_run, loss_points, quick_run, set_field

from core.engine.checkpoints import load_checkpoint
from core.engine.events import RunEnded


@pytest.mark.timeout(300)
@MODES
def test_setup_error_from_the_engine_is_shown_and_the_app_recovers(qtbot, window, tmp_path, separate):
    quick_run(window, tmp_path / "run", samples=256, batch_size=64, separate_process=separate)
    set_field(window, "gradAccumEdit", 64)  # more micro-batches than an epoch has: the trainer refuses
    finish_run(qtbot, window)
    message = window.statusBarWidget.message.text()
    assert message.startswith("Could not start: grad_accum:")
    assert "exceed" in find(window, "gradAccumError").text()
    assert "ERROR" in window.logPanel.toPlainText()
    assert not find(window, "startButton").isEnabled()  # until the marked field changes

    set_field(window, "gradAccumEdit", 1)
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)
    finish_run(qtbot, window)
    assert "completed" in window.statusBarWidget.message.text().lower()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_training_process_is_reported_and_the_app_recovers(qtbot, window, tmp_path):
    """An out-of-memory kill (SIGKILL) of the training process ends the run, not the window."""
    quick_run(window, tmp_path / "run", max_steps=1_000_000, samples=8192, separate_process=True)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=PROCESS_WAIT_MS)
    pid = window.controller.run.process.processId()
    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=30_000, check_params_cb=lambda running: not running
    ):
        os.kill(pid, signal.SIGKILL)
    message = window.statusBarWidget.message.text()
    assert message.startswith("Run failed: the training process was killed (SIGKILL)"), message
    assert "out of memory" in message, message
    assert "ERROR" in window.logPanel.toPlainText()
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)

    quick_run(window, tmp_path / "again", max_steps=20, separate_process=True)
    finish_run(qtbot, window)
    assert "completed" in window.statusBarWidget.message.text().lower()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_that_hangs_after_stop_is_ended_and_the_app_recovers(qtbot, window, tmp_path, monkeypatch):
    """A child stuck in a device op (here: frozen with SIGSTOP) is interrupted, then killed, after the grace."""
    import app.run.process_run

    monkeypatch.setattr(app.run.process_run, "STOP_GRACE_SECONDS", 0.3)
    quick_run(window, tmp_path / "run", max_steps=1_000_000, samples=8192, separate_process=True)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=PROCESS_WAIT_MS)
    os.kill(window.controller.run.process.processId(), signal.SIGSTOP)
    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=UI_WAIT_MS, check_params_cb=lambda running: not running
    ):
        click(qtbot, window, "stopButton")
        assert find(window, "stopButton").text() == "Stopping…"
    message = window.statusBarWidget.message.text()
    assert message.startswith("Run failed: the run did not stop within 0.3 s of Stop and was ended (SIGKILL)"), message
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_relative_output_folder_means_the_same_in_a_separate_process(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    quick_run(window, "runs/relative", max_steps=10, separate_process=True)
    finish_run(qtbot, window)
    assert "completed" in window.statusBarWidget.message.text().lower()
    assert (tmp_path / "runs" / "relative" / "checkpoint.pt").is_file()
    assert os.path.samefile(window.last_checkpoint, tmp_path / "runs" / "relative" / "checkpoint.pt")


@pytest.mark.timeout(300)
def test_a_second_run_into_the_same_folder_keeps_the_first_checkpoint(qtbot, window, tmp_path):
    """The engine's rule, on a thread (the separate process's run resolves its folder as the relative folder
    test shows)."""
    quick_run(window, tmp_path / "run", max_steps=5)
    finish_run(qtbot, window)
    first = (tmp_path / "run" / "checkpoint.pt").read_bytes()
    finish_run(qtbot, window)  # the same form again
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == first
    assert window.last_checkpoint == str(tmp_path / "run-2" / "checkpoint.pt")
    assert "holds an earlier run, which is kept" in window.logPanel.toPlainText()


@pytest.mark.timeout(60)
def test_resume_from_a_corrupt_checkpoint_shows_the_engines_message(qtbot, window, tmp_path):
    corrupt = tmp_path / "broken.pt"
    corrupt.write_bytes(b"this is not a checkpoint")
    window.file_actions.resume(str(corrupt))
    qtbot.waitUntil(lambda: "Cannot resume" in window.statusBarWidget.message.text(), timeout=UI_WAIT_MS)
    message = window.statusBarWidget.message.text().lower()
    assert "broken.pt: not a" in message and "checkpoint" in message, message  # the engine's own words
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=UI_WAIT_MS)
    assert not window.controller.running
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)


@pytest.mark.timeout(60)
def test_a_failed_run_shows_message_and_details(qtbot, window):
    failed = RunEnded(
        status="failed",
        message="loss became nan in fp16",
        step=7,
        epoch=1,
        final_loss=None,
        metrics={},
        checkpoint=None,
        samples_per_second=None,
        details="Traceback: boom",
    )
    window._on_event(failed)
    assert window.statusBarWidget.message.text() == "Run failed: loss became nan in fp16"
    assert window.statusBarWidget.detailsButton.isVisible()
    assert "Traceback: boom" in window.logPanel.toPlainText()
    window.show_error_details()
    box = window.findChild(type(window).__mro__[0].__base__, "")  # any dialog; closed below
    _ = box
    for dialog in window.findChildren(__import__("PySide6.QtWidgets", fromlist=["QMessageBox"]).QMessageBox):
        assert dialog.detailedText() == "Traceback: boom"
        dialog.close()


@pytest.mark.timeout(120)
def test_export_then_resume_continues_the_run(qtbot, window, tmp_path):
    out_dir = tmp_path / "run"
    quick_run(window, out_dir, max_steps=1_000_000, samples=8192)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 2, timeout=30_000)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "stopButton")
    checkpoint = out_dir / "checkpoint.pt"
    assert window.last_checkpoint == str(checkpoint)
    stopped_at = load_checkpoint(checkpoint)["step"]

    destination = tmp_path / "export" / "model"
    window.file_actions.export(str(checkpoint), str(destination))
    qtbot.waitUntil(lambda: "Exported" in window.statusBarWidget.message.text(), timeout=30_000)
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=UI_WAIT_MS)
    for suffix in (".pt", ".safetensors", ".json"):
        assert destination.with_suffix(suffix).is_file()
    manifest = json.loads(destination.with_suffix(".json").read_text())
    assert manifest["task"] == "tiny" and manifest["step"] == stopped_at

    set_field(window, "maxStepsEdit", 10)  # the checkpoint's own config comes back on resume
    window.file_actions.resume(str(checkpoint))
    qtbot.waitUntil(lambda: f"resumed at step {stopped_at}" in window.logPanel.toPlainText(), timeout=30_000)
    assert find(window, "maxStepsEdit").value() == 1_000_000
    steps_drawn = window.plotsPanel.series("loss_raw").x  # the run's earlier curve, read from metrics.jsonl
    assert len(steps_drawn) and min(steps_drawn) < stopped_at
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "stopButton")
    assert load_checkpoint(checkpoint)["step"] >= stopped_at
