"""The recommender's training step as the engine runs it against a minimal SASRec a careful user writes, in
positions (non-padded training positions) per second, side by side in one process.

The reference is independent of the task's code but for the data: `nn.Embedding` for the items (0 is padding)
and the positions, a stack of `nn.TransformerEncoderLayer` (pre-norm, GELU, batch_first) under a causal mask
(`is_causal=True`: attention is SDPA's causal call, as in the task's model), the padded positions zeroed after
every block (the timeline mask of SASRec), dropout where the task's model has it (embeddings, attention
weights, after the attention and after the feed-forward; torch's layer's extra one inside the feed-forward is
removed, so both draw the same dropout masks), a final LayerNorm, scores against the tied item embeddings, and
the loss a user writes: the real positions picked with a boolean mask, `F.cross_entropy` over the whole
catalogue. AdamW with the task's learning rate and weight decay, the training windows sliced by a
`torch.randperm` reshuffled every epoch, the loss summed on the device and read once per log interval. Same
d_model, heads, layers, dropout, max_len and batch size as the task's defaults (or the options given), the
same synthetic data (the task's load_data), the same thread count.

The engine is the real run API: a Trainer with the task's default settings (the options and batch size given,
threads fixed to the reference's, no evaluation, nothing else changed) and a sink like the CLI's. The two take
turns in one process every ~--chunk-seconds in ABBA order (engine, reference, reference, engine, ...), so both
see the same moments of a machine whose speed drifts by tens of percent within seconds; --repeats such runs,
each ~--seconds per side. Positions are counted host-side from each side's own batch order (nothing is added to
either step). The table gives each side's positions/s, the ratio engine/reference (total over the run), the
spread of the per-round ratios (10th-90th percentile), and each side's mean loss over its last log interval.

    python benchmarks/recommender_step.py [--seconds 20] [--repeats 3] [--threads 1] [--cpu N]
        [--batch-size 128] [--options d_model=64,layers=2] [--json]
    python benchmarks/recommender_step.py --quick          # a smoke test: a few steps of each, one repeat
    python benchmarks/recommender_step.py --parts          # also the loss and the model alone, each side's
    python benchmarks/recommender_step.py --profile        # torch.profiler of both sides' steps, top ops

--json: the last stdout line is {"rows": [{"repeat", "engine", "reference", "ratio", "low", "high", ...}],
"ratio": median, "parts": {"loss": {...}, "model": {...}} (with --parts)}.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ----------------------------------------------------------------------------------------------- reference
def reference_model(n_items: int, d_model: int, layers: int, heads: int, max_len: int, dropout: float):
    """SASRec as a careful user writes it with torch's own transformer layers."""
    import torch
    from torch import nn

    class SASRec(nn.Module):
        def __init__(self):
            super().__init__()
            self.items = nn.Embedding(n_items + 1, d_model, padding_idx=0)
            self.positions = nn.Embedding(max_len, d_model)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(
                    d_model, heads, 4 * d_model, dropout, activation="gelu", batch_first=True, norm_first=True
                )
                for _ in range(layers)
            )
            for block in self.blocks:  # dropout where the task's model has it: no extra one inside the FFN
                block.dropout = nn.Identity()
            self.norm = nn.LayerNorm(d_model)
            self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(max_len), persistent=False)
            nn.init.normal_(self.items.weight, std=d_model**-0.5)  # SASRec's scale (the task's too)
            nn.init.normal_(self.positions.weight, std=0.02)

        def forward(self, seq: torch.Tensor) -> torch.Tensor:
            length = seq.shape[1]
            timeline = (seq > 0).unsqueeze(-1).float()
            x = self.items(seq) * d_model**0.5 + self.positions.weight[:length]
            x = self.drop(x) * timeline
            mask = self.causal[:length, :length]
            for block in self.blocks:
                x = block(x, src_mask=mask, is_causal=True) * timeline
            return self.norm(x)

    return SASRec()


