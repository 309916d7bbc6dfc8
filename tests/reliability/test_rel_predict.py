"""`amp-console predict` under hostile files and faults: a full disk or a stop signal mid-write, kill -9, a long
row, a link to a file that must not be echoed, a FIFO or a device as --input. Each ends in one line (or costs one bad row), and no partial output is left beside --out."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from cli_in_process import cli

from core.cli.main import main
from core.runs.predict import load_predictor

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
ENOSPC = os.strerror(errno.ENOSPC)


def partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def reviews(path: Path, rows: int = 300) -> Path:
    path.write_text("text,label\n" + "".join(f"review {i} was clear and helpful,1\n" for i in range(rows)))
    return path


def rows_of(path: Path) -> list[dict]:
    return pacsv.read_csv(path).to_pylist()


# ---- a full disk -----------------------------------------------------------------------------------------------


def test_a_full_disk_at_the_last_write_is_one_line_and_keeps_the_old_output(
    capsys, tmp_path, sentiment_run, monkeypatch
):
    import core.files

    out = tmp_path / "out" / "scores.csv"
    out.parent.mkdir()
    out.write_text("the previous predictions\n")
    real = os.fsync

    def fsync(fd):  # the fsync before the rename: the disk is full (as test_rel_disk_full simulates it)
        if ".scores.csv." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, ENOSPC)
        return real(fd)

    monkeypatch.setattr(core.files.os, "fsync", fsync)
    code, stdout, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", reviews(tmp_path / "r.csv"), "--out", out
    )
    assert code == 1 and stdout == ""
    assert err.splitlines()[-1] == (
        f"amp-console: error: {out}: could not write the predictions: {ENOSPC}; nothing was written"
    )
    assert "Traceback" not in err
    assert out.read_text() == "the previous predictions\n" and partials(out.parent) == []


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_full_disk_mid_write_is_one_line_and_leaves_nothing(capsys, tmp_path, sentiment_run, monkeypatch, suffix):
    written = []

    def filling(base):
        class Filling(base):  # the second table finds the disk full, as pyarrow's own writes report it
            def write_table(self, table, *args, **kwargs):
                if written:
                    raise OSError(errno.ENOSPC, f"Error writing bytes to file. Detail: [errno 28] {ENOSPC}")
                written.append(table.num_rows)
                return super().write_table(table, *args, **kwargs)

        return Filling

    monkeypatch.setattr(pacsv, "CSVWriter", filling(pacsv.CSVWriter))
    monkeypatch.setattr(pq, "ParquetWriter", filling(pq.ParquetWriter))
    out = tmp_path / f"scores{suffix}"
    code, _, err = cli(
        capsys,
        "predict",
        sentiment_run.checkpoint,
        "--input",
        reviews(tmp_path / "r.csv"),
        "--out",
        out,
        "--batch-size",
        50,
    )
    assert code == 1 and written == [50]
    assert err.splitlines()[-1] == (
        f"amp-console: error: {out}: could not write the predictions: {ENOSPC}; nothing was written"
    )
    assert not out.exists() and partials(tmp_path) == []


# ---- a stop signal, kill -9 ------------------------------------------------------------------------------------

# predict in a child whose CSV writer pauses after its first table: the partial output then holds rows
PAUSING_WRITER = """
import pathlib, sys, time
import pyarrow.csv as pacsv

class Pausing(pacsv.CSVWriter):
    def write_table(self, table, *args, **kwargs):
        super().write_table(table, *args, **kwargs)
        pathlib.Path(sys.argv[1]).touch()
        time.sleep(600)

