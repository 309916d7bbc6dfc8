"""The task interface: one model + data + loss + metrics. The registry in `core.tasks` lists them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from core.data.batching import split_length
from core.data.splits import DataSource
from core.devices import available_ram, cuda_free_memory
from core.errors import ConfigError, TaskOutputError
from core.precision_modes import OPTIMIZER_STATES, PRECISION_BYTES, state_bytes_per_parameter
from core.tasks.feature_serving import FeatureServing
from core.tasks.options import TaskOption, checked_options, option_errors
from core.tasks.serving import Input, ModelAtHand
from core.text import size

if TYPE_CHECKING:
    from core.tasks.serving import TaskServing

# Bytes per trainable parameter while training: float32 weights and gradients, plus the optimizer's state
# (Adam/AdamW: two float32 moments; SGD: one momentum buffer).
MARGIN_BYTES = 256 * 2**20  # activations, the allocator's slack, the framework itself


@dataclass
class TaskData:
    """Train / validation (/ test) splits as dicts of equally long tensors (or a Dataset: core.data.loaders), plus
    `info` (what the model needs to know, saved in checkpoints), `ceiling` (the best metrics synthetic data's
    planted structure allows), `baseline`, `vocabulary` (the model's ids -> the data's own: {"item_id": raw ids,
    model item k is entry k - 1}) and `notes` (one-line remarks for the user)."""

    train: dict[str, torch.Tensor]
    val: dict[str, torch.Tensor]
    test: dict[str, torch.Tensor] | None = None
    info: dict = field(default_factory=dict)
    ceiling: dict = field(default_factory=dict)
    baseline: dict = field(default_factory=dict)
    vocabulary: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


@dataclass
class EvalParts:
    """What a slice of a split contributes to its metrics (core.engine.evaluation shares slices out): `sums`
    (scalar tensors) add up over slices; `values` (one entry per row) are concatenated in row order."""

    sums: dict[str, torch.Tensor]
    values: dict[str, torch.Tensor] = field(default_factory=dict)


class Task(ABC):
    """A trainable job: class attributes, load_data, build_model, loss, and either evaluate_parts + metrics
    (evaluation shared out across DDP ranks) or evaluate alone (every rank evaluates the whole split)."""

    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[tuple[TaskOption, ...]] = ()
    defaults: ClassVar[dict] = {}
    primary_metric: ClassVar[str] = "loss"
    # The batch tensor whose non-padding entries throughput counts as tokens; None: samples only.
    tokens_key: ClassVar[str | None] = None
    # What a validation metric averages over (rows, queries, users; counted by validation_units).
    validation_unit: ClassVar[str] = "rows"
    # `amp-console data generate` writes its synthetic data as a file (synthetic_table).
    synthetic_file: ClassVar[bool] = False
    # Option -> the default a run saved without it trained with, where today's differs (core.tasks.saved_options).
    # Class attributes above are literals: core.tasks.catalog reads them without importing torch.
    saved_defaults: ClassVar[dict] = {}
    # Optional: a method configure_optimizers(self, model, cfg) returning a torch optimizer over model's parameters,
    # or (optimizer, LR scheduler), instead of the engine's (cfg.optimizer, cfg.lr, cfg.schedule: then unused). The
    # engine steps the scheduler once per optimizer step and keeps fp16 scaling, grad_accum, grad_clip, checkpoints.
    configure_optimizers: ClassVar = None
    # What the model reads when served, in the order it takes them (core.tasks.serving.Input: name, dtype, shape
    # per row, pad): export, predict and serve.py work from it (FeatureServing; docs/tasks.md, "Serving it").
    inputs: ClassVar[tuple[Input, ...]] = ()

    def __init__(self, options: dict | None = None):
        self.opts = checked_options(self, options)
        self.source = DataSource()  # the data settings (use_config)

    def use_config(self, cfg) -> Task:
        """Take the run's data settings (given splits, delimiter, column names) from RunConfig `cfg`; returns self."""
        self.source = DataSource.from_config(cfg)
        self.run_settings = {"data": cfg.data, "seed": cfg.seed}  # what the serving part's examples read
        return self

    def data_source(self, data_path: str) -> DataSource:
        """The source load_data(`data_path`) reads: use_config's, or `data_path` alone when it names another file."""
        return getattr(self, "source", DataSource()).for_path(data_path)

    @classmethod
    def option_errors(cls, options: dict) -> dict[str, str]:
        """task_options.<name> -> message, for every unknown or invalid option (core.tasks.options)."""
        return option_errors(cls.name, cls.options, options)

    def settled_options(self, info: dict) -> dict:
        """Options left for the data to decide (an `auto`) as what they chose for TaskData.info `info`: recorded in
        the run's config, so that a resumed run trains as it started."""
        return {}

    def synthetic_table(self, rows: int, seed: int):
        """`rows` rows of synthetic data as a pyarrow Table in the file format `load_data` reads."""
        raise NotImplementedError(f"{self.name} writes no synthetic data file")

    @abstractmethod
    def load_data(self, data_path: str, seed: int) -> TaskData:
        """CPU tensors for every split: from `data_path` (CSV/Parquet) or, when it is empty, synthetic data."""

    @abstractmethod
    def build_model(self, info: dict) -> nn.Module:
        """The model (float32, on the CPU), sized by the options and TaskData.info `info` (empty: the options alone)."""

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

    def metric_objects(self) -> dict[str, Any]:
        """Optional: metrics kept as objects, {name: torchmetrics.Metric}, reported beside `metrics`' numbers under
        these names (events, `monitor`, the best checkpoint). Called once; the engine moves them to the model's
        device, resets them at each evaluation, and computes them after it (under DDP, synced across the ranks by
        torchmetrics); evaluate_parts (or evaluate) feeds them each batch with update_metrics. Default: none."""
        return {}

    def update_metrics(self, *args: Any, **kwargs: Any) -> None:
        """Call from evaluate_parts' batch loop: metric.update(*args, **kwargs) on every Metric object of this
        evaluation (metric_objects), e.g. (probabilities, targets); nothing when the task has none."""
        for metric in self.__dict__.get("_metric_objects", {}).values():
            metric.update(*args, **kwargs)

    def report(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> dict:
        """The evaluation report's task part (core.runs.evaluation_report), JSON-ready sections the window draws:
        `confusion` {labels, matrix (rows: true class)}, `roc` {fpr, tpr, threshold, auc}, `histogram` {edges,
        series: [{name, counts}]}, `curves` [{title, y_label, ks, series: [{name, label, values, emphasis:
        main|normal|faint}]}], `buckets` {title, by, unit, k, total, rows: bucket_rows, series: [{name, label,
        curve}]}. Called like evaluate, on one process; {} when the task has no report."""
        return {}

    @classmethod
    def serving_class(cls) -> type[TaskServing] | None:
        """The serving part (core.tasks.serving): FeatureServing when the task declares `inputs`; None: not served."""
        return FeatureServing if cls.inputs else None

    def serving(self) -> TaskServing | None:
        """The serving part for these options (see serving_class)."""
        cls = self.serving_class()
        return cls(self) if cls is not None else None

    def samples(self, model: nn.Module, data: TaskData) -> list[dict[str, str]] | None:
        """A few of the model's answers, [{"input": text, "answer": text}], the same inputs at each validation
        evaluation, recorded and shown beside the plots. Called on rank 0 alone, under no_grad, eval mode and the
        evaluation's autocast; keep it to a handful of rows. Default: the serving part's preview examples
        answered (TaskServing.samples); None (or no serving part): no samples."""
        serving = getattr(self, "_samples_serving", None) or self.serving()
        if serving is None or serving.preview is None:
            return None
        self._samples_serving = serving
        return serving.samples(ModelAtHand(self, serving, model, data, getattr(self, "run_settings", {})))

    def validation_units(self, split: dict[str, torch.Tensor]) -> int:
        """How many `validation_unit`s the metrics of `split` average over: its rows, unless the task says."""
        return split_length(split)

    @classmethod
    def shares_evaluation(cls) -> bool:
        """Whether evaluation can be shared out by slices (the task reports EvalParts)."""
        return cls.evaluate_parts is not Task.evaluate_parts and cls.evaluate is Task.evaluate

    def parameter_count(self, info: dict | None = None) -> int:
        """Trainable parameters of the model build_model(`info`) builds, on the meta device (nothing allocated)."""
        with torch.device("meta"), _SkipMetaInit():
            model = self.build_model(info or {})
        if not isinstance(model, nn.Module):
            raise TaskOutputError(
                f"{self.name}.build_model returned a {type(model).__name__}: expected a torch.nn.Module"
            )
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    def check_fits(
        self,
        info: dict,
        device: torch.device | str,
        optimizer: str = "adamw",
        available: int | None = None,
        mode: str = "fp32",
    ) -> int:
        """Refuse, before anything is allocated, a model too large to train on `device`: parameters x (weights,
        gradients and the optimizer's state, as precision `mode` keeps them) plus a margin, against `available`
        (default: free_bytes). Raises ConfigError naming the options that make the model large; returns the
        estimated bytes."""
        device = torch.device(device)
        params = self.parameter_count(info)
        kept = PRECISION_BYTES.get(mode, PRECISION_BYTES["fp32"])
        state = state_bytes_per_parameter(optimizer, mode=mode) if optimizer in OPTIMIZER_STATES else 8
        need = params * (kept.weights + kept.grads + kept.master + state) + MARGIN_BYTES
        checks = [(device, need, available if available is not None else free_bytes(device))]
        if device.type not in ("cpu", "mps"):  # the model is built in host memory first, then moved
            checks.append((torch.device("cpu"), params * 4 + MARGIN_BYTES, free_bytes(torch.device("cpu"))))
        for where, bytes_needed, free in checks:
            if free is not None and bytes_needed > free:
                culprits = self._size_culprits(info, params)
                lower = self._lower(culprits) if culprits else "use a smaller model or a device with more memory"
                what = "to train" if where == device else "to build in host memory"
                raise ConfigError(
                    f"task_options.{culprits[0]}" if culprits else "task_options",
                    f"the model would have {params:,} parameters (~{size(bytes_needed)} "
                    f"{what}) but {where} has {size(free)} free: {lower}",
                )
        return need

    def check_synthetic_size(self, need: int, options: tuple[str, ...]) -> None:
        """Refuse synthetic data of over `need` bytes than the host has free, naming the `options` that size it."""
        free = free_bytes(torch.device("cpu"))
        if free is not None and need > free:
            defaults = {opt.name: opt.default for opt in self.options}
            options = tuple(n for n in options if self.opts[n] > defaults[n]) or options  # the raised ones
            said = f"the synthetic data would take over {size(need)} but cpu has {size(free)} free"
            raise ConfigError(f"task_options.{options[0]}", f"{said}: {self._lower(options)}")

    def _lower(self, options) -> str:
        """'lower task option hidden (1,024) or layers (8)': the `options` with their values."""
        return "lower task option " + " or ".join(f"{name} ({self.opts[name]:,})" for name in options)

    def _size_culprits(self, info: dict, params: int) -> list[str]:
        """Up to two options whose halving shrinks the model most (error path only: a meta build each)."""
        shrink = []
        for opt in self.options:
            value = self.opts[opt.name]
            if type(value) is not int or opt.choices is not None or value < 2:
                continue
            smaller = max(value // 2, int(opt.minimum if opt.minimum is not None else 1))
            if smaller == value:
                continue
            trial = type(self).__new__(type(self))
            trial.opts = {**self.opts, opt.name: smaller}
            try:
                count = trial.parameter_count(info)
            except Exception:
                continue
            if count < 0.9 * params:
                shrink.append((count, opt.name))
        return [name for _count, name in sorted(shrink)[:2]]


class _SkipMetaInit(TorchFunctionMode):
    """Skips torch.nn.init's fills of meta tensors: they hold no values, and the first one costs seconds."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", "") == "torch.nn.init":
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def free_bytes(device: torch.device) -> int | None:
    """Free bytes on `device` (the host's available RAM for the CPU and MPS); None when it cannot be told."""
    if device.type == "cuda":
        return cuda_free_memory(device.index if device.index is not None else torch.cuda.current_device())
    if device.type in ("cpu", "mps"):
        return available_ram()
    return None


def iter_slices(split: dict[str, torch.Tensor], batch_size: int):
    """Contiguous evaluation batches over a split (a Dataset split: its DataLoader's batches, each row once)."""
    if not isinstance(split, dict):
        yield from split.batches(batch_size)
        return
    n = split_length(split)
    for start in range(0, n, batch_size):
        yield {key: value[start : start + batch_size] for key, value in split.items()}


def confusion_section(true: torch.Tensor, predicted: torch.Tensor, labels: list[str]) -> dict:
    """The report's `confusion` section: counts of (true class, predicted class), rows the true class."""
    c = len(labels)
    matrix = torch.bincount(true.long() * c + predicted.long(), minlength=c * c)[: c * c].view(c, c)
    return {"labels": list(labels), "matrix": matrix.tolist()}


def bucket_rows(sizes: torch.Tensor, edges: tuple[int, ...], values) -> list[dict]:
    """The report's `buckets` rows: rows grouped by size, edges (1, 5, 10) making 1-4, 5-9 and 10+ (a size below
    edges[0] goes to the first), each non-empty bucket as {label, min, max, count} and what `values(chosen)`
    gives for its rows (a boolean mask)."""
    index = torch.bucketize(sizes, torch.tensor(edges[1:], dtype=sizes.dtype, device=sizes.device), right=True)
    rows = []
    for i, low in enumerate(edges):
        high = edges[i + 1] - 1 if i + 1 < len(edges) else None
        label = f"{low}+" if high is None else (f"{low}" if high == low else f"{low}-{high}")
        chosen = index == i
        if count := int(chosen.sum()):
            rows.append({"label": label, "min": low, "max": high, "count": count, **values(chosen)})
    return rows
