"""Issue 43: the recommender trained on the CPU keeps a flat resident memory in bf16 as in fp32.

oneDNN caches one primitive (and its scratchpad) per shape; the loss's matmuls take the batch's real positions,
a different count almost every step, so a bf16 run on a CPU whose bf16 matmuls go through oneDNN (AVX512-BF16,
AMX) grew by megabytes a step. The loss now rounds the count up to a ladder (task.position_bucket). Each mode
below trains in its own process through the real Trainer (--threads, no evaluation), sampling RSS (psutil)
every --every steps, and counts the distinct row counts reaching the output matmul:

    fp32, bf16      the task as it is
    bf16-exact      the count itself as the size (the code before the fix: position_bucket(n, most) = n)

--onednn also runs each loss's (rows x d) @ (d x catalogue) in float32 through oneDNN's inner product
(torch.ops.mkldnn._linear_pointwise), which oneDNN serves on any x86 CPU, AVX2 included: on a CPU whose plain
bf16 matmul is not oneDNN's, it shows what the primitive cache does with the shapes the loss produces.

    python benchmarks/cpu_memory_flat.py [--steps 500] [--threads 1] [--options d_model=32,layers=1]
        [--modes fp32,bf16,bf16-exact] [--onednn] [--json]

Slope: least squares of RSS on step over the samples after the first 10% of steps (warm-up), MiB per 1,000
steps; flat when below --flat MiB / 1,000 steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def number(text: str):
    """An option's value: an int or a float where it reads as one, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def child(args) -> dict:
    import psutil
    import torch

    from core.config import RunConfig
    from core.engine.events import StepMetrics
    from core.engine.trainer import Trainer
    from core.tasks.recommender import task as recommender

    torch.set_num_threads(args.threads)
    if args.mode.endswith("-exact"):
        recommender.position_bucket = lambda count, most: count
    shapes: set[int] = set()
    full = recommender.chunked_softmax_cross_entropy

    def loss(hidden, table, target, *a, **k):
        shapes.add(hidden.shape[0])
        if args.onednn:
            torch.ops.mkldnn._linear_pointwise(hidden.detach().float(), table.detach().float(), None, "none", [], "")
        return full(hidden, table, target, *a, **k)

    recommender.chunked_softmax_cross_entropy = loss
    process, samples = psutil.Process(), []

    def sink(event) -> None:
        if isinstance(event, StepMetrics):
            samples.append((event.step, process.memory_info().rss / 2**20))

    options = dict(o.split("=", 1) for o in args.options.split(",") if o)
    config = RunConfig.for_task(
        "recommender",
        task_options={k: number(v) for k, v in {"loss": "full", **options}.items()},
        precision=args.mode.split("-")[0],
        max_steps=args.steps,
        threads=args.threads,
        device="cpu",
        log_interval=args.every,
        eval_interval=10**9,
        keep_best=0,
        out_dir=str(Path(tempfile.mkdtemp(prefix="amp-memflat-")) / "run"),
    )
    Trainer(config, sink=sink).run()
    warm = [s for s in samples if s[0] >= args.steps // 10]
    late = [s for s in samples if s[0] >= args.steps // 2]
    slope = least_squares(warm)
    return {
        "mode": args.mode + ("+onednn" if args.onednn else ""),
        "steps": samples[-1][0],
        "first_mib": round(samples[0][1]),
        "warm_mib": round(warm[0][1]),
        "last_mib": round(samples[-1][1]),
        "slope_mib_per_1000": round(slope * 1000, 1),
        "late_slope_mib_per_1000": round(least_squares(late) * 1000, 1),  # the second half: still growing?
        "shapes": len(shapes),
        "flat": abs(slope * 1000) < args.flat,
    }


def least_squares(samples: list[tuple[int, float]]) -> float:
    """MiB per step."""
    n = len(samples)
    mean_x, mean_y = sum(s[0] for s in samples) / n, sum(s[1] for s in samples) / n
    spread = sum((x - mean_x) ** 2 for x, _ in samples)
    return sum((x - mean_x) * (y - mean_y) for x, y in samples) / max(1e-9, spread)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--every", type=int, default=10, help="steps between RSS samples")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--options", default="", help="task options, e.g. d_model=32,layers=1")
    parser.add_argument("--modes", default="fp32,bf16,bf16-exact")
    parser.add_argument("--onednn", action="store_true", help="also run each loss's shape through oneDNN")
    parser.add_argument("--flat", type=float, default=50.0, help="MiB / 1,000 steps below which a run is flat")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--mode", help=argparse.SUPPRESS)  # one mode, in a child process
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(child(args)))
        return
    rows = []
    for mode in args.modes.split(","):
        flags = [f"--{k}={getattr(args, k)}" for k in ("steps", "every", "threads", "options", "flat")]
        command = [sys.executable, __file__, f"--mode={mode}", *flags] + (["--onednn"] * args.onednn)
        out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        r = rows[-1]
        print(
            f"{r['mode']:>18}: {r['steps']} steps, RSS {r['first_mib']} -> {r['warm_mib']} (10%) -> "
            f"{r['last_mib']} MiB, slope {r['slope_mib_per_1000']:+.1f} MiB/1000 steps "
            f"({r['late_slope_mib_per_1000']:+.1f} over the second half), "
            f"{r['shapes']} loss shapes, {'flat' if r['flat'] else 'GROWING'}",
            flush=True,
        )
    if args.json:
        print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
