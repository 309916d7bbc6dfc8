"""The serving part of a task that declares its inputs (Task.inputs), or whose model reads a row of numbers.

A task declaring `inputs` gets it by default, a task naming it from `serving_class()` too: exports (the module takes
the inputs in order), `amp-console predict` over a file with a column per input, serve.py, the answers
`predict_inputs`, `predict_rows` and `example_rows`, and for rows the Model preview (docs/tasks.md, "Serving it").
Without `inputs` the model reads x (B, F) float32, F from `input_shape`, the model's first nn.Linear or
`features(model)`. A subclass may set `output_names`, `probabilities` (softmax over the outputs), `preview`.
"""

from __future__ import annotations

import json
import math
from typing import ClassVar

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from core.data.formats import normalise_name
from core.data.row_checks import Checks, feature_matrix
from core.errors import DataError
from core.tasks.serving import FileScorer, Input, PreviewSpec, ServingShape, TaskServing, validation_split
from core.text import first_line


class FeatureModule(nn.Module):
    """The inputs -> (B, O) float32 (or (B, ...) for a wider output): the model's outputs (a 1-D output is one
    column), as probabilities (softmax) when `probabilities`; float inputs are cast to the model's dtype (an
    export in a reduced dtype) and, given `input_shape`, a row is reshaped to it (an image's pixels, in order)."""

    def __init__(self, model: nn.Module, probabilities: bool, input_shape: tuple[int, ...] = ()):
        super().__init__()
        self.model = model
        self.probabilities = probabilities
        self.input_shape = tuple(int(v) for v in input_shape)
        self.dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.input_shape:
            inputs = (inputs[0].reshape(inputs[0].shape[0], *self.input_shape),)
        out = self.model(*(x.to(self.dtype) if x.is_floating_point() else x for x in inputs)).float()
        if out.dim() == 1:
            out = out.unsqueeze(-1)
        return torch.softmax(out, dim=-1) if self.probabilities else out


def first_linear_inputs(model: nn.Module) -> int:
    """The input width of `model`'s first nn.Linear (0 when it has none)."""
    return next((int(m.in_features) for m in model.modules() if isinstance(m, nn.Linear)), 0)


class FeatureFileScorer(FileScorer):
    """`predict` over a file: a column per input holding a list or a number (a row of numbers: also F numeric
    columns x1..xF, f1..fF or exactly F) -> line, the output columns (`predicted`, the likeliest class, for
    probabilities; an output wider than a row of numbers: `y`, its JSON)."""

    unit = "rows"

    def __init__(self, predictor, reader, options):
        super().__init__(predictor, reader, options)
        serving = predictor.serving
        self.specs = serving.inputs(predictor.model)
        self.features = serving.row_columns(predictor, reader) if not serving.task_inputs() else None
        if self.features is None:
            found = [reader.find(s.name) for s in self.specs]
            if not all(found):
                raise DataError(
                    f"{reader.path}: the {predictor.task} model reads a column per input: "
                    f"{', '.join(s.name for s in self.specs)} (a list or a number each); {reader.columns_note()}"
                )
            self.columns = found
        reader.use(self.features or self.columns)
        self.names, self.probabilities = serving.output_columns(predictor.model), serving.probabilities
        kinds = [(name, pa.float32()) for name in self.names] if self.names != ["y (JSON)"] else [("y", pa.string())]
        fields = [(self.line_column, pa.int64())] + kinds
        if self.probabilities:
            fields.append(("predicted", pa.int64()))
        self.schema = pa.schema(fields)

    def _inputs(self, batch, checks):
        """The batch's input values (a list per input: its checked rows, None where a row is bad)."""
        if self.features is not None:
            return [list(feature_matrix(batch, self.features, checks))]
        values = [[None] * batch.num_rows for _ in self.specs]
        for j, (spec, column) in enumerate(zip(self.specs, self.columns)):
            problems = {}
            for i, value in enumerate(batch.column(column).to_pylist()):
                try:
                    values[j][i] = spec.row(value)
                except ValueError as exc:
                    problems[i] = str(exc)
            mask = np.zeros(batch.num_rows, dtype=bool)
            mask[list(problems)] = True
            checks.add(mask, problems.__getitem__)
        return values

    def score(self, batch, lines, report):
        checks = Checks(batch.num_rows)
        values = self._inputs(batch, checks)
        good = self._good(batch, lines, checks, report)
        for group in self._slices(good):
            failed: list[tuple[int, str]] = []
            answered = self._answered(group, values, lines, failed)
            if failed and not answered and not self.scored:  # every row of the first: the model's, not a row's
                raise DataError(failed[0][1])
            report.add(sorted(failed))
            yield from (self._table(lines, rows, y) for rows, y in answered)

    def _answered(self, rows, values, lines, failed: list) -> list:
        """[(rows, the model's outputs)] for `rows`; a row the model fails on alone goes to `failed` as (its line,
        the one line), the others still answered (halves of the rows asked again until it is found)."""
        try:
            inputs = {s.name: [v[i] for i in rows] for s, v in zip(self.specs, values)}
            return [(rows, self.predictor.predict_inputs(inputs))]
        except DataError as exc:
            if len(rows) == 1:
                failed.append((int(lines[rows[0]]), str(exc)))
                return []
            half = len(rows) // 2
            return self._answered(rows[:half], values, lines, failed) + self._answered(
                rows[half:], values, lines, failed
            )

    def _table(self, lines, rows, y):
        self.scored += len(rows)
        columns = {self.line_column: pa.array(lines[rows])}
        if y.ndim > 2:
            columns["y"] = pa.array([json.dumps(row.tolist()) for row in y])
        else:
            columns.update((name, pa.array(y[:, i])) for i, name in enumerate(self.names))
        if self.probabilities:
            columns["predicted"] = pa.array(y.reshape(len(y), -1).argmax(1).astype(np.int64))
        return pa.table(columns, schema=self.schema)


