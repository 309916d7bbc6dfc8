"""OS errors once a run has started (disk full, the folder removed): the run ends 'failed' with one line naming
the path and the cause, and the previous checkpoint is kept. Before the start they are bad input (exit 2)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest

from core.config import RunConfig
from core.engine import reporting
from core.engine.checkpoints import load_checkpoint
from core.engine.events import CheckpointSaved, RunEnded
from core.engine.trainer import Trainer, train
from core.errors import ConfigError
from core.files import read_jsonl

pytestmark = pytest.mark.reliability

ENOSPC = "No space left on device (errno 28)"


def tiny(out, **overrides) -> RunConfig:
    values = {
        "device": "cpu",
        "precision": "fp32",
        "batch_size": 32,
        "log_interval": 5,
        "threads": 1,
        "checkpoint_interval": 5,
        "out_dir": str(out),
    }
    return RunConfig.for_task("tiny", **{**values, **overrides})


def disk_fills_at_step(monkeypatch, trainer: Trainer, step: int) -> None:
    """fsync (the last part of every atomic write) fails with ENOSPC once the run reaches `step`."""
    import core.files

    real = os.fsync

    def fsync(fd):
        if trainer.state.step >= step:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(core.files.os, "fsync", fsync)


def test_a_full_disk_while_writing_a_checkpoint_fails_the_run_in_one_line_and_keeps_the_previous(
    tmp_path, recorder, monkeypatch
):
    trainer = Trainer(tiny(tmp_path / "run", max_steps=30), sink=recorder)
    disk_fills_at_step(monkeypatch, trainer, 10)
    ended = trainer.run()
    path = tmp_path / "run" / "checkpoint.pt"
    assert ended.status == "failed"
    assert ended.message == f"could not write {path}: {ENOSPC}; the previous checkpoint (step 5) is kept"
    assert ended.details == ""  # no chained OSError traceback
    assert load_checkpoint(path)["step"] == 5
    assert [p.name for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")] == []
    assert [e["status"] for e in read_jsonl(tmp_path / "run" / "metrics.jsonl") if e["event"] == "RunEnded"] == [
        "failed"
    ]


def test_a_full_disk_with_no_checkpoint_yet_says_so(tmp_path, monkeypatch):
    trainer = Trainer(
        tiny(tmp_path / "run", max_steps=30, checkpoint_interval=0, keep_best=0)
    )  # only checkpoint.pt is written
    disk_fills_at_step(monkeypatch, trainer, 1)
    ended = trainer.run()
    assert ended.message == (
        f"could not write {tmp_path / 'run' / 'checkpoint.pt'}: {ENOSPC}; no checkpoint of this run had been saved yet"
    )


class FillingFile:
    """A metrics.jsonl whose writes fail with ENOSPC after `lines` lines (half of the next line lands)."""

    def __init__(self, real, lines: int):
        self.real, self.left = real, lines

    def write(self, text: str) -> int:
        if self.left == 0:
            self.real.write(text[: len(text) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.left -= 1
        return self.real.write(text)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_full_disk_while_appending_metrics_fails_the_run_in_one_line(tmp_path, recorder, monkeypatch):
    real_open = open

    def filling_open(path, mode="r", *args, **kwargs):  # metrics.jsonl opened to append fills the disk
        file = real_open(path, mode, *args, **kwargs)
        return FillingFile(file, lines=4) if mode == "a" else file

    monkeypatch.setattr(reporting, "open", filling_open, raising=False)
    ended = train(tiny(tmp_path / "run", max_steps=100), sink=recorder)
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert ended.status == "failed"
    # Lines: RunStarted, StepMetrics 5, CheckpointSaved 5, StepMetrics 10; the 5th (CheckpointSaved 10) fails.
    assert ended.message == f"could not write {metrics}: {ENOSPC}; the previous checkpoint (step 10) is kept"
    assert recorder.of(RunEnded) == [ended]  # the listener still hears the end
    assert len(read_jsonl(metrics)) == 4  # the torn fifth line is skipped by readers
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 10


def test_a_run_folder_removed_mid_run_fails_the_run_instead_of_writing_nowhere(tmp_path, recorder):
    def sink(event):
        recorder(event)
        if isinstance(event, CheckpointSaved) and event.step == 5:
            shutil.rmtree(tmp_path / "run")

    ended = train(tiny(tmp_path / "run", max_steps=30), sink=sink)
    assert ended.status == "failed"
    assert ended.message == (
        f"could not write {tmp_path / 'run' / 'checkpoint.pt'}: the run folder "
        f"{tmp_path / 'run'} was removed while the run was writing to it; no checkpoint of "
        f"this run had been saved yet"
    )


def test_a_full_disk_before_the_start_is_bad_input_naming_the_file(tmp_path, monkeypatch):
    trainer = Trainer(tiny(tmp_path / "run", max_steps=5))
    disk_fills_at_step(monkeypatch, trainer, 0)
    with pytest.raises(ConfigError) as caught:
        trainer.run()
    assert str(caught.value) == f"out_dir: could not write {tmp_path / 'run' / 'config.toml'}: {ENOSPC}"


@pytest.mark.slow
def test_the_cli_exits_1_with_one_line_when_the_disk_fills_mid_run(tmp_path):
    """The whole path through the CLI: a summary line naming the file, no traceback."""
    script = (
        "import errno, os, sys\n"
        "import core.files\n"
        "real, calls = os.fsync, [0]\n"
        "def fsync(fd):\n"
        "    calls[0] += '.checkpoint.pt.' in os.readlink(f'/proc/self/fd/{fd}')\n"
        "    if calls[0] >= 2:  # the first checkpoint goes through, the second does not\n"
        "        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
        "    return real(fd)\n"
        "core.files.os.fsync = fsync\n"
        "from core.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "train",
            "--task",
            "tiny",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--max-steps",
            "30",
            "--checkpoint-interval",
            "5",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["status"] == "failed"
    assert summary["message"] == (
        f"could not write {out / 'checkpoint.pt'}: {ENOSPC}; the previous checkpoint (step 5) is kept"
    )
    assert "Traceback" not in result.stderr
