"""The training loop: setup -> train -> evaluate -> checkpoint (docs/ARCHITECTURE.md, "The hot loop").

Events go to a `sink` callable (core.engine.reporting); a `RunControl` stops or pauses the run; how far it has
come is its TrainState (core.engine.run_state). Nothing in a step reads a device value back to the host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from time import monotonic

import torch

from core.config import RunConfig
from core.devices import DeviceInfo, cuda_free_memory, device_info, list_devices, torch_device
from core.engine import checkpoints as ckpt
from core.engine import compiling, data_setup, run_state
from core.engine.amp_health import NonFiniteWatch, RunFailed, check_health, nonfinite_fixes, nonfinite_source
from core.engine.control import RunControl
from core.engine.distributed import (
    DistContext,
    StopAgreement,
    destroy_process_group,
    gather_peers,
    init_process_group,
    is_peer_failure,
    task_loss,
    wrap_ddp,
)
from core.engine.due import Deadlines, Due, next_due, planned_steps
from core.engine.evaluation import Evaluating
from core.engine.events import Event, RunEnded, RunPaused, RunResumed, RunStarted, StepMetrics
from core.engine.optimizers import build_optimizer, build_scheduler, optimizer_notes, task_optimizer_note
from core.engine.precision import matmul_precision, resolve_precision
from core.engine.prepare import prepare_run, resume_notes, with_folder
from core.engine.reporting import EventLog, Sink, TrainingClock, barely_trained
from core.engine.run_folder import HELD_ENV, RUN_NOTE_ENV, ClaimedFolder, claim_run_folder, describe_os_error
from core.engine.run_record import write_note
from core.engine.run_state import TrainState, seed_everything
from core.engine.step_metrics import StepAccumulator, gradient_norm
from core.engine.threads import apply_threads, choose_threads, machine_facts
from core.errors import ConfigError
from core.tasks import create_task, task_checks

__all__ = ["RunFailed", "Sink", "Trainer", "seed_everything", "train"]

NORM_SECONDS = 0.1  # a logged step measures the gradient norm at most this often without clipping or fp16
_NO_CONTEXT = contextlib.nullcontext()  # reusable: the step enters it when there is nothing to enter


class Trainer(Evaluating):
    """One run of one config; `run()` returns the RunEnded event (also sent to the sink). Bad input raises from
    `run()` before the run starts; anything that goes wrong once it has started ends the run as `failed`."""

    def __init__(
        self,
        config: RunConfig,
        sink: Sink | None = None,
        control: RunControl | None = None,
        resume_from: str | Path | None = None,
        dist_ctx: DistContext | None = None,
        devices: list[DeviceInfo] | None = None,
        restart: dict | None = None,
        notes: Sequence[str] = (),
        resume_state: dict | None = None,
    ):
        self.cfg = config  # no output folder: setup names one under the runs root by the mode that runs
        self.sink = sink
        self.control = control or RunControl()
        self.resume_from = Path(resume_from) if resume_from else None
        self._resume_state = resume_state  # the checkpoint at resume_from, when the caller has loaded it
        self.dist = dist_ctx or DistContext()
        self._devices = devices
        self._restart = restart  # a restart's record (core.cli.elastic), reported with RunStarted
        self.notes: list[str] = []  # reported with RunStarted
        if self.dist.is_main and self.dist.enabled and os.environ.get(RUN_NOTE_ENV):
            self.notes.append(os.environ[RUN_NOTE_ENV])  # e.g. the torchrun launcher chose another folder
        self.notes += notes
        self.folder: ClaimedFolder | None = None  # rank 0 claims the run folder in setup (see run_folder)
        self.events = EventLog(self.dist.is_main)
        self.state = TrainState()
        self.test_metrics: dict = {}
        self.grad_norm: torch.Tensor | None = None  # of the latest logged (or clipped) step, on the device
        self._norm_at = float("-inf")  # when a logged step last measured the gradient norm (see _norm_wanted)
        self._deadlines = Deadlines(0, 0, monotonic)  # the timed checkpoint and time limit, set when training starts
        self._ending = False
        self._peers: list[tuple[str, int]] = []  # (host, pid) of every rank, to name one that dies

    # ----------------------------------------------------------------- phases
    def run(self) -> RunEnded:
        """Set up, train until done, stopped or failed, write the final checkpoint, report RunEnded; the process
        group is left whatever happens."""
        ended: RunEnded | None = None
        try:
            self.setup()
            if self.resume_from:  # here, not in setup(): evaluate and export rebuild finished runs with setup()
                state, name = self.state.state_dict(), str(self.resume_from)
                run_state.check_resume_target(self.cfg, state, name, self.total_steps)
            with matmul_precision(self.plan):
                ended = self._train_and_finish()
            return ended
        except BaseException as exc:  # e.g. Ctrl+C in a step: its frames hold DDP's wrapper (see release_ddp)
            if self.dist.enabled:
                traceback.clear_frames(exc.__traceback__)
            raise
        finally:
            self.cleanup(ended_normally=ended is not None and ended.status != "failed")

    def setup(self) -> None:
        """Build the run (the task's own code failing as a UserCodeError), then check what a user task's methods
        return on one batch."""
        with task_checks.user_code_errors():
            self._build()
        task_checks.check_returns(
            self.task, self.raw_model, self.data, self.device, self.plan.autocast, self.cfg.batch_size
        )

    def _build(self) -> None:
        """Validate, pick the device once, build task, data, model, optimizer, scheduler and scaler."""
        self.cfg.validate()
        resume_state, self._resume_state = self._resume_state, None
        checked = resume_state is not None  # by prepare_run, which read it: its notes are the caller's
        if not checked and self.resume_from:
            resume_state = ckpt.load_checkpoint(self.resume_from)
        self.cfg, kept = run_state.resumed_config(self.cfg, resume_state, str(self.resume_from))  # its task, loss
        self.notes.extend(kept)
        self.task = create_task(self.cfg.task, self.cfg.task_options)
        self.device_info = self._device_info()
        self.device = torch_device(self.device_info)
        self.plan = resolve_precision(
            self.cfg.precision, self.device_info, getattr(self.cfg, "fp8_recipe", "tensorwise")
        )
        if resume_state is not None and not checked:
            name, world = str(self.resume_from), self.dist.world_size
            self.notes += resume_notes(resume_state, name, self.cfg, self.device_info, self.plan.mode, world)
        cfg = self._claim_folder()  # after the plan: a new folder is named by the mode that runs (bf16, not auto)
        if cfg.threads:
            apply_threads(cfg.threads)  # as given, before the data is built
        init_process_group(self.dist, self.device)
        self._peers = gather_peers(self.dist, self.device)
        seed_everything(cfg.seed)
        self.data = task_checks.checked_data(self.task, self.task.use_config(cfg).load_data(cfg.data, cfg.seed))
        self.cfg = cfg = run_state.settled_config(cfg, self.task, self.data.info)  # what loss=auto chose, saved
        self.notes.extend(self.data.notes)  # e.g. long ranking queries trained as shorter lists
        # Refuse a model that cannot fit before allocating it (counted on the meta device), naming the option.
        self.task.check_fits(
            self.data.info,
            self.device,
            cfg.optimizer,
            available=self.device_info.memory_free if self.device.type == "cuda" else None,
            mode=self.plan.mode,
        )
        seed_everything(cfg.seed)  # the same initial model on every rank
        self.raw_model = model = task_checks.built_model(self.task, self.data.info).to(self.device)
        self.notes += self.plan.prepare_model(model, cfg.fp32_modules)  # bf16-pure, fp8, fp32_modules
        self.tracker = self._make_tracker()  # before the per-rank seeds: its probe draws nothing that stays
        seed_everything(cfg.seed + self.dist.rank)  # each rank's own dropout and sampling (see run_state)
        self.param_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if not cfg.threads:
            self._choose_threads()
        # Tensors, or Datasets behind a DataLoader.
        self.val, self.test, self.batches, notes = data_setup.place_data(
            self.data, cfg, self.task.name, self.device, self.dist, self.device_info.memory_free
        )
        self.notes += notes
        self.steps_per_epoch = self.batches.batches_per_epoch // cfg.grad_accum
        if self.steps_per_epoch == 0:
            raise ConfigError(
                "grad_accum",
                f"{cfg.grad_accum} micro-batches per step exceed the "
                f"{self.batches.batches_per_epoch} batches of an epoch",
            )
        self.total_steps, stretched = planned_steps(cfg, self.steps_per_epoch)
        self.notes += [stretched] if stretched and self.dist.is_main else []
        own = task_checks.configured_optimizers(self.task, model, cfg)  # the task's, else the engine's
        self.own_optimizer = own is not None
        if own is None:
            self.optimizer = build_optimizer(model, cfg, self.device)
            self.notes += optimizer_notes(model, cfg, self.plan.mode) if self.dist.is_main else []
            self.scheduler = build_scheduler(self.optimizer, cfg, self.total_steps)
        else:
            self.optimizer, self.scheduler = own
            self.notes += [task_optimizer_note(own[0], own[1], self.plan.mode)] if self.dist.is_main else []
        self.scaler = self.plan.make_scaler()
        if resume_state is not None:
            self._restore(resume_state)
        # Activation checkpointing and torch.compile (its first pass timed here, before the clock starts), then DDP.
        compiled, notes, self.compile_seconds, self.compile_frames = compiling.prepare(
            model, cfg, self.task, self.plan, self.batches, self.state.epoch
        )
        self.notes += notes if self.dist.is_main else []
        self.model = wrap_ddp(compiled, self.dist, self.device)
        self.model.train()
        self._loss = task_loss(self.model, self.task.loss)  # the task sees its own module, DDP or not
        self._watch = NonFiniteWatch(model)
        self._params = [p for p in model.parameters() if p.requires_grad]  # what the step measures or clips

    def _claim_folder(self) -> RunConfig:
        """Rank 0 claims the run folder (see run_folder) before anything is written; the config with its folder."""
        if not str(self.cfg.out_dir).strip():  # a Trainer made without prepare_run: a new folder under the root
            self.cfg = with_folder(self.cfg, device=self.device_info)
        held = os.environ.get(HELD_ENV)
        launcher_holds = self.dist.enabled and held and os.path.abspath(held) == os.path.abspath(self.cfg.out_dir)
        if not self.dist.is_main or self.folder is not None or launcher_holds:
            return self.cfg  # another rank's to claim, claimed already, or torchrun's launcher holds it for the run
        self.folder = claim_run_folder(self.cfg.out_dir, self.resume_from)
        if self.folder.note:
            self.notes.append(self.folder.note)
            self.cfg = self.cfg.replace(out_dir=str(self.folder.path))
        return self.cfg

    def _train_and_finish(self) -> RunEnded:
        self.clock = TrainingClock()
        if self.dist.is_main:
            self._open_run_files()
        self._emit(self._run_started())
        try:
            status, message = self.train()
            if status == "completed" and self._last_eval_step != self.state.step:
                self.evaluate()
            if status == "completed" and self.test is not None:
                self.test_metrics = self.evaluate("test")
            self.save_checkpoint()
            if status == "completed" and self.tracker is not None:  # the best weights on test too
                self.best_and_last = self._best_and_last(self.tracker)
        except RunFailed as exc:
            kept, precisions = self.state.saved.path, self.device_info.precisions
            fixes = nonfinite_fixes(
                self.plan.mode, self.cfg, precisions, str(self.out_dir), kept, exc.module, self.own_optimizer
            )
            return self._end("failed", str(exc), fixes=fixes if exc.nonfinite else [])
        except OSError as exc:  # a file of the run could not be written: one line naming it and the cause
            where = f" {exc.filename}" if exc.filename else ""
            return self._end("failed", f"could not write{where}: {describe_os_error(exc)}; {self._kept()}")
        except Exception as exc:  # anything else: the run fails, the app stays usable
            from core.engine.diagnosis import explain_exception

            if self.dist.enabled and is_peer_failure(exc):
                return self._end("failed", self._peer_failed(), details=traceback.format_exc())
            explained = explain_exception(
                exc, self.state.step, self.cfg.batch_size, self.raw_model, self.batches, self.device
            )
            return self._end("failed", explained, details=traceback.format_exc())
        return self._end(status, message)

    def _open_run_files(self) -> None:
        """config.toml and metrics.jsonl, before RunStarted: one that can't be written is a ConfigError."""
        path = self.out_dir / "config.toml"
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.cfg.save_toml(path)
            if self.cfg.note.strip():  # e.g. what a fix's re-run changed (core.engine.amp_health.nonfinite_fixes)
                self.notes.append(write_note(self.out_dir, self.cfg.note))
            path = self.out_dir / ckpt.METRICS_FILE
            self.events.open(path, tensorboard=self.cfg.tensorboard, control=self.control, sink=self.sink)
        except OSError as exc:
            raise ConfigError("out_dir", f"could not write {path}: {describe_os_error(exc)}") from None
        except ValueError as exc:  # a note that is not text
            raise ConfigError("note", str(exc)) from None

    def train(self) -> tuple[str, str]:
        """Optimizer steps until total_steps or a stop request: (status, message). Between steps, one attribute
        read and one clock read stand for the control requests and the wall clocks, and the next step with work
        after it is known in advance (next_due); under DDP the ranks agree on a stop before every step."""
        self._deadlines = deadlines = Deadlines(self.cfg.checkpoint_minutes, self.cfg.time_limit_minutes, monotonic)
        state, cfg, spe, total = self.state, self.cfg, self.steps_per_epoch, self.total_steps
        stop = StopAgreement(
            self.control,
            self.dist,
            self.device,
            cfg.log_interval,
            state.step,
            save_due=lambda: deadlines.clock() >= deadlines.save_at,  # rank 0's clocks decide (see StopAgreement)
            time_up=lambda: deadlines.clock() >= deadlines.end_at,
        )
        self._sums = sums = StepAccumulator(self.device, count_only_finite=self.plan.use_scaler)
        control, clock, body = self.control, self.clock, self._optimizer_step
        check_every_step = self.dist.enabled or not isinstance(control, RunControl)
        clocks_due = deadlines.next_at
        due = next_due(state.step, cfg, spe, total)
        while state.step < total:
            order = self.batches.order(state.epoch)
            for index in range(state.step % spe, spe):
                if check_every_step or control.requested or deadlines.clock() >= clocks_due:
                    if control.paused:
                        self._pause()
                    if stop(state.step):
                        return "stopped", f"stopped at step {state.step:,}"
                    if stop.out_of_time:
                        return "completed", (
                            f"time limit of {cfg.time_limit_minutes:g} min reached at step {state.step:,} of "
                            f"{total:,}; evaluated, tested and saved as at the end"
                        )
                    if stop.save and state.saved.step != state.step:  # checkpoint_minutes have passed
                        side_work_started = time.perf_counter()
                        self.save_checkpoint()
                        clock.leave_out(side_work_started)
                    clocks_due = deadlines.next_at
                measure_norm = state.step + 1 == due.step and due.log and self._norm_wanted(due.last)
                body(order, index, sums, measure_norm)
                state.step += 1
                clock.interval_steps += 1
                if state.step == due.step:
                    self._after_step(due)
                    if self._early_stop:
                        return "completed", self._early_stop
                    if due.last:
                        break
                    due = next_due(state.step, cfg, spe, total)
            if state.step % spe == 0:
                state.epoch += 1
        return "completed", f"completed {state.step:,} steps"

    def _norm_wanted(self, last: bool) -> bool:
        """Whether the logged step about to run measures its gradient norm without clipping or fp16 (which do on
        every step): at most every NORM_SECONDS, and on the last step."""
        now = monotonic()
        if last or now - self._norm_at >= NORM_SECONDS:
            self._norm_at = now
            return True
        self.grad_norm = None  # clipping and fp16 set it again in the step
        return False

    def _optimizer_step(
        self, order: torch.Tensor, index: int, sums: StepAccumulator, measure_norm: bool = False
    ) -> None:
        """One optimizer step, the `index`-th of an epoch (its grad_accum micro-batches of `order`), its losses,
        overflows and token counts added to `sums`. No host sync; the gradient norm is measured only to clip, to
        count fp16 overflows, or when `measure_norm` asks."""
        cfg, plan, task = self.cfg, self.plan, self.task
        accum = cfg.grad_accum
        first_micro = index * accum
        scaler = self.scaler if self.scaler.is_enabled() else None
        tokens_key = task.tokens_key
        no_sync = getattr(self.model, "no_sync", None) if accum > 1 and self.dist.enabled else None  # DDP's
        for micro in range(accum):
            batch = self.batches.batch(order, first_micro + micro)
            if tokens_key is not None:
                sums.add_tokens(batch[tokens_key])
            sync = no_sync() if no_sync is not None and micro < accum - 1 else _NO_CONTEXT
            with sync:
                if plan.autocast_dtype is None:
                    loss = self._loss(batch)
                else:
                    with plan.autocast():  # forward + loss only
                        loss = self._loss(batch)
                scaled = loss / accum if accum > 1 else loss
                (scaled if scaler is None else scaler.scale(scaled)).backward()
            loss = loss.detach()
            sums.add_loss(loss)
            if self._watch.armed:
                self._watch.flag_loss(loss)
        clip = cfg.grad_clip
        if plan.use_scaler or clip > 0 or measure_norm:
            if scaler is not None:
                scaler.unscale_(self.optimizer)  # unscale BEFORE clipping: clip the true gradient norm
            if clip > 0:
                self.grad_norm = torch.nn.utils.clip_grad_norm_(self._params, clip)
            else:
                self.grad_norm = gradient_norm(self._params)
            if plan.use_scaler:
                sums.add_skipped(self.grad_norm)
        if scaler is None:
            self.optimizer.step()
        else:
            scaler.step(self.optimizer)
            scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()

    train_step = _optimizer_step  # core.lab's finders drive the steps themselves after setup()

    def _after_step(self, due: Due) -> None:
        """The work `due` names for the step just taken: the log, the evaluation and checkpoint (not timed)."""
        if due.log:
            self._log()
        if not (due.evaluate or due.checkpoint):
            return
        side_work_started = time.perf_counter()
        if due.evaluate:
            self.evaluate()
        if due.checkpoint:
            self.save_checkpoint()
        self.clock.leave_out(side_work_started)  # throughput counts training time only

    def _log(self) -> None:
        """Read the accumulated metrics back (the one host sync of an interval) and emit StepMetrics."""
        readout = self._sums.read(self.dist)  # syncs the device, once per log interval
        state, clock, cfg, world = self.state, self.clock, self.cfg, self.dist.world_size
        steps = clock.interval_steps
        samples = steps * cfg.grad_accum * cfg.batch_size * world
        seconds, now = clock.close_interval(samples)
        state.skipped_steps += readout.skipped
        scale = float(self.scaler.get_scale()) if self.plan.use_scaler else None
        source = self._watch.after_interval(readout.skipped) if self.plan.use_scaler else None
        check_health(
            self.plan,
            self.raw_model,
            readout.loss,
            readout.skipped,
            scale,
            state.step,
            steps,
            cfg.lr,
            source if self.plan.use_scaler else self._nonfinite_source,
        )
        state.last_loss = readout.loss
        counts_tokens = self.task.tokens_key is not None and seconds > 0
        event = StepMetrics(
            step=state.step,
            epoch=self.display_epoch(),
            loss=readout.loss,
            lr=self.optimizer.param_groups[0]["lr"],
            samples_per_second=samples / seconds if seconds > 0 else 0.0,
            grad_scale=scale,
            grad_norm=float(self.grad_norm) if self.grad_norm is not None else None,
            skipped_steps=state.skipped_steps,
            memory_bytes=clock.memory(self.device, fresh=state.step >= self.total_steps),
            elapsed_seconds=now - clock.started,
            nonfinite_source=source,
            tokens_per_second=readout.tokens * world / seconds if counts_tokens else None,
        )
        self._emit(event)

    def _nonfinite_source(self) -> str | None:
        """amp_health.nonfinite_source on the epoch's first batch, the last good checkpoint's weights put back."""
        model, saved = ckpt.unwrap_model(self.raw_model), self.state.saved.path

        def forward() -> torch.Tensor:
            with self.plan.autocast() if self.plan.autocast_dtype is not None else _NO_CONTEXT:
                return self._loss(self.batches.batch(self.batches.order(self.state.epoch), 0))

        restore = (lambda: model.load_state_dict(ckpt.load_checkpoint(saved)["model"])) if saved else None
        return nonfinite_source(self._watch, model, forward, restore)

    def cleanup(self, ended_normally: bool = False) -> None:
        if hasattr(self, "_watch"):
            self._watch.disarm()
        self.events.close()
        data_setup.release(getattr(self, "batches", None))  # a DataLoader's workers
        if self.folder is not None:  # a run that never started leaves no empty folder behind
            self.folder.release(remove_if_unused=not hasattr(self, "clock"))
        if self.dist.enabled:
            self.release_ddp()
            destroy_process_group(agree=ended_normally)

    def release_ddp(self) -> None:
        """Let go of DDP's wrapper while the process group is still registered. Freed after the group is destroyed,
        DDP's reducer drops the group's last reference with the GIL held, and the group's destructor joins a gloo
        thread that may be waiting for the GIL: a hang."""
        if isinstance(getattr(self, "model", None), torch.nn.parallel.DistributedDataParallel):
            self._loss.release()  # task_loss's hold on DDP
            self.model = self.raw_model
            self._loss = task_loss(self.model, self.task.loss)

    # ----------------------------------------------------------------- helpers
    def display_epoch(self) -> int:
        """1-based epoch the latest step belongs to (what users read as 'epoch 2/5')."""
        return max(1, -(-self.state.step // self.steps_per_epoch))

    def _choose_threads(self) -> None:
        """threads = 0: pick the intra-op thread count (core.engine.threads) and say why with RunStarted."""
        cores, load = machine_facts()
        processes = int(os.environ.get("LOCAL_WORLD_SIZE", self.dist.world_size))  # ranks on this machine
        per_sample = data_setup.values_per_sample(self.data.train)
        omp = os.environ.get("OMP_NUM_THREADS")
        choice = choose_threads(0, self.param_count, cores, load, processes, omp, self.cfg.batch_size * per_sample)
        apply_threads(choice.threads)
        if self.dist.is_main:
            self.notes.append(choice.note)

    def _device_info(self) -> DeviceInfo:
        devices = self._devices if self._devices is not None else list_devices()
        spec = self.cfg.device
        if self.dist.enabled and spec.startswith(("cuda", "auto")) and any(d.type == "cuda" for d in devices):
            spec = f"cuda:{self.dist.local_rank}"  # one GPU per local rank
        info = device_info(spec, devices)
        if info.type == "cuda" and info.memory_free is None:  # this run's GPU only (see list_devices)
            info = dataclasses.replace(info, memory_free=cuda_free_memory(torch.device(info.id).index or 0))
        return info

    def _pause(self) -> None:
        """Wait between steps while paused, saying when the pause took effect and when it ended."""
        paused_at = time.perf_counter()
        self._emit(RunPaused(step=self.state.step))
        self.control.wait_while_paused()
        self.clock.leave_out(paused_at)  # paused time is not training time
        if not self.control.stop_requested:
            self._emit(RunResumed(step=self.state.step, paused_seconds=time.perf_counter() - paused_at))

    def _run_started(self) -> RunStarted:
        plan, restart = self.plan, self._restart
        return RunStarted(
            task=self.cfg.task,
            device=str(self.device),
            device_name=self.device_info.name,
            precision=plan.mode,
            autocast_dtype=plan.compute_dtype_name,
            param_dtype=str(next(self.raw_model.parameters()).dtype).removeprefix("torch."),
            scaler=plan.use_scaler,
            param_count=self.param_count,
            total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch,
            start_step=self.state.step,
            config=self.cfg.to_dict(),
            ceiling=dict(self.data.ceiling),
            baseline=dict(self.data.baseline),
            tokens_key=self.task.tokens_key,
            notes=list(self.notes),
            restart={**restart, "step": self.state.step} if restart else {},
            started_at=time.time(),
        )

    def _end(self, status: str, message: str, details: str = "", fixes: list | None = None) -> RunEnded:
        self._ending = True
        state, best = self.state, self.best_and_last
        if status == "completed" and state.step >= self.total_steps:  # its planned length
            note = barely_trained(state.step, state.last_metrics, self.data.baseline, self.task.primary_metric)
            message = f"{message}; {note}" if note else message
        ended = RunEnded(
            status=status,
            message=message,
            step=state.step,
            epoch=self.display_epoch(),
            final_loss=state.last_loss,
            metrics=dict(state.last_metrics),
            checkpoint=state.saved.path,
            samples_per_second=self.clock.samples_per_second,
            elapsed_seconds=time.perf_counter() - self.clock.started,
            skipped_steps=state.skipped_steps,
            test_metrics=dict(self.test_metrics),
            details=details,
            best_test_metrics=dict(best.metrics) if best else {},
            best_step=best.step if best else None,
            checkpoint_advice=best.advice if best else "",
            advised_checkpoint=best.use if best else "",
            fixes=list(fixes or ()),
        )
        self._emit(ended)
        return ended

    def _emit(self, event: Event) -> None:
        self.events.emit(event, self.sink)
        if self.events.failure and not self._ending:  # metrics.jsonl could not be written: end the run
            self._ending = True
            raise RunFailed(f"{self.events.failure}; {self._kept()}")


def train(
    config: RunConfig,
    sink: Sink | None = None,
    control: RunControl | None = None,
    resume_from: str | Path | None = None,
    **kwargs,
) -> RunEnded:
    """Prepare `config` (core.engine.prepare.prepare_run: the checkpoint read once) and run it to the end."""
    devices, world = kwargs.get("devices"), (kwargs.get("dist_ctx") or DistContext.from_env()).world_size
    here = device_info(config.device, devices) if resume_from and devices is not None else None
    run = prepare_run(config.to_dict(), resume=str(resume_from) if resume_from else None, device=here, processes=world)
    notes = [*run.notes, *kwargs.pop("notes", ())]
    return Trainer(
        run.config, sink=sink, control=control, resume_from=resume_from, resume_state=run.state, notes=notes, **kwargs
    ).run()
