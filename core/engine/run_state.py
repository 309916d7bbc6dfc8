"""A run's resumable state <-> the checkpoint dict (core.engine.checkpoints writes and loads it), and the
Trainer's checkpoints (Checkpointing). Everything is plain containers and tensors, so `weights_only` reads it.
Every rank builds the same initial model from `seed`, then draws its per-step randomness from `seed + rank`;
each rank's RNG states are saved (`rng_per_rank`), so a DDP resume continues them exactly.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from core.engine import checkpoints as ckpt
from core.engine.amp_health import RunFailed
from core.engine.distributed import PEER_LOST, DistContext, all_gather_bytes, dead_peers
from core.engine.early_stopping import STATE_KEY as TRACKER_KEY
from core.engine.events import CheckpointSaved
from core.engine.optimizers import StochasticRounding, regroup_one_group_state, state_misfit
from core.engine.run_folder import describe_os_error
from core.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from core.config import RunConfig
    from core.engine.due import Deadlines
    from core.engine.early_stopping import BestTracker
    from core.engine.events import Event
    from core.engine.precision import PrecisionPlan
    from core.engine.reporting import EventLog
    from core.tasks.base import TaskData


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


class Saved(NamedTuple):
    """The latest checkpoint.pt: the step it was saved at (every rank) and its path (rank 0, once written)."""

    step: int = -1
    path: str | None = None


@dataclass(slots=True)
class TrainState:
    """How far a run has come: the Trainer's own state, saved in every checkpoint and restored on resume."""

    step: int = 0
    epoch: int = 0
    skipped_steps: int = 0  # fp16 steps the GradScaler skipped
    last_loss: float | None = None  # of the latest log interval
    last_metrics: dict = field(default_factory=dict)  # the latest validation metrics
    saved: Saved = Saved()  # not in the checkpoint: a resumed run has saved nothing yet

    def state_dict(self) -> dict:
        metrics = {**self.last_metrics, "loss": self.last_loss}
        return {"step": self.step, "epoch": self.epoch, "metrics": metrics, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.epoch = int(state["step"]), int(state["epoch"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.last_metrics = {k: v for k, v in state["metrics"].items() if k != "loss"}


def check_resume_target(config, state: dict, name: str, total_steps: int | None = None) -> None:
    """Refuse (ConfigError) a resume whose end is already behind the checkpoint. A length in epochs counts
    min_steps: `total_steps` once the data is known, else only an epoch end past both is surely the end."""
    step, epoch = int(state.get("step", 0)), int(state.get("epoch", 0))
    if config.max_steps and step >= config.max_steps:
        raise ConfigError(
            "max_steps",
            f"checkpoint {name} is at step {step:,}, so max steps {config.max_steps:,} is "
            f"already reached: give a larger value to train on",
        )
    at_epoch_end = not (state.get("data_order") or {}).get("optimizer_step_in_epoch")
    ended = epoch >= config.epochs and step >= config.min_steps and at_epoch_end
    if not config.max_steps and (step >= total_steps if total_steps is not None else ended):
        least = f" (and at least min_steps {config.min_steps:,})" if config.min_steps else ""
        raise ConfigError(
            "epochs",
            f"checkpoint {name} is at epoch {epoch} (step {step:,}), so {config.epochs} "
            f"epochs{least} are already reached: give more epochs (or max steps) to train on",
        )


def resumed_config(config, state: dict | None, source: str) -> tuple:
    """(config, notes) of a run resuming checkpoint `state` (None: not resuming), refused when it is another
    task's. A task option this run leaves at `auto` keeps the value the checkpoint's run trained with."""
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
    """`config` (and `task`) with the `auto` task options named by what they chose for the data `info` describes
    (Task.settled_options), so that what the run records resumes the same way."""
    settled = task.settled_options(info)
    if not settled:
        return config
    task.opts.update(settled)
    return config.replace(task_options={**config.task_options, **settled})


def restore(
    state: dict, source: str, cfg, model, optimizer, scheduler, scaler, vocabulary: dict, own: bool = False
) -> list[str]:
    """Load a loaded checkpoint `state` into a set-up run's model (strict keys), optimizer, scheduler and scaler;
    CheckpointError names what does not fit. Returns the notes. `own`: the task chose the optimizer."""
    check_vocabulary(state.get("vocabulary") or {}, vocabulary, source)  # before shapes: clearer
    ckpt.load_model_state(model, state["model"], source)
    notes = (restore_own if own else restore_optimizer)(state, source, cfg, model, optimizer, scheduler)
    if scaler.is_enabled() and state["scaler"]:  # fp16 from fp16; prepare.resume_notes says what else means
        with _fits(source, "the GradScaler state"):
            scaler.load_state_dict(state["scaler"])
    return notes


@contextlib.contextmanager
def _fits(source: str, what: str):
    """A state torch refuses to load as a CheckpointError naming `what`."""
    try:
        yield
    except (ValueError, KeyError, RuntimeError, TypeError) as exc:
        raise CheckpointError(f"{source}: {what} does not fit this run: {exc}") from None


FRESH_STATE = "its state starts fresh; weights, step, schedule and RNG are resumed"


def restore_own(state: dict, source: str, cfg, model, optimizer, scheduler) -> list[str]:
    """The task's own optimizer and scheduler: their saved states when the class is the same, else fresh."""
    saved, name = state.get("optimizer_class"), type(optimizer).__name__
    if saved != name:
        was = saved or state["config"].get("optimizer")
        return [f"optimizer changed from {was} to the task's {name}: its state and schedule start fresh"]
    with _fits(source, "the optimizer state"):
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None and state.get("scheduler"):
            scheduler.load_state_dict(state["scheduler"])
    return []


def restore_optimizer(state: dict, source: str, cfg, model, optimizer, scheduler) -> list[str]:
    """The checkpoint's optimizer state into the run's, the schedule positioned. Another optimizer, or groups of
    other sizes, start a fresh state with a note; state that does not fit the model is a CheckpointError."""
    saved_kind, kind = state["config"].get("optimizer"), cfg.optimizer
    # This run's schedule settings in the optimizer's groups (OneCycleLR keeps max_lr etc. there); loading the
    # saved groups would bring back the old run's, so they are put back before the schedule is positioned.
    schedule_settings = [
        {key: group[key] for key in SCHEDULE_GROUP_KEYS if key in group} for group in optimizer.param_groups
    ]
    optimizer_state = regroup_one_group_state(state["optimizer"], model, optimizer)
    saved_pure = (state.get("precision") or {}).get("mode") == "bf16-pure"
    if saved_pure != isinstance(optimizer, StochasticRounding):
        # bf16-pure's optimizer <-> torch's, of one kind: the same state, each class's own settings added
        now = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
        groups = [mine | saved for mine, saved in zip(now, optimizer_state["param_groups"])]
        optimizer_state = {**optimizer_state, "param_groups": groups}
    saved_sizes = [len(group["params"]) for group in optimizer_state["param_groups"]]
    sizes = [len(group["params"]) for group in optimizer.param_groups]
    if state.get("optimizer_class"):  # the task chose it (configure_optimizers), this run the engine
        notes = [f"optimizer changed from the task's {state['optimizer_class']} to {kind}: {FRESH_STATE}"]
    elif saved_kind is not None and saved_kind != kind:
        notes = [f"optimizer changed from {saved_kind} to {kind}: {FRESH_STATE}"]
    elif saved_sizes != sizes:
        notes = [
            f"the optimizer's parameter groups changed ({_sizes(saved_sizes)} saved, {_sizes(sizes)} now): "
            f"{FRESH_STATE}"
        ]
    else:
        names = {id(p): n for n, p in model.named_parameters()}
        misfit = state_misfit(optimizer_state, optimizer, kind, names)
        if misfit:
            raise CheckpointError(f"{source}: the optimizer state does not fit this model: {misfit}")
        with _fits(source, "optimizer state"):
            optimizer.load_state_dict(optimizer_state)
        # (torch's load adds `differentiable` to the defaults of an optimizer that lacks it, not to its groups)
        keys = [key for key in optimizer.defaults if key != "differentiable"]
        lacking = [key for key in keys if any(key not in group for group in optimizer.param_groups)]
        if lacking:
            raise CheckpointError(
                f"{source}: the optimizer state does not fit this run: its parameter groups "
                f"lack {lacking[0]!r}, which {kind} needs"
            )
        notes = []
    for group, settings in zip(optimizer.param_groups, schedule_settings):
        group.update(settings)
    if scheduler is not None:  # the saved scheduler state is not needed: see follow_schedule
        notes += follow_schedule(scheduler, state["step"], cfg.schedule, state["config"])
    return notes


SCHEDULE_GROUP_KEYS = ("initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum")


def follow_schedule(scheduler, step: int, schedule: str, saved_config: dict) -> list[str]:
    """Put this run's learning-rate schedule at `step`. Every schedule here is a function of the step and this
    run's settings, so it is positioned rather than loaded: a resume that extends max_steps follows the longer
    curve, one that changes the schedule the new one; an unchanged run's LR is the same bit for bit."""
    import warnings

    position = min(step, getattr(scheduler, "total_steps", step))
    scheduler.last_epoch = position - 1
    with warnings.catch_warnings():  # "step() before optimizer.step()": this call only positions the schedule
        warnings.simplefilter("ignore", UserWarning)
        scheduler.step()
    saved_schedule = saved_config.get("schedule")
    if not saved_schedule or saved_schedule == schedule:
        return []
    return [
        f"schedule changed from {saved_schedule} to {schedule}: the learning rate follows the {schedule} schedule "
        f"from step {step:,}"
    ]


def _sizes(sizes: list[int]) -> str:
    return f"{len(sizes)} group{'s' if len(sizes) != 1 else ''} of {'+'.join(map(str, sizes))}"


def restore_rng(state: dict, dist: DistContext) -> list[str]:
    """Continue this rank's RNG streams from the checkpoint (a rank it has none for keeps its `seed + rank` ones)."""
    states = state.get("rng_per_rank")
    if not isinstance(states, list) or not states:
        states = [state["rng"]]
    problem = ckpt.restore_rng(states[dist.rank]) if dist.rank < len(states) else None
    if not problem:
        return []
    return [
        f"the checkpoint's random state is not usable ({problem}): the random streams (dropout, sampling) start "
        f"fresh from seed + rank"
    ]


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


class Checkpointing:
    """The Trainer's checkpoints (core.engine.trainer mixes it in): written as the last, a best or a lost peer's
    checkpoint, and put back on resume. The names below are what it uses."""

    cfg: RunConfig
    plan: PrecisionPlan
    state: TrainState
    dist: DistContext
    device: torch.device
    raw_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    data: TaskData
    batches: Any
    steps_per_epoch: int
    own_optimizer = False  # the task's configure_optimizers chose the optimizer (and scheduler)
    tracker: BestTracker | None = None  # best checkpoints and early stopping (see early_stopping)
    events: EventLog
    notes: list[str]
    resume_from: Path | None
    _deadlines: Deadlines
    _peers: list[tuple[str, int]]
    _emit: Callable[[Event], None]

    @property
    def out_dir(self) -> Path:
        """The run folder: RunConfig.out_dir, once setup has named (and rank 0 claimed) it."""
        return Path(self.cfg.out_dir)

    def _restore(self, resume_state: dict) -> None:
        """Put the run back as `resume_state` (the checkpoint at resume_from) left it."""
        parts = (self.cfg, self.raw_model, self.optimizer, self.scheduler, self.scaler, self.data.vocabulary)
        self.notes += restore(resume_state, str(self.resume_from), *parts, own=self.own_optimizer)
        self.state.load_state_dict(resume_state)
        self.notes += self.batches.resume_notes(self.state.step, self.steps_per_epoch)  # a stream restarts
        self.notes += restore_rng(resume_state, self.dist)
        if self.tracker is not None:
            note = self.tracker.load_state_dict(resume_state.get(TRACKER_KEY))
            self.notes.extend([note] if note else [])

    def save_checkpoint(self, path: Path | None = None, kind: str = "last", **best) -> str | None:
        """Write checkpoint.pt (or a best checkpoint at `path`) and emit CheckpointSaved: rank 0, with every rank's
        RNG states."""
        rng = gather_rng(self.dist, self.device)
        if not self.dist.is_main:
            if kind == "last":  # the ranks decide alike whether a step still needs a save (rank 0's: once written)
                self.state.saved = Saved(self.state.step)
            return None
        return self._write_checkpoint(rng, path, kind, **best)

    def _write_checkpoint(self, rng: list[dict], path: Path | None = None, kind: str = "last", **best) -> str:
        """Rank 0 writes checkpoint.pt (or a best checkpoint) atomically; an OS error ends the run (RunFailed)."""
        path = path or self.out_dir / ckpt.CHECKPOINT_FILE
        try:
            if self.events.removed() or not os.path.isdir(self.out_dir):
                raise RunFailed(
                    f"could not write {path}: the run folder {self.out_dir} was removed while the "
                    f"run was writing to it; {self._kept()}"
                )
            ckpt.save_checkpoint(path, self.state_dict(rng))
        except OSError as exc:
            raise RunFailed(f"could not write {path}: {describe_os_error(exc)}; {self._kept()}") from None
        if kind == "last":
            self._deadlines.saved()
            self.state.saved = Saved(self.state.step, str(path))
        self._emit(CheckpointSaved(step=self.state.step, path=str(path), kind=kind, **best))
        return str(path)

    def _kept(self) -> str:
        """What is left to resume from after a failed write."""
        saved = self.state.saved
        if saved.path and os.path.exists(saved.path):
            return f"the previous checkpoint (step {saved.step:,}) is kept"
        return "no checkpoint of this run had been saved yet"

    def _peer_failed(self) -> str:
        """A DDP peer went away: rank 0 saves its own state if it can (the replicas are identical after every
        completed step), and the message says which rank."""
        dead = dead_peers(self._peers, self.dist.rank)
        who = (
            f"rank {', '.join(map(str, dead))} of this {self.dist.world_size}-process run"
            if dead
            else f"another process of this {self.dist.world_size}-process run"
        )
        text = f"{who} {PEER_LOST} at step {self.state.step:,}; the run ended"
        if not self.dist.is_main:
            return f"{text} (rank 0 saves the checkpoint)"
        try:
            saved = self._write_checkpoint([ckpt.capture_rng()])  # no collective: this rank's RNG alone
        except Exception as exc:
            reason = str(exc) if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {exc}"
            return f"{text}. The state at step {self.state.step:,} could not be saved ({reason})"
        return f"{text}. Its state at step {self.state.step:,} is saved: resume from {saved}"

    def state_dict(self, rng: list[dict] | None = None) -> dict:
        """The checkpoint dict at the current step; `rng`: every rank's RNG states (this rank's by default)."""
        cfg, plan, state = self.cfg, self.plan, self.state
        rng = rng or [ckpt.capture_rng()]
        checkpoint = {
            "format_version": ckpt.FORMAT_VERSION,
            "task": cfg.task,
            "model": ckpt.unwrap_model(self.raw_model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict(),
            **state.state_dict(),
            # Each epoch's order is a pure function of (seed, epoch): this is all a resume needs to replay it.
            "data_order": {
                "seed": cfg.seed,
                "epoch": state.epoch,
                "optimizer_step_in_epoch": state.step % self.steps_per_epoch,
            },
            "data_info": self.data.info,
            "vocabulary": self.data.vocabulary,
            "rng": rng[0],
            "config": cfg.to_dict(),
            "precision": {"mode": plan.mode, "autocast_dtype": plan.compute_dtype_name, "scaler": plan.use_scaler},
            "device": str(self.device),  # what a resume elsewhere compares (core.engine.prepare.resume_notes)
            "versions": ckpt.library_versions(),
        }
        if self.own_optimizer:  # the task's (configure_optimizers): what a resume checks its state against
            checkpoint["optimizer_class"] = type(self.optimizer).__name__
        if self.tracker is not None:  # best checkpoints and early stopping (core.engine.early_stopping)
            checkpoint[TRACKER_KEY] = self.tracker.state_dict()
        if len(rng) > 1:
            checkpoint["rng_per_rank"] = rng
        return checkpoint
