"""RunConfig: every setting of a run, validated with messages that name the field; TOML load/save."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.files import atomic_write_bytes, check_regular_file, shown_path
from core.precision_modes import FP8_RECIPES, PRECISION_CHOICES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

OPTIMIZERS = ("sgd", "adam", "adamw", "adamw8bit")
# what a task's configure_optimizers decides instead (core.tasks.options.TaskInfo.own_optimizer)
TASK_OPTIMIZER_FIELDS = ("optimizer", "lr", "momentum", "weight_decay", "schedule", "warmup_steps")
SCHEDULES = ("constant", "cosine", "onecycle")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
MONITOR_MODES = ("auto", "max", "min")
PIN_MEMORY = ("auto", "on", "off")
# How data files are read: auto (by suffix, then content) or one format for every file (core.data.formats.FORMAT_NAMES)
DATA_FORMATS = ("auto", "delimited", "json", "svmlight", "label_text", "parquet")
_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?|xpu(:\d+)?)$")


@dataclass(frozen=True)
class FieldSpec:
    """Range, step and help of one numeric or choice field: used by validation, the CLI and the GUI form."""

    name: str
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    step: float | None = None


_HELP = {  # every setting with a FieldSpec, in the form's order
    "task": "model + data + loss + metrics (see `amp-console tasks`), or a task file: path/to/my_task.py:MyTask or "
    "package.module:MyTask (docs/tasks.md)",
    "task_file": "where a task that is not built in is defined (path/to/file.py:Class or package.module:Class); set "
    "from the task; loading it runs its code",
    "data": "data file (CSV/TSV, Parquet, svmlight, JSON lines) or folder to train on, split into "
    "train/validation/test by its 'split' column, a folder's train.* / val.* / test.* files or val_data / test_data, "
    "else by the task; empty = synthetic data (the task's own)",
    "val_data": "validation data file or folder, used as given (data is then the training data; without test_data "
    "there is no test split); empty = from data (its 'split' column, its folder's val.* / vali.* / dev.* file, else "
    "the task's own split)",
    "test_data": "test data file or folder, used as given (data is then the training data; without val_data, "
    "validation is 10% of the training data, or each user's last training event for the recommender); empty = from "
    "data (as val_data), none when only val_data is given",
    "delimiter": "field separator of the data files: , ; | \\t (a tab), \\s+ (runs of spaces or tabs) or any short "
    "text; empty = sniffed from each file",
    "columns": "the data files' column names where they differ from the task's: expected name = the file's name, e.g. "
    "user_id=userId, item_id=movieId; empty = the task's names",
    "data_format": "how the data files are read: auto (by suffix; a file of another suffix by its content), delimited "
    "(text with a delimiter), json (JSON lines), svmlight, label_text (a label, a blank, then the text on each line: "
    "SST-2, fastText's __label__pos) or parquet",
    "query_file": "query sizes of an svmlight data file without qid: (one whole number per line: the rows of each "
    "query, in order); empty = the file's .query or .group beside it, as LightGBM and XGBoost name it",
    "device": "auto, cpu, cuda:N, mps or xpu:N",
    "precision": "fp32, tf32, fp16 (autocast + GradScaler), bf16 (autocast), bf16-pure (bf16 weights and optimizer "
    "state, stochastic rounding), fp8 (torchao float8 Linear layers in bf16 autocast) or auto",
    "fp8_recipe": "fp8's scaling: tensorwise or rowwise (rowwise_with_gw_hp fails in bf16 autocast: pytorch/ao#4616)",
    "fp32_modules": "modules that run in float32 outside autocast whatever the precision (and are not made fp8 or "
    "bf16-pure), by name as the NaN doctor gives them, comma-separated, e.g. fc1 or blocks.3.attn; empty = none",
    "optimizer": "sgd (with momentum), adam, adamw or adamw8bit (bitsandbytes' 8-bit AdamW)",
    "lr": "peak learning rate",
    "momentum": "SGD momentum",
    "weight_decay": "weight decay (decoupled for adamw), applied to weight matrices only; biases, norms and "
    "embeddings are not decayed",
    "batch_size": "samples per micro-batch (per process)",
    "epochs": "passes over the training data (used when max_steps is 0)",
    "max_steps": "optimizer steps to run; 0 = run `epochs` epochs",
    "min_steps": "when the length is in epochs (max_steps 0): at least this many optimizer steps, in whole epochs, so "
    "that a small data file still trains; 0 = exactly `epochs`",
    "schedule": "learning-rate schedule",
    "warmup_steps": "linear warm-up steps for the cosine schedule",
    "grad_clip": "clip the gradient norm to this value; 0 = off",
    "grad_accum": "micro-batches accumulated per optimizer step",
    "seed": "seed for weights, data and data order",
    "log_interval": "optimizer steps between metric reports (the only host syncs)",
    "eval_interval": "optimizer steps between evaluations; 0 = at the end of each epoch",
    "checkpoint_interval": "optimizer steps between checkpoints; 0 = only at the end",
    "checkpoint_minutes": "also checkpoint when this many minutes of wall time have passed since the last one, so a "
    "crash or kill loses at most that much; 0 = off",
    "time_limit_minutes": "stop training when this many minutes of wall time (pauses included) have passed since it "
    "started, then evaluate, test and checkpoint as at the end; the run completes, saying so; 0 = no limit",
    "threads": "CPU threads torch uses inside an op; 0 = auto (1 for light steps or a busy machine, else the free "
    "cores; the choice is reported when the run starts)",
    "num_workers": "DataLoader worker processes for a task whose data is a torch Dataset (docs/tasks.md); 0 = batches "
    "are loaded in the training process; a task whose data is tensors does not use it",
    "pin_memory": "DataLoader batches in page-locked host memory, so the copy to a GPU is asynchronous (a Dataset "
    "task): auto = on when the device is CUDA",
    "persistent_workers": "keep the DataLoader's worker processes from one epoch to the next instead of starting them "
    "again (a Dataset task, num_workers above 0)",
    "prefetch_factor": "batches each DataLoader worker prepares ahead (a Dataset task, num_workers above 0)",
    "out_dir": "folder for checkpoint.pt, config.toml and metrics.jsonl; empty = in the runs root (a new folder under "
    "it, named by date, task and precision)",
    "monitor": "validation metric that picks the best checkpoints and early stopping; empty = the task's primary "
    "metric (e.g. accuracy, ndcg@10_full_filtered), or 'loss' for the validation loss",
    "monitor_mode": "whether a higher (max) or lower (min) monitored value is better; auto = min for losses and "
    "errors (names containing loss, error, mse, mae or perplexity), else max",
    "keep_best": "best checkpoints kept besides checkpoint.pt (the last): 1 = best.pt, k > 1 = best-1.pt (the best) "
    "to best-k.pt, ranked; 0 = none",
    "early_stop_patience": "end the run (completed) after this many evaluations without an improvement of the "
    "monitored metric; 0 = off",
    "early_stop_min_delta": "an improvement must beat the best value by more than this (for best checkpoints and "
    "early stopping)",
    "early_stop_divergence": "end the run (completed) as soon as the monitored metric is worse than this: above it "
    "for a min-mode metric such as the loss, below it for max-mode; nan or inf also ends it; 0 = off",
    "compile": "compile the model with torch.compile after moving it to the device (compile time is reported apart "
    "from the steady-state speed); falls back to eager, saying why, where the platform's compiler is missing",
    "compile_mode": "torch.compile mode: default, reduce-overhead (CUDA graphs: small models on a GPU) or "
    "max-autotune (longer compile, tuned kernels)",
    "activation_checkpointing": "recompute each block's activations in the backward pass instead of keeping them: "
    "less memory for more compute (tasks whose model has blocks, e.g. the recommender)",
    "tensorboard": "also write TensorBoard event files into <run folder>/tensorboard as the run goes (needs the "
    "optional tensorboardX package)",
}
_RANGES = {  # minimum, maximum, step of the numeric settings
    "lr": (1e-7, 10.0, 1e-4),
    "momentum": (0.0, 0.999, 0.05),
    "weight_decay": (0.0, 1.0, 0.01),
    "batch_size": (1, 1_048_576, 1),
    "epochs": (0, 100_000, 1),
    "max_steps": (0, 1_000_000_000, 100),
    "min_steps": (0, 1_000_000_000, 100),
    "warmup_steps": (0, 1_000_000_000, 10),
    "grad_clip": (0.0, 1e6, 0.1),
    "grad_accum": (1, 4096, 1),
    "seed": (0, 2**32 - 1, 1),
    "log_interval": (1, 1_000_000, 1),
    "eval_interval": (0, 1_000_000_000, 100),
    "checkpoint_interval": (0, 1_000_000_000, 100),
    "checkpoint_minutes": (0.0, 10_080.0, 1.0),
    "time_limit_minutes": (0.0, 525_600.0, 10.0),
    "threads": (0, 1024, 1),
    "num_workers": (0, 256, 1),
    "prefetch_factor": (1, 1024, 1),
    "keep_best": (0, 100, 1),
    "early_stop_patience": (0, 1_000_000, 1),
    "early_stop_min_delta": (0.0, 1e9, 0.001),
    "early_stop_divergence": (0.0, 1e9, 0.1),
}
_CHOICES = {
    "data_format": DATA_FORMATS,
    "precision": PRECISION_CHOICES,
    "fp8_recipe": FP8_RECIPES,
    "optimizer": OPTIMIZERS,
    "schedule": SCHEDULES,
    "pin_memory": PIN_MEMORY,
    "monitor_mode": MONITOR_MODES,
    "compile_mode": COMPILE_MODES,
}


def _spec(name: str, text: str) -> FieldSpec:
    minimum, maximum, step = _RANGES.get(name, (None, None, None))
    return FieldSpec(name, text, minimum, maximum, _CHOICES.get(name), step)


FIELD_SPECS: dict[str, FieldSpec] = {name: _spec(name, text) for name, text in _HELP.items()}


@dataclass
class RunConfig:
    """Everything a run needs. Build with `RunConfig.for_task(name)` to start from the task's defaults."""

    task: str = "tiny"
    task_file: str = ""  # a user task's reference (core.tasks.user_tasks); "" for a built-in task
    task_options: dict = field(default_factory=dict)
    data: str = ""
    val_data: str = ""
    test_data: str = ""
    delimiter: str = ""
    columns: dict = field(default_factory=dict)
    data_format: str = "auto"
    query_file: str = ""
    device: str = "auto"
    precision: str = "auto"
    fp8_recipe: str = "tensorwise"
    fp32_modules: str = ""
    optimizer: str = "adamw"
    lr: float = 1e-2
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int = 64
    epochs: int = 5
    max_steps: int = 0
    min_steps: int = 200
    schedule: str = "constant"
    warmup_steps: int = 0
    grad_clip: float = 0.0
    grad_accum: int = 1
    seed: int = 0
    log_interval: int = 10
    eval_interval: int = 0
    checkpoint_interval: int = 0
    checkpoint_minutes: float = 10.0
    time_limit_minutes: float = 0.0
    threads: int = 0
    num_workers: int = 2  # the DataLoader's, for a task whose data is a Dataset (core.data.loaders)
    pin_memory: str = "auto"
    persistent_workers: bool = True
    prefetch_factor: int = 2
    out_dir: str = ""  # empty: a new folder under the runs root (core.engine.run_record.resolve_out_dir)
    monitor: str = ""
    monitor_mode: str = "auto"
    keep_best: int = 1
    early_stop_patience: int = 0
    early_stop_min_delta: float = 0.0
    early_stop_divergence: float = 0.0
    tensorboard: bool = False
    compile: bool = False
    compile_mode: str = "default"
    activation_checkpointing: bool = False
    note: str = ""  # this start's note (`train --note`): note.txt and the run's start notes; not kept by a resume

    @classmethod
    def for_task(cls, task: str, **overrides: Any) -> RunConfig:
        """A config with the task's default hyperparameters, then `overrides`."""
        from core.tasks import get_task_class, task_source

        task_class = get_task_class(task)
        values = dict(task_class.defaults)
        fixed = [k for k in values if k in ("task", "task_file", "task_options")]
        try:
            if fixed:
                raise ConfigError(fixed[0], "is set by the task's choice, not by its defaults")
            cls.from_dict(values, source=f"task {task!r}'s defaults")
        except ConfigError as exc:
            where = f" ({task_source(task)})" if task_source(task) else ""
            raise ConfigError("task", f"{task_class.__name__}.defaults{where}: {exc}") from None
        if task_source(task):
            values["task_file"] = task_source(task)
        values.update(overrides)
        return cls.from_dict({"task": task, **values})

    def to_dict(self) -> dict:
        """Plain dict (TOML/JSON ready)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> RunConfig:
        """Build from a plain dict; unknown keys and wrong types are ConfigErrors naming the key."""
        names = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, value in data.items():
            if key not in names:
                raise ConfigError(key, f"unknown setting in {source}; known settings: {', '.join(names)}")
            values[key] = _coerce(key, value, names[key].type)
        return cls(**values)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with `changes` applied (types checked)."""
        return RunConfig.from_dict({**self.to_dict(), **changes})

    def errors(self) -> dict[str, str]:
        """Every invalid field -> message naming the allowed range. Empty when the config is valid."""
        from core.tasks import get_task_class

        problems: dict[str, str] = {}
        for name, spec in FIELD_SPECS.items():
            value = getattr(self, name)
            if spec.choices is not None and value not in spec.choices:
                problems[name] = f"{value!r} is not one of {', '.join(spec.choices)}"
            elif spec.minimum is not None and not (spec.minimum <= value <= spec.maximum):
                problems[name] = f"{value!r} is out of range: must be {_range_text(spec)}"
        try:
            task_class = get_task_class(self.task, self.task_file)
        except ConfigError as exc:
            problems["task"] = str(exc).split(": ", 1)[-1]
        else:
            problems.update(task_class.option_errors(self.task_options))
        if not _DEVICE_RE.match(self.device.strip().lower()):
            problems["device"] = f"{self.device!r} is not a device; use auto, cpu, cuda:N, mps or xpu:N"
        if self.max_steps == 0 and self.epochs == 0:
            problems.setdefault("epochs", "set epochs or max_steps above 0: the run would do nothing")
        if self.out_dir and not self.out_dir.strip():
            problems["out_dir"] = "is only spaces: leave it empty for a new folder under the runs root"
        if self.monitor != self.monitor.strip() or any(c.isspace() for c in self.monitor):
            problems["monitor"] = f"{self.monitor!r} is not a metric name: names have no spaces (e.g. accuracy, loss)"
        if not math.isfinite(self.early_stop_divergence):
            problems["early_stop_divergence"] = (
                f"{self.early_stop_divergence} is not a finite number: give the "
                f"threshold the monitored metric must not cross, or 0 for off"
            )
        if self.tensorboard and not tensorboardx_installed():
            problems["tensorboard"] = TENSORBOARD_MISSING
        for name in ("data", "val_data", "test_data", "query_file"):
            path = getattr(self, name)
            if path and not Path(path).exists():
                problems[name] = f"{path}: no such file or folder"
        if (self.val_data or self.test_data) and not self.data:
            problems.setdefault("data", "val_data / test_data are given: set data to the training data too")
        if self.query_file and not self.data:
            problems.setdefault("query_file", "gives the queries of the data file: set data too (or leave it empty)")
        if any(c in self.delimiter for c in '\n\r"') or len(self.delimiter) > 10:
            problems["delimiter"] = (
                f"{self.delimiter!r} cannot separate fields: use one short separator such as "
                f"',' ';' '|' or '\\t' (or leave it empty to sniff)"
            )
        if message := columns_error(self.columns):
            problems["columns"] = message
        return problems

    def validate(self) -> RunConfig:
        """Raise ConfigError for the first invalid field; returns self for chaining."""
        problems = self.errors()
        if problems:
            name, message = next(iter(problems.items()))
            raise ConfigError(name, message)
        return self

    def save_toml(self, path: str | Path) -> None:
        """Write the config as TOML (atomically, like every file the engine writes)."""
        import tomli_w

        atomic_write_bytes(Path(path), tomli_w.dumps(self.to_dict()).encode("utf-8"))

    @classmethod
    def load_toml(cls, path: str | Path) -> RunConfig:
        """Read a TOML config (read_config_file's checks and messages) over its task's defaults, as `train --config`."""
        data = read_config_file(path)
        return cls.from_dict({**task_defaults(data.get("task", cls.task))[0], **data}, source=shown_path(path))

    def changes(self) -> dict:
        """The settings and task options that differ from the task's defaults, task and task_file always: what a TOML
        file or a command line gives to reproduce this config (core.engine.prepare fills the rest the same way)."""
        settings, options = task_defaults(self.task)
        defaults = RunConfig().to_dict() | settings
        keep = ("task", "task_file")
        values = self.to_dict() | {"task_options": {k: v for k, v in self.task_options.items() if options.get(k) != v}}
        return {k: v for k, v in values.items() if (k in keep and v) or (k not in keep and v != defaults[k])}

    def to_toml(self) -> str:
        """The changes() as a TOML file for `--config` (train, remote start) or File → Open settings."""
        import tomli_w

        return tomli_w.dumps(self.changes())


