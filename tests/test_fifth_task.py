"""A fifth task from one module outside the project (tests/fixtures/user_tasks/regression_task.py), whose serving
part is the generic one for models of feature rows (core.tasks.feature_serving): trained, evaluated with its
report, then predict over a file, export as a torch.export program and as ONNX, serve.py (from Python and from
the command line) and the Predictor's preview answers all work for it, each giving the model's own numbers."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from task_registry import restored_task_registry

import core.tasks as registry
from core.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py"
REFERENCE = f"{TASK_FILE}:RegressionTask"
FEATURES = 8  # the task's default `features`


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trained regression run (the registry restored to the built-ins afterwards)."""
    with restored_task_registry():
        root = tmp_path_factory.mktemp("fifth")
        code = main(
            [
                "train",
                "--task",
                REFERENCE,
                "--epochs",
                "1",
                "--max-steps",
                "120",
                "--runs-dir",
                str(root / "runs"),
                "--seed",
                "3",
            ]
        )
        assert code == 0
        (folder,) = (root / "runs").iterdir()
        yield folder


@pytest.fixture(scope="module")
def predictor(run):
    from core.runs.predict import load_predictor

    return load_predictor(run)


def rows(seed: int = 0, n: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, FEATURES)).astype(np.float32)


def test_it_trains_and_evaluates_with_a_report(run, predictor, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(run), "--task", REFERENCE, "--report", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "regression" and "rmse" in json.dumps(report)
    assert predictor.task == "regression" and predictor.n_features == FEATURES
    assert predictor.metrics["rmse"] < 2.0  # predicting 0 gives about sqrt(|w|^2) ~ 2.8


def test_the_predictor_answers_with_the_models_own_numbers(predictor):
    x = rows()
    expected = predictor.model(torch.from_numpy(x)).detach().numpy()
    got = predictor.predict_rows(x)
    assert got.shape == (5, 1) and got == pytest.approx(expected, abs=1e-6)
    assert predictor.predict_rows(x[0].tolist()) == pytest.approx(expected[:1], abs=1e-6)  # one row: a batch of one
    with pytest.raises(Exception, match="takes 8 numbers per row"):
        predictor.predict_rows(np.zeros((2, 3)))
    with pytest.raises(AttributeError):
        predictor.not_an_answer  # noqa: B018 - only the serving part's listed answers are the predictor's


def test_the_preview_shows_a_field_per_number_and_the_value(predictor):
    spec = predictor.serving.preview
    assert (spec.input_kind, spec.output_kind) == ("feature_row", "values")
    examples = predictor.preview_examples()
    data = registry.get_task_class("regression")(predictor.task_object.opts).load_data("", 3)
    assert np.asarray(examples[:3]) == pytest.approx(data.val["x"][:3].numpy())  # the run's validation rows
    answer = predictor.preview_answer(examples[0])
    assert answer == pytest.approx(predictor.predict_rows(examples[0])[0].tolist(), abs=1e-6)


def test_predict_scores_a_file_and_names_its_bad_row(run, predictor, tmp_path, capsys):
    x = rows(1, 3)
    lines = ["x1,x2,x3,x4,x5,x6,x7,x8"] + [",".join(f"{v:.6f}" for v in row) for row in x]
    lines.insert(2, "1,2,three,4,5,6,7,8")
    (tmp_path / "rows.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "scored.csv"
    assert (
        main(["predict", str(run), "--task", REFERENCE, "--input", str(tmp_path / "rows.csv"), "--out", str(out)]) == 0
    )
    err = capsys.readouterr().err
    assert "line 3" in err and "three" in err  # the bad row named; the others scored
    import pyarrow.csv as pacsv

    table = pacsv.read_csv(out).to_pydict()
    assert table["line"] == [2, 4, 5]
    x_rounded = np.asarray([[float(f"{v:.6f}") for v in row] for row in x], np.float32)
    assert table["y"] == pytest.approx(predictor.predict_rows(x_rounded)[:, 0].tolist(), abs=1e-5)


def own_serve(folder: Path):
    spec = importlib.util.spec_from_file_location(f"serve_fifth_{folder.name}", folder / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fmt", ["program", "onnx"])
def test_export_and_serve_py_answer_as_the_model(run, predictor, tmp_path, fmt, capsys, monkeypatch):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    out = tmp_path / fmt
    assert main(["export", str(run), "--task", REFERENCE, "--format", fmt, "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["serving_module"] == "feature_rows.py" and (out / "feature_rows.py").is_file()
    assert manifest["serving"] == {"features": FEATURES, "outputs": ["y"], "probabilities": False}
    x = rows(2, 4)
    expected = predictor.predict_rows(x)[:, 0].tolist()
    served = own_serve(out).load(out)
    assert [answer[0] for answer in served.predict(x.tolist())] == pytest.approx(expected, abs=1e-5)
    # the command line of the export's own serve.py: JSON lines in, an answer line per line
    lines = [json.dumps({f"x{i + 1}": float(v) for i, v in enumerate(row)}) for row in x] + ['{"x1": 1}']
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(("\n".join(lines) + "\n").encode())))
    assert own_serve(out).main(["--export", str(out), "-"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a["y"] for a in answers[:4]] == pytest.approx(expected, abs=1e-5)
    assert answers[4]["line"] == 5 and "x2" in answers[4]["error"]  # a bad line is answered, not fatal


def test_a_safetensors_export_says_what_serves_it(run, tmp_path):
    out = tmp_path / "weights"
    assert main(["export", str(run), "--task", REFERENCE, "--format", "safetensors", "--out", str(out)]) == 0
    with pytest.raises(ValueError, match="--format program or --format onnx"):
        own_serve(out).load(out)


@pytest.mark.parametrize("class_name", ["RegressionDatasetTask", "RegressionStreamTask"])
def test_examples_come_from_a_dataset_split_too(class_name):
    from core.tasks.feature_serving import FeatureServing

    with restored_task_registry():
        cls = registry.add_task(f"{ROOT / 'tests' / 'fixtures' / 'user_tasks' / 'dataset_task.py'}:{class_name}")
        task = cls({o.name: o.default for o in cls.options})

        class Run:  # what example_rows reads of a predictor
            config, n_features = {"seed": 0}, FEATURES

        rows = FeatureServing(task).example_rows(Run, 5)
        val = task.load_data("", 0).val
        first = next(iter(val)) if isinstance(val, torch.utils.data.IterableDataset) else val[0]
        assert rows.shape == (5, FEATURES) and rows[0] == pytest.approx(first["x"].numpy())
