"""Model summary: totals equal sum(p.numel()) exactly, tied weights once, frozen layers, optimizer state as torch
keeps it, activations saved for backward per precision mode, and `amp-console summary`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from core.cli.main import main
from core.config import RunConfig
from core.engine.optimizers import build_optimizer
from core.lab.model_summary import ROOT_NAME, parameter_rows, summarize
from core.tasks import TASKS, create_task

ROOT = Path(__file__).resolve().parent.parent
SMALL = {
    "tiny": {},
    "sentiment": {"dim": 8, "hidden": 8, "buckets": 1024, "max_tokens": 16, "reviews": 400},
    "ranking": {"hidden": 8, "layers": 2, "queries": 40, "docs": 5, "features": 4},
    "recommender": {"d_model": 16, "layers": 1, "heads": 2, "max_len": 8, "items": 100, "interactions": 2000},
}


@pytest.mark.parametrize("task", [t for t in SMALL if t in TASKS])
def test_summary_totals_equal_numel(task):
    config = RunConfig.for_task(task, device="cpu", task_options=SMALL[task])
    result = summarize(config, modes=("fp32",))
    model = create_task(task, SMALL[task]).build_model({})  # sized from the options (recommender: items)
    expected = sum(p.numel() for p in model.parameters())
    assert result.parameters == expected == result.trainable_parameters
    assert sum(r.own.parameters for r in result.rows) == expected
    assert result.row(ROOT_NAME).total.parameters == expected
    assert result.param_bytes == result.grad_bytes == 4 * expected  # float32 weights and gradients
    fp32 = result.mode("fp32")
    assert fp32.status == "ok" and fp32.activation_bytes > 0
    assert fp32.total_bytes == result.param_bytes + result.grad_bytes + result.optimizer_bytes + fp32.activation_bytes
    json.dumps(result.to_dict())  # JSON-ready


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(50, 8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.decoder = nn.Linear(8, 50, bias=False)
        self.decoder.weight = self.encoder.weight  # tied


def test_tied_weights_are_counted_once():
    model = Tied()
    rows = {r.name: r for r in parameter_rows(model)}
    expected = sum(p.numel() for p in model.parameters())
    assert expected == 50 * 8 + 8 * 8 + 8
    assert rows[ROOT_NAME].total.parameters == expected
    assert rows["encoder"].own.parameters == 400
    assert rows["decoder"].own.parameters == 0 and rows["decoder"].shared == ["decoder.weight = encoder.weight"]
    assert rows["body"].total.parameters == 72 and rows["body"].descendants == 2
    assert rows[ROOT_NAME].total.optimizer_bytes == 2 * expected * 4 + 3 * 4  # 3 tensors: 3 step counters


def test_frozen_layer_is_reported_as_not_trainable():
    model = create_task("tiny").build_model({})
    model.fc1.requires_grad_(False)
    rows = {r.name: r for r in parameter_rows(model, "adamw")}
    assert rows["fc1"].trainable == "no" and rows["fc2"].trainable == "yes" and rows[ROOT_NAME].trainable == "partial"
    assert rows["fc1"].own.parameters == 176 and rows["fc1"].own.trainable_parameters == 0
    assert rows["fc1"].own.param_bytes == 176 * 4
    assert rows["fc1"].own.grad_bytes == 0 and rows["fc1"].own.optimizer_bytes == 0
    root = rows[ROOT_NAME].total
    assert root.parameters == 210 and root.trainable_parameters == 34 and root.frozen_parameters == 176
    assert rows["relu"].trainable == "-"


@pytest.mark.parametrize("optimizer, momentum", [("adamw", 0.9), ("adam", 0.9), ("sgd", 0.9), ("sgd", 0.0)])
def test_optimizer_state_bytes_match_what_torch_keeps(optimizer, momentum):
    model = create_task("tiny").build_model({})
    model.fc1.bias.requires_grad_(False)  # frozen parameters get no state
    config = RunConfig.for_task("tiny", device="cpu", optimizer=optimizer, momentum=momentum)
    opt = build_optimizer(model, config, torch.device("cpu"))
    model(torch.randn(4, 10)).sum().backward()
    opt.step()
    kept = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    predicted = sum(r.own.optimizer_bytes for r in parameter_rows(model, optimizer, momentum))
    assert predicted == kept
    if optimizer == "sgd" and not momentum:
        assert predicted == 0


def test_adamw_keeps_twice_the_state_of_sgd_with_momentum():
    base = {"device": "cpu", "momentum": 0.9}
    adamw = summarize(RunConfig.for_task("tiny", optimizer="adamw", **base), modes=("fp32",))
    sgd = summarize(RunConfig.for_task("tiny", optimizer="sgd", **base), modes=("fp32",))
    tensors = 4  # tiny: fc1 and fc2, a weight and a bias each: one step counter per tensor
    assert adamw.optimizer_bytes == 2 * sgd.optimizer_bytes + 4 * tensors
    assert sgd.optimizer_bytes == 4 * sgd.parameters
    assert adamw.mode("fp32").total_bytes - sgd.mode("fp32").total_bytes == adamw.optimizer_bytes - sgd.optimizer_bytes


def test_activation_bytes_are_the_tensors_saved_for_backward():
    result = summarize(RunConfig.for_task("tiny", device="cpu", batch_size=64), modes=("fp32",))
    # fc1 saves its input (the batch: left out) and weight (a parameter: left out); ReLU saves its output,
    # which fc2 saves too (one storage, counted once, at ReLU).
    assert result.row("relu").own.activation_bytes["fp32"] == 64 * 16 * 4
    assert result.row("fc1").own.activation_bytes["fp32"] == 0
    assert result.row("fc2").own.activation_bytes["fp32"] == 0
    rows_sum = sum(r.own.activation_bytes["fp32"] for r in result.rows)
    assert rows_sum == result.mode("fp32").activation_bytes


@pytest.mark.skipif("recommender" not in TASKS, reason="recommender task not registered")
def test_bf16_saves_fewer_activation_bytes_than_fp32_on_the_recommender():
    config = RunConfig.for_task("recommender", device="cpu", task_options=SMALL["recommender"])
    result = summarize(config)  # fp32, bf16, fp16
    fp32, bf16, fp16 = result.mode("fp32"), result.mode("bf16"), result.mode("fp16")
    assert fp32.status == bf16.status == "ok"
    assert bf16.activation_bytes < fp32.activation_bytes
    assert 0 < bf16.activation_ratio < 1 and bf16.total_ratio < 1
    assert bf16.param_bytes == fp32.param_bytes and bf16.grad_bytes == fp32.grad_bytes  # float32 in every mode
    assert fp16.status == "skipped" and "GPU" in fp16.reason  # the CPU runs no fp16 autocast
    assert (
        result.row("blocks.0.qkv").total.activation_bytes["bf16"]
        < result.row("blocks.0.qkv").total.activation_bytes["fp32"]
    )
    assert result.row("blocks").total.activation_bytes["fp32"] > 0
    depth1 = result.rows_to_depth(1)
    assert {r.depth for r in depth1} == {0, 1} and sum(
        r.own.parameters for r in depth1 if r.depth == 1
    ) < result.parameters
    assert (
        sum(r.total.parameters for r in depth1 if r.depth == 1) + result.row(ROOT_NAME).own.parameters
        == result.parameters
    )


def test_cli_json_is_the_last_line(capsys):
    assert main(["summary", "--task", "tiny", "--device", "cpu", "--precisions", "fp32,bf16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["parameters"] == 210 and data["trainable_parameters"] == 210 and data["frozen_parameters"] == 0
    assert [m["mode"] for m in data["modes"]] == ["fp32", "bf16"]
    assert data["rows"][0]["name"] == ROOT_NAME and data["rows"][0]["trainable"] == "yes"


def test_cli_tables_fit_100_columns(capsys):
    assert main(["summary", "--task", "tiny", "--device", "cpu", "--depth", "1", "--optimizer", "sgd"]) == 0
    out = capsys.readouterr().out
    assert "act fp32" in out and "one training step, per precision mode" in out and "fp16 skipped" in out
    assert "SGD" in out and "activations" in out
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--depth", "-1"], "--depth"),
        (["--precisions", "fp32,fp9"], "--precisions"),
        (["--task", "nope"], "unknown task"),
        (["-o", "hidden=0"], "--option hidden"),
        (["--device", "cuda:7"], "cuda:7"),
        (["--batch-size", "0"], "--batch-size"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(capsys, argv, flag):
    assert main(["summary", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and flag in err
