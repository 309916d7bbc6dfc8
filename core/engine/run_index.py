"""The run history's index: `<runs root>/.history.sqlite`, a cache of what read_run returns per run folder
(torch-free); the folders stay the truth. A row is keyed by the folder's name under the root and a signature (the
lstat of SIGNED_FILES); a folder whose signature differs, that changed within RACY_SECONDS, or whose record is
unreadable, is read again. A missing, corrupt, locked or unwritable index means a listing without it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from core.engine.run_folder import METRICS_FILE, is_in_use
from core.engine.run_index_store import Cache, close, named_rows, open_index, remove_index, save_rows
from core.engine.run_record import NOTE_FILE, RECORD_FILE, read_run, record_problem, remembered
from core.engine.run_record import REMEMBERED_FILE as REMEMBERED_FILE  # the folders the index lists beyond its root
from core.engine.run_record import remember as remember

INDEX_FILE = ".history.sqlite"
RACY_SECONDS = 3  # a file changed this recently is read again next time (coarse timestamps: FAT's are 2 s)
SIGNED_FILES = (RECORD_FILE, NOTE_FILE, METRICS_FILE)  # what read_run reads in a run folder (run.json first)
# a record's nested parts that a list of runs does not show: stored apart (see indexed_records)
BULKY = ("config", "versions", "checkpoints", "metrics", "test_metrics", "notes", "resumed_at")
# what `runs list` shows of a run (and sorts by): stored apart as a JSON array, a fraction of the brief to parse
LISTED = (
    *("id", "name", "task", "status", "precision", "device", "steps", "total_steps", "best", "wall_seconds"),
    *("start_time", "end_time", "unreadable"),
)
BULK_LIMIT = 16 << 20  # and of its bulky parts (as core.files.RECORD_LIMIT bounds run.json)
ROW_LIMIT = 1 << 20  # characters of a stored brief or listed array past which the row is read from its folder
BATCH_SECONDS = 0.25  # the least reading between two of indexed_records' batches (see there)
PARSE_CHUNK = 100  # records parsed in one json.loads: it holds the GIL throughout, a window's thread waits
_LIVE = ("running", "interrupted")  # statuses that depend on the folder's lock, not on its files
# compact, and no check for cycles (a record read from JSON has none)
_ENCODE = json.JSONEncoder(default=str, separators=(",", ":"), check_circular=False).encode


def indexed_runs(root: str | os.PathLike) -> list[dict]:
    """Every run under `root` (its subfolders, and theirs), newest first: read_run's dicts, from the index."""
    return _refresh(Path(root), parts="full")[0]


def listed_runs(root: str | os.PathLike) -> list[dict]:
    """Every run under `root`, newest first, as its LISTED fields and its folder (a short array per run)."""
    return _refresh(Path(root), parts="listed")[0]


def indexed_records(root: str | os.PathLike, batch=None) -> tuple[list[dict], list[str]]:
    """Every run under `root`, newest first, as two lists: its brief record and its BULKY parts as JSON text (for
    the window's history: full_record parses those of the runs it opens). `batch`: called with such a pair of the
    runs read from their folders since the last call, after BATCH_SECONDS of reading and then after half the
    time read so far, those rows saved to the index first."""
    return _refresh(Path(root), parts="split", batch=batch)


def full_record(brief: dict, bulk: str) -> dict:
    """The whole record from indexed_records' pair (brief left as it is)."""
    run = dict(brief)
    parts = _loads(bulk) if type(bulk) is str and len(bulk) <= BULK_LIMIT else None
    if isinstance(parts, dict) and _sound({**run, **parts}):  # else brief (a crafted row's parts left out)
        run.update(parts)
    return run


def runs_named(root: str | os.PathLike, keys) -> list[dict]:
    """The runs under `root` that any of `keys` could name (an id equal to it or starting with it, or a name equal
    to it). Only the folders that could hold one are checked (matching in the index, unknown to it, or holding
    no run of their own); when that finds no run for a key, every folder is."""
    keys = [str(k) for k in keys]
    runs, _bulks = _refresh(Path(root), parts=None, keys=keys, quick=True)
    matched = [k for k in keys if any(_names(run, [k]) for run in runs)]
    if len(matched) < len(keys):  # a run whose id changed in its folder since it was indexed, say
        runs, _bulks = _refresh(Path(root), parts=None, keys=keys)
    return runs


# ---- the scan ------------------------------------------------------------------------------------------------------


