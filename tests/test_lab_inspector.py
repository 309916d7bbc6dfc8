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
    result = inspect_dtypes(
        RunConfig.for_task("recommender", device="cpu", precision="bf16", task_options=options), batch_size=8
    )
    assert result.row("blocks.0.qkv").output_dtypes == ["bfloat16"]
    assert result.loss_dtype == "float32"
    assert result.row("blocks.0.norm1").param_dtypes == ["float32"]


@pytest.mark.parametrize(
    "op, device, rule",
    [
        ("addmm", "cuda", "lower"),
        ("linear", "cpu", "lower"),
        ("mm", "cpu", "lower"),
        ("_softmax", "cuda", "fp32"),
        ("_log_softmax", "cuda", "fp32"),
        ("native_layer_norm", "cuda", "fp32"),
        ("nll_loss_forward", "cpu", "fp32"),
        ("cat", "cpu", "promote"),
        ("addcmul", "cuda", "promote"),
        # On the CPU softmax and layer norm have no autocast rule: they run in their input's dtype.
        ("_softmax", "cpu", "none"),
        ("native_layer_norm", "cpu", "none"),
        ("embedding", "cuda", "no lower-precision path"),
        ("native_dropout", "cpu", "no lower-precision path"),
        ("relu", "cuda", "none"),
    ],
)
def test_autocast_rule_per_pytorchs_op_reference(op, device, rule):
    from core.lab.dtype_inspector import autocast_rule

    assert autocast_rule(op, device) == rule


def test_why_float32_explains_inputs_and_factories():
    from core.lab.dtype_inspector import WHY_TEXT, why_float32

    assert why_float32("native_layer_norm", "cpu", ["float32"]) == "input float32"
    assert why_float32("add", "cpu", ["float32", "bfloat16"]) == "mixed inputs"
    assert why_float32("zeros", "cpu", []) == "new tensor"
    assert why_float32("_log_softmax", "cpu", ["float32"], input_was_cast=True) == "cast to float32"
    assert why_float32("_log_softmax", "cuda", ["float32"]) == "fp32 list"
    assert why_float32("bmm", "cpu", ["float32"]) == "inside a float32 op"
    assert set(WHY_TEXT) >= {"fp32 list", "promote", "no lower-precision path", "input float32"}


def test_inspection_says_why_each_module_ran_in_float32():
    options = {"d_model": 16, "layers": 1, "heads": 2, "max_len": 8, "items": 100, "interactions": 2000}
    result = inspect_dtypes(
        RunConfig.for_task("recommender", device="cpu", precision="bf16", task_options=options), batch_size=8
    )
    assert result.row("items").why == {"embedding": "no lower-precision path"}
    assert result.row("blocks.0.norm1").why == {"native_layer_norm": "input float32"}  # the float32 residual
    assert set(result.row("drop").why.values()) == {"no lower-precision path"}
    assert "blocks.0.qkv" not in [r.name for r in result.rows if r.why]
    assert "input float32" in result.reasons() and "Embedding" in result.reasons()["no lower-precision path"]
    tiny = inspect_dtypes(RunConfig.for_task("tiny", device="cpu", precision="bf16"))
    # cross_entropy is on the CPU float32 list: it casts the logits up, then its parts run in float32
    assert tiny.row(LOSS_ROW).why == {"_log_softmax": "cast to float32", "nll_loss_forward": "fp32 list"}
