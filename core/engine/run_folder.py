"""Claiming a run folder: one run writes to a folder at a time, from before its first file to its end. A fresh
run takes the folder it was given, or, when that holds an earlier or a live run, the first free `folder-2`, ...
beside it. The claim is an exclusive lock on `.run.lock`, dropped by the OS however the process ends. A resume
continues in its own folder unless a live run holds it; torchrun's launcher claims it for rank 0 (HELD_ENV).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from core.errors import ConfigError
from core.files import CAN_LOCK, UnreadableFile, is_inside, lock_is_held, read_regular, shown_path, try_lock
from core.text import printable

LOCK_FILE = ".run.lock"
# A run folder's files, as core.engine.checkpoints names them (spelled here so that claiming needs no torch).
CHECKPOINT_FILE = "checkpoint.pt"
METRICS_FILE = "metrics.jsonl"
HELD_ENV = "AMP_CONSOLE_RUN_FOLDER"  # the folder a torchrun launcher claimed for its ranks (rank 0 writes there)
RUN_NOTE_ENV = "AMP_CONSOLE_RUN_NOTE"  # a note from the torchrun launcher that rank 0 reports with RunStarted
MAX_SIBLINGS = 10_000
# The files a run writes atomically (checkpoints, early_stopping's best files, the config, run_record's run.json and
# note.txt, evaluation_report's evaluation.json), spelled here so that claiming needs no torch.
RUN_FILES = (CHECKPOINT_FILE, "best.pt", "config.toml", "run.json", "note.txt", "evaluation.json")
# core.files.atomic_write_bytes names a temp file `.{name}.<random>.tmp`: only those of RUN_FILES (and best-step<N>.pt)
_OWN_NAMES = "|".join(map(re.escape, RUN_FILES))
_TEMP_FILE = re.compile(rf"^\.(?:{_OWN_NAMES}|best-step\d+\.pt)\.[A-Za-z0-9_]+\.tmp$")


def describe_os_error(exc: OSError) -> str:
    """'No space left on device (errno 28)': the cause of an OS error without its chained context."""
    cause = exc.strerror or type(exc).__name__
    return f"{cause} (errno {exc.errno})" if exc.errno else cause


class ClaimedFolder:
    """A folder this process holds for one run; `release()` when the run ends (the OS releases it on exit)."""

    def __init__(self, path: Path, fd: int | None, created: bool, requested: Path, removed: list[str]):
        self.path = path
        self.requested = requested
        self.created = created  # this claim made the folder
        self.removed = removed  # names of the orphaned temp files removed at claim time
        self._fd = fd

    @property
    def note(self) -> str | None:
        """What to tell the user when the run writes elsewhere than it was asked to."""
        if self.path == self.requested:
            return None
        return f"{self.requested} holds an earlier run, which is kept: this run writes to {self.path}"

    def release(self, remove_if_unused: bool = False) -> None:
        """Let go of the folder; `remove_if_unused`: remove the folder this claim created if it holds only the lock."""
        if self._fd is None:
            return
        try:
            if remove_if_unused and self.created:
                with contextlib.suppress(OSError):
                    if [p.name for p in self.path.iterdir()] == [LOCK_FILE]:
                        os.unlink(self.path / LOCK_FILE)  # while still locked: no one else claimed it meanwhile
                        os.rmdir(self.path)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ClaimedFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.release(remove_if_unused=True)  # a launch that failed before its run wrote anything leaves nothing

    def __del__(self) -> None:  # a Trainer set up but never cleaned up (tests) does not keep the lock
        with contextlib.suppress(OSError, AttributeError):
            self.release()


def holds_a_run(folder: Path) -> bool:
    """Whether `folder` has a run's checkpoint or metrics (which a fresh run must not overwrite)."""
    return os.path.exists(folder / CHECKPOINT_FILE) or os.path.exists(folder / METRICS_FILE)  # False on OS errors


def lock_holder(folder: Path) -> int | None:
    """The process id a live run wrote into `folder`'s lock file, if it can be read."""
    try:
        return int(read_regular(Path(folder) / LOCK_FILE, limit=64).split()[0])
    except (OSError, ValueError, IndexError):  # UnreadableFile is a ValueError
        return None


def is_in_use(folder: str | os.PathLike) -> bool:
    """Whether a live run holds `folder` (its lock cannot be taken). Reading only: creates nothing."""
    return lock_is_held(Path(folder) / LOCK_FILE)


