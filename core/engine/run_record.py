"""A run folder read back (torch-free): `run.json`, the summary core.engine.reporting.RunRecord writes, checked
field by field; `read_run(folder)` for `amp-console runs` and the history, with the user's note (`note.txt`), one
bad folder read as one "unreadable" run; the runs root and new folders' names; a run's best or last checkpoint.
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime, timezone
from pathlib import Path

from core.engine.early_stopping import BEST_FILE, resolve_mode
from core.engine.run_folder import CHECKPOINT_FILE, METRICS_FILE, is_in_use
from core.errors import CheckpointError
from core.files import (
    UnreadableFile,
    atomic_write_bytes,
    is_inside,
    open_regular,
    parse_json,
    read_json_record,
    read_regular,
)

RUNS_DIR_ENV = "AMP_CONSOLE_RUNS_DIR"  # moves the runs root (see runs_root)

RECORD_FILE = "run.json"
NOTE_FILE = "note.txt"  # the user's note on a run (read_note / write_note)
NOTE_MAX_BYTES = 64 * 1024  # a longer note.txt is read up to this many bytes
TAIL_BYTES = 64 * 1024  # how much of metrics.jsonl's end a folder without run.json is summarised from
REMEMBERED_FILE = ".history.outside"  # in the runs root: run folders outside it that its history lists too


def user_data_dir() -> Path:
    """This user's data folder for the console, as platformdirs knows it (~/.local/share/amp-console on Linux)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("amp-console", appauthor=False))


def runs_root(explicit: str | os.PathLike | None = None) -> Path:
    """The runs root, where runs without an output folder go and what the history lists: `explicit` (--runs-dir,
    the window's setting), else $AMP_CONSOLE_RUNS_DIR, else <user data folder>/runs."""
    chosen = str(explicit or "").strip() or os.environ.get(RUNS_DIR_ENV, "").strip()
    return Path(chosen).expanduser() if chosen else user_data_dir() / "runs"


def new_run_folder(root: str | os.PathLike, task: str, precision: str, when: datetime | None = None) -> Path:
    """A new run's folder under the runs root: <date>-<time>-<task>-<precision> in local time, e.g.
    20261201-023712-recommender-bf16 (a clash is settled when the run claims it: core.engine.run_folder)."""
    when = when or datetime.now()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{task}-{precision}")
    return Path(root) / f"{when:%Y%m%d-%H%M%S}-{safe}"


def resolve_out_dir(config, root: str | os.PathLike | None = None, precision: str | None = None):
    """`config` with an output folder: its own (remembered by the root when outside it), or a new folder under
    the runs root named by `precision` (the mode that runs), else config.precision."""
    if str(config.out_dir).strip():
        remember(str(config.out_dir).strip(), root)  # the user's own folder outside the root: listed all the same
        return config
    return config.replace(out_dir=str(new_run_folder(runs_root(root), config.task, precision or config.precision)))


def remember(folder: str | os.PathLike, root: str | os.PathLike | None = None) -> bool:
    """Have the history of the runs root `root` list the run folder `folder` outside it: its absolute path added
    once to REMEMBERED_FILE there. False for a folder under the root or when the file can't be written."""
    root, path = runs_root(root), os.path.abspath(folder)
    if "\n" in path or is_inside(root, path):
        return False
    if path in remembered(root):
        return True
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            root / REMEMBERED_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666
        )
        try:  # one write: lines appended by processes at once stay whole
            os.write(fd, os.fsencode(path) + b"\n")
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    return True


def remembered(root: str | os.PathLike) -> list[str]:
    """The folders `remember` recorded for the runs root `root`, once each, oldest first (other lines skipped)."""
    try:
        raw = read_regular(os.path.join(root, REMEMBERED_FILE))
    except (OSError, UnreadableFile):
        return []
    paths = (os.fsdecode(line) for line in raw.split(b"\n"))
    return [p for p in dict.fromkeys(paths) if os.path.isabs(p) and "\0" not in p and not is_inside(root, p)]


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
    return resolve_mode(metric, mode) == "min"


