"""Deployable exports of a checkpoint (docs/runs.md, "Export for serving"): `export_model` writes a folder a serving
process loads without this project's code: the model file (model.pt2, model.onnx, or the weights alone),
`manifest.json` (the run's facts and what serving needs), serve.py with its parts and the task's serving module
(core.tasks.serving). Each export is loaded back and checked on a sample batch before it is kept; nothing is written
above the tolerance. `dtype` bf16/fp16 casts the serving part's `weights`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from core.config import RunConfig
from core.errors import CheckpointError, ConfigError
from core.files import atomic_write_bytes, check_writable_folder, new_temp_folder, shown_path
from core.runs.evaluation_report import json_ready
from core.runs.predict import checkpoint_file, rebuilt
from core.text import first_line, size

if TYPE_CHECKING:
    from core.tasks.serving import Input, TaskServing

MODEL_FILES = {"program": "model.pt2", "onnx": "model.onnx", "safetensors": "model.safetensors"}
FORMATS = tuple(MODEL_FILES)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ONNX_HINT = "pip install 'amp-console[onnx]'"
# Verification: the reloaded export against the same model in memory (same dtype), relative to the outputs'
# scale. Reloading is exact for the program and safetensors; ONNX Runtime's kernels differ in the last bits.
TOLERANCE = 1e-4
SAMPLE_ROWS = 32


@dataclass
class ExportResult:
    """What an export wrote and how it checked out (the CLI prints it, the window shows `summary`)."""

    format: str
    folder: Path
    files: list[str]
    task: str
    step: int
    dtype: str
    size_bytes: int  # the model file
    max_abs_diff: float  # the reloaded export against the model it was written from (same dtype)
    tolerance: float
    rows: int  # the sample batch's rows
    fp32_size_bytes: int | None = None  # with --dtype bf16/fp16: the fp32 export's model file
    dtype_diff: float | None = None  # with --dtype bf16/fp16: its outputs against the fp32 model's
    seconds: float = 0.0
    sample_shape: list[int] = field(default_factory=list)  # the sample batch's input shape

    def summary(self) -> str:
        """One line: where, what, and the verification figure."""
        text = f"exported {self.task} (step {self.step:,}) as {self.format} {self.dtype} to {self.folder}: "
        if not self.rows:  # a task without inputs: the weights alone
            return (
                text
                + f"{MODEL_FILES[self.format]} {size(self.size_bytes)}, weights only (no serve.py): verified tensor by tensor"
            )
        text += (
            f"{MODEL_FILES[self.format]} {size(self.size_bytes)}; verified by reloading it on a sample "
            f"batch {tuple(self.sample_shape)}: max abs difference {self.max_abs_diff:.2e} (tolerance "
            f"{self.tolerance:.0e})"
        )
        if self.fp32_size_bytes is not None and self.dtype_diff is not None:
            text += (
                f"; {self.dtype} vs fp32: {size(self.size_bytes)} vs {size(self.fp32_size_bytes)}, "
                f"outputs differ by at most {self.dtype_diff:.2e}"
            )
        return text

    def to_dict(self) -> dict:
        return {**asdict(self), "folder": str(self.folder)}


# ---------------------------------------------------------------------------------------------- the export
class NotServed(CheckpointError):
    """The checkpoint's task has no serving part (it declares no `inputs`)."""


@dataclass
class Loaded:
    """A checkpoint's state, task and model (float32, eval mode, on the CPU)."""

    state: dict
    task: object
    model: nn.Module
    path: Path

    @cached_property
    def serving(self) -> TaskServing:
        """The task's serving part (core.tasks.serving)."""
        return self.task.serving()

    @cached_property
    def inputs(self) -> tuple[Input, ...]:
        """What its deployable module reads, in order."""
        return self.serving.inputs(self.model)


def load_trained(checkpoint: str | Path) -> Loaded:
    """The checkpoint's model, rebuilt from its settings and weights (load_checkpoint: weights_only)."""
    from core.engine.checkpoints import load_checkpoint
    from core.tasks import TASKS
    from core.tasks.serving import not_served

    state = load_checkpoint(checkpoint)
    task_class = TASKS.get(state["task"])
    if task_class is None or task_class.serving_class() is None:
        raise NotServed(f"{checkpoint}: {not_served(state['task'])}")
    task, model = rebuilt(state, Path(checkpoint))
    return Loaded(state, task, model.eval(), Path(checkpoint))


