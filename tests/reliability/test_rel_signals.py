"""SIGTERM, SIGHUP and a repeated Ctrl+C stop a headless run the way one Ctrl+C does: checkpoint, RunEnded,
summary, exit 128 + signal number, never a traceback (also when stderr went away with the terminal)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.waiting import logged, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.reliability]


def start_run(out, *extra):
    command = [
        sys.executable,
        "-m",
        "core.cli",
        "train",
        "--max-steps",
        "100000000",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--json",
        "--batch-size",
        "8",
        "--threads",
        "1",
        "--progress-every",
        "0.2",
        *extra,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_steps(process, out):
    wait_until(lambda: logged(out, "StepMetrics"), "a step", process)


def check_stopped_run(out, stdout: bytes):
    import torch

    from core.files import read_jsonl

    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    assert summary["status"] == "stopped" and summary["steps"] > 0
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert state["step"] == summary["steps"]
    records = read_jsonl(out / "metrics.jsonl")
    assert records[-1]["event"] == "RunEnded" and records[-1]["status"] == "stopped"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_saves_a_checkpoint_and_exits_128_plus_its_number(tmp_path, sig, code):
    out = tmp_path / "run"
    process = start_run(out)
    try:
        wait_for_steps(process, out)
        process.send_signal(sig)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == code, stderr.decode()
    check_stopped_run(out, stdout)
    assert b"Traceback" not in stderr and signal.Signals(sig).name.encode() in stderr


def test_ctrl_c_twice_keeps_stopping_without_a_traceback(tmp_path):
    out = tmp_path / "run"
    process = start_run(out)
    try:
        wait_for_steps(process, out)
        process.send_signal(signal.SIGINT)
        process.send_signal(signal.SIGINT)
        time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        time.sleep(0.2)  # may land while stopping, or during the interpreter's shutdown: neither may traceback
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    # Signals sent back to back may arrive as one (they don't queue), so "already stopping" is checked below.
    assert process.returncode == 130, stderr.decode()
    check_stopped_run(out, stdout)
    assert b"Traceback" not in stderr and b"KeyboardInterrupt" not in stderr


def test_a_repeated_signal_says_already_stopping_and_stops_once(capfd):
    from core.cli.common import StopSignals

    class Control:
        stops = 0

        def stop(self):
            self.stops += 1

    control = Control()
    handler = StopSignals(control)
    handler.started(control)
    handler._handle(signal.SIGTERM, None)
    handler._handle(signal.SIGINT, None)
    err = capfd.readouterr().err
    assert control.stops == 1 and handler.exit_code == 143
    assert "SIGTERM: stopping after this step" in err and "already stopping (SIGINT)" in err


def test_a_stop_swallowed_before_the_start_is_raised_again_before_waiting(monkeypatch):
    """A signal while torch starts up raises StopBeforeStart inside torch's import, which discards it and goes
    on; a spare process would then wait on stdin for settings forever. check_not_stopped raises it again, and
    the spare path (train --config-stdin) calls it after warming up, before it reads stdin."""
    import io

    from core.cli import train
    from core.cli.common import StopBeforeStart, StopSignals

    handler = StopSignals()
    handler.check_not_stopped()  # no signal: nothing
    with contextlib.suppress(StopBeforeStart):  # as torch's import swallowed it
        handler._handle(signal.SIGTERM, None)
    with pytest.raises(StopBeforeStart) as caught:
        handler.check_not_stopped()
    assert caught.value.signum == signal.SIGTERM

    read: list = []

    def swallowed_during_warm_up():
        with contextlib.suppress(StopBeforeStart):
            handler._handle(signal.SIGTERM, None)

    monkeypatch.setattr(train, "warm_up_engine", swallowed_during_warm_up)
    monkeypatch.setattr(train, "read_config_line", lambda stream: read.append(stream) or (None, None))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    handler = StopSignals()
    with pytest.raises(StopBeforeStart):
        train._train(argparse.Namespace(config_stdin=True, events=False), handler)
    assert not read  # stopped before it waited for settings


def wait_for_stderr_gone(process, seconds=60):
    """Until the process's stderr is /dev/null (Linux's /proc shows it; elsewhere half a second, 2 progress lines)."""
    fd = f"/proc/{process.pid}/fd/2"
    if not os.path.exists(fd):
        time.sleep(0.5)
        return
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(OSError):  # a process that ended has no fd 2: the assertion says so
            if os.readlink(fd) == os.devnull:
                return
        assert time.monotonic() < deadline and process.poll() is None, "no write to the closed stderr failed"
        time.sleep(0.02)


def test_hang_up_with_stderr_gone_still_saves_and_reports(tmp_path):
    """After a dropped ssh session writes to the terminal fail; the run must still stop cleanly."""
    out = tmp_path / "run"
    process = start_run(out)
    try:
        wait_for_steps(process, out)
        process.stderr.close()  # progress lines and the stop message now fail with EPIPE
        # A progress line is due every 0.2 s: the first that fails points the run's stderr at /dev/null
        # (core.cli.common.SafeStream), so at least one write has failed before the signal.
        wait_for_stderr_gone(process)
        process.send_signal(signal.SIGHUP)
        stdout = process.stdout.read()
        process.wait(timeout=60)
    finally:
        process.kill()
        process.stdout.close()
    assert process.returncode == 129
    check_stopped_run(out, stdout)


def test_a_signal_before_the_run_starts_ends_it_with_one_line(tmp_path):
    """The window's spare process waits for its settings; a SIGTERM then ends it cleanly, writing nothing."""
    process = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "train", "--events", "--config-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        assert json.loads(process.stdout.readline()) == {"ready": True}
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143
    assert stderr.decode().strip().splitlines() == [
        "amp-console: SIGTERM before the run started: stopped, nothing was written"
    ]
