"""GPU suite: what mixed precision buys on this card, measured with the real engine, in one command (<= 5 min).

Run from the repository root: `benchmarks/gpu_suite.sh` (or `PYTHONPATH=. python benchmarks/gpu_suite.py`).
Smoke test without a GPU: `benchmarks/gpu_suite.sh --device cpu --quick`.

Sections, the must-have figures first (each one fails alone, recorded in the report, without stopping the
others; one that would not fit in what is left of the time budget is skipped, recorded under "skipped"):
  devices       what torch sees and which precision modes each device supports
  sweep         fp32, bf16 and bf16 + activation checkpointing through the real engine (core.lab.precision_sweep)
  mfu           model FLOPs (FlopCounterMode, one step) against a measured bf16 matmul ceiling; per bf16, fp8 and
                bf16-pure row, the fp8 section's wider model's rows too ("wide ...")
  training      short bf16 and fp32 runs with a validation evaluation (HR@10 of bf16 vs fp32), and fp16
  fp8           fp8 (torchao float8) and bf16-pure rows; fp32, bf16 and fp8 again on a wider transformer
  overhead      engine samples/s vs a minimal hand-written loop on the same model, data and precision (eager)
  profile       torch.profiler over a few bf16 engine steps: device time by category and the top 10 ops
  datapath      training data on the device vs kept on the host: staged (pinned, double-buffered) vs plain
  compile       bf16 + compile through the engine (compile time apart) and the minimal loop compiled too
  sweep_more    tf32 and fp16 rows
  compile_fp32  fp32 + compile (so "bf16 + compile: N x fp32 eager" and "N x fp32 + compile" both read off)
  ddp           with 2+ GPUs: samples/s of N DDP processes (torchrun) vs 1 at the same global batch
Every measurement of the process shares one load of the task's data (same task, options and seed: the same
data), so the budget goes to the device. The JSON report is rewritten after every section (a run killed by
the backstop still leaves what it measured) and a short table is printed last. Needs torch and the engine only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from core.config import RunConfig
from core.data.batching import split_length
from core.devices import collect_garbage, device_info, list_devices, torch_device
from core.engine import compiling
from core.engine.control import RunControl
from core.engine.events import EvalMetrics, StepMetrics
from core.engine.optimizers import build_optimizer
from core.engine.precision import matmul_precision, resolve_precision
from core.lab.precision_sweep import (
    SweepResult,
    SweepRow,
    compare_to_fp32,
    measure_mode,
    measure_mode_isolated,
    recommended_row,
    reference_label,
)
from core.precision_modes import PRECISION_MODES
from core.tasks import TASKS, create_task

# The size the issue asks for: big enough that matmuls dominate and AMP's gain shows.
FULL_RECOMMENDER = {
    "d_model": 512,
    "layers": 4,
    "heads": 8,
    "max_len": 200,
    "items": 50_000,
    "interactions": 400_000,
    "mean_len": 200,
}
LARGE_SHAPE = {"d_model": 2048, "heads": 16}  # the fp8 section's wider model: 2048 x 8192 feed-forward matmuls
QUICK_LARGE_SHAPE = {"d_model": 64, "heads": 4}
QUICK_RECOMMENDER = {
    "d_model": 32,
    "layers": 1,
    "heads": 2,
    "max_len": 20,
    "items": 200,
    "interactions": 5_000,
    "mean_len": 20,
}
TARGETS = {
    "bf16_speedup_min": 2.0,
    "bf16_memory_ratio_max": 0.6,
    "engine_over_minimal_min": 0.97,
    "bf16_mfu_min": 0.45,
    "quality_noise_se": 2.0,
    "staged_over_device_min": 0.95,
}
# Seconds a first torch.compile is assumed to take before one has been measured in this process.
COMPILE_GUESS_S = {"inductor": 60.0, "aot_eager": 10.0, "eager": 5.0}
QUALITY_METRICS = ("hr@10_full_filtered", "hr@10_full_unfiltered")  # the first one the task reports is used


def sync(device: torch.device) -> None:
    """Wait for queued device work: host timers around async GPU work measure nothing without it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device: torch.device) -> None:
    """Free what the last measurement cached, so the next one starts from the same allocator state."""
    collect_garbage()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def suite_config(device: str, quick: bool) -> RunConfig:
    """The recommender at the suite's size (or the tiny task when the recommender is not registered)."""
    if "recommender" in TASKS:
        options = QUICK_RECOMMENDER if quick else FULL_RECOMMENDER
        return RunConfig.for_task(
            "recommender", device=device, task_options=dict(options), batch_size=32 if quick else 256
        )
    return RunConfig.for_task(
        "tiny", device=device, task_options={} if quick else {"hidden": 4096}, batch_size=64 if quick else 4096
    )


# ----------------------------------------------------------------- process-wide set-up
@contextlib.contextmanager
def shared_task_data(task_name: str):
    """Every load_data of `task_name` in this process with the same options, data and seed returns one load:
    the data is a pure function of those, so this only saves the generation time (seconds per measurement at
    the suite's size). What load_data leaves on the task (e.g. the recommender's histories) is set again."""
    cls = type(create_task(task_name, {}))
    original = cls.load_data
    cache: dict = {}

    def load_data(self, data_path: str, seed: int):
        key = (json.dumps(self.opts, sort_keys=True, default=str), data_path, seed, repr(getattr(self, "source", None)))
        if key not in cache:
            before = dict(self.__dict__)
            data = original(self, data_path, seed)
            cache[key] = (data, {k: v for k, v in self.__dict__.items() if k not in before or before[k] is not v})
        data, state = cache[key]
        self.__dict__.update(state)
        return data

    cls.load_data = load_data
    try:
        yield
    finally:
        cls.load_data = original


