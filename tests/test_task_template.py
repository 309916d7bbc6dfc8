"""`amp-console tasks new NAME`: the task file it writes (core/tasks/template.py renamed) loads with --task,
trains in bf16, resumes from its checkpoint and evaluates, through the CLI; a bad name or a path in the way
(a file, a folder, a symbolic link, no folder) is one line, and nothing is written or left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_in_process import cli

from core.errors import DataError
from core.tasks.new_task import task_file_text, task_names, template_source
from core.tasks.user_tasks import check_task_class

ROOT = Path(__file__).resolve().parents[1]


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_the_written_file_trains_in_bf16_resumes_evaluates_finds_its_lr_exports_and_predicts(tmp_path, capsys):
    code, out, err = cli(capsys, "tasks", "new", "my_points", "--out", tmp_path)
    assert code == 0, err
    path = tmp_path / "my_points.py"
    assert path.is_file()
    assert f"amp-console train --task {path} --precision bf16" in out  # the next commands, ready to paste
    assert f"amp-console tasks my_points --task {path}" in out
    assert f"amp-console export {tmp_path / 'runs' / 'my_points'} --task {path}" in out

    code, out, err = cli(capsys, "tasks", "my_points", "--task", path, "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["name"] == "my_points" and listed["primary_metric"] == "accuracy"
    assert listed["parameters"] == (16 * 64 + 64) + (64 * 64 + 64) + (64 * 4 + 4)  # built from the options

    run = tmp_path / "run"
    code, out, err = cli(
        capsys,
        "train",
        "--task",
        path,
        "--precision",
        "bf16",
        "--max-steps",
        "60",
        "--eval-interval",
        "20",
        "-o",
        "samples=1024",
        "--out",
        run,
        "--json",
    )
    assert code == 0, err
    summary = last_json(out)
    assert summary["status"] == "completed" and summary["precision"] == "bf16"
    assert summary["metrics"]["accuracy"] > 0.5  # 4 classes: 0.25 by chance
    assert set(summary["test_metrics"]) >= {"loss", "accuracy"}
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == "my_points" and record["config"]["task_file"] == str(path.resolve())

    code, out, err = cli(
        capsys, "train", "--resume", run / "checkpoint.pt", "--task", path, "--max-steps", "80", "--json"
    )
    assert code == 0, err
    assert last_json(out)["steps"] == 80

    code, out, err = cli(capsys, "evaluate", run, "--task", path, "--json")
    assert code == 0, err
    assert last_json(out)["metrics"]["accuracy"] > 0.5

    code, out, err = cli(
        capsys,
        "lr-find",
        "--task",
        path,
        "--precision",
        "bf16",
        "--device",
        "cpu",
        "--steps",
        "25",
        "-o",
        "samples=1024",
        "--json",
    )
    assert code in (0, 1), err  # 1: no suggestion from the curve, which the result says
    found = last_json(out)
    assert "lr-find: my_points" in err and len(found["lrs"]) >= 5
    if code == 0:
        assert f"--task {path}" in found["train_command"]

    # Its serving part (PointsServing, FeatureServing's): an export that its own serve.py answers, and predict.
    export = tmp_path / "export"
    code, out, err = cli(capsys, "export", run, "--last", "--task", path, "--out", export)
    assert code == 0, err
    manifest = json.loads((export / "manifest.json").read_text())
    assert manifest["task"] == "my_points" and manifest["step"] == 80
    assert manifest["serving"] == {"features": 16, "outputs": ["p0", "p1", "p2", "p3"], "probabilities": True}
    assert manifest["verification"]["max_abs_diff"] <= manifest["verification"]["tolerance"]
    from core.runs.predict import load_predictor

    predictor = load_predictor(run, which="last")
    points = predictor.example_rows(3)
    (tmp_path / "points.csv").write_text(
        ",".join(f"x{i}" for i in range(1, 17))
        + "\n"
        + "".join(",".join(f"{v:.6f}" for v in row) + "\n" for row in points)
    )
    code, out, err = cli(
        capsys,
        "predict",
        run,
        "--last",
        "--task",
        path,
        "--input",
        tmp_path / "points.csv",
        "--out",
        tmp_path / "scored.csv",
    )
    assert code == 0, err
    import pyarrow.csv as pacsv

    scored = pacsv.read_csv(tmp_path / "scored.csv").to_pydict()
    rounded = np.asarray([[float(f"{v:.6f}") for v in row] for row in points], np.float32)
    expected = predictor.predict_rows(rounded)
    assert scored["line"] == [2, 3, 4] and scored["predicted"] == expected.argmax(1).tolist()
    assert np.asarray([scored[f"p{c}"] for c in range(4)]).T == pytest.approx(expected, abs=1e-5)
    served = serve_module(export).load(export)  # serve.py needs no task file: the program is the model
    assert np.asarray(served.predict(rounded.tolist())) == pytest.approx(expected, abs=1e-5)


def serve_module(folder: Path):
    """An export's own serve.py, imported from its folder."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"serve_template_{folder.name}", folder / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_file_is_the_template_renamed(tmp_path, capsys):
    code, _out, err = cli(capsys, "tasks", "new", "Digits_v2", "--out", tmp_path / "mine.py")
    assert code == 0, err
    text = (tmp_path / "mine.py").read_text()
    assert text == task_file_text("Digits_v2", "mine.py")
    assert "emplate" not in text  # nothing of the template's own names is left
    assert "class DigitsV2Task(Task):" in text and 'name = "digits_v2"' in text
    assert "amp-console train --task mine.py" in text  # its docstring names the file it is in
    assert text.startswith('"""')  # the template's own header comment is not copied
    compile(text, "mine.py", "exec")
    assert template_source().count("TemplateTask") == text.count("DigitsV2Task")
    assert os.listdir(tmp_path) == ["mine.py"]  # no temporary file left beside it


