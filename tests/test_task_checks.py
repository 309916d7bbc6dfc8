"""A user task's returns checked before the first step (core.tasks.task_checks), and its exceptions named at the
user's own file and line: each kind of bad return is one line naming the task, the method, what was expected and
what came back, and nothing trains; an exception of the user's code mid-run fails the run with its traceback.
`evaluate`, `export` and the lab tools run the same checks before they start, with the same lines.

Each task here is the fixture's RegressionTask (tests/fixtures/user_tasks/regression_task.py) in a file of
tmp_path, with one method broken by a subclass, trained in-process through `amp-console train`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_in_process import cli

import core.tasks as registry
from core.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"


def broken_task(tmp_path: Path, body: str, name: str = "broken_task.py") -> Path:
    """The regression task's file with `class Broken(RegressionTask)` (named 'broken') and `body` below it."""
    path = tmp_path / name
    subclass = "\n\nclass Broken(RegressionTask):\n    name = 'broken'\n\n"
    subclass += textwrap.indent(textwrap.dedent(body), "    ")
    path.write_text(TASK_FILE.read_text() + subclass)
    return path


def train(tmp_path: Path, path: Path, capsys, *extra) -> tuple[int, str, str]:
    argv = [
        "train",
        "--task",
        f"{path}:Broken",
        "--max-steps",
        "8",
        "--eval-interval",
        "4",
        "-o",
        "samples=256",
        "--batch-size",
        "64",
        "--out",
        str(tmp_path / "run"),
        *extra,
    ]
    return cli(capsys, *argv)


BAD_RETURNS = {
    "loss_not_scalar": (
        """
        def loss(self, model, batch):
            return (model(batch["x"]) - batch["y"][:, None]) ** 2
        """,
        "broken.loss returned a tensor of shape (64, 1): expected a scalar (a 0-dim tensor); reduce it, e.g. .mean()",
    ),
    "loss_float": (
        """
        def loss(self, model, batch):
            return super().loss(model, batch).item()
        """,
        "broken.loss returned a float (",
    ),
    "loss_none": (
        """
        def loss(self, model, batch):
            super().loss(model, batch)
        """,
        "broken.loss returned None: expected a scalar tensor",
    ),
    "loss_dict": (
        """
        def loss(self, model, batch):
            return {"loss": super().loss(model, batch)}
        """,
        "broken.loss returned a dict (keys 'loss'): expected a scalar tensor",
    ),
    "loss_without_grad": (
        """
        def loss(self, model, batch):
            return super().loss(model, batch).detach()
        """,
        "broken.loss returned a tensor that does not require grad",
    ),
    "metrics_not_a_dict": (
        """
        def metrics(self, parts):
            return [super().metrics(parts)["rmse"]]
        """,
        "broken.metrics returned a list of 1: expected a dict of metric name -> number",
    ),
    "metrics_not_a_number": (
        """
        def metrics(self, parts):
            return {"rmse": parts.sums["squares"].sqrt()}
        """,
        "broken.metrics returned 'rmse' as a tensor of shape () and dtype float64: expected a number "
        "(use float(...) or .item())",
    ),
    "evaluate_not_a_dict": (
        """
        def evaluate(self, model, split, batch_size):
            return 0.5

        evaluate_parts = Task.evaluate_parts
        """,
        "broken.evaluate returned a float (0.5): expected a dict of metric name -> number",
    ),
    "metrics_without_the_primary_metric": (
        """
        def metrics(self, parts):
            return {"mse": super().metrics(parts)["rmse"] ** 2}
        """,
        "broken.metrics returned the metrics 'mse', without the task's primary_metric 'rmse' (set "
        "primary_metric to one of them, or return it)",
    ),
    "evaluate_parts_not_parts": (
        """
        def evaluate_parts(self, model, split, batch_size):
            return {"squares": 1.0}
        """,
        "broken.evaluate_parts returned a dict (keys 'squares'): expected EvalParts(",
    ),
    "splits_of_unequal_length": (
        """
        def load_data(self, data_path, seed):
            data = super().load_data(data_path, seed)
            data.val["y"] = data.val["y"][:-3]
            return data
        """,
        "broken.load_data returned a val split of unequal lengths ('x' 26, 'y' 23 rows)",
    ),
    "load_data_not_task_data": (
        """
        def load_data(self, data_path, seed):
            data = super().load_data(data_path, seed)
            return {"train": data.train, "val": data.val}
        """,
        "broken.load_data returned a dict (keys 'train', 'val'): expected a TaskData(",
    ),
    "split_not_tensors": (
        """
        def load_data(self, data_path, seed):
            data = super().load_data(data_path, seed)
            data.train["x"] = data.train["x"].tolist()
            return data
        """,
        "broken.load_data returned a train split whose 'x' is a list of 204: expected a tensor",
    ),
    "build_model_not_a_module": (
        """
        def build_model(self, info):
            layer = super().build_model(info)
            return lambda x: layer(x)
        """,
        "broken.build_model returned a function: expected a torch.nn.Module",
    ),
}


