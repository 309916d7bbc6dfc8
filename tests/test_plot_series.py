"""Live-plot series decimate on ingest: bounded memory, and what is drawn keeps the curve's shape.

No Qt here: app.series is plain numpy.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from app.series import DEFAULT_BUDGET, Series, SmoothedSeries


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def reference(xs: np.ndarray, ys: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """What a series of `budget` must draw after these appends, computed directly, one bucket at a time:
    `budget // 8` raw points folded at a time once `budget // 4` are raw; buckets of the smallest power-of-two
    width that fits the folded points in `max_buckets`; each bucket's first minimum, first maximum and first
    non-finite (as NaN), in x order; then the raw points."""
    keep = chunk = budget // 8
    max_buckets = (budget - keep - chunk) // 6 * 2
    folded = chunk * max(0, (len(xs) - keep) // chunk)
    width = 1
    while math.ceil(folded / width) > max_buckets:
        width *= 2
    out_x, out_y = [], []
    for start in range(0, folded, width):
        bx, by = xs[start : min(start + width, folded)], ys[start : min(start + width, folded)]
        points = []
        finite = np.flatnonzero(np.isfinite(by))
        if len(finite):
            lo = finite[np.argmin(by[finite])]
            hi = finite[np.argmax(by[finite])]
            points.append((bx[lo], by[lo]))
            if hi != lo:
                points.append((bx[hi], by[hi]))
        bad = np.flatnonzero(~np.isfinite(by))
        if len(bad):
            points.append((bx[bad[0]], np.nan))
        for x, y in sorted(points, key=lambda p: p[0]):
            out_x.append(x)
            out_y.append(y)
    return (np.concatenate([out_x, xs[folded:]]).astype(float), np.concatenate([out_y, ys[folded:]]).astype(float))


def noisy(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sin(np.arange(n) / 5000.0) + 0.1 * rng.standard_normal(n)


def test_memory_stays_bounded_over_a_million_appends():
    series = Series()
    sizes = {}
    for i in range(1_200_000):
        series.append(i, math.sin(i / 1000.0))
        if i + 1 in (100_000, 1_200_000):
            sizes[i + 1] = (series.nbytes, series.stored, series.capacity)
    assert len(series) == 1_200_000  # len counts what was appended...
    assert series.stored == len(series.x) == len(series.y) <= DEFAULT_BUDGET  # ...x/y hold what is drawn
    nbytes, stored, capacity = sizes[1_200_000]
    assert nbytes < 200_000  # ~0.2 MB, against 19 MB of raw float64 pairs
    assert nbytes <= sizes[100_000][0] * 1.1 and capacity == sizes[100_000][2] == DEFAULT_BUDGET // 4
    assert series.width >= 1024


def test_bulk_ingest_of_ten_million_points_allocates_no_more_than_its_pieces():
    series = Series()
    xs = np.arange(1_000_000, dtype=np.float64)
    tracemalloc.start()
    try:
        for block in range(10):
            series.extend(xs + block * 1_000_000, np.cos(xs / 777.0))
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(series) == 10_000_000 and series.stored <= DEFAULT_BUDGET
    assert current < 1_000_000  # what the series keeps (the input blocks are the caller's)
    assert series.x[-1] == 9_999_999


def test_extremes_spike_and_gap_deep_in_history_are_still_drawn():
    n = 1_300_000
    ys = noisy(n)  # within about [-1.5, 1.5]
    ys[123_457] = -50.0  # global minimum
    ys[345_679] = 80.0  # global maximum
    ys[500_001] = 30.0  # a one-step spike
    series = Series()
    for i, y in enumerate(ys.tolist()):
        series.append(i, None if i == 700_003 else y)  # a missing value, as the panel appends a non-finite norm
    x, y = series.x, series.y
    assert series.stored <= DEFAULT_BUDGET and series.width > 1000  # deep history is bucketed
    assert series.ymin == -50.0 and series.ymax == 80.0
    for step, value in ((123_457, -50.0), (345_679, 80.0), (500_001, 30.0)):
        at = np.flatnonzero(x == step)
        assert len(at) == 1 and y[at[0]] == value
    assert np.nanmin(y) == -50.0 and np.nanmax(y) == 80.0
    gaps = np.flatnonzero(np.isnan(y))
    assert x[gaps].tolist() == [700_003.0]  # the one gap, where it was
    assert np.isfinite(y[gaps[0] - 1]) and np.isfinite(y[gaps[0] + 1])  # a break between drawn points
    assert np.all(np.diff(x) > 0)  # x in order: what pyqtgraph's clip-to-view bisects


def test_recent_points_are_kept_raw():
    ys = noisy(500_000, seed=3)
    series = Series()
    series.extend(np.arange(len(ys)), ys)
    keep = DEFAULT_BUDGET // 8
    assert same(series.x[-keep:], np.arange(len(ys) - keep, len(ys), dtype=float))
    assert same(series.y[-keep:], ys[-keep:])
    assert series.last() == ys[-1]


@pytest.mark.parametrize("budget", [64, 200])
def test_drawn_points_match_a_direct_per_bucket_computation(budget):
    rng = np.random.default_rng(budget)
    ys = rng.standard_normal(40_000)
    ys[rng.integers(0, len(ys), 300)] = np.nan
    ys[rng.integers(0, len(ys), 20)] = np.inf
    ys[1000:1300] = 2.0  # a flat stretch: ties pick the first point
    series = Series(budget=budget)
    for n in range(len(ys)):
        series.append(n, ys[n])
        if n + 1 in (1, budget // 4 - 1, budget // 4, budget, 777, 12_345, len(ys)):
            want_x, want_y = reference(np.arange(n + 1, dtype=float), ys[: n + 1], budget)
            assert same(series.x, want_x), n + 1
            assert same(series.y, want_y), n + 1
            assert series.stored <= budget


@pytest.mark.parametrize("budget", [64, DEFAULT_BUDGET])
def test_extend_draws_exactly_what_appending_one_by_one_draws(budget):
    rng = np.random.default_rng(7)
    ys = rng.standard_normal(200_000)
    ys[rng.integers(0, len(ys), 500)] = np.nan
    one_by_one, bulk = Series(budget=budget), Series(budget=budget)
    for i, y in enumerate(ys.tolist()):
        one_by_one.append(i, y)
    start = 0
    for size in rng.integers(1, 30_000, 100):  # ragged blocks, crossing fold and merge boundaries anywhere
        bulk.extend(np.arange(start, min(start + size, len(ys))), ys[start : start + size])
        start += size
        if start >= len(ys):
            break
    assert start >= len(ys)
    assert len(bulk) == len(one_by_one) == len(ys)
    assert same(bulk.x, one_by_one.x) and same(bulk.y, one_by_one.y)
    assert (bulk.ymin, bulk.ymax) == (one_by_one.ymin, one_by_one.ymax)


def test_extend_takes_none_as_a_gap():
    series = Series(budget=64)
    series.extend([0, 1, 2], [1.0, None, 3.0])
    assert same(series.y, np.array([1.0, np.nan, 3.0]))
    assert len(series) == 3 and series.ymax == 3.0
    with pytest.raises(ValueError):
        series.extend([0, 1], [1.0])


def test_arrays_handed_out_are_never_rewritten():
    """pyqtgraph keeps the arrays it was given until the next redraw: later appends must not change them."""
    series = Series(budget=64)
    handed = []
    for i in range(5000):
        series.append(i, float(i % 17))
        if i % 97 == 0:
            handed.append((series.x, series.y, series.x.copy(), series.y.copy()))
    assert series.width > 1
    for x, y, x_then, y_then in handed:
        assert same(x, x_then) and same(y, y_then)


def reference_ema(values, weight):
    out, ema, count = [], 0.0, 0
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(math.nan)
            continue
        count += 1
        ema = weight * ema + (1 - weight) * v
        out.append(ema / (1 - weight**count))
    return np.array(out)


def test_smoothed_series_averages_every_raw_value_then_decimates():
    rng = np.random.default_rng(11)
    ys = 3.0 + rng.standard_normal(300_000)
    ys[[5, 6, 150_000]] = np.nan
    ys[250_000] = 1e6  # one huge value: the average jumps by ~1e5 and decays from there
    want = reference_ema(ys.tolist(), 0.9)
    series = SmoothedSeries(0.9)
    for i, y in enumerate(ys.tolist()):
        series.append(i, y)
    keep = DEFAULT_BUDGET // 8
    assert same(series.y[-keep:], want[-keep:])  # recent smoothed values, exactly
    assert series.ymax == np.nanmax(want) and series.ymin == np.nanmin(want)
    at = np.flatnonzero(series.x == 250_000)
    assert len(at) == 1 and series.y[at[0]] == pytest.approx(0.1 * 1e6, rel=1e-3)  # the jump is drawn
    assert 150_000 in series.x[np.isnan(series.y)]  # and the gap
    bulk = SmoothedSeries(0.9)
    bulk.extend(np.arange(100_000), ys[:100_000])
    bulk.extend(np.arange(100_000, len(ys)), ys[100_000:])
    assert np.allclose(bulk.y, series.y, rtol=1e-12, atol=0, equal_nan=True)
    assert same(bulk.x, series.x)


def test_smoothed_series_is_bias_corrected_from_the_first_value():
    series = SmoothedSeries(weight=0.9)
    series.append(0, 5.0)
    series.append(1, None)
    series.append(2, 7.0)
    assert series.y[0] == 5.0 and np.isnan(series.y[1])
    assert series.y[2] == pytest.approx((0.09 * 5 + 0.1 * 7) / (1 - 0.81), rel=1e-15)  # the gap is skipped


def test_clear_resets_everything():
    series = SmoothedSeries(0.5, budget=64)
    for i in range(10_000):
        series.append(i, float(i))
    assert series.width > 1
    series.clear()
    assert len(series) == 0 and series.stored == 0 and series.last() is None
    assert (series.ymin, series.ymax, series.width) == (np.inf, -np.inf, 1)
    series.append(3, 8.0)  # no average carried over from before the clear
    assert series.y.tolist() == [8.0] and series.x.tolist() == [3.0] and series.ymax == 8.0


def test_budget_is_checked():
    with pytest.raises(ValueError):
        Series(budget=10)