def check_task_returns(loaded: Loaded, say) -> None:
    """A user task's loss and metrics returns checked on its run's data as a run checks them (a bad one is its
    TaskOutputError); data that cannot be loaded here leaves the check undone, said through `say`."""
    from core.tasks.task_checks import check_returns, checked_data, is_user_task

    task = loaded.task
    if not is_user_task(task):
        return
    try:
        cfg = RunConfig.from_dict(loaded.state["config"], source=str(loaded.path))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            data = task.use_config(cfg).load_data(cfg.data, cfg.seed)
    except Exception as exc:
        say(
            f"note: task {task.name}'s loss and metrics were not checked: its data could not be loaded "
            f"({type(exc).__name__}: {first_line(exc)})"
        )
        return
    check_returns(task, loaded.model, checked_data(task, data), torch.device("cpu"), batch_size=cfg.batch_size)


def export_model(
    checkpoint: str | Path,
    out: str | Path,
    fmt: str = "program",
    dtype: str = "fp32",
    progress=None,
    which: str = "advised",
) -> ExportResult:
    """Write and verify the export of `checkpoint` (a run folder: its checkpoint `which`) as `fmt` into the folder
    `out`; `progress(text)` gets a line per stage and each note. ConfigError for a bad setting or destination,
    CheckpointError for a checkpoint that cannot be exported; nothing is left at `out` on any failure."""
    say = progress or (lambda text: None)
    began = time.perf_counter()
    checkpoint, notes = checkpoint_file(checkpoint, which)
    for note in notes:
        say(f"note: {note}")
    if fmt not in FORMATS:
        raise ConfigError("format", f"{fmt!r} is not an export format: choose {', '.join(FORMATS)}")
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"{dtype!r} is not an export dtype: choose {', '.join(DTYPES)}")
    if fmt == "onnx":
        if dtype == "bf16":
            raise ConfigError(
                "dtype",
                "--dtype bf16 cannot be served by ONNX Runtime (its CPU kernels have no "
                "bfloat16 MatMul): use --dtype fp16 for ONNX, or --format program",
            )
        require_onnx()
    out = Path(os.path.abspath(Path(out).expanduser()))  # "." is the current folder, named (its parent is real)
    _check_destination(out)
    try:
        loaded = load_trained(checkpoint)
    except NotServed as exc:
        if fmt != "safetensors":
            raise CheckpointError(f"{exc}; --format safetensors exports its weights alone") from None
        return _export_weights(checkpoint, out, dtype, say, began)
    say(f"loaded {loaded.state['task']} checkpoint at step {loaded.state['step']:,} from {checkpoint}")
    check_task_returns(loaded, say)
    sample = loaded.serving.sample_inputs(loaded.model, SAMPLE_ROWS, 0)  # the task's (e.g. its own reviews hashed)
    sample = sample if isinstance(sample, tuple) else (sample,)
    reference = _serving(loaded, "fp32", fmt)
    try:
        with torch.no_grad():
            expected32 = reference(*sample)
    except Exception as exc:
        shapes = ", ".join(f"{s.name} {tuple(x.shape)} {x.dtype}" for s, x in zip(loaded.inputs, sample))
        raise CheckpointError(
            f"{checkpoint}: the {loaded.state['task']} model fails on sample inputs ({shapes}) of its declared "
            f"inputs: {type(exc).__name__}: {first_line(exc)}"
        ) from None
    with _staged(out) as staging:
        serving = _serving(loaded, dtype, fmt)
        with torch.no_grad():
            expected = serving(*sample)
        say(f"writing {MODEL_FILES[fmt]} ({dtype})…")
        files = _write_model(loaded, serving, sample, staging, fmt, dtype)
        try:
            got = _reload_outputs(loaded, staging, fmt, dtype, sample)
        except Exception as exc:
            raise CheckpointError(
                f"{checkpoint}: the written {MODEL_FILES[fmt]} could not be loaded back: "
                f"{first_line(exc)}; nothing was written"
            ) from None
        diff = _max_abs(got, expected)
        # Reduced precision run by another runtime (ONNX Runtime) rounds differently: a few units of its epsilon.
        rounding = 4 * torch.finfo(DTYPES[dtype]).eps if dtype != "fp32" and fmt == "onnx" else TOLERANCE
        tolerance = max(TOLERANCE, rounding) * max(1.0, float(expected.abs().max()))
        shape = tuple(sample[0].shape)
        say(f"verified: reloaded {MODEL_FILES[fmt]} on a sample batch {shape}, max abs difference {diff:.2e}")
        if not diff <= tolerance:  # NaN fails too
            raise CheckpointError(
                f"{checkpoint}: the {fmt} export does not reproduce the model: max abs "
                f"difference {diff:.2e} on a sample batch {shape} (tolerance {tolerance:.0e}); "
                f"nothing was written"
            )
        fp32_size = dtype_diff = None
        if dtype != "fp32":
            dtype_diff = _max_abs(expected, expected32)
            scratch = staging / ".fp32"
            scratch.mkdir()
            _write_model(loaded, reference, sample, scratch, fmt, "fp32")
            fp32_size = (scratch / MODEL_FILES[fmt]).stat().st_size
            shutil.rmtree(scratch)
        manifest = build_manifest(loaded, fmt, dtype, sample)
        manifest["verification"] = {
            "sample_shape": list(shape),
            "max_abs_diff": diff,
            "tolerance": tolerance,
            "dtype_diff_vs_fp32": dtype_diff,
        }
        # strict JSON (no NaN/Infinity, which a server in another language cannot parse): a metric that was NaN
        # (an AUC of a one-class split) is null
        manifest_json = json.dumps(json_ready(manifest), indent=2, allow_nan=False).encode("utf-8")
        for name, payload in ({"manifest.json": manifest_json} | serve_files(loaded.serving)).items():
            atomic_write_bytes(staging / name, payload)
            files.append(name)
        size = (staging / MODEL_FILES[fmt]).stat().st_size
    return ExportResult(
        fmt,
        out,
        sorted(files),
        loaded.state["task"],
        loaded.state["step"],
        dtype,
        size,
        diff,
        tolerance,
        int(sample[0].shape[0]),
        fp32_size,
        dtype_diff,
        time.perf_counter() - began,
        sample_shape=list(sample[0].shape),
    )


