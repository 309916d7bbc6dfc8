"""Deployable exports of a checkpoint: a folder a serving process loads without this project's code.

`export_model(checkpoint, out, fmt, dtype)` writes `out/` holding the model file, `manifest.json` (task, step,
metrics, config, precision, versions, the model's input and output names, shapes and dtypes, and what serving
needs around the model: the recommender's lesson-id vocabulary and window, the sentiment tokenizer's settings
and hashing recipe, the ranking feature order) and `serve.py`, a copy of core/lab/serve.py: a standalone module
(stdlib + torch, and onnxruntime for ONNX) whose `load(folder).predict(...)` takes the task's own inputs (review
texts, histories in the data's own lesson ids, feature vectors, points), and a command line (CSV or JSON lines
in, predictions out; an HTTP server).

Formats:
- `program`: `torch.export` (`model.pt2`, loaded by `torch.export.load(path).module()`, plain torch), chosen
  over TorchScript (in maintenance mode upstream); the batch dimension is dynamic (`torch.export.Dim`), as is
  the candidate dimension of ranking. A program is code: serve.py and the verification load it through
  serve.py's checks (core.lab.program_archive: no pickle, guard code or Python shape expression), so it is
  saved without example inputs (a torch.save pickle).
- `onnx`: `torch.onnx.export(dynamo=True)` (`model.onnx`), checked with onnxruntime; needs the `onnx` extra.
- `safetensors`: today's `export_checkpoint` files (`model.pt`, `model.safetensors`, `model.json`): the
  weights by state_dict name; serve.py reads them without the safetensors package and computes each task's
  forward pass in plain torch (float32), so this too serves without the project.

The exported module computes what serving wants, not the training logits: tiny x (B, F) -> class
probabilities (B, C); sentiment hashed token ids (B, T) -> P(positive) (B,); recommender left-padded model item
ids (B, max_len) -> scores over the catalogue (B, n_items), column j = model id j + 1; ranking raw features
(B, N, F) -> scores (B, N), the fitted normalisation inside.

Every export is verified before it is kept: the written file is loaded back (torch.export.load, onnxruntime,
or the safetensors weights into a rebuilt model) and run on a sample batch (the task's own synthetic reviews
for sentiment, inputs of the right shape and range otherwise); the largest absolute difference from the
trained model is reported, and above the tolerance the export fails. Files are written to a temporary folder
beside `out` and renamed into place only once verified, so a failed export leaves nothing behind.
`dtype` bf16/fp16 casts the weights (inputs and outputs stay as they were: float32 scores); the file size and
the output difference against the fp32 model are reported.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from core.errors import CheckpointError, ConfigError
from core.files import new_temp_folder
from core.text import first_line, size

FORMATS = ("program", "onnx", "safetensors")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MODEL_FILES = {"program": "model.pt2", "onnx": "model.onnx", "safetensors": "model.safetensors"}
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
        text = (f"exported {self.task} (step {self.step:,}) as {self.format} {self.dtype} to {self.folder}: "
                f"{MODEL_FILES[self.format]} {size(self.size_bytes)}; verified by reloading it on a sample "
                f"batch {tuple(self.sample_shape)}: max abs difference {self.max_abs_diff:.2e} (tolerance "
                f"{self.tolerance:.0e})")
        if self.fp32_size_bytes is not None and self.dtype_diff is not None:
            text += (f"; {self.dtype} vs fp32: {size(self.size_bytes)} vs {size(self.fp32_size_bytes)}, "
                     f"outputs differ by at most {self.dtype_diff:.2e}")
        return text

    def to_dict(self) -> dict:
        return {"format": self.format, "folder": str(self.folder), "files": self.files, "task": self.task,
                "step": self.step, "dtype": self.dtype, "size_bytes": self.size_bytes,
                "max_abs_diff": self.max_abs_diff, "tolerance": self.tolerance, "rows": self.rows,
                "fp32_size_bytes": self.fp32_size_bytes, "dtype_diff": self.dtype_diff,
                "seconds": self.seconds, "sample_shape": self.sample_shape}


# ---------------------------------------------------------------------------------------------- serving modules
class TinyServing(nn.Module):
    """x (B, F) float32 -> class probabilities (B, C) float32."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.model.fc1.weight.dtype
        return torch.softmax(self.model(x.to(dtype)).float(), dim=-1)