def load_record(folder: str | os.PathLike) -> dict | None:
    """run.json as written, or None when it is missing or unreadable (read_record's rules)."""
    try:
        return read_record(folder)
    except (OSError, UnreadableFile):
        return None


def recorded_task(path: str | os.PathLike) -> tuple[str, str]:
    """(task, task_file) that a run folder (or a checkpoint in one) or a sweep folder recorded, read as data;
    ("", "") when none is."""
    path = Path(path).expanduser()
    folder = path.parent if path.is_file() else path
    for name, key in ((RECORD_FILE, "config"), ("sweep.json", "base_config")):
        try:
            config = read_json_record(folder / name).get(key)
        except (OSError, UnreadableFile):
            continue
        if isinstance(config, dict) and all(isinstance(config.get(k), str) for k in ("task", "task_file")):
            return config["task"], config["task_file"]
    return "", ""


def read_record(folder: str | os.PathLike) -> dict:
    """run.json, read as core.files.read_json_record does, its fields checked (record_problem): FileNotFoundError
    when missing, UnreadableFile (one line) for anything else."""
    data = read_json_record(Path(folder) / RECORD_FILE)
    problem = record_problem(data)
    if problem:
        raise UnreadableFile(f"{RECORD_FILE}: {problem}")
    return _as_trained(data)


def _as_trained(data: dict) -> dict:
    """A record whose config's task options are the ones its run trained with (core.tasks.saved_config)."""
    from core.tasks import saved_config

    if "config" in data:
        data["config"] = saved_config(data["config"])
    return data


_NOT_FINITE = ("nan", "inf", "-inf")  # how reporting.json_ready writes a float JSON has no spelling for
_KINDS = {  # what a field may hold besides null: (the types that pass, how a message names it)
    "text": ((str,), "text"),
    "whole": ((int,), "a whole number"),
    "number": ((int, float), "a number"),
    "object": ((dict,), "an object"),
    "list": ((list,), "a list"),
}
_RECORD_FIELDS = (
    [(k, "text") for k in ("id", "task", "status", "device", "device_name", "precision", "autocast_dtype")]
    + [(k, "text") for k in ("start_time", "end_time", "message")]
    + [(k, "whole") for k in ("version", "steps", "total_steps", "start_step", "peak_memory_bytes")]
    + [(k, "number") for k in ("wall_seconds", "final_loss", "samples_per_second")]
    + [(k, "object") for k in ("metrics", "test_metrics", "best", "checkpoints", "config", "versions")]
    + [(k, "list") for k in ("notes", "resumed_at")]
)


def _bad(value, want: str) -> bool:
    """Whether `value` is neither None nor of the kind `want` names (a key of _KINDS)."""
    if value is None or type(value) in _KINDS[want][0]:
        return False
    return not (want == "number" and type(value) is str and value in _NOT_FINITE)


def _problem(name: str, value, want: str) -> str:
    shown = name if len(name) <= 60 else name[:57] + "..."
    kinds = {str: "text", int: "a number", float: "a number", list: "a list", dict: "an object", type(None): "null"}
    kind = "true/false" if isinstance(value, bool) else kinds.get(type(value), type(value).__name__)
    return f"{shown} is {kind}, not {_KINDS[want][1]}"


def record_problem(data: dict) -> str | None:
    """Why `data` (run.json, or a summary from metrics.jsonl) can't be shown as a run: the first field the history
    uses that has the wrong type ("steps is text, not a whole number"); None when all are right or missing."""
    for name, want in _RECORD_FIELDS:
        if _bad(data.get(name), want):
            return _problem(name, data[name], want)
    for field in ("metrics", "test_metrics"):
        for name, value in (data.get(field) or {}).items():
            if _bad(value, "number"):
                return _problem(f"{field}.{name}", value, "number")
    best = data.get("best") or {}
    for name, want in (("name", "text"), ("value", "number"), ("step", "whole")):
        if _bad(best.get(name), want):
            return _problem(f"best.{name}", best[name], want)
    for which, entry in (data.get("checkpoints") or {}).items():
        if type(entry) is not dict:
            return _problem(f"checkpoints.{which}", entry, "object")
        for name, want in (("path", "text"), ("step", "whole"), ("rank", "whole")):
            if _bad(entry.get(name), want):
                return _problem(f"checkpoints.{which}.{name}", entry[name], want)
    for i, note in enumerate(data.get("notes") or []):
        if type(note) is not str:
            return _problem(f"notes[{i}]", note, "text")
    return None


