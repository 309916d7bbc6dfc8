"""Recommender quality against the baselines a user would try first (popularity, item-kNN), on the same split,
and the step time with and without dropping padded positions before the loss.

For each seed: the task's synthetic interactions (core.data.synthetic: lesson tracks, jumps drawn from a
Zipf, i.e. long-tailed, popularity; users' lengths vary) split leave-one-out exactly as `amp-console train
--task recommender` splits it (the task's own load_data, same seed). The engine trains through its public
API (core.engine.trainer.train with a RunConfig, the task's defaults). Popularity ranks by training-target
counts; item-kNN scores an item by the sum, over the user's history, of its co-occurrence cosine with each
history item (co-occurrence = same user's training sequence; numpy, no extra package). All three are scored
on the same test users by the task's own evaluation code under the same protocol, the literature's: the
whole catalogue, items already in the user's history removed (`ndcg@10_full_filtered`, `hr@10_full_filtered`).
Prints mean +- standard error of each, the paired difference engine - best baseline with its standard
error and wins.

Step time: one model at max_len 200 on users shorter than that, a training step (forward, full-softmax
chunked loss, backward, AdamW) timed alternately with the loss over every position (padding ignored, the
old way) and with padded positions dropped first (the task's way), same batches; medians and their ratio.

    python benchmarks/quality_recommender.py [--seeds 3] [--quick] [--threads 1] [-o key=value ...]

`--losses`: instead, the full softmax against the sampled one at equal wall time. For each seed, one run of
each loss (`-o loss=full`, `-o loss=sampled`; which goes first alternates by seed) through the engine as
`amp-console train` runs it, on a larger catalogue of the same synthetic tracks (LOSS_DATA, `-o` over it),
training for `--minutes` of wall time (`time_limit_minutes`: the run then evaluates and tests as at its end;
epochs enough never to end first, no evaluation before the end, so both spend the time on training steps).
Prints each run's steps and test NDCG@10 / HR@10 (the whole catalogue, seen items removed), the mean +-
standard error of each loss, the ratio sampled / full of the means and the paired per-seed ratio.

    python benchmarks/quality_recommender.py --losses [--seeds 3] [--minutes 1] [--threads 1] [-o key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from quality_common import engine_test_metrics, mean_se, parse_pairs

from core.tasks import create_task
from core.tasks.recommender.task import ranking_report

METRICS = ("ndcg@10_full_filtered", "hr@10_full_filtered")
DATA = {"items": 1000, "interactions": 100_000, "mean_len": 50, "max_len": 50}
QUICK_DATA = {"items": 400, "interactions": 30_000, "mean_len": 30, "max_len": 30, "d_model": 32}
# The step-time comparison: users of ~60 lessons read through a window of 200.
PADDING_DATA = {"items": 2000, "interactions": 60_000, "mean_len": 60, "max_len": 200, "d_model": 64}
QUICK_PADDING_DATA = {"items": 1000, "interactions": 20_000, "mean_len": 60, "max_len": 200, "d_model": 32}


def training_sequences(data) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each training row's index per position, its input items and its target items (flat; 0 = padding)."""
    seq, target = data.train["seq"], data.train["target"]
    rows = torch.arange(seq.shape[0]).unsqueeze(1).expand_as(seq)
    return rows.flatten(), seq.flatten(), target.flatten()


def item_knn_similarity(data, n_items: int) -> torch.Tensor:
    """Cosine of item co-occurrence over training rows (a row = one window of one user's training part):
    sim[i, j] = |rows with i and j| / sqrt(|rows with i| |rows with j|), the diagonal zeroed. (n, n) float32."""
    rows, seq, target = training_sequences(data)
    items = torch.cat([seq, target])
    owner = torch.cat([rows, rows])
    keep = items > 0
    x = torch.zeros(int(rows.max()) + 1, n_items, dtype=torch.float32)
    x[owner[keep], items[keep] - 1] = 1.0  # binary: a row either has the item or not
    co = x.t() @ x
    norm = co.diagonal().clamp(min=1.0).sqrt()
    sim = co / norm.unsqueeze(0) / norm.unsqueeze(1)
    sim.fill_diagonal_(0.0)
    return sim


