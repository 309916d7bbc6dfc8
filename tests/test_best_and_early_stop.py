"""Best checkpoints (best.pt, keep_best k) and early stopping on the monitored validation metric, and resume."""

from __future__ import annotations

import math
import os
import re

import pytest
import torch

from core.config import RunConfig
from core.engine.checkpoints import load_checkpoint, save_checkpoint
from core.engine.early_stopping import BestTracker
from core.engine.events import CheckpointSaved, EvalMetrics, RunStarted, event_from_dict, event_to_dict
from core.engine.trainer import Trainer, train
from core.errors import ConfigError
from tests.conftest import Recorder

# SGD at lr 3 on the tiny task: accuracy peaks early and then wanders (a known, seeded curve).
BUMPY = {"optimizer": "sgd", "lr": 3.0, "eval_interval": 5, "threads": 1}


def val_curve(recorder) -> dict[int, float]:
    return {e.step: e.metrics["accuracy"] for e in recorder.of(EvalMetrics) if e.split == "val"}


def best_step(curve: dict[int, float]) -> int:
    return max(curve, key=lambda step: (curve[step], -step))  # the first of equal values


def test_best_pt_holds_the_best_steps_weights_and_metric(tiny_config, recorder):
    snapshots = {}
    trainer = None

    def sink(event):
        recorder(event)
        if isinstance(event, EvalMetrics):  # the weights that were evaluated
            snapshots[event.step] = {k: v.clone() for k, v in trainer.raw_model.state_dict().items()}

    cfg = tiny_config(max_steps=40, **BUMPY)
    trainer = Trainer(cfg, sink=sink)
    ended = trainer.run()
    assert ended.status == "completed" and ended.message == "completed 40 steps"  # no early stop by default
    curve = val_curve(recorder)
    best = best_step(curve)
    assert best != 40, "the curve should peak before the end for this test to mean something"
    saved = load_checkpoint(os.path.join(cfg.out_dir, "best.pt"))
    assert saved["step"] == best
    assert saved["metrics"]["accuracy"] == pytest.approx(curve[best])
    for name, tensor in saved["model"].items():
        assert torch.equal(tensor, snapshots[best][name]), name
    assert load_checkpoint(os.path.join(cfg.out_dir, "checkpoint.pt"))["step"] == 40  # checkpoint.pt: the last
    bests = [e for e in recorder.of(CheckpointSaved) if e.kind == "best"]
    assert bests[-1].step == best and bests[-1].metric == "accuracy"
    assert bests[-1].value == pytest.approx(curve[best]) and bests[-1].rank == 1
    assert all(e.path.endswith("best.pt") for e in bests)
    # best.pt is rewritten only on an improvement
    improving = [s for s in sorted(curve) if all(curve[s] > curve[t] for t in curve if t < s)]
    assert [e.step for e in bests] == improving
    lasts = [e for e in recorder.of(CheckpointSaved) if e.kind == "last"]
    assert [e.path for e in lasts] == [os.path.join(cfg.out_dir, "checkpoint.pt")]


def test_early_stop_ends_the_run_completed_with_the_reason(tiny_config, recorder):
    cfg = tiny_config(max_steps=500, early_stop_patience=2, **BUMPY)
    ended = train(cfg, sink=recorder)
    curve = val_curve(recorder)
    best = best_step(curve)
    assert ended.status == "completed"
    assert ended.step < 500 and ended.step == best + 2 * 5
    assert ended.message == f"no improvement in val accuracy for 2 evaluations; best {curve[best]:.4g} at step {best:,}"
    assert re.fullmatch(r"no improvement in val accuracy for 2 evaluations; best 0\.\d+ at step \d+", ended.message)
    assert load_checkpoint(os.path.join(cfg.out_dir, "checkpoint.pt"))["step"] == ended.step
    assert load_checkpoint(os.path.join(cfg.out_dir, "best.pt"))["step"] == best


