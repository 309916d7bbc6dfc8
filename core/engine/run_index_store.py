"""The run history's index file (`<runs root>/.history.sqlite`, core.engine.run_index): its sqlite3 tables, made
anew when the code that makes the rows changes; opening it (read-only when locked or not writable, removed when
damaged), reading its rows and writing what changed in one short transaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
from pathlib import Path

SCHEMA = 3
BUSY_SECONDS = 1.0  # how long a write waits for another process's; past it the changes are not saved this time
_reader_version: str | None = None


def open_index(index: Path, create: bool = False) -> tuple[sqlite3.Connection | None, bool]:
    """(a connection to the index, schema checked, whether it may be written); None when there is none to use
    (missing and not `create`, not a regular file, unreadable). A damaged file is removed (and made anew when
    `create`); a locked or read-only one is read as it is."""
    try:
        info = os.stat(index, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            return None, False
    except OSError:
        return None, False
    else:
        if not stat.S_ISREG(info.st_mode):  # a link or a folder in its place: left alone, scanned without
            return None, False
    uri = Path(os.path.abspath(index)).as_uri() + ("?mode=rwc" if create else "?mode=rw")
    db = None
    try:
        db = sqlite3.connect(uri, uri=True, timeout=BUSY_SECONDS, isolation_level=None)
        _prepare(db)
        return db, True
    except sqlite3.OperationalError:
        close(db)
        return _open_read_only(index), False
    except sqlite3.DatabaseError:
        close(db)
        remove_index(index)
        return open_index(index, create=True) if create else (None, False)


def _open_read_only(index: Path) -> sqlite3.Connection | None:
    """The index of a root this user cannot write, or one another process holds locked, read as it is on disk."""
    db = None
    try:
        db = sqlite3.connect(
            Path(os.path.abspath(index)).as_uri() + "?mode=ro&immutable=1", uri=True, isolation_level=None
        )
        if _stored_version(db) != _version():
            db.close()
            return None
        return db
    except sqlite3.DatabaseError:
        close(db)
        return None


def _prepare(db: sqlite3.Connection) -> None:
    """The tables, made anew when the file is new or another version of the code wrote it."""
    db.execute("PRAGMA synchronous=NORMAL")  # a cache: a commit lost to a power cut is only read again
    if _stored_version(db) == _version():
        return
    with _transaction(db):
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        if _stored_version(db) == _version():
            return  # another process made them meanwhile
        db.execute("DROP TABLE IF EXISTS runs")
        db.execute("DROP TABLE IF EXISTS bulks")
        # the bulky parts in a table of their own: a listing reads only the short rows (a quarter of the file)
        db.execute(
            "CREATE TABLE runs (key TEXT PRIMARY KEY, sig TEXT NOT NULL, id TEXT, name TEXT, nested TEXT, "
            "brief TEXT, listed TEXT)"
        )
        db.execute("CREATE TABLE bulks (key TEXT PRIMARY KEY, bulk TEXT)")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('reader', ?)", (_version(),))


def _stored_version(db: sqlite3.Connection) -> str | None:
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'reader'").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return row[0] if row else None


def _version() -> str:
    """The schema and the code that makes the rows (this module, run_index and run_record, by content)."""
    global _reader_version
    if _reader_version is None:
        digest = hashlib.sha1(str(SCHEMA).encode())
        for name in ("run_index_store", "run_index", "run_record"):
            module = Path(__file__).with_name(f"{name}.py")
            try:
                digest.update(module.read_bytes())
            except OSError:
                digest.update(str(module).encode())
        _reader_version = digest.hexdigest()[:16]
    return _reader_version


class Cache:
    """The index's rows, a dict per column (key -> value): no object per row for the garbage collector. brief and
    bulk stay None unless `parts` asks for them ("full", "split": both; "listed": the LISTED array as the brief)."""

    def __init__(self, db, parts: str | None):
        self.sig: dict[str, str] = {}
        self.nested: dict[str, str | None] = {}
        self.brief: dict[str, str | None] = {}
        self.bulk: dict[str, str | None] = {}
        if db is None:
            return
        columns = {"full": "brief, bulk", "split": "brief, bulk", "listed": "listed, NULL", None: "NULL, NULL"}[parts]
        tables = "runs LEFT JOIN bulks USING (key)" if parts in ("full", "split") else "runs"
        for key, sig, nested, brief, bulk in db.execute(f"SELECT key, sig, nested, {columns} FROM {tables}"):
            self.sig[key], self.nested[key], self.brief[key], self.bulk[key] = sig, nested, brief, bulk


def named_rows(db, keys: list[str], candidates: set[str]) -> dict[str, tuple[str | None, str | None]]:
    """key -> (brief, bulk) of the runs among `candidates` whose id is or starts with one of `keys`, or name is one."""
    out: dict[str, tuple[str | None, str | None]] = {}
    query = (
        "SELECT key, brief, bulk FROM runs LEFT JOIN bulks USING (key) WHERE nested IS NULL AND "
        "(id = ?1 OR name = ?1 OR substr(id, 1, length(?1)) = ?1)"
    )
    for k in keys:
        try:
            rows = db.execute(query, (k,)).fetchall()
        except sqlite3.DatabaseError:
            return out
        out.update((key, (brief, bulk)) for key, brief, bulk in rows if key in candidates)
    return out


def save_rows(db: sqlite3.Connection, rows: list[tuple], gone: set[str]) -> None:
    """Write what changed in one transaction; a locked or read-only index keeps its rows."""
    with contextlib.suppress(sqlite3.DatabaseError), _transaction(db):
        # a row: key, sig, id, name, nested, brief, bulk, listed (run_index._row); the bulk goes to its own table
        db.executemany("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)", [(*row[:6], row[7]) for row in rows])
        db.executemany("INSERT OR REPLACE INTO bulks VALUES (?, ?)", [(row[0], row[6]) for row in rows])
        db.executemany("DELETE FROM runs WHERE key = ?", [(k,) for k in gone])
        db.executemany("DELETE FROM bulks WHERE key = ?", [(k,) for k in gone])


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection):
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.DatabaseError):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def close(db) -> None:
    if db is not None:
        with contextlib.suppress(sqlite3.Error):
            db.close()


def remove_index(index: Path) -> None:
    """A damaged index and its journal files, so that the next listing makes a new one."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            os.unlink(f"{index}{suffix}")
