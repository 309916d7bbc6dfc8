"""Best checkpoints and early stopping: a `BestTracker` gets every validation value of the monitored metric; a
value improves when it beats the best by more than `min_delta` (NaN/inf never do). It keeps the `keep` best
(`best.pt`, or `best-step<N>.pt` each), ends the run after `patience` evaluations without an improvement, and
at once past the `divergence` threshold. Its state is saved in every checkpoint so a resume goes on counting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import ConfigError

STATE_KEY = "best_tracker"
BEST_FILE = "best.pt"


# A metric whose name holds one of these is better lower (monitor_mode auto); any other, higher.
LOWER_IS_BETTER_WORDS = ("loss", "error", "mse", "mae", "perplexity")


def resolve_mode(metric: str, mode: str) -> str:
    """'max' or 'min': auto is min for names of losses and errors (LOWER_IS_BETTER_WORDS), else max."""
    if mode in ("max", "min"):
        return mode
    name = metric.lower()
    return "min" if any(word in name for word in LOWER_IS_BETTER_WORDS) else "max"


def format_value(value: float) -> str:
    return f"{value:.4g}"


@dataclass
class Update:
    """What one evaluation changed: `improved` (for patience), `rank` (0-based place among the kept best, or
    None), `file` to write and `dropped` files to remove."""

    improved: bool
    rank: int | None = None
    file: str | None = None
    dropped: list[str] = field(default_factory=list)


@dataclass
class BestTracker:
    metric: str
    mode: str  # "max" | "min"
    min_delta: float = 0.0
    keep: int = 1
    patience: int = 0
    divergence: float = 0.0  # a value worse than this (or nan/inf) stops the run at once; 0 = off
    best: float | None = None
    best_step: int = -1
    since_best: int = 0  # evaluations since the latest improvement (or since the start)
    ranked: list[dict] = field(default_factory=list)  # {"value", "step", "file"}, best first, at most `keep`
    diverged: tuple[float, int] | None = None  # (value, step) of the evaluation past the divergence threshold
    last: float | None = None  # the latest evaluation's value (what the best is compared with at the end)

    def better(self, value: float, than: float, margin: float = 0.0) -> bool:
        return value > than + margin if self.mode == "max" else value < than - margin

    def update(self, value: float | None, step: int) -> Update:
        """Count one evaluation's value of the monitored metric at `step`."""
        number = float(value) if isinstance(value, (int, float)) else math.nan
        finite, self.last = math.isfinite(number), number
        if self.divergence and self.diverged is None and (not finite or self.better(self.divergence, number)):
            self.diverged = (number, step)
        improved = finite and (self.best is None or self.better(number, self.best, self.min_delta))
        if improved:
            self.best, self.best_step, self.since_best = number, step, 0
        else:
            self.since_best += 1
        if not finite or self.keep <= 0:
            return Update(improved)
        rank = 0 if improved else None
        if rank is None:
            for place in range(1, self.keep):
                if place >= len(self.ranked) or self.better(number, self.ranked[place]["value"]):
                    rank = place
                    break
        if rank is None:
            return Update(improved)
        name = BEST_FILE if self.keep == 1 else f"best-step{step}.pt"
        entry = {"value": number, "step": step, "file": name}
        kept = [e for e in self.ranked if e["step"] != step]  # the same step evaluated twice: the newer counts
        kept.insert(min(rank, len(kept)), entry)
        dropped = [e["file"] for e in kept[self.keep :] if e["file"] != name]
        self.ranked = kept[: self.keep]
        return Update(improved, rank, name, dropped)

    @property
    def should_stop(self) -> bool:
        patience_out = self.patience > 0 and self.best is not None and self.since_best >= self.patience
        return self.diverged is not None or patience_out

    def stop_message(self, split: str = "val") -> str:
        """e.g. 'no improvement in val ndcg@10_full_filtered for 5 evaluations; best 0.412 at step 3,000', or
        'val loss 12.3 is worse than the divergence threshold 10 at step 300; best 0.41 at step 100'."""
        best = (
            f"best {format_value(self.best)} at step {self.best_step:,}"
            if self.best is not None
            else "no finite value before it"
        )
        if self.diverged is not None:
            value, step = self.diverged
            earlier = "" if self.best_step == step else f"; {best}"  # the first evaluation diverged: no best before
            if math.isfinite(value):
                return (
                    f"{split} {self.metric} {format_value(value)} is worse than the divergence threshold "
                    f"{format_value(self.divergence)} at step {step:,}{earlier}"
                )
            return f"{split} {self.metric} is {value} (not a finite number) at step {step:,}{earlier}"
        count = f"{self.since_best} evaluation{'s' if self.since_best != 1 else ''}"
        return f"no improvement in {split} {self.metric} for {count}; {best}"

    # ----------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict:
        kept = {key: getattr(self, key) for key in ("metric", "mode", "best", "best_step", "since_best", "last")}
        return {**kept, "ranked": [dict(e) for e in self.ranked]}

    def load_state_dict(self, state) -> str | None:
        """Continue from a checkpoint's tracker state (None: start fresh, silently); a note when it is not used."""
        if state is None:
            return None
        problem = _state_problem(state)
        if problem:
            return f"the checkpoint's best-checkpoint state is not usable ({problem}): best tracking starts fresh"
        if state["metric"] != self.metric or state["mode"] != self.mode:
            return (
                f"the checkpoint tracked the best {state['metric']} ({state['mode']}); this run monitors "
                f"{self.metric} ({self.mode}): best tracking starts fresh"
            )
        self.best = None if state["best"] is None else float(state["best"])
        self.best_step, self.since_best = int(state["best_step"]), int(state["since_best"])
        ranked = sorted(state["ranked"], key=lambda e: e["value"], reverse=self.mode == "max")
        if self.keep == 1:
            ranked = [e for e in ranked if e["file"] == BEST_FILE]
        elif self.keep > 1:
            ranked = [e for e in ranked if e["file"] != BEST_FILE]
        self.ranked = ranked[: max(self.keep, 0)]
        last = state.get("last")
        self.last = float(last) if isinstance(last, (int, float)) else None
        return None