class ReferenceLoop:
    """The hand-written loop over the task's training windows; `run(n)` trains n more steps (epochs carry over)
    and returns the real positions those steps trained on (counted on the host from the batch order)."""

    def __init__(
        self,
        train: dict,
        n_items: int,
        opts: dict,
        batch_size: int,
        lr: float,
        weight_decay: float,
        log_interval: int,
        seed: int = 0,
    ):
        import torch

        torch.manual_seed(seed)
        self.seq, self.target = train["seq"], train["target"]
        self.real_per_row = (self.target > 0).sum(1)
        self.model = reference_model(
            n_items, opts["d_model"], opts["layers"], opts["heads"], opts["max_len"], opts["dropout"]
        ).train()
        # The engine's CPU optimizer kernel (fused), so that the ratio is the loop's and the task's own cost.
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=weight_decay, fused=True)
        self.batch_size, self.log_interval = batch_size, log_interval
        self.rows = self.seq.shape[0]
        self.per_epoch = self.rows // batch_size
        self.running = torch.zeros(())
        self.losses: list[float] = []
        self.step = 0
        self.index, self.perm = self.per_epoch, None

    def run(self, n: int) -> int:
        import torch
        from torch.nn import functional as F

        model, opt, seq, target = self.model, self.opt, self.seq, self.target
        batch_size, log_interval, running = self.batch_size, self.log_interval, self.running
        table = model.items.weight
        positions = 0
        while n > 0:
            if self.index == self.per_epoch:
                self.perm, self.index = torch.randperm(self.rows), 0
            count = min(self.per_epoch - self.index, n)
            used = self.perm[self.index * batch_size : (self.index + count) * batch_size]
            positions += int(self.real_per_row[used].sum())  # host bookkeeping for the benchmark, not the step
            for i in range(self.index, self.index + count):
                idx = self.perm[i * batch_size : (i + 1) * batch_size]
                s, t = seq[idx], target[idx]
                real = t > 0
                hidden = model(s)[real]
                loss = F.cross_entropy(hidden @ table[1:].t(), t[real] - 1)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                running += loss.detach()
                self.step += 1
                if self.step % log_interval == 0:
                    self.losses.append(running.item() / log_interval)
                    running.zero_()
            self.index, n = self.index + count, n - count
        return positions


# ----------------------------------------------------------------------------------------------- engine
def engine_config(args, steps: int, folder: Path):
    from core.config import RunConfig

    return RunConfig.for_task(
        "recommender",
        task_options=dict(args.task_options),
        batch_size=args.batch_size,
        max_steps=steps,
        threads=args.threads,
        device="cpu",
        out_dir=str(folder / "run"),
        eval_interval=10**9,
        keep_best=0,
    )


def engine_positions(trainer, first: int, last: int, real_per_row) -> int:
    """Real positions of the engine's steps first..last-1, from its own (deterministic) epoch orders."""
    per_epoch, total, cache = trainer.steps_per_epoch, 0, {}
    for step in range(first, last):
        epoch = step // per_epoch
        if epoch not in cache:
            cache[epoch] = trainer.batches.order(epoch).cpu()
        total += int(real_per_row[cache[epoch][step % per_epoch]].sum())
    return total


def interleaved(args, repeat: int) -> dict:
    """One run: the engine's Trainer and the reference taking turns (ABBA), positions/s of each."""
    import torch

    from core.cli.train import ProgressReporter
    from core.config import RunConfig
    from core.engine.trainer import Trainer
    from core.tasks import create_task

    torch.set_num_threads(args.threads)
    cfg0 = RunConfig.for_task("recommender", task_options=dict(args.task_options))
    task = create_task("recommender", cfg0.task_options)
    data = task.load_data("", cfg0.seed)
    opts, log_interval = dict(task.opts), cfg0.log_interval
    reference = ReferenceLoop(
        data.train, data.info["n_items"], opts, args.batch_size, cfg0.lr, cfg0.weight_decay, log_interval, seed=repeat
    )
    reference.run(3)  # warm-up
    began = time.perf_counter()
    reference.run(5)
    per_step = (time.perf_counter() - began) / 5
    chunk = max(1, int(args.chunk_seconds / per_step))
    rounds = max(2, int(args.seconds / (2 * chunk * per_step)))
    warm = 2  # engine chunks before the first timed one
    folder = Path(tempfile.mkdtemp(prefix="amp-recstep-"))
    trainer = Trainer(
        engine_config(args, (warm + 2 * rounds) * chunk + 1, folder),
        sink=ProgressReporter(enabled=True, live=False, stream=io.StringIO()),
    )
    engine_chunks: list[tuple[float, int, int]] = []  # seconds, first step, last step
    reference_chunks: list[tuple[float, int]] = []  # seconds, positions
    mark = [0.0, 0]
    calls = [0]

    def turn() -> None:
        """Between two engine steps, every `chunk` of them: close the engine's chunk, and every other time
        run the reference's two (E [R R] E E [R R] E ...)."""
        step = calls[0]
        now = time.perf_counter()
        done = step // chunk - warm
        if done > 0:
            engine_chunks.append((now - mark[0], mark[1], step))
        if done % 2 == 1:
            for _ in range(2):
                began = time.perf_counter()
                positions = reference.run(chunk)
                float(reference.running)
                reference_chunks.append((time.perf_counter() - began, positions))
        mark[0], mark[1] = time.perf_counter(), step

    body = trainer._optimizer_step  # the engine's own step, with a turn between chunks

    def step_body(*a) -> None:
        if calls[0] % chunk == 0:
            turn()
        calls[0] += 1
        body(*a)

    trainer._optimizer_step = step_body
    try:
        ended = trainer.run()
        if ended.status != "completed":
            raise SystemExit(f"engine failed: {ended.message}")
        real_per_row = (data.train["target"] > 0).sum(1)
        engine = [(s, engine_positions(trainer, a, b, real_per_row)) for s, a, b in engine_chunks]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    pairs = min(len(engine), len(reference_chunks)) // 2 * 2
    engine, ref = engine[:pairs], reference_chunks[:pairs]

    def rate(chunks):
        return sum(p for _, p in chunks) / sum(s for s, _ in chunks)

    rounds_ratio = sorted(rate(engine[i : i + 2]) / rate(ref[i : i + 2]) for i in range(0, pairs, 2))
    tenth = len(rounds_ratio) // 10
    return {
        "repeat": repeat,
        "rounds": pairs // 2,
        "chunk_steps": chunk,
        "engine": rate(engine),
        "reference": rate(ref),
        "ratio": rate(engine) / rate(ref),
        "low": rounds_ratio[tenth],
        "high": rounds_ratio[-1 - tenth],
        "engine_ms_per_step": 1e3 * sum(s for s, _ in engine) / (pairs * chunk),
        "reference_ms_per_step": 1e3 * sum(s for s, _ in ref) / (pairs * chunk),
        "engine_loss": trainer.state.last_loss,  # over its last log interval
        "reference_loss": reference.losses[-1] if reference.losses else float("nan"),
        "steps": trainer.state.step,
        "reference_steps": reference.step,
    }


