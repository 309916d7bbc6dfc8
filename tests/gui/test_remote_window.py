"""Runs that live on their own, from the window: a host added over a real sshd on 127.0.0.1 (tests/local_sshd.py)
lists its devices; a run started on it reaches the plots, pauses, resumes, goes on when the window closes, is
attached from a new window with its whole curve once, and stops with its checkpoint there. And File → Attach to
run… on a run folder here: a run another window trains (steered from the second window) and a finished one.

No ssh call may come from the GUI thread: every test records the ssh processes started there."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from app.panels import hosts
from core.engine.run_folder import is_in_use
from core.files import read_jsonl
from tests.gui.gui_helpers import PROCESS_WAIT_MS, click, find, loss_points, quick_run, set_field
from tests.local_sshd import NoSshd, start_sshd

WAIT = PROCESS_WAIT_MS


@dataclass
class SshServer:
    config: Path
    dest: str
    runs: Path  # the host's runs root
    prefix: str  # the remote command: this checkout's amp-console


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    try:
        server = start_sshd(tmp_path_factory.mktemp("sshd"))
    except NoSshd as exc:
        pytest.skip(f"no local sshd to stand in for a host: {exc}")
    runs = server.folder / "runs"
    try:
        yield SshServer(server.config, server.dest, runs, server.remote_command(runs))
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def ssh_never_on_the_gui_thread(monkeypatch):
    """Every process started on the main (GUI) thread whose program is ssh is a failure of the design."""
    on_gui_thread: list[str] = []
    original = subprocess.Popen.__init__

    def checked(self, args, *rest, **kwargs):
        program = str(args[0] if isinstance(args, (list, tuple)) else args)
        if threading.current_thread() is threading.main_thread() and Path(program).name == "ssh":
            on_gui_thread.append(" ".join(map(str, args)))
        return original(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", checked)
    yield
    assert not on_gui_thread, f"ssh called on the GUI thread: {on_gui_thread}"


def logged(window) -> int:
    """How many loss points the window was given (its series draws fewer, folded, once there are many)."""
    series = window.plotsPanel.series("loss_raw")
    return len(series) if series is not None else 0


def whole_from_the_start(window) -> bool:
    """Every logged step of the run, each once: the run logs every 5th step from step 5, so as many points as
    the last step / 5 means nothing lost and nothing repeated (true however the series folds what it draws)."""
    curve = steps(window)
    return len(curve) > 0 and curve[0] == 5 and logged(window) == int(curve[-1]) // 5


def steps(window) -> np.ndarray:
    series = window.plotsPanel.series("loss_raw")
    return np.asarray(series.x if series is not None else [], dtype=float)


def status(window) -> str:
    return find(window, "statusMessage").text()


def log_text(window) -> str:
    return window.logPanel.toPlainText()


def long_run(window, out_dir="") -> None:
    """A tiny run that trains until it is stopped."""
    quick_run(window, out_dir, max_steps=100_000_000, log_interval=5)
    set_field(window, "outDirEdit", str(out_dir))


@pytest.mark.slow
def test_a_run_on_a_host_started_watched_attached_and_stopped_from_the_window(
    qtbot, make_window, settings, sshd, monkeypatch
):
    monkeypatch.setattr(hosts, "SSH_OPTIONS", ("-F", str(sshd.config)))
    window = make_window()
    panel = window.devicesPanel

    # Add host…: the destination and the remote command; its devices come in off the GUI thread.
    dialog = panel.ask_add_host()
    find(dialog, "hostDestEdit").setText(sshd.dest)
    find(dialog, "hostCommandEdit").setText(sshd.prefix)
    click(qtbot, dialog, "addHostOkButton")
    qtbot.waitUntil(lambda: bool(panel.host_devices(sshd.dest)), timeout=WAIT)
    labels = [panel.list.item(row).text() for row in range(panel.list.count())]
    assert any(label.startswith(f"{sshd.dest}  ·  ") and "amp-console" in label for label in labels), labels
    assert window.window_settings.hosts() == [{"dest": sshd.dest, "command": sshd.prefix}]
    cpu = next(d for d in panel.host_devices(sshd.dest) if d.type == "cpu")
    panel.select(cpu.id, host=sshd.dest)
    assert panel.current_host() == sshd.dest

    # Start on the host's device: a run in a new folder under the host's runs root, followed into the plots.
    long_run(window)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: window.controller.running and loss_points(window) >= 5, timeout=WAIT)
    run = window.controller.run
    assert run.detached and run.target.startswith(f"{sshd.dest}:{sshd.runs}")
    folder = Path(run.folder)

    click(qtbot, window, "pauseButton")
    qtbot.waitUntil(lambda: "Paused at step" in status(window), timeout=WAIT)
    assert window.controller.paused and find(window, "pauseButton").text() == "Resume"
    qtbot.waitUntil(
        lambda: "pause requested (request 1): acknowledged; paused at step" in log_text(window), timeout=WAIT
    )
    paused_points = loss_points(window)
    click(qtbot, window, "pauseButton")
    qtbot.waitUntil(
        lambda: "resumed at step" in log_text(window) and loss_points(window) > paused_points + 2, timeout=WAIT
    )
    assert not window.controller.paused

    # Closing the window asks nothing and lets go: the run goes on on the host.
    seen, seen_count = steps(window), logged(window)
    assert whole_from_the_start(window)
    window.close()
    assert not window.isVisible() and is_in_use(folder)
    assert f"it goes on on {sshd.dest}: File → Attach to run…" in log_text(window)

    # Another window: the host is listed again, and the run is attached from its start, then live.
    second = make_window()
    qtbot.waitUntil(lambda: bool(second.devicesPanel.host_devices(sshd.dest)), timeout=WAIT)
    attach = second.remote.show_attach()
    assert find(attach, "attachTargetCombo").currentText() == run.target  # the recent run is offered
    click(qtbot, attach, "attachOkButton")
    qtbot.waitUntil(lambda: second.controller.running and logged(second) > seen_count + 5, timeout=WAIT)
    curve = steps(second)
    assert np.all(np.diff(curve) > 0), "a step shown twice or out of order"
    assert curve[-1] > seen[-1] and whole_from_the_start(second), "the attached curve lacks points or repeats some"

    # A dropped connection: said in the status bar, tried again, and the curve goes on with no gap or repeat.
    os.kill(second.controller.run._follower.ssh_pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: f"connection to {sshd.dest} lost" in log_text(second), timeout=WAIT)
    qtbot.waitUntil(lambda: f"connection to {sshd.dest} back" in log_text(second), timeout=WAIT)
    before = logged(second)
    qtbot.waitUntil(lambda: logged(second) > before + 3, timeout=WAIT)
    curve = steps(second)
    assert np.all(np.diff(curve) > 0) and whole_from_the_start(second), "a gap or a repeat"

    click(qtbot, second, "stopButton")
    qtbot.waitUntil(lambda: not second.controller.running, timeout=WAIT)
    assert "Stopped at step" in status(second)
    assert "stop requested (request 3): acknowledged; stopped at step" in log_text(second)
    assert (folder / "checkpoint.pt").is_file() and not is_in_use(folder)
    ended = [r for r in read_jsonl(folder / "metrics.jsonl") if r.get("event") == "RunEnded"]
    assert ended[-1]["status"] == "stopped"


@pytest.mark.slow
def test_attach_to_a_run_another_window_trains_here_and_steer_it(qtbot, make_window, tmp_path):
    trainer = make_window()
    folder = tmp_path / "run"
    long_run(trainer, folder)
    click(qtbot, trainer, "startButton")
    qtbot.waitUntil(lambda: loss_points(trainer) >= 5, timeout=WAIT)

    watcher = make_window()
    assert watcher.remote.attach(str(folder))
    qtbot.waitUntil(lambda: loss_points(watcher) >= 5, timeout=WAIT)
    click(qtbot, watcher, "pauseButton")
    qtbot.waitUntil(lambda: "Paused at step" in status(watcher), timeout=WAIT)
    assert trainer.controller.paused  # the run itself paused: the window that trains it says so too
    click(qtbot, watcher, "pauseButton")
    qtbot.waitUntil(lambda: not trainer.controller.paused, timeout=WAIT)
    click(qtbot, watcher, "stopButton")
    qtbot.waitUntil(lambda: not watcher.controller.running and not trainer.controller.running, timeout=WAIT)
    assert "Stopped at step" in status(watcher) and "Stopped at step" in status(trainer)
    assert np.all(np.diff(steps(watcher)) > 0)
    assert (folder / "checkpoint.pt").is_file()


def test_attach_to_a_finished_run_shows_it_complete(qtbot, make_window, trained_runs):
    run = trained_runs["tiny"]
    window = make_window()
    assert window.remote.attach(str(run.folder))
    qtbot.waitUntil(lambda: not window.controller.running, timeout=WAIT)
    records = read_jsonl(run.folder / "metrics.jsonl")
    logged = [r["step"] for r in records if r.get("event") == "StepMetrics"]
    assert list(steps(window)) == logged
    assert find(window, "statusMessage").property("role") == "status-ok"
    assert status(window).startswith(run.ended.message[:1].upper() + run.ended.message[1:])


def test_a_host_that_cannot_be_reached_is_one_line_and_blocks_nothing(qtbot, make_window, settings):
    """A saved host that is down is asked again at launch off the GUI thread, and shown unreachable."""
    from app.window_settings import WindowSettings

    WindowSettings(settings).set_hosts([{"dest": "nowhere.invalid", "command": ""}])
    window = make_window()
    panel = window.devicesPanel
    assert panel.hosts.entry("nowhere.invalid") is not None
    qtbot.waitUntil(lambda: panel.hosts.entry("nowhere.invalid").state == "unreachable", timeout=WAIT)
    heading = next(
        panel.list.item(row).text()
        for row in range(panel.list.count())
        if panel.list.item(row).text().startswith("nowhere.invalid")
    )
    assert heading == "nowhere.invalid  ·  unreachable"
    problem = find(panel, "hostProblem").text()
    assert problem.startswith("nowhere.invalid is unreachable over ssh (") and "\n" not in problem
    panel.list.setCurrentRow(
        next(row for row in range(panel.list.count()) if panel.list.item(row).text().startswith("nowhere.invalid"))
    )
    click_tool = find(panel, "removeHostButton")
    assert click_tool.isEnabled()
    click_tool.click()
    assert panel.hosts.entries() == [] and window.window_settings.hosts() == []
    assert find(panel, "hostProblem").isHidden()
