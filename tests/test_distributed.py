"""DDP under torchrun on CPU (gloo, 2 processes): equivalence, resume, stop from rank 0, a dying rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.timeout(240)

COMMON = ["--task", "tiny", "--device", "cpu", "--log-interval", "5", "--seed", "3", "-o", "samples=4096"]


def cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "core.cli", "train", *COMMON, *args], capture_output=True,
                          text=True, timeout=200, **kwargs)


def losses(out: Path) -> list[float]:
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in events if e["event"] == "StepMetrics"]


def test_two_processes_match_one_process_at_the_same_global_batch(tmp_path):
    """2 ranks x batch 32 == 1 rank x batch 64: same samples per step, DDP averages the two half-batch grads."""
    one = cli("--batch-size", "64", "--max-steps", "40", "--out", str(tmp_path / "one"))
    two = cli("--batch-size", "32", "--max-steps", "40", "--nproc", "2", "--out", str(tmp_path / "two"), "--json")
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(a) == len(b) == 8
    # Tolerance: only float summation order differs (gradient all-reduce), amplified a little by Adam.
    assert all(abs(x - y) <= 1e-4 * max(1.0, abs(x)) for x, y in zip(a, b, strict=True)), (a, b)
    summary = json.loads(two.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["steps"] == 40

    # The 2-process checkpoint (unwrapped model) resumes in a single process.
    resumed = cli("--resume", str(tmp_path / "two" / "checkpoint.pt"), "--batch-size", "64", "--max-steps", "50",
                  "--out", str(tmp_path / "resumed"), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["steps"] == 50


def start_long_run(out: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "core.cli", "train", *COMMON, "--batch-size", "16", "--max-steps", "1000000",
               "--nproc", "2", "--out", str(out), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_steps(out: Path, process: subprocess.Popen, deadline: float = 120) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        path = out / "metrics.jsonl"
        if path.exists() and path.read_text().count('"StepMetrics"') >= 2:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    raise AssertionError("the 2-process run reported no steps")


def worker(process: subprocess.Popen, rank: int) -> psutil.Process:
    for child in psutil.Process(process.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank) and "core.cli" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    raise AssertionError(f"rank {rank} not found")


@pytest.mark.parametrize("asked", ["rank 0", "launcher"])
def test_a_stop_reaches_every_rank_and_writes_a_checkpoint(tmp_path, asked):
    """SIGINT to rank 0 alone, or to the launcher (a terminal's Ctrl+C, the GUI's stop signal)."""
    out = tmp_path / "run"
    process = start_long_run(out)
    try:
        wait_for_steps(out, process)
        os.kill(worker(process, 0).pid if asked == "rank 0" else process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    ended = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"RunEnded"' in x][-1]
    assert ended["status"] == "stopped"
    from core.engine.checkpoints import load_checkpoint

    assert load_checkpoint(out / "checkpoint.pt")["step"] == ended["step"]


def test_a_stop_lands_soon_even_when_logs_are_far_apart(tmp_path):
    """Ranks agree on a stop about twice a second, not only at log boundaries (here 10^6 steps apart)."""
    out = tmp_path / "run"
    process = start_long_run(out, "--log-interval", "1000000")
    try:
        end = time.monotonic() + 120
        while not ((out / "metrics.jsonl").exists() and '"RunStarted"' in (out / "metrics.jsonl").read_text()):
            assert time.monotonic() < end and process.poll() is None, "the run did not start"
            time.sleep(0.2)
        time.sleep(2)  # some steps, far from a log boundary
        asked_at = time.monotonic()
        os.kill(worker(process, 0).pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=90)
        took = time.monotonic() - asked_at
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    ended = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"RunEnded"' in x][-1]
    assert ended["status"] == "stopped" and 0 < ended["step"] < 1_000_000
    from core.engine.checkpoints import load_checkpoint

    assert load_checkpoint(out / "checkpoint.pt")["step"] == ended["step"]
    assert took < 30, f"the stop took {took:.1f} s"  # was: never, until the next log 10^6 steps later
    print(f"stopped {took:.1f} s after the request, at step {ended['step']}")


def test_a_second_ddp_run_into_the_same_folder_keeps_the_first(tmp_path):
    out = tmp_path / "run"
    first = cli("--batch-size", "16", "--max-steps", "4", "--nproc", "2", "--out-dir", str(out))
    assert first.returncode == 0, first.stderr
    before = (out / "checkpoint.pt").read_bytes()
    second = cli("--batch-size", "16", "--max-steps", "6", "--nproc", "2", "--out-dir", str(out), "--json")
    assert second.returncode == 0, second.stderr  # the launcher reads rank 0's events where rank 0 wrote them
    assert "this run writes to" in second.stderr
    assert (out / "checkpoint.pt").read_bytes() == before
    started = [json.loads(x) for x in (tmp_path / "run-2" / "metrics.jsonl").read_text().splitlines()
               if '"RunStarted"' in x][-1]
    assert started["notes"] == [f"{out} holds an earlier run, which is kept: this run writes to {tmp_path / 'run-2'}"]
    assert json.loads(second.stdout.strip().splitlines()[-1])["checkpoint"] == str(tmp_path / "run-2" /
                                                                                   "checkpoint.pt")


def test_a_killed_rank_ends_the_run_with_an_error_in_bounded_time(tmp_path):
    out = tmp_path / "run"
    process = start_long_run(out)
    try:
        wait_for_steps(out, process)
        killed_at = time.monotonic()
        worker(process, 1).kill()
        _, stderr = process.communicate(timeout=90)
        took = time.monotonic() - killed_at
    finally:
        process.kill()
    assert process.returncode == 1
    assert "2-process run failed" in stderr.strip().splitlines()[-1]
    ended = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"RunEnded"' in x][-1]
    assert ended["status"] == "failed" and "another process" in ended["message"]
    assert took < 90
    print(f"run ended {took:.1f} s after rank 1 was killed")
