"""The recommender at growing catalogues: set-up, training step per loss, evaluation and peak memory, per size.

Each catalogue size runs in a fresh process (peak memory is the process's own): the task's synthetic data
(`items` lessons, `interactions` events) is loaded as `amp-console train` loads it, popularity baseline
included; then `--steps` training steps (forward, the task's loss, backward, the engine's AdamW as
`amp-console train` builds it) of each of `--loss` (`full`: the softmax over the whole catalogue, chunked;
`sampled`: the sampled softmax over the task's shared negatives), one model, the losses taking turns step by
step on the same batches, each timed after a warm-up step of its own; then one evaluation of the validation
users under the three protocols (the same for every loss: it ranks the whole catalogue). Per loss: the median
step time, real positions per second, and a step's time over (real positions x catalogue), flat when the cost
grows only linearly with the catalogue; with both losses, the full softmax's step time over the sampled one's,
measured side by side.

  train ns / (position x item)   a step's time over (real positions in the batch x catalogue)
  eval ns / (user x item)        the evaluation's time over (validation users x catalogue)

    python benchmarks/large_catalogue.py [--items 10000,100000,1000000] [--loss full,sampled] [--steps 3]
        [--batch-size 32] [--negatives 1024] [--interactions 100000] [--threads 1] [--json]

The default sizes reach 1M items, which a 24 GB machine must start, train and evaluate (peak memory is
reported); a CPU step of the full softmax at 1M items takes seconds, so steps are few.
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


LOSSES = ("full", "sampled")


def measure(
    items: int,
    steps: int,
    batch_size: int,
    interactions: int,
    max_len: int,
    threads: int,
    losses: tuple[str, ...],
    negatives: int,
    evaluate: bool = True,
) -> dict:
    """One catalogue size, in this process: every loss of `losses` on one model, taking turns step by step."""
    import numpy as np
    import torch

    from core.config import RunConfig
    from core.data.batching import EpochBatches
    from core.engine.optimizers import build_optimizer
    from core.tasks import create_task

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    options = {
        "items": items,
        "interactions": interactions,
        "max_len": max_len,
        "loss": losses[0],
        "sampled_negatives": negatives,
    }
    task = create_task("recommender", options)
    start = time.perf_counter()
    data = task.load_data("", 0)
    load_seconds = time.perf_counter() - start
    model = task.build_model(data.info)
    device = torch.device("cpu")
    # the optimizer `amp-console train` builds for the task (its AdamW, its weight-decay groups, fused)
    optimizer = build_optimizer(model, RunConfig.for_task("recommender", task_options=options, device="cpu"), device)
    batches = EpochBatches(data.train, batch_size, 0, device)
    order = batches.order(0)
    seconds: dict[str, list[float]] = {loss: [] for loss in losses}
    positions: dict[str, int] = dict.fromkeys(losses, 0)
    for index in range(steps + 1):  # each loss's first step warms up and is not timed
        batch = batches.batch(order, index % batches.batches_per_epoch)
        turn = losses if index % 2 == 0 else losses[::-1]  # which loss goes first alternates
        for loss_name in turn:
            task.opts["loss"] = loss_name
            begin = time.perf_counter()
            loss = task.loss(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            float(loss.detach())
            if index:
                seconds[loss_name].append(time.perf_counter() - begin)
                positions[loss_name] += int((batch["target"] > 0).sum())
    per_loss = {}
    for loss_name in losses:
        step = float(np.median(seconds[loss_name]))
        mean_positions = positions[loss_name] / steps
        per_loss[loss_name] = {
            "step_ms": 1e3 * step,
            "positions_per_second": mean_positions / step,
            "train_ns_per_position_item": 1e9 * step / max(1.0, mean_positions * items),
        }
    row = {
        "items": items,
        "load_seconds": load_seconds,
        "losses": per_loss,
        "batch_size": batch_size,
        "negatives": negatives,
        "steps": steps,
    }
    if "full" in per_loss and "sampled" in per_loss:
        row["full_over_sampled"] = per_loss["full"]["step_ms"] / per_loss["sampled"]["step_ms"]
    if evaluate:
        model.eval()
        begin = time.perf_counter()
        with torch.no_grad():
            metrics = task.evaluate(model, data.val, 512)
        eval_seconds = time.perf_counter() - begin
        users = int(data.val["target"].shape[0])
        row.update(
            {
                "eval_seconds": eval_seconds,
                "eval_users": users,
                "eval_ns_per_user_item": 1e9 * eval_seconds / max(1, users * items),
                "hr@10_full_filtered": metrics.get("hr@10_full_filtered"),
            }
        )
    row["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", default="10000,100000,1000000", help="catalogue sizes, comma-separated")
    parser.add_argument("--loss", default=",".join(LOSSES), help="losses to time, comma-separated: full, sampled")
    parser.add_argument(
        "--steps", type=int, default=3, help="timed training steps per loss and size (after one warm-up each)"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--negatives", type=int, default=1024, help="the sampled softmax's shared negatives")
    parser.add_argument("--interactions", type=int, default=100_000)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads (1: a busy machine makes more threads wait on each other, per op)",
    )
    parser.add_argument("--no-eval", action="store_true", help="skip the evaluation (the same for every loss)")
    parser.add_argument("--json", action="store_true", help="also print the rows as one JSON line at the end")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    args = parser.parse_args(argv)
    losses = tuple(x.strip() for x in args.loss.split(",") if x.strip())
    if not losses or any(loss not in LOSSES for loss in losses):
        parser.error(f"--loss: comma-separated names among {', '.join(LOSSES)}")
    if args.one:
        print(
            json.dumps(
                measure(
                    args.one,
                    args.steps,
                    args.batch_size,
                    args.interactions,
                    args.max_len,
                    args.threads,
                    losses,
                    args.negatives,
                    not args.no_eval,
                )
            )
        )
        return 0
    rows = []
    print(
        f"recommender, {args.interactions:,} interactions, batch {args.batch_size} x {args.max_len} positions, "
        f"{args.steps} steps per loss (median; the losses take turns), sampled: {args.negatives:,} negatives, "
        f"{args.threads} threads"
    )
    print(
        f"{'items':>10} {'loss':>8} {'step ms':>10} {'positions/s':>12} {'train ns/pos*item':>18} "
        f"{'full/sampled':>13} {'set-up s':>9} {'eval s':>8} {'eval ns/user*item':>18} {'peak RSS GB':>12}"
    )
    for items in (int(x) for x in args.items.split(",")):
        command = [
            sys.executable,
            __file__,
            "--one",
            str(items),
            "--steps",
            str(args.steps),
            "--batch-size",
            str(args.batch_size),
            "--interactions",
            str(args.interactions),
            "--max-len",
            str(args.max_len),
            "--threads",
            str(args.threads),
            "--loss",
            ",".join(losses),
            "--negatives",
            str(args.negatives),
        ]
        command += ["--no-eval"] if args.no_eval else []
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(
                f"{items:>10} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
            )
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        for i, (loss_name, cost) in enumerate(row["losses"].items()):
            ratio = f"{row['full_over_sampled']:.1f}x" if i == 0 and "full_over_sampled" in row else ""
            tail = (
                (
                    f"{row['load_seconds']:>9.2f} "
                    + (
                        f"{row['eval_seconds']:>8.2f} {row['eval_ns_per_user_item']:>18.3f} "
                        if "eval_seconds" in row
                        else f"{'-':>8} {'-':>18} "
                    )
                    + f"{row['peak_rss_gb']:>12.2f}"
                )
                if i == 0
                else ""
            )
            print(
                f"{f'{items:,}' if i == 0 else '':>10} {loss_name:>8} {cost['step_ms']:>10.1f} "
                f"{cost['positions_per_second']:>12,.0f} {cost['train_ns_per_position_item']:>18.2f} "
                f"{ratio:>13} {tail}",
                flush=True,
            )
    if args.json:
        print(json.dumps({"rows": rows}))
    return 0 if len(rows) == len(args.items.split(",")) else 1


if __name__ == "__main__":
    sys.exit(main())
