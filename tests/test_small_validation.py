"""A validation split too small to choose the best checkpoint by: the run says so as it starts, and its summary
gives the test metrics of both the best checkpoint and the last weights, with which to use."""

from __future__ import annotations

import io
import json

import pytest
import torch

from core.cli.train import print_summary
from core.config import RunConfig
from core.engine.checkpoints import load_checkpoint
from core.engine.events import RunStarted
from core.engine.run_record import run_checkpoint
from core.engine.trainer import Trainer
from core.runs.evaluate import evaluate_checkpoint
from core.tasks import create_task

TOO_FEW = "are too few to choose the best checkpoint"


def ranking(out_dir, queries: int) -> RunConfig:
    """A quick ranking run (80/10/10 split by query) that evaluates every 10 of its 60 steps."""
    return RunConfig.for_task(
        "ranking",
        task_options={"queries": queries, "docs": 10, "features": 8},
        device="cpu",
        precision="fp32",
        threads=1,
        out_dir=str(out_dir),
        max_steps=60,
        eval_interval=10,
        log_interval=10,
    )


def started_notes(recorder) -> list[str]:
    return recorder.of(RunStarted)[0].notes


def test_a_tiny_validation_split_warns_at_start_and_the_summary_gives_best_and_last_on_test(tmp_path, recorder):
    cfg = ranking(tmp_path / "run", queries=200)  # 20 validation queries
    trainer = Trainer(cfg, sink=recorder)
    ended = trainer.run()
    assert ended.status == "completed", ended.message
    warned = [note for note in started_notes(recorder) if TOO_FEW in note]
    assert len(warned) == 1 and warned[0].startswith(
        "20 validation queries are too few to choose the best checkpoint by val ndcg@10: its standard error"
    ), warned
    assert warned[0].endswith("the summary compares the best and the last weights on the test split")
    assert ended.best_step is not None and ended.best_step < ended.step, "the best should come before the end"

    best = evaluate_checkpoint(tmp_path / "run" / "best.pt", split="test")
    assert best.step == ended.best_step
    assert ended.best_test_metrics == pytest.approx(best.metrics)
    assert set(ended.test_metrics) == set(ended.best_test_metrics) >= {"ndcg@10", "mrr"}
    assert ended.checkpoint_advice.startswith(
        "use the last weights (checkpoint.pt, step 60): 20 validation "
        "queries are too few to choose a checkpoint by ndcg@10 (50 or more)"
    )
    last = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["model"]  # the model is left with the last weights
    for name, tensor in trainer.raw_model.state_dict().items():
        assert torch.equal(tensor, last[name]), name

    out = io.StringIO()
    print_summary(ended, recorder.of(RunStarted)[0], out)
    text = out.getvalue()
    line = next(line for line in text.splitlines() if "test of the best checkpoint" in line)
    assert line.strip().startswith(
        f"test of the best checkpoint (step {ended.best_step}): ndcg@10 "
        f"{ended.best_test_metrics['ndcg@10']:.4f} (last {ended.test_metrics['ndcg@10']:.4f})"
    )
    assert f"  {ended.checkpoint_advice}\n" in text
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["best"]["advice"] == ended.checkpoint_advice and record["best"]["test_step"] == ended.best_step
    assert record["best"]["test_metrics"] == pytest.approx(ended.best_test_metrics)
    # What the commands take from the run by default (run_checkpoint "advised") is what the summary advised.
    assert ended.advised_checkpoint == record["best"]["use"] == "checkpoint.pt"
    path, notes = run_checkpoint(tmp_path / "run", "advised")
    assert path == tmp_path / "run" / "checkpoint.pt" and "advised the last weights (checkpoint.pt)" in notes[0]
    assert run_checkpoint(tmp_path / "run", "best")[0].name == "best.pt"  # asked for by name: still the best


def test_a_large_enough_validation_split_does_not_warn_and_advises_the_best_checkpoint(tmp_path, recorder):
    trainer = Trainer(ranking(tmp_path / "run", queries=600), sink=recorder)  # 60 queries, 59 with a relevant one
    assert trainer.run().status == "completed"
    ended = recorder.events[-1]
    assert not [note for note in started_notes(recorder) if TOO_FEW in note]
    assert ended.best_step is not None and ended.best_test_metrics.keys() == ended.test_metrics.keys()
    if ended.best_step == ended.step:
        assert ended.checkpoint_advice == f"the best checkpoint (best.pt) is the last weights (step {ended.step})"
    else:
        assert ended.checkpoint_advice.startswith(
            f"use the best checkpoint (best.pt, step {ended.best_step}, val ndcg@10 "
        )
        assert "): chosen on 59 validation queries" in ended.checkpoint_advice
    assert ended.advised_checkpoint == "best.pt" and run_checkpoint(tmp_path / "run", "advised") == (
        tmp_path / "run" / "best.pt",
        [],
    )