@contextlib.contextmanager
def compile_backend(backend: str):
    """torch.compile with `backend` wherever the engine (and the minimal loop) compiles. 'inductor' is the real
    thing; 'eager' / 'aot_eager' capture the same graphs without building kernels: the CPU smoke test's choice
    (an inductor compile takes about a minute on a small CPU)."""
    if backend == "inductor":
        yield
        return
    original = compiling.compile_model
    compiling.compile_model = lambda model, mode: torch.compile(model, backend=backend)
    try:
        yield
    finally:
        compiling.compile_model = original


def left_s(ctx: dict) -> float:
    """Seconds left of the suite's budget."""
    return ctx["budget_s"] - (time.perf_counter() - ctx["began"])


def compile_guess_s(ctx: dict) -> float:
    """What the next compile is expected to take: the longest measured so far, else a guess per backend."""
    return max(ctx["compile_s"], default=COMPILE_GUESS_S.get(ctx["backend"], 60.0))


def over_budget(ctx: dict, need_s: float) -> str | None:
    """The reason to skip work expected to take `need_s` seconds, or None when it fits in what is left."""
    left = left_s(ctx)
    return None if need_s <= left else f"budget: needs ~{need_s:.0f} s, {max(left, 0):.0f} s of the budget left"


# ----------------------------------------------------------------- the sweep's rows
def row_label(mode: str, compiled: bool = False, checkpointed: bool = False) -> str:
    return SweepRow(mode=mode, status="", compiled=compiled, checkpointed=checkpointed).label


def find_row(ctx: dict, mode: str, compiled: bool = False, checkpointed: bool = False) -> SweepRow | None:
    """The measured ('ok') row of this variant, or None."""
    return next(
        (
            r
            for r in ctx["rows"]
            if r.status == "ok" and r.mode == mode and r.compiled == compiled and r.checkpointed == checkpointed
        ),
        None,
    )


def estimate_row_s(ctx: dict, mode: str, compiled: bool) -> float:
    """Wall seconds a row is expected to take: its eager row's (or the slowest row so far), plus a compile."""
    seconds = ctx["row_seconds"]
    base = seconds.get(row_label(mode)) or max(seconds.values(), default=0.0)
    return base + (compile_guess_s(ctx) if compiled else 0.0)


def measure_row(ctx: dict, mode: str, compiled: bool = False, checkpointed: bool = False) -> SweepRow:
    """One sweep row through the engine (core.lab.precision_sweep.measure_mode), added to the suite's rows.

    On the CPU an eager row runs in a fresh process (its peak RSS is its own); a compiled row runs here, where
    the suite's compile backend applies, and its RSS (this process's high-water mark) is left out."""
    label, info = row_label(mode, compiled, checkpointed), ctx["info"]
    config = ctx["config"].replace(compile=compiled, activation_checkpointing=checkpointed)
    started = time.perf_counter()
    if mode not in info.precisions:
        row = SweepRow(mode=mode, status="skipped", reason=info.unsupported.get(mode, f"not supported on {info.id}"))
    elif reason := over_budget(ctx, estimate_row_s(ctx, mode, compiled)):
        row = SweepRow(mode=mode, status="skipped", reason=reason)
    else:
        print(f"    {label}...", file=sys.stderr, flush=True)
        if ctx["isolate"] and not compiled:
            row = measure_mode_isolated(config, mode, ctx["steps"], ctx["repeats"], 1)
        else:
            row = measure_mode(config, mode, ctx["steps"], ctx["repeats"])
            release(ctx["device"])
            if ctx["isolate"]:
                row.peak_memory_bytes = None  # this process's RSS peak belongs to every earlier measurement too
        ctx["row_seconds"][label] = time.perf_counter() - started
        if row.compile_seconds:
            ctx["compile_s"].append(row.compile_seconds)
    row.compiled, row.checkpointed = compiled, checkpointed
    ctx["rows"] = [r for r in ctx["rows"] if r.label != label] + [row]
    return row


def sweep_result(ctx: dict) -> SweepResult:
    """Every row measured so far, compared with fp32 eager, as one SweepResult (rows in mode order)."""
    order = {mode: i for i, mode in enumerate(PRECISION_MODES)}
    rows = sorted(ctx["rows"], key=lambda r: (order.get(r.mode, 99), r.compiled, r.checkpointed))
    compare_to_fp32(rows)
    best, why = recommended_row(rows)
    info, config = ctx["info"], ctx["config"]
    memory = "CUDA max_memory_allocated" if info.type == "cuda" else "peak RSS of a fresh process (eager rows)"
    return SweepResult(
        task=config.task,
        task_options=dict(config.task_options),
        device=info.id,
        device_name=info.name,
        batch_size=config.batch_size,
        steps=ctx["steps"],
        repeats=ctx["repeats"],
        warmup_steps=ctx["steps"],
        memory_source=memory,
        rows=rows,
        recommended=best.mode if best else None,
        recommendation=why,
        threads=next((r.threads for r in rows if r.status == "ok" and r.threads), None),
        reference=reference_label(rows),
        recommended_label=best.label if best else None,
    )


def sweep_dict(ctx: dict) -> dict:
    result = sweep_result(ctx)
    out = result.to_dict()
    for row, data in zip(result.rows, out["rows"], strict=True):
        data["label"] = row.label
        data["wall_seconds"] = ctx["row_seconds"].get(row.label)
    return out


def section_devices(ctx: dict) -> dict:
    return {
        "devices": [d.to_dict() for d in list_devices(free_memory=True)],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "compile_backend": ctx["backend"],
    }


def rows_measured(variants: list[tuple[str, bool, bool]], ctx: dict) -> dict:
    rows = [measure_row(ctx, *variant) for variant in variants]
    return {"rows": {r.label: r.status + (f": {r.reason}" if r.reason else "") for r in rows}}


def section_sweep(ctx: dict) -> dict:
    """The must-have rows: fp32 and bf16 (speed and memory), bf16 + activation checkpointing (memory)."""
    mode = best_low_precision(ctx)
    variants = [("fp32", False, False)] + ([(mode, False, False), (mode, False, True)] if mode != "fp32" else [])
    return rows_measured(variants, ctx)