class SentimentServing(nn.Module):
    """Hashed token ids (B, T) int64 -> P(positive) (B,) float32. `onnx_friendly` counts a row's duplicate ids
    (sublinear tf weighting) by comparing ids pairwise, (B, T, T), as ONNX has no searchsorted."""

    def __init__(self, model: nn.Module, onnx_friendly: bool = False):
        super().__init__()
        self.model = model
        self.onnx_friendly = onnx_friendly

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        model = self.model
        if not (self.onnx_friendly and model.sublinear):
            return torch.softmax(model(tokens).float(), dim=-1)[:, 1]
        weights = model.bucket_weight[tokens]
        counts = (tokens.unsqueeze(2) == tokens.unsqueeze(1)).sum(-1).clamp(min=1).to(weights.dtype)
        weights = weights * (1 + torch.log(counts)) / counts
        pooled = model.bag(tokens, per_sample_weights=weights.to(model.bag.weight.dtype))
        if model.pooling == "mean":
            norm = weights.sum(1)
        elif model.pooling == "sqrt":
            norm = (weights > 0).sum(1).float().sqrt()
        elif model.pooling == "l2":
            norm = weights.square().sum(1).sqrt()
        else:
            norm = torch.ones_like(weights[:, 0])
        logits = model.head(pooled / norm.clamp(min=1e-6).unsqueeze(1).to(pooled.dtype))
        return torch.softmax(logits.float(), dim=-1)[:, 1]


class RecommenderServing(nn.Module):
    """Left-padded model item ids (B, max_len) int64 -> scores over the catalogue (B, n_items) float32; column
    j is model id j + 1 (0 is padding)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        hidden = self.model(seq)[:, -1]
        return self.model.scores(hidden).float()


class RankingServing(nn.Module):
    """Raw features (B, N, F) float32 -> scores (B, N) float32; the model's fitted normaliser is inside and
    stays float32 whatever the weights' dtype (its quantile knots would not survive bf16)."""

    def __init__(self, model: nn.Module, onnx_friendly: bool = False):
        super().__init__()
        self.model = model
        self.onnx_friendly = onnx_friendly

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        norm = self.model.norm
        if self.onnx_friendly and hasattr(norm, "knots"):
            y = (_quantile_gauss_portable(features.float(), norm.knots) - norm.mean) / norm.std
        else:
            y = norm(features.float())
        dtype = self.model.net[0].weight.dtype
        return self.model.net(y.to(dtype)).squeeze(-1).float()


def _quantile_gauss_portable(x: torch.Tensor, knots: torch.Tensor) -> torch.Tensor:
    """core.tasks.ranking.quantile_gauss with ops ONNX has: searchsorted as counts of comparisons (serving
    batches are small: (B*N, F, K) booleans), ndtri as sqrt(2) erfinv(2u - 1) by Giles' single-precision
    approximation (ONNX has Erf but no Erfinv). The verification compares it with the original."""
    k = knots.shape[1]
    flat = x.reshape(-1, x.shape[-1]).unsqueeze(-1)  # (R, F, 1)
    lo = (knots.unsqueeze(0) < flat).sum(-1)  # first knot >= x, as searchsorted(left)
    hi = (knots.unsqueeze(0) <= flat).sum(-1)  # first knot > x, as searchsorted(right)
    x2 = flat.squeeze(-1)
    table = knots.unsqueeze(0).expand(x2.shape[0], -1, -1)
    below = table.gather(2, (lo - 1).clamp(0, k - 1).unsqueeze(-1)).squeeze(-1)
    above = table.gather(2, lo.clamp(0, k - 1).unsqueeze(-1)).squeeze(-1)
    between = (lo - 1).float() + (x2 - below) / (above - below).clamp(min=1e-30)
    position = torch.where(hi > lo, (lo + hi - 1).float() / 2, between).clamp(0, k - 1)
    u = (position + 0.5) / k
    z = math.sqrt(2.0) * _erfinv(2 * u - 1)
    return z.reshape(x.shape)


def _erfinv(y: torch.Tensor) -> torch.Tensor:
    """Inverse error function, M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011),
    single precision (relative error ~4e-7 inside (-1, 1))."""
    w = -torch.log((1.0 - y) * (1.0 + y))
    w1 = w - 2.5
    p1 = torch.full_like(y, 2.81022636e-08)
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        p1 = c + p1 * w1
    w2 = torch.sqrt(w.clamp(min=5.0)) - 3.0
    p2 = torch.full_like(y, -0.000200214257)
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        p2 = c + p2 * w2
    return torch.where(w < 5.0, p1, p2) * y


