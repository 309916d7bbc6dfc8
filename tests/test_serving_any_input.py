"""Serving from a task's declared inputs (core.tasks.serving.Input): a character-level GPT-like model reading token
ids of any length padded with 0, and a model of two named inputs (a row of numbers and a whole-number group), both
task files with no serving code. Each is exported as a program and as ONNX from sample inputs of its own validation
data, served by the export's serve.py, and scored by `amp-console predict` over JSON lines, CSV and Parquet files
with a column per input; a task that declares nothing, or declares what its model cannot read, gets one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from cli_in_process import cli
from task_registry import restored_task_registry

from core.runs.export import export_model, load_trained
from core.runs.predict import load_predictor
from core.tasks import add_task

ROOT = Path(__file__).resolve().parents[1]
FILES = ROOT / "tests" / "fixtures" / "user_tasks"
TASKS = {
    "char_lm": f"{FILES / 'char_lm_task.py'}:CharLMTask",
    "two_input": f"{FILES / 'two_input_task.py'}:TwoInputTask",
}
# Rows of each task as a file holds them: a list per input (a token sequence of any length), or a number
ROWS = {
    "char_lm": [{"ids": [5, 9, 2]}, {"ids": [1, 2, 3, 4, 5, 6, 7]}, {"ids": [3]}],
    "two_input": [{"x": [0.5, -1.0, 2.0, 0.0], "group": 1}, {"x": [0.0, 0.0, 0.0, 1.0], "group": 4}],
}


def train(folder: Path, reference: str) -> Path:
    from core.cli.main import main

    assert main(["train", "--task", reference, "--max-steps", "20", "--out", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("any-input")
    with restored_task_registry():  # each test loads the task files it uses
        return {task: train(root / task, reference) for task, reference in TASKS.items()}


@pytest.fixture
def runs(trained):
    """The trained runs, their task files loaded for this test alone (restored_tasks)."""
    for reference in TASKS.values():
        add_task(reference)
    return trained


def expected(run: Path, task: str) -> np.ndarray:
    """The Predictor's answers to ROWS (padded as serving pads them), checked against the model by hand."""
    predictor = load_predictor(run)
    rows = ROWS[task]
    got = predictor.predict_inputs({name: [row[name] for row in rows] for name in rows[0]})
    with torch.no_grad():
        if task == "char_lm":
            first = torch.tensor([rows[0]["ids"]])
            assert np.allclose(got[0, :3], predictor.model(first)[0].numpy(), atol=1e-5)  # padding comes after
            assert got.shape == (3, 7, predictor.model.head.out_features)
        else:
            x = torch.tensor([r["x"] for r in rows])
            assert np.allclose(got, predictor.model(x, torch.tensor([r["group"] for r in rows])).numpy(), atol=1e-6)
    return got


def answers(rows: list[dict]) -> np.ndarray:
    return np.array([row["y"] for row in rows], dtype=np.float32).reshape(len(rows), *np.shape(rows[0]["y"]))


def test_sample_inputs_are_the_runs_validation_rows(runs):
    loaded = load_trained(runs["char_lm"] / "best.pt")
    data = loaded.task.load_data("", 0)
    (sample,) = loaded.serving.sample_inputs(loaded.model, 8, 0)
    assert torch.equal(sample, data.val["ids"][:8])
    loaded = load_trained(runs["two_input"] / "best.pt")
    x, group = loaded.serving.sample_inputs(loaded.model, 8, 0)
    assert group.dtype == torch.int64 and torch.equal(x, loaded.task.load_data("", 0).val["x"][:8])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("fmt", ["program", "onnx"])
