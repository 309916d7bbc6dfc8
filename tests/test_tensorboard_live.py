"""TensorBoard event files written as the run goes (tensorboard = true): the same scalars `runs tensorboard`
exports from the run's metrics.jsonl, read back with the export test's reader."""

from __future__ import annotations

import sys

import pytest

from core.config import RunConfig
from core.engine.events import StepMetrics
from core.errors import ConfigError

MISSING = "tensorboard: needs the optional tensorboardX package: pip install 'amp-console[tensorboard]'"


def test_without_tensorboardx_the_run_is_refused_before_it_starts(tiny_config, recorder, monkeypatch):
    from core.engine.trainer import train

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` now raises ImportError
    cfg = tiny_config(max_steps=5, tensorboard=True, threads=1)
    assert cfg.errors() == {"tensorboard": MISSING.split(": ", 1)[1]}
    with pytest.raises(ConfigError) as caught:
        train(cfg, sink=recorder)
    assert str(caught.value) == MISSING and caught.value.field == "tensorboard"
    assert recorder.events == []  # refused before RunStarted
    assert not tiny_config(max_steps=5).errors()  # off: tensorboardX is not needed


def test_an_install_that_fails_to_import_is_refused_at_open(tiny_config, recorder, monkeypatch, tmp_path):
    """find_spec says installed, the import fails (a broken install): still the one-line ConfigError."""
    import core.config
    from core.engine.reporting import EventLog

    monkeypatch.setattr(core.config, "tensorboardx_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    log = EventLog(is_main=True)
    with pytest.raises(ConfigError) as caught:
        log.open(tmp_path / "metrics.jsonl", tensorboard=True)
    assert str(caught.value) == MISSING
    assert not (tmp_path / "metrics.jsonl").exists()


def test_the_cli_switch_and_config_values():
    from core.cli.main import build_parser

    parser = build_parser()
    for argv, value in ((["--tensorboard"], True), (["--no-tensorboard"], False), ([], None)):
        args = parser.parse_args(["train", *argv])
        assert args.tensorboard is value
    for text, value in (("true", True), ("false", False), ("True", True)):  # TOML / settings given as text
        assert RunConfig.from_dict({"tensorboard": text}).tensorboard is value
    with pytest.raises(ConfigError, match="tensorboard: expected true or false, got str 'maybe'"):
        RunConfig.from_dict({"tensorboard": "maybe"})
    with pytest.raises(ConfigError, match="expected true or false"):
        RunConfig.from_dict({"tensorboard": 1})
    assert RunConfig().tensorboard is False


@pytest.fixture
def reader():
    pytest.importorskip("tensorboardX")
    from tests import test_tensorboard_export

    return test_tensorboard_export


def points(found: dict) -> dict:
    return {tag: [(step, value) for step, value, _ in values] for tag, values in found.items()}


def test_a_run_writes_the_scalars_the_export_writes(tiny_config, recorder, reader, tmp_path):
    from core.engine.trainer import Trainer
    from core.runs.tensorboard_export import export_run

    cfg = tiny_config(max_steps=20, eval_interval=10, tensorboard=True, threads=1)
    trainer = Trainer(cfg, sink=recorder)
    ended = trainer.run()
    assert ended.status == "completed"
    assert trainer.events.tensorboard is None  # closed with the run
    run = tmp_path / "run"
    live_events = reader.read_events(run / "tensorboard")
    exported = reader.read_events(export_run(run, tmp_path / "tb"))
    live, expected = points(reader.scalars(live_events)), points(reader.scalars(exported))
    assert live == expected
    assert {"train/loss", "train/lr", "train/grad_norm", "val/accuracy", "val/loss"} <= set(live)
    assert [step for step, _ in live["train/loss"]] == [5, 10, 15, 20]
    assert [step for step, _ in live["val/accuracy"]] == [10, 20]
    summary = [e for e in live_events for v in e.summary.value if v.tag == reader.TEXT_TAG]
    assert [e.step for e in summary] == [0]


def test_a_run_resumed_in_place_hides_what_came_after_its_checkpoint(tiny_config, reader, tmp_path):
    from tensorboardX.proto.event_pb2 import SessionLog

    from core.engine.trainer import train
    from core.runs.tensorboard_export import export_run

    cfg = tiny_config(max_steps=10, eval_interval=5, tensorboard=True, threads=1)
    train(cfg)
    run = tmp_path / "run"
    assert train(cfg.replace(max_steps=20), resume_from=run / "checkpoint.pt").status == "completed"
    files = sorted((run / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 2  # one per run segment, as TensorBoard reads a folder
    by_file = []
    for path in files:
        folder = tmp_path / f"one-{len(by_file)}"
        folder.mkdir()
        (folder / path.name).write_bytes(path.read_bytes())
        by_file.append(reader.read_events(folder))
    second = next(events for events in by_file if any(e.step == 20 for e in events))
    purges = [e.step for e in second if e.HasField("session_log") and e.session_log.status == SessionLog.START]
    assert purges == [11]  # TensorBoard drops earlier files' points from step 11 on, as the export does
    merged: dict = {}
    for events in sorted(by_file, key=lambda events: events is second):
        for tag, values in points(reader.scalars(events)).items():
            merged.setdefault(tag, {}).update(dict(values))
    expected = points(reader.scalars(reader.read_events(export_run(run, tmp_path / "tb"))))
    assert {tag: sorted(values.items()) for tag, values in merged.items()} == expected


def test_a_stopped_run_closes_its_files_with_every_point_written(tiny_config, recorder, reader, tmp_path):
    from core.engine.control import RunControl
    from core.engine.trainer import Trainer

    control = RunControl()

    def sink(event):
        recorder(event)
        if isinstance(event, StepMetrics) and event.step == 10:
            control.stop()

    cfg = tiny_config(max_steps=200, tensorboard=True, threads=1)
    trainer = Trainer(cfg, sink=sink, control=control)
    assert trainer.run().status == "stopped"
    assert trainer.events.tensorboard is None
    live = points(reader.scalars(reader.read_events(tmp_path / "run" / "tensorboard")))
    assert [step for step, _ in live["train/loss"]] == [e.step for e in recorder.of(StepMetrics)]


def test_a_failed_run_closes_its_files_with_every_point_written(tiny_config, recorder, reader, tmp_path, monkeypatch):
    import core.engine.evaluation as evaluation
    from core.engine.trainer import Trainer

    def broken(*args, **kwargs):
        raise RuntimeError("evaluation broke")

    monkeypatch.setattr(evaluation, "evaluate_split", broken)
    cfg = tiny_config(max_steps=40, eval_interval=15, keep_best=0, tensorboard=True, threads=1)
    trainer = Trainer(cfg, sink=recorder)
    assert trainer.run().status == "failed"
    assert trainer.events.tensorboard is None
    live = points(reader.scalars(reader.read_events(tmp_path / "run" / "tensorboard")))
    assert [step for step, _ in live["train/loss"]] == [5, 10, 15] == [e.step for e in recorder.of(StepMetrics)]
