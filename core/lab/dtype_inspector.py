"""Dtype inspector: one forward + backward pass under a precision mode, recording what ran in which dtype.

Module hooks record, per module, the dtypes of its inputs, outputs, own parameters, parameter gradients and
the gradient flowing into its outputs. A TorchDispatchMode records every aten op *after* autocast has
chosen its dtype (the Python dispatch key sits below the Autocast keys), so it sees what really ran: which
matmuls ran in bfloat16/float16, which ops autocast kept in float32 (softmax, layer norm, losses...) and how
many casts autocast inserted. Ops run outside any module (usually the task's loss) are reported as
`task.loss`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from core.config import RunConfig
from core.engine.diagnosis import explain_device_mismatch
from core.devices import DeviceInfo, device_info, list_devices, torch_device
from core.errors import DeviceError
from core.engine.precision import matmul_precision, resolve_precision
from core.tasks import create_task

LOSS_ROW = "task.loss"

# Ops that only reshape, alias or detach: they carry their input's dtype and would drown the real compute ops.
_LAYOUT_OPS = {
    "detach", "t", "view", "_unsafe_view", "expand", "permute", "transpose", "reshape", "alias", "slice", "select",
    "unsqueeze", "squeeze", "as_strided", "unbind", "split", "split_with_sizes", "chunk", "narrow", "lift_fresh",
    "clone", "contiguous", "empty_like", "zeros_like", "ones_like", "new_empty", "new_zeros", "copy_",
}
_CAST_OPS = {"_to_copy", "to", "_autocast_to_reduced_precision", "_autocast_to_full_precision"}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor_dtypes(value) -> list[str]:
    return [_dtype_name(t.dtype) for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


@dataclass
class ModuleDtypes:
    """Dtypes seen by one module (or the `task.loss` pseudo-module) during the inspected step."""

    name: str
    type: str
    depth: int
    input_dtypes: list[str] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    param_dtypes: list[str] = field(default_factory=list)
    grad_dtypes: list[str] = field(default_factory=list)
    output_grad_dtypes: list[str] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)
    fp32_ops: list[str] = field(default_factory=list)
    casts: int = 0
    kept_fp32: bool = False
    called: bool = False


@dataclass
class InspectionResult:
    """Per-module dtypes of one step of a task under one precision mode."""

    task: str
    precision: str
    device: str
    autocast_dtype: str | None
    loss_dtype: str
    rows: list[ModuleDtypes]

    def row(self, name: str) -> ModuleDtypes:
        """The row of the module called `name` (as in named_modules, `task.loss` for the loss)."""
        return next(r for r in self.rows if r.name == name)

    def kept_fp32(self) -> list[str]:
        """Modules autocast left in float32 although it computes in a lower precision."""
        return [r.name for r in self.rows if r.kept_fp32]

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the `inspect --json` schema)."""
        return dataclasses.asdict(self)


class _OpRecorder(TorchDispatchMode):
    """Attributes every aten op to the innermost running module and notes the dtypes it produced."""

    def __init__(self, stack: list[ModuleDtypes], loss_row: ModuleDtypes, low_precision: bool):
        super().__init__()
        self.stack = stack
        self.loss_row = loss_row
        self.low_precision = low_precision
        self.forward = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.forward:
            return out
        row = self.stack[-1] if self.stack else self.loss_row
        name = func.overloadpacket.__name__
        if name in _CAST_OPS:
            row.casts += 1
        elif name not in _LAYOUT_OPS:
            dtypes = _tensor_dtypes(out)
            if dtypes:
                row.ops[name] = dtypes[0]
                if self.low_precision and dtypes[0] == "float32":
                    if name not in row.fp32_ops:
                        row.fp32_ops.append(name)
        return out


def _first_batch(split: dict[str, torch.Tensor], batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value[:batch_size].to(device) for key, value in split.items()}


