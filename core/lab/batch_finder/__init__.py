"""Batch-size finder: the largest micro-batch that fits on the device, per precision mode, evaluation included and
a safety margin below the device's limit (docs/tuning.md). Each trial at batch B runs `steps` of the trainer's
own optimizer steps and one evaluation pass; it fits when its peak stays within (1 - margin) x the limit. The
search doubles from `start`, then bisects to within `tolerance`. Layers: results (no torch) < probes < search (no
torch) < finder (the trials on a Trainer, `find_batch_sizes`). Importing the package does not import torch.
"""

from core.lab.batch_finder.finder import find_batch_sizes
from core.lab.batch_finder.probes import CpuProbe, FakeOutOfMemoryError, FakeProbe, make_probe
from core.lab.batch_finder.results import (
    DEFAULT_MARGIN,
    DEFAULT_STEPS,
    DEFAULT_TOLERANCE,
    FITS,
    MAX_BATCH_CAP,
    MAX_STEPS,
    OOM,
    OVER_MARGIN,
    PREDICTED_OVER,
    ModeResult,
    compare_to_fp32,
    train_command,
)
from core.lab.batch_finder.search import FootprintPredictor, check_settings, search_mode

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_STEPS",
    "DEFAULT_TOLERANCE",
    "FITS",
    "MAX_BATCH_CAP",
    "MAX_STEPS",
    "OOM",
    "OVER_MARGIN",
    "PREDICTED_OVER",
    "CpuProbe",
    "FakeOutOfMemoryError",
    "FakeProbe",
    "FootprintPredictor",
    "ModeResult",
    "check_settings",
    "compare_to_fp32",
    "find_batch_sizes",
    "make_probe",
    "search_mode",
    "train_command",
]