@pytest.mark.parametrize("task", list(TASKS))
def test_an_export_of_declared_inputs_serves_a_line_as_the_model_answers(runs, tmp_path, task, fmt):
    pytest.importorskip("onnxruntime")
    result = export_model(runs[task], tmp_path / "export", fmt)
    folder = result.folder
    manifest = json.loads((folder / "manifest.json").read_text())
    if task == "char_lm":
        assert manifest["inputs"] == [{"name": "ids", "shape": ["batch", "seq"], "dtype": "int64", "pad": 0}]
    else:
        assert [i["name"] for i in manifest["inputs"]] == ["x", "group"]
    assert sorted(p.name for p in folder.glob("*.py")) == [
        "feature_rows.py",
        "serve.py",
        "serve_http.py",
        "serve_lines.py",
        "serve_program.py",
    ]
    lines = "".join(json.dumps(row) + "\n" for row in ROWS[task]) + json.dumps(ROWS[task]) + "\n"
    done = subprocess.run(
        [sys.executable, "-I", str(folder / "serve.py"), "-"],
        input=lines,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    want = expected(runs[task], task)
    singles, batch = replies[:-1], replies[-1]
    if task == "char_lm":  # answered one line at a time: each as long as its own sequence
        for reply, row, full in zip(singles, ROWS[task], want):
            assert np.allclose(np.array(reply["y"]), full[: len(row["ids"])], atol=1e-4)
    else:
        assert np.allclose(answers(singles).reshape(want.shape), want, atol=1e-4)
    assert np.allclose(answers(batch).reshape(want.shape), want, atol=1e-4)  # a batch of one line: padded together


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
@pytest.mark.parametrize("task", list(TASKS))
def test_predict_scores_a_file_with_a_column_per_input(runs, tmp_path, capsys, task, suffix):
    rows = ROWS[task]
    source = tmp_path / f"rows{suffix}"
    if suffix == ".jsonl":
        source.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"nothing": 1}\n')
    elif suffix == ".csv":  # a list as its JSON, or numbers apart
        columns = list(rows[0])
        body = [",".join(f'"{json.dumps(r[c])}"' for c in columns) for r in rows]
        source.write_text("\n".join([",".join(columns), *body, ",".join(["1 x"] * len(columns))]) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(rows), source)
    out = tmp_path / "scored.parquet"
    code, _out, err = cli(capsys, "predict", runs[task], "--task", TASKS[task], "--input", source, "--out", out)
    assert code == 0, err
    table = pq.read_table(out).to_pylist()
    got = [json.loads(r["y"]) if isinstance(r["y"], str) else r["y"] for r in table]
    want = expected(runs[task], task)
    assert len(got) == len(rows)
    for value, row, full in zip(got, rows, want):  # each batch padded to its longest row: compare the rows' own part
        value, full = np.asarray(value, dtype=np.float32).reshape(-1, *full.shape[1:]), full[: len(row.get("ids", [0]))]
        assert np.allclose(value[: len(full)], full, atol=1e-4)
    if suffix != ".parquet":
        assert f"line {len(rows) + (1 if suffix == '.csv' else 0) + 1}: " in err  # the bad row, by its line


def changed_run(tmp_path: Path, old: str, new: str) -> tuple[Path, str]:
    """A run of the char_lm task file with `old` changed to `new` (under another name), and its reference."""
    path = tmp_path / "changed_task.py"
    text = (FILES / "char_lm_task.py").read_text()
    assert old in text
    path.write_text(text.replace(old, new).replace('name = "char_lm"', 'name = "char_lm_changed"'))
    reference = f"{path}:CharLMTask"
    return train(tmp_path / "run", reference), reference


def test_a_task_without_inputs_is_told_in_one_line_what_to_add_and_exports_its_weights(tmp_path, capsys):
    from safetensors.torch import load_file

    from core.engine.checkpoints import load_checkpoint, rebuild_model

    run, reference = changed_run(tmp_path, '    inputs = (Input("ids", "int64", ("seq",), pad=0),)\n', "")
    (tmp_path / "x.csv").write_text("ids\n1\n")
    for command in ("export", "predict"):
        where = ["--input", tmp_path / "x.csv"] if command == "predict" else []
        code, _out, err = cli(capsys, command, run, "--task", reference, *where, "--out", tmp_path / f"{command}.csv")
        assert code == 2 and "Traceback" not in err and err.count("error:") == 1, err
        last = err.strip().splitlines()[-1]
        assert "has no serving part: declare what its model reads" in last and "Input('ids'" in last
        assert ("--format safetensors exports its weights alone" in last) == (command == "export")
    # The weights alone: export_checkpoint's files, no serve.py, loadable into the task's model
    out = tmp_path / "weights"
    code, printed, err = cli(capsys, "export", run, "--task", reference, "--format", "safetensors", "--out", out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "model.pt", "model.safetensors"]
    assert "weights only (no serve.py): verified tensor by tensor" in printed
    state = load_checkpoint(run / "checkpoint.pt")
    _task, model = rebuild_model(state, run / "checkpoint.pt")
    weights = load_file(str(out / "model.safetensors"))
    assert weights.keys() == model.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    code, _out, err = cli(
        capsys,
        "export",
        run,
        "--task",
        reference,
        "--format",
        "safetensors",
        "--dtype",
        "bf16",
        "--out",
        tmp_path / "w16",
    )
    assert code == 2 and "exports its weights as trained (fp32)" in err and not (tmp_path / "w16").exists()


