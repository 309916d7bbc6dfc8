"""A timm ResNet-18 (timm.create_model("resnet18", pretrained=False): nothing is downloaded; `pip install timm`) on
scikit-learn's bundled 8 x 8 digits, upsampled to 32 x 32, one grey channel. Its own optimizer is timm's
(create_optimizer_v2: AdamW without weight decay on norms and biases), its metric a torchmetrics accuracy. Option
`width` narrows the network (64: the real ResNet-18; 8: a quick test). Served from its declared input, an image
of 1 x 32 x 32 pixels in 0..1; the answer is the ten digits' probabilities.

    amp-console train --task docs/examples/timm_resnet_task.py --precision bf16 --out runs/timm_resnet
    amp-console export runs/timm_resnet --task docs/examples/timm_resnet_task.py --format onnx --out export
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.tasks.base import EvalParts, Task, TaskData, TaskOption, iter_slices
from core.tasks.feature_serving import FeatureServing
from core.tasks.serving import Input


class TimmResnetTask(Task):
    name = "timm_resnet"
    description = "a timm ResNet-18 on sklearn's 8x8 digits upsampled to 32x32"
    options = (TaskOption("width", 64, "channels of the first stage (64: ResNet-18's own)", 4, 256),)
    defaults = {"batch_size": 64, "epochs": 10}
    primary_metric = "accuracy"
    inputs = (Input("x", "float32", (1, 32, 32), meaning="grey pixels, 0 blank to 1 inked"),)

    def load_data(self, data_path: str, seed: int) -> TaskData:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = torch.tensor(digits.data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16
        x = F.interpolate(x, size=32, mode="bilinear", align_corners=False)
        y = torch.tensor(digits.target, dtype=torch.int64)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))  # one split for every seed
        x, y = x[order], y[order]
        return TaskData(
            train={"x": x[:1258], "y": y[:1258]},
            val={"x": x[1258:1527], "y": y[1258:1527]},
            test={"x": x[1527:], "y": y[1527:]},
        )

    def build_model(self, info: dict) -> nn.Module:
        import timm

        w = self.opts["width"]
        return timm.create_model(
            "resnet18", pretrained=False, num_classes=10, in_chans=1, stem_width=w, channels=(w, 2 * w, 4 * w, 8 * w)
        )

    def configure_optimizers(self, model: nn.Module, cfg):
        from timm.optim import create_optimizer_v2

        return create_optimizer_v2(model, "adamw", lr=2e-3, weight_decay=0.05)

    def metric_objects(self):
        from torchmetrics.classification import MulticlassAccuracy

        return {"accuracy": MulticlassAccuracy(num_classes=10, average="micro")}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(model(batch["x"]).float(), batch["y"])

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        total = torch.zeros((), dtype=torch.float64, device=split["x"].device)
        for batch in iter_slices(split, batch_size):
            logits = model(batch["x"]).float()
            total += F.cross_entropy(logits, batch["y"], reduction="sum").double()
            self.update_metrics(logits, batch["y"])
        return EvalParts(sums={"loss": total, "rows": torch.tensor(float(len(split["x"])), device=total.device)})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        return {"loss": float(parts.sums["loss"]) / max(float(parts.sums["rows"]), 1.0)}

    @classmethod
    def serving_class(cls):
        return DigitProbabilities


class DigitProbabilities(FeatureServing):
    probabilities = True  # softmax over the logits: p0..p9 and `predicted`
