"""Sentiment quality: the engine against TF-IDF + logistic regression, the baseline a user would try first.

    python benchmarks/quality_sentiment.py             # 6 seeds, 20,000 synthetic reviews each
    python benchmarks/quality_sentiment.py --quick     # 5 seeds, 6,000 reviews: a smoke test
    python benchmarks/quality_sentiment.py --seeds 8 --set pooling=sqrt --set lr=0.02   # a variant

For each seed: synthetic reviews of realistic shape (core.data.reviews: casing, punctuation, contractions,
negation with intensifiers in its scope, a long tail of rare words, log-normal lengths, label noise) and the
task's own 80/10/10 split (core.tasks.sentiment.split_indices). The engine trains through its public API
(core.engine.trainer.train with a RunConfig, as `amp-console train` does), with the task's defaults. The
baseline is scikit-learn's TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2) +
LogisticRegression, its C chosen on the validation split from a grid, as a careful user would. Both are
scored on the same test rows. Printed: accuracy mean ± standard error over seeds for each side, the paired
difference (engine - baseline) with its standard error, wins, and the Bayes ceiling of the test rows.

`run(seeds, quick)` returns the same as a dict (benchmarks/quality.py drives it). Needs the `quality` extra
(scikit-learn); threads are pinned to one so that runs side by side compare.

How the defaults were chosen (12,000 reviews a seed, the same split and test rows for both sides; accuracy %,
paired difference engine - TF-IDF + LR as mean ± standard error over seeds; 2-core CPU, one thread):

    3 seeds (TF-IDF + LR 66.64)                               engine   difference
    previous model (2^16 x 32, no negation scope, 96 tokens)   64.61   -2.03 ± 0.46
    negation scope 3 (2^16 x 32, mean pooling)                 71.81   +5.17 ± 0.63
      negation scope 0 / 2 / 4 / whole clause                  64.36 / 70.06 / 71.89 / 70.92
      tfidf weighting (sublinear tf x idf)                     70.03   +3.39 ± 0.52
      tfidf weighting, l2 pooling                              70.31   +3.67 ± 0.96
      sqrt pooling                                             71.53   +4.89 ± 0.65
      linear head (hidden 0)                                   71.58   +4.94 ± 0.27
      epochs 1 / 3                                             68.42 / 70.47
      lr 3e-3 / 3e-2                                           64.25 / 71.14
      token dropout 0.1 / 0.2 / 0.3                            71.69 / 72.44 / 72.28 (noise, see below)
      min_df 1 / 2 / 3 / 5 (negation scope 0)                  64.44 / 64.33 / 64.36 / 64.47
      SGD, lr 0.3 to 3                                         60.44 (the majority class)
      2^17 x 32; 2^16 x 16; 2^16 x 64                          71.64; 71.78; 71.67
    5 seeds (TF-IDF + LR 66.27)
      2^16 x 32                                                71.58   +5.32 ± 0.42
      2^18 x 8                                                 72.15   +5.88 ± 0.31
      2^18 x 8, token dropout 0.2                              72.12   +5.85 ± 0.27
      2^18 x 8, tfidf weighting                                70.78   +4.52 ± 0.26
      2^18 x 8, linear head                                    69.40   +3.13 ± 0.77
      2^19 x 8 (the default)                                   72.63   +6.37 ± 0.26
      2^19 x 8, negation scope 0                               65.08   -1.18 ± 0.32
      2^19 x 16; 2^20 x 4                                      72.22; 71.98
      2^19 x 8, hidden 64; dropout 0 / 0.3; lr 2e-2            72.62; 72.55 / 71.35; 72.22
    then with 6 seeds x 20,000 reviews (TF-IDF + LR 67.08) and 5 seeds x 6,000 (--quick, TF-IDF + LR 64.37):
      2^19 x 8, batch 128 (lr 1e-2)                            73.59 | 59.97 (the majority class: too few steps)
      batch 128, lr 3e-2                                       72.85 | 70.53
      batch 32                                                 72.96 | 70.73
      batch 64 (the default)                                   73.41 | 71.57   (20,000: +6.32 ± 0.47, wins 6/6)
      batch 64, negation scope 0                               66.00 (-1.08 ± 0.37, wins 1/6)

Without negation scope the engine stays ~1.2 points behind, and so does logistic regression on the engine's
own hashed tokens (seeds 0 and 1: 65.1 / 64.2 at 2^16 buckets, 65.3 / 64.7 at 2^20, against 66.8 / 65.9 on
scikit-learn's tokens): the deficit is in the features (hashing, tokens), not in the training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from quality_common import engine_test_metrics, mean_se, parse_value

C_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
FULL_REVIEWS, QUICK_REVIEWS = 20_000, 6_000


def baseline_accuracy(texts: list[str], labels: np.ndarray, parts) -> dict:
    """TF-IDF (word 1-2-grams, sublinear tf, min_df 2) + logistic regression, C tuned on the validation rows."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    train, val, test = (np.asarray(p) for p in parts)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    x_train = vectorizer.fit_transform([texts[i] for i in train])
    x_val = vectorizer.transform([texts[i] for i in val])
    x_test = vectorizer.transform([texts[i] for i in test])
    best = None
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=2000).fit(x_train, labels[train])
        score = float((model.predict(x_val) == labels[val]).mean())
        if best is None or score > best[0]:
            best = (score, c, model)
    _, c, model = best
    return {"accuracy": float((model.predict(x_test) == labels[test]).mean()), "C": c}