def test_min_delta_and_min_mode_on_the_loss(tiny_config, recorder):
    cfg = tiny_config(max_steps=40, monitor="loss", early_stop_min_delta=0.05, **BUMPY)
    train(cfg, sink=recorder)
    losses = {e.step: e.metrics["loss"] for e in recorder.of(EvalMetrics)}
    expected, best = [], math.inf
    for step in sorted(losses):
        if losses[step] < best - 0.05:
            expected.append(step)
            best = losses[step]
    bests = [e for e in recorder.of(CheckpointSaved) if e.kind == "best"]
    assert [e.step for e in bests] == expected and bests[0].metric == "loss"


def test_keep_best_two_keeps_the_two_best_ranked(tiny_config, recorder):
    cfg = tiny_config(max_steps=40, keep_best=2, **BUMPY)
    train(cfg, sink=recorder)
    curve = val_curve(recorder)
    top = sorted(curve, key=lambda step: -curve[step])[:2]
    files = sorted(f for f in os.listdir(cfg.out_dir) if f.startswith("best"))
    assert files == sorted(f"best-step{step}.pt" for step in top)
    for step in top:
        saved = load_checkpoint(os.path.join(cfg.out_dir, f"best-step{step}.pt"))
        assert saved["step"] == step and saved["metrics"]["accuracy"] == pytest.approx(curve[step])
    state = load_checkpoint(os.path.join(cfg.out_dir, "checkpoint.pt"))["best_tracker"]
    assert [e["step"] for e in state["ranked"]] == top


def test_keep_best_zero_writes_no_best_checkpoint(tiny_config, recorder):
    cfg = tiny_config(max_steps=20, keep_best=0, **BUMPY)
    assert train(cfg, sink=recorder).status == "completed"
    assert not [f for f in os.listdir(cfg.out_dir) if f.startswith("best")]
    assert all(e.kind == "last" for e in recorder.of(CheckpointSaved))


def test_resume_keeps_the_tracker_and_best_pt_resumes(tiny_config, recorder):
    cfg = tiny_config(max_steps=20, early_stop_patience=50, **BUMPY)
    train(cfg, sink=recorder)
    curve = val_curve(recorder)
    best = best_step(curve)
    state = load_checkpoint(os.path.join(cfg.out_dir, "checkpoint.pt"))["best_tracker"]
    assert state["best"] == pytest.approx(curve[best]) and state["best_step"] == best
    assert state["since_best"] == len([s for s in curve if s > best])

    resumed = Trainer(cfg.replace(max_steps=40), resume_from=os.path.join(cfg.out_dir, "checkpoint.pt"))
    resumed.setup()
    try:
        assert (resumed.tracker.best, resumed.tracker.best_step, resumed.tracker.since_best) == (
            state["best"],
            best,
            state["since_best"],
        )
    finally:
        resumed.cleanup()

    again = Recorder()
    ended = train(
        cfg.replace(max_steps=40, out_dir=cfg.out_dir + "-b"),
        sink=again,
        resume_from=os.path.join(cfg.out_dir, "best.pt"),
    )
    assert ended.status == "completed" and again.of(RunStarted)[0].start_step == best


def test_a_checkpoint_without_tracker_state_resumes_fresh(tiny_config, tmp_path):
    cfg = tiny_config(max_steps=10, **BUMPY)
    train(cfg)
    state = load_checkpoint(os.path.join(cfg.out_dir, "checkpoint.pt"))
    del state["best_tracker"]  # as written before best checkpoints existed
    old = tmp_path / "old.pt"
    save_checkpoint(old, state)
    resumed = Trainer(cfg.replace(max_steps=20, out_dir=str(tmp_path / "again")), resume_from=old)
    resumed.setup()
    try:
        assert resumed.tracker.best is None and not any("best" in note for note in resumed.notes)
    finally:
        resumed.cleanup()


