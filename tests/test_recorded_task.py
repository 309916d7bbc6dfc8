"""Commands on a run find the task file it recorded (asking before its code runs), and every `amp-console ...`
command the CLI suggests for a run of a task file runs as printed."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import cli
from task_registry import restore

import core.tasks as registry

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"
MARKER = "\nfrom pathlib import Path as _P\n_P(__file__).with_suffix('.ran').touch()\n"  # proof that the file ran


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_run_loads_its_recorded_task_file_once_the_user_agrees(tmp_path, capsys, monkeypatch):
    path = tmp_path / "my_task.py"
    path.write_text(TASK_FILE.read_text() + MARKER)
    reference, run, ran = f"{path.resolve()}:RegressionTask", tmp_path / "run", path.with_suffix(".ran")
    code, _out, err = cli(capsys, "train", "--task", reference, "--max-steps", "4", "-o", "samples=256", "--out", run)
    assert code == 0, err
    ran.unlink()
    restore(({}, {}, {}))  # as a new process: nothing loaded
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal: one line saying what to add
    code, _out, err = cli(capsys, "evaluate", run)
    assert code == 2 and f"add --task {reference}, or --yes" in err and not ran.exists()
    rows = tmp_path / "rows.csv"
    rows.write_text("x0,x1,x2,x3,x4,x5,x6,x7\n" + ",".join(["0.5"] * 8) + "\n")
    code, _out, err = cli(capsys, "predict", run, "--input", rows, "--out", tmp_path / "scored.csv")
    assert code == 2 and f"add --task {reference}, or --yes" in err and not ran.exists()
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))  # a terminal: asked, and no is no
    code, _out, err = cli(capsys, "export", run, "--out", tmp_path / "export")
    assert code == 2 and "Load only files you trust" in err and "its code did not run" in err and not ran.exists()
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out, err = cli(capsys, "evaluate", run, "--json")
    assert code == 0, err
    assert ran.exists() and registry.task_source("regression") == reference and "rmse" in out
    restore(({}, {}, {}))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, out, err = cli(capsys, "train", "--resume", run / "checkpoint.pt", "--max-steps", "6", "--yes", "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 6


def test_lab_commands_start_from_a_run_and_its_task_file(tmp_path, capsys, monkeypatch):
    """lr-find / fit-batch --from RUN: the run's task (its file asked for first, as evaluate does), options and
    batch size; the command they suggest names the file."""
    path = tmp_path / "my_task.py"
    path.write_text(TASK_FILE.read_text() + MARKER)
    reference, run, ran = f"{path.resolve()}:RegressionTask", tmp_path / "run", path.with_suffix(".ran")
    flags = ["--task", reference, "--max-steps", "2", "-o", "samples=256", "-o", "hidden=12", "--batch-size", "24"]
    code, _out, err = cli(capsys, "train", *flags, "--out", run)
    assert code == 0, err
    ran.unlink()
    restore(({}, {}, {}))  # as a new process: nothing loaded
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, _out, err = cli(capsys, "lr-find", "--from", run, "--steps", "15", "--device", "cpu")
    assert code == 2 and f"add --task {reference}, or --yes" in err and not ran.exists()
    code, out, err = cli(
        capsys, "lr-find", "--from", run / "checkpoint.pt", "--steps", "15", "--device", "cpu", "--yes", "--json"
    )
    assert code in (0, 1) and ran.exists(), err
    found = json.loads(out.strip().splitlines()[-1])
    assert found["task"] == "regression" and found["task_options"]["hidden"] == 12 and found["batch_size"] == 24
    command = shlex.split(found["train_command"])  # runnable as printed: --task names the file
    assert command[command.index("--task") + 1] in (reference, str(path.resolve()))
    code, _out, err = cli(capsys, "lr-find", "--from", tmp_path / "nowhere", "--steps", "15")
    assert code == 2 and "--from" in err and len(err.strip().splitlines()) == 1


def _run(command: str, tmp_path: Path, env: dict) -> subprocess.CompletedProcess:
    parts = shlex.split(command)
    assert parts[0] == "amp-console", command
    if parts[1] == "train" and "--max-steps" not in parts:
        parts += ["--max-steps", "2"]
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *parts[1:]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def _last_json(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_suggested_command_runs_as_printed(tmp_path):
    """fit-batch, lr-find and sweep on the regression task file, runs kept in a --runs-dir that is not the default:
    each command they suggest, run in a fresh process (no terminal), ends with 0."""
    reference, runs = f"{TASK_FILE}:RegressionTask", tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMP_CONSOLE_RUNS_DIR": str(tmp_path / "default")}
    small = ["--task", reference, "-o", "samples=256", "--device", "cpu", "--json"]
    commands = [
        _last_json(_run(shlex.join(["amp-console", "fit-batch", *small, "--precisions", "fp32"]), tmp_path, env)),
        _last_json(_run(shlex.join(["amp-console", "lr-find", *small, "--steps", "25"]), tmp_path, env)),
    ]
    suggested = [c["train_command"] for c in commands if c.get("train_command")]
    sweep = ["amp-console", "sweep", *small[:4], "--max-steps", "4", "--grid", "seed=0,1", "--runs-dir", str(runs)]
    suggested += [c for c in _last_json(_run(shlex.join([*sweep, "--json"]), tmp_path, env))["commands"].values() if c]
    assert len(suggested) >= 3 and any("--resume" in c for c in suggested), suggested
    for command in suggested:
        done = _run(command, tmp_path, env)
        assert done.returncode == 0, f"{command}: {done.stderr[-600:]}"
