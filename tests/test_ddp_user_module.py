"""Under DDP the task's loss and evaluation are handed the user's own module (its methods and attributes), and the
loss still runs inside DDP's forward, so the gradients are averaged: both ranks end with the same weights."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TASK = f"{Path(__file__).parent / 'fixtures' / 'user_tasks' / 'custom_method_task.py'}:CustomMethodTask"


def _train_on_each_rank(rank: int, out: str) -> dict:
    from core.config import RunConfig
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer
    from core.tasks import add_task

    add_task(TASK)
    config = RunConfig.for_task(
        "custom_method", device="cpu", precision="fp32", max_steps=6, log_interval=2, threads=1, out_dir=out
    )
    trainer = Trainer(config, dist_ctx=DistContext.from_env())
    ended = trainer.run()
    params = [p.detach().numpy().copy() for p in trainer.raw_model.parameters()]
    return {"status": ended.status, "message": ended.message, "params": params, "metrics": ended.metrics}


def test_a_loss_calling_the_models_own_method_trains_under_ddp_with_synchronised_gradients(tmp_path):
    from tests.test_distributed import run_ranks

    zero, one = run_ranks(_train_on_each_rank, str(tmp_path / "run"))
    assert zero["status"] == one["status"] == "completed", (zero["message"], one["message"])
    assert "rmse" in zero["metrics"]  # evaluation called the method too
    # Each rank trained on its own half of every batch: only averaged gradients keep the replicas equal.
    assert all((a == b).all() for a, b in zip(zero["params"], one["params"], strict=True))
