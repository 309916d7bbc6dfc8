"""The runs root: a run with no output folder goes in a new dated folder under it; --runs-dir, then
$AMP_CONSOLE_RUNS_DIR, then the user's data folder choose it; `train` and `runs list` agree on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from core.cli.main import main
from core.config import RunConfig
from core.engine.run_index import find_runs
from core.engine.run_record import (
    RUNS_DIR_ENV,
    new_run_folder,
    resolve_out_dir,
    runs_root,
    user_data_dir,
)

ROOT = Path(__file__).resolve().parent.parent


def test_explicit_beats_the_environment_which_beats_the_data_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "from-env"))
    assert runs_root(str(tmp_path / "given")) == tmp_path / "given"
    assert runs_root(None) == tmp_path / "from-env"
    assert runs_root("  ") == tmp_path / "from-env"  # a blank setting is no setting
    monkeypatch.delenv(RUNS_DIR_ENV)
    assert runs_root(None) == user_data_dir() / "runs"


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="XDG data folder rules are Linux's")
def test_the_data_folder_follows_xdg_and_ignores_a_relative_value(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert user_data_dir() == tmp_path / "xdg" / "amp-console"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/path")  # the XDG spec says: ignore it
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_data_dir() == tmp_path / "home" / ".local" / "share" / "amp-console"


def test_a_new_run_folder_is_dated_and_names_task_and_precision(tmp_path):
    folder = new_run_folder(tmp_path, "recommender", "bf16", when=datetime(2026, 12, 1, 2, 37, 12))
    assert folder == tmp_path / "20261201-023712-recommender-bf16"
    assert new_run_folder(tmp_path, "a/b", "fp16", when=datetime(2026, 1, 2)).name == "20260102-000000-a_b-fp16"


def test_an_explicit_output_folder_is_kept(tmp_path):
    config = RunConfig.for_task("tiny", out_dir=str(tmp_path / "mine"))
    assert resolve_out_dir(config, tmp_path / "root") is config
    resolved = resolve_out_dir(RunConfig.for_task("tiny", precision="bf16"), tmp_path / "root")
    assert Path(resolved.out_dir).parent == tmp_path / "root" and resolved.out_dir.endswith("-tiny-bf16")


def test_an_own_folder_named_like_an_automatic_one_is_remembered_and_the_trainer_names_no_other(
    runs_root_in_tmp, tmp_path
):
    """`--out` with a dated name outside the root is remembered like any; a Trainer given a folder (by prepare_run
    under another root) doesn't resolve it again, so the default root remembers nothing."""
    from core.engine.prepare import prepare_run
    from core.engine.run_record import remembered
    from core.engine.trainer import Trainer

    own = tmp_path / "mine" / "20260101-120000-tiny-fp32"
    resolve_out_dir(RunConfig.for_task("tiny", out_dir=str(own)), tmp_path / "root")
    assert remembered(tmp_path / "root") == [str(own)]
    run = prepare_run(RunConfig.for_task("tiny", device="cpu", max_steps=1).to_dict(), runs_dir=str(tmp_path / "x"))
    result = Trainer(run.config, resume_state=run.state, notes=run.notes).run()
    assert result.status == "completed" and remembered(runs_root_in_tmp) == []


def test_blank_output_folder_is_refused_but_empty_is_the_default():
    assert RunConfig.for_task("tiny").out_dir == ""
    assert "out_dir" not in RunConfig.for_task("tiny").errors()
    assert "runs root" in RunConfig.for_task("tiny", out_dir="   ").errors()["out_dir"]


def test_the_library_trainer_puts_a_run_without_folder_under_the_root(runs_root_in_tmp):
    from core.engine.trainer import train

    result = train(RunConfig.for_task("tiny", device="cpu", max_steps=3, log_interval=1))
    assert result.status == "completed"
    [run] = find_runs(runs_root_in_tmp)
    assert Path(run["folder"]).parent == runs_root_in_tmp and run["status"] == "completed"
    assert Path(result.checkpoint).parent == Path(run["folder"])


def test_a_new_folder_is_named_by_the_precision_that_runs_not_auto(runs_root_in_tmp, tmp_path):
    """`auto` is resolved for the device before the folder is named: the library trainer, `train` and
    resolve_out_dir given the mode all name it ...-tiny-fp32 on the CPU."""
    from core.cli.main import build_parser
    from core.cli.train import prepared_run
    from core.engine.trainer import train

    config = RunConfig.for_task("tiny", device="cpu", precision="auto", max_steps=2, log_interval=1)
    result = train(config)
    [run] = find_runs(runs_root_in_tmp)
    assert run["name"].endswith("-tiny-fp32") and run["precision"] == "fp32", run["name"]
    assert Path(result.checkpoint).parent == Path(run["folder"])
    named = resolve_out_dir(RunConfig.for_task("tiny", precision="auto"), tmp_path, precision="bf16")
    assert named.out_dir.endswith("-tiny-bf16") and named.precision == "auto"  # the setting itself is kept
    args = build_parser().parse_args(["train", "--task", "tiny", "--device", "cpu", "--precision", "auto"])
    cli_config = prepared_run(args).config
    assert cli_config.out_dir.endswith("-tiny-fp32") and Path(cli_config.out_dir).parent == runs_root_in_tmp


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_cli_train_without_out_is_listed_by_runs_list_and_runs_dir_moves_both(runs_root_in_tmp, tmp_path, capsys):
    base = [
        sys.executable,
        "-m",
        "core.cli",
        "train",
        "--task",
        "tiny",
        "--max-steps",
        "3",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # $AMP_CONSOLE_RUNS_DIR: the temporary root
    first = subprocess.run(base, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    elsewhere = tmp_path / "elsewhere"
    second = subprocess.run(
        base + ["--runs-dir", str(elsewhere)], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert second.returncode == 0, second.stderr
    assert not (tmp_path / "runs").exists()  # nothing lands beside where the command ran
    checkpoint = Path(json.loads(first.stdout.strip().splitlines()[-1])["checkpoint"])
    assert checkpoint.parent.parent == runs_root_in_tmp
    assert main(["runs", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [Path(r["folder"]) for r in listed] == [checkpoint.parent]
    assert main(["runs", "list", "--json", "--runs-dir", str(elsewhere)]) == 0
    [other] = json.loads(capsys.readouterr().out)
    assert Path(other["folder"]).parent == elsewhere and other["status"] == "completed"
