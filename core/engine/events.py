"""Events the trainer emits, as dataclasses of plain values (frozen, but for the per-step StepMetrics); they come
at the log interval, never every step, and the trainer knows nothing of who listens."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunStarted:
    task: str
    device: str
    device_name: str
    precision: str
    autocast_dtype: str
    param_dtype: str
    scaler: bool
    param_count: int
    total_steps: int
    steps_per_epoch: int
    start_step: int
    config: dict
    ceiling: dict = field(default_factory=dict)  # best metric values the planted structure allows
    baseline: dict = field(default_factory=dict)  # trivial predictor's metrics (popularity, majority...)
    tokens_key: str | None = None  # set when the task also counts tokens (sequence models)
    notes: list = field(default_factory=list)  # what the user should know as the run starts (e.g. its folder)
    restart: dict = field(default_factory=dict)  # a restart's count, step, reason (core.cli.elastic); {} if none
    started_at: float | None = None  # time.time() as it started; None in metrics.jsonl files written before it


@dataclass(slots=True)  # not frozen, unlike the others: one is made at every logged step, and a frozen
class StepMetrics:  # dataclass's __init__ costs about 3x; treat it as read-only all the same
    step: int
    epoch: int
    loss: float
    lr: float
    samples_per_second: float
    grad_scale: float | None
    grad_norm: float | None  # total gradient norm before clipping of this step; None when not measured (without
    # clipping or fp16, a logged step measures it at most every 0.1 s: core.engine.trainer.NORM_SECONDS)
    skipped_steps: int  # cumulative: optimizer steps GradScaler skipped since the run began (resumes included)
    memory_bytes: int | None
    elapsed_seconds: float
    nonfinite_source: str | None = None  # fp16: first module (or 'loss') that produced inf/NaN this interval
    tokens_per_second: float | None = None  # non-padding tokens, for tasks with a tokens_key


@dataclass(frozen=True)
class EvalMetrics:
    step: int
    epoch: int
    split: str
    metrics: dict


@dataclass(frozen=True)
class Samples:
    """A few of the task's answers at a validation evaluation (Task.samples): rows of {input, answer} as short
    texts, the same inputs at every step."""

    step: int
    rows: list = field(default_factory=list)
    note: str = ""  # why there are no rows, once: the hook failed, and the run shows no more samples


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    path: str
    kind: str = "last"  # "last": checkpoint.pt, the run's latest state; "best": a best checkpoint
    metric: str | None = None  # best: the monitored validation metric and its value at `step`
    value: float | None = None
    rank: int | None = None  # best: 1 = the best so far, k = the k-th best kept (keep_best > 1)


@dataclass(frozen=True)
class RunPaused:
    """The run has finished its step and is now waiting (sent when the pause takes effect, not when asked)."""

    step: int


@dataclass(frozen=True)
class RunResumed:
    """The run goes on after a pause; `paused_seconds` were left out of throughput and ETA."""

    step: int
    paused_seconds: float


@dataclass(frozen=True)
class ControlAcknowledged:
    """A control request read from the run folder (core.engine.folder_control): `request` is its file name.
    `accepted`: its RunPaused, RunResumed or RunEnded follows; otherwise `note` says why nothing follows."""

    seq: int
    verb: str
    request: str
    accepted: bool
    note: str = ""


@dataclass(frozen=True)
class RunEnded:
    status: str  # completed | stopped | failed
    message: str
    step: int
    epoch: int
    final_loss: float | None
    metrics: dict
    checkpoint: str | None
    samples_per_second: float | None
    elapsed_seconds: float = 0.0
    skipped_steps: int = 0
    test_metrics: dict = field(default_factory=dict)  # held-out test split, evaluated once at completion
    best_test_metrics: dict = field(default_factory=dict)  # the best checkpoint's, beside the last weights' above
    best_step: int | None = None  # the best checkpoint's step, when the summary compares it with the last weights
    checkpoint_advice: str = ""  # which of the two to use, and why (core.engine.small_validation)
    advised_checkpoint: str = ""  # the file the advice names: what commands take from the run by default
    details: str = ""  # traceback or diagnosis for a details dialog; empty when there is nothing more
    fixes: list = field(default_factory=list)  # a divergence's re-runs (core.engine.amp_health.nonfinite_fixes)


Event = (
    RunStarted
    | StepMetrics
    | EvalMetrics
    | Samples
    | CheckpointSaved
    | RunPaused
    | RunResumed
    | ControlAcknowledged
    | RunEnded
)


_FIELDS: dict[type, tuple[str, ...]] = {}
_PLAIN = (int, float, str, bool, type(None))


def event_to_dict(event: Event) -> dict:
    """JSON-ready dict with the event's type name under 'event' (asdict's deep copy only for dicts or lists)."""
    cls = type(event)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    record = {"event": cls.__name__}
    for name in names:
        value = getattr(event, name)
        if type(value) not in _PLAIN:
            return {"event": cls.__name__, **dataclasses.asdict(event)}
        record[name] = value
    return record


EVENT_TYPES = {cls.__name__: cls for cls in typing.get_args(Event)}


def event_from_dict(data: dict) -> Event:
    """Inverse of `event_to_dict` (used to read a run streamed as JSON lines from another process)."""
    data = dict(data)
    cls = EVENT_TYPES[data.pop("event")]
    return cls(**data)


def event_or_none(data: dict) -> Event | None:
    """`event_from_dict`, or None for a record that is no event this version knows."""
    try:
        return event_from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None
