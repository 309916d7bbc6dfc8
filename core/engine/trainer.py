"""The training loop: setup -> train -> evaluate -> checkpoint, in the order ARCHITECTURE.md gives.

The trainer knows nothing of who listens: it hands plain event dataclasses to a `sink` callable. Another
thread stops or pauses it through a `RunControl`. Inside the step nothing reads a device value back to
the host; losses accumulate on the device and are read (one sync) at the log interval.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from core.engine import checkpoints as ckpt
from core.engine import run_state
from core.engine.amp_health import NonFiniteWatch, first_nonfinite_parameter
from core.config import RunConfig
from core.engine.control import RunControl
from core.data.batching import EpochBatches, place_split
from core.devices import DeviceInfo, cuda_free_memory, device_info, list_devices, memory_in_use, torch_device
from core.engine.distributed import RUN_NOTE_ENV, DistContext, broadcast_ints, destroy_process_group, init_process_group
from core.errors import CheckpointError, ConfigError
from core.engine.events import CheckpointSaved, EvalMetrics, Event, RunEnded, RunStarted, StepMetrics, event_to_dict
from core.engine.optimizers import build_optimizer, build_scheduler
from core.engine.precision import matmul_precision, resolve_precision
from core.engine.step_metrics import StepAccumulator
from core.tasks import create_task

Sink = Callable[[Event], None]
STOP_AGREE_SECONDS = 0.5  # DDP ranks agree on a stop request about this often (see Trainer._stop_requested)


class RunFailed(Exception):
    """The run cannot go on (non-finite loss, persistent fp16 overflow, out of memory...)."""


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python's random."""
    import random

    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


