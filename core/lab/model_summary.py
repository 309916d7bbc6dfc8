"""Model summary: per layer, parameters and the bytes they cost in training; per precision mode, activations.
Per module: its own parameters (a tied weight counted once, at its first owner), their bytes, gradients and optimizer
state, and the same over its subtree. Weights, gradients and optimizer state are float32 in every mode; only
activations change. A mode's activations are the bytes autograd saves for backward in one training step on the
split's first rows (deduplicated by storage, parameters and batch left out), attributed to the innermost running
module; on CUDA/XPU the allocator's peak above the step's start as well.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from core.config import RunConfig
from core.data.loaders import batch_rows, first_rows
from core.devices import DeviceInfo, PeakMemory, device_info, list_devices, torch_device
from core.engine.control import RunControl
from core.engine.diagnosis import mismatch_as_device_error
from core.engine.precision import PrecisionPlan, matmul_precision, resolve_precision
from core.engine.run_state import seed_everything
from core.lab import ToolResult
from core.lab.dtype_inspector import LOSS_ROW
from core.lab.precision_sweep import requested_modes
from core.precision_modes import OPTIMIZER_STATES, PRECISION_BYTES, tensor_state_bytes
from core.tasks import create_task
from core.tasks.task_checks import build_checked, check_returns, load_checked, user_code_errors
from core.text import first_line

DEFAULT_MODES = ("fp32", "bf16", "fp16")
ROOT_NAME = "(model)"
SAVED_TENSORS_SOURCE = "tensors saved for backward (saved_tensors_hooks), deduplicated by storage"
_CONTEXT = " in the model summary"  # an exception of the task's code: 'KeyError in the model summary: ...'


@dataclass
class Figures:
    """Parameter counts and training bytes of a set of parameters (one module's own, or its subtree)."""

    parameters: int = 0
    trainable_parameters: int = 0
    param_bytes: int = 0
    grad_bytes: int = 0  # trainable parameters only: frozen ones get no gradient
    optimizer_bytes: int = 0  # trainable parameters only
    activation_bytes: dict[str, int] = field(default_factory=dict)  # mode -> saved-for-backward bytes

    @property
    def frozen_parameters(self) -> int:
        return self.parameters - self.trainable_parameters

    def add(self, other: Figures) -> None:
        for name in ("parameters", "trainable_parameters", "param_bytes", "grad_bytes", "optimizer_bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mode, value in other.activation_bytes.items():
            self.activation_bytes[mode] = self.activation_bytes.get(mode, 0) + value


@dataclass
class LayerRow:
    """One module: `own` = the parameters it holds directly; `total` = its subtree (itself and descendants)."""

    name: str  # qualified name as in named_modules; ROOT_NAME for the model, LOSS_ROW for the loss
    type: str
    depth: int  # 0 for the model and the loss row, 1 for its children, ...
    own: Figures
    total: Figures
    descendants: int = 0  # modules below this one
    shared: list[str] = field(default_factory=list)  # own parameters counted at another module (tied): names

    @property
    def trainable(self) -> str:
        """'yes', 'no', 'partial' (some of the subtree's parameters are frozen) or '-' (no parameters)."""
        t = self.total
        if not t.parameters:
            return "-"
        return "yes" if t.trainable_parameters == t.parameters else "no" if not t.trainable_parameters else "partial"


@dataclass
class ModeTotals:
    """Training memory of the model in one precision mode: status 'ok', or 'skipped'/'failed' with a reason."""

    mode: str
    status: str
    reason: str = ""
    compute_dtype: str = ""
    param_bytes: int = 0  # float32 in every mode
    grad_bytes: int = 0  # float32 in every mode
    optimizer_bytes: int = 0
    activation_bytes: int | None = None  # saved for backward (the primary figure, every device)
    allocator_peak_bytes: int | None = None  # CUDA/XPU: the allocator's peak during the step above its start
    total_bytes: int | None = None  # params + grads + optimizer state + activations
    activation_ratio: float | None = None  # against fp32's
    total_ratio: float | None = None  # against fp32's


@dataclass(frozen=True)
class SummaryProgress:
    """Handed to the progress callback before each mode ('running') and after it ('done', with its totals)."""

    mode: str
    index: int
    total: int
    phase: str
    totals: ModeTotals | None = None

    def describe(self) -> str:
        if self.phase == "running":
            return f"{self.mode}: one forward + backward"
        t = self.totals
        if t is None or t.status != "ok":
            return f"{self.mode}: {t.status if t else 'done'}" + (f" ({t.reason})" if t and t.reason else "")
        return f"{self.mode}: done, {t.activation_bytes:,} bytes saved for backward"


@dataclass
class ModelSummary(ToolResult):
    """The whole summary: the setting, per-module rows, totals and one ModeTotals per requested mode."""

    device_type: str
    batch_size: int  # rows of the measured batch
    optimizer: str
    momentum: float
    precision: str  # the config's precision mode
    parameters: int
    trainable_parameters: int
    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    rows: list[LayerRow]
    modes: list[ModeTotals]
    activation_source: str = SAVED_TENSORS_SOURCE

    @property
    def frozen_parameters(self) -> int:
        return self.parameters - self.trainable_parameters

    def row(self, name: str) -> LayerRow:
        """The row of module `name` (as in named_modules; ROOT_NAME for the model, LOSS_ROW for the loss)."""
        return next(r for r in self.rows if r.name == name)

    def mode(self, mode: str) -> ModeTotals | None:
        return next((m for m in self.modes if m.mode == mode), None)

    def measured_modes(self) -> list[str]:
        return [m.mode for m in self.modes if m.status == "ok"]

    def rows_to_depth(self, depth: int) -> list[LayerRow]:
        """Rows down to `depth` (the model is 0); a row's `total` already folds in the children left out."""
        return [r for r in self.rows if r.depth <= depth]

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the `summary --json` schema)."""
        data = super().to_dict()
        data["frozen_parameters"] = self.frozen_parameters
        for row, out in zip(self.rows, data["rows"], strict=True):
            out["trainable"] = row.trainable
        return data


ProgressCallback = Callable[[SummaryProgress], None]


def parameter_rows(model: nn.Module, optimizer: str = "adamw", momentum: float = 0.9) -> list[LayerRow]:
    """One LayerRow per module of `model` (named_modules order), parameters and bytes filled, no activations."""
    names = {id(p): n for n, p in model.named_parameters()}  # the first name of each (shared) parameter
    counted: set[int] = set()
    rows: list[LayerRow] = []
    for name, module in model.named_modules():
        own, shared = Figures(), []
        for local, param in module.named_parameters(recurse=False):
            if id(param) in counted:
                shared.append(f"{name + '.' if name else ''}{local} = {names[id(param)]}")
                continue
            counted.add(id(param))
            size = param.numel() * param.element_size()
            own.parameters += param.numel()
            own.param_bytes += size
            if param.requires_grad:
                own.trainable_parameters += param.numel()
                own.grad_bytes += size  # gradients take their parameter's dtype: float32
                # what torch keeps after the first step (ValueError for an unknown optimizer)
                own.optimizer_bytes += tensor_state_bytes(param.numel(), optimizer, momentum)
                own.optimizer_bytes += OPTIMIZER_STATES[optimizer].per_tensor
        rows.append(
            LayerRow(
                name=name or ROOT_NAME,
                type=type(module).__name__,
                depth=name.count(".") + 1 if name else 0,
                own=own,
                total=Figures(),
                shared=shared,
            )
        )
    _fold_subtrees(rows)
    return rows


def _fold_subtrees(rows: list[LayerRow]) -> None:
    """Fill every row's `total` and `descendants` from the rows after it whose names extend its own (named_modules is a
    preorder)."""
    for row in rows:
        row.total = Figures()
        row.total.add(row.own)
        row.descendants = 0
    model_rows = [r for r in rows if r.name != LOSS_ROW]
    for index, row in enumerate(model_rows):
        for below in model_rows[index + 1 :]:
            if row.name != ROOT_NAME and not below.name.startswith(row.name + "."):
                break
            row.total.add(below.own)
            row.descendants += 1


class _SavedTensorMeter:
    """Counts the bytes of the tensors autograd saves for backward, once per storage, per running module."""

    def __init__(self, rows: dict[nn.Module, LayerRow], loss_row: LayerRow, exclude: set[int], mode: str):
        self.rows, self.loss_row, self.exclude, self.mode = rows, loss_row, exclude, mode
        self.stack: list[LayerRow] = []
        self.seen: set[int] = set()
        self.total = 0
        self.handles: list[RemovableHandle] = []

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key, nbytes = _storage(tensor)
        if key and key not in self.seen and key not in self.exclude:
            self.seen.add(key)  # saved tensors stay alive until backward, so no address is reused meanwhile
            self.total += nbytes
            row = self.stack[-1] if self.stack else self.loss_row
            row.own.activation_bytes[self.mode] = row.own.activation_bytes.get(self.mode, 0) + nbytes
        return tensor

    def __enter__(self):
        def pre_hook(module, args):
            self.stack.append(self.rows[module])

        def post_hook(module, args, output):
            self.stack.pop()

        for module in self.rows:
            self.handles.append(module.register_forward_pre_hook(pre_hook))
            self.handles.append(module.register_forward_hook(post_hook))
        for row in list(self.rows.values()) + [self.loss_row]:
            row.own.activation_bytes[self.mode] = 0
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        for handle in self.handles:
            handle.remove()
        return False


def _storage(tensor: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of a tensor's storage; (0, 0) for one without a plain storage (e.g. a subclass)."""
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return 0, 0


