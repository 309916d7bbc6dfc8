"""Comparing runs: `compare_rows` is what `runs compare` and the window's compare table show of a few runs side
by side, from their run.json records. No torch."""

from __future__ import annotations

import json
from dataclasses import dataclass

from core.text import count, duration, exact, number, printable, setting, size


def best_text(run: dict) -> str:
    """'accuracy 0.91': the run's best value of its primary metric, '-' without one."""
    best = run.get("best") or {}
    return "-" if best.get("value") is None else f"{best.get('name')} {number(best['value'])}"


def steps_text(run: dict) -> str:
    """'1,200/2,000': steps taken of the total."""
    steps, total = run.get("steps"), run.get("total_steps")
    if steps is None:
        return "-"
    return f"{exact(steps)}/{exact(total)}" if total else exact(steps)


def precision_text(run: dict) -> str:
    return str(run.get("precision") or "-")


def resolved_config(run: dict) -> dict:
    """A run's settings as it resolved them: missing ones at their defaults, task options as `task_options.NAME`
    with defaults filled in, `auto` device and precision as the record says they resolved."""
    from core.config import RunConfig
    from core.tasks import option_values

    resolved = RunConfig().to_dict() | dict(run.get("config") or {})
    options = resolved.pop("task_options")
    task = str(resolved.get("task") or run.get("task") or "")
    if isinstance(options, dict):
        task_file = str(resolved.get("task_file") or "")  # a user task's defaults: read from its source
        resolved.update({f"task_options.{k}": v for k, v in option_values(task, options, task_file).items()})
    else:  # not a mapping (a damaged record): compared as it is
        resolved["task_options"] = options
    for key in ("device", "precision"):
        if resolved.get(key) in ("auto", "", None) and run.get(key):
            resolved[key] = run[key]
    return resolved


def differing_config(runs: list[dict]) -> dict[str, list]:
    """The settings (resolved_config's, out_dir and the start's note aside) whose resolved values differ between `runs`."""
    configs = [resolved_config(r) for r in runs]
    keys = sorted({k for c in configs for k in c if k not in ("out_dir", "note")})
    return {
        k: [c.get(k) for c in configs]
        for k in keys
        if len({json.dumps(c.get(k), sort_keys=True, default=str) for c in configs}) > 1
    }


@dataclass(frozen=True)
class CompareRow:
    """One row of a comparison: its label, one text per run, whether they differ, whether it is config."""

    label: str
    values: tuple[str, ...]
    differs: bool
    config: bool = False


def _best_at(run: dict) -> str:
    step = (run.get("best") or {}).get("step")
    best = best_text(run)
    return best + (f" at step {exact(step)}" if best != "-" and step is not None else "")


def compare_rows(runs: list[dict]) -> list[CompareRow]:
    """The rows shown of `runs` (one column each): figures, then every setting that differs."""
    metric_names = sorted({k for r in runs for k in (r.get("metrics") or {})})
    test_names = sorted({k for r in runs for k in (r.get("test_metrics") or {})})
    rows: list[tuple[str, list]] = [
        ("task", [r.get("task") for r in runs]),
        (
            "precision",
            [precision_text(r) + (f" (autocast {d})" if (d := r.get("autocast_dtype")) else "") for r in runs],
        ),
        ("device", [r.get("device") for r in runs]),
        ("samples/s", [count(r.get("samples_per_second")) for r in runs]),
        ("peak memory", [size(r.get("peak_memory_bytes")) for r in runs]),
        ("best", [_best_at(r) for r in runs]),
        ("final loss", [number(r.get("final_loss")) for r in runs]),
    ]
    rows += [(f"val {m}", [number((r.get("metrics") or {}).get(m)) for r in runs]) for m in metric_names]
    rows += [(f"test {m}", [number((r.get("test_metrics") or {}).get(m)) for r in runs]) for m in test_names]
    rows += [
        ("wall time", [duration(r.get("wall_seconds")) for r in runs]),
        ("steps", [steps_text(r) for r in runs]),
        ("status", [r.get("status") for r in runs]),
        ("note", [r.get("note") or "-" for r in runs]),
    ]
    out = []  # labels and texts printable: metric names, notes and config values come from the runs' files
    for label, values in rows:
        texts = tuple(printable(v if v is not None and v != "" else "-") for v in values)
        out.append(CompareRow(printable(label), texts, len(set(texts)) > 1))
    for key, values in differing_config(runs).items():
        if key in ("device", "precision"):  # resolved as the rows above show them
            continue
        texts = tuple(printable(setting(v)) if v is not None else "-" for v in values)
        out.append(CompareRow(printable(f"config {key}"), texts, True, config=True))
    return out
