"""What a task's methods return, checked once before a run's first step (a TaskOutputError naming the task,
the method, what was expected and what came back), and the user's own frames of an exception (UserCodeError).
"""

from __future__ import annotations

import contextlib
import re
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from core.data import loaders
from core.errors import AmpConsoleError, TaskOutputError, UserCodeError
from core.tasks.base import EvalParts, Task, TaskData
from core.text import first_line

PROBE_ROWS = 8  # validation rows the metrics check evaluates
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')


def _library_dirs() -> tuple[str, ...]:
    paths, core = sysconfig.get_paths(), Path(__file__).resolve().parents[1]
    dirs = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= {str(Path(torch.__file__).parent), str(core), str(core.parent / "app")}
    return tuple(str(Path(d).resolve()) + "/" for d in dirs if d)


_LIBRARY = _library_dirs()


def is_user_file(filename: str) -> bool:
    """Whether a traceback's file is the user's: USER_CODE_ROOTS, or not the project's or a library's."""
    from core.tasks.user_tasks import USER_CODE_ROOTS

    if filename.startswith("<"):
        return False
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        return False
    if any(resolved.startswith(root) if root.endswith("/") else resolved == root for root in USER_CODE_ROOTS):
        return True
    return not resolved.startswith(_LIBRARY)


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code in `exc`'s traceback (where their code raised, or called what did)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]
    return frames[-1] if frames else None


def where(frame: traceback.FrameSummary) -> str:
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"


def raised_at(exc: BaseException) -> str:
    """' (raised at my_task.py:12 in loss)' for an exception of the user's code, '' for anyone else's."""
    frame = user_frame(exc)
    return f" (raised at {where(frame)})" if frame is not None else ""


def user_frames_text(details: str) -> str:
    """The user's frames of a formatted traceback (RunEnded.details); '' when it holds none."""
    kept: list[str] = []
    keeping = False
    for line in details.splitlines():
        match = _FRAME.match(line)
        if match:
            keeping = is_user_file(match["file"])
        elif not line.startswith("    "):
            keeping = False  # 'Traceback ...', the exception's own line, 'The above exception ...'
        if keeping:
            kept.append(line)
    return "\n".join(kept)


@contextlib.contextmanager
def user_code_errors(context: str = " while the run was set up"):
    """An exception with a frame of the user's code inside the block becomes a UserCodeError."""
    try:
        yield
    except AmpConsoleError:
        raise
    except Exception as exc:
        if user_frame(exc) is None:
            raise
        details = "".join(traceback.format_exception(exc))
        raise UserCodeError(
            f"{type(exc).__name__}{context}: {first_line(str(exc)) or '(no message)'}{raised_at(exc)}", details
        ) from exc


def _got(value) -> str:
    """What came back, in a few words."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:5]) + (", ..." if len(value) > 5 else "")
        return f"a dict (keys {keys})" if value else "an empty dict"
    if isinstance(value, (bool, int, float)):
        return f"a {type(value).__name__} ({value!r})"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__module__}.{type(value).__qualname__}".replace("a builtins.", "a ")


def _bad(task: Task, method: str, text: str) -> TaskOutputError:
    return TaskOutputError(f"{task.name}.{method} {text}")


def configured_optimizers(task: Task, model: nn.Module, cfg):
    """The task's own (optimizer, scheduler or None) from configure_optimizers, checked; None without."""
    hook = getattr(task, "configure_optimizers", None)
    if hook is None:
        return None
    made = hook(model, cfg)
    optimizer, scheduler = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise _bad(
            task, "configure_optimizers", f"must return a torch optimizer or (optimizer, scheduler), got {_got(made)}"
        )
    if scheduler is not None and not isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler):
        raise _bad(
            task, "configure_optimizers", f"returned a scheduler that is no torch LR scheduler: {_got(scheduler)}"
        )
    return optimizer, scheduler


def checked_data(task: Task, data) -> TaskData:
    """`data`, what `task.load_data` returned, if it is a TaskData whose splits are dicts of equally long tensors."""

    def bad(text: str) -> TaskOutputError:
        return _bad(task, "load_data", text)

    if not isinstance(data, TaskData):
        raise bad(f"returned {_got(data)}: expected a TaskData(train=..., val=..., test=...) (core.tasks.base)")
    for split in ("train", "val", "test"):
        tensors = getattr(data, split)
        if (tensors is None and split == "test") or isinstance(tensors, Dataset):  # a Dataset's items: as read
            continue
        if not isinstance(tensors, dict) or not tensors:
            expected = "a dict of tensors (e.g. {'x': ..., 'y': ...}) or a torch Dataset"
            raise bad(f"returned a TaskData whose {split} split is {_got(tensors)}: expected {expected}")
        for key, value in tensors.items():
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                raise bad(f"returned a {split} split whose {key!r} is {_got(value)}: expected a tensor of one row each")
        rows = {key: value.shape[0] for key, value in tensors.items()}
        if len(set(rows.values())) > 1:
            listed = ", ".join(f"{k!r} {n:,}" for k, n in rows.items())
            raise bad(f"returned a {split} split of unequal lengths ({listed} rows): one row per example in each")
    return data


def built_model(task: Task, info: dict) -> nn.Module:
    """`task.build_model(info)`, checked to be an nn.Module."""
    model = task.build_model(info)
    if not isinstance(model, nn.Module):
        raise _bad(task, "build_model", f"returned {_got(model)}: expected a torch.nn.Module")
    return model