def section_fp8(ctx: dict) -> dict:
    """fp8 (torchao float8) and bf16-pure rows beside the sweep's (speed, memory, loss against fp32), then fp32,
    bf16 and fp8 on a wider transformer (LARGE_SHAPE), where float8's matmuls should pay for its casts."""
    out = rows_measured([("fp8", False, False), ("bf16-pure", False, False)], ctx)
    shape = QUICK_LARGE_SHAPE if ctx["quick"] else LARGE_SHAPE
    config = ctx["config"].replace(task_options={**ctx["config"].task_options, **shape})
    wide = dict(ctx, config=config, rows=[], row_seconds={})
    rows_measured([("fp32", False, False), ("bf16", False, False), ("fp8", False, False)], wide)
    flops = step_flops(config, "bf16")  # the wide model's FLOPs a step: its rows' MFU (mfu_by_row)
    release(ctx["device"])
    out["wide"] = sweep_dict(wide) | {"shape": shape, "flops_per_step": flops}
    return out


def section_sweep_more(ctx: dict) -> dict:
    return rows_measured([("tf32", False, False), ("fp16", False, False)], ctx)


def section_compile_fp32(ctx: dict) -> dict:
    return rows_measured([("fp32", True, False)], ctx)


# ----------------------------------------------------------------- engine vs a minimal loop
def minimal_loop(
    config: RunConfig, mode: str, steps: int, repeats: int, compiled: bool = False, threads: int | None = None
) -> dict:
    """The same task, model, optimizer and precision in the shortest correct hand-written loop.

    No events, no metric accumulation, no stop checks: one sync per window, exactly like the engine's
    log interval, so the ratio isolates what the engine's bookkeeping costs. `compiled`: the model compiled
    like the engine does (core.engine.compiling.compile_model; the loss stays eager); the compile happens in the
    first (warm-up) window. `threads`: the CPU thread count the engine used (its automatic choice).
    """
    info = device_info(config.device)
    device = torch_device(info)
    plan = resolve_precision(mode, info)
    task = create_task(config.task, config.task_options)
    torch.manual_seed(config.seed)
    data = task.load_data(config.data, config.seed)
    torch.manual_seed(config.seed)
    model = task.build_model(data.info).to(device).train()
    optimizer = build_optimizer(model, config, device)
    scaler = plan.make_scaler()
    net = model
    if compiled:
        torch._dynamo.reset()
        net = compiling.compile_model(model, config.compile_mode)
    train = {k: v.to(device) for k, v in data.train.items()}
    rows = next(iter(train.values())).shape[0]
    per_epoch = rows // config.batch_size
    perm = torch.randperm(rows, device=device)
    windows = []
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with matmul_precision(plan):
            for window in range(1 + repeats):  # first window: warm-up (and the compile)
                sync(device)
                start = time.perf_counter()
                for step in range(steps):
                    index = (window * steps + step) % per_epoch
                    rows_of_batch = perm[index * config.batch_size : (index + 1) * config.batch_size]
                    batch = {k: v[rows_of_batch] for k, v in train.items()}
                    with plan.autocast():
                        loss = task.loss(net, batch)
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
                sync(device)
                windows.append((time.perf_counter() - start) / steps)
    finally:
        torch.set_num_threads(previous_threads)
        del net, model, optimizer, train
        release(device)
    step_s = statistics.median(windows[1:])
    return {
        "step_ms": 1000 * step_s,
        "samples_per_second": config.batch_size / step_s,
        "compiled": compiled,
        "warmup_window_s": windows[0] * steps,
        "threads": threads or previous_threads,
    }


def best_low_precision(ctx: dict) -> str:
    """bf16 where the device has it (the suite's headline mode), else fp32."""
    return "bf16" if "bf16" in ctx["info"].precisions else "fp32"


def overhead_figures(engine: SweepRow, minimal: dict, mode: str, compiled: bool, source: str) -> dict:
    return {
        "mode": mode,
        "compiled": compiled,
        "engine_samples_per_second": engine.samples_per_second,
        "minimal_samples_per_second": minimal["samples_per_second"],
        "engine_step_ms": engine.step_ms,
        "minimal_step_ms": minimal["step_ms"],
        "engine_over_minimal": engine.samples_per_second / minimal["samples_per_second"],
        "engine_source": source,
        "threads": minimal["threads"],
    }


def section_overhead(ctx: dict) -> dict:
    """Eager on both sides, measured back to back (the engine first: the minimal loop takes its thread count)."""
    mode = best_low_precision(ctx)
    config = ctx["config"]
    engine = measure_mode(config, mode, ctx["steps"], ctx["repeats"])
    release(ctx["device"])
    if engine.status != "ok":
        raise RuntimeError(f"engine run failed: {engine.reason}")
    minimal = minimal_loop(config, mode, ctx["steps"], ctx["repeats"], threads=engine.threads)
    return overhead_figures(engine, minimal, mode, False, "measured here, eager")


def section_compile(ctx: dict) -> dict:
    """bf16 + compile through the engine (a sweep row, compile time apart), then the minimal loop compiled the
    same way, so the engine/minimal ratio can be read with compile on both sides."""
    mode = best_low_precision(ctx)
    row = measure_row(ctx, mode, compiled=True)
    out = {"row": row.label, "status": row.status, "reason": row.reason, "compile_seconds": row.compile_seconds}
    if row.status != "ok":
        return out
    if row.reason:  # the engine fell back to eager: comparing with a compiled minimal loop would mean nothing
        out["overhead"] = None
        return out
    guess = ctx["row_seconds"].get(row.label, 0.0)
    if reason := over_budget(ctx, guess):
        out["overhead_skipped"] = reason
        return out
    minimal = minimal_loop(ctx["config"], mode, ctx["steps"], ctx["repeats"], compiled=True, threads=row.threads)
    out["overhead"] = overhead_figures(row, minimal, mode, True, f"the sweep's {row.label} row")
    return out


