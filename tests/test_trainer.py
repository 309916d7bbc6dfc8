"""The training loop: learning, stop/pause from another thread, failures, fp16 overflow, host syncs."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from core.devices import cpu_info
from core.engine.checkpoints import load_checkpoint
from core.engine.control import RunControl
from core.engine.events import (
    CheckpointSaved,
    EvalMetrics,
    RunEnded,
    RunPaused,
    RunResumed,
    RunStarted,
    StepMetrics,
    event_from_dict,
    event_to_dict,
)
from core.engine.trainer import Trainer, train
from tests.test_devices_precision import CPU_WITH_FP16


def make_loss_infinite(monkeypatch, when) -> None:
    """Multiply the tiny task's loss by inf on the training-loss calls for which `when(call_number)` is true."""
    from core.tasks.tiny.task import TinyClassifierTask

    original = TinyClassifierTask.loss
    calls = {"n": 0}

    def patched(self, model, batch):
        calls["n"] += 1
        loss = original(self, model, batch)
        return loss * float("inf") if when(calls["n"]) else loss

    monkeypatch.setattr(TinyClassifierTask, "loss", patched)


def test_tiny_task_learns_far_above_chance(tiny_config, recorder):
    ended = train(tiny_config(epochs=3), sink=recorder)
    assert ended.status == "completed"
    assert ended.metrics["accuracy"] > 0.85  # chance is ~0.5, the planted ceiling 0.95
    losses = [s.loss for s in recorder.of(StepMetrics)]
    assert losses[-1] < losses[0] * 0.6
    assert recorder.of(RunStarted)[0].ceiling == {"accuracy": pytest.approx(0.95)}
    assert [type(e) for e in recorder.events][-2:] == [CheckpointSaved, RunEnded]


def test_events_come_at_the_log_interval(tiny_config, recorder):
    train(tiny_config(max_steps=40, log_interval=10), sink=recorder)
    assert [s.step for s in recorder.of(StepMetrics)] == [10, 20, 30, 40]


def test_stop_from_another_thread_takes_effect_within_one_step(tiny_config, recorder):
    """The run (on its own thread) reports step 20 and waits there until the test's thread has asked it to stop."""
    control = RunControl()
    at_step_20, asked = threading.Event(), threading.Event()

    def sink(event):
        recorder(event)
        if isinstance(event, StepMetrics) and event.step == 20:
            at_step_20.set()
            assert asked.wait(30), "the test thread never asked to stop"

    result = {}
    runner = threading.Thread(
        target=lambda: result.update(
            ended=train(tiny_config(max_steps=100_000, log_interval=10), sink=sink, control=control)
        )
    )
    runner.start()
    try:
        assert at_step_20.wait(60), "the run never reached step 20"
        control.stop()  # from another thread than the run's, while the loop is at step 20
    finally:
        asked.set()
        runner.join(60)
    assert not runner.is_alive()
    ended = result["ended"]
    assert ended.status == "stopped" and ended.step == 20
    state = load_checkpoint(ended.checkpoint)
    assert state["step"] == ended.step  # the final checkpoint is written on stop


def test_pause_blocks_progress_until_resume(tiny_config):
    """The run reports when the pause takes effect (RunPaused) and when it goes on, at the same step."""
    control = RunControl()
    events = []
    paused = threading.Event()

    def sink(event):
        events.append(event)
        if isinstance(event, StepMetrics) and event.step == 10:
            control.pause()
        if isinstance(event, RunPaused):
            paused.set()

    runner = threading.Thread(
        target=train, args=(tiny_config(max_steps=30, log_interval=10),), kwargs={"sink": sink, "control": control}
    )
    runner.start()
    try:
        assert paused.wait(30), "the pause never took effect"
        assert runner.is_alive()
        assert [e.step for e in events if isinstance(e, (StepMetrics, RunPaused))] == [10, 10]
    finally:
        control.resume()
        runner.join(30)
    assert not runner.is_alive()
    resumed = [e for e in events if isinstance(e, RunResumed)]
    assert len(resumed) == 1 and resumed[0].step == 10 and resumed[0].paused_seconds >= 0
    assert [e.step for e in events if isinstance(e, StepMetrics)] == [10, 20, 30]


