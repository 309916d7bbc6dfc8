"""The window's runs root: a run started with an empty output folder lands in a new folder under it, the run
history lists that root, and moving it (the history's Change… / Default) is remembered. A GUI run and a CLI run
writing under the same root at the same moment each keep their own folder and run.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gui_helpers import find, finish_run, quick_run

from core.engine.run_index import find_runs
from core.engine.run_record import RECORD_FILE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def window(make_window):
    return make_window()


def open_history(qtbot, window):
    window.historyAction.trigger()
    panel = window.historyDialog.panel
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    return panel


@pytest.mark.timeout(180)
def test_an_empty_output_folder_runs_under_the_chosen_root_and_the_history_follows(
    qtbot, window, tmp_path, runs_root_in_tmp
):
    panel = open_history(qtbot, window)
    assert panel.root == runs_root_in_tmp  # the default: $AMP_CONSOLE_RUNS_DIR (a temp folder in tests)
    chosen = tmp_path / "my runs"
    with qtbot.waitSignal(panel.scanned, timeout=30_000):
        panel.rootChosen.emit(str(chosen))  # what Change… emits after the folder dialog
    assert panel.root == chosen and str(chosen) in panel.rootLabel.text()
    assert window.window_settings.runs_root() == str(chosen)

    quick_run(window, "", max_steps=6, separate_process=False)
    assert find(window, "outDirEdit").placeholderText()  # says what empty means
    finish_run(qtbot, window)
    [run] = find_runs(chosen)
    # named by the precision that ran (the form's auto on the CPU), not by the form's "auto"
    assert run["status"] == "completed" and run["name"].endswith("-tiny-fp32") and run["precision"] == "fp32"
    assert Path(window.last_checkpoint).parent == Path(run["folder"])
    qtbot.waitUntil(lambda: run["name"] in panel.visible_names(), timeout=30_000)

    with qtbot.waitSignal(panel.scanned, timeout=30_000):
        panel.rootDefaultButton.click()
    assert panel.root == runs_root_in_tmp and window.window_settings.runs_root() == ""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_gui_run_and_a_cli_run_under_one_root_at_the_same_time(qtbot, window, runs_root_in_tmp):
    quick_run(window, "", max_steps=1_000_000, log_interval=10, separate_process=False)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000, check_params_cb=bool):
        find(window, "startButton").click()
    qtbot.waitUntil(lambda: any(runs_root_in_tmp.glob(f"*/{RECORD_FILE}")), timeout=30_000)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "core.cli",
            "train",
            "--task",
            "tiny",
            "--max-steps",
            "30",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--precision",
            "bf16",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert cli.returncode == 0, cli.stderr
    assert window.controller.running  # the GUI run trained all along the CLI run
    with qtbot.waitSignal(window.controller.runningChanged, timeout=120_000, check_params_cb=lambda r: not r):
        find(window, "stopButton").click()
    runs = find_runs(runs_root_in_tmp)
    assert len(runs) == 2 and len({r["folder"] for r in runs}) == 2 and len({r["id"] for r in runs}) == 2
    cli_run = next(r for r in runs if r["name"].endswith("-tiny-bf16"))
    gui_run = next(r for r in runs if r["name"].endswith("-tiny-fp32"))  # the form's auto, resolved for the CPU
    assert cli_run["status"] == "completed" and cli_run["steps"] == 30
    assert gui_run["status"] == "stopped" and gui_run["steps"] > 0
    for run in runs:  # each record is whole JSON, describing its own folder
        record = json.loads((Path(run["folder"]) / RECORD_FILE).read_text())
        assert Path(record["config"]["out_dir"]) == Path(run["folder"])
        assert (Path(run["folder"]) / "checkpoint.pt").is_file()
