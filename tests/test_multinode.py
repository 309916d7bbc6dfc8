"""Several nodes on the CPU (gloo, 127.0.0.1 only): two agents as two nodes train like one agent with as many
processes; a rank that dies restarts from its checkpoint under --max-restarts; a node that never joins ends the
run within the rendezvous timeout; SIGUSR1 inside a (fake) SLURM job checkpoints, requeues and resumes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from core.engine.threads import usable_cpu_cores
from core.files import read_jsonl
from tests.listening import listening_addresses
from tests.waiting import logged, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

COMMON = [
    "--task",
    "tiny",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--seed",
    "3",
    "-o",
    "samples=1024",
    "--log-interval",
    "1",
    "--eval-interval",
    "1000000",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train(*args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", "train", *COMMON, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or ENV,
        **kwargs,
    )


def finish(process: subprocess.Popen, timeout: float = 200) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.returncode, out, err


def steps(out: Path) -> list[tuple[int, float]]:
    return [(e["step"], e["loss"]) for e in read_jsonl(out / "metrics.jsonl") if e["event"] == "StepMetrics"]


@pytest.mark.skipif(usable_cpu_cores() < 2, reason="two CPU processes per node need two cores")
def test_two_nodes_of_two_train_like_one_process_at_the_same_global_batch(tmp_path, capsys):
    port = free_port()
    nodes = [
        train(
            "--batch-size",
            "8",
            "--max-steps",
            "12",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "2",
            "--node-rank",
            str(rank),
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            "two-nodes",
            "--rdzv-timeout",
            "120",
            "--out",
            str(tmp_path / "two"),
        )
        for rank in (0, 1)
    ]
    results = [finish(node) for node in nodes]
    assert [code for code, _, _ in results] == [0, 0], [err for _, _, err in results]
    assert not any("Warning" in err for _, _, err in results), results  # torch's deprecations, once per rank
    assert "node 0 of 2, 2 processes each: rendezvous 'two-nodes' at 127.0.0.1:" in results[0][2]
    assert "this node listens on lo (127.0.0.1) only" in results[0][2]
    # The reference: one process (this one) at the same global batch (4 x 8). One node of 4 CPU processes would
    # need 4 cores.
    from core.cli.main import main

    code = main(["train", *COMMON, "--batch-size", "32", "--max-steps", "12", "--out", str(tmp_path / "one")])
    assert code == 0, capsys.readouterr().err
    two, one = steps(tmp_path / "two"), steps(tmp_path / "one")
    assert [s for s, _ in two] == [s for s, _ in one] == list(range(1, 13))
    # DDP's usual tolerance: only the gradient all-reduce's summation order differs, amplified a little by Adam
    # (relative 1e-4, as tests/test_distributed.py's 2-process check).
    assert all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for (_, a), (_, b) in zip(two, one, strict=True)), (two, one)
    # Global rank 0 alone wrote the run; every rank's stderr has its log.
    assert sorted(p.name for p in (tmp_path / "two" / "ranks").iterdir()) == [f"rank-{r}.log" for r in range(4)]
    assert len([e for e in read_jsonl(tmp_path / "two" / "metrics.jsonl") if e["event"] == "RunStarted"]) == 1


@pytest.mark.skipif(usable_cpu_cores() < 2, reason="two CPU processes need two cores")
def test_a_killed_rank_restarts_and_resumes_from_its_checkpoint(tmp_path):
    """Rank 1 exits at step 23 on the first attempt; --max-restarts 1 restarts both ranks, which resume from
    the last checkpoint (every 5 steps, or rank 0's rescue at the failure): no step is trained twice beyond
    one checkpoint interval, and run.json counts the restart."""
    out = tmp_path / "run"
    process = train(
        "--batch-size",
        "8",
        "--max-steps",
        "40",
        "--checkpoint-interval",
        "5",
        "--nproc",
        "2",
        "--max-restarts",
        "1",
        "--out",
        str(out),
        env={**ENV, "AMP_CONSOLE_TEST_EXIT": "1:23"},
    )
    wait_until(lambda: logged(out, "StepMetrics"), "a step", process)
    listening = listening_addresses(process.pid)
    code, _, err = finish(process)
    assert code == 0, err
    # A single-node run, restarts included, listens on loopback only (torchrun's stores, gloo).
    assert listening and {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    events = read_jsonl(out / "metrics.jsonl")
    starts = [i for i, e in enumerate(events) if e["event"] == "RunStarted"]
    assert len(starts) == 2
    first = [e["step"] for e in events[: starts[1]] if e["event"] == "StepMetrics"]
    second = [e["step"] for e in events[starts[1] :] if e["event"] == "StepMetrics"]
    resumed_at = events[starts[1]]["start_step"]
    assert max(first) >= 22 and second == list(range(resumed_at + 1, 41))
    assert max(first) - resumed_at <= 5  # at most one checkpoint interval trained twice
    restart = events[starts[1]]["restart"]
    assert restart["count"] == 1 and restart["by"] == "torchrun" and restart["step"] == resumed_at
    assert any(n.startswith("restart 1 (torchrun --max-restarts): resumed from") for n in events[starts[1]]["notes"])
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "completed" and [r["step"] for r in record["restarts"]] == [resumed_at]
    assert "rank 1" in (out / "ranks" / "rank-1.log").read_text()


def workers(launchers: list[subprocess.Popen]) -> dict[int, psutil.Process]:
    """The train processes under the launchers (torchrun's workers), by global rank."""
    found = {}
    for launcher in launchers:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "RANK" in child.environ() and "core.cli" in " ".join(child.cmdline()):
                    found[int(child.environ()["RANK"])] = child
    return found


def sigterm_pending(process: psutil.Process) -> bool:
    status = Path(f"/proc/{process.pid}/status").read_text()
    return any(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)) for line in status.splitlines() if "Pnd:" in line)


