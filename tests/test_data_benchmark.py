"""The data-scale benchmark's phases run (tiny sizes) and report what the note quotes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import data_scale

from core.data.synthetic import generate_ranking


def test_generate_and_import_phases_round_trip(tmp_path):
    out = str(tmp_path / "clicks.csv")
    gen = data_scale.phase_generate(rows=5000, out=out)
    assert gen["rows"] == 5000 and gen["peak_rss_gb"] > 0
    imp = data_scale.phase_import(path=out, max_len=20)
    assert imp["rows"] == 5000 and imp["train_windows"] > 0 and imp["users"] > 50


def test_ranking_generator_grades_and_oracle():
    data = generate_ranking(500, 10, 6, noise=0.5, seed=0)
    shares = np.bincount(data.label, minlength=5) / len(data.label)
    assert np.allclose(shares, [0.5, 0.3, 0.13, 0.05, 0.02], atol=0.01)
    # Relevance orders the grades: the mean hidden relevance rises with the grade.
    means = [data.relevance[data.label == g].mean() for g in range(5)]
    assert means == sorted(means)
