"""An MLP with BatchNorm and Dropout on scikit-learn's bundled breast-cancer table (569 rows, 30 features;
nothing is downloaded), brought as a LightningModule's user would: its own optimizer and schedule
(configure_optimizers) and torchmetrics metrics. Served from its declared input, a row of 30 numbers.

    amp-console train --task docs/examples/bn_mlp_task.py --out runs/bn_mlp
    amp-console predict runs/bn_mlp --task docs/examples/bn_mlp_task.py --input rows.csv --out scored.csv
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.tasks.base import EvalParts, Task, TaskData, TaskOption, iter_slices
from core.tasks.serving import Input


class BnMlpTask(Task):
    name = "bn_mlp"
    description = "an MLP with BatchNorm and Dropout on sklearn's breast-cancer table"
    options = (
        TaskOption("hidden", 64, "hidden units", 1, 4096),
        TaskOption("dropout", 0.2, "dropout probability", 0.0, 0.9),
    )
    defaults = {"batch_size": 32, "epochs": 20}
    primary_metric = "auroc"  # a torchmetrics object's name (metric_objects)
    inputs = (Input("x", "float32", (30,), meaning="the 30 features, standardised"),)

    def load_data(self, data_path: str, seed: int) -> TaskData:
        from sklearn.datasets import load_breast_cancer

        x, y = load_breast_cancer(return_X_y=True)
        x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.int64)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))  # one split for every seed
        x, y = x[order], y[order]
        x = (x - x[:400].mean(0)) / x[:400].std(0)  # standardised by the training rows
        return TaskData(
            train={"x": x[:400], "y": y[:400]},
            val={"x": x[400:485], "y": y[400:485]},
            test={"x": x[485:], "y": y[485:]},
        )

    def build_model(self, info: dict) -> nn.Module:
        h = self.opts["hidden"]
        return nn.Sequential(
            nn.Linear(30, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(self.opts["dropout"]),
            nn.Linear(h, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(self.opts["dropout"]),
            nn.Linear(h, 2),
        )  # fmt: skip

    def configure_optimizers(self, model: nn.Module, cfg):
        optimizer = torch.optim.NAdam(model.parameters(), lr=2e-3, weight_decay=1e-4)
        return optimizer, torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.995)

    def metric_objects(self):
        from torchmetrics.classification import BinaryAccuracy, BinaryAUROC

        return {"auroc": BinaryAUROC(), "accuracy": BinaryAccuracy()}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(model(batch["x"]).float(), batch["y"])

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        total = torch.zeros((), dtype=torch.float64, device=split["x"].device)
        for batch in iter_slices(split, batch_size):
            logits = model(batch["x"]).float()
            total += F.cross_entropy(logits, batch["y"], reduction="sum").double()
            self.update_metrics(logits.softmax(dim=1)[:, 1], batch["y"])
        return EvalParts(sums={"loss": total, "rows": torch.tensor(float(len(split["x"])), device=total.device)})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        return {"loss": float(parts.sums["loss"]) / max(float(parts.sums["rows"]), 1.0)}
