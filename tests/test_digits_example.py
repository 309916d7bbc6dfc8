"""docs/examples/digits_task.py, the worked example of a user task: a small CNN on scikit-learn's bundled 8x8
digits, trained with its defaults in bf16 through the CLI (the session's `digits_run`, tests/trained_runs.py),
reaches the test accuracy its docstring promises a floor for; its data info carries the input's shape and the
classes, and the model is built from them. tests/gui/test_preview_drawing.py draws digits for the same run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import core.tasks as registry
from core.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "digits_task.py"
FLOOR = 0.95  # the docstring states it; seeds 0-2 measure 0.978-0.989 in bf16


def test_the_docstring_states_the_floor_tested_here():
    text = EXAMPLE.read_text()
    assert re.search(rf"floor of {FLOOR}\b", text)
    assert "SERVING" in text and "def serving_class" in text


def test_the_model_is_built_from_the_data_info():
    task = registry.create_task(registry.add_task(str(EXAMPLE)).name)
    data = task.load_data("", seed=0)
    assert data.info == {"input_shape": [1, 8, 8], "classes": 10}
    assert [len(s["y"]) for s in (data.train, data.val, data.test)] == [1258, 269, 270]
    assert float(data.train["x"].max()) == 1.0 and data.train["x"].dtype == torch.float32
    assert task.build_model(data.info)(data.val["x"][:3]).shape == (3, 10)
    other = task.build_model({"input_shape": [3, 16, 12], "classes": 5})  # another shape: the model follows
    assert other(torch.zeros(2, 3, 16, 12)).shape == (2, 5)
    assert torch.equal(task.load_data("", seed=7).test["y"], data.test["y"])  # one split for every seed


def test_it_trains_to_the_stated_accuracy_in_bf16(tmp_path, capsys, digits_run):
    run, summary = digits_run.folder, digits_run.summary  # trained once a session (tests/trained_runs.py)
    assert summary["status"] == "completed" and summary["precision"] == "bf16"
    assert summary["test_metrics"]["accuracy"] >= FLOOR, summary["test_metrics"]
    assert summary["best_test_metrics"]["accuracy"] >= FLOOR, summary["best_test_metrics"]
    code = main(["evaluate", str(run), "--last", "--task", str(EXAMPLE), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["metrics"]["accuracy"] == pytest.approx(
        summary["test_metrics"]["accuracy"]
    )

    # served: the Predictor (what predict and the preview use) and an export's serve.py read a digit as its 64
    # pixels, row by row, and answer the ten probabilities the model gives
    from core.runs.predict import load_predictor

    predictor = load_predictor(run, which="last")
    assert predictor.n_features == 64 and predictor.serving.preview.classes == tuple("0123456789")
    test = registry.create_task("digits").load_data("", seed=0).test
    rows = test["x"][:50].reshape(50, 64).numpy()
    p = predictor.predict_rows(rows)
    assert p.shape == (50, 10) and p.sum(1) == pytest.approx([1.0] * 50, abs=1e-5)
    assert (p.argmax(1) == test["y"][:50].numpy()).mean() >= 0.9
    assert predictor.preview_answer(predictor.preview_examples()[0]) == pytest.approx(
        predictor.predict_rows(predictor.example_rows(1))[0].tolist(), abs=1e-6
    )
    export = tmp_path / "export"
    assert main(["export", str(run), "--last", "--task", str(EXAMPLE), "--out", str(export)]) == 0
    import importlib.util

    spec = importlib.util.spec_from_file_location("serve_digits", export / "serve.py")
    serve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve)
    served = serve.load(export)
    assert np.asarray(served.predict(rows[:5].tolist())) == pytest.approx(p[:5], abs=1e-5)
    answer = serve.Rows(served).answer([{f"x{i + 1}": float(v) for i, v in enumerate(rows[0])}])[0]
    assert answer["predicted"] == int(p[0].argmax()) and answer["p3"] == pytest.approx(float(p[0, 3]), abs=1e-5)
