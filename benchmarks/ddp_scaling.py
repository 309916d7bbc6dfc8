"""Throughput of N DDP processes vs 1 on the same job at the same global batch (torchrun, gloo on CPU).

    python benchmarks/ddp_scaling.py [--task recommender] [--nproc 2] [--global-batch 128] [--steps 60] [--json]

Each measurement is a full `amp-console train` run; the figure is the engine's own training throughput
(samples/s over the timed steps, setup excluded). 1-process and N-process runs alternate; medians are compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile


def run(
    task: str, nproc: int, batch: int, steps: int, options: list[str], device: str = "cpu", precision: str = "fp32"
) -> float:
    """Samples/s of one `amp-console train` run on `nproc` processes (batch is per process)."""
    out = tempfile.mkdtemp(prefix="amp-ddp-")
    command = [
        sys.executable,
        "-m",
        "core.cli",
        "train",
        "--task",
        task,
        "--device",
        device,
        "--precision",
        precision,
        "--batch-size",
        str(batch),
        "--max-steps",
        str(steps),
        "--log-interval",
        "10",
        "--eval-interval",
        "1000000000",
        "--out",
        out,
        "--json",
        *[f"-o{o}" for o in options],
    ]
    if nproc > 1:
        command += ["--nproc", str(nproc)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"run failed: {result.stderr.strip().splitlines()[-1]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["samples_per_second"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="recommender")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--option", "-o", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    single, multi = [], []
    for _ in range(args.repeats):
        single.append(run(args.task, 1, args.global_batch, args.steps, args.option))
        multi.append(run(args.task, args.nproc, args.global_batch // args.nproc, args.steps, args.option))
    s, m = statistics.median(single), statistics.median(multi)
    print(f"task {args.task}, global batch {args.global_batch}, {args.steps} steps, {args.repeats} repeats")
    print(f"  1 process   {s:>12,.0f} samples/s  (runs: {', '.join(f'{x:,.0f}' for x in single)})")
    print(f"  {args.nproc} processes {m:>12,.0f} samples/s  (runs: {', '.join(f'{x:,.0f}' for x in multi)})")
    print(f"  ratio {args.nproc}-process / 1-process = {m / s:.2f}")
    if args.json:
        print(
            json.dumps(
                {
                    "task": args.task,
                    "nproc": args.nproc,
                    "global_batch": args.global_batch,
                    "single_samples_per_second": s,
                    "multi_samples_per_second": m,
                    "ratio": m / s,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
