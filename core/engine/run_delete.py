"""Deleting a run folder of the runs root, as `amp-console runs delete` and the window's history do: never
outside the root, never through a link (the folder is reached one part at a time without following one, and
links inside it are removed, never followed), never one a live run holds. Every refusal is one line."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
from pathlib import Path

from core.engine.run_folder import is_in_use
from core.files import file_kind, is_inside, shown_path

_NO_LINK = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class RunDeleteError(Exception):
    """A run folder that is not deleted (or not wholly): str() is the one-line reason."""


def check_deletable(root: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """`folder` as an absolute path when it may be deleted (see the module doc); RunDeleteError says why not."""
    shown = shown_path(folder)
    base, path = Path(os.path.abspath(root)), Path(os.path.abspath(folder))
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        parts = ()
    outside = RunDeleteError(f"{shown} is not a folder under the runs root {shown_path(root)}: not deleted")
    if not parts or ".." in parts:
        raise outside
    current = base
    for part in parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise RunDeleteError(f"{shown}: no such run folder (deleted already?)") from None
        except OSError as exc:
            raise RunDeleteError(f"cannot delete {shown}: {exc.strerror or type(exc).__name__}") from None
        if stat.S_ISLNK(mode):
            which = shown if current == path else f"{shown}: {shown_path(current)}"
            raise RunDeleteError(
                f"{which} is a symbolic link; only real run folders under the runs root are "
                f"deleted (remove the link itself if you meant it)"
            )
        if not stat.S_ISDIR(mode):
            raise RunDeleteError(f"{shown} is {file_kind(mode)}, not a run folder: not deleted")
    if not is_inside(base, path):
        raise outside
    if is_in_use(path):
        raise RunDeleteError(f"{shown} is in use by a running run; stop it first")
    return path


def delete_run(root: str | os.PathLike, folder: str | os.PathLike) -> None:
    """Delete the run folder `folder` of the runs root `root` after check_deletable, reached by descriptors one
    part at a time (so a part swapped for a link meanwhile is not followed); an OS error is a RunDeleteError."""
    path = check_deletable(root, folder)
    base = Path(os.path.abspath(root))
    parts = path.relative_to(base).parts
    try:
        if sys.version_info >= (3, 11) and getattr(shutil.rmtree, "avoids_symlink_attacks", False) and _NO_LINK:
            fds = [os.open(base, os.O_RDONLY | _DIRECTORY)]
            try:
                for part in parts[:-1]:
                    fds.append(os.open(part, os.O_RDONLY | _DIRECTORY | _NO_LINK, dir_fd=fds[-1]))
                shutil.rmtree(parts[-1], dir_fd=fds[-1])
            finally:
                for fd in fds:
                    os.close(fd)
        else:
            shutil.rmtree(path)
    except OSError as exc:
        hint = "; check its permissions" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""
        raise RunDeleteError(
            f"could not delete {shown_path(folder)}: {exc.strerror or type(exc).__name__}{hint}"
        ) from None