def _export_weights(checkpoint: Path, out: Path, dtype: str, say, began: float) -> ExportResult:
    """The weights alone of a task with no serving part, as export_checkpoint writes them (no serve.py), verified
    tensor by tensor after loading model.safetensors into a new model of the task."""
    from safetensors.torch import load_file

    from core.engine.checkpoints import export_checkpoint, load_checkpoint, load_model_state, rebuild_model

    if dtype != "fp32":
        raise ConfigError("dtype", f"--dtype {dtype}: a task without `inputs` exports its weights as trained (fp32)")
    say("the task declares no inputs, so no serve.py: exporting its weights alone")
    state = load_checkpoint(checkpoint)
    task, model = rebuild_model(state, checkpoint)
    with _staged(out) as staging:
        files = [Path(p).name for p in export_checkpoint(checkpoint, staging / "model")]
        fresh = task.build_model(state.get("data_info") or {})
        load_model_state(fresh, load_file(str(staging / MODEL_FILES["safetensors"])), MODEL_FILES["safetensors"])
        expected = model.state_dict()
        diffs = [_max_abs(v, expected[k]) for k, v in fresh.state_dict().items()]
        diff = max(diffs, key=lambda d: (d != d, d), default=0.0)  # a NaN first: max() alone may pass over it
        if diff != 0.0:
            raise CheckpointError(f"{checkpoint}: the written weights differ from the checkpoint's by {diff:.2e}")
        size = (staging / MODEL_FILES["safetensors"]).stat().st_size
    say(f"verified: {len(expected)} tensors reloaded from {MODEL_FILES['safetensors']}, max abs difference 0")
    return ExportResult(
        "safetensors",
        out,
        sorted(files),
        state["task"],
        state["step"],
        "fp32",
        size,
        0.0,
        0.0,
        0,
        seconds=time.perf_counter() - began,
    )


@contextlib.contextmanager
def _staged(out: Path):
    """A new folder beside `out` to write the export in, moved into place when the block ends well (into `out`
    itself when it is an empty folder, perhaps the current one); on any failure nothing is left, the folders
    made for it included, and an OSError (a full disk, a read-only folder) is one line."""
    made = [folder for folder in (out.parent, *out.parent.parents) if not folder.exists()]
    staging = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(new_temp_folder(out.parent, f".{out.name}."))  # a folder's usual permissions, unlike mkdtemp
        yield staging
        if out.is_dir():
            for entry in sorted(staging.iterdir()):
                os.replace(entry, out / entry.name)
            staging.rmdir()
        else:
            os.replace(staging, out)
    except BaseException as exc:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for folder in made:  # innermost first, if still empty
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(exc, OSError):
            from core.engine.run_folder import describe_os_error

            where = f" ({shown_path(exc.filename)})" if exc.filename else ""
            reason = f"could not write the export{where}: {describe_os_error(exc)}; nothing was written"
            raise ConfigError("out", f"{shown_path(out)}: {reason}") from None
        raise


