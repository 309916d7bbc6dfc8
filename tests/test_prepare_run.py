"""core.engine.prepare.prepare_run: one run's settings resolved once, and every way a run starts goes through it."""

import time
from pathlib import Path

import pytest

import core.engine.prepare as prepare
from core.cli.main import build_parser
from core.cli.train import prepared_run
from core.config import RunConfig
from core.devices import cpu_info
from core.engine import checkpoints
from core.engine.prepare import prepare_run
from core.engine.run_record import read_run
from core.engine.trainer import train
from core.errors import ConfigError

SETTINGS = {"task": "tiny", "device": "cpu", "precision": "auto", "max_steps": 2, "log_interval": 1}


def test_layers_merge_in_order_and_columns_and_options_add_up(tmp_path):
    file = {"task": "ranking", "lr": 0.01, "columns": {"query_id": "qid"}, "task_options": {"hidden": 32}}
    flags = {"lr": 0.02, "columns": {"doc_id": "doc"}, "task_options": {"layers": 3}, "out_dir": str(tmp_path)}
    run = prepare_run(file, flags)
    assert run.config.lr == 0.02 and run.config.out_dir == str(tmp_path)
    assert run.config.columns == {"query_id": "qid", "doc_id": "doc"}
    assert run.config.task_options["hidden"] == 32 and run.config.task_options["layers"] == 3
    assert run.resume is None and run.state is None and run.notes == []


def test_a_new_run_is_named_by_the_precision_that_runs(tmp_path):
    run = prepare_run(SETTINGS, runs_dir=str(tmp_path), device=cpu_info())
    assert run.mode == "fp32" and run.config.precision == "auto"  # the setting itself is kept
    assert Path(run.config.out_dir).parent == tmp_path and run.config.out_dir.endswith("-tiny-fp32")


def test_a_resume_reads_its_checkpoint_once_keeps_its_task_and_writes_beside_it(tmp_path, monkeypatch):
    ended = train(RunConfig.from_dict({**SETTINGS, "out_dir": str(tmp_path / "run")}))
    checkpoint = ended.checkpoint
    with pytest.raises(ConfigError, match="keeps its task"):
        prepare_run({"task": "ranking"}, resume=checkpoint)
    with pytest.raises(ConfigError, match="already reached"):
        prepare_run({}, resume=checkpoint)
    reads = []
    load = checkpoints.load_checkpoint
    monkeypatch.setattr(checkpoints, "load_checkpoint", lambda path: reads.append(path) or load(path))
    run = prepare_run({"max_steps": 4, "lr": 0.5}, resume=checkpoint)
    assert run.config.out_dir == str(Path(checkpoint).parent) and run.config.task == "tiny"
    assert run.notes and "lr" in run.notes[0] and run.state is not None
    ended = train(RunConfig.from_dict(dict(run.config.to_dict(), lr=0.001)), resume_from=checkpoint)
    assert ended.status == "completed" and ended.step == 4
    assert len(reads) == 2  # one for prepare_run above, one for train(): never twice for one run


@pytest.mark.slow
def test_the_cli_the_remote_agent_and_the_sweep_prepare_a_run_alike(tmp_path, monkeypatch):
    """Same settings, same prepared run: the CLI's, a remote host's start (it named its folder `-auto`) and a
    sweep's trial all go through prepare_run; the window's start is tests/gui/test_runs_root_gui.py's."""
    from core.lab.sweep import create_sweep, grid_axis, plan_trials, run_sweep
    from core.remote import agent

    seen = []
    real = prepare.prepare_run
    monkeypatch.setattr(prepare, "prepare_run", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    monkeypatch.setattr("core.engine.trainer.prepare_run", prepare.prepare_run)
    args = build_parser().parse_args(
        ["train", "--task", "tiny", "--device", "cpu", "--precision", "auto", "--max-steps", "2", "--log-interval",
         "1", "--runs-dir", str(tmp_path / "cli")]
    )  # fmt: skip
    cli = prepared_run(args)
    started = agent.start({"config": SETTINGS, "runs_dir": str(tmp_path / "host")})
    folder = Path(started["folder"])
    deadline = time.monotonic() + 300
    while (read_run(folder) or {}).get("status") not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.2)
    base, axes = RunConfig.from_dict(SETTINGS), [grid_axis(f"lr={RunConfig.for_task('tiny').lr}", "tiny")]
    sweep = create_sweep(base, plan_trials(base, axes), axes, root=tmp_path)
    assert run_sweep(sweep).status == "completed"
    assert cli.config.out_dir.endswith("-tiny-fp32") and folder.name.endswith("-tiny-fp32")
    assert read_run(folder)["status"] == "completed" and read_run(folder)["precision"] == "fp32"
    trial = seen[-1]  # its folder is the sweep's: the precision resolves on its device as it starts
    assert cli.mode == "fp32" and Path(trial.config.out_dir).parent == sweep
    same = {k: v for k, v in cli.config.to_dict().items() if k != "out_dir"}
    assert {k: v for k, v in trial.config.to_dict().items() if k != "out_dir"} == same
