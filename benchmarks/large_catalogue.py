"""The recommender at growing catalogues: set-up, training step, evaluation and peak memory, per size.

Each catalogue size runs in a fresh process (peak memory is the process's own): the task's synthetic data
(`items` lessons, `interactions` events) is loaded as `amp-console train` loads it, popularity baseline
included; then `--steps` training steps of the engine's own loss (the full softmax over the catalogue, chunked)
with AdamW, timed after one warm-up step; then one evaluation of the validation users under the three
protocols. Costs are normalised by the work they scale with, so a flat column means the cost grows only
linearly with the catalogue:

  train ns / (position x item)   a step's time over (real positions in the batch x catalogue)
  eval ns / (user x item)        the evaluation's time over (validation users x catalogue)

    python benchmarks/large_catalogue.py [--items 10000,100000,1000000] [--steps 3] [--batch-size 4]
        [--interactions 100000] [--threads 2] [--json]

The default sizes reach 1M items, which a 24 GB machine must start, train and evaluate (peak memory is
reported); a CPU step at 1M items takes seconds, so steps are few and batches small.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(items: int, steps: int, batch_size: int, interactions: int, max_len: int, threads: int) -> dict:
    """One catalogue size, in this process."""
    import torch

    from core.data.batching import EpochBatches
    from core.tasks import create_task

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    task = create_task("recommender", {"items": items, "interactions": interactions, "max_len": max_len})
    start = time.perf_counter()
    data = task.load_data("", 0)
    load_seconds = time.perf_counter() - start
    model = task.build_model(data.info)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = EpochBatches(data.train, batch_size, 0, torch.device("cpu"))
    order = batches.order(0)
    positions = 0
    elapsed = 0.0
    for index in range(steps + 1):  # the first step warms up and is not timed
        batch = batches.batch(order, index)
        begin = time.perf_counter()
        loss = task.loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        float(loss.detach())
        if index:
            elapsed += time.perf_counter() - begin
            positions += int((batch["target"] > 0).sum())
    model.eval()
    begin = time.perf_counter()
    with torch.no_grad():
        metrics = task.evaluate(model, data.val, 512)
    eval_seconds = time.perf_counter() - begin
    users = int(data.val["target"].shape[0])
    return {
        "items": items, "load_seconds": load_seconds, "step_ms": 1e3 * elapsed / steps,
        "train_ns_per_position_item": 1e9 * elapsed / max(1, positions * items),
        "eval_seconds": eval_seconds, "eval_users": users,
        "eval_ns_per_user_item": 1e9 * eval_seconds / max(1, users * items),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "hr@10_full_filtered": metrics.get("hr@10_full_filtered"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", default="10000,100000,1000000", help="catalogue sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per size (after one warm-up)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--interactions", type=int, default=100_000)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (1: a busy machine makes more threads wait on each other, per op)")
    parser.add_argument("--json", action="store_true", help="also print the rows as one JSON line at the end")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.steps, args.batch_size, args.interactions, args.max_len,
                                 args.threads)))
        return 0
    rows = []
    print(f"recommender, {args.interactions:,} interactions, batch {args.batch_size} x {args.max_len} positions, "
          f"{args.steps} steps, {args.threads} threads")
    print(f"{'items':>10} {'set-up s':>9} {'step ms':>9} {'train ns/pos*item':>18} {'eval s':>8} "
          f"{'eval ns/user*item':>18} {'peak RSS GB':>12}")
    for items in (int(x) for x in args.items.split(",")):
        command = [sys.executable, __file__, "--one", str(items), "--steps", str(args.steps), "--batch-size",
                   str(args.batch_size), "--interactions", str(args.interactions), "--max-len", str(args.max_len),
                   "--threads", str(args.threads)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{items:>10} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{items:>10,} {row['load_seconds']:>9.2f} {row['step_ms']:>9.1f} "
              f"{row['train_ns_per_position_item']:>18.2f} {row['eval_seconds']:>8.2f} "
              f"{row['eval_ns_per_user_item']:>18.3f} {row['peak_rss_gb']:>12.2f}", flush=True)
    if args.json:
        print(json.dumps({"rows": rows}))
    return 0 if len(rows) == len(args.items.split(",")) else 1


if __name__ == "__main__":
    sys.exit(main())
