"""A trainer's resumable state <-> the checkpoint dict (see core.engine.checkpoints for writing and safe loading).

Everything is plain containers and tensors, so `torch.load(weights_only=True)` reads it back: model
(unwrapped from DDP/compile), optimizer, scheduler, scaler, step, epoch, data order, RNG states, config,
precision, metrics and library versions; and the data's id vocabulary when the model's ids stand for the
data's own (a resume must bring the same ids). See docs/ARCHITECTURE.md.

Seeding: every rank builds the same initial model from `seed`, then draws its per-step randomness (dropout,
sampled negatives) from `seed + rank`; the batch order is EpochBatches' own function of (seed, epoch). Each
rank's RNG states are saved (`rng_per_rank`), so a DDP resume continues every rank's streams exactly.
"""

from __future__ import annotations

import io
import random

import numpy as np
import torch

from core.engine import checkpoints as ckpt
from core.engine.distributed import DistContext, all_gather_bytes
from core.engine.optimizers import regroup_one_group_state, state_misfit
from core.errors import CheckpointError, ConfigError


def seed_everything(seed: int) -> None:
    """Seed torch (every device), numpy and Python's random."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def gather_rng(dist: DistContext, device: torch.device) -> list[dict]:
    """Every rank's RNG states, in rank order. Under DDP a collective: every rank calls it, at the same step."""
    own = ckpt.capture_rng()
    if not dist.enabled:
        return [own]
    buffer = io.BytesIO()
    torch.save(own, buffer)
    gathered = all_gather_bytes(buffer.getvalue(), dist, device)
    return [torch.load(io.BytesIO(data), weights_only=True) for data in gathered]


def capture(trainer, rng: list[dict]) -> dict:
    """The checkpoint dict of a set-up Trainer at its current step; `rng`: every rank's (see gather_rng)."""
    state = {
        "format_version": ckpt.FORMAT_VERSION,
        "task": trainer.cfg.task,
        "model": ckpt.unwrap_model(trainer.raw_model).state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict() if trainer.scheduler is not None else None,
        "scaler": trainer.scaler.state_dict(),
        "step": trainer.step,
        "epoch": trainer.epoch,
        # Each epoch's order is a pure function of (seed, epoch): this is all a resume needs to replay it.
        "data_order": {
            "seed": trainer.cfg.seed,
            "epoch": trainer.epoch,
            "optimizer_step_in_epoch": trainer.step % trainer.steps_per_epoch,
        },
        "data_info": trainer.data.info,
        "vocabulary": trainer.data.vocabulary,
        "rng": rng[0],
        "config": trainer.cfg.to_dict(),
        "precision": {
            "mode": trainer.plan.mode,
            "autocast_dtype": trainer.plan.compute_dtype_name,
            "scaler": trainer.plan.use_scaler,
        },
        "metrics": {**trainer.last_metrics, "loss": trainer.last_loss},
        "skipped_steps": trainer.skipped_steps,
        "versions": ckpt.library_versions(),
    }
    tracker = getattr(trainer, "tracker", None)  # best checkpoints and early stopping (core.engine.early_stopping)
    if tracker is not None:
        state["best_tracker"] = tracker.state_dict()
    if len(rng) > 1:
        state["rng_per_rank"] = rng
    return state


def check_resume_target(config, state: dict, name: str) -> None:
    """Refuse a resume whose end is already behind the checkpoint (it would 'complete' without a step): a
    ConfigError naming max_steps or epochs, in every way a run starts (the CLI, the window's thread or process)."""
    step, epoch = int(state.get("step", 0)), int(state.get("epoch", 0))
    if config.max_steps and step >= config.max_steps:
        raise ConfigError(
            "max_steps",
            f"checkpoint {name} is at step {step:,}, so max steps {config.max_steps:,} is "
            f"already reached: give a larger value to train on",
        )
    if not config.max_steps and epoch >= config.epochs:
        raise ConfigError(
            "epochs",
            f"checkpoint {name} is at epoch {epoch} (step {step:,}), so {config.epochs} "
            f"epochs are already reached: give more epochs (or max steps) to train on",
        )


def resumed_config(config, state: dict | None, source: str) -> tuple:
    """(config, notes) of a run resuming checkpoint `state` (None: not resuming; `config` as it is): refused
    (CheckpointError) when the checkpoint is another task's. A task option this run leaves at `auto` keeps the
    value the checkpoint's run trained with when that names one (its saved config: load_checkpoint reads an
    option saved before its default changed as the default it had), so a resumed run trains as it did,
    whatever `auto` would choose today; the note says so."""
    if state is None:
        return config, []
    if state["task"] != config.task:
        raise CheckpointError(f"{source}: checkpoint is for task {state['task']!r}, this run is {config.task!r}")
    from core.tasks import option_values, saved_options

    current = option_values(config.task, config.task_options)
    saved = saved_options(config.task, state["config"].get("task_options") or {})
    kept = {k: v for k, v in saved.items() if current.get(k) == "auto" and v != "auto"}
    if not kept:
        return config, []
    said = ", ".join(f"{k}={v}" for k, v in kept.items())
    note = f"resuming {source}: task option {said} as its run trained (not auto, which chooses afresh)"
    return config.replace(task_options={**config.task_options, **kept}), [note]


