"""Ranking quality against the baseline a user would try first: LightGBM's lambdarank, on the same split.

For each seed: the task's synthetic data (LETOR-shaped: 136 features on mixed scales, grades 0..4, queries of
varying size), split 80/10/10 by query exactly as `amp-console train --task ranking` splits it (the task's own
load_data, same seed). The engine trains through its public API (core.engine.trainer.train with a RunConfig,
the task's defaults); LGBMRanker(objective="lambdarank") trains on the same training queries with early
stopping on the same validation queries. Each side is chosen on the validation queries alike: LightGBM keeps
its best iteration, the engine its best-on-validation checkpoint (best.pt, kept by default; --last: the run's
final weights instead). Both are scored on the same test queries by the task's own evaluation code (the booster
is wrapped as a model), so NDCG@10 is computed identically. Prints mean +- standard error of each, and the paired
difference (engine - LightGBM) with its standard error and wins. The engine's run reports the test metrics of
both its best checkpoint and its last weights (its summary, core.engine.small_validation): both are printed, with
their paired difference and the weights the run's summary advised (the last ones when the validation queries
are too few to choose by: fewer than 50).

    python benchmarks/quality_ranking.py [--seeds 5] [--quick] [--threads 1] [--last] [-o key=value ...]

Needs the optional `quality` extra (lightgbm). benchmarks/quality.py drives `run` for every task.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from quality_common import engine_test_metrics, mean_se, parse_pairs
from torch import nn

from core.data.synthetic import generate_ranking
from core.tasks import create_task
from core.tasks.ranking.task import split_queries

METRIC = "ndcg@10"
DATA = {"queries": 2000, "docs": 40, "features": 136, "noise": 0.5}  # 80,000 rows, MSLR's 136 columns
QUICK_DATA = {"queries": 800, "docs": 30, "features": 136, "noise": 0.5}
LIGHTGBM = {
    "objective": "lambdarank",
    "n_estimators": 500,
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_child_samples": 20,
}
EARLY_STOPPING_ROUNDS = 50


class BoosterModel(nn.Module):
    """A fitted LightGBM ranker as a scoring model: features (..., F) -> scores (...), so the task's own
    evaluation code scores it exactly as it scores the engine's model."""

    def __init__(self, ranker):
        super().__init__()
        self.ranker = ranker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).double().numpy()
        scores = self.ranker.predict(flat, num_threads=1) if len(flat) else np.zeros(0)
        return torch.from_numpy(np.asarray(scores, dtype=np.float32)).reshape(x.shape[:-1])


