"""Atomic writes, streamed writes' partial files, temp files with the usual permissions, lock files, files
opened only when regular, and path checks before a run."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

from core.text import first_line, printable, size

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None  # type: ignore[assignment]

CAN_LOCK = fcntl is not None or msvcrt is not None  # False: no lock primitive (see try_lock)
_HELD_ERRNOS = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, getattr(errno, "EDEADLK", errno.EACCES)}
_NO_LINK = getattr(os, "O_NOFOLLOW", 0)  # open() refuses a link as the last part of the path
_NO_WAIT = getattr(os, "O_NONBLOCK", 0)  # open() of a FIFO returns at once instead of waiting for a writer
_LOCK_OFFSET = 1 << 30  # msvcrt locks this byte, far past the lock file's text, so that readers of it still read


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Write `payload` to `path` through atomic_open: never a half-written file."""
    with atomic_open(path) as f:
        f.write(payload)


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A new binary file to write (a locked PartialFile beside `path`), renamed over `path` when the block ends
    without an error and removed when it raises."""
    with PartialFile(path) as partial, open(partial._fd, "wb", closefd=False) as f:
        yield f
        f.flush()
        partial.commit()


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new entry in `folder` durable (best effort: a file system without it is left as is)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


# tempfile.mkstemp/mkdtemp create 0600/0700; a saved file gets open()'s and mkdir()'s modes, with the umask
# applied by the kernel (reading it means setting it, which races with other threads).


def _new_entry(folder: str | os.PathLike, prefix: str, suffix: str, create) -> tuple[Any, str]:
    """(create(path), path) of a new name `prefix<random>suffix` in `folder`, retried while the name is taken."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            return create(path), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", os.fspath(folder))


def new_temp_file(folder: str | os.PathLike, prefix: str, suffix: str = ".tmp") -> tuple[int, str]:
    """(fd, path) of a new, empty file `prefix<random>suffix` in `folder`, open read-write, mode 0666 - umask."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    return _new_entry(folder, prefix, suffix, lambda path: os.open(path, flags, 0o666))


def new_temp_folder(folder: str | os.PathLike, prefix: str, suffix: str = ".tmp") -> str:
    """The path of a new, empty folder `prefix<random>suffix` in `folder`, mode 0777 - umask."""
    return _new_entry(folder, prefix, suffix, lambda path: os.mkdir(path, 0o777))[1]


# A streamed write goes to `.<name>.<random>.tmp`, flock'ed for its writer's life, renamed when complete; the
# next writer to the target removes those no lock is held on (SIGKILL leaves them). Windows locks nothing.


def _partial_pattern(name: str):
    return re.compile(rf"^\.{re.escape(name)}\.[0-9a-f]{{12}}\.tmp$")  # new_temp_file's name for `.<name>.`


class PartialFile:
    """The locked temp file (`path`) a streamed write to `target` goes to; commit() renames it over."""

    def __init__(self, target: str | os.PathLike):
        self.target = Path(target)
        self.path: str | None = None
        self._fd: int | None = None

    def __enter__(self):
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self._fd, self.path = new_temp_file(self.target.parent, f".{self.target.name}.")
        try:
            if fcntl is not None:  # never held elsewhere: the name is new
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            self.__exit__()
            raise
        return self

    def commit(self) -> None:
        assert self._fd is not None and self.path is not None
        os.fsync(self._fd)  # the writer's data, whichever descriptor wrote it
        if fcntl is None:  # Windows renames no open file; POSIX keeps the lock until the name is gone
            self._release()
        os.replace(self.path, self.target)
        self.path = None
        fsync_dir(self.target.parent)
        self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __exit__(self, *exc) -> None:
        if self.path is not None:
            with suppress(FileNotFoundError):
                os.unlink(self.path)
            self.path = None
        self._release()


def remove_abandoned_partials(target: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Remove earlier PartialFiles of `target` no lock is held on: (names removed, names that could not be)."""
    target = Path(target)
    folder = target.parent
    pattern = _partial_pattern(target.name)
    removed: list[str] = []
    kept: list[str] = []
    try:
        names = sorted(n for n in os.listdir(folder) if pattern.match(n))
    except OSError:
        return removed, kept
    for name in names:
        path = folder / name
        try:
            # one that cannot be opened to probe its lock may be another user's live write: left alone
            if not stat.S_ISREG(os.lstat(path).st_mode) or not os.access(path, os.R_OK) or lock_is_held(path):
                continue
            os.unlink(path)
            removed.append(name)
        except FileNotFoundError:
            continue
        except OSError:
            kept.append(name)
    return removed, kept