# ----------------------------------------------------------------- MFU
def matmul_ceiling(device: torch.device, quick: bool) -> dict:
    """Measured bf16 matmul throughput (FLOP/s): the practical peak MFU is taken against."""
    n = 1024 if quick or device.type != "cuda" else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    iters = 3 if device.type != "cuda" else 50
    sync(device)
    if device.type == "cuda":  # CUDA events time the GPU itself, without host launch jitter
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            a @ b
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000
    else:
        begin = time.perf_counter()
        for _ in range(iters):
            a @ b
        seconds = time.perf_counter() - begin
    return {"n": n, "flops_per_second": 2 * n**3 * iters / seconds}


def step_flops(config: RunConfig, mode: str) -> float:
    """FLOPs of one training step (forward + loss + backward), counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    info = device_info(config.device)
    device = torch_device(info)
    plan = resolve_precision(mode, info)
    task = create_task(config.task, config.task_options)
    data = task.load_data(config.data, config.seed)
    model = task.build_model(data.info).to(device).train()
    batch = {k: v[: config.batch_size].to(device) for k, v in data.train.items()}
    counter = FlopCounterMode(display=False)
    with counter:
        with plan.autocast():
            loss = task.loss(model, batch)
        loss.backward()
    return float(counter.get_total_flops())


def section_mfu(ctx: dict) -> dict:
    """The step's FLOPs and the matmul ceiling; MFU of every bf16 row is derived at the end (mfu_by_row), as the
    compiled rows come later. Activation-checkpointed rows are left out: their recompute is not model FLOPs."""
    mode = best_low_precision(ctx)
    ceiling = matmul_ceiling(ctx["device"], ctx["quick"])
    flops = step_flops(ctx["config"], mode)
    release(ctx["device"])
    return {
        "mode": mode,
        "matmul_ceiling_flops": ceiling["flops_per_second"],
        "matmul_n": ceiling["n"],
        "flops_per_step": flops,
    }


def mfu_by_row(report: dict) -> dict:
    """{row label: {achieved_flops, mfu}} for the measured rows of the MFU mode, checkpointed rows left out."""
    mfu = report["sections"].get("mfu")
    if not mfu:
        return {}
    out = {}
    wide = report["sections"].get("fp8", {}).get("wide") or {}
    for prefix, rows, flops in (
        ("", report["sections"].get("sweep", {}).get("rows", []), mfu["flops_per_step"]),
        ("wide ", wide.get("rows", []), wide.get("flops_per_step")),  # the fp8 section's wider model
    ):
        for row in rows:
            low = row["mode"] in (mfu["mode"], "bf16", "fp8", "bf16-pure")  # the same model FLOPs, the bf16 ceiling
            if flops and low and row["status"] == "ok" and not row["checkpointed"] and row["step_ms"]:
                achieved = flops * 1000.0 / row["step_ms"]
                out[prefix + row["label"]] = {"achieved_flops": achieved, "mfu": achieved / mfu["matmul_ceiling_flops"]}
    return out


# ----------------------------------------------------------------- training and validation quality
def quality_metric(metrics: dict) -> str | None:
    """The validation metric the bf16-vs-fp32 quality check reads: HR@10 (a proportion over users)."""
    return next((m for m in QUALITY_METRICS if m in metrics), None)


def short_run(config: RunConfig, mode: str, steps: int, log_interval: int) -> dict:
    """A real Trainer run to the end, validation evaluated after the last step; 'diverged' when it fails, a
    logged loss is not finite, or the loss did not fall."""
    from core.engine.trainer import Trainer

    info = device_info(config.device)
    if mode not in info.precisions:
        return {"mode": mode, "status": "skipped", "reason": info.unsupported.get(mode, "")}
    seen: list[StepMetrics] = []
    evaluations: list[EvalMetrics] = []

    def sink(event) -> None:
        if isinstance(event, StepMetrics):
            seen.append(event)
        elif isinstance(event, EvalMetrics) and event.split == "val":
            evaluations.append(event)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="amp-suite-") as out:
        cfg = config.replace(
            precision=mode,
            max_steps=steps,
            log_interval=log_interval,
            eval_interval=1_000_000_000,
            checkpoint_interval=0,
            keep_best=0,
            out_dir=out,
        )
        trainer = Trainer(cfg, sink=sink, control=RunControl())
        ended = trainer.run()
    users = split_length(trainer.data.val) if hasattr(trainer, "data") else None
    del trainer
    release(torch_device(info))
    losses = [e.loss for e in seen]
    healthy = (
        ended.status == "completed"
        and bool(losses)
        and all(math.isfinite(x) for x in losses)
        and losses[-1] < losses[0]
    )
    metrics = evaluations[-1].metrics if evaluations else {}
    name = quality_metric(metrics)
    return {
        "mode": mode,
        "status": "ok" if healthy else "diverged",
        "message": ended.message,
        "steps": ended.step,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "skipped_steps": ended.skipped_steps,
        "grad_scale": seen[-1].grad_scale if seen else None,
        "grad_norm": seen[-1].grad_norm if seen else None,
        "val_metrics": metrics,
        "quality_metric": name,
        "quality": metrics.get(name) if name else None,
        "users_evaluated": users,
        "wall_seconds": time.perf_counter() - started,
    }


def quality_check(bf16: dict, fp32: dict) -> dict | None:
    """Whether bf16's validation HR@10 is within noise of fp32's after the same training.

    "Noise": HR@10 is a proportion over U evaluated users, so one measurement scatters by its binomial standard
    error sqrt(p (1 - p) / U) (p: the two runs' mean). Within noise means |bf16 - fp32| <= 2 of those. Both runs
    are evaluated on the same users, so this is a lenient bound for the evaluation's sampling alone; it does
    not model run-to-run training noise either, which the sweep's losses (same seed) show apart."""
    if not bf16 or not fp32 or bf16.get("quality") is None or fp32.get("quality") is None:
        return None
    users = fp32.get("users_evaluated") or 0
    p = (bf16["quality"] + fp32["quality"]) / 2
    se = math.sqrt(max(p * (1 - p), 0.0) / users) if users else float("nan")
    diff = bf16["quality"] - fp32["quality"]
    noise = TARGETS["quality_noise_se"] * se
    return {
        "metric": fp32["quality_metric"],
        "bf16": bf16["quality"],
        "fp32": fp32["quality"],
        "diff": diff,
        "users": users,
        "standard_error": se,
        "noise": noise,
        "within_noise": abs(diff) <= noise,
    }


def section_training(ctx: dict) -> dict:
    """bf16 and fp32 trained alike and evaluated (the quality check), then fp16 for its health (GradScaler)."""
    steps, interval = (20, 5) if ctx["quick"] else (80, 20)
    runs: dict = {}
    for mode in ("bf16", "fp32", "fp16"):
        row = find_row(ctx, mode)
        guess = 1.2 * steps * row.step_ms / 1000 + 10 if row else 0.0
        if reason := over_budget(ctx, guess):
            runs[mode] = {"mode": mode, "status": "skipped", "reason": reason}
            continue
        print(f"    train {mode}...", file=sys.stderr, flush=True)
        runs[mode] = short_run(ctx["config"], mode, steps, interval)
    return {"steps": steps, "runs": runs, "quality": quality_check(runs.get("bf16"), runs.get("fp32"))}


# ----------------------------------------------------------------- profile
LOSS_LABEL = "suite::chunked_loss"
PROFILE_CATEGORIES = ("attention", "matmuls", "chunked loss", "optimizer", "layer norm", "other")
_ATTENTION = (
    "scaleddotproduct",
    "flashattention",
    "efficientattention",
    "cudnnattention",
    "fmha",
    "flashfwd",
    "flashbwd",
)
_MATMULS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "aten::_addmmactivation",
)


