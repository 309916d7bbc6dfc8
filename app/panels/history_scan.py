"""The run history's scan: every run under the root as rows (`Prepared`: each row's texts, sort keys and filter text,
made off the GUI thread). A root of more than CHILD_ABOVE entries is scanned in a child process (`python -m
app.panels.history_scan ROOT SECONDS`, its rows sent back as JSON lines), so that thousands of folders read never
hold the window's GIL; a smaller one on the caller's thread. Qt-free.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import chain

from app.panels.run_rows import FILTERED, row_cells
from core.engine import run_index
from core.process import child_environment, exit_process, signal_group

SEP = "\x1f"  # between a row's texts, kept as one string (an object the garbage collector never walks)
CHILD_ABOVE = 1_000  # entries in a root scanned in a child (starting one costs about half a second)
CHUNK = 100  # rows per line the child sends
_ENCODE = json.JSONEncoder(default=str, separators=(",", ":"), check_circular=False).encode


def fingerprint(run: dict) -> str:
    """What a rescan compares to tell whether a run's row changed."""
    return repr((run.get("folder"), run.get("status"), run.get("steps"), run.get("wall_seconds"), run.get("note")))


@dataclass
class Prepared:
    """A scan's runs (each brief record as JSON text, its bulky parts as JSON text) with each row's folder, texts,
    filter text, fingerprint, the sort keys a column at a time, each column's longest text and the sort they are in.
    Texts, not dicts: thousands of rows add nothing for the garbage collector to walk on the GUI thread."""

    briefs: list[str]
    bulks: list[str | None]
    folders: list
    texts: list[str]
    hay: list[str]
    fingerprints: list[str]
    keys: list[list]
    longest: list[str]
    sorted: tuple | None = None

    def run(self, i: int) -> dict:
        """Row i's brief record (a new dict)."""
        return json.loads(self.briefs[i])

    def set_note(self, folder, note: str) -> list[int]:
        """The rows of the run in `folder` with this note now; returns their positions."""
        rows = [i for i, f in enumerate(self.folders) if f == folder]
        for i in rows:
            run = self.run(i)
            run["note"] = note
            one = prepare([run])
            for name in _LISTS:
                getattr(self, name)[i] = getattr(one, name)[0]
            for column, key in zip(self.keys, one.keys):
                column[i] = key[0]
        return rows

    def merged(self, *more: Prepared, sort: tuple | None = None) -> Prepared:
        """These runs and those of `more` in new lists (these left as they are), sorted by `sort` when given."""
        parts = [self, *more]
        keys = [p.keys for p in parts if p.keys]
        longest = [p.longest for p in parts if p.longest]
        both = Prepared(
            *(list(chain.from_iterable(getattr(p, n) for p in parts)) for n in _LISTS),
            [list(chain.from_iterable(columns)) for columns in zip(*keys)],
            [max(texts, key=len) for texts in zip(*longest)],
        )
        if sort is not None and both.briefs:
            both.order(*sort)
        return both

    def order(self, column: int, order) -> list[int]:
        """Sort everything by a column's keys (stable; `order` a Qt.SortOrder); the old positions in new order."""
        descending = getattr(order, "value", order) == 1
        new = sorted(range(len(self.briefs)), key=self.keys[column].__getitem__, reverse=descending)
        for name in _LISTS:
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in new])
        self.keys = [[keys[i] for i in new] for keys in self.keys]
        self.sorted = (column, order)
        return new


_LISTS = ("briefs", "bulks", "folders", "texts", "hay", "fingerprints")


