"""core.files: temp files and folders get open()'s and mkdir()'s permissions without touching the process's
umask (other threads create files meanwhile), and one lock helper serves run folders and sweeps."""

from __future__ import annotations

import errno
import os
import stat
import threading

import pytest

import core.files as files
from core.errors import ConfigError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes and flock are POSIX")


@pytest.fixture
def mask_027():
    """A umask of 027 for the test, set before umask calls are watched, and the calls made while it runs."""
    before = os.umask(0o027)
    real = os.umask
    calls: list[int] = []

    def watched(mask):
        calls.append(mask)
        return real(mask)

    os.umask = watched
    try:
        yield calls
    finally:
        os.umask = real
        os.umask(before)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_temp_files_and_folders_get_the_usual_permissions_without_reading_the_umask(tmp_path, mask_027):
    fd, path = files.new_temp_file(tmp_path, ".data.csv.")
    os.close(fd)
    folder = files.new_temp_folder(tmp_path, ".export.")
    files.atomic_write_bytes(tmp_path / "config.toml", b"x = 1\n")
    assert _mode(path) == 0o640 and _mode(tmp_path / "config.toml") == 0o640 and _mode(folder) == 0o750
    assert os.path.basename(path).startswith(".data.csv.") and path.endswith(".tmp")
    assert mask_027 == []  # os.umask was never called: no moment when the process's mask is 0


def test_atomic_writes_never_open_a_window_for_another_threads_files(tmp_path, mask_027):
    stop = threading.Event()
    made: list[str] = []

    def other_thread():  # creates files the ordinary way while atomic writes run
        n = 0
        while not stop.is_set():
            path = tmp_path / f"other-{n}"
            with open(path, "wb"):
                pass
            made.append(str(path))
            n += 1

    writer = threading.Thread(target=other_thread)
    writer.start()
    try:
        for n in range(200):
            files.atomic_write_bytes(tmp_path / f"saved-{n % 5}", b"payload")
    finally:
        stop.set()
        writer.join()
    assert made and all(_mode(path) == 0o640 for path in made)
    assert mask_027 == []


def test_the_prediction_writer_gets_a_saved_files_permissions(tmp_path, mask_027):
    import pyarrow as pa

    from core.runs.predict_output import AtomicTableWriter

    schema = pa.schema([("line", pa.int64())])
    with AtomicTableWriter(tmp_path / "out.csv", schema) as writer:
        writer.write(pa.table({"line": [1, 2]}))
        writer.commit()
    assert _mode(tmp_path / "out.csv") == 0o640 and mask_027 == []


def test_a_lock_is_exclusive_and_its_probe_reads_only(tmp_path):
    lock = tmp_path / ".run.lock"
    assert not files.lock_is_held(lock) and not lock.exists()  # the probe creates nothing
    fd = files.try_lock(lock)
    assert fd is not None and files.lock_is_held(lock)
    assert files.try_lock(lock) is None  # another open file (as another process would have) cannot take it
    os.close(fd)
    assert not files.lock_is_held(lock)
    again = files.try_lock(lock)
    assert again is not None
    os.close(again)


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES])
def test_held_errnos_read_as_held_and_others_as_errors(tmp_path, monkeypatch, code):
    def refuse(fd, how):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(files.fcntl, "flock", refuse)
    assert files.try_lock(tmp_path / "a.lock") is None and files.lock_is_held(tmp_path / "a.lock")

    def fail(fd, how):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(files.fcntl, "flock", fail)
    with pytest.raises(OSError):
        files.try_lock(tmp_path / "a.lock")


def test_without_fcntl_the_lock_is_a_byte_locked_with_msvcrt(tmp_path, monkeypatch):
    held: set[int] = set()  # inodes whose byte is locked, as Windows would hold it for the process

    class FakeMsvcrt:
        LK_NBLCK, LK_UNLCK = 2, 0

        @staticmethod
        def locking(fd, mode, nbytes):
            assert os.lseek(fd, 0, os.SEEK_CUR) == files._LOCK_OFFSET and nbytes == 1
            inode = os.fstat(fd).st_ino
            if mode == FakeMsvcrt.LK_UNLCK:
                held.discard(inode)
            elif inode in held:
                raise OSError(errno.EACCES, "Permission denied")
            else:
                held.add(inode)

    monkeypatch.setattr(files, "fcntl", None)
    monkeypatch.setattr(files, "msvcrt", FakeMsvcrt)
    lock = tmp_path / ".sweep.lock"
    fd = files.try_lock(lock)
    assert fd is not None and files.lock_is_held(lock) and files.try_lock(lock) is None
    held.clear()  # the holder ends
    assert not files.lock_is_held(lock) and not held  # the probe let go of the byte it took
    os.close(fd)


