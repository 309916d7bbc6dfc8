"""A task's torchmetrics Metric objects (Task.metric_objects): updated per batch, computed at each evaluation and
reported beside the plain metrics (events, `monitor`, the best checkpoint); under DDP synced across the ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.config import RunConfig
from core.engine import checkpoints as ckpt
from core.engine.events import EvalMetrics
from core.engine.trainer import train
from core.tasks import add_task

pytest.importorskip("torchmetrics")
roc_auc_score = pytest.importorskip("sklearn.metrics").roc_auc_score

ROOT = Path(__file__).resolve().parents[1]
FILE = Path(__file__).parent / "fixtures" / "user_tasks" / "metric_objects_task.py"
OPTIONS = {"samples": 2048, "label_noise": 0.2}


def plain_auroc(checkpoint) -> float:
    """sklearn's AUROC of the checkpoint's weights on the validation split, in one process."""
    from tests.fixtures.user_tasks.metric_objects_task import MetricObjectsTask

    add_task(f"{FILE}:MetricObjectsTask")
    task = MetricObjectsTask(OPTIONS)
    data, model = task.load_data("", 0), task.build_model({})
    model.load_state_dict(ckpt.load_checkpoint(checkpoint)["model"])
    with torch.no_grad():
        p = model.eval()(data.val["x"]).float().softmax(dim=1)[:, 1]
    return float(roc_auc_score(data.val["y"].numpy(), p.numpy()))


def test_a_metric_object_is_reported_monitored_and_equals_sklearn(tmp_path):
    add_task(f"{FILE}:MetricObjectsTask")
    cfg = RunConfig.for_task(
        "metric_objects", device="cpu", max_steps=20, batch_size=32, eval_interval=5, monitor="auroc",
        keep_best=1, task_options=OPTIONS, out_dir=str(tmp_path / "run"),
    )  # fmt: skip
    seen: list = []
    result = train(cfg, sink=seen.append)
    assert result.status == "completed", result.message
    evals = [e.metrics for e in seen if isinstance(e, EvalMetrics) and e.split == "val"]
    assert len(evals) >= 4 and all(set(m) == {"loss", "auroc"} for m in evals)
    assert abs(evals[-1]["auroc"] - plain_auroc(result.checkpoint)) < 1e-6
    # monitor="auroc" (mode auto: max) chose best.pt by it
    assert abs(plain_auroc(Path(result.checkpoint).with_name("best.pt")) - max(m["auroc"] for m in evals)) < 1e-6


@pytest.mark.slow
def test_two_ranks_sync_the_metric_to_the_one_process_value(tmp_path):
    """--nproc 2 (gloo): each rank updates on its half of the split; torchmetrics gathers both before computing."""
    run = tmp_path / "ddp"
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "train", "--task", f"{FILE}:MetricObjectsTask", "--nproc", "2",
         "--device", "cpu", "--max-steps", "20", "--batch-size", "32",
         "-o", "samples=2048", "-o", "label_noise=0.2", "--out", str(run), "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed"
    assert abs(summary["metrics"]["auroc"] - plain_auroc(run / "checkpoint.pt")) < 1e-6