def test_the_template_is_a_task():
    from core.tasks.template import TemplateTask

    check_task_class(TemplateTask, "core/tasks/template.py")
    task = TemplateTask({"samples": 200, "classes": 3, "features": 5})
    data = task.load_data("", seed=1)
    assert data.info == {"features": 5, "classes": 3}
    assert len(data.train["x"]) == 160 and len(data.val["x"]) == 20 and len(data.test["x"]) == 20
    model = task.build_model(data.info)
    assert model(data.val["x"]).shape == (20, 3)
    assert task.build_model({})(torch.zeros(2, 5)).shape == (2, 3)  # no info: sized by the options
    assert task.parameter_count() == (5 * 64 + 64) + (64 * 64 + 64) + (64 * 3 + 3)


def test_the_template_reads_a_csv_file(tmp_path):
    from core.tasks.template import TemplateTask

    rows = ["a,b,label"] + [f"{i % 7},{(i * 3) % 5},{i % 3}" for i in range(40)]
    (tmp_path / "points.csv").write_text("\n".join(rows) + "\n")
    data = TemplateTask().load_data(str(tmp_path / "points.csv"), seed=0)
    assert data.info == {"features": 2, "classes": 3}
    assert len(data.train["x"]) + len(data.val["x"]) + len(data.test["x"]) == 40
    (tmp_path / "bad.csv").write_text("a,label\n1,x\n")
    with pytest.raises(DataError, match="bad.csv"):
        TemplateTask().load_data(str(tmp_path / "bad.csv"), seed=0)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("my task", "'my task' is not a task name: use letters, digits and _"),
        ("1st", "'1st' is not a task name"),
        ("my-task", "'my-task' is not a task name"),
        ("x" * 41, "is not a task name"),
        ("../evil", "'../evil' is not a task name"),
        ("tiny", "'tiny' is a built-in task's name: pick another"),
    ],
)
def test_a_bad_name_is_one_line(tmp_path, capsys, name, expected):
    code, _out, err = cli(capsys, "tasks", "new", name, "--out", tmp_path)
    line = one_line_error(code, err)
    assert line.startswith("amp-console: error: tasks new: ") and expected in line
    assert os.listdir(tmp_path) == []


def test_names_and_classes():
    assert task_names("my_task") == ("my_task", "MyTask")
    assert task_names("digits") == ("digits", "DigitsTask")
    assert task_names("Task") == ("task", "TaskTask")  # never the Task it subclasses
    assert task_names("MyModel") == ("mymodel", "MyModelTask")


def test_no_name_and_misplaced_flags(capsys):
    line = one_line_error(*cli(capsys, "tasks", "new")[::2])
    assert "tasks new: name the task: amp-console tasks new NAME" in line
    assert "--json does not go with" in one_line_error(*cli(capsys, "tasks", "new", "x", "--json")[::2])
    assert "'extra' goes with `tasks new NAME" in one_line_error(*cli(capsys, "tasks", "tiny", "extra")[::2])
    assert "--out goes with" in one_line_error(*cli(capsys, "tasks", "tiny", "--out", "x.py")[::2])
    code, out, err = cli(capsys, "tasks", "tiny", "--json")  # `tasks NAME` is as it was
    assert code == 0 and json.loads(out)["name"] == "tiny", err


def test_an_existing_file_is_never_overwritten(tmp_path, capsys):
    mine = tmp_path / "my_points.py"
    mine.write_text("# mine\n")
    for out in (mine, tmp_path):  # the file itself, or its folder
        line = one_line_error(*cli(capsys, "tasks", "new", "my_points", "--out", out)[::2])
        assert f"tasks new: {mine}: already exists (a file); it is never overwritten" in line
    (tmp_path / "sub.py").mkdir()
    line = one_line_error(*cli(capsys, "tasks", "new", "sub", "--out", tmp_path)[::2])
    assert f"{tmp_path / 'sub.py'}: already exists (a folder)" in line
    assert mine.read_text() == "# mine\n"
    assert sorted(os.listdir(tmp_path)) == ["my_points.py", "sub.py"]


