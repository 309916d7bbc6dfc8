"""Atomic file writes: a temp file in the same folder, fsync, rename, so a crash never leaves half a file.

A shared leaf of the engine (see docs/ARCHITECTURE.md): config, checkpoints and run folders write through it.
"""

from __future__ import annotations

import json
import os
import stat
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


def read_jsonl(path: Path, offset: int = 0) -> list[dict]:
    """The JSON objects of a JSON-lines file, skipping a torn last line or any line that isn't a JSON object.

    A run killed mid-write or a full disk can leave half a line at the end of metrics.jsonl; every reader of run
    files goes through here so that such a file still reads. A missing file reads as no records. `offset`: read
    from that byte on (what a run appended to a file that held earlier records).
    """
    records: list[dict] = []
    try:
        with open(path, "rb") as f:
            f.seek(offset)
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


# ----------------------------------------------------------------- path checks before a run
# One-line reasons a path can't be used, found before anything is opened or written: the CLI prints them and
# exits 2, the window can mark the field. Each raises ConfigError(field, "<path>: <cause>").


def shown_path(path: str | os.PathLike) -> str:
    """`path` as printable text: bytes that are not UTF-8 (kept by Python as surrogates) appear as \\xNN."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def check_utf8_path(path: str | os.PathLike, field: str) -> None:
    """Refuse a path whose name is not valid UTF-8 (config.toml and metrics.jsonl could not record it)."""
    from core.errors import ConfigError

    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(field, f"{shown_path(text)}: the name is not valid UTF-8; rename it or pick "
                                 f"another path") from None


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a file" if stat.S_ISREG(mode) else "not a regular file"


def _cause(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def check_regular_file(path: str | os.PathLike, field: str, what: str = "file",
                       allow_folder: bool = False) -> None:
    """Refuse before opening: a missing path, a folder (unless `allow_folder`), a FIFO or device (reading
    one would block forever or never end), or a file this user may not read."""
    from core.errors import ConfigError

    name = shown_path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(field, f"{name}: no such {what}") from None
    except NotADirectoryError:
        raise ConfigError(field, f"{name}: no such {what} (a part of the path is a file, not a folder)") from None
    except OSError as exc:
        raise ConfigError(field, f"{name}: cannot read the {what}: {_cause(exc)}") from None
    if stat.S_ISDIR(info.st_mode) and allow_folder:
        if not os.access(path, os.R_OK | os.X_OK):
            raise ConfigError(field, f"{name}: cannot read the folder: permission denied")
        return
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(field, f"{name}: is {_file_kind(info.st_mode)}, not a {what}")
    if not os.access(path, os.R_OK):
        raise ConfigError(field, f"{name}: cannot read the {what}: permission denied")


def check_writable_folder(path: str | os.PathLike, field: str = "out_dir") -> None:
    """Refuse a folder a run could not create or write in: a file (or a path under a file), a name too long
    for the file system, no write permission, a read-only mount, or a name that is not UTF-8."""
    from core.errors import ConfigError

    check_utf8_path(path, field)
    name = shown_path(path)
    folder = Path(os.path.abspath(os.fspath(path)))
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        info = os.stat(existing)
    except OSError as exc:  # a dangling link, a loop, a folder we may not look into
        raise ConfigError(field, f"{name}: cannot use {shown_path(existing)}: {_cause(exc)}") from None
    if not stat.S_ISDIR(info.st_mode):
        where = "is" if existing == folder else f"is under {shown_path(existing)}, which is"
        raise ConfigError(field, f"{name}: {where} {_file_kind(info.st_mode)}, not a folder")
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max = path_max = None
    for part in folder.relative_to(existing).parts:
        if name_max and len(os.fsencode(part)) > name_max:
            raise ConfigError(field, f"{_short_name(name)}: the name {_short_name(shown_path(part), 24)} is too "
                                     f"long for the file system ({len(os.fsencode(part))} bytes, at most {name_max})")
    if path_max and len(os.fsencode(str(folder))) + 32 > path_max:  # room for the files a run writes
        raise ConfigError(field, f"{_short_name(name)}: the path is too long for the file system "
                                 f"(at most {path_max} bytes)")
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise ConfigError(field, f"{name}: {shown_path(existing)} is on a read-only file system")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "the folder" if existing == folder else f"{shown_path(existing)}, where it would be created"
        raise ConfigError(field, f"{name}: no permission to write in {what}")


def _short_name(text: str, keep: int = 60) -> str:
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 2:]}"
