"""The run queue (core.runs.queue, `amp-console queue`): entries train one after another as child processes,
a failed entry does not stop the queue, and a killed runner's queue goes on from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.cli.common import OneLineParser
from core.runs.queue import read_queue

pytestmark = pytest.mark.slow
TINY = ["--task", "tiny", "--device", "cpu", "--threads", "1", "--num-workers", "0", "--eval-interval", "0"]


def queue_cli(capsys, *argv) -> tuple[int, str, str]:
    """`amp-console queue ARGV` in this process, its exit code and output."""
    code = queue_main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


def wait_for(condition, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return value


def test_a_failed_entry_does_not_stop_the_queue(tmp_path, capsys):
    root, gone = tmp_path / "runs", tmp_path / "missing.csv"
    gone.write_text("x,label\n1,0\n")
    for extra in (["--max-steps", "8"], ["--max-steps", "8", "--data", gone], ["--max-steps", "6"]):
        assert queue_cli(capsys, "add", *TINY, *extra, "--runs-dir", root)[0] == 0
    gone.unlink()  # the data went away before its turn: that entry fails, the queue goes on
    code, out, _ = queue_cli(capsys, "start", "--runs-dir", root)
    entries = read_queue(root)["entries"]
    assert [e["state"] for e in entries] == ["done", "failed", "done"], out
    assert "missing.csv" in entries[1]["result"] and entries[1]["folder"] == ""
    for done in (entries[0], entries[2]):
        assert (
            done["result"].startswith("accuracy ") and (root / os.path.basename(done["folder"]) / "run.json").is_file()
        )
    assert code == 0 and "2 done, 1 failed" in out
    code, out, _ = queue_cli(capsys, "list", "--runs-dir", root)
    assert "failed" in out and "missing.csv" in out
    assert queue_cli(capsys, "retry", "2", "--runs-dir", root)[0] == 0
    assert [e["state"] for e in read_queue(root)["entries"]] == ["done", "pending", "done"]


def test_remove_move_and_pause(tmp_path, capsys):
    root = tmp_path / "runs"
    queue_cli(capsys, "add", *TINY, "--grid", "lr=0.1,0.01,0.001", "--runs-dir", root)
    names = [e["name"] for e in read_queue(root)["entries"]]
    assert len(names) == 3
    assert queue_cli(capsys, "move", "3", "1", "--runs-dir", root)[0] == 0
    assert queue_cli(capsys, "remove", "2", "--runs-dir", root)[0] == 0
    assert [e["name"] for e in read_queue(root)["entries"]] == [names[2], names[1]]
    queue_cli(capsys, "pause", "--runs-dir", root)
    code, out, _ = queue_cli(capsys, "start", "--runs-dir", root)
    assert code == 0 and "queue paused: 2 pending" in out


def test_a_killed_runner_goes_on_from_the_checkpoint(tmp_path, capsys):
    root = tmp_path / "runs"
    # wide enough (seconds) that it cannot end between its first logged step and the kill
    queue_cli(
        capsys, "add", *TINY, "-o", "hidden=2048", "--max-steps", "3000", "--log-interval", "5", "--runs-dir", root
    )
    queue_cli(capsys, "add", *TINY, "--max-steps", "6", "--runs-dir", root)
    start = "import sys; from tests.test_run_queue import queue_main; sys.exit(queue_main(sys.argv[1:]))"
    command = [sys.executable, "-c", start, "start", "--runs-dir", str(root)]
    runner = subprocess.Popen(command, cwd=os.path.dirname(os.path.dirname(__file__)), stdout=subprocess.DEVNULL)
    first = wait_for(lambda: (e := read_queue(root)["entries"][0])["folder"] and e)
    metrics = os.path.join(first["folder"], "metrics.jsonl")
    wait_for(lambda: os.path.exists(metrics) and b'"step"' in Path(metrics).read_bytes())
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    assert read_queue(root)["entries"][0]["state"] == "running"
    code, out, _ = queue_cli(capsys, "start", "--runs-dir", root)
    entries = read_queue(root)["entries"]
    assert [e["state"] for e in entries] == ["done", "done"], out
    assert entries[0]["folder"] == first["folder"]  # resumed in its own folder
    record = json.loads(Path(first["folder"], "run.json").read_text())
    assert record["resumed_at"] and record["steps"] == 3000


def queue_main(argv: list[str]) -> int:
    """`amp-console queue ARGV` through the parser core.cli.queue builds (as core.cli.main registers it)."""
    from core.cli import queue

    parser = OneLineParser(prog="amp-console")
    queue.register(parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser))
    args = parser.parse_args(["queue", *argv])
    return args.handler(args)