@contextlib.contextmanager
def labelled_chunked_loss():
    """The recommender's chunked loss (forward, where it also builds its gradients) inside a record_function
    range, so the profile can tell its matmuls and softmax from the model's. Wraps the call from here; the loss
    itself is untouched. Other tasks: nothing to label."""
    try:
        from core.tasks.recommender import task as recommender
    except ImportError:
        yield
        return
    original = recommender.chunked_softmax_cross_entropy

    def labelled(*args, **kwargs):
        with torch.profiler.record_function(LOSS_LABEL):
            return original(*args, **kwargs)

    recommender.chunked_softmax_cross_entropy = labelled
    try:
        yield
    finally:
        recommender.chunked_softmax_cross_entropy = original


def _squash(name: str) -> str:
    return name.lower().replace("_", "")


def categorise(event) -> str:
    """The category of a profiled op: by the ranges it runs in (the chunked loss, an optimizer step, an
    attention op's backward node), else by its own name."""
    names, parent = [event.name], event.cpu_parent
    while parent is not None:
        names.append(parent.name)
        parent = parent.cpu_parent
    if any(n == LOSS_LABEL or "chunkedsoftmaxcrossentropy" in _squash(n) for n in names):
        return "chunked loss"
    if any(n.startswith("Optimizer.") or "adam" in _squash(n) for n in names):
        return "optimizer"
    if any(key in _squash(n) for n in names for key in _ATTENTION):
        return "attention"
    if any("layernorm" in _squash(n) for n in names):
        return "layer norm"
    if event.name in _MATMULS:
        return "matmuls"
    return "other"


def profile_breakdown(events, on_device: bool) -> dict:
    """Share of the profiled time by category and the top 10 ops. On a device: the time of the kernels each op
    launched itself (its CUDA self time); on the CPU: each op's CPU self time."""
    by_category = dict.fromkeys(PROFILE_CATEGORIES, 0.0)
    loss_matmuls = 0.0
    by_op: dict[str, list] = {}
    for event in events:
        if getattr(event, "is_async", False) or str(getattr(event, "device_type", "")).split(".")[-1] != "CPU":
            continue
        us = sum(k.duration for k in event.kernels) if on_device else event.self_cpu_time_total
        if us <= 0:
            continue
        category = categorise(event)
        by_category[category] += us
        if category == "chunked loss" and event.name in _MATMULS:
            loss_matmuls += us
        entry = by_op.setdefault(event.name, [0.0, 0, category])
        entry[0] += us
        entry[1] += 1
    total = sum(by_category.values())
    share = {k: v / total if total else 0.0 for k, v in by_category.items()}
    ranked = sorted(by_op.items(), key=lambda item: -item[1][0])
    top = ranked[:10]
    # Which kernels each category ran (e.g. flash attention, fused AdamW): the 3 costliest ops of each.
    ops_by_category = {c: [name for name, (_, _, category) in ranked if category == c][:3] for c in by_category}
    return {
        "total_us": total,
        "share": share,
        "chunked_loss_matmul_share": loss_matmuls / total if total else 0.0,
        "ops_by_category": ops_by_category,
        "top_ops": [
            {"op": name, "share": us / total if total else 0.0, "us": us, "calls": calls, "category": category}
            for name, (us, calls, category) in top
        ],
    }


