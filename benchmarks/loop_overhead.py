"""The engine as a user sees it (the CLI's samples/s) against a careful hand-written loop, side by side.

The reference is the loop a careful user writes: the task's model and loss, the optimizer the engine uses by
default for the task (one group, plain `torch.optim` with the engine's fused CPU kernel, so that the ratio is
the loop's own cost and not the optimizer's), the training tensors sliced by a `torch.randperm`
reshuffled every epoch (no DataLoader), the loss accumulated on the device and read with `.item()` only every
log interval, timed by wall clock from the first step to a final sync; like the engine by default, it evaluates
on the validation split at the end of every epoch, and leaves that time out (--no-eval: neither side evaluates).
The engine is the real command,
`python -m core.cli train --task T --batch-size B --max-steps S --log-interval L --threads N --json`, and its
own samples/s figure (evaluations and checkpoints are left out of it, as the engine reports). Both run as
fresh processes, the same number of steps (chosen so a window lasts `--seconds`, not a few hundred steps that
warm-up would dominate), the same threads, interleaved ABAB with the order alternating, `--repeats` times per
(batch size, log interval), both pinned to one CPU (--cpu); the table gives the median ratio engine/reference
with its spread, and the load.

    python benchmarks/loop_overhead.py [--batch-sizes 256,4] [--log-intervals 10,1] [--seconds 5] [--repeats 5]
        [--threads 1] [--cpu N] [--task tiny] [--optimizer sgd] [--json]
    python benchmarks/loop_overhead.py --concurrent ...     # also: the CLI and the reference at once on one CPU
    python benchmarks/loop_overhead.py --interleaved ...    # also: engine loop and reference in one process, ABBA
    python benchmarks/loop_overhead.py --profile --batch-sizes 256 --log-intervals 1   # cProfile of the engine
    python benchmarks/loop_overhead.py --baseline /tmp/base   # also the engine of another checkout, interleaved
    python benchmarks/loop_overhead.py --dataset [--workers 0,2] [--samples 65536] ...   # a Dataset task instead

--dataset: the engine trains a user's task whose data is a map-style Dataset (the regression task of
tests/fixtures/user_tasks/dataset_task.py) through its DataLoader, against the minimal loop over a
`DataLoader(train, batch_size, shuffle=True, drop_last=True)` with the engine's loader settings (--workers, 2
batches prefetched per worker, persistent workers, no pinning on the CPU), the same model, AdamW settings,
batch size and threads; as above, separate fresh processes, ABAB, neither side evaluating, the median ratio.

On a shared or virtual machine the speed of the same loop drifts by tens of percent within a second, so separate
runs a few seconds apart give ratios spread over +-20% even pinned to one CPU. Two modes cancel the drift:
--concurrent runs the engine's real CLI (with --events, as the window runs it) and the reference at the same time
on one CPU, so the kernel interleaves them every few milliseconds; the engine's figure is still the CLI's own
samples/s, the reference's is taken over the engine's training window. --interleaved runs the engine's training
loop (a Trainer with the CLI's settings and sink) and the reference in one process, taking turns every ~20 ms in
ABBA order. Both leave evaluation out.

--json: the last stdout line is {"rows": [{"batch_size", "log_interval", "ratio", "low", "high", ...}],
"concurrent": [...], "interleaved": [...], ...} (each present when its mode ran).
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
class ReferenceLoop:
    """The hand-written loop: the task's model and loss, plain `torch.optim`, the training tensors sliced by a
    `torch.randperm` reshuffled every epoch, the loss summed on the device and read once per log interval.
    `run(n)` trains n more steps (epochs carry over between calls), in local variables as a careful user's
    loop would be."""

    def __init__(
        self,
        task_name: str,
        batch_size: int,
        log_interval: int,
        optimizer: str,
        lr: float,
        momentum: float,
        weight_decay: float,
        seed: int = 0,
    ):
        import torch

        from core.tasks import create_task

        self.task = task = create_task(task_name, {})
        torch.manual_seed(seed)
        data = task.load_data("", seed)
        self.train, self.val = dict(data.train), dict(data.val)
        torch.manual_seed(seed)
        self.model = model = task.build_model(data.info).train()
        # The optimizer kernel the engine uses on the CPU (fused), so that the ratio is the loop's own cost.
        if optimizer == "sgd":
            self.opt = torch.optim.SGD(
                model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay, fused=True
            )
        elif optimizer == "adam":
            self.opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay, fused=True)
        else:
            self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=True)
        self.batch_size, self.log_interval = batch_size, log_interval
        self.rows = next(iter(self.train.values())).shape[0]
        self.per_epoch = self.rows // batch_size
        self.running = torch.zeros(())
        self.losses: list[float] = []
        self.evaluations: list[dict] = []
        self.step = 0
        self.index = self.per_epoch  # the next batch of the epoch: the first call draws an order
        self.perm = None

    def run(self, n: int, evaluate_every_epoch: bool = False) -> float:
        """n more steps; returns the seconds spent evaluating at epoch ends (for the caller to leave out)."""
        import torch

        task, model, opt, train = self.task, self.model, self.opt, self.train
        batch_size, log_interval, running, losses = self.batch_size, self.log_interval, self.running, self.losses
        left_out = 0.0
        while n > 0:
            if self.index == self.per_epoch:  # a new epoch, after evaluating the last one (as the engine does)
                if evaluate_every_epoch and self.step:
                    began = time.perf_counter()
                    model.eval()
                    with torch.no_grad():
                        self.evaluations.append(task.evaluate(model, self.val, batch_size))
                    model.train()
                    left_out += time.perf_counter() - began
                self.perm, self.index = torch.randperm(self.rows), 0
            perm, first = self.perm, self.index
            count = min(self.per_epoch - first, n)
            step = self.step
            for i in range(first, first + count):
                idx = perm[i * batch_size : (i + 1) * batch_size]
                loss = task.loss(model, {k: v[idx] for k, v in train.items()})
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                running += loss.detach()
                step += 1
                if step % log_interval == 0:
                    losses.append(running.item() / log_interval)  # the one host read of an interval
                    running.zero_()
            self.step, self.index, n = step, first + count, n - count
        return left_out


def reference_rate(
    task_name: str,
    batch_size: int,
    steps: int,
    log_interval: int,
    threads: int,
    optimizer: str,
    lr: float,
    momentum: float,
    weight_decay: float,
    seed: int = 0,
    evaluate_every_epoch: bool = True,
) -> dict:
    """The hand-written loop (run in its own process by `--reference`). Returns samples/s and seconds."""
    import torch

    torch.set_num_threads(threads)
    loop = ReferenceLoop(task_name, batch_size, log_interval, optimizer, lr, momentum, weight_decay, seed)
    start = time.perf_counter()
    left_out = loop.run(steps, evaluate_every_epoch)
    float(loop.running)  # everything queued is done before the clock stops
    seconds = time.perf_counter() - start - left_out
    return {"samples_per_second": steps * batch_size / seconds, "seconds": seconds, "last_loss": loop.losses[-1]}


def run_reference(args, batch_size: int, steps: int, log_interval: int, optimizer: str) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--reference",
        "--task",
        args.task,
        "--batch-sizes",
        str(batch_size),
        "--log-intervals",
        str(log_interval),
        "--steps",
        str(steps),
        "--threads",
        str(args.threads),
        "--optimizer",
        optimizer,
        *(["--no-eval"] if args.no_eval else []),
    ]
    return _last_json(
        subprocess.run(cmd, capture_output=True, text=True, check=True, env=_env(args), preexec_fn=_pin(args)).stdout
    )


# ----------------------------------------------------------------------------------------------- dataset
DATASET_TASK = f"{ROOT / 'tests' / 'fixtures' / 'user_tasks' / 'dataset_task.py'}:RegressionDatasetTask"


def dataset_reference_rate(
    batch_size: int, steps: int, log_interval: int, threads: int, workers: int, samples: int, seed: int = 0
) -> dict:
    """The hand-written loop over the Dataset task's DataLoader (run in its own process by `--dataset-reference`):
    reshuffled every epoch, the loss summed on the device and read once per log interval, timed from before the
    first batch (the workers' start) to a final sync, as the engine's clock runs."""
    import dataclasses

    import torch
    from torch.utils.data import DataLoader

    from core.config import RunConfig
    from core.tasks.user_tasks import load_task

    torch.set_num_threads(threads)
    task_class = load_task(DATASET_TASK)
    settings = {**dataclasses.asdict(RunConfig()), **task_class.defaults}
    task = task_class({"samples": samples})
    torch.manual_seed(seed)
    data = task.load_data("", seed)
    torch.manual_seed(seed)
    model = task.build_model(data.info).train()
    opt = torch.optim.AdamW(
        model.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"], fused=True
    )  # the engine's CPU optimizer kernel
    extra = {"persistent_workers": True, "prefetch_factor": 2} if workers else {}
    loader = DataLoader(data.train, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=workers, **extra)
    running, losses, step = torch.zeros(()), [], 0
    start = time.perf_counter()
    while step < steps:
        for batch in loader:
            loss = task.loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.detach()
            step += 1
            if step % log_interval == 0:
                losses.append(running.item() / log_interval)
                running.zero_()
            if step == steps:
                break
    float(running)
    seconds = time.perf_counter() - start
    return {"samples_per_second": steps * batch_size / seconds, "seconds": seconds, "last_loss": losses[-1]}


def measure_dataset(args, folder: Path, batch_sizes: list[int], intervals: list[int]) -> list[dict]:
    """Engine (the CLI on the Dataset task) against dataset_reference_rate, per (workers, batch size, interval)."""
    print(
        f"dataset task {DATASET_TASK.rsplit('/', 1)[-1]} ({args.samples:,} rows)  threads {args.threads}  "
        f"repeats {args.repeats}  window ~{args.seconds:g} s  "
        f"{f'pinned to cpu {args.cpu}' if args.cpu >= 0 else 'not pinned'}  load {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    def reference(workers: int, batch_size: int, steps: int, interval: int) -> dict:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--dataset-reference",
            "--workers",
            str(workers),
            "--samples",
            str(args.samples),
            "--batch-sizes",
            str(batch_size),
            "--log-intervals",
            str(interval),
            "--steps",
            str(steps),
            "--threads",
            str(args.threads),
        ]
        return _last_json(
            subprocess.run(
                cmd, capture_output=True, text=True, check=True, env=_env(args), preexec_fn=_pin(args)
            ).stdout
        )

    def engine(workers: int, batch_size: int, steps: int, interval: int, out: Path) -> dict:
        cmd = [
            sys.executable,
            "-m",
            "core.cli",
            "train",
            "--task",
            DATASET_TASK,
            "-o",
            f"samples={args.samples}",
            "--batch-size",
            str(batch_size),
            "--max-steps",
            str(steps),
            "--log-interval",
            str(interval),
            "--threads",
            str(args.threads),
            "--num-workers",
            str(workers),
            "--device",
            "cpu",
            "--precision",
            "fp32",
            "--out",
            str(out),
            "--json",
            "--eval-interval",
            "1000000000",
            "--keep-best",
            "0",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=_env(args), preexec_fn=_pin(args))
        if done.returncode:
            raise SystemExit(f"engine failed ({done.returncode}): {done.stderr[-2000:]}")
        return _last_json(done.stdout)

    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        for batch_size in batch_sizes:
            for interval in intervals:
                steps = args.steps
                if not steps:
                    probe = reference(workers, batch_size, 300, interval)
                    steps = max(interval, int(args.seconds / (probe["seconds"] / 300)) // interval * interval)
                ref, eng = [], []
                for repeat in range(args.repeats):
                    sides = ("reference", "engine") if repeat % 2 == 0 else ("engine", "reference")
                    for side in sides:
                        if side == "reference":
                            ref.append(reference(workers, batch_size, steps, interval)["samples_per_second"])
                        else:
                            out = folder / f"dataset-w{workers}-b{batch_size}-l{interval}-{repeat}"
                            eng.append(engine(workers, batch_size, steps, interval, out)["samples_per_second"])
                ratios = [e / r for e, r in zip(eng, ref, strict=True)]
                row = {
                    "workers": workers,
                    "batch_size": batch_size,
                    "log_interval": interval,
                    "steps": steps,
                    "reference": statistics.median(ref),
                    "engine": statistics.median(eng),
                    "ratio": statistics.median(ratios),
                    "low": min(ratios),
                    "high": max(ratios),
                    "reference_runs": ref,
                    "engine_runs": eng,
                }
                rows.append(row)
                print(
                    f"  workers {workers}  batch {batch_size:>4}  log every {interval:>3}  {steps:>6} steps  "
                    f"reference {row['reference']:>9,.0f}/s  engine {row['engine']:>9,.0f}/s  ratio "
                    f"{row['ratio']:.3f} [{row['low']:.3f}-{row['high']:.3f}]",
                    flush=True,
                )
    return rows


# ----------------------------------------------------------------------------------------------- engine
def run_engine(
    args, batch_size: int, steps: int, log_interval: int, optimizer: str, out: Path, root: Path = ROOT
) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "core.cli",
        "train",
        "--task",
        args.task,
        "--batch-size",
        str(batch_size),
        "--max-steps",
        str(steps),
        "--log-interval",
        str(log_interval),
        "--threads",
        str(args.threads),
        "--optimizer",
        optimizer,
        "--device",
        "cpu",
        "--precision",
        "fp32",
        "--out",
        str(out),
        "--json",
        *(["--eval-interval", "1000000000", "--keep-best", "0"] if args.no_eval else []),
    ]
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=_env(args, root), preexec_fn=_pin(args))
    if done.returncode:
        raise SystemExit(f"engine failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = _last_json(done.stdout)
    return {"samples_per_second": summary["samples_per_second"], "wall": time.perf_counter() - began}


def _pin(args):
    """Both sides on the same CPU (--cpu): on a shared or virtual machine the CPUs are not equally fast (here
    one measured 2x slower than the other at times), and a process the scheduler moves mid-window takes that
    unevenness into its figure. None where there is no affinity call, or with --cpu -1."""
    if args.cpu < 0 or not hasattr(os, "sched_setaffinity"):
        return None
    cpu = args.cpu

    def pin():
        os.sched_setaffinity(0, {cpu})

    return pin


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


# ----------------------------------------------------------------------------------------------- concurrent
def reference_until_stopped(
    task_name: str,
    batch_size: int,
    log_interval: int,
    threads: int,
    optimizer: str,
    lr: float,
    momentum: float,
    weight_decay: float,
) -> None:
    """`--reference-until-stopped`: the reference trains (no evaluation) until SIGTERM, noting (monotonic time,
    step) every log interval (at least every 10 steps), then prints the notes as one JSON line."""
    import signal

    import torch

    torch.set_num_threads(threads)
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    loop = ReferenceLoop(task_name, batch_size, log_interval, optimizer, lr, momentum, weight_decay)
    loop.run(200)
    print("ready", flush=True)
    every = max(log_interval, 10 // log_interval * log_interval)
    marks = [(time.monotonic(), loop.step)]
    while not stopped:
        loop.run(every)
        float(loop.running)
        marks.append((time.monotonic(), loop.step))
    print(json.dumps(marks), flush=True)


def concurrent(args, batch_size: int, steps: int, log_interval: int, optimizer: str, out: Path) -> dict:
    """One paired run: the reference and the engine's real CLI (`--events`, its metrics.jsonl followed, no
    evaluation) at once, pinned to the same CPU, so the kernel's scheduler interleaves them every few
    milliseconds and both see the same moments of the machine. The reference starts first and runs until the engine is done; its rate is taken over the
    engine's training window (from the engine's first step event, less its elapsed time, to its last), on the
    system-wide monotonic clock both processes read. The engine's figure is the CLI's own samples/s. Each
    side has about half the CPU: the figures are half a lone run's, their ratio is what it compares."""
    reference = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--reference-until-stopped",
            "--task",
            args.task,
            "--batch-sizes",
            str(batch_size),
            "--log-intervals",
            str(log_interval),
            "--threads",
            str(args.threads),
            "--optimizer",
            optimizer,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(args),
        preexec_fn=_pin(args),
    )
    try:
        if reference.stdout.readline().strip() != "ready":
            raise SystemExit(f"reference failed: {reference.stderr.read()[-2000:]}")
        cmd = [
            sys.executable,
            "-m",
            "core.cli",
            "train",
            "--task",
            args.task,
            "--batch-size",
            str(batch_size),
            "--max-steps",
            str(steps),
            "--log-interval",
            str(log_interval),
            "--threads",
            str(args.threads),
            "--optimizer",
            optimizer,
            "--device",
            "cpu",
            "--precision",
            "fp32",
            "--out",
            str(out),
            "--events",
            "--json",
            "--eval-interval",
            "1000000000",
            "--keep-best",
            "0",
        ]
        first = last = None
        summary = None
        with subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=_env(args),
            preexec_fn=_pin(args),
        ) as engine:
            from core.engine.follow import MetricsFollower

            follower = MetricsFollower.of_run_start(json.loads(engine.stdout.readline() or "{}"))
            if follower is None:
                raise SystemExit(f"engine failed ({engine.wait()})")
            with follower:  # the run's events: metrics.jsonl from its RunStarted on
                for line in follower.lines(deadline=time.monotonic() + 3600):
                    arrived, record = time.monotonic(), line.record
                    if record.get("event") == "StepMetrics":
                        if first is None:
                            first = (arrived - record["elapsed_seconds"], record["step"])
                        last = (arrived, record["step"])
            summary = json.loads(engine.stdout.read().strip().splitlines()[-1])  # --json
        if engine.returncode or summary is None or first is None:
            raise SystemExit(f"engine failed ({engine.returncode})")
    finally:
        reference.send_signal(subprocess.signal.SIGTERM)
        tail, _ = reference.communicate(timeout=60)
    marks = json.loads(tail.strip().splitlines()[-1])
    began, ended = first[0], last[0]

    def reference_step_at(moment: float) -> float:  # linear between the two notes around `moment`
        for (t0, s0), (t1, s1) in zip(marks, marks[1:]):
            if t0 <= moment <= t1:
                return s0 + (s1 - s0) * (moment - t0) / (t1 - t0) if t1 > t0 else s1
        raise SystemExit("the reference did not span the engine's training window")

    reference_rate = (reference_step_at(ended) - reference_step_at(began)) * batch_size / (ended - began)
    return {
        "engine": summary["samples_per_second"],
        "reference": reference_rate,
        "ratio": summary["samples_per_second"] / reference_rate,
    }