def settled_config(config, task, info: dict):
    """`config` with the task options that `task` leaves to the data (Task.settled_options: an `auto`) named
    by what they chose for the data `info` describes, in `task` too: what the run's config.toml, run.json and
    checkpoints record, so that resuming it trains the same way."""
    settled = task.settled_options(info)
    if not settled:
        return config
    task.opts.update(settled)
    return config.replace(task_options={**config.task_options, **settled})


def restore(trainer, state: dict, source: str) -> None:
    """Load `state` (from checkpoints.load_checkpoint, so its structure is checked) into a set-up Trainer
    (strict model keys); CheckpointError names what does not fit. What a user should know (another
    optimizer, precision mode or process count, an unusable RNG state) goes to `trainer.notes`."""
    check_vocabulary(state.get("vocabulary") or {}, trainer.data.vocabulary, source)  # before shapes: clearer
    ckpt.load_model_state(trainer.raw_model, state["model"], source)
    trainer.notes.extend(restore_optimizer(trainer, state, source))
    if trainer.scaler.is_enabled() and state["scaler"]:  # fp16 from fp16; see precision_notes otherwise
        try:
            trainer.scaler.load_state_dict(state["scaler"])
        except (ValueError, KeyError, RuntimeError, TypeError) as exc:
            raise CheckpointError(f"{source}: the GradScaler state does not fit this run: {exc}") from None
    trainer.notes.extend(precision_notes(state, trainer.plan.mode, trainer.scaler))
    trainer.step = int(state["step"])
    trainer.epoch = int(state["epoch"])
    trainer.skipped_steps = int(state.get("skipped_steps", 0))
    trainer.last_metrics = {k: v for k, v in state["metrics"].items() if k != "loss"}
    trainer.notes.extend(trainer.batches.resume_notes(trainer.step, trainer.steps_per_epoch))  # a stream restarts
    trainer.notes.extend(restore_rng(state, trainer.dist))


FRESH_STATE = "its state starts fresh; weights, step, schedule and RNG are resumed"


def restore_optimizer(trainer, state: dict, source: str) -> list[str]:
    """The checkpoint's optimizer and scheduler state into the trainer's. Another optimizer than the
    checkpoint's (sgd <-> adam/adamw), or parameter groups of other sizes, start a fresh optimizer state
    with a note (the schedule is still resumed); state that does not fit the model is a CheckpointError."""
    saved_kind, kind = state["config"].get("optimizer"), trainer.cfg.optimizer
    # This run's schedule settings in the optimizer's groups (OneCycleLR keeps max_lr etc. there); loading the
    # saved groups would bring back the old run's, so they are put back before the schedule is positioned.
    schedule_settings = [
        {key: group[key] for key in SCHEDULE_GROUP_KEYS if key in group} for group in trainer.optimizer.param_groups
    ]
    optimizer_state, _ = regroup_one_group_state(
        state["optimizer"], state["scheduler"], trainer.raw_model, trainer.optimizer
    )
    saved_sizes = [len(group["params"]) for group in optimizer_state["param_groups"]]
    sizes = [len(group["params"]) for group in trainer.optimizer.param_groups]
    if saved_kind is not None and saved_kind != kind:
        notes = [f"optimizer changed from {saved_kind} to {kind}: {FRESH_STATE}"]
    elif saved_sizes != sizes:
        notes = [
            f"the optimizer's parameter groups changed ({_sizes(saved_sizes)} saved, {_sizes(sizes)} now): "
            f"{FRESH_STATE}"
        ]
    else:
        names = {id(p): n for n, p in trainer.raw_model.named_parameters()}
        misfit = state_misfit(optimizer_state, trainer.optimizer, kind, names)
        if misfit:
            raise CheckpointError(f"{source}: the optimizer state does not fit this model: {misfit}")
        try:
            trainer.optimizer.load_state_dict(optimizer_state)
        except (ValueError, KeyError, RuntimeError, TypeError) as exc:
            raise CheckpointError(f"{source}: optimizer state does not fit this run: {exc}") from None
        lacking = [
            key
            for key in trainer.optimizer.defaults
            if any(key not in group for group in trainer.optimizer.param_groups)
        ]
        if lacking:
            raise CheckpointError(
                f"{source}: the optimizer state does not fit this run: its parameter groups "
                f"lack {lacking[0]!r}, which {kind} needs"
            )
        notes = []
    for group, settings in zip(trainer.optimizer.param_groups, schedule_settings):
        group.update(settings)
    if trainer.scheduler is not None:  # the saved scheduler state is not needed: see follow_schedule
        notes += follow_schedule(trainer, state["step"], state["config"])
    return notes


