"""Sweeps under faults: kill -9 of a parallel sweep leaves no trial process training (each stops with its
checkpoint, even with its stdin held open by someone else); a resume after a kill counts a trial whose run had
completed as completed, with its figures; a crafted sweep.json (a trial folder outside the sweep, wrong types,
a FIFO) is one line, never a trial trained outside the sweep folder."""

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

from core.cli.main import main
from core.config import RunConfig
from core.engine.run_record import load_record
from core.errors import ConfigError
from core.lab.sweep import TrialStarted, create_sweep, grid_axis, load_sweep, plan_trials, run_sweep, sweep_table

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]


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


def new_sweep(tmp_path, grid="lr=1e-3,3e-3", **changes) -> Path:
    base = fast_base(**changes)
    axes = [grid_axis(grid, "tiny")]
    return create_sweep(base, plan_trials(base, grid=axes), axes, root=tmp_path / "runs")


def edit_sweep(folder: Path, change) -> None:
    data = json.loads((folder / "sweep.json").read_text())
    change(data)
    (folder / "sweep.json").write_text(json.dumps(data))


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            pass
    return left


# ------------------------------------------------------------------------------------------ kill -9
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("stdin_held", [False, True], ids=["stdin-closes", "stdin-held-open"])
def test_kill_9_of_a_parallel_sweep_ends_every_trial_process(tmp_path, stdin_held):
    """The parent's end closes the trials' stdin (read as a stop); on Linux the kernel's parent-death signal
    stops them too, which is what ends them when another process keeps their stdin open."""
    if stdin_held and not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal and /proc are Linux's")
    root = tmp_path / "runs"
    env = {**os.environ, "AMP_CONSOLE_RUNS_DIR": str(root)}
    # Three trials on two slots: two train, and the pending one's spare process (started while they train) is
    # among the children that must end too.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "sweep",
            "--task",
            "tiny",
            "--device",
            "cpu",
            "--precision",
            "fp32",
            "--threads",
            "1",
            "--max-steps",
            "1000000",
            "--set",
            "log_interval=100",
            "--set",
            "eval_interval=100000",
            "-o",
            "samples=512",
            "--grid",
            "lr=1e-3,3e-3,1e-2",
            "--parallel",
            "2",
            "--progress-every",
            "1000",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    held: list[int] = []
    children: list[psutil.Process] = []
    try:
        stepping, lines = set(), []
        for line in proc.stderr:  # a trial's first progress line comes with its first logged step
            lines.append(line)
            if line.startswith("  [") and " step " in line:
                stepping.add(line.split("]")[0])
            if len(stepping) == 2:
                break
        assert len(stepping) == 2, "".join(lines)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2
        if stdin_held:  # a second writer on each trial's stdin pipe: no end of input when the parent dies
            held = [os.open(f"/proc/{child.pid}/fd/0", os.O_WRONLY | os.O_NONBLOCK) for child in children]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 120
        while alive(children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(children), f"trial processes still running: {[c.pid for c in alive(children)]}"
    finally:
        for fd in held:
            os.close(fd)
        if proc.poll() is None:
            children += psutil.Process(proc.pid).children(recursive=True)
            proc.kill()
        for child in alive(children):
            child.kill()
        proc.stderr.close()
    folder = next(root.iterdir())
    trials = load_sweep(folder)["trials"]
    started = [t for t in trials if t["status"] != "pending"]
    assert len(started) == 2
    for trial in started:  # each stopped as a stop does: its checkpoint kept, its record says so
        assert (folder / trial["folder"] / "checkpoint.pt").is_file()
        assert load_record(folder / trial["folder"])["status"] == "stopped"


# ------------------------------------------------------------------------------------------ resume
def _killed_before_the_sweep_recorded_the_end(data: dict) -> None:
    for trial in data["trials"]:
        trial.update(status="running", message="", ended=None)


def _run_json_says_running(folder: Path) -> None:
    """As a trial process killed after its final checkpoint and before its RunEnded leaves its run.json."""
    path = folder / "run.json"
    record = json.loads(path.read_text())
    record.update(status="running", end_time=None)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("run_json", ["completed", "final-checkpoint-only"])
def test_a_resume_counts_a_trial_whose_run_completed_as_completed(tmp_path, capsys, run_json):
    folder = new_sweep(tmp_path)
    run_sweep(folder)
    before = {
        t["index"]: (load_record(folder / t["folder"])["id"], t["attempts"]) for t in load_sweep(folder)["trials"]
    }
    edit_sweep(folder, _killed_before_the_sweep_recorded_the_end)
    if run_json == "final-checkpoint-only":
        for trial in load_sweep(folder)["trials"]:
            _run_json_says_running(folder / trial["folder"])
    seen = []
    result = run_sweep(folder, progress=seen.append)
    assert result.status == "completed" and result.counts == {"completed": 2}
    assert not [e for e in seen if isinstance(e, TrialStarted)]  # nothing trained again
    for trial in load_sweep(folder)["trials"]:
        assert trial["status"] == "completed", trial["message"]
        assert (load_record(folder / trial["folder"])["id"], trial["attempts"]) == before[trial["index"]]
        assert trial["run_id"] == before[trial["index"]][0]
    for row in sweep_table(folder):  # with its metrics
        assert row["status"] == "completed" and isinstance(row["best"], float) and row["checkpoint"]


# ------------------------------------------------------------------------------------------ sweep.json
def _outside(tmp_path: Path, folder: Path, how: str) -> str:
    victim = tmp_path / "victim"
    if how == "dotdot":
        return "../../victim"
    if how == "absolute":
        return str(victim)
    if how == "nested":
        return "sub/../../../victim"
    victim.mkdir()
    (folder / "trial-link").symlink_to(victim, target_is_directory=True)
    return "trial-link"


@pytest.mark.parametrize("how", ["dotdot", "absolute", "nested", "link"])
def test_a_trial_folder_outside_the_sweep_is_refused_in_one_line(tmp_path, capsys, how):
    folder = new_sweep(tmp_path, max_steps=2)
    bad = _outside(tmp_path, folder, how)

    def point_out(data):
        data["trials"][1]["folder"] = bad

    edit_sweep(folder, point_out)
    with pytest.raises(ConfigError, match="trial 2: folder .* (not a folder name inside|leads outside) the sweep"):
        run_sweep(folder)
    assert main(["sweep", "--resume", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "trial 2: folder" in err, err
    assert main(["sweep", "--show", str(folder)]) == 2
    capsys.readouterr()
    victim = tmp_path / "victim"
    assert not victim.exists() or not any(victim.iterdir())  # nothing trained there
    assert not any(p.is_dir() and p.name.startswith("trial") for p in folder.iterdir() if not p.is_symlink())


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d["trials"].__setitem__(0, "trial-01"), "trial 1 is not an object"),
        (lambda d: d["trials"][0].__setitem__("params", ["lr", 1]), "trial 1: params is not an object"),
        (lambda d: d["trials"][0].__setitem__("params", {"max_steps": 10**9}), "trial 1: params is not an object"),
        (lambda d: d["trials"][1].__setitem__("index", "2"), "trial 2 has no whole-number index"),
        (
            lambda d: d["trials"][1].__setitem__("status", "\x1b]0;owned\x07"),
            "trial 2: status \\x1b]0;owned\\x07 is not one of",
        ),
        (lambda d: d["trials"][0].__setitem__("folder", None), "trial 1: folder None is not a folder name"),
        (lambda d: d["trials"][0].__setitem__("attempts", "many"), "trial 1: attempts is not a whole number"),
        (lambda d: d.__setitem__("axes", {"key": "lr"}), "axes is not a list"),
        (lambda d: d.__setitem__("base_config", "lr=1"), "base_config is not a settings object"),
        (lambda d: d.__setitem__("devices", "cuda:0"), "devices is not a list"),
    ],
    ids=[
        "trial-text",
        "params-list",
        "params-unswept",
        "index-text",
        "status-escape",
        "folder-none",
        "attempts-text",
        "axes",
        "base-config",
        "devices",
    ],
)
def test_wrong_types_in_sweep_json_are_one_line(tmp_path, capsys, change, expected):
    folder = new_sweep(tmp_path, max_steps=2)
    edit_sweep(folder, change)
    with pytest.raises(ConfigError) as caught:
        run_sweep(folder)
    assert expected in str(caught.value) and "\n" not in str(caught.value) and "\x1b" not in str(caught.value)
    assert main(["sweep", "--resume", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err
    assert not any(p.name.startswith("trial") for p in folder.iterdir())  # no trial ran


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX's")
def test_a_sweep_json_that_is_a_fifo_or_too_deep_is_refused_without_hanging(tmp_path, capsys):
    folder = new_sweep(tmp_path, max_steps=2)
    (folder / "sweep.json").unlink()
    os.mkfifo(folder / "sweep.json")
    with pytest.raises(ConfigError, match="named pipe"):
        load_sweep(folder)
    (folder / "sweep.json").unlink()
    (folder / "sweep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["sweep", "--resume", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "sweep.json" in err
