"""The serving part of the task API: what a trained model of a task is once deployed.

`Task.serving()` is a TaskServing for the task's options: its `inputs` (Input: what the model reads, by name),
the export's module, manifest and sample batch (by default the run's validation rows of those inputs);
`answers`, the methods a Predictor (core.runs.predict) answers with, called with the predictor first
(`predictor.recommend(history)` is `serving.recommend(predictor, history)`); `file_scorer` for `amp-console
predict`; `preview`, the Model preview's PreviewSpec; `rows_module`, its part of an export's serve.py.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from core.errors import ConfigError, DataError

if TYPE_CHECKING:  # torch and numpy are imported when used: `predict --help` reads the file scorers' options
    import numpy as np
    import torch
    from torch import nn

DIM_MAX = 1 << 20  # the largest size of a dynamic dimension an exported program accepts
SAMPLE_ROWS = 4  # inputs a run's samples show (TaskServing.samples)
SAMPLE_CHARS = 160  # the longest text of a sample's input or answer


@dataclass(frozen=True)
class ServingShape:
    """What a trained model reads, as the predictor needs it; 0 where the task has no such thing."""

    n_items: int = 0  # the catalogue size (scores over items 1..n_items)
    max_len: int = 0  # the longest history the model reads
    n_features: int = 0  # numbers per input row


class ServedTask(Protocol):
    """What serving reads of its task (a core.tasks.base.Task)."""

    name: str
    opts: dict


class TaskServing(ABC):
    """The serving part of one task (see the module doc); `self.opts` are the task's options."""

    output_name: ClassVar[str]
    answers: ClassVar[tuple[str, ...]] = ()  # methods taking the predictor first (see the module doc)
    file_scorer: ClassVar[type[FileScorer] | None] = None  # None: `predict` does not score files of this task

    def __init__(self, task: ServedTask):
        self.task: Any = task  # the Task: its options, its data and its rules
        self.opts = task.opts

    @abstractmethod
    def module(self, model: nn.Module, fmt: str) -> nn.Module:
        """The deployable module over `model` (its `model` attribute) for export format `fmt`, taking `inputs`."""

    def weights(self, model: nn.Module) -> nn.Module:
        """The part of `model` cast to an export's reduced dtype."""
        return model

    def inputs(self, model: nn.Module) -> tuple[Input, ...]:
        """What the deployable module reads, in order: the task's declared `inputs` (Task.inputs)."""
        return tuple(getattr(self.task, "inputs", ()) or ())

    def sample_inputs(self, model: nn.Module, rows: int, seed: int) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """About `rows` rows of each input (a tensor alone: of the one input) from the run's validation data (its
        test, then training data when it has none), each input read from the batch key of its name."""
        import torch

        split, specs = validation_split(self.task, rows), self.inputs(model)
        missing = [s.name for s in specs if not isinstance(split.get(s.name), torch.Tensor)]
        if missing or not specs:
            raise DataError(
                f"the {self.task.name} task's validation data has no {missing[0] if missing else 'inputs'!r} "
                f"batch key for its served input: name each of its `inputs` after a key of its batches"
            )
        return tuple(split[s.name][:rows].to(torch.int64 if s.dtype == "int64" else torch.float32) for s in specs)

    @abstractmethod
    def manifest(self, model: nn.Module, state: dict, sample: torch.Tensor) -> dict:
        """The manifest's task part: `inputs` and `outputs` ([{name, shape, dtype, meaning}]) and `serving` (what
        a server needs around the model). `state`: the checkpoint's."""

    def shape(self, model: nn.Module) -> ServingShape:
        """The facts about `model` the predictor reads."""
        return ServingShape()

    # ---- the Model preview (PreviewSpec below): called through the Predictor, as answers are
    preview: ClassVar[PreviewSpec | None] = None  # None: the window has no preview page for this task

    def preview_quality(self, labels_in_order) -> tuple[str, float | None] | None:
        """ranked_list: (measure, value or None) of candidates in the order shown given their true labels."""
        return None

    def _spec(self) -> PreviewSpec:
        if self.preview is None:
            raise ConfigError("task", f"the {self.task.name} task declares no preview")
        return self.preview

    def preview_examples(self, predictor) -> list:
        """Examples of the preview's input from the run's data; [] when the task has none."""
        spec = self._spec()
        return [] if spec.examples is None else list(getattr(self, spec.examples)(predictor, spec.example_limit))

    def preview_answer(self, predictor, value, **options) -> Any:
        """The answer to one input of the preview's input kind, as plain values of its output kind (an
        id_sequence's ranked_list: the answer method's own object)."""
        import numpy as np

        spec = self._spec()
        answer = functools.partial(getattr(self, spec.answer), predictor)
        kind = spec.input_kind
        if kind == "text":
            out = answer([str(value)], **options)[0]
        elif kind == "feature_row":
            out = answer(np.asarray([value], dtype=np.float32), **options)[0]
        elif kind == "feature_rows":
            out = answer(np.asarray(value, dtype=np.float32), **options)
        else:  # id_sequence
            out = answer(list(value), k=spec.top_k, **options)
        if spec.output_kind == "score":
            return float(out)
        return [float(v) for v in out] if isinstance(out, np.ndarray) else out

    def preview_explain(self, predictor, text: str) -> list[tuple[str, float]]:
        """text: (word, effect) of the words that moved the answer most (the spec's `explain` method)."""
        spec = self._spec()
        if spec.explain is None:
            return []
        return [(str(w), float(e)) for w, e in getattr(self, spec.explain)(predictor, text)]

    # ---- samples during training (Task.samples): the preview's examples answered, as short texts
    sample_texts: ClassVar[tuple[str, ...]] = ()  # a text preview's fixed inputs (it has no examples)

    def samples(self, predictor, rows: int = SAMPLE_ROWS) -> list[dict[str, str]]:
        """The model's answers to `rows` of the preview's examples (a text preview: `sample_texts`), as
        [{input, answer}] texts; the inputs are picked at the first call and kept, so answers compare."""
        spec = self._spec()
        if getattr(self, "_sample_inputs", None) is None:
            found = getattr(self, spec.examples)(predictor, rows) if spec.examples else self.sample_texts
            self._sample_inputs = list(found)[:rows]
        return [
            dict(zip(("input", "answer"), map(cut, self._sample_row(spec, predictor, x)))) for x in self._sample_inputs
        ]

    def _sample_row(self, spec: PreviewSpec, predictor, example) -> tuple[str, str]:
        import numpy as np

        kind, output = spec.input_kind, spec.output_kind
        if kind == "id_sequence":
            owner, history = example
            rec = self.preview_answer(predictor, history)
            return f"{spec.noun} {owner}: {len(history)} {spec.item}s, last {listed(history[-3:])}", listed(rec.items)
        if kind == "feature_rows":
            order = np.argsort(-np.asarray(self.preview_answer(predictor, example.features)), kind="stable")
            answer = listed(np.asarray(example.doc_ids, dtype=object)[order].tolist())
            quality = None if example.labels is None else self.preview_quality(np.asarray(example.labels)[order])
            if quality and quality[1] is not None:
                answer = f"{quality[0]} {quality[1]:.3f}: {answer}"
            return f"{spec.noun} {example.query_id} ({len(order)} {spec.item}s)", answer
        value = self.preview_answer(predictor, example)
        text = str(example) if kind == "text" else listed([f"{float(v):.3g}" for v in example])
        if output == "score":
            verdict = f" ({spec.classes[int(value >= 0.5)]})" if len(spec.classes) == 2 else ""
            return text, f"{spec.label} {value:.3f}{verdict}"
        if output == "class_probabilities":
            best = int(np.argmax(value))
            return text, f"{spec.classes[best] if best < len(spec.classes) else f'class {best}'} ({value[best]:.3f})"
        return text, listed([f"{float(v):.4g}" for v in np.ravel(value)])  # values

    # ---- the export's serve.py: the task's part of it (see the module doc)
    rows_module: ClassVar[str]  # its file name, beside the module of the serving part's class

    def rows_source(self) -> bytes:
        """The task's part of serve.py, byte for byte (standard library and torch only)."""
        import inspect
        from pathlib import Path

        owner = next(cls for cls in type(self).__mro__ if "rows_module" in vars(cls))  # a subclass elsewhere
        return Path(inspect.getfile(owner)).with_name(self.rows_module).read_bytes()


