"""Evaluate any checkpoint: the run's task, split and model rebuilt from its own settings in a throwaway
folder, measured in the run's precision on its device (or another), or on another file (`--data`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.config import RunConfig
from core.errors import ConfigError

if TYPE_CHECKING:  # torch: imported when a checkpoint is evaluated
    from core.engine.trainer import Trainer


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


def evaluate_checkpoint(checkpoint: str | Path, split: str | None = "test", **options: Any) -> Evaluation:
    """The metrics of `checkpoint`'s model on `split` of its run's data (rebuilt_run's arguments)."""
    with rebuilt_run(checkpoint, split, **options) as run:
        return run.evaluation(run.metrics())


@dataclass
class RebuiltRun:
    """A checkpoint's run rebuilt by `rebuilt_run`: its set-up Trainer and the rows to measure."""

    trainer: Trainer
    path: Path
    split: str
    rows: dict
    began: float

    def metrics(self) -> dict[str, float]:
        """The task's metrics on the split, exactly as the run's own evaluation measures them."""
        from core.engine.distributed import DistContext
        from core.engine.evaluation import evaluate_split
        from core.engine.precision import matmul_precision

        t = self.trainer
        with matmul_precision(t.plan):
            return evaluate_split(t.task, t.raw_model, self.rows, t.cfg.batch_size, DistContext(), t.plan.autocast)

    def evaluation(self, metrics: dict[str, float]) -> Evaluation:
        t = self.trainer
        info, plan, cfg = t.device_info, t.plan, t.cfg
        return Evaluation(
            checkpoint=str(self.path),
            task=cfg.task,
            split=self.split,
            step=t.state.step,
            epoch=t.state.epoch,
            metrics=metrics,
            data=cfg.data,
            device=str(t.device),
            device_name=info.name,
            precision=plan.mode,
            autocast_dtype=plan.compute_dtype_name if plan.autocast_enabled else None,
            seconds=time.perf_counter() - self.began,
            baseline=dict(t.data.baseline),
            ceiling=dict(t.data.ceiling),
            notes=list(t.notes),
            split_data=(cfg.test_data if self.split == "test" else cfg.val_data) or cfg.data,
        )


@contextmanager
def rebuilt_run(
    checkpoint: str | Path,
    split: str | None = "test",
    data: str | None = None,
    device: str | None = None,
    batch_size: int | None = None,
    devices=None,
    data_settings: dict | None = None,
    announce: Callable[[str], None] | None = None,
) -> Iterator[RebuiltRun]:
    """`checkpoint`'s run set up again in a throwaway folder with its weights, cleaned up on leaving. `split`
    None: test when there is one, else val; `data` (with `data_settings`) replaces the run's data; `announce`
    is called with the split chosen."""
    import torch  # noqa: F401  (the engine's dependency, loaded when a checkpoint is evaluated)

    from core.engine import checkpoints as ckpt
    from core.engine.trainer import Trainer

    if split not in ("test", "val", None):
        raise ConfigError("split", f"{split!r}: choose test or val")
    path = Path(checkpoint)
    began = time.perf_counter()
    saved = ckpt.load_checkpoint(path)
    config = RunConfig.from_dict(saved["config"], source=str(path))
    changes: dict = {
        "keep_best": 0,
        "early_stop_patience": 0,
        "early_stop_divergence": 0.0,
        "tensorboard": False,
        "checkpoint_interval": 0,
        "checkpoint_minutes": 0.0,
    }
    if data is not None:
        changes.update(data=data, val_data="", test_data="", query_file="")  # these belong to the run's own data
    changes.update(data_settings or {})
    if device:
        changes["device"] = device
    if batch_size:
        changes["batch_size"] = batch_size
    with tempfile.TemporaryDirectory(prefix="amp-evaluate-") as out_dir:
        trainer = Trainer(
            config.replace(out_dir=out_dir, **changes), resume_from=path, devices=devices, resume_state=saved
        )
        del saved  # the trainer's setup lets go of it
        try:
            trainer.setup()  # a user task's loss and metrics returns checked, as before a run's first step
            if split is None:
                split = "test" if trainer.test else "val"
            rows = trainer.test if split == "test" else trainer.val
            if not rows:
                raise ConfigError(
                    "split", f"task {config.task} has no {split} split in {trainer.cfg.data or 'its own data'}"
                )
            if announce is not None:
                announce(split)
            yield RebuiltRun(trainer=trainer, path=path, split=split, rows=rows, began=began)
        finally:
            trainer.cleanup()
