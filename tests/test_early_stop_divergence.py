"""Early stopping's divergence threshold (early_stop_divergence, like Lightning's divergence_threshold): the run
ends `completed` as soon as the monitored validation metric is worse than the threshold, or not a finite number."""

from __future__ import annotations

import math

import pytest

from core.config import RunConfig
from core.engine.early_stopping import BestTracker
from core.engine.events import CheckpointSaved, EvalMetrics
from core.engine.trainer import train
from core.errors import ConfigError

FAST = {"eval_interval": 5, "threads": 1}


def test_min_mode_stops_above_the_threshold_with_the_reason():
    tracker = BestTracker("loss", "min", divergence=10.0)
    assert tracker.update(0.41, 100).improved and not tracker.should_stop
    assert not tracker.update(10.0, 200).improved and not tracker.should_stop  # at the threshold: not past it
    tracker.update(12.3, 300)
    assert tracker.should_stop
    assert tracker.stop_message() == (
        "val loss 12.3 is worse than the divergence threshold 10 at step 300; best 0.41 at step 100"
    )
    tracker.update(50.0, 400)  # the first crossing is the one reported
    assert tracker.diverged == (12.3, 300)


def test_max_mode_stops_below_the_threshold():
    tracker = BestTracker("accuracy", "max", divergence=0.5)
    tracker.update(0.7, 10)
    tracker.update(0.5, 20)
    assert not tracker.should_stop
    tracker.update(0.2, 30)
    assert tracker.should_stop
    assert tracker.stop_message() == (
        "val accuracy 0.2 is worse than the divergence threshold 0.5 at step 30; best 0.7 at step 10"
    )


def test_the_first_evaluation_past_the_threshold_names_no_earlier_best():
    tracker = BestTracker("loss", "min", divergence=1.0)
    tracker.update(2.5, 5)
    assert tracker.should_stop
    assert tracker.stop_message() == "val loss 2.5 is worse than the divergence threshold 1 at step 5"


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_stop_in_both_modes(mode, value):
    tracker = BestTracker("loss", mode, divergence=5.0)
    tracker.update(1.0 if mode == "min" else 6.0, 10)
    assert not tracker.should_stop
    tracker.update(value, 20)
    assert tracker.should_stop
    best = "1" if mode == "min" else "6"
    assert tracker.stop_message() == f"val loss is {value} (not a finite number) at step 20; best {best} at step 10"
    fresh = BestTracker("loss", mode, divergence=5.0)
    fresh.update(value, 5)
    assert fresh.should_stop and fresh.stop_message().endswith("at step 5; no finite value before it")


def test_off_by_default_nan_does_not_stop_and_patience_is_unchanged():
    tracker = BestTracker("loss", "min", patience=3)
    tracker.update(1.0, 1)
    tracker.update(float("nan"), 2)
    tracker.update(1e9, 3)
    assert not tracker.should_stop  # threshold 0 = off: only patience decides
    tracker.update(2.0, 4)
    assert tracker.should_stop and tracker.stop_message().startswith("no improvement in val loss for 3 evaluations")


def test_a_threshold_the_first_evaluation_is_past_ends_the_run_there(tiny_config, recorder):
    cfg = tiny_config(max_steps=40, monitor="loss", early_stop_divergence=0.01, **FAST)
    ended = train(cfg, sink=recorder)
    evals = [e for e in recorder.of(EvalMetrics) if e.split == "val"]
    assert ended.status == "completed" and ended.step == 5 == evals[0].step
    loss = evals[0].metrics["loss"]
    assert loss > 0.01
    assert ended.message == f"val loss {loss:.4g} is worse than the divergence threshold 0.01 at step 5"
    assert [e.step for e in recorder.of(CheckpointSaved) if e.kind == "last"] == [5]


def test_a_threshold_never_reached_changes_nothing(tiny_config, recorder):
    cfg = tiny_config(max_steps=20, monitor="loss", early_stop_divergence=1e6, keep_best=0, **FAST)
    ended = train(cfg, sink=recorder)
    assert ended.status == "completed" and ended.message == "completed 20 steps"
    assert [e.step for e in recorder.of(EvalMetrics)] == [5, 10, 15, 20]


def test_max_mode_on_the_run_stops_at_the_first_evaluation_below(tiny_config, recorder):
    cfg = tiny_config(max_steps=40, early_stop_divergence=0.99, optimizer="sgd", lr=3.0, **FAST)
    ended = train(cfg, sink=recorder)
    curve = {e.step: e.metrics["accuracy"] for e in recorder.of(EvalMetrics)}
    below = [step for step in sorted(curve) if curve[step] < 0.99]
    assert below, "the tiny curve should dip under 0.99 at some evaluation"
    assert ended.step == below[0] == max(curve)
    assert ended.message.startswith(
        f"val accuracy {curve[below[0]]:.4g} is worse than the divergence threshold 0.99 at step {below[0]}"
    )


