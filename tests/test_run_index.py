"""The runs root's index (<root>/.history.sqlite, core.engine.run_index): built from the run folders, reused
while they are unchanged, a changed, new or deleted run picked up at the next listing; a corrupt, locked,
unwritable or misplaced index file never breaks the listing (and a corrupt one is rebuilt); two threads or
processes listing at once; one run looked up by id without reading the others."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.engine import run_index, run_index_store
from core.engine.run_index import (
    INDEX_FILE,
    LISTED,
    full_record,
    indexed_records,
    indexed_runs,
    listed_runs,
    runs_named,
)
from core.engine.run_record import read_run, write_note
from core.files import atomic_write_bytes, try_lock

ROOT = Path(__file__).resolve().parents[1]


def make_run(
    root: Path, name: str, run_id: str, *, status="completed", start="2026-01-01T10:00:00+00:00", steps=100
) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(
        json.dumps(
            {
                "version": 1,
                "id": run_id,
                "name": name,
                "task": "tiny",
                "status": status,
                "device": "cpu",
                "precision": "fp32",
                "start_time": start,
                "end_time": start,
                "wall_seconds": 12.5,
                "steps": steps,
                "total_steps": 100,
                "best": {"name": "accuracy", "value": 0.9, "step": steps},
                "metrics": {"accuracy": 0.9},
                "test_metrics": {},
                "checkpoints": {"last": {"path": "checkpoint.pt"}},
                "config": {"task": "tiny", "lr": 0.01, "seed": 3},
                "notes": ["an engine note"],
                "message": "",
            }
        )
    )
    (folder / "metrics.jsonl").write_text(json.dumps({"event": "RunStarted", "task": "tiny"}) + "\n")
    return folder


def make_root(tmp_path: Path) -> Path:
    """Five runs, a sweep folder with two trials one level down, an empty folder and an older run with only a
    metrics.jsonl."""
    root = tmp_path / "runs"
    for i in range(5):
        make_run(root, f"run-{i}", f"{i:02d}aa{i:06d}", start=f"2026-01-0{i + 1}T10:00:00+00:00")
    make_run(root / "sweep", "trial-1", "5151515151", start="2026-02-01T10:00:00+00:00")
    make_run(root / "sweep", "trial-2", "5252525252", start="2026-02-02T10:00:00+00:00")
    (root / "empty").mkdir()
    old = root / "old-run"
    old.mkdir()
    (old / "metrics.jsonl").write_text(
        json.dumps({"event": "RunStarted", "task": "tiny", "precision": "fp32", "total_steps": 10})
        + "\n"
        + json.dumps({"event": "RunEnded", "status": "completed", "step": 10, "metrics": {}})
        + "\n"
    )
    age(root)
    return root


def age(root: Path, seconds: float = 120.0) -> None:
    """Every file and folder under `root` last changed `seconds` ago: out of the index's racy window, as a
    finished run on a real disk is."""
    when = time.time() - seconds
    for path in [*root.rglob("*"), root]:
        if path.name.startswith(INDEX_FILE):
            continue
        os.utime(path, (when, when), follow_symlinks=False)


def scanned(root: Path) -> list[dict]:
    """What read_run says of every run under `root`, newest first: what the index must give."""
    runs = []
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        run = read_run(child)
        if run is not None:
            runs.append(run)
            continue
        for folder in sorted(p.parent for p in child.glob("*/run.json")):
            run = read_run(folder)
            if run is not None:
                run["name"] = f"{child.name}/{folder.name}"
                runs.append(run)
    runs.sort(key=lambda r: r.get("start_time") or r.get("end_time") or "", reverse=True)
    return runs


@pytest.fixture
def reads(monkeypatch):
    """The folders read_run was asked to read, through the index."""
    seen: list[str] = []

    def counting(folder):
        seen.append(Path(folder).name)
        return read_run(folder)

    monkeypatch.setattr(run_index, "read_run", counting)
    return seen


def rows(root: Path) -> dict[str, str]:
    with sqlite3.connect(root / INDEX_FILE) as db:
        return dict(db.execute("SELECT key, sig FROM runs WHERE nested IS NULL"))


def test_the_index_is_built_from_the_folders_and_reused_while_they_are_unchanged(tmp_path, reads):
    root = make_root(tmp_path)
    expected = scanned(root)
    assert {"sweep/trial-1", "sweep/trial-2", "old-run", "run-4"} <= {r["name"] for r in expected}
    assert indexed_runs(root) == expected
    assert (root / INDEX_FILE).is_file()
    assert sorted(rows(root)) == sorted(r["name"] for r in expected)
    assert len(reads) == len(expected) + 2  # and the two folders that hold no run of their own
    reads.clear()
    assert indexed_runs(root) == expected  # warm: nothing read again
    briefs, bulks = indexed_records(root)
    assert [full_record(brief, bulk) for brief, bulk in zip(briefs, bulks)] == expected
    assert all(brief["config"] is None for brief in briefs)
    alias = tmp_path / "alias"
    alias.symlink_to(root)  # the same root spelled otherwise: the same index, each folder as spelled now
    assert [r["folder"] for r in indexed_runs(alias)] == [r["folder"] for r in scanned(alias)]
    assert all(r["folder"].startswith(str(alias)) for r in indexed_runs(alias))
    assert reads == []


def test_a_changed_new_or_deleted_run_is_picked_up(tmp_path, reads):
    root = make_root(tmp_path)
    indexed_runs(root)
    record = json.loads((root / "run-1" / "run.json").read_text())
    atomic_write_bytes(root / "run-1" / "run.json", json.dumps({**record, "status": "failed"}).encode())
    with open(root / "run-2" / "run.json", "r+", encoding="utf-8") as f:  # rewritten in place, longer
        text = f.read().replace('"steps": 100', '"steps": 1000')
        f.seek(0)
        f.write(text)
    write_note(root / "run-3", "lr too high")
    shutil.rmtree(root / "run-0")
    make_run(root, "run-new", "feedfeed01", start="2026-03-01T10:00:00+00:00")
    make_run(root / "sweep", "trial-3", "5353535353", start="2026-02-03T10:00:00+00:00")
    with open(root / "old-run" / "metrics.jsonl", "a", encoding="utf-8") as f:  # appended: a run going on
        f.write(json.dumps({"event": "StepMetrics", "step": 12, "loss": 0.5}) + "\n")
    reads.clear()
    runs = {r["name"]: r for r in indexed_runs(root)}
    assert runs == {r["name"]: r for r in scanned(root)}
    assert runs["run-1"]["status"] == "failed" and runs["run-2"]["steps"] == 1000
    assert runs["run-3"]["note"] == "lr too high" and "run-0" not in runs
    assert "run-new" in runs and "sweep/trial-3" in runs
    assert sorted(reads) == ["old-run", "run-1", "run-2", "run-3", "run-new", "sweep", "trial-3"]
    age(root)
    indexed_runs(root)  # they settle: written to the index
    reads.clear()
    assert indexed_runs(root) == scanned(root) and reads == []
    assert "run-0" not in rows(root) and "run-new" in rows(root)


def test_a_folder_changed_just_now_is_read_again_until_it_settles(tmp_path, reads):
    """A second change inside one timestamp tick, same size, would look unchanged: a folder changed within
    RACY_SECONDS is read at every listing and not written to the index."""
    root = make_root(tmp_path)
    make_run(root, "live", "1111111111", status="running")
    indexed_runs(root)
    reads.clear()
    indexed_runs(root)
    indexed_runs(root)
    assert reads == ["live", "live"] and "live" not in rows(root)


def test_a_running_run_from_the_index_reads_as_interrupted_once_no_process_holds_it(tmp_path, reads):
    root = make_root(tmp_path)
    folder = make_run(root, "live", "1111111111", status="running", start="2026-04-01T10:00:00+00:00")
    fd = try_lock(folder / ".run.lock")
    age(root)

    def status() -> str:
        return next(r["status"] for r in indexed_runs(root) if r["name"] == "live")

    try:
        assert status() == "running"
        assert status() == "running"
    finally:
        os.close(fd)  # the run is killed: no file changes
    reads.clear()
    assert status() == "interrupted" and reads == []
    assert next(r["status"] for r in listed_runs(root) if r["name"] == "live") == "interrupted"


def listed(runs: list[dict]) -> list[dict]:
    return [{**{k: r.get(k) for k in LISTED}, "folder": r["folder"]} for r in runs]


def test_the_listed_fields_are_those_of_the_whole_records_cold_warm_or_damaged(tmp_path, reads):
    root = make_root(tmp_path)
    (root / "bad").mkdir()
    (root / "bad" / "run.json").write_text('{"id": 5}')  # unreadable: listed afresh every time
    expected = listed(scanned(root))
    assert any(r["unreadable"] for r in expected) and any(r["name"] == "sweep/trial-1" for r in expected)
    assert listed_runs(root) == expected  # cold: read from the folders
    reads.clear()
    assert listed_runs(root) == expected and reads == ["bad"]  # warm: from the index
    with sqlite3.connect(root / INDEX_FILE) as db:
        db.execute("UPDATE runs SET listed = '[\"torn' WHERE key = 'run-2'")
        db.execute("UPDATE runs SET listed = '[1, 2]' WHERE key = 'run-3'")
    reads.clear()
    assert listed_runs(root) == expected and sorted(reads) == ["bad", "run-2", "run-3"]
    reads.clear()
    assert listed_runs(root) == expected and reads == ["bad"]  # repaired
    assert listed(indexed_runs(root)) == expected


@pytest.mark.parametrize("damage", ["garbage", "bad row"])
def test_a_corrupt_index_is_ignored_and_rebuilt(tmp_path, damage):
    root = make_root(tmp_path)
    expected = scanned(root)
    index = root / INDEX_FILE
    if damage == "garbage":
        index.write_bytes(b"not a database, just some bytes" * 100)
    else:  # a sound file with a record that does not parse
        indexed_runs(root)
        with sqlite3.connect(index) as db:
            db.execute("UPDATE runs SET brief = '{\"torn' WHERE key = 'run-2'")
            db.execute("UPDATE bulks SET bulk = 'x' WHERE key = 'run-2'")
            db.execute("UPDATE runs SET nested = '[\"tri' WHERE key = 'sweep'")
    assert indexed_runs(root) == expected
    assert indexed_runs(root) == expected
    assert sorted(rows(root)) == sorted(r["name"] for r in expected)
    with sqlite3.connect(index) as db:
        for brief, bulk in db.execute("SELECT brief, bulk FROM runs JOIN bulks USING (key) WHERE nested IS NULL"):
            assert isinstance(json.loads(brief), dict) and isinstance(json.loads(bulk), dict)


def test_an_unusable_index_still_lists(tmp_path, monkeypatch):
    root = make_root(tmp_path)
    expected = scanned(root)
    (root / INDEX_FILE).mkdir()  # a folder where the file should be: left alone
    assert indexed_runs(root) == expected
    (root / INDEX_FILE).rmdir()
    os.symlink(tmp_path / "elsewhere.sqlite", root / INDEX_FILE)  # a link: never followed, nothing written
    assert indexed_runs(root) == expected and not (tmp_path / "elsewhere.sqlite").exists()
    (root / INDEX_FILE).unlink()

    real_connect = sqlite3.connect

    def read_only_disk(database, *args, **kwargs):  # the root cannot be written (as root, chmod would not stop us)
        if "mode=rwc" in database:
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(run_index.sqlite3, "connect", read_only_disk)
    assert indexed_runs(root) == expected and not (root / INDEX_FILE).exists()
    monkeypatch.setattr(run_index.sqlite3, "connect", real_connect)
    indexed_runs(root)
    assert (root / INDEX_FILE).is_file()
    age(make_run(root, "run-9", "9999999999"))  # a new run, found while the index cannot be written
    monkeypatch.setattr(
        run_index.sqlite3,
        "connect",
        lambda database, *a, **k: real_connect(database.replace("mode=rw", "mode=ro"), *a, **k),
    )
    assert indexed_runs(root) == scanned(root)


def test_a_locked_index_still_lists(tmp_path, monkeypatch):
    root = make_root(tmp_path)
    indexed_runs(root)
    age(make_run(root, "run-late", "7777777777", start="2026-05-01T10:00:00+00:00"))
    monkeypatch.setattr(run_index_store, "BUSY_SECONDS", 0.05)
    holder = sqlite3.connect(root / INDEX_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
    try:
        assert indexed_runs(root) == scanned(root)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert indexed_runs(root) == scanned(root) and "run-late" in rows(root)


def test_no_index_is_made_in_a_folder_without_runs(tmp_path):
    (tmp_path / "just" / "folders").mkdir(parents=True)
    assert indexed_runs(tmp_path) == [] and not (tmp_path / INDEX_FILE).exists()
    assert indexed_runs(tmp_path / "missing") == []


def test_rows_of_another_code_version_are_read_again(tmp_path, reads):
    root = make_root(tmp_path)
    indexed_runs(root)
    with sqlite3.connect(root / INDEX_FILE) as db:
        db.execute("UPDATE meta SET value = 'another' WHERE key = 'reader'")
    reads.clear()
    assert indexed_runs(root) == scanned(root) and len(reads) == len(scanned(root)) + 2


def test_threads_listing_at_once_all_see_every_run(tmp_path):
    root = make_root(tmp_path)
    for i in range(40):
        make_run(root, f"more-{i:02d}", f"cc{i:08d}")
    age(root)
    expected = scanned(root)
    results, errors = [], []

    def listing():
        try:
            for _ in range(3):
                results.append(indexed_runs(root))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=listing) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 12 and all(r == expected for r in results)


@pytest.mark.slow
def test_two_processes_listing_at_once_both_see_every_run(tmp_path):
    root = make_root(tmp_path)
    for i in range(200):
        make_run(root, f"more-{i:03d}", f"dd{i:08d}")
    age(root)
    command = [sys.executable, "-m", "core.cli", "runs", "--runs-dir", str(root), "list", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    expected = sorted(r["id"] for r in scanned(root))
    for child, (out, err) in zip(children, outputs):
        assert child.returncode == 0, err
        assert sorted(r["id"] for r in json.loads(out)) == expected
    assert len(rows(root)) == len(expected)


def test_one_run_is_found_by_id_prefix_or_name_without_reading_the_others(tmp_path, reads):
    root = make_root(tmp_path)
    indexed_runs(root)
    age(make_run(root, "run-new", "02ab000000", start="2026-06-01T10:00:00+00:00"))  # not in the index yet
    reads.clear()
    assert [r["name"] for r in runs_named(root, ["03aa000003"])] == ["run-3"]
    assert [r["name"] for r in runs_named(root, ["run-3"])] == ["run-3"]
    assert [r["name"] for r in runs_named(root, ["sweep/trial-1"])] == ["sweep/trial-1"]
    assert sorted(r["name"] for r in runs_named(root, ["02a"])) == ["run-2", "run-new"]  # two could match
    assert runs_named(root, ["nothing"]) == []
    assert runs_named(root, ["run-2"])[0] == next(r for r in scanned(root) if r["name"] == "run-2")
    assert reads == ["run-new"]  # the new folder only, once


def test_a_lookup_checks_only_the_folders_that_could_match_unless_it_finds_none(tmp_path, reads, monkeypatch):
    root = make_root(tmp_path)
    for i in range(30):
        make_run(root, f"more-{i:02d}", f"ee{i:08d}")
    age(root)
    indexed_runs(root)
    checked: list[str] = []
    real_signature = run_index._signature

    def signature(folder, racy):
        checked.append(Path(folder).name)
        return real_signature(folder, racy)

    monkeypatch.setattr(run_index, "_signature", signature)
    assert [r["name"] for r in runs_named(root, ["03aa"])] == ["run-3"]
    assert sorted(checked) == ["empty", "run-3", "sweep", "trial-1", "trial-2"]  # and no other run's folder
    record = json.loads((root / "run-4" / "run.json").read_text())
    atomic_write_bytes(root / "run-4" / "run.json", json.dumps({**record, "id": "abcabc0004"}).encode())
    age(root / "run-4")
    reads.clear()
    assert [r["name"] for r in runs_named(root, ["abcabc"])] == ["run-4"]  # its indexed id was another
    assert reads == ["run-4"]


def test_runs_show_and_compare_resolve_ids_through_the_index(tmp_path, capsys):
    from core.cli.main import main

    root = make_root(tmp_path)
    assert main(["runs", "--runs-dir", str(root), "list"]) == 0
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(root), "show", "03aa", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "run-3"
    assert main(["runs", "--runs-dir", str(root), "compare", "run-1", "0"]) == 2
    assert "'0' is ambiguous" in capsys.readouterr().err
    assert main(["runs", "--runs-dir", str(root), "compare", "run-1", "04aa", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["run-1", "run-4"]
