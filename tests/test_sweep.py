"""Sweeps (core.lab.sweep, `amp-console sweep`): a 2x2 grid gives four runs in the history and a sorted table;
a bad value fails before any trial; a stopped sweep resumes only what is left (the stopped trial from its
checkpoint); a seeded random sweep is reproducible; a failing trial is recorded and the rest run (that `--help` loads no
torch: tests/test_cli_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import cli

from core.config import RunConfig
from core.engine.events import StepMetrics
from core.engine.run_index import find_runs
from core.engine.run_record import load_record
from core.errors import ConfigError
from core.lab import sweep as sweep_lab
from core.lab.sweep import (
    SweepEnded,
    SweepStarted,
    TrialEnded,
    TrialEvent,
    TrialStarted,
    create_sweep,
    grid_axis,
    load_sweep,
    plan_trials,
    range_axis,
    run_sweep,
    sweep_table,
)
from core.lab.sweep import runner as sweep_runner

ROOT = Path(__file__).resolve().parent.parent
FAST = [
    "--task",
    "tiny",
    "--device",
    "cpu",
    "--precision",
    "fp32",
    "--threads",
    "1",
    "--max-steps",
    "20",
    "--set",
    "log_interval=5",
    "--set",
    "eval_interval=10",
    "-o",
    "samples=512",
]


def fast_base(**changes) -> RunConfig:
    values = {
        "device": "cpu",
        "precision": "fp32",
        "threads": 1,
        "max_steps": 20,
        "log_interval": 5,
        "eval_interval": 10,
        "task_options": {"samples": 512},
    }
    return RunConfig.for_task("tiny", **{**values, **changes})


def test_two_by_two_grid_makes_four_runs_in_the_history_and_a_table(tmp_path, capsys):
    root = tmp_path / "runs"
    code, out, err = cli(
        capsys,
        "sweep",
        *FAST,
        "--runs-dir",
        str(root),
        "--grid",
        "lr=1e-3,3e-3",
        "--grid",
        "batch_size=32,64",
        "--json",
    )
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    folder = Path(result["folder"])
    assert folder.parent == root and folder.name.endswith("-sweep-tiny")
    runs = find_runs(root)
    assert sorted(r["name"] for r in runs) == [
        f"{folder.name}/trial-01-lr=0.001-batch_size=32",
        f"{folder.name}/trial-02-lr=0.001-batch_size=64",
        f"{folder.name}/trial-03-lr=0.003-batch_size=32",
        f"{folder.name}/trial-04-lr=0.003-batch_size=64",
    ]
    assert {r["status"] for r in runs} == {"completed"}
    rows = result["trials"]
    assert len(rows) == 4 and result["metric"] == "accuracy" and result["mode"] == "max"
    assert [r["params"] for r in sorted(rows, key=lambda r: r["index"])] == [
        {"lr": 0.001, "batch_size": 32},
        {"lr": 0.001, "batch_size": 64},
        {"lr": 0.003, "batch_size": 32},
        {"lr": 0.003, "batch_size": 64},
    ]
    bests = [r["best"] for r in rows]
    assert all(isinstance(b, float) for b in bests) and bests == sorted(bests, reverse=True)
    for row in rows:  # the table's figures are run.json's
        record = load_record(row["folder"])
        assert row["run_id"] == record["id"] and row["wall_seconds"] == record["wall_seconds"]
        assert row["samples_per_second"] == record["samples_per_second"] > 0
        assert row["best_step"] == record["best"]["step"] and row["status"] == "completed"
    assert result["best"]["trial"] == rows[0]["trial"]
    assert result["commands"]["show"].startswith(f"amp-console runs show {rows[0]['run_id']}")
    assert "--resume" in result["commands"]["train_longer"] and "--max-steps 40" in result["commands"]["train_longer"]
    assert result["commands"]["resume"] is None
    assert json.loads((folder / "sweep.json").read_text())["status"] == "completed"
    # the plain table: four rows, the best named with the commands to open it and train it longer
    code, out, _ = cli(capsys, "sweep", "--show", str(folder), "--sort", "wall_seconds")
    assert code == 0
    assert sum(line.lstrip()[:1] in "1234" and "completed" in line for line in out.splitlines()) == 4
    assert f"best: {rows[0]['trial']}" in out and "runs show" in out and "train it longer" in out
    by_wall = sweep_table(folder, sort="wall_seconds")
    assert [r["wall_seconds"] for r in by_wall] == sorted(r["wall_seconds"] for r in by_wall)
    # the history's own command finds the best trial by its id
    code, out, _ = cli(capsys, "runs", "show", rows[0]["run_id"], "--runs-dir", str(root))
    assert code == 0 and rows[0]["trial"] in out


@pytest.mark.parametrize(
    "grid, expected",
    [
        (["lr=1e-3,20"], "--grid lr: trial 2 (lr=20): 20.0 is out of range"),
        (["lrr=1e-3"], "did you mean 'lr'?"),
        (["hidden=16,x"], "--grid hidden: 'x' is not a whole number"),
        (["optimizer=adam,adamx"], "'adamx' is not one of sgd, adam, adamw"),
        (["task=tiny,ranking"], "task cannot be swept"),
        (["lr=1e-3,"], "an empty value"),
    ],
)
def test_a_bad_grid_value_fails_before_any_trial(tmp_path, capsys, grid, expected):
    root = tmp_path / "runs"
    args = [a for g in grid for a in ("--grid", g)]
    code, out, err = cli(capsys, "sweep", *FAST, "--runs-dir", str(root), *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not root.exists() or not any(root.iterdir())  # nothing was created, nothing ran


def test_bad_random_ranges_fail_before_any_trial(tmp_path, capsys):
    root = tmp_path / "runs"
    for args, expected in (
        (["--random", "3", "--range", "lr=1e-2:1e-4"], "LOW must be below HIGH"),
        (["--random", "3", "--range", "lr=0:1e-2:log"], "a log range needs LOW above 0"),
        (["--random", "3"], "needs at least one --range"),
        (["--range", "lr=1e-4:1e-2"], "need --random N"),
        (["--random", "2", "--range", "lr=1:20:log"], "--range lr: trial"),
    ):
        code, _, err = cli(capsys, "sweep", *FAST, "--runs-dir", str(root), *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, (args, err)
    assert not root.exists() or not any(root.iterdir())


def test_stop_during_the_second_trial_then_resume_runs_only_what_is_left(tmp_path, capsys):
    from core.engine.control import RunControl

    base = fast_base()
    axes = [grid_axis("lr=1e-3,3e-3", "tiny"), grid_axis("batch_size=32,64", "tiny")]
    folder = create_sweep(base, plan_trials(base, grid=axes), axes, root=tmp_path / "runs")
    control = RunControl()
    seen = []

    def progress(event):
        seen.append(event)
        if (
            isinstance(event, TrialEvent)
            and event.index == 2
            and isinstance(event.event, StepMetrics)
            and event.event.step >= 10
        ):
            control.stop()

    result = run_sweep(folder, progress=progress, control=control)
    assert result.status == "stopped"
    data = load_sweep(folder)
    assert [t["status"] for t in data["trials"]] == ["completed", "stopped", "pending", "pending"]
    assert data["status"] == "stopped"
    stopped = data["trials"][1]
    assert (folder / stopped["folder"] / "checkpoint.pt").is_file()
    assert load_record(folder / stopped["folder"])["status"] == "stopped"
    assert isinstance(seen[0], SweepStarted) and isinstance(seen[-1], SweepEnded)
    assert seen[-1].counts == {"completed": 1, "stopped": 1, "pending": 2}
    assert [(e.index, e.resume_from) for e in seen if isinstance(e, TrialStarted)] == [(1, None), (2, None)]
    assert [(e.index, e.status) for e in seen if isinstance(e, TrialEnded)] == [(1, "completed"), (2, "stopped")]
    first_id = load_record(folder / data["trials"][0]["folder"])["id"]

    code, out, err = cli(capsys, "sweep", "--resume", str(folder), "--json")
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert [r["status"] for r in sorted(result["trials"], key=lambda r: r["index"])] == ["completed"] * 4
    assert "sweep: 3 of 4 trials to run (1 done before)" in err
    assert "trial-01" not in err  # the completed trial did not run again
    assert f"[2/4] {stopped['name']}: resuming from" in err
    record = load_record(folder / stopped["folder"])
    assert record["status"] == "completed" and record["steps"] == 20 and record["resumed_at"]
    assert load_record(folder / data["trials"][0]["folder"])["id"] == first_id
    assert len(find_runs(tmp_path / "runs")) == 4
    assert [t["attempts"] for t in load_sweep(folder)["trials"]] == [1, 2, 1, 1]


def test_a_random_sweep_with_a_seed_is_reproducible(capsys):
    base = fast_base()

    def plan(seed):
        axes = [
            range_axis("lr=1e-4:1e-2:log", "tiny"),
            range_axis("batch_size=32:256", "tiny"),
            range_axis("hidden=8:64:log", "tiny"),
            range_axis("optimizer=adam,adamw,sgd", "tiny"),
        ]
        return [t.params for t in plan_trials(base, ranges=axes, samples=6, seed=seed)]

    first = plan(7)
    assert first == plan(7) and first != plan(8)
    for params in first:
        assert 1e-4 <= params["lr"] <= 1e-2 and isinstance(params["lr"], float)
        assert 32 <= params["batch_size"] <= 256 and isinstance(params["batch_size"], int)
        assert 8 <= params["hidden"] <= 64 and isinstance(params["hidden"], int)
        assert params["optimizer"] in ("adam", "adamw", "sgd")
    args = [
        "sweep",
        *FAST,
        "--random",
        "5",
        "--range",
        "lr=1e-4:1e-2:log",
        "--range",
        "weight_decay=0:0.1",
        "--seed",
        "3",
        "--dry-run",
        "--json",
    ]
    runs = [json.loads(cli(capsys, *args)[1].strip().splitlines()[-1])["trials"] for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 5
    trial = plan_trials(base, ranges=[range_axis("hidden=8:64", "tiny")], samples=1, seed=0)[0]
    assert trial.config.task_options == {"samples": 512, "hidden": trial.params["hidden"]}  # an option, merged


def test_a_failing_trial_is_recorded_and_the_rest_run(tmp_path, capsys, monkeypatch):
    real = sweep_runner._run_trial

    def flaky(config, sink, control, resume_from):
        if config.lr == 3e-3:
            raise RuntimeError("the device fell over")
        return real(config, sink, control, resume_from)

    monkeypatch.setattr(sweep_runner, "_run_trial", flaky)
    root = tmp_path / "runs"
    code, out, err = cli(capsys, "sweep", *FAST, "--runs-dir", str(root), "--grid", "lr=1e-3,3e-3,1e-2")
    assert code == 1
    assert "trial-02-lr=0.003: failed (the device fell over)" in err
    assert "trial-02-lr=0.003: failed: the device fell over" in out
    folder = next(root.iterdir())
    data = load_sweep(folder)
    assert [t["status"] for t in data["trials"]] == ["completed", "failed", "completed"]
    assert data["trials"][1]["message"] == "the device fell over" and data["status"] == "completed"
    rows = sweep_table(folder)
    assert rows[-1]["status"] == "failed" and rows[-1]["best"] is None  # no metric: last
    # a resume keeps the failed trial as it is: nothing left to run
    code, out, err = cli(capsys, "sweep", "--resume", str(folder))
    assert "sweep: 0 of 3 trials to run" in err and code == 1
    # --retry-failed runs it again (the cause is gone): a fresh folder beside the failed run
    monkeypatch.setattr(sweep_runner, "_run_trial", real)
    code, out, err = cli(capsys, "sweep", "--resume", str(folder), "--retry-failed")
    assert code == 0 and "sweep: 1 of 3 trials to run" in err, err
    data = load_sweep(folder)
    assert [t["status"] for t in data["trials"]] == ["completed"] * 3


def test_train_it_longer_continues_the_trial_in_its_folder(tmp_path):
    from core.engine.trainer import train
    from core.lab.sweep import best_row, continue_config

    base = fast_base(max_steps=10)
    axes = [grid_axis("lr=1e-3,3e-3", "tiny")]
    folder = create_sweep(base, plan_trials(base, grid=axes), axes, root=tmp_path / "runs")
    run_sweep(folder)
    best = best_row(sweep_table(folder), "max")
    config, checkpoint = continue_config(best)
    assert config.max_steps == 20 and config.out_dir == best["folder"] and config.lr == best["params"]["lr"]
    ended = train(config, resume_from=checkpoint)
    assert ended.status == "completed" and ended.step == 20
    assert len(find_runs(tmp_path / "runs")) == 2  # the same run, trained longer: no new one
    assert next(r for r in sweep_table(folder) if r["index"] == best["index"])["steps"] == 20


def test_resume_and_show_refuse_what_is_not_a_sweep(tmp_path, capsys):
    code, _, err = cli(capsys, "sweep", "--resume", str(tmp_path))
    assert code == 2 and "not a sweep folder" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(capsys, "sweep", "--resume", str(tmp_path), "--grid", "lr=1e-3")
    assert code == 2 and "leave out --grid" in err
    with pytest.raises(ConfigError, match="--sort"):
        sweep_lab.sort_rows([{"index": 1, "params": {"lr": 0.1}}], sort="wal")


@pytest.mark.slow
def test_sigterm_stops_the_running_trial_with_a_checkpoint(tmp_path):
    import os
    import signal
    import time

    root = tmp_path / "runs"
    env = {**os.environ, "AMP_CONSOLE_RUNS_DIR": str(root)}
    args = [a for a in FAST if a != "20" and a != "--max-steps"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "sweep",
            *args,
            "--grid",
            "max_steps=20,1000000",
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
        for line in proc.stderr:
            lines.append(line)
            if "[2/2]" in line and "starting" in line:
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, "".join(lines) + err
    folder = next(root.iterdir())
    data = load_sweep(folder)
    assert [t["status"] for t in data["trials"]] == ["completed", "stopped"] and data["status"] == "stopped"
    assert (folder / data["trials"][1]["folder"] / "checkpoint.pt").is_file()
    assert "continue with: amp-console sweep --resume" in out
