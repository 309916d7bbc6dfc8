"""The engine's fixed per-step costs stay out (issue 17, item 4): no clip_grad_norm_ scaling pass without
clipping, events turned into dicts without a deep copy, RSS read from a kept descriptor, metrics.jsonl flushed
at most every FLUSH_SECONDS for step lines (at once for the rest), a cheap read of the interval's loss; and
each of these reports what the slow way did."""

from __future__ import annotations

import dataclasses
import json
import mmap
import os

import pytest
import torch

from core.devices import memory_in_use
from core.engine import reporting
from core.engine import trainer as trainer_module
from core.engine.distributed import DistContext
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
from core.engine.reporting import FLUSH_SECONDS, EventLog, resident_set_size
from core.engine.step_metrics import StepAccumulator, gradient_norm
from core.engine.trainer import Trainer, train
from core.files import read_jsonl


def step_event(step: int, **extra) -> StepMetrics:
    values = dict(
        step=step,
        epoch=1,
        loss=0.5,
        lr=0.01,
        samples_per_second=100.0,
        grad_scale=None,
        grad_norm=1.0,
        skipped_steps=0,
        memory_bytes=1,
        elapsed_seconds=float(step),
    )
    values.update(extra)
    return StepMetrics(**values)


def test_gradient_norm_is_clip_grad_norms_and_leaves_the_gradients_alone():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    model(torch.randn(8, 10)).square().sum().backward()
    params = list(model.parameters())
    before = [p.grad.clone() for p in params]
    norm = gradient_norm(params)
    assert all(torch.equal(p.grad, g) for p, g in zip(params, before, strict=True))
    expected = torch.nn.utils.clip_grad_norm_(params, float("inf"))
    assert torch.allclose(norm, expected, rtol=1e-6)
    assert float(gradient_norm([torch.nn.Parameter(torch.ones(2))])) == 0.0  # no gradient yet: 0, as clip's