@pytest.mark.parametrize(
    "old, new, error",
    [
        ('Input("ids", "int64"', 'Input("ids", "float32"', "fails on sample inputs (ids (32, 16) torch.float32)"),
        ('Input("ids",', 'Input("tokens",', "validation data has no 'tokens' batch key"),
    ],
)
def test_inputs_the_model_cannot_read_are_one_line_not_a_traceback(tmp_path, capsys, old, new, error):
    run, reference = changed_run(tmp_path, old, new)
    code, _out, err = cli(capsys, "export", run, "--task", reference, "--out", tmp_path / "out")
    assert code == 2 and "Traceback" not in err and err.count("error:") == 1, err
    assert error in err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_a_row_the_model_fails_on_is_one_line_and_the_others_are_scored(runs, tmp_path, capsys):
    source, out = tmp_path / "rows.jsonl", tmp_path / "o.parquet"
    source.write_text('{"ids": [1, 2]}\n{"ids": [1, 100000]}\n{"ids": [3]}\n')
    argv = ("predict", runs["char_lm"], "--task", TASKS["char_lm"], "--input", source, "--out", out)
    code, _out, err = cli(capsys, *argv)
    assert code == 0 and "Traceback" not in err, err
    assert "line 2: the char_lm model fails on ids (1, 2) int64: IndexError" in err
    assert [row["line"] for row in pq.read_table(out).to_pylist()] == [1, 3]  # the good rows, in order
    # Every row of the first batch: the model's trouble, not a row's: one line, nothing written.
    source.write_text('{"ids": [100000]}\n{"ids": [200000]}\n')
    out.unlink()
    code, _out, err = cli(capsys, *argv)
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert "the char_lm model fails on ids (1, 1) int64: IndexError" in err.strip().splitlines()[-1]


def test_an_input_checks_each_row_and_pads_a_batch():
    from core.tasks.serving import Input

    ids = Input("ids", "int64", ("seq",), pad=0)
    batch = ids.batch([ids.row(v) for v in ([5, 9, 2], "[4]", "7 8")])
    assert batch.dtype == np.int64 and batch.tolist() == [[5, 9, 2], [4, 0, 0], [7, 8, 0]]
    for bad, why in (
        [[1, 2.5], "not whole numbers"],
        [[[1]], r"has shape \(1, 1\)"],
        [None, "is empty"],
        ["a b", "not a"],
    ):
        with pytest.raises(ValueError, match=why):
            ids.row(bad)
    x = Input("x", "float32", (2,))
    with pytest.raises(ValueError, match="not finite float32"):
        x.row([1.0, 1e39])
    with pytest.raises(ValueError, match="rows of different lengths, and its Input declares no pad"):
        Input("v", "float32", ("n",)).batch([np.zeros(2), np.zeros(3)])
    for declared in (("ids", "int32"), ("my ids", "int64"), ("ids", "int64", (0,))):
        with pytest.raises(ValueError, match="Input"):
            Input(*declared)


def test_weights_that_come_back_with_a_nan_are_refused_whatever_their_order(tmp_path, capsys, monkeypatch):
    import safetensors.torch

    from core.engine.checkpoints import load_checkpoint, rebuild_model

    run, reference = changed_run(tmp_path, '    inputs = (Input("ids", "int64", ("seq",), pad=0),)\n', "")
    _task, model = rebuild_model(load_checkpoint(run / "checkpoint.pt"), run / "checkpoint.pt")
    first, *later = model.state_dict()  # the order the export compares in
    assert later
    real = safetensors.torch.load_file

    def nans_after_the_first_tensor(path, *args, **kwargs):
        weights = real(path, *args, **kwargs)
        for name in later:  # the first matches exactly: max() alone would keep its 0.0
            weights[name] = torch.full_like(weights[name], float("nan"))
        return weights

    monkeypatch.setattr(safetensors.torch, "load_file", nans_after_the_first_tensor)
    out = tmp_path / "weights"
    code, _out, err = cli(capsys, "export", run, "--task", reference, "--format", "safetensors", "--out", out)
    assert code != 0 and "the written weights differ from the checkpoint's by nan" in err, err
    assert not out.exists()
