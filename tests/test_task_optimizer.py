"""A task's own optimizer and schedule (configure_optimizers): it trains with them, the scheduler steps once per
optimizer step, and a checkpoint keeps both states so a resume continues bit for bit (bf16, grad_accum, clipping)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.config import RunConfig
from core.engine import checkpoints as ckpt
from core.engine.control import RunControl
from core.engine.events import RunStarted, StepMetrics
from core.engine.step_metrics import StepAccumulator
from core.engine.trainer import Trainer, train
from core.tasks import add_task

TASK = f"{Path(__file__).parent / 'fixtures' / 'user_tasks' / 'own_optimizer_task.py'}:OwnOptimizerTask"


@pytest.fixture
def own(tmp_path):
    add_task(TASK)
    common = {"device": "cpu", "log_interval": 1, "max_steps": 20, "batch_size": 32, "task_options": {"samples": 2048}}
    return lambda name, **more: RunConfig.for_task(
        "own_optimizer", out_dir=str(tmp_path / name), **{**common, "precision": "bf16", "grad_accum": 2, **more}
    )


def steps(events) -> list[StepMetrics]:
    return [e for e in events if isinstance(e, StepMetrics)]


def test_the_tasks_optimizer_and_schedule_train_and_resume_exactly(own):
    seen = []
    straight = train(own("a", grad_clip=0.5), sink=seen.append)
    assert straight.status == "completed", straight.message
    [started] = [e for e in seen if isinstance(e, RunStarted)]
    assert any(
        n.startswith("the task chooses its optimizer: RMSprop with StepLR") and "optimizer, lr" in n and "not used" in n
        for n in started.notes
    )
    lrs = [s.lr for s in steps(seen)]  # StepLR(7, 0.5) stepped once per optimizer step, logged after the step
    assert lrs[:6] == [3e-3] * 6 and lrs[6] == lrs[13] * 2 == 1.5e-3
    state = ckpt.load_checkpoint(straight.checkpoint)
    assert state["optimizer_class"] == "RMSprop" and state["scheduler"]["last_epoch"] == 20
    assert "square_avg" in next(iter(state["optimizer"]["state"].values()))

    control, first = RunControl(), []

    def stop_at_9(event):
        first.append(event)
        if isinstance(event, StepMetrics) and event.step == 9:
            control.stop()

    part = train(own("b", grad_clip=0.5), sink=stop_at_9, control=control)
    assert part.status == "stopped" and part.step == 9
    rest = []
    done = train(own("b", grad_clip=0.5), resume_from=part.checkpoint, sink=rest.append)
    assert done.status == "completed" and done.step == 20
    assert [s.loss for s in steps(first) + steps(rest)] == [s.loss for s in steps(seen)]  # exact
    assert [s.lr for s in steps(first) + steps(rest)] == lrs
    a, b = (ckpt.load_checkpoint(x)["model"] for x in (straight.checkpoint, done.checkpoint))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_fp16_scales_unscales_before_clipping_and_steps_the_tasks_optimizer(own, monkeypatch):
    """fp16 can't run on the CPU: the step's GradScaler calls are checked with a scaler that records them."""
    trainer = Trainer(own("c", precision="fp32", grad_clip=0.5, max_steps=2))
    trainer.setup()
    calls = []

    class Recording:
        def is_enabled(self):
            return True

        def scale(self, loss):
            calls.append("scale")
            return loss

        def unscale_(self, optimizer):
            calls.append(("unscale", type(optimizer).__name__))

        def step(self, optimizer):
            calls.append(("step", type(optimizer).__name__))
            optimizer.step()

        def update(self):
            calls.append("update")

    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: calls.append("clip") or clip(*a, **k))
    trainer.scaler = Recording()
    trainer.train_step(trainer.batches.order(0), 0, StepAccumulator(trainer.device, count_only_finite=False))
    assert calls == ["scale", "scale", ("unscale", "RMSprop"), "clip", ("step", "RMSprop"), "update"]
    assert trainer.scheduler.last_epoch == 1


def test_lr_find_bf16_pure_and_a_divergence_say_the_task_chooses_its_optimizer(own, tmp_path, capsys, monkeypatch):
    """lr-find draws the task's optimizer's curve and prints no `train --lr` (the setting does not reach it); in
    bf16-pure the run says that the task's optimizer rounds to nearest; a divergence offers no lower LR."""
    import json

    from cli_in_process import cli

    from core.engine.amp_health import nonfinite_fixes

    code, out, err = cli(capsys, "lr-find", "--task", TASK, "--steps", "20", "--device", "cpu", "--json")
    assert code in (0, 1), err
    found = json.loads(out.strip().splitlines()[-1])
    assert found["optimizer"] == "RMSprop" and found["own_optimizer"] and found["train_command"] is None
    assert any("the task chooses its optimizer (RMSprop" in note for note in found["notes"])

    events: list = []
    train(own("pure", precision="bf16-pure", max_steps=2), sink=events.append)
    started = next(e for e in events if isinstance(e, RunStarted))
    assert any("rounded to nearest" in note for note in started.notes if note.startswith("the task chooses"))

    cfg = own("fixes")
    labels = [f["label"] for f in nonfinite_fixes("bf16", cfg, ["bf16"], "run", None, "fc1", own_optimizer=True)]
    assert labels and not any("LR" in label for label in labels)


def test_a_sweep_of_a_setting_the_tasks_optimizer_ignores_is_refused(own):
    from core.errors import ConfigError
    from core.lab.sweep import grid_axis, plan_trials

    base = own("sweep")
    with pytest.raises(ConfigError, match=r"chooses its optimizer \(configure_optimizers\): lr does not reach it"):
        plan_trials(base, grid=[grid_axis("lr=0.001,0.01", base.task)])
    assert len(plan_trials(base, grid=[grid_axis("grad_clip=0.5,1.0", base.task)])) == 2
    assert len(plan_trials(base.replace(task="tiny", task_file=""), grid=[grid_axis("lr=0.001,0.01", "tiny")])) == 2