def flat_split(split: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A packed split (lists padded with label -1) as LightGBM wants it: rows grouped by query, the labels,
    and each group's size (a query spread over several lists, `qid`, is one group)."""
    label = split["label"].numpy()
    real = label >= 0
    per_row = real.sum(1)
    if "qid" in split:
        sizes = np.bincount(split["qid"].numpy(), weights=per_row).astype(np.int64)
    else:
        sizes = per_row
    return split["features"].numpy()[real], label[real], sizes[sizes > 0]


def lightgbm_metrics(task, data, seed: int, threads: int) -> tuple[dict[str, float], int]:
    """Test metrics of LGBMRanker (LIGHTGBM, early stopping on the validation queries) and its tree count."""
    import lightgbm

    x, y, group = flat_split(data.train)
    xv, yv, gv = flat_split(data.val)
    ranker = lightgbm.LGBMRanker(**LIGHTGBM, random_state=seed, n_jobs=threads, verbose=-1)
    with warnings.catch_warnings():  # lightgbm 4.7 renames eval_set; older versions know only eval_set
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        ranker.fit(
            x,
            y,
            group=group,
            eval_set=[(xv, yv)],
            eval_group=[gv],
            eval_at=[10],
            callbacks=[lightgbm.early_stopping(EARLY_STOPPING_ROUNDS, verbose=False)],
        )
    with torch.no_grad():
        metrics = task.evaluate(BoosterModel(ranker), data.test, 1024)
    return metrics, int(ranker.best_iteration_ or LIGHTGBM["n_estimators"])


def test_ceiling(task, options: dict, seed: int) -> float:
    """NDCG@10 on the test queries of ranking by the hidden noiseless relevance (the task reports it on the
    validation queries): regenerated and split as load_data does, so the lists are the same."""
    data = generate_ranking(options["queries"], options["docs"], options["features"], options["noise"], seed)
    (_, _, test), _ = split_queries(data.query, {"label": data.label, "relevance": data.relevance}, seed)
    return task._report(test["relevance"], test)[METRIC]


def engine_metrics(options: dict, seed: int, threads: int, overrides: dict) -> tuple[dict, float]:
    """Test metrics of the engine trained as `amp-console train --task ranking` would (the task's defaults,
    then `overrides`): its final weights' with its best-on-validation checkpoint's under "best", the steps and
    the run's advice (see engine_test_metrics' "both"); and its training seconds."""
    return engine_test_metrics("ranking", options, seed, threads, overrides, "both")


def run(
    seeds: int = 5,
    quick: bool = False,
    threads: int = 1,
    task_options: dict | None = None,
    engine_overrides: dict | None = None,
    verbose: bool = True,
    checkpoint: str = "best",
) -> dict:
    """Engine vs LightGBM lambdarank on `seeds` seeds (0..seeds-1): per-seed NDCG@10 of both on the same
    test queries, their means +- standard errors, the paired difference +- its standard error, and wins.
    `task_options` / `engine_overrides`: changes to the data or the engine's settings (tuning only);
    `checkpoint`: the engine's best-on-validation checkpoint ("best") or its final weights ("last")."""
    torch.set_num_threads(threads)
    options = {**(QUICK_DATA if quick else DATA), **(task_options or {})}
    overrides = dict(engine_overrides or {})
    rows = []
    for seed in range(seeds):
        started = time.perf_counter()
        task = create_task("ranking", options)
        data = task.load_data("", seed)  # the very split the engine's run makes (same options, same seed)
        lgb, trees = lightgbm_metrics(task, data, seed, threads)
        lgb_seconds = time.perf_counter() - started
        eng, eng_seconds = engine_metrics(options, seed, threads, overrides)
        best, last = eng["best"][METRIC], eng[METRIC]
        row = {
            "seed": seed,
            "engine": best if checkpoint == "best" else last,
            "engine_best": best,
            "engine_last": last,
            "advised": "last" if eng["advice"].startswith("use the last") else "best",
            "lightgbm": lgb[METRIC],
            "ceiling": test_ceiling(task, options, seed),
            "random": data.baseline[METRIC],
            "trees": trees,
            "best_step": eng.get("best_step"),
            "last_step": eng.get("last_step"),
            "engine_s": round(eng_seconds, 1),
            "lightgbm_s": round(lgb_seconds, 1),
        }
        rows.append(row)
        if verbose:
            print(
                f"seed {seed}: engine {row['engine']:.4f} (best {best:.4f}, last {last:.4f}, advised "
                f"{row['advised']})  lightgbm {row['lightgbm']:.4f}  "
                f"diff {row['engine'] - row['lightgbm']:+.4f}  (ceiling {row['ceiling']:.4f}, random "
                f"{row['random']:.4f}; {trees} trees, {_epoch(row)}; {eng_seconds:.0f} s / {lgb_seconds:.0f} s)",
                flush=True,
            )
    diffs = [r["engine"] - r["lightgbm"] for r in rows]
    summary = {
        "task": "ranking",
        "metric": METRIC,
        "baseline": "LightGBM LGBMRanker(lambdarank)",
        "engine_checkpoint": checkpoint,
        "seeds": seeds,
        "data": options,
        "engine_overrides": overrides,
        "rows": rows,
    }
    for key in ("engine", "engine_best", "engine_last", "lightgbm", "ceiling"):
        summary[key], summary[f"{key}_se"] = mean_se([r[key] for r in rows])
    summary["best_minus_last"], summary["best_minus_last_se"] = mean_se(
        [r["engine_best"] - r["engine_last"] for r in rows]
    )
    summary["advised_last"] = sum(r["advised"] == "last" for r in rows)
    summary["diff"], summary["diff_se"] = mean_se(diffs)
    summary["wins"] = int(sum(d > 0 for d in diffs))
    summary["beats_baseline"] = bool(summary["diff"] > 2 * summary["diff_se"] and summary["diff"] > 0)
    return summary


def _epoch(row: dict) -> str:
    return "final weights" if row.get("best_step") is None else f"best at step {row['best_step']}/{row['last_step']}"


def report(summary: dict) -> str:
    s = summary
    return (
        f"ranking {s['metric']} over {s['seeds']} seeds (mean +- s.e.):\n"
        f"  engine    {s['engine']:.4f} +- {s['engine_se']:.4f}  ({s['engine_checkpoint']} weights)\n"
        f"    best    {s['engine_best']:.4f} +- {s['engine_best_se']:.4f}  (best-on-validation checkpoint)\n"
        f"    last    {s['engine_last']:.4f} +- {s['engine_last_se']:.4f}  (final weights); best - last "
        f"{s['best_minus_last']:+.4f} +- {s['best_minus_last_se']:.4f}, the run advised the last weights in "
        f"{s['advised_last']} of {s['seeds']}\n"
        f"  lightgbm  {s['lightgbm']:.4f} +- {s['lightgbm_se']:.4f}\n"
        f"  ceiling   {s['ceiling']:.4f} +- {s['ceiling_se']:.4f}\n"
        f"  paired difference (engine - lightgbm) {s['diff']:+.4f} +- {s['diff_se']:.4f}, engine wins "
        f"{s['wins']} of {s['seeds']}; beyond 2 s.e.: {'yes' if s['beats_baseline'] else 'no'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller data (800 queries of ~30 candidates)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task option for the data or the model (e.g. queries=4000, hidden=128)",
    )
    parser.add_argument(
        "-s",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine setting over the task's defaults (e.g. epochs=20, lr=0.001)",
    )
    parser.add_argument(
        "--last",
        action="store_true",
        help="score the engine's final weights (its end-of-run "
        "test metrics) instead of its best-on-validation checkpoint",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    args = parser.parse_args(argv)
    options = parse_pairs(args.options)
    settings = parse_pairs(args.settings)
    summary = run(args.seeds, args.quick, args.threads, options, settings, checkpoint="last" if args.last else "best")
    print(report(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