SERVING = {"tiny": TinyServing, "sentiment": SentimentServing, "recommender": RecommenderServing,
           "ranking": RankingServing}


# ---------------------------------------------------------------------------------------------- the export
@dataclass
class Loaded:
    """A checkpoint's state, task and model (float32, eval mode, on the CPU)."""

    state: dict
    task: object
    model: nn.Module
    path: Path


def load_trained(checkpoint: str | Path) -> Loaded:
    """The checkpoint's model, rebuilt from its settings and weights (load_checkpoint: weights_only)."""
    from core.engine.checkpoints import load_checkpoint, rebuild_model

    state = load_checkpoint(checkpoint)
    if state["task"] not in SERVING:
        raise CheckpointError(f"{checkpoint}: task {state['task']!r} has no serving export")
    task, model = rebuild_model(state, checkpoint)
    return Loaded(state, task, model.eval(), Path(checkpoint))


def export_model(checkpoint: str | Path, out: str | Path, fmt: str = "program", dtype: str = "fp32",
                 progress=None) -> ExportResult:
    """Write and verify the export of `checkpoint` as `fmt` into the folder `out` (see the module doc).
    `progress(text)` gets a line per stage. ConfigError for a bad format, dtype or destination;
    CheckpointError for a checkpoint that cannot be exported; nothing is left at `out` on any failure."""
    say = progress or (lambda text: None)
    began = time.perf_counter()
    if fmt not in FORMATS:
        raise ConfigError("format", f"{fmt!r} is not an export format: choose {', '.join(FORMATS)}")
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"{dtype!r} is not an export dtype: choose {', '.join(DTYPES)}")
    if fmt == "onnx":
        if dtype == "bf16":
            raise ConfigError("dtype", "--dtype bf16 cannot be served by ONNX Runtime (its CPU kernels have no "
                                       "bfloat16 MatMul): use --dtype fp16 for ONNX, or --format program")
        require_onnx()
    out = Path(os.path.abspath(Path(out).expanduser()))  # "." is the current folder, named (its parent is real)
    _check_destination(out)
    loaded = load_trained(checkpoint)
    say(f"loaded {loaded.state['task']} checkpoint at step {loaded.state['step']:,} from {checkpoint}")
    sample = sample_inputs(loaded)
    reference = _serving(loaded, "fp32", fmt)
    with torch.no_grad():
        expected32 = reference(sample)
    made = [folder for folder in (out.parent, *out.parent.parents) if not folder.exists()]  # removed on failure
    staging = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(new_temp_folder(out.parent, f".{out.name}."))  # a folder's usual permissions, unlike mkdtemp
        serving = _serving(loaded, dtype, fmt)
        with torch.no_grad():
            expected = serving(sample)
        say(f"writing {MODEL_FILES[fmt]} ({dtype})…")
        files = _write_model(loaded, serving, sample, staging, fmt, dtype)
        try:
            got = _reload_outputs(loaded, staging, fmt, dtype, sample)
        except Exception as exc:  # noqa: BLE001 - a loader's failure is the export's, in one line
            raise CheckpointError(f"{checkpoint}: the written {MODEL_FILES[fmt]} could not be loaded back: "
                                  f"{first_line(exc)}; nothing was written") from None
        diff = _max_abs(got, expected)
        # Reduced precision run by another runtime (ONNX Runtime) rounds differently: a few units of its epsilon.
        rounding = 4 * torch.finfo(DTYPES[dtype]).eps if dtype != "fp32" and fmt == "onnx" else TOLERANCE
        tolerance = max(TOLERANCE, rounding) * max(1.0, float(expected.abs().max()))
        shape = tuple(sample.shape)
        say(f"verified: reloaded {MODEL_FILES[fmt]} on a sample batch {shape}, max abs difference {diff:.2e}")
        if not diff <= tolerance:  # NaN fails too
            raise CheckpointError(f"{checkpoint}: the {fmt} export does not reproduce the model: max abs "
                                  f"difference {diff:.2e} on a sample batch {shape} (tolerance {tolerance:.0e}); "
                                  f"nothing was written")
        fp32_size = dtype_diff = None
        if dtype != "fp32":
            dtype_diff = _max_abs(expected, expected32)
            scratch = staging / ".fp32"
            scratch.mkdir()
            _write_model(loaded, reference, sample, scratch, fmt, "fp32")
            fp32_size = (scratch / MODEL_FILES[fmt]).stat().st_size
            shutil.rmtree(scratch)
        manifest = build_manifest(loaded, fmt, dtype, sample)
        manifest["verification"] = {"sample_shape": list(shape), "max_abs_diff": diff, "tolerance": tolerance,
                                    "dtype_diff_vs_fp32": dtype_diff}
        # strict JSON (no NaN/Infinity, which a server in another language cannot parse): a metric that was NaN
        # (an AUC of a one-class split) is null
        _write(staging / "manifest.json", json.dumps(_json_safe(manifest), indent=2, default=str,
                                                     allow_nan=False).encode("utf-8"))
        _write(staging / "serve.py", serve_py())
        files += ["manifest.json", "serve.py"]
        size = (staging / MODEL_FILES[fmt]).stat().st_size
        if out.is_dir():  # an empty folder (checked above), perhaps the current one: filled, each file renamed in
            for entry in sorted(staging.iterdir()):
                os.replace(entry, out / entry.name)
            staging.rmdir()
        else:
            os.replace(staging, out)
    except BaseException as exc:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for folder in made:  # the folders made for it, innermost first, if still empty
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(exc, OSError):  # a full disk (ENOSPC, EDQUOT), a read-only or vanished folder: one line
            raise _write_error(out, exc) from None
        raise
    return ExportResult(fmt, out, sorted(files), loaded.state["task"], loaded.state["step"], dtype, size, diff,
                        tolerance, int(sample.shape[0]), fp32_size, dtype_diff, time.perf_counter() - began,
                        sample_shape=list(sample.shape))


