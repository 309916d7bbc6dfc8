"""The run history's rows: columns, each run's texts and sort keys (`row_cells`, made off the GUI thread), tooltips,
overlay labels and checkpoint paths. No widgets.
"""

from __future__ import annotations

import re

from core.engine.run_folder import CHECKPOINT_FILE, recorded_checkpoint
from core.files import UnreadableFile
from core.text import duration, printable

COLUMNS = ("name", "task", "status", "precision", "device", "steps", "best", "wall time", "started", "note")
NOTE_COLUMN = 9
FILTERED = (0, 1, 2, 3, 8, NOTE_COLUMN)  # the filter box matches name, task, status, precision, start, note


def format_number(value) -> str:
    """A figure as the table shows it: four significant digits."""
    if not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}"


def row_cells(run: dict) -> tuple[tuple[str, ...], tuple]:
    """(the texts shown, the sort keys) of one run's row."""
    best = run.get("best") or {}
    best_value = best.get("value")
    best_text = f"{best.get('name')} {format_number(best_value)}" if best_value is not None else "-"
    steps, total = run.get("steps"), run.get("total_steps")
    steps_text = (
        "-"
        if steps is None
        else (f"{steps:,}/{total:,}" if isinstance(total, int) and total and isinstance(steps, int) else f"{steps}")
    )
    start = run.get("start_time") or ""
    note = " ".join(str(run.get("note") or "").split())  # one line in the table (the tooltip has it all)
    status = f"unreadable: {run['unreadable']}" if run.get("unreadable") else str(run.get("status") or "-")
    texts = tuple(
        printable(t)
        for t in (  # read from the run's files: control characters shown as escapes
            str(run.get("name") or "-"),
            str(run.get("task") or "-"),
            status,
            str(run.get("precision") or "-"),
            str(run.get("device") or "-"),
            steps_text,
            best_text,
            duration(run.get("wall_seconds")),
            start.replace("T", " ")[:16] or "-",
            note,
        )
    )
    # one type per column, so Qt compares them natively (a Python lessThan costs seconds at 10,000 rows)
    numeric_best = float(best_value) if isinstance(best_value, (int, float)) else float("inf")
    wall = run.get("wall_seconds")
    keys = (
        texts[0].lower(),
        *texts[1:5],
        int(steps) if isinstance(steps, (int, float)) else -1,
        numeric_best,
        float(wall) if isinstance(wall, (int, float)) else -1.0,
        start,
        note.lower(),
    )
    return texts, keys


def row_tooltip(run: dict, column: int) -> str:
    """A row's tooltip: the note in full on the note column, else the folder, id and the run's message."""
    message = run.get("message") or (f"unreadable: {run['unreadable']}" if run.get("unreadable") else "")
    if column == NOTE_COLUMN and run.get("note"):
        return printable(run["note"], keep_newlines=True)
    return "\n".join(printable(t) for t in (run.get("folder"), f"id {run.get('id')}", message) if t)


_DATED = re.compile(r"^(\d{8})-(\d{2})(\d{2})(\d{2})-(.+)$")  # core.engine.run_record.new_run_folder's names


def overlay_label(run: dict) -> str:
    """A run's short legend entry on the plots: a dated folder name (20261201-023712-tiny-bf16) reads "tiny-bf16
    02:37"."""
    name = printable(run.get("name") or "?")
    dated = _DATED.match(name.rsplit("/", 1)[-1])
    if dated:
        prefix = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
        name = f"{prefix}{dated.group(5)} {dated.group(2)}:{dated.group(3)}"
    precision = str(run.get("precision") or "?")
    return name if precision in re.split(r"[-_ /.]", name) else f"{name} · {precision}"


def checkpoint_of(run: dict, which: str = "last") -> tuple[str | None, str | None]:
    """(the path of the run's last or best checkpoint, None); (None, None) when not on disk, (None, why) if refused."""
    path = ((run.get("checkpoints") or {}).get(which) or {}).get("path")
    if not path or not isinstance(path, str):
        return None, None
    try:
        return str(recorded_checkpoint(run["folder"], path)), None
    except FileNotFoundError:
        return None, None
    except (UnreadableFile, OSError) as exc:
        return None, f"{printable(run.get('name') or '?')}: {exc}"


def advised(run: dict) -> str:
    """ "last" where the run's summary advised its last weights (its validation split too small to choose the best
    by), else "best": the checkpoint export, evaluate and the preview take by default, as the CLI's do."""
    return "last" if (run.get("best") or {}).get("use") == CHECKPOINT_FILE else "best"


def describe_checkpoint(run: dict, which: str) -> str:
    """' (step 20, accuracy 0.91)' for a menu entry: the checkpoint's step and, for the best, its value."""
    entry = (run.get("checkpoints") or {}).get(which) or {}
    step = entry.get("step")
    parts = [f"step {step:,}"] if isinstance(step, int) else []
    best = run.get("best") or {}
    if which == "best" and best.get("value") is not None and (step is None or best.get("step") == step):
        parts.append(f"{best.get('name')} {format_number(best['value'])}")
    return printable(f" ({', '.join(parts)})") if parts else ""