@pytest.mark.parametrize("kind", list(BAD_RETURNS))
def test_a_bad_return_is_one_line_before_anything_trains(tmp_path, capsys, kind):
    body, expected = BAD_RETURNS[kind]
    code, out, err = train(tmp_path, broken_task(tmp_path, body), capsys)
    assert code == 2, err
    assert err.strip().splitlines() == [f"amp-console: error: {err.strip().split('error: ', 1)[1]}"]  # one line
    assert expected in err, err
    assert "threads:" not in err and out == ""  # RunStarted never came: its notes are not printed
    assert not (tmp_path / "run").exists()  # a run that never started leaves no folder behind


def test_the_check_leaves_training_as_it_was(tmp_path, capsys, monkeypatch):
    """The checked forward (dropout, BatchNorm) changes neither the weights' path nor the random state."""
    import core.tasks.task_checks as checks

    path = broken_task(
        tmp_path,
        """
        def build_model(self, info):
            return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 1))
        """,
    )
    runs = []
    for check in (True, False):
        if not check:
            monkeypatch.setattr(checks, "check_returns", lambda *args: None)
        code, out, err = train(tmp_path / str(check), path, capsys, "--json")
        assert code == 0, err
        runs.append(json.loads(out.strip().splitlines()[-1]))
    assert runs[0]["final_loss"] == runs[1]["final_loss"] and runs[0]["metrics"] == runs[1]["metrics"]