def measure_mode(
    task,
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    plan: PrecisionPlan,
    device: torch.device,
    rows: dict[nn.Module, LayerRow],
    loss_row: LayerRow,
    seed: int,
) -> ModeTotals:
    """One forward (under `plan`'s autocast) + backward of `task.loss(model, batch)`: the bytes saved for
    backward (recorded per module into `rows`), and on CUDA/XPU the allocator's peak above its start."""
    inputs = [value for value in batch.values() if isinstance(value, torch.Tensor)]
    exclude = {_storage(t)[0] for t in [*model.parameters(), *model.buffers(), *inputs]} - {0}
    model.zero_grad(set_to_none=True)
    peak = PeakMemory(device)
    if peak.allocator:  # elsewhere the saved tensors are the figure: a process's RSS peak is not the step's
        peak.release()
        peak.reset()
    torch.manual_seed(seed)  # the same dropout masks and sampled negatives in every mode
    try:
        with mismatch_as_device_error(model, batch, device), matmul_precision(plan):
            with _SavedTensorMeter(rows, loss_row, exclude, plan.mode) as meter:
                with plan.autocast():  # forward + loss only, as in the training step
                    loss = task.loss(model, batch)
            plan.make_scaler().scale(loss).backward()
    except torch.OutOfMemoryError as exc:
        return ModeTotals(mode=plan.mode, status="failed", reason=f"out of memory: {first_line(exc)}")
    totals = ModeTotals(
        mode=plan.mode, status="ok", compute_dtype=plan.compute_dtype_name, activation_bytes=meter.total
    )
    if peak.allocator:
        reading = peak.read()
        if reading.peak_bytes is not None and reading.start_bytes is not None:
            totals.allocator_peak_bytes = reading.peak_bytes - reading.start_bytes
    del loss
    model.zero_grad(set_to_none=True)
    return totals


