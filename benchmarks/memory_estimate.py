"""The memory estimate before Start (core.lab.memory_estimate) against the measured peak of a real short run.

Per task, precision mode, optimizer and batch size: `estimate` (one probe step at <= 32 rows, scaled) and
`measure_training_peak` (the Trainer's own optimizer steps at the batch size: what it keeps on the device plus the
allocated peak above it; torch's profiler on the CPU, max_memory_allocated on CUDA), side by side in one process,
and their ratio (the claim: within 0.85-1.15). Tasks: the built-in ones and docs/examples/digits_task.py.

    python benchmarks/memory_estimate.py [--device cpu] [--modes fp32,bf16] [--optimizers adamw,sgd]
        [--batches 64,512] [--tasks tiny,ranking] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DIGITS = str(ROOT / "docs" / "examples" / "digits_task.py") + ":DigitsTask"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default="tiny,recommender,ranking,sentiment,digits")
    parser.add_argument("--modes", default="fp32,bf16")
    parser.add_argument("--optimizers", default="adamw,sgd")
    parser.add_argument("--batches", default="64,512")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from core.config import RunConfig
    from core.lab.memory_estimate import estimate, measure_training_peak
    from core.tasks import add_task
    from core.text import size

    rows = []
    print(f"{'task':12} {'mode':5} {'opt':6} {'batch':>5} {'estimate':>10} {'measured':>10} {'ratio':>6}  breakdown")
    for task in args.tasks.split(","):
        name = add_task(DIGITS).name if task == "digits" else task
        for mode in args.modes.split(","):
            for optimizer in args.optimizers.split(","):
                for batch in map(int, args.batches.split(",")):
                    config = RunConfig(
                        task=name, device=args.device, precision=mode, optimizer=optimizer, batch_size=batch, threads=1
                    )
                    guess = estimate(config)
                    measured = measure_training_peak(config)
                    ratio = guess.total_bytes / measured
                    rows.append(dict(task=task, mode=mode, optimizer=optimizer, batch=batch, ratio=ratio,
                                     estimate=guess.total_bytes, measured=measured, parts=guess.parts))  # fmt: skip
                    print(f"{task:12} {mode:5} {optimizer:6} {batch:>5} {size(guess.total_bytes):>10} "
                          f"{size(measured):>10} {ratio:6.3f}  {guess.breakdown()}", flush=True)  # fmt: skip
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
    print(f"worst ratio {worst['ratio']:.3f} ({worst['task']} {worst['mode']} {worst['optimizer']} {worst['batch']})")
    if args.json:
        print(json.dumps({"rows": rows}))
    return 0 if all(0.85 <= r["ratio"] <= 1.15 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
