"""The real trials (torch, imported when they run): `TrainerWork`, a set-up Trainer's own steps and an evaluation
pass at the batch tried, and `find_batch_sizes`, every requested precision mode searched on a fresh model (see
core.lab.batch_finder)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.config import RunConfig
from core.errors import ConfigError
from core.lab.batch_finder.probes import make_probe
from core.lab.batch_finder.results import (
    DEFAULT_MARGIN,
    DEFAULT_STEPS,
    DEFAULT_TOLERANCE,
    MAX_BATCH_CAP,
    BatchFinderProgress,
    BatchFinderResult,
    ModeResult,
    ProgressCallback,
    Trial,
    compare_to_fp32,
)
from core.lab.batch_finder.search import check_settings, search_mode
from core.text import size

if TYPE_CHECKING:
    from core.devices import DeviceInfo
    from core.engine.control import RunControl
    from core.lab.batch_finder.probes import MemoryProbe


class TrainerWork:
    """Trials on a set-up Trainer: `steps` of the trainer's own optimizer step at the batch, then one evaluation
    pass of the validation split (the first `eval_rows` rows) in batches of that size. A Dataset split is drawn
    as the run draws it: a DataLoader of the batch tried (core.data.loaders.LoaderBatches, the run's loader
    settings), and the validation split's first rows as evaluation gets them (DatasetSplit)."""

    def __init__(self, trainer, steps: int, probe: MemoryProbe, eval_rows: int | None = None):
        from core.data.batching import split_length
        from core.data.loaders import is_dataset

        self.trainer, self.steps, self.probe = trainer, steps, probe
        self.train_split = trainer.batches.split
        self.loader = trainer.batches if is_dataset(self.train_split) else None  # a Dataset's LoaderBatches
        rows = split_length(trainer.val)
        self.eval_rows = rows if eval_rows is None else min(rows, eval_rows)
        if isinstance(trainer.val, dict):
            self.val = {key: value[: self.eval_rows] for key, value in trainer.val.items()}
        else:  # a DatasetSplit: all of it as it is, or its first rows
            self.val = trainer.val if self.eval_rows == rows else trainer.val.head(self.eval_rows)

    def _batches(self, batch: int):
        """The trainer's training batches at `batch` rows: EpochBatches of its tensors, or a DataLoader."""
        t = self.trainer
        if self.loader is None:
            from core.data.batching import EpochBatches

            return EpochBatches(self.train_split, batch, t.cfg.seed, t.device)
        from core.data.loaders import LoaderBatches

        return LoaderBatches(
            self.train_split, batch, t.cfg.seed, t.device, settings=self.loader.settings, what=self.loader.what
        )

    def run(self, batch: int) -> tuple[float, int]:
        from core.engine.distributed import DistContext
        from core.engine.evaluation import evaluate_split
        from core.engine.precision import matmul_precision
        from core.engine.step_metrics import StepAccumulator

        t = self.trainer
        t.batches = self._batches(batch)
        try:
            sums = StepAccumulator(t.device, count_only_finite=t.plan.use_scaler)  # the steps add their losses here
            order, per_epoch = t.batches.order(0), t.batches.batches_per_epoch  # one micro-batch per step
            with matmul_precision(t.plan):
                began = time.perf_counter()
                t.train_step(order, 0, sums)
                timed = self.steps - 1
                if timed:  # the first step is warm-up: the optimizer allocates its state there
                    self.probe.synchronize()
                    began = time.perf_counter()
                    for step in range(1, self.steps):
                        t.train_step(order, step % per_epoch, sums)
                self.probe.synchronize()
                seconds = time.perf_counter() - began
                if self.eval_rows:
                    val = self.val if isinstance(self.val, dict) else self.val.batched(batch)
                    evaluate_split(t.task, t.raw_model, val, batch, DistContext(), t.plan.autocast)
        finally:
            close = getattr(t.batches, "close", None)  # a DataLoader's workers end with the trial
            if close is not None:
                close()
        return seconds, batch * max(1, timed)

    def recover(self) -> None:
        """Drop gradients, the optimizer's state (possibly half-built) and the GradScaler's per-step state."""
        t = self.trainer
        t.optimizer.zero_grad(set_to_none=True)
        t.optimizer.state.clear()
        t.scaler = t.plan.make_scaler()
        t.raw_model.train()