def not_served(task: str) -> str:
    """Why a task is not served, and what to add (one line)."""
    return (
        f"task {task!r} has no serving part: declare what its model reads on the task, e.g. inputs = "
        f"(Input('ids', 'int64', ('seq',), pad=0),) (core.tasks.serving.Input; docs/tasks.md, 'Serving it')"
    )


def cut(text: str, most: int = SAMPLE_CHARS) -> str:
    """`text` on one line, at most `most` characters (cut with …)."""
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[: most - 1] + "…"


def listed(values, most: int = 5) -> str:
    """The first `most` values, comma-separated, then … and the count when there are more."""
    values = list(values)
    more = f", … ({len(values)})" if len(values) > most else ""
    return ", ".join(str(v) for v in values[:most]) + more


class ModelAtHand:
    """What the serving answers read of a Predictor (core.runs.predict), for the model a run is training: the
    predictor its samples are asked with (Task.samples). `config`: the run's {data, seed}."""

    checkpoint = "the model being trained"

    def __init__(self, task, serving: TaskServing, model: nn.Module, data, config: dict):
        import torch

        self.task, self.task_object, self.serving, self.model, self.config = task.name, task, serving, model, config
        self.vocabulary, self.data_info = data.vocabulary, data.info
        self.device = next((p.device for p in model.parameters()), torch.device("cpu"))
        self.lock = contextlib.nullcontext()
        self.shape = serving.shape(model)
        self.n_items, self.max_len, self.n_features = self.shape.n_items, self.shape.max_len, self.shape.n_features

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "serving" not in self.__dict__ or name not in self.serving.answers:
            raise AttributeError(name)
        return functools.partial(getattr(self.serving, name), self)


