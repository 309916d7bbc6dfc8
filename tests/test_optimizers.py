"""Optimizers: weight decay reaches weight matrices only (biases, norms and embeddings are not decayed)."""

from __future__ import annotations

import pytest
import torch

from core.config import FIELD_SPECS, RunConfig
from core.engine.optimizers import build_optimizer, parameter_groups
from core.tasks import create_task


def decay_split(model: torch.nn.Module) -> tuple[set[str], set[str]]:
    """(decayed, not decayed) parameter names of the optimizer's groups."""
    names = {id(p): n for n, p in model.named_parameters()}
    optimizer = build_optimizer(model, RunConfig.for_task("tiny", weight_decay=0.1), torch.device("cpu"))
    split = {0.1: set(), 0.0: set()}
    for group in optimizer.param_groups:
        split[group["weight_decay"]] |= {names[id(p)] for p in group["params"]}
    assert split[0.1].isdisjoint(split[0.0]) and split[0.1] | split[0.0] == set(names.values())  # each once, all
    return split[0.1], split[0.0]


def test_recommender_decays_linear_weights_but_not_embeddings_norms_or_biases():
    model = create_task("recommender", {"layers": 2}).build_model({"n_items": 50})
    decayed, plain = decay_split(model)
    assert decayed == {f"blocks.{i}.{name}.weight" for i in range(2) for name in ("qkv", "proj", "ffn.0", "ffn.2")}
    assert {
        "items.weight",
        "positions.weight",
        "norm.weight",
        "norm.bias",
        "blocks.0.norm1.weight",
        "blocks.0.qkv.bias",
        "blocks.1.ffn.2.bias",
    } <= plain


def test_sentiment_does_not_decay_its_embedding_bag():
    model = create_task("sentiment", {"buckets": 256, "hidden": 8}).build_model({})
    decayed, plain = decay_split(model)
    assert decayed == {"head.1.weight", "head.4.weight"}
    assert plain == {"bag.weight", "head.1.bias", "head.4.bias"}


def test_a_tied_parameter_is_grouped_once():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.out = torch.nn.Linear(4, 10, bias=False)
            self.out.weight = self.embed.weight  # tied: an embedding table, not decayed

    groups = parameter_groups(Tied(), 0.1)
    assert [(len(g["params"]), g["weight_decay"]) for g in groups] == [(1, 0.0)]


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_a_step_without_gradient_shrinks_only_the_weight_matrices(optimizer):
    torch.manual_seed(0)
    model = create_task("recommender", {"layers": 1, "d_model": 8, "heads": 1}).build_model({"n_items": 20})
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(
        model,
        RunConfig.for_task("tiny", optimizer=optimizer, lr=0.1, weight_decay=0.5, momentum=0.0),
        torch.device("cpu"),
    )
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = dict(model.named_parameters())
    shrunk = {n for n in before if not torch.equal(before[n], after[n])}
    assert shrunk == {"blocks.0.qkv.weight", "blocks.0.proj.weight", "blocks.0.ffn.0.weight", "blocks.0.ffn.2.weight"}
    assert torch.allclose(after["blocks.0.qkv.weight"], before["blocks.0.qkv.weight"] * (1 - 0.1 * 0.5))


def test_the_form_says_what_weight_decay_applies_to():
    assert "weight matrices only" in FIELD_SPECS["weight_decay"].help
    assert "biases, norms and embeddings are not decayed" in FIELD_SPECS["weight_decay"].help


def test_state_misfit_names_the_parameter_and_what_is_missing_or_misshapen():
    from core.engine.optimizers import state_misfit

    model = create_task("tiny").build_model({})
    names = {id(p): n for n, p in model.named_parameters()}
    optimizer = build_optimizer(model, RunConfig.for_task("tiny", optimizer="adamw"), torch.device("cpu"))
    sizes = [len(g["params"]) for g in optimizer.param_groups]
    groups = [{"params": list(range(sum(sizes[:i]), sum(sizes[: i + 1])))} for i in range(len(sizes))]
    first = optimizer.param_groups[0]["params"][0]
    entry = {"step": torch.tensor(3.0), "exp_avg": torch.zeros_like(first), "exp_avg_sq": torch.zeros_like(first)}
    assert state_misfit({"state": {0: entry}, "param_groups": groups}, optimizer, "adamw", names) is None
    lacking = {k: v for k, v in entry.items() if k != "exp_avg_sq"}
    assert (
        state_misfit({"state": {0: lacking}, "param_groups": groups}, optimizer, "adamw", names)
        == f"the state of {names[id(first)]} lacks 'exp_avg_sq', which adamw needs"
    )
    misshapen = {**entry, "exp_avg": torch.zeros(3)}
    assert (
        state_misfit({"state": {0: misshapen}, "param_groups": groups}, optimizer, "adamw", names)
        == f"the state of {names[id(first)]}: exp_avg has shape (3,), the parameter {tuple(first.shape)}"
    )


def test_a_fresh_optimizer_state_continues_at_the_schedules_learning_rate(tmp_path):
    """sgd -> adamw starts the optimizer state fresh, but the cosine schedule goes on from the saved step."""
    from core.engine.trainer import Trainer, train

    common = {"device": "cpu", "out_dir": str(tmp_path / "run"), "schedule": "cosine", "warmup_steps": 2, "lr": 0.1}
    part = train(RunConfig.for_task("tiny", optimizer="sgd", max_steps=6, **common))
    trainer = Trainer(
        RunConfig.for_task("tiny", optimizer="adamw", max_steps=12, **common), resume_from=part.checkpoint
    )
    trainer.setup()
    try:
        assert any(n.startswith("optimizer changed from sgd to adamw: its state starts fresh") for n in trainer.notes)
        assert trainer.scheduler.last_epoch == 6 and not trainer.optimizer.state
        lrs = [group["lr"] for group in trainer.optimizer.param_groups]
        assert lrs == trainer.scheduler.get_last_lr() and lrs[0] < 0.1 * 0.99  # decaying, not restarted warm-up
    finally:
        trainer.cleanup()