def test_a_nan_validation_metric_ends_the_run(tiny_config, recorder, monkeypatch):
    import core.engine.evaluation as evaluation

    original = evaluation.evaluate_split
    calls = []

    def nan_on_the_second(*args, **kwargs):
        metrics = original(*args, **kwargs)
        calls.append(1)
        return {**metrics, "accuracy": float("nan")} if len(calls) == 2 else metrics

    monkeypatch.setattr(evaluation, "evaluate_split", nan_on_the_second)
    # the task's primary metric (accuracy, max mode) is monitored: no probe evaluation before the run
    cfg = tiny_config(max_steps=40, early_stop_divergence=0.01, **FAST)
    ended = train(cfg, sink=recorder)
    first = recorder.of(EvalMetrics)[0].metrics["accuracy"]
    assert ended.status == "completed" and ended.step == 10
    assert ended.message == f"val accuracy is nan (not a finite number) at step 10; best {first:.4g} at step 5"


def test_with_evaluations_at_epoch_ends_it_works_as_patience_does(tiny_config, recorder):
    """eval_interval 0 evaluates at the end of each epoch: the monitor is evaluated there, for patience and for
    the threshold alike (no setting to refuse)."""
    cfg = tiny_config(epochs=3, monitor="loss", early_stop_divergence=0.01, threads=1)
    assert cfg.eval_interval == 0 and not cfg.errors()
    ended = train(cfg, sink=recorder)
    first = recorder.of(EvalMetrics)[0]
    assert ended.status == "completed" and ended.step == first.step < ended.step * 3
    assert "worse than the divergence threshold 0.01" in ended.message


@pytest.mark.parametrize(
    "value, words",
    [
        (-1.0, "out of range: must be between 0 and"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
    ],
)
def test_negative_or_non_finite_thresholds_are_one_line_errors(value, words):
    cfg = RunConfig.for_task("tiny", early_stop_divergence=value)
    assert words in cfg.errors()["early_stop_divergence"]
    with pytest.raises(ConfigError) as caught:
        cfg.validate()
    assert caught.value.field == "early_stop_divergence" and "\n" not in str(caught.value)


def test_the_cli_flag_and_toml(tmp_path):
    from core.cli.main import build_parser

    args = build_parser().parse_args(["train", "--early-stop-divergence", "2.5"])
    assert args.early_stop_divergence == 2.5
    cfg = RunConfig.for_task("tiny", early_stop_divergence=2.5)
    cfg.save_toml(tmp_path / "c.toml")
    assert RunConfig.load_toml(tmp_path / "c.toml").early_stop_divergence == 2.5
    assert RunConfig().early_stop_divergence == 0.0 and math.isfinite(RunConfig().early_stop_divergence)


def _diverge_on_each_rank(rank: int, out: str) -> dict:
    """Rank 1 sees a perfect accuracy at every evaluation: alone it would never stop; it must stop where rank 0
    (whose values are broadcast) does."""
    import core.engine.evaluation as evaluation
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer

    if rank == 1:
        original = evaluation.evaluate_split

        def perfect(*args, **kwargs):
            return {**original(*args, **kwargs), "accuracy": 1.0}

        evaluation.evaluate_split = perfect
    cfg = RunConfig.for_task(
        "tiny",
        device="cpu",
        precision="fp32",
        out_dir=out,
        log_interval=5,
        max_steps=200,
        optimizer="sgd",
        lr=3.0,
        early_stop_divergence=0.99,
        **FAST,
    )
    seen = []
    ended = Trainer(cfg, sink=seen.append, dist_ctx=DistContext.from_env()).run()
    curve = {e.step: e.metrics["accuracy"] for e in seen if isinstance(e, EvalMetrics) and e.split == "val"}
    return {"status": ended.status, "step": ended.step, "message": ended.message, "curve": curve}


@pytest.mark.timeout(240)
def test_under_ddp_every_rank_takes_rank_0s_decision(tmp_path):
    from tests.test_distributed import run_ranks

    zero, one = run_ranks(_diverge_on_each_rank, str(tmp_path / "ddp"))
    assert zero["status"] == one["status"] == "completed"
    assert zero["step"] == one["step"] and zero["message"] == one["message"]
    below = [step for step in sorted(zero["curve"]) if zero["curve"][step] < 0.99]
    assert zero["step"] == below[0] < 200 and "worse than the divergence threshold 0.99" in zero["message"]
    assert one["curve"] == {}  # rank 0 alone reports
