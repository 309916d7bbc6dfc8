"""A run's length follows the data: a small data file trains at least `min_steps` optimizer steps (in whole
epochs, said in RunStarted's notes), and a short run that ends near its baseline says it has barely trained."""

from __future__ import annotations

import random

import pytest

from core.config import RunConfig
from core.engine.due import planned_steps
from core.engine.events import RunStarted
from core.engine.reporting import barely_trained
from core.engine.trainer import train


@pytest.mark.parametrize(
    ("epochs", "max_steps", "min_steps", "per_epoch", "steps"),
    [
        (2, 0, 200, 7, 203),  # 600 rows: 29 epochs of 7 steps, not 14 steps
        (2, 0, 200, 500, 1000),  # a big file: the epochs asked for
        (2, 0, 0, 7, 14),  # min_steps 0: exactly the epochs
        (2, 50, 200, 7, 50),  # max_steps wins
        (3, 0, 200, 100, 300),
    ],
)
def test_planned_steps(epochs, max_steps, min_steps, per_epoch, steps):
    cfg = RunConfig(epochs=epochs, max_steps=max_steps, min_steps=min_steps)
    total, note = planned_steps(cfg, per_epoch)
    assert total == steps
    assert (note is not None) == (total != max_steps and total > epochs * per_epoch)
    if note:
        assert f"{total // per_epoch} epochs instead of {epochs}" in note and "min_steps 0" in note


def reviews(path, rows: int, seed: int = 0):
    rng = random.Random(seed)
    good, bad = ["great", "clear", "helpful", "loved"], ["boring", "confusing", "slow", "hated"]
    lines = ["text,label"]
    for i in range(rows):
        positive = rng.random() < 0.5
        words = rng.sample(good if positive else bad, 2) + rng.sample(good + bad, 2)
        lines.append(f'"the lesson was {" ".join(words)} {i}",{"positive" if positive else "negative"}')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_small_file_with_default_epochs_trains_the_minimum_and_says_why(tmp_path):
    data = reviews(tmp_path / "reviews.csv", 600)
    started = []
    ended = train(
        RunConfig.for_task(
            "sentiment",
            data=str(data),
            device="cpu",
            threads=1,
            task_options={"buckets": 4096},
            out_dir=str(tmp_path / "run"),
        ),
        sink=lambda e: started.append(e) if isinstance(e, RunStarted) else None,
    )
    assert ended.status == "completed"
    per_epoch = started[0].steps_per_epoch
    assert per_epoch < 20 and ended.step >= 200 and ended.step % per_epoch == 0
    assert any("min_steps 200" in note for note in started[0].notes)
    assert "barely trained" not in ended.message


def test_a_run_of_a_few_steps_near_its_baseline_says_it_barely_trained():
    note = barely_trained(14, {"accuracy": 0.517}, {"accuracy": 0.5}, "accuracy")
    assert note.startswith("val accuracy 0.517 is near its baseline 0.500 after only 14 optimizer steps")
    assert "train longer" in note
    assert barely_trained(14, {"accuracy": 0.93}, {"accuracy": 0.5}, "accuracy") == ""  # it learnt
    assert barely_trained(400, {"accuracy": 0.51}, {"accuracy": 0.5}, "accuracy") == ""  # not a short run
    assert barely_trained(14, {"ndcg@10": 0.3}, {}, "ndcg@10") == ""  # no baseline to be near
    assert barely_trained(10, {"accuracy": float("nan")}, {"accuracy": 0.5}, "accuracy") == ""  # failed, not near


def test_a_run_stretched_by_min_steps_resumes_to_its_planned_length(tiny_config):
    """A run of 2 epochs stretched to min_steps 30 and stopped after epoch 2 is not 'done': it resumes to step 30
    (the old check refused: '2 epochs are already reached'); once there, a resume is refused naming both."""
    from core.engine.control import RunControl
    from core.engine.events import StepMetrics
    from core.engine.prepare import prepare_run
    from core.errors import ConfigError

    cfg = tiny_config(epochs=2, min_steps=30, batch_size=1024, log_interval=1, task_options={"samples": 8192})
    control = RunControl()
    stopped = train(cfg, control=control, sink=lambda e: isinstance(e, StepMetrics) and e.step >= 12 and control.stop())
    assert stopped.status == "stopped" and stopped.epoch >= 2, stopped.message
    done = train(cfg, resume_from=stopped.checkpoint)
    assert done.status == "completed" and done.step == 30, done.message
    with pytest.raises(ConfigError, match=r"so 2 epochs \(and at least min_steps 30\) are already reached"):
        prepare_run({}, resume=done.checkpoint)
