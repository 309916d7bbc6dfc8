"""A run's note: its own note.txt beside run.json (never inside it, so the running engine's rewrites of run.json
cannot lose it), read back by read_run as "note", cleared by an empty text; run.json keeps the peak memory the
logged steps reported; `compare_rows` is the one definition of what a comparison shows."""

from __future__ import annotations

import json

import pytest

from core.engine.events import CheckpointSaved, RunEnded, RunStarted, StepMetrics
from core.engine.reporting import RunRecord
from core.engine.run_record import NOTE_FILE, read_note, read_run, write_note
from core.runs.compare import compare_rows


def started(precision="fp32", **config) -> RunStarted:
    return RunStarted(
        task="tiny",
        device="cpu",
        device_name="cpu",
        precision=precision,
        autocast_dtype="bfloat16" if precision == "bf16" else "float32",
        param_dtype="float32",
        scaler=False,
        param_count=10,
        total_steps=30,
        steps_per_epoch=10,
        start_step=0,
        config={"task": "tiny", "precision": precision, **config},
    )


def step(n: int, memory: int | None) -> StepMetrics:
    return StepMetrics(
        step=n,
        epoch=0,
        loss=0.5,
        lr=0.01,
        samples_per_second=100.0,
        grad_scale=None,
        grad_norm=None,
        skipped_steps=0,
        memory_bytes=memory,
        elapsed_seconds=float(n),
    )


def test_a_note_is_its_own_file_and_survives_run_json_rewrites(tmp_path):
    record = RunRecord(tmp_path)
    record.update(started())
    assert read_run(tmp_path)["note"] == ""
    assert write_note(tmp_path, "  first try: lr too high \n") == "first try: lr too high"
    assert (tmp_path / NOTE_FILE).read_text() == "first try: lr too high\n"
    assert "note" not in json.loads((tmp_path / "run.json").read_text())
    record.update(step(5, 1000))  # the engine goes on rewriting run.json
    record.update(CheckpointSaved(step=5, path=str(tmp_path / "checkpoint.pt")))
    record.update(
        RunEnded(
            status="completed",
            message="",
            step=10,
            epoch=1,
            final_loss=0.4,
            metrics={},
            checkpoint=str(tmp_path / "checkpoint.pt"),
            samples_per_second=5.0,
            elapsed_seconds=2.0,
            test_metrics={},
        )
    )
    assert read_run(tmp_path)["note"] == "first try: lr too high"
    assert read_note(tmp_path)[0] == "first try: lr too high"
    assert write_note(tmp_path, "") == "" and not (tmp_path / NOTE_FILE).exists()
    assert read_run(tmp_path)["note"] == ""
    write_note(tmp_path, "")  # clearing twice is fine


def test_a_multi_line_or_unreadable_note_reads_and_a_missing_folder_raises(tmp_path):
    write_note(tmp_path, "line one\nline two")
    assert read_note(tmp_path)[0] == "line one\nline two"
    (tmp_path / NOTE_FILE).write_bytes(b"caf\xe9")  # not UTF-8: read with a replacement character
    assert read_note(tmp_path)[0] == "caf\ufffd"
    with pytest.raises(OSError):
        write_note(tmp_path / "gone", "text")


def test_run_json_keeps_the_peak_memory_across_a_resume(tmp_path):
    record = RunRecord(tmp_path)
    record.update(started())
    for n, memory in ((1, 300), (2, 900), (3, None), (4, 500)):
        record.update(step(n, memory))
    record.update(CheckpointSaved(step=4, path=str(tmp_path / "checkpoint.pt")))
    assert read_run(tmp_path)["peak_memory_bytes"] == 900
    resumed = RunRecord(tmp_path)
    resumed.update(started())
    resumed.update(step(5, 700))
    resumed.update(CheckpointSaved(step=5, path=str(tmp_path / "checkpoint.pt")))
    assert read_run(tmp_path)["peak_memory_bytes"] == 900


def run(name: str, precision: str, lr: float, note: str = "") -> dict:
    return {
        "id": name * 3,
        "name": name,
        "task": "tiny",
        "status": "completed",
        "device": "cpu",
        "precision": precision,
        "autocast_dtype": "bfloat16" if precision == "bf16" else "float32",
        "samples_per_second": 1000.0,
        "peak_memory_bytes": 3 * 2**20,
        "best": {"name": "accuracy", "value": 0.9, "step": 20},
        "final_loss": 0.25,
        "metrics": {"accuracy": 0.8},
        "test_metrics": {},
        "wall_seconds": 75.0,
        "steps": 20,
        "total_steps": 20,
        "note": note,
        "config": {"task": "tiny", "lr": lr, "precision": precision, "batch_size": 32, "out_dir": name},
    }


def test_compare_rows_mark_what_differs_and_list_only_differing_config():
    rows = compare_rows([run("a", "fp32", 0.01, note="baseline"), run("b", "bf16", 0.01)])
    by_label = {row.label: row for row in rows}
    labels = [row.label for row in rows]
    assert labels[:7] == ["task", "precision", "device", "samples/s", "peak memory", "best", "final loss"]
    assert labels.index("val accuracy") < labels.index("wall time") < labels.index("note")
    assert by_label["precision"].values == ("fp32 (autocast float32)", "bf16 (autocast bfloat16)")
    assert by_label["precision"].differs and by_label["note"].differs
    assert by_label["note"].values == ("baseline", "-")
    assert by_label["best"].values == ("accuracy 0.9 at step 20",) * 2
    assert by_label["peak memory"].values == ("3 MiB",) * 2
    for same in ("task", "device", "samples/s", "best", "wall time", "steps", "status"):
        assert not by_label[same].differs, same
    assert not [row for row in rows if row.config]  # precision, the one setting apart, is the precision row's
    assert labels[-1] == "note"
    rows = compare_rows([run("a", "fp32", 0.01), run("b", "fp32", 0.02)])
    assert [(row.label, row.values) for row in rows if row.config] == [("config lr", ("0.01", "0.02"))]
