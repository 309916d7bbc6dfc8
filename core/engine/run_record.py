"""`run.json`: a run folder's summary, kept up to date by rank 0 as the run goes (torch-free).

RunRecord turns the run's events into one small JSON object, written atomically (core.files) at RunStarted, at
each last-checkpoint save and at RunEnded; validation metrics and best checkpoints, which can come every few
steps, are written at most every WRITE_SECONDS (the next event after that interval writes what is pending), so
an atomic write with its fsyncs never becomes a per-epoch cost of a small model. It holds: id (stable across resumes into the same folder), task,
status, device, precision, versions, times, steps, final loss and metrics, the best value of the task's primary
metric, the checkpoints, the config. `read_run(folder)` reads it back for `amp-console runs`: a record that says
"running" while no live run holds the folder (core.engine.run_folder.is_in_use) reads as "interrupted". An
older folder with metrics.jsonl but no run.json is summarised from its first and last lines only.

The user's free-text note on a run lives in its own file, `note.txt` (write_note / read_note), never in
run.json: the running engine rewrites run.json, so a note saved during a run would be lost. read_run adds it as
"note" ('' when there is none).
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from core.engine.events import CheckpointSaved, EvalMetrics, RunEnded, RunStarted, StepMetrics
from core.engine.run_folder import CHECKPOINT_FILE, METRICS_FILE, is_in_use
from core.files import atomic_write_bytes

RUNS_DIR_ENV = "AMP_CONSOLE_RUNS_DIR"  # moves the runs root (see runs_root)

RECORD_FILE = "run.json"
NOTE_FILE = "note.txt"  # the user's note on a run (read_note / write_note)
NOTE_MAX_BYTES = 64 * 1024  # a longer note.txt is read up to this many bytes
RECORD_VERSION = 1
WRITE_SECONDS = 2.0  # evaluations and best checkpoints reach run.json at most this late (see the module doc)
TAIL_BYTES = 64 * 1024  # how much of metrics.jsonl's end a folder without run.json is summarised from


def user_data_dir() -> Path:
    """This user's data folder for the console, as platformdirs knows it: $XDG_DATA_HOME (or ~/.local/share)
    /amp-console on Linux, ~/Library/Application Support/amp-console on macOS, %LOCALAPPDATA%\\amp-console on
    Windows."""
    import platformdirs

    return Path(platformdirs.user_data_dir("amp-console", appauthor=False))


def runs_root(explicit: str | os.PathLike | None = None) -> Path:
    """The runs root: every run without an explicit output folder goes in a new folder under it, and
    `amp-console runs` and the window's history list it. `explicit` (--runs-dir, the window's setting), else
    $AMP_CONSOLE_RUNS_DIR, else <user data folder>/runs."""
    chosen = str(explicit or "").strip() or os.environ.get(RUNS_DIR_ENV, "").strip()
    return Path(chosen).expanduser() if chosen else user_data_dir() / "runs"


def new_run_folder(root: str | os.PathLike, task: str, precision: str, when: datetime | None = None) -> Path:
    """A new run's folder under the runs root: <date>-<time>-<task>-<precision>, e.g.
    20261201-023712-recommender-bf16 (local time, so `ls` lists runs in the order they started). A clash
    (two runs in the same second) is settled when the run claims it (core.engine.run_folder: a -2 sibling)."""
    when = when or datetime.now()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{task}-{precision}")
    return Path(root) / f"{when:%Y%m%d-%H%M%S}-{safe}"


def resolve_out_dir(config, root: str | os.PathLike | None = None):
    """`config` with an output folder: its own, or a new folder under the runs root (see runs_root)."""
    if str(config.out_dir).strip():
        return config
    return config.replace(out_dir=str(new_run_folder(runs_root(root), config.task, config.precision)))


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_id() -> str:
    return secrets.token_hex(5)  # 10 hex digits


def primary_metric(task: str) -> str | None:
    try:
        from core.tasks import get_task_info

        return get_task_info(task).primary_metric
    except Exception:  # an unknown (removed) task: no best metric
        return None


def lower_is_better(metric: str, mode: str = "auto") -> bool:
    """min/max as configured (RunConfig.monitor_mode); auto: lower for losses and errors."""
    if mode in ("min", "max"):
        return mode == "min"
    name = metric.lower()
    return any(word in name for word in ("loss", "error", "mse", "mae", "perplexity"))


def _versions() -> dict:
    torch = sys.modules.get("torch")
    return {"python": platform.python_version(), "torch": getattr(torch, "__version__", None)}


def _finite(value):
    """JSON has no NaN or inf: those are written as strings ('nan', 'inf')."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class RunRecord:
    """The run.json of one run folder, updated from the run's events (see the module doc)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / RECORD_FILE
        self.data: dict | None = None
        self._mode = "auto"
        self._pending = False  # changed since the last write, by an event that may wait (see update)
        self._written_at = float("-inf")
        earlier = load_record(self.folder)
        self._earlier = earlier if isinstance(earlier, dict) else None

    def update(self, event) -> None:
        """Fold one event into the record and write it when it changed what run.json says: at once for the
        start, a last checkpoint and the end; for evaluations and best checkpoints once WRITE_SECONDS have
        passed since the last write (until then they are pending, written by the next event after that)."""
        data = self.data
        if type(event) is StepMetrics and data is not None:  # the event of every logged step: straight here
            memory = event.memory_bytes
            if type(memory) is int and memory > (data.get("peak_memory_bytes") or 0):
                data["peak_memory_bytes"] = memory
            data["steps"] = event.step
            data["final_loss"] = event.loss
            data["wall_seconds"] = self._previous_wall + float(event.elapsed_seconds or 0.0)
            if self._pending and time.monotonic() - self._written_at >= WRITE_SECONDS:
                self.write()
            return  # otherwise kept in memory only: written with the next record-worthy event
        urgent = True
        match event:
            case RunStarted():
                self._started(event)
            case _ if self.data is None:
                return  # no RunStarted yet: no record
            case CheckpointSaved():
                which = getattr(event, "kind", "last") or "last"
                if which != "last" and getattr(event, "rank", None) not in (None, 1):
                    return  # the k-th best kept: run.json names the best one
                self.data["checkpoints"][which] = {"path": str(event.path), "step": event.step}
                if which == "last":
                    self.data["steps"] = max(self.data.get("steps") or 0, event.step)
                else:
                    urgent = False
            case EvalMetrics():
                self._evaluated(event)
                urgent = False
            case StepMetrics():
                memory = getattr(event, "memory_bytes", None)
                if isinstance(memory, int) and memory > (self.data.get("peak_memory_bytes") or 0):
                    self.data["peak_memory_bytes"] = memory
                self.data["steps"] = event.step
                self.data["final_loss"] = event.loss
                self.data["wall_seconds"] = self._previous_wall + float(event.elapsed_seconds or 0.0)
                if self._pending and time.monotonic() - self._written_at >= WRITE_SECONDS:
                    self.write()
                return  # otherwise kept in memory only: written with the next record-worthy event
            case RunEnded():
                self._ended(event)
            case _:
                return
        if urgent or time.monotonic() - self._written_at >= WRITE_SECONDS:
            self.write()
        else:
            self._pending = True

    def write(self) -> None:
        payload = json.dumps(_finite(self.data), indent=2, default=str) + "\n"
        atomic_write_bytes(self.path, payload.encode("utf-8"))
        self._pending = False
        self._written_at = time.monotonic()

    def _started(self, event) -> None:
        earlier = self._earlier or {}
        metric = event.config.get("monitor") or primary_metric(event.task)
        self._mode = str(event.config.get("monitor_mode") or "auto")
        self.data = {
            "version": RECORD_VERSION,
            "id": earlier.get("id") or new_id(),
            "name": self.folder.name,
            "task": event.task,
            "status": "running",
            "device": event.device,
            "device_name": getattr(event, "device_name", None),
            "precision": event.precision,
            "autocast_dtype": event.autocast_dtype,
            "versions": _versions(),
            "start_time": earlier.get("start_time") or now_iso(),
            "resumed_at": list(earlier.get("resumed_at") or []) + ([now_iso()] if earlier else []),
            "end_time": None,
            "wall_seconds": earlier.get("wall_seconds") or 0.0,
            "steps": event.start_step,
            "start_step": event.start_step,
            "total_steps": event.total_steps,
            "final_loss": earlier.get("final_loss"),
            "samples_per_second": None,
            "peak_memory_bytes": earlier.get("peak_memory_bytes"),  # the most any logged step reported
            "metrics": dict(earlier.get("metrics") or {}),
            "test_metrics": {},
            "best": (earlier["best"] if (earlier.get("best") or {}).get("name") == metric
                     else {"name": metric, "value": None, "step": None} if metric else None),
            "checkpoints": dict(earlier.get("checkpoints") or {}),
            "config": dict(event.config),
            "notes": list(getattr(event, "notes", []) or []),
            "message": "",
        }
        self._previous_wall = float(self.data["wall_seconds"] or 0.0)

    def _evaluated(self, event) -> None:
        if event.split not in ("val", "validation"):
            return
        self.data["metrics"] = dict(event.metrics)
        self.data["steps"] = max(self.data.get("steps") or 0, event.step)
        best = self.data.get("best")
        if not best or best.get("name") not in event.metrics:
            return
        value = event.metrics[best["name"]]
        if not isinstance(value, (int, float)) or value != value:
            return
        old = best.get("value")
        better = (old is None or not isinstance(old, (int, float))
                  or (value < old if lower_is_better(best["name"], self._mode) else value > old))
        if better:
            self.data["best"] = {"name": best["name"], "value": value, "step": event.step}

    def _ended(self, event) -> None:
        self.data.update(
            status=event.status, end_time=now_iso(), steps=event.step, message=event.message,
            wall_seconds=self._previous_wall + float(event.elapsed_seconds or 0.0),
            samples_per_second=event.samples_per_second, test_metrics=dict(event.test_metrics or {}))
        if event.final_loss is not None:
            self.data["final_loss"] = event.final_loss
        if event.metrics:
            self.data["metrics"] = dict(event.metrics)
        if event.checkpoint:
            self.data["checkpoints"].setdefault("last", {"path": str(event.checkpoint), "step": event.step})
            self.data["checkpoints"]["last"]["path"] = str(event.checkpoint)


def load_record(folder: str | os.PathLike) -> dict | None:
    """run.json as written, or None when it is missing or unreadable."""
    try:
        data = json.loads((Path(folder) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_note(folder: str | os.PathLike) -> str:
    """The user's note on the run in `folder` ('' when it has none or note.txt cannot be read)."""
    try:
        with open(Path(folder) / NOTE_FILE, "rb") as f:
            raw = f.read(NOTE_MAX_BYTES)
    except OSError:
        return ""
    return raw.decode("utf-8", errors="replace").strip()