def check_loss(task: Task, loss) -> None:
    """A scalar floating tensor that requires grad, else TaskOutputError saying what came back."""
    if not isinstance(loss, torch.Tensor):
        hint = {
            "NoneType": "; does it end with `return loss`?",
            "float": "; return the tensor itself, not loss.item() or float(loss)",
            "int": "; return the tensor itself, not a number",
            "dict": "; return the loss itself (e.g. out['loss'])",
            "tuple": "; return the loss alone (keep other outputs for evaluate)",
        }.get(type(loss).__name__, "")
        problem = f"{_got(loss)}: expected a scalar tensor (0-dim) that requires grad{hint}"
    elif loss.dim() != 0:
        problem = f"a tensor of shape {tuple(loss.shape)}: expected a scalar (a 0-dim tensor); reduce it, e.g. .mean()"
    elif not loss.is_floating_point():
        dtype = str(loss.dtype).removeprefix("torch.")
        problem = f"a tensor of dtype {dtype}: expected a floating-point scalar computed from the model's output"
    elif not loss.requires_grad:
        problem = (
            "a tensor that does not require grad: expected the loss computed from the model's output (not "
            "under torch.no_grad(), detached, or rebuilt from numbers)"
        )
    else:
        return
    raise _bad(task, "loss", f"returned {problem}")


def check_metrics(task: Task, metrics, method: str) -> None:
    """A dict of str -> number (int or float), else TaskOutputError naming what came back."""
    if not isinstance(metrics, dict):
        raise _bad(task, method, f"returned {_got(metrics)}: expected a dict of metric name -> number")
    for name, value in metrics.items():
        if not isinstance(name, str):
            kind = type(name).__name__
            raise _bad(task, method, f"returned a metric named {name!r} ({kind}): metric names are strings")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fix = " (use float(...) or .item())" if isinstance(value, torch.Tensor) else ""
            raise _bad(task, method, f"returned {name!r} as {_got(value)}: expected a number{fix}")


def check_primary(task: Task, metrics: dict, method: str) -> None:
    """The task's primary_metric among the metrics or its Metric objects (the best checkpoints choose by it)."""
    if task.primary_metric not in metrics and task.primary_metric not in task.metric_objects():
        names = ", ".join(map(repr, metrics)) or "none"
        raise _bad(
            task,
            method,
            f"returned the metrics {names}, without the task's primary_metric {task.primary_metric!r} (set "
            f"primary_metric to one of them, or return it)",
        )


def check_parts(task: Task, parts) -> None:
    """EvalParts of tensors, else TaskOutputError."""
    if not isinstance(parts, EvalParts):
        expected = "EvalParts(sums={name: tensor}, values={...}) (core.tasks.base)"
        raise _bad(task, "evaluate_parts", f"returned {_got(parts)}: expected {expected}")
    for kind in ("sums", "values"):
        for name, value in getattr(parts, kind).items():
            if not isinstance(value, torch.Tensor):
                problem = f"{kind}[{name!r}] as {_got(value)}: expected a tensor (sums add up over slices of a split)"
                raise _bad(task, "evaluate_parts", f"returned {problem}")


def is_user_task(task: Task) -> bool:
    """A task defined outside the project's core.tasks (a task file, a test's or a package's class)."""
    return not type(task).__module__.startswith("core.")


def check_returns(
    task: Task,
    model: nn.Module,
    data: TaskData,
    device: torch.device,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    batch_size: int = 64,
) -> None:
    """A user task's loss on one training batch and metrics on PROBE_ROWS rows, leaving no trace."""
    if not is_user_task(task):
        return
    devices = [device] if device.type == "cuda" else []
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}  # e.g. BatchNorm's running stats
    with torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):
        try:
            batch = loaders.first_rows(data.train, batch_size, device)  # as a step gets it
            with torch.enable_grad(), autocast():
                loss = task.loss(model, batch)
            check_loss(task, loss)
            del loss, batch
            _check_evaluation(task, model, data.val, device, autocast, batch_size)
        except TaskOutputError:
            raise
        except Exception:
            pass
        finally:
            with torch.no_grad():
                for name, value in model.named_buffers():
                    if name in buffers and value.shape == buffers[name].shape:
                        value.copy_(buffers[name])


def _check_evaluation(task: Task, model: nn.Module, val, device: torch.device, autocast, batch_size: int) -> None:
    probe = loaders.probe(val, PROBE_ROWS, device)  # as evaluation gets the split
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), autocast():
            if task.shares_evaluation():
                parts = task.evaluate_parts(model, probe, batch_size)
                check_parts(task, parts)
                method, metrics = "metrics", task.metrics(parts)
            else:
                method, metrics = "evaluate", task.evaluate(model, probe, batch_size)
            check_metrics(task, metrics, method)
            check_primary(task, metrics, method)
    finally:
        model.train(was_training)


def load_checked(task: Task, cfg, context: str = " while the run was set up") -> TaskData:
    """`task.load_data` as the trainer calls it, checked; the task's own exception a UserCodeError."""
    with user_code_errors(context):
        return checked_data(task, task.use_config(cfg).load_data(cfg.data, cfg.seed))


def build_checked(task: Task, info: dict, context: str = " while the run was set up") -> nn.Module:
    """`task.build_model(info)`, checked, an exception of the task's own code a UserCodeError."""
    with user_code_errors(context):
        return built_model(task, info)