# ----------------------------------------------------------------------------------------------- profile
def profile_engine(args) -> None:
    """torch.profiler over the engine's steps (a Trainer as above), the top ops by self CPU time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from core.engine.trainer import Trainer

    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="amp-recprof-"))
    steps = args.profile_steps
    trainer = Trainer(engine_config(args, 5 + steps, folder))
    prof = profile(activities=[ProfilerActivity.CPU])
    calls = [0]

    def choose_step_body() -> None:  # the engine's own step; the profiler starts after 5 of them
        Trainer._choose_step_body(trainer)
        body = trainer._step_body

        def step_body(*a) -> None:
            calls[0] += 1
            if calls[0] == 6:
                prof.__enter__()
            body(*a)
            if calls[0] == 5 + steps:
                prof.__exit__(None, None, None)

        trainer._step_body = step_body

    trainer._choose_step_body = choose_step_body
    try:
        trainer.run()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"engine: {steps} steps")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile_top))
    data, opts, cfg = trainer.data, dict(trainer.task.opts), trainer.cfg
    reference = ReferenceLoop(
        data.train, data.info["n_items"], opts, cfg.batch_size, cfg.lr, cfg.weight_decay, cfg.log_interval
    )
    reference.run(5)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        reference.run(steps)
    print(f"reference: {steps} steps")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile_top))


# ----------------------------------------------------------------------------------------------- parts
def parts(args) -> dict:
    """The two halves of a step alone, engine's against reference's, ABBA a call at a time: the loss (forward
    and backward over a batch's real positions: core.tasks.chunked_loss against `F.cross_entropy` of the
    scores) and the model (forward and backward of the task's SASRec against the reference's, from a batch of
    the training windows). Returns reference time / engine time for each (above 1: the engine's is faster)."""
    import torch
    from torch.nn import functional as F

    from core.tasks import create_task
    from core.tasks.chunked_loss import chunked_softmax_cross_entropy

    torch.set_num_threads(args.threads)
    task = create_task("recommender", dict(args.task_options))
    data = task.load_data("", 0)
    o = task.opts
    torch.manual_seed(0)
    batch = {k: v[torch.randperm(v.shape[0])[: args.batch_size]] for k, v in data.train.items()}
    seq, real = batch["seq"], int((batch["target"] > 0).sum())
    n_items = data.info["n_items"]
    hidden = torch.randn(real, o["d_model"], requires_grad=True)
    table = torch.randn(n_items, o["d_model"], requires_grad=True)
    target = torch.randint(0, n_items, (real,))
    engine_model = task.build_model(data.info).train()
    reference = reference_model(n_items, o["d_model"], o["layers"], o["heads"], o["max_len"], o["dropout"]).train()
    sides = {
        "loss": (
            lambda: chunked_softmax_cross_entropy(hidden, table, target).backward(),
            lambda: F.cross_entropy(hidden @ table.t(), target).backward(),
        ),
        "model": (lambda: engine_model(seq).sum().backward(), lambda: reference(seq).sum().backward()),
    }
    out = {}
    for name, (engine, ref) in sides.items():
        times: dict = {engine: [], ref: []}
        for f in (engine, ref, engine, ref):  # warm-up
            f()
        for _ in range(args.parts_rounds):
            for f in (engine, ref, ref, engine):
                began = time.perf_counter()
                f()
                times[f].append(time.perf_counter() - began)
        out[name] = {
            "engine_ms": 1e3 * statistics.median(times[engine]),
            "reference_ms": 1e3 * statistics.median(times[ref]),
            "reference_over_engine": sum(times[ref]) / sum(times[engine]),
        }
        print(
            f"  {name:<6} engine {out[name]['engine_ms']:7.1f} ms  reference {out[name]['reference_ms']:7.1f} ms "
            f"(medians)  reference / engine {out[name]['reference_over_engine']:.3f}",
            flush=True,
        )
    return out


# ----------------------------------------------------------------------------------------------- main
def _options(text: str) -> dict:
    out = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        out[key.strip()] = (
            json.loads(value) if value.strip()[:1].isdigit() or value.strip() in ("true", "false") else value.strip()
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="training time of each side per repeat")
    parser.add_argument("--chunk-seconds", type=float, default=0.5, help="length of one turn")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, the same on both sides")
    parser.add_argument(
        "--cpu",
        type=int,
        default=None,
        help="the CPU to run on (default: the last this process may use; -1: not pinned)",
    )
    parser.add_argument("--batch-size", type=int, default=0, help="default: the task's")
    parser.add_argument("--options", default="", help="task options, e.g. d_model=128,layers=4")
    parser.add_argument("--quick", action="store_true", help="a smoke test: short windows, one repeat")
    parser.add_argument("--profile", action="store_true", help="torch.profiler of the engine's steps instead")
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--parts", action="store_true", help="also time the loss and the model alone, each side's")
    parser.add_argument("--parts-rounds", type=int, default=30)
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from core.config import RunConfig

    args.task_options = _options(args.options)
    args.batch_size = args.batch_size or RunConfig.for_task("recommender").batch_size
    if args.quick:
        args.seconds, args.chunk_seconds, args.repeats = 1.0, 0.05, 1
    if args.cpu is None:
        args.cpu = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else -1
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if args.profile:
        profile_engine(args)
        return 0
    load = [os.getloadavg()[0]]
    print(
        f"recommender step: batch {args.batch_size}  options {args.task_options or 'defaults'}  threads "
        f"{args.threads}  {f'cpu {args.cpu}' if args.cpu >= 0 else 'not pinned'}  ~{args.seconds:g} s a side "
        f"per repeat in turns of ~{args.chunk_seconds:g} s (ABBA), no evaluation  load {load[0]:.2f}",
        flush=True,
    )
    rows = []
    for repeat in range(args.repeats):
        row = interleaved(args, repeat)
        rows.append(row)
        load.append(os.getloadavg()[0])
        print(f"  repeat {repeat}: {row['rounds']:>3} rounds of {row['chunk_steps']} steps", flush=True)
        print(
            f"    reference  {row['reference']:>9,.0f} positions/s  {row['reference_ms_per_step']:6.1f} ms/step  "
            f"loss {row['reference_loss']:.3f}",
            flush=True,
        )
        print(
            f"    engine     {row['engine']:>9,.0f} positions/s  {row['engine_ms_per_step']:6.1f} ms/step  "
            f"loss {row['engine_loss']:.3f}  ratio {row['ratio']:.3f} [{row['low']:.3f}-{row['high']:.3f}]",
            flush=True,
        )
    ratio = statistics.median(r["ratio"] for r in rows)
    print(
        f"engine / reference positions per second: median {ratio:.3f} over {len(rows)} repeats "
        f"[{min(r['ratio'] for r in rows):.3f}-{max(r['ratio'] for r in rows):.3f}]; load (1 min) "
        f"{min(load):.2f}-{max(load):.2f} on {os.cpu_count()} cpus",
        flush=True,
    )
    halves = None
    if args.parts:
        print(f"the halves of a step alone (ABBA, {args.parts_rounds} rounds):", flush=True)
        halves = parts(args)
    if args.json:
        print(
            json.dumps(
                {
                    "batch_size": args.batch_size,
                    "options": args.task_options,
                    "threads": args.threads,
                    "ratio": ratio,
                    "rows": rows,
                    **({"parts": halves} if halves else {}),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
