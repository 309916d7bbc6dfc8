"""`amp-console runs`: list / show / note / compare / export / delete over a runs folder, ids by prefix or folder name,
one-line errors with exit 2, and a run killed with SIGKILL listed as interrupted (its checkpoint still resumes)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_in_process import cli

from core.cli.main import main
from core.engine.run_folder import claim_run_folder
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


def fake_run(
    root: Path,
    name: str,
    run_id: str,
    *,
    status="completed",
    precision="fp32",
    lr=0.01,
    start="2026-01-01T10:00:00+00:00",
    best=0.8,
    events=(),
) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(
        json.dumps(
            {
                "id": run_id,
                "name": name,
                "task": "tiny",
                "status": status,
                "device": "cpu",
                "precision": precision,
                "autocast_dtype": "bfloat16" if precision == "bf16" else "float32",
                "start_time": start,
                "end_time": start,
                "wall_seconds": 75.0,
                "steps": 100,
                "total_steps": 100,
                "final_loss": 0.25,
                "samples_per_second": 1234.0,
                "metrics": {"accuracy": best},
                "test_metrics": {},
                "best": {"name": "accuracy", "value": best, "step": 100},
                "checkpoints": {"last": {"path": str(folder / "checkpoint.pt"), "step": 100}},
                "config": {"task": "tiny", "lr": lr, "precision": precision, "out_dir": str(folder)},
                "notes": [],
            }
        )
    )
    if events:
        (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


@pytest.fixture
def runs_root(tmp_path):
    root = tmp_path / "runs"
    fake_run(
        root,
        "rec-bf16",
        "a1b2c3d4e5",
        precision="bf16",
        lr=0.02,
        start="2026-01-02T10:00:00+00:00",
        best=0.9,
        events=[
            {"event": "RunStarted", "task": "tiny"},
            {"event": "StepMetrics", "step": 5, "loss": 0.7, "lr": 0.02, "samples_per_second": 100.0},
            {"event": "EvalMetrics", "step": 5, "split": "val", "metrics": {"accuracy": 0.6}},
            {"event": "StepMetrics", "step": 10, "loss": 0.5, "lr": 0.02, "samples_per_second": 110.0},
        ],
    )
    fake_run(root, "tiny", "a1f0e9d8c7", start="2026-01-01T10:00:00+00:00")
    fake_run(root, "other", "ffee001122", status="failed", start="2026-01-03T10:00:00+00:00")
    return root


def test_list_newest_first_with_filters_and_json(runs_root, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = cli(capsys, "runs", "list", "--runs-dir", str(runs_root))
    assert code == 0
    lines = [line for line in out.splitlines() if line.strip()]
    assert all(len(line) <= 100 for line in lines)
    assert [line.split()[0] for line in lines[2:]] == ["ffee0011", "a1b2c3d4", "a1f0e9d8"]
    assert "accuracy" in out and "1:15" in out and "bf16" in out
    code, out, _ = cli(capsys, "runs", "list", "--runs-dir", str(runs_root), "--json", "--status", "completed")
    assert [r["id"] for r in json.loads(out)] == ["a1b2c3d4e5", "a1f0e9d8c7"]
    monkeypatch.setenv("AMP_CONSOLE_RUNS_DIR", str(runs_root))
    code, out, _ = cli(capsys, "runs", "list", "--json", "--task", "nope")
    assert code == 0 and json.loads(out) == []


def test_a_run_without_an_id_or_a_task_lists_dashes_cold_or_warm(runs_root, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    folder = runs_root / "tiny"
    record = json.loads((folder / "run.json").read_text())
    del record["id"], record["task"]
    (folder / "run.json").write_text(json.dumps(record))
    for _ in range(2):  # read from the folder, then from the index
        code, out, _ = cli(capsys, "runs", "list", "--runs-dir", str(runs_root))
        row = next(cells for cells in map(str.split, out.splitlines()) if cells[1:2] == ["tiny"])
        assert code == 0 and row[:3] == ["-", "tiny", "-"] and "None" not in out


def test_ids_by_prefix_or_folder_name_and_one_line_errors(runs_root, capsys):
    code, out, _ = cli(capsys, "runs", "show", "a1b", "--runs-dir", str(runs_root), "--json")
    assert code == 0 and json.loads(out)["name"] == "rec-bf16"
    code, out, _ = cli(capsys, "runs", "show", "tiny", "--runs-dir", str(runs_root))
    assert code == 0 and "a1f0e9d8c7" in out and "accuracy 0.8 at step 100" in out
    code, _, err = cli(capsys, "runs", "show", "a1", "--runs-dir", str(runs_root))
    assert code == 2 and err.count("\n") == 1
    assert "runs: 'a1' is ambiguous: a1b2c3d4e5 (rec-bf16), a1f0e9d8c7 (tiny)" in err
    code, _, err = cli(capsys, "runs", "show", "abc", "--runs-dir", str(runs_root))
    assert code == 2 and err.count("\n") == 1 and f"runs: no run 'abc' in {runs_root}/" in err


def test_compare_shows_metrics_and_the_config_that_differs(runs_root, capsys):
    code, out, _ = cli(capsys, "runs", "compare", "a1b", "tiny", "--runs-dir", str(runs_root), "--json")
    data = json.loads(out)
    assert code == 0 and [r["precision"] for r in data["runs"]] == ["bf16", "fp32"]
    assert data["config_differs"] == {"lr": [0.02, 0.01], "precision": ["bf16", "fp32"]}
    code, out, _ = cli(capsys, "runs", "compare", "a1b", "tiny", "--runs-dir", str(runs_root))
    assert code == 0 and "config lr" in out and "0.02" in out and "1,234" in out and "config task" not in out
    assert "bf16 (autocast bfloat16)" in out and "accuracy 0.9 at step 100" in out
    rows = {row["label"]: row for row in data["rows"]}  # the rows the window's compare table shows too
    assert rows["precision"]["differs"] and not rows["task"]["differs"]
    assert [label for label, row in rows.items() if row["label"].startswith("config ")] == ["config lr"]  # and
    # not "config precision": the precision row above shows what it resolved to


def test_compare_goes_by_the_values_the_runs_resolved(tmp_path, capsys):
    """A window run (task options left at their defaults: saved as {}, device and precision auto) and a CLI run
    naming the values they resolved to (every option, the device and precision) did the same: nothing differs
    but what really does."""
    from core.config import RunConfig
    from core.engine.trainer import train

    root = tmp_path / "runs"
    train(RunConfig(task="tiny", max_steps=6, threads=1, out_dir=str(root / "window")))
    ran = json.loads((root / "window" / "run.json").read_text())  # what auto resolved to on this machine
    code = main(
        [
            "train",
            "--task",
            "tiny",
            "--device",
            ran["device"],
            "--precision",
            ran["precision"],
            "--max-steps",
            "6",
            "--threads",
            "1",
            "-o",
            "hidden=16",
            "-o",
            "samples=8192",
            "-o",
            "label_noise=0.05",
            "--lr",
            "0.02",
            "--out-dir",
            str(root / "cli"),
        ]
    )
    assert code == 0
    saved = [json.loads((root / n / "run.json").read_text())["config"] for n in ("window", "cli")]
    assert saved[0]["task_options"] == {} and saved[0]["device"] == "auto" and saved[0]["precision"] == "auto"
    assert saved[1]["task_options"] == {"hidden": 16, "samples": 8192, "label_noise": 0.05}
    capsys.readouterr()
    code, out, _ = cli(capsys, "runs", "compare", "window", "cli", "--runs-dir", str(root), "--json")
    assert code == 0 and json.loads(out)["config_differs"] == {"lr": [0.01, 0.02]}
    code, out, _ = cli(capsys, "runs", "compare", "window", "cli", "--runs-dir", str(root))
    assert "config lr" in out and "config device" not in out and "task_options" not in out
    assert "config precision" not in out


def test_compare_names_each_task_option_that_differs(runs_root, capsys):
    for name, options in (("rec-bf16", {}), ("tiny", {"hidden": 32})):
        record = json.loads((runs_root / name / "run.json").read_text())
        record["config"]["task_options"] = options
        (runs_root / name / "run.json").write_text(json.dumps(record))
    code, out, _ = cli(capsys, "runs", "compare", "rec-bf16", "tiny", "--runs-dir", str(runs_root), "--json")
    differs = json.loads(out)["config_differs"]
    assert code == 0 and differs["task_options.hidden"] == [16, 32] and "task_options.samples" not in differs


def test_note_sets_prints_and_clears_a_runs_note(runs_root, capsys):
    code, out, _ = cli(capsys, "runs", "note", "a1b", "bf16 baseline, lr 0.02", "--runs-dir", str(runs_root))
    assert code == 0 and "set the note of a1b2c3d4e5 (rec-bf16)" in out
    assert (runs_root / "rec-bf16" / "note.txt").read_text() == "bf16 baseline, lr 0.02\n"
    assert "note" not in json.loads((runs_root / "rec-bf16" / "run.json").read_text())
    code, out, _ = cli(capsys, "runs", "note", "rec-bf16", "--runs-dir", str(runs_root))
    assert code == 0 and out == "bf16 baseline, lr 0.02\n"
    code, out, _ = cli(capsys, "runs", "show", "a1b", "--runs-dir", str(runs_root))
    assert code == 0 and "bf16 baseline, lr 0.02" in out
    code, out, _ = cli(capsys, "runs", "list", "--json", "--runs-dir", str(runs_root))
    assert {r["name"]: r["note"] for r in json.loads(out)} == {
        "rec-bf16": "bf16 baseline, lr 0.02",
        "tiny": "",
        "other": "",
    }
    code, out, _ = cli(capsys, "runs", "compare", "a1b", "tiny", "--runs-dir", str(runs_root), "--json")
    assert [r["note"] for r in json.loads(out)["runs"]] == ["bf16 baseline, lr 0.02", ""]
    note_row = next(row for row in json.loads(out)["rows"] if row["label"] == "note")
    assert note_row == {"label": "note", "values": ["bf16 baseline, lr 0.02", "-"], "differs": True}
    code, out, _ = cli(capsys, "runs", "note", "a1b", "", "--runs-dir", str(runs_root))
    assert code == 0 and "cleared the note of a1b2c3d4e5" in out and not (runs_root / "rec-bf16" / "note.txt").exists()
    code, out, _ = cli(capsys, "runs", "note", "a1b", "--runs-dir", str(runs_root))
    assert code == 0 and out == ""


def test_note_on_an_unknown_or_ambiguous_id_or_an_unwritable_folder_is_one_line(runs_root, capsys, monkeypatch):
    code, out, err = cli(capsys, "runs", "note", "abc", "text", "--runs-dir", str(runs_root))
    assert code == 2 and out == "" and err.count("\n") == 1 and "runs: no run 'abc'" in err
    code, _, err = cli(capsys, "runs", "note", "a1", "text", "--runs-dir", str(runs_root))
    assert code == 2 and err.count("\n") == 1 and "ambiguous" in err
    import core.cli.runs

    def refuse(folder, text):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(core.cli.runs, "write_note", refuse)
    code, _, err = cli(capsys, "runs", "note", "tiny", "text", "--runs-dir", str(runs_root))
    assert code == 2 and err.count("\n") == 1 and "could not write the note of a1f0e9d8c7 (tiny)" in err
    assert "Permission denied" in err


def test_export_writes_step_and_eval_metrics_as_csv(runs_root, tmp_path, capsys):
    target = tmp_path / "out.csv"
    code, out, _ = cli(capsys, "runs", "export", "rec-bf16", "--csv", str(target), "--runs-dir", str(runs_root))
    assert code == 0 and "2 rows" in out
    with target.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["5", "10"]
    assert rows[0]["loss"] == "0.7" and rows[0]["val_accuracy"] == "0.6" and rows[1]["val_accuracy"] == ""
    assert list(rows[0])[:5] == ["step", "epoch", "loss", "lr", "samples_per_second"]


def test_delete_asks_refuses_a_running_run_and_deletes_with_yes(runs_root, capsys, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    code, _, err = cli(capsys, "runs", "delete", "tiny", "--runs-dir", str(runs_root))
    assert code == 2 and "--yes" in err and (runs_root / "tiny").exists()
    with claim_run_folder(runs_root / "tiny", resume_from=runs_root / "tiny" / "checkpoint.pt"):
        code, _, err = cli(capsys, "runs", "delete", "tiny", "--yes", "--runs-dir", str(runs_root))
        assert code == 2 and "is running" in err and (runs_root / "tiny").exists()
    code, out, _ = cli(capsys, "runs", "delete", "tiny", "ffee", "--yes", "--runs-dir", str(runs_root))
    assert code == 0 and not (runs_root / "tiny").exists() and not (runs_root / "other").exists()
    assert (runs_root / "rec-bf16").exists()


def test_tensorboard_without_the_exporter_is_one_line_or_writes(runs_root, tmp_path, capsys):
    code, out, err = cli(
        capsys, "runs", "tensorboard", "rec-bf16", "--out", str(tmp_path / "tb"), "--runs-dir", str(runs_root)
    )
    try:
        import core.runs.tensorboard_export  # noqa: F401  (another change adds it)
    except ImportError:
        assert code == 2 and err.count("\n") == 1 and "not available" in err
    else:
        assert code == 0 and "tensorboard --logdir" in out
        assert list((tmp_path / "tb" / "rec-bf16").rglob("events.out.tfevents.*"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [["runs", "list", "--help"], ["runs", "list", "--runs-dir", "RUNS"], ["runs", "show", "a1b", "--runs-dir", "RUNS"]],
    ids=lambda a: " ".join(a[:2]),
)
def test_runs_commands_do_not_import_torch(argv, runs_root):
    argv = [str(runs_root) if a == "RUNS" else a for a in argv]
    probe = (
        "import sys, contextlib, io\nfrom core.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass\n"
        "print([m for m in ('torch', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


TRAIN = [
    sys.executable,
    "-m",
    "core.cli",
    "train",
    "--task",
    "tiny",
    "--device",
    "cpu",
    "--precision",
    "fp32",
    "--threads",
    "1",
    "--batch-size",
    "32",
    "--log-interval",
    "5",
    "--checkpoint-interval",
    "5",
    "-o",
    "samples=2048",
]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_cli_run_lists_as_interrupted_and_its_checkpoint_resumes(tmp_path, capsys):
    """The run killed is a process of its own; the listings, the resume and the export run in this process."""
    root = tmp_path / "runs"
    out = root / "killed"

    def listed() -> list[dict]:
        code, text, err = cli(capsys, "runs", "list", "--json", "--runs-dir", str(root))
        assert code == 0, err
        return json.loads(text)

    process = subprocess.Popen(
        [*TRAIN, "--max-steps", "1000000", "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # run.json records a checkpoint just after metrics.jsonl names it: wait for the record, then kill
        runs = wait_until(
            lambda: (r := listed()) and "last" in (r[0].get("checkpoints") or {}) and r, "a checkpoint", process
        )
        assert [r["status"] for r in runs] == ["running"]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
        process.stderr.close()
    runs = listed()
    assert [r["status"] for r in runs] == ["interrupted"]
    assert runs[0]["wall_seconds"] > 0  # as of its last checkpoint
    run_id, recorded = runs[0]["id"], runs[0]["checkpoints"]["last"]["step"]
    assert runs[0]["steps"] >= recorded > 0
    # A kill between writing checkpoint.pt and updating run.json leaves the record one checkpoint behind
    saved = torch.load(out / "checkpoint.pt", weights_only=True)["step"]
    assert saved >= recorded
    code, _, err = cli(capsys, *TRAIN[3:], "--max-steps", str(saved + 5), "--resume", str(out / "checkpoint.pt"))
    assert code == 0, err
    assert [(r["id"], r["status"]) for r in listed()] == [(run_id, "completed")]
    code, exported, err = cli(capsys, "runs", "export", run_id[:6], "--csv", "-", "--runs-dir", str(root))
    rows = list(csv.DictReader(exported.splitlines()))
    assert code == 0 and rows and all(r["loss"] for r in rows if r["lr"]), err
    assert int(rows[-1]["step"]) == saved + 5


def test_export_keeps_only_what_a_resume_did_not_replace(tmp_path):
    from core.cli.runs import export_rows

    records = [
        {"event": "RunStarted", "start_step": 0},
        *({"event": "StepMetrics", "step": s, "epoch": 1, "loss": 1.0} for s in (10, 20, 30)),
        {"event": "EvalMetrics", "step": 30, "split": "val", "metrics": {"accuracy": 0.5}},
        {"event": "RunStarted", "start_step": 10},  # killed after 30, resumed from the checkpoint at 10
        {"event": "StepMetrics", "step": 20, "epoch": 1, "loss": 0.5},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    _, rows = export_rows(tmp_path)
    assert [(r["step"], r["loss"]) for r in rows] == [(10, 1.0), (20, 0.5)]
    assert all("val_accuracy" not in r for r in rows)