@pytest.mark.skipif(usable_cpu_cores() < 2, reason="two CPU processes need two cores")
def test_after_a_killed_worker_every_node_restarts_into_the_same_attempt_and_resumes(tmp_path):
    """Rank 1's worker killed while rank 0, on the other node, has not noticed (stopped: across machines that
    takes a collective's failure): torchelastic counts a restart on rank 1's node and none on rank 0's, which
    restarts for the node waiting. Both must start the same attempt (one store, no 30-minute wait) and resume."""
    out, port = tmp_path / "run", free_port()
    flags = ["--batch-size", "8", "--max-steps", "100000000", "--checkpoint-interval", "5", "--max-restarts", "1"]
    meet = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-timeout", "120"]
    nodes = [train(*flags, *meet, "--node-rank", str(r), "--rdzv-id", "restarts", "--out", str(out)) for r in (0, 1)]
    everything = list(nodes)

    def events(name: str) -> list[dict]:
        path = out / "metrics.jsonl"
        return [e for e in read_jsonl(path) if e["event"] == name] if path.exists() else []

    try:
        wait_until(lambda: len(events("CheckpointSaved")) >= 2, "two checkpoints", *nodes)
        ranks = workers(nodes)
        everything += ranks.values()
        ranks[0].suspend()
        ranks[1].kill()
        wait_until(
            lambda: sigterm_pending(ranks[0]), "the restart", *nodes
        )  # its agent restarts it for the waiting node
        ranks[0].resume()
        wait_until(lambda: len(events("RunStarted")) == 2, "the second start", *nodes)
        resumed_at = events("RunStarted")[1]["start_step"]
        wait_until(lambda: max(e["step"] for e in events("StepMetrics")) >= resumed_at + 5, "5 steps more", *nodes)
        everything += workers(nodes).values()
        from core.engine.folder_control import write_request

        write_request(out, "stop")
        results = [finish(node) for node in nodes]
    finally:
        for process in everything:
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                process.kill()
    assert events("RunEnded")[-1]["status"] == "stopped", results
    # every rank started twice, the second time as restart 1 (its log's headers)
    for rank in (0, 1):
        log = (out / "ranks" / f"rank-{rank}.log").read_text()
        assert re.findall(r"^--- .* restart (\d+)$", log, re.M) == ["0", "1"], log
    started = events("RunStarted")[1]
    assert started["restart"]["count"] == 1 and started["restart"]["step"] == resumed_at
    everything = [e for e in read_jsonl(out / "metrics.jsonl") if e["event"] in ("RunStarted", "StepMetrics")]
    again = everything.index(started)
    first, second = ([e["step"] for e in part if "step" in e] for part in (everything[:again], everything[again:]))
    assert max(first) - resumed_at <= 5 and second[:5] == list(range(resumed_at + 1, resumed_at + 6)), everything
    assert not any("Warning" in err for _, _, err in results), results  # torch's deprecations, once per rank


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.0 400 Bad Request\r\n\r\n" * 9], ids=["silent", "garbage"])
def test_another_program_on_the_port_fails_within_the_rendezvous_timeout_in_one_line(tmp_path, answer):
    """A listener that accepts and never answers (torch's store client waits for ever) or answers garbage
    (torch's client retries, printing 120 lines of warnings): one line after --rdzv-timeout."""
    kept: list[socket.socket] = []
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(16)

        def serve() -> None:
            with contextlib.suppress(OSError):
                while True:
                    kept.append(held.accept()[0])
                    if answer:
                        with kept.pop() as peer:
                            peer.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        endpoint = f"127.0.0.1:{held.getsockname()[1]}"
        node = train(
            "--max-steps", "5", "--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-timeout", "3",
            start_new_session=True,
        )  # fmt: skip
        try:
            code, _, err = finish(node, timeout=120)
        finally:
            # its group only: this process's own helpers (multiprocessing's resource tracker) must live on
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.pid, signal.SIGKILL)
            for peer in kept:
                peer.close()
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 2 and lines[0].startswith("amp-console: 2 nodes, 1 processes each"), err
    assert lines[1].startswith(
        f"amp-console: the nodes did not meet (RendezvousConnectionError: {endpoint} gave no store's answer in 3 s "
        f"(another program on that port?)); 2 nodes were expected at {endpoint} within 3 s (--rdzv-timeout)"
    ), err