def recorded_checkpoint(folder: str | os.PathLike, recorded: str) -> Path:
    """The checkpoint file run.json records as `recorded`, never outside the run folder: a path inside it as
    written, else (the folder was moved) the file of that name in it. FileNotFoundError when there is none;
    UnreadableFile (one line) for a `..`, an absolute path elsewhere with no such file here, or a link out."""
    folder = Path(folder)
    path = Path(recorded)
    shown = printable(shown_path(recorded))
    if ".." in path.parts or "\x00" in recorded:
        raise UnreadableFile(f"run.json's checkpoint {shown} is not a path inside the run folder: not used")
    if path.is_absolute() and not is_inside(folder, path):
        path = folder / path.name
        if not os.path.lexists(path):
            raise UnreadableFile(f"run.json's checkpoint {shown} lies outside the run folder: not used")
    elif not path.is_absolute():
        path = folder / path
    if not is_inside(folder, path):
        raise UnreadableFile(f"run.json's checkpoint {shown} leads out of the run folder (a link?): not used")
    if not path.is_file():
        raise FileNotFoundError(str(path))
    return path


def claim_run_folder(
    requested: str | os.PathLike, resume_from: str | os.PathLike | None = None, keep: bool = False
) -> ClaimedFolder:
    """Claim the folder a run writes to (see the module doc). A run resumed from the checkpoint in `requested`
    continues there, refused if a live run holds it; `keep`: continue in `requested` as a resume does. Problems
    with the path are ConfigErrors naming it and the cause."""
    requested = Path(requested)
    if keep or (resume_from is not None and _same_path(Path(resume_from).parent, requested)):
        claimed = _try_claim(requested, requested, keep_run=True)
        if claimed is None:
            holder = lock_holder(requested)
            who = f" (process {holder})" if holder else ""
            raise ConfigError(
                "out_dir",
                f"{requested}: another run is writing to this folder{who}; wait for it "
                f"to end (or stop it) before resuming it, or resume into another folder",
            )
        return claimed
    for candidate in _candidates(requested):
        claimed = _try_claim(candidate, requested, keep_run=False)
        if claimed is not None:
            return claimed
    raise ConfigError("out_dir", f"{requested}: {MAX_SIBLINGS} folders beside it are taken; choose another folder")


def _candidates(folder: Path):
    yield folder
    parent, name = (folder.parent, folder.name) if folder.name not in ("", ".", "..") else (folder, "run")
    for number in range(2, MAX_SIBLINGS):
        yield parent / f"{name}-{number}"


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _try_claim(folder: Path, requested: Path, keep_run: bool) -> ClaimedFolder | None:
    """Claim `folder`, or None when a live run holds it (or, unless `keep_run`, it holds an earlier run)."""
    if not keep_run and holds_a_run(folder):
        return None  # an earlier run's folder is left untouched (no lock file is added to it)
    created = _make_folder(folder)
    lock_path = folder / LOCK_FILE
    try:
        fd = try_lock(lock_path)
    except OSError as exc:
        raise ConfigError(
            "out_dir",
            f"could not use {folder}: could not create or lock {lock_path.name} in it: {describe_os_error(exc)}",
        ) from None
    if fd is None:
        return None  # a live run holds it
    if not CAN_LOCK and not created and not keep_run:  # no lock to tell: only a folder this call made is ours
        os.close(fd)
        return None
    if not keep_run and holds_a_run(folder):  # a run wrote its first files between our check and the lock
        os.close(fd)
        return None
    with contextlib.suppress(OSError):  # the pid is a courtesy for messages; the lock is what counts
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return ClaimedFolder(folder, fd, created, requested, _remove_temp_files(folder))


def _make_folder(folder: Path) -> bool:
    """Create `folder` (and its parents); True when this call created it, False when it existed."""
    try:
        if not os.path.isdir(folder.parent):
            folder.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(folder)
        return True
    except FileExistsError as exc:
        if os.path.isdir(folder):
            return False
        if exc.filename and Path(exc.filename) != folder:  # a file where a parent folder should be
            raise ConfigError("out_dir", f"could not create {folder}: {exc.filename} is a file, not a folder") from None
        raise ConfigError("out_dir", f"could not create {folder}: a file of that name is in the way") from None
    except OSError as exc:
        raise ConfigError("out_dir", f"could not create {folder}: {describe_os_error(exc)}") from None


def _remove_temp_files(folder: Path) -> list[str]:
    """Remove the orphaned temp files of atomic writes in `folder` (only ever called with its lock held)."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if _TEMP_FILE.match(entry.name) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(entry.name)
    return sorted(removed)
