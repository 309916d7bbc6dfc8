"""The engine as a user sees it (the CLI's samples/s) against a careful hand-written loop, side by side.

The reference is the loop a careful user writes: the task's model and loss, the optimizer the engine uses by
default for the task (one group, plain `torch.optim`), the training tensors sliced by a `torch.randperm`
reshuffled every epoch (no DataLoader), the loss accumulated on the device and read with `.item()` only every
log interval, timed by wall clock from the first step to a final sync; like the engine by default, it evaluates
on the validation split at the end of every epoch, and leaves that time out (--no-eval: neither side evaluates).
The engine is the real command,
`python -m core.cli train --task T --batch-size B --max-steps S --log-interval L --threads N --json`, and its
own samples/s figure (evaluations and checkpoints are left out of it, as the engine reports). Both run as
fresh processes, the same number of steps (chosen so a window lasts `--seconds`, not a few hundred steps that
warm-up would dominate), the same threads, interleaved ABAB with the order alternating, `--repeats` times per
(batch size, log interval); the table gives the median ratio engine/reference with its spread, and the load.

    python benchmarks/loop_overhead.py [--batch-sizes 256,4] [--log-intervals 10,1] [--seconds 5] [--repeats 3]
        [--threads 1] [--task tiny] [--optimizer sgd] [--json]
    python benchmarks/loop_overhead.py --profile --batch-sizes 256 --log-intervals 1   # cProfile of the engine
    python benchmarks/loop_overhead.py --baseline /tmp/base   # also the engine of another checkout, interleaved

--json: the last stdout line is {"rows": [{"batch_size", "log_interval", "ratio", "low", "high", ...}], ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ----------------------------------------------------------------------------------------------- reference
def reference_rate(task_name: str, batch_size: int, steps: int, log_interval: int, threads: int,
                   optimizer: str, lr: float, momentum: float, weight_decay: float, seed: int = 0,
                   evaluate_every_epoch: bool = True) -> dict:
    """The hand-written loop (run in its own process by `--reference`). Returns samples/s and seconds."""
    import torch

    from core.tasks import create_task

    torch.set_num_threads(threads)
    task = create_task(task_name, {})
    torch.manual_seed(seed)
    data = task.load_data("", seed)
    train = dict(data.train)
    torch.manual_seed(seed)
    model = task.build_model(data.info).train()
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    elif optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    rows = next(iter(train.values())).shape[0]
    per_epoch = rows // batch_size
    val = dict(data.val)
    running = torch.zeros(())
    losses, evaluations = [], []
    start = time.perf_counter()
    left_out = 0.0
    step = 0
    while step < steps:
        perm = torch.randperm(rows)
        for i in range(min(per_epoch, steps - step)):
            idx = perm[i * batch_size:(i + 1) * batch_size]
            loss = task.loss(model, {k: v[idx] for k, v in train.items()})
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.detach()
            step += 1
            if step % log_interval == 0:
                losses.append(running.item() / log_interval)  # the one host read of an interval
                running.zero_()
        if evaluate_every_epoch and step < steps:  # as the engine does by default, its time left out likewise
            began = time.perf_counter()
            model.eval()
            with torch.no_grad():
                evaluations.append(task.evaluate(model, val, batch_size))
            model.train()
            left_out += time.perf_counter() - began
    float(running)  # everything queued is done before the clock stops
    seconds = time.perf_counter() - start - left_out
    return {"samples_per_second": steps * batch_size / seconds, "seconds": seconds, "last_loss": losses[-1]}


def run_reference(args, batch_size: int, steps: int, log_interval: int, optimizer: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--reference", "--task", args.task,
           "--batch-sizes", str(batch_size), "--log-intervals", str(log_interval), "--steps", str(steps),
           "--threads", str(args.threads), "--optimizer", optimizer, *(["--no-eval"] if args.no_eval else [])]
    return _last_json(subprocess.run(cmd, capture_output=True, text=True, check=True, env=_env(args)).stdout)


# ----------------------------------------------------------------------------------------------- engine
def run_engine(args, batch_size: int, steps: int, log_interval: int, optimizer: str, out: Path,
               root: Path = ROOT) -> dict:
    cmd = [sys.executable, "-m", "core.cli", "train", "--task", args.task, "--batch-size", str(batch_size),
           "--max-steps", str(steps), "--log-interval", str(log_interval), "--threads", str(args.threads),
           "--optimizer", optimizer, "--device", "cpu", "--precision", "fp32", "--out", str(out), "--json",
           *(["--eval-interval", "1000000000", "--keep-best", "0"] if args.no_eval else [])]
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=_env(args, root))
    if done.returncode:
        raise SystemExit(f"engine failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = _last_json(done.stdout)
    return {"samples_per_second": summary["samples_per_second"], "wall": time.perf_counter() - began}


def _env(args, root: Path = ROOT) -> dict:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(args.threads)  # both sides alike, whatever the caller's shell says
    env["PYTHONPATH"] = str(root)
    return env


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def task_defaults(task: str, optimizer: str | None) -> tuple[str, float, float, float]:
    from core.config import RunConfig

    cfg = RunConfig.for_task(task, **({"optimizer": optimizer} if optimizer else {}))
    return cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay


# ----------------------------------------------------------------------------------------------- profile
def profile_engine(args, batch_size: int, log_interval: int, steps: int, optimizer: str) -> None:
    """cProfile of the engine's training phase, in-process (a Trainer with the CLI's settings), top by tottime."""
    import cProfile
    import pstats

    import torch

    from core.config import RunConfig
    from core.engine.trainer import Trainer

    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="amp-prof-"))
    cfg = RunConfig.for_task(args.task, batch_size=batch_size, max_steps=steps, log_interval=log_interval,
                             threads=args.threads, optimizer=optimizer, device="cpu", precision="fp32",
                             out_dir=str(folder / "run"))
    trainer = Trainer(cfg)
    original = trainer.train
    profiler = cProfile.Profile()

    def profiled_train():
        profiler.enable()
        try:
            return original()
        finally:
            profiler.disable()

    trainer.train = profiled_train
    try:
        ended = trainer.run()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"profile: batch {batch_size}  log interval {log_interval}  {steps} steps  "
          f"{ended.samples_per_second:,.0f} samples/s  {1e6 * batch_size / ended.samples_per_second:.0f} us/step "
          f"(under cProfile)")
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(args.profile_top)


# ----------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="tiny")
    parser.add_argument("--batch-sizes", "--batch-size", default="256,4")
    parser.add_argument("--log-intervals", "--log-interval", default="10,1")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one timed window")
    parser.add_argument("--steps", type=int, default=0, help="steps per window (default: from --seconds)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, the same on both sides")
    parser.add_argument("--optimizer", default="", help="default: the task's default optimizer")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout (e.g. `git archive HEAD~1 | tar -x -C /tmp/base`): its engine runs too, "
                             "interleaved, for a before/after in one run")
    parser.add_argument("--no-eval", action="store_true",
                        help="no evaluation on either side (default: both evaluate at every epoch's end, as the "
                             "engine does by default, and leave that time out of samples/s, as the engine does)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="cProfile the engine in-process instead")
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    intervals = [int(n) for n in args.log_intervals.split(",")]
    optimizer, lr, momentum, weight_decay = task_defaults(args.task, args.optimizer or None)

    if args.reference:
        print(json.dumps(reference_rate(args.task, batch_sizes[0], args.steps, intervals[0], args.threads,
                                        optimizer, lr, momentum, weight_decay,
                                        evaluate_every_epoch=not args.no_eval)))
        return 0
    if args.profile:
        for batch_size in batch_sizes:
            for interval in intervals:
                profile_engine(args, batch_size, interval, args.steps or 3000, optimizer)
        return 0

    folder = Path(tempfile.mkdtemp(prefix="amp-bench-"))
    try:
        return measure(args, folder, batch_sizes, intervals, optimizer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the engine's run folders (checkpoints, metrics.jsonl)


def measure(args, folder: Path, batch_sizes: list[int], intervals: list[int], optimizer: str) -> int:
    loads = [os.getloadavg()[0]]
    rows = []
    print(f"task {args.task}  optimizer {optimizer}  threads {args.threads}  repeats {args.repeats}  "
          f"window ~{args.seconds:g} s  cpus {os.cpu_count()}  load {loads[0]:.2f}", flush=True)
    for batch_size in batch_sizes:
        for interval in intervals:
            steps = args.steps
            if not steps:  # a short reference run sets the window's steps
                probe = run_reference(args, batch_size, 400, interval, optimizer)
                per_step = probe["seconds"] / 400
                steps = max(interval, int(args.seconds / per_step) // interval * interval)
            runs: dict[str, list[float]] = {"reference": [], "engine": []}
            if args.baseline:
                runs["baseline"] = []
            sides = list(runs)
            for repeat in range(args.repeats):
                for side in sides[repeat % len(sides):] + sides[:repeat % len(sides)]:  # each side leads in turn
                    if side == "reference":
                        rate = run_reference(args, batch_size, steps, interval, optimizer)["samples_per_second"]
                    else:
                        out = folder / f"{side}-b{batch_size}-l{interval}-{repeat}"
                        rate = run_engine(args, batch_size, steps, interval, optimizer, out,
                                          args.baseline.resolve() if side == "baseline" else ROOT)["samples_per_second"]
                    runs[side].append(rate)
                loads.append(os.getloadavg()[0])
            ref = runs["reference"]
            row = {"batch_size": batch_size, "log_interval": interval, "steps": steps,
                   "reference": statistics.median(ref), "reference_runs": ref}
            text = (f"  batch {batch_size:>4}  log every {interval:>3}  {steps:>6} steps  reference "
                    f"{row['reference']:>9,.0f}/s ({1e6 * batch_size / row['reference']:4.0f} us/step)")
            for side in sides[1:]:
                ratios = [e / r for e, r in zip(runs[side], ref, strict=True)]  # each pair ran in one round
                rate = statistics.median(runs[side])
                row.update({side: rate, f"{side}_runs": runs[side]})
                row.update({f"{side}_ratio" if side != "engine" else "ratio": statistics.median(ratios),
                            f"{side}_low" if side != "engine" else "low": min(ratios),
                            f"{side}_high" if side != "engine" else "high": max(ratios)})
                text += (f"  {side} {rate:>9,.0f}/s ({1e6 * batch_size / rate:4.0f} us/step) ratio "
                         f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
            rows.append(row)
            print(text, flush=True)
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} cpus")
    if args.json:
        print(json.dumps({"task": args.task, "optimizer": optimizer, "threads": args.threads, "rows": rows,
                          "load": [min(loads), max(loads)]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
