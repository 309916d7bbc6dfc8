"""RunConfig.activation_checkpointing: the recommender's transformer blocks recompute their activations in the
backward pass: the same loss and gradients (dropout included), fewer tensors kept for backward; a task without
blocks says so; user code opts in through the task or the model."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from core.config import RunConfig
from core.engine import compiling
from core.engine.events import RunStarted, StepMetrics
from core.engine.trainer import Trainer
from core.tasks import create_task

SMALL = {
    "items": 200,
    "track_len": 10,
    "interactions": 3000,
    "mean_len": 20,
    "max_len": 20,
    "d_model": 32,
    "layers": 2,
    "heads": 2,
    "dropout": 0.1,
}


def loss_and_grads(task, model, batch, seed: int = 7) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Loss, parameter gradients and the bytes of the tensors autograd kept for the backward pass."""
    kept = []

    def pack(tensor):
        kept.append(tensor.numel() * tensor.element_size())
        return tensor

    torch.manual_seed(seed)  # the same dropout masks for both models
    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = task.loss(model, batch)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, sum(kept)


def test_checkpointed_blocks_give_the_same_loss_and_gradients_keeping_less():
    task = create_task("recommender", SMALL)
    data = task.load_data("", seed=0)
    torch.manual_seed(0)
    plain = task.build_model(data.info)
    checkpointed = copy.deepcopy(plain)
    assert compiling.checkpoint_blocks(compiling.checkpointable_blocks(task, checkpointed)) == 2
    assert all(compiling.is_checkpointed(block) for block in checkpointed.blocks)
    batch = {key: value[:64] for key, value in data.train.items()}

    loss_a, grads_a, kept_a = loss_and_grads(task, plain, batch)
    loss_b, grads_b, kept_b = loss_and_grads(task, checkpointed, batch)
    assert torch.equal(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) == len(list(plain.parameters()))
    for name, grad in grads_a.items():
        torch.testing.assert_close(grads_b[name], grad, rtol=1e-6, atol=1e-7, msg=name)
    assert kept_b < 0.7 * kept_a, (kept_a, kept_b)  # the blocks' inner activations are not kept
    assert checkpointed.state_dict().keys() == plain.state_dict().keys()  # checkpoints are interchangeable

    # Evaluation (no gradients) runs the blocks plainly: the same outputs, nothing recomputed.
    plain.eval(), checkpointed.eval()
    with torch.no_grad():
        torch.testing.assert_close(checkpointed(batch["seq"]), plain(batch["seq"]), rtol=0, atol=0)


def run(tmp_path, recorder, task: str, name: str, **overrides):
    cfg = RunConfig.for_task(
        task,
        device="cpu",
        precision="fp32",
        log_interval=2,
        max_steps=4,
        seed=2,
        out_dir=str(tmp_path / name),
        threads=1,
        **overrides,
    )
    trainer = Trainer(cfg, sink=recorder.append if isinstance(recorder, list) else recorder)
    return trainer, trainer.run()


def test_a_recommender_run_trains_the_same_with_it(tmp_path, recorder):
    plain_events = []
    _, plain = run(tmp_path, plain_events, "recommender", "plain", task_options=SMALL, batch_size=32)
    trainer, checkpointed = run(
        tmp_path,
        recorder,
        "recommender",
        "checkpointed",
        task_options=SMALL,
        batch_size=32,
        activation_checkpointing=True,
    )
    assert plain.status == checkpointed.status == "completed"
    assert all(compiling.is_checkpointed(block) for block in trainer.raw_model.blocks)
    assert (
        "activation checkpointing: 2 blocks (CausalBlock) recompute their activations in the backward pass"
        in recorder.of(RunStarted)[0].notes
    )
    a = [e.loss for e in plain_events if isinstance(e, StepMetrics)]
    b = [e.loss for e in recorder.of(StepMetrics)]
    assert len(a) == len(b) == 2 and b == pytest.approx(a, rel=1e-5)
    assert checkpointed.metrics == pytest.approx(plain.metrics, rel=1e-4)


def test_a_task_without_blocks_trains_without_it_and_says_so(tmp_path, recorder):
    _, ended = run(tmp_path, recorder, "tiny", "tiny", activation_checkpointing=True)
    assert ended.status == "completed"
    assert (
        "activation checkpointing: task tiny names no blocks to checkpoint (a task's checkpointed_blocks(model) "
        "or the model's checkpointed_blocks()); training without it"
    ) in recorder.of(RunStarted)[0].notes


@pytest.mark.filterwarnings("ignore::DeprecationWarning:torch.*")  # torch.compile's imports (torch.jit.script_method)
def test_user_code_opts_in_through_the_task_or_the_model():
    class Blocky(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))

        def checkpointed_blocks(self):
            return [self.layers[1]]

    class ChoosingTask:
        name = "choosing"

        def checkpointed_blocks(self, model):
            return [model.layers[0]]

    class PlainTask:
        name = "plain"

    model = Blocky()
    assert compiling.checkpointable_blocks(ChoosingTask(), model) == [model.layers[0]]  # the task decides first
    assert compiling.checkpointable_blocks(PlainTask(), model) == [model.layers[1]]
    assert compiling.checkpointable_blocks(PlainTask(), nn.Linear(2, 2)) == []
    compiled = torch.compile(model)  # the model's own method is found under a compile (or DDP) wrapper
    assert compiling.checkpointable_blocks(PlainTask(), compiled) == [model.layers[1]]


def test_a_block_that_defines_eq_without_hash_is_wrapped_once():
    class Block(nn.Linear):  # __eq__ without __hash__: unhashable, as a user's module may be
        def __eq__(self, other):
            return self is other

    block = Block(4, 4)
    assert compiling.checkpoint_blocks([block, block]) == 1
    assert compiling.is_checkpointed(block)
    assert compiling.checkpoint_blocks([block]) == 0
