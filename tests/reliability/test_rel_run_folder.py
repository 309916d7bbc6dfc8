"""A run claims its folder atomically: runs started at the same instant into one --out each get their own
folder and an intact checkpoint; a live run's folder is never shared; a resume into it is refused; temp files
left by a killed write are removed when the folder is claimed."""

from __future__ import annotations

import threading

import pytest

from core.config import RunConfig
from core.engine import trainer as trainer_module
from core.engine.checkpoints import load_checkpoint
from core.engine.events import RunStarted
from core.engine.run_folder import LOCK_FILE, claim_run_folder, is_in_use
from core.engine.trainer import Trainer, train
from core.errors import ConfigError

pytestmark = pytest.mark.reliability


@pytest.mark.slow
def test_the_folder_claim_knows_the_run_files_by_their_names_and_needs_no_torch():
    import subprocess
    import sys

    from core.engine import checkpoints, run_folder

    assert (run_folder.CHECKPOINT_FILE, run_folder.METRICS_FILE) == (
        checkpoints.CHECKPOINT_FILE,
        checkpoints.METRICS_FILE,
    )
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, core.engine.run_folder; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.stdout.strip() == "False", loaded.stderr


def tiny(out, **overrides) -> RunConfig:
    values = {
        "device": "cpu",
        "precision": "fp32",
        "batch_size": 32,
        "log_interval": 5,
        "threads": 1,
        "out_dir": str(out),
    }
    return RunConfig.for_task("tiny", **{**values, **overrides})


CLAIMER = """
import os, sys, time
from core.engine.run_folder import claim_run_folder
requested, go, done = sys.argv[1:4]
print("ready", flush=True)
while not os.path.exists(go):  # every process is started and waits: then they all claim at once
    time.sleep(0.001)
claimed = claim_run_folder(requested)
print(claimed.path, flush=True)
while not os.path.exists(done):  # hold the claim until every process has claimed
    time.sleep(0.01)
"""


@pytest.mark.slow
def test_processes_claiming_one_folder_at_the_same_instant_each_get_their_own(tmp_path):
    import subprocess
    import sys

    count = 4
    go, done = tmp_path / "go", tmp_path / "done"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(tmp_path / "run"), str(go), str(done)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    try:
        assert all(p.stdout.readline().strip() == "ready" for p in processes)
        go.touch()
        paths = sorted(p.stdout.readline().strip() for p in processes)
        done.touch()
        for process in processes:
            process.wait(30)
    finally:
        for process in processes:
            process.kill()
            process.communicate()
    expected = sorted([str(tmp_path / "run")] + [str(tmp_path / f"run-{n}") for n in range(2, count + 1)])
    assert paths == expected, [p.stderr for p in processes]
    print(f"{count} processes claimed {tmp_path / 'run'} at once: {len(set(paths))} folders")


def test_runs_started_at_the_same_instant_each_write_their_own_intact_checkpoint(tmp_path, monkeypatch):
    count = 3
    barrier = threading.Barrier(count)
    real_claim = trainer_module.claim_run_folder

    def claim_together(*args, **kwargs):  # every run claims at the same instant
        barrier.wait(60)
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "claim_run_folder", claim_together)
    ended = {}

    def run(index: int) -> None:
        ended[index] = train(tiny(tmp_path / "run", max_steps=10 + index, seed=index))

    runners = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(120)
    assert sorted(e.status for e in ended.values()) == ["completed"] * count
    folders = {e.checkpoint.rsplit("/", 1)[0] for e in ended.values()}
    assert len(folders) == count
    for index, result in ended.items():  # each checkpoint is its own run's: steps and seed match
        state = load_checkpoint(result.checkpoint)
        assert state["step"] == 10 + index and state["config"]["seed"] == index
        assert state["config"]["out_dir"] == result.checkpoint.rsplit("/", 1)[0]
        assert not is_in_use(result.checkpoint.rsplit("/", 1)[0])  # released at the end


def test_a_live_runs_folder_is_never_shared_and_is_released_at_the_end(tmp_path, recorder):
    held = claim_run_folder(tmp_path / "run")  # a live run that has not written anything yet
    try:
        ended = train(tiny(tmp_path / "run", max_steps=3), sink=recorder)
    finally:
        held.release()
    assert ended.checkpoint == str(tmp_path / "run-2" / "checkpoint.pt")
    assert recorder.of(RunStarted)[0].notes == [
        f"{tmp_path / 'run'} holds an earlier run, which is kept: this run writes to {tmp_path / 'run-2'}"
    ]
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_the_folder_is_locked_while_the_run_runs(tmp_path):
    seen = []

    def sink(event):
        if isinstance(event, RunStarted):
            seen.append(is_in_use(tmp_path / "run"))

    train(tiny(tmp_path / "run", max_steps=2), sink=sink)
    assert seen == [True] and not is_in_use(tmp_path / "run")
    assert (tmp_path / "run" / LOCK_FILE).exists()  # kept: a later reader learns from the lock if a run is live


def test_a_resume_into_a_folder_a_live_run_holds_is_refused(tmp_path):
    first = train(tiny(tmp_path / "run", max_steps=3))
    held = claim_run_folder(tmp_path / "run", resume_from=first.checkpoint)  # e.g. another resume, still running
    try:
        with pytest.raises(ConfigError) as caught:
            Trainer(tiny(tmp_path / "run", max_steps=6), resume_from=first.checkpoint).run()
    finally:
        held.release()
    message = str(caught.value)
    assert caught.value.field == "out_dir" and "\n" not in message
    assert f"{tmp_path / 'run'}: another run is writing to this folder (process " in message
    assert load_checkpoint(first.checkpoint)["step"] == 3  # nothing was touched
    resumed = train(tiny(tmp_path / "run", max_steps=6), resume_from=first.checkpoint)  # once it has ended: fine
    assert resumed.status == "completed" and resumed.checkpoint == first.checkpoint


def test_orphaned_temp_files_of_killed_writes_are_removed_when_the_folder_is_claimed(tmp_path):
    first = train(tiny(tmp_path / "run", max_steps=3))
    folder = tmp_path / "run"
    orphans = [".checkpoint.pt.abc123_x.tmp", ".config.toml.k2j4h5g6.tmp"]
    for name in orphans:
        (folder / name).write_bytes(b"half a file")
    (folder / "notes.tmp").write_text("not ours")  # not an atomic write's temp name: kept
    claimed = claim_run_folder(folder, resume_from=first.checkpoint)
    claimed.release()
    assert claimed.removed == sorted(orphans)
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")) == ["notes.tmp"]


def test_a_folder_that_cannot_be_created_is_a_config_error_naming_the_path(tmp_path):
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(ConfigError) as caught:
        Trainer(tiny(tmp_path / "file" / "run", max_steps=2)).run()
    assert caught.value.field == "out_dir"
    inside = tmp_path / "file" / "run"
    assert str(caught.value) == f"out_dir: could not create {inside}: {tmp_path / 'file'} is a file, not a folder"
    long_name = tmp_path / ("x" * 300)
    with pytest.raises(ConfigError) as caught:
        Trainer(tiny(long_name, max_steps=2)).run()
    assert str(caught.value) == f"out_dir: could not create {long_name}: File name too long (errno 36)"


def test_a_run_that_fails_in_setup_leaves_no_empty_folder(tmp_path):
    with pytest.raises(Exception, match="no such checkpoint"):
        Trainer(tiny(tmp_path / "run", max_steps=2), resume_from=tmp_path / "elsewhere" / "checkpoint.pt").run()
    assert not (tmp_path / "run").exists()
