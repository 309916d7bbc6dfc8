"""Checkpoints: one versioned dict of plain containers and tensors, written atomically, loaded safely.

Safe loading: every zip member's CRC-32 is checked, then `torch.load(weights_only=True)` (a file that needs
arbitrary unpickling is refused before anything in it runs), then the structure the engine reads and the
finiteness of weights and optimizer state. Each refusal is one CheckpointError line. Exports use safetensors.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import platform
import random
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from core.engine.run_folder import CHECKPOINT_FILE, METRICS_FILE  # noqa: F401  (a run folder's files)
from core.errors import CheckpointError
from core.files import atomic_write_bytes
from core.text import first_line

FORMAT_VERSION = 1
REQUIRED_KEYS = (
    *("format_version", "task", "model", "optimizer", "scheduler", "scaler"),
    *("step", "epoch", "rng", "config", "metrics", "versions"),
)


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The plain module under DDP and torch.compile wrappers (no `module.` / `_orig_mod.` prefixes)."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            model = inner
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def capture_rng() -> dict:
    """RNG states of torch (CPU and accelerators), numpy and Python, as tensors and plain lists."""
    np_state = np.random.get_state(legacy=True)
    assert isinstance(np_state, tuple)  # legacy=True: ('MT19937', keys, pos, has_gauss, cached_gaussian)
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": [list(random.getstate()[1]), random.getstate()[0], random.getstate()[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> str | None:
    """Inverse of `capture_rng`; a state that is not one is not applied (all or nothing): what is wrong is returned."""
    problem = rng_problem(state)
    if problem:
        return problem
    before = capture_rng()
    try:
        torch.set_rng_state(state["torch"])
        npk = state["numpy"]
        np.random.set_state(
            ("MT19937", npk["keys"].numpy().astype(np.uint32), npk["pos"], npk["has_gauss"], npk["cached_gaussian"])
        )
        keys, version, gauss = state["python"]
        random.setstate((version, tuple(keys), gauss))
        cuda = state.get("cuda")
        if isinstance(cuda, list) and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
    except (RuntimeError, ValueError, TypeError, OverflowError) as exc:
        restore_rng(before)  # all or nothing
        return f"rng: {first_line(exc)}"
    return None


def rng_problem(state) -> str | None:
    """What makes `state` not a `capture_rng` state, naming the key; None when it is one."""
    if not isinstance(state, dict):
        return f"rng is {_brief(state)}"
    for key in ("torch", "numpy", "python"):
        if key not in state:
            return f"rng lacks {key!r}"
    own = torch.get_rng_state()
    value = state["torch"]
    if not isinstance(value, torch.Tensor) or value.dtype != own.dtype or value.shape != own.shape:
        return f"rng.torch is {_brief(value)}, not {_brief(own)}"
    npk = state["numpy"]
    if not isinstance(npk, dict) or set(npk) != {"keys", "pos", "has_gauss", "cached_gaussian"}:
        return "rng.numpy should have keys, pos, has_gauss and cached_gaussian"
    keys = npk["keys"]
    if (
        not isinstance(keys, torch.Tensor)
        or keys.dtype != torch.int64
        or tuple(keys.shape) != (624,)
        or bool((keys < 0).any())
        or bool((keys >= 2**32).any())
    ):
        return f"rng.numpy.keys is {_brief(keys)}, not 624 32-bit words"
    if (
        type(npk["pos"]) is not int
        or not 0 <= npk["pos"] <= 624
        or npk["has_gauss"] not in (0, 1)
        or not _is_number(npk["cached_gaussian"])
    ):
        return "rng.numpy: pos, has_gauss or cached_gaussian out of range"
    python = state["python"]
    if (
        not isinstance(python, (list, tuple))
        or len(python) != 3
        or not isinstance(python[0], (list, tuple))
        or len(python[0]) != 625
        or not all(type(k) is int and 0 <= k < 2**32 for k in python[0])
        or type(python[1]) is not int
        or not (python[2] is None or isinstance(python[2], float))
    ):
        return "rng.python is not a random.getstate() state"
    return None


def library_versions() -> dict:
    from core import __version__

    return {
        "amp_console": __version__,
        "torch": str(torch.__version__),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def save_checkpoint(path: Path, state: dict) -> Path:
    """Serialise `state` (see REQUIRED_KEYS) and write it atomically to `path`."""
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise ValueError(f"checkpoint state lacks {missing}")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint loaded and checked as the module doc says; its config's task options as its run trained with
    (core.tasks.saved_config)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    check_integrity(path)
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols; the error below says more
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused: the file needs arbitrary unpickling, which could run code "
            f"(only tensors and plain containers are loaded){_unsafe_global(exc)}"
        ) from None
    except Exception as exc:  # torch.load raises many types on garbage (IndexError, KeyError...): all mean corrupt
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupt): {first_line(exc)}") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise CheckpointError(f"{path}: not an AMP Console checkpoint (no format_version)")
    if type(state["format_version"]) is not int or state["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format {_brief(state['format_version'])} is not supported "
            f"(this version reads {FORMAT_VERSION})"
        )
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}")
    check_structure(state, str(path))
    check_finite(state, str(path))
    from core.tasks import saved_config

    state["config"] = saved_config(state["config"])  # options saved before their default changed: as trained
    return state


def check_integrity(path: Path) -> None:
    """Read every member of the PyTorch zip archive through once, so that a flipped bit is a CheckpointError (its
    CRC-32) rather than a weight of -3e37; anything that is not such an archive is refused before unpickling."""
    with open(path, "rb") as file:
        head = file.read(4)
        if not head:
            raise CheckpointError(f"{path}: not a checkpoint file (the file is empty)")
        if head != b"PK\x03\x04":
            raise CheckpointError(f"{path}: not a checkpoint file ({_what_it_is(head + file.read(60))})")
        try:
            archive = zipfile.ZipFile(file)
        except zipfile.BadZipFile:
            raise CheckpointError(
                f"{path}: checkpoint is corrupted (truncated: the zip directory at its end is "
                f"missing); it cannot be trusted"
            ) from None
        except Exception as exc:  # a damaged directory: zipfile raises ValueError, OSError, EOFError...
            raise _corrupted(path, exc) from None
        with archive:
            members = archive.infolist()
            if not any(m.filename.endswith("/data.pkl") and m.filename.count("/") == 1 for m in members):
                raise CheckpointError(
                    f"{path}: not a checkpoint file (a zip archive, but not a PyTorch file: it has no data.pkl)"
                )
            for member in members:
                if member.compress_type != zipfile.ZIP_STORED:
                    raise CheckpointError(
                        f"{path}: not a checkpoint file ({_member(member.filename)} is "
                        f"compressed; PyTorch stores its members as they are)"
                    )
                try:
                    with archive.open(member) as data:
                        while data.read(_CHUNK):
                            pass
                except Exception as exc:  # BadZipFile (CRC, headers), EOFError, RuntimeError ("encrypted")...
                    raise _corrupted(path, exc) from None


_CHUNK = 1 << 22


def _corrupted(path: Path, exc: BaseException) -> CheckpointError:
    text = first_line(exc)
    crc = re.fullmatch(r"Bad CRC-32 for file '(.+)'", text)
    detail = f"CRC mismatch in {_member(crc.group(1))}" if crc else f"damaged zip structure: {text}"
    return CheckpointError(f"{path}: checkpoint is corrupted ({detail}); it cannot be trusted")


def _member(name: str) -> str:
    """'archive/data/12' -> 'data/12' (the archive's top folder is named after whatever torch.save was given)."""
    return name.split("/", 1)[-1]


def _what_it_is(head: bytes) -> str:
    if head.startswith(b"\x80"):
        return "a bare pickle, not a PyTorch zip archive; it is not unpickled"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "binary data, not a PyTorch zip archive"
    first = text.splitlines()[0][:24] if text.strip() else ""
    return f"a text file starting {first!r}, not a PyTorch zip archive" if first else "not a PyTorch zip archive"


def check_structure(state: dict, source: str) -> None:
    """A CheckpointError naming the first key the engine reads that has not the type it expects (RNG states are
    checked when restored, where a bad one is skipped)."""

    def bad(key: str, expected: str, value) -> CheckpointError:
        return CheckpointError(f"{source}: bad checkpoint: {key} should be {expected}, not {_brief(value)}")

    if not isinstance(state["task"], str):
        raise bad("task", "a task name", state["task"])
    model = state["model"]
    if not isinstance(model, dict) or not model:
        raise bad("model", "a dict of tensors (parameter name -> tensor)", model)
    for name, value in model.items():
        if not isinstance(name, str):
            raise bad("model", "keyed by parameter names", f"key {name!r}")
        if not isinstance(value, torch.Tensor):
            raise bad(f"model[{name!r}]", "a tensor", value)
    _check_optimizer(state["optimizer"], source, bad)
    if state["scheduler"] is not None and not isinstance(state["scheduler"], dict):
        raise bad("scheduler", "a dict (or None)", state["scheduler"])
    scaler = state["scaler"]
    if not isinstance(scaler, dict):
        raise bad("scaler", "a dict", scaler)
    for key, value in scaler.items():
        if not _is_finite_number(value) or value < 0 or (key == "scale" and value == 0):
            raise bad(f"scaler.{key}", "a finite number > 0", value)
    for key in ("step", "epoch", "skipped_steps"):
        value = state.get(key, 0)
        if type(value) is not int or value < 0:
            raise bad(key, "an integer >= 0", value)
    for key in ("metrics", "versions"):  # a bad "rng" is skipped with a note when it is restored
        if not isinstance(state[key], dict):
            raise bad(key, "a dict", state[key])
    for key, value in state["metrics"].items():
        if not isinstance(key, str) or not (value is None or _is_number(value)):
            raise bad(f"metrics[{key!r}]", "a number", value)
    for key in ("data_info", "vocabulary", "precision", "data_order"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise bad(key, "a dict", state[key])
    for name, ids in (state.get("vocabulary") or {}).items():
        if not isinstance(ids, (torch.Tensor, list)) or (isinstance(ids, torch.Tensor) and ids.ndim != 1):
            raise bad(f"vocabulary[{name!r}]", "a list of ids", ids)
    _check_config(state, source, bad)


def _check_optimizer(optimizer, source: str, bad) -> None:
    if (
        not isinstance(optimizer, dict)
        or not isinstance(optimizer.get("param_groups"), list)
        or not isinstance(optimizer.get("state"), dict)
    ):
        raise bad("optimizer", "a dict of 'state' and 'param_groups'", optimizer)
    ids = []
    for number, group in enumerate(optimizer["param_groups"]):
        if (
            not isinstance(group, dict)
            or not isinstance(group.get("params"), list)
            or not all(type(i) is int for i in group["params"])
        ):
            raise bad(f"optimizer.param_groups[{number}]", "a dict with a list of parameter numbers", group)
        for key, value in group.items():
            if key == "lr" and isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            numbers = value if isinstance(value, (tuple, list)) and key != "params" else [value]
            if (
                any(_is_number(v) and not _is_finite_number(v) for v in numbers)
                or key == "lr"
                and not _is_finite_number(value)
            ):
                raise bad(f"optimizer.param_groups[{number}].{key}", "a finite number", value)
        ids.extend(group["params"])
    if len(set(ids)) != len(ids):
        raise bad("optimizer.param_groups", "groups of distinct parameters", "a parameter in two groups")
    for index, entry in optimizer["state"].items():
        if index not in ids:
            raise CheckpointError(
                f"{source}: bad checkpoint: optimizer.state[{index!r}] is the state of no parameter "
                f"in optimizer.param_groups"
            )
        values = list(entry.values()) if isinstance(entry, dict) else [entry]
        values += [v for d in values if isinstance(d, dict) for v in d.values()]  # bitsandbytes' dict of its state
        if not isinstance(entry, dict) or not all(
            v is None or isinstance(v, (torch.Tensor, dict)) or _is_number(v) for v in values
        ):
            raise bad(f"optimizer.state[{index}]", "a dict of tensors", entry)


def _check_config(state: dict, source: str, bad) -> None:
    from core.config import RunConfig
    from core.errors import ConfigError
    from core.tasks import get_task_class

    config = state["config"]
    saved = None
    if not isinstance(config, dict):
        raise bad("config", "a dict of settings", config)
    try:
        saved = RunConfig.from_dict(config, source="the checkpoint")
        get_task_class(config.get("task", state["task"]), saved.task_file)
    except ConfigError as exc:
        if saved is not None and saved.task_file:  # a user task this process has not loaded: how to give it
            raise CheckpointError(f"{source}: {exc}") from None
        raise CheckpointError(f"{source}: bad checkpoint: config.{exc}") from None
    except (TypeError, ValueError) as exc:  # a non-string key, a value RunConfig cannot take
        raise CheckpointError(f"{source}: bad checkpoint: config: {first_line(exc)}") from None
    if config.get("task", state["task"]) != state["task"]:
        raise bad("config.task", f"the checkpoint's task {state['task']!r}", config["task"])


def check_finite(state: dict, source: str) -> None:
    """Refuse NaN/inf weights or optimizer state (resuming them can only fail), naming the first bad tensor."""
    for name, tensor in state["model"].items():
        bad = _non_finite(tensor)
        if bad:
            raise CheckpointError(
                f"{source}: weights are not finite ({name} has {bad} NaN/inf values); the checkpoint cannot be resumed"
            )
    for index, entry in state["optimizer"]["state"].items():
        nested = [(f"{k}.{key}", v) for k, d in entry.items() if isinstance(d, dict) for key, v in d.items()]
        for key, value in [(k, v) for k, v in entry.items() if not isinstance(v, dict)] + nested:  # bitsandbytes'
            bad = (
                _non_finite(value)
                if isinstance(value, torch.Tensor)
                else int(value is not None and not _is_finite_number(value))
            )
            if bad:
                raise CheckpointError(
                    f"{source}: optimizer state is not finite (state[{index}].{key} has {bad} "
                    f"NaN/inf values); the checkpoint cannot be resumed"
                )


def _non_finite(tensor: torch.Tensor) -> int:
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return 0
    # One sum says a tensor is finite far faster than isfinite().all(); numpy's sum for fp32/fp64, as it uses
    # no thread pool that a busy core would stall. Only a non-finite sum (NaN/inf inside, or an overflow of
    # finite values) pays for the exact count.
    if tensor.dtype in (torch.float32, torch.float64) and tensor.device.type == "cpu" and not tensor.requires_grad:
        with np.errstate(all="ignore"):  # an overflow is a non-finite sum, checked exactly below
            total = float(tensor.numpy().sum())
    else:
        try:
            total = float(tensor.sum(dtype=torch.float32) if tensor.element_size() < 4 else tensor.sum().abs())
        except RuntimeError:  # a dtype without a sum kernel (float8)
            total = float(tensor.float().sum())
    if math.isfinite(total):
        return 0
    finite = torch.isfinite(tensor if tensor.element_size() >= 2 else tensor.float())
    return int(finite.numel() - finite.sum())


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite_number(value) -> bool:
    """An int or float (not a bool) that is not NaN or inf, and fits a float."""
    try:
        return _is_number(value) and math.isfinite(value)
    except OverflowError:  # an int beyond any float
        return False


def _brief(value) -> str:
    """A short description of a value for an error message: its type, and the value when it is short."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    kind = type(value).__name__
    text = repr(value)
    if isinstance(value, str) and kind == "str" and value.startswith("key "):
        return value
    if isinstance(value, (int, float, bool, str)) and len(text) <= 40:
        return f"{kind} {text}"
    if isinstance(value, (list, tuple, dict)):
        return f"a {kind} of {len(value)}"
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def load_model_state(model: torch.nn.Module, state_dict: dict, source: str) -> None:
    """Strict load: leftover or missing keys and shape mismatches are a CheckpointError naming them."""
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [
        f"{k} {tuple(state_dict[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in state_dict and tuple(state_dict[k].shape) != tuple(v.shape)
    ]
    found = (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatch", shapes))
    parts = [f"{what} {_short(items)}" for what, items in found if items]
    if parts:
        raise CheckpointError(f"{source}: the checkpoint does not fit this model: {'; '.join(parts)}")
    model.load_state_dict(state_dict, strict=True)


def rebuild_model(state: dict, source: str | Path):
    """(task, model) of a loaded checkpoint `state`: the model built from its data_info (float32, on the CPU) with
    its weights loaded strictly; what does not fit is a CheckpointError naming `source`."""
    from core.errors import ConfigError
    from core.tasks import create_task

    try:
        task = create_task(state["task"], state["config"].get("task_options", {}))
    except ConfigError as exc:
        raise CheckpointError(f"{source}: bad checkpoint: config.task_options: {exc}") from None
    try:
        model = task.build_model(state.get("data_info") or {})
    except (TypeError, ValueError, KeyError, RuntimeError, ConfigError) as exc:
        raise CheckpointError(
            f"{source}: bad checkpoint: data_info does not fit task {state['task']!r}: {first_line(exc)}"
        ) from None
    load_model_state(model, state["model"], str(source))
    return task, model


def export_checkpoint(checkpoint: str | Path, destination: str | Path) -> tuple[Path, Path, Path]:
    """Export a saved run: a copy of the full checkpoint plus safetensors weights and a JSON manifest."""
    state = load_checkpoint(checkpoint)
    config = state["config"]
    _task, model = rebuild_model(state, checkpoint)  # the weights are checked before anything is written
    destination = Path(destination)
    full = save_checkpoint(destination.with_suffix(".pt"), state)
    manifest = {
        "task": state["task"],
        "step": state["step"],
        "epoch": state["epoch"],
        "config": config,
        "metrics": state["metrics"],
        "precision": state.get("precision", {}),
        "versions": state["versions"],
    }
    vocabulary = state.get("vocabulary") or {}
    if vocabulary:  # to serve in the data's own ids: the model's id k (k >= 1; 0 is padding) is entry k - 1
        manifest["vocabulary"] = {
            name: ids.tolist() if isinstance(ids, torch.Tensor) else list(ids) for name, ids in vocabulary.items()
        }
    from safetensors.torch import save as save_safetensors

    # the unwrapped fp32 weights, and the manifest (task, config, metrics, precision) beside them
    weights, manifest_path = destination.with_suffix(".safetensors"), destination.with_suffix(".json")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in unwrap_model(model).state_dict().items()}
    atomic_write_bytes(weights, save_safetensors(tensors, metadata={"format": "pt", "task": str(state["task"])}))
    atomic_write_bytes(manifest_path, json.dumps(manifest, indent=2, default=str).encode("utf-8"))
    return full, weights, manifest_path


def _unsafe_global(exc: BaseException) -> str:
    """The 'Unsupported global: GLOBAL x.y' part of torch's weights_only error, if present."""
    for line in str(exc).splitlines():
        line = line.strip()
        if "Unsupported global" in line or "unsupported GLOBAL" in line or "Unsupported operand" in line:
            return ": " + line.split(" was not an allowed global")[0].rstrip(".")
    return ""


def _short(items: list[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")
