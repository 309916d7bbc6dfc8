"""Atomic file writes: a temp file in the same folder, fsync, rename, so a crash never leaves half a file.

A shared leaf of the engine (see docs/ARCHITECTURE.md): config, checkpoints and run folders write through it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Write `payload` to `path` via a temp file in the same folder, fsync, rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; a saved file gets the usual permissions (0666 less the umask), like open() gives.
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file, skipping a torn last line or any line that isn't a JSON object.

    A run killed mid-write or a full disk can leave half a line at the end of metrics.jsonl; every reader of run
    files goes through here so that such a file still reads. A missing file reads as no records.
    """
    records: list[dict] = []
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    record = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except FileNotFoundError:
        return []
    return records
