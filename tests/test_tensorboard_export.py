"""TensorBoard export: a run's metrics.jsonl as event files, read back here and compared value by value.

tensorboardX writes but cannot read, so the TFRecord framing (uint64 length, masked CRC, data, masked CRC) is
parsed here and each record decoded with tensorboardX's Event proto.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorboardX")

from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

from core.config import RunConfig
from core.engine.events import EvalMetrics, RunStarted, StepMetrics, event_to_dict
from core.engine.trainer import train
from core.errors import AmpConsoleError, DataError
from core.files import read_jsonl
from core.runs.tensorboard_export import MISSING_MESSAGE, export_run

TEXT_TAG = "run/summary/text_summary"  # tensorboardX appends /text_summary to add_text's tag


def read_events(folder: Path) -> list[Event]:
    files = sorted(folder.glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    data = files[0].read_bytes()
    events, at = [], 0
    while at < len(data):
        header = data[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[at + 8 : at + 12])
        assert header_crc == masked_crc32c(header)
        body = data[at + 12 : at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length : at + 16 + length])
        assert body_crc == masked_crc32c(body)
        event = Event()
        event.ParseFromString(body)
        events.append(event)
        at += 16 + length
    return events


def scalars(events: list[Event]) -> dict[str, list[tuple[int, float, float]]]:
    """tag -> [(step, value, wall_time)] in file order."""
    found: dict[str, list] = {}
    for event in events:
        for value in event.summary.value:
            if value.HasField("simple_value"):
                found.setdefault(value.tag, []).append((event.step, value.simple_value, event.wall_time))
    return found


def tags(events: list[Event]) -> set[str]:
    return {value.tag for event in events for value in event.summary.value}


def close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-6, abs=1e-30)  # written as float32


def test_a_real_run_reads_back_value_for_value(tmp_path):
    run = tmp_path / "run"
    config = RunConfig.for_task(
        "tiny",
        device="cpu",
        precision="fp32",
        max_steps=20,
        log_interval=5,
        eval_interval=10,
        threads=1,
        out_dir=str(run),
    )
    train(config)
    records = read_jsonl(run / "metrics.jsonl")
    folder = export_run(run, tmp_path / "tb")
    assert folder == tmp_path / "tb"
    events = read_events(folder)
    found = scalars(events)

    steps = [r for r in records if r["event"] == "StepMetrics"]
    assert [r["step"] for r in steps] == [5, 10, 15, 20]
    fields = {
        "train/loss": "loss",
        "train/lr": "lr",
        "train/samples_per_second": "samples_per_second",
        "train/grad_norm": "grad_norm",
    }
    assert steps[0]["grad_norm"] is not None and steps[-1]["grad_norm"] is not None
    for tag, key in fields.items():
        logged = [r for r in steps if r[key] is not None]  # a fast step's norm is measured 10 times a second
        assert [s for s, _, _ in found[tag]] == [r["step"] for r in logged], tag
        assert all(close(v, r[key]) for (_, v, _), r in zip(found[tag], logged)), tag
    if steps[0]["memory_bytes"] is not None:
        assert all(close(v, r["memory_bytes"] / 2**20) for (_, v, _), r in zip(found["train/memory_mib"], steps))
    assert "train/grad_scale" not in found  # fp32: no GradScaler

    evals = [r for r in records if r["event"] == "EvalMetrics"]
    assert {r["split"] for r in evals} >= {"val"}
    for split in {r["split"] for r in evals}:
        for name in evals[0]["metrics"]:
            expected = [(r["step"], r["metrics"][name]) for r in evals if r["split"] == split]
            got = [(s, v) for s, v, _ in found[f"{split}/{name}"]]
            assert [s for s, _ in got] == [s for s, _ in expected]
            assert all(close(v, e) for (_, v), (_, e) in zip(got, expected))

    assert TEXT_TAG in tags(events)
    summary = next(v for e in events for v in e.summary.value if v.tag == TEXT_TAG)
    text = summary.tensor.string_val[0].decode()
    assert "tiny" in text and "fp32" in text and "max_steps" in text
    assert any(tag.startswith("_hparams_/") for tag in tags(events))

    export_run(run, folder)  # a second export replaces the first: still one event file
    assert len(scalars(read_events(folder))["train/loss"]) == 4


def started(start_step: int, **extra) -> dict:
    return {
        **event_to_dict(
            RunStarted(
                task="tiny",
                device="cpu",
                device_name="CPU",
                precision="fp16",
                autocast_dtype="float16",
                param_dtype="float32",
                scaler=True,
                param_count=100,
                total_steps=20,
                steps_per_epoch=10,
                start_step=start_step,
                config={"task": "tiny", "lr": 0.01, "task_options": {"hidden": 8}, "seed": None},
            )
        ),
        **extra,
    }


def step(n: int, loss: float, **extra) -> dict:
    return {
        **event_to_dict(
            StepMetrics(
                step=n,
                epoch=1,
                loss=loss,
                lr=0.01,
                samples_per_second=100.0,
                grad_scale=65536.0,
                grad_norm=1.5,
                skipped_steps=0,
                memory_bytes=3 * 2**20,
                elapsed_seconds=1.0,
            )
        ),
        **extra,
    }


def evaluated(n: int, accuracy: float, split: str = "val") -> dict:
    return event_to_dict(EvalMetrics(step=n, epoch=1, split=split, metrics={"accuracy": accuracy}))


def write_run(folder: Path, records: list[dict], tail: str = "") -> Path:
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return folder


def test_a_run_resumed_in_place_has_no_zigzags(tmp_path):
    # killed after step 15 with its last checkpoint at step 10, then resumed in place from step 10
    run = write_run(
        tmp_path / "run",
        [
            started(0),
            step(5, 1.0),
            step(10, 0.9),
            evaluated(10, 0.5),
            step(15, 0.8),
            started(10),
            step(15, 0.7),
            step(20, 0.6),
            evaluated(20, 0.75),
            evaluated(20, 0.7, "test"),
        ],
    )
    events = read_events(export_run(run, tmp_path / "tb"))
    found = scalars(events)
    assert [(s, v) for s, v, _ in found["train/loss"]] == [
        (5, 1.0),
        (10, pytest.approx(0.9)),
        (15, pytest.approx(0.7)),
        (20, pytest.approx(0.6)),
    ]
    assert [(s, v) for s, v, _ in found["val/accuracy"]] == [(10, 0.5), (20, 0.75)]
    assert [(s, v) for s, v, _ in found["test/accuracy"]] == [(20, pytest.approx(0.7))]
    assert [s for s, _, _ in found["train/grad_scale"]] == [5, 10, 15, 20]
    assert [v for _, v, _ in found["train/memory_mib"]] == [3.0] * 4
    summaries = [e.step for e in events for v in e.summary.value if v.tag == TEXT_TAG]
    assert summaries == [0, 10]  # one text per segment, at its start


def test_a_torn_last_line_is_skipped_and_wall_times_are_kept(tmp_path):
    run = write_run(
        tmp_path / "run",
        [started(0, time=1_700_000_000.0), step(5, 1.0, time=1_700_000_005.5), step(10, 0.5, time=1_700_000_011.0)],
        tail='{"event": "StepMetrics", "step": 15, "lo',
    )
    found = scalars(read_events(export_run(run, tmp_path / "tb")))
    assert [(s, v, t) for s, v, t in found["train/loss"]] == [(5, 1.0, 1_700_000_005.5), (10, 0.5, 1_700_000_011.0)]


def test_missing_or_empty_metrics_is_one_line_naming_the_folder(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="empty: no metrics.jsonl") as missing:
        export_run(empty, tmp_path / "tb")
    (empty / "metrics.jsonl").write_text('{"event": "RunSt')  # only a torn line
    with pytest.raises(DataError, match="metrics.jsonl is empty") as torn:
        export_run(empty, tmp_path / "tb")
    for error in (missing, torn):
        assert str(empty) in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "tb").exists()


def test_without_tensorboardx_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run", [started(0), step(5, 1.0)])
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` now raises ImportError
    with pytest.raises(AmpConsoleError) as error:
        export_run(run, tmp_path / "tb")
    assert str(error.value) == MISSING_MESSAGE
    assert str(error.value) == "TensorBoard export needs tensorboardX: pip install 'amp-console[tensorboard]'"
