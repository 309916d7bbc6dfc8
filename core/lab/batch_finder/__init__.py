"""Batch-size finder: the largest micro-batch that fits on the device, per precision mode, evaluation included and
a safety margin below the device's limit (docs/tuning.md). Each trial at batch B runs `steps` of the trainer's
own optimizer steps and one evaluation pass; it fits when its peak stays within (1 - margin) x the limit. The
search doubles from `start`, then bisects to within `tolerance`.

Layers: results (no torch) < probes < search (no torch) < finder (the trials on a Trainer, `find_batch_sizes`).
Importing the package does not import torch.
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