def inspect_dtypes(config: RunConfig, devices: list[DeviceInfo] | None = None, batch_size: int | None = None
                   ) -> InspectionResult:
    """Build the task of `config` like the trainer does and run one forward + backward in its precision.

    `batch_size` (default: the config's, at most 64) keeps the inspection cheap: dtypes do not depend on it.
    Errors raised by the task's code propagate (e.g. a device mismatch: see core.engine.diagnosis).
    """
    cfg = config.validate()
    info = device_info(cfg.device, devices if devices is not None else list_devices())
    device = torch_device(info)
    plan = resolve_precision(cfg.precision, info)
    task = create_task(cfg.task, cfg.task_options)
    torch.manual_seed(cfg.seed)
    data = task.load_data(cfg.data, cfg.seed)
    torch.manual_seed(cfg.seed)
    model = task.build_model(data.info).to(device)
    model.train()
    batch = _first_batch(data.train, batch_size or min(cfg.batch_size, 64), device)

    names = {module: name or "(model)" for name, module in model.named_modules()}
    rows = {module: ModuleDtypes(name=names[module], type=type(module).__name__,
                                 depth=0 if names[module] == "(model)" else names[module].count(".") + 1)
            for module in names}
    loss_row = ModuleDtypes(name=LOSS_ROW, type="loss", depth=0)
    stack: list[ModuleDtypes] = []
    low_precision = plan.autocast_dtype is not None

    def pre_hook(module, args, kwargs):
        stack.append(rows[module])

    def post_hook(module, args, kwargs, output):
        row = stack.pop()
        row.called = True
        row.input_dtypes = row.input_dtypes or _tensor_dtypes((args, kwargs))
        row.output_dtypes = row.output_dtypes or _tensor_dtypes(output)
        floats = [d for d in row.output_dtypes if d.startswith(("float", "bfloat"))]
        row.kept_fp32 = row.kept_fp32 or (low_precision and bool(floats) and all(d == "float32" for d in floats))
        for tensor in tree_leaves(output):
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                tensor.register_hook(lambda grad, row=row: row.output_grad_dtypes.append(_dtype_name(grad.dtype)))

    handles = []
    for module in rows:
        handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(module.register_forward_hook(post_hook, with_kwargs=True))
    recorder = _OpRecorder(stack, loss_row, low_precision)
    try:
        with matmul_precision(plan), recorder:
            with plan.autocast():  # forward + loss only, as in the training step
                loss = task.loss(model, batch)
            recorder.forward = False
            plan.make_scaler().scale(loss).backward()
    except RuntimeError as exc:  # user code put tensors on two devices: say which, as one line
        message = explain_device_mismatch(exc, model, batch, device)
        if message is None:
            raise
        raise DeviceError(message) from exc
    finally:
        for handle in handles:
            handle.remove()

    loss_row.called = True
    loss_row.output_dtypes = [_dtype_name(loss.dtype)]
    loss_row.kept_fp32 = low_precision and loss.dtype == torch.float32
    for module, row in rows.items():
        own = list(module.parameters(recurse=False))
        row.param_dtypes = sorted({_dtype_name(p.dtype) for p in own})
        row.grad_dtypes = sorted({_dtype_name(p.grad.dtype) for p in own if p.grad is not None})
        row.output_grad_dtypes = sorted(set(row.output_grad_dtypes))
    ordered = [rows[m] for m in names if rows[m].called] + [loss_row]
    return InspectionResult(task=cfg.task, precision=plan.mode, device=info.id,
                            autocast_dtype=plan.compute_dtype_name if low_precision else None,
                            loss_dtype=_dtype_name(loss.dtype), rows=ordered)


def summarize(result: InspectionResult) -> dict[str, int]:
    """How many modules produced each output dtype (the one-line answer to 'what runs in half precision?')."""
    counts: Counter[str] = Counter()
    for row in result.rows:
        if row.output_dtypes:
            counts[row.output_dtypes[0]] += 1
    return dict(counts)
