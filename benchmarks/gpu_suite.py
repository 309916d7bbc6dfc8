"""GPU suite: what mixed precision buys on this card, measured with the real engine, in one command (<= 5 min).

Run from the repository root: `benchmarks/gpu_suite.sh` (or `PYTHONPATH=. python benchmarks/gpu_suite.py`).
Smoke test without a GPU: `benchmarks/gpu_suite.sh --device cpu --quick`.

Sections (each one fails alone, recorded in the report, without stopping the others):
  devices   what torch sees and which precision modes each device supports
  sweep     the precision sweep (core.lab.precision_sweep) on the recommender at a size where AMP matters
  overhead  engine samples/s vs a minimal hand-written loop on the same model, data and precision
  mfu       model FLOPs (counted by FlopCounterMode on one step) x steps/s against a measured bf16 matmul ceiling
  training  short bf16 and fp16 runs through the Trainer that must not diverge
  ddp       with 2+ GPUs: samples/s of N DDP processes (torchrun) vs 1 at the same global batch
Writes a JSON report and prints a short table last. Needs torch and the engine only (no Qt).
"""

from __future__ import annotations

import argparse
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
from core.engine.control import RunControl
from core.devices import device_info, list_devices, torch_device
from core.engine.events import StepMetrics
from core.engine.optimizers import build_optimizer
from core.engine.precision import matmul_precision, resolve_precision
from core.lab.precision_sweep import measure_mode, run_sweep
from core.tasks import TASKS, create_task

# The size the issue asks for: big enough that matmuls dominate and AMP's gain shows.
FULL_RECOMMENDER = {"d_model": 512, "layers": 4, "heads": 8, "max_len": 200, "items": 50_000,
                    "interactions": 400_000, "mean_len": 200}
QUICK_RECOMMENDER = {"d_model": 32, "layers": 1, "heads": 2, "max_len": 20, "items": 200,
                     "interactions": 5_000, "mean_len": 20}
TARGETS = {"bf16_speedup_min": 2.0, "bf16_memory_ratio_max": 0.6, "engine_over_minimal_min": 0.97}


def sync(device: torch.device) -> None:
    """Wait for queued device work: host timers around async GPU work measure nothing without it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def suite_config(device: str, quick: bool) -> RunConfig:
    """The recommender at the suite's size (or the tiny task when the recommender is not registered)."""
    if "recommender" in TASKS:
        options = QUICK_RECOMMENDER if quick else FULL_RECOMMENDER
        return RunConfig.for_task("recommender", device=device, task_options=dict(options),
                                  batch_size=32 if quick else 256)
    return RunConfig.for_task("tiny", device=device, task_options={} if quick else {"hidden": 4096},
                              batch_size=64 if quick else 4096)