def summarize(
    config: RunConfig,
    modes: Sequence[str] | None = DEFAULT_MODES,
    batch_size: int | None = None,
    devices: list[DeviceInfo] | None = None,
    progress: ProgressCallback | None = None,
    control: RunControl | None = None,
) -> ModelSummary:
    """Build the task of `config` like the trainer does and summarise its model. `modes`: precision modes to measure
    activations in (fp32 first: ratios are against it; None = every mode); modes the device cannot run are 'skipped'.
    `batch_size`: rows of the measured batch (default: the config's micro-batch). `control.stop()` skips the modes not
    yet measured. ConfigError/PrecisionError on bad input, DeviceError for a device that is not here."""
    cfg, progress = config.validate(), progress or (lambda _progress: None)
    order = requested_modes(list(modes) if modes else None)
    info = device_info(cfg.device, devices if devices is not None else list_devices())
    device = torch_device(info)
    task = create_task(cfg.task, cfg.task_options)
    seed_everything(cfg.seed)
    data = load_checked(task, cfg, _CONTEXT)
    free = info.memory_free if device.type == "cuda" else None
    lightest = min(order, key=lambda mode: sum(PRECISION_BYTES[mode][:3]))  # refused only if no mode fits
    task.check_fits(data.info, device, cfg.optimizer, available=free, mode=lightest)
    seed_everything(cfg.seed)
    model = build_checked(task, data.info, _CONTEXT).to(device)
    model.train()
    size = batch_size or cfg.batch_size
    check_returns(task, model, data, device, batch_size=size)  # as a run checks them before its first step
    rows_list = parameter_rows(model, cfg.optimizer, cfg.momentum)
    rows = dict(zip((m for _n, m in model.named_modules()), rows_list, strict=True))
    loss_row = LayerRow(name=LOSS_ROW, type="loss", depth=0, own=Figures(), total=Figures())
    batch = first_rows(data.train, size, device)  # a Dataset's first items collated, as a batch of the run
    root = Figures()
    for row in rows_list:
        root.add(row.own)
    results: list[ModeTotals] = []
    for index, mode in enumerate(order):
        if control is not None and control.stop_requested:
            totals = ModeTotals(mode=mode, status="skipped", reason="stopped")
        elif mode not in info.precisions:
            totals = ModeTotals(mode, "skipped", info.unsupported.get(mode, f"not supported on {info.id}"))
        else:
            progress(SummaryProgress(mode, index, len(order), "running"))
            with user_code_errors(_CONTEXT):
                totals = measure_mode(
                    task, model, batch, resolve_precision(mode, info), device, rows, loss_row, cfg.seed
                )
        totals.param_bytes = root.param_bytes  # float32 in every mode: the same in every column
        totals.grad_bytes = root.grad_bytes
        totals.optimizer_bytes = root.optimizer_bytes
        if totals.activation_bytes is not None:
            totals.total_bytes = root.param_bytes + root.grad_bytes + root.optimizer_bytes + totals.activation_bytes
        results.append(totals)
        progress(SummaryProgress(mode, index, len(order), "done", totals))
    _compare_to_fp32(results)
    all_rows = rows_list + [loss_row]
    _fold_subtrees(all_rows)
    parameters = sum(p.numel() for p in model.parameters())
    assert root.parameters == parameters, (root.parameters, parameters)  # each parameter counted exactly once
    return ModelSummary(
        **ModelSummary.setting(cfg, info),
        device_type=device.type,
        batch_size=batch_rows(batch),
        optimizer=cfg.optimizer,
        momentum=cfg.momentum,
        precision=cfg.precision,
        parameters=root.parameters,
        trainable_parameters=root.trainable_parameters,
        param_bytes=root.param_bytes,
        grad_bytes=root.grad_bytes,
        optimizer_bytes=root.optimizer_bytes,
        rows=all_rows,
        modes=results,
    )


def _compare_to_fp32(results: list[ModeTotals]) -> None:
    base = next((m for m in results if m.mode == "fp32" and m.status == "ok"), None)
    if base is None:
        return
    for m in results:
        if m.status != "ok":
            continue
        if base.activation_bytes and m.activation_bytes is not None:
            m.activation_ratio = m.activation_bytes / base.activation_bytes
        if base.total_bytes and m.total_bytes is not None:
            m.total_ratio = m.total_bytes / base.total_bytes
