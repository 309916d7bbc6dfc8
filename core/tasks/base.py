"""The task interface: one model + data + loss + metrics. The registry in `core.tasks` lists them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from core.data.batching import split_length


@dataclass(frozen=True)
class TaskOption:
    """One model-size or data option of a task, with its default and range (the GUI builds its form from it)."""

    name: str
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None

    def error(self, value: Any) -> str | None:
        """Why `value` is not allowed for this option, or None."""
        kind = type(self.default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not kind:
            return f"expected {kind.__name__}, got {type(value).__name__} {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of {', '.join(self.choices)}"
        if self.minimum is not None and not (self.minimum <= value <= self.maximum):
            return f"{value!r} is out of range: must be between {self.minimum:g} and {self.maximum:g}"
        return None


@dataclass
class TaskData:
    """Train / validation (/ test) splits as dicts of equally long tensors, plus facts about the data.

    `info` carries what the model needs to know (e.g. catalogue size; plain values, saved in checkpoints)
    and `ceiling`, the best metric values
    the planted structure of synthetic data allows, printed next to the measured ones. `vocabulary` maps the
    model's ids back to the data's own (e.g. {"item_id": raw ids, the model's item k is entry k - 1}); it is
    saved in checkpoints and exported in the manifest, so predictions can be served in the users' ids.
    """

    train: dict[str, torch.Tensor]
    val: dict[str, torch.Tensor]
    test: dict[str, torch.Tensor] | None = None
    info: dict = field(default_factory=dict)
    ceiling: dict = field(default_factory=dict)
    baseline: dict = field(default_factory=dict)
    vocabulary: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # one-line remarks for the user, e.g. how long lists were split


@dataclass
class EvalParts:
    """What some rows of a split contribute to its metrics, so that evaluation can be shared out (each DDP
    rank takes a slice, see core.engine.evaluation): `sums` (scalar tensors) add up over slices; `values`
    (one entry per row, e.g. scores for ROC AUC) are concatenated in row order."""

    sums: dict[str, torch.Tensor]
    values: dict[str, torch.Tensor] = field(default_factory=dict)


class Task(ABC):
    """A trainable job. Subclasses set the class attributes and implement load_data, build_model and loss,
    and either evaluate_parts + metrics (evaluation is then shared out across DDP ranks) or evaluate alone
    (every rank then evaluates the whole split)."""

    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[tuple[TaskOption, ...]] = ()
    defaults: ClassVar[dict] = {}
    primary_metric: ClassVar[str] = "loss"
    # Extra unit counted in throughput, e.g. "tokens" for sequence models: key of the batch tensor whose
    # non-padding entries are counted. None = samples only.
    tokens_key: ClassVar[str | None] = None

    def __init__(self, options: dict | None = None):
        from core.errors import ConfigError

        problems = self.option_errors(options or {})
        if problems:
            key, message = next(iter(problems.items()))
            raise ConfigError(key, message)
        self.opts = {opt.name: opt.default for opt in self.options}
        self.opts.update(options or {})

    @classmethod
    def option_errors(cls, options: dict) -> dict[str, str]:
        """task_options.<name> -> message, for every unknown or invalid option."""
        known = {opt.name: opt for opt in cls.options}
        problems = {}
        for key, value in options.items():
            if key not in known:
                allowed = ", ".join(known) or "none"
                problems[f"task_options.{key}"] = f"unknown option for task {cls.name}; options: {allowed}"
            elif (message := known[key].error(value)) is not None:
                problems[f"task_options.{key}"] = message
        return problems

    @abstractmethod
    def load_data(self, data_path: str, seed: int) -> TaskData:
        """CPU tensors for every split: from `data_path` (CSV/Parquet) or, when it is empty, synthetic data."""

    @abstractmethod
    def build_model(self, info: dict) -> nn.Module:
        """The model (float32, on the CPU), sized by the options and `info` (TaskData.info: e.g. catalogue
        size found in a file). With an empty `info` it is sized from the options alone (parameter counts)."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scalar training loss for one batch; runs under autocast."""

    def evaluate(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> dict[str, float]:
        """Metrics over a whole split (called under torch.no_grad, autocast and model.eval())."""
        return self.metrics(self.evaluate_parts(model, split, batch_size))

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        """What the rows of `split` (a whole split or a slice of it, possibly empty) contribute to the metrics."""
        raise NotImplementedError(f"task {self.name} implements neither evaluate nor evaluate_parts")

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        """The metrics from the parts of every slice of a split, combined (sums added, values concatenated)."""
        raise NotImplementedError(f"task {self.name} implements evaluate_parts but not metrics")

    @classmethod
    def shares_evaluation(cls) -> bool:
        """Whether evaluation can be shared out by slices (the task reports EvalParts)."""
        return cls.evaluate_parts is not Task.evaluate_parts and cls.evaluate is Task.evaluate

    def parameter_count(self) -> int:
        """Trainable parameters of the model these options build."""
        with torch.device("meta"):
            model = self.build_model({})
        return sum(p.numel() for p in model.parameters() if p.requires_grad)


def iter_slices(split: dict[str, torch.Tensor], batch_size: int):
    """Contiguous evaluation batches over a split (no shuffling, no per-sample Python)."""
    n = split_length(split)
    for start in range(0, n, batch_size):
        yield {key: value[start : start + batch_size] for key, value in split.items()}
