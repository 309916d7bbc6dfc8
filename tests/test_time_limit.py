"""A wall-time budget (time_limit_minutes, `train --time-limit`): the run ends at the budget as a finished run
(evaluated, tested, checkpointed, status completed, saying why), in one process and under DDP, where rank 0's
clock decides and the ranks agree at their stop agreement."""

from __future__ import annotations

import json

import pytest

from core.cli.main import build_parser
from core.config import FIELD_SPECS, RunConfig
from core.engine import trainer as trainer_module
from core.engine.events import CheckpointSaved
from core.engine.trainer import Trainer
from core.errors import ConfigError


def clock_of_steps(monkeypatch, seconds_per_step: float) -> dict:
    holder: dict = {}
    monkeypatch.setattr(
        trainer_module, "monotonic", lambda: holder["t"].state.step * seconds_per_step if "t" in holder else 0.0
    )
    return holder


def test_the_run_completes_at_the_budget_with_test_metrics_and_a_checkpoint(monkeypatch, recorder, tmp_path):
    holder = clock_of_steps(monkeypatch, 10.0)  # a step "takes" 10 s: 2 minutes is 12 steps
    config = RunConfig.for_task(
        "sentiment",
        device="cpu",
        max_steps=500,
        time_limit_minutes=2,
        threads=1,
        log_interval=5,
        checkpoint_minutes=0,
        out_dir=str(tmp_path / "run"),
    )
    trainer = Trainer(config, sink=recorder)
    holder["t"] = trainer
    ended = trainer.run()
    assert ended.status == "completed" and ended.step == 12
    assert ended.message == "time limit of 2 min reached at step 12 of 500; evaluated, tested and saved as at the end"
    assert ended.test_metrics and ended.metrics  # as a finished run: tested
    assert [e.step for e in recorder.of(CheckpointSaved) if e.kind == "last"] == [12]
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "completed" and record["steps"] == 12


def test_no_limit_by_default_and_validated():
    spec = FIELD_SPECS["time_limit_minutes"]
    assert RunConfig().time_limit_minutes == 0 and "0 = no limit" in spec.help
    with pytest.raises(ConfigError, match="time_limit_minutes: -5.0 is out of range"):
        RunConfig(time_limit_minutes=-5.0).validate()
    args = build_parser().parse_args(["train", "--time-limit", "90"])
    assert args.time_limit_minutes == 90.0


def _time_limit_on_two_ranks(rank: int, out: str) -> dict:
    from core.engine import trainer as module
    from core.engine.distributed import DistContext

    holder = {}
    # Only rank 0's clock runs (a step is 10 s): rank 1's says no time passed, so if it decided alone it would
    # train on while rank 0 ended, and rank 0 would wait for it in a collective.
    module.monotonic = (lambda: holder["t"].state.step * 10.0 if "t" in holder else 0.0) if rank == 0 else (lambda: 0.0)
    trainer = Trainer(
        RunConfig.for_task(
            "tiny",
            device="cpu",
            precision="fp32",
            batch_size=16,
            max_steps=1_000_000,
            log_interval=5,
            time_limit_minutes=2,
            checkpoint_minutes=0,
            threads=1,
            out_dir=out,
        ),
        dist_ctx=DistContext.from_env(),
    )
    holder["t"] = trainer
    ended = trainer.run()
    return {"status": ended.status, "step": ended.step, "message": ended.message}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_under_ddp_rank_0s_clock_ends_both_ranks_at_one_step(tmp_path):
    """Two ranks: rank 0's clock decides and the decision travels in the ranks' stop agreement, so both end at
    the same step (a rank ending alone would leave the other waiting in a collective) and the run completes."""
    from tests.test_distributed import run_ranks

    zero, one = run_ranks(_time_limit_on_two_ranks, str(tmp_path / "ddp"))
    assert zero["status"] == one["status"] == "completed"
    # The budget is spent at step 12; the ranks end at the agreement that sees it (at least every log interval).
    assert zero["step"] == one["step"] and 12 <= zero["step"] < 1_000_000
    assert (
        zero["message"]
        == one["message"]
        == (
            f"time limit of 2 min reached at step {zero['step']} of 1,000,000; "
            f"evaluated, tested and saved as at the end"
        )
    )
    record = json.loads((tmp_path / "ddp" / "run.json").read_text())
    assert record["status"] == "completed" and record["steps"] == zero["step"]