def train_flags(values: dict) -> list[str]:
    """`amp-console train` flags (core.cli.train's) for settings `values` (a RunConfig's changes(), or a few settings):
    a user task as --task FILE.py:Class, task options as -o KEY=VALUE."""
    import tomli_w

    argv: list[str] = []
    for key, value in values.items():
        if key == "task_options":  # the value a TOML literal, as parse_option reads it
            argv += [a for k, v in value.items() for a in ("-o", f"{k}={tomli_w.dumps({'v': v})[4:].strip()}")]
        elif key == "columns":
            argv += [a for k, v in value.items() for a in ("--column", f"{k}={v}")]
        elif isinstance(value, bool):
            argv.append(f"--{'' if value else 'no-'}{key.replace('_', '-')}")
        elif key != "task_file":
            value = str(values.get("task_file") or value if key == "task" else "\\t" if value == "\t" else value)
            flag = f"--{key.replace('_', '-')}"
            argv += [f"{flag}={value}"] if value.startswith("-") else [flag, value]  # = keeps "-1" a value
    return argv


def task_defaults(task: str) -> tuple[dict, dict]:
    """The settings task `task` sets and its options' defaults (both {} for a task not loaded here)."""
    from core.tasks import get_task_class

    try:
        cls = get_task_class(task)
    except ConfigError:
        return {}, {}
    return dict(cls.defaults), {option.name: option.default for option in cls.options}