def section_profile(ctx: dict) -> dict:
    """torch.profiler over one log window of bf16 engine steps (the real Trainer: model, chunked loss, fused
    AdamW), started after a warm-up window: the profiler starts at the first StepMetrics and stops at the
    second, so exactly `steps` optimizer steps and one log sync are profiled."""
    from torch.profiler import ProfilerActivity, profile

    from core.engine.trainer import Trainer

    mode = best_low_precision(ctx)
    steps = 3 if ctx["quick"] else 5
    on_device = ctx["device"].type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    prof = profile(activities=activities)
    control, state = RunControl(), {"windows": 0, "running": False}

    def sink(event) -> None:
        if isinstance(event, StepMetrics):
            state["windows"] += 1
            if state["windows"] == 1:
                state["started"] = time.perf_counter()
                prof.start()
                state["running"] = True
            elif state["windows"] == 2:
                prof.stop()
                state["running"], state["wall_s"] = False, time.perf_counter() - state["started"]
                control.stop()

    with tempfile.TemporaryDirectory(prefix="amp-suite-") as out, labelled_chunked_loss():
        cfg = ctx["config"].replace(
            precision=mode,
            max_steps=2 * steps + 1,
            log_interval=steps,
            eval_interval=1_000_000_000,
            checkpoint_interval=0,
            keep_best=0,
            out_dir=out,
        )
        try:
            ended = Trainer(cfg, sink=sink, control=control).run()
        finally:
            if state["running"]:
                prof.stop()
    release(ctx["device"])
    if state["windows"] < 2:
        raise RuntimeError(f"the profiled run ended early: {ended.status} {ended.message}")
    breakdown = profile_breakdown(prof.events(), on_device)
    wall_us = state["wall_s"] * 1e6
    return {
        "mode": mode,
        "steps": steps,
        "time": "CUDA kernel time" if on_device else "CPU self time",
        "wall_ms_per_step": state["wall_s"] * 1000 / steps,
        "device_busy": breakdown["total_us"] / wall_us if on_device and wall_us else None,
        **breakdown,
    }


# ----------------------------------------------------------------- host data path
@contextlib.contextmanager
def host_resident_data(staged: bool, made: list):
    """Trainers built inside keep their training data on the host (as they do when it exceeds half the free
    GPU memory, see core.engine.data_setup.keep_on_host) and batch it through HostStaging (`staged`) or plain
    gathers and copies. Forced here, in this process only; every EpochBatches made is appended to `made`."""
    from core.engine import data_setup

    keep, batches = data_setup.keep_on_host, data_setup.EpochBatches

    def make(*args, **kwargs):
        made.append(batches(*args, **{**kwargs, "staged": staged}))
        return made[-1]

    data_setup.keep_on_host = lambda train, device, memory_free: True
    data_setup.EpochBatches = make
    try:
        yield
    finally:
        data_setup.keep_on_host, data_setup.EpochBatches = keep, batches


def section_datapath(ctx: dict) -> dict:
    """bf16 engine samples/s with the training data on the device, on the host through HostStaging (pinned,
    double-buffered, the next batch's copy on a side stream) and on the host with plain gathers; same batches.
    On the CPU the data is local either way: the staged run still goes through HostStaging's gathers and
    copies (without streams), the plain one is the device path."""
    mode = best_low_precision(ctx)
    config = ctx["config"]
    out: dict = {"mode": mode}
    for name, staged in (("device", None), ("host_staged", True), ("host_plain", False)):
        made: list = []
        with host_resident_data(staged, made) if staged is not None else contextlib.nullcontext():
            row = measure_mode(config, mode, ctx["steps"], ctx["repeats"])
        release(ctx["device"])
        if row.status != "ok":
            raise RuntimeError(f"{name}: {row.reason}")
        batches = made[-1] if made else None
        out[name] = {
            "samples_per_second": row.samples_per_second,
            "step_ms": row.step_ms,
            "data_on_host": bool(batches and batches._on_host),
            "staging": bool(batches and batches.staging is not None) if batches else False,
        }
    base = out["device"]["samples_per_second"]
    out["staged_over_device"] = out["host_staged"]["samples_per_second"] / base
    out["plain_over_device"] = out["host_plain"]["samples_per_second"] / base
    out["copy_hidden"] = out["staged_over_device"] >= TARGETS["staged_over_device_min"]
    sample = {k: v[:1] for k, v in ctx_train_split(ctx).items()}
    out["batch_bytes"] = config.batch_size * sum(v.numel() * v.element_size() for v in sample.values())
    return out


def ctx_train_split(ctx: dict) -> dict:
    """The training split (from the shared load)."""
    task = create_task(ctx["config"].task, ctx["config"].task_options)
    return task.load_data(ctx["config"].data, ctx["config"].seed).train