def validation_split(task, limit: int, settings: dict | None = None) -> dict:
    """The first `limit` rows of `task`'s validation data (its test, then training data when it has none), as a
    dict of CPU tensors; `settings`: the run's {data, seed} (default: those Task.use_config recorded)."""
    import torch

    settings = settings if settings is not None else getattr(task, "run_settings", {})
    data = task.load_data(str(settings.get("data") or ""), int(settings.get("seed", 0)))
    split = next((s for s in (data.val, data.test, data.train) if s is not None and len(s)), None)
    if split is not None and not isinstance(split, dict):  # a Dataset: its first `limit` items
        from core.data.loaders import first_rows

        split = first_rows(split, limit, torch.device("cpu"))
    return {k: v[:limit].cpu() for k, v in (split or {}).items() if isinstance(v, torch.Tensor)}


_DTYPES = ("float32", "int64")


@dataclass(frozen=True)
class Input:
    """One input a served model reads (a Task's `inputs`, in the order the model takes them; docs/tasks.md):
    its batch key `name`, `dtype` (float32 or int64) and `shape` per row, where an int is a fixed size and a
    name a length that varies (rows padded with `pad` to the batch's longest; a name shared by two inputs is
    one length)."""

    name: str
    dtype: str = "float32"
    shape: tuple[int | str, ...] = ()
    pad: float | None = None
    meaning: str = ""

    def __post_init__(self):
        if not self.name.isidentifier() or self.dtype not in _DTYPES:
            raise ValueError(f"Input {self.name!r}, {self.dtype!r}: give a plain name and a dtype of {_DTYPES}")
        if not all((type(d) is int and d > 0) or (isinstance(d, str) and d.isidentifier()) for d in self.shape):
            raise ValueError(f"Input {self.name!r} shape {self.shape!r}: sizes above 0 or names of lengths")

    def entry(self) -> dict:
        """The manifest's entry: shape ["batch", *shape], and its pad when it has one."""
        pad = {} if self.pad is None else {"pad": self.pad}
        return tensor_entry(self.name, ["batch", *self.shape], self.dtype, self.meaning) | pad

    def dynamic_shape(self, dims: dict) -> dict:
        """torch.export's dynamic shape: the batch and each named length, 1..DIM_MAX (one Dim per name)."""
        import torch

        named = {0: "batch"} | {axis + 1: d for axis, d in enumerate(self.shape) if isinstance(d, str)}
        return {a: dims.setdefault(n, torch.export.Dim(n, min=1, max=DIM_MAX)) for a, n in named.items()}

    def row(self, value) -> np.ndarray:
        """One row's value (a number, a list, or their text: JSON or numbers apart) as float64; ValueError."""
        import numpy as np

        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"{self.name} is empty")
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                value = value.replace(",", " ").split()
        try:
            x = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} is not a number or a list of numbers") from None
        shape = ", ".join(map(str, self.shape)) or "one number"
        if x.ndim != len(self.shape) or any(
            n != d if isinstance(d, int) else n < 1 for n, d in zip(x.shape, self.shape)
        ):
            raise ValueError(f"{self.name} has shape {tuple(x.shape)}; the model reads ({shape}) per row")
        whole = self.dtype == "int64"
        with np.errstate(over="ignore", invalid="ignore"):
            fits = (x == np.round(x)) & (np.abs(x) < 2.0**63) if whole else np.isfinite(x.astype(np.float32))
        if not fits.all():
            kind = "whole numbers of int64" if whole else "finite float32 numbers"
            raise ValueError(f"{self.name} holds values that are not {kind}")
        return x

    def batch(self, rows: list) -> np.ndarray:
        """Checked rows (`row`) as one array, each padded with `pad` to the longest; ValueError without a pad
        for rows of different lengths."""
        import numpy as np

        longest = tuple(max((r.shape[a] for r in rows), default=1) for a in range(len(self.shape)))
        if self.pad is None and any(r.shape != longest for r in rows):
            raise ValueError(f"{self.name}: rows of different lengths, and its Input declares no pad")
        out = np.full((len(rows), *longest), 0 if self.pad is None else self.pad, dtype=self.dtype)
        for i, r in enumerate(rows):
            out[i, ...][tuple(slice(0, n) for n in r.shape)] = r
        return out


