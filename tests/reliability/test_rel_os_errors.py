"""Paths the OS would refuse are refused before the run, in one line naming the path and the cause (exit 2):
an output folder that is a file, under a file, unwritable, read-only, too long or not UTF-8; a config, data or
checkpoint path that is a folder, a FIFO (which would block forever), a device, unreadable or not TOML/UTF-8."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.cli.main import main
from core.errors import ConfigError
from core.files import check_regular_file, check_writable_folder

pytestmark = pytest.mark.reliability

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root may write anywhere: permission cases can't fail


def one_error_line(capsys, *args) -> str:
    code = main(["train", "--max-steps", "2", "--device", "cpu", "--threads", "1", *args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("amp-console: error: ") and "Traceback" not in lines[0]
    return lines[0]


def test_out_that_is_a_file_or_under_one(tmp_path, capsys):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x")
    assert one_error_line(capsys, "--out", str(blocker)).endswith(f"{blocker}: is a file, not a folder")
    line = one_error_line(capsys, "--out", str(blocker / "run"))
    assert line.endswith(f"{blocker / 'run'}: is under {blocker}, which is a file, not a folder")
    assert blocker.read_text() == "x"


def test_out_with_a_name_too_long_or_not_utf8(tmp_path, capsys):
    long = tmp_path / ("r" * 300)
    assert "is too long for the file system (300 bytes, at most" in one_error_line(capsys, "--out", str(long))
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run-\xff")
    assert one_error_line(capsys, "--out", bad).endswith(
        "run-\\xff: the name is not valid UTF-8; rename it or pick another path"
    )
    assert not os.path.exists(bad)


@pytest.mark.slow
def test_out_not_utf8_from_the_real_command_line(tmp_path):
    result = subprocess.run(
        [
            os.fsencode(sys.executable),
            b"-m",
            b"core.cli",
            b"train",
            b"--max-steps",
            b"2",
            b"--out",
            os.fsencode(str(tmp_path)) + b"/r\xe9sultats",
        ],
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.decode().strip().splitlines() == [
        f"amp-console: error: --out-dir: {tmp_path}/r\\xe9sultats: the name is not valid UTF-8; rename it or "
        f"pick another path"
    ]


@pytest.mark.skipif(AS_ROOT, reason="root may write in any folder")
def test_out_in_a_folder_without_write_permission(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert one_error_line(capsys, "--out", str(locked / "run")).endswith(
            f"no permission to write in {locked}, where it would be created"
        )
    finally:
        locked.chmod(0o700)


def test_out_on_a_read_only_mount(tmp_path, monkeypatch):
    """statvfs reports ST_RDONLY (no mount without root here: the flag is what the check reads)."""
    real = os.statvfs

    class ReadOnly:
        def __init__(self, result):
            self.f_flag = result.f_flag | os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly(real(path)))
    with pytest.raises(ConfigError, match=f"out_dir: {tmp_path}/run: {tmp_path} is on a read-only file system"):
        check_writable_folder(tmp_path / "run")


def test_config_that_is_a_folder_missing_a_fifo_or_not_text(tmp_path, capsys):
    assert one_error_line(capsys, "--config", str(tmp_path)).endswith(f"{tmp_path}: is a folder, not a config file")
    assert one_error_line(capsys, "--config", str(tmp_path / "no.toml")).endswith("no.toml: no such config file")
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)  # opening it would wait forever for a writer
    assert one_error_line(capsys, "--config", str(fifo)).endswith(
        "pipe.toml: is a named pipe (FIFO), not a config file"
    )
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'task = "tiny"\n# r\xe9sum\xe9\n')
    assert one_error_line(capsys, "--config", str(latin)).endswith("latin.toml: not UTF-8 text")
    broken = tmp_path / "broken.toml"
    broken.write_text("lr = = 1\n")
    assert "broken.toml: invalid TOML" in one_error_line(capsys, "--config", str(broken))


@pytest.mark.skipif(AS_ROOT, reason="root may read any file")
def test_config_without_read_permission(tmp_path, capsys):
    secret = tmp_path / "secret.toml"
    secret.write_text('task = "tiny"\n')
    secret.chmod(0)
    assert one_error_line(capsys, "--config", str(secret)).endswith("cannot read the config file: permission denied")


def test_data_and_resume_that_are_fifos_or_devices(tmp_path, capsys):
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    assert one_error_line(capsys, "--data", str(fifo)).endswith("rows.csv: is a named pipe (FIFO), not a data file")
    assert one_error_line(capsys, "--resume", str(fifo)).endswith(
        "rows.csv: is a named pipe (FIFO), not a checkpoint file"
    )
    assert one_error_line(capsys, "--resume", os.devnull).endswith(f"{os.devnull}: is a device, not a checkpoint file")
    assert one_error_line(capsys, "--resume", str(tmp_path)).endswith("is a folder, not a checkpoint file")


def test_the_checks_name_the_field_for_the_window(tmp_path):
    with pytest.raises(ConfigError) as caught:
        check_regular_file(tmp_path, "data", "data file")
    assert caught.value.field == "data"
    check_regular_file(tmp_path, "data", "data file", allow_folder=True)  # a folder of data files is fine
    check_writable_folder(tmp_path / "new" / "run")  # creates nothing
    assert not (tmp_path / "new").exists()
