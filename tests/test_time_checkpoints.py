"""Checkpoints by wall time (checkpoint_minutes): a kill loses at most that much training, in one process and
under DDP, where rank 0's clock decides and the ranks agree without a collective of their own."""

from __future__ import annotations

import pytest

from core.config import FIELD_SPECS, RunConfig
from core.engine import trainer as trainer_module
from core.engine.events import CheckpointSaved
from core.engine.trainer import Trainer
from core.errors import ConfigError


def clock_of_steps(monkeypatch, seconds_per_step: float) -> dict:
    """The trainer's clock reads `seconds_per_step` x the current step (of the trainer in `holder['t']`)."""
    holder: dict = {}
    monkeypatch.setattr(
        trainer_module, "monotonic", lambda: holder["t"].state.step * seconds_per_step if "t" in holder else 0.0
    )
    return holder


def steps_saved(recorder) -> list[int]:
    return [e.step for e in recorder.of(CheckpointSaved) if e.kind == "last"]  # not the best-metric saves


def test_a_checkpoint_is_written_each_time_the_minutes_pass(tiny_config, recorder, monkeypatch):
    holder = clock_of_steps(monkeypatch, 10.0)  # a step "takes" 10 s: one minute is 6 steps
    trainer = Trainer(tiny_config(max_steps=20, checkpoint_minutes=1, checkpoint_interval=0), sink=recorder)
    holder["t"] = trainer
    ended = trainer.run()
    assert ended.status == "completed"
    assert steps_saved(recorder) == [6, 12, 18, 20]  # every minute, then the final one


def test_the_minutes_count_from_the_last_checkpoint_of_any_kind(tiny_config, recorder, monkeypatch):
    holder = clock_of_steps(monkeypatch, 10.0)
    trainer = Trainer(tiny_config(max_steps=20, checkpoint_minutes=1, checkpoint_interval=4), sink=recorder)
    holder["t"] = trainer
    trainer.run()
    # The step checkpoints at 4, 8, 12, 16 keep the minute from running out (it would at 6 steps).
    assert steps_saved(recorder) == [4, 8, 12, 16, 20]


def test_zero_minutes_turns_timed_checkpoints_off(tiny_config, recorder, monkeypatch):
    holder = clock_of_steps(monkeypatch, 1e6)
    trainer = Trainer(tiny_config(max_steps=10, checkpoint_minutes=0), sink=recorder)
    holder["t"] = trainer
    trainer.run()
    assert steps_saved(recorder) == [10]


def test_checkpoint_minutes_is_a_validated_setting_with_help():
    spec = FIELD_SPECS["checkpoint_minutes"]
    assert spec.minimum == 0 and spec.maximum == 10_080 and "0 = off" in spec.help
    assert RunConfig().checkpoint_minutes == 10.0
    with pytest.raises(ConfigError, match="checkpoint_minutes: -1.0 is out of range"):
        RunConfig(checkpoint_minutes=-1.0).validate()
    assert RunConfig.from_dict({"checkpoint_minutes": 2}).checkpoint_minutes == 2.0


def _timed_checkpoints_on_two_ranks(rank: int, out: str) -> dict:
    from core.engine import trainer as module
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer

    saved = []
    holder = {}
    # Only rank 0's clock runs (a step is 10 s): rank 1's says no time passed, so if it decided alone it would
    # never join the checkpoint's collective (gathering RNG states) and the run would hang.
    module.monotonic = (lambda: holder["t"].state.step * 10.0 if "t" in holder else 0.0) if rank == 0 else (lambda: 0.0)
    trainer = Trainer(
        RunConfig.for_task(
            "tiny",
            device="cpu",
            precision="fp32",
            batch_size=16,
            max_steps=20,
            log_interval=5,
            checkpoint_minutes=1,
            threads=1,
            out_dir=out,
        ),
        sink=lambda e: saved.append(e.step) if isinstance(e, CheckpointSaved) else None,
        dist_ctx=DistContext.from_env(),
    )
    holder["t"] = trainer
    ended = trainer.run()
    return {"status": ended.status, "saved": saved}


def test_ddp_ranks_agree_on_timed_checkpoints(tmp_path):
    from tests.test_distributed import run_ranks

    zero, one = run_ranks(_timed_checkpoints_on_two_ranks, str(tmp_path / "run"))
    assert zero["status"] == one["status"] == "completed"
    saved = zero["saved"]
    # Agreements come at least every log interval and about twice a second; each one past the minute saves.
    assert len(saved) >= 2 and saved[-1] == 20 and all(s >= 6 for s in saved), saved
    assert one["saved"] == []  # rank 0 writes