pacsv.CSVWriter = Pausing
from core.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def start_paused_predict(tmp_path, checkpoint, out) -> subprocess.Popen:
    marker = tmp_path / "writing"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PAUSING_WRITER,
            str(marker),
            "predict",
            str(checkpoint),
            "--input",
            str(reviews(tmp_path / "r.csv")),
            "--out",
            str(out),
            "--batch-size",
            "50",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"predict did not start writing: {process.communicate()[1].decode()}")
        time.sleep(0.05)
    return process


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_mid_write_removes_the_partial_output(tmp_path, sentiment_run, sig):
    out = tmp_path / "scores.csv"
    process = start_paused_predict(tmp_path, sentiment_run.checkpoint, out)
    try:
        assert len(partials(tmp_path)) == 1  # `.scores.csv.<random>.tmp`, rows in it
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + sig, stderr.decode()
    name = signal.Signals(sig).name
    assert stderr.decode().splitlines()[-1] == f"amp-console: {name}: predict stopped; nothing written to {out}"
    assert b"Traceback" not in stderr
    assert partials(tmp_path) == [] and not out.exists()


def test_a_stop_signal_once_the_output_is_in_place_stops_nothing(capsys, tmp_path, sentiment_run, monkeypatch):
    from core.files import PartialFile

    real = PartialFile.commit

    def commit(self):  # SIGTERM the moment the finished file has its name
        real(self)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(PartialFile, "commit", commit)
    out = tmp_path / "scores.csv"
    code, stdout, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", reviews(tmp_path / "r.csv"), "--out", out
    )
    assert code == 0 and "300 reviews scored" in stdout and "nothing written" not in err
    assert len(rows_of(out)) == 300 and partials(tmp_path) == []


@pytest.mark.slow
def test_after_kill_9_the_next_predict_removes_the_partial_output(capsys, tmp_path, sentiment_run):
    out = tmp_path / "scores.csv"
    process = start_paused_predict(tmp_path, sentiment_run.checkpoint, out)
    process.kill()  # SIGKILL: nothing runs in the child, the partial output stays
    process.communicate(timeout=60)
    [left] = partials(tmp_path)
    assert re.fullmatch(r"\.scores\.csv\.[0-9a-f]{12}\.tmp", left)
    code, _, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", tmp_path / "r.csv", "--out", out)
    assert code == 0, err
    assert f"note: removed {left}, the partial output of an earlier predict that did not finish" in err
    assert partials(tmp_path) == [] and len(rows_of(out)) == 300


def test_only_a_partial_output_no_live_predict_holds_is_removed(capsys, tmp_path, tiny_run):
    from core.files import PartialFile

    out = tmp_path / "scores.csv"
    stale = tmp_path / ".scores.csv.0123456789ab.tmp"  # a killed predict's: no lock held on it
    stale.write_text("line,p0\n2,0.5\n")
    other = tmp_path / ".other.csv.0123456789ab.tmp"  # another output's: not this predict's business
    other.write_text("x\n")
    source = tmp_path / "p.csv"
    source.write_text(",".join(f"x{i}" for i in range(1, 11)) + "\n" + ",".join(["0.5"] * 10) + "\n")
    with PartialFile(out) as live:  # another predict to the same --out, still writing
        code, _, err = cli(capsys, "predict", tiny_run.checkpoint, "--input", source, "--out", out)
        assert code == 0, err
        assert Path(live.path).exists() and not stale.exists() and other.exists()
        assert err.count("note: removed") == 1 and stale.name in err
    assert partials(tmp_path) == [other.name]


# ---- a row longer than a block of the header's first read ------------------------------------------------------


def test_a_field_longer_than_the_first_read_block_is_scored(capsys, tmp_path, sentiment_run):
    wide = "good " * 40_000  # 200 KB: longer than a block of the header's first read
    texts = [wide] + [f"clear lesson {i}" for i in range(40)]
    source = tmp_path / "r.csv"
    source.write_text("text,label\n" + "".join(f'"{t}",1\n' for t in texts))
    out = tmp_path / "o.csv"
    code, stdout, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", out)
    assert code == 0, err
    assert "41 reviews scored" in stdout
    rows = rows_of(out)
    assert [r["line"] for r in rows] == list(range(2, 43))
    assert [r["p_positive"] for r in rows] == pytest.approx(
        load_predictor(sentiment_run.checkpoint).sentiment(texts), abs=1e-12
    )


# ---- what the file's content may print --------------------------------------------------------------------------