def require_onnx() -> None:
    """ConfigError naming the extra to install when onnx, onnxscript or onnxruntime is missing."""
    import importlib.util

    missing = [m for m in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError("format", f"ONNX export needs {', '.join(missing)}: {ONNX_HINT}")


def _check_destination(out: Path) -> None:
    check_writable_folder(out, "out")  # first: a name too long for the file system fails every stat below
    if out.exists() and not out.is_dir():
        raise ConfigError("out", f"{out}: exists and is not a folder (the export is a folder)")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError("out", f"{out}: the folder exists and is not empty: choose another --out")


def _serving(loaded: Loaded, dtype: str, fmt: str, weights: dict | None = None, name: str = "") -> nn.Module:
    """The task's serving module over a copy of the model (a new one given the `weights` of file `name`), the part
    its serving names cast to `dtype` (before the weights are loaded, so nothing is rounded twice)."""
    import copy

    from core.engine.checkpoints import load_model_state

    model = (
        copy.deepcopy(loaded.model) if weights is None else loaded.task.build_model(loaded.state.get("data_info") or {})
    )
    if dtype != "fp32":
        loaded.serving.weights(model).to(DTYPES[dtype])
    if weights is not None:
        load_model_state(model, weights, name)
    return loaded.serving.module(model.eval(), fmt).eval()


def _write_model(loaded: Loaded, serving: nn.Module, sample: tuple, folder: Path, fmt: str, dtype: str) -> list[str]:
    task = loaded.state["task"]
    dynamic = _dynamic_shapes(serving, loaded.inputs)
    if fmt == "program":
        try:
            program = torch.export.export(serving, sample, dynamic_shapes=dynamic, strict=False)
            program.example_inputs = None  # saved, they would be a torch.save pickle, which a loader refuses
            program._guards_code = []  # inputs' shared lengths checked as Python, which a loader refuses
            buffer = io.BytesIO()
            torch.export.save(program, buffer)
        except Exception as exc:
            raise CheckpointError(
                f"{loaded.path}: torch.export could not export the {task} model: {first_line(exc)}"
            ) from None
        atomic_write_bytes(folder / MODEL_FILES[fmt], buffer.getvalue())
        return [MODEL_FILES[fmt]]
    if fmt == "onnx":
        return _write_onnx(loaded, serving, sample, folder, dynamic)
    return _write_safetensors(loaded, serving, folder, dtype)


def _dynamic_shapes(serving: nn.Module, inputs: tuple[Input, ...]) -> dict:
    """torch.export's dynamic shapes, keyed by the forward's arguments (all of them: `*inputs`)."""
    import inspect

    dims: dict = {}
    shapes = [spec.dynamic_shape(dims) for spec in inputs]
    params = list(inspect.signature(serving.forward).parameters.values())
    if params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return {params[0].name: tuple(shapes)}
    return {p.name: shape for p, shape in zip(params, shapes)}


def _write_onnx(loaded: Loaded, serving: nn.Module, sample: tuple, folder: Path, dynamic: dict) -> list[str]:
    import logging
    import warnings

    path = folder / MODEL_FILES["onnx"]
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):  # the exporter's progress lines and notes
            warnings.simplefilter("ignore")
            for logger in ("torch.onnx", "onnxscript", "onnx_ir"):
                logging.getLogger(logger).setLevel(logging.ERROR)
            program = torch.onnx.export(
                serving,
                sample,
                dynamo=True,
                input_names=[spec.name for spec in loaded.inputs],
                output_names=[loaded.serving.output_name],
                dynamic_shapes=dynamic,
                optimize=True,
                verbose=False,
            )
            program.save(str(path), external_data=False)
    except Exception as exc:
        path.unlink(missing_ok=True)
        raise CheckpointError(
            f"{loaded.path}: the ONNX exporter could not export the {loaded.state['task']} model: {_onnx_cause(exc)}"
        ) from None
    return [MODEL_FILES["onnx"]]


def _write_safetensors(loaded: Loaded, serving: nn.Module, folder: Path, dtype: str) -> list[str]:
    """Today's export_checkpoint files (model.pt, model.safetensors, model.json), the weights in `dtype`."""
    from core.engine.checkpoints import export_checkpoint

    written = export_checkpoint(loaded.path, folder / "model")
    if dtype != "fp32":
        from safetensors.torch import save as save_safetensors

        tensors = {k: v.detach().contiguous() for k, v in serving.model.state_dict().items()}
        atomic_write_bytes(
            folder / MODEL_FILES["safetensors"],
            save_safetensors(tensors, metadata={"format": "pt", "task": loaded.state["task"], "dtype": dtype}),
        )
    return [Path(p).name for p in written]