def test_stop_wakes_a_paused_run(tiny_config):
    control = RunControl()
    control.pause()
    result, events = {}, []
    paused = threading.Event()

    def sink(event):
        events.append(event)
        if isinstance(event, RunPaused):
            paused.set()

    runner = threading.Thread(
        target=lambda: result.update(end=train(tiny_config(max_steps=50), sink=sink, control=control))
    )
    runner.start()
    try:
        assert paused.wait(30), "the run never reached its first step's pause"
    finally:
        control.stop()
        runner.join(30)
    assert result["end"].status == "stopped" and result["end"].step == 0
    assert not any(isinstance(e, RunResumed) for e in events)  # woken to stop, not to go on


def test_pause_events_survive_the_json_lines_a_child_process_sends():
    for event in (RunPaused(step=7), RunResumed(step=7, paused_seconds=1.5)):
        assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event


def test_non_finite_loss_fails_and_keeps_last_good_checkpoint(tiny_config, recorder, monkeypatch):
    make_loss_infinite(monkeypatch, lambda call: call > 25)
    cfg = tiny_config(max_steps=100, log_interval=5, checkpoint_interval=10)
    ended = train(cfg, sink=recorder)
    assert ended.status == "failed"
    assert "non-finite" in ended.message or "became" in ended.message
    assert "inf" in ended.message or "nan" in ended.message
    state = load_checkpoint(ended.checkpoint or f"{cfg.out_dir}/checkpoint.pt")
    assert state["step"] == 20  # the last checkpoint before the loss blew up
    assert all(torch.isfinite(v).all() for v in state["model"].values())


def test_fp16_overflow_step_is_skipped_counted_and_training_continues(tiny_config, recorder, monkeypatch):
    make_loss_infinite(monkeypatch, lambda call: call == 7)
    ended = train(tiny_config(precision="fp16", max_steps=30, log_interval=5), sink=recorder, devices=[CPU_WITH_FP16])
    assert ended.status == "completed"
    assert ended.skipped_steps == 1
    steps = recorder.of(StepMetrics)
    assert steps[0].skipped_steps == 0 and steps[1].skipped_steps == 1
    assert steps[1].grad_scale == steps[0].grad_scale / 2  # the scaler backed off once
    assert all(s.loss == s.loss and s.loss < float("inf") for s in steps)  # overflow kept out of the mean


def test_grad_clipping_reports_the_unclipped_norm(tiny_config, recorder):
    train(tiny_config(max_steps=10, grad_clip=1e-3, log_interval=5), sink=recorder)
    norms = [s.grad_norm for s in recorder.of(StepMetrics)]
    assert all(n is not None and n > 1e-3 for n in norms)  # measured before clipping


def test_no_host_sync_inside_the_step(tiny_config, monkeypatch):
    """Count tensor->host reads made by the engine's own code: only at log intervals, never per step."""
    import sys
    from pathlib import Path

    import core

    engine_dir = str(Path(core.__file__).parent)
    reads = {"n": 0}
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _original=original, **k):
            if sys._getframe(1).f_code.co_filename.startswith(engine_dir):
                reads["n"] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    cfg = tiny_config(max_steps=200, log_interval=100, eval_interval=0, epochs=0)
    trainer = Trainer(cfg)
    trainer.setup()
    trainer.evaluate = dict
    reads["n"] = 0
    try:
        trainer._train_and_finish()
    finally:
        trainer.cleanup()
    assert reads["n"] <= 2 * 2  # two log intervals, a couple of reads each; 200 steps would mean >= 200


def test_cpu_device_and_one_torch_device(tiny_config):
    trainer = Trainer(tiny_config(max_steps=1), devices=[cpu_info()])
    trainer.setup()
    assert trainer.device == torch.device("cpu")
    assert all(p.device == trainer.device for p in trainer.raw_model.parameters())
    assert all(t.device == trainer.device for t in trainer.val.values())