def test_the_root_cause_is_the_rank_that_died_not_the_one_that_reported_it():
    """torchelastic dates failures in whole seconds, a silent death when its agent noticed it: rank 0, which
    reports rank 1's death (and saved the checkpoint), is often dated in the same second or before."""
    import signal
    from types import SimpleNamespace

    from core.cli.loopback_torchrun import failure_line, root_failure

    def failure(local_rank, timestamp, message="", exitcode=1):
        return SimpleNamespace(
            local_rank=local_rank,
            timestamp=timestamp,
            exitcode=exitcode,
            message=message,
            signal_name=lambda: signal.Signals(-exitcode).name if exitcode < 0 else "",
        )

    told = {
        "message": "RankFailed: rank 0 on node n: rank 1 of this 2-process run died or lost its connection at "
        "step 5; the run ended"
    }
    silent = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    same_second = SimpleNamespace(failures={0: failure(0, 100, told), 1: failure(1, 100, silent)})
    assert root_failure(same_second)[0] == 1
    # The line names the rank, its node and how it ended (a real run's: tests/test_distributed.py, a rank killed)
    assert failure_line(same_second) == (
        f"rank 1 (local rank 1) on node {socket.gethostname()} failed first: "
        f"exited with code 1; it said nothing (killed, or it died before it could "
        f"write why)"
    )
    # Rank 1 killed, noticed a second after rank 0 reported it; rank 0 then stopped by the agent (SIGTERM)
    noticed_later = SimpleNamespace(
        failures={0: failure(0, 100, told, -signal.SIGTERM), 1: failure(1, 101, silent, -signal.SIGKILL)}
    )
    assert failure_line(noticed_later).startswith(
        f"rank 1 (local rank 1) on node {socket.gethostname()} failed first: was killed by SIGKILL; it said nothing"
    )
    # The lost peer on another node: rank 0's report, not rank 1, which the agent stopped afterwards
    elsewhere = SimpleNamespace(failures={0: failure(0, 100, told), 1: failure(1, 101, silent, -signal.SIGTERM)})
    assert failure_line(elsewhere).endswith(
        "failed first: exited with code 1; rank 0 on node n: rank 1 of this "
        "2-process run died or lost its connection at step 5; the run ended"
    )
    by_themselves = SimpleNamespace(
        failures={0: failure(0, 100, {"message": "RankFailed: disk full"}), 1: failure(1, 101, silent, 1)}
    )
    assert root_failure(by_themselves)[0] == 0  # otherwise torchelastic's order: the first by time


