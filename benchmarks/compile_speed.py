"""torch.compile against eager, and activation checkpointing's memory, as a user sees them.

Speed: the precision sweep (`amp-console bench --compile both`, core.lab.precision_sweep) for each task, so the
figures are the engine's own samples/s between two syncs (timed windows after a warm-up window, median), each
(mode, compile) in a fresh process; the compile time is measured apart (the trainer compiles before its clock
starts). One table for all tasks, ratios against the task's fp32 eager row.

Memory (--memory): the recommender at a larger size (d_model 256, 4 layers, 200 positions, batch 64), one
forward + backward in a fresh process with and without activation checkpointing; the figure is the growth of
the process's peak RSS (VmHWM, reset first) over its RSS once the model, data and batch are built: the activations kept
for backward plus the gradients.

    python benchmarks/compile_speed.py [--tasks tiny,recommender] [--precisions fp32,bf16] [--steps tiny=1000,...]
        [--repeats 3] [--threads 0] [--compile-mode default] [--memory] [--json]
    python benchmarks/compile_speed.py --memory-only

Options: -o TASK:KEY=VALUE sets a task option (e.g. -o recommender:interactions=20000).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MEMORY_OPTIONS = {
    "d_model": 256,
    "layers": 4,
    "heads": 4,
    "max_len": 200,
    "interactions": 40_000,
    "items": 1000,
    "mean_len": 200,
    "dropout": 0.1,
}
MEMORY_BATCH = 64


def speed_rows(
    tasks: list[str],
    precisions: list[str],
    steps: dict[str, int],
    repeats: int,
    threads: int,
    mode: str,
    options: dict[str, dict],
) -> list[dict]:
    from core.config import RunConfig
    from core.lab.precision_sweep import run_sweep

    rows = []
    for task in tasks:
        config = RunConfig.for_task(
            task, device="cpu", threads=threads, compile_mode=mode, task_options=options.get(task, {})
        )

        def progress(update, task=task) -> None:
            if update.phase in ("running", "done"):
                sys.stderr.write(f"{task}: {update.describe()}\n")
                sys.stderr.flush()

        result = run_sweep(
            config, precisions, steps=steps[task], repeats=repeats, compile_options=[False, True], progress=progress
        )
        for r in result.rows:
            rows.append(
                {
                    "task": task,
                    "row": r.label,
                    "status": r.status,
                    "reason": r.reason,
                    "ms_per_step": r.step_ms,
                    "samples_per_second": r.samples_per_second,
                    "speedup": r.speedup,
                    "compile_seconds": r.compile_seconds,
                    "loss": r.loss,
                    "threads": r.threads,
                    "reference": result.reference,
                }
            )
    return rows


def memory_one(checkpointed: bool) -> dict:
    """One forward + backward of the larger recommender: peak RSS growth over the set-up process's RSS."""
    import torch

    from core.engine import compiling
    from core.tasks import create_task

    torch.manual_seed(0)
    task = create_task("recommender", MEMORY_OPTIONS)
    data = task.load_data("", seed=0)
    model = task.build_model(data.info)
    if checkpointed:
        compiling.checkpoint_blocks(compiling.checkpointable_blocks(task, model))
    batch = {key: value[:MEMORY_BATCH].clone() for key, value in data.train.items()}
    del data
    import gc

    gc.collect()
    from core.devices import PeakMemory

    with PeakMemory(torch.device("cpu")) as meter:  # the peak (VmHWM) from here: set-up peaks do not count
        loss = task.loss(model, batch)
        loss.backward()
    before, peak = meter.reading.start_bytes, meter.reading.peak_bytes
    return {
        "checkpointed": checkpointed,
        "rss_before": before,
        "peak": peak,
        "growth": peak - before,
        "loss": float(loss),
    }


def memory_rows() -> list[dict]:
    rows = []
    for flag in ("0", "1"):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-one", flag], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="tiny,recommender")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument(
        "--steps",
        default="tiny=1000,recommender=10",
        help="optimizer steps per timed window, per task (TASK=N,...) or for all (N); pick them so "
        "a window lasts seconds",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--compile-mode", default="default")
    parser.add_argument("-o", dest="options", action="append", default=[], metavar="TASK:KEY=VALUE")
    parser.add_argument("--memory", action="store_true", help="also activation checkpointing's memory")
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--memory-one", choices=("0", "1"), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.memory_one is not None:
        print(json.dumps(memory_one(args.memory_one == "1")))
        return 0
    options: dict[str, dict] = {}
    for item in args.options:
        task, setting = item.split(":", 1)
        key, value = setting.split("=", 1)
        options.setdefault(task, {})[key] = json.loads(value) if value[:1].isdigit() else value
    tasks = args.tasks.split(",")
    if "=" in args.steps:
        steps = {task: int(n) for task, n in (item.split("=") for item in args.steps.split(","))}
    else:
        steps = dict.fromkeys(tasks, int(args.steps))
    speed = (
        []
        if args.memory_only
        else speed_rows(
            tasks, args.precisions.split(","), steps, args.repeats, args.threads, args.compile_mode, options
        )
    )
    memory = memory_rows() if args.memory or args.memory_only else []
    if args.json:
        print(json.dumps({"speed": speed, "memory": memory}))
        return 0
    if speed:
        print(f"{'task':<12} {'row':<24} {'ms/step':>9} {'samples/s':>10} {'vs fp32 eager':>14} {'compile':>9}")
        for r in speed:
            if r["status"] != "ok":
                print(f"{r['task']:<12} {r['row']:<24} {r['status']}: {r['reason']}")
                continue
            speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
            compiled = f"{r['compile_seconds']:.1f} s" if r["compile_seconds"] is not None else "-"
            print(
                f"{r['task']:<12} {r['row']:<24} {r['ms_per_step']:>9.2f} {r['samples_per_second']:>10,.0f} "
                f"{speedup:>14} {compiled:>9}" + (f"  ({r['reason']})" if r["reason"] else "")
            )
        threads = sorted({r["threads"] for r in speed if r["threads"]})
        print(f"CPU threads: {', '.join(map(str, threads)) or '?'}")
    if memory:
        print(f"recommender {MEMORY_OPTIONS} batch {MEMORY_BATCH}: one forward + backward, peak RSS growth")
        for r in memory:
            name = "activation checkpointing" if r["checkpointed"] else "plain"
            print(f"  {name:<25} {r['growth'] / 2**20:8.1f} MiB  (loss {r['loss']:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
