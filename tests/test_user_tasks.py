"""A task from outside the project (tests/fixtures/user_tasks/regression_task.py, one module): loaded by
reference from the CLI (--task FILE.py:Class), trained, evaluated and resumed; listed without running it;
never loaded because a run folder or a checkpoint names it; each kind of bad task file named in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_in_process import cli
from task_registry import restore

import core.tasks as registry
from core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"
REFERENCE = f"{TASK_FILE}:RegressionTask"
MARKER = "\nfrom pathlib import Path as _P\n_P(__file__).with_suffix('.ran').touch()\n"  # proof that the file ran


def marked_copy(tmp_path: Path) -> Path:
    """The regression task in tmp_path, writing <file>.ran when its code runs."""
    path = tmp_path / "my_task.py"
    path.write_text(TASK_FILE.read_text() + MARKER)
    return path


def test_train_evaluate_and_resume_a_task_file(tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = cli(
        capsys,
        "train",
        "--task",
        REFERENCE,
        "--max-steps",
        "200",
        "--eval-interval",
        "50",
        "-o",
        "samples=512",
        "--out",
        run,
        "--json",
    )
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "completed"
    assert summary["metrics"]["rmse"] < 1.0  # y has variance `features` (8): the model learnt it
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == "regression"
    assert record["config"]["task_file"] == REFERENCE  # absolute: a run started elsewhere finds it
    # rmse is lower-better: the best checkpoint is the last evaluation's here (rmse falls as it learns), not the
    # first (a higher-better reading of rmse picked step 50)
    assert summary["best_step"] == 200
    code, out, err = cli(capsys, "evaluate", run, "--task", REFERENCE, "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["metrics"]["rmse"] < 1.0
    code, out, err = cli(
        capsys, "train", "--resume", run / "checkpoint.pt", "--task", REFERENCE, "--max-steps", "220", "--json"
    )
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 220


def test_a_config_file_names_its_task_file(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(
        f'task = "regression"\ntask_file = "{REFERENCE}"\nmax_steps = 10\n'
        f'out_dir = "{tmp_path / "run"}"\n[task_options]\nsamples = 256\n'
    )
    code, out, err = cli(capsys, "train", "--config", config, "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 10


def test_listing_a_task_file_runs_none_of_its_code(tmp_path):
    path = marked_copy(tmp_path)
    info = registry.remember_task(f"{path}:RegressionTask")
    assert info is not None and info.name == "regression"
    assert [o.name for o in info.options] == ["features", "hidden", "samples", "noise"]
    assert registry.task_infos()["regression"].source == f"{path.resolve()}:RegressionTask"
    assert "regression" in registry.task_names()
    assert not path.with_suffix(".ran").exists()
    assert registry.get_task_class("regression").name == "regression"  # used: loaded now
    assert path.with_suffix(".ran").exists()


def test_a_forgotten_task_is_unlisted_and_can_be_added_again(tmp_path):
    path = marked_copy(tmp_path)
    reference = f"{path.resolve()}:RegressionTask"
    cls = registry.add_task(reference)
    path.with_suffix(".ran").unlink()
    assert registry.forget_task(f"{path}:RegressionTask") == ("regression",)
    assert "regression" not in registry.task_names() and "regression" not in registry.task_infos()
    assert "regression" not in registry.TASKS and registry.task_source("regression") == ""
    with pytest.raises(ConfigError, match="unknown task 'regression'"):
        registry.get_task_class("regression")
    assert registry.add_task(reference) is cls  # its module stays imported: registered again, not run again
    assert not path.with_suffix(".ran").exists() and registry.TASKS["regression"] is cls
    assert registry.forget_task(f"{tmp_path / 'gone.py'}:GoneTask") == ()


@pytest.mark.slow
def test_a_checkpoint_never_loads_its_task_file(tmp_path, capsys):
    """A fresh process given only the run: it says how to give the task file, and the file's code never ran."""
    path = marked_copy(tmp_path)
    run = tmp_path / "run"
    code, _out, err = cli(
        capsys, "train", "--task", f"{path}:RegressionTask", "--max-steps", "10", "-o", "samples=256", "--out", run
    )
    assert code == 0, err
    path.with_suffix(".ran").unlink()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "evaluate", str(run)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "task 'regression' is defined in" in line and f"--task {path.resolve()}:RegressionTask" in line
    assert not path.with_suffix(".ran").exists()
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "evaluate", str(run), "--task", f"{path}:RegressionTask", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "rmse" in json.loads(done.stdout.strip().splitlines()[-1])["metrics"]


