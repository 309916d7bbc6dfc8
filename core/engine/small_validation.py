"""Whether the validation split is large enough to choose the best checkpoint by, and the best and the last
weights compared on the test split at the end of a run. The monitored metric is a mean over the split's units,
so its standard error is about sigma / sqrt(n); above TARGET_SE the "best" checkpoint is largely the luckiest
evaluation. The run says so as it starts, and its summary says which weights to use (never by the test figures).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from core.engine import checkpoints as ckpt
from core.engine.distributed import broadcast_ints
from core.errors import CheckpointError

TARGET_SE = 0.5 / math.sqrt(200)  # below what late checkpoints differ by
SPREAD = {"rows": 0.5, "users": 0.5, "queries": 0.25}  # the metric's per-unit sigma (a value in [0, 1])


def units_needed(unit: str) -> int:
    """Validation units for the metric's standard error to be at most TARGET_SE: 200 rows or users, 50 queries."""
    return round((SPREAD.get(unit, 0.5) / TARGET_SE) ** 2)


@dataclass(frozen=True)
class ValidationSize:
    count: int
    unit: str  # rows | queries | users

    @property
    def needed(self) -> int:
        return units_needed(self.unit)

    @property
    def too_small(self) -> bool:
        return self.count < self.needed

    @property
    def error(self) -> float:
        """The monitored metric's standard error on this many units."""
        return SPREAD.get(self.unit, 0.5) / math.sqrt(max(self.count, 1))

    def describe(self) -> str:
        return f"{self.count:,} validation {self.unit}"


def validation_size(task, val: dict[str, torch.Tensor]) -> ValidationSize:
    return ValidationSize(int(task.validation_units(val)), task.validation_unit)


def start_notes(task, data, tracker) -> list[str]:
    """The note a run starts with when its validation split is too small to choose the best checkpoint (or when
    to stop early) by; [] otherwise."""
    chosen = [
        what
        for what, on in (
            ("the best checkpoint", tracker and tracker.keep > 0),
            ("when to stop early", tracker and tracker.patience > 0),
        )
        if on
    ]
    size = validation_size(task, data.val)
    if not chosen or not size.too_small:
        return []
    then = (
        "the summary compares the best and the last weights on the test split"
        if data.test
        else "prefer the last weights (checkpoint.pt), or give a larger validation split"
    )
    note = (
        f"{size.describe()} are too few to choose {' and '.join(chosen)} by val {tracker.metric}: its standard "
        f"error there is about {size.error:.2g}, as much as checkpoints differ by ({size.needed:,} or more keep it "
        f"under {TARGET_SE:.2g}), so the choice may follow noise rather than quality; {then}"
    )
    return [note]


@dataclass(frozen=True)
class BestAndLast:
    """The best checkpoint's step and test metrics ({} when there are none), and which weights to use: `advice`
    says why, `use` names the file."""

    step: int | None
    metrics: dict
    advice: str
    use: str


def best_and_last(
    tracker,
    size: ValidationSize,
    step: int,
    test_metrics: dict,
    out_dir: Path,
    test_of: Callable[[Path], dict] | None,
    last_value: float | None = None,
) -> BestAndLast | None:
    """At the end of a completed run at `step`: the best checkpoint's test metrics (`test_of` its path, None
    without a test split) beside the last weights' (`test_metrics`; `last_value` their val metric) and the advice;
    None when there is nothing to compare."""
    if not tracker.ranked:
        return None
    best = tracker.ranked[0]
    if test_of is None and not size.too_small:
        return None  # nothing to report beside the best checkpoint itself
    if best["step"] == step:
        return BestAndLast(
            best["step"],
            dict(test_metrics),
            f"the best checkpoint ({best['file']}) is the last weights (step {step:,})",
            best["file"],
        )
    metrics = test_of(out_dir / best["file"]) if test_of is not None else {}
    chosen = f"{best['file']}, step {best['step']:,}, val {tracker.metric} {best['value']:.4g}"
    if size.too_small:
        advice = (
            f"use the last weights (checkpoint.pt, step {step:,}): {size.describe()} are too few to "
            f"choose a checkpoint by {tracker.metric} ({size.needed:,} or more), so the best one ({chosen}) "
            f"may be the luckiest evaluation rather than the best model"
        )
    else:
        advice = f"use the best checkpoint ({chosen}): chosen on {size.describe()}"
        se = size.error
        if last_value is not None and math.isfinite(last_value) and abs(best["value"] - last_value) <= 2 * se:
            advice += (
                f"; it beats the last weights' {last_value:.4g} by less than the metric's noise (±{2 * se:.2g}): "
                "either will do"
            )
    if test_of is not None and not metrics:
        advice += f"; {best['file']} could not be read for its test metrics"
    return BestAndLast(best["step"], metrics, advice, ckpt.CHECKPOINT_FILE if size.too_small else best["file"])


def test_weights(path: Path, model: torch.nn.Module, dist, device: torch.device, evaluate: Callable[[], dict]) -> dict:
    """`evaluate()` (by every rank together) of the weights in `path`, read by rank 0 and broadcast, the model's
    own put back after; {} when rank 0 cannot read the file (every rank learns it)."""
    last = {name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()}
    loaded = 1
    if dist.is_main:
        try:
            ckpt.load_model_state(model, ckpt.load_checkpoint(path)["model"], str(path))
        except (CheckpointError, OSError):
            loaded = 0
    if dist.enabled:
        loaded = broadcast_ints([loaded], dist, device)[0]
        if loaded:
            import torch.distributed

            for tensor in model.state_dict().values():
                torch.distributed.broadcast(tensor, src=0)
    try:
        if not loaded:
            return {}
        return evaluate()
    finally:
        model.load_state_dict(last)