def _state_problem(state) -> str | None:
    if not isinstance(state, dict):
        return "not a dict"
    for key, kind in (("metric", str), ("mode", str), ("best_step", int), ("since_best", int), ("ranked", list)):
        if not isinstance(state.get(key), kind):
            return f"{key} is missing or not a {kind.__name__}"
    best = state.get("best")
    if best is not None and not (isinstance(best, (int, float)) and math.isfinite(best)):
        return "best is not a finite number"
    for entry in state["ranked"]:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("file"), str)
            and isinstance(entry.get("step"), int)
            and isinstance(entry.get("value"), (int, float))
            and math.isfinite(entry["value"])
            and "/" not in entry["file"]
            and "\\" not in entry["file"]
            and entry["file"].endswith(".pt")
        ):
            return "ranked holds an entry that is not a value, step and file name"
    return None


def tracker_for(cfg, primary_metric: str, metric_names: Callable[[], list[str]]) -> BestTracker | None:
    """The tracker of a run's monitored metric, when best checkpoints or early stopping are on, else None. A
    metric the user named must be one of `metric_names()` (what the task reports on a few validation rows); a
    model that cannot even evaluate is left to fail in the run, where the failure is diagnosed."""
    if cfg.keep_best == 0 and cfg.early_stop_patience == 0 and cfg.early_stop_divergence == 0:
        return None
    metric = cfg.monitor or primary_metric
    try:
        names = metric_names() if cfg.monitor else [metric]
    except ConfigError:
        raise
    except Exception:
        names = [metric]
    if metric not in names:
        what = f"no validation metric {metric!r}" if cfg.monitor else f"no {metric!r} (its primary metric)"
        raise ConfigError("monitor", f"task {cfg.task} reports {what}; its validation metrics: {', '.join(names)}")
    return BestTracker(
        metric,
        resolve_mode(metric, cfg.monitor_mode),
        cfg.early_stop_min_delta,
        cfg.keep_best,
        cfg.early_stop_patience,
        cfg.early_stop_divergence,
    )