BAD_TASKS = {
    "syntax": ("class RegressionTask(Task)\n    pass\n", "syntax error at line"),
    "raises": ("x = 1 / 0\n", "importing it raised ZeroDivisionError: division by zero (line"),
    "no_loss": (None, "does not define loss"),
    "builtin_name": ("RegressionTask.name = 'tiny'\n", "is a built-in task's"),
    "bad_name": ("RegressionTask.name = 'My Task!'\n", "must be a short lower-case name"),
    "bad_options": ("RegressionTask.options = ('hidden',)\n", "options must be a tuple of TaskOption"),
    "no_class": (None, "defines no 'Missing'"),
}


@pytest.mark.parametrize("kind", list(BAD_TASKS))
def test_a_bad_task_file_is_named_in_one_line(tmp_path, capsys, kind):
    source, expected = BAD_TASKS[kind]
    text = TASK_FILE.read_text()
    class_name = "RegressionTask"
    if kind == "syntax":
        text = "from core.tasks.base import Task\n" + source
    elif kind == "no_loss":
        text = text.replace("    def loss(", "    def not_the_loss(")
    elif kind == "no_class":
        class_name = "Missing"
    else:
        text += "\n" + textwrap.dedent(source)
    path = tmp_path / "bad_task.py"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        registry.add_task(f"{path}:{class_name}")
    assert expected in str(caught.value) and str(path) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert registry.get_task_class("tiny").name == "tiny"
    code, _out, err = cli(capsys, "train", "--task", f"{path}:{class_name}", "--max-steps", "1")
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1


def test_defaults_that_are_not_settings(tmp_path, capsys):
    path = tmp_path / "bad_defaults.py"
    path.write_text(TASK_FILE.read_text() + "\nRegressionTask.defaults = {'learning_rate': 1}\n")
    code, _out, err = cli(capsys, "train", "--task", f"{path}:RegressionTask", "--max-steps", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "RegressionTask.defaults" in err and "learning_rate: unknown setting" in err


def test_a_reference_to_nothing(tmp_path, capsys):
    code, _out, err = cli(capsys, "train", "--task", f"{tmp_path}/nope.py:Task")
    assert code == 2 and "no such file" in err
    code, _out, err = cli(capsys, "train", "--task", "no_such_package.tasks:MyTask")
    assert code == 2 and "no module named 'no_such_package'" in err


def test_an_installed_entry_point_is_listed_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "my_tasks_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pathlib import Path as _P\n_P(__file__).with_name('init.ran').touch()\n")
    (package / "regression.py").write_text(TASK_FILE.read_text() + MARKER)
    info = tmp_path / "my_tasks_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-tasks-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[amp_console.tasks]\nregression = my_tasks_pkg.regression:RegressionTask\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_installed_read", False)
    listed = registry.task_infos()["regression"]
    assert listed.source == "my_tasks_pkg.regression:RegressionTask" and listed.primary_metric == "rmse"
    assert not (package / "init.ran").exists() and not (package / "regression.ran").exists()
    assert registry.create_task("regression", {"hidden": 4}).parameter_count() == 8 * 4 + 4 + 4 + 1
    assert (package / "regression.ran").exists()


@pytest.mark.parametrize(
    "metric, mode",
    [
        ("rmse", "min"),
        ("val_mae", "min"),
        ("loss", "min"),
        ("error_rate", "min"),
        ("perplexity", "min"),
        ("accuracy", "max"),
        ("ndcg@10", "max"),
    ],
)
def test_one_rule_says_which_way_is_better(metric, mode):
    from core.engine.early_stopping import resolve_mode
    from core.engine.run_record import lower_is_better

    assert resolve_mode(metric, "auto") == mode
    assert lower_is_better(metric) == (mode == "min")


def test_a_remembered_task_is_read_once_until_its_file_changes(tmp_path, monkeypatch):
    import core.tasks.catalog as catalog

    path = marked_copy(tmp_path)
    reads = []
    real = catalog.read_task_info
    monkeypatch.setattr(catalog, "read_task_info", lambda *a: reads.append(a) or real(*a))
    registry.remember_task(f"{path}:RegressionTask")
    for _ in range(3):
        assert registry.task_infos()["regression"].description.startswith("an MLP")
    assert len(reads) == 1
    path.write_text(path.read_text().replace("an MLP fitting", "a network fitting"))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    assert registry.task_infos()["regression"].description.startswith("a network fitting")
    assert len(reads) == 2
    assert not path.with_suffix(".ran").exists()


def test_why_a_task_file_cannot_be_listed(tmp_path):
    from core.tasks.catalog import task_class_names
    from core.tasks.user_tasks import source_problem

    assert source_problem(f"{tmp_path}/gone.py:Task") == "no such file"
    broken = tmp_path / "broken.py"
    broken.write_text("class A(Task)\n    pass\n")
    assert source_problem(str(broken)).startswith("syntax error at line 1")
    path = marked_copy(tmp_path)
    assert source_problem(str(path)) == ""
    path.write_text(
        path.read_text() + "\n\nclass Other(Task):\n    name = 'other'\n\n\n"
        "class Wider(RegressionTask):\n    name = 'wider'\n"
    )
    assert task_class_names(path) == ["RegressionTask", "Other", "Wider"]
    assert not path.with_suffix(".ran").exists()


