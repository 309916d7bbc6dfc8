"""Batch-size finder: the largest micro-batch that fits on the device, per precision mode, with the evaluation
pass included and a safety margin below the device's limit.

Why not just the first batch that trains: a batch found by training steps alone can fail later at evaluation
or on a busier device (Lightning's scale_batch_size, Lightning-AI#8028). So every trial at batch B runs
`steps` optimizer steps (the trainer's own step: autocast, GradScaler, clipping) AND one evaluation pass of the
validation split in batches of B, and a batch "fits" only when the trial's peak stays within
(1 - margin) x the device's limit (default margin 0.10: about 10% headroom).

Search (`search_batch`, plain Python, no torch): start at `start` (the config's batch size), double while it
fits, then bisect between the last fit and the first failure until they are within `tolerance` of the fit
(5% by default) or 1 sample apart; capped at `max_batch` (default: the training rows, at most 65,536). A start
that does not fit is halved until one does.

Memory (one `MemoryProbe` per device kind, over core.devices.PeakMemory):
- CUDA / XPU: the allocator's peak *reserved* bytes of the trial (reset before it; `max_memory_allocated` is
  reported too) against the limit = free memory (mem_get_info) + what this process had reserved when the mode's
  model and data were ready. An out-of-memory trial is caught, its gradients, optimizer state and GradScaler are
  dropped, the cache emptied, and the search goes on with a smaller batch.
- CPU: an ESTIMATE. The growth of the process's resident set during the trial (VmHWM, reset per trial through
  /proc/self/clear_refs) above its size when the mode was ready, against MemAvailable (psutil) at that
  moment. To stay safe a CPU trial larger than every trial so far is first predicted from the measured ones
  (a line through the two largest; proportional with one) and not run when the prediction passes the budget.
  The first trial (the start batch) is run unpredicted: start from a batch you could train with.
- MPS: unsupported (torch has no peak-memory statistics for it); the finder says so.
- `FakeProbe` for tests and demos: a limit in bytes and a cost per sample; it raises `FakeOutOfMemoryError`
  when a trial would pass the limit.

A task whose splits are torch Datasets is tried as it trains: each trial draws its steps' batches through a
DataLoader of the batch tried (core.data.loaders.LoaderBatches, with the run's loader settings) and evaluates
the validation split's first `eval_rows` rows as evaluation gets them (a DatasetSplit). A user task's loss and
metrics returns are checked before each mode's first trial (core.tasks.task_checks), as a run checks them.

samples/s: the trial's optimizer steps after the first (the first is warm-up: the optimizer allocates its
state there) timed between two device syncs, one before and one at the end; with steps = 1 the one step.

The GUI runs `find_batch_sizes(config, ..., progress=cb, control=RunControl())` on a BackgroundJob: `progress`
gets a `BatchFinderProgress` before each mode ('setup'), after every trial ('trial', with the `Trial`) and after
each mode ('done', with its `ModeResult`); `control.stop()` ends the search after the current trial (the modes
not searched are 'stopped'); pause waits between trials. Bad settings raise ConfigError before anything is built.

The package, in layers (an import-linter contract, no circle): results.py (the figures: trials, mode results,
progress; no torch), probes.py (the memory probes), search.py (settings, doubling then bisection, one mode's
search; no torch), finder.py (the real trials on the trainer, `find_batch_sizes`). Its public API is importable
from `core.lab.batch_finder`; importing it does not import torch.
"""

from core.lab.batch_finder.finder import TrainerWork, find_batch_sizes
from core.lab.batch_finder.probes import (
    AcceleratorProbe,
    CpuProbe,
    FakeOutOfMemoryError,
    FakeProbe,
    MemoryProbe,
    make_probe,
)
from core.lab.batch_finder.results import (
    DEFAULT_MARGIN,
    DEFAULT_STEPS,
    DEFAULT_TOLERANCE,
    FAILED_OUTCOMES,
    FITS,
    MAX_BATCH_CAP,
    MAX_STEPS,
    OOM,
    OVER_MARGIN,
    PREDICTED_OVER,
    BatchFinderProgress,
    BatchFinderResult,
    ModeResult,
    ProgressCallback,
    Trial,
    compare_to_fp32,
    train_command,
)
from core.lab.batch_finder.search import (
    FootprintPredictor,
    TrialWork,
    check_settings,
    close_enough,
    search_batch,
    search_mode,
)

__all__ = [
    "AcceleratorProbe",
    "BatchFinderProgress",
    "BatchFinderResult",
    "CpuProbe",
    "DEFAULT_MARGIN",
    "DEFAULT_STEPS",
    "DEFAULT_TOLERANCE",
    "FAILED_OUTCOMES",
    "FITS",
    "FakeOutOfMemoryError",
    "FakeProbe",
    "FootprintPredictor",
    "MAX_BATCH_CAP",
    "MAX_STEPS",
    "MemoryProbe",
    "ModeResult",
    "OOM",
    "OVER_MARGIN",
    "PREDICTED_OVER",
    "ProgressCallback",
    "Trial",
    "TrainerWork",
    "TrialWork",
    "check_settings",
    "close_enough",
    "compare_to_fp32",
    "find_batch_sizes",
    "make_probe",
    "search_batch",
    "search_mode",
    "train_command",
]
