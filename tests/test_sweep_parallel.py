"""Sweeps N trials at a time (`amp-console sweep --devices cpu,cpu`, core.lab.sweep.parallel): each trial is a
normal run in its own training process, trials really overlap, a failing trial leaves the others running, a stop
checkpoints every running trial and `--resume` (on other devices) continues them from their steps."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
from cli_in_process import cli

from core.config import RunConfig
from core.engine.control import RunControl
from core.engine.events import RunEnded, StepMetrics
from core.engine.run_index import find_runs
from core.engine.run_record import load_record
from core.errors import ConfigError
from core.lab.sweep import TrialEvent, TrialStarted, create_sweep, grid_axis, load_sweep, plan_trials, run_sweep
from core.lab.sweep.parallel import _Child, _outcome, child_env, device_slots, parse_devices
from core.process import StopEscalation

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# Trials a few seconds of steps long: long enough that two running at once step at the same time even when one
# child loads torch a second or two after the other on a busy machine; threads left at auto, so the sweep shares
# the cores out.
STEPS = 2000
FAST = [
    "--task",
    "tiny",
    "--device",
    "cpu",
    "--precision",
    "fp32",
    "--max-steps",
    str(STEPS),
    "--set",
    "log_interval=100",
    "--set",
    "eval_interval=2000",
    "-o",
    "samples=512",
]


def interleaved_trials(err: str) -> list[tuple[int, int]]:
    """Pairs of trials whose logged steps interleave in a parallel sweep's progress lines (`  [N] step ...`, written
    as the trials' events arrive): a step of one between two of the other, so both were training at once. Trials
    one after another never interleave, however quick."""
    order = [int(line[3 : line.index("]")]) for line in err.splitlines() if line.startswith("  [") and " step " in line]
    spans = {i: (order.index(i), len(order) - 1 - order[::-1].index(i)) for i in set(order)}
    return [
        (a, b)
        for a in sorted(spans)
        for b in sorted(spans)
        if a < b and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
    ]


@pytest.mark.default_threads  # the trainer's automatic thread choice is what it checks
def test_a_2x2_grid_on_two_cpu_slots_makes_four_runs_that_overlap(tmp_path, capsys):
    root = tmp_path / "runs"
    code, out, err = cli(
        capsys,
        "sweep",
        *FAST,
        "-o",
        "hidden=1024",  # trials of a few seconds: long enough to overlap whatever the load
        "--runs-dir",
        str(root),
        "--grid",
        "lr=1e-3,3e-3",
        "--grid",
        "batch_size=32,64",
        "--devices",
        "cpu,cpu",
        "--json",
        "--progress-every",
        "0.001",
    )  # a progress line at every logged step of each trial
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    folder = Path(result["folder"])
    assert "4 of 4 trials to run, 2 at a time on cpu, cpu" in err
    runs = find_runs(root)
    assert sorted(r["name"] for r in runs) == [
        f"{folder.name}/trial-01-lr=0.001-batch_size=32",
        f"{folder.name}/trial-02-lr=0.001-batch_size=64",
        f"{folder.name}/trial-03-lr=0.003-batch_size=32",
        f"{folder.name}/trial-04-lr=0.003-batch_size=64",
    ]
    assert {r["status"] for r in runs} == {"completed"} and {r["steps"] for r in runs} == {STEPS}
    rows = result["trials"]
    assert len(rows) == 4 and {r["status"] for r in rows} == {"completed"} and {r["device"] for r in rows} == {"cpu"}
    data = load_sweep(folder)
    assert data["status"] == "completed"
    assert [(t["status"], t["device"], t["attempts"]) for t in data["trials"]] == [("completed", "cpu", 1)] * 4
    assert interleaved_trials(err), err
    records = [load_record(folder / t["folder"]) for t in data["trials"]]
    # Two processes shared the two cores: the trainer's auto threads took its share, and said so.
    for record in records:
        assert any("2 processes" in note for note in record["notes"]), record["notes"]


def test_a_trial_that_fails_on_its_device_is_marked_and_the_others_run(tmp_path, capsys):
    root = tmp_path / "runs"
    # One trial per slot, started together: the fp16 one fails on the CPU while the fp32 one trains.
    code, out, err = cli(
        capsys,
        "sweep",
        *FAST,
        "--max-steps",
        "200",
        "--runs-dir",
        str(root),
        "--grid",
        "precision=fp16,fp32",
        "--devices",
        "cpu,cpu",
    )
    assert code == 1, err
    folder = next(root.iterdir())
    data = load_sweep(folder)
    assert [t["status"] for t in data["trials"]] == ["failed", "completed"]
    assert data["status"] == "completed"
    failed = data["trials"][0]  # the child's own one-line reason
    assert failed["message"].startswith("precision: fp16 is not available on cpu"), failed["message"]
    assert "\n" not in failed["message"]
    assert "trial-01-precision=fp16: failed: precision: fp16 is not available on cpu" in out
    assert "device" in next(line for line in out.splitlines() if line.startswith("#"))  # where each trial ran
    assert [r["status"] for r in find_runs(root)] == ["completed"]  # a failed setup leaves no run


def test_stop_mid_sweep_then_resume_on_other_devices_continues_the_stopped_trials(tmp_path, capsys):
    base = RunConfig.for_task(
        "tiny",
        device="cpu",
        precision="fp32",
        max_steps=1500,
        log_interval=10,
        eval_interval=500,
        # wide enough (a few seconds a trial) that a trial cannot finish while the stop travels on a busy machine
        task_options={"samples": 512, "hidden": 4096},
    )
    axes = [grid_axis("lr=1e-3,3e-3,1e-2", "tiny")]
    folder = create_sweep(base, plan_trials(base, grid=axes), axes, root=tmp_path / "runs")
    control = RunControl()
    steps: dict[int, int] = {}
    ended: dict[int, str] = {}
    started = []

    def progress(event):
        if isinstance(event, TrialStarted):
            started.append((event.index, event.device))
        if isinstance(event, TrialEvent) and isinstance(event.event, StepMetrics):
            steps[event.index] = event.event.step
            running = [i for i, s in steps.items() if s >= 20 and not ended.get(i)]
            if len(running) >= 2:
                control.stop()
        if isinstance(event, TrialEvent) and isinstance(event.event, RunEnded):
            ended[event.index] = event.event.status

    result = run_sweep(folder, progress=progress, control=control, devices=["cpu", "cpu"])
    assert result.status == "stopped"
    data = load_sweep(folder)
    assert data["devices"] == ["cpu", "cpu"]  # a plain --resume would run it the same way
    stopped = [t for t in data["trials"] if t["status"] == "stopped"]
    assert len(stopped) == 2, [t["status"] for t in data["trials"]]
    assert {t["status"] for t in data["trials"]} <= {"completed", "stopped", "pending"}
    assert all(device == "cpu" for _, device in started)
    before = {}
    for trial in stopped:
        record = load_record(folder / trial["folder"])
        assert record["status"] == "stopped" and 20 <= record["steps"] < 1500, record["steps"]
        assert (folder / trial["folder"] / "checkpoint.pt").is_file()
        before[trial["index"]] = (record["id"], record["steps"])

    # Resume with another device list: three slots now.
    code, out, err = cli(capsys, "sweep", "--resume", str(folder), "--devices", "cpu,cpu,cpu", "--json")
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert sorted(r["status"] for r in result["trials"]) == ["completed"] * 3
    for index, (run_id, stopped_at) in before.items():
        trial = load_sweep(folder)["trials"][index - 1]
        assert f"[{index}/3] {trial['name']}: resuming from" in err
        record = load_record(folder / trial["folder"])
        # the same run, continued from the step it stopped at: not restarted
        assert record["id"] == run_id and record["start_step"] == stopped_at and record["steps"] == 1500
        assert record["resumed_at"] and trial["attempts"] == 2
    assert len(find_runs(tmp_path / "runs")) == 3 and load_sweep(folder)["devices"] == ["cpu"] * 3


def test_sigterm_stops_every_running_trial_with_a_checkpoint(tmp_path):
    root = tmp_path / "runs"
    env = {**os.environ, "AMP_CONSOLE_RUNS_DIR": str(root)}
    args = [a for a in FAST if a not in (str(STEPS), "--max-steps")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "sweep",
            *args,
            "--max-steps",
            "1000000",
            "--grid",
            "lr=1e-3,3e-3,1e-2",
            "--devices",
            "cpu,cpu",
            "--progress-every",
            "1000",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        stepping = set()
        for line in proc.stderr:  # each trial's first progress line comes with its first logged step
            lines.append(line)
            if line.startswith("  [") and " step " in line:
                stepping.add(line.split("]")[0])
            if len(stepping) == 2:
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, "".join(lines) + err
    folder = next(root.iterdir())
    data = load_sweep(folder)
    assert [t["status"] for t in data["trials"]] == ["stopped", "stopped", "pending"] and data["status"] == "stopped"
    for trial in data["trials"][:2]:
        assert (folder / trial["folder"] / "checkpoint.pt").is_file()
        assert load_record(folder / trial["folder"])["status"] == "stopped"
    assert "continue with: amp-console sweep --resume" in out


def test_devices_are_checked_and_dealt_to_slots():
    assert parse_devices("cuda:0, CUDA:1") == ["cuda:0", "cuda:1"]
    assert parse_devices("cpu,cpu") == ["cpu", "cpu"] and parse_devices("cuda") == ["cuda:0"]
    for bad, expected in (
        ("cuda:0,", "an empty name"),
        ("gpu0", "'gpu0' is not a device"),
        ("auto", "name the devices"),
    ):
        with pytest.raises(ConfigError, match=expected) as info:
            parse_devices(bad)
        assert info.value.field == "--devices"
    assert device_slots(["cuda:0", "cuda:1"], 3) == ["cuda:0", "cuda:1", "cuda:0"]
    assert device_slots(["cpu"], None) == ["cpu"]
    with pytest.raises(ConfigError, match="--parallel"):
        device_slots(["cpu"], 0)


def test_a_missing_accelerator_is_refused_before_the_sweep_starts(tmp_path, capsys):
    import torch

    if torch.cuda.device_count() >= 8:
        pytest.skip("this machine has a cuda:7")
    root = tmp_path / "runs"
    code, out, err = cli(
        capsys, "sweep", *FAST, "--runs-dir", str(root), "--grid", "lr=1e-3,3e-3", "--devices", "cpu,cuda:7"
    )
    assert code == 2 and out == "" and "--devices: cuda:7 is not available here (available: cpu" in err
    assert not root.exists() or not any(root.iterdir())


def test_thread_sharing_for_n_trials(monkeypatch):
    from core.engine.threads import choose_threads

    monkeypatch.setattr("core.lab.sweep.parallel.usable_cpu_cores", lambda: 8)
    env = child_env(2, base={"OMP_NUM_THREADS": "8", "WORLD_SIZE": "4"})
    assert env["LOCAL_WORLD_SIZE"] == "2" and env["OMP_NUM_THREADS"] == "4" and "WORLD_SIZE" not in env
    assert "LOCAL_WORLD_SIZE" not in child_env(1, base={})  # one trial at a time: the machine is its own
    processes = int(env["LOCAL_WORLD_SIZE"])
    # what the trainer's auto choice makes of it: at most its share of the cores; threads set: as given
    assert choose_threads(0, 10**8, 8, 0.0, processes=processes).threads == 4
    assert choose_threads(6, 10**8, 8, 0.0, processes=processes).threads == 6


def test_how_a_trial_process_ended_becomes_its_status():
    def child(**kw):
        pipes = types.SimpleNamespace(stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO())
        c = _Child(0, "cuda:0", {"index": 1}, proc=pipes)
        for k, v in kw.items():
            setattr(c, k, v)
        return c

    oom = RunEnded(
        status="failed",
        message="CUDA out of memory on cuda:0\nTried to allocate 2.00 GiB",
        step=3,
        epoch=1,
        final_loss=None,
        metrics={},
        checkpoint=None,
        samples_per_second=None,
    )
    assert _outcome(child(ended=oom), 1, 60) == ("failed", "CUDA out of memory on cuda:0")
    status, message = _outcome(child(started=True), -signal.SIGKILL, 60)
    assert status == "failed" and "SIGKILL" in message and "out of memory" in message
    assert _outcome(child(stopping=StopEscalation(0, 60)), -signal.SIGKILL, 60)[0] == "stopped"
    crash = child()
    crash.stderr_tail.extend(["Traceback (most recent call last):", "RuntimeError: boom"])
    assert _outcome(crash, 1, 60) == ("failed", "RuntimeError: boom")
    assert _outcome(child(setup_error="batch_size: too big"), 2, 60) == ("failed", "batch_size: too big")


def test_a_plain_resume_runs_on_the_devices_the_sweep_last_ran_on():
    import argparse

    from core.cli.tune_sweep import device_slots as slots_of

    plain = argparse.Namespace(devices=None, parallel=None)
    assert slots_of(plain, "cpu", last=["cpu", "cpu"]) == ["cpu", "cpu"]
    assert slots_of(plain, "cpu", last=[]) is None  # it ran one trial at a time in-process: so again
    assert slots_of(argparse.Namespace(devices="cpu", parallel=None), "cpu", last=["cpu", "cpu"]) == ["cpu"]
    assert slots_of(argparse.Namespace(devices=None, parallel=3), "cpu", last=None) == ["cpu"] * 3
    assert slots_of(argparse.Namespace(devices=None, parallel=2), "AUTO", last=None) == ["auto"] * 2
    import torch

    if torch.cuda.device_count() < 8:
        with pytest.raises(ConfigError, match="not available here.*give --devices to choose others"):
            slots_of(plain, "cpu", last=["cuda:7"])