def train_command(config=None, *flags: str, python: bool = True, events=None, nproc: int = 1, runs_dir="") -> list[str]:
    """The `train` command line that starts `config`: a RunConfig's changes() or a dict's settings as flags (a path:
    --config PATH; None: --config-stdin, the settings one JSON line on stdin), --nproc, --runs-dir (unless the
    settings name the folder), then `flags`. `python`: this interpreter's `-m core.cli`, a child process; else
    `amp-console`, a terminal's. `events` (default: `python`): JSON events on stdout, and an end with this process."""
    import os

    start = [sys.executable, "-m", "core.cli"] if python else ["amp-console"]
    if isinstance(config, (RunConfig, dict)):
        settings = train_flags(config.changes() if isinstance(config, RunConfig) else config)
    else:
        settings = ["--config", str(config)] if config else ["--config-stdin"]
    follow = ["--events", "--end-with-parent", str(os.getpid())] if (python if events is None else events) else []
    root = [f"--runs-dir={runs_dir}"] if runs_dir and not getattr(config, "out_dir", "") else []
    nodes = ["--nproc", str(nproc)] if nproc > 1 else []
    return [*start, "train", *settings, *nodes, *root, *follow, *flags]


def run_command(config: RunConfig, host: str = "", nproc: int = 1, runs_dir: str = "", remote_command: str = "") -> str:
    """The shell text that starts `config` from a terminal: `amp-console train FLAGS`; on `host`, its TOML written to
    run.toml, then `amp-console remote start HOST --config run.toml` (that command takes its settings from a file)."""
    import shlex

    if not host:
        return shlex.join(train_command(config, python=False, nproc=nproc, runs_dir=runs_dir))
    nodes = ["--nproc", str(nproc)] if nproc > 1 else []
    task = [f"--task={config.task_file}"] if config.task_file else []
    command = [f"--remote-command={remote_command}"] if remote_command else []
    start = shlex.join(["amp-console", "remote", "start", host, "--config", "run.toml", *task, *nodes, *command])
    return f"cat > run.toml <<'AMP_TOML'\n{config.to_toml()}AMP_TOML\n{start}\n"


