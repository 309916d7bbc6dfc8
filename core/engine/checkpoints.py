"""Checkpoints: one versioned dict of plain containers and tensors, written atomically, loaded safely.

Safe loading means `torch.load(weights_only=True)`: a file that needs arbitrary unpickling (code from
the internet) is refused before anything in it runs. Exported weights use safetensors.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import platform
import random
import warnings
from pathlib import Path

import numpy as np
import torch

from core.errors import CheckpointError
from core.files import atomic_write_bytes

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "task", "model", "optimizer", "scheduler", "scaler", "step", "epoch",
                 "rng", "config", "metrics", "versions")


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The plain module under DDP and torch.compile wrappers (no `module.` / `_orig_mod.` prefixes)."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def capture_rng() -> dict:
    """RNG states of torch (CPU and accelerators), numpy and Python, as tensors and plain lists."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": [list(random.getstate()[1]), random.getstate()[0], random.getstate()[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    """Inverse of `capture_rng`."""
    torch.set_rng_state(state["torch"])
    npk = state["numpy"]
    np.random.set_state(("MT19937", npk["keys"].numpy().astype(np.uint32), npk["pos"], npk["has_gauss"],
                         npk["cached_gaussian"]))
    keys, version, gauss = state["python"]
    random.setstate((version, tuple(keys), gauss))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def library_versions() -> dict:
    from core import __version__

    return {"amp_console": __version__, "torch": str(torch.__version__), "numpy": np.__version__,
            "python": platform.python_version()}


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
    """Load a checkpoint with weights_only=True; CheckpointError names what is wrong with the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
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
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupt): {_one_line(exc)}") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise CheckpointError(f"{path}: not an AMP Console checkpoint (no format_version)")
    if state["format_version"] != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {state['format_version']} is not supported "
                              f"(this version reads {FORMAT_VERSION})")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}")
    return state


def load_model_state(model: torch.nn.Module, state_dict: dict, source: str) -> None:
    """Strict load: leftover or missing keys and shape mismatches are a CheckpointError naming them."""
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [f"{k} {tuple(state_dict[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
              if k in state_dict and tuple(state_dict[k].shape) != tuple(v.shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing keys {_short(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {_short(unexpected)}")
        if shapes:
            parts.append(f"shape mismatch {_short(shapes)}")
        raise CheckpointError(f"{source}: the checkpoint does not fit this model: {'; '.join(parts)}")
    model.load_state_dict(state_dict, strict=True)


def export_weights(model: torch.nn.Module, path: str | Path, manifest: dict) -> tuple[Path, Path]:
    """Write `path` (.safetensors, unwrapped fp32 weights) and `path`.json (task, config, metrics, precision)."""
    from safetensors.torch import save as save_safetensors

    path = Path(path)
    if path.suffix != ".safetensors":
        path = path.with_suffix(".safetensors")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in unwrap_model(model).state_dict().items()}
    meta = {"format": "pt", "task": str(manifest.get("task", ""))}
    atomic_write_bytes(path, save_safetensors(tensors, metadata=meta))
    manifest_path = path.with_suffix(".json")
    atomic_write_bytes(manifest_path, json.dumps(manifest, indent=2, default=str).encode("utf-8"))
    return path, manifest_path


CHECKPOINT_FILE = "checkpoint.pt"  # a run folder's files (core.engine.trainer writes them, core.cli.torchrun reads events)
METRICS_FILE = "metrics.jsonl"


def holds_a_run(folder: Path) -> bool:
    """Whether `folder` has an earlier run's checkpoint or metrics (which a fresh run must not overwrite)."""
    return (folder / CHECKPOINT_FILE).exists() or (folder / METRICS_FILE).exists()


def run_dir_for(folder: str | Path, resume_from: str | Path | None = None) -> Path:
    """Where a run writes: `folder`, or when it holds another run, the first free `folder-2`, `folder-3`, ...
    beside it, so a run never overwrites a checkpoint someone may still want. A run resumed from the
    checkpoint in `folder` itself continues there."""
    folder = Path(folder)
    if resume_from is not None and Path(resume_from).resolve().parent == folder.resolve():
        return folder
    if not holds_a_run(folder):
        return folder
    parent, name = (folder.parent, folder.name) if folder.name not in ("", ".", "..") else (folder, "run")
    number = 2
    while holds_a_run(parent / f"{name}-{number}"):
        number += 1
    return parent / f"{name}-{number}"


def export_checkpoint(checkpoint: str | Path, destination: str | Path) -> tuple[Path, Path, Path]:
    """Export a saved run: a copy of the full checkpoint plus safetensors weights and a JSON manifest."""
    state = load_checkpoint(checkpoint)
    destination = Path(destination)
    full = destination.with_suffix(".pt")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(full, buffer.getvalue())
    from core.tasks import create_task

    config = state["config"]
    model = create_task(config["task"], config.get("task_options", {})).build_model(state.get("data_info", {}))
    load_model_state(model, state["model"], str(checkpoint))
    manifest = {"task": state["task"], "step": state["step"], "epoch": state["epoch"], "config": config,
                "metrics": state["metrics"], "precision": state.get("precision", {}), "versions": state["versions"]}
    vocabulary = state.get("vocabulary") or {}
    if vocabulary:  # to serve in the data's own ids: the model's id k (k >= 1; 0 is padding) is entry k - 1
        manifest["vocabulary"] = {name: ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
                                  for name, ids in vocabulary.items()}
    weights, manifest_path = export_weights(model, destination.with_suffix(".safetensors"), manifest)
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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