def write_note(folder: str | os.PathLike, text: str) -> str:
    """Set the note on the run in `folder` (atomically; surrounding blanks stripped); an empty text clears it.
    Returns the note as stored. Raises OSError (e.g. the folder is gone or read-only)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(2, "no such run folder", str(folder))
    text = (text or "").strip()
    path = folder / NOTE_FILE
    if not text:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        return ""
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))
    return text


def read_run(folder: str | os.PathLike) -> dict | None:
    """A run folder's summary: run.json, with 'running' read as 'interrupted' when no live run holds the
    folder; for an older folder without run.json, a summary from metrics.jsonl's first and last lines. None
    when the folder holds no run. "note" is the user's note (note.txt, see write_note)."""
    folder = Path(folder)
    data = load_record(folder)
    if data is None:
        data = _summary_from_metrics(folder)
        if data is None:
            return None
    data["name"] = folder.name
    data["folder"] = str(folder)
    data["note"] = read_note(folder)
    if data.get("status") == "running" and not is_in_use(folder):
        data["status"] = "interrupted"
    return data


def _summary_from_metrics(folder: Path) -> dict | None:
    path = folder / METRICS_FILE
    try:
        with open(path, "rb") as f:
            first = f.readline()
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read().split(b"\n")
    except OSError:
        return None
    start = _json_line(first)
    if start is None or start.get("event") != "RunStarted":
        return None
    last = None
    for raw in reversed(tail):  # the last whole line (a torn last line is skipped)
        last = _json_line(raw)
        if last is not None:
            break
    stat_time = datetime.fromtimestamp(os.path.getmtime(path), timezone.utc).isoformat(timespec="seconds")
    ended = last if last and last.get("event") == "RunEnded" else None
    # A stable id for a folder without run.json: derived from its path and first line, never written.
    import hashlib

    ident = hashlib.sha1(os.fsencode(os.path.abspath(folder)) + first).hexdigest()[:10]
    checkpoint = folder / CHECKPOINT_FILE
    return {
        "version": 0, "id": ident, "task": start.get("task"),
        "status": ended.get("status") if ended else "running",
        "device": start.get("device"), "precision": start.get("precision"),
        "autocast_dtype": start.get("autocast_dtype"), "versions": {},
        "start_time": None, "end_time": stat_time if ended else None,
        "wall_seconds": ended.get("elapsed_seconds") if ended else None,
        "steps": (last or {}).get("step"), "total_steps": start.get("total_steps"),
        "final_loss": ended.get("final_loss") if ended else (last or {}).get("loss"),
        "samples_per_second": ended.get("samples_per_second") if ended else None,
        "metrics": ended.get("metrics", {}) if ended else {},
        "test_metrics": ended.get("test_metrics", {}) if ended else {},
        "best": None, "checkpoints": {"last": {"path": str(checkpoint)}} if checkpoint.exists() else {},
        "config": start.get("config", {}), "notes": start.get("notes", []),
        "message": ended.get("message", "") if ended else "", "from_metrics": True,
    }


def _json_line(raw: bytes) -> dict | None:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def find_runs(root: str | os.PathLike) -> list[dict]:
    """Every run under `root` (its subfolders, and their subfolders), newest first: read_run's dicts, through
    the runs root's index (core.engine.run_index: only changed folders are read again)."""
    from core.engine.run_index import indexed_runs  # it imports this module

    return indexed_runs(root)
