"""A checkpoint's evaluation report: evaluate's metrics plus the task's report (Task.report) from the same scores,
one JSON-ready dict saved as `evaluation.json`.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.files import UnreadableFile, atomic_write_bytes, parse_json, read_regular, shown_path

REPORT_FILE = "evaluation.json"
REPORT_VERSION = 1


def evaluation_report(checkpoint: str | Path, split: str | None = None, **options: Any) -> dict:
    """The report of `checkpoint`'s model on `split` (rebuilt_run's arguments)."""
    import torch

    from core.data.batching import split_length
    from core.engine.precision import matmul_precision
    from core.engine.run_record import RECORD_FILE
    from core.runs.evaluate import rebuilt_run

    with rebuilt_run(checkpoint, split, **options) as run:
        metrics = run.metrics()
        t = run.trainer
        model = t.raw_model
        was_training = model.training
        model.eval()
        try:
            with matmul_precision(t.plan), torch.no_grad(), t.plan.autocast():
                sections = t.task.report(model, run.rows, t.cfg.batch_size)
        finally:
            model.train(was_training)
        evaluation = run.evaluation(metrics).to_dict()
        rows = split_length(run.rows)
    folder = report_folder(checkpoint)
    report = {
        "version": REPORT_VERSION,
        **evaluation,
        "rows": rows,
        "run_folder": str(folder) if (folder / RECORD_FILE).is_file() else None,
        "primary_metric": t.task.primary_metric,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **{key: value for key, value in sections.items() if key not in evaluation},
    }
    report["seconds"] = time.perf_counter() - run.began
    return json_ready(report)


def json_ready(value):
    """`value` as JSON holds it: tuples as lists, plain numbers, non-finite floats as None."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    try:
        number = float(value)  # a numpy / torch scalar
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def report_folder(checkpoint: str | Path) -> Path:
    """Where a checkpoint's report goes: the folder it lies in (its run folder)."""
    return Path(checkpoint).resolve().parent


def write_report(report: dict, folder: str | Path) -> Path:
    """Write `report` as `folder`/evaluation.json, atomically (a reader never sees half of it); the path."""
    path = Path(folder) / REPORT_FILE
    atomic_write_bytes(path, (json.dumps(json_ready(report), indent=1, allow_nan=False) + "\n").encode())
    return path


def load_report(folder: str | Path, strict: bool = False) -> dict | None:
    """The report saved in `folder`; None when there is none or it is not a JSON object."""
    path = Path(folder) / REPORT_FILE
    payload = None
    try:
        payload = read_regular(path)
        report = parse_json(payload, REPORT_FILE)
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        if strict:
            raise DataError(_unreadable(path, exc, payload)) from None
        return None
    if not isinstance(report, dict):
        if strict:
            raise DataError(f"{shown_path(path)}: line 1: not an evaluation report (expected a JSON object)")
        return None
    return report


def _unreadable(path: Path, exc: UnreadableFile, payload: bytes | None) -> str:
    """One line: the file's path and why it can't be read (the line of a JSON error)."""
    if payload is not None:
        try:
            json.loads(payload.decode("utf-8"))
        except json.JSONDecodeError as err:
            return f"{shown_path(path)}: line {err.lineno}: not valid JSON ({err.msg})"
        except (UnicodeDecodeError, RecursionError, ValueError):
            pass
    text = str(exc)
    return (
        shown_path(path) + text[len(REPORT_FILE) :] if text.startswith(REPORT_FILE) else f"{shown_path(path)}: {text}"
    )
