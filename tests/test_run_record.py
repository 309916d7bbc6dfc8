"""run.json: written at RunStarted, kept up to date through the run, the same id across a resume, never the
cause of a failed run; read back with a dead 'running' run reported as 'interrupted'."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from core.engine.control import RunControl
from core.engine.events import CheckpointSaved, EvalMetrics, RunEnded, RunStarted, StepMetrics
from core.engine.reporting import RunRecord
from core.engine.run_folder import claim_run_folder
from core.engine.run_record import read_run
from core.engine.trainer import train
from core.errors import ConfigError


def record(folder) -> dict:
    return json.loads((folder / "run.json").read_text())


def test_run_json_from_start_to_completion(tiny_config, tmp_path):
    seen = []

    def sink(event):  # the record is written before listeners hear the event
        if isinstance(event, RunStarted):
            seen.append(record(tmp_path / "run"))

    ended = train(tiny_config(max_steps=20, checkpoint_interval=10, threads=1), sink=sink)
    assert ended.status == "completed"
    assert seen[0]["status"] == "running" and seen[0]["end_time"] is None
    data = record(tmp_path / "run")
    assert re.fullmatch(r"[0-9a-f]{8,}", data["id"]) and data["id"] == seen[0]["id"]
    assert data["name"] == "run" and data["task"] == "tiny" and data["status"] == "completed"
    assert data["device"] == "cpu" and data["precision"] == "fp32" and data["autocast_dtype"] == "float32"
    assert data["versions"]["torch"] and data["versions"]["python"]
    assert data["steps"] == data["total_steps"] == 20
    assert data["start_time"].endswith("+00:00") and data["end_time"] >= data["start_time"]
    assert data["wall_seconds"] > 0 and data["samples_per_second"] > 0
    assert data["final_loss"] == ended.final_loss and data["metrics"] == ended.metrics
    assert data["best"]["name"] == "accuracy" and data["best"]["step"] in (10, 20)
    assert data["best"]["value"] >= ended.metrics["accuracy"] - 1e-12
    assert data["checkpoints"]["last"]["path"] == ended.checkpoint
    assert data["config"]["max_steps"] == 20 and data["message"] == ended.message


def test_a_stopped_run_says_stopped_and_a_resume_keeps_the_id(tiny_config, tmp_path):
    control = RunControl()

    def sink(event):
        if isinstance(event, StepMetrics) and event.step == 10:
            control.stop()

    first = train(tiny_config(max_steps=1000, threads=1), sink=sink, control=control)
    data = record(tmp_path / "run")
    assert first.status == "stopped" and data["status"] == "stopped" and data["steps"] == 10
    resumed = train(tiny_config(max_steps=20, threads=1), resume_from=first.checkpoint)
    again = record(tmp_path / "run")
    assert resumed.status == "completed" and again["status"] == "completed"
    assert again["id"] == data["id"] and again["start_time"] == data["start_time"] and len(again["resumed_at"]) == 1
    assert again["steps"] == 20 and again["wall_seconds"] > data["wall_seconds"]


def test_a_run_that_fails_after_starting_is_recorded_failed(tiny_config, tmp_path, monkeypatch):
    from core.tasks.tiny.task import TinyClassifierTask

    original = TinyClassifierTask.loss
    monkeypatch.setattr(
        TinyClassifierTask, "loss", lambda self, model, batch: original(self, model, batch) * float("inf")
    )
    ended = train(tiny_config(max_steps=20, threads=1))
    data = record(tmp_path / "run")
    assert ended.status == "failed" and data["status"] == "failed" and data["message"] == ended.message


def test_setup_that_fails_before_the_start_leaves_no_record(tiny_config, tmp_path):
    with pytest.raises(ConfigError):
        train(tiny_config(max_steps=5, threads=1, task_options={"no_such_option": 1}))
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_run_json_that_cannot_be_written_does_not_end_the_run(tiny_config, tmp_path, monkeypatch, capsys):
    def refuse(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunRecord, "write", refuse)
    ended = train(tiny_config(max_steps=10, threads=1))
    assert ended.status == "completed"
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("run.json") == 1 and "No space left on device" in err


def test_a_running_record_with_no_live_run_reads_as_interrupted(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"id": "abcdef0123", "status": "running", "task": "tiny"}))
    assert read_run(folder)["status"] == "interrupted"
    with claim_run_folder(folder, resume_from=folder / "checkpoint.pt"):  # a live run holds it
        assert read_run(folder)["status"] == "running"
    assert read_run(folder)["status"] == "interrupted"


def test_an_older_folder_is_summarised_from_its_first_and_last_lines(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    lines = [
        {
            "event": "RunStarted",
            "task": "tiny",
            "device": "cpu",
            "precision": "bf16",
            "total_steps": 50,
            "config": {"lr": 0.1},
        },
        {"event": "StepMetrics", "step": 5, "loss": 0.9},
        {
            "event": "RunEnded",
            "status": "completed",
            "step": 50,
            "final_loss": 0.3,
            "metrics": {"accuracy": 0.8},
            "elapsed_seconds": 3.0,
            "samples_per_second": 100.0,
            "message": "completed 50 steps",
        },
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines) + '{"event": "StepMet'  # torn last line
    (folder / "metrics.jsonl").write_text(text)
    run = read_run(folder)
    assert run["status"] == "completed" and run["steps"] == 50 and run["precision"] == "bf16"
    assert run["metrics"] == {"accuracy": 0.8} and run["id"] == read_run(folder)["id"]
    assert not (folder / "run.json").exists()
    assert read_run(tmp_path) is None  # no run here


@dataclass(frozen=True)
class BestSaved(CheckpointSaved):  # CheckpointSaved with kind "best" (the field the best-checkpoint change adds)
    kind: str = "best"
    rank: int | None = 1


def started(**config) -> RunStarted:
    return RunStarted(
        task="tiny",
        device="cpu",
        device_name="cpu",
        precision="bf16",
        autocast_dtype="bfloat16",
        param_dtype="float32",
        scaler=False,
        param_count=10,
        total_steps=30,
        steps_per_epoch=10,
        start_step=0,
        config={"task": "tiny", **config},
    )


def test_best_follows_the_monitored_metric_and_names_the_best_checkpoint(tmp_path):
    rec = RunRecord(tmp_path)
    rec.update(started(monitor="loss", monitor_mode="auto"))
    for step, loss in ((10, 0.5), (20, 0.3), (30, 0.4)):
        rec.update(EvalMetrics(step=step, epoch=1, split="val", metrics={"loss": loss, "accuracy": 1 - loss}))
    rec.update(BestSaved(step=20, path=str(tmp_path / "best.pt")))
    rec.update(BestSaved(step=30, path=str(tmp_path / "best-2.pt"), rank=2))  # 2nd best: not named
    rec.update(CheckpointSaved(step=30, path=str(tmp_path / "checkpoint.pt")))
    rec.update(EvalMetrics(step=30, epoch=1, split="test", metrics={"loss": 0.1}))  # test split: not val
    rec.update(
        RunEnded(
            status="completed",
            message="done",
            step=30,
            epoch=3,
            final_loss=0.35,
            metrics={},
            checkpoint=str(tmp_path / "checkpoint.pt"),
            samples_per_second=5.0,
            elapsed_seconds=2.0,
            test_metrics={"loss": 0.1},
        )
    )
    data = record(tmp_path)
    assert data["best"] == {"name": "loss", "value": 0.3, "step": 20}
    assert data["checkpoints"]["best"] == {"path": str(tmp_path / "best.pt"), "step": 20}
    assert data["checkpoints"]["last"]["step"] == 30 and data["metrics"] == {"loss": 0.4, "accuracy": 0.6}
    assert data["test_metrics"] == {"loss": 0.1} and data["status"] == "completed" and data["precision"] == "bf16"
    rec = RunRecord(tmp_path)
    rec.update(started(monitor_mode="min"))  # primary metric (accuracy), lower better as configured
    for step, accuracy in ((10, 0.7), (20, 0.6)):
        rec.update(EvalMetrics(step=step, epoch=1, split="val", metrics={"accuracy": accuracy}))
    rec.write()
    assert record(tmp_path)["best"] == {"name": "accuracy", "value": 0.6, "step": 20}


def test_evaluations_reach_run_json_at_most_every_write_seconds_and_urgent_events_at_once(tmp_path, monkeypatch):
    from core.engine import reporting

    clock = [1000.0]
    monkeypatch.setattr(reporting.time, "monotonic", lambda: clock[0])
    writes = []
    real_write = reporting.atomic_write_bytes
    monkeypatch.setattr(
        reporting,
        "atomic_write_bytes",
        lambda path, payload: (writes.append(json.loads(payload)), real_write(path, payload)),
    )
    rec = RunRecord(tmp_path)
    rec.update(started(monitor="loss"))
    assert len(writes) == 1  # the start: at once
    for step in range(1, 30):  # an evaluation (and a best checkpoint) every step, 10 ms apart
        clock[0] += 0.01
        rec.update(EvalMetrics(step=step, epoch=1, split="val", metrics={"loss": 1.0 / step}))
        rec.update(BestSaved(step=step, path=str(tmp_path / "best.pt")))
    assert len(writes) == 1 and record(tmp_path)["best"]["value"] is None  # pending, not written
    clock[0] += reporting.WRITE_SECONDS
    rec.update(StepMetrics(30, 1, 0.5, 0.1, 1.0, None, None, 0, None, 3.0))
    assert len(writes) == 2 and record(tmp_path)["best"] == {"name": "loss", "value": 1.0 / 29, "step": 29}
    rec.update(StepMetrics(31, 1, 0.5, 0.1, 1.0, None, None, 0, None, 3.1))
    assert len(writes) == 2  # nothing pending: a logged step alone never writes
    clock[0] += 0.01
    rec.update(EvalMetrics(step=32, epoch=1, split="val", metrics={"loss": 0.01}))
    assert len(writes) == 2
    rec.update(CheckpointSaved(step=32, path=str(tmp_path / "checkpoint.pt")))  # a last checkpoint: at once
    assert len(writes) == 3 and record(tmp_path)["best"]["value"] == 0.01
    assert record(tmp_path)["checkpoints"]["last"]["step"] == 32