def _reload_outputs(loaded: Loaded, folder: Path, fmt: str, dtype: str, sample: tuple) -> torch.Tensor:
    """The sample's outputs from the files just written, loaded back as a server would."""
    path = folder / MODEL_FILES[fmt]
    if fmt == "onnx":
        import numpy as np
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        result = session.run(None, {spec.name: x.numpy() for spec, x in zip(loaded.inputs, sample)})[0]
        return torch.from_numpy(np.asarray(result))
    if fmt == "program":
        from core.runs.serve import load_program

        module = load_program(path)  # the checks serve.py makes: what is written passes them
    else:
        from safetensors.torch import load_file

        module = _serving(loaded, dtype, fmt, load_file(str(path)), str(path))
    with torch.no_grad():
        return module(*sample)


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


# ---------------------------------------------------------------------------------------------- the manifest
# What loading each format runs and how: data may come from anyone, a program only from someone whose code you would run.
FORMAT_NOTES = {
    "program": {
        "format_kind": "code",
        "safety": "a torch.export program is code: torch.export.load rebuilds and runs Python from it; serve.py "
        "refuses one holding pickles or Python source before loading it, but load programs only from people whose "
        "code you would run",
        "load": "serve.load_program('model.pt2')(input): checked, then torch.export.load(...).module()",
    },
    "onnx": {
        "format_kind": "data",
        "safety": "an ONNX graph of standard operators run by onnxruntime: data, no Python runs from it",
        "load": "onnxruntime.InferenceSession('model.onnx').run(None, {input name: array})",
    },
    "safetensors": {
        "format_kind": "data",
        "safety": "raw tensors by name: data, no Python runs from it (model.pt beside it is a checkpoint, read only "
        "with weights_only=True)",
        "load": "model.safetensors: the weights by state_dict name, loaded into the task's model (model.pt is the "
        "full checkpoint, model.json its manifest); serve.py serves program and ONNX exports",
    },
}


def build_manifest(loaded: Loaded, fmt: str, dtype: str, sample: tuple) -> dict:
    """Everything serving needs to know about the export (see the module doc), as plain JSON values."""
    from core.engine.checkpoints import library_versions

    state, model = loaded.state, loaded.model
    versions = dict(library_versions())
    if fmt == "onnx":
        import onnx
        import onnxruntime

        versions.update(onnx=onnx.__version__, onnxruntime=onnxruntime.__version__)
    manifest = {
        "format": fmt,
        "file": MODEL_FILES[fmt],
        "task": state["task"],
        "task_options": dict(loaded.task.opts),
        "step": state["step"],
        "epoch": state["epoch"],
        "metrics": state["metrics"],
        "config": state["config"],
        "precision": state.get("precision") or {},
        "dtype": dtype,
        "trained_versions": state["versions"],
        "versions": versions,
        "source_checkpoint": str(loaded.path),
    }
    manifest.update(FORMAT_NOTES[fmt])
    manifest["inputs"] = [spec.entry() for spec in loaded.inputs]
    manifest.update(loaded.serving.manifest(model, state, sample[0]))  # outputs, serving
    manifest["serving_module"] = loaded.serving.rows_module  # the task's part of serve.py, beside it
    return manifest


# ---------------------------------------------------------------------------------------------- helpers
def _onnx_cause(exc: BaseException) -> str:
    """The exporter's own summary line ("No ONNX function found for ...") rather than its banner."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    for number, line in enumerate(lines):
        if line.startswith("## Exception summary") and number + 1 < len(lines):
            return lines[number + 1].split(">: ", 1)[-1][:300]
    return first_line(exc)


# serve.py's own parts, each a file beside it in core/runs and in every export (serve.py loads them by name)
SERVE_PARTS = ("serve_http.py", "serve_lines.py", "serve_program.py")


def serve_files(serving: TaskServing) -> dict[str, bytes]:
    """File name -> bytes of what serves an export without this project, each copied byte for byte: serve.py (it
    imports nothing of this project), its parts (SERVE_PARTS) and the task's serving module (`serving.rows_module`)."""
    from importlib.resources import files

    out = {name: files("core.runs").joinpath(name).read_bytes() for name in ("serve.py", *SERVE_PARTS)}
    out[serving.rows_module] = serving.rows_source()
    return out