# ----------------------------------------------------------------- DDP
def section_ddp(ctx: dict) -> dict:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        return {"status": "skipped", "reason": f"{count} GPU(s): DDP needs at least 2"}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ddp_scaling import run as train_rate

    cfg = ctx["config"]
    options = [f"{k}={v}" for k, v in cfg.task_options.items()]
    steps = 10 if ctx["quick"] else 30
    batch = cfg.batch_size - cfg.batch_size % count
    single = train_rate(cfg.task, 1, batch, steps, options, device="cuda", precision="bf16")
    multi = train_rate(cfg.task, count, batch // count, steps, options, device="cuda", precision="bf16")
    return {
        "status": "ok",
        "gpus": count,
        "global_batch": batch,
        "precision": "bf16",
        "single_samples_per_second": single,
        "multi_samples_per_second": multi,
        "scaling": multi / single,
        "efficiency": multi / single / count,
    }


# Must-have figures first; the expensive extras (compiles) after, skipped when the budget is spent.
SECTIONS = (
    ("devices", section_devices),
    ("sweep", section_sweep),
    ("mfu", section_mfu),
    ("training", section_training),
    ("fp8", section_fp8),
    ("overhead", section_overhead),
    ("profile", section_profile),
    ("datapath", section_datapath),
    ("compile", section_compile),
    ("sweep_more", section_sweep_more),
    ("compile_fp32", section_compile_fp32),
    ("ddp", section_ddp),
)


def section_estimate_s(name: str, ctx: dict) -> float:
    """Seconds a section is expected to take, from the rows measured so far (0: unknown or its own checks)."""
    bf16 = ctx["row_seconds"].get(row_label(best_low_precision(ctx)), 0.0)
    return {"overhead": 2 * bf16, "profile": bf16, "datapath": 3 * bf16}.get(name, 0.0)


# ----------------------------------------------------------------- summary, targets, table
def derive(report: dict) -> dict:
    """Figures read off several sections: "bf16 + compile: N x fp32 eager", MFU per row, which engine/minimal
    ratio counts, the best bf16 memory."""
    s = report["sections"]
    rows = {r["label"]: r for r in s.get("sweep", {}).get("rows", []) if r["status"] == "ok"}
    out: dict = {
        "speedup_vs_fp32_eager": {label: r["speedup"] for label, r in rows.items()},
        "mfu_by_row": mfu_by_row(report),
    }
    bf16_rows = [label for label in out["mfu_by_row"] if label.split(" ")[0] == "bf16"]  # the target's mode
    if bf16_rows:
        best = max(bf16_rows, key=lambda label: out["mfu_by_row"][label]["mfu"])
        out["mfu_best"] = {"row": best, **out["mfu_by_row"][best]}
    memory = [rows[label] for label in ("bf16", "bf16 + act. ckpt") if label in rows and rows[label]["memory_ratio"]]
    if memory:
        best = min(memory, key=lambda r: r["memory_ratio"])
        out["bf16_memory_best"] = {"row": best["label"], "memory_ratio": best["memory_ratio"]}
    eager, compiled = s.get("overhead"), (s.get("compile") or {}).get("overhead")
    compile_faster = (
        "bf16" in rows
        and "bf16 + compile" in rows
        and rows["bf16 + compile"]["samples_per_second"] > rows["bf16"]["samples_per_second"]
    )
    if compiled and compile_faster:
        out["overhead"] = {**compiled, "why": "compile on both sides (bf16 + compile measured faster than eager)"}
    elif eager:
        why = (
            "eager on both sides (compile was not faster)"
            if "bf16 + compile" in rows
            else "eager on both sides (compile not measured)"
        )
        out["overhead"] = {**eager, "why": why}
    return out


def check_targets(report: dict, is_cuda: bool) -> list[dict]:
    """Issue 17's targets for H100/H200-class cards, with the measured value and what it is; 'n/a' off CUDA."""
    s, d = report["sections"], report.get("summary") or derive(report)
    rows = {r["label"]: r for r in s.get("sweep", {}).get("rows", []) if r["status"] == "ok"}
    bf16 = rows.get("bf16", {})
    memory, mfu, overhead = d.get("bf16_memory_best", {}), d.get("mfu_best", {}), d.get("overhead", {})
    quality = (s.get("training") or {}).get("quality") or {}
    datapath = s.get("datapath", {})
    checks = [
        (
            "bf16 samples/s >= 2x fp32",
            bf16.get("speedup"),
            lambda v: v >= TARGETS["bf16_speedup_min"],
            "bf16 eager vs fp32 eager",
        ),
        (
            "bf16 peak memory <= 0.6x fp32",
            memory.get("memory_ratio"),
            lambda v: v <= TARGETS["bf16_memory_ratio_max"],
            f"best: {memory.get('row', '-')}",
        ),
        (
            "bf16 MFU >= 45% of matmul ceiling",
            mfu.get("mfu"),
            lambda v: v >= TARGETS["bf16_mfu_min"],
            f"best: {mfu.get('row', '-')}",
        ),
        (
            "engine / minimal loop >= 0.97",
            overhead.get("engine_over_minimal"),
            lambda v: v >= TARGETS["engine_over_minimal_min"],
            overhead.get("why", "-"),
        ),
        (
            "bf16 val HR@10 within noise of fp32",
            quality.get("diff"),
            lambda v: abs(v) <= quality["noise"],
            f"|diff| <= {quality['noise']:.4f} (2 s.e., {quality['users']} users)" if quality else "-",
        ),
        (
            "host data: staged >= 0.95x on device",
            datapath.get("staged_over_device"),
            lambda v: v >= TARGETS["staged_over_device_min"],
            "copy hidden" if datapath.get("copy_hidden") else "-",
        ),
    ]
    return [
        {
            "target": name,
            "value": value,
            "detail": detail,
            "result": "n/a" if value is None or not is_cuda else ("PASS" if ok(value) else "FAIL"),
        }
        for name, value, ok, detail in checks
    ]


def _x(value) -> str:
    return "  -  " if value is None else f"{value:.2f}x"


def _gib(value) -> str:
    return f"{value / 2**30:6.2f} GiB" if value else "      - GiB"


def _print_rows(name: str, rows: list[dict]) -> None:
    for row in rows:
        label = row.get("label", row["mode"])
        if row["status"] != "ok":
            print(f"  {name} {label:<17} {row['status']}: {row['reason'][:70]}")
            continue
        extra = f"  compiled in {row['compile_seconds']:.1f} s" if row.get("compile_seconds") else ""
        extra += f"  ({row['reason'][:60]})" if row.get("reason") else ""
        print(
            f"  {name} {label:<17} {row['step_ms']:8.2f} ms/step {row['samples_per_second']:>9,.0f} samples/s "
            f"{_gib(row['peak_memory_bytes'])}  {_x(row['speedup'])}  mem {_x(row['memory_ratio'])}  "
            f"loss {row['loss']:.4f}{extra}"
        )


def print_table(report: dict) -> None:
    """The short summary, printed last."""
    s, d = report["sections"], report.get("summary", {})
    print(
        f"\n== GPU suite: {report['device']} ({report['device_name']}), torch {torch.__version__}, "
        f"{report['elapsed_s']:.0f} s, compile backend {report.get('compile_backend')}; "
        f"report {report['report_path']}"
    )
    _print_rows("sweep", s.get("sweep", {}).get("rows", []))
    wide = s.get("fp8", {}).get("wide")
    if wide:
        _print_rows(f"wide {wide['shape'].get('d_model')}", wide.get("rows", []))
    speedups = d.get("speedup_vs_fp32_eager", {})
    if speedups:
        print(
            "  vs fp32 eager: "
            + ", ".join(f"{label} {x:.2f}x" for label, x in speedups.items() if x and label != "fp32")
        )
    if "mfu" in s:
        m = s["mfu"]
        figures = ", ".join(
            f"{label} {100 * v['mfu']:.1f}% ({v['achieved_flops'] / 1e12:.1f} TFLOP/s)"
            for label, v in d.get("mfu_by_row", {}).items()
        )
        print(
            f"  MFU of a measured {m['matmul_ceiling_flops'] / 1e12:.1f} TFLOP/s bf16 matmul ceiling "
            f"({m['flops_per_step'] / 1e12:.3f} TFLOP/step): {figures or '-'}"
        )
    for name, o in (("eager", s.get("overhead")), ("compiled", (s.get("compile") or {}).get("overhead"))):
        if o:
            print(
                f"  overhead ({o['mode']}, {name}): engine {o['engine_samples_per_second']:,.0f} / minimal "
                f"{o['minimal_samples_per_second']:,.0f} samples/s = {o['engine_over_minimal']:.3f}"
            )
    if "profile" in s:
        p = s["profile"]
        busy = f", device busy {100 * p['device_busy']:.0f}%" if p.get("device_busy") else ""
        shares = " | ".join(f"{k} {100 * v:.0f}%" for k, v in p["share"].items())
        print(
            f"  profile ({p['mode']}, {p['time']}, {p['steps']} steps, {p['wall_ms_per_step']:.1f} ms/step{busy}): "
            f"{shares} (loss matmuls {100 * p['chunked_loss_matmul_share']:.0f}%)"
        )
        print("  top ops: " + ", ".join(f"{t['op']} {100 * t['share']:.0f}%" for t in p["top_ops"][:6]))
        print(
            "  ops: "
            + "; ".join(
                f"{c} {', '.join(ops[:2])}"
                for c, ops in p["ops_by_category"].items()
                if ops and c in ("attention", "optimizer", "chunked loss")
            )
        )
    if "datapath" in s:
        p = s["datapath"]
        print(
            f"  datapath ({p['mode']}): device {p['device']['samples_per_second']:,.0f} | host staged "
            f"{p['host_staged']['samples_per_second']:,.0f} ({p['staged_over_device']:.2f}x"
            f"{', copy hidden' if p['copy_hidden'] else ''}) | host plain {p['host_plain']['samples_per_second']:,.0f}"
            f" ({p['plain_over_device']:.2f}x) samples/s; {p['batch_bytes'] / 2**20:.2f} MiB/batch"
        )
    training = s.get("training", {})
    for mode, run in training.get("runs", {}).items():
        if run["status"] == "skipped":
            print(f"  train {mode}: skipped: {run['reason'][:70]}")
        else:
            quality = f", val {run['quality_metric']} {run['quality']:.4f}" if run.get("quality") is not None else ""
            print(
                f"  train {mode}: {run['status']}, {run['steps']} steps, loss {run['first_loss']:.4f} -> "
                f"{run['last_loss']:.4f}, {run['skipped_steps']} skipped steps{quality}"
            )
    ddp = s.get("ddp", {})
    if ddp.get("status") == "ok":
        print(
            f"  DDP {ddp['gpus']} GPUs (bf16, global batch {ddp['global_batch']}): "
            f"{ddp['multi_samples_per_second']:,.0f} vs {ddp['single_samples_per_second']:,.0f} samples/s = "
            f"{ddp['scaling']:.2f}x ({100 * ddp['efficiency']:.0f}% efficiency)"
        )
    for name, reason in report.get("skipped", {}).items():
        print(f"  {name}: skipped ({reason})")
    for name, error in report["errors"].items():
        print(f"  {name}: ERROR {error}")
    for t in report["targets"]:
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        print(f"  target {t['target']:<38} {value:>7}  {t['result']:<4} {t['detail']}")


def write_report(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Run every section within the time budget, write the JSON report, print the table; exit 1 on errors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the suite itself")
    parser.add_argument(
        "--out", default="runs/gpu_suite.json", help="where to write the JSON report (runs/ is git-ignored)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=270.0,
        help="skip sections and rows that would not finish within this many seconds",
    )
    parser.add_argument(
        "--compile-backend",
        choices=("inductor", "aot_eager", "eager"),
        default=None,
        help="torch.compile backend (default inductor; 'eager' for --quick off CUDA: it captures "
        "the graphs without building kernels, a smoke test of the compile paths)",
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    info = device_info(args.device)
    config = suite_config(info.id, args.quick)
    backend = args.compile_backend or ("eager" if args.quick and info.type != "cuda" else "inductor")
    ctx = {
        "config": config,
        "info": info,
        "device": torch_device(info),
        "quick": args.quick,
        "steps": 5 if args.quick else 10,
        "repeats": 2 if args.quick else 3,
        "isolate": info.type == "cpu",
        "rows": [],
        "row_seconds": {},
        "compile_s": [],
        "backend": backend,
        "budget_s": args.budget_s,
        "began": began,
    }
    out = Path(args.out)
    report = {
        "device": info.id,
        "device_name": info.name,
        "config": config.to_dict(),
        "quick": args.quick,
        "compile_backend": backend,
        "budget_s": args.budget_s,
        "sections": {},
        "errors": {},
        "skipped": {},
        "seconds": {},
        "report_path": args.out,
    }
    with shared_task_data(config.task), compile_backend(backend):
        for name, run in SECTIONS:
            need = section_estimate_s(name, ctx)
            if left_s(ctx) <= 0 or (need and over_budget(ctx, need)):
                report["skipped"][name] = over_budget(ctx, max(need, 1.0))
                continue
            start = time.perf_counter()
            print(f"[{time.perf_counter() - began:6.1f} s] {name}...", file=sys.stderr, flush=True)
            try:
                report["sections"][name] = run(ctx)
            except Exception as exc:  # one broken section must not cost the others' numbers
                report["errors"][name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                report.setdefault("tracebacks", {})[name] = traceback.format_exc()
            report["seconds"][name] = time.perf_counter() - start
            if ctx["rows"]:
                report["sections"]["sweep"] = sweep_dict(ctx)
            report["elapsed_s"] = time.perf_counter() - began
            write_report(report, out)  # what is measured so far survives a kill by the backstop
    report["elapsed_s"] = time.perf_counter() - began
    report["summary"] = derive(report)
    report["targets"] = check_targets(report, info.type == "cuda")
    write_report(report, out)
    print_table(report)
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
