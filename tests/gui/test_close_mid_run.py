"""Closing the window (File > Quit, the title bar) while a run trains: a question, and no frozen window.

"Stop and close" stops the run (checkpoint written) while the window keeps painting, then closes; "Keep
training" hides the window at once and closes it when the run has ended; "Cancel" keeps everything as it was.
What crosses the process boundary runs with a separate training process (the app's default) and on a QThread of
the window's process: Stop and close (the process ends with the window) and Keep training's SIGTERM (the
process's own handler stops it). The rest is the window's and runs on a thread.
"""

from __future__ import annotations

import os

import pytest
import shiboken6
from gui_helpers import MODES, PROCESS_WAIT_MS, click, find, loss_points, quick_run
from PySide6.QtCore import QThread, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

import app.main_window
from core.engine.checkpoints import load_checkpoint


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Answers:
    """Replaces the close question: records each time it was asked and gives `answer`."""

    def __init__(self, answer: str):
        self.answer = answer
        self.asked = 0

    def __call__(self) -> str:
        self.asked += 1
        return self.answer


def start_long_run(qtbot, window, out_dir, separate, max_steps=1_000_000):
    quick_run(window, out_dir, max_steps=max_steps, samples=8192, separate_process=separate)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 1, timeout=PROCESS_WAIT_MS)


@pytest.mark.timeout(300)
@MODES
def test_stop_and_close_keeps_the_window_responsive_then_closes(qtbot, window, tmp_path, separate, monkeypatch):
    answers = Answers("stop")
    monkeypatch.setattr(window, "ask_close_mid_run", answers)
    start_long_run(qtbot, window, tmp_path / "run", separate)
    threads = window.findChildren(QThread)
    pid = window.controller.run.process.processId() if separate else None

    assert window.request_close() is False  # the close waits for the run: no blocking wait in closeEvent
    assert window.controller.running  # returned while the run still stops (a blocking wait returns after it)
    assert answers.asked == 1
    assert window.isVisible()
    assert window.controller.stopping
    assert window.statusBarWidget.message.text().startswith("Stopping the run before closing")
    assert not find(window, "startButton").isEnabled() and not find(window, "stopButton").isEnabled()

    window.request_close()  # impatient: no second question, no second stop
    assert answers.asked == 1

    with qtbot.waitSignal(window.closed, timeout=PROCESS_WAIT_MS):
        pass
    assert not window.isVisible()
    assert not window.controller.running and window.controller.spare is None
    assert all(not shiboken6.isValid(t) or not t.isRunning() for t in threads)
    if separate:
        assert process_gone(pid), "the training process outlived the window"
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")  # stopping wrote a checkpoint
    assert state["step"] >= 1


@pytest.mark.timeout(300)
def test_cancel_keeps_the_window_and_the_run(qtbot, window, tmp_path, monkeypatch):
    answers = Answers("cancel")
    monkeypatch.setattr(window, "ask_close_mid_run", answers)
    start_long_run(qtbot, window, tmp_path / "run", separate=False)
    assert window.request_close() is False
    assert answers.asked == 1
    assert window.isVisible() and window.controller.running and not window.controller.stopping
    points = loss_points(window)
    qtbot.waitUntil(lambda: loss_points(window) > points, timeout=PROCESS_WAIT_MS)  # still training
    assert find(window, "stopButton").isEnabled()

    with qtbot.waitSignal(window.controller.runningChanged, timeout=PROCESS_WAIT_MS):
        click(qtbot, window, "stopButton")
    assert find(window, "startButton").isEnabled()  # a cancelled close leaves nothing behind
    assert window.request_close() is True  # nothing runs: no question
    assert answers.asked == 1


