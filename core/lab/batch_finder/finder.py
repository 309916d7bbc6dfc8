"""The real trials (torch, imported when they run): `TrainerWork`, a set-up Trainer's own steps and an evaluation
pass at the batch tried, and `find_batch_sizes`, every requested precision mode searched on a fresh model (see
core.lab.batch_finder)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from core.config import RunConfig
from core.errors import ConfigError
from core.lab.batch_finder.probes import make_probe
from core.lab.batch_finder.results import (
    DEFAULT_MARGIN,
    DEFAULT_STEPS,
    DEFAULT_TOLERANCE,
    MAX_BATCH_CAP,
    TIMED_WINDOWS,
    BatchFinderProgress,
    BatchFinderResult,
    ModeResult,
    ProgressCallback,
    Trial,
    compare_to_fp32,
)
from core.lab.batch_finder.search import check_settings, search_mode
from core.lab.timing import on_throwaway_trainer, time_steps
from core.text import size

if TYPE_CHECKING:
    from core.devices import DeviceInfo
    from core.engine.control import RunControl
    from core.lab.batch_finder.probes import MemoryProbe


class TrainerWork:
    """Trials on a set-up Trainer: `steps` of the trainer's own optimizer step at the batch, timed by core.lab.timing
    (split evenly into a warm-up window and up to TIMED_WINDOWS timed ones), then one evaluation pass of the
    validation split (the first `eval_rows` rows) in batches of that size. A Dataset split is drawn as the run draws
    it: a DataLoader of the batch tried (the run's loader settings), the validation split's first rows as evaluation
    gets them (DatasetSplit)."""

    def __init__(self, trainer, steps: int, eval_rows: int | None = None):
        from core.data.batching import split_length
        from core.data.loaders import is_dataset

        self.trainer, self.steps = trainer, steps
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

    def run(self, batch: int) -> float | None:
        from core.engine.distributed import DistContext
        from core.engine.evaluation import evaluate_split

        t = self.trainer
        t.batches = self._batches(batch)
        windows = min(TIMED_WINDOWS + 1, self.steps)  # the first is warm-up: the optimizer allocates its state
        try:
            warmup = 1 if windows > 1 else 0
            speed = time_steps(t, self.steps // windows, windows - warmup, warmup).samples_per_second
            if self.eval_rows:
                val = self.val if isinstance(self.val, dict) else self.val.batched(batch)
                evaluate_split(t.task, t.raw_model, val, batch, DistContext(), t.plan.autocast)
        finally:
            close = getattr(t.batches, "close", None)  # a DataLoader's workers end with the trial
            if close is not None:
                close()
        return speed

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
    modes the device cannot run are 'skipped' with its reason). `start`: the first batch (default the config's batch
    size); `max_batch`: the cap (default the training rows, at most 65,536); `eval_rows`: rows of each trial's
    evaluation pass (default the whole validation split); `limit_bytes`: use this limit instead of the device's;
    `probe`: the memory probe (default the device's; FakeProbe in tests). Nothing persistent is written."""
    check_settings(margin, steps, tolerance, start, max_batch)
    config = config.validate()
    from core.data.batching import split_length
    from core.devices import device_info, list_devices, torch_device
    from core.engine.control import RunControl
    from core.lab.precision_sweep import requested_modes

    control, progress = control or RunControl(), progress or (lambda _progress: None)
    began = time.perf_counter()
    devices = devices if devices is not None else list_devices()
    info = device_info(config.device, devices)
    compiled = config.compile  # tried eager: a compiled model would recompile for every batch size tried
    config = config.replace(device=info.id, compile=False)
    order = requested_modes(list(modes) if modes else None)
    first = start or config.batch_size
    probe = probe if probe is not None else make_probe(torch_device(info))
    results: list[ModeResult] = []
    facts: dict = {}

    def search(trainer, mode: str, index: int) -> ModeResult:
        rows = split_length(trainer.batches.split)
        cap = facts["max_batch"] = min(max_batch or MAX_BATCH_CAP, rows)
        work = TrainerWork(trainer, steps, eval_rows)
        facts["eval_rows"] = work.eval_rows

        def on_trial(trial: Trial, count: int, budget: int) -> None:
            progress(BatchFinderProgress(mode, index, len(order), "trial", trial, count, budget))

        result = search_mode(work, probe, mode, min(first, cap), cap, margin, tolerance, control, on_trial, limit_bytes)
        result.compute_dtype = trainer.plan.compute_dtype_name
        if cap < (max_batch or MAX_BATCH_CAP) and result.capped:
            result.reason = f"all {rows:,} training rows fit in one batch: the data, not memory, is the limit"
        return result

    for index, mode in enumerate(order):
        if control.stop_requested:
            results.append(ModeResult(mode=mode, status="stopped", reason="stopped by request"))
        elif mode not in info.precisions:
            results.append(ModeResult(mode, "skipped", info.unsupported.get(mode, f"not supported on {info.id}")))
        else:
            progress(BatchFinderProgress(mode, index, len(order), "setup"))
            results.append(
                _search_one_mode(config, mode, first, steps, devices, probe, partial(search, mode=mode, index=index))
            )
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
        **BatchFinderResult.setting(config, info),
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
    config: RunConfig, mode: str, start: int, steps: int, devices, probe: MemoryProbe, search
) -> ModeResult:
    """`search(trainer)` on a throwaway Trainer of `mode` (constant lr, one micro-batch per step); a model and data
    that do not fit even before the first trial make the mode 'failed'."""
    try:
        return on_throwaway_trainer(
            config,
            "amp-fit-batch-",
            search,
            devices,
            precision=mode,
            batch_size=start,
            grad_accum=1,
            schedule="constant",
            warmup_steps=0,
            max_steps=steps,
        )
    except ConfigError as exc:
        if exc.field == "batch_size":  # the start batch exceeds the training rows
            raise ConfigError("start", str(exc).split(": ", 1)[1]) from None
        raise
    except probe.oom_errors as exc:  # the model and data themselves do not fit
        failed = (str(exc).strip().splitlines() or ["out of memory"])[0][:200]
        return ModeResult(mode=mode, status="failed", reason=f"setting up the model ran out of memory: {failed}")
    finally:
        probe.release()