class Trainer:
    """One run of one config. `run()` returns the RunEnded event (also sent to the sink).

    Bad input (ConfigError, DeviceError, DataError, CheckpointError) raises from `run()` before the run
    starts; anything that goes wrong once it has started ends the run as `failed` with a message.
    """

    def __init__(
        self,
        config: RunConfig,
        sink: Sink | None = None,
        control: RunControl | None = None,
        resume_from: str | Path | None = None,
        dist_ctx: DistContext | None = None,
        devices: list[DeviceInfo] | None = None,
    ):
        self.cfg = config
        self.sink = sink
        self.control = control or RunControl()
        self.resume_from = Path(resume_from) if resume_from else None
        self.dist = dist_ctx or DistContext()
        self._devices = devices
        self.notes: list[str] = []
        if self.dist.is_main and self.dist.enabled and os.environ.get(RUN_NOTE_ENV):
            self.notes.append(os.environ[RUN_NOTE_ENV])  # e.g. the torchrun launcher chose another folder
        if self.dist.is_main:  # rank 0 writes the files
            fresh = ckpt.run_dir_for(config.out_dir, self.resume_from)
            if fresh != Path(config.out_dir):
                self.notes.append(f"{config.out_dir} holds an earlier run, which is kept: this run writes to {fresh}")
                self.cfg = config = config.replace(out_dir=str(fresh))
        self.out_dir = Path(config.out_dir)
        self.checkpoint_path = self.out_dir / ckpt.CHECKPOINT_FILE
        self.step = 0
        self.epoch = 0
        self.last_metrics: dict = {}
        self.last_loss: float | None = None
        self.skipped_steps = 0
        self._metrics_file = None
        self._saved_checkpoint: str | None = None
        self._last_eval_step = -1
        self.test_metrics: dict = {}

    # ----------------------------------------------------------------- phases
    def run(self) -> RunEnded:
        """Set up, train until done, stopped or failed, write the final checkpoint, report RunEnded."""
        self.setup()
        ended = None
        try:
            with matmul_precision(self.plan):
                ended = self._train_and_finish()
        finally:
            self.cleanup(ended_normally=ended is not None and ended.status != "failed")
        return ended

    def setup(self) -> None:
        """Validate, pick the device once, build task, data, model, optimizer, scheduler and scaler."""
        cfg = self.cfg.validate()
        self.task = create_task(cfg.task, cfg.task_options)
        info = self._device_info()
        self.device = torch_device(info)
        self.device_info = info
        self.plan = resolve_precision(cfg.precision, info)
        resume_state = ckpt.load_checkpoint(self.resume_from) if self.resume_from else None
        if resume_state is not None and resume_state["task"] != cfg.task:
            raise CheckpointError(
                f"{self.resume_from}: checkpoint is for task {resume_state['task']!r}, this run is {cfg.task!r}"
            )
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        init_process_group(self.dist, self.device)
        seed_everything(cfg.seed)
        self.data = self.task.load_data(cfg.data, cfg.seed)
        seed_everything(cfg.seed)
        model = self.task.build_model(self.data.info).to(self.device)
        self.raw_model = model
        self.param_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
        train = place_split(self.data.train, self.device, keep_on_host=self._keep_on_host())
        self.val = place_split(self.data.val, self.device, keep_on_host=False)
        self.test = place_split(self.data.test, self.device, keep_on_host=False) if self.data.test else None
        self.batches = EpochBatches(train, cfg.batch_size, cfg.seed, self.device, self.dist.rank, self.dist.world_size)
        self.steps_per_epoch = self.batches.batches_per_epoch // cfg.grad_accum
        if self.steps_per_epoch == 0:
            raise ConfigError("grad_accum", f"{cfg.grad_accum} micro-batches per step exceed the "
                                            f"{self.batches.batches_per_epoch} batches of an epoch")
        self.total_steps = cfg.max_steps or cfg.epochs * self.steps_per_epoch
        self.optimizer = build_optimizer(model, cfg, self.device)
        self.scheduler = build_scheduler(self.optimizer, cfg, self.total_steps)
        self.scaler = self.plan.make_scaler()
        if resume_state is not None:
            run_state.restore(self, resume_state, str(self.resume_from))
        self.model = self._wrap_ddp(model)
        self.model.train()
        self._watch = NonFiniteWatch(model)

    def _train_and_finish(self) -> RunEnded:
        self.started = time.perf_counter()
        self._train_seconds = 0.0
        self._samples_done = 0
        if self.dist.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.cfg.save_toml(self.out_dir / "config.toml")
            self._metrics_file = open(self.out_dir / ckpt.METRICS_FILE, "a", encoding="utf-8")
        self._emit(self._run_started())
        try:
            status, message = self.train()
        except RunFailed as exc:
            return self._end("failed", str(exc))
        except Exception as exc:  # anything else: the run fails, the app stays usable
            from core.engine.diagnosis import explain_exception

            return self._end("failed", explain_exception(exc, self), details=traceback.format_exc())
        if status == "completed" and self._last_eval_step != self.step:
            self.evaluate()
        if status == "completed" and self.test is not None:
            self.test_metrics = self.evaluate("test")
        self.save_checkpoint()
        return self._end(status, message)

    def train(self) -> tuple[str, str]:
        """Optimizer steps until total_steps or a stop request. Returns (status, message)."""
        cfg = self.cfg
        accum = cfg.grad_accum
        self._interval_start = time.perf_counter()
        self._interval_steps = 0
        self._next_stop_agreement = self.step  # DDP: the step of the next stop agreement, and the last one
        self._last_stop_agreement: tuple[float, int] | None = None
        self._sums = StepAccumulator(self.device, count_only_finite=self.plan.use_scaler)
        self._grad_norm = None
        while self.step < self.total_steps:
            order = self.batches.order(self.epoch)
            for index in range(self.step % self.steps_per_epoch, self.steps_per_epoch):
                if self._stop_requested():
                    return "stopped", f"stopped at step {self.step}"
                if self.control.paused:
                    self._pause()
                    if self._stop_requested():
                        return "stopped", f"stopped at step {self.step}"
                self._optimizer_step(order, index * accum)
                self.step += 1
                self._interval_steps += 1
                self._after_step(index + 1 == self.steps_per_epoch)
                if self.step >= self.total_steps:
                    break
            else:
                self.epoch += 1
                continue
            if self.step % self.steps_per_epoch == 0:
                self.epoch += 1
        return "completed", f"completed {self.step} steps"

    def _optimizer_step(self, order: torch.Tensor, first_micro: int) -> None:
        """One optimizer step: accumulate micro-batches, unscale, clip, step, update. No host sync."""
        accum = self.cfg.grad_accum
        for micro in range(accum):
            batch = self.batches.batch(order, first_micro + micro)
            if self.task.tokens_key is not None:
                self._sums.add_tokens(batch[self.task.tokens_key])
            sync = contextlib.nullcontext() if micro == accum - 1 or not self.dist.enabled else self.model.no_sync()
            with sync:
                with self.plan.autocast():  # forward + loss only
                    loss = self.task.loss(self.model, batch)
                self.scaler.scale(loss / accum if accum > 1 else loss).backward()
            self._sums.add_loss(loss.detach())
            if self._watch.armed:
                self._watch.flag_loss(loss.detach())
        # The norm is needed to clip, and in fp16 to count overflows; otherwise it is only measured on the
        # steps that are logged, so plain fp32/bf16 steps pay nothing for it.
        logged = (self.step + 1) % self.cfg.log_interval == 0
        if self.plan.use_scaler or self.cfg.grad_clip > 0 or logged:
            self.scaler.unscale_(self.optimizer)  # unscale BEFORE clipping: clip the true gradient norm
            max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
            norm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), max_norm)
            self._grad_norm = norm
            if self.plan.use_scaler:
                self._sums.add_skipped(norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()

    def _after_step(self, epoch_done: bool) -> None:
        cfg = self.cfg
        last = self.step >= self.total_steps
        if self.step % cfg.log_interval == 0 or last:
            self._log()
        due_eval = (cfg.eval_interval and self.step % cfg.eval_interval == 0) or (not cfg.eval_interval and epoch_done)
        due_checkpoint = cfg.checkpoint_interval and self.step % cfg.checkpoint_interval == 0
        if last or not (due_eval or due_checkpoint):
            return
        side_work_started = time.perf_counter()
        if due_eval:
            self.evaluate()
        if due_checkpoint:
            self.save_checkpoint()
        self._interval_start += time.perf_counter() - side_work_started  # throughput counts training time only

    def _log(self) -> None:
        """Read the accumulated metrics back (the one host sync of an interval) and emit StepMetrics."""
        readout = self._sums.read(self.dist)  # syncs the device, once per log interval
        now = time.perf_counter()
        seconds = now - self._interval_start
        micro = self._interval_steps * self.cfg.grad_accum
        samples = micro * self.cfg.batch_size * self.dist.world_size
        self._train_seconds += seconds
        self._samples_done += samples
        loss = readout.loss
        new_skips = readout.skipped
        self.skipped_steps += new_skips
        scale = float(self.scaler.get_scale()) if self.plan.use_scaler else None
        source = self._overflow_source(new_skips)
        self._check_health(loss, new_skips, scale)
        self.last_loss = loss
        grad_norm = float(self._grad_norm) if self._grad_norm is not None else None
        self._emit(StepMetrics(
            step=self.step, epoch=self._display_epoch(), loss=loss, lr=self.optimizer.param_groups[0]["lr"],
            samples_per_second=samples / seconds if seconds > 0 else 0.0, grad_scale=scale,
            grad_norm=grad_norm, skipped_steps=self.skipped_steps, memory_bytes=memory_in_use(self.device),
            elapsed_seconds=now - self.started, nonfinite_source=source,
            tokens_per_second=(readout.tokens * self.dist.world_size / seconds
                               if self.task.tokens_key is not None and seconds > 0 else None),
        ))
        self._interval_steps = 0
        self._interval_start = now  # reporting (emit, metrics file) counts as training time: no flattering

    def _overflow_source(self, new_skips: int) -> str | None:
        """Arm the inf/NaN hooks after the first overflow; report what they caught; disarm once quiet."""
        if not self.plan.use_scaler:
            return None
        source = self._watch.first_source() if self._watch.armed else None
        if new_skips and not self._watch.armed:
            self._watch.arm()
        elif not new_skips and self._watch.armed:
            self._watch.disarm()
        return source

    def _check_health(self, loss: float, new_skips: int, scale: float | None) -> None:
        if not self.plan.use_scaler and not np.isfinite(loss):
            bad = first_nonfinite_parameter(self.raw_model)
            where = f" (parameter {bad} is now non-finite)" if bad else ""
            raise RunFailed(
                f"loss became {loss} in {self.plan.mode} between steps {self.step - self._interval_steps} and "
                f"{self.step}{where}; the last good checkpoint is kept. Try a lower lr (now {self.cfg.lr:g}) or "
                f"grad_clip"
            )
        if self.plan.use_scaler and new_skips >= self._interval_steps and scale is not None and scale < 2.0**-14:
            raise RunFailed(
                f"fp16: every step since step {self.step - self._interval_steps} overflowed and the loss scale fell "
                f"to {scale:g}; the model diverged. Try bf16, a lower lr or grad_clip"
            )

    def evaluate(self, split: str = "val") -> dict:
        """Metrics on the validation (or test) split; rank 0 computes, under no_grad and the run's autocast."""
        if split == "val":
            self._last_eval_step = self.step
        if not self.dist.is_main:
            return {}
        model = self.raw_model
        model.eval()
        with torch.no_grad(), self.plan.autocast():
            metrics = self.task.evaluate(model, self.val if split == "val" else self.test, self.cfg.batch_size)
        model.train()
        if split == "val":
            self.last_metrics = metrics
        self._emit(EvalMetrics(step=self.step, epoch=self._display_epoch(), split=split, metrics=metrics))
        return metrics

    def save_checkpoint(self) -> str | None:
        """Write checkpoint.pt atomically (rank 0 only) and emit CheckpointSaved."""
        if not self.dist.is_main:
            return None
        path = ckpt.save_checkpoint(self.checkpoint_path, self.state_dict())
        self._saved_checkpoint = str(path)
        self._emit(CheckpointSaved(step=self.step, path=str(path)))
        return str(path)

    def state_dict(self) -> dict:
        """The whole resumable state as plain containers and tensors (see core.engine.run_state)."""
        return run_state.capture(self)

    def cleanup(self, ended_normally: bool = False) -> None:
        if hasattr(self, "_watch"):
            self._watch.disarm()
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        if self.dist.enabled:
            if hasattr(self, "model"):  # DDP's reducer holds the process group and its pending work
                self.model = self.raw_model
            destroy_process_group(agree=ended_normally)

    # ----------------------------------------------------------------- helpers
    def _device_info(self) -> DeviceInfo:
        devices = self._devices if self._devices is not None else list_devices()
        spec = self.cfg.device
        if self.dist.enabled and spec.startswith(("cuda", "auto")) and any(d.type == "cuda" for d in devices):
            spec = f"cuda:{self.dist.local_rank}"  # one GPU per local rank
        info = device_info(spec, devices)
        if info.type == "cuda" and info.memory_free is None:  # this run's GPU only (see list_devices)
            info = dataclasses.replace(info, memory_free=cuda_free_memory(torch.device(info.id).index or 0))
        return info

    def _keep_on_host(self) -> bool:
        """Training data that would take over half the free GPU memory stays pinned on the host."""
        if self.device.type != "cuda":
            return False
        free = self.device_info.memory_free or 0
        size = sum(t.numel() * t.element_size() for t in self.data.train.values())
        return size > free // 2

    def _wrap_ddp(self, model: torch.nn.Module) -> torch.nn.Module:
        if not self.dist.enabled:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def _display_epoch(self) -> int:
        """1-based epoch the latest step belongs to (what users read as 'epoch 2/5')."""
        return max(1, -(-self.step // self.steps_per_epoch))

    def _stop_requested(self) -> bool:
        """Under DDP every rank must stop at the same step, so they agree: rank 0 broadcasts its stop flag
        and how many steps until the next agreement, chosen so agreements come about every
        STOP_AGREE_SECONDS (and at least every log interval) whatever the log interval. A stop lands within
        about that long even when logs are minutes apart, and fast steps don't sync the host every step."""
        if not self.dist.enabled:
            return self.control.stop_requested
        if self.step < self._next_stop_agreement:
            return False
        now = time.perf_counter()
        every = 1
        if self.dist.is_main and self._last_stop_agreement is not None:
            at, step = self._last_stop_agreement
            if self.step > step:
                seconds_per_step = max((now - at) / (self.step - step), 1e-9)
                every = int(min(self.cfg.log_interval, max(1.0, STOP_AGREE_SECONDS / seconds_per_step)))
        stop, every = broadcast_ints([int(self.control.stop_requested), every], self.dist, self.device)
        self._last_stop_agreement = (now, self.step)
        self._next_stop_agreement = self.step + max(1, every)
        return bool(stop)

    def _pause(self) -> None:
        paused_at = time.perf_counter()
        self.control.wait_while_paused()
        self._interval_start += time.perf_counter() - paused_at  # paused time is not training time

    def _run_started(self) -> RunStarted:
        return RunStarted(
            task=self.cfg.task, device=str(self.device), device_name=self.device_info.name,
            precision=self.plan.mode, autocast_dtype=self.plan.compute_dtype_name,
            param_dtype=str(next(self.raw_model.parameters()).dtype).removeprefix("torch."),
            scaler=self.plan.use_scaler, param_count=self.param_count, total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch, start_step=self.step, config=self.cfg.to_dict(),
            ceiling=dict(self.data.ceiling), baseline=dict(self.data.baseline), tokens_key=self.task.tokens_key,
            notes=list(self.notes),
        )

    def _end(self, status: str, message: str, details: str = "") -> RunEnded:
        rate = self._samples_done / self._train_seconds if self._train_seconds > 0 else None
        ended = RunEnded(
            status=status, message=message, step=self.step, epoch=self._display_epoch(), final_loss=self.last_loss,
            metrics=dict(self.last_metrics), checkpoint=self._saved_checkpoint, samples_per_second=rate,
            elapsed_seconds=time.perf_counter() - self.started, skipped_steps=self.skipped_steps,
            test_metrics=dict(self.test_metrics), details=details,
        )
        self._emit(ended)
        return ended

    def _emit(self, event: Event) -> None:
        if not self.dist.is_main:
            return
        if self._metrics_file is not None:
            self._metrics_file.write(json.dumps(event_to_dict(event), default=str) + "\n")
            self._metrics_file.flush()
        if self.sink is not None:
            self.sink(event)


def train(config: RunConfig, sink: Sink | None = None, control: RunControl | None = None, **kwargs) -> RunEnded:
    """Run `config` to the end; see Trainer."""
    return Trainer(config, sink=sink, control=control, **kwargs).run()