def test_an_unknown_monitor_is_refused_at_setup_with_the_tasks_metrics(tiny_config):
    with pytest.raises(ConfigError) as caught:
        train(tiny_config(max_steps=5, monitor="ndcg@10", threads=1))
    assert caught.value.field == "monitor"
    assert "'ndcg@10'" in str(caught.value) and "loss, accuracy" in str(caught.value)
    errors = RunConfig.for_task("tiny", monitor_mode="up", early_stop_min_delta=-1.0, keep_best=-1).errors()
    assert set(errors) >= {"monitor_mode", "early_stop_min_delta", "keep_best"}
    assert "auto, max, min" in errors["monitor_mode"]


def test_cli_flags_come_from_the_new_fields():
    from core.cli.main import build_parser

    args = build_parser().parse_args(
        [
            "train",
            "--monitor",
            "loss",
            "--monitor-mode",
            "min",
            "--keep-best",
            "3",
            "--early-stop-patience",
            "4",
            "--early-stop-min-delta",
            "0.01",
        ]
    )
    assert (args.monitor, args.monitor_mode, args.keep_best, args.early_stop_patience, args.early_stop_min_delta) == (
        "loss",
        "min",
        3,
        4,
        0.01,
    )


def test_nan_and_inf_never_improve():
    tracker = BestTracker("accuracy", "max", patience=2)
    assert not tracker.update(float("nan"), 1).improved and not tracker.update(float("inf"), 2).improved
    assert tracker.best is None and not tracker.should_stop  # nothing finite yet: nothing to stop at
    assert tracker.update(0.5, 3).improved and tracker.ranked[0]["step"] == 3
    assert not tracker.update(float("nan"), 4).improved and not tracker.update(-float("inf"), 5).improved
    assert tracker.should_stop and tracker.best == 0.5
    loss = BestTracker("val_loss", "min")
    assert loss.update(1.0, 1).improved and loss.update(0.9, 2).improved and not loss.update(0.95, 3).improved


def test_checkpoint_saved_round_trips_with_its_kind():
    event = CheckpointSaved(step=7, path="run/best.pt", kind="best", metric="accuracy", value=0.5, rank=1)
    assert event_from_dict(event_to_dict(event)) == event
    assert event_from_dict({"event": "CheckpointSaved", "step": 1, "path": "p"}).kind == "last"


def _early_stop_on_each_rank(rank: int, out: str) -> dict:
    """Rank 1 sees a different (inverted) accuracy than rank 0: the ranks must still save and stop alike, on
    rank 0's values."""
    import core.engine.evaluation as evaluation
    from core.engine.distributed import DistContext

    if rank == 1:
        original = evaluation.evaluate_split

        def skewed(*args, **kwargs):
            metrics = original(*args, **kwargs)
            return {**metrics, "accuracy": 1.0 - metrics["accuracy"]}

        evaluation.evaluate_split = skewed
    cfg = RunConfig.for_task(
        "tiny",
        device="cpu",
        precision="fp32",
        out_dir=out,
        log_interval=5,
        max_steps=500,
        early_stop_patience=2,
        **BUMPY,
    )
    seen = []
    trainer = Trainer(cfg, sink=seen.append, dist_ctx=DistContext.from_env())
    ended = trainer.run()
    return {
        "status": ended.status,
        "step": ended.step,
        "message": ended.message,
        "best": [(e.step, e.value) for e in seen if isinstance(e, CheckpointSaved) and e.kind == "best"],
        "tracker": trainer.tracker.state_dict(),
    }


@pytest.mark.timeout(600)
def test_under_ddp_every_rank_takes_rank_0s_decision(tmp_path):
    from tests.test_distributed import run_ranks

    zero, one = run_ranks(_early_stop_on_each_rank, str(tmp_path / "ddp"))
    assert zero["status"] == one["status"] == "completed"
    assert zero["step"] == one["step"] < 500 and zero["message"].startswith("no improvement in val accuracy")
    assert zero["tracker"] == one["tracker"]
    assert zero["best"] and one["best"] == []  # rank 0 writes and reports; rank 1 took part in the same saves
    saved = load_checkpoint(tmp_path / "ddp" / "best.pt")
    assert (saved["step"], saved["metrics"]["accuracy"]) == zero["best"][-1]
