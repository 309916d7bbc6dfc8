"""Evaluate any checkpoint: `evaluate_checkpoint(path, split="test")` rebuilds the run's task, data split and
model from the checkpoint's own settings (the same seed, so the same split as the run), loads its weights and
measures the split, with the precision the run trained in, on the device it names (or another). A stopped run
has no test metrics; this gives them, and `--data` measures the model on another file.

Nothing is written where the checkpoint lives: the run is rebuilt in a throwaway folder (the checkpoint's own
folder may belong to a live run). The checkpoint is loaded with the engine's checks (weights_only, CRC,
structure, finite values), like a resume.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.config import RunConfig
from core.errors import ConfigError


@dataclass
class Evaluation:
    checkpoint: str
    task: str
    split: str
    step: int
    epoch: int
    metrics: dict
    data: str  # the data file ('' = the task's synthetic data)
    device: str
    device_name: str
    precision: str
    autocast_dtype: str | None
    seconds: float
    baseline: dict = field(default_factory=dict)  # the task's trivial predictor, measured on the val split
    ceiling: dict = field(default_factory=dict)  # what the planted structure allows (synthetic data), val split
    notes: list = field(default_factory=list)
    split_data: str = ""  # the file the split came from: the given test / validation file, else `data`

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate_checkpoint(checkpoint: str | Path, split: str | None = "test", data: str | None = None,
                        device: str | None = None, batch_size: int | None = None, devices=None,
                        data_settings: dict | None = None) -> Evaluation:
    """The metrics of `checkpoint`'s model on `split` ("test" or "val"; None: test when the task's data has
    one, else val) of its run's data (or of `data`). A run trained on given splits is measured on its given
    test (or validation) file, as its saved settings name it. `data` replaces the run's data with a file
    split on its own (its folder's files, its split column, else the task's split), unless `data_settings`
    (val_data, test_data, delimiter, columns) gives its splits or read options too."""
    import torch  # noqa: F401  (the engine's dependency, loaded when a checkpoint is evaluated)

    from core.engine import checkpoints as ckpt
    from core.engine.distributed import DistContext
    from core.engine.evaluation import evaluate_split
    from core.engine.precision import matmul_precision
    from core.engine.trainer import Trainer

    if split not in ("test", "val", None):
        raise ConfigError("split", f"{split!r}: choose test or val")
    path = Path(checkpoint)
    began = time.perf_counter()
    saved = ckpt.load_checkpoint(path)
    config = RunConfig.from_dict(saved["config"], source=str(path))
    del saved
    changes: dict = {"keep_best": 0, "early_stop_patience": 0, "early_stop_divergence": 0.0, "tensorboard": False,
                     "checkpoint_interval": 0, "checkpoint_minutes": 0.0}
    if data is not None:
        changes.update(data=data, val_data="", test_data="")  # the run's given splits belong to its own data
    changes.update(data_settings or {})
    if device:
        changes["device"] = device
    if batch_size:
        changes["batch_size"] = batch_size
    with tempfile.TemporaryDirectory(prefix="amp-evaluate-") as out_dir:
        trainer = Trainer(config.replace(out_dir=out_dir, **changes), resume_from=path, devices=devices)
        try:
            trainer.setup()
            if split is None:
                split = "test" if trainer.test else "val"
            rows = trainer.test if split == "test" else trainer.val
            if not rows:
                raise ConfigError("split", f"task {config.task} has no {split} split in "
                                           f"{trainer.cfg.data or 'its synthetic data'}")
            with matmul_precision(trainer.plan):
                metrics = evaluate_split(trainer.task, trainer.raw_model, rows, trainer.cfg.batch_size,
                                         DistContext(), trainer.plan.autocast)
            info, plan = trainer.device_info, trainer.plan
            return Evaluation(
                checkpoint=str(path), task=config.task, split=split, step=trainer.step, epoch=trainer.epoch,
                metrics=metrics, data=trainer.cfg.data, device=str(trainer.device), device_name=info.name,
                precision=plan.mode, autocast_dtype=plan.compute_dtype_name if plan.autocast_enabled else None,
                seconds=time.perf_counter() - began,
                baseline=dict(trainer.data.baseline), ceiling=dict(trainer.data.ceiling), notes=list(trainer.notes),
                split_data=(trainer.cfg.test_data if split == "test" else trainer.cfg.val_data) or trainer.cfg.data)
        finally:
            trainer.cleanup()
