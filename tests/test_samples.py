"""Samples during training (Task.samples, the Samples event): a few answers to fixed inputs at each validation
evaluation, recorded in metrics.jsonl; a user task without the hook gets its serving part's; a failing hook is one
warning and the run goes on."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest
import torch
from cli_in_process import cli

from core.config import RunConfig
from core.devices import FP8_EMULATE_ENV, PRECISION_INSTALL, cpu_info, with_low_precision
from core.engine.evaluation import evaluating, task_samples
from core.engine.precision import plain_linears, resolve_precision
from core.engine.trainer import Trainer, train
from core.tasks.serving import ModelAtHand, listed

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


SMALL_REC = {"d_model": 32, "layers": 1, "heads": 2}  # every Linear of its block converts to float8 in fp8
needs_torchao = pytest.mark.skipif(not importlib.util.find_spec("torchao"), reason=PRECISION_INSTALL)


@pytest.mark.parametrize("precision", ["fp32", pytest.param("fp8", marks=needs_torchao)])
def test_recommender_samples_are_its_served_recommendations_for_the_first_validation_users(
    tmp_path, monkeypatch, precision
):
    monkeypatch.setenv(FP8_EMULATE_ENV, "1")
    config = RunConfig.for_task("recommender", device="cpu", precision=precision, out_dir=str(tmp_path), threads=1)
    trainer = Trainer(config.replace(task_options=SMALL_REC))
    trainer.setup()
    task, model, data = trainer.task, trainer.raw_model, trainer.data
    rows = task_samples(task, model, data, trainer.plan.autocast)  # one batch, from the data already loaded
    val = data.val
    histories = [task.history[s:e].tolist() for s, e in zip(val["history_start"][:4], val["history_end"][:4])]
    served = task.serving()
    with evaluating(model, trainer.plan.autocast), plain_linears(model):  # the serving path, user by user
        at_hand = ModelAtHand(task, served, model, data, {"seed": config.seed})
        answers = [served.recommend(at_hand, [code - 1 for code in history]) for history in histories]
    if precision == "fp32":  # bf16 (fp8's other ops) may order near ties differently in another batch size
        assert [row["answer"] for row in rows] == [listed(answer.items) for answer in answers]
    assert all(row["answer"].endswith("… (10)") for row in rows)
    assert [row["input"].split(":")[0] for row in rows] == ["user 1", "user 2", "user 3", "user 4"]
    assert all(
        f"{len(h)} lessons, last {listed([c - 1 for c in h[-3:]])}" in r["input"] for h, r in zip(histories, rows)
    )


@needs_torchao
def test_float8_layers_answer_under_inference_mode_as_plain_linears(monkeypatch):
    monkeypatch.setenv(FP8_EMULATE_ENV, "1")
    plan = resolve_precision("fp8", with_low_precision(cpu_info()))
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    assert "1 of 2 Linear layers train in float8" in plan.prepare_model(model)[0]
    x = torch.randn(3, 5, 32)
    with evaluating(model, plan.autocast):
        trained = model(x)
        with plain_linears(model), torch.inference_mode():  # what a serving answer runs under
            answered = model(x)
        with pytest.raises((AssertionError, NotImplementedError)), torch.inference_mode():  # torchao refuses it
            model(x)
    assert answered.shape == trained.shape and torch.allclose(answered.float(), trained.float(), atol=0.1)
