"""A host's runs in this machine's history, over a real sshd on 127.0.0.1 (tests/local_sshd.py): the runs under
the host's runs root listed as its own history reads them (one broken run.json listed as unreadable, the others
whole), compared with a local run, and one fetched into `<runs root>/.hosts/HOST/RUN/` with progress, its best
checkpoint loaded from the copy by the usual loaders; a second fetch sends nothing, a changed file alone is sent
again; `amp-console remote runs` and `remote fetch`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from core.engine.checkpoints import load_checkpoint
from core.engine.run_record import read_run
from core.remote.fetch import fetch_run, list_host_runs
from core.runs.compare import compare_rows
from tests.test_remote_ssh import sshd  # noqa: F401 (the session's sshd, a fixture)

pytestmark = pytest.mark.slow


def host_runs(sshd, trained_runs) -> tuple[Path, Path]:
    """The host's runs root holds a copy of the trained tiny run and a run whose run.json is broken."""
    tiny = sshd.runs / "tiny-run"
    if not tiny.exists():
        shutil.copytree(trained_runs["tiny"].folder, tiny)
    broken = sshd.runs / "broken-run"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "run.json").write_text('{"id": "abc", "steps": ')
    return tiny, broken


def test_a_hosts_runs_are_listed_and_one_broken_record_hides_none(sshd, trained_runs, tmp_path):
    tiny, _broken = host_runs(sshd, trained_runs)
    listed = list_host_runs(sshd.host(), tmp_path / "local")
    assert listed.dest == "amp-test" and listed.root == str(sshd.runs)
    runs = {run["name"]: run for run in listed.runs}
    assert runs["amp-test:broken-run"]["status"] == "unreadable"
    assert "run.json is not valid JSON" in runs["amp-test:broken-run"]["unreadable"]
    run = runs["amp-test:tiny-run"]
    here = read_run(tiny)
    assert (run["id"], run["status"], run["steps"], run["best"]) == (
        here["id"],
        "completed",
        here["steps"],
        here["best"],
    )
    copy = tmp_path / "local" / ".hosts" / "amp-test" / "tiny-run"
    assert run["folder"] == str(copy) and run["remote_folder"] == str(tiny) and run["host"] == "amp-test"
    assert run["checkpoints"]["best"]["path"] == str(copy / "best.pt") and run["remote_checkpoints"]
    assert not copy.exists()  # listing copies nothing

    local = read_run(trained_runs["tiny"].folder)  # compared with a run of this machine, as `runs compare` does
    rows = {row.label: row for row in compare_rows([local, run])}
    assert rows["task"].values == ("tiny", "tiny") and rows["best"].values[0] != "-"
    assert not [label for label, row in rows.items() if row.differs]  # the same run, here and there


def test_a_run_is_fetched_with_progress_and_a_second_fetch_sends_nothing(sshd, trained_runs, tmp_path):
    tiny, _broken = host_runs(sshd, trained_runs)
    local = tmp_path / "local"
    progress: list[tuple[int, int, str]] = []
    fetched = fetch_run(sshd.host(), "tiny-run", local, on_progress=lambda *report: progress.append(report))
    copy = local / ".hosts" / "amp-test" / "tiny-run"
    assert fetched.folder == copy and fetched.checkpoint == copy / "best.pt"
    assert fetched.remote_folder == str(tiny)
    assert fetched.sent == ["run.json", "metrics.jsonl", "best.pt"] and fetched.kept == []
    for name in fetched.sent:
        assert (copy / name).read_bytes() == (tiny / name).read_bytes()
    total = sum((tiny / name).stat().st_size for name in fetched.sent)
    assert fetched.bytes_sent == total
    assert progress[0] == (0, total, "run.json") and progress[-1] == (total, total, "best.pt")
    assert [done for done, _total, _name in progress] == sorted(done for done, _total, _name in progress)
    assert {name for _d, _t, name in progress} == set(fetched.sent)
    assert not [p for p in copy.iterdir() if p.name.startswith(".")]  # no temp file left

    state = load_checkpoint(fetched.checkpoint)  # the safe loader (weights_only), on the copy
    assert state["step"] == load_checkpoint(tiny / "best.pt")["step"]
    from core.runs.predict import load_predictor

    assert load_predictor(copy).checkpoint == copy / "best.pt"  # the copy is a run folder like any other

    times = {name: (copy / name).stat().st_mtime_ns for name in fetched.sent}
    again = fetch_run(sshd.host(), str(tiny), local)  # by its folder on the host this time
    assert again.sent == [] and again.bytes_sent == 0 and sorted(again.kept) == sorted(fetched.sent)
    assert {name: (copy / name).stat().st_mtime_ns for name in fetched.sent} == times

    (tiny / "note.txt").write_text("the one to ship\n")  # a file changed on the host: only it comes again
    try:
        third = fetch_run(sshd.host(), "tiny-run", local, checkpoint=False)
    finally:
        (tiny / "note.txt").unlink()
    assert third.sent == ["note.txt"] and third.checkpoint is None
    assert read_run(copy)["note"] == "the one to ship"


def test_remote_runs_and_fetch_commands(sshd, trained_runs, tmp_path, capsys):
    from core.cli.main import main

    host_runs(sshd, trained_runs)
    flags = ["--ssh-config", str(sshd.config), "--remote-command", sshd.prefix, "--runs-dir", str(tmp_path)]
    assert main(["remote", "runs", "amp-test", *flags]) == 0
    out = capsys.readouterr().out
    assert "amp-test:tiny-run" in out and "completed" in out
    assert "amp-test:broken-run: unreadable: run.json is not valid JSON" in out
    assert main(["remote", "fetch", "amp-test:tiny-run", *flags]) == 0
    captured = capsys.readouterr()
    copy = tmp_path / ".hosts" / "amp-test" / "tiny-run"
    assert captured.out.strip() == str(copy) and (copy / "best.pt").is_file()
    assert "amp-console: fetching best.pt: " in captured.err
    assert captured.err.splitlines()[-1].startswith("amp-console: fetched 3 file(s) (")
    assert main(["remote", "fetch", "amp-test:tiny-run", *flags]) == 0
    assert capsys.readouterr().err.strip().endswith("fetched 0 file(s) (0 B), 3 already here")
    assert main(["remote", "fetch", "amp-test:no-such-run", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no run folder or run 'no-such-run'" in err
    assert os.listdir(tmp_path / ".hosts" / "amp-test") == ["tiny-run"]