class FeatureServing(TaskServing):
    """The declared inputs (or a row of numbers) in, the model's outputs (or class probabilities) out."""

    output_name = "y"
    probabilities: ClassVar[bool] = False  # softmax over the outputs: class probabilities
    output_names: ClassVar[tuple[str, ...]] = ()  # () -> y (one output), y1..yO; p0..pC-1 for probabilities
    input_shape: ClassVar[tuple[int, ...]] = ()  # what the model reads of one row, e.g. (1, 8, 8): () as it is
    rows_module = "feature_rows.py"  # serve.py's part (core.tasks.serving), beside this module
    answers = ("predict_inputs", "predict_rows", "example_rows")
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

    def __init__(self, task):
        super().__init__(task)
        if self.task_inputs():
            vars(self)["preview"] = None  # its pages are for rows of numbers

    # ---- what the model reads and gives
    def task_inputs(self) -> tuple[Input, ...]:
        return super().inputs(nn.Module())

    def inputs(self, model: nn.Module) -> tuple[Input, ...]:
        """The task's declared inputs, else x: a row of `features(model)` numbers."""
        return self.task_inputs() or (Input("x", "float32", (self.features(model),)),)

    def features(self, model: nn.Module) -> int:
        """The numbers per input row: `input_shape`'s, else the first nn.Linear's inputs, else option `features`."""
        if self.input_shape:
            return math.prod(self.input_shape)
        width = first_linear_inputs(model) or int(self.opts.get("features", 0) or 0)
        if width <= 0:
            raise DataError(
                f"the {self.task.name} model's input width is unknown: declare its `inputs` on the task "
                f"(docs/tasks.md, 'Serving it'), or define features(model) in its serving part"
            )
        return width

    def output_columns(self, model: nn.Module) -> list[str]:
        """The outputs' names, one per column of the module's output (worked out on a probe input of each
        input: zeros, or its pad, two long where a length varies); ["y (JSON)"] for an output wider than that."""
        if self.output_names:
            return list(self.output_names)
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        probe = [
            s.batch([s.row(torch.zeros([2 if isinstance(d, str) else d for d in s.shape]).tolist())])
            for s in self.inputs(model)
        ]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = self.module(model, "program")(*(torch.from_numpy(x).to(device) for x in probe))
        except Exception as exc:
            raise DataError(f"the {self.task.name} model fails on zeros of its inputs: {exc}") from None
        finally:
            model.train(was_training)
        if out.dim() > 2:
            return ["y (JSON)"]
        width = out.shape[-1]
        if self.probabilities:
            return [f"p{c}" for c in range(width)]
        return ["y"] if width == 1 else [f"y{i}" for i in range(1, width + 1)]

    def row_columns(self, predictor, reader) -> list[str] | None:
        """A row of numbers' F columns in the file (x1..xF, f1..fF, or exactly F), else None when it has an
        x column (a list per row), else a DataError."""
        width = predictor.n_features
        for prefix in ("x", "f"):
            found = [reader.find(f"{prefix}{i}") for i in range(1, width + 1)]
            if all(found):
                return found
        if reader.find("x"):
            return None
        rest = [c for c in reader.columns if normalise_name(c) not in ("label", "y", "line", "row", "id")]
        if len(rest) != width:
            raise DataError(
                f"{reader.path}: the {predictor.task} model reads {width} numeric columns "
                f"(x1..x{width}, f1..f{width}, or exactly {width} columns); {reader.columns_note()}"
            )
        return rest

    def module(self, model: nn.Module, fmt: str) -> nn.Module:
        return FeatureModule(model, self.probabilities, self.input_shape)

    def sample_inputs(self, model: nn.Module, rows: int, seed: int) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The run's validation rows (TaskServing.sample_inputs); a row of numbers its data lacks: random rows."""
        if self.task_inputs():
            return super().sample_inputs(model, rows, seed)
        try:
            x = validation_split(self.task, rows).get("x")
        except Exception:
            x = None
        width = self.features(model)
        if isinstance(x, torch.Tensor) and x.dim() >= 2 and x[0].numel() == width and len(x) > 1:
            return (x.reshape(len(x), width).float(),)
        return (torch.randn(rows, width, generator=torch.Generator().manual_seed(seed)),)

    def manifest(self, model: nn.Module, state: dict, sample) -> dict:
        names = self.output_columns(model)
        meaning = (
            "class probabilities (softmax), column c = class c"
            if self.probabilities
            else "the model's outputs, column i = " + ", ".join(names)
        )
        width = len(names) if names != ["y (JSON)"] else "..."
        return {
            "outputs": [{"name": self.output_name, "shape": ["batch", width], "dtype": "float32", "meaning": meaning}],
            "serving": {"outputs": names, "probabilities": self.probabilities}
            | ({} if self.task_inputs() else {"features": self.features(model)}),
        }

    def shape(self, model: nn.Module) -> ServingShape:
        return ServingShape(n_features=0 if self.task_inputs() else self.features(model))

    # ---- the answers (called with the predictor first: core.runs.predict)
    def predict_inputs(self, predictor, inputs: dict):
        """{input name: its rows (lists, numbers or checked arrays)} -> the outputs as float32, as the export
        computes them; a DataError names a bad row."""
        arrays = []
        for spec in self.inputs(predictor.model):
            rows = inputs.get(spec.name)
            if rows is None:
                raise DataError(f"no {spec.name!r}: the {predictor.task} model reads {spec.name}")
            try:
                arrays.append(spec.batch([r if isinstance(r, np.ndarray) else spec.row(r) for r in rows]))
            except ValueError as exc:
                raise DataError(str(exc)) from None
        try:
            with predictor.lock, torch.inference_mode():
                module = self.module(predictor.model, "program")
                return module(*(torch.from_numpy(a).to(predictor.device) for a in arrays)).to("cpu").numpy()
        except Exception as exc:  # an id beyond an embedding's, a shape the model cannot take: one line
            shapes = ", ".join(f"{s.name} {a.shape} {a.dtype}" for s, a in zip(self.inputs(predictor.model), arrays))
            raise DataError(
                f"the {predictor.task} model fails on {shapes}: {type(exc).__name__}: {first_line(exc)}"
            ) from None

    def predict_rows(self, predictor, x):
        """(n, F) rows (or one row) -> (n, O) float32 outputs, as the export computes them."""
        from core.tasks.serving import feature_rows

        return self.predict_inputs(predictor, {"x": list(feature_rows(x, predictor.n_features, "x", predictor.task))})

    def example_rows(self, predictor, limit: int = 200):
        """The first `limit` rows of the run's validation data (its test data when it has none), as float32."""
        x = validation_split(self.task, limit, predictor.config).get("x")
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x[0].numel() != predictor.n_features:
            return np.zeros((0, predictor.n_features), np.float32)
        return x.reshape(len(x), -1).float().numpy()  # an image: its pixels, row by row