def _refresh(
    root: Path, parts: str | None, keys: list[str] | None = None, quick: bool = False, batch=None
) -> tuple[list[dict], list]:
    """Every run under `root` (those `keys` may name when given), newest first, and their bulky parts as JSON when
    `parts` is "split" (else a list of None), the index brought up to date. `parts`: what of the stored records
    to read ("full", "split", "listed"; None: the matches of `keys`, afterwards). `quick`: see runs_named."""
    index = root / INDEX_FILE
    db, writable = open_index(index)
    try:
        cached = Cache(db, parts)
    except sqlite3.DatabaseError as exc:
        close(db)
        db, cached = None, Cache(None, None)
        if writable and not isinstance(exc, sqlite3.OperationalError):  # damaged: the next listing starts anew
            remove_index(index)
    try:
        skip = None
        if quick and keys is not None and db is not None:  # the indexed runs that cannot match: not looked at
            tops = {k.split("/", 1)[0] for k in [*keys, *named_rows(db, keys, set(cached.sig))]}
            skip = {k for k, nested in cached.nested.items() if nested is None and k not in tops}

        def saved_batch(scan: _Scan) -> None:  # the rows so far written, the runs read handed on
            nonlocal db, writable
            if scan.rows and db is None and not os.path.lexists(index):
                db, writable = open_index(index, create=True)
            if scan.rows and writable and db is not None:
                save_rows(db, scan.rows, set())
                scan.rows = []
            read = [scan.fresh[k] for k in scan.pending]
            batch((_parse_all([run for run, _bulk in read], sys.maxsize), [bulk for _run, bulk in read]))

        on_batch = saved_batch if batch is not None else None
        found, fresh, rows, gone = _scan(root, cached, skip, parts == "split", parts == "listed", on_batch)
        if (rows or gone) and db is None and found and not os.path.lexists(index):
            db, writable = open_index(index, create=True)
        if (rows or gone) and writable and db is not None:
            save_rows(db, rows, gone)
        runs, bulks, repaired = _select(db, root, found, fresh, cached, keys, parts)
        if repaired and writable and db is not None:
            save_rows(db, repaired, set())
        return _newest_first(runs, bulks)
    finally:
        close(db)


def _scan(root: Path, cached: Cache, skip=None, split: bool = False, listed: bool = False, on_batch=None):
    """What is under `root` now: the keys of the runs found (in folder order), the runs read afresh, the rows to
    write and the keys gone. `skip`: folders not to look at (nothing is then gone)."""
    scan = _Scan(cached, split, listed, on_batch)
    try:
        with os.scandir(root) as entries:
            children = sorted(e.name for e in entries if _is_dir(e))
    except OSError:
        return scan.found, scan.fresh, scan.rows, set()
    if skip:
        children = [name for name in children if name not in skip]
    prefix = os.path.join(str(root), "")
    for name in children:
        folder = prefix + name
        nested = scan.visit(name, folder, top=True)
        for sub in nested:  # a folder that is no run itself, e.g. a sweep's: its subfolders with a run.json
            scan.visit(f"{name}/{sub}", os.path.join(folder, sub), top=False)
    for folder in remembered(root):  # runs outside the root (core.engine.run_record.remember): keyed by path
        if not skip or folder not in skip:
            scan.visit(folder, folder, top=False)
    return scan.found, scan.fresh, scan.rows, set() if skip else set(cached.sig) - scan.seen