def measure_concurrent(args, folder: Path, batch_sizes: list[int], intervals: list[int], optimizer: str) -> list:
    print(
        f"concurrent: the engine's CLI and the reference at once on cpu {args.cpu} (each ~half of it), "
        f"{args.repeats} pairs per row, no evaluation, load {os.getloadavg()[0]:.2f}:",
        flush=True,
    )
    rows = []
    for batch_size in batch_sizes:
        for interval in intervals:
            steps = args.steps
            if not steps:  # a window of ~2x --seconds: each side has about half the CPU
                probe = run_reference(args, batch_size, 400, interval, optimizer)
                steps = max(interval, int(2 * args.seconds / (probe["seconds"] / 400)) // interval * interval)
            pairs = [
                concurrent(
                    args,
                    batch_size,
                    steps,
                    interval,
                    optimizer,
                    folder / f"concurrent-b{batch_size}-l{interval}-{repeat}",
                )
                for repeat in range(args.repeats)
            ]
            ratios = [pair["ratio"] for pair in pairs]
            row = {
                "batch_size": batch_size,
                "log_interval": interval,
                "steps": steps,
                "engine": statistics.median(p["engine"] for p in pairs),
                "reference": statistics.median(p["reference"] for p in pairs),
                "ratio": statistics.median(ratios),
                "low": min(ratios),
                "high": max(ratios),
                "runs": pairs,
            }
            rows.append(row)
            print(
                f"  batch {batch_size:>4}  log every {interval:>3}  {steps:>6} steps  reference "
                f"{row['reference']:>9,.0f}/s  engine {row['engine']:>9,.0f}/s (CLI)  ratio {row['ratio']:.3f} "
                f"[{row['low']:.3f}-{row['high']:.3f}]",
                flush=True,
            )
    return rows


# ----------------------------------------------------------------------------------------------- interleaved
def interleaved(args, batch_size: int, log_interval: int, optimizer: str) -> dict:
    """The engine's training loop and the reference in one process, taking turns every ~--chunk-seconds in
    ABBA order (engine, reference, reference, engine, ...), so both see the same moments of a machine whose
    speed drifts by tens of percent within seconds; the order cancels the edge a chunk gets from coming second.
    The engine is a Trainer with the CLI's settings and a sink like the CLI's (progress lines to a pipe);
    neither side evaluates. Returns the ratio of the sides' total chunk times and the spread of the per-round
    ratios."""
    import io

    import torch

    from core.cli.train import ProgressReporter
    from core.config import RunConfig
    from core.engine.trainer import Trainer

    torch.set_num_threads(args.threads)
    _, lr, momentum, weight_decay = task_defaults(args.task, optimizer)
    reference = ReferenceLoop(args.task, batch_size, log_interval, optimizer, lr, momentum, weight_decay)
    reference.run(200)
    began = time.perf_counter()
    reference.run(400)
    per_step = (time.perf_counter() - began) / 400
    chunk = max(log_interval, int(args.chunk_seconds / per_step) // log_interval * log_interval)
    rounds = max(2, int(args.seconds / (2 * chunk * per_step)))  # each side trains ~--seconds in all
    warm = 4  # engine chunks before the first timed one (the reference warmed up above)
    folder = Path(tempfile.mkdtemp(prefix="amp-interleaved-"))
    cfg = RunConfig.for_task(
        args.task,
        batch_size=batch_size,
        max_steps=(warm + 2 * rounds) * chunk,
        log_interval=log_interval,
        threads=args.threads,
        optimizer=optimizer,
        device="cpu",
        precision="fp32",
        out_dir=str(folder / "run"),
        eval_interval=10**9,
        keep_best=0,
    )
    reporter = ProgressReporter(enabled=True, live=False, stream=io.StringIO())
    trainer = Trainer(cfg, sink=reporter)
    engine_chunks: list[float] = []
    reference_chunks: list[float] = []
    original = trainer._after_step
    mark = [0.0]

    def after_step(due) -> None:
        original(due)
        if trainer.state.step % chunk:
            return
        now = time.perf_counter()
        done = trainer.state.step // chunk - warm  # timed engine chunks finished
        if done > 0:
            engine_chunks.append(now - mark[0])
        if done % 2 == 1 and trainer.state.step < trainer.total_steps:  # E [R R] E E [R R] E ...
            for _ in range(2):
                began = time.perf_counter()
                reference.run(chunk)
                float(reference.running)
                reference_chunks.append(time.perf_counter() - began)
        mark[0] = time.perf_counter()

    trainer._after_step = after_step
    try:
        ended = trainer.run()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if ended.status != "completed":
        raise SystemExit(f"engine failed: {ended.message}")
    pairs = min(len(engine_chunks), len(reference_chunks)) // 2 * 2
    engine_chunks, reference_chunks = engine_chunks[:pairs], reference_chunks[:pairs]
    rounds_ratio = sorted(
        (reference_chunks[i] + reference_chunks[i + 1]) / (engine_chunks[i] + engine_chunks[i + 1])
        for i in range(0, pairs, 2)
    )
    tenth = max(0, len(rounds_ratio) // 10)
    return {
        "batch_size": batch_size,
        "log_interval": log_interval,
        "chunk_steps": chunk,
        "rounds": pairs // 2,
        "engine_us_per_step": 1e6 * sum(engine_chunks) / (pairs * chunk),
        "reference_us_per_step": 1e6 * sum(reference_chunks) / (pairs * chunk),
        "ratio": sum(reference_chunks) / sum(engine_chunks),
        "low": rounds_ratio[tenth],
        "high": rounds_ratio[-1 - tenth],
    }


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
    cfg = RunConfig.for_task(
        args.task,
        batch_size=batch_size,
        max_steps=steps,
        log_interval=log_interval,
        threads=args.threads,
        optimizer=optimizer,
        device="cpu",
        precision="fp32",
        out_dir=str(folder / "run"),
    )
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
    print(
        f"profile: batch {batch_size}  log interval {log_interval}  {steps} steps  "
        f"{ended.samples_per_second:,.0f} samples/s  {1e6 * batch_size / ended.samples_per_second:.0f} us/step "
        f"(under cProfile)"
    )
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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, the same on both sides")
    parser.add_argument("--optimizer", default="", help="default: the task's default optimizer")
    parser.add_argument(
        "--cpu",
        type=int,
        default=None,
        help="the CPU both sides run on (default: the last this process may use; -1: not pinned)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout (e.g. `git archive HEAD~1 | tar -x -C /tmp/base`): its engine runs too, "
        "interleaved, for a before/after in one run",
    )
    parser.add_argument(
        "--no-eval",
        action="store_true",
        help="no evaluation on either side (default: both evaluate at every epoch's end, as the "
        "engine does by default, and leave that time out of samples/s, as the engine does)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="cProfile the engine in-process instead")
    parser.add_argument(
        "--interleaved",
        action="store_true",
        help="also time the engine's loop against the reference in one process, taking turns every "
        "--chunk-seconds (ABBA): the machine's drift cancels out",
    )
    parser.add_argument("--interleaved-only", action="store_true", help="only the interleaved figures")
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="also run the engine's CLI and the reference at once on one CPU, --repeats pairs: the "
        "kernel interleaves them, so the machine's drift cancels out",
    )
    parser.add_argument("--concurrent-only", action="store_true", help="only the concurrent figures")
    parser.add_argument("--reference-until-stopped", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chunk-seconds", type=float, default=0.1)
    parser.add_argument(
        "--dataset",
        action="store_true",
        help="only the Dataset task through a DataLoader against a loop over the same DataLoader",
    )
    parser.add_argument("--workers", default="0,2", help="--dataset: the DataLoader's worker counts to measure")
    parser.add_argument("--samples", type=int, default=65_536, help="--dataset: the task's rows (80%% train)")
    parser.add_argument("--dataset-reference", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    intervals = [int(n) for n in args.log_intervals.split(",")]
    optimizer, lr, momentum, weight_decay = task_defaults(args.task, args.optimizer or None)
    if args.cpu is None:
        args.cpu = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else -1

    if args.dataset_reference:
        print(
            json.dumps(
                dataset_reference_rate(
                    batch_sizes[0],
                    args.steps,
                    intervals[0],
                    args.threads,
                    int(args.workers.split(",")[0]),
                    args.samples,
                )
            )
        )
        return 0
    if args.dataset:
        folder = Path(tempfile.mkdtemp(prefix="amp-bench-"))
        try:
            rows = measure_dataset(args, folder, batch_sizes, intervals)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if args.json:
            print(json.dumps({"task": DATASET_TASK, "threads": args.threads, "dataset": rows}))
        return 0
    if args.reference_until_stopped:
        reference_until_stopped(
            args.task, batch_sizes[0], intervals[0], args.threads, optimizer, lr, momentum, weight_decay
        )
        return 0
    if args.reference:
        print(
            json.dumps(
                reference_rate(
                    args.task,
                    batch_sizes[0],
                    args.steps,
                    intervals[0],
                    args.threads,
                    optimizer,
                    lr,
                    momentum,
                    weight_decay,
                    evaluate_every_epoch=not args.no_eval,
                )
            )
        )
        return 0
    if args.profile:
        for batch_size in batch_sizes:
            for interval in intervals:
                profile_engine(args, batch_size, interval, args.steps or 3000, optimizer)
        return 0

    results = {}
    folder = Path(tempfile.mkdtemp(prefix="amp-bench-"))
    try:
        if not (args.interleaved_only or args.concurrent_only):
            results["rows"] = measure(args, folder, batch_sizes, intervals, optimizer)
        if args.concurrent or args.concurrent_only:
            results["concurrent"] = measure_concurrent(args, folder, batch_sizes, intervals, optimizer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the engine's run folders (checkpoints, metrics.jsonl)
    if (args.interleaved or args.interleaved_only) and not args.concurrent_only:
        if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {args.cpu})
        print(
            f"in one process, taking turns every ~{args.chunk_seconds:g} s (ABBA), each side ~{args.seconds:g} s "
            f"per row, no evaluation, load {os.getloadavg()[0]:.2f}:",
            flush=True,
        )
        results["interleaved"] = []
        for batch_size in batch_sizes:
            for interval in intervals:
                row = interleaved(args, batch_size, interval, optimizer)
                results["interleaved"].append(row)
                print(
                    f"  batch {batch_size:>4}  log every {interval:>3}  {row['rounds']:>3} rounds of "
                    f"{row['chunk_steps']} steps  reference {row['reference_us_per_step']:4.0f} us/step  engine "
                    f"{row['engine_us_per_step']:4.0f} us/step  ratio {row['ratio']:.3f} "
                    f"[{row['low']:.3f}-{row['high']:.3f}]",
                    flush=True,
                )
    if args.json:
        print(json.dumps({"task": args.task, "optimizer": optimizer, "threads": args.threads, **results}))
    return 0


def measure(args, folder: Path, batch_sizes: list[int], intervals: list[int], optimizer: str) -> list[dict]:
    loads = [os.getloadavg()[0]]
    rows = []
    print(
        f"task {args.task}  optimizer {optimizer}  threads {args.threads}  repeats {args.repeats}  "
        f"window ~{args.seconds:g} s  cpus {os.cpu_count()}  "
        f"{f'pinned to cpu {args.cpu}' if args.cpu >= 0 else 'not pinned'}"
        f"  load {loads[0]:.2f}",
        flush=True,
    )
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
                for side in sides[repeat % len(sides) :] + sides[: repeat % len(sides)]:  # each side leads in turn
                    if side == "reference":
                        rate = run_reference(args, batch_size, steps, interval, optimizer)["samples_per_second"]
                    else:
                        out = folder / f"{side}-b{batch_size}-l{interval}-{repeat}"
                        rate = run_engine(
                            args,
                            batch_size,
                            steps,
                            interval,
                            optimizer,
                            out,
                            args.baseline.resolve() if side == "baseline" else ROOT,
                        )["samples_per_second"]
                    runs[side].append(rate)
                loads.append(os.getloadavg()[0])
            ref = runs["reference"]
            row = {
                "batch_size": batch_size,
                "log_interval": interval,
                "steps": steps,
                "reference": statistics.median(ref),
                "reference_runs": ref,
            }
            text = (
                f"  batch {batch_size:>4}  log every {interval:>3}  {steps:>6} steps  reference "
                f"{row['reference']:>9,.0f}/s ({1e6 * batch_size / row['reference']:4.0f} us/step)"
            )
            for side in sides[1:]:
                ratios = [e / r for e, r in zip(runs[side], ref, strict=True)]  # each pair ran in one round
                rate = statistics.median(runs[side])
                row.update({side: rate, f"{side}_runs": runs[side]})
                row.update(
                    {
                        f"{side}_ratio" if side != "engine" else "ratio": statistics.median(ratios),
                        f"{side}_low" if side != "engine" else "low": min(ratios),
                        f"{side}_high" if side != "engine" else "high": max(ratios),
                    }
                )
                text += (
                    f"  {side} {rate:>9,.0f}/s ({1e6 * batch_size / rate:4.0f} us/step) ratio "
                    f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
                )
            rows.append(row)
            print(text, flush=True)
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} cpus")
    return rows


if __name__ == "__main__":
    sys.exit(main())