def prepare(records) -> Prepared:
    """The rows of `records` (run_index.indexed_records' (briefs, bulks), or whole run dicts): row_cells(run) gives
    (texts, sort keys); the filter text is the FILTERED columns' texts, lower case."""
    runs, bulks = records if isinstance(records, tuple) else (list(records), [None] * len(records))
    prepared = Prepared([], list(bulks), [], [], [], [], [], [])
    for run in runs:
        texts, keys = row_cells(run)
        if not prepared.keys:
            prepared.keys, prepared.longest = [[] for _ in keys], list(texts)
        prepared.briefs.append(_ENCODE(run))
        prepared.folders.append(run.get("folder"))
        prepared.texts.append(SEP.join(texts))
        prepared.hay.append(" ".join(texts[c] for c in FILTERED).lower())
        prepared.fingerprints.append(fingerprint(run))
        for column, key in zip(prepared.keys, keys):
            column.append(key)
        prepared.longest = [max(a, b, key=len) for a, b in zip(prepared.longest, texts)]
    return prepared


# ---- the scan, here or in a child ------------------------------------------------------------------------------------


def scan(root, sort, batches: bool, progress: Callable, stopping: Callable[[], bool], children=None) -> Prepared:
    """Every run under `root` as rows sorted by `sort`; with `batches`, progress(rows so far) as they are read
    (run_index.indexed_records' batches). `children`: a set, scanned in a child process whose group is in it while
    it runs (a stop from another thread kills it); None: on this thread. `stopping()` is asked at each part."""
    so_far, parts = prepare([]), []

    def take(prepared: Prepared, show: bool) -> None:
        nonlocal so_far, parts
        if stopping():
            raise InterruptedError("the window is closing")
        parts.append(prepared)
        if show:  # a batch's last part: every row so far shown
            so_far, parts = so_far.merged(*parts, sort=sort), []
            progress(replace(so_far))  # its own: the model may sort it anew

    if children is None:
        rows(root, batches, take)
    else:
        _from_child(root, batches, take, children)
    return so_far.merged(*parts, sort=sort)


def rows(root, batches: bool, take: Callable) -> None:
    """Every run under `root` as rows handed to take(rows, show): with `batches`, the runs read so far as
    indexed_records reads them (show True), then the others."""
    sent: set = set()

    def batch(records) -> None:
        prepared = prepare(records)
        sent.update(prepared.folders)
        take(prepared, True)

    runs, bulks = run_index.indexed_records(root, batch if batches else None)
    rest = [i for i, run in enumerate(runs) if run.get("folder") not in sent]
    take(prepare(([runs[i] for i in rest], [bulks[i] for i in rest])), False)


def _from_child(root, batches: bool, take: Callable, children: set) -> None:
    argv = [sys.executable, "-m", __name__, str(root), str(run_index.BATCH_SECONDS if batches else 0)]
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True, env=child_environment()
        )
        children.add(child.pid)
        try:
            for line in child.stdout:  # type: ignore[union-attr]
                show, lists = json.loads(line)
                take(Prepared(*lists), show)
            child.wait()
        finally:
            children.discard(child.pid)
            if child.returncode is None:  # a stop: the child and what it started (its pid not reaped yet)
                signal_group(child.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
            child.wait()
            child.stdout.close()  # type: ignore[union-attr]
        if child.returncode != 0:
            err.seek(0)
            lines = [line for line in err.read().splitlines() if line.strip() and not line.startswith("USDT")]
            raise RuntimeError(lines[-1] if lines else f"the scan ended with exit code {child.returncode}")


def _send(prepared: Prepared, show: bool) -> None:
    """The child's rows on stdout, CHUNK to a line (the parent parses one in a few ms, holding its GIL)."""
    n = len(prepared.briefs)
    for start in range(0, n, CHUNK):
        part = [getattr(prepared, name)[start : start + CHUNK] for name in _LISTS]
        part += [[keys[start : start + CHUNK] for keys in prepared.keys], prepared.longest]
        sys.stdout.write(_ENCODE([show and start + CHUNK >= n, part]) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    run_index.BATCH_SECONDS = float(sys.argv[2]) or run_index.BATCH_SECONDS  # the parent's
    rows(sys.argv[1], float(sys.argv[2]) > 0, _send)
    exit_process(0)