def tensor_entry(name: str, shape: list, dtype: str, meaning: str = "") -> dict:
    """One entry of a manifest's `inputs` or `outputs`."""
    return {"name": name, "shape": shape, "dtype": dtype} | ({"meaning": meaning} if meaning else {})


PREVIEW_CALLS = ("preview_examples", "preview_answer", "preview_explain")  # answered as `answers` are


def feature_rows(values, width: int, what: str, task: str) -> np.ndarray:
    """`values` as an (n, width) float32 array of finite numbers (one row alone is a batch of one), else a
    DataError naming the first bad number."""
    import numpy as np

    try:
        wide = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{what}: not numbers: {exc}") from None
    with np.errstate(over="ignore"):
        x = wide.astype(np.float32)
    if x.ndim == 1 and x.shape[0] == width:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != width:
        raise DataError(
            f"{what}: the {task} model takes {width} numbers per row, got an array of shape {tuple(x.shape)}"
        )
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):  # NaN, inf, or beyond float32 (1e39): the model's answer would be NaN or meaningless
        row, column = (int(v) for v in bad[0])
        value = wide.reshape(x.shape)[row, column]
        raise DataError(f"{what}: row {row}, number {column + 1} ({value:g}) is not a finite float32 number")
    return np.ascontiguousarray(x)


class FileScorer:
    """How `predict` scores a file for one task. Built for the file's reader (columns found with `reader.find` /
    `require`, declared with `reader.use`; `schema`, the output's), `score(batch, lines, report)` yields output
    tables, reporting bad rows through `_good`, and `finish(report)` what is left. `options`: `batch_size` and
    the `command_options` values (`option(name)`); `input_columns`: names a CSV's delimiter is sniffed by."""

    unit: ClassVar[str] = "rows"  # what `scored` counts
    input_columns: ClassVar[tuple[str, ...]] = ()
    command_options: ClassVar[tuple[CommandOption, ...]] = ()  # its own options of `amp-console predict`
    schema: Any = None  # the output table's pyarrow schema

    def __init__(self, predictor, reader, options):
        self.predictor, self.reader, self.options = predictor, reader, options
        self.scored = 0  # output units (reviews, users, candidates, points) scored
        self.rows_in = 0  # input rows read (bad ones included)
        self.line_column = reader.unit  # "line" (CSV) or "row" (Parquet)

    def option(self, name: str) -> Any:
        """The value of the command option `name` (a CommandOption's dest)."""
        declared = next(o for o in self.command_options if o.dest == name)
        return getattr(self.options, "task_options", {}).get(name, declared.default)

    def describe(self) -> str:
        return f"reading {self.reader.path}"

    def notes(self) -> list[str]:
        return []

    def score(self, batch, lines, report):
        raise NotImplementedError

    def finish(self, report):
        return []

    def _good(self, batch, lines, checks, report):
        """Report the batch's bad rows (core.data.row_checks.Checks); the good rows' indices."""
        import numpy as np

        self.rows_in += batch.num_rows
        report.add_checks(checks, lines)
        return np.flatnonzero(~checks.bad)

    def _slices(self, good):
        step = self.options.batch_size
        for start in range(0, len(good), step):
            yield good[start : start + step]


