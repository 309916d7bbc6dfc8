"""Each precision choice beyond fp32 against fp32 on the built-in tasks and a user task (docs/examples/digits_task.py),
on this machine's device (on a CPU fp8 is emulated: AMP_FP8_EMULATE=1 is set): the same task, seed, data and steps,
the Trainer's own run; the validation loss at the end (the final training loss where the task reports none) per
seed, and its relative difference from fp32's. adamw8bit is compared with fp32 AdamW.

    python benchmarks/low_precision_parity.py [--steps 200] [--seeds 0,1] [--tasks tiny,digits]
        [--modes bf16-pure,fp8,adamw8bit] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DIGITS = str(ROOT / "docs" / "examples" / "digits_task.py") + ":DigitsTask"
MODES = {"bf16-pure": {"precision": "bf16-pure"}, "fp8": {"precision": "fp8"}, "adamw8bit": {"optimizer": "adamw8bit"}}
OPTIONS = {  # small enough for minutes on a CPU; layers whose sizes fp8 and 8-bit state take
    "tiny": {"hidden": 512},
    "recommender": {"d_model": 32, "layers": 1, "heads": 2, "items": 500, "interactions": 20000},
    "ranking": {"hidden": 64, "queries": 1000, "features": 32},
    "sentiment": {"dim": 32, "hidden": 32, "buckets": 1 << 14, "max_tokens": 64, "reviews": 4000},
    "digits": {},
}


def end_loss(config) -> float:
    from core.engine.trainer import train

    ended = train(config)
    if ended.status != "completed":
        raise SystemExit(f"{config.task} {config.precision} {config.optimizer}: {ended.message}")
    return float(ended.metrics.get("loss", ended.final_loss))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default=",".join(OPTIONS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", default="0,1")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("AMP_FP8_EMULATE", "1")
    from core.config import RunConfig
    from core.tasks import add_task

    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{'task':12} {'mode':10} {'fp32 loss':>10} {'its loss':>10} {'difference (per seed)':>24}")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="amp-parity-") as folder:
        for task in args.tasks.split(","):
            name = add_task(DIGITS).name if task == "digits" else task
            base = {"device": args.device, "max_steps": args.steps, "threads": 1, "task_options": OPTIONS[task]}

            def loss(seed: int, task=task, name=name, base=base, **settings) -> float:
                out = Path(folder) / f"{task}-{seed}-{'-'.join(map(str, settings.values()))}"
                return end_loss(RunConfig.for_task(name, **base, **settings, seed=seed, out_dir=str(out)))

            reference = {seed: loss(seed, precision="fp32", optimizer="adamw") for seed in seeds}
            for mode in args.modes.split(","):
                losses = {
                    seed: loss(seed, **{"precision": "fp32", "optimizer": "adamw", **MODES[mode]}) for seed in seeds
                }
                differences = [losses[s] / reference[s] - 1 for s in seeds]
                worst = max(worst, *map(abs, differences))
                each = ", ".join(f"{d:+.2%}" for d in differences)
                print(f"{task:12} {mode:10} {statistics.mean(reference.values()):>10.4f} "
                      f"{statistics.mean(losses.values()):>10.4f} {each:>24}", flush=True)  # fmt: skip
    print(f"largest difference from fp32: {worst:.2%} ({args.steps} steps, seeds {args.seeds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