def test_a_node_that_never_joins_ends_the_run_within_the_rendezvous_timeout(tmp_path):
    process = train(
        "--max-steps",
        "5",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--node-rank",
        "0",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
        "--rdzv-id",
        "alone",
        "--rdzv-timeout",
        "2",
        "--out",
        str(tmp_path / "run"),
    )
    code, _, err = finish(process, timeout=120)
    assert code == 1
    assert "amp-console: the nodes did not meet (RendezvousTimeoutError" in err
    assert "2 nodes were expected at 127.0.0.1:" in err and "within 2 s (--rdzv-timeout)" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def fake_slurm(tmp_path: Path, restart: int) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n')
    scontrol.chmod(0o755)
    return {
        **ENV,
        "PATH": f"{bin_dir}{os.pathsep}{ENV['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "0",
        "SLURM_NODEID": "0",
        "SLURM_RESTART_COUNT": str(restart),
    }


def test_sigusr1_in_a_slurm_job_checkpoints_requeues_and_the_requeued_job_resumes(tmp_path, monkeypatch, capsys):
    """The warned job in a process of its own (a real SIGUSR1); the requeued job's command in this process, in
    the job's environment."""
    out = tmp_path / "rec-4242"
    process = train(
        "--batch-size", "16", "--max-steps", "100000000", "--out", str(out), "--json", env=fake_slurm(tmp_path, 0)
    )
    wait_until(lambda: logged(out, "StepMetrics"), "a step", process)
    process.send_signal(signal.SIGUSR1)
    code, stdout, err = finish(process)
    assert code == 128 + signal.SIGUSR1, err
    assert (tmp_path / "scontrol.calls").read_text() == "requeue 4242\n"
    assert "SLURM job 4242 requeued" in err
    stopped = json.loads(stdout.strip().splitlines()[-1])
    assert stopped["status"] == "stopped" and stopped["checkpoint"] == str(out / "checkpoint.pt")

    from core.cli.main import main

    requeued = fake_slurm(tmp_path, 1)
    for name in ("PATH", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NODEID", "SLURM_RESTART_COUNT", "OMP_NUM_THREADS"):
        monkeypatch.setenv(name, requeued[name])
    capsys.readouterr()
    code = main(
        ["train", *COMMON, "--batch-size", "16", "--max-steps", str(stopped["steps"] + 3), "--out", str(out), "--json"]
    )
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(stdout.strip().splitlines()[-1])["steps"] == stopped["steps"] + 3
    started = [e for e in read_jsonl(out / "metrics.jsonl") if e["event"] == "RunStarted"]
    assert len(started) == 2 and started[1]["start_step"] == stopped["steps"]
    assert started[1]["restart"]["by"] == "slurm" and "stopped" in started[1]["restart"]["reason"]
    assert (tmp_path / "scontrol.calls").read_text() == "requeue 4242\n"  # a completed run requeues nothing


def test_the_sbatch_script_meets_at_the_first_node_and_asks_for_the_warning_and_requeue(tmp_path, capsys):
    from core.cli.main import main

    assert (
        main(
            [
                "slurm",
                "--config",
                "rec.toml",
                "--nodes",
                "2",
                "--gpus-per-node",
                "8",
                "--time",
                "12:00:00",
                "--partition",
                "gpu",
                "--account",
                "ml",
                "--job-name",
                "rec",
                "--runs-dir",
                "/shared/runs",
            ]
        )
        == 0
    )
    script = capsys.readouterr().out
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --time=12:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=ml",
        "#SBATCH --signal=USR1@90",
        "#SBATCH --requeue",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    ):
        assert line in script.splitlines(), line
    assert '--rdzv-endpoint "$head_node:$rdzv_port"' in script and '--rdzv-id "$SLURM_JOB_ID"' in script
    assert "--nproc-per-node 8" in script and 'run_dir=/shared/runs/rec-"$SLURM_JOB_ID"' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
