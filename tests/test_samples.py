"""Samples during training (Task.samples, the Samples event): a few answers to fixed inputs at each validation
evaluation, recorded in metrics.jsonl; a user task without the hook gets its serving part's; a failing hook is one
warning and the run goes on."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from cli_in_process import cli

from core.config import RunConfig
from core.engine.trainer import train

TASK_FILE = Path(__file__).resolve().parent / "fixtures" / "user_tasks" / "regression_task.py"


def samples_of(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record.get("event") == "Samples"]


@pytest.mark.parametrize("task", ["tiny", "sentiment"])
def test_a_run_records_samples_at_each_evaluation_and_the_answers_change(tmp_path, task):
    run = tmp_path / "run"
    config = RunConfig.for_task(
        task, device="cpu", precision="fp32", out_dir=str(run), max_steps=60, eval_interval=20, threads=1
    )
    assert train(config).status == "completed"
    samples = samples_of(run)
    assert [s["step"] for s in samples] == [20, 40, 60]
    first, last = samples[0]["rows"], samples[-1]["rows"]
    assert 1 <= len(first) <= 8 and all(set(row) == {"input", "answer"} for row in first)
    assert [row["input"] for row in first] == [row["input"] for row in last]  # the same inputs each time
    assert [row["answer"] for row in first] != [row["answer"] for row in last]  # the model learnt something
    assert all(len(row["input"]) <= 160 and len(row["answer"]) <= 160 for s in samples for row in s["rows"])


def user_run(capsys, tmp_path, path: Path, reference: str) -> Path:
    run = tmp_path / "run"
    args = ["--max-steps", "40", "--eval-interval", "20", "-o", "samples=512", "--out", run, "--json"]
    code, out, err = cli(capsys, "train", "--task", f"{path}:{reference}", *args)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["status"] == "completed"
    return run


def test_a_user_task_without_the_hook_runs_unchanged_with_its_serving_parts_samples(tmp_path, capsys):
    samples = samples_of(user_run(capsys, tmp_path, TASK_FILE, "RegressionTask"))
    assert [s["step"] for s in samples] == [20, 40]
    assert len(samples[0]["rows"]) == 4 and not samples[0]["note"]


def test_a_failing_hook_is_one_warning_and_the_run_finishes(tmp_path, capsys):
    path = tmp_path / "failing_task.py"
    hook = "\n\nclass Failing(RegressionTask):\n    def samples(self, model, data):\n        raise ValueError('no samples today')\n"
    path.write_text(TASK_FILE.read_text() + hook)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = user_run(capsys, tmp_path, path, "Failing")
    said = [str(w.message) for w in caught if "samples of task" in str(w.message)]
    assert len(said) == 1 and "ValueError: no samples today" in said[0] and "failing_task.py:" in said[0]
    samples = samples_of(run)
    assert len(samples) == 1 and samples[0]["rows"] == [] and samples[0]["note"] == said[0]
