"""Issue 45's four models written by others, brought as task files (docs/examples): a timm ResNet-18, a Hugging Face
GPT-2 from a small GPT2Config, an MLP with BatchNorm and Dropout, a two-tower recommender with custom model methods
and in-batch negatives. Each has its own optimizer (configure_optimizers) and torchmetrics metrics; each trains
through the CLI, resumes bit for bit, exports (program and ONNX), and predicts over a file as its export's serve.py
answers; each also trains under `--nproc 2`. Tiny sizes: a few steps each. timm runs in `make test-timm`'s venv."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pytest
import torch
from cli_in_process import cli

import core.tasks as registry
from core.errors import TaskOutputError
from core.runs.export import load_trained
from core.tasks.task_checks import check_primary

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
# task -> (file, its tiny options, the packages it needs)
MODELS = {
    "bn_mlp": ("bn_mlp_task.py", ["-o", "hidden=16"], ["sklearn", "torchmetrics"]),
    "two_tower": ("two_tower_task.py", ["-o", "dim=8", "-o", "users=100", "-o", "items=50"], ["torchmetrics"]),
    "hf_gpt2": ("hf_gpt2_task.py", ["-o", "width=16", "-o", "samples=128", "-o", "seq=12"], ["transformers"]),
    "timm_resnet": ("timm_resnet_task.py", ["-o", "width=4"], ["timm", "sklearn", "torchmetrics"]),
}
# a recorded LightningModule doing the same is 55-97 lines (issue 45): no task file is longer
LIGHTNING_LINES = 97


def needs(task: str) -> Path:
    """The task's file; the test is skipped, with the one-line reason, where a package it needs cannot be imported
    (timm imports torchvision, whose PyPI wheel needs torch's CUDA build: `make test-timm` runs these tests in a
    venv of their own, with AMP_TEST_NO_SKIP=1 so that a missing package fails there)."""
    for module in MODELS[task][2]:
        try:
            importlib.import_module(module)
        except Exception as exc:
            reason = f"{module} cannot be imported here: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            if os.environ.get("AMP_TEST_NO_SKIP") == "1":
                pytest.fail(reason)
            pytest.skip(reason)
    return EXAMPLES / MODELS[task][0]


def train(capsys, path: Path, task: str, *flags) -> dict:
    code, out, err = cli(capsys, "train", "--task", path, *MODELS[task][1], "--log-interval", "1", *flags, "--json")
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


def losses(run: Path) -> list[float]:
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in events if e["event"] == "StepMetrics"]


def val_rows(run: Path, rows: int) -> list[dict]:
    """The first `rows` validation rows of the run's task as a file holds them: {input name: a list or a number}."""
    task = load_trained(run / "best.pt").task  # with the run's options
    val = task.load_data("", 0).val
    return [{s.name: val[s.name][i].tolist() for s in task.inputs} for i in range(rows)]


@pytest.mark.parametrize("task", list(MODELS))
def test_each_file_is_as_short_as_its_lightning_module_with_its_own_optimizer_and_metric_objects(task):
    text = (EXAMPLES / MODELS[task][0]).read_text()
    assert len(text.splitlines()) <= LIGHTNING_LINES
    assert "def configure_optimizers(self, model" in text and "def metric_objects(self)" in text


def test_primary_metric_may_name_a_metric_object(monkeypatch):
    needs("bn_mlp")
    task = registry.create_task(registry.add_task(str(EXAMPLES / "bn_mlp_task.py")).name)
    assert task.primary_metric == "auroc" and "auroc" in task.metric_objects()
    check_primary(task, {"loss": 0.5}, "metrics")  # auroc is an object's, not metrics()'
    monkeypatch.setattr(type(task), "primary_metric", "nothing")
    with pytest.raises(TaskOutputError, match="without the task's primary_metric 'nothing'"):
        check_primary(task, {"loss": 0.5}, "metrics")


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("task", list(MODELS))
def test_it_trains_resumes_exactly_exports_and_predicts(task, tmp_path, capsys):
    path = needs(task)
    straight = train(capsys, path, task, "--max-steps", "6", "--eval-interval", "3", "--out", tmp_path / "a")
    assert straight["status"] == "completed" and straight["steps"] == 6
    started = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[0])
    assert any(n.startswith("the task chooses its optimizer") for n in started["notes"])
    metric = registry.create_task(task).primary_metric
    assert metric in straight["metrics"] and metric in registry.create_task(task).metric_objects()

    part = train(capsys, path, task, "--max-steps", "3", "--eval-interval", "3", "--out", tmp_path / "b")
    assert part["steps"] == 3
    code, out, err = cli(
        capsys, "train", "--resume", tmp_path / "b" / "checkpoint.pt", "--task", path, "--max-steps", 6
    )
    assert code == 0, err
    assert losses(tmp_path / "b") == losses(tmp_path / "a")  # bit for bit
    a, b = (torch.load(tmp_path / r / "checkpoint.pt", weights_only=True)["model"] for r in "ab")
    assert all(torch.equal(a[k], b[k]) for k in a)

    run = tmp_path / "a"
    rows = val_rows(run, 3)
    for fmt in ("program", "onnx"):
        code, _out, err = cli(capsys, "export", run, "--task", path, "--format", fmt, "--out", tmp_path / fmt)
        assert code == 0, err
        check = json.loads((tmp_path / fmt / "manifest.json").read_text())["verification"]
        assert check["max_abs_diff"] <= check["tolerance"]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, _out, err = cli(capsys, "predict", run, "--task", path, "--input", source, "--out", tmp_path / "scored.csv")
    assert code == 0, err
    scored = pacsv.read_csv(tmp_path / "scored.csv").to_pydict()
    assert scored["line"] == [1, 2, 3]
    served = serve_module(tmp_path / "program").load(tmp_path / "program")  # the export, with no task file
    want = np.asarray(served.predict(rows), dtype=np.float32)
    outputs = [scored[k] for k in scored if k not in ("line", "predicted")]  # y, y1..yO, p0..pC-1 or y as JSON
    if isinstance(outputs[0][0], str):
        got = np.asarray([json.loads(v) for v in outputs[0]], dtype=np.float32)
    else:
        got = np.asarray(outputs, dtype=np.float32).T
    assert np.allclose(got.reshape(want.shape), want, atol=1e-4)


def serve_module(folder: Path):
    """An export's own serve.py, imported from its folder."""
    spec = importlib.util.spec_from_file_location(f"serve_four_{folder.parent.name}", folder / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "task, more",
    [("two_tower", ["--monitor", "mrr"]), ("bn_mlp", []), ("hf_gpt2", []), ("timm_resnet", [])],
    ids=["two_tower", "bn_mlp", "hf_gpt2", "timm_resnet"],
)
def test_it_trains_on_two_processes(task, more, tmp_path):
    """`python -m core.cli train --nproc 2`: the two-tower's loss calls the model's own methods under DDP, and
    train's --monitor reaches the ranks (not taken for torchrun's --monitor-interval); the MLP's BatchNorm buffers
    are DDP's to broadcast; GPT-2 and the timm ResNet train from the same files."""
    path = needs(task)
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "train", "--task", str(path), *MODELS[task][1], "--nproc", "2"]
        + ["--device", "cpu", "--max-steps", "4", *more, "--out", str(tmp_path / "ddp"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["steps"] == 4
    state = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)
    assert len(state["rng_per_rank"]) == 2
    metric = more[1] if more else registry.create_task(registry.add_task(str(path)).name).primary_metric
    assert metric in summary["metrics"]
    if more:
        assert json.loads((tmp_path / "ddp" / "run.json").read_text())["config"]["monitor"] == metric
