"""TinyClassifier, the teaching task: an MLP on x ~ N(0, I), label [w . x > 0] with `label_noise` flipped, so
the ceiling on accuracy is 1 - label_noise.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.errors import ConfigError
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, confusion_section, iter_slices
from core.tasks.feature_serving import FeatureFileScorer, FeatureServing
from core.tasks.serving import PreviewSpec, TaskServing


class TinyClassifier(nn.Module):
    def __init__(self, in_features: int = 10, hidden: int = 16, classes: int = 2):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu(self.fc1(x)))


def make_tiny_data(
    samples: int, label_noise: float, seed: int, features: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Vectorised synthetic classification data with a planted linear boundary and label noise."""
    gen = torch.Generator().manual_seed(seed)
    direction = torch.randn(features, generator=gen)
    x = torch.randn(samples, features, generator=gen)
    y = (x @ direction > 0).long()
    flip = torch.rand(samples, generator=gen) < label_noise
    return x, torch.where(flip, 1 - y, y)


class TinyClassifierTask(Task):
    name = "tiny"
    description = "TinyClassifier (Linear 10->hidden, ReLU, Linear hidden->2) on synthetic points: the teaching task"
    options = (
        TaskOption("hidden", 16, "hidden units", 1, 4096),
        TaskOption("samples", 8192, "synthetic samples (80% train, 20% validation)", 64, 100_000_000, synthetic=True),
        TaskOption("label_noise", 0.05, "fraction of labels flipped (ceiling accuracy = 1 - this)", 0.0, 0.5),
    )
    defaults = {"lr": 1e-2, "batch_size": 64, "epochs": 5, "optimizer": "adamw"}
    primary_metric = "accuracy"

    @classmethod
    def serving_class(cls) -> type[TaskServing]:
        return TinyServing

    def load_data(self, data_path: str, seed: int) -> TaskData:
        if data_path:
            raise ConfigError("data", "the tiny task trains on its own synthetic data; leave data empty")
        self.check_synthetic_size(self.opts["samples"] * (10 * 4 + 8), ("samples",))  # x: float32, y: int64
        x, y = make_tiny_data(self.opts["samples"], self.opts["label_noise"], seed)
        cut = int(0.8 * len(x))
        return TaskData(
            train={"x": x[:cut], "y": y[:cut]},
            val={"x": x[cut:], "y": y[cut:]},
            ceiling={"accuracy": 1.0 - self.opts["label_noise"]},
            baseline={"accuracy": max(y[cut:].float().mean().item(), 1 - y[cut:].float().mean().item())},
        )

    def build_model(self, info: dict) -> nn.Module:
        return TinyClassifier(hidden=self.opts["hidden"])

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(model(batch["x"]), batch["y"])

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        device = split["x"].device
        total_loss = torch.zeros((), device=device, dtype=torch.float64)
        correct = torch.zeros((), device=device, dtype=torch.float64)
        for batch in iter_slices(split, max(batch_size, 4096)):
            logits = model(batch["x"])
            total_loss += F.cross_entropy(logits.float(), batch["y"], reduction="sum").double()
            correct += (logits.argmax(dim=1) == batch["y"]).sum().double()
        rows = torch.tensor(float(split["x"].shape[0]), device=device, dtype=torch.float64)
        return EvalParts(sums={"loss": total_loss, "correct": correct, "rows": rows})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        n = max(float(parts.sums["rows"]), 1.0)
        return {"loss": float(parts.sums["loss"]) / n, "accuracy": float(parts.sums["correct"]) / n}

    def report(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> dict:
        """The confusion matrix of the argmax class (what accuracy counts) and the accuracy."""
        predicted = [torch.zeros(0, dtype=torch.int64, device=split["y"].device)]
        for batch in iter_slices(split, max(batch_size, 4096)):
            predicted.append(model(batch["x"]).argmax(dim=1))
        confusion = confusion_section(split["y"], torch.cat(predicted), ["class 0", "class 1"])
        n = max(int(split["y"].shape[0]), 1)
        correct = sum(confusion["matrix"][c][c] for c in range(len(confusion["labels"])))
        return {"confusion": confusion, "classification": {"accuracy": correct / n}}


class TinyFileScorer(FeatureFileScorer):
    unit = "points"


class TinyServing(FeatureServing):
    """Points in (x1..x10 as predict reads them), class probabilities out."""

    output_name = "probabilities"
    probabilities = True
    file_scorer = TinyFileScorer
    preview = PreviewSpec(
        "feature_row",
        "class_probabilities",
        answer="predict_rows",
        examples="example_rows",
        example_limit=20,
        noun="point",
        classes=("class 0", "class 1"),
    )