def test_a_resume_with_another_schedule_or_more_steps_follows_this_runs_schedule(tmp_path):
    """Schedules are functions of the step: a resume into another schedule, or one that extends max_steps (a
    one-cycle run used to fail past its old end), follows this run's schedule from the checkpoint's step."""
    from core.engine.events import RunStarted
    from core.engine.trainer import train

    common = {"device": "cpu", "out_dir": str(tmp_path / "run"), "warmup_steps": 1, "threads": 1}
    part = train(RunConfig.for_task("tiny", schedule="onecycle", max_steps=3, **common))
    events = []
    ended = train(
        RunConfig.for_task("tiny", schedule="onecycle", max_steps=6, **common),
        sink=events.append,
        resume_from=part.checkpoint,
    )
    assert ended.status == "completed" and ended.step == 6, ended.message
    events = []
    ended = train(
        RunConfig.for_task("tiny", schedule="cosine", max_steps=9, **common),
        sink=events.append,
        resume_from=ended.checkpoint,
    )
    assert ended.status == "completed" and ended.step == 9, ended.message
    (started,) = [e for e in events if isinstance(e, RunStarted)]
    assert (
        "schedule changed from onecycle to cosine: the learning rate follows the cosine schedule from step 6"
        in started.notes
    )


def test_without_weight_decay_one_group_holds_every_parameter_in_model_order():
    model = create_task("recommender", {"layers": 1, "d_model": 8, "heads": 1}).build_model({"n_items": 20})
    (group,) = parameter_groups(model, 0.0)  # one pass of the optimizer per step, not two
    assert group["params"] == list(model.parameters()) and group["weight_decay"] == 0.0
    assert len(parameter_groups(model, 0.1)) == 2


@pytest.mark.parametrize("saved_decay,decay", [(0.1, 0.0), (0.0, 0.1)])
def test_optimizer_state_follows_each_parameter_across_one_and_two_groups(tmp_path, saved_decay, decay):
    """A checkpoint with decay and no-decay groups resumes into one group (no weight decay now) and the other
    way: every parameter keeps its own moments, nothing starts fresh."""
    from core.engine.checkpoints import load_checkpoint
    from core.engine.trainer import Trainer, train

    common = {"device": "cpu", "out_dir": str(tmp_path / "run"), "threads": 1, "optimizer": "adamw"}
    task = {"layers": 1, "d_model": 8, "heads": 1, "items": 40, "interactions": 2000, "max_len": 8}
    part = train(RunConfig.for_task("recommender", task_options=task, max_steps=3, weight_decay=saved_decay, **common))
    saved = load_checkpoint(part.checkpoint)
    trainer = Trainer(
        RunConfig.for_task("recommender", task_options=task, max_steps=6, weight_decay=decay, **common),
        resume_from=part.checkpoint,
    )
    trainer.setup()
    try:
        assert not any("parameter groups changed" in note for note in trainer.notes), trainer.notes
        assert len(trainer.optimizer.param_groups) == (1 if decay == 0 else 2)
        assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == ([0.0] if decay == 0 else [0.1, 0.0])
        saved_groups = saved["optimizer"]["param_groups"]
        assert len(saved_groups) == (2 if saved_decay else 1)
        names = {id(p): n for n, p in trainer.raw_model.named_parameters()}
        saved_order = [p for g in parameter_groups(trainer.raw_model, saved_decay) for p in g["params"]]
        saved_index = {names[id(p)]: i for i, p in enumerate(saved_order)}
        for group in trainer.optimizer.param_groups:
            for param in group["params"]:
                moments = saved["optimizer"]["state"][saved_index[names[id(param)]]]
                assert torch.equal(trainer.optimizer.state[param]["exp_avg"], moments["exp_avg"]), names[id(param)]
    finally:
        trainer.cleanup()


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_the_cpu_optimizer_is_fused_and_makes_torchs_default_update(kind):
    """One fused kernel per step on the CPU (torch's default there loops over the parameters), with the same
    update as the default, GradScaler's inf skip included: a step whose gradients overflowed changes nothing."""
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)) for _ in "ab"]
    models[1].load_state_dict(models[0].state_dict())
    cfg = RunConfig.for_task("tiny", optimizer=kind, lr=0.05, weight_decay=0.01)
    fused = build_optimizer(models[0], cfg, torch.device("cpu"))
    assert all(group["fused"] for group in fused.param_groups)
    extra = {"momentum": cfg.momentum} if kind == "sgd" else {}
    default = type(fused)(parameter_groups(models[1], cfg.weight_decay), lr=cfg.lr, **extra)
    assert not any(group["fused"] for group in default.param_groups)
    scalers = [torch.amp.GradScaler("cpu", init_scale=2.0**10) for _ in "ab"]
    x, y = torch.randn(64, 10), torch.randint(0, 2, (64,))
    for step in range(6):
        for model, optimizer, scaler in zip(models, (fused, default), scalers):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss * (float("inf") if step == 3 else 1.0)).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            before = [p.detach().clone() for p in model.parameters()]
            scaler.step(optimizer)
            scaler.update()
            if step == 3:  # the overflowed step is skipped and the scale halves
                assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
                assert scaler.get_scale() == 2.0**9
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