class _Scan:
    def __init__(self, cached: Cache, split: bool = False, listed: bool = False, on_batch=None):
        self.cached, self.split, self.listed, self.on_batch = cached, split, listed, on_batch
        self.pending: list[str] = []  # runs read since the last batch
        self.started = time.monotonic()
        self.due = self.started + BATCH_SECONDS
        self.racy = time.time_ns() - RACY_SECONDS * 1_000_000_000
        self.found: list[str] = []
        self.fresh: dict[str, tuple[dict, str | None]] = {}  # key -> (the run as kept, its bulky parts)
        self.rows: list[tuple] = []
        self.seen: set[str] = set()

    def visit(self, key: str, folder: str, top: bool) -> list[str]:
        """Take in the folder `key`: a run (from the index when its signature matches, else read), or, at the top
        level, a folder that is none: the subfolders to look into (there only those with a run.json count)."""
        sig, trusted, has_record = _signature(folder, self.racy)
        if not top and not has_record:
            return []
        self.seen.add(key)
        if trusted and self.cached.sig.get(key) == sig:
            nested = self.cached.nested[key]
            if nested is None:
                self.found.append(key)
                return []
            names = _loads(nested)
            if isinstance(names, list) and all(_plain_name(n) for n in names):
                return names if top else []
            # a damaged row: the folder is read below, as a new one
        # only a row that can be trusted is written: the others are read again anyway (a live run's folder,
        # which changes at every scan, never costs a write, nor an event to the window's watcher on the root)
        run = read_run(folder)
        if run is None:
            subfolders = _subfolders(folder) if top else []
            if trusted:
                self.rows.append(_row(key, sig, None, subfolders))
            return subfolders
        if not top and not os.path.isabs(key):
            run["name"] = key
        self.found.append(key)
        # a record read_run could not read, or built from metrics.jsonl beside a run.json, is read again
        # next time (what made it so may go without a stat changing)
        odd = run.get("unreadable") or (has_record and run.get("from_metrics"))
        stored = _row(key, sig, run, None)
        if trusted and not odd:
            self.rows.append(stored)
        # and its bulky parts as JSON; brief at once when that is all that is kept, as JSON text when split (at
        # 10,000 runs read afresh, records are many objects for the garbage collector to walk meanwhile)
        kept = _listed(run) if self.listed else stored[5] if self.split else run
        self.fresh[key] = (kept, stored[6])
        if self.on_batch is not None:
            self.pending.append(key)
            if time.monotonic() >= self.due:
                self.on_batch(self)
                now = time.monotonic()
                self.pending, self.due = [], now + max(BATCH_SECONDS, (now - self.started) / 2)
        return []


def _plain_name(name) -> bool:
    """Whether `name` (from the index) is one folder's name: never a path out of its parent."""
    return type(name) is str and name not in ("", ".", "..") and "/" not in name and os.sep not in name


def _signature(folder: str, racy_ns: int) -> tuple[str, bool, bool]:
    """(the folder's signature, whether it can be trusted, whether run.json is there). The folder's own stat is
    part of it when run.json is not there; any error but a missing file makes it untrusted."""
    prefix = folder + os.sep
    parts: list[str] = []
    trusted = True
    for name in SIGNED_FILES:
        if name == METRICS_FILE and parts[0] != "-":
            break  # read_run reads metrics.jsonl only when there is no run.json
        try:
            info = os.stat(prefix + name, follow_symlinks=False)
        except FileNotFoundError:
            parts.append("-")
            continue
        except OSError:
            return "", False, True
        if info.st_mtime_ns > racy_ns:
            trusted = False
        parts.append(f"{info.st_ino}.{info.st_size}.{info.st_mtime_ns}.{info.st_mode}")
    has_record = parts[0] != "-"
    if not has_record:
        try:
            info = os.stat(folder)  # through a link to it: read_run reads through it too
        except OSError:
            return "", False, False
        if info.st_mtime_ns > racy_ns:
            trusted = False
        parts.append(f"d{info.st_ino}.{info.st_mtime_ns}.{info.st_mode}")
    return "|".join(parts), trusted, has_record


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _subfolders(folder: str) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            return sorted(e.name for e in entries if _is_dir(e))
    except OSError:
        return []


def _row(key: str, sig: str, run: dict | None, nested: list[str] | None) -> tuple:
    if run is None:
        return key, sig, None, None, _ENCODE(nested or []), None, None, None
    ident = run.get("id")
    # the brief keeps every key in its place (None for the bulky ones), so the full record reads back in order
    bulk = {k: run[k] for k in BULKY if k in run}
    return (
        key,
        sig,
        None if ident is None else str(ident),
        str(run.get("name") or key),
        None,
        _ENCODE(_brief(run)),
        _ENCODE(bulk),
        _ENCODE([run.get(k) for k in LISTED]),
    )