def test_a_file_without_the_columns_names_its_own_in_one_line(capsys, tmp_path, tiny_run, sentiment_run):
    source = tmp_path / "rows.csv"  # the user's own file: its line 1 is shown, control characters escaped
    source.write_text("name:pass:uid\ndaemon:*:1\n")
    for run in (tiny_run, sentiment_run):
        code, _, err = cli(capsys, "predict", run.checkpoint, "--input", source, "--out", tmp_path / "o.csv")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "the file's columns: name:pass:uid" in err
    source.write_text("4111111111111111,2025\n1,2\n")  # numbers, no header
    code, _, err = cli(capsys, "predict", tiny_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv")
    assert code == 2 and "line 1 holds numbers, not column names" in err
    source.write_text("text,label\ngood,1\n")
    code, _, err = cli(capsys, "predict", tiny_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv")
    assert code == 2 and "the file's columns: text, label" in err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_file_without_the_columns_exits_2_every_time(tmp_path, tiny_run):
    """The CSV reader's read-ahead thread once outlived the error: 1 exit in 4 was an abort (134) at exit."""
    source = tmp_path / "rows.csv"
    source.write_text("x1,x2\n1,2\n3,4\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "core.cli", "predict", str(tiny_run.checkpoint), "--input", str(source)]
    for _ in range(10):
        done = subprocess.run([*argv, "--out", str(tmp_path / "o.csv")], cwd=ROOT, env=env, capture_output=True)
        err = done.stderr.decode()
        assert done.returncode == 2 and len(err.strip().splitlines()) == 1, (done.returncode, err)
        assert "the file's columns: x1, x2" in err


def test_control_sequences_from_the_file_never_reach_the_terminal(capsys, tmp_path, tiny_run, sentiment_run):
    names = [f"x{i}" for i in range(1, 10)] + ["\x1b]0;owned\x07\x1b[2J"]  # ten columns, the last one's name
    source = tmp_path / "p.csv"  # a terminal title and a screen clear
    source.write_text(",".join(names) + "\n" + ",".join(["0.5"] * 9 + ["abc"]) + "\n" + ",".join(["0.5"] * 10) + "\n")
    code, _, err = cli(capsys, "predict", tiny_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv")
    assert code == 0, err
    assert "line 2: \\x1b]0;owned\\x07\\x1b[2J 'abc' is not a number" in err and "\x1b" not in err and "\x07" not in err
    source.write_text("review\u202e,label\ngood,1\n\x1b[31mred,\x1b[0m\n")  # a bidi override, escapes in values
    code, _, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv")
    assert "\x1b" not in err and "\u202e" not in err


# ---- a FIFO, a device ------------------------------------------------------------------------------------------


def _ends_without_hanging(capsys, argv, fifo: Path | None = None) -> tuple[int, str]:
    result: list = []
    thread = threading.Thread(target=lambda: result.append(main([str(a) for a in argv])), daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():  # unblock the reader so the thread ends, then fail
        with open(fifo, "wb"):
            pass
        thread.join(10)
        pytest.fail(f"predict blocked opening {fifo}")
    return result[0], capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_fifo_or_a_device_as_input_is_refused_without_hanging(capsys, tmp_path, tiny_run, monkeypatch):
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    zeros = tmp_path / "zeros.csv"
    zeros.symlink_to("/dev/zero")
    for source, kind in ((fifo, "a named pipe (FIFO)"), (zeros, "a device")):
        code, err = _ends_without_hanging(
            capsys, ["predict", tiny_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv"], fifo
        )
        assert code == 2 and err.strip() == f"amp-console: error: --input: {source}: is {kind}, not a input file"
    import core.files

    # the FIFO put in the file's place after the check: the open itself refuses it
    monkeypatch.setattr(core.files, "check_regular_file", lambda *args, **kwargs: None)
    for source, kind in ((fifo, "a named pipe (FIFO)"), (zeros, "a device")):
        code, err = _ends_without_hanging(
            capsys, ["predict", tiny_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv"], fifo
        )
        assert code == 2 and err.strip() == f"amp-console: error: --input: {source} is {kind}, not a file"
    assert not (tmp_path / "o.csv").exists() and partials(tmp_path) == []
