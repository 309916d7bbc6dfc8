"""What a run's metrics.jsonl leaves for the plots, a resumed segment replacing what was logged after its start."""

from __future__ import annotations

import dataclasses
import math
from itertools import compress, repeat
from operator import itemgetter, methodcaller
from typing import NamedTuple

import numpy as np

from core.engine.events import EvalMetrics, event_from_dict

VAL_SPLIT = "val"  # EvalMetrics of this split are the curves; other splits (test) are markers at their step


def history_points(records, until_step: int | None = None) -> tuple[list[dict], list[EvalMetrics], int | None]:
    """A run's StepMetrics (dicts), EvalMetrics and first segment's start step, up to `until_step`."""
    steps: list[dict] = []
    evals: list[EvalMetrics] = []
    first: int | None = None

    def cut(at: int) -> None:
        while steps and steps[-1]["step"] > at:
            steps.pop()
        evals[:] = [e for e in evals if e.step <= at]

    for record in records:
        if not isinstance(record, dict):
            record = {"event": type(record).__name__, **dataclasses.asdict(record)}
        kind = record.get("event")
        try:
            if kind == "StepMetrics":
                step = int(record["step"])
                if steps and step <= steps[-1]["step"]:  # a segment without its RunStarted (torn file)
                    cut(step - 1)
                steps.append(record)
            elif kind == "EvalMetrics":
                evals.append(event_from_dict(record))
            elif kind == "RunStarted":
                start = int(record["start_step"])
                cut(start)
                first = start if first is None else min(first, start)
        except (KeyError, TypeError, ValueError):
            continue
    if until_step is not None:
        cut(until_step)
    if not steps and not evals:
        return [], [], None
    if first is None:  # no RunStarted kept: the first point's step
        first = min([*(s["step"] for s in steps[:1]), *(e.step for e in evals[:1])])
    return steps, evals, int(first)


_get_event = methodcaller("get", "event")  # a record without one is skipped


class OverlayPoints(NamedTuple):
    """An overlaid run's curves (overlay_points): its loss, and its validation metric `metric`."""

    x: np.ndarray
    y: np.ndarray
    metric: str | None
    ex: np.ndarray
    ey: np.ndarray
    task: str | None = None  # the task it trained (its RunStarted's), None when no record says


def overlay_points(records, metric: str | None = None):
    """An overlaid run's curves: (loss steps, losses, metric name, validation steps, metric values)."""
    if not isinstance(records, list) or not all(map(isinstance, records, repeat(dict))):
        records = [r if isinstance(r, dict) else {"event": type(r).__name__, **dataclasses.asdict(r)} for r in records]
    task = next((r.get("task") for r in records if r.get("event") == "RunStarted"), None)  # usually the first line
    return _overlay_curves(records, metric)._replace(task=task if isinstance(task, str) else None)


def _overlay_curves(records: list[dict], metric: str | None) -> OverlayPoints:
    try:
        kinds = np.array(list(map(_get_event, records)), dtype=object)
        is_step, is_eval, is_start = (kinds == "StepMetrics", kinds == "EvalMetrics", kinds == "RunStarted")
        steps = list(compress(records, is_step.tolist()))
        evals = list(compress(records, is_eval.tolist()))
        x = np.fromiter(map(itemgetter("step"), steps), dtype=np.float64, count=len(steps))
        starts = np.flatnonzero(is_start)
        # a RunStarted before anything was logged cuts nothing (the usual file: one, on its first line)
        late_start = len(starts) and starts[-1] > np.flatnonzero(is_step | is_eval)[:1].min(initial=len(records))
        if late_start or (len(x) > 1 and (np.diff(x) <= 0).any()):
            drawn = is_step | is_eval | is_start
            at = np.empty(len(records))
            at[is_step] = x
            at[is_eval] = np.fromiter(map(itemgetter("step"), evals), dtype=np.float64, count=len(evals))
            at[is_start] = [r["start_step"] for r in compress(records, is_start.tolist())]
            at, is_start = at[drawn], is_start[drawn]
            # the highest step logged before each record: a RunStarted below it cuts the earlier segment
            logged = np.maximum.accumulate(np.where(is_start, -np.inf, at))
            before = np.concatenate([[-np.inf], logged[:-1]])
            if (np.diff(x) <= 0).any() or (at[is_start] < before[is_start]).any():
                return _overlay_points_sequential(records, metric)
        y = np.array(list(map(itemgetter("loss"), steps)), dtype=np.float64)  # None: NaN
        val = [split == VAL_SPLIT for split in map(methodcaller("get", "split"), evals)]
        evals = list(compress(evals, val))
        metrics = list(map(itemgetter("metrics"), evals))
        if metric is None:
            metric = next((name for m in metrics for name in m), None)
        if metric is None or not metrics:
            return OverlayPoints(x, y, metric, np.empty(0), np.empty(0))
        values = list(map(methodcaller("get", metric), metrics))
        ex = np.fromiter(map(itemgetter("step"), evals), dtype=np.float64, count=len(evals))
        if None in values:  # an evaluation without this metric: no point there
            kept = [v is not None for v in values]
            ex, values = ex[np.array(kept, dtype=bool)], list(compress(values, kept))
        if not all(map(isinstance, values, repeat((int, float)))):
            return _overlay_points_sequential(records, metric)
        return OverlayPoints(x, y, metric, ex, np.array(values, dtype=np.float64))
    except (KeyError, TypeError, ValueError, AttributeError):  # a malformed record: the loop skips it
        return _overlay_points_sequential(records, metric)


def _overlay_points_sequential(records, metric: str | None):
    """`overlay_points` through `history_points`: one record at a time (a loss that is no number is a gap)."""
    steps, evals, _first = history_points(records)
    y = []
    for record in steps:
        try:
            y.append(float(record.get("loss")))
        except (TypeError, ValueError):
            y.append(math.nan)
    val = [(e.step, e.metrics) for e in evals if e.split == VAL_SPLIT and isinstance(e.metrics, dict)]
    if metric is None:
        metric = next((name for _step, metrics in val for name in metrics), None)
    points = [(step, m[metric]) for step, m in val if isinstance(m.get(metric), (int, float))]
    return OverlayPoints(
        np.array([r["step"] for r in steps], dtype=np.float64),
        np.array(y, dtype=np.float64),
        metric,
        np.array([p[0] for p in points], dtype=np.float64),
        np.array([p[1] for p in points], dtype=np.float64),
    )