def find_batch_sizes(
    config: RunConfig,
    modes: Sequence[str] | None = None,
    *,
    margin: float = DEFAULT_MARGIN,
    steps: int = DEFAULT_STEPS,
    tolerance: float = DEFAULT_TOLERANCE,
    start: int | None = None,
    max_batch: int | None = None,
    eval_rows: int | None = None,
    limit_bytes: int | None = None,
    probe: MemoryProbe | None = None,
    devices: list[DeviceInfo] | None = None,
    progress: ProgressCallback | None = None,
    control: RunControl | None = None,
) -> BatchFinderResult:
    """The largest batch of `config`'s task in each requested precision mode (None = every mode; fp32 first,
    modes the device cannot run are 'skipped' with its reason).

    `start`: the first batch (default the config's batch size); `max_batch`: the cap (default the training rows,
    at most 65,536); `eval_rows`: rows of each trial's evaluation pass (default the whole validation split);
    `limit_bytes`: use this limit instead of the device's; `probe`: the memory probe (default the device's;
    FakeProbe in tests). Nothing persistent is written.
    """
    check_settings(margin, steps, tolerance, start, max_batch)
    config = config.validate()
    from core.devices import device_info, list_devices
    from core.engine.control import RunControl
    from core.engine.trainer import Trainer
    from core.lab.precision_sweep import requested_modes

    control = control or RunControl()
    began = time.perf_counter()
    devices = devices if devices is not None else list_devices()
    info = device_info(config.device, devices)
    compiled = config.compile  # tried eager: a compiled model would recompile for every batch size tried
    config = config.replace(device=info.id, compile=False)
    order = requested_modes(list(modes) if modes else None)
    first = start or config.batch_size
    from core.devices import torch_device

    probe = probe if probe is not None else make_probe(torch_device(info))
    results: list[ModeResult] = []
    facts: dict = {}
    for index, mode in enumerate(order):
        if control.stop_requested:
            results.append(ModeResult(mode=mode, status="stopped", reason="stopped by request"))
        elif mode not in info.precisions:
            results.append(
                ModeResult(
                    mode=mode, status="skipped", reason=info.unsupported.get(mode, f"not supported on {info.id}")
                )
            )
        else:
            if progress:
                progress(BatchFinderProgress(mode, index, len(order), "setup"))
            results.append(
                _search_one_mode(
                    Trainer,
                    config,
                    info,
                    mode,
                    index,
                    len(order),
                    first,
                    max_batch,
                    margin,
                    steps,
                    tolerance,
                    eval_rows,
                    limit_bytes,
                    probe,
                    devices,
                    progress,
                    control,
                    facts,
                )
            )
        if progress:
            progress(BatchFinderProgress(mode, index, len(order), "done", result=results[-1]))
    compare_to_fp32(results)
    notes = []
    if probe.estimate:
        notes.append(
            "CPU figures are an estimate: the process's RSS growth against the RAM available when each "
            "mode started; other programs can take that RAM later"
        )
    if limit_bytes:
        notes.append(f"limit set to {size(limit_bytes)} instead of the device's")
    if compiled:
        notes.append(
            "batch sizes were tried eager (compile is off here: each size tried would be a recompile); "
            "compiled training usually keeps fewer activations, so these sizes err on the safe side"
        )
    return BatchFinderResult(
        task=config.task,
        task_options=dict(config.task_options),
        device=info.id,
        device_name=info.name,
        device_type=info.type,
        memory_source=probe.source,
        estimate=probe.estimate,
        margin=margin,
        steps=steps,
        tolerance=tolerance,
        start=first,
        max_batch=facts.get("max_batch", max_batch or 0),
        eval_rows=facts.get("eval_rows", 0),
        modes=results,
        seconds=time.perf_counter() - began,
        notes=notes,
    )


def _search_one_mode(
    trainer_class,
    config: RunConfig,
    info: DeviceInfo,
    mode: str,
    index: int,
    total: int,
    start: int,
    max_batch: int | None,
    margin: float,
    steps: int,
    tolerance: float,
    eval_rows: int | None,
    limit_bytes: int | None,
    probe: MemoryProbe,
    devices,
    progress,
    control,
    facts: dict,
) -> ModeResult:
    from core.data.batching import split_length

    failed = ""
    with tempfile.TemporaryDirectory(prefix="amp-fit-batch-") as out_dir:
        # A throwaway run: constant lr, one micro-batch per step, no evaluation, checkpoint or best tracking.
        cfg = config.replace(
            precision=mode,
            batch_size=start,
            grad_accum=1,
            out_dir=out_dir,
            schedule="constant",
            warmup_steps=0,
            max_steps=steps,
            log_interval=1_000_000,
            eval_interval=1_000_000_000,
            checkpoint_interval=0,
            checkpoint_minutes=0.0,
            keep_best=0,
            early_stop_patience=0,
            early_stop_divergence=0.0,
            tensorboard=False,
        )
        trainer = trainer_class(cfg, devices=devices)
        work = None
        try:
            try:
                trainer.setup()  # a user task's loss and metrics returns checked, as a run does
            except ConfigError as exc:
                if exc.field == "batch_size":  # the start batch exceeds the training rows
                    raise ConfigError("start", str(exc).split(": ", 1)[1]) from None
                raise
            rows = split_length(trainer.batches.split)
            cap = min(max_batch or MAX_BATCH_CAP, rows)
            facts["max_batch"] = cap
            work = TrainerWork(trainer, steps, probe, eval_rows)
            facts["eval_rows"] = work.eval_rows

            def on_trial(trial: Trial, count: int, budget: int) -> None:
                if progress:
                    progress(
                        BatchFinderProgress(mode, index, total, "trial", trial=trial, trials=count, budget_bytes=budget)
                    )

            result = search_mode(
                work, probe, mode, min(start, cap), cap, margin, tolerance, control, on_trial, limit_bytes
            )
            result.compute_dtype = trainer.plan.compute_dtype_name
            if cap < (max_batch or MAX_BATCH_CAP) and result.capped:
                result.reason = f"all {rows:,} training rows fit in one batch: the data, not memory, is the limit"
        except probe.oom_errors as exc:  # the model and data themselves do not fit
            failed = (str(exc).strip().splitlines() or ["out of memory"])[0][:200]
        finally:
            trainer.cleanup()
            work = trainer = None
            probe.release()
    if failed:
        return ModeResult(mode=mode, status="failed", reason=f"setting up the model ran out of memory: {failed}")
    return result
