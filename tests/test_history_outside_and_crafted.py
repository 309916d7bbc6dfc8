"""The run history beyond its runs root and against a crafted index: a run trained with `--out` anywhere is
listed (the root remembers its folder) and `runs compare` takes folders; a remembered folder since deleted drops
out quietly; a `.history.sqlite` row of the wrong types, NULLs, huge text or a path leaving the root costs at most
that row, never the listing."""

from __future__ import annotations

import json
import shutil
import sqlite3

from core.engine import run_index
from core.engine.run_index import INDEX_FILE, indexed_records, indexed_runs, listed_runs
from core.engine.run_record import RUNS_DIR_ENV
from tests.cli_in_process import cli
from tests.test_run_index import age, make_root, make_run


def test_a_run_outside_the_root_is_listed_compared_by_folder_and_drops_out_once_deleted(tmp_path, capsys, monkeypatch):
    root = make_root(tmp_path)
    monkeypatch.setenv(RUNS_DIR_ENV, str(root))
    out = tmp_path / "anywhere" / "x"
    train = ["train", "--task", "tiny", "--device", "cpu", "--max-steps", "2", "--out", out]
    assert cli(capsys, *train)[0] == 0
    code, text, err = cli(capsys, "runs", "list")
    assert code == 0 and " x " in text, err
    assert any(r["folder"] == str(out) for r in listed_runs(root))
    first = indexed_runs(root)[-1]["folder"]  # a run under the root, named by its folder too
    code, text, err = cli(capsys, "runs", "compare", out, first, "--json")
    assert code == 0, err
    assert [r["name"] for r in json.loads(text)["runs"]] == ["x", first.rsplit("/", 1)[-1]]
    shutil.rmtree(out)
    code, text, err = cli(capsys, "runs", "list")
    assert code == 0 and " x " not in text and "run-1" in text and "Traceback" not in err


def test_crafted_index_rows_cost_only_themselves(tmp_path, capsys):
    root = make_root(tmp_path)
    (tmp_path / "secret").mkdir()
    make_run(tmp_path / "secret", "stolen", "5ec7e75ec7")
    age(tmp_path)
    good = {r["name"] for r in indexed_runs(root)}  # builds the index
    db = sqlite3.connect(root / INDEX_FILE)
    with db:
        db.execute("UPDATE runs SET brief = ?, listed = ? WHERE key = 'run-0'", ('{"best": 5, "steps": "x"}', "[1]"))
        db.execute("UPDATE runs SET brief = 7, listed = NULL, id = NULL, name = NULL WHERE key = 'run-1'")
        huge = json.dumps({"id": "02aa000002", "name": "y" * 50_000_000})
        db.execute("UPDATE runs SET brief = ?, listed = ? WHERE key = 'run-2'", (huge, huge))
        db.execute("UPDATE runs SET nested = ? WHERE key = 'sweep'", (json.dumps(["../../secret/stolen"]),))
        db.execute("UPDATE runs SET sig = 5, nested = x'00ff' WHERE key = 'run-3'")
        db.execute("INSERT INTO runs VALUES ('/etc', 'x', 'e7c', 'etc', NULL, '{}', '[]')")
        db.execute("INSERT INTO runs VALUES ('../secret/stolen', 'x', '5ec7', 'stolen', NULL, '{}', '[]')")
    db.close()
    for listing in (indexed_runs, listed_runs, lambda r: indexed_records(r)[0]):
        runs = listing(root)
        names = {r["name"] for r in runs}
        assert names == good, names
        assert all(str(r["folder"]).startswith(str(root)) for r in runs)
        assert len(max((r["name"] for r in runs), key=len)) < 1000
    code, text, err = cli(capsys, "runs", "--runs-dir", root, "list")
    assert code == 0 and "run-0" in text and "stolen" not in text, err
    assert cli(capsys, "runs", "--runs-dir", root, "show", "run-0")[0] == 0


def test_a_remembered_folder_is_listed_once_and_not_when_inside_the_root(tmp_path):
    root = make_root(tmp_path)
    outside = make_run(tmp_path / "elsewhere", "far", "fa4fa4fa4f")
    age(tmp_path)
    assert run_index.remember(outside, root) and run_index.remember(outside, root)
    assert not run_index.remember(root / "run-1", root)
    assert [r["name"] for r in indexed_runs(root)].count("far") == 1
    assert [r["name"] for r in listed_runs(root)].count("run-1") == 1
    (root / run_index.REMEMBERED_FILE).write_bytes(b"relative/path\n\x00\n" + bytes(outside) + b"\n/nowhere/at/all\n")
    assert [r["name"] for r in run_index.runs_named(root, ["fa4"])] == ["far"]