def _select(
    db, root: Path, found: list[str], fresh: dict, cached: Cache, keys: list[str] | None, parts: str | None
) -> tuple[list[dict], list, list[tuple]]:
    """The runs and (parts "split") bulky parts of the runs found (those `keys` may name): fresh ones as read, the
    others parsed from the index with their folder and live status; and the rows to write again (a stored
    record that does not parse is read from its folder). Lists, not pairs: less garbage to walk."""
    if keys is None:
        wanted = found
        stored = {k: (cached.brief[k], cached.bulk[k]) for k in found if k not in fresh}
    else:
        stored = named_rows(db, keys, set(found) - set(fresh)) if db is not None else {}
        wanted = [k for k in found if k in stored or (k in fresh and _names(fresh[k][0], keys))]
    from_index = [stored[k] for k in wanted if k not in fresh]
    parsed = iter(
        _parse_listed([brief for brief, _bulk in from_index])
        if parts == "listed"
        else _parse(from_index, full=parts in ("full", None))
    )  # in `wanted`'s order
    stored_bulks = iter([bulk for _brief, bulk in from_index])
    del stored, from_index
    split = parts == "split"
    base = str(root)
    prefix = os.path.join(base, "")
    runs, bulks, repaired = [], [], []
    for key in wanted:
        if key in fresh:
            run, bulk = fresh[key]
        else:
            outside = os.path.isabs(key)  # a remembered folder outside the root
            folder = key if outside else prefix + key if "/" not in key else os.path.join(base, *key.split("/"))
            run, bulk = next(parsed), next(stored_bulks)
            if not _sound(run):  # a row damaged inside a sound file (or crafted): the folder read instead
                run = read_run(folder)
                if run is None:
                    continue
                if "/" in key and not outside:
                    run["name"] = key
                sig = cached.sig.get(key)
                if sig and not run.get("unreadable"):
                    repaired.append(_row(key, sig, run, None))
                if split:
                    run, bulk = _brief(run), _ENCODE({k: run[k] for k in BULKY if k in run})
                elif parts == "listed":
                    run = _listed(run)
            else:
                run["folder"] = folder
                if run.get("status") in _LIVE:
                    run["status"] = "running" if is_in_use(folder) else "interrupted"
        runs.append(run)
        bulks.append(bulk if split else None)
    if split:  # the runs read afresh, kept as text (see _Scan.visit)
        fresh_at = [i for i, run in enumerate(runs) if type(run) is str]
        for i, run in zip(fresh_at, _parse_all([runs[i] for i in fresh_at], sys.maxsize)):
            runs[i] = run
    return runs, bulks, repaired


def _sound(run) -> bool:
    """Whether a record parsed from the index is one read_run could have made: its fields of the right types."""
    if not isinstance(run, dict) or record_problem(run):
        return False
    return all(type(run.get(k)) in (str, type(None)) for k in ("name", "note", "unreadable", "note_unreadable"))


def _brief(run: dict) -> dict:
    return {k: None if k in BULKY else v for k, v in run.items()}


def _listed(run: dict) -> dict:
    listed = {k: run.get(k) for k in LISTED}
    listed["folder"] = run.get("folder")
    return listed


def _parse_listed(texts: list) -> list:
    """The stored LISTED arrays as dicts; None for one that does not parse as such."""
    return [
        dict(zip(LISTED, values)) if type(values) is list and len(values) == len(LISTED) else None
        for values in _parse_all(texts)
    ]


def _parse(stored: list[tuple[str | None, str | None]], full: bool) -> list:
    """The stored records (brief, bulk) parsed in bulk, merged when `full`; None for one that does not parse."""
    briefs = _parse_all([brief for brief, _bulk in stored])
    if full:
        bulks = _parse_all([bulk for _brief, bulk in stored], limit=BULK_LIMIT)
        for i, bulk in enumerate(bulks):
            if isinstance(briefs[i], dict) and isinstance(bulk, dict):
                briefs[i].update(bulk)
            else:
                briefs[i] = None
    return briefs


def _parse_all(texts: list, limit: int = ROW_LIMIT) -> list:
    """The JSON `texts` parsed, None for one that does not parse, is no text or is longer than `limit`."""
    texts = [t if type(t) is str and len(t) <= limit else "null" for t in texts]
    out: list = []
    for i in range(0, len(texts), PARSE_CHUNK):
        chunk = texts[i : i + PARSE_CHUNK]
        try:
            out += json.loads("[" + ",".join(chunk) + "]")
        except (TypeError, ValueError):
            out += [_loads(t) for t in chunk]
    return out


def _loads(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _names(run: dict, keys: list[str]) -> bool:
    ident = str(run.get("id", ""))
    return any(run.get("name") == k or ident == k or ident.startswith(k) for k in keys)


def _newest_first(runs: list[dict], bulks: list) -> tuple[list[dict], list]:
    """Both lists newest first (by start time, else end time); ties keep the folder order."""

    def when(run: dict) -> str:  # text only: a record of any type sorts (an unreadable one last)
        value = run.get("start_time") or run.get("end_time")
        return value if isinstance(value, str) else ""

    order = sorted(range(len(runs)), key=lambda i: when(runs[i]), reverse=True)
    return [runs[i] for i in order], [bulks[i] for i in order]


find_runs = indexed_runs  # the name `runs`, the remote agent and the preview use