def test_without_clipping_the_step_never_calls_clip_grad_norm(tiny_config, recorder, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("clip_grad_norm_ without grad_clip")

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", refuse)
    monkeypatch.setattr(trainer_module, "NORM_SECONDS", 0.0)  # every logged step measures its norm
    ended = train(tiny_config(max_steps=12, log_interval=1, eval_interval=0), sink=recorder)
    assert ended.status == "completed"
    norms = [s.grad_norm for s in recorder.of(StepMetrics)]
    assert len(norms) == 12 and all(n is not None and n > 0 for n in norms)


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_a_fast_logged_step_measures_the_norm_at_most_every_norm_seconds(tiny_config, recorder, monkeypatch, clip):
    """At short log intervals the norm is measured on the first logged step, then at most every NORM_SECONDS and
    on the last step; the logged steps between report none. Clipping computes it every step: always reported."""
    monkeypatch.setattr(trainer_module, "NORM_SECONDS", 1e9)
    train(tiny_config(max_steps=9, log_interval=2, eval_interval=0, grad_clip=clip), sink=recorder)
    steps = recorder.of(StepMetrics)
    assert [s.step for s in steps] == [2, 4, 6, 8, 9]
    measured = [s.step for s in steps if s.grad_norm is not None]
    assert measured == ([2, 4, 6, 8, 9] if clip else [2, 9])
    assert all(s.grad_norm > 0 for s in steps if s.grad_norm is not None)


def test_the_last_step_reports_its_own_gradient_norm(tiny_config, recorder):
    """A run whose length is not a multiple of the log interval measures the norm of its last step too."""
    train(tiny_config(max_steps=7, log_interval=5), sink=recorder)
    steps = recorder.of(StepMetrics)
    assert [s.step for s in steps] == [5, 7]
    assert steps[0].grad_norm != steps[1].grad_norm


def events_of_every_kind() -> list:
    return [
        RunStarted(
            task="tiny",
            device="cpu",
            device_name="cpu",
            precision="fp32",
            autocast_dtype="float32",
            param_dtype="float32",
            scaler=False,
            param_count=3,
            total_steps=10,
            steps_per_epoch=5,
            start_step=0,
            config={"lr": 0.1, "task_options": {"hidden": 4}},
            notes=["a note"],
        ),
        step_event(3, nonfinite_source="fc1", tokens_per_second=12.5, grad_scale=1024.0),
        step_event(4, loss=float("nan"), memory_bytes=None),
        EvalMetrics(step=5, epoch=1, split="val", metrics={"accuracy": 0.5}),
        CheckpointSaved(step=5, path="/x/checkpoint.pt"),
        CheckpointSaved(step=5, path="/x/best.pt", kind="best", metric="accuracy", value=0.5, rank=1),
        RunPaused(step=6),
        RunResumed(step=6, paused_seconds=1.5),
        RunEnded(
            status="completed",
            message="done",
            step=10,
            epoch=2,
            final_loss=0.1,
            metrics={"accuracy": 0.5},
            checkpoint=None,
            samples_per_second=10.0,
            test_metrics={"accuracy": 0.4},
        ),
    ]


@pytest.mark.parametrize("event", events_of_every_kind(), ids=lambda e: type(e).__name__)
def test_event_to_dict_is_what_asdict_gave(event):
    record = event_to_dict(event)
    assert record == {"event": type(event).__name__, **dataclasses.asdict(event)}
    assert list(record) == ["event", *(f.name for f in dataclasses.fields(event))]
    text = json.dumps(record)
    assert json.dumps(event_to_dict(event_from_dict(json.loads(text)))) == text  # NaN != NaN: compare the text
    for value in record.values():  # nested containers are copies: a listener's edit never reaches the event
        if isinstance(value, dict):
            value["added"] = 1
    assert all("added" not in v for v in dataclasses.asdict(event).values() if isinstance(v, dict))


def test_resident_set_size_is_what_memory_in_use_reads_and_opens_statm_once(monkeypatch):
    if not os.path.exists("/proc/self/statm"):
        assert resident_set_size() is None
        return
    monkeypatch.setattr(reporting, "_statm", None)
    opened = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    sizes = [resident_set_size() for _ in range(50)]
    assert opened.count("/proc/self/statm") == 1
    reference = memory_in_use(torch.device("cpu"))
    # Fresh anonymous pages, touched one by one: the resident set grows by 64 MiB. (A bytearray
    # may be served from memory the allocator already holds resident, so it need not grow.)
    grown = mmap.mmap(-1, 64 * 2**20)
    for offset in range(0, len(grown), mmap.PAGESIZE):
        grown[offset] = 1
    after = resident_set_size()
    grown.close()
    assert all(abs(s - reference) < 16 * 2**20 for s in sizes)
    assert after - sizes[-1] > 48 * 2**20  # a fresh value each read, not a cached one
    os.close(reporting._statm[1])
    monkeypatch.setattr(reporting, "_statm", None)


def lines_on_disk(path) -> list[str]:
    with open(path, encoding="utf-8") as f:  # another reader, as `runs show` or a kill would leave it
        return [json.loads(line)["event"] for line in f.read().splitlines()]


def test_step_lines_are_flushed_at_most_every_flush_seconds_and_the_rest_at_once(tmp_path, monkeypatch):
    now = {"t": 1000.0}
    monkeypatch.setattr(reporting.time, "monotonic", lambda: now["t"])
    log = EventLog(is_main=True)
    path = tmp_path / "metrics.jsonl"
    log.open(path)
    try:
        log.emit(step_event(1), None)
        assert lines_on_disk(path) == ["StepMetrics"]  # the first step line goes at once
        for step in range(2, 6):
            now["t"] += FLUSH_SECONDS / 10
            log.emit(step_event(step), None)
        assert lines_on_disk(path) == ["StepMetrics"]  # buffered: no write(2) per step
        log.emit(CheckpointSaved(step=5, path="c.pt"), None)
        assert lines_on_disk(path) == ["StepMetrics"] * 5 + ["CheckpointSaved"]  # everything before it too
        log.emit(step_event(6), None)
        now["t"] += FLUSH_SECONDS
        log.emit(step_event(7), None)
        assert len(lines_on_disk(path)) == 8  # FLUSH_SECONDS later the step lines are out
        log.emit(step_event(8), None)
    finally:
        log.close()
    assert len(read_jsonl(path)) == 9  # closing writes the rest


def test_every_event_of_a_run_is_in_metrics_jsonl(tiny_config):
    ended = train(tiny_config(max_steps=40, log_interval=1, checkpoint_interval=15))
    records = read_jsonl(f"{ended.checkpoint.rsplit('/', 1)[0]}/metrics.jsonl")
    assert [r["step"] for r in records if r["event"] == "StepMetrics"] == list(range(1, 41))
    assert records[-1]["event"] == "RunEnded"


@pytest.mark.parametrize("losses", [1, 3, 10, 300, 600])
def test_the_quick_read_of_an_interval_is_the_folded_one(losses):
    values = torch.linspace(0.1, 2.0, losses)
    quick = StepAccumulator(torch.device("cpu"), count_only_finite=False)
    folded = StepAccumulator(torch.device("cpu"), count_only_finite=False)
    for value in values:
        quick.add_loss(value.clone())
        folded.add_loss(value.clone())
    folded._fold()  # forces the general path
    a, b = quick.read(DistContext()), folded.read(DistContext())
    assert a.loss == pytest.approx(b.loss, rel=1e-6) and (a.skipped, a.tokens) == (b.skipped, b.tokens) == (0, 0.0)
    assert quick.read(DistContext()).loss != quick.read(DistContext()).loss  # nothing since: NaN, as before
    quick.add_loss(torch.tensor(float("inf")))
    assert quick.read(DistContext()).loss == float("inf")  # a non-finite loss is reported, not dropped


def test_the_step_works_for_callers_that_drive_it_after_setup(tiny_config):
    """core.lab (lr_finder, batch_finder) call setup() and then train_step themselves, with their own sums."""
    trainer = Trainer(tiny_config(max_steps=5, log_interval=1))
    trainer.setup()
    try:
        sums = StepAccumulator(trainer.device, count_only_finite=False)
        order = trainer.batches.order(0)
        before = [p.detach().clone() for p in trainer._params]
        trainer.train_step(order, 0, sums)
        assert trainer.grad_norm is None  # not asked for
        assert any(not torch.equal(p, b) for p, b in zip(trainer._params, before, strict=True))
        assert sums.read(trainer.dist).loss > 0
        trainer.train_step(order, 1, sums, measure_norm=True)
        assert trainer.grad_norm is not None and float(trainer.grad_norm) > 0
        assert trainer.state.step == 0  # the caller counts its steps
    finally:
        trainer.cleanup()


def test_memory_is_read_at_most_every_memory_seconds_and_fresh_for_the_last_step(monkeypatch):
    reads = []
    monkeypatch.setattr(reporting, "resident_set_size", lambda: reads.append(1) or 1000 + len(reads))
    now = [100.0]
    monkeypatch.setattr(reporting.time, "perf_counter", lambda: now[0])
    clock = reporting.TrainingClock()
    cpu = torch.device("cpu")
    assert clock.memory(cpu) == 1001  # the first call reads
    now[0] += reporting.MEMORY_SECONDS / 2
    assert clock.memory(cpu) == 1001 and len(reads) == 1  # too soon: the last reading
    assert clock.memory(cpu, fresh=True) == 1002  # the last step's event reads now
    now[0] += reporting.MEMORY_SECONDS
    assert clock.memory(cpu) == 1003 and len(reads) == 3


def test_queued_step_events_reach_run_json_in_order_before_the_next_event(tmp_path, monkeypatch):
    """Step events are queued between flushes (EventLog.emit): run.json's steps, loss and peak memory still
    come from all of them, in order, by the time any other event is written."""
    now = {"t": 1000.0}
    monkeypatch.setattr(reporting.time, "monotonic", lambda: now["t"])
    log = EventLog(is_main=True)
    log.open(tmp_path / "metrics.jsonl")
    seen = []
    try:
        log.emit(
            RunStarted(
                task="tiny",
                device="cpu",
                device_name="cpu",
                precision="fp32",
                autocast_dtype="float32",
                param_dtype="float32",
                scaler=False,
                param_count=1,
                total_steps=10,
                steps_per_epoch=10,
                start_step=0,
                config={},
            ),
            seen.append,
        )
        for step, memory in zip(range(1, 6), [100, 900, 300, 200, 150], strict=True):
            log.emit(step_event(step, loss=step / 10, memory_bytes=memory), seen.append)
        assert [e.step for e in seen[1:]] == [1, 2, 3, 4, 5]  # the sink has every event at once
        log.emit(CheckpointSaved(step=5, path="c.pt"), seen.append)
        data = log.record.data
        assert (data["steps"], data["final_loss"], data["peak_memory_bytes"]) == (5, 0.5, 900)
    finally:
        log.close()


class BrokenFile:
    def write(self, text):
        raise OSError(28, "No space left on device")

    def flush(self):
        pass

    def close(self):
        pass


def test_a_failed_write_of_queued_step_lines_is_reported_like_any_other(tmp_path, monkeypatch):
    now = {"t": 1000.0}
    monkeypatch.setattr(reporting.time, "monotonic", lambda: now["t"])
    log = EventLog(is_main=True)
    log.open(tmp_path / "metrics.jsonl")
    log.emit(step_event(1), None)
    log.emit(step_event(2), None)  # queued
    log._file.close()
    log._file = BrokenFile()
    assert log.failure is None
    now["t"] += FLUSH_SECONDS
    log.emit(step_event(3), None)  # the queue goes out, and fails
    assert log.failure is not None and "No space left on device" in log.failure and "metrics.jsonl" in log.failure
    log.close()


@pytest.mark.parametrize(
    "log_interval, eval_interval, checkpoint_interval, batch_size",
    [(3, 5, 7, 256), (1, 0, 0, 512), (10, 0, 4, 700), (4, 6, 0, 1000)],
)
def test_steps_log_evaluate_and_checkpoint_exactly_where_their_intervals_say(
    tiny_config, recorder, log_interval, eval_interval, checkpoint_interval, batch_size
):
    """train() calls _after_step only on the steps known to need it (core.engine.due): the events
    fall on the same steps as when every step was looked at."""
    cfg = tiny_config(
        max_steps=29,
        log_interval=log_interval,
        eval_interval=eval_interval,
        checkpoint_interval=checkpoint_interval,
        batch_size=batch_size,
        keep_best=0,
    )
    trainer = Trainer(cfg, sink=recorder)
    ended = trainer.run()
    assert ended.status == "completed" and ended.step == 29
    per_epoch = trainer.steps_per_epoch
    steps = range(1, 30)
    logged = [s for s in steps if s % log_interval == 0 or s == 29]
    evaluated = [s for s in steps if s < 29 and (s % eval_interval == 0 if eval_interval else s % per_epoch == 0)]
    checkpointed = [s for s in steps if s < 29 and checkpoint_interval and s % checkpoint_interval == 0]
    assert [e.step for e in recorder.of(StepMetrics)] == logged
    assert [e.step for e in recorder.of(EvalMetrics) if e.split == "val"][: len(evaluated)] == evaluated
    assert [e.step for e in recorder.of(CheckpointSaved)][: len(checkpointed)] == checkpointed


@pytest.mark.parametrize(
    "log_interval, eval_interval, checkpoint_interval, per_epoch, total",
    [(3, 5, 7, 4, 29), (1, 0, 0, 6, 13), (10, 0, 4, 5, 40), (4, 6, 0, 1, 9), (7, 0, 0, 30, 12)],
)
def test_next_due_names_every_step_with_work_and_what_it_does(
    tiny_config, log_interval, eval_interval, checkpoint_interval, per_epoch, total
):
    """Walking next_due from step 0 visits exactly the steps whose intervals, epoch end or the run's end say so,
    with the flags the modulo tests give there."""
    from core.engine.due import Due, next_due

    cfg = tiny_config(log_interval=log_interval, eval_interval=eval_interval, checkpoint_interval=checkpoint_interval)
    expected = []
    for s in range(1, total + 1):
        last, epoch_end = s == total, s % per_epoch == 0
        due = Due(
            s,
            s % log_interval == 0 or last,
            not last and (s % eval_interval == 0 if eval_interval else epoch_end),
            not last and bool(checkpoint_interval) and s % checkpoint_interval == 0,
            epoch_end,
            last,
        )
        if due.log or due.evaluate or due.checkpoint or epoch_end or last:
            expected.append(due)
    walked, step = [], 0
    while step < total:
        walked.append(next_due(step, cfg, per_epoch, total))
        step = walked[-1].step
    assert walked == expected


def test_run_control_says_when_anything_was_asked_for():
    from core.engine.control import RunControl

    control = RunControl()
    assert not control.requested
    control.pause()
    assert control.requested and control.paused
    control.resume()
    assert not control.requested and not control.paused  # a resumed run has nothing left to look at
    control.pause()
    control.stop()
    control.resume()
    assert control.requested and control.stop_requested  # a stop stays asked for


def test_a_stop_asked_for_while_another_thread_resumes_is_never_lost():
    """resume() reads whether a stop is pending and then writes `requested`: a stop() from another thread in
    between must still be asked for afterwards (the trainer looks at nothing else while `requested` is
    False). The stop is sent at exactly that moment: from inside resume's read of the stop event."""
    import threading

    from core.engine.control import RunControl

    stopper_done = threading.Event()

    class StopArrivesMidRead(threading.Event):
        """The stop event; the resuming thread's read of it lets a stop() in from another thread first."""

        def __init__(self, control):
            super().__init__()
            self.control, self.armed, self.stopper = control, False, None

        def is_set(self):
            value = super().is_set()
            if self.armed and threading.current_thread() is resumer:
                self.armed = False
                self.stopper = threading.Thread(target=lambda: (self.control.stop(), stopper_done.set()))
                self.stopper.start()
                # Without a lock stop() finishes at once; with one it waits for resume to finish (so does this).
                stopper_done.wait(timeout=0.5)
            return value

    control = RunControl()
    control._stop = event = StopArrivesMidRead(control)
    control.pause()
    event.armed = True
    resumer = threading.Thread(target=control.resume)
    resumer.start()
    resumer.join()
    assert event.stopper is not None, "resume() did not read the stop event"
    event.stopper.join()
    assert control.stop_requested and control.requested and not control.paused


def test_a_pause_after_a_stop_does_not_hold_the_stopping_run():
    from core.engine.control import RunControl

    control = RunControl()
    control.stop()
    control.pause()
    assert control.requested and control.stop_requested and not control.paused


def test_a_pause_asked_for_between_steps_is_taken_at_the_next_step(tiny_config, recorder):
    from core.engine.control import RunControl

    control = RunControl()

    def sink(event):
        recorder(event)
        if isinstance(event, StepMetrics) and event.step == 10:
            control.pause()
        if isinstance(event, RunPaused):
            control.resume()

    ended = train(
        tiny_config(max_steps=30, log_interval=5, eval_interval=0, checkpoint_minutes=0), sink=sink, control=control
    )
    assert ended.status == "completed" and ended.step == 30
    assert [(e.step) for e in recorder.of(RunPaused)] == [10] and [e.step for e in recorder.of(RunResumed)] == [10]
