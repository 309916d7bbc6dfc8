"""The `--nproc` launcher: a stop signal reaches the ranks through rank 0's stdin and the launcher waits for
their checkpoint (exit 128 + the first signal's number, no torchrun traceback or OMP banner); process counts
beyond the machine are refused in one line; every socket the run listens on is bound to 127.0.0.1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from core.cli.main import main
from core.cli.torchrun import torchrun_command
from core.engine.threads import usable_cpu_cores
from tests.listening import listening_addresses
from tests.waiting import logged, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.reliability]


def test_more_cpu_processes_than_cores_are_refused(tmp_path, capsys):
    too_many = usable_cpu_cores() + 1
    code = main(
        ["train", "--nproc", str(too_many), "--device", "cpu", "--max-steps", "2", "--out", str(tmp_path / "run")]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0] == (
        f"amp-console: error: --nproc: {too_many} CPU processes need at least {too_many} cores, "
        f"this process may use {usable_cpu_cores()}; use --nproc {usable_cpu_cores()} or fewer"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(usable_cpu_cores() < 2, reason="two CPU processes need two cores")
def test_a_launch_that_fails_to_start_leaves_no_file_or_folder_behind(tmp_path, capsys, monkeypatch):
    import tempfile

    from core.cli import torchrun

    def no_torchrun(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "torchrun")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the launcher's failure file goes
    monkeypatch.setattr(torchrun.subprocess, "Popen", no_torchrun)
    argv = ["train", "--task", "tiny", "--nproc", "2", "--device", "cpu", "--max-steps", "2", "--out", "run"]
    with pytest.raises(FileNotFoundError):
        main([*argv[:-1], str(tmp_path / "run")])
    assert list(tmp_path.iterdir()) == []  # no amp-console-failure-*.tmp, no empty run folder


def test_the_rendezvous_is_on_localhost():
    import argparse

    from core.cli.nodes import node_plan

    flags = dict.fromkeys(("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "rdzv_timeout", "max_restarts", "bind"))
    command = torchrun_command(node_plan(argparse.Namespace(nproc=2, nproc_per_node=None, **flags)), ["train"], 29555)
    assert "--standalone" not in command
    assert {"--rdzv-endpoint=127.0.0.1:29555", "--local-addr=127.0.0.1", "--nnodes=1"} <= set(command)


@pytest.mark.skipif(usable_cpu_cores() < 2, reason="two CPU processes need two cores")
def test_a_stop_signal_to_the_launcher_stops_every_rank_with_a_checkpoint(tmp_path):
    """SIGINT (a terminal's Ctrl+C; the window signals the run's process group so), then SIGTERM while the ranks
    are stopping: they go on stopping, rank 0 writes the checkpoint, and the launcher exits 128 + SIGINT."""
    import torch

    from core.files import read_jsonl

    out = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "train",
            "--nproc",
            "2",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--max-steps",
            "100000000",
            "--batch-size",
            "8",
            "--out",
            str(out),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: logged(out, "StepMetrics"), "a step of the ranks", process)
        listening = listening_addresses(process.pid)
        process.send_signal(signal.SIGINT)
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)  # a second one while the ranks are stopping: they go on stopping
        stdout, stderr = process.communicate(timeout=100)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    # torchrun's agent hosts two stores and each rank a gloo listener: every one on loopback only
    assert len(listening) >= 3 and {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["status"] == "stopped"
    ended = read_jsonl(out / "metrics.jsonl")[-1]
    assert ended["event"] == "RunEnded" and ended["status"] == "stopped" and ended["step"] == summary["steps"]
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == summary["steps"]
    assert "Traceback" not in stderr and "OMP_NUM_THREADS" not in stderr and "death signal" not in stderr, stderr
    assert "SIGINT: stopping after this step" in stderr and "already stopping (SIGTERM)" in stderr, stderr