@dataclass(frozen=True)
class CommandOption:
    """An option of `amp-console predict` a file scorer reads: `--flag`, a switch for a bool `default`, else a
    number of its type, at least `minimum` (else `why` is the error)."""

    flag: str
    help: str
    default: Any = False
    minimum: float | None = None
    why: str = ""

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def check(self, value) -> None:
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(self.flag, f"{value}: {self.why or f'at least {self.minimum:g}'}")


# ============================================================================== the Model preview
# A PreviewSpec's input_kind: what one input is, and what its examples (the `examples` answer) are:
#   text          a text typed in; no examples
#   feature_row   `n_features` numbers, fields named `column_prefix` 1..N (as predict reads them); examples: an
#                 (n, F) array of rows. With `image` (height, width) the row is a grey image's pixels, row by row,
#                 also shown as a drawing pad (blank pixels `pixel_range[0]`, fully inked ones `pixel_range[1]`)
#   feature_rows  a group of rows scored together (a query's candidates), picked from the examples: objects with
#                 `query_id`, `doc_ids`, `features` (n, F) and `labels` (n,) or None
#   id_sequence   ids in order (a history), typed or picked: examples are (owner id, [ids])
PREVIEW_INPUTS = ("text", "feature_row", "feature_rows", "id_sequence")
# Its output_kind: what TaskServing.preview_answer gives for one input:
#   score               one number in [0, 1] (`label` names it; `classes`: the verdicts below / from 0.5)
#   class_probabilities one probability per class (`classes` names them)
#   values              the model's numbers (a regression's prediction): `names` names them (default: `label` for
#                       one, label1..labelN for more)
#   ranked_list         feature_rows: a score per row, ranked by the page (true labels beside, measured by
#                       TaskServing.preview_quality); id_sequence: a Recommendation (top_k items, scores, seen
#                       marks, unknown ids)
PREVIEW_OUTPUTS = ("class_probabilities", "score", "values", "ranked_list")


@dataclass(frozen=True)
class PreviewSpec:
    """What the window's Model preview shows for a task, as data: the page is built from its kinds (above), no
    GUI code of the task's own. `answer`, `examples` (taking a limit) and `explain` (text: the words that moved
    the answer most) name serving methods listed in `answers`; `noun`, `item`, `hint` are what the page says."""

    input_kind: str
    output_kind: str
    answer: str
    examples: str | None = None
    example_limit: int = 200
    explain: str | None = None
    noun: str = "input"  # one input (or an example's owner): "review", "user", "query"
    item: str = "item"  # a ranked list's entry: "lesson"
    hint: str = ""  # the input field's placeholder
    label: str = "score"  # score: the number's name
    classes: tuple[str, ...] = ()
    column_prefix: str = "x"  # feature_row: the fields' names
    field_columns: int = 5  # feature_row: fields to a row (an `image` has its width to a row)
    image: tuple[int, ...] = ()  # feature_row: (height, width) when the row is a grey image's pixels, row by row
    pixel_range: tuple[float, float] = (0.0, 1.0)  # image: the value of a blank pixel, then of a fully inked one
    names: tuple[str, ...] = ()  # values: each number's name
    top_k: int = 10  # ranked_list: the entries asked for (id_sequence) or measured (feature_rows)

    def __post_init__(self):
        if self.input_kind not in PREVIEW_INPUTS or self.output_kind not in PREVIEW_OUTPUTS:
            raise ValueError(
                f"preview kinds {self.input_kind!r} -> {self.output_kind!r}: the inputs are "
                f"{', '.join(PREVIEW_INPUTS)}; the outputs {', '.join(PREVIEW_OUTPUTS)}"
            )
        if self.image:
            if self.input_kind != "feature_row":
                raise ValueError(
                    f"preview image {self.image!r}: only a feature_row input is drawn, not {self.input_kind!r}"
                )
            if len(self.image) != 2 or not all(isinstance(v, int) and v > 0 for v in self.image):
                raise ValueError(f"preview image {self.image!r}: give (height, width), two positive whole numbers")
        if (
            len(self.pixel_range) != 2
            or not all(math.isfinite(v) for v in self.pixel_range)
            or self.pixel_range[0] == self.pixel_range[1]
        ):
            raise ValueError(
                f"preview pixel_range {self.pixel_range!r}: give (blank, inked), two different finite numbers"
            )

    @property
    def pixels(self) -> int:
        """The numbers of one `image` (0 without one)."""
        return self.image[0] * self.image[1] if self.image else 0
