"""The run history against hostile run folders: `runs delete` (and core's delete_run, the window's too) never
leaves the runs root or follows a link; one malformed, huge, deeply nested, FIFO or device run.json, note.txt,
.run.lock, metrics.jsonl or evaluation.json costs that run only (listed as "unreadable: <reason>"), never a
traceback or a hang; escapes in a run's files never reach the terminal; a folder's claim removes only its own
temp files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_in_process import cli

from core.engine.run_delete import RunDeleteError, delete_run
from core.engine.run_index import find_runs
from core.engine.run_record import read_run
from tests.test_runs_cli import fake_run

pytestmark = pytest.mark.reliability


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amp-console: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "runs"
    fake_run(root, "good", "a1b2c3d4e5", start="2026-01-02T10:00:00+00:00")
    fake_run(root, "other", "ffee001122", start="2026-01-01T10:00:00+00:00", best=0.7)
    return root


# ---------------------------------------------------------------------- deleting


def test_runs_delete_never_leaves_the_root_through_a_link(root, tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    victim = fake_run(outside, "victim", "0000dead00")
    (root / "ext").symlink_to(outside)  # R/ext -> elsewhere: its runs list as ext/victim
    assert "ext/victim" in [r["name"] for r in find_runs(root)]
    code, _, err = cli(capsys, "runs", "--runs-dir", str(root), "delete", "ext/victim", "--yes")
    assert code == 2 and "ext is a symbolic link" in one_line_error(err)
    assert (victim / "run.json").is_file()

    (root / "linked").symlink_to(victim)  # a link as the run folder itself
    code, _, err = cli(capsys, "runs", "--runs-dir", str(root), "delete", "linked", "--yes")
    assert code == 2 and "linked is a symbolic link" in one_line_error(err)
    assert (victim / "run.json").is_file() and (root / "linked").is_symlink()

    # a real run folder holding links to elsewhere: the links go, what they point at stays
    (root / "good" / "data").symlink_to(outside)
    (root / "good" / "sub").mkdir()
    (root / "good" / "sub" / "deeper").symlink_to(victim)
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "delete", "good", "--yes")
    assert code == 0 and "deleted a1b2c3d4e5" in out and not (root / "good").exists()
    assert sorted(p.name for p in victim.iterdir()) == ["run.json"]


def test_core_delete_run_refuses_anything_but_a_real_folder_strictly_under_the_root(root, tmp_path):
    elsewhere = fake_run(tmp_path / "elsewhere", "run", "0000dead00")
    for folder, reason in (
        (elsewhere, "not a folder under the runs root"),
        (root / ".." / "elsewhere" / "run", "not a folder under the runs root"),
        (root, "not a folder under the runs root"),
        (root / "absent", "no such run folder"),
        (root / "good" / "run.json", "is a file, not a run folder"),
    ):
        with pytest.raises(RunDeleteError, match=reason):
            delete_run(root, folder)
    assert elsewhere.is_dir() and (root / "good" / "run.json").is_file()
    linked_root = tmp_path / "linked-root"  # the runs root itself may be a link (another disk)
    linked_root.symlink_to(root)
    delete_run(linked_root, linked_root / "other")
    assert not (root / "other").exists() and (root / "good").is_dir()
    trial = fake_run(root / "sweep", "trial-1", "5eeb000001")  # a sweep's trial, two folders down
    delete_run(root, trial)
    assert not trial.exists() and (root / "sweep").is_dir()


def test_runs_delete_that_the_system_refuses_is_one_line(root, capsys, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(root / "good" / "run.json"))

    monkeypatch.setattr(shutil, "rmtree", refused)  # what a read-only folder does (even for root, who may not chmod)
    code, _, err = cli(capsys, "runs", "--runs-dir", str(root), "delete", "good", "--yes")
    line = one_line_error(err)
    assert code == 2 and "could not delete" in line and "Permission denied; check its permissions" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root may delete in a read-only folder")
def test_runs_delete_of_a_read_only_folder_is_one_line(root, capsys):
    os.chmod(root / "good", 0o555)
    try:
        code, _, err = cli(capsys, "runs", "--runs-dir", str(root), "delete", "good", "--yes")
    finally:
        os.chmod(root / "good", 0o755)
    assert code == 2 and "check its permissions" in one_line_error(err)


# ---------------------------------------------------------------------- one bad run.json, one unreadable run


def _bad(record: dict, **fields) -> str:
    return json.dumps({**record, **fields})


BAD_RECORDS = {  # name: (what run.json holds, the reason said)
    "start-time-number": (lambda r: _bad(r, start_time=5), "start_time is a number, not text"),
    "nested": (lambda r: "[" * 100_000 + "]" * 100_000, "nested more than 64 deep"),
    "steps-text": (lambda r: _bad(r, steps="100"), "steps is text, not a whole number"),
    "best-list": (lambda r: _bad(r, best=[1, 2]), "best is a list, not an object"),
    "best-value": (lambda r: _bad(r, best={"name": "accuracy", "value": {"x": 1}}), "best.value is an object"),
    "metrics-list": (lambda r: _bad(r, metrics=[0.5]), "metrics is a list, not an object"),
    "metric-value": (lambda r: _bad(r, metrics={"accuracy": [0.5]}), "metrics.accuracy is a list, not a number"),
    "checkpoint-rank": (
        lambda r: _bad(
            r, checkpoints={"a": {"path": "best-step5.pt", "rank": 2}, "b": {"path": "best-step9.pt", "rank": "1"}}
        ),
        "checkpoints.b.rank is text, not a whole number",
    ),
    "config-text": (lambda r: _bad(r, config="lr=0.1"), "config is text, not an object"),
    "not-utf8": (lambda r: b"\xff\xfe{}", "not UTF-8"),
    "array": (lambda r: "[1, 2]", "holds list, not a JSON object"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_one_malformed_run_json_costs_only_that_run(root, capsys, case):
    make, reason = BAD_RECORDS[case]
    bad = fake_run(root, "bad", "bad0000001", start="2026-01-03T10:00:00+00:00")
    payload = make(json.loads((bad / "run.json").read_text()))
    (bad / "run.json").write_bytes(payload if isinstance(payload, bytes) else payload.encode())

    run = read_run(bad)
    assert run["status"] == "unreadable" and reason in run["unreadable"]
    json.dumps(run)  # what the history caches: JSON
    code, out, err = cli(capsys, "runs", "--runs-dir", str(root), "list")
    assert code == 0 and not err
    assert "good" in out and "other" in out and "bad: unreadable: " in out and reason in out.replace("\n", "")
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "show", "bad")
    assert code == 0 and "unreadable: " in out and reason in " ".join(out.split())
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "compare", "good", "other")
    assert code == 0 and "accuracy 0.8" in out
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "list", "--json")
    assert code == 0 and {r["name"]: r["status"] for r in json.loads(out)} == {
        "bad": "unreadable",
        "good": "completed",
        "other": "completed",
    }
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "delete", "bad", "--yes")
    assert code == 0 and not bad.exists()  # an unreadable run can still be deleted by its folder name


def test_what_a_run_writes_for_a_nan_loss_shows(root, capsys):
    record = json.loads((root / "good" / "run.json").read_text())
    record.update(final_loss="nan", samples_per_second="inf", metrics={"accuracy": "nan"})  # RunRecord's spelling
    (root / "good" / "run.json").write_text(json.dumps(record))
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "show", "good")
    assert code == 0 and "final loss" in out and "accuracy nan" in out
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "compare", "good", "other")
    assert code == 0 and "nan" in out


def test_evaluate_and_predict_find_runs_beside_a_malformed_one_and_best_survives_mixed_ranks(root):
    from core.cli.evaluate import find_checkpoint
    from core.errors import ConfigError

    for name, change in (
        ("bad", {"start_time": 12345}),
        (
            "ranks",
            {"checkpoints": {"a": {"path": "best-step5.pt", "rank": 2}, "b": {"path": "best-step9.pt", "rank": "1"}}},
        ),
    ):
        bad = fake_run(root, name, f"{name}000001")
        record = json.loads((bad / "run.json").read_text())
        (bad / "run.json").write_text(json.dumps({**record, **change}))
    (root / "good" / "checkpoint.pt").write_bytes(b"last")
    assert find_checkpoint("a1b2", False, str(root)) == root / "good" / "checkpoint.pt"
    with pytest.raises(ConfigError, match=r"no best checkpoint .*run\.json: checkpoints\.b\.rank is text"):
        find_checkpoint(str(bad), True, None)
    (bad / "best.pt").write_bytes(b"best")  # the run's own best file still serves
    assert find_checkpoint(str(bad), True, None) == bad / "best.pt"


# ---------------------------------------------------------------------- FIFOs and devices never hang a reader

# (.run.lock as a link to a device never blocked: opening and locking it return at once)
HOSTILE_FILES = [
    (name, kind)
    for name in ("run.json", "note.txt", ".run.lock", "metrics.jsonl")
    for kind in ("fifo", "dev-zero")
    if (name, kind) != (".run.lock", "dev-zero")
]


def _plant(folder: Path, name: str, kind: str) -> None:
    path = folder / name
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, kind", HOSTILE_FILES)
def test_a_fifo_or_a_device_in_a_run_folder_never_hangs_the_history(root, capsys, name, kind):
    folder = fake_run(root, "hostile", "0000fifo00", status="running")  # running: its lock is looked at
    if name == "metrics.jsonl":
        (folder / "run.json").unlink()  # an older folder: summarised from metrics.jsonl
    _plant(folder, name, kind)
    runs = {r["name"]: r for r in find_runs(root)}
    assert runs["good"]["status"] == "completed" and "hostile" in runs
    hostile = runs["hostile"]
    if name in ("run.json", "metrics.jsonl"):
        assert hostile["status"] == "unreadable" and name in hostile["unreadable"]
    elif name == "note.txt":
        assert hostile["note"] == "" and "note.txt" in hostile["note_unreadable"]
    else:
        assert hostile["status"] == "interrupted"  # no live run can hold a lock on a FIFO or a device
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "list")
    assert code == 0 and "good" in out and "hostile" in out
    code, out, _ = cli(capsys, "runs", "--runs-dir", str(root), "show", "hostile")
    assert code == 0 and ("unreadable" in out) == (name != ".run.lock")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_a_device_as_evaluation_json_or_metrics_is_refused_at_once(root, capsys, kind):
    from core.errors import DataError
    from core.files import UnreadableFile, read_jsonl
    from core.runs.evaluation_report import load_report

    _plant(root / "good", "evaluation.json", kind)
    assert load_report(root / "good") is None
    with pytest.raises(DataError, match="evaluation.json"):
        load_report(root / "good", strict=True)
    _plant(root / "good", "metrics.jsonl", kind)
    with pytest.raises(UnreadableFile, match="metrics.jsonl"):
        read_jsonl(root / "good" / "metrics.jsonl")
    code, _, err = cli(capsys, "runs", "--runs-dir", str(root), "export", "good", "--csv", "-")
    assert code == 2 and "cannot read the metrics of a1b2c3d4e5 (good)" in one_line_error(err)


@pytest.mark.timeout(60)
def test_a_fifo_lock_cannot_be_claimed_and_is_never_waited_on(tmp_path):
    from core.engine.run_folder import LOCK_FILE, claim_run_folder, is_in_use, lock_holder
    from core.errors import ConfigError

    folder = tmp_path / "run"
    folder.mkdir()
    os.mkfifo(folder / LOCK_FILE)
    assert not is_in_use(folder) and lock_holder(folder) is None
    with pytest.raises(ConfigError, match=r"could not create or lock \.run\.lock in it: .*named pipe"):
        claim_run_folder(folder)


def test_a_huge_or_deep_metrics_line_is_skipped_like_a_torn_one(tmp_path):
    from core.files import read_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n' + "[" * 100_000 + "]" * 100_000 + '\n{"step": 2}\n')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]


# ---------------------------------------------------------------------- notes and escapes


def test_a_note_that_is_not_utf8_is_one_line(root, capsys):
    code, _, err = cli(capsys, "runs", "--runs-dir", str(root), "note", "good", "caf\udce9")  # argv's surrogates
    assert code == 2 and "not valid UTF-8" in one_line_error(err)
    assert not (root / "good" / "note.txt").exists()


def test_escape_sequences_in_a_runs_files_never_reach_the_terminal(root, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # every cell whole
    esc = "\x1b]0;owned\x07\x1b[2J"
    record = json.loads((root / "good" / "run.json").read_text())
    record.update(
        task=f"tiny{esc}",
        precision=f"fp32{esc}",
        device=f"cpu{esc}",
        message=f"done{esc}",
        metrics={f"acc{esc}": 0.5},
        config={"task": "tiny", "lr": f"0.1{esc}"},
        notes=[f"n{esc}"],
        best={"name": f"acc{esc}", "value": 0.5, "step": 3},
        status="[/]completed",
    )  # "[/]": no markup
    (root / "good" / "run.json").write_text(json.dumps(record))
    (root / "good" / "note.txt").write_text(f"my note{esc}\nsecond line")
    outputs = []
    for argv in (("list",), ("show", "good"), ("compare", "good", "other"), ("note", "good")):
        code, out, err = cli(capsys, "runs", "--runs-dir", str(root), *argv)
        assert code == 0, err
        outputs.append(out + err)
    for out in outputs:
        assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned" in outputs[1].replace("\n", "") and "[/]completed" in outputs[0]
    assert "second line" in outputs[3]


# ---------------------------------------------------------------------- the folder claim's temp files


def test_the_claim_removes_only_the_runs_own_temp_files(tmp_path):
    from core.engine import early_stopping, run_record
    from core.engine.run_folder import RUN_FILES, claim_run_folder
    from core.runs import evaluation_report

    assert {
        run_record.RECORD_FILE,
        run_record.NOTE_FILE,
        early_stopping.BEST_FILE,
        evaluation_report.REPORT_FILE,
    } <= set(RUN_FILES)
    folder = tmp_path / "mine"  # a folder the user named as --out, with their own files in it
    folder.mkdir()
    ours = [".run.json.a1b2c3d4e5f6.tmp", ".best-step40.pt.a1b2c3d4e5f6.tmp", ".note.txt.x.tmp"]
    theirs = [".model.onnx.a1b2c3d4e5f6.tmp", ".data.csv.k2j4.tmp", ".run.json.tmp", ".xrun.json.a1.tmp"]
    for name in ours + theirs:
        (folder / name).write_bytes(b"half a file")
    claimed = claim_run_folder(folder)
    claimed.release()
    assert claimed.path == folder and claimed.removed == sorted(ours)
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")) == sorted(theirs)


def test_any_field_of_any_type_is_a_listed_run_never_a_traceback(root, capsys, monkeypatch):
    from core.runs.compare import compare_rows

    monkeypatch.setenv("COLUMNS", "200")
    folder = root / "good"
    original = json.loads((folder / "run.json").read_text())
    for field in sorted(set(original) | {"peak_memory_bytes", "versions", "resumed_at", "device_name"}):
        for value in (5, 1.5, "nan", [1], {"a": 1}, True):
            (folder / "run.json").write_text(json.dumps({**original, field: value}))
            run = read_run(folder)
            assert run["name"] == "good" and (run["status"] == "unreadable") == ("unreadable" in run)
            json.dumps(run)
            compare_rows([run, read_run(root / "other")])
            for argv in (("list",), ("show", "good")):
                code, _, err = cli(capsys, "runs", "--runs-dir", str(root), *argv)
                assert code == 0 and not err, (field, value, argv, err)


# ---------------------------------------------------------------------- checkpoints run.json names


def test_a_checkpoint_path_in_run_json_never_leads_out_of_the_run_folder(root, tmp_path):
    from core.engine.run_folder import recorded_checkpoint
    from core.files import UnreadableFile

    folder = root / "good"
    (folder / "checkpoint.pt").write_bytes(b"ours")
    (root / "other" / "best.pt").write_bytes(b"another run's")
    secret = tmp_path / "secret.pt"
    secret.write_bytes(b"not a run's")
    (folder / "linked.pt").symlink_to(secret)
    assert recorded_checkpoint(folder, str(folder / "checkpoint.pt")) == folder / "checkpoint.pt"
    assert recorded_checkpoint(folder, "checkpoint.pt") == folder / "checkpoint.pt"
    # a folder moved or copied: run.json still names the old place; the file of that name here is the one
    assert recorded_checkpoint(folder, "/old/runs/good/checkpoint.pt") == folder / "checkpoint.pt"
    for hostile in (
        "/etc/passwd",
        "../other/best.pt",
        str(folder / ".." / "other" / "best.pt"),
        str(secret),
        "linked.pt",
        str(folder / "linked.pt"),
        "check\x00point.pt",
    ):
        with pytest.raises(UnreadableFile) as refused:
            recorded_checkpoint(folder, hostile)
        assert "\n" not in str(refused.value) and "not used" in str(refused.value), hostile
    with pytest.raises(FileNotFoundError):
        recorded_checkpoint(folder, "best.pt")


def test_the_windows_history_uses_no_checkpoint_outside_the_run_folder(root):
    from app.panels.run_rows import checkpoint_of
    from core.engine.run_record import read_run

    (root / "good" / "checkpoint.pt").write_bytes(b"ours")
    (root / "other" / "best.pt").write_bytes(b"another run's")
    record = json.loads((root / "good" / "run.json").read_text())
    record["checkpoints"] = {"last": {"path": "/etc/passwd", "step": 3}, "best": {"path": "../other/best.pt"}}
    (root / "good" / "run.json").write_text(json.dumps(record))
    run = read_run(root / "good")
    for which, shown in (("last", "/etc/passwd"), ("best", "../other/best.pt")):
        path, refused = checkpoint_of(run, which)
        assert path is None and refused.startswith(f"good: run.json's checkpoint {shown} ") and "\n" not in refused
    other = read_run(root / "other")  # fake_run's own record: its checkpoint.pt, not there yet
    assert checkpoint_of(other, "last") == (None, None)
    (root / "other" / "checkpoint.pt").write_bytes(b"theirs")
    assert checkpoint_of(other, "last") == (str(root / "other" / "checkpoint.pt"), None)
