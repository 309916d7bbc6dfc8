"""The run folder's control channel (core.engine.folder_control) and the metrics follower (core.engine.follow):
requests written as files steer a live run, each acknowledged in metrics.jsonl before what it leads to."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from core.engine import folder_control
from core.engine.checkpoints import load_checkpoint
from core.engine.control import RunControl
from core.engine.events import ControlAcknowledged, RunEnded, RunPaused, RunResumed, StepMetrics, event_or_none
from core.engine.folder_control import ControlError, FolderControl, send_control, write_request
from core.engine.follow import MetricsFollower
from core.engine.trainer import train
from core.files import read_jsonl, try_lock


def start_run(config):
    """A long tiny run on a thread of this process; (thread, result dict, folder)."""
    result: dict = {}
    started = threading.Event()

    def sink(event):
        if isinstance(event, StepMetrics):
            started.set()

    thread = threading.Thread(target=lambda: result.update(ended=train(config, sink=sink)), daemon=True)
    thread.start()
    assert started.wait(120), "the run never logged a step"
    return thread, result


def test_pause_resume_stop_through_files_are_acknowledged_then_done(tiny_config, tmp_path):
    config = tiny_config(max_steps=10_000_000, log_interval=10)
    thread, result = start_run(config)
    folder = tmp_path / "run"
    try:
        paused = send_control(folder, "pause", timeout=60)
        assert isinstance(paused.acknowledged, ControlAcknowledged) and paused.acknowledged.accepted
        assert isinstance(paused.outcome, RunPaused), paused.message
        assert paused.message.startswith("pause requested (request 1): acknowledged; paused at step")
        again = send_control(folder, "pause", timeout=60)  # nothing to do: acknowledged, and said so
        assert not again.acknowledged.accepted and again.outcome is None and "already paused" in again.message
        resumed = send_control(folder, "resume", timeout=60)
        assert isinstance(resumed.outcome, RunResumed) and resumed.outcome.step == paused.outcome.step
        stopped = send_control(folder, "stop", timeout=60)
    finally:
        thread.join(120)
    assert isinstance(stopped.outcome, RunEnded) and stopped.outcome.status == "stopped"
    assert "checkpoint saved" in stopped.message
    assert load_checkpoint(stopped.outcome.checkpoint)["step"] == stopped.outcome.step == result["ended"].step
    kinds = [r["event"] for r in read_jsonl(folder / "metrics.jsonl") if r["event"] != "StepMetrics"]
    acks = [r for r in read_jsonl(folder / "metrics.jsonl") if r["event"] == "ControlAcknowledged"]
    assert [a["seq"] for a in acks] == [1, 2, 3, 4] and [a["verb"] for a in acks] == [
        "pause",
        "pause",
        "resume",
        "stop",
    ]
    # each acknowledgement comes before what it leads to
    assert kinds.index("ControlAcknowledged") < kinds.index("RunPaused") < kinds.index("RunResumed")
    # the stop's acknowledgement, then its checkpoint and the end (an epoch's checkpoint may fall between)
    stop_acknowledged = max(i for i, kind in enumerate(kinds) if kind == "ControlAcknowledged")
    assert kinds[-2:] == ["CheckpointSaved", "RunEnded"] and stop_acknowledged < len(kinds) - 2, kinds[-6:]
    names = sorted(os.listdir(folder / "control"))
    assert all(name.endswith(".json.done") for name in names) and len(names) == 4


def test_the_training_loop_never_reads_the_control_folder(tiny_config, tmp_path, monkeypatch):
    """Only the watcher thread looks at the folder, a few times a second, whatever the number of steps."""
    calls = []
    real = os.listdir
    monkeypatch.setattr(
        folder_control.os, "listdir", lambda path: calls.append(threading.current_thread().name) or real(path)
    )
    (tmp_path / "run" / "control").mkdir(parents=True)
    started = time.monotonic()
    ended = train(tiny_config(max_steps=3000, log_interval=1))
    assert ended.status == "completed" and ended.step == 3000
    assert set(calls) <= {"folder-control"}
    assert len(calls) <= (time.monotonic() - started) / folder_control.POLL_SECONDS + 2


class FakeControl(RunControl):
    pass


def held_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    fd = try_lock(folder / ".run.lock")
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return folder, fd


def test_a_request_for_an_earlier_run_is_set_aside(tmp_path):
    folder, fd = held_folder(tmp_path)
    try:
        stale = write_request(folder, "stop")
        path = folder / "control" / stale.name
        record = json.loads(path.read_text())
        path.write_text(json.dumps(record | {"holder": os.getpid() + 1}))  # another process held the folder then
        fresh = write_request(folder, "pause")
        control = FakeControl()
        acks = []
        FolderControl(folder, control, acks.append).poll()
    finally:
        os.close(fd)
    assert not control.stop_requested and control.paused
    assert [(a.seq, a.verb, a.accepted) for a in acks] == [(fresh.seq, "pause", True)]
    assert (folder / "control" / (stale.name + ".stale")).exists()


def test_a_request_that_is_a_link_or_not_a_file_is_refused(tmp_path):
    folder, fd = held_folder(tmp_path)
    try:
        (folder / "control").mkdir()
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"verb": "stop"}))
        os.symlink(target, folder / "control" / "000001-stop-abcd.json")
        os.mkfifo(folder / "control" / "000002-stop-abcd.json")
        control = FakeControl()
        acks = []
        FolderControl(folder, control, acks.append).poll()
    finally:
        os.close(fd)
    assert not control.stop_requested
    assert [(a.seq, a.accepted) for a in acks] == [(1, False), (2, False)]
    assert "symbolic link" in acks[0].note and "named pipe" in acks[1].note


def test_a_control_folder_that_is_a_link_is_refused(tmp_path):
    folder, fd = held_folder(tmp_path)
    try:
        (tmp_path / "other").mkdir()
        os.symlink(tmp_path / "other", folder / "control")
        with pytest.raises(ControlError, match="not a folder"):
            write_request(folder, "stop")
        (tmp_path / "other" / "000001-stop-abcd.json").write_text(json.dumps({"verb": "stop", "seq": 1}))
        control = FakeControl()
        assert FolderControl(folder, control, lambda ack: None).poll() == []
    finally:
        os.close(fd)
    assert not control.stop_requested


def test_no_live_run_no_request(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(ControlError, match="no live run holds"):
        send_control(tmp_path / "run", "stop", timeout=1)
    assert not (tmp_path / "run" / "control").exists()


def test_follower_waits_for_a_torn_line_and_resumes_at_its_offset(tmp_path):
    folder, fd = held_folder(tmp_path)
    path = folder / "metrics.jsonl"
    lines = [json.dumps({"event": "StepMetrics", "step": n}) for n in range(3)]
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"event": "StepMetr')
    follower = MetricsFollower(folder)
    first = follower.read()
    assert [line.record["step"] for line in first] == [0, 1, 2]
    assert follower.offset == first[-1].offset == len(("\n".join(lines) + "\n").encode())
    assert follower.read() == []  # the torn line waits for its end
    with open(path, "ab") as f:
        f.write(b'ics", "step": 3}\nnot json\n')
    assert [line.record["step"] for line in follower.read()] == [3]
    with MetricsFollower(folder, offset=first[1].offset) as resumed:  # a follower that went away after step 1
        assert [line.record["step"] for line in resumed.read()] == [2, 3]
    os.close(fd)  # the run lets go of its folder: following ends, and says how
    assert list(follower.lines()) == [] and follower.status == "gone"
    with open(path, "ab") as f:
        f.write(json.dumps({"event": "RunEnded"}).encode() + b"\n")
    tail = MetricsFollower(folder, offset=follower.offset)
    assert [line.record["event"] for line in tail.lines()] == ["RunEnded"] and tail.status == "ended"


def test_unknown_events_are_skipped_by_readers():
    assert event_or_none({"event": "FromTheFuture", "x": 1}) is None
    assert event_or_none({"event": "RunPaused", "step": 3, "extra": 1}) is None
    assert event_or_none({"event": "RunPaused", "step": 3}) == RunPaused(step=3)


def test_watch_shows_a_finished_run_here_and_ends_with_its_summary(trained_runs, capsys):
    from core.cli.main import main

    assert main(["watch", "tiny", "--runs-dir", str(trained_runs.root), "--json"]) == 0
    captured = capsys.readouterr()
    assert "run completed on cpu" in captured.out and json.loads(captured.out.splitlines()[-1])["status"] == "completed"
    assert "step " in captured.err  # the train command's progress lines
    assert main(["control", str(trained_runs["tiny"].folder), "stop", "--timeout", "1"]) == 2
    assert "no live run holds" in capsys.readouterr().err


def test_watch_of_a_run_killed_without_a_word_fails_in_one_line(tmp_path, capsys):
    from core.cli.main import main

    folder = tmp_path / "killed"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"event": "RunPaused", "step": 5}) + "\n")
    (folder / "train.log").write_text("amp-console: error: --data: x.csv: no such data file\n")
    assert main(["watch", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "paused at step 5" in err and err.strip().endswith("no such data file")


def test_run_start_names_where_the_last_line_begins(tmp_path):
    """What `train --events` prints as RunStarted is written: a driving program follows from that line."""
    from core.engine.follow import run_start

    folder = tmp_path / "run"
    folder.mkdir()
    assert run_start(folder) == {"folder": str(folder), "offset": 0}  # no file yet
    earlier = b'{"event": "RunEnded"}\n' * 5000  # an earlier run's lines, longer than a chunk
    (folder / "metrics.jsonl").write_bytes(earlier + b'{"event": "RunStarted", "x": 1}\n')
    start = run_start(folder)
    assert start["offset"] == len(earlier)
    with MetricsFollower.of_run_start(json.loads(json.dumps(start))) as follower:
        assert [line.record["event"] for line in follower.read()] == ["RunStarted"]
    assert MetricsFollower.of_run_start({"ready": True}) is None


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="a lock held by another process")
def test_a_run_stops_when_the_launcher_holding_its_folder_is_gone(tmp_path):
    """torchrun's rank 0 runs in a folder its launcher holds: the launcher's death stops it (with a checkpoint)."""
    import subprocess
    import sys

    folder = tmp_path / "run"
    folder.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time; from core.files import try_lock; "
         f"fd = try_lock({str(folder / '.run.lock')!r}); os.write(fd, str(os.getpid()).encode()); "
         "print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )  # fmt: skip
    with holder:
        try:
            assert holder.stdout.readline().strip() == "held"
            control = RunControl()
            channel = FolderControl(folder, control, lambda ack: None, poll_seconds=0.01).start()
            try:
                time.sleep(0.1)
                assert not control.stop_requested  # the launcher is alive
                holder.kill()
                holder.wait()
                deadline = time.monotonic() + 30
                while not control.stop_requested and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert control.stop_requested
            finally:
                channel.close()
        finally:
            holder.kill()