def test_the_advice_says_when_the_best_beats_the_last_weights_by_less_than_the_noise(tmp_path):
    from core.engine.early_stopping import BestTracker
    from core.engine.small_validation import ValidationSize, best_and_last

    tracker = BestTracker("acc", "max")
    for step, value in ((10, 0.8), (20, 0.78)):
        tracker.update(value, step)
    tracker.ranked = [{"value": 0.8, "step": 10, "file": "best.pt"}]
    size = ValidationSize(400, "rows")  # se 0.025: the noise is ±0.05

    def advice(last):
        return best_and_last(tracker, size, 20, {}, tmp_path, lambda path: {"acc": 1.0}, last).advice

    assert tracker.last == 0.78 and BestTracker("acc", "max").state_dict().get("last", 0) is None
    assert advice(0.78).endswith(
        "chosen on 400 validation rows; it beats the last weights' 0.78 by less than the metric's noise (±0.05): "
        "either will do"
    )
    assert advice(0.7).endswith("chosen on 400 validation rows") and advice(None) == advice(0.7)


def test_the_thresholds_keep_the_standard_error_under_a_few_points():
    from core.engine.small_validation import units_needed

    assert (units_needed("rows"), units_needed("users"), units_needed("queries")) == (200, 200, 50)
    assert create_task("ranking").validation_unit == "queries"
    assert create_task("recommender").validation_unit == "users"
    assert create_task("tiny").validation_unit == "rows"


def size_notes(out_dir, samples: int, **settings) -> list[str]:
    """The notes of a tiny-task run set up (not trained) on `samples` points, a fifth of them validating."""
    cfg = RunConfig.for_task(
        "tiny",
        device="cpu",
        precision="fp32",
        threads=1,
        out_dir=str(out_dir),
        task_options={"samples": samples},
        **settings,
    )
    trainer = Trainer(cfg)
    trainer.setup()
    try:
        return [note for note in trainer.notes if "are too few to choose" in note]
    finally:
        trainer.cleanup()


def test_the_warning_starts_below_200_validation_rows(tmp_path):
    warned = size_notes(tmp_path / "a", 995)  # 199 validation rows
    assert len(warned) == 1, warned
    assert warned[0].startswith("199 validation rows are too few to choose the best checkpoint by val accuracy")
    assert warned[0].endswith("prefer the last weights (checkpoint.pt), or give a larger validation split")  # no test
    assert size_notes(tmp_path / "b", 1000) == []  # 200


def test_the_warning_names_what_the_metric_chooses(tmp_path):
    both = size_notes(tmp_path / "a", 256, early_stop_patience=3)
    assert len(both) == 1 and "too few to choose the best checkpoint and when to stop early by val" in both[0]
    stops = size_notes(tmp_path / "b", 256, early_stop_patience=3, keep_best=0)
    assert len(stops) == 1 and "too few to choose when to stop early by val accuracy" in stops[0]
    assert size_notes(tmp_path / "c", 256, keep_best=0) == []  # nothing is chosen by the metric


def test_ranking_counts_the_queries_with_a_relevant_candidate_once():
    task = create_task("ranking")
    split = {"label": torch.tensor([[1, 0], [0, 2], [0, 0], [0, -1], [3, -1]]), "qid": torch.tensor([0, 0, 1, 2, 3])}
    assert task.validation_units(split) == 2  # query 0 (two lists) and query 3; 1 and 2 have nothing relevant
    del split["qid"]
    assert task.validation_units(split) == 3


def test_an_unreadable_best_checkpoint_leaves_the_last_weights_and_says_so(tmp_path, monkeypatch):
    from core.engine import small_validation
    from core.errors import CheckpointError

    def unreadable(path):
        raise CheckpointError(f"{path}: not a readable checkpoint")

    monkeypatch.setattr(small_validation.ckpt, "load_checkpoint", unreadable)
    trainer = Trainer(ranking(tmp_path / "run", queries=200))
    ended = trainer.run()
    assert ended.status == "completed" and ended.best_test_metrics == {}
    assert ended.checkpoint_advice.endswith("; best.pt could not be read for its test metrics")
    last = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["model"]  # this module's name: not the patched one
    for name, tensor in trainer.raw_model.state_dict().items():
        assert torch.equal(tensor, last[name]), name


def _ddp_ranking_run(rank: int, out: str) -> dict:
    from core.engine.distributed import DistContext

    trainer = Trainer(ranking(out, queries=200), dist_ctx=DistContext.from_env())
    ended = trainer.run()
    return {
        "status": ended.status,
        "best_step": ended.best_step,
        "best": ended.best_test_metrics,
        "last": ended.test_metrics,
        "advice": ended.checkpoint_advice,
    }


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_under_ddp_every_rank_evaluates_the_best_weights_rank_0_read(tmp_path):
    from tests.test_distributed import run_ranks

    zero, one = run_ranks(_ddp_ranking_run, str(tmp_path / "ddp"))
    assert zero["status"] == one["status"] == "completed"
    assert zero["best_step"] is not None and zero["advice"].startswith("use the last weights")
    best = evaluate_checkpoint(tmp_path / "ddp" / "best.pt", split="test")
    assert best.step == zero["best_step"] and zero["best"] == pytest.approx(best.metrics, rel=1e-5)
    assert zero["best"] != zero["last"]  # the best weights were evaluated, not the last ones again