def test_overflow_hooks_name_the_module_that_produced_inf(tiny_config, recorder, monkeypatch):
    """After a first overflow the hooks are armed; the next overflow is traced to the module that made it."""
    original = torch.nn.Linear.forward
    calls = {"n": 0}

    def hidden_layer_overflows(self, x):
        out = original(self, x)
        if self.out_features == 16 and self.training:
            calls["n"] += 1
            if calls["n"] in (3, 8):
                out = out * float("inf")  # as if fc1's fp16 output overflowed
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", hidden_layer_overflows)
    ended = train(
        tiny_config(precision="fp16", max_steps=15, log_interval=5, eval_interval=10**6),
        sink=recorder,
        devices=[CPU_WITH_FP16],
    )
    steps = recorder.of(StepMetrics)
    assert ended.status == "completed" and ended.skipped_steps == 2
    assert steps[0].nonfinite_source is None  # first overflow: hooks were not armed yet (hot loop stays free)
    assert steps[1].nonfinite_source == "fc1"  # step 8's overflow traced to the module that produced it
    assert steps[2].nonfinite_source is None  # quiet interval: nothing caught, hooks disarmed


def test_token_tasks_report_tokens_per_second_and_test_metrics(tmp_path, recorder):
    from core.config import RunConfig

    cfg = RunConfig.for_task("recommender", device="cpu", max_steps=4, log_interval=2, out_dir=str(tmp_path), threads=1)
    ended = train(cfg, sink=recorder)
    started = recorder.of(RunStarted)[0]
    assert started.tokens_key == "seq" and started.baseline and started.ceiling
    steps = recorder.of(StepMetrics)
    assert all(s.tokens_per_second and s.tokens_per_second > s.samples_per_second for s in steps)
    assert [e.split for e in recorder.of(EvalMetrics)][-2:] == ["val", "test"]
    assert set(ended.test_metrics) == set(ended.metrics)


def test_skipped_step_count_survives_a_resume(tiny_config, recorder, monkeypatch):
    make_loss_infinite(monkeypatch, lambda call: call == 3)
    first = train(tiny_config(precision="fp16", max_steps=10, log_interval=5), devices=[CPU_WITH_FP16])
    assert first.skipped_steps == 1
    resumed = train(
        tiny_config(precision="fp16", max_steps=20, log_interval=5),
        devices=[CPU_WITH_FP16],
        resume_from=first.checkpoint,
        sink=recorder,
    )
    assert resumed.skipped_steps == 1
    assert [s.skipped_steps for s in recorder.of(StepMetrics)] == [1, 1]


def test_grad_norm_is_reported_without_clipping_too(tiny_config, recorder):
    train(tiny_config(max_steps=10, log_interval=5), sink=recorder)
    assert all(s.grad_norm is not None and s.grad_norm > 0 for s in recorder.of(StepMetrics))


def test_the_stop_message_writes_the_step_with_thousands_separators(tiny_config):
    """'stopped at step 1,200' beside the status bar's 'step 1,200/5,000': one way to write a count."""
    control = RunControl()

    def sink(event):
        if isinstance(event, StepMetrics) and event.step >= 1200:
            control.stop()

    ended = train(
        tiny_config(max_steps=5000, log_interval=100, eval_interval=0, checkpoint_interval=0),
        sink=sink,
        control=control,
    )
    assert ended.status == "stopped" and ended.message == f"stopped at step {ended.step:,}" and "," in ended.message


def test_a_stop_keeps_the_training_even_with_no_checkpoints_planned(tiny_config, recorder):
    """checkpoint_interval 0 and checkpoint_minutes 0: a stop still ends with a checkpoint at its step."""
    control = RunControl()

    def sink(event):
        recorder(event)
        if isinstance(event, StepMetrics) and event.step == 15:
            control.stop()  # as the CLI does on SIGTERM / SIGHUP / SIGINT

    ended = train(
        tiny_config(max_steps=1000, log_interval=5, checkpoint_interval=0, checkpoint_minutes=0),
        sink=sink,
        control=control,
    )
    assert ended.status == "stopped" and ended.step == 15
    assert [e.step for e in recorder.of(CheckpointSaved)] == [15]
    assert load_checkpoint(ended.checkpoint)["step"] == 15


def test_run_started_carries_its_start_time_and_an_older_line_without_it_still_reads(tmp_path):
    import time

    from core.config import RunConfig

    before = time.time()
    train(RunConfig.for_task("tiny", device="cpu", max_steps=1, out_dir=str(tmp_path / "run")))
    [line] = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"RunStarted"' in x
    ]
    assert before <= line["started_at"] <= time.time()
    del line["started_at"]  # a metrics.jsonl written before the field
    assert event_from_dict(line).started_at is None
