"""Run → Copy as command / Copy as TOML: the form's run for a terminal (core.config.run_command). Parsed back by the
CLI's own parser and prepare_run, it is the run the window starts: a user task file, its options, a columns map, a
tab delimiter, switches and a folder under the chosen runs root; on a host, `remote start HOST --config run.toml`
sends the form's config. And a host's run looks remote: the status bar names the host, its checkpoint is HOST:PATH."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication
from task_registry import task_files_run_here

import core.remote.client
from app.run.remote_run import RemoteRun, _Found
from core.cli.main import build_parser
from core.cli.train import prepared_run
from core.config import RunConfig
from core.engine.events import CheckpointSaved, RunEnded, RunStarted
from core.engine.prepare import prepare_run
from core.remote.ssh import Host
from core.tasks import add_task, get_task_class
from tests.gui.gui_helpers import find, set_field

# a form holding a task file estimates its memory in a child process (core.lab.memory_estimate.in_child)
pytestmark = pytest.mark.slow
TASK_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "user_tasks" / "regression_task.py"


@pytest.fixture
def user_task_form(window, qtbot, tmp_path):
    """The form on a user's task file (loaded here, as File → Add task… does in a child), far from its defaults."""
    path = tmp_path / "my task.py"  # a space: the command quotes it
    path.write_text(TASK_FILE.read_text())
    with task_files_run_here():
        window.setupPanel.add_task(add_task(f"{path}:RegressionTask"))
    set_field(window, "taskCombo", "regression")
    data = tmp_path / "-rows.csv"  # a value starting with -, kept a value
    data.write_text("a,b\n1,2\n")
    window.apply_config(
        window.setupPanel.config().replace(
            task_options={"hidden": 7, "noise": 0.25, "features": 8},
            columns={"y": "target value"},
            delimiter="\t",
            data=str(data),
        )
    )
    set_field(window, "lrEdit", 0.0123)
    set_field(window, "maxStepsEdit", 30)
    find(window, "compileEdit").setChecked(True)
    window.set_runs_root(str(tmp_path / "my runs"))
    return window


def cli_config(argv: list[str]) -> RunConfig:
    """The run `amp-console train ARGV...` would start (core.cli.train's parser and prepared_run)."""
    args = build_parser("train").parse_args(["train", *argv])
    args.argv = argv
    return prepared_run(args).config


def window_config(window) -> RunConfig:
    """What Start would run (as MainWindow.start_run prepares it)."""
    return prepare_run(
        window.setupPanel.config().to_dict(), runs_dir=str(window.runs_root()), device=window.setupPanel.device()
    ).config


def full(config: RunConfig) -> RunConfig:
    """`config` with every task option (the command gives those that differ from the option's default)."""
    options = {option.name: option.default for option in get_task_class(config.task).options}
    return config.replace(task_options=options | config.task_options)


def same_run(cli: RunConfig, form: RunConfig) -> None:
    """Equal, the folder included: its parent is the runs root and its name <date>-<time>-<task>-<precision>, the
    time left out (on a busy machine the two are named in different seconds)."""
    assert Path(cli.out_dir).parent == Path(form.out_dir).parent
    assert Path(cli.out_dir).name.split("-", 2)[2] == Path(form.out_dir).name.split("-", 2)[2]
    assert full(cli).replace(out_dir="") == full(form).replace(out_dir="")


def test_copy_as_command_reproduces_the_form_run(user_task_form, tmp_path):
    window = user_task_form
    window.file_actions.copy_actions[0].trigger()
    text = QGuiApplication.clipboard().text()
    assert "Copied as command to the clipboard: amp-console train" in find(window, "statusMessage").text()
    words = shlex.split(text)
    assert words[:4] == ["amp-console", "train", "--task", f"{tmp_path / 'my task.py'}:RegressionTask"]
    for part in ("--lr 0.0123", "--compile", "--max-steps 30", "--delimiter '\\t'", "-o hidden=7", "-o noise=0.25"):
        assert part in text, part
    assert "--epochs 4" not in text and "--optimizer" not in text and "features" not in text  # defaults: not repeated
    same_run(cli_config(words[2:]), window_config(window))
    assert f"--runs-dir={tmp_path / 'my runs'}" in words

    # A chosen output folder: the same folder, and no runs root.
    out = tmp_path / "out"
    set_field(window, "outDirEdit", str(out))
    words = shlex.split(window.file_actions.copy_run("command"))
    assert not any(w.startswith("--runs-dir") for w in words)
    assert full(cli_config(words[2:])) == full(window_config(window)) and window_config(window).out_dir == str(out)


