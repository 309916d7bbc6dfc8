"""Dtype inspector: what autocast runs in bfloat16 on the CPU, and what it keeps in float32."""

from __future__ import annotations

import pytest

from core.config import RunConfig
from core.lab.dtype_inspector import LOSS_ROW, inspect_dtypes, summarize
from core.tasks import TASKS


def test_bf16_linear_layers_output_bfloat16_and_the_loss_stays_float32():
    result = inspect_dtypes(RunConfig.for_task("tiny", device="cpu", precision="bf16"))
    assert result.autocast_dtype == "bfloat16" and result.loss_dtype == "float32"
    for name in ("fc1", "fc2"):
        row = result.row(name)
        assert row.type == "Linear"
        assert row.output_dtypes == ["bfloat16"]
        assert row.param_dtypes == ["float32"] and row.grad_dtypes == ["float32"]  # master weights stay fp32
        assert row.output_grad_dtypes == ["bfloat16"]
        assert row.ops["addmm"] == "bfloat16" and row.casts > 0
    loss = result.row(LOSS_ROW)
    assert loss.output_dtypes == ["float32"] and loss.kept_fp32
    assert "_log_softmax" in loss.fp32_ops  # autocast runs the softmax of the loss in float32
    assert result.kept_fp32() == [LOSS_ROW]
    assert summarize(result)["bfloat16"] >= 3


def test_fp32_runs_everything_in_float32_and_flags_nothing():
    result = inspect_dtypes(RunConfig.for_task("tiny", device="cpu", precision="fp32"))
    assert result.autocast_dtype is None
    assert {d for r in result.rows for d in r.output_dtypes} == {"float32"}
    assert result.kept_fp32() == [] and all(not r.fp32_ops and r.casts == 0 for r in result.rows)


@pytest.mark.skipif("recommender" not in TASKS, reason="recommender task not registered")
def test_transformer_task_under_bf16():
    options = {"d_model": 16, "layers": 1, "heads": 2, "max_len": 8, "items": 100, "interactions": 2000}
    result = inspect_dtypes(RunConfig.for_task("recommender", device="cpu", precision="bf16", task_options=options),
                            batch_size=8)
    assert result.row("blocks.0.qkv").output_dtypes == ["bfloat16"]
    assert result.loss_dtype == "float32"
    assert result.row("blocks.0.norm1").param_dtypes == ["float32"]