def forget_loaded_tasks() -> None:
    """As a new process: no user task loaded or listed (the autouse fixture restores the registry after)."""
    restore(({}, {}))


def test_lr_find_on_a_task_file_suggests_a_command_that_names_the_file(capsys):
    code, out, err = cli(
        capsys, "lr-find", "--task", REFERENCE, "--device", "cpu", "--steps", "25", "-o", "samples=256", "--json"
    )
    assert code in (0, 1), err
    result = json.loads(out.strip().splitlines()[-1])
    assert "lr-find: regression" in err and len(result["lrs"]) >= 2
    if code == 0:  # a suggestion: the command to use it loads the same file
        assert f"--task {REFERENCE}" in result["train_command"] and "-o samples=256" in result["train_command"]


def test_runs_compare_two_runs_of_a_task_file(tmp_path, capsys, monkeypatch):
    root = tmp_path / "runs"
    for name, hidden in (("a", 32), ("b", 8)):
        code, _out, err = cli(
            capsys,
            "train",
            "--task",
            REFERENCE,
            "--max-steps",
            "10",
            "-o",
            "samples=256",
            "-o",
            f"hidden={hidden}",
            "--out",
            root / name,
        )
        assert code == 0, err
    forget_loaded_tasks()
    path = marked_copy(tmp_path)  # the runs name their file; comparing them reads its source, runs none of it
    for name in ("a", "b"):
        record = json.loads((root / name / "run.json").read_text())
        record["config"]["task_file"] = f"{path.resolve()}:RegressionTask"
        if name == "a":
            record["config"]["task_options"].pop("hidden")  # saved as the window saves: the changed options only
        (root / name / "run.json").write_text(json.dumps(record))
    code, out, err = cli(capsys, "runs", "compare", "--runs-dir", root, "a", "b", "--json")
    assert code == 0, err
    compared = json.loads(out)
    assert compared["config_differs"] == {"task_options.hidden": [32, 8]}  # a's default read from the file
    assert [r["task"] for r in compared["runs"]] == ["regression", "regression"]
    assert not path.with_suffix(".ran").exists() and "regression" not in registry._loaded


@pytest.mark.slow
def test_a_task_file_trains_under_ddp(tmp_path, capfd):
    """--nproc 2: every process loads the file itself; one run, its record naming the file."""
    run = tmp_path / "run"
    code, out, err = cli(
        capfd,
        "train",
        "--task",
        REFERENCE,
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--max-steps",
        "20",
        "-o",
        "samples=256",
        "--out",
        run,
        "--json",
    )  # the ranks' own output too
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["steps"] == 20
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["task_file"] == REFERENCE and record["task"] == "regression"


@pytest.fixture
def installed_package(tmp_path, monkeypatch):
    """tests/fixtures/user_tasks/pkg installed onto a folder on sys.path (its dist-info names the entry point)."""
    from tests.installed_tasks import install_task_package

    package = install_task_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(registry, "_installed_read", False)
    yield package
    for name in [m for m in sys.modules if m == "amp_example_tasks" or m.startswith("amp_example_tasks.")]:
        del sys.modules[name]


def test_an_installed_package_task_is_listed_by_the_cli_then_trained(installed_package, tmp_path, capsys):
    code, out, err = cli(capsys, "tasks")
    assert code == 0, err
    assert "wave" in out and "an MLP fitting y = sin(3x)" in out
    assert "from amp_example_tasks.wave:WaveTask (an installed package's entry point: loading it runs" in out
    assert not list(installed_package.glob("*.ran"))  # listed from its metadata and source: nothing imported
    code, out, err = cli(capsys, "train", "--task", "wave", "--max-steps", "10", "--out", tmp_path / "run", "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["status"] == "completed"
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["task"] == "wave" and record["config"]["task_file"] == "amp_example_tasks.wave:WaveTask"
    assert (installed_package / "wave.ran").exists()


@pytest.mark.timeout(60)
def test_a_task_symlink_loop_or_fifo_is_one_line_and_never_blocks(tmp_path, capsys):
    from core.tasks.user_tasks import source_problem

    loop = tmp_path / "loop.py"
    loop.symlink_to(loop)
    code, _out, err = cli(capsys, "train", "--task", loop, "--max-steps", 1)
    assert code == 2 and "loop.py" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    assert "named pipe" in source_problem(f"{fifo}:PipeTask")  # listing a remembered one reads no FIFO