def test_the_default_path_is_in_the_working_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "tasks", "new", "here")
    assert code == 0, err
    assert (tmp_path / "here.py").is_file() and out.startswith("wrote here.py: task 'here' (HereTask)")
    assert "amp-console train --task here.py --precision bf16 --out runs/here" in out
    line = one_line_error(*cli(capsys, "tasks", "new", "here")[::2])
    assert "here.py: already exists" in line


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="symbolic links")
def test_a_symbolic_link_is_never_followed(tmp_path, capsys):
    dangling = tmp_path / "dangling.py"
    dangling.symlink_to(tmp_path / "elsewhere.py")  # to nothing: writing through it would create elsewhere.py
    target = tmp_path / "kept.py"
    target.write_text("# kept\n")
    to_file = tmp_path / "to_file.py"
    to_file.symlink_to(target)
    for link in (dangling, to_file):
        line = one_line_error(*cli(capsys, "tasks", "new", "x", "--out", link)[::2])
        assert f"tasks new: {link}: is a symbolic link; a task file is never written through one" in line
    assert not (tmp_path / "elsewhere.py").exists() and target.read_text() == "# kept\n"
    assert dangling.is_symlink() and to_file.is_symlink()


def test_a_path_that_cannot_be_one(tmp_path, capsys):
    cases = {
        tmp_path / "nope" / "x.py": f"its folder {tmp_path / 'nope'} does not exist",
        tmp_path / "x.txt": "a task file's name ends in .py",
    }
    (tmp_path / "file").write_text("")
    cases[tmp_path / "file" / "x.py"] = f"its folder {tmp_path / 'file'} is not a folder"
    for out, expected in cases.items():
        line = one_line_error(*cli(capsys, "tasks", "new", "x", "--out", out)[::2])
        assert f"tasks new: {out}: {expected}" in line, line
    assert sorted(os.listdir(tmp_path)) == ["file"]


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="root writes anywhere")
def test_a_folder_without_write_permission(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    line = one_line_error(*cli(capsys, "tasks", "new", "x", "--out", folder)[::2])
    assert f"{folder / 'x.py'}: cannot write in {folder}" in line


def test_a_folder_it_cannot_write_in(tmp_path, capsys, monkeypatch):
    real = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith("x.py"):
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    line = one_line_error(*cli(capsys, "tasks", "new", "x", "--out", tmp_path)[::2])
    assert f"tasks new: {tmp_path / 'x.py'}: cannot write in {tmp_path}: Permission denied" in line


@pytest.mark.slow
def test_the_real_cli_writes_and_trains_it(tmp_path):
    """`python -m core.cli`, as a user runs it: tasks new, then train in bf16 from the folder it is in, on one
    process and on two (--nproc 2: each rank loads the file named relative to that folder), and export the DDP
    run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def cli(*argv):
        return subprocess.run(
            [sys.executable, "-m", "core.cli", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )

    done = cli("tasks", "new", "starter")
    assert done.returncode == 0, done.stderr
    done = cli(
        "train",
        "--task",
        "starter.py",
        "--precision",
        "bf16",
        "--max-steps",
        "20",
        "-o",
        "samples=512",
        "--out",
        "runs/starter",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert last_json(done.stdout)["status"] == "completed"
    done = cli("train", "--resume", "runs/starter/checkpoint.pt", "--task", "starter.py", "--max-steps", "30", "--json")
    assert done.returncode == 0, done.stderr
    assert last_json(done.stdout)["steps"] == 30
    done = cli("evaluate", "runs/starter", "--task", "starter.py", "--json")
    assert done.returncode == 0, done.stderr
    assert "accuracy" in last_json(done.stdout)["metrics"]

    done = cli(
        "train",
        "--task",
        "starter.py",
        "--precision",
        "bf16",
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--max-steps",
        "20",
        "-o",
        "samples=512",
        "--out",
        "runs/ddp",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    summary = last_json(done.stdout)
    assert summary["status"] == "completed" and summary["steps"] == 20 and summary["precision"] == "bf16"
    record = json.loads((tmp_path / "runs" / "ddp" / "run.json").read_text())
    assert record["config"]["task_file"] == str((tmp_path / "starter.py").resolve())
    state = torch.load(tmp_path / "runs" / "ddp" / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert len(state["rng_per_rank"]) == 2  # trained on two processes
    done = cli("export", "runs/ddp", "--task", "starter.py", "--out", "runs/ddp/export")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "runs" / "ddp" / "export" / "manifest.json").read_text())
    assert manifest["task"] == "starter" and manifest["serving"]["probabilities"] is True