_TYPE_NAMES = {"int": int, "float": float, "str": str, "dict": dict, "bool": bool}
_BOOL_WORDS = {"true": True, "false": False}  # a bool setting given as text (a CLI flag's value)


def _coerce(key: str, value: Any, type_name: Any) -> Any:
    kind = _TYPE_NAMES[type_name if isinstance(type_name, str) else type_name.__name__]
    if kind is bool:
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {type(value).__name__} {value!r}")
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(key, f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def _range_text(spec: FieldSpec) -> str:
    """'between 1 and 1,048,576' (never 1.04858e+06); 1e-07 or 0.999 where not whole."""
    assert spec.minimum is not None and spec.maximum is not None  # only asked of a field with both bounds
    return f"between {_number(spec.minimum)} and {_number(spec.maximum)}"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


TENSORBOARD_MISSING = "needs the optional tensorboardX package: pip install 'amp-console[tensorboard]'"


def tensorboardx_installed() -> bool:
    """Whether tensorboardX can be imported, without importing it (it imports torch)."""
    try:
        return importlib.util.find_spec("tensorboardX") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def columns_error(columns: dict) -> str | None:
    """Why a `columns` mapping (expected name -> the file's name) is unusable, or None."""
    for key, value in columns.items():
        if not isinstance(key, str) or not key.strip():
            return f"{key!r} is not a column name: give expected_name=file_name pairs with non-empty names"
        if not isinstance(value, str) or not value.strip():
            return f"{key}={value!r}: the file's column name must be non-empty text"
    targets = list(columns.values())
    for value in targets:
        if targets.count(value) > 1:
            return f"file column {value!r} is mapped to {targets.count(value)} names; map each file column once"
    return None


def parse_columns(text: str, field: str = "columns") -> dict[str, str]:
    """'user_id=userId, item_id=movieId' -> {"user_id": "userId", "item_id": "movieId"} (commas or new lines
    between pairs; empty text -> {}); ConfigError naming `field` for anything else."""
    columns: dict[str, str] = {}
    for part in re.split(r"[,\n]", text):
        if not part.strip():
            continue
        if "=" not in part:
            raise ConfigError(field, f"{part.strip()!r} is not NAME=FILE_NAME (e.g. user_id=userId)")
        key, value = (p.strip() for p in part.split("=", 1))
        if not key or not value:
            raise ConfigError(field, f"{part.strip()!r}: both names are needed (e.g. user_id=userId)")
        if key in columns and columns[key] != value:
            raise ConfigError(field, f"{key!r} is mapped twice ({columns[key]!r} and {value!r})")
        columns[key] = value
    if message := columns_error(columns):
        raise ConfigError(field, message)
    return columns


def delimiter_value(text: str) -> str:
    """A delimiter as typed on a command line or in the form: '\\t' or 'tab' is a tab; anything else as is."""
    return "\t" if text.strip().lower() in ("\\t", "tab") else text


def columns_text(columns: dict) -> str:
    """{"user_id": "userId"} -> 'user_id=userId' (parse_columns' inverse)."""
    return ", ".join(f"{key}={value}" for key, value in columns.items())


def read_config_file(path: str | Path) -> dict:
    """The settings a TOML file sets (only those: the layers under it fill the rest), checked for unknown keys
    and wrong types. A folder, FIFO, device or unreadable file is refused before it is opened."""
    check_regular_file(path, "config", "config file")
    name = shown_path(path)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("config", f"{name}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", f"{name}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError("config", f"{name}: cannot read the config file: {exc.strerror or exc}") from None
    RunConfig.from_dict(data, source=name)  # unknown keys and wrong types, named
    return data