def section_devices(ctx: dict) -> dict:
    return {"devices": [d.to_dict() for d in list_devices(free_memory=True)], "torch": torch.__version__,
            "cuda": torch.version.cuda, "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0}


def section_sweep(ctx: dict) -> dict:
    result = run_sweep(ctx["config"], steps=ctx["steps"], repeats=ctx["repeats"], isolate=ctx["isolate"])
    ctx["sweep"] = result
    return result.to_dict()


def minimal_loop(config: RunConfig, mode: str, steps: int, repeats: int) -> dict:
    """The same task, model, optimizer and precision in the shortest correct hand-written loop.

    No events, no metric accumulation, no stop checks: one sync per window, exactly like the engine's
    log interval, so the ratio isolates what the engine's bookkeeping costs.
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
    train = {k: v.to(device) for k, v in data.train.items()}
    rows = next(iter(train.values())).shape[0]
    per_epoch = rows // config.batch_size
    perm = torch.randperm(rows, device=device)
    windows = []
    with matmul_precision(plan):
        for window in range(1 + repeats):  # first window: warm-up
            sync(device)
            start = time.perf_counter()
            for step in range(steps):
                index = (window * steps + step) % per_epoch
                rows_of_batch = perm[index * config.batch_size:(index + 1) * config.batch_size]
                batch = {k: v[rows_of_batch] for k, v in train.items()}
                with plan.autocast():
                    loss = task.loss(model, batch)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            sync(device)
            windows.append((time.perf_counter() - start) / steps)
    step_s = statistics.median(windows[1:])
    return {"step_ms": 1000 * step_s, "samples_per_second": config.batch_size / step_s}


def best_low_precision(ctx: dict) -> str:
    """bf16 where the device has it (the suite's headline mode), else fp32."""
    return "bf16" if "bf16" in ctx["info"].precisions else "fp32"


def section_overhead(ctx: dict) -> dict:
    mode = best_low_precision(ctx)
    config = ctx["config"]
    minimal = minimal_loop(config, mode, ctx["steps"], ctx["repeats"])
    engine = measure_mode(config, mode, ctx["steps"], ctx["repeats"])
    if engine.status != "ok":
        raise RuntimeError(f"engine run failed: {engine.reason}")
    ratio = engine.samples_per_second / minimal["samples_per_second"]
    return {"mode": mode, "engine_samples_per_second": engine.samples_per_second,
            "minimal_samples_per_second": minimal["samples_per_second"], "engine_step_ms": engine.step_ms,
            "minimal_step_ms": minimal["step_ms"], "engine_over_minimal": ratio}


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
    batch = {k: v[:config.batch_size].to(device) for k, v in data.train.items()}
    counter = FlopCounterMode(display=False)
    with counter:
        with plan.autocast():
            loss = task.loss(model, batch)
        loss.backward()
    return float(counter.get_total_flops())


def section_mfu(ctx: dict) -> dict:
    mode = best_low_precision(ctx)
    ceiling = matmul_ceiling(ctx["device"], ctx["quick"])
    flops = step_flops(ctx["config"], mode)
    row = ctx["sweep"].row(mode) if ctx.get("sweep") else None
    if row is None or row.status != "ok":
        row = measure_mode(ctx["config"], mode, ctx["steps"], ctx["repeats"])
    steps_per_second = 1000.0 / row.step_ms
    achieved = flops * steps_per_second
    return {"mode": mode, "matmul_ceiling_flops": ceiling["flops_per_second"], "matmul_n": ceiling["n"],
            "flops_per_step": flops, "achieved_flops": achieved, "mfu": achieved / ceiling["flops_per_second"]}


def short_run(config: RunConfig, mode: str, steps: int, log_interval: int) -> dict:
    """A real Trainer run; 'diverged' when it fails, a logged loss is not finite, or the loss did not fall."""
    if mode not in device_info(config.device).precisions:
        return {"mode": mode, "status": "skipped", "reason": device_info(config.device).unsupported.get(mode, "")}
    control, seen = RunControl(), []

    def sink(event) -> None:
        if isinstance(event, StepMetrics):
            seen.append(event)
            if event.step >= steps:
                control.stop()  # before the final evaluation, which is not what this checks

    with tempfile.TemporaryDirectory(prefix="amp-suite-") as out:
        cfg = config.replace(precision=mode, max_steps=steps + 1, log_interval=log_interval,
                             eval_interval=1_000_000_000, out_dir=out)
        from core.engine.trainer import Trainer

        ended = Trainer(cfg, sink=sink, control=control).run()
    losses = [e.loss for e in seen]
    healthy = (ended.status != "failed" and bool(losses) and all(math.isfinite(x) for x in losses)
               and losses[-1] < losses[0])
    return {"mode": mode, "status": "ok" if healthy else "diverged", "message": ended.message, "steps": ended.step,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
            "skipped_steps": ended.skipped_steps, "grad_scale": seen[-1].grad_scale if seen else None,
            "grad_norm": seen[-1].grad_norm if seen else None}


def section_training(ctx: dict) -> dict:
    steps, interval = (20, 5) if ctx["quick"] else (200, 20)
    return {mode: short_run(ctx["config"], mode, steps, interval) for mode in ("bf16", "fp16")}


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
    return {"status": "ok", "gpus": count, "global_batch": batch, "precision": "bf16",
            "single_samples_per_second": single, "multi_samples_per_second": multi,
            "scaling": multi / single, "efficiency": multi / single / count}


SECTIONS = (("devices", section_devices), ("sweep", section_sweep), ("overhead", section_overhead),
            ("mfu", section_mfu), ("training", section_training), ("ddp", section_ddp))


def check_targets(report: dict, is_cuda: bool) -> list[dict]:
    """The issue's targets for H100/H200-class cards, with the measured value; 'n/a' off CUDA."""
    rows = {r["mode"]: r for r in report["sections"].get("sweep", {}).get("rows", [])}
    bf16 = rows.get("bf16", {})
    overhead = report["sections"].get("overhead", {})
    checks = [("bf16 samples/s >= 2x fp32", bf16.get("speedup"), lambda v: v >= TARGETS["bf16_speedup_min"]),
              ("bf16 peak memory <= 0.6x fp32", bf16.get("memory_ratio"),
               lambda v: v <= TARGETS["bf16_memory_ratio_max"]),
              ("engine / minimal loop >= 0.97", overhead.get("engine_over_minimal"),
               lambda v: v >= TARGETS["engine_over_minimal_min"])]
    return [{"target": name, "value": value,
             "result": "n/a" if value is None or not is_cuda else ("PASS" if ok(value) else "FAIL")}
            for name, value, ok in checks]


def print_table(report: dict) -> None:
    """The short summary, printed last."""
    s = report["sections"]
    print(f"\n== GPU suite: {report['device']} ({report['device_name']}), torch {torch.__version__}, "
          f"{report['elapsed_s']:.0f} s; report {report['report_path']}")
    for row in s.get("sweep", {}).get("rows", []):
        if row["status"] != "ok":
            print(f"  sweep {row['mode']:<5} {row['status']}: {row['reason'][:70]}")
            continue
        mem = row["peak_memory_bytes"] / 2**30 if row["peak_memory_bytes"] else float("nan")
        print(f"  sweep {row['mode']:<5} {row['step_ms']:8.2f} ms/step {row['samples_per_second']:>11,.0f} samples/s"
              f" {mem:7.2f} GiB  speedup {row['speedup'] or 0:.2f}x  memory {row['memory_ratio'] or 0:.2f}x  "
              f"loss {row['loss']:.4f}")
    if "overhead" in s:
        o = s["overhead"]
        print(f"  overhead ({o['mode']}): engine {o['engine_samples_per_second']:,.0f} / minimal "
              f"{o['minimal_samples_per_second']:,.0f} samples/s = {o['engine_over_minimal']:.3f}")
    if "mfu" in s:
        m = s["mfu"]
        print(f"  MFU ({m['mode']}): {m['achieved_flops'] / 1e12:.1f} TFLOP/s of a measured "
              f"{m['matmul_ceiling_flops'] / 1e12:.1f} TFLOP/s bf16 matmul ceiling = {100 * m['mfu']:.1f}%")
    for mode, run in s.get("training", {}).items():
        if run["status"] == "skipped":
            print(f"  train {mode}: skipped: {run['reason'][:70]}")
        else:
            print(f"  train {mode}: {run['status']}, {run['steps']} steps, loss {run['first_loss']:.4f} -> "
                  f"{run['last_loss']:.4f}, {run['skipped_steps']} skipped steps")
    ddp = s.get("ddp", {})
    if ddp.get("status") == "ok":
        print(f"  DDP {ddp['gpus']} GPUs (bf16, global batch {ddp['global_batch']}): "
              f"{ddp['multi_samples_per_second']:,.0f} vs {ddp['single_samples_per_second']:,.0f} samples/s = "
              f"{ddp['scaling']:.2f}x ({100 * ddp['efficiency']:.0f}% efficiency)")
    for name, error in report["errors"].items():
        print(f"  {name}: ERROR {error}")
    for t in report["targets"]:
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        print(f"  target {t['target']:<32} {value:>7}  {t['result']}")


def main(argv: list[str] | None = None) -> int:
    """Run every section within the time budget, write the JSON report, print the table; exit 1 on errors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the suite itself")
    parser.add_argument("--out", default="runs/gpu_suite.json",
                        help="where to write the JSON report (runs/ is git-ignored)")
    parser.add_argument("--budget-s", type=float, default=270.0, help="skip sections that start after this")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    info = device_info(args.device)
    config = suite_config(info.id, args.quick)
    ctx = {"config": config, "info": info, "device": torch_device(info), "quick": args.quick,
           "steps": 5 if args.quick else 20, "repeats": 2 if args.quick else 3, "isolate": info.type == "cpu"}
    report = {"device": info.id, "device_name": info.name, "config": config.to_dict(), "quick": args.quick,
              "sections": {}, "errors": {}, "seconds": {}, "report_path": args.out}
    for name, run in SECTIONS:
        if time.perf_counter() - began > args.budget_s:
            report["errors"][name] = f"skipped: the {args.budget_s:.0f} s budget was spent"
            continue
        start = time.perf_counter()
        print(f"[{time.perf_counter() - began:6.1f} s] {name}...", file=sys.stderr, flush=True)
        try:
            report["sections"][name] = run(ctx)
        except Exception as exc:  # one broken section must not cost the others' numbers
            report["errors"][name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            report.setdefault("tracebacks", {})[name] = traceback.format_exc()
        report["seconds"][name] = time.perf_counter() - start
    report["elapsed_s"] = time.perf_counter() - began
    report["targets"] = check_targets(report, info.type == "cuda")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    print_table(report)
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
