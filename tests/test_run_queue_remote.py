"""A queue entry trained on a host over the real sshd on 127.0.0.1 (tests/local_sshd.py): `queue add --host` records
the host, `queue start` starts the run there, follows it to its end and records `HOST:PATH` and its outcome; the
local entry after it trains here as usual."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.runs.queue import read_queue
from tests.test_remote_ssh import sshd  # noqa: F401 (the session's sshd, a fixture)
from tests.test_run_queue import TINY, queue_cli

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
def test_a_remote_entry_and_a_local_one_end_done(sshd, tmp_path, capsys):
    root = tmp_path / "runs"
    reach = ["--host", "amp-test", "--ssh-config", str(sshd.config), "--remote-command", sshd.prefix]
    assert queue_cli(capsys, "add", *TINY, "--max-steps", "6", *reach, "--runs-dir", root)[0] == 0
    assert queue_cli(capsys, "add", *TINY, "--max-steps", "4", "--runs-dir", root)[0] == 0
    assert read_queue(root)["entries"][0]["host"]["dest"] == "amp-test"
    code, out, _ = queue_cli(capsys, "start", "--runs-dir", root)
    remote, local = read_queue(root)["entries"]
    assert [remote["state"], local["state"]] == ["done", "done"], out
    host, path = remote["folder"].split(":", 1)
    assert host == "amp-test" and os.path.dirname(path) == str(sshd.runs) and os.path.isfile(f"{path}/run.json")
    assert remote["result"].startswith("accuracy ") and local["result"].startswith("accuracy ")
    assert os.path.dirname(local["folder"]) == str(root) and code == 0 and "2 done" in out


@pytest.mark.timeout(600)
def test_a_killed_runner_follows_its_remote_entry_again(sshd, tmp_path, capsys):
    import signal
    import subprocess
    import sys

    from tests.test_run_queue import wait_for

    root = tmp_path / "runs"
    reach = ["--host", "amp-test", "--ssh-config", str(sshd.config), "--remote-command", sshd.prefix]
    queue_cli(capsys, "add", *TINY, "--max-steps", "400", "--log-interval", "5", *reach, "--runs-dir", root)
    start = "import sys; from tests.test_run_queue import queue_main; sys.exit(queue_main(sys.argv[1:]))"
    runner = subprocess.Popen(
        [sys.executable, "-c", start, "start", "--runs-dir", str(root)],
        cwd=os.path.dirname(os.path.dirname(__file__)),
        stdout=subprocess.DEVNULL,
    )
    first = wait_for(lambda: (e := read_queue(root)["entries"][0])["folder"] and e)
    os.kill(runner.pid, signal.SIGKILL)  # the run goes on on the host
    runner.wait()
    code, out, _ = queue_cli(capsys, "start", "--runs-dir", root)
    entry = read_queue(root)["entries"][0]
    assert entry["state"] == "done" and entry["folder"] == first["folder"] and code == 0, out


@pytest.mark.timeout(900)
def test_a_stopped_remote_entry_keeps_its_checkpoint_and_the_queue_goes_on(sshd, tmp_path, capsys):
    """A remote entry stopped through its control channel (`control stop HOST:PATH`) stops there with its checkpoint,
    is recorded 'stopped' and the queue goes on; retried, it resumes there in its folder, and the runner's own stop
    (Ctrl+C, the window's) reaches the host the same way; retried again, it trains to its end."""
    import threading

    from core.cli.queue import train_on_host
    from core.engine.control import RunControl
    from core.remote.client import control_remote
    from core.runs.queue import QueueRunner
    from tests.test_run_queue import wait_for

    root = tmp_path / "runs"
    reach = ["--host", "amp-test", "--ssh-config", str(sshd.config), "--remote-command", sshd.prefix]
    slower = ["-o", "hidden=512", "--batch-size", "512"]  # ~4 ms a step: 3,000 steps outlast a stop over ssh
    queue_cli(capsys, "add", *TINY, *slower, "--max-steps", "3000", "--log-interval", "5", *reach, "--runs-dir", root)
    queue_cli(capsys, "add", *TINY, "--max-steps", "4", "--runs-dir", root)

    def running() -> tuple[QueueRunner, threading.Thread, list[str], str]:
        runner, ended = QueueRunner(root, on_host=train_on_host, control=RunControl()), []
        thread = threading.Thread(target=lambda: ended.append(runner.run()), daemon=True)
        thread.start()
        folder = wait_for(lambda: read_queue(root)["entries"][0]["folder"]).split(":", 1)[1]
        metrics = os.path.join(folder, "metrics.jsonl")
        seen = Path(metrics).read_bytes().count(b'"step"') if os.path.exists(metrics) else 0
        wait_for(lambda: os.path.exists(metrics) and Path(metrics).read_bytes().count(b'"step"') > seen + 2)
        return runner, thread, ended, folder

    _, thread, ended, folder = running()
    assert control_remote(sshd.host(), folder, "stop").outcome is not None
    thread.join(300)
    remote, local = read_queue(root)["entries"]
    assert ended == ["finished"] and [remote["state"], local["state"]] == ["stopped", "done"], remote
    assert os.path.isfile(os.path.join(folder, "checkpoint.pt"))
    assert queue_cli(capsys, "retry", "1", "--runs-dir", root)[0] == 0
    runner, thread, ended, again = running()
    runner.control.stop()
    thread.join(300)
    assert ended == ["stopped"] and again == folder and read_queue(root)["entries"][0]["state"] == "stopped"
    assert queue_cli(capsys, "retry", "1", "--runs-dir", root)[0] == 0
    code, out, _ = queue_cli(capsys, "start", "--runs-dir", root)
    remote = read_queue(root)["entries"][0]
    assert remote["state"] == "done" and remote["folder"].split(":", 1)[1] == folder and code == 0, out
    record = json.loads(Path(folder, "run.json").read_text())
    assert record["resumed_at"] and record["steps"] == 3000
