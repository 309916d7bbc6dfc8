"""A trainer's resumable state <-> the checkpoint dict (see core.engine.checkpoints for writing and safe loading).

Everything is plain containers and tensors, so `torch.load(weights_only=True)` reads it back: model
(unwrapped from DDP/compile), optimizer, scheduler, scaler, step, epoch, data order, RNG states, config,
precision, metrics and library versions; and the data's id vocabulary when the model's ids stand for the
data's own (a resume must bring the same ids).
"""

from __future__ import annotations

import torch

from core.engine import checkpoints as ckpt
from core.errors import CheckpointError


def capture(trainer) -> dict:
    """The checkpoint dict of a set-up Trainer at its current step."""
    return {
        "format_version": ckpt.FORMAT_VERSION,
        "task": trainer.cfg.task,
        "model": ckpt.unwrap_model(trainer.raw_model).state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict() if trainer.scheduler is not None else None,
        "scaler": trainer.scaler.state_dict(),
        "step": trainer.step,
        "epoch": trainer.epoch,
        # Each epoch's order is a pure function of (seed, epoch): this is all a resume needs to replay it.
        "data_order": {"seed": trainer.cfg.seed, "epoch": trainer.epoch,
                       "optimizer_step_in_epoch": trainer.step % trainer.steps_per_epoch},
        "data_info": trainer.data.info,
        "vocabulary": trainer.data.vocabulary,
        "rng": ckpt.capture_rng(),
        "config": trainer.cfg.to_dict(),
        "precision": {"mode": trainer.plan.mode, "autocast_dtype": trainer.plan.compute_dtype_name,
                      "scaler": trainer.plan.use_scaler},
        "metrics": {**trainer.last_metrics, "loss": trainer.last_loss},
        "skipped_steps": trainer.skipped_steps,
        "versions": ckpt.library_versions(),
    }


def restore(trainer, state: dict, source: str) -> None:
    """Load `state` into a set-up Trainer (strict model keys); CheckpointError names what does not fit."""
    check_vocabulary(state.get("vocabulary") or {}, trainer.data.vocabulary, source)  # before shapes: clearer
    ckpt.load_model_state(trainer.raw_model, state["model"], source)
    try:
        trainer.optimizer.load_state_dict(state["optimizer"])
        if trainer.scheduler is not None and state["scheduler"] is not None:
            trainer.scheduler.load_state_dict(state["scheduler"])
        trainer.scaler.load_state_dict(state["scaler"])
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"{source}: optimizer/scheduler state does not fit this run: {exc}") from None
    trainer.step = int(state["step"])
    trainer.epoch = int(state["epoch"])
    trainer.skipped_steps = int(state.get("skipped_steps", 0))
    trainer.last_metrics = {k: v for k, v in state["metrics"].items() if k != "loss"}
    ckpt.restore_rng(state["rng"])


def same_ids(a, b) -> bool:
    """Same ids in the same order; integer ids (a tensor) and their text ("7") count as the same."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    as_text = [str(x) for x in (a.tolist() if isinstance(a, torch.Tensor) else a)]
    return len(a) == len(b) and as_text == [str(x) for x in (b.tolist() if isinstance(b, torch.Tensor) else b)]


def check_vocabulary(saved: dict, current: dict, source: str) -> None:
    """A resumed model's ids must mean the same items: the data's id order has to match the checkpoint's."""
    for name in current:
        if name not in saved:
            raise CheckpointError(f"{source}: the checkpoint's model was not trained on this data's {name}s "
                                  f"(synthetic data, or another file); its ids would mean other items")
    for name, ids in saved.items():
        if name not in current:
            raise CheckpointError(f"{source}: the checkpoint was trained on a data file's {name}s; "
                                  f"resume it with --data pointing at that data")
        if not same_ids(ids, current[name]):
            raise CheckpointError(f"{source}: this data's {name}s ({len(current[name])}) are not the ones the "
                                  f"checkpoint was trained on ({len(ids)}), in the same order: the model's ids "
                                  f"would mean other items")