@pytest.mark.timeout(300)
def test_keep_training_hides_the_window_and_closes_it_when_the_run_ends(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setattr(window, "ask_close_mid_run", Answers("keep"))
    # Long enough (seconds of steps: hundreds a second) to be still running when the pause arrives, a few steps
    # after the first point is drawn; short enough to end soon after the window lets it go on.
    start_long_run(qtbot, window, tmp_path / "run", separate=False, max_steps=4_000)
    find(window, "pauseButton").click()  # a paused run would never end with the window gone
    # a busy machine delays the child
    qtbot.waitUntil(lambda: "Paused" in window.statusBarWidget.message.text(), timeout=PROCESS_WAIT_MS)
    with qtbot.waitSignal(window.closed, timeout=PROCESS_WAIT_MS):
        assert window.request_close() is False
        assert not window.isVisible()  # closed for the user at once
        assert window.controller.running and not window.controller.stopping
    assert not window.controller.running and window.controller.spare is None
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["step"] == 4_000  # the run went to its end


@pytest.mark.timeout(60)
def test_closing_after_stop_was_pressed_asks_nothing(qtbot, window, tmp_path, monkeypatch):
    answers = Answers("cancel")
    monkeypatch.setattr(window, "ask_close_mid_run", answers)
    start_long_run(qtbot, window, tmp_path / "run", separate=False)
    click(qtbot, window, "stopButton")
    with qtbot.waitSignal(window.closed, timeout=30_000):
        window.request_close()
    assert answers.asked == 0
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


@pytest.mark.timeout(60)
def test_a_stop_that_never_ends_is_cut_short_by_the_deadline(qtbot, window, tmp_path, monkeypatch):
    """The hard fallback: if the finished signal does not come in time, the window stops and joins the run."""
    monkeypatch.setattr(window, "ask_close_mid_run", Answers("stop"))
    monkeypatch.setattr(app.main_window, "CLOSE_TIMEOUT_MS", 1)
    start_long_run(qtbot, window, tmp_path / "run", separate=False)
    with qtbot.waitSignal(window.closed, timeout=30_000):
        window.request_close()
    assert not window.controller.running


@pytest.mark.timeout(60)
def test_the_question_box_itself(qtbot, window, tmp_path):
    """The real QMessageBox, answered the way a user would; screenshots for a look."""
    start_long_run(qtbot, window, tmp_path / "run", separate=False)
    seen = {}

    def answer():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, answer)
            return
        seen["buttons"] = [b.text() for b in box.buttons()]
        seen["text"] = box.text()
        box.grab().save(str(tmp_path / "close-question.png"))
        window.request_close()  # a second close while the question is open: ignored, no second box
        seen["second"] = QApplication.activeModalWidget() is box and len(window.findChildren(QMessageBox)) == 1
        box.findChild(type(box.buttons()[0]), "stopAndCloseButton").click()

    QTimer.singleShot(0, answer)
    with qtbot.waitSignal(window.closed, timeout=30_000):
        window.request_close()
    assert set(seen["buttons"]) == {"Stop and close", "Keep training", "Cancel"}
    assert "still training" in seen["text"]
    assert seen["second"]
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    if os.environ.get("AMP_CONSOLE_SCREENSHOTS"):
        window.grab().save(os.path.join(os.environ["AMP_CONSOLE_SCREENSHOTS"], "closed-window.png"))
        (tmp_path / "close-question.png").replace(
            os.path.join(os.environ["AMP_CONSOLE_SCREENSHOTS"], "close-question.png")
        )


@pytest.mark.timeout(300)
@MODES
def test_keep_training_says_where_the_run_goes_on_and_sigterm_stops_it(
    qtbot, window, tmp_path, separate, monkeypatch, capsys
):
    """The hidden window's run is not lost from sight: a tray notification (where there is a tray) and one line
    on stderr with the run folder, the command that shows it and the pid a SIGTERM stops gracefully."""
    from PySide6.QtWidgets import QSystemTrayIcon

    shown = []
    monkeypatch.setattr(QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    monkeypatch.setattr(QSystemTrayIcon, "showMessage", lambda self, title, text, *args: shown.append((title, text)))
    monkeypatch.setattr(window, "ask_close_mid_run", Answers("keep"))
    start_long_run(qtbot, window, tmp_path / "run", separate)
    pid = window.controller.run.process.processId() if separate else os.getpid()
    capsys.readouterr()
    with qtbot.waitSignal(window.closed, timeout=PROCESS_WAIT_MS):
        assert window.request_close() is False
        assert not window.isVisible() and window.controller.running
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1
        line = lines[0]
        assert str(tmp_path / "run") in line
        assert f"amp-console watch {tmp_path / 'run'}" in line
        assert f"kill -TERM {pid}" in line
        assert len(shown) == 1 and "run" in shown[0][1] and f"kill -TERM {pid}" in shown[0][1]
        if not separate:  # this process's SIGTERM is the window's Stop while the run goes on without it
            import signal

            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        os.kill(pid, 15)
    assert not window.controller.running
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")  # stopped with its checkpoint, before its end
    assert 1 <= state["step"] < 1_000_000
    import signal

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handed back once the window has closed


def test_the_notice_names_watch_with_the_run_name_or_its_folder(tmp_path):
    from app.keep_training import watch_command

    assert watch_command(tmp_path / "my run", tmp_path) == "amp-console watch 'my run'"
    assert watch_command(tmp_path / "a" / "r1", tmp_path) == f"amp-console watch {tmp_path / 'a' / 'r1'}"
