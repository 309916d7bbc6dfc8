"""The lab tools on a task whose data is a torch Dataset (tests/fixtures/user_tasks/dataset_task.py, map-style and
iterable): the batch-size finder trains each trial on DataLoader batches of the size tried, the model summary and
the dtype inspector measure the split's first items as the tensor task's first rows, and the precision sweep
counts tokens from the batches its windows trained on. In-process calls on the CPU, small sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import core.tasks as registry
from core.config import RunConfig
from core.lab.batch_finder import FITS, OOM, FakeProbe, find_batch_sizes
from core.lab.dtype_inspector import inspect_dtypes
from core.lab.model_summary import summarize
from core.lab.precision_sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "user_tasks"
DATASET_FILE = FIXTURES / "dataset_task.py"
KINDS = ["RegressionDatasetTask", "RegressionStreamTask"]


def config(reference: str, **values) -> RunConfig:
    """The task `reference` names, loaded, at 512 rows (409 training, 51 validation), without DataLoader workers."""
    name = registry.add_task(reference).name
    return RunConfig.for_task(name, device="cpu", num_workers=0, task_options={"samples": 512}, **values).validate()


def dataset_config(kind: str, **values) -> RunConfig:
    return config(f"{DATASET_FILE}:{kind}", **values)


def tensor_config(**values) -> RunConfig:
    """regression_task.py: the same model and data as tensors."""
    return config(f"{FIXTURES / 'regression_task.py'}:RegressionTask", **values)


@pytest.mark.parametrize("kind", KINDS)
def test_the_batch_finder_trains_each_trial_on_dataloader_batches_of_its_size(kind, monkeypatch):
    cfg = dataset_config(kind)
    task_class = registry.TASKS[cfg.task]
    trained: list[int] = []
    real_loss = task_class.loss

    def loss(self, model, batch):
        if model.training and torch.is_grad_enabled():
            trained.append(batch["x"].shape[0])
        return real_loss(self, model, batch)

    monkeypatch.setattr(task_class, "loss", loss)
    # 100 + 10 B bytes of a 1000-byte device, 10% margin: 80 is the largest batch (as for the tiny task's tensors)
    result = find_batch_sizes(cfg, ["fp32"], probe=FakeProbe(1000, 10, 100), steps=2, eval_rows=32)
    fp32 = result.mode("fp32")
    assert fp32.status == "ok" and fp32.batch == 80, fp32
    assert [(t.batch, t.status) for t in fp32.trials][:4] == [(64, FITS), (128, OOM), (96, OOM), (80, FITS)]
    assert result.max_batch == 409 and result.eval_rows == 32  # the Dataset's rows, the validation split's first
    ran = [t.batch for t in fp32.trials if t.status != OOM]  # an OOM trial fails before its steps
    assert trained == [64] + [batch for batch in ran for _ in range(2)]  # the check's batch, then 2 steps a trial


@pytest.mark.parametrize("kind", KINDS)
def test_the_model_summary_measures_the_datasets_first_items_as_the_tensor_tasks_first_rows(kind):
    got = summarize(dataset_config(kind), modes=["fp32", "bf16"], batch_size=16)
    expected = summarize(tensor_config(), modes=["fp32", "bf16"], batch_size=16)
    assert got.batch_size == 16 and got.parameters == expected.parameters
    for mode in ("fp32", "bf16"):
        assert got.mode(mode).status == "ok" and got.mode(mode).activation_bytes > 0
        assert got.mode(mode).activation_bytes == expected.mode(mode).activation_bytes


@pytest.mark.parametrize("kind", KINDS)
def test_the_dtype_inspector_runs_a_batch_of_the_datasets_first_items(kind):
    got = inspect_dtypes(dataset_config(kind, precision="bf16"), batch_size=8)
    expected = inspect_dtypes(tensor_config(precision="bf16"), batch_size=8)
    assert got.autocast_dtype == "bfloat16" and got.loss_dtype == "float32"
    assert got.row("0").output_dtypes == ["bfloat16"] and got.row("0").input_dtypes == ["float32"]
    assert [(r.name, r.output_dtypes, r.ops) for r in got.rows] == [
        (r.name, r.output_dtypes, r.ops) for r in expected.rows
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_the_precision_sweep_counts_tokens_from_the_batches_it_trained_on(kind, tmp_path):
    path = tmp_path / "token_task.py"  # the fixture with a tokens_key: its 8 features, none 0, are 8 tokens a row
    path.write_text(
        DATASET_FILE.read_text() + f"\n\nclass Tokens({kind}):\n    name = 'tokens_ds'\n    tokens_key = 'x'\n"
    )
    result = run_sweep(config(f"{path}:Tokens"), ["fp32"], steps=2, repeats=2, isolate=False)
    fp32 = result.row("fp32")
    assert fp32.status == "ok", fp32.reason
    assert fp32.samples_per_second > 0 and fp32.tokens_per_second == pytest.approx(8 * fp32.samples_per_second)
    plain = run_sweep(dataset_config(kind), ["fp32"], steps=2, repeats=1, isolate=False).row("fp32")
    assert plain.status == "ok" and plain.tokens_per_second is None  # a task without tokens counts none


@pytest.mark.slow
def test_an_isolated_sweep_mode_loads_the_task_file_in_its_own_process():
    """On the CPU each mode is measured in a process of its own (its peak RSS), which loads the task's file."""
    result = run_sweep(dataset_config("RegressionDatasetTask"), ["fp32"], steps=2, repeats=1)
    fp32 = result.row("fp32")
    assert fp32.status == "ok", fp32.reason
    assert fp32.samples_per_second > 0 and "a fresh process per mode" in result.memory_source