def engine_accuracy(seed: int, task_options: dict, settings: dict) -> dict:
    """Train the sentiment task with its defaults (plus `settings`) on the synthetic data of `seed`."""
    metrics, seconds = engine_test_metrics("sentiment", task_options, seed, 1, settings)
    return {"accuracy": float(metrics["accuracy"]), "seconds": seconds}


def run(
    seeds: int = 6, quick: bool = False, task_options: dict | None = None, settings: dict | None = None, progress=print
) -> dict:
    """Engine vs TF-IDF + LR on `seeds` seeds; returns per-seed rows and the summary (accuracies in [0, 1])."""
    import torch

    from core.data.reviews import generate_reviews
    from core.tasks.sentiment.task import split_indices

    torch.set_num_threads(1)
    reviews_per_seed = QUICK_REVIEWS if quick else FULL_REVIEWS
    options = {"reviews": reviews_per_seed, **(task_options or {})}
    rows = []
    for seed in range(seeds):
        reviews = generate_reviews(options["reviews"], seed, label_noise=options.get("label_noise", 0.05))
        parts = split_indices(len(reviews.label), seed)
        test = parts[2].numpy()
        ceiling = float(np.maximum(reviews.posterior[test], 1 - reviews.posterior[test]).mean())
        base = baseline_accuracy(reviews.text.to_pylist(), reviews.label, parts)
        engine = engine_accuracy(seed, options, settings or {})
        row = {
            "seed": seed,
            "engine": engine["accuracy"],
            "baseline": base["accuracy"],
            "C": base["C"],
            "ceiling": ceiling,
            "engine_seconds": engine["seconds"],
        }
        rows.append(row)
        progress(
            f"seed {seed}: engine {row['engine']:.4f}  tfidf+lr {row['baseline']:.4f} (C={row['C']:g})  "
            f"diff {row['engine'] - row['baseline']:+.4f}  ceiling {ceiling:.4f}  ({engine['seconds']:.0f} s)"
        )
    engine_mean, engine_se = mean_se([r["engine"] for r in rows])
    base_mean, base_se = mean_se([r["baseline"] for r in rows])
    diff_mean, diff_se = mean_se([r["engine"] - r["baseline"] for r in rows])
    summary = {
        "task": "sentiment",
        "metric": "accuracy",
        "seeds": seeds,
        "reviews": options["reviews"],
        "engine": {"mean": engine_mean, "se": engine_se},
        "baseline": {
            "name": "TF-IDF (1-2-grams, sublinear, min_df 2) + logistic regression (C tuned on val)",
            "mean": base_mean,
            "se": base_se,
        },
        "difference": {"mean": diff_mean, "se": diff_se},
        "wins": sum(r["engine"] > r["baseline"] for r in rows),
        "ceiling": mean_se([r["ceiling"] for r in rows])[0],
        "beats_baseline": bool(diff_mean > 2 * diff_se) if seeds > 1 else False,
        "task_options": options,
        "settings": settings or {},
        "rows": rows,
    }
    return summary


def report(summary: dict) -> str:
    pct = lambda m, s: f"{100 * m:.2f} ± {100 * s:.2f}"  # noqa: E731
    return "\n".join(
        [
            f"sentiment accuracy on the test split, {summary['seeds']} seeds x {summary['reviews']:,} reviews "
            f"(mean ± standard error, %)",
            f"  engine            {pct(summary['engine']['mean'], summary['engine']['se'])}",
            f"  TF-IDF + LR       {pct(summary['baseline']['mean'], summary['baseline']['se'])}",
            f"  paired difference {pct(summary['difference']['mean'], summary['difference']['se'])}   "
            f"(engine wins {summary['wins']}/{summary['seeds']}; ahead by more than 2 SE: "
            f"{'yes' if summary['beats_baseline'] else 'no'})",
            f"  Bayes ceiling     {100 * summary['ceiling']:.2f}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default 6; 5 with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REVIEWS:,} reviews a seed")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a task option or run setting to change (repeatable), e.g. pooling=sqrt, lr=0.02",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as a JSON last line")
    args = parser.parse_args(argv)
    from core.tasks import get_task_class

    option_names = {o.name for o in get_task_class("sentiment").options}
    task_options, settings = {}, {}
    for item in args.set:
        name, _, value = item.partition("=")
        (task_options if name in option_names else settings)[name] = parse_value(value)
    seeds = args.seeds or (5 if args.quick else 6)
    summary = run(seeds, args.quick, task_options, settings)
    print(report(summary))
    if args.json:
        print(json.dumps({k: v for k, v in summary.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