def test_a_run_folder_and_a_sweep_lock_alike(tmp_path):
    from core.engine.run_folder import LOCK_FILE, claim_run_folder, is_in_use
    from core.lab.sweep import LOCK_FILE as SWEEP_LOCK
    from core.lab.sweep import _SweepLock, sweep_in_use

    claimed = claim_run_folder(tmp_path / "run")
    assert is_in_use(tmp_path / "run") and files.lock_is_held(tmp_path / "run" / LOCK_FILE)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    held = files.try_lock(sweep / SWEEP_LOCK)
    with pytest.raises(ConfigError, match="another process is running this sweep"):
        _SweepLock(sweep).__enter__()
    assert sweep_in_use(sweep)
    os.close(held)
    with _SweepLock(sweep):
        assert sweep_in_use(sweep)
    assert not sweep_in_use(sweep)
    claimed.release()
    assert not is_in_use(tmp_path / "run")


def test_a_partial_file_is_locked_while_written_and_only_abandoned_ones_are_removed(tmp_path, mask_027):
    target = tmp_path / "scores.csv"
    abandoned = tmp_path / ".scores.csv.00112233aabb.tmp"  # a killed writer's: nothing holds it
    abandoned.write_bytes(b"half")
    with files.PartialFile(target) as live:
        assert files.lock_is_held(live.path) and _mode(live.path) == 0o640
        assert files.remove_abandoned_partials(target) == ([abandoned.name], [])
        with open(live.path, "wb") as f:
            f.write(b"line\n2\n")
        live.commit()
    assert target.read_bytes() == b"line\n2\n" and sorted(p.name for p in tmp_path.iterdir()) == ["scores.csv"]
    with files.PartialFile(target) as left:  # leaving without commit removes it
        path = left.path
    assert not os.path.exists(path) and mask_027 == []


def test_atomic_open_renames_a_complete_file_and_removes_a_failed_one(tmp_path, mask_027):
    """The one temp-and-rename of core (atomic_write_bytes, the agent's uploads, fetched files)."""
    import hashlib
    import io

    from core.remote import agent

    target = tmp_path / "kept.bin"
    with files.atomic_open(target) as f:
        f.write(b"first")
    with pytest.raises(RuntimeError), files.atomic_open(target) as f:
        f.write(b"second, cut")
        raise RuntimeError("cut off")
    assert target.read_bytes() == b"first" and [p.name for p in tmp_path.iterdir()] == ["kept.bin"]
    sha = hashlib.sha256(b"data").hexdigest()
    with pytest.raises(agent.AgentError, match="arrived damaged"):
        agent.put(sha, 4, "d.csv", io.BytesIO(b"dat"), False, runs_dir=str(tmp_path / "runs"))
    assert not any(p.is_file() for p in (tmp_path / "runs").rglob("*"))
    assert agent.put(sha, 4, "d.csv", io.BytesIO(b"data"), False, runs_dir=str(tmp_path / "runs"))["stored"]
    assert mask_027 == []


def test_open_regular_refuses_a_fifo_or_a_device_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")
    with pytest.raises(files.UnreadableFile, match="pipe.csv is a named pipe"):
        files.open_regular(tmp_path / "pipe.csv")
    with pytest.raises(files.UnreadableFile, match="is a device, not a file"):
        files.open_regular(os.devnull)
    (tmp_path / "rows.csv").write_bytes(b"a\n")
    with files.open_regular(tmp_path / "rows.csv") as f:
        assert f.read() == b"a\n"


def test_open_regular_no_link_refuses_a_link_a_fifo_or_a_device(tmp_path):
    (tmp_path / "best.pt").write_bytes(b"weights")
    (tmp_path / "linked.pt").symlink_to(tmp_path / "best.pt")
    with pytest.raises(files.UnreadableFile, match="linked.pt is a symbolic link, not a file"):
        files.open_regular_no_link(tmp_path / "linked.pt")
    os.mkfifo(tmp_path / "pipe.pt")
    with pytest.raises(files.UnreadableFile, match="pipe.pt is a named pipe"):
        files.open_regular_no_link(tmp_path / "pipe.pt")
    with pytest.raises(files.UnreadableFile, match="is a device, not a file"):
        files.open_regular_no_link(os.devnull)
    with files.open_regular_no_link(tmp_path / "best.pt") as f:
        assert f.read() == b"weights"
