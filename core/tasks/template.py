# The task file `amp-console tasks new NAME` writes: core.tasks.new_task copies this module's text from its
# docstring on, with TemplateTask, "template" and template.py renamed for NAME (these first comment lines are
# left out). It is a real module so that it is linted, imported and trained by tests/test_task_template.py.
"""TemplateTask: a task of your own, ready to train as it is, to change into yours.

As written it classifies points drawn around a few random centres with a small MLP: synthetic data, so it
runs anywhere. Every method below says what the engine expects of it; change load_data for your data and
build_model for your model, and keep the rest until you need to change it. docs/tasks.md tells the rest.

Its options, read without running this file; a run in bf16 (or --precision auto); your CSV file (load_data
says what it holds); more steps from the last checkpoint; the test metrics of the trained run; the model's
class probabilities for a CSV file of points (columns x1..xF); an export that serve.py serves:

    amp-console tasks template --task template.py
    amp-console train --task template.py --precision bf16 --out runs/template
    amp-console train --task template.py --data my_points.csv
    amp-console train --resume runs/template/checkpoint.pt --task template.py --max-steps 400
    amp-console evaluate runs/template --task template.py
    amp-console predict runs/template --task template.py --input points.csv --out scored.csv
    amp-console export runs/template --task template.py --out runs/template/export
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.errors import DataError
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, confusion_section, iter_slices
from core.tasks.feature_serving import FeatureServing
from core.tasks.serving import PreviewSpec


class TemplateTask(Task):
    # What configs, run folders and `amp-console tasks` show: a short lower-case name (letters, digits, - and
    # _) that is not a built-in task's, and one line saying what it is.
    name = "template"
    description = "an MLP classifying points around random centres (a task file to make your own)"

    # Options size the model and the synthetic data: `-o hidden=128` on the command line, editors in the window.
    # TaskOption(name, default, help, minimum, maximum); `choices=("a", "b")` for a text option. A default's
    # type is the option's type (64 is an int, 0.5 a float). synthetic=True: it shapes only the generated
    # data, and does nothing when --data gives a file. Keep these literals: `amp-console tasks` reads them
    # from this file's text without running it.
    options = (
        TaskOption("hidden", 64, "hidden units of each of the two hidden layers", 1, 4096),
        TaskOption("features", 16, "input features of the synthetic points", 1, 1024, synthetic=True),
        TaskOption("classes", 4, "classes (random centres) of the synthetic points", 2, 1000, synthetic=True),
        TaskOption(
            "samples", 4096, "synthetic points (80% train, 10% validation, 10% test)", 64, 10_000_000, synthetic=True
        ),
        TaskOption("spread", 2.0, "how far points lie from their centre (larger: harder)", 0.0, 100.0, synthetic=True),
    )

    # Training settings this task starts from (any of `amp-console train --help`'s, by their config name);
    # a flag on the command line or a config file overrides them.
    defaults = {"lr": 3e-3, "batch_size": 128, "epochs": 5, "optimizer": "adamw"}

    # The metric that picks the best checkpoint and drives early stopping: one of the keys metrics() returns.
    # Lower is better when the name holds loss, error, mse, mae or perplexity, higher otherwise (accuracy);
    # `--monitor-mode min|max` says otherwise for a run.
    primary_metric = "accuracy"

    def load_data(self, data_path: str, seed: int) -> TaskData:
        """Every split as a dict of CPU tensors of equal length (a batch is a slice of rows of each), and the
        facts the model needs in `info` (plain numbers and text: they are saved in checkpoints, so a resumed
        or evaluated run rebuilds the same model without reading the data again).

        `data_path` is the run's --data, "" when none is given: here a CSV file of numeric columns whose last
        column is the class (0, 1, ...), with a header line. Read your own files here; `seed` is the run's
        --seed, for anything random (a shuffle, generated data).
        """
        if data_path:
            x, y = read_points(data_path)
        else:
            x, y = make_points(
                self.opts["samples"], self.opts["features"], self.opts["classes"], self.opts["spread"], seed
            )
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
        x, y = x[order], y[order]
        a, b = int(0.8 * len(x)), int(0.9 * len(x))
        classes = int(y.max()) + 1
        majority = torch.bincount(y[a:b], minlength=classes).max().item() / max(b - a, 1)
        return TaskData(
            train={"x": x[:a], "y": y[:a]},
            val={"x": x[a:b], "y": y[a:b]},
            test={"x": x[b:], "y": y[b:]},  # optional: evaluated once, at the end of the run
            info={"features": int(x.shape[1]), "classes": classes},
            baseline={"accuracy": majority},  # optional: what always answering the commonest class scores
        )

    def build_model(self, info: dict) -> nn.Module:
        """The model, in float32 on the CPU (the engine moves it to the device and runs it in the precision
        asked for). `info` is load_data's TaskData.info; it is empty when only the model's size is wanted
        (`amp-console tasks`), so fall back on the options. Put your own nn.Module here."""
        features = int(info.get("features", self.opts["features"]))
        classes = int(info.get("classes", self.opts["classes"]))
        hidden = self.opts["hidden"]
        return nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar training loss of one batch (a dict of the train split's keys, on the device). It runs
        under autocast: in bf16 or fp16 the logits come out in that dtype; .float() computes the loss in
        float32. The engine does backward, the GradScaler, clipping and the optimizer."""
        return F.cross_entropy(model(batch["x"]).float(), batch["y"])

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        """Sums over the rows of `split` (a whole split, or one DDP rank's slice of it) that metrics() turns
        into metrics. Called under torch.no_grad, autocast and model.eval(). Sums are scalar tensors (float64
        keeps large counts exact); keep them on the device: reading them is left to the engine."""
        device = split["x"].device
        total_loss = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.float64, device=device)
        for batch in iter_slices(split, max(batch_size, 1024)):
            logits = model(batch["x"]).float()
            total_loss += F.cross_entropy(logits, batch["y"], reduction="sum").double()
            correct += (logits.argmax(dim=1) == batch["y"]).sum().double()
        rows = torch.tensor(float(split["x"].shape[0]), dtype=torch.float64, device=device)
        return EvalParts(sums={"loss": total_loss, "correct": correct, "rows": rows})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        """The metrics from every slice's parts added up: name -> number. Return "loss" too: the plots show
        the validation loss beside the training loss."""
        rows = max(float(parts.sums["rows"]), 1.0)
        return {"loss": float(parts.sums["loss"]) / rows, "accuracy": float(parts.sums["correct"]) / rows}

    def report(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> dict:
        """Optional: sections of the evaluation report the window draws (core/tasks/base.py lists them); here
        the confusion matrix of the predicted classes. Delete it if you have nothing to show."""
        predicted, classes = [torch.zeros(0, dtype=torch.int64, device=split["y"].device)], 0
        for batch in iter_slices(split, max(batch_size, 1024)):
            logits = model(batch["x"])
            predicted.append(logits.argmax(dim=1))
            classes = logits.shape[1]
        labels = [f"class {c}" for c in range(classes)]
        return {"confusion": confusion_section(split["y"], torch.cat(predicted), labels)}

    @classmethod
    def serving_class(cls):
        """What `amp-console predict`, `export` (and its serve.py) and the window's Model preview use:
        PointsServing, below. Keep it while your model reads a row of numbers; for other inputs, delete it and
        declare them, in the order your model takes them, e.g. token ids of any length padded with 0:
        `inputs = (Input("ids", "int64", ("seq",), pad=0),)` (core.tasks.serving.Input; docs/tasks.md)."""
        return PointsServing


class PointsServing(FeatureServing):
    """A point is a row of `features` numbers, columns x1..xF as the model reads them (predict's input file, the
    preview's fields, filled from the validation split by Sample); the answer is each class's probability (p0,
    p1, ...: softmax over the model's outputs) and the likeliest (`predicted`)."""

    probabilities = True
    preview = PreviewSpec(
        "feature_row",
        "class_probabilities",
        answer="predict_rows",
        examples="example_rows",
        noun="point",
        column_prefix="x",
    )


def make_points(samples: int, features: int, classes: int, spread: float, seed: int):
    """(x float32 (samples, features), y int64 (samples,)): points around `classes` random centres."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=gen)
    y = torch.randint(0, classes, (samples,), generator=gen)
    x = centres[y] + spread * torch.randn(samples, features, generator=gen)
    return x, y


def read_points(path: str):
    """(x, y) from a CSV file with a header line: numeric feature columns, then the class (0, 1, ...)."""
    import numpy as np

    try:
        table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)
    except (OSError, ValueError) as exc:  # a DataError is shown as one line naming the file
        raise DataError(f"{path}: {str(exc).splitlines()[0]}") from None
    if table.shape[1] < 2 or len(table) < 10:
        raise DataError(f"{path}: expected 10 rows or more of numeric columns, the class (0, 1, ...) last")
    return torch.from_numpy(table[:, :-1]).float(), torch.from_numpy(table[:, -1]).long()
