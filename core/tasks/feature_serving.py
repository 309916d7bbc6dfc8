"""A serving part for any task whose model reads a row of numbers: x (B, F) float32 -> y (B, O) float32.

A task naming this class (or a subclass) from `serving_class()` gets exports, `amp-console predict` over a file of
rows, the answers `predict_rows` and `example_rows`, and the Model preview (docs/tasks.md, "Serving it"). A subclass
may set `output_names`, `probabilities` (softmax over the outputs), `input_shape` (what the model reads of a row),
`preview`, and `features(model)` when neither `input_shape` nor the model's first nn.Linear gives the width.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from core.errors import DataError
from core.tasks.serving import FileScorer, PreviewSpec, ServingShape, TaskServing, feature_rows, tensor_entry


class FeatureModule(nn.Module):
    """x (B, F) float32 -> (B, O) float32: the model's outputs (a 1-D output is one column), as probabilities
    (softmax) when `probabilities`; the input is cast to the model's dtype (an export in a reduced dtype) and,
    given `input_shape`, each row is reshaped to it (an image's pixels, row by row)."""

    def __init__(self, model: nn.Module, probabilities: bool, input_shape: tuple[int, ...] = ()):
        super().__init__()
        self.model = model
        self.probabilities = probabilities
        self.input_shape = tuple(int(v) for v in input_shape)
        self.dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_shape:
            x = x.reshape(x.shape[0], *self.input_shape)
        out = self.model(x.to(self.dtype)).float()
        if out.dim() == 1:
            out = out.unsqueeze(-1)
        return torch.softmax(out, dim=-1) if self.probabilities else out


def first_linear_inputs(model: nn.Module) -> int:
    """The input width of `model`'s first nn.Linear (0 when it has none)."""
    return next((int(m.in_features) for m in model.modules() if isinstance(m, nn.Linear)), 0)


class FeatureFileScorer(FileScorer):
    """`predict` over a file of rows: F numeric columns (x1..xF, f1..fF, or exactly F columns) -> line, the
    output columns (and `predicted`, the likeliest class, for probabilities)."""

    unit = "rows"

    def __init__(self, predictor, reader, options):
        import pyarrow as pa

        super().__init__(predictor, reader, options)
        width = predictor.n_features
        for prefix in ("x", "f"):
            found = [reader.find(f"{prefix}{i}") for i in range(1, width + 1)]
            if all(found):
                break
        else:
            from core.data.formats import normalise_name

            rest = [c for c in reader.columns if normalise_name(c) not in ("label", "y", "line", "row", "id")]
            if len(rest) != width:
                raise DataError(
                    f"{reader.path}: the {predictor.task} model reads {width} numeric columns "
                    f"(x1..x{width}, f1..f{width}, or exactly {width} columns); {reader.columns_note()}"
                )
            found = rest
        self.features = found
        reader.use(found)
        serving = predictor.serving
        self.names, self.probabilities = serving.output_columns(predictor.model), serving.probabilities
        fields = [(self.line_column, pa.int64())] + [(name, pa.float32()) for name in self.names]
        if self.probabilities:
            fields.append(("predicted", pa.int64()))
        self.schema = pa.schema(fields)

    def score(self, batch, lines, report):
        import numpy as np
        import pyarrow as pa

        from core.data.row_checks import Checks, feature_matrix

        checks = Checks(batch.num_rows)
        x = feature_matrix(batch, self.features, checks)
        good = self._good(batch, lines, checks, report)
        for rows in self._slices(good):
            y = self.predictor.predict_rows(x[rows])
            self.scored += len(rows)
            columns = {self.line_column: pa.array(lines[rows])}
            columns.update((name, pa.array(y[:, i])) for i, name in enumerate(self.names))
            if self.probabilities:
                columns["predicted"] = pa.array(y.argmax(1).astype(np.int64))
            yield pa.table(columns, schema=self.schema)


class FeatureServing(TaskServing):
    """Feature rows in, the model's outputs (or class probabilities) out; see the module doc."""

    input_name, output_name = "x", "y"
    probabilities: ClassVar[bool] = False  # softmax over the outputs: class probabilities
    output_names: ClassVar[tuple[str, ...]] = ()  # () -> y (one output), y1..yO; p0..pC-1 for probabilities
    input_shape: ClassVar[tuple[int, ...]] = ()  # what the model reads of one row, e.g. (1, 8, 8): () as it is
    rows_module = "feature_rows.py"  # serve.py's part (core.tasks.serving), beside this module
    answers = ("predict_rows", "example_rows")
    file_scorer = FeatureFileScorer
    preview = PreviewSpec(
        "feature_row",
        "values",
        answer="predict_rows",
        examples="example_rows",
        noun="row",
        column_prefix="x",
        label="y",
    )

    # ---- what the model reads and gives
    def features(self, model: nn.Module) -> int:
        """The numbers per input row: those of `input_shape`, else the first nn.Linear's inputs, else the task's
        `features` option."""
        if self.input_shape:
            return math.prod(self.input_shape)
        width = first_linear_inputs(model) or int(self.opts.get("features", 0) or 0)
        if width <= 0:
            raise DataError(
                f"the {self.task.name} model's input width is unknown: its serving part "
                f"(FeatureServing) reads it from the model's first nn.Linear; define features(model)"
            )
        return width

    def output_columns(self, model: nn.Module) -> list[str]:
        """The outputs' names, one per column of the module's output (worked out by running one zero row)."""
        if self.output_names:
            return list(self.output_names)
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                width = self.module(model, "program")(torch.zeros(1, self.features(model), device=device)).shape[-1]
        finally:
            model.train(was_training)
        if self.probabilities:
            return [f"p{c}" for c in range(width)]
        return ["y"] if width == 1 else [f"y{i}" for i in range(1, width + 1)]

    def module(self, model: nn.Module, fmt: str) -> nn.Module:
        return FeatureModule(model, self.probabilities, self.input_shape)

    def sample_inputs(self, model: nn.Module, rows: int, seed: int) -> torch.Tensor:
        return torch.randn(rows, self.features(model), generator=torch.Generator().manual_seed(seed))

    def manifest(self, model: nn.Module, state: dict, sample: torch.Tensor) -> dict:
        features, names = self.features(model), self.output_columns(model)
        meaning = (
            "class probabilities (softmax), column c = class c"
            if self.probabilities
            else "the model's outputs, column i = " + ", ".join(names)
        )
        return {
            "inputs": [tensor_entry(self.input_name, ["batch", features], "float32")],
            "outputs": [tensor_entry(self.output_name, ["batch", len(names)], "float32", meaning)],
            "serving": {"features": features, "outputs": names, "probabilities": self.probabilities},
        }

    def shape(self, model: nn.Module) -> ServingShape:
        return ServingShape(n_features=self.features(model))

    # ---- the answers (called with the predictor first: core.runs.predict)
    def predict_rows(self, predictor, x):
        """(n, F) rows (or one row) -> (n, O) float32 outputs, as the export computes them."""
        x = feature_rows(x, predictor.n_features, "x", predictor.task)
        with predictor.lock, torch.inference_mode():
            out = self.module(predictor.model, "program")(torch.from_numpy(x).to(predictor.device))
            return out.to("cpu").numpy()

    def example_rows(self, predictor, limit: int = 200):
        """The first `limit` rows of the run's validation data (its test data when it has none), as float32."""
        import numpy as np

        data = self.task.load_data(str(predictor.config.get("data") or ""), int(predictor.config.get("seed", 0)))
        split = data.val if data.val is not None and len(data.val) else data.test
        if split is not None and not isinstance(split, dict):  # a Dataset: its first `limit` items
            from core.data.loaders import first_rows

            split = first_rows(split, limit, torch.device("cpu"))
        x = (split or {}).get("x")
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x[0].numel() != predictor.n_features:
            return np.zeros((0, predictor.n_features), np.float32)
        return x[:limit].reshape(min(limit, len(x)), -1).float().numpy()  # an image: its pixels, row by row
