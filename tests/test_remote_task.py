"""A user's task started on a host, over a real sshd on 127.0.0.1 (tests/local_sshd.py): the task file travels
with the start request into the run's folder there and the run loads that copy (its run.json records the path on
the host), with none of its code run here; a `package.module:Class` reference is passed as it is; a file missing
here, a module the host lacks and a copy the host cannot write are one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import core.tasks as registry
from core.cli.main import main
from core.config import RunConfig
from core.files import read_jsonl
from core.remote.client import start_remote_run
from core.remote.ssh import RemoteError
from tests.test_remote_ssh import sshd, wait_for  # noqa: F401 (the session's sshd, a fixture)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"
MODULE = "tests.fixtures.user_tasks.regression_task:RegressionTask"  # importable here and on the host (PYTHONPATH)
MARKER = "\nfrom pathlib import Path as _P\n_P(__file__).with_suffix('.ran').touch()\n"  # proof that the file ran


def flags(sshd) -> list[str]:
    return ["--ssh-config", str(sshd.config), "--remote-command", sshd.prefix]


def marked_copy(tmp_path: Path) -> Path:
    path = tmp_path / "my_task.py"
    path.write_text(TASK_FILE.read_text() + MARKER)
    return path


def started_folder(out: str) -> Path:
    target = out.strip().splitlines()[0]
    assert target.startswith("amp-test:"), out
    return Path(target.removeprefix("amp-test:"))


def test_a_config_naming_its_task_file_trains_on_the_host_from_a_copy(sshd, tmp_path, capsys):
    path = marked_copy(tmp_path)
    config = tmp_path / "run.toml"
    config.write_text(
        f'task = "regression"\ntask_file = "{path}:RegressionTask"\ndevice = "cpu"\nmax_steps = 20\n'
        f"log_interval = 10\neval_interval = 10\n[task_options]\nsamples = 256\n"
    )
    code = main(["remote", "start", "amp-test", "--config", str(config), "--watch", *flags(sshd)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "copying the task file my_task.py to amp-test" in err and "run completed on cpu" in out
    folder = started_folder(out)
    copy = folder / "task" / "my_task.py"
    assert copy.read_bytes() == path.read_bytes()
    record = json.loads((folder / "run.json").read_text())
    assert record["task"] == "regression" and record["config"]["task_file"] == f"{copy}:RegressionTask"
    assert record["config"]["lr"] == pytest.approx(3e-3)  # the task's defaults, under the config's settings
    assert copy.with_suffix(".ran").exists()  # the host ran its copy...
    assert not path.with_suffix(".ran").exists()  # ...and nothing of it ran here


def test_a_module_reference_is_passed_as_it_is(sshd, tmp_path, capsys):
    code = main(["remote", "start", "amp-test", "--task", MODULE, "-o", "samples=256", "--watch", *flags(sshd)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "is a module's class: it must be installed on amp-test" in err
    folder = started_folder(out)
    assert json.loads((folder / "run.json").read_text())["config"]["task_file"] == MODULE
    assert not (folder / "task").exists()


def test_the_window_path_sends_the_loaded_tasks_file(sshd, tmp_path):
    """What Start on a host calls: a config of a task loaded here names its file, and the file goes along."""
    path = marked_copy(tmp_path)
    registry.add_task(f"{path}:RegressionTask")
    config = RunConfig.for_task("regression", device="cpu", max_steps=10, log_interval=5, task_options={"samples": 256})
    notes: list[str] = []
    run = start_remote_run(sshd.host(), config, runs_dir=str(sshd.runs), on_progress=notes.append)
    copy = Path(run.folder) / "task" / "my_task.py"
    assert run.task_file == f"{copy}:RegressionTask" and notes[0].startswith("copying the task file my_task.py")
    wait_for(
        lambda: any(r["event"] == "RunEnded" for r in read_jsonl(Path(run.folder) / "metrics.jsonl")), "the run's end"
    )
    started = next(r for r in read_jsonl(Path(run.folder) / "metrics.jsonl") if r["event"] == "RunStarted")
    assert started["config"]["task_file"] == run.task_file


def test_what_cannot_be_started_is_one_line(sshd, tmp_path, capsys):
    code = main(["remote", "start", "amp-test", "--task", f"{tmp_path}/gone.py:GoneTask", *flags(sshd)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "gone.py:GoneTask: no such local file to copy to amp-test" in err

    code = main(["remote", "start", "amp-test", "--task", "no_such_package.tasks:MyTask", *flags(sshd)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "name the task too" in err

    values = RunConfig(device="cpu").to_dict() | {"task": "regression", "task_file": "no_such_package.tasks:MyTask"}
    with pytest.raises(RemoteError) as caught:  # the host lacks the module: its one line
        start_remote_run(sshd.host(), values, runs_dir=str(sshd.runs))
    assert "\n" not in str(caught.value) and "no module named 'no_such_package'" in str(caught.value)

    path = marked_copy(tmp_path)
    out_dir = tmp_path / "blocked"
    (out_dir / "task" / "my_task.py").mkdir(parents=True)  # the copy cannot be written there
    values = RunConfig(device="cpu").to_dict() | {
        "task": "regression",
        "task_file": f"{path}:RegressionTask",
        "out_dir": str(out_dir),
    }
    with pytest.raises(RemoteError) as caught:
        start_remote_run(sshd.host(), values)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(
        "amp-test: the task file was not copied: cannot write the task file my_task.py into "
    ), text
    assert not path.with_suffix(".ran").exists()