def knn_scorer(sim: torch.Tensor, history: torch.Tensor):
    """score_fn for the task's evaluation: each item's summed similarity to the items of the user's whole
    history (history[history_start:history_end], the span evaluation filters)."""
    n = sim.shape[0]

    def score(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        start, end = batch["history_start"], batch["history_end"]
        lengths = end - start
        row = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
        offset = torch.cumsum(lengths, 0) - lengths
        position = start[row] + torch.arange(int(lengths.sum())) - offset[row]
        bag = torch.zeros(len(lengths), n)
        bag.index_put_((row, history[position].long() - 1), torch.ones(len(row)), accumulate=True)
        return bag @ sim

    return score


def engine_metrics(options: dict, seed: int, threads: int, overrides: dict) -> tuple[dict[str, float], float]:
    """Test metrics of the engine trained as `amp-console train --task recommender` would (the task's defaults,
    then `overrides`), and its training seconds."""
    return engine_test_metrics("recommender", options, seed, threads, overrides)


def step_times(options: dict, seed: int, batch_size: int, repeats: int) -> dict:
    """Median seconds of a training step with the loss over every position (padding ignored) and with padded
    positions dropped first, timed alternately on the same batches; the share of real positions."""
    task = create_task("recommender", options)
    data = task.load_data("", seed)
    model = task.build_model(data.info)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    bounds = task.loss_bounds
    gen = torch.Generator().manual_seed(seed)
    batches = [
        {k: v[idx] for k, v in data.train.items()}
        for idx in (torch.randperm(data.train["seq"].shape[0], generator=gen)[:batch_size] for _ in range(repeats + 1))
    ]

    def step(batch, drop: bool) -> float:
        task.loss_bounds = bounds if drop else None
        started = time.perf_counter()
        loss = task.loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    step(batches[0], False), step(batches[0], True)  # warm-up
    padded, dropped = [], []
    for i, batch in enumerate(batches[1:]):  # alternate which goes first
        order = (False, True) if i % 2 == 0 else (True, False)
        for drop in order:
            (dropped if drop else padded).append(step(batch, drop))
    task.loss_bounds = bounds
    target = data.train["target"]
    return {
        "options": options,
        "batch_size": batch_size,
        "repeats": repeats,
        "real_share": float((target > 0).float().mean()),
        "loss_rows_share": float(bounds[batch_size]) / (batch_size * target.shape[1]),
        "padded_s": float(np.median(padded)),
        "dropped_s": float(np.median(dropped)),
        "speedup": float(np.median(padded) / np.median(dropped)),
    }


def run(
    seeds: int = 3,
    quick: bool = False,
    threads: int = 1,
    task_options: dict | None = None,
    engine_overrides: dict | None = None,
    verbose: bool = True,
    timing: bool = True,
) -> dict:
    """Engine vs popularity vs item-kNN on `seeds` seeds (0..seeds-1), test users, filtered full-catalogue
    HR@10 / NDCG@10: per-seed values, means +- standard errors, paired difference engine - best baseline +-
    its standard error, wins; and the padded vs padding-free step time (`timing`)."""
    torch.set_num_threads(threads)
    options = {**(QUICK_DATA if quick else DATA), **(task_options or {})}
    overrides = dict(engine_overrides or {})
    rows = []
    for seed in range(seeds):
        started = time.perf_counter()
        task = create_task("recommender", options)
        data = task.load_data("", seed)  # the very split the engine's run makes (same options, same seed)
        n_items = data.info["n_items"]
        counts = torch.bincount(data.train["target"].flatten(), minlength=n_items + 1)[1:].float()
        popularity = ranking_report(
            lambda b, counts=counts: counts.expand(b["target"].shape[0], -1), data.test, 1024, task.history
        )
        knn = ranking_report(knn_scorer(item_knn_similarity(data, n_items), task.history), data.test, 512, task.history)
        baseline_seconds = time.perf_counter() - started
        eng, eng_seconds = engine_metrics(options, seed, threads, overrides)
        row = {
            "seed": seed,
            "engine_s": round(eng_seconds, 1),
            "baselines_s": round(baseline_seconds, 1),
            "ceiling_unfiltered": data.ceiling.get("ndcg@10_full_unfiltered"),
        }
        for name, metrics in (("engine", eng), ("popularity", popularity), ("item_knn", knn)):
            for metric in METRICS:
                row[f"{name}:{metric}"] = metrics[metric]
            row[f"{name}:ndcg@10_full_unfiltered"] = metrics["ndcg@10_full_unfiltered"]
        rows.append(row)
        if verbose:
            print(
                f"seed {seed}: ndcg@10_full_filtered engine {row['engine:' + METRICS[0]]:.4f}  "
                f"popularity {row['popularity:' + METRICS[0]]:.4f}  item-kNN {row['item_knn:' + METRICS[0]]:.4f}"
                f"  ({eng_seconds:.0f} s engine, {baseline_seconds:.0f} s data + baselines)",
                flush=True,
            )
    summary = {
        "task": "recommender",
        "metrics": METRICS,
        "protocol": "test users, whole catalogue, the user's history removed (the held-out item kept)",
        "seeds": seeds,
        "data": options,
        "engine_overrides": overrides,
        "rows": rows,
    }
    for metric in METRICS:
        for name in ("engine", "popularity", "item_knn"):
            summary[f"{name}:{metric}"] = mean_se([r[f"{name}:{metric}"] for r in rows])
        best = max(("popularity", "item_knn"), key=lambda n: summary[f"{n}:{metric}"][0])
        diffs = [r[f"engine:{metric}"] - r[f"{best}:{metric}"] for r in rows]
        summary[f"diff:{metric}"] = {"against": best, "mean_se": mean_se(diffs), "wins": int(sum(d > 0 for d in diffs))}
    if timing:
        summary["step_time"] = step_times(
            QUICK_PADDING_DATA if quick else PADDING_DATA, 0, 64 if quick else 128, 4 if quick else 6
        )
    return summary


LOSSES = ("full", "sampled")
# The loss comparison: a catalogue where the full softmax is most of a step (20,000 lessons, ~10 events each).
LOSS_DATA = {"items": 20_000, "interactions": 200_000, "mean_len": 50, "max_len": 50}


def timed_run(options: dict, seed: int, threads: int, minutes: float) -> dict:
    """One engine run of `options` for `minutes` of training wall time: its steps, seconds and test metrics."""
    import tempfile

    from core.config import RunConfig
    from core.engine.trainer import train

    with tempfile.TemporaryDirectory(prefix="quality-recommender-loss-") as folder:
        config = RunConfig.for_task(
            "recommender",
            task_options=options,
            device="cpu",
            precision="fp32",
            seed=seed,
            threads=threads,
            out_dir=folder,
            epochs=100_000,
            time_limit_minutes=minutes,
            eval_interval=1_000_000_000,
            checkpoint_minutes=0.0,
        )
        ended = train(config)
    if ended.status != "completed":
        raise RuntimeError(f"engine run {ended.status}: {ended.message}")
    return {
        "steps": ended.step,
        "seconds": ended.elapsed_seconds,
        **{metric: ended.test_metrics[metric] for metric in METRICS},
    }


def loss_comparison(
    seeds: int = 3, minutes: float = 1.0, threads: int = 1, task_options: dict | None = None, verbose: bool = True
) -> dict:
    """Full vs sampled softmax at equal training wall time on `seeds` seeds: per-run steps and test metrics,
    means +- standard errors, the ratio sampled / full of the means and the paired per-seed ratios."""
    torch.set_num_threads(threads)
    options = {**LOSS_DATA, **(task_options or {})}
    rows = []
    for seed in range(seeds):
        row = {"seed": seed}
        for loss in LOSSES if seed % 2 == 0 else LOSSES[::-1]:
            result = timed_run({**options, "loss": loss}, seed, threads, minutes)
            row.update({f"{loss}:{k}": v for k, v in result.items()})
        rows.append(row)
        if verbose:
            print(
                f"seed {seed}: ndcg@10_full_filtered "
                + "  ".join(
                    f"{loss} {row[f'{loss}:{METRICS[0]}']:.4f} ({row[f'{loss}:steps']:,} steps)" for loss in LOSSES
                ),
                flush=True,
            )
    summary = {
        "task": "recommender",
        "comparison": "losses",
        "metrics": METRICS,
        "seeds": seeds,
        "minutes": minutes,
        "data": options,
        "rows": rows,
    }
    for metric in (*METRICS, "steps"):
        for loss in LOSSES:
            summary[f"{loss}:{metric}"] = mean_se([r[f"{loss}:{metric}"] for r in rows])
        summary[f"ratio:{metric}"] = summary[f"sampled:{metric}"][0] / max(summary[f"full:{metric}"][0], 1e-12)
        summary[f"paired_ratio:{metric}"] = mean_se(
            [r[f"sampled:{metric}"] / max(r[f"full:{metric}"], 1e-12) for r in rows]
        )
    return summary


def loss_report(summary: dict) -> str:
    s = summary
    data = s["data"]
    lines = [
        f"recommender, full vs sampled softmax at {s['minutes']:g} min of training each, {s['seeds']} seeds, "
        f"{data['items']:,} lessons, {data['interactions']:,} interactions; test users, whole catalogue, "
        f"seen removed (mean +- s.e.):"
    ]
    for metric in (*s["metrics"], "steps"):
        full, sampled = s[f"full:{metric}"], s[f"sampled:{metric}"]
        paired = s[f"paired_ratio:{metric}"]
        lines.append(
            f"  {metric:<22} full {full[0]:.4f} +- {full[1]:.4f}   sampled {sampled[0]:.4f} +- "
            f"{sampled[1]:.4f}   sampled / full {s[f'ratio:{metric}']:.2f} (paired {paired[0]:.2f} +- "
            f"{paired[1]:.2f})"
            if metric != "steps"
            else f"  {'steps':<22} full {full[0]:,.0f}   sampled {sampled[0]:,.0f}   sampled / full "
            f"{s['ratio:steps']:.1f}"
        )
    return "\n".join(lines)


def report(summary: dict) -> str:
    s = summary
    lines = [f"recommender over {s['seeds']} seeds, {s['protocol']} (mean +- s.e.):"]
    for metric in s["metrics"]:
        lines.append(f"  {metric}")
        for name in ("engine", "popularity", "item_knn"):
            mean, se = s[f"{name}:{metric}"]
            lines.append(f"    {name:<11} {mean:.4f} +- {se:.4f}")
        d = s[f"diff:{metric}"]
        lines.append(
            f"    paired difference (engine - {d['against']}) {d['mean_se'][0]:+.4f} +- {d['mean_se'][1]:.4f},"
            f" engine wins {d['wins']} of {s['seeds']}"
        )
    if "step_time" in s:
        t = s["step_time"]
        lines.append(
            f"step time at max_len {t['options']['max_len']}, batch {t['batch_size']}, "
            f"{t['options']['items']} items, d_model {t['options']['d_model']} (median of {t['repeats']}, "
            f"alternating): {t['real_share']:.0%} of positions real, loss buffer {t['loss_rows_share']:.0%}"
            f" of all;\n  loss over every position {t['padded_s'] * 1000:.0f} ms, padding dropped "
            f"{t['dropped_s'] * 1000:.0f} ms: {t['speedup']:.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller data (30,000 interactions, 400 lessons)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-timing", action="store_true", help="skip the padded vs padding-free step time")
    parser.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task option for the data or the model (e.g. interactions=200000, d_model=128)",
    )
    parser.add_argument(
        "-s",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine setting over the task's defaults (e.g. epochs=10, lr=0.001)",
    )
    parser.add_argument("--losses", action="store_true", help="instead: full vs sampled softmax at equal wall time")
    parser.add_argument("--minutes", type=float, default=1.0, help="--losses: training wall time of each run")
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    args = parser.parse_args(argv)
    options = parse_pairs(args.options)
    settings = parse_pairs(args.settings)
    if args.losses:
        summary = loss_comparison(args.seeds, args.minutes, args.threads, options)
        print(loss_report(summary))
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2))
        return 0
    summary = run(args.seeds, args.quick, args.threads, options, settings, timing=not args.no_timing)
    print(report(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