SCHEDULE_GROUP_KEYS = ("initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum")


def follow_schedule(trainer, step: int, saved_config: dict) -> list[str]:
    """Put this run's learning-rate schedule at `step` (the scheduler is stepped once per optimizer step).

    Every schedule here (cosine with warm-up, one-cycle) is a function of the step and this run's settings
    (lr, warm-up, total steps), so it is positioned rather than taken from the checkpoint: a resume that extends
    max_steps follows the longer curve (instead of failing past the old end) and one that changes the schedule
    follows the new one. For an unchanged run the LR is the same as without the interruption, bit for bit.
    """
    import warnings

    scheduler = trainer.scheduler
    position = min(step, getattr(scheduler, "total_steps", step))
    scheduler.last_epoch = position - 1
    with warnings.catch_warnings():  # "step() before optimizer.step()": this call only positions the schedule
        warnings.simplefilter("ignore", UserWarning)
        scheduler.step()
    notes = []
    saved_schedule, schedule = saved_config.get("schedule"), trainer.cfg.schedule
    if saved_schedule and saved_schedule != schedule:
        notes.append(
            f"schedule changed from {saved_schedule} to {schedule}: the learning rate follows the "
            f"{schedule} schedule from step {step:,}"
        )
    return notes


def _sizes(sizes: list[int]) -> str:
    return f"{len(sizes)} group{'s' if len(sizes) != 1 else ''} of {'+'.join(map(str, sizes))}"


def _a(mode: str) -> str:
    return f"an {mode}" if mode.startswith("f") else f"a {mode}"  # 'an fp16', 'a bf16'


def precision_notes(state: dict, mode: str, scaler: torch.amp.GradScaler) -> list[str]:
    """What a resume in another precision mode means: an fp16 checkpoint's GradScaler state is not used in
    fp32/bf16, and an fp16 run from an fp32/bf16 checkpoint starts a fresh scaler."""
    saved = state["scaler"]
    saved_mode = (state.get("precision") or {}).get("mode") or ("fp16" if saved else "another mode's")
    if saved_mode == mode:
        return []
    if saved and not scaler.is_enabled():
        return [f"resumed {_a(saved_mode)} checkpoint in {mode}: its GradScaler state is not used"]
    if scaler.is_enabled() and not saved:
        fresh = f"the GradScaler starts fresh (loss scale {scaler.get_scale():g})"
        return [f"resumed {_a(saved_mode)} checkpoint in {mode}: {fresh}"]
    return [f"resumed {_a(saved_mode)} checkpoint in {mode}"]


def restore_rng(state: dict, dist: DistContext) -> list[str]:
    """Continue this rank's RNG streams from the checkpoint. On another number of processes than the
    checkpoint's, the ranks it has states for continue theirs and the others keep their fresh `seed + rank`
    streams (and a note says so)."""
    states = state.get("rng_per_rank")
    if not isinstance(states, list) or not states:
        states = [state["rng"]]
    notes = []
    if dist.rank < len(states):
        problem = ckpt.restore_rng(states[dist.rank])
        if problem:
            notes.append(
                f"the checkpoint's random state is not usable ({problem}): the random streams "
                f"(dropout, sampling) start fresh from seed + rank"
            )
    saved, now = len(states), dist.world_size
    if saved == now:
        return notes
    runs = f"resumed a checkpoint of {saved} process{'es' if saved > 1 else ''} on {now}"
    if saved > now:
        return notes + [f"{runs}: the random streams (dropout, sampling) of {_ranks(now, saved - 1)} are not used"]
    fresh = _ranks(saved, now - 1)
    return notes + [f"{runs}: fresh random streams (dropout, sampling) are seeded for {fresh} from seed + rank"]


def _ranks(first: int, last: int) -> str:
    return f"rank {first}" if first == last else f"ranks {first} to {last}"


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
            raise CheckpointError(
                f"{source}: the checkpoint's model was not trained on this data's {name}s "
                f"(synthetic data, or another file); its ids would mean other items"
            )
    for name, ids in saved.items():
        if name not in current:
            raise CheckpointError(
                f"{source}: the checkpoint was trained on a data file's {name}s; "
                f"resume it with --data pointing at that data"
            )
        if not same_ids(ids, current[name]):
            raise CheckpointError(
                f"{source}: this data's {name}s ({len(current[name])}) are not the ones the "
                f"checkpoint was trained on ({len(ids)}), in the same order: the model's ids "
                f"would mean other items"
            )
