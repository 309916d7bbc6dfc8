"""Turn errors raised mid-run into messages a user can act on (device mismatch, out of memory, ...).

Torch's device-mismatch message names two devices but not *what* is on the wrong one: explain_device_mismatch
finds it (a parameter, buffer, tensor attribute or batch field, else the module and frame of the traceback).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from core.errors import DeviceError
from core.text import first_line

_DEVICE = r"(cpu|meta|mps|cuda(?::\d+)?|xpu(?::\d+)?|hpu(?::\d+)?)"
# torch words the same mistake differently per op and version; each pattern captures the two devices.
_MISMATCH_PATTERNS = (
    re.compile(
        rf"Expected all tensors to be on the same device.*?found at least two devices,? {_DEVICE} and "
        rf"{_DEVICE}",
        re.S,
    ),
    re.compile(
        rf"Expected all tensors to be on the same device.*? is on {_DEVICE},? different from other tensors on "
        rf"{_DEVICE}",
        re.S,
    ),
    re.compile(rf"Tensor on device {_DEVICE} is not on the expected device {_DEVICE}"),
    re.compile(rf"found input tensor at {_DEVICE} and parameter tensor at {_DEVICE}"),
    re.compile(rf"Expected object of device type {_DEVICE} but got device type {_DEVICE}"),
    re.compile(rf"indices should be either on {_DEVICE} or on the same device as the indexed tensor \({_DEVICE}\)"),
)
# Conv/RNN style: "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same".
_TYPE_MISMATCH = re.compile(
    r"Input type \(torch\.(cuda\.)?\w+\) and weight type \(torch\.(cuda\.)?\w+\) "
    r"should be the same"
)


def mismatch_devices(text: str) -> tuple[str, str] | None:
    """The two devices a device-mismatch error message names, or None when it is not one."""
    for pattern in _MISMATCH_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1), match.group(2)
    match = _TYPE_MISMATCH.search(text)
    if match and bool(match.group(1)) != bool(match.group(2)):
        return ("cuda" if match.group(1) else "cpu"), ("cuda" if match.group(2) else "cpu")
    return None


@dataclass(frozen=True)
class Misplaced:
    """One tensor that is not on the run's device."""

    kind: str  # "parameter", "buffer", "tensor attribute" or "batch field"
    name: str
    module: str  # module path ("" for batch fields and the root model)
    module_type: str
    device: str

    def fix(self, device: str) -> str:
        if self.kind == "batch field":
            return f"move it with batch[{self.name!r}].to({device!r}) (or build the batch on the run's device)"
        if self.kind == "tensor attribute":
            return (
                f"model.to(device) does not move plain tensor attributes: register it with "
                f"self.register_buffer({self.name.rsplit('.', 1)[-1]!r}, ...) or .to(device) it in forward"
            )
        return f"move the model with model.to({device!r}) after every change to its modules"

    def describe(self) -> str:
        where = f" of module {self.module or '(model)'} ({self.module_type})" if self.kind != "batch field" else ""
        return f"{self.kind} {self.name}{where} is on {self.device}"


def _same_device(a: torch.device, b: torch.device) -> bool:
    # 'cuda' and 'cuda:0' are the same place; compare type, and index only when both name one.
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def find_misplaced(model: nn.Module | None, batch: dict | None, device: torch.device | str) -> list[Misplaced]:
    """Every parameter, buffer, plain tensor attribute and batch field that is not on `device`."""
    device = torch.device(device)
    found = []
    for path, module in model.named_modules() if model is not None else ():
        kind_of = [
            ("parameter", module.named_parameters(recurse=False)),
            ("buffer", module.named_buffers(recurse=False)),
            ("tensor attribute", ((k, v) for k, v in vars(module).items() if isinstance(v, torch.Tensor))),
        ]
        for kind, items in kind_of:
            for name, tensor in items:
                if tensor is not None and not _same_device(tensor.device, device):
                    full = f"{path}.{name}" if path else name
                    found.append(Misplaced(kind, full, path, type(module).__name__, str(tensor.device)))
    for name, value in (batch or {}).items():
        if isinstance(value, torch.Tensor) and not _same_device(value.device, device):
            found.append(Misplaced("batch field", name, "", "", str(value.device)))
    return found


