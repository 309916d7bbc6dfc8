"""A queue entry trained on a host over the real sshd on 127.0.0.1 (tests/local_sshd.py): `queue add --host` records
the host, `queue start` starts the run there, follows it to its end and records `HOST:PATH` and its outcome; the
local entry after it trains here as usual."""

from __future__ import annotations

import os

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
