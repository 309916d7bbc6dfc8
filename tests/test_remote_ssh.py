"""Remote runs over a real sshd on 127.0.0.1 (core.remote, `amp-console watch/control`): a host's devices, a run
started detached there, followed from its start and live across a killed connection, paused, resumed and
stopped through its folder's control channel; a torn last line; a 2-process run; and the one-line failures.

The session's sshd (tests/local_sshd.py) listens on 127.0.0.1 only, with its own host and user keys; host key
checking stays on. The host runs this checkout's amp-console through Host.command (the prefix a user with a
venv there gives)."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from core import __version__
from core.config import RunConfig
from core.engine.checkpoints import load_checkpoint
from core.engine.events import ControlAcknowledged, RunEnded, RunPaused, RunResumed
from core.files import read_jsonl, try_lock
from core.remote.client import FollowNote, RemoteFollower, control_remote, host_devices, start_remote_run, upload
from core.remote.ssh import Host, RemoteError
from tests.local_sshd import NoSshd, start_sshd

pytestmark = pytest.mark.slow

WAIT = 180.0  # seconds: a wait that includes a child's start (torch imports) on a busy machine


@dataclass
class SshServer:
    config: Path  # the client's ssh config (-F)
    dest: str
    closed_dest: str  # the same machine on a port nothing listens on
    runs: Path  # the host's runs root
    prefix: str  # how the host runs this checkout's amp-console

    def host(self, command: str | None = None) -> Host:
        return Host(self.dest, command=command or self.prefix, ssh_options=("-F", str(self.config)))


def wait_for(condition, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    try:
        server = start_sshd(tmp_path_factory.mktemp("sshd"))
    except NoSshd as exc:
        pytest.skip(str(exc))
    runs = server.folder / "runs"
    try:
        yield SshServer(server.config, server.dest, server.closed_dest, runs, server.remote_command(runs))
    finally:
        server.stop()


def tiny(**overrides) -> RunConfig:
    values = {"device": "cpu", "precision": "fp32", "max_steps": 10_000_000, "log_interval": 10} | overrides
    return RunConfig.for_task("tiny", **values)


class Collector:
    """A RemoteFollower iterated on a thread, as the window would; what it yields, in order."""

    def __init__(self, follower: RemoteFollower):
        self.follower = follower
        self.lines: list = []
        self.notes: list[FollowNote] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for item in self.follower:
                (self.notes if isinstance(item, FollowNote) else self.lines).append(item)
        except BaseException as exc:
            self.error = exc

    def steps(self) -> list[int]:
        return [line.record["step"] for line in list(self.lines) if line.record["event"] == "StepMetrics"]

    def events(self, kind: str) -> list[dict]:
        return [line.record for line in list(self.lines) if line.record["event"] == kind]


def test_the_hosts_devices_and_version(sshd):
    info = host_devices(sshd.host())
    assert info.version == __version__ and info.runs_root == str(sshd.runs)
    assert next(d.type for d in info.devices) == "cpu"


def test_an_unreachable_host_is_one_line(sshd):
    with pytest.raises(RemoteError) as caught:
        host_devices(Host(sshd.closed_dest, ssh_options=("-F", str(sshd.config))))
    text = str(caught.value)
    assert "\n" not in text and text.startswith("amp-closed is unreachable over ssh (") and "refused" in text


def test_a_host_without_amp_console_is_one_line(sshd):
    with pytest.raises(RemoteError) as caught:
        host_devices(sshd.host(command="/nonexistent/amp-console"))
    text = str(caught.value)
    assert "\n" not in text and text.startswith("amp-test has no amp-console (`/nonexistent/amp-console`")
    assert "install it there with `amp-console remote install amp-test`" in text
    default = Host("gpu-box").argv(["info"])[-1]  # where `remote install` puts it, looked in before the PATH
    assert default.startswith('PATH="$HOME/.amp-console/venv/bin:$PATH" amp-console agent --client-version ')


def test_another_version_on_the_host_is_one_line(sshd, tmp_path):
    fake = tmp_path / "old-amp-console"  # answers like an amp-console without the agent command
    fake.write_text("#!/bin/sh\necho \"amp-console: error: argument COMMAND: invalid choice: 'agent'\" >&2\nexit 2\n")
    fake.chmod(0o755)
    with pytest.raises(RemoteError, match=r"^amp-test runs another version of amp-console .* install amp-console "):
        host_devices(sshd.host(command=str(fake)))


def test_a_run_started_watched_steered_and_followed_across_a_dropped_connection(sshd):
    host = sshd.host()
    run = start_remote_run(host, tiny(), runs_dir=str(sshd.runs))
    folder = Path(run.folder)  # the host is this machine: its files can be checked here
    assert folder.parent == sshd.runs and run.target == f"amp-test:{run.folder}"
    wait_for(
        lambda: len([r for r in read_jsonl(folder / "metrics.jsonl") if r["event"] == "StepMetrics"]) >= 3,
        "the run's first steps",
    )
    watch = Collector(RemoteFollower(host, run.folder, backoff=(0.2,)))  # from the start: history, then live
    try:
        wait_for(lambda: watch.error or watch.events("RunStarted") and len(watch.steps()) >= 5, "the watch's steps")
        paused = control_remote(host, run.folder, "pause", timeout=60)
        assert isinstance(paused.acknowledged, ControlAcknowledged) and isinstance(paused.outcome, RunPaused)
        assert paused.message.startswith("pause requested (request 1): acknowledged; paused at step ")
        resumed = control_remote(host, run.folder, "resume", timeout=60)
        assert isinstance(resumed.outcome, RunResumed) and resumed.outcome.step == paused.outcome.step
        before = len(watch.steps())
        wait_for(lambda: watch.follower.ssh_pid and len(watch.steps()) > before + 3, "steps after the resume")
        os.kill(watch.follower.ssh_pid, signal.SIGKILL)  # the connection drops mid-watch
        wait_for(lambda: any(note.connected for note in watch.notes), "the watch to reconnect")
        after = len(watch.steps())
        wait_for(lambda: len(watch.steps()) > after + 3, "steps after reconnecting")
        stopped = control_remote(host, run.folder, "stop", timeout=60)
        watch.thread.join(WAIT)
    finally:
        watch.follower.close()
    assert watch.error is None and not watch.thread.is_alive() and watch.follower.status == "ended"
    assert [n.connected for n in watch.notes][:1] == [False] and watch.follower.connections >= 2
    assert isinstance(stopped.outcome, RunEnded) and stopped.outcome.status == "stopped"
    assert stopped.message.endswith(
        f"stopped at step {stopped.outcome.step}, checkpoint saved ({folder / 'checkpoint.pt'})"
    )
    assert load_checkpoint(folder / "checkpoint.pt")["step"] == stopped.outcome.step
    # every line once, in order, across the dropped connection: what the watch got is the file
    assert [line.record for line in watch.lines] == read_jsonl(folder / "metrics.jsonl")
    assert watch.steps() == list(range(10, watch.steps()[-1] + 1, 10))
    acks = watch.events("ControlAcknowledged")
    assert [(a["seq"], a["verb"], a["accepted"]) for a in acks] == [
        (1, "pause", True),
        (2, "resume", True),
        (3, "stop", True),
    ]
    assert watch.lines[-1].offset == (folder / "metrics.jsonl").stat().st_size


def test_a_torn_last_line_waits_for_its_end_over_ssh(sshd, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    fd = try_lock(folder / ".run.lock")  # a live run holds the folder: the stream follows it
    whole = b'{"event": "StepMetrics", "step": 10}\n'
    (folder / "metrics.jsonl").write_bytes(whole + b'{"event": "StepMetrics", "st')
    watch = Collector(RemoteFollower(sshd.host(), str(folder)))
    try:
        wait_for(lambda: watch.error or watch.lines, "the first line")
        wait_for(lambda: watch.follower.offset == len(whole), "the heartbeat's offset")
        assert [line.record["step"] for line in watch.lines] == [10]
        with open(folder / "metrics.jsonl", "ab") as f:
            f.write(b'ep": 20}\n{"event": "RunEnded", "status": "stopped"}\n')
        os.close(fd)  # the run lets go of its folder: the stream ends after its last line
        watch.thread.join(WAIT)
    finally:
        watch.follower.close()
    assert watch.error is None and watch.follower.status == "ended"
    assert [line.record.get("step") for line in watch.lines] == [10, 20, None]
    assert watch.follower.offset == (folder / "metrics.jsonl").stat().st_size


def test_a_two_process_run_stops_through_the_channel(sshd):
    host = sshd.host()
    run = start_remote_run(host, tiny(), nproc=2, runs_dir=str(sshd.runs))
    folder = Path(run.folder)
    wait_for(
        lambda: any(r["event"] == "StepMetrics" for r in read_jsonl(folder / "metrics.jsonl")),
        "the 2-process run's first steps",
    )
    stopped = control_remote(host, run.folder, "stop", timeout=120)
    assert isinstance(stopped.outcome, RunEnded) and stopped.outcome.status == "stopped", stopped.message
    assert load_checkpoint(folder / "checkpoint.pt")["step"] == stopped.outcome.step
    started = [r for r in read_jsonl(folder / "metrics.jsonl") if r["event"] == "RunStarted"]
    assert started and started[0]["config"]["out_dir"] == run.folder
    wait_for(lambda: "run stopped" in (folder / "train.log").read_text() or None, "the launcher's summary")


def test_watch_and_control_commands_over_ssh(sshd, capsys):
    from core.cli.main import main

    host = sshd.host()
    run = start_remote_run(host, tiny(max_steps=60), runs_dir=str(sshd.runs))
    flags = ["--ssh-config", str(sshd.config), "--remote-command", host.command]
    assert main(["watch", run.target, "--json", *flags]) == 0
    out = capsys.readouterr().out
    assert "run completed on cpu" in out and '"status": "completed"' in out.splitlines()[-1]
    assert main(["control", run.target, "stop", "--timeout", "5", *flags]) == 2
    assert "no live run holds" in capsys.readouterr().err


def test_a_local_data_file_is_copied_once(sshd, tmp_path):
    host = sshd.host()
    local = tmp_path / "ratings.csv"
    local.write_text("user,item,rating\n1,2,3\n")
    first = upload(host, local)
    assert Path(first).read_bytes() == local.read_bytes() and Path(first).is_relative_to(sshd.runs)
    mtime = os.stat(first).st_mtime_ns
    assert upload(host, local) == first and os.stat(first).st_mtime_ns == mtime  # the same sha256: not sent again