# A lock file's exclusive lock says "a live process owns this"; the system drops it however the process ends.
# POSIX: flock; Windows: msvcrt.locking on one byte past the text (mandatory there).


def _lock(fd: int, shared: bool = False) -> bool:
    """Take the lock on `fd` without waiting: True, or False when another process holds it (OSError else)."""
    try:
        if fcntl is not None:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        elif msvcrt is not None:
            os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError as exc:
        if isinstance(exc, BlockingIOError) or exc.errno in _HELD_ERRNOS:
            return False
        raise
    return True


def try_lock(path: str | os.PathLike) -> int | None:
    """The fd holding an exclusive lock on `path` (created if missing), or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | _NO_LINK | _NO_WAIT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{shown_path(Path(path).name)} is {file_kind(mode)}, not a file")
        if _lock(fd):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def lock_is_held(path: str | os.PathLike) -> bool:
    """Whether a live process holds try_lock's lock on `path`; False for a missing file, a link or not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | _NO_LINK | _NO_WAIT | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        if not _lock(fd, shared=True):
            return True
        if fcntl is None and msvcrt is not None:
            os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    except OSError:
        return True  # cannot be locked for another reason: taken as held, so nothing is reused by mistake
    finally:
        os.close(fd)
    return False


def read_jsonl(path: Path, offset: int = 0) -> list[dict]:
    """The JSON objects of a JSON-lines file from byte `offset` on, torn or bad lines skipped."""
    records: list[dict] = []
    try:
        f = open_regular_no_link(path)
    except FileNotFoundError:
        return []
    with f:
        f.seek(offset)
        while raw := f.readline(RECORD_LIMIT + 1):
            if len(raw) > RECORD_LIMIT:  # skip the rest of an oversized line
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(RECORD_LIMIT)
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


# Record files may come from others (an export, a remote host): a regular file, not a link, of bounded size,
# UTF-8 JSON of bounded depth; else one UnreadableFile naming the reason.

RECORD_LIMIT = 16 * 2**20  # bytes: far above any record the engine writes (run.json is a few KiB)
JSON_DEPTH_LIMIT = 64


class UnreadableFile(ValueError):
    """A record file that can't be read as one; str() is the one-line reason, naming the file."""