def _write_error(out: Path, exc: OSError) -> ConfigError:
    from core.engine.run_folder import describe_os_error
    from core.files import shown_path

    where = f" ({shown_path(exc.filename)})" if exc.filename else ""
    return ConfigError("out", f"{shown_path(out)}: could not write the export{where}: {describe_os_error(exc)}; "
                              f"nothing was written")


def require_onnx() -> None:
    """ConfigError naming the extra to install when onnx, onnxscript or onnxruntime is missing."""
    import importlib.util

    missing = [m for m in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError("format", f"ONNX export needs {', '.join(missing)}: {ONNX_HINT}")


def _check_destination(out: Path) -> None:
    from core.files import check_writable_folder

    check_writable_folder(out, "out")  # first: a name too long for the file system fails every stat below
    if out.exists() and not out.is_dir():
        raise ConfigError("out", f"{out}: exists and is not a folder (the export is a folder)")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError("out", f"{out}: the folder exists and is not empty: choose another --out")


def _serving(loaded: Loaded, dtype: str, fmt: str) -> nn.Module:
    """The task's serving module over a copy of the model cast to `dtype` (ranking keeps its normaliser fp32)."""
    import copy

    model = copy.deepcopy(loaded.model)
    target = DTYPES[dtype]
    if target != torch.float32:
        if loaded.state["task"] == "ranking":
            model.net.to(target)
        else:
            model.to(target)
    task = loaded.state["task"]
    if task in ("ranking", "sentiment"):
        return SERVING[task](model, onnx_friendly=fmt == "onnx").eval()
    return SERVING[task](model).eval()


def sample_inputs(loaded: Loaded, rows: int = SAMPLE_ROWS, seed: int = 0) -> torch.Tensor:
    """A batch of the serving module's input: the task's own synthetic reviews (hashed as the run hashed
    them) for sentiment; for the others, inputs of the right shape and range (histories of varied length,
    features spread over the normaliser's knots or statistics)."""
    task, model, opts = loaded.state["task"], loaded.model, loaded.task.opts
    gen = torch.Generator().manual_seed(seed)
    if task == "tiny":
        return torch.randn(rows, model.fc1.in_features, generator=gen)
    if task == "sentiment":
        from core.data.reviews import generate_reviews
        from core.data.tokenizer import hashed_tokens

        text = generate_reviews(rows, seed).text
        return hashed_tokens(text, model.bag.num_embeddings, opts["max_tokens"], opts["negation_scope"]).long()
    if task == "recommender":
        n_items, max_len = model.items.num_embeddings - 1, model.positions.num_embeddings
        seq = torch.randint(1, n_items + 1, (rows, max_len), generator=gen)
        lengths = torch.randint(1, max_len + 1, (rows,), generator=gen)
        pad = torch.arange(max_len).unsqueeze(0) < (max_len - lengths).unsqueeze(1)
        return seq.masked_fill(pad, 0)
    norm = model.norm  # ranking: (rows // 4 queries, 6 candidates, F)
    features = norm.mean.shape[0]
    shape = (max(rows // 4, 2), 6, features)
    if hasattr(norm, "knots"):
        k = norm.knots.shape[1]
        pick = torch.randint(0, k, shape, generator=gen)
        base = norm.knots.t()[pick, torch.arange(features)]
        return base + 0.01 * torch.randn(shape, generator=gen) * norm.knots.std(1)
    return norm.center + norm.scale * torch.randn(shape, generator=gen)


def _dynamic_shapes(task: str) -> dict:
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    if task == "ranking":
        return {0: batch, 1: torch.export.Dim("candidates", min=1, max=1 << 20)}
    return {0: batch}


def _write_model(loaded: Loaded, serving: nn.Module, sample: torch.Tensor, folder: Path, fmt: str,
                 dtype: str) -> list[str]:
    task = loaded.state["task"]
    name = INPUT_NAMES[task]
    if fmt == "program":
        try:
            program = torch.export.export(serving, (sample,), dynamic_shapes={name_arg(serving): _dynamic_shapes(task)},
                                          strict=False)
            program.example_inputs = None  # saved, they would be a torch.save pickle, which a loader refuses
            buffer = io.BytesIO()
            torch.export.save(program, buffer)
        except Exception as exc:  # noqa: BLE001 - torch.export raises many types; one line for the user
            raise CheckpointError(f"{loaded.path}: torch.export could not export the {task} model: "
                                  f"{first_line(exc)}") from None
        _write(folder / MODEL_FILES[fmt], buffer.getvalue())
        return [MODEL_FILES[fmt]]
    if fmt == "onnx":
        return _write_onnx(loaded, serving, sample, folder, task, name)
    return _write_safetensors(loaded, serving, folder, dtype)


def name_arg(serving: nn.Module) -> str:
    """The forward argument's name (dynamic_shapes are keyed by it)."""
    import inspect

    return next(iter(inspect.signature(serving.forward).parameters))


def _write_onnx(loaded: Loaded, serving: nn.Module, sample: torch.Tensor, folder: Path, task: str,
                name: str) -> list[str]:
    import contextlib
    import logging
    import warnings

    path = folder / MODEL_FILES["onnx"]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):  # the exporter's progress lines and notes
            warnings.simplefilter("ignore")
            for logger in ("torch.onnx", "onnxscript", "onnx_ir"):
                logging.getLogger(logger).setLevel(logging.ERROR)
            program = torch.onnx.export(serving, (sample,), dynamo=True, input_names=[name],
                                        output_names=[OUTPUT_NAMES[task]],
                                        dynamic_shapes={name_arg(serving): _dynamic_shapes(task)},
                                        optimize=True, verbose=False)
            program.save(str(path), external_data=False)
    except Exception as exc:  # noqa: BLE001 - the exporter raises many types; one line for the user
        path.unlink(missing_ok=True)
        raise CheckpointError(f"{loaded.path}: the ONNX exporter could not export the {task} model: "
                              f"{_onnx_cause(exc)}") from None
    return [MODEL_FILES["onnx"]]


def _write_safetensors(loaded: Loaded, serving: nn.Module, folder: Path, dtype: str) -> list[str]:
    """Today's export_checkpoint files (model.pt, model.safetensors, model.json), the weights in `dtype`."""
    from core.engine.checkpoints import export_checkpoint

    written = export_checkpoint(loaded.path, folder / "model")
    if dtype != "fp32":
        from safetensors.torch import save as save_safetensors

        tensors = {k: v.detach().contiguous() for k, v in serving.model.state_dict().items()}
        _write(folder / MODEL_FILES["safetensors"],
               save_safetensors(tensors, metadata={"format": "pt", "task": loaded.state["task"], "dtype": dtype}))
    return [Path(p).name for p in written]


def _reload_outputs(loaded: Loaded, folder: Path, fmt: str, dtype: str, sample: torch.Tensor) -> torch.Tensor:
    """The sample's outputs from the files just written, loaded back as a server would."""
    path = folder / MODEL_FILES[fmt]
    if fmt == "program":
        from core.lab.program_archive import load_program

        module = load_program(path)  # the checks serve.py makes: what is written passes them
        with torch.no_grad():
            return module(sample)
    if fmt == "onnx":
        import numpy as np
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        result = session.run(None, {INPUT_NAMES[loaded.state["task"]]: sample.numpy()})[0]
        return torch.from_numpy(np.asarray(result))
    from safetensors.torch import load_file

    from core.engine.checkpoints import load_model_state

    model = loaded.task.build_model(loaded.state.get("data_info") or {})
    weights = load_file(str(path))
    target = DTYPES[dtype]
    if target != torch.float32:  # built in the file's dtype so nothing is rounded twice
        (model.net if loaded.state["task"] == "ranking" else model).to(target)
    load_model_state(model, weights, str(path))
    rebuilt = Loaded(loaded.state, loaded.task, model.eval(), path)
    serving = SERVING[loaded.state["task"]](rebuilt.model).eval()
    with torch.no_grad():
        return serving(sample)


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


# ---------------------------------------------------------------------------------------------- the manifest
# What loading each format runs: data may come from anyone, a program only from someone whose code you would run.
FORMAT_SAFETY = {
    "program": ("code", ("a torch.export program is code: torch.export.load rebuilds and runs Python from it; "
                         "serve.py refuses one holding pickles or Python source before loading it, but load "
                         "programs only from people whose code you would run")),
    "onnx": ("data", "an ONNX graph of standard operators run by onnxruntime: data, no Python runs from it"),
    "safetensors": ("data", ("raw tensors by name that serve.py computes in plain torch: data, no Python runs "
                             "from it (model.pt beside it is a checkpoint, read only with weights_only=True)")),
}
INPUT_NAMES = {"tiny": "x", "sentiment": "tokens", "recommender": "seq", "ranking": "features"}
OUTPUT_NAMES = {"tiny": "probabilities", "sentiment": "p_positive", "recommender": "scores", "ranking": "scores"}


def build_manifest(loaded: Loaded, fmt: str, dtype: str, sample: torch.Tensor) -> dict:
    """Everything serving needs to know about the export (see the module doc), as plain JSON values."""
    from core.engine.checkpoints import library_versions

    state, model, task, opts = loaded.state, loaded.model, loaded.state["task"], loaded.task.opts
    versions = dict(library_versions())
    if fmt == "onnx":
        import onnx
        import onnxruntime

        versions.update(onnx=onnx.__version__, onnxruntime=onnxruntime.__version__)
    manifest = {
        "format": fmt, "file": MODEL_FILES[fmt], "task": task, "task_options": dict(opts),
        "step": state["step"], "epoch": state["epoch"],
        "metrics": state["metrics"], "config": state["config"], "precision": state.get("precision") or {},
        "dtype": dtype, "trained_versions": state["versions"], "versions": versions,
        "source_checkpoint": str(loaded.path),
    }
    manifest["format_kind"], manifest["safety"] = FORMAT_SAFETY[fmt]
    if fmt == "program":
        manifest["load"] = "serve.load_program('model.pt2')(input): checked, then torch.export.load(...).module()"
    elif fmt == "onnx":
        manifest["load"] = "onnxruntime.InferenceSession('model.onnx').run(None, {input name: array})"
    else:
        manifest["load"] = ("model.safetensors: the weights by state_dict name; serve.py computes the model from "
                            "them in plain torch (model.pt is the full checkpoint, model.json its manifest)")
    name, out = INPUT_NAMES[task], OUTPUT_NAMES[task]
    if task == "tiny":
        features, classes = model.fc1.in_features, model.fc2.out_features
        manifest["inputs"] = [{"name": name, "shape": ["batch", features], "dtype": "float32"}]
        manifest["outputs"] = [{"name": out, "shape": ["batch", classes], "dtype": "float32",
                                "meaning": "class probabilities (softmax), column c = class c"}]
        manifest["serving"] = {"features": features, "classes": classes}
    elif task == "sentiment":
        length = int(sample.shape[1])
        manifest["inputs"] = [{"name": name, "shape": ["batch", length], "dtype": "int64",
                               "meaning": "hashed token ids (see serving.tokenizer), 0 = padding"}]
        manifest["outputs"] = [{"name": out, "shape": ["batch"], "dtype": "float32",
                                "meaning": "P(positive review)"}]
        manifest["serving"] = {"tokenizer": {
            "buckets": int(model.bag.num_embeddings), "max_tokens": int(opts["max_tokens"]),
            "negation_scope": int(opts["negation_scope"]), "recipe": TOKENIZER_RECIPE,
            "negators": sorted(_negators()), "negated_salt": 0x2545F491,
            "bigram_mix": {"a": 0x9E3779B1, "b": 0x85EBCA77, "xor": 0xB5}}}
    elif task == "recommender":
        n_items, max_len = model.items.num_embeddings - 1, model.positions.num_embeddings
        vocabulary = (state.get("vocabulary") or {}).get("item_id")
        if vocabulary is None:  # synthetic data: the data's item i is the model's i + 1
            ids, source = list(range(n_items)), "synthetic data: lesson ids 0..n-1"
        else:
            ids = vocabulary.tolist() if isinstance(vocabulary, torch.Tensor) else list(vocabulary)
            source = "the training data's lesson ids"
        manifest["inputs"] = [{"name": name, "shape": ["batch", max_len], "dtype": "int64",
                               "meaning": "model item ids of the history, oldest first, left-padded with 0"}]
        manifest["outputs"] = [{"name": out, "shape": ["batch", n_items], "dtype": "float32",
                                "meaning": "next-lesson scores; column j is model id j + 1"}]
        manifest["serving"] = {"max_len": max_len, "padding": "left, id 0", "n_items": n_items,
                               "vocabulary": ids, "vocabulary_source": source,
                               "vocabulary_meaning": "model id k (k >= 1) is lesson vocabulary[k - 1]; 0 is padding"}
    else:
        features = int(model.norm.mean.shape[0])
        method = opts["normalize"]
        manifest["inputs"] = [{"name": name, "shape": ["batch", "candidates", features], "dtype": "float32",
                               "meaning": "raw (un-normalised) features of each query's candidates"}]
        manifest["outputs"] = [{"name": out, "shape": ["batch", "candidates"], "dtype": "float32",
                                "meaning": "relevance scores: rank a query's candidates by descending score"}]
        manifest["serving"] = {"features": features, "feature_order": [f"f{i + 1}" for i in range(features)],
                               "normalization": f"{method}, fit on the training split; inside the model: give raw "
                                                "features"}
    return manifest


TOKENIZER_RECIPE = (
    "NFKC-normalise, lower-case (per code point), replace U+2019 with an apostrophe; with negation_scope > 0 "
    "each run of .,;:!?()[]{}\"“”… becomes a clause boundary; words are runs of Unicode letters, numbers, "
    "marks, '_' and apostrophes, quotes stripped from their ends; a negator (negators, or a word ending in "
    "n't) negates the next negation_scope words of its clause (unigram hash xor negated_salt); hash = CRC32 "
    "of the UTF-8 word; row = [w0, w1, w0w1, w2, w1w2, ...] truncated to max_tokens, padded with 0; unigram id "
    "= hash % (buckets - 1) + 1; bigram id = (((h1 * a + h2 * b) mod 2^64) xor xor) % (buckets - 1) + 1")


def _negators() -> frozenset:
    from core.data.tokenizer import NEGATORS

    return NEGATORS


# ---------------------------------------------------------------------------------------------- helpers
def _write(path: Path, payload: bytes) -> None:
    from core.files import atomic_write_bytes

    atomic_write_bytes(path, payload)


def _json_safe(value):
    """`value` with every float that is not finite (NaN, inf) replaced by None, in nested dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _onnx_cause(exc: BaseException) -> str:
    """The exporter's own summary line ("No ONNX function found for ...") rather than its banner."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    for number, line in enumerate(lines):
        if line.startswith("## Exception summary") and number + 1 < len(lines):
            return lines[number + 1].split(">: ", 1)[-1][:300]
    return first_line(exc)


def serve_py() -> bytes:
    """serve.py as every export carries it: core/lab/serve.py, byte for byte (it imports nothing of this project)."""
    from importlib.resources import files

    return files("core.lab").joinpath("serve.py").read_bytes()