def test_an_exception_mid_run_fails_the_run_with_the_users_frames(tmp_path, capsys):
    path = broken_task(
        tmp_path,
        """
        steps = 0

        def loss(self, model, batch):
            if torch.is_grad_enabled() and model.training:
                type(self).steps += 1
            if type(self).steps == 7:  # the check's forward and steps 1 to 5 pass: the one after step 5 raises
                raise ValueError("a row of the batch is bad")
            return super().loss(model, batch)
        """,
    )
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "a row of the batch" in text)
    code, out, err = train(tmp_path, path, capsys, "--json")
    assert code == 1, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "failed"
    message = f"ValueError at step 5: a row of the batch is bad (raised at broken_task.py:{line} in loss)"
    assert f"run failed: {message}" in err
    frames = err.split("run failed: ", 1)[1].splitlines()[1:]
    assert frames[0] == "Traceback, your code's frames:"
    assert f'  File "{path}", line {line}, in loss' in frames
    assert not any("core/engine" in text for text in frames)  # the user's frames only
    ended = [json.loads(text) for text in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert ended["event"] == "RunEnded" and ended["message"] == message
    assert f'File "{path}", line {line}, in loss' in ended["details"] and "trainer.py" in ended["details"]


def test_an_exception_while_setting_up_names_the_users_line(tmp_path, capsys):
    path = broken_task(
        tmp_path,
        """
        def load_data(self, data_path, seed):
            columns = {"x": 1}
            return columns["y"]
        """,
    )
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if 'columns["y"]' in text)
    code, out, err = train(tmp_path, path, capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert lines[0] == (
        f"amp-console: error: KeyError while the run was set up: 'y' (raised at broken_task.py:{line} in load_data)"
    )
    assert lines[1] == "Traceback, your code's frames:" and lines[2] == f'  File "{path}", line {line}, in load_data'
    assert not (tmp_path / "run").exists()


def test_built_in_tasks_are_not_run_by_the_check(monkeypatch):
    """The loss and metrics checks run a user task's code only: a built-in's first step is its own."""
    from core.tasks.task_checks import is_user_task

    assert not is_user_task(registry.create_task("tiny"))
    registry.add_task(f"{TASK_FILE}:RegressionTask")
    assert is_user_task(registry.create_task("regression"))


def test_user_frames_are_the_users_files_only():
    from core.tasks.task_checks import is_user_file

    assert is_user_file(str(TASK_FILE)) and is_user_file("/home/me/my_task.py")
    assert not is_user_file(str(ROOT / "core" / "engine" / "trainer.py"))
    assert not is_user_file(json.__file__) and not is_user_file("<string>")
    import torch

    assert not is_user_file(torch.nn.modules.module.__file__)


def test_an_installed_tasks_package_is_user_code_among_the_installed_packages(tmp_path, monkeypatch):
    """A task loaded by its module from site-packages (an entry point's package): its frames are the user's, the
    other installed packages' are not."""
    import sys

    from core.tasks import task_checks, user_tasks
    from tests.installed_tasks import install_task_package

    site = tmp_path / "site-packages"
    package = install_task_package(site)
    other = site / "other_pkg.py"
    other.write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(task_checks, "_LIBRARY", (*task_checks._LIBRARY, f"{site.resolve()}/"))
    monkeypatch.setattr(user_tasks, "USER_CODE_ROOTS", set())
    module_file = str(package / "wave.py")
    assert not task_checks.is_user_file(module_file)  # installed, and not a task's package yet
    try:
        user_tasks.load_task("amp_example_tasks.wave:WaveTask")
        assert task_checks.is_user_file(module_file) and task_checks.is_user_file(str(package / "__init__.py"))
        assert not task_checks.is_user_file(str(other)) and not task_checks.is_user_file(json.__file__)
    finally:
        for name in [m for m in sys.modules if m == "amp_example_tasks" or m.startswith("amp_example_tasks.")]:
            del sys.modules[name]


@pytest.mark.parametrize("base", ["RegressionDatasetTask", "RegressionStreamTask"])
def test_a_dataset_tasks_loss_is_checked_on_its_first_items(tmp_path, capsys, base):
    source = ROOT / "tests" / "fixtures" / "user_tasks" / "dataset_task.py"
    path = tmp_path / "broken_ds.py"
    path.write_text(
        source.read_text() + f"\n\nclass Broken({base}):\n    name = 'broken'\n\n"
        "    def loss(self, model, batch):\n"
        "        return (model(batch['x']).squeeze(-1) - batch['y']) ** 2\n"
    )
    code, out, err = train(tmp_path, path, capsys, "--num-workers", "0")
    assert code == 2 and "broken.loss returned a tensor of shape (64,): expected a scalar" in err, err


# ------------------------------------------------------------------ evaluate, export and the lab tools check too
TOGGLED = {  # a return that goes wrong once BROKEN_RETURNS is set: a run trains the task, then the tool gets it
    "loss": (
        """
        def loss(self, model, batch):
            import os
            value = super().loss(model, batch)
            return value.unsqueeze(0).expand(batch["y"].shape[0], 1) if os.environ.get("BROKEN_RETURNS") else value
        """,
        "broken.loss returned a tensor of shape (64, 1): expected a scalar (a 0-dim tensor); reduce it, e.g. .mean()",
    ),
    "metrics": (
        """
        def metrics(self, parts):
            import os
            if os.environ.get("BROKEN_RETURNS"):
                return {"rmse": parts.sums["squares"].sqrt()}
            return super().metrics(parts)
        """,
        "broken.metrics returned 'rmse' as a tensor of shape () and dtype float64: expected a number "
        "(use float(...) or .item())",
    ),
}


def trained_then_broken(tmp_path: Path, capsys, monkeypatch, kind: str) -> tuple[Path, str]:
    """A run of the toggled task trained as it is, then BROKEN_RETURNS set: (its checkpoint, the expected line)."""
    body, expected = TOGGLED[kind]
    path = broken_task(tmp_path, body)
    code, _, err = train(tmp_path, path, capsys, "--keep-best", "0")
    assert code == 0, err
    monkeypatch.setenv("BROKEN_RETURNS", "1")
    return tmp_path / "run" / "checkpoint.pt", expected


@pytest.mark.parametrize("kind", list(TOGGLED))
def test_evaluate_checks_the_tasks_returns_first(tmp_path, capsys, monkeypatch, kind):
    checkpoint, expected = trained_then_broken(tmp_path, capsys, monkeypatch, kind)
    code = main(["evaluate", str(checkpoint), "--task", f"{tmp_path / 'broken_task.py'}:Broken", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"amp-console: error: {expected}"]


@pytest.mark.parametrize("kind", list(TOGGLED))
def test_export_checks_the_tasks_returns_first_and_writes_nothing(tmp_path, capsys, monkeypatch, kind):
    checkpoint, expected = trained_then_broken(tmp_path, capsys, monkeypatch, kind)
    code = main(
        [
            "export",
            str(checkpoint),
            "--task",
            f"{tmp_path / 'broken_task.py'}:Broken",
            "--format",
            "safetensors",
            "--out",
            str(tmp_path / "export"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == f"amp-console: error: {expected}"
    assert sum(line.startswith("amp-console: error") for line in err.splitlines()) == 1
    assert not (tmp_path / "export").exists()


def test_export_without_the_tasks_data_exports_and_says_the_check_was_not_done(tmp_path, capsys, monkeypatch):
    path = broken_task(
        tmp_path,
        """
        def load_data(self, data_path, seed):
            import os
            if os.environ.get("DATA_GONE"):
                raise FileNotFoundError("rows.csv")
            return super().load_data(data_path, seed)
        """,
    )
    code, _, err = train(tmp_path, path, capsys, "--keep-best", "0")
    assert code == 0, err
    monkeypatch.setenv("DATA_GONE", "1")
    code = main(
        [
            "export",
            str(tmp_path / "run" / "checkpoint.pt"),
            "--task",
            f"{path}:Broken",
            "--format",
            "safetensors",
            "--out",
            str(tmp_path / "export"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (
        "note: task broken's loss and metrics were not checked: its data could not be loaded "
        "(FileNotFoundError: rows.csv)"
    ) in err
    assert (tmp_path / "export" / "manifest.json").is_file()


def lab_tools():
    """Each lab tool, called in-process on a config (small sizes, the CPU)."""
    from core.lab.batch_finder import FakeProbe, find_batch_sizes
    from core.lab.dtype_inspector import inspect_dtypes
    from core.lab.lr_finder import find_lr
    from core.lab.model_summary import summarize
    from core.lab.precision_sweep import run_sweep

    return {
        "batch finder": lambda cfg: find_batch_sizes(cfg, ["fp32"], probe=FakeProbe(10**9, 1), steps=1, max_batch=64),
        "model summary": lambda cfg: summarize(cfg, modes=["fp32"]),
        "dtype inspector": lambda cfg: inspect_dtypes(cfg),
        "precision sweep": lambda cfg: run_sweep(cfg, ["fp32"], steps=1, repeats=1, isolate=False),
        "lr finder": lambda cfg: find_lr(cfg, steps=5),
    }


@pytest.mark.parametrize("tool", ["batch finder", "model summary", "dtype inspector", "precision sweep", "lr finder"])
@pytest.mark.parametrize("kind", list(TOGGLED))
def test_the_lab_tools_check_the_tasks_returns_first(tmp_path, monkeypatch, tool, kind):
    from core.config import RunConfig
    from core.errors import TaskOutputError

    body, expected = TOGGLED[kind]
    monkeypatch.setenv("BROKEN_RETURNS", "1")
    name = registry.add_task(f"{broken_task(tmp_path, body)}:Broken").name
    cfg = RunConfig.for_task(name, device="cpu", task_options={"samples": 256}).validate()
    with pytest.raises(TaskOutputError) as raised:
        lab_tools()[tool](cfg)
    assert str(raised.value) == expected


@pytest.mark.parametrize(
    "tool, context",
    [
        ("model summary", "in the model summary"),
        ("dtype inspector", "in the dtype inspector"),
        ("batch finder", "while the run was set up"),
    ],
)
def test_an_exception_of_the_tasks_code_in_a_lab_tool_names_the_users_line(tmp_path, tool, context):
    from core.config import RunConfig
    from core.errors import UserCodeError

    path = broken_task(
        tmp_path,
        """
        def load_data(self, data_path, seed):
            columns = {"x": 1}
            return columns["y"]
        """,
    )
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if 'columns["y"]' in text)
    name = registry.add_task(f"{path}:Broken").name
    with pytest.raises(UserCodeError) as raised:
        lab_tools()[tool](RunConfig.for_task(name, device="cpu").validate())
    assert str(raised.value) == f"KeyError {context}: 'y' (raised at broken_task.py:{line} in load_data)"
    assert 'columns["y"]' in raised.value.details


@pytest.mark.slow
def test_an_isolated_sweep_mode_raises_the_tasks_one_line_in_the_sweeps_process(tmp_path, monkeypatch):
    from core.config import RunConfig
    from core.errors import TaskOutputError
    from core.lab.precision_sweep import run_sweep

    body, expected = TOGGLED["loss"]
    monkeypatch.setenv("BROKEN_RETURNS", "1")
    path = broken_task(tmp_path, body)
    name = registry.add_task(f"{path}:Broken").name
    cfg = RunConfig.for_task(name, device="cpu", task_options={"samples": 256}).validate()
    with pytest.raises(TaskOutputError) as raised:
        run_sweep(cfg, ["fp32"], steps=1, repeats=1, isolate=True)
    assert str(raised.value) == expected