def read_note(folder: str | os.PathLike) -> tuple[str, str | None]:
    """(the note, None), ('', None) when there is none, ('', reason) when note.txt can't be read (its first
    NOTE_MAX_BYTES)."""
    try:
        raw = read_regular(os.path.join(folder, NOTE_FILE))
    except FileNotFoundError:
        return "", None
    except UnreadableFile as exc:
        return "", str(exc)
    return raw[:NOTE_MAX_BYTES].decode("utf-8", errors="replace").strip(), None


def write_note(folder: str | os.PathLike, text: str) -> str:
    """Set the note on the run in `folder` atomically (stripped; empty clears it) and return it as stored.
    OSError when it can't be written, ValueError when `text` is not valid Unicode."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(2, "no such run folder", str(folder))
    text = (text or "").strip()
    path = folder / NOTE_FILE
    if not text:
        path.unlink(missing_ok=True)
        return ""
    try:
        payload = (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the note is not valid UTF-8 text (check the terminal's encoding)") from None
    atomic_write_bytes(path, payload)
    return text


def read_run(folder: str | os.PathLike) -> dict | None:
    """A run folder's summary: run.json ('running' read as 'interrupted' when no live run holds the folder), else
    one from metrics.jsonl's first and last lines, with its "note"; None when it holds no run. Never raises: a
    bad record reads as status "unreadable" (and "unreadable" the reason), a bad note.txt with "note_unreadable"."""
    folder = Path(folder)
    base = str(folder)  # string paths below: a cold listing reads thousands of folders
    try:
        data = _record_or_summary(folder, base)
        if data is not None:
            _as_trained(data)
            data.pop("unreadable", None)  # said by this reader only, never by the file
            data.pop("note_unreadable", None)
    except _Unreadable as exc:
        data = {"version": 0, "id": exc.ident or _folder_id(folder), "status": "unreadable", "unreadable": exc.reason}
    if data is None:
        return None
    data["name"] = folder.name
    data["folder"] = base
    data["note"], problem = read_note(base)
    if problem:
        data["note_unreadable"] = problem
    if data.get("status") == "running" and not is_in_use(folder):
        data["status"] = "interrupted"
    return data


class _Unreadable(Exception):
    def __init__(self, reason: str, ident=None):
        super().__init__(reason)
        self.reason = reason
        self.ident = ident if isinstance(ident, str) and ident else None


def _record_or_summary(folder: Path, base: str) -> dict | None:
    """run.json checked, else the summary from metrics.jsonl, else None; _Unreadable when one is there but bad."""
    path, name = os.path.join(base, RECORD_FILE), RECORD_FILE
    try:
        data = read_json_record(path)
    except FileNotFoundError:
        data = None
    except UnreadableFile as exc:
        if os.path.lexists(path):
            raise _Unreadable(str(exc)) from None
        data = None  # nothing there to read (the folder can't be searched, say): no run.json
    except (OSError, ValueError):  # a name that can't be opened at all
        return None
    if data is None:
        data, name = _summary_from_metrics(folder), METRICS_FILE
    if data is not None and (problem := record_problem(data)):
        raise _Unreadable(f"{name}: {problem}", data.get("id"))
    return data


def _folder_id(folder: Path, salt: bytes = b"") -> str:
    """A stable id for a folder without a readable id: derived from its path (and `salt`), never written."""
    import hashlib

    return hashlib.sha1(os.fsencode(os.path.abspath(folder)) + salt).hexdigest()[:10]


def _summary_from_metrics(folder: Path) -> dict | None:
    path = folder / METRICS_FILE
    if not os.path.lexists(path):
        return None
    try:
        with open_regular(path) as f:
            first = f.readline(TAIL_BYTES)
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read(TAIL_BYTES).split(b"\n")
            mtime = os.fstat(f.fileno()).st_mtime
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        raise _Unreadable(str(exc)) from None
    except OSError as exc:
        raise _Unreadable(f"cannot read {METRICS_FILE}: {exc.strerror or type(exc).__name__}") from None
    start = _json_line(first)
    if start is None or start.get("event") != "RunStarted":
        return None
    last = None
    for raw in reversed(tail):  # the last whole line (a torn last line is skipped)
        last = _json_line(raw)
        if last is not None:
            break
    try:
        stat_time = datetime.fromtimestamp(mtime, timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # a time stamp past what datetime holds
        stat_time = None
    ended = last if last and last.get("event") == "RunEnded" else None
    checkpoint = folder / CHECKPOINT_FILE
    return {
        "version": 0,
        "id": _folder_id(folder, first),
        "task": start.get("task"),
        "status": ended.get("status") if ended else "running",
        "device": start.get("device"),
        "precision": start.get("precision"),
        "autocast_dtype": start.get("autocast_dtype"),
        "versions": {},
        "start_time": None,
        "end_time": stat_time if ended else None,
        "wall_seconds": ended.get("elapsed_seconds") if ended else None,
        "steps": (last or {}).get("step"),
        "total_steps": start.get("total_steps"),
        "final_loss": ended.get("final_loss") if ended else (last or {}).get("loss"),
        "samples_per_second": ended.get("samples_per_second") if ended else None,
        "metrics": ended.get("metrics", {}) if ended else {},
        "test_metrics": ended.get("test_metrics", {}) if ended else {},
        "best": None,
        "checkpoints": {"last": {"path": str(checkpoint)}} if checkpoint.exists() else {},
        "config": start.get("config", {}),
        "notes": start.get("notes", []),
        "message": ended.get("message", "") if ended else "",
        "from_metrics": True,
    }


def _json_line(raw: bytes) -> dict | None:
    try:
        value = parse_json(raw, METRICS_FILE)
    except UnreadableFile:
        return None
    return value if isinstance(value, dict) else None


def run_checkpoint(folder: Path, which: str = "best") -> tuple[Path, list[str]]:
    """The checkpoint of the run in `folder`, and notes: "best": its best-ranked kept one, else checkpoint.pt;
    "last": checkpoint.pt; "advised": the one its summary advised, else as "best". Torch-free."""
    folder = Path(folder)
    last = folder / CHECKPOINT_FILE
    if which == "advised":
        use = str(((load_record(folder) or {}).get("best") or {}).get("use") or "")
        if use == CHECKPOINT_FILE and last.is_file():
            return last, [
                f"{folder}: its summary advised the last weights ({CHECKPOINT_FILE}), its validation split being too small to choose the best by"
            ]
        which = "best"
    if which == "best":
        entries = [
            v
            for key, v in ((load_record(folder) or {}).get("checkpoints") or {}).items()
            if key != "last" and isinstance(v, dict) and v.get("path")
        ]
        for entry in sorted(entries, key=lambda e: e.get("rank", 1) if isinstance(e.get("rank", 1), int) else 1):
            candidate = folder / Path(str(entry["path"])).name
            if candidate.is_file():
                return candidate, []
        if (folder / BEST_FILE).is_file():
            return folder / BEST_FILE, []
        if last.is_file():
            return last, [f"{folder}: the run kept no best checkpoint; using its last one ({CHECKPOINT_FILE})"]
        raise CheckpointError(f"{folder}: no checkpoint in this folder (neither {BEST_FILE} nor {CHECKPOINT_FILE})")
    if last.is_file():
        return last, []
    raise CheckpointError(f"{folder}: no {CHECKPOINT_FILE} in this folder")