def _failing_module(
    exc: BaseException, model: nn.Module | None, device: torch.device | None
) -> tuple[str | None, str | None, list[str]]:
    """From the traceback: the innermost module forward, the last user frame ('file:line in function') and the
    tensors in user frames' locals that are not on `device`."""
    names = {id(m): (n or "(model)", type(m).__name__) for n, m in model.named_modules()} if model is not None else {}
    module, where, strays = None, None, []
    tb = exc.__traceback__
    torch_dir = str(Path(torch.__file__).parent)
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and id(owner) in names:
            path, kind = names[id(owner)]
            module = f"{path} ({kind})"
        if not frame.f_code.co_filename.startswith(torch_dir):  # user (or task) code, not torch internals
            where = f"{Path(frame.f_code.co_filename).name}:{tb.tb_lineno} in {frame.f_code.co_name}"
            if device is not None:
                for name, value in frame.f_locals.items():
                    values = value.items() if isinstance(value, dict) else [("", value)]
                    for key, tensor in values:
                        if isinstance(tensor, torch.Tensor) and not _same_device(tensor.device, device):
                            label = f"{name}[{key!r}]" if key else name
                            strays.append(f"{label} in {where} is on {tensor.device}")
        tb = tb.tb_next
    return module, where, list(dict.fromkeys(strays))


def explain_device_mismatch(
    exc: BaseException,
    model: nn.Module | None = None,
    batch: dict | None = None,
    device: torch.device | str | None = None,
    context: str = "",
) -> str | None:
    """A message naming both devices, what is misplaced and the .to(device) fix (`context`, e.g. ' at step 3',
    after the headline); None when `exc` is not a device mismatch."""
    devices = mismatch_devices(str(exc))
    if devices is None:
        return None
    device = torch.device(device) if device is not None else None
    first, second = devices
    text = f"tensors on two devices{context}: one operation got tensors on {first} and on {second}"
    module, where, strays = _failing_module(exc, model, device)
    if module or where:
        text += " (in " + ", ".join(x for x in (f"module {module}" if module else None, where) if x) + ")"
    found = find_misplaced(model, batch, device) if device is not None else []
    if found:
        details = "; ".join(f"{m.describe()}, the run's device is {device}: {m.fix(str(device))}" for m in found[:3])
        return f"{text}. {details}"
    if strays:
        return (
            f"{text}. {'; '.join(strays[:3])}, the run's device is {device}: move it with .to({str(device)!r}) "
            f"where it is made (batch tensors: batch[key].to(device))"
        )
    if device is None or model is None:
        return f"{text}. Move every model and batch tensor to the run's device with .to(device)"
    return (
        f"{text}. Every model and batch tensor is on {device}, so the stray tensor was created in code: "
        f"create tensors with device=x.device (x an input) or move them with .to(device)"
    )


@contextmanager
def mismatch_as_device_error(model: nn.Module, batch: dict, device: torch.device):
    """A device mismatch raised inside as a one-line DeviceError; any other error as it is."""
    try:
        yield
    except RuntimeError as exc:
        message = explain_device_mismatch(exc, model, batch, device)
        if message is None:
            raise
        raise DeviceError(message) from exc


def explain_exception(
    exc: BaseException, step: int | None = None, batch_size: int | None = None, model=None, batches=None, device=None
) -> str:
    """One paragraph naming what went wrong (at `step` of a run) and how to fix it."""
    at = f" at step {step:,}" if step is not None else ""
    text = str(exc).strip()
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text.lower():
        batch = f" (now {batch_size})" if batch_size is not None else ""
        return (
            f"the device ran out of memory{at}: lower batch_size{batch}, use grad_accum for the same "
            f"effective batch, or a smaller model; bf16/fp16 halve activation memory"
        )
    # The training split's tensors (batches are gathered from them; host-held data is moved per batch).
    split = None if batches is None or getattr(batches, "_on_host", False) else batches.split
    mismatch = explain_device_mismatch(exc, model, split, device, context=at)
    if mismatch is not None:
        return mismatch
    if isinstance(exc, RuntimeError) and ("CUDA error" in text or "device-side" in text):
        return f"the device failed{at} (it may have vanished or reset): {first_line(text)}"
    from core.tasks.task_checks import raised_at

    return f"{type(exc).__name__}{at}: {first_line(text) or '(no message)'}{raised_at(exc)}"
