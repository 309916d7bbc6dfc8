"""Use a trained model: `load_predictor(run or checkpoint)` gives a Predictor, shared by `amp-console predict`
(core.runs.file_predict), the window's Model preview and the export checks. It answers with the task's serving part
(core.tasks.serving): each name in its `answers`, called with the predictor first (`predictor.recommend(history, k=5)`).
The model is rebuilt from the checkpoint alone and runs in float32 on one device (default: the CPU), in eval mode,
without autocast; `lock` is held while it computes, so threads may share it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from core.engine.run_record import run_checkpoint
from core.errors import CheckpointError, ConfigError
from core.tasks.serving import PREVIEW_CALLS, ServingShape, TaskServing

HOST = torch.device("cpu")


@dataclass
class Predictor:
    task: str
    checkpoint: Path
    step: int
    epoch: int
    metrics: dict
    config: dict
    device: torch.device
    model: torch.nn.Module = field(repr=False)
    task_object: Any = field(repr=False)
    data_info: dict = field(default_factory=dict)
    vocabulary: dict = field(default_factory=dict, repr=False)
    notes: list = field(default_factory=list)  # e.g. "its summary advised the last weights (checkpoint.pt)..."
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # held while the model computes

    @cached_property
    def serving(self) -> TaskServing | None:
        """The task's serving part (core.tasks.serving.TaskServing); None when the task is not served."""
        return self.task_object.serving()

    @cached_property
    def shape(self) -> ServingShape:
        """What the model reads: catalogue size, history window, feature count (0 where the task has none)."""
        return self.serving.shape(self.model) if self.serving is not None else ServingShape()

    @property
    def n_items(self) -> int:
        return self.shape.n_items

    @property
    def max_len(self) -> int:
        return self.shape.max_len

    @property
    def n_features(self) -> int:
        return self.shape.n_features

    def __getattr__(self, name: str) -> Any:
        """An answer of the task's serving part (see the module doc); a ConfigError naming the task that answers
        `name` when it is another task's."""
        if name.startswith("_") or "task_object" not in self.__dict__:
            raise AttributeError(name)
        serving = self.serving
        if serving is not None and (name in serving.answers or name in PREVIEW_CALLS):
            return functools.partial(getattr(serving, name), self)
        from core.tasks import TASKS

        for other, cls in TASKS.items():
            if (part := cls.serving_class()) is not None and name in part.answers:
                raise ConfigError(
                    "task", f"{self.checkpoint} is a {self.task} model: {name} needs a {other} checkpoint"
                )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def checkpoint_file(source: str | Path, which: str = "advised") -> tuple[Path, list[str]]:
    """(The checkpoint file `source` names, notes on it): a file as it is; a run folder's checkpoint `which`
    (advised, best or last: run_checkpoint)."""
    if which not in ("advised", "best", "last"):
        raise ConfigError("which", f"{which!r}: choose advised, best or last")
    path = Path(source).expanduser()
    return run_checkpoint(path, which) if path.is_dir() else (path, [])


def rebuilt(state: dict, path: Path) -> tuple[Any, torch.nn.Module]:
    """(task, model) of the loaded checkpoint `path`, the task given its run's data settings (where examples are
    read from) unless they are another version's."""
    from core.config import RunConfig
    from core.engine.checkpoints import rebuild_model

    task, model = rebuild_model(state, path)
    with contextlib.suppress(ConfigError):
        task.use_config(RunConfig.from_dict(state["config"], source=str(path)))
    return task, model


def load_predictor(source: str | Path, which: str = "advised", device: str | None = None) -> Predictor:
    """A Predictor for the checkpoint `source` names (checkpoint_file). Bad files are one CheckpointError line;
    `device` (default cpu) a DeviceError when it is not here."""
    from core.engine.checkpoints import load_checkpoint

    path, notes = checkpoint_file(source, which)
    if not path.exists():
        raise CheckpointError(f"{source}: no such checkpoint file or run folder")
    where = HOST
    if device:
        from core.devices import device_info, torch_device

        where = torch_device(device_info(device))
    state = load_checkpoint(path)
    task, model = rebuilt(state, path)
    return Predictor(
        task=state["task"],
        checkpoint=path,
        step=state["step"],
        epoch=state["epoch"],
        metrics=dict(state["metrics"]),
        config=dict(state["config"]),
        device=where,
        model=model.float().to(where).eval(),
        task_object=task,
        data_info=dict(state.get("data_info") or {}),
        vocabulary=dict(state.get("vocabulary") or {}),
        notes=notes,
    )