def is_inside(root: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether `path`, links resolved, is `root` or lies under it."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


_READ_FLAGS = os.O_RDONLY | _NO_LINK | _NO_WAIT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _open_regular(path: str | os.PathLike, follow_links: bool = False) -> tuple[int, os.stat_result]:
    """An fd on the regular file `path` and its stat, opened without blocking and, unless `follow_links`, not
    through a link; FileNotFoundError when missing, UnreadableFile for anything else."""
    name = shown_path(path) if follow_links else _file_name(path)
    try:
        fd = os.open(path, _READ_FLAGS & ~_NO_LINK if follow_links else _READ_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if not follow_links and (exc.errno == errno.ELOOP or os.path.islink(path)):
            raise UnreadableFile(f"{name} is a symbolic link, not a file") from None
        raise UnreadableFile(f"cannot read {name}: {_cause(exc)}") from None
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise UnreadableFile(f"cannot read {name}: {_cause(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnreadableFile(f"{name} is {file_kind(info.st_mode)}, not a file")
    return fd, info


def _file_name(path) -> str:
    return shown_path(os.path.basename(os.fspath(path)))


def open_regular_no_link(path: str | os.PathLike):
    """`path` opened "rb" when it is a regular file, not a link (_open_regular's errors)."""
    return os.fdopen(_open_regular(path)[0], "rb")


def read_regular(path: str | os.PathLike, limit: int = RECORD_LIMIT) -> bytes:
    """The bytes of a regular file, not a link, of at most `limit` bytes (_open_regular's errors)."""
    fd, info = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if info.st_size > limit:
            raise UnreadableFile(
                f"{_file_name(path)} is {size(info.st_size)}, more than a record may be ({size(limit)})"
            )
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise UnreadableFile(f"cannot read {_file_name(path)}: {_cause(exc)}") from None
    if len(data) > limit:  # it grew while being read
        raise UnreadableFile(f"{_file_name(path)} is more than a record may be ({size(limit)})")
    return data


def open_regular(path: str | os.PathLike):
    """`path` opened unbuffered "rb", links followed, when it is a regular file (_open_regular's errors)."""
    return os.fdopen(_open_regular(path, follow_links=True)[0], "rb", buffering=0)


def _depth_exceeds(value, limit: int) -> bool:
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        deeper: list = []
        for item in level:
            if isinstance(item, dict):
                deeper.extend(item.values())
            elif isinstance(item, list):
                deeper.extend(item)
        level, depth = deeper, depth + 1
    return False


def parse_json(payload: bytes, name: str, depth_limit: int = JSON_DEPTH_LIMIT):
    """`payload` as JSON (UTF-8, nested at most `depth_limit` deep), or UnreadableFile naming `name`."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableFile(f"{name} is not UTF-8 text") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnreadableFile(f"{name} is nested more than {depth_limit} deep") from None
    except ValueError as exc:
        raise UnreadableFile(f"{name} is not valid JSON ({first_line(exc)})") from None
    # fewer brackets than the limit cannot nest that deep: the walk is skipped for nearly every record
    if text.count("{") + text.count("[") >= depth_limit and _depth_exceeds(value, depth_limit):
        raise UnreadableFile(f"{name} is nested more than {depth_limit} deep")
    return value


def read_json_record(path: str | os.PathLike, limit: int = RECORD_LIMIT, depth_limit: int = JSON_DEPTH_LIMIT) -> dict:
    """A JSON object from a regular file (read_regular's rules, parse_json's limits)."""
    name = _file_name(path)
    value = parse_json(read_regular(path, limit), name, depth_limit)
    if not isinstance(value, dict):
        raise UnreadableFile(f"{name} holds {type(value).__name__}, not a JSON object")
    return value


# Path checks before a run: each raises ConfigError(field, "<path>: <cause>").


def shown_path(path: str | os.PathLike) -> str:
    """`path` as printable text: bytes that are not UTF-8 (kept by Python as surrogates) appear as \\xNN."""
    return os.fsdecode(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def check_utf8_path(path: str | os.PathLike, field: str) -> None:
    """Refuse a path whose name is not valid UTF-8 (config.toml and metrics.jsonl could not record it)."""
    from core.errors import ConfigError

    text = os.fsdecode(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            field, f"{shown_path(text)}: the name is not valid UTF-8; rename it or pick another path"
        ) from None


def file_kind(mode: int) -> str:
    """What a path of this st_mode is, as messages name it ("a folder", "a named pipe (FIFO)", ...)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a file" if stat.S_ISREG(mode) else "a special file"


def _cause(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def check_regular_file(path: str | os.PathLike, field: str, what: str = "file", allow_folder: bool = False) -> None:
    """Refuse a missing path, a folder (unless `allow_folder`), a FIFO or device, or an unreadable file."""
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
        raise ConfigError(field, f"{name}: is {file_kind(info.st_mode)}, not a {what}")
    if not os.access(path, os.R_OK):
        raise ConfigError(field, f"{name}: cannot read the {what}: permission denied")


def check_writable_folder(path: str | os.PathLike, field: str = "out_dir") -> None:
    """Refuse a folder a run could not create or write in (under a file, too long, read-only, not UTF-8)."""
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
        raise ConfigError(field, f"{name}: {where} {file_kind(info.st_mode)}, not a folder")
    name_max: int | None
    path_max: int | None
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max = path_max = None
    for part in folder.relative_to(existing).parts:
        if name_max and len(os.fsencode(part)) > name_max:
            raise ConfigError(
                field,
                f"{_short_name(name)}: the name {_short_name(shown_path(part), 24)} is too "
                f"long for the file system ({len(os.fsencode(part))} bytes, at most {name_max})",
            )
    if path_max and len(os.fsencode(str(folder))) + 32 > path_max:  # room for the files a run writes
        raise ConfigError(
            field, f"{_short_name(name)}: the path is too long for the file system (at most {path_max} bytes)"
        )
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
    return text if len(text) <= keep else f"{text[: keep // 2]}...{text[-keep // 2 :]}"


def log_tail(path: Path) -> str:
    """The last meaningful line of a log (a run's one-line error, when setup failed); "" when none or unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not set(line.strip()) <= {"*"}]
    return printable(first_line(lines[-1])) if lines else ""
