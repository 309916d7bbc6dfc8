"""`amp-console evaluate`: any checkpoint's metrics on its run's split, exactly what the run measured; a stopped
run (which has no test metrics) evaluated by its id; --best; another data file; one-line errors."""

from __future__ import annotations

import json
import random

import pytest
from cli_in_process import cli

from core.config import RunConfig
from core.engine.control import RunControl
from core.engine.events import StepMetrics
from core.engine.trainer import train


def test_val_metrics_of_a_checkpoint_are_the_runs_own(capsys, tiny_run, monkeypatch):
    from core.engine import checkpoints

    reads, load = [], checkpoints.load_checkpoint
    monkeypatch.setattr(checkpoints, "load_checkpoint", lambda path, *a, **k: reads.append(path) or load(path, *a, **k))
    code, out, _ = cli(capsys, "evaluate", tiny_run.checkpoint, "--split", "val", "--json")
    assert code == 0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["metrics"] == pytest.approx(tiny_run.metrics, abs=1e-9)
    assert result["step"] == tiny_run.step and result["split"] == "val" and result["precision"] == "fp32"
    assert len(reads) == 1  # the checkpoint is read once
    code, out, _ = cli(capsys, "evaluate", str(tiny_run.checkpoint).rsplit("/", 1)[0], "--split", "val")
    assert code == 0 and f"tiny checkpoint at step {tiny_run.step}" in out and "val  accuracy" in out
    assert "(baseline" in out  # the val rows carry the task's references


def test_a_stopped_run_gets_test_metrics_by_its_id_and_best(capsys, tmp_path, runs_root_in_tmp):
    control = RunControl()

    def stop_at(event):
        if isinstance(event, StepMetrics) and event.step >= 20:
            control.stop()

    ended = train(
        RunConfig.for_task("sentiment", device="cpu", max_steps=200, eval_interval=10, log_interval=5, threads=1),
        sink=stop_at,
        control=control,
    )
    assert ended.status == "stopped" and not ended.test_metrics
    run_id = json.loads((runs_root_in_tmp.glob("*/run.json").__next__()).read_text())["id"]
    code, out, _ = cli(capsys, "evaluate", run_id[:6], "--last", "--json")
    assert code == 0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["split"] == "test" and set(result["metrics"]) >= {"accuracy", "loss"}
    assert result["step"] == ended.step
    code, out, _ = cli(capsys, "evaluate", run_id, "--best", "--json")
    best = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and best["checkpoint"].endswith("best.pt") and best["step"] <= ended.step


def test_another_data_file(capsys, tmp_path):
    ended = train(RunConfig.for_task("sentiment", device="cpu", max_steps=20, threads=1, out_dir=str(tmp_path / "s")))
    rng = random.Random(0)
    rows = [("great lesson, loved it", 1), ("boring and confusing", 0), ("clear and useful", 1), ("waste of time", 0)]
    lines = ["text,label"] + [f'"{t}",{y}' for t, y in (rng.choice(rows) for _ in range(400))]
    data = tmp_path / "reviews.csv"
    data.write_text("\n".join(lines) + "\n")
    code, out, err = cli(capsys, "evaluate", ended.checkpoint, "--data", str(data), "--json")
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["data"] == str(data) and 0.0 <= result["metrics"]["accuracy"] <= 1.0


def test_a_run_is_measured_at_its_best_checkpoint_and_the_split_named_is_the_one_measured(capsys, trained_runs):
    """As predict, export and the preview choose: the best checkpoint unless --last asks; tiny's data has no
    test split, so the line on stderr names val, as the result does."""
    from core.cli.evaluate import find_checkpoint

    tiny = trained_runs["tiny"]
    folder = str(tiny.folder)
    code, out, err = cli(capsys, "evaluate", folder, "--json")
    result = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and result["checkpoint"] == str(find_checkpoint(folder, True, None)) and result["split"] == "val"
    assert "on the val split (the data has no test split)" in err and "test split" not in err.replace("no test", "")
    code, out, err = cli(capsys, "evaluate", folder, "--last", "--split", "val", "--json")
    result = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and result["checkpoint"] == str(tiny.checkpoint) and result["step"] == tiny.ended.step
    assert "on the val split…" in err


def test_a_run_without_a_best_checkpoint_is_measured_at_its_last_and_says_so(capsys, tmp_path, trained_runs):
    from core.cli.evaluate import find_checkpoint

    folder = trained_runs["tiny"].copy_to(tmp_path)
    find_checkpoint(str(folder), True, None).unlink()
    code, out, err = cli(capsys, "evaluate", str(folder), "--json")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["checkpoint"] == str(folder / "checkpoint.pt")
    assert "the run kept no best checkpoint: evaluating its last" in err
    code, _, err = cli(capsys, "evaluate", str(folder), "--best")
    assert code == 2 and "no best checkpoint" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["evaluate", "nope"], "nope: no such checkpoint file or run folder, and no run 'nope'"),
        (["evaluate", "__FILE__", "--best"], "--best takes a run"),
        (["evaluate", "__DIR__"], "no checkpoint in this folder"),
        (["evaluate", "__DIR__", "--last"], "no checkpoint.pt in this folder"),
    ],
)
def test_bad_targets_are_one_line_exit_2(capsys, tmp_path, argv, message):
    (tmp_path / "x.pt").write_bytes(b"not a checkpoint")
    argv = [a.replace("__FILE__", str(tmp_path / "x.pt")).replace("__DIR__", str(tmp_path)) for a in argv]
    code, out, err = cli(capsys, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