def test_copy_as_toml_is_a_config_file_for_train(user_task_form, tmp_path):
    window = user_task_form
    window.file_actions.copy_actions[1].trigger()
    text = QGuiApplication.clipboard().text()
    assert text.startswith('task = "regression"\n') and "epochs" not in text
    assert "Copied as TOML to the clipboard" in find(window, "statusMessage").text()
    config = tmp_path / "run.toml"
    config.write_text(text)
    root = str(window.runs_root())
    same_run(cli_config(["--config", str(config), "--runs-dir", root]), window_config(window))
    assert full(RunConfig.load_toml(config)) == full(
        window.setupPanel.config()
    )  # File → Open settings reads it back too


def test_copy_as_command_on_a_host_is_remote_start(user_task_form, tmp_path, monkeypatch):
    window = user_task_form
    monkeypatch.setattr(window.devicesPanel, "current_host", lambda: "me@gpu-box")
    window.devicesPanel.hosts.add("me@gpu-box", "~/venv/bin/amp-console")
    set_field(window, "processesEdit", 1)
    text = window.file_actions.copy_run("command")
    lines = text.splitlines()  # the heredoc writes run.toml, then the command reads it
    assert lines[0] == "cat > run.toml <<'AMP_TOML'" and lines[-2] == "AMP_TOML" and len(lines) > 4
    (tmp_path / "run.toml").write_text("\n".join(lines[1:-2]) + "\n")
    words = shlex.split(lines[-1])
    assert words[:6] == ["amp-console", "remote", "start", "me@gpu-box", "--config", "run.toml"]
    assert {f"--task={tmp_path / 'my task.py'}:RegressionTask", "--remote-command=~/venv/bin/amp-console"} <= set(words)
    sent = {}

    def start_remote_run(host, config, **kwargs):
        sent.update(host=host, config=config, **kwargs)
        return type("Run", (), {"target": f"{host.dest}:/runs/x"})()

    monkeypatch.setattr(core.remote.client, "start_remote_run", start_remote_run)
    monkeypatch.chdir(tmp_path)
    args = build_parser("remote").parse_args(words[1:])
    assert args.handler(args) == 0
    assert sent["host"].dest == "me@gpu-box" and sent["host"].command == "~/venv/bin/amp-console"
    assert (
        full(sent["config"]) == full(window.setupPanel.config()) and sent["nproc"] is None
    )  # what Start on the host sends


def test_a_hosts_run_names_the_host_and_its_checkpoint_as_host_path(window, qtbot):
    run = RemoteRun(window.controller, host=Host("me@gpu-box"))
    window.controller._adopt(run, lambda: None)
    run._on_progress(_Found("me@gpu-box:/runs/r1", "/runs/r1", "me@gpu-box"))
    config = RunConfig(out_dir="/runs/r1").to_dict()
    run._on_progress(RunStarted("tiny", "cuda:0", "H100", "bf16", "bfloat16", "float32", False, 10, 100, 10, 0, config))
    qtbot.waitUntil(lambda: window.statusBarWidget.device.text() == "me@gpu-box · cuda:0 · H100")
    run._on_progress(CheckpointSaved(step=100, path="/runs/r1/checkpoint.pt"))
    run._on_progress(RunEnded("completed", "completed 100 steps", 100, 10, 0.1, {}, "/runs/r1/checkpoint.pt", None))
    qtbot.waitUntil(lambda: "Checkpoint: me@gpu-box:/runs/r1/checkpoint.pt" in find(window, "statusMessage").text())
    assert "checkpoint saved at step 100: me@gpu-box:/runs/r1/checkpoint.pt" in window.logPanel.toPlainText()
    assert window.last_checkpoint == "me@gpu-box:/runs/r1/checkpoint.pt"
    window.statusBarWidget.grab().save("/tmp/remote_status.png")
    run.shutdown()
    qtbot.waitUntil(lambda: not window.controller.running)
